"""Gemini replies read: a `GenerateContentResponse`, or the chunks of a stream folded into one.

`streamGenerateContent?alt=sse` sends one `GenerateContentResponse` per event: text and
thought parts in pieces (a `thoughtSignature` on one of them), each `functionCall` whole,
`usageMetadata` growing to the whole usage on the last chunk. `GeminiReply` folds the chunks
into the reply they add up to, in the non-streamed shape: consecutive pieces of one text
(or one thought) joined, a signature kept on the part it came with, every call part as
received. Without `alt=sse` the method answers one JSON array of the same chunks; both are
read by `fold_chunks`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from cachepilot.messages import Message
from cachepilot.usage import Usage
from cachepilot.wire._common import Reader
from cachepilot.wire.gemini import read_turn

__all__ = ["GeminiReply", "candidate_parts", "fold_chunks", "gemini_output", "gemini_usage_of"]


def candidate_parts(chunk: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The parts of a response's first candidate (empty when it has none)."""
    candidates = chunk.get("candidates")
    if not isinstance(candidates, list) or not candidates:
        return []
    first = candidates[0]
    content = first.get("content") if isinstance(first, Mapping) else None
    parts = content.get("parts") if isinstance(content, Mapping) else None
    return [p for p in parts or () if isinstance(p, Mapping)]


def gemini_usage_of(raw: Any) -> Usage | None:
    """Usage of a `usageMetadata` block (None when there is none)."""
    if not isinstance(raw, Mapping) or not raw:
        return None
    return Usage.from_gemini(raw)


def gemini_output(body: Mapping[str, Any]) -> tuple[Message, ...]:
    """The assistant message of a response body's first candidate."""
    parts = candidate_parts(body)
    if not parts:
        return ()
    turn = read_turn({"role": "model", "parts": parts}, "reply", (), Reader(strict=False))
    return turn.messages


def _text_kind(part: Mapping[str, Any]) -> bool | None:
    """True for a thought piece, False for a text piece, None for any other part."""
    if not isinstance(part.get("text"), str):
        return None
    extra = set(part) - {"text", "thought", "thoughtSignature"}
    if extra:
        return None
    return part.get("thought") is True


class GeminiReply:
    """The reply a Gemini stream adds up to, chunk by chunk (`add`).

    Attributes:
        response_id: the `responseId`, once seen.
        usage_block: the last `usageMetadata` (each chunk carries the usage so far).
    """

    def __init__(self) -> None:
        self.response_id: str | None = None
        self.usage_block: dict[str, Any] = {}
        self.model: str | None = None
        self._parts: list[dict[str, Any]] = []
        self._texts: list[list[str]] = []  # per part, its text pieces (joined once)
        self._finish: Any = None
        self._candidate: dict[str, Any] = {}

    def add(self, chunk: Mapping[str, Any]) -> None:
        """Fold one chunk in."""
        if chunk.get("responseId"):
            self.response_id = str(chunk["responseId"])
        if chunk.get("modelVersion"):
            self.model = str(chunk["modelVersion"])
        usage = chunk.get("usageMetadata")
        if isinstance(usage, Mapping):
            self.usage_block = dict(usage)
        candidates = chunk.get("candidates")
        first = candidates[0] if isinstance(candidates, list) and candidates else None
        if isinstance(first, Mapping):
            if first.get("finishReason") is not None:
                self._finish = first["finishReason"]
            for key, value in first.items():
                if key not in ("content", "finishReason", "index"):
                    self._candidate[key] = value
        for part in candidate_parts(chunk):
            self._add_part(part)

    def _add_part(self, part: Mapping[str, Any]) -> None:
        kind = _text_kind(part)
        last = self._parts[-1] if self._parts else None
        if (
            kind is not None
            and last is not None
            and _text_kind(last) is kind
            and "thoughtSignature" not in last
        ):
            self._texts[-1].append(part["text"])
            if "thoughtSignature" in part:
                last["thoughtSignature"] = part["thoughtSignature"]
            return
        self._parts.append(dict(part))
        self._texts.append([part["text"]] if kind is not None else [])

    @property
    def usage(self) -> Usage | None:
        """The usage the stream reported (None when it carried none)."""
        return gemini_usage_of(self.usage_block)

    def payload(self) -> dict[str, Any]:
        """The non-streamed response the chunks add up to."""
        parts = []
        for part, texts in zip(self._parts, self._texts, strict=True):
            parts.append({**part, "text": "".join(texts)} if texts else dict(part))
        candidate: dict[str, Any] = {
            "content": {"role": "model", "parts": parts},
            **self._candidate,
        }
        if self._finish is not None:
            candidate["finishReason"] = self._finish
        candidate["index"] = 0
        out: dict[str, Any] = {"candidates": [candidate]}
        if self.usage_block:
            out["usageMetadata"] = dict(self.usage_block)
        if self.model is not None:
            out["modelVersion"] = self.model
        if self.response_id is not None:
            out["responseId"] = self.response_id
        return out

    def message(self) -> Message:
        """The assistant message the stream carried so far."""
        found = gemini_output(self.payload())
        return found[0] if found else Message(role="assistant")


def fold_chunks(chunks: Iterable[Mapping[str, Any]]) -> GeminiReply:
    """The reply a sequence of chunks adds up to."""
    reply = GeminiReply()
    for chunk in chunks:
        if isinstance(chunk, Mapping):
            reply.add(chunk)
    return reply
