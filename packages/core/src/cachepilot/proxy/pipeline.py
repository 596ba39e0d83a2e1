"""One client request body in, the body to send upstream out.

For a request of thread T: the messages the upstream saw instead of what the client was shown
are spliced back, the history is interned against T's previous request, every tool result is
shown as its reduced view (`CachePilot.reduce_results`: ingested and archived the first time
it is seen, the same text on every later request), `CachePilot.prepare` canonicalizes the
system prompt, orders the tools with `recall` among them and applies the thread's plan, and
the result is written back into the client's body (every field the proxy does not change is
kept). For Anthropic Messages, `cache_control` breakpoints are added where they pay (see
`cachepilot.pilot.breakpoints`; the thread's stable anchors come from `CachePilot.stable_anchors`),
only in the slots the client's own marks leave, counted per marked block as the API counts
them: the body sent never carries more than four, and the client's marks stay on their
blocks (docs/proxy.md). A message or system prompt the client sends as a string that the
proxy marks becomes a text block, and stays one on the thread's later requests
(`cachepilot.proxy.forms`).

A Responses request that continues a server-held conversation (`previous_response_id`,
`conversation`) carries only its newest items: their tool results are reduced, and nothing
else is rewritten (the server holds the rest). Its results come without the calls they
answer: those are taken from the thread's relayed replies (`cachepilot.proxy.calls`), so each
result is reduced with its tool's profile and the loop memory compares its real arguments.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from cachepilot.canonical import tool_name
from cachepilot.messages import Message
from cachepilot.pilot.breakpoints import plan_breakpoints
from cachepilot.pilot.facade import CachePilot
from cachepilot.proxy.config import ProxyConfig
from cachepilot.proxy.memory import ThreadMemory
from cachepilot.proxy.recall import recall_tool
from cachepilot.recall.tool import RECALL_TOOL_NAME
from cachepilot.sim import ProviderProfile, Request, get_profile, render_request
from cachepilot.support.log_labels import thread_label
from cachepilot.tokens import get_counter
from cachepilot.wire import (
    BodyView,
    Source,
    WireError,
    cache_marks,
    mark_breakpoints,
    read_view,
    resplice,
    write_view,
)
from cachepilot.wire.anthropic import MAX_CACHE_MARKS, cache_mark_count

__all__ = ["Pipeline", "Prepared"]

logger = logging.getLogger(__name__)

_DEFAULT_CONTROL: dict[str, Any] = {"type": "ephemeral"}


@dataclass(slots=True)
class Prepared:
    """A client request made ready for the upstream.

    Attributes:
        body: the body to send.
        thread: the request's thread.
        view: the client's body as read.
        inputs: the client's messages (spliced, interned) the sent ones derive from.
        sources: their origins in the client's body.
        system: the system prompt sent.
        messages: the messages sent.
        tools: the tools sent.
        recall: the recall tool is offered.
        added_marks: Anthropic breakpoints the proxy added (message indices, -1 the header).
        unmarked: the body without the proxy's own marks (None when it added none): sent
            instead when the upstream refuses the marks.
        call: the preparation's token (`Threads.begin`): the answer clears it.
    """

    body: dict[str, Any]
    thread: str
    view: BodyView
    inputs: list[Message]
    sources: list[Source | None]
    system: str | None
    messages: list[Message]
    tools: list[dict[str, Any]]
    recall: bool
    added_marks: list[int] = field(default_factory=list)
    unmarked: dict[str, Any] | None = None
    call: str = ""


class Pipeline:
    """Builds upstream bodies for one pilot (see the module docstring)."""

    def __init__(self, pilot: CachePilot, config: ProxyConfig) -> None:
        self.pilot = pilot
        self.config = config
        profile = get_profile(config.provider)
        self._breakpoints: ProviderProfile = (
            profile if profile.match == "breakpoints" else get_profile("anthropic")
        )

    def prepare(self, view: BodyView, memory: ThreadMemory) -> Prepared:
        """The upstream body for one client request (call under the thread's lock)."""
        thread = memory.name
        client_tools = [dict(t) for t in view.tools]
        names = {tool_name(t) for t in client_tools}
        offer = self.config.recall and bool(client_tools) and RECALL_TOOL_NAME not in names
        if view.api == "gemini":
            # Recall is a function declaration: offered next to the client's own functions
            # only, and never next to a cachedContent (the API refuses tools there).
            offer = offer and _gemini_can_offer(view, client_tools)
        marks: dict[str, Any] = {}
        if view.api == "anthropic":
            for tool in client_tools:
                if "cache_control" in tool:
                    marks[tool_name(tool)] = tool.pop("cache_control")
        tools = [*client_tools, recall_tool(view.api)] if offer else client_tools
        view = memory.splices.expand(view)
        sources: list[Source | None] = list(view.sources)
        inputs = memory.intern(view.messages)
        # A request continuing a server-held conversation answers calls it does not hold:
        # those the thread's relayed replies made name its results.
        known = memory.calls.answered(inputs) if view.stateful else None
        reduced = self.pilot.reduce_results(inputs, thread, recall=offer, calls=known)
        if view.stateful:
            system, messages, out_tools = view.system, reduced, tools
        else:
            system, messages, out_tools = self.pilot.prepare(
                view.system, reduced, tools, thread, now=self.config.clock(), recall=offer
            )
        out_tools = _restore_tool_marks(list(out_tools), marks)
        prepared = Prepared(
            body={},
            thread=thread,
            view=view,
            inputs=inputs,
            sources=sources,
            system=system,
            messages=list(messages),
            tools=out_tools,
            recall=offer,
        )
        prepared.body = self.write(prepared, memory, prepared.messages)
        return prepared

    def follow_up(
        self,
        prepared: Prepared,
        memory: ThreadMemory,
        elements: Sequence[Mapping[str, Any]],
        history: Sequence[Message],
    ) -> dict[str, Any]:
        """The body that asks the upstream again after a recall: the request as sent with
        `elements` (the replies and answers since, raw; `history` in neutral form) appended.
        They reach the upstream byte for byte, as the splice puts them back on the thread's
        later requests."""
        view = prepared.view
        count = len(view.messages)
        try:
            extended: BodyView | None = resplice(view, {}, elements)
        except WireError:
            extended = None
        if extended is None or extended.sources[:count] != view.sources:
            # Appending changed how the client's own messages read (a request that ends
            # with an assistant turn): the exchange is written from neutral form.
            logger.info(
                "thread %s: recall exchange written from neutral form",
                thread_label(prepared.thread),
            )
            return self.write(prepared, memory, [*prepared.messages, *history])
        new = extended.messages[count:]
        more = replace(
            prepared,
            view=extended,
            inputs=[*prepared.inputs, *new],
            sources=[*prepared.sources, *extended.sources[count:]],
        )
        body = self.write(more, memory, [*prepared.messages, *new])
        prepared.added_marks, prepared.unmarked = more.added_marks, more.unmarked
        return body

    def write(
        self, prepared: Prepared, memory: ThreadMemory, messages: Sequence[Message]
    ) -> dict[str, Any]:
        """The upstream body carrying `messages` (a recall follow-up appends to the sent ones)."""
        body = write_view(
            prepared.view,
            prepared.system,
            messages,
            prepared.tools,
            inputs=prepared.inputs,
            sources=prepared.sources,
        )
        if prepared.view.api != "anthropic":
            return body
        body = memory.blocks.apply(body)  # the messages it marked before stay blocks
        written = read_view(body, "anthropic")
        request = Request(
            system=written.system,
            messages=written.messages,
            tools=[{k: v for k, v in t.items() if k != "cache_control"} for t in written.tools],
        )
        rendered = render_request(request, get_counter())
        # The client's marks, one per marked block as the API counts them: cachepilot's own
        # go only in the slots they leave (none when the client used four, or more).
        controls = cache_marks(written)
        client = [index for index, _ in controls]
        # The same view read back: its stable anchors (before the first message the next
        # maintenance point may rewrite) keep that prefix written across a rewrite.
        stable = _written_indices(
            self.pilot.stable_anchors(prepared.messages, prepared.thread),
            prepared.messages,
            len(written.messages),
        )
        added: list[int] = []
        if len(client) < MAX_CACHE_MARKS and not memory.marks_refused:
            added = plan_breakpoints(
                rendered, client, memory.sent, self._breakpoints, stable=stable
            )
        memory.sent = rendered
        prepared.added_marks = added
        prepared.unmarked = None
        if not added:
            return body
        unmarked = body
        for index in added:
            body = mark_breakpoints(body, written, [index], _control_for(index, controls))
        if cache_mark_count(body) > MAX_CACHE_MARKS:  # never send more than the API takes
            logger.warning("thread %s: cache marks over the limit; sending the client's only",
                           thread_label(prepared.thread))  # fmt: skip
            prepared.added_marks = []
            return unmarked
        prepared.unmarked = unmarked
        raw = unmarked.get("messages")
        raw = raw if isinstance(raw, list) else []
        sources = written.sources
        entries = [
            raw[sources[i].index]
            for i in added
            if 0 <= i < len(sources) and sources[i].index < len(raw)
        ]
        if -1 in added:
            entries.append({"role": "system", "content": unmarked.get("system")})
        memory.apply(lambda: memory.blocks.add(entries))
        return body


def _gemini_can_offer(view: BodyView, tools: Sequence[Mapping[str, Any]]) -> bool:
    """A Gemini request may be offered `recall`: it declares functions of its own, names no
    cachedContent, and does not restrict calls to a list of names (`allowedFunctionNames`)."""
    if view.body.get("cachedContent") is not None:
        return False
    if not any("name" in t for t in tools):
        return False
    config = view.body.get("toolConfig")
    calling = config.get("functionCallingConfig") if isinstance(config, Mapping) else None
    return not (
        isinstance(calling, Mapping)
        and (calling.get("mode") == "NONE" or calling.get("allowedFunctionNames"))
    )


def _written_indices(indices: Sequence[int], sent: Sequence[Message], written: int) -> list[int]:
    """`indices` of the neutral messages `sent` as indices of the body read back (`written`
    messages): the Messages writer joins consecutive user messages that are not tool results
    (a fold summary after the task statement) into one. Empty when the counts disagree."""
    joined = 0
    shift: list[int] = []
    for i, message in enumerate(sent):
        if i and message.role == "user" and sent[i - 1].role == "user":
            joined += 1
        shift.append(joined)
    if len(sent) - joined != written:
        return []
    return [i - shift[i] for i in indices if 0 <= i < len(sent)]


def _restore_tool_marks(
    tools: list[dict[str, Any]], marks: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """The client's tool `cache_control` marks put back on their own tools (by name) after
    canonical ordering: a client's mark is never moved nor dropped."""
    if not marks:
        return tools
    out = [dict(t) for t in tools]
    for tool in out:
        name = tool_name(tool)
        if name in marks:
            tool["cache_control"] = marks[name]
    return out


def _control_for(index: int, controls: Sequence[tuple[int, Any]]) -> Mapping[str, Any]:
    """The mark to add at `index`: a copy of the client's nearest mark before it (else the
    nearest after it), so TTLs never grow along the prompt; plain ephemeral otherwise."""
    before = [c for i, c in controls if i <= index]
    if before:
        return dict(before[-1])
    after = [c for i, c in controls if i > index]
    return dict(after[0]) if after else dict(_DEFAULT_CONTROL)
