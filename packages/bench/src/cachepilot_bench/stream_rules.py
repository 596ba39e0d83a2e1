"""The documented event order of each API's streamed replies, checked on parsed events.

- Anthropic Messages: `message_start`, then per content block `content_block_start`, its
  deltas and `content_block_stop` (indexes 0, 1, … in turn), then `message_delta` and
  `message_stop`; `ping` anywhere after the start.
- Chat Completions: one id for every chunk; a tool call's first delta carries its id, type and
  name, its index new; `finish_reason` once, on the last choice chunk; a usage chunk (no
  choices) only after it.
- Responses: `response.created` first and `response.completed` (or `failed` / `incomplete`)
  last; each output item added, its parts and deltas, then done, before the next item starts;
  `output_index` 0, 1, … in turn; `sequence_number`, when present, strictly increasing.

One pass over the events; nothing is modified.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["stream_order_errors"]

_RESPONSES_END = frozenset({"response.completed", "response.failed", "response.incomplete"})


def stream_order_errors(api: str, events: Sequence[Mapping[str, Any]]) -> list[str]:
    """What breaks the documented order in `events` (empty when in order)."""
    if api == "anthropic":
        return _anthropic(events)
    if api == "chat":
        return _chat(events)
    return _responses(events)


def _anthropic(events: Sequence[Mapping[str, Any]]) -> list[str]:
    errors: list[str] = []
    kinds = [str(e.get("type")) for e in events]
    if not kinds or kinds[0] != "message_start":
        errors.append("the stream does not open with message_start")
    if kinds[-2:] != ["message_delta", "message_stop"]:
        errors.append("the stream does not end with message_delta, message_stop")
    open_index: int | None = None
    next_index = 0
    for n, event in enumerate(events):
        kind = event.get("type")
        index = event.get("index")
        if kind == "content_block_start":
            if open_index is not None:
                errors.append(f"event {n}: block {index} starts before block {open_index} stops")
            if index != next_index:
                errors.append(f"event {n}: block index {index}, expected {next_index}")
            open_index, next_index = index if isinstance(index, int) else None, next_index + 1
        elif kind in ("content_block_delta", "content_block_stop"):
            if open_index is None or index != open_index:
                errors.append(f"event {n}: {kind} for block {index} outside its block")
            if kind == "content_block_stop":
                open_index = None
        elif kind in ("message_delta", "message_stop") and open_index is not None:
            errors.append(f"event {n}: {kind} while block {open_index} is open")
    return errors


def _chat(events: Sequence[Mapping[str, Any]]) -> list[str]:
    errors: list[str] = []
    ids = {e.get("id") for e in events}
    if len(ids) > 1:
        errors.append(f"chunks carry {len(ids)} different ids")
    finished = False
    seen_calls: set[int] = set()
    for n, event in enumerate(events):
        choices = event.get("choices") or []
        if not choices:
            if not finished:
                errors.append(f"chunk {n}: a chunk without choices before finish_reason")
            continue
        for choice in choices:
            if finished:
                errors.append(f"chunk {n}: a choice chunk after finish_reason")
            delta = choice.get("delta") or {}
            for call in delta.get("tool_calls") or []:
                index = call.get("index")
                if index not in seen_calls:
                    function = call.get("function") or {}
                    if not call.get("id") or not function.get("name"):
                        errors.append(f"chunk {n}: tool call {index} starts without id or name")
                    if seen_calls and index != max(seen_calls) + 1:
                        errors.append(f"chunk {n}: tool call index {index} out of order")
                    seen_calls.add(index)
            if choice.get("finish_reason"):
                finished = True
    if not finished:
        errors.append("no chunk carries a finish_reason")
    return errors


def _responses(events: Sequence[Mapping[str, Any]]) -> list[str]:
    errors: list[str] = []
    kinds = [str(e.get("type")) for e in events]
    if not kinds or kinds[0] != "response.created":
        errors.append("the stream does not open with response.created")
    if not kinds or kinds[-1] not in _RESPONSES_END:
        errors.append("the stream does not end with response.completed")
    last_sequence: int | None = None
    open_item: int | None = None
    next_item = 0
    for n, event in enumerate(events):
        kind = str(event.get("type"))
        sequence = event.get("sequence_number")
        if isinstance(sequence, int):
            if last_sequence is not None and sequence <= last_sequence:
                errors.append(f"event {n}: sequence_number {sequence} after {last_sequence}")
            last_sequence = sequence
        index = event.get("output_index")
        if kind == "response.output_item.added":
            if open_item is not None:
                errors.append(f"event {n}: item {index} added while item {open_item} is open")
            if index != next_item:
                errors.append(f"event {n}: output_index {index}, expected {next_item}")
            open_item, next_item = index if isinstance(index, int) else None, next_item + 1
        elif kind == "response.output_item.done":
            if open_item is None or index != open_item:
                errors.append(f"event {n}: item {index} done but not open")
            open_item = None
        elif index is not None and index != open_item:
            errors.append(f"event {n}: {kind} for item {index} outside its item")
        elif kind in _RESPONSES_END and open_item is not None:
            errors.append(f"event {n}: {kind} while item {open_item} is open")
    return errors
