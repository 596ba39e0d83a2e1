"""A scripted Gemini server on loopback that enforces the API's rules the proxy must keep.

It answers `:generateContent` and `:streamGenerateContent?alt=sse` with the next scripted
reply, gives every `functionCall` part it sends a `thoughtSignature`, logs each request
(path, query, headers, body) and refuses with 400 `INVALID_ARGUMENT` what the real API
refuses (`cachepilot_bench.gemini_rules`):

- a request naming a `cachedContent` that also sends `systemInstruction`, `tools` or
  `toolConfig`;
- a model turn whose call parts lost the signature this server gave them, or changed it;
- a model turn with calls not followed by one user turn holding exactly one
  `functionResponse` per call, in call order (names, and ids where the call has one);
- a request that does not end with a user turn.

Usage is reported like implicit caching: `promptTokenCount` is the body's size / 4, and
`cachedContentTokenCount` the longest prefix (of the canonical JSON of system instruction,
tools and contents) shared with an earlier request, / 4.
"""

from __future__ import annotations

import base64
import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from cachepilot.messages import Message
from cachepilot.usage import Usage
from cachepilot.wire import WireError, gemini_chunks, gemini_response, gemini_usage
from cachepilot_bench.gemini_rules import GeminiRules

Reply = Message | Callable[[dict[str, Any]], Message]


@dataclass
class Logged:
    """One request the server received."""

    path: str
    query: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class GeminiUpstream:
    """The server's script and log (see the module docstring)."""

    replies: list[Reply]
    requests: list[Logged] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    rules: GeminiRules = field(default_factory=GeminiRules)
    """Gemini's request rules, with the signatures this server issued."""
    prefixes: list[str] = field(default_factory=list)
    issued: int = 0
    port: int = 0

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def bodies(self) -> list[dict[str, Any]]:
        return [r.body for r in self.requests]

    def assert_append_only(self) -> None:
        """Each body extends the one before: same system instruction and tools, and the
        earlier contents as its prefix, byte for byte."""
        for before, after in itertools.pairwise(self.bodies()):
            assert after.get("systemInstruction") == before.get("systemInstruction")
            assert after.get("tools") == before.get("tools")
            n = len(before["contents"])
            assert json.dumps(after["contents"][:n]) == json.dumps(before["contents"])

    # ------------------------------------------------------------------ rules

    def check(self, body: dict[str, Any]) -> str | None:
        """Why the real API would refuse `body` (None: it would take it): the bench's
        `GeminiRules`, with the signatures this server issued."""
        try:
            self.rules.check(body)
        except WireError as exc:
            return str(exc)
        return None

    # ------------------------------------------------------------------ answering

    def reply_to(self, body: dict[str, Any]) -> Message:
        if not self.replies:
            raise AssertionError("the scripted upstream ran out of replies")
        reply = self.replies.pop(0)
        return reply(body) if callable(reply) else reply

    def usage(self, body: dict[str, Any]) -> dict[str, Any]:
        text = json.dumps(
            [body.get("systemInstruction"), body.get("tools"), body.get("contents")],
            sort_keys=True,
        )
        best = 0
        for earlier in self.prefixes:
            n = 0
            for a, b in zip(earlier, text, strict=False):
                if a != b:
                    break
                n += 1
            best = max(best, n)
        self.prefixes.append(text)
        prompt = len(text) // 4
        return gemini_usage(Usage(prompt, min(prompt, best // 4), 0, 20, 0))

    def sign(self, parts: list[dict[str, Any]]) -> None:
        for part in parts:
            if "functionCall" in part:
                # Base64, as the API sends signatures (the SDK decodes them to bytes).
                self.issued += 1
                signature = base64.b64encode(f"sig-{self.issued}".encode()).decode()
                part["thoughtSignature"] = signature
        self.rules.issued(parts)


def _app(state: GeminiUpstream) -> Starlette:
    async def generate(request: Request) -> Response:
        path = request.url.path
        body = json.loads(await request.body())
        state.requests.append(
            Logged(path, request.url.query, dict(request.headers), json.loads(json.dumps(body)))
        )
        refused = state.check(body)
        if refused is not None:
            state.refusals.append(refused)
            error = {"code": 400, "message": refused, "status": "INVALID_ARGUMENT"}
            return JSONResponse({"error": error}, status_code=400)
        reply = state.reply_to(body)
        usage = state.usage(body)
        model = path.rsplit("/", 1)[-1].split(":", 1)[0]
        rid = f"resp-{len(state.requests)}"
        if path.endswith(":streamGenerateContent"):
            chunks = gemini_chunks(reply, id=rid, model=model, usage=usage)
            for chunk in chunks:
                state.sign(chunk["candidates"][0]["content"]["parts"])
            data = "".join(f"data: {json.dumps(c)}\r\n\r\n" for c in chunks)
            return Response(data, media_type="text/event-stream")
        payload = gemini_response(reply, id=rid, model=model, usage=usage)
        state.sign(payload["candidates"][0]["content"]["parts"])
        return JSONResponse(payload)

    return Starlette(routes=[Route("/{path:path}", generate, methods=["POST"])])


@contextmanager
def gemini_upstream(replies: list[Reply]) -> Iterator[GeminiUpstream]:
    """Serve a scripted Gemini upstream on loopback until the block ends."""
    state = GeminiUpstream(list(replies))
    server = uvicorn.Server(
        uvicorn.Config(_app(state), host="127.0.0.1", port=0, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the Gemini upstream did not start")
        time.sleep(0.01)
    state.port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield state
    finally:
        server.should_exit = True
        thread.join(timeout=10)
