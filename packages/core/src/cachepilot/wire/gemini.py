"""Gemini `generateContent` bodies read into neutral messages; replies, streams, usage written.

A request (`POST /v1beta/models/{model}:generateContent`, `:streamGenerateContent?alt=sse`,
or the Vertex path `/v1/projects/{p}/locations/{l}/publishers/google/models/{m}:…`) carries
`contents` (turns of role `user` or `model`, each a list of parts), an optional
`systemInstruction`, `tools` (objects holding `functionDeclarations`, or built-in tools such
as `googleSearch`), `toolConfig`, `generationConfig`, `safetySettings` and `cachedContent`.

Reading: a `model` turn is one assistant message (text parts, `thought` parts as reasoning
with their `thoughtSignature`, `functionCall` parts as tool calls); a `user` turn gives one
tool message per `functionResponse` part, then one user message for its other parts (text,
`inlineData` and `fileData` images; other parts as their JSON text, which is what the
provider counts). Gemini calls carry no id unless the model gives one: a call without one
gets a stable synthetic id (`SYNTHETIC_ID_PREFIX`, a digest of its name and arguments, then
the count of equal calls before it in the body, so a command run twice gets two ids), and
a `functionResponse` pairs with the call of the turn before by id, else by its position
among the responses of the same name (Gemini answers calls in call order). Everything the
neutral form does not hold (signatures on call parts, unknown fields) stays in the body: the
rewriter copies unchanged turns as received.

Writing is deterministic: the same reply and ids give byte-identical bodies and streams.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from cachepilot.messages import ContentPart, ImagePart, Message, ReasoningPart, TextPart, ToolCall
from cachepilot.usage import Usage
from cachepilot.wire._common import Reader, WireError, canonical
from cachepilot.wire._common import simplify as join_content
from cachepilot.wire.sse import STREAM_PIECE_CHARS

__all__ = [
    "GEMINI_METHODS",
    "SYNTHETIC_ID_PREFIX",
    "GeminiPath",
    "GeminiTurn",
    "gemini_chunks",
    "gemini_content",
    "gemini_contents",
    "gemini_path",
    "gemini_response",
    "gemini_tool",
    "gemini_tools",
    "gemini_usage",
    "read_gemini",
    "response_text",
    "response_value",
    "tools_body",
]

GEMINI_METHODS = ("generateContent", "streamGenerateContent")
"""The model-call methods the wire layer reads (`countTokens` and the rest are not calls)."""
SYNTHETIC_ID_PREFIX = "gemini-call-"
"""Prefix of the ids given to calls the model sent without one (never written back)."""

_PATH = re.compile(r"/models/(?P<model>[^/:?]+):(?P<method>[A-Za-z]+)$")


@dataclass(frozen=True, slots=True)
class GeminiPath:
    """What a Gemini endpoint path names.

    Attributes:
        model: the model id (`gemini-2.5-flash`).
        method: `generateContent`, `streamGenerateContent`, `countTokens`, ...
    """

    model: str
    method: str

    @property
    def streamed(self) -> bool:
        """The method answers with a stream."""
        return self.method == "streamGenerateContent"

    @property
    def call(self) -> bool:
        """The method is a model call (a body the wire layer reads)."""
        return self.method in GEMINI_METHODS


def gemini_path(path: str | None) -> GeminiPath | None:
    """The model and method of a Gemini API or Vertex path (None for any other path)."""
    if not path:
        return None
    found = _PATH.search(path.split("?", 1)[0].rstrip("/"))
    if found is None:
        return None
    return GeminiPath(found["model"], found["method"])


# --------------------------------------------------------------------------- reading


def _digest(*parts: str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
    return h.hexdigest()[:16]


def call_of(part: Mapping[str, Any], seen: dict[str, int]) -> ToolCall:
    """The tool call of a `functionCall` part (`seen` counts the equal calls read before it:
    the same call made twice in a conversation gets two ids)."""
    call = part.get("functionCall")
    call = call if isinstance(call, Mapping) else {}
    name = str(call.get("name") or "")
    args = call.get("args")
    arguments = json.dumps(args if args is not None else {}, ensure_ascii=False)
    given = call.get("id")
    if isinstance(given, str) and given:
        return ToolCall(given, name, arguments)
    basis = _digest(name, canonical(args if args is not None else {}))
    ordinal = seen.get(basis, 0)
    seen[basis] = ordinal + 1
    return ToolCall(f"{SYNTHETIC_ID_PREFIX}{basis}-{ordinal}", name, arguments)


def response_text(response: Any) -> str:
    """What a `functionResponse.response` says, as text: the value of a lone string field
    (`{"output": "..."}`, Gemini CLI's shape), else the object as JSON."""
    if isinstance(response, Mapping) and len(response) == 1:
        (value,) = response.values()
        if isinstance(value, str):
            return value
    if response is None:
        return ""
    return json.dumps(response, ensure_ascii=False)


def response_value(original: Any, text: str) -> dict[str, Any]:
    """A `functionResponse.response` carrying `text` in the shape of `original` (its lone
    string field keeps its name; otherwise `output`)."""
    if isinstance(original, Mapping) and len(original) == 1:
        ((key, value),) = original.items()
        if isinstance(value, str):
            return {key: text}
    return {"output": text}


def _media_part(data: Mapping[str, Any], inline: bool) -> ContentPart | None:
    mime = str(data.get("mimeType") or "")
    if not mime.startswith("image/"):
        return None
    if inline:
        return ImagePart(url=f"data:{mime};base64,{data.get('data', '')}", media_type=mime)
    return ImagePart(url=str(data.get("fileUri") or ""), media_type=mime)


def part_content(part: Mapping[str, Any]) -> ContentPart:
    """One non-call part as neutral content (unknown parts as their JSON text)."""
    if "text" in part and isinstance(part.get("text"), str):
        if part.get("thought") is True:
            signature = part.get("thoughtSignature")
            return ReasoningPart(part["text"], signature if isinstance(signature, str) else None)
        return TextPart(part["text"])
    for key, inline in (("inlineData", True), ("fileData", False)):
        data = part.get(key)
        if isinstance(data, Mapping):
            media = _media_part(data, inline)
            if media is not None:
                return media
    if part.get("thought") is True and isinstance(part.get("thoughtSignature"), str):
        return ReasoningPart("", part["thoughtSignature"])
    return TextPart(canonical(dict(part)))


@dataclass(frozen=True, slots=True)
class GeminiTurn:
    """The neutral messages of one `contents` entry, with the parts each came from."""

    messages: tuple[Message, ...]
    parts: tuple[tuple[int, ...], ...]


def read_turn(
    entry: Any,
    where: str,
    previous: Sequence[ToolCall],
    reader: Reader,
    seen: dict[str, int] | None = None,
) -> GeminiTurn:
    """One `contents` entry (`previous`: the calls of the model turn before it; `seen`: the
    equal calls counted so far in the body, for synthetic ids)."""
    data = reader.obj(entry, where)
    if data is None:
        return GeminiTurn((), ())
    role = data.get("role", "user")
    if role not in ("user", "model", "function"):
        reader.fail(f"{where}.role must be 'user' or 'model'", where)
        role = "user"
    raw_parts = data.get("parts")
    if not isinstance(raw_parts, list):
        reader.fail(f"{where}.parts must be a list of parts", where)
        raw_parts = []
    parts: list[tuple[int, Mapping[str, Any]]] = []
    for k, part in enumerate(raw_parts):
        found = reader.obj(part, f"{where}.parts[{k}]")
        if found is not None:
            parts.append((k, found))
    if role == "model":
        content: list[ContentPart] = []
        calls: list[ToolCall] = []
        seen = {} if seen is None else seen
        for _, part in parts:
            if isinstance(part.get("functionCall"), Mapping):
                calls.append(call_of(part, seen))
            else:
                content.append(part_content(part))
        message = Message(role="assistant", content=join_content(content), tool_calls=tuple(calls))
        return GeminiTurn((message,), (tuple(k for k, _ in parts),))
    messages: list[Message] = []
    origins: list[tuple[int, ...]] = []
    rest: list[tuple[int, Mapping[str, Any]]] = []
    pairing = _Pairing(previous)
    for k, part in parts:
        result = part.get("functionResponse")
        if not isinstance(result, Mapping):
            rest.append((k, part))
            continue
        name = str(result.get("name") or "")
        call_id = pairing.pair(result, name)
        messages.append(
            Message(
                role="tool",
                content=response_text(result.get("response")),
                tool_call_id=call_id,
                name=name or None,
            )
        )
        origins.append((k,))
    if rest or not parts:
        content = [part_content(p) for _, p in rest]
        messages.append(Message(role="user", content=join_content(content)))
        origins.append(tuple(k for k, _ in rest))
    return GeminiTurn(tuple(messages), tuple(origins))


class _Pairing:
    """Pairs the results of one user turn with the calls of the model turn before it, in
    time linear in both (each call is looked up by id or taken from its name's queue once)."""

    def __init__(self, calls: Sequence[ToolCall]) -> None:
        self._calls = calls
        self._used: set[int] = set()
        self._by_id: dict[str, int] = {}
        self._by_name: dict[str, deque[int]] = {}
        for i, call in enumerate(calls):
            self._by_id.setdefault(call.id, i)
            self._by_name.setdefault(call.name, deque()).append(i)

    def pair(self, result: Mapping[str, Any], name: str) -> str:
        """The id of the call a `functionResponse` answers: the call of the turn before
        with its id, else the next unanswered call of its name, else a synthetic id."""
        given = result.get("id")
        if isinstance(given, str) and given:
            i = self._by_id.get(given)
            if i is not None and i not in self._used:
                self._used.add(i)
                return self._calls[i].id
        queue = self._by_name.get(name)
        while queue:
            i = queue.popleft()
            if i not in self._used:
                self._used.add(i)
                return self._calls[i].id
        if isinstance(given, str) and given:
            return given
        return f"{SYNTHETIC_ID_PREFIX}{_digest('orphan', name)}"


def system_texts(body: Mapping[str, Any], reader: Reader) -> tuple[str, ...]:
    """The text parts of `systemInstruction` (a Content, or a plain string)."""
    raw = body.get("systemInstruction", body.get("system_instruction"))
    if raw is None:
        return ()
    if isinstance(raw, str):
        return (raw,)
    data = reader.obj(raw, "systemInstruction")
    if data is None:
        return ()
    parts = data.get("parts")
    if not isinstance(parts, list):
        reader.fail("systemInstruction.parts must be a list of parts", "systemInstruction")
        return ()
    return tuple(str(p.get("text", "")) for p in parts if isinstance(p, Mapping) and "text" in p)


def gemini_tools(
    body: Mapping[str, Any], reader: Reader | None = None
) -> tuple[dict[str, Any], ...]:
    """The body's tools flattened: each function declaration as its own entry (named, as the
    tool-ordering code reads them), each built-in tool (`googleSearch`, `codeExecution`) as
    the tool object without its declarations."""
    reader = reader or Reader(strict=False)
    raw = body.get("tools")
    if raw is None:
        return ()
    if not isinstance(raw, list):
        reader.fail("tools must be a list", "tools")
        return ()
    out: list[dict[str, Any]] = []
    for i, tool in enumerate(raw):
        found = reader.obj(tool, f"tools[{i}]")
        if found is None:
            continue
        declarations = found.get("functionDeclarations", found.get("function_declarations"))
        if isinstance(declarations, list):
            out.extend(dict(d) for d in declarations if isinstance(d, Mapping))
        others = {
            k: v
            for k, v in found.items()
            if k not in ("functionDeclarations", "function_declarations")
        }
        if others:
            out.append(others)
    return tuple(out)


def tools_body(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Flattened tools (`gemini_tools`) as a request's `tools`: the declarations in one tool
    object, in their order, then the built-in tools."""
    declarations = [dict(t) for t in tools if "name" in t]
    others = [dict(t) for t in tools if "name" not in t]
    head = [{"functionDeclarations": declarations}] if declarations else []
    return [*head, *others]


def gemini_tool(schema: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI function-tool schema (nested or flat) as a Gemini function declaration (its
    JSON schema in `parametersJsonSchema`, taken as is)."""
    function = schema.get("function")
    spec: Mapping[str, Any] = function if isinstance(function, Mapping) else schema
    out: dict[str, Any] = {"name": str(spec.get("name", ""))}
    if spec.get("description"):
        out["description"] = str(spec["description"])
    parameters = spec.get("parameters")
    schema_copy = json.loads(json.dumps(parameters)) if isinstance(parameters, Mapping) else None
    out["parametersJsonSchema"] = schema_copy or {"type": "object"}
    return out


def read_gemini(
    body: Mapping[str, Any], *, strict: bool = True
) -> tuple[str | None, list[Message], list[tuple[int, tuple[int, ...]]]]:
    """System prompt, messages and, per message, its origin (content index, part indices).

    Raises:
        WireError: when strict and the body is not a `generateContent` request (no
            `contents` list, a malformed turn or part).
    """
    reader = Reader(strict)
    raw = body.get("contents")
    if not isinstance(raw, list):
        if strict:
            raise WireError("a Gemini body needs a 'contents' list", "contents")
        raw = []
    texts = system_texts(body, reader)
    messages: list[Message] = []
    origins: list[tuple[int, tuple[int, ...]]] = []
    previous: tuple[ToolCall, ...] = ()
    seen: dict[str, int] = {}
    for i, entry in enumerate(raw):
        turn = read_turn(entry, f"contents[{i}]", previous, reader, seen)
        for message, parts in zip(turn.messages, turn.parts, strict=True):
            messages.append(message)
            origins.append((i, parts))
        if turn.messages and turn.messages[0].role == "assistant":
            previous = turn.messages[0].tool_calls
        elif turn.messages:
            previous = ()
    return ("\n\n".join(texts) if texts else None), messages, origins


# --------------------------------------------------------------------------- writing


def _image(part: ImagePart) -> dict[str, Any]:
    if part.url.startswith("data:") and ";base64," in part.url:
        media, data = part.url[5:].split(";base64,", 1)
        return {"inlineData": {"mimeType": media, "data": data}}
    return {"fileData": {"mimeType": part.media_type or "image/png", "fileUri": part.url}}


def content_parts(parts: Sequence[ContentPart]) -> list[dict[str, Any]]:
    """Neutral parts as Gemini parts (reasoning as `thought` parts with their signature)."""
    out: list[dict[str, Any]] = []
    for part in parts:
        if isinstance(part, TextPart):
            out.append({"text": part.text})
        elif isinstance(part, ReasoningPart):
            made: dict[str, Any] = {"text": part.text, "thought": True}
            if part.signature is not None:
                made["thoughtSignature"] = part.signature
            out.append(made)
        else:
            out.append(_image(part))
    return out


def call_part(call: ToolCall) -> dict[str, Any]:
    """A `functionCall` part (a synthetic id is not written: the model never sent one)."""
    try:
        args = json.loads(call.arguments)
    except (TypeError, ValueError):
        args = {}
    inner: dict[str, Any] = {"name": call.name, "args": args if isinstance(args, dict) else {}}
    if not call.id.startswith(SYNTHETIC_ID_PREFIX):
        inner["id"] = call.id
    return {"functionCall": inner}


def result_part(message: Message) -> dict[str, Any]:
    """A `functionResponse` part answering a tool message (`{"output": text}`)."""
    inner: dict[str, Any] = {"name": message.name or ""}
    call_id = str(message.tool_call_id or "")
    if call_id and not call_id.startswith(SYNTHETIC_ID_PREFIX):
        inner["id"] = call_id
    inner["response"] = {"output": message.text}
    return {"functionResponse": inner}


def gemini_content(message: Message) -> dict[str, Any]:
    """One neutral message as a `contents` entry (a tool message as a user turn holding its
    `functionResponse`)."""
    if message.role == "assistant":
        parts = content_parts(message.parts) + [call_part(c) for c in message.tool_calls]
        return {"role": "model", "parts": parts}
    if message.role == "tool":
        return {"role": "user", "parts": [result_part(message)]}
    return {"role": "user", "parts": content_parts(message.parts)}


def gemini_contents(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Neutral messages as `contents`: consecutive user-side messages (tool results among
    them) share one user turn, as Gemini expects the results of one turn together."""
    out: list[dict[str, Any]] = []
    for message in messages:
        made = gemini_content(message)
        if out and made["role"] == "user" and out[-1]["role"] == "user":
            out[-1] = {**out[-1], "parts": [*out[-1]["parts"], *made["parts"]]}
            continue
        out.append(made)
    return out


def gemini_usage(usage: Usage) -> dict[str, Any]:
    """A `usageMetadata` block: `promptTokenCount` counts every prompt token (cached ones
    too), `candidatesTokenCount` the reply without its thoughts."""
    out: dict[str, Any] = {"promptTokenCount": usage.input_tokens}
    if usage.cached_tokens:
        out["cachedContentTokenCount"] = usage.cached_tokens
    out["candidatesTokenCount"] = max(0, usage.output_tokens - usage.reasoning_tokens)
    if usage.reasoning_tokens:
        out["thoughtsTokenCount"] = usage.reasoning_tokens
    out["totalTokenCount"] = usage.input_tokens + usage.output_tokens
    return out


FinishReason = Literal["STOP", "MAX_TOKENS"]


def gemini_response(
    reply: Message,
    *,
    id: str,
    model: str,
    usage: Mapping[str, Any],
    finish: FinishReason = "STOP",
) -> dict[str, Any]:
    """A `GenerateContentResponse` carrying `reply` (thoughts, text and calls, in order)."""
    parts = content_parts(reply.parts) + [call_part(c) for c in reply.tool_calls]
    return {
        "candidates": [
            {
                "content": {"role": "model", "parts": parts or [{"text": ""}]},
                "finishReason": finish,
                "index": 0,
            }
        ],
        "usageMetadata": dict(usage),
        "modelVersion": model,
        "responseId": id,
    }


def _pieces(text: str, size: int = STREAM_PIECE_CHARS) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def gemini_chunks(
    reply: Message, *, id: str, model: str, usage: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """The `streamGenerateContent` chunks of `reply`: text and thought pieces (a thought's
    signature on its last piece), each call whole in one chunk, the finish reason and the
    whole usage on the last chunk (earlier chunks carry the prompt side only)."""
    head = {"promptTokenCount": usage.get("promptTokenCount", 0)}
    if usage.get("cachedContentTokenCount"):
        head["cachedContentTokenCount"] = usage["cachedContentTokenCount"]
    pieces: list[dict[str, Any]] = []
    for part in content_parts(reply.parts):
        text = part.get("text")
        if not isinstance(text, str):
            pieces.append(part)
            continue
        cut = _pieces(text)
        for n, piece in enumerate(cut):
            made = {**part, "text": piece}
            if n < len(cut) - 1:
                made.pop("thoughtSignature", None)
            pieces.append(made)
    pieces.extend(call_part(c) for c in reply.tool_calls)
    if not pieces:
        pieces = [{"text": ""}]
    chunks: list[dict[str, Any]] = []
    for n, chunk_part in enumerate(pieces):
        content = {"role": "model", "parts": [chunk_part]}
        candidate: dict[str, Any] = {"content": content, "index": 0}
        last = n == len(pieces) - 1
        if last:
            candidate["finishReason"] = "STOP"
        chunks.append(
            {
                "candidates": [candidate],
                "usageMetadata": dict(usage) if last else dict(head),
                "modelVersion": model,
                "responseId": id,
            }
        )
    return chunks
