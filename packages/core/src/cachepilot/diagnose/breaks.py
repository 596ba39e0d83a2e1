"""Why did my cache miss? Explain the prefix break between two consecutive requests.

```python
from cachepilot.diagnose.breaks import explain

why = explain(previous_request, request, profile="openai-gpt-5.4-mini")
why.cause, why.detail         # "volatile_value", "date"
why.divergence.label          # "system"
why.divergence.char_offset    # 48 (characters into the system prompt)
why.divergence.token_offset   # 1,201 (tokens into the request)
why.remissed_tokens           # prompt tokens that were cached and are billed again
print(why.describe())
```

Requests are `cachepilot.sim.Request`s, raw API bodies (OpenAI Chat, OpenAI Responses,
Anthropic Messages: parsed with `cachepilot.audit.parse_body`), or anything with a `request`
attribute and a `params` mapping (`cachepilot.audit.LoggedCall`). Both are rendered with the
simulator's deterministic template; the first differing segment (tool schema, system prompt,
message) is located and the difference classified:

* `volatile_value`: a date, time, id, path… changed in place (`detail`: its kind, from the
  canonicalizer's detectors);
* `tool_change`: tools `added`, `removed`, `replaced`, `reordered` or `schema_changed`;
* `system_change`: the system prompt was `edited`, `added` or `removed`;
* `history_rewrite`: already-sent messages were `stubbed`, `edited`, `removed`, `inserted`,
  `folded`, `reordered`, `role_changed`, `reasoning_changed`, `reserialized` or `rewritten`;
* `model_change` / `parameter_change`: the provider caches per model; some parameters
  (`prompt_cache_key`, a structured-output schema, Anthropic `tool_choice` / `thinking`)
  re-key or invalidate the cache;
* no content difference, still a miss: `ttl_expiry` (idle longer than the profile's TTL) or
  `below_minimum` (shorter than the minimum cacheable length);
* `none`: the request extends the previous one; it should hit.

`remissed_tokens` counts prompt tokens the previous request left cached that this request
pays for again: `billable(min(previous, current)) − billable(common prefix)` under the
profile's minimum and granularity (raw tokens when no profile is given). A request that is a
prefix of the previous one re-misses nothing. Token counts are our tokenizer's
(o200k_base), close to but not equal to the provider's.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

from cachepilot.diagnose.difference import (
    CauseKind,
    Finding,
    classify_messages,
    classify_system,
    classify_tools,
    message_text,
)
from cachepilot.sim.profiles import ProviderProfile, get_profile
from cachepilot.sim.render import (
    RenderedRequest,
    Request,
    canonical_tool,
    common_prefix,
    render_request,
)
from cachepilot.support.redact import redact, redact_slice
from cachepilot.tokens import TokenCounter, get_counter

__all__ = [
    "AVOIDABLE_CAUSES",
    "CACHE_PARAMETERS",
    "CAUSES",
    "PREFIX_BREAK_CAUSES",
    "CauseKind",
    "Divergence",
    "Explanation",
    "HasRequest",
    "explain",
    "message_text",
]

logger = logging.getLogger(__name__)

CAUSES: tuple[CauseKind, ...] = (
    "none",
    "volatile_value",
    "tool_change",
    "system_change",
    "history_rewrite",
    "model_change",
    "parameter_change",
    "ttl_expiry",
    "below_minimum",
    "provider_miss",
    "provider_edit",
)
"""Every cause class. `provider_miss` is set by `cachepilot.audit` from recorded usage: the
request extended the previous one, yet the provider reported a miss (eviction, routing).
`provider_edit` likewise, for a request that asks the provider to edit its context
server-side (Anthropic `context_management` edits such as `clear_tool_uses_20250919`, OpenAI
Responses `context_management` compaction): the provider's own edit, not the request's."""

PREFIX_BREAK_CAUSES: frozenset[CauseKind] = frozenset(
    {
        "volatile_value",
        "tool_change",
        "system_change",
        "history_rewrite",
        "model_change",
        "parameter_change",
    }
)
"""Causes that are a change of the request itself (what a test budget guards)."""

AVOIDABLE_CAUSES: frozenset[CauseKind] = frozenset(
    {"volatile_value", "tool_change", "system_change", "history_rewrite", "parameter_change"}
)
"""Causes a client can avoid by keeping its prefix byte-stable (a history rewrite may still be
worth its cost: cachepilot's scheduler rewrites only when the saving pays for the miss)."""

CACHE_PARAMETERS: Mapping[str, Literal["all", "messages"]] = {
    "prompt_cache_key": "all",
    "response_format": "all",
    "text.format": "all",
    "tool_choice": "messages",
    "thinking": "messages",
    "context_management": "messages",
}
"""Request parameters that change what is cached, and what a change invalidates: `all`
(OpenAI routes by `prompt_cache_key`; a structured-output schema is part of the prefix) or
`messages` (Anthropic: a changed `tool_choice`, `thinking` or `context_management` setting
invalidates the cached messages, tools and system stay)."""

_SNIPPET_BEFORE = 40
_SNIPPET_AFTER = 80


@runtime_checkable
class HasRequest(Protocol):
    """A logged call: a neutral request plus the raw parameters that matter for caching."""

    @property
    def request(self) -> Request:
        """The request in neutral form."""
        ...

    @property
    def params(self) -> Mapping[str, Any]:
        """Cache-relevant parameters (`CACHE_PARAMETERS` keys) as sent."""
        ...

    @property
    def api(self) -> str:
        """`chat`, `responses` or `anthropic`."""
        ...


RequestLike: TypeAlias = Request | HasRequest | Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Divergence:
    """Where two requests first differ.

    Attributes:
        area: `tools`, `system` or `messages`.
        index: tool index or message index (None for the system prompt).
        label: `tool 2`, `system`, `message 14`.
        char_offset: characters into that item's text (`message_text` for a message, the
            canonical JSON for a tool) where the two first differ.
        token_offset: tokens into the request where they first differ (= shared prefix).
        segment_token_offset: tokens into the differing item.
        previous_snippet: text around the divergence in the previous request.
        current_snippet: the same place in the current request.
    """

    area: Literal["tools", "system", "messages"]
    index: int | None
    label: str
    char_offset: int
    token_offset: int
    segment_token_offset: int
    previous_snippet: str
    current_snippet: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "area": self.area,
            "index": self.index,
            "label": self.label,
            "char_offset": self.char_offset,
            "token_offset": self.token_offset,
            "segment_token_offset": self.segment_token_offset,
            "previous_snippet": self.previous_snippet,
            "current_snippet": self.current_snippet,
        }


@dataclass(frozen=True, slots=True)
class Explanation:
    """Why a request did (or would) not hit the previous request's cached prefix.

    Attributes:
        cause: the cause class (see the module docstring).
        detail: sub-kind: the volatile kind (`date`), the edit (`stubbed`), the tool change
            (`added`), the parameter name, or "".
        summary: one line for people.
        divergence: where the content first differs (None when it does not).
        previous_tokens: prompt tokens of the previous request.
        current_tokens: prompt tokens of this request.
        common_tokens: leading tokens both share (0 after a model change or a re-keying
            parameter change: nothing can be read from the old cache).
        remissed_tokens: tokens the previous request left cached that this one pays again.
        idle_seconds: time between the two requests, when both have timestamps.
        avoidable: a client could have kept these tokens cached (see `AVOIDABLE_CAUSES`; False
            when the cache had expired anyway).
        notes: secondary findings (e.g. the cache had expired anyway, more edits further on).
    """

    cause: CauseKind
    detail: str
    summary: str
    divergence: Divergence | None
    previous_tokens: int
    current_tokens: int
    common_tokens: int
    remissed_tokens: int
    idle_seconds: float | None = None
    avoidable: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def is_break(self) -> bool:
        """True when this request misses tokens the previous one had cached."""
        return self.cause != "none"

    @property
    def prefix_break(self) -> bool:
        """True when the request itself changed (`PREFIX_BREAK_CAUSES`)."""
        return self.cause in PREFIX_BREAK_CAUSES

    def describe(self) -> str:
        """A few readable lines: the summary, the divergence and its snippets, the notes."""
        lines = [self.summary]
        div = self.divergence
        if div is not None:
            lines.append(f"  previous: {_show(div.previous_snippet)}")
            lines.append(f"  current:  {_show(div.current_snippet)}")
        lines.extend(f"  note: {note}" for note in self.notes)
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "cause": self.cause,
            "detail": self.detail,
            "summary": self.summary,
            "divergence": None if self.divergence is None else self.divergence.to_dict(),
            "previous_tokens": self.previous_tokens,
            "current_tokens": self.current_tokens,
            "common_tokens": self.common_tokens,
            "remissed_tokens": self.remissed_tokens,
            "idle_seconds": self.idle_seconds,
            "avoidable": self.avoidable,
            "prefix_break": self.prefix_break,
            "notes": list(self.notes),
        }


def _show(snippet: str) -> str:
    """A snippet on one line (newlines and tabs made visible)."""
    return '"' + snippet.replace("\n", "⏎").replace("\r", "␍").replace("\t", "⇥") + '"'


# --------------------------------------------------------------------------------------------
# Inputs


def _coerce(value: RequestLike) -> tuple[Request, Mapping[str, Any], str]:
    if isinstance(value, Request):
        return value, {}, ""
    if isinstance(value, HasRequest):
        return value.request, value.params, value.api
    if isinstance(value, Mapping):
        from cachepilot.wire import parse_body

        parsed = parse_body(value)
        return parsed.request, parsed.params, parsed.api
    raise TypeError(
        "explain() takes a cachepilot.sim.Request, a raw request body (dict) or a logged "
        f"call, not {type(value).__name__}"
    )


def _first_difference(a: str, b: str) -> int:
    limit = min(len(a), len(b))
    lo, hi = 0, limit
    if a[:limit] == b[:limit]:
        return limit
    while hi - lo > 1:  # a[:lo] == b[:lo], a[:hi] != b[:hi]
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def _snippet(text: str, offset: int) -> str:
    """The text around `offset`, credential shapes replaced (reports are saved and shared)."""
    start = max(0, offset - _SNIPPET_BEFORE)
    end = min(len(text), offset + _SNIPPET_AFTER)
    head = "…" if start > 0 else ""
    tail = "…" if end < len(text) else ""
    return f"{head}{redact_slice(text, start, end)}{tail}"


# --------------------------------------------------------------------------------------------
# Classification


# --------------------------------------------------------------------------------------------
# explain


def _param_change(
    prev: Mapping[str, Any], cur: Mapping[str, Any], anthropic: bool
) -> tuple[str, Literal["all", "messages"]] | None:
    for name, scope in CACHE_PARAMETERS.items():
        if scope == "messages" and not anthropic:
            continue
        if (name in prev or name in cur) and prev.get(name) != cur.get(name):
            return name, scope
    return None


def _billable(profile: ProviderProfile | None, tokens: int) -> int:
    return tokens if profile is None else profile.billable_hit(tokens)


def explain(
    previous: RequestLike,
    current: RequestLike,
    *,
    profile: ProviderProfile | str | None = None,
    counter: TokenCounter | None = None,
    hidden_prefix_tokens: int = 0,
) -> Explanation:
    """Explain why `current` does or does not hit the prefix `previous` left cached.

    Args:
        previous: the thread's previous request (see the module docstring for the shapes).
        current: the request that follows it.
        profile: provider profile (or name) for the TTL, the minimum cacheable length and
            the granularity; None: content only, raw token counts.
        counter: token counter (default: the shared o200k_base counter).
        hidden_prefix_tokens: tokens every request carries that neither shows (unrecorded
            system prompt or tool schemas), counted toward the minimum length.

    Raises:
        TypeError: when an argument is not a request, a body or a logged call.
        ValueError: on an unknown profile name or a body that cannot be parsed.
    """
    prof = get_profile(profile) if isinstance(profile, str) else profile
    counter = counter or get_counter()
    prev_req, prev_params, prev_api = _coerce(previous)
    cur_req, cur_params, cur_api = _coerce(current)
    a = render_request(prev_req, counter, hidden_prefix_tokens=hidden_prefix_tokens)
    b = render_request(cur_req, counter, hidden_prefix_tokens=hidden_prefix_tokens)
    common, same = common_prefix(a, b)
    idle = None
    if prev_req.timestamp is not None and cur_req.timestamp is not None:
        idle = float(cur_req.timestamp) - float(prev_req.timestamp)
    expired = (
        prof is not None
        and prof.ttl_seconds is not None
        and idle is not None
        and idle > prof.ttl_seconds
    )
    notes: list[str] = []
    divergence = _divergence(a, b, prev=prev_req, cur=cur_req, common=common, same=same)
    if divergence is not None and _grew(divergence, prev_req, cur_req):
        # Content appended to the previous request's last message (blocks streamed into the
        # same turn): the provider still matches everything sent before; only the message's
        # end marker differs in our template.
        notes_grew = True
        divergence = None
        common = a.total_tokens
    else:
        notes_grew = False
    if notes_grew:
        notes.append("the previous request's last message grew (content appended)")
    reachable = min(a.total_tokens, b.total_tokens)
    anthropic = "anthropic" in (prev_api, cur_api)

    finding: Finding | None = None
    effective = common
    if prev_req.model and cur_req.model and prev_req.model != cur_req.model:
        finding = Finding(
            "model_change", cur_req.model, f"model changed {prev_req.model} → {cur_req.model}"
        )
        effective = 0
    else:
        changed = _param_change(prev_params, cur_params, anthropic)
        if changed is not None:
            name, scope = changed
            header = b.end_of(b.first_message - 1)
            cut = 0 if scope == "all" else min(common, header)
            if cut < common:
                effective = cut
                finding = Finding(
                    "parameter_change",
                    name,
                    f"parameter {name} changed ({_brief(prev_params.get(name))} → "
                    f"{_brief(cur_params.get(name))})",
                )
    if finding is not None and divergence is not None and divergence.token_offset < effective:
        finding = None  # the content changed before the parameter's reach: that is the cause
        effective = common
    if finding is None and divergence is not None:
        finding = _classify(divergence, prev_req, cur_req)
    remissed = max(0, _billable(prof, reachable) - _billable(prof, effective))
    if finding is None:
        # No content difference within the reachable prefix: a miss can only come from the cache.
        total = b.total_tokens
        if prof is not None and total < prof.min_cacheable_tokens:
            finding = Finding(
                "below_minimum",
                "request",
                f"request has {total:,} tokens, below the {prof.min_cacheable_tokens:,}-token "
                "minimum: never cached",
            )
        elif prof is not None and a.total_tokens < prof.min_cacheable_tokens:
            finding = Finding(
                "below_minimum",
                "previous",
                f"previous request had {a.total_tokens:,} tokens, below the "
                f"{prof.min_cacheable_tokens:,}-token minimum: nothing was cached",
            )
        elif expired and prof is not None:
            finding = Finding(
                "ttl_expiry",
                f"{idle:.0f}s",
                f"idle {_duration(idle)} > cache TTL {_duration(prof.ttl_seconds)}: the cached "
                "prefix expired",
            )
            remissed = _billable(prof, reachable)
        else:
            extends = common >= a.total_tokens
            what = "extends the previous request" if extends else "is a prefix of the previous one"
            finding = Finding("none", "", f"no break: the request {what}")
    elif expired and prof is not None:
        notes.append(
            f"the cache had expired anyway (idle {_duration(idle)} > TTL "
            f"{_duration(prof.ttl_seconds)})"
        )
    notes.extend(finding.notes)
    avoidable = finding.cause in AVOIDABLE_CAUSES and not expired and remissed > 0
    if finding.cause in PREFIX_BREAK_CAUSES and remissed == 0 and prof is not None:
        if _billable(prof, reachable) == 0:
            notes.append("nothing was cached to lose (below the provider's minimum)")
        else:
            notes.append(
                "no billable tokens lost: the change falls in the last partial cache block "
                "or the request shrank"
            )
    summary = finding.what
    if finding.cause != "none":
        where = ""
        if divergence is not None and finding.cause not in ("model_change", "parameter_change"):
            label = "" if divergence.area == "system" else f" {divergence.label},"
            where = f" at{label} char {divergence.char_offset:,}, token {divergence.token_offset:,}"
        summary = f"{finding.what}{where}: {remissed:,} tokens re-missed"
    return Explanation(
        cause=finding.cause,
        detail=finding.detail,
        summary=summary,
        divergence=divergence,
        previous_tokens=a.total_tokens,
        current_tokens=b.total_tokens,
        common_tokens=effective,
        remissed_tokens=remissed,
        idle_seconds=idle,
        avoidable=avoidable,
        notes=tuple(notes),
    )


def _brief(value: Any) -> str:
    text = "unset" if value is None else repr(value)
    return redact(text) if len(text) <= 40 else redact_slice(text, 0, 39) + "…"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.0f} s"


def _divergence(
    a: RenderedRequest,
    b: RenderedRequest,
    *,
    prev: Request,
    cur: Request,
    common: int,
    same: int,
) -> Divergence | None:
    """Where the content differs within the reachable prefix (None when it does not)."""
    if common >= min(a.total_tokens, b.total_tokens):
        return None
    # The first differing segment exists on both sides (else one would be a prefix).
    seg_a, seg_b = a.segments[same], b.segments[same]
    seg_token = common - b.end_of(same - 1)
    kind = seg_b.kind
    if seg_a.kind != seg_b.kind:
        # Segments of different kinds at the same place: tools added/removed before the
        # system prompt, or the system prompt added/removed.
        kind = "tool" if "tool" in (seg_a.kind, seg_b.kind) else "system"
    if kind == "tool":
        first_tool_a = next((i for i, s in enumerate(a.segments) if s.kind == "tool"), same)
        first_tool_b = next((i for i, s in enumerate(b.segments) if s.kind == "tool"), same)
        index = same - min(first_tool_a, first_tool_b)
        before = canonical_tool(prev.tools[index]) if index < len(prev.tools) else ""
        after = canonical_tool(cur.tools[index]) if index < len(cur.tools) else ""
        offset = _first_difference(before, after)
        return Divergence(
            "tools",
            index,
            f"tool {index}",
            offset,
            common,
            seg_token,
            _snippet(before, offset),
            _snippet(after, offset),
        )
    if kind == "system":
        before, after = prev.system or "", cur.system or ""
        offset = _first_difference(before, after)
        return Divergence(
            "system", None, "system", offset, common, seg_token,
            _snippet(before, offset), _snippet(after, offset),
        )  # fmt: skip
    index = same - b.first_message
    before = message_text(prev.messages[index]) if index < len(prev.messages) else ""
    after = message_text(cur.messages[index]) if index < len(cur.messages) else ""
    offset = _first_difference(before, after)
    return Divergence(
        "messages",
        index,
        f"message {index}",
        offset,
        common,
        seg_token,
        _snippet(before, offset),
        _snippet(after, offset),
    )


def _grew(div: Divergence, prev: Request, cur: Request) -> bool:
    """The divergence is content appended to the previous request's last message."""
    index = div.index
    if div.area != "messages" or index is None or index != len(prev.messages) - 1:
        return False
    if index >= len(cur.messages):
        return False
    p, c = prev.messages[index], cur.messages[index]
    return p.role == c.role and message_text(c).startswith(message_text(p))


def _classify(div: Divergence, prev: Request, cur: Request) -> Finding:
    if div.area == "tools":
        return classify_tools(
            prev.tools,
            cur.tools,
            index=div.index or 0,
            offset=div.char_offset,
            before=_full_tool(prev.tools, div.index or 0),
            after=_full_tool(cur.tools, div.index or 0),
        )
    if div.area == "system":
        return classify_system(prev.system, cur.system, div.char_offset)
    index = div.index or 0
    return classify_messages(prev.messages, cur.messages, index, div.char_offset)


def _full_tool(tools: Sequence[Mapping[str, Any]], index: int) -> str:
    return canonical_tool(tools[index]) if index < len(tools) else ""
