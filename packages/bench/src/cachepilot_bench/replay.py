"""The replay provider: an OpenAI-compatible endpoint that replays a recorded session.

It serves Chat Completions, Responses and Anthropic Messages (streaming too) on loopback.
Each model request gets the next recorded assistant turn as its reply, and the usage it reports
(`cached_tokens`…) is what the cache simulator computes on the request body actually
received. With tools that return the recorded outputs (`ReplayScript.output_for`), a real
agent framework runs a recorded session end to end, and the cost of what the framework
really serialized is measured, with or without cachepilot. It is not a language model: the
replies are the recording, whatever the request says.

```python
from openai import OpenAI
from cachepilot_bench.demo_workload import build_demo_session
from cachepilot_bench.replay import ReplayProvider, ReplayScript

script = ReplayScript.from_session(build_demo_session())
with ReplayProvider(script) as provider:
    client = OpenAI(base_url=provider.base_url, api_key=provider.api_key)
    ...  # run the agent
    provider.records[-1].usage.cached_tokens
```
"""

from __future__ import annotations

import base64
import json
import logging
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from cachepilot.messages import Message, ReasoningPart
from cachepilot.sim.engine import CacheSimulator
from cachepilot.sim.profiles import DEFAULT_PROFILE, LOGICAL_STEP_SECONDS, ProviderProfile
from cachepilot.sim.render import Request
from cachepilot.tokens import TokenCounter, get_counter
from cachepilot.usage import Usage
from cachepilot.wire import (
    Api,
    WireError,
    anthropic_events,
    anthropic_message,
    anthropic_usage,
    chat_chunks,
    chat_completion,
    chat_usage,
    dumps,
    error_body,
    gemini_chunks,
    gemini_path,
    gemini_response,
    gemini_usage,
    parse_body,
    read_view,
    request_from_chat,
    request_from_responses,
    responses_events,
    responses_input,
    responses_items,
    responses_object,
    responses_usage,
    sse,
)
from cachepilot.wire.anthropic import MAX_CACHE_MARKS, cache_mark_count
from cachepilot_bench.provider_rules import ProviderRules
from cachepilot_bench.replay_server import ReplayHTTPServer, Response

if TYPE_CHECKING:
    from cachepilot_bench.traces.session import Session

__all__ = [
    "FINISHED_TEXT",
    "REPLAY_API_KEY",
    "REPLAY_MODEL",
    "ReplayProvider",
    "ReplayRecord",
    "ReplayScript",
    "ReplayTurn",
    "Responder",
]

logger = logging.getLogger(__name__)

FINISHED_TEXT = "[replay finished: no recorded turn left]"
"""Reply text once every recorded turn was served (no tool calls, so agent loops end)."""
REPLAY_API_KEY = "replay"
"""Placeholder API key for clients that insist on one (any key is accepted)."""
REPLAY_MODEL = "cachepilot-replay"
"""Model id listed by `GET /v1/models` and echoed when a request names none."""

Responder = Callable[[Api, Mapping[str, Any], Request], Message]
"""`(api, raw body, parsed request) -> assistant reply`: a scripted model that decides each
reply from the request it receives instead of serving the turns in order."""

_CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")
_RESPONSES_PATHS = ("/v1/responses", "/responses")
_MESSAGES_PATHS = ("/v1/messages", "/messages")
_MODELS_PATHS = ("/v1/models", "/models")


@dataclass(frozen=True, slots=True)
class ReplayTurn:
    """One recorded model reply.

    Raises:
        ValueError: when the message is not an assistant message, or a field is out of range.
    """

    message: Message
    """The reply: an assistant message (text and/or tool calls with their ids; reasoning
    parts allowed)."""
    timestamp: float | None = None
    """Unix time of the call; None lets the simulator's logical clock advance 10 s."""
    output_tokens: int | None = None
    """Output tokens to report; None counts the reply's tokens."""

    def __post_init__(self) -> None:
        if not isinstance(self.message, Message) or self.message.role != "assistant":
            raise ValueError("a replay turn needs an assistant Message")
        if self.timestamp is not None and not math.isfinite(self.timestamp):
            raise ValueError(f"replay turn timestamp must be finite, got {self.timestamp!r}")
        if self.output_tokens is not None and self.output_tokens < 0:
            raise ValueError(f"replay turn output_tokens must be >= 0, got {self.output_tokens}")


@dataclass(frozen=True, slots=True, eq=False)
class ReplayScript:
    """The turns a replay provider serves, with the recorded tool outputs.

    Raises:
        ValueError: on a turn that is not a `ReplayTurn`, a non-string tool output or a tool
            schema that is not an object.
    """

    turns: Sequence[ReplayTurn]
    """Replies, in the order they are served."""
    tool_outputs: Mapping[str, str] = field(default_factory=dict)
    """Recorded tool results by tool call id (what replay tools return)."""
    tools: Sequence[Mapping[str, Any]] = ()
    """Tool schemas the recorded agent had (chat function format)."""
    system: str | None = None
    """The recorded system prompt, when known."""
    prompts: Sequence[tuple[int, Message]] = ()
    """Recorded user messages, each with the index of the first turn that follows it."""

    def __post_init__(self) -> None:
        turns = tuple(self.turns)
        for i, turn in enumerate(turns):
            if not isinstance(turn, ReplayTurn):
                raise ValueError(f"turns[{i}] must be a ReplayTurn, not {type(turn).__name__}")
        outputs = dict(self.tool_outputs)
        for call_id, output in outputs.items():
            if not isinstance(output, str):
                raise ValueError(f"tool output of {call_id!r} must be a str")
        tools = tuple(self.tools)
        for i, tool in enumerate(tools):
            if not isinstance(tool, Mapping):
                raise ValueError(f"tools[{i}] must be a JSON object")
        object.__setattr__(self, "turns", turns)
        object.__setattr__(self, "tool_outputs", outputs)
        object.__setattr__(self, "tools", tools)
        object.__setattr__(self, "prompts", tuple(self.prompts))

    def __len__(self) -> int:
        return len(self.turns)

    def output_for(self, call_id: str) -> str | None:
        """The recorded output of tool call `call_id` (None when not recorded)."""
        return self.tool_outputs.get(call_id)

    def tool_schemas(self) -> list[dict[str, Any]]:
        """Tool schemas in chat function format (`{"type": "function", "function": {...}}`).

        Responses-style flat schemas are converted; copies, safe to modify.
        """
        out: list[dict[str, Any]] = []
        for tool in self.tools:
            copy: dict[str, Any] = json.loads(json.dumps(tool))
            if "function" not in copy and "name" in copy:
                flat = {k: v for k, v in copy.items() if k != "type"}
                copy = {"type": "function", "function": flat}
            out.append(copy)
        return out

    @classmethod
    def from_session(cls, session: Session) -> ReplayScript:
        """A script replaying a recorded session.

        Assistant messages become turns (timestamps and output tokens from `session.calls`
        when recorded), tool results become `tool_outputs` by call id, and the tools are the
        session's schemas or, when it has none, permissive schemas inferred from the calls.
        """
        turns: list[ReplayTurn] = []
        outputs: dict[str, str] = {}
        prompts: list[tuple[int, Message]] = []
        for index, message in enumerate(session.messages):
            if message.role == "assistant":
                call = session.call_for(index)
                tokens = call.usage.output_tokens if call and call.usage else 0
                turns.append(
                    ReplayTurn(
                        message=message,
                        timestamp=call.timestamp if call else None,
                        output_tokens=tokens or None,
                    )
                )
            elif message.role == "tool" and message.tool_call_id:
                outputs[message.tool_call_id] = message.text
            elif message.role == "user":
                prompts.append((len(turns), message))
        tools = session.tools or _infer_tools(m for m in session.messages)
        head = [m.text for m in _leading_system(session.messages)]
        system = "\n\n".join(head) if head else None
        return cls(turns=turns, tool_outputs=outputs, tools=tools, system=system, prompts=prompts)


def _leading_system(messages: Sequence[Message]) -> list[Message]:
    out: list[Message] = []
    for message in messages:
        if message.role != "system":
            break
        out.append(message)
    return out


def _infer_tools(messages: Any) -> list[dict[str, Any]]:
    """Permissive schemas (any argument allowed) for the tools a transcript calls."""
    seen: dict[str, dict[str, Any]] = {}
    for message in messages:
        for call in message.tool_calls:
            properties = seen.setdefault(call.name, {})
            for name in call.parsed_arguments():
                properties.setdefault(name, {})
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": f"Replays the recorded results of `{name}`.",
                "parameters": {
                    "type": "object",
                    "properties": properties,
                    "additionalProperties": True,
                },
            },
        }
        for name, properties in seen.items()
    ]


@dataclass(frozen=True, slots=True, eq=False)
class ReplayRecord:
    """One model request the replay provider served."""

    index: int
    """0-based position among the requests served since the last `load`."""
    api: Api
    """`chat`, `responses` or `anthropic`."""
    stream: bool
    timestamp: float
    """Simulated time of the request (the turn's timestamp or the logical clock)."""
    request: Request
    """The body as the simulator saw it."""
    usage: Usage
    """Simulated usage (cache reads, writes, output and reasoning tokens)."""
    prefix_extends: bool
    """The rendered request starts with the previous one's (no prefix break)."""
    reply: Message
    """The reply served."""
    body: dict[str, Any]
    """The raw JSON body received."""
    url_path: str = ""
    """Path the request was posted to."""
    wire_usage: dict[str, Any] = field(default_factory=dict)
    """The usage block as returned on the wire."""
    turn: int | None = None
    """Index of the script turn served; None once the script was exhausted."""
    response_id: str = ""
    """Id of the completion / response returned."""
    response: dict[str, Any] = field(default_factory=dict)
    """The reply as a whole JSON body (`chat.completion` or `response`; for a stream, the
    body the stream adds up to)."""


class ReplayProvider:
    """Serve a `ReplayScript` as an OpenAI-compatible endpoint on 127.0.0.1.

    Endpoints: `POST /v1/chat/completions`, `POST /v1/responses`, `POST /v1/messages` (the
    Anthropic Messages API; all three with `stream`), Gemini's
    `POST /v1beta/models/{model}:generateContent` and `:streamGenerateContent` (server-sent
    events; every call part carries a `thoughtSignature`) and `:countTokens`, and
    `GET /v1/models`. Messages usage
    follows the request's `cache_control` breakpoints under a breakpoint profile
    (`anthropic`, `anthropic-1h`). Each model request consumes the next turn; requests are
    handled one at a time, so the turn order is the arrival order. Usage comes from a
    `CacheSimulator` that sees every request body.

    Args:
        script: the turns to serve.
        profile: provider cache profile (name or `ProviderProfile`).
        hidden_prefix_tokens: opaque tokens the simulator prepends to every request.
        counter: token counter for the simulator (default: the shared o200k_base one).
        responder: when given, every model request is answered by `responder(api, body,
            request)` (a scripted model reading what it is sent); the script's turns are not
            served.
        rules: when given, request bodies are checked against the providers' documented rules
            and refused with a 400 in the provider's error shape, as the real API does.

    Raises:
        ValueError: on an unknown profile or a negative hidden prefix.
    """

    api_key = REPLAY_API_KEY
    """Any key is accepted; this one is for clients that demand one."""

    def __init__(
        self,
        script: ReplayScript,
        profile: ProviderProfile | str = DEFAULT_PROFILE,
        hidden_prefix_tokens: int = 0,
        *,
        counter: TokenCounter | None = None,
        responder: Responder | None = None,
        rules: ProviderRules | None = None,
    ) -> None:
        self._responder = responder
        self._rules = rules
        self._counter = counter or get_counter()
        self._profile = profile
        self._hidden = hidden_prefix_tokens
        self._lock = threading.RLock()
        self._server: ReplayHTTPServer | None = None
        self._script = script
        self._sim = CacheSimulator(profile, self._counter, hidden_prefix_tokens)
        self._next = 0
        self._records: list[ReplayRecord] = []
        self._conversations: dict[str, tuple[Message, ...]] = {}
        self._warned_exhausted = False

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> ReplayProvider:
        """Bind a free loopback port and serve in a daemon thread (idempotent)."""
        with self._lock:
            if self._server is None:
                self._server = ReplayHTTPServer(self._handle)
                self._server.start()
                logger.info(
                    "replay provider serving %d turns at %s", len(self._script), self.base_url
                )
        return self

    def close(self) -> None:
        """Stop serving (idempotent); records stay readable."""
        with self._lock:
            server, self._server = self._server, None
        if server is not None:
            server.stop()

    def __enter__(self) -> ReplayProvider:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> ReplayProvider:
        return self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ------------------------------------------------------------------ state

    @property
    def base_url(self) -> str:
        """`http://127.0.0.1:PORT/v1`.

        Raises:
            RuntimeError: when the provider is not started.
        """
        server = self._server
        if server is None:
            raise RuntimeError(
                "the replay provider is not serving: use `with ReplayProvider(...)` or start()"
            )
        return f"http://127.0.0.1:{server.port}/v1"

    @property
    def script(self) -> ReplayScript:
        """The script being served."""
        return self._script

    @property
    def simulator(self) -> CacheSimulator:
        """The cache simulator behind the usage (its totals, last record…)."""
        return self._sim

    @property
    def records(self) -> list[ReplayRecord]:
        """One record per model request served since the last `load`, in order (a copy)."""
        with self._lock:
            return list(self._records)

    @property
    def remaining(self) -> int:
        """Turns not served yet."""
        with self._lock:
            return max(0, len(self._script) - self._next)

    def clock(self) -> float:
        """Simulated time of the next request: the next turn's timestamp when recorded, else
        the logical clock (previous time + `LOGICAL_STEP_SECONDS`, 0.0 at the start)."""
        with self._lock:
            if self._next < len(self._script):
                stamp = self._script.turns[self._next].timestamp
                if stamp is not None:
                    return float(stamp)
            now = self._sim.time
            return 0.0 if now is None else now + LOGICAL_STEP_SECONDS

    def load(self, script: ReplayScript) -> None:
        """Serve `script` from its first turn, with a fresh simulator and no records."""
        with self._lock:
            self._script = script
            self._sim = CacheSimulator(self._profile, self._counter, self._hidden)
            self._next = 0
            self._records = []
            self._conversations = {}
            self._warned_exhausted = False

    def write_log(self, path: str | Path) -> Path:
        """Write the request log as JSONL (one line per served model request).

        Each line: `{"api", "url_path", "timestamp", "request", "usage", "response", "index",
        "stream"}` where `request` is the raw body received, `usage` the usage block returned
        and `response` the reply as a whole body (what a stream adds up to).
        """
        target = Path(path)
        lines = [
            dumps(
                {
                    "api": r.api,
                    "url_path": r.url_path,
                    "timestamp": r.timestamp,
                    "request": r.body,
                    "usage": r.wire_usage,
                    "response": r.response,
                    "index": r.index,
                    "stream": r.stream,
                }
            )
            for r in self.records
        ]
        target.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        return target

    # ------------------------------------------------------------------ serving

    def _handle(self, method: str, path: str, raw: bytes) -> Response:
        """Answer one HTTP request (called by the server, one at a time)."""
        path = path.split("?", 1)[0].rstrip("/") or "/"
        if method == "GET" and path in _MODELS_PATHS:
            models = {
                "object": "list",
                "data": [
                    {"id": REPLAY_MODEL, "object": "model", "created": 0, "owned_by": "cachepilot"}
                ],
            }
            return _json(200, models)
        gemini = gemini_path(path)
        if gemini is not None and gemini.call:
            return self._parse_and_serve("gemini", method, path, raw)
        if gemini is not None and gemini.method == "countTokens" and method == "POST":
            return self._count_tokens(path, raw)
        if path in _CHAT_PATHS or path in _RESPONSES_PATHS or path in _MESSAGES_PATHS:
            api: Api = (
                "chat"
                if path in _CHAT_PATHS
                else "responses"
                if path in _RESPONSES_PATHS
                else "anthropic"
            )
            return self._parse_and_serve(api, method, path, raw)
        return _json(
            404,
            error_body(
                f"unknown path {path!r}: the replay provider serves POST /v1/chat/completions, "
                "POST /v1/responses, POST /v1/messages and GET /v1/models",
                kind="not_found_error",
            ),
        )

    def _count_tokens(self, path: str, raw: bytes) -> Response:
        """Gemini `countTokens`: the prompt tokens of `contents` (or of a whole
        `generateContentRequest`) as this provider renders them; nothing is served."""
        try:
            body = json.loads(raw.decode("utf-8"))
            if not isinstance(body, dict):
                raise ValueError("not a JSON object")
            inner = body.get("generateContentRequest")
            request = parse_body(inner if isinstance(inner, dict) else body, api="gemini",
                                 url_path=path).request  # fmt: skip
        except (UnicodeDecodeError, ValueError) as exc:
            return _error("gemini", 400, f"countTokens body is not readable: {exc}")
        total = self._sim.render(request).total_tokens
        return _json(200, {"totalTokens": total})

    def _parse_and_serve(self, api: Api, method: str, path: str, raw: bytes) -> Response:
        if method != "POST":
            return _error(api, 405, f"{method} is not allowed on {path}; use POST")
        try:
            body = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            return _error(api, 400, f"request body is not valid JSON: {exc}")
        if not isinstance(body, dict):
            return _error(api, 400, "request body must be a JSON object")
        with self._lock:
            try:
                return self._serve(api, path, body)
            except WireError as exc:
                logger.info("replay provider rejected a %s request: %s", api, exc)
                return _error(api, 400, str(exc), param=exc.param)

    def _open_calls(self, api: Api, body: Mapping[str, Any]) -> frozenset[str]:
        """The calls a Responses body's `previous_response_id` leaves for it to answer."""
        previous = body.get("previous_response_id") if api == "responses" else None
        if not isinstance(previous, str) or previous not in self._conversations:
            return frozenset()
        return _open_calls_of(self._conversations[previous])

    def _serve(self, api: Api, path: str, body: dict[str, Any]) -> Response:
        stream = body.get("stream") is True
        if api == "gemini":
            found = gemini_path(path)
            stream = found is not None and found.streamed
        if self._rules is not None:
            self._rules.check(api, body, self._open_calls(api, body))
        conversation: tuple[Message, ...] = ()
        breakpoints = None
        if api == "chat":
            request = request_from_chat(body)
        elif api == "gemini":
            read_view(body, "gemini")  # strict checks
            request = parse_body(body, api="gemini", url_path=path).request
        elif api == "anthropic":
            read_view(body, "anthropic")  # strict checks; `parse_body` reads the marks too
            marks = cache_mark_count(body)
            if marks > MAX_CACHE_MARKS:
                raise WireError(
                    f"A maximum of {MAX_CACHE_MARKS} blocks with cache_control may be "
                    f"provided. Found {marks}.",
                    "cache_control",
                )
            request = parse_body(body, api="anthropic").request
            breakpoints = request.cache_breakpoints
        else:
            history: tuple[Message, ...] = ()
            previous = body.get("previous_response_id")
            if previous is not None:
                if not isinstance(previous, str) or previous not in self._conversations:
                    raise WireError(
                        f"previous response {previous!r} was not served by this replay provider",
                        "previous_response_id",
                    )
                history = self._conversations[previous]
            request = request_from_responses(body, history=history)
            conversation = (*history, *responses_items(body.get("input")))
        index = len(self._records)
        turn: int | None = self._next if self._next < len(self._script) else None
        if self._responder is not None:
            reply = self._responder(api, body, request)
            timestamp, output_tokens, turn = None, None, index
        elif turn is not None:
            served = self._script.turns[turn]
            reply, timestamp, output_tokens = (
                served.message,
                served.timestamp,
                served.output_tokens,
            )
            self._next += 1
        else:
            reply, timestamp, output_tokens = (
                Message(role="assistant", content=FINISHED_TEXT),
                None,
                None,
            )
            if not self._warned_exhausted:
                self._warned_exhausted = True
                logger.warning(
                    "replay provider: all %d recorded turns served; answering %r from now on",
                    len(self._script),
                    FINISHED_TEXT,
                )
        request = Request(
            system=request.system,
            messages=request.messages,
            tools=request.tools,
            timestamp=timestamp,
            model=request.model,
            cache_breakpoints=breakpoints,
        )
        if output_tokens is None:
            output_tokens = self._counter.count_message(reply)
        simulated = self._sim.submit(request, output_tokens)
        last = self._sim.last
        reasoning = sum(
            self._counter.count(p.text) for p in reply.parts if isinstance(p, ReasoningPart)
        )
        usage = Usage(
            input_tokens=simulated.input_tokens,
            cached_tokens=simulated.cached_tokens,
            cache_write_tokens=simulated.cache_write_tokens,
            output_tokens=simulated.output_tokens,
            reasoning_tokens=min(reasoning, simulated.output_tokens),
        )
        now = last.timestamp if last is not None else 0.0
        model = request.model or REPLAY_MODEL
        if api == "chat":
            response_id = f"chatcmpl-replay-{index:05d}"
            wire_usage = chat_usage(usage, report_writes=self._sim.profile.bills_writes)
            created = int(now)
            final = chat_completion(
                reply, id=response_id, model=model, created=created, usage=wire_usage
            )
            if stream:
                options = body.get("stream_options")
                include = isinstance(options, dict) and options.get("include_usage") is True
                chunks = chat_chunks(
                    reply,
                    id=response_id,
                    model=model,
                    created=created,
                    usage=wire_usage,
                    include_usage=include,
                )
                response = Response(200, "text/event-stream", sse(chunks, named=False, done=True))
            else:
                response = _json(200, final)
        elif api == "gemini":
            response_id = f"gemini-replay-{index:05d}"
            wire_usage = gemini_usage(usage)
            final = gemini_response(reply, id=response_id, model=model, usage=wire_usage)
            chunks = gemini_chunks(reply, id=response_id, model=model, usage=wire_usage)
            for payloads in ((final,), chunks):
                # Every call part carries a signature, as Gemini 3 sends them (the n-th call
                # of the reply the same one, streamed or not).
                calls = 0
                for payload in payloads:
                    for part in payload["candidates"][0]["content"]["parts"]:
                        if "functionCall" in part:
                            signature = f"sig-replay-{index:05d}-{calls}".encode()
                            part["thoughtSignature"] = base64.b64encode(signature).decode()
                            calls += 1
            if self._rules is not None:
                self._rules.gemini.issued(final["candidates"][0]["content"]["parts"])
            if stream:
                response = Response(200, "text/event-stream", sse(chunks, named=False, done=False))
            else:
                response = _json(200, final)
        elif api == "anthropic":
            response_id = f"msg_replay{index:05d}"
            wire_usage = anthropic_usage(usage)
            final = anthropic_message(reply, id=response_id, model=model, usage=wire_usage)
            if stream:
                events = anthropic_events(reply, id=response_id, model=model, usage=wire_usage)
                response = Response(200, "text/event-stream", sse(events, named=True, done=False))
            else:
                response = _json(200, final)
        else:
            response_id = f"resp_replay{index:05d}"
            wire_usage = responses_usage(usage)
            final = responses_object(
                reply, id=response_id, model=model, created=now, usage=wire_usage, body=body
            )
            if stream:
                events = responses_events(
                    reply, id=response_id, model=model, created=now, usage=wire_usage, body=body
                )
                response = Response(200, "text/event-stream", sse(events, named=True, done=False))
            else:
                response = _json(200, final)
            if self._rules is not None:
                self._rules.issued_reasoning(final.get("output") or [])
            # What `previous_response_id` stands for: the input items and the output items.
            output = responses_items(responses_input([reply]))
            self._conversations[response_id] = (*conversation, *output)
        self._records.append(
            ReplayRecord(
                index=index,
                api=api,
                stream=stream,
                timestamp=now,
                request=request,
                usage=usage,
                prefix_extends=last.prefix_extends if last is not None else True,
                reply=reply,
                body=body,
                url_path=path,
                wire_usage=wire_usage,
                turn=turn,
                response_id=response_id,
                response=final,
            )
        )
        logger.debug(
            "replay provider served %s request %d (turn %s): %d input, %d cached",
            api,
            index,
            turn,
            usage.input_tokens,
            usage.cached_tokens,
        )
        return response


def _open_calls_of(history: tuple[Message, ...]) -> frozenset[str]:
    """Call ids in `history` without a tool message answering them."""
    calls = {c.id for m in history for c in m.tool_calls}
    return frozenset(calls - {m.tool_call_id for m in history if m.tool_call_id})


def _json(status: int, payload: Mapping[str, Any]) -> Response:
    return Response(status, "application/json", dumps(payload).encode("ascii"))


def _error(api: Api, status: int, message: str, param: str | None = None) -> Response:
    """An error body in the API's own shape (Anthropic: `{"type": "error", "error": ...}`;
    Gemini: `{"error": {"code", "message", "status"}}`)."""
    if api == "gemini":
        status_name = "INVALID_ARGUMENT" if status == 400 else "NOT_FOUND"
        return _json(status, {"error": {"code": status, "message": message,
                                        "status": status_name}})  # fmt: skip
    if api == "anthropic":
        kind = "not_found_error" if status == 404 else "invalid_request_error"
        return _json(status, {"type": "error", "error": {"type": kind, "message": message}})
    return _json(status, error_body(message, param=param))
