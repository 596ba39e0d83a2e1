"""Reduced tool-call arguments: long string values replaced by a preview naming their ref.

Coding agents put whole files into tool-call arguments (`write(path, content)`, `edit(old,
new)`); once the call is answered those values are the largest items of the history, resent
on every call. At a maintenance point (never at ingestion: the assistant message is already
in the cached prefix when its result arrives) each long string value is archived and replaced
by a short head preview and the `recall(ref=…)` that returns it byte-identical (when the model
has no recall tool, the preview says the rest was elided; the value is archived all the same).

The rewritten arguments keep the call's shape, so the provider's validation of tool-call JSON
still passes: a JSON object stays an object with the same keys in the same order, arrays keep
their length, numbers and short strings stay as they are; only long strings change. Arguments
that are not JSON (free-form tool input) are replaced by the preview text itself. Everything
here is a pure function of its input (the refs are content digests), so the cost model can
count the reduced size before anything is archived.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from cachepilot.reduce.stubs import pointer
from cachepilot.refs import make_ref
from cachepilot.support.redact import redact

__all__ = ["ReducedArguments", "argument_stub", "reduce_arguments"]

_MAX_DEPTH = 64


@dataclass(frozen=True, slots=True)
class ReducedArguments:
    """One call's arguments with their long string values reduced.

    Attributes:
        text: the new arguments text (valid JSON whenever the original was).
        values: the original values that were replaced, each with its ref (archive them
            before the text is shown: the text names the refs).
        original_chars: length of the original arguments text.
    """

    text: str
    values: tuple[tuple[str, str], ...]
    original_chars: int


def _head(value: str, preview_chars: int) -> str:
    """The first `preview_chars` characters, cut back to a line end when one is near."""
    head = value[:preview_chars]
    cut = head.rfind("\n")
    return head[:cut] if cut >= preview_chars // 2 else head


def argument_stub(value: str, ref: str | None, preview_chars: int) -> str:
    """What a long argument value becomes: a head preview and the recall call of the value.

    `ref` None: the model has no recall tool, so the note says the rest was elided. Credential
    shapes in the preview are replaced (`cachepilot.support.redact`); the archived value keeps them,
    for `recall` in the same thread.
    """
    head = redact(_head(value, preview_chars)) if preview_chars > 0 else ""
    note = f"[argument reduced {len(value):,} → {len(head):,} chars; {pointer(ref, 'full value')}]"
    return f"{head}\n{note}" if head else note


def _walk(  # noqa: PLR0917 - a private recursive helper
    value: Any,
    min_chars: int,
    preview_chars: int,
    found: list[tuple[str, str]],
    depth: int,
    recall: bool,
) -> Any:
    if isinstance(value, str):
        if len(value) <= min_chars:
            return value
        ref = make_ref(value)
        found.append((value, ref))
        return argument_stub(value, ref if recall else None, preview_chars)
    if depth >= _MAX_DEPTH:
        return value
    if isinstance(value, dict):
        return {
            k: _walk(v, min_chars, preview_chars, found, depth + 1, recall)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_walk(v, min_chars, preview_chars, found, depth + 1, recall) for v in value]
    return value


def reduce_arguments(
    arguments: str, *, min_chars: int, preview_chars: int, recall: bool = True
) -> ReducedArguments | None:
    """The arguments with every string value longer than `min_chars` reduced, or None when
    nothing is that long (or the reduced text would not be shorter). `recall` False: the
    previews name no recall call (the model is offered none).

    Total: never raises (odd input is treated as free-form text).
    """
    if not isinstance(arguments, str) or len(arguments) <= min_chars:
        return None
    found: list[tuple[str, str]] = []
    try:
        parsed = json.loads(arguments)
    except (ValueError, RecursionError):
        parsed = None
        is_json = False
    else:
        is_json = True
    if is_json:
        try:
            reduced = _walk(parsed, min_chars, preview_chars, found, 0, recall)
            text = json.dumps(reduced, ensure_ascii=False)
        except (ValueError, TypeError, RecursionError):
            return None
    else:
        ref = make_ref(arguments)
        found.append((arguments, ref))
        text = argument_stub(arguments, ref if recall else None, preview_chars)
    if not found or len(text) >= len(arguments):
        return None
    return ReducedArguments(text=text, values=tuple(found), original_chars=len(arguments))
