"""Streams passed to the client as they arrive, held back only from a recall call on.

Exact behaviour, per upstream stream (a *round*):

- Every event is forwarded, byte for byte, as soon as it is complete, until an event starts
  a call of the `recall` tool (Chat: a `tool_calls` delta naming it; Responses:
  `response.output_item.added` of such a `function_call`; Messages: `content_block_start` of
  such a `tool_use`; Gemini: a chunk holding such a `functionCall` part, which arrives whole).
  From that event on, the round's events are held.
- When the round ends with only recall calls, the held events are dropped, the proxy answers
  the calls from the archive and asks the upstream again; the new round's events continue the
  client's stream: Chat chunks take the first round's id; Responses events continue the
  `sequence_number`s and `output_index`es, without a second `response.created`/`in_progress`,
  under the first round's response id (the proxy maps it to the last round's id when the
  client later sends it as `previous_response_id`);
  Messages events continue the content block `index`es, without a second `message_start`;
  Gemini chunks (which carry no indices) take the first round's `responseId`.
  The client sees one message: the text shown before the recall call, then the new reply.
- When the round ends with recall calls next to the client's own calls, the held events are
  sent without those of the recall calls (indices renumbered), and the recall calls are
  answered with the next request.
- The usage of every round after the first is reported as the sum of all rounds' usage (the
  client sees what the upstream billed for its request); a stream with no recall call is
  never changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cachepilot.proxy.recall import is_recall_part
from cachepilot.recall.tool import RECALL_TOOL_NAME
from cachepilot.wire import Api, SSEEvent, StreamReply, dumps

__all__ = ["Relay", "add_usage", "sse_bytes"]

_START_EVENTS = {
    "responses": ("response.created", "response.in_progress", "response.queued"),
    "anthropic": ("message_start",),
}


def add_usage(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> dict[str, Any]:
    """Two usage blocks added field by field (numbers summed, nested blocks too)."""
    out: dict[str, Any] = dict(a or {})
    for key, value in (b or {}).items():
        mine = out.get(key)
        if isinstance(value, bool) or isinstance(mine, bool):
            out[key] = value
        elif isinstance(value, int | float) and isinstance(mine, int | float):
            out[key] = mine + value
        elif isinstance(value, Mapping) and isinstance(mine, Mapping):
            out[key] = add_usage(mine, value)
        elif value is not None or key not in out:
            out[key] = value
    return out


def sse_bytes(name: str | None, data: Mapping[str, Any]) -> bytes:
    """One event as SSE bytes (`event:` line when named)."""
    head = f"event: {name}\n" if name else ""
    return f"{head}data: {dumps(data)}\n\n".encode("ascii")


def _gemini_parts(data: Mapping[str, Any]) -> list[Any]:
    candidates = data.get("candidates")
    first = candidates[0] if isinstance(candidates, list) and candidates else None
    content = first.get("content") if isinstance(first, Mapping) else None
    parts = content.get("parts") if isinstance(content, Mapping) else None
    return parts if isinstance(parts, list) else []


def _gemini_drop_recall(data: Mapping[str, Any]) -> dict[str, Any] | None:
    """A Gemini chunk without its recall call parts (None: nothing is left to send)."""
    parts = _gemini_parts(data)
    kept = [p for p in parts if not is_recall_part(p)]
    if len(kept) == len(parts):
        return dict(data)
    candidates = list(data["candidates"])
    first = dict(candidates[0])
    first["content"] = {**first["content"], "parts": kept}
    if not kept and first.get("finishReason") is None and not data.get("usageMetadata"):
        return None
    if not kept:
        first["content"]["parts"] = [{"text": ""}]
    candidates[0] = first
    return {**data, "candidates": candidates}


def _starts_recall(api: Api, data: Mapping[str, Any]) -> bool:
    if api == "gemini":
        return any(is_recall_part(p) for p in _gemini_parts(data))
    if api == "chat":
        for choice in data.get("choices") or ():
            delta = choice.get("delta") if isinstance(choice, Mapping) else None
            for call in (delta or {}).get("tool_calls") or ():
                function = call.get("function") if isinstance(call, Mapping) else None
                if isinstance(function, Mapping) and function.get("name") == RECALL_TOOL_NAME:
                    return True
        return False
    if api == "responses":
        item = data.get("item")
        return (
            data.get("type") == "response.output_item.added"
            and isinstance(item, Mapping)
            and item.get("type") == "function_call"
            and item.get("name") == RECALL_TOOL_NAME
        )
    block = data.get("content_block")
    return (
        data.get("type") == "content_block_start"
        and isinstance(block, Mapping)
        and block.get("type") == "tool_use"
        and block.get("name") == RECALL_TOOL_NAME
    )


class Relay:
    """One round of a streamed reply (see the module docstring).

    Args:
        api: the stream's API.
        watch: look for recall calls (False: pass everything through).
        first: this is the first round (nothing is rewritten).
        index_offset: Messages content blocks / Responses output items the client was
            shown by earlier rounds.
        sequence: next Responses `sequence_number` to emit (rounds after the first).
        chat_id: the id Chat chunks (Gemini chunks: `responseId`) carry for the client
            (rounds after the first).
        response_id: the id Responses lifecycle events carry for the client (rounds after
            the first: the first round's, as clients require one id per stream).
        prior_usage: the summed usage blocks of the earlier rounds.
        prior_items: Responses output items the client was shown by earlier rounds.
    """

    def __init__(
        self,
        api: Api,
        *,
        watch: bool,
        first: bool = True,
        index_offset: int = 0,
        sequence: int = 0,
        chat_id: str | None = None,
        response_id: str | None = None,
        prior_usage: Mapping[str, Any] | None = None,
        prior_items: list[Any] | None = None,
        client: StreamReply | None = None,
    ) -> None:
        self.api = api
        self.watch = watch
        self.first = first
        self.index_offset = index_offset
        self.sequence = sequence
        self.chat_id = chat_id
        self.response_id = response_id
        self.prior_usage = dict(prior_usage or {})
        self.prior_items = list(prior_items or [])
        self.reply = StreamReply(api)
        self.client = client if client is not None else StreamReply(api)
        """The reply the client's stream adds up to, every round so far (what it resends)."""
        self.held: list[tuple[str | None, dict[str, Any] | None, SSEEvent]] = []
        self.holding = False
        self.shown_items: list[Any] = []
        self.shown_blocks = index_offset
        self.last_sequence = -1

    # ------------------------------------------------------------------ per event

    def push(self, event: SSEEvent) -> bytes | None:
        """The bytes to send the client now for `event` (None: held or dropped)."""
        data = event.data
        if data is not None:
            if self.watch and not self.holding and _starts_recall(self.api, data):
                self.holding = True
            self.reply.add(data)
        if event.done and not self.holding:
            return event.raw
        if self.first:
            out: dict[str, Any] | None = data
            raw = event.raw
        else:
            out = self._continue(data) if data is not None else None
            if data is not None and out is None:
                return None  # a start event of a later round
            raw = event.raw if out is None else sse_bytes(event.name, out)
        if self.holding:
            self.held.append((event.name, out, event))
            return None
        self._note_shown(out)
        return raw

    def _note_shown(self, data: Mapping[str, Any] | None) -> None:
        if data is None:
            return
        if self.watch:  # only a stream with recall calls is spliced
            self.client.add(data)
        kind = data.get("type")
        if self.api == "responses":
            number = data.get("sequence_number")
            if isinstance(number, int):
                self.last_sequence = number
            if kind == "response.output_item.done" and isinstance(data.get("item"), Mapping):
                self.shown_items.append(data["item"])
        elif self.api == "anthropic" and kind == "content_block_start":
            index = data.get("index")
            if isinstance(index, int):
                self.shown_blocks = max(self.shown_blocks, index + 1)

    def _continue(self, data: Mapping[str, Any]) -> dict[str, Any] | None:
        """A later round's event in the client's numbering (None: not sent)."""
        out = dict(data)
        kind = out.get("type")
        if self.api == "gemini":
            if self.chat_id is not None:
                out["responseId"] = self.chat_id
            if isinstance(out.get("usageMetadata"), Mapping):
                out["usageMetadata"] = add_usage(self.prior_usage, out["usageMetadata"])
            return out
        if self.api == "chat":
            if self.chat_id is not None:
                out["id"] = self.chat_id
            if isinstance(out.get("usage"), Mapping):
                out["usage"] = add_usage(self.prior_usage, out["usage"])
            return out
        if kind in _START_EVENTS.get(self.api, ()):
            return None
        if self.api == "anthropic":
            if isinstance(out.get("index"), int):
                out["index"] += self.index_offset
            if kind == "message_delta":
                usage = add_usage(self.prior_usage, self.reply.usage_block)
                out["usage"] = {**dict(out.get("usage") or {}), **usage}
            return out
        if isinstance(out.get("output_index"), int):
            out["output_index"] += self.index_offset
        out["sequence_number"] = self.sequence
        self.sequence += 1
        response = out.get("response")
        if isinstance(response, Mapping):
            fixed = dict(response)
            if self.response_id is not None:
                fixed["id"] = self.response_id
            if kind in ("response.completed", "response.incomplete", "response.failed"):
                fixed["output"] = [*self.prior_items, *(response.get("output") or [])]
                fixed["usage"] = add_usage(self.prior_usage, response.get("usage") or {})
            out["response"] = fixed
        return out

    # ------------------------------------------------------------------ end of the round

    def flush_without_recall(self) -> list[bytes]:
        """The held events minus those of the recall calls, renumbered (the mixed case)."""
        out: list[bytes] = []
        dropped: set[int] = set()
        for name, data, event in self.held:
            if data is None:
                if event.done:
                    out.append(event.raw)
                continue
            fixed = self._drop_recall(data, dropped)
            if fixed is not None:
                self.client.add(fixed)
                out.append(sse_bytes(name, fixed))
        return out

    def _drop_recall(self, data: Mapping[str, Any], dropped: set[int]) -> dict[str, Any] | None:
        out = dict(data)
        if self.api == "gemini":
            return _gemini_drop_recall(out)
        if self.api == "chat":
            choices = []
            for choice in out.get("choices") or ():
                if not isinstance(choice, Mapping) or not isinstance(choice.get("delta"), Mapping):
                    choices.append(choice)
                    continue
                delta = dict(choice["delta"])
                calls = []
                for call in delta.get("tool_calls") or ():
                    index = call.get("index", 0) if isinstance(call, Mapping) else 0
                    function = call.get("function") if isinstance(call, Mapping) else None
                    if isinstance(function, Mapping) and function.get("name") == RECALL_TOOL_NAME:
                        dropped.add(index)
                    if index in dropped:
                        continue
                    calls.append({**call, "index": index - sum(1 for d in dropped if d < index)})
                if "tool_calls" in delta:
                    if calls:
                        delta["tool_calls"] = calls
                    else:
                        delta.pop("tool_calls")
                if not delta and choice.get("finish_reason") is None and not out.get("usage"):
                    continue
                choices.append({**choice, "delta": delta})
            if not choices and not out.get("usage") and out.get("choices"):
                return None
            out["choices"] = choices
            return out
        index_key = "output_index" if self.api == "responses" else "index"
        if _starts_recall(self.api, out):
            dropped.add(int(out[index_key]))
        index = out.get(index_key)
        if isinstance(index, int):
            if index in dropped:
                return None
            out[index_key] = index - sum(1 for d in dropped if d < index)
        if self.api == "responses":
            if self.first:
                out["sequence_number"] = self.last_sequence + 1
                self.last_sequence += 1
            else:
                out["sequence_number"] = self.sequence
                self.sequence += 1
            response = out.get("response")
            if isinstance(response, Mapping) and isinstance(response.get("output"), list):
                out["response"] = {
                    **response,
                    "output": [
                        item
                        for item in response["output"]
                        if not (
                            isinstance(item, Mapping)
                            and item.get("type") == "function_call"
                            and item.get("name") == RECALL_TOOL_NAME
                        )
                    ],
                }
        return out

    def next_round(self) -> Relay:
        """The relay of the round that answers this one's recall calls."""
        if self.api == "responses":
            items = [*self.prior_items, *self.shown_items]
            offset = len(items)
            sequence = self.last_sequence + 1 if self.first else self.sequence
        else:
            items = []
            offset = self.shown_blocks
            sequence = 0
        return Relay(
            self.api,
            watch=self.watch,
            first=False,
            index_offset=offset,
            sequence=sequence,
            chat_id=self.chat_id if not self.first else self.reply.response_id,
            response_id=self.response_id if not self.first else self.reply.response_id,
            prior_usage=add_usage(self.prior_usage, self.reply.usage_block),
            prior_items=items,
            client=self.client,
        )
