"""The proxy's request handling, independent of the HTTP server that carries it.

`ProxyEngine.handle(method, path, headers, body)` answers one client request: a model
request (`POST` to `/v1/chat/completions`, `/v1/responses`, `/v1/messages`, or a Gemini
`…/models/{model}:generateContent` / `:streamGenerateContent?alt=sse`, Gemini API or Vertex
paths) goes through the pipeline and the recall loop; anything else, and any body the proxy
cannot read, is forwarded unchanged, so the client gets the upstream's own answer (its
errors included). An upstream that cannot be reached answers 502, one that times out 504,
both in the API's error shape.

Headers are forwarded as received (authorization and `x-goog-api-key` included) except
hop-by-hop ones and the thread header; they are never logged or stored. A Gemini stream asked
for without `alt=sse` (one JSON array) is forwarded unchanged.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any
from urllib.parse import parse_qsl

import httpx

from cachepilot.diagnose.metrics import call_metrics
from cachepilot.messages import ContentPart, Message, ToolCall
from cachepilot.pilot.facade import CachePilot, Config
from cachepilot.proxy.calls import streamed_call
from cachepilot.proxy.config import ProxyConfig
from cachepilot.proxy.deferred import StoreOpener
from cachepilot.proxy.errors import (
    STORE_UNAVAILABLE,
    TOO_DEEP,
    Answer,
    error_answer,
    stream_error,
)
from cachepilot.proxy.families import Families
from cachepilot.proxy.limits import nesting_depth
from cachepilot.proxy.memory import StoreUnavailableError, ThreadMemory, Threads
from cachepilot.proxy.pipeline import Pipeline, Prepared
from cachepilot.proxy.prometheus import ProxyMetrics
from cachepilot.proxy.recall import answer, recall_calls, strip_recall
from cachepilot.proxy.relay import Relay, add_usage
from cachepilot.proxy.secret import Secret, SecretUnavailableError
from cachepilot.proxy.stores import open_stores
from cachepilot.proxy.threads import AUTH_HEADERS, identify
from cachepilot.recall.tool import RECALL_TOOL_NAME
from cachepilot.state.base import StateStore
from cachepilot.support.foreground import foreground, waiting
from cachepilot.support.log_labels import set_thread_labeler, thread_label
from cachepilot.usage import Usage
from cachepilot.wire import (
    Api,
    BodyView,
    EventSplitter,
    WireError,
    api_from_path,
    dumps,
    gemini_path,
    parse_response,
    read_view,
    reply_elements,
    responses_input,
    wire_messages,
)
from cachepilot.wire._common import simplify

__all__ = ["Answer", "ProxyEngine", "proxy_pilot_config"]

logger = logging.getLogger(__name__)

_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "accept-encoding",
    }
)
_RESPONSE_DROP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding"}
)


def _one(messages: Sequence[Message]) -> Message:
    """The assistant messages of one reply as one message."""
    if len(messages) == 1:
        return messages[0]
    parts: list[ContentPart] = []
    calls: list[ToolCall] = []
    for message in messages:
        parts.extend(message.parts)
        calls.extend(message.tool_calls)
    return Message(role="assistant", content=simplify(parts), tool_calls=tuple(calls))


def _without_marks(
    prepared: Prepared, memory: ThreadMemory, status: int, data: bytes
) -> dict[str, Any] | None:
    """The upstream refused a request carrying cachepilot's marks for their number: the
    proxy sends it again without them, and adds none to the thread's requests from now on
    (the upstream counts marks differently from the proxy). The client's marks stay.
    Returns the body to send again (it becomes `prepared.body`), None for any other error."""
    unmarked = prepared.unmarked
    if status != 400 or unmarked is None:
        return None
    text = data.decode("utf-8", "replace")
    if "cache_control" not in text or "maximum" not in text:
        return None
    logger.warning(
        "thread %s: the upstream refused the request's cache marks; sending it again "
        "without cachepilot's marks, and adding none to this thread from now on",
        thread_label(prepared.thread),
    )
    memory.marks_refused = True
    prepared.added_marks = []
    prepared.unmarked = None
    prepared.body = unmarked
    return unmarked


def _chainable(api: Api, prepared: Prepared) -> bool:
    """A Responses reply a later request may continue with `previous_response_id` (the
    client did not send `store: false`): its calls are remembered for that request."""
    return api == "responses" and prepared.view.body.get("store") is not False


def _streamed(api: Api, path: str, body: Mapping[str, Any]) -> bool:
    """Whether the client asked for a stream (Gemini: by its method, else `stream: true`)."""
    if api == "gemini":
        where = gemini_path(path)
        return where is not None and where.streamed
    return body.get("stream") is True


def _with_query_key(headers: Mapping[str, str], query: str) -> Mapping[str, str]:
    """The headers a thread is scoped by: a Gemini key sent as `?key=` counts as the
    `x-goog-api-key` header (for scoping only; the request is forwarded as received)."""
    if any(headers.get(name) for name in AUTH_HEADERS):
        return headers
    for key, value in parse_qsl(query, keep_blank_values=False):
        if key == "key" and value:
            return {**headers, "x-goog-api-key": value}
    return headers


def _sse(query: str) -> bool:
    """Whether a query string asks for server-sent events (`alt=sse`)."""
    return any(p.strip() == "alt=sse" for p in query.split("&"))


def proxy_pilot_config(provider: str) -> Config:
    """The config of the proxy's default pilot for `provider`: the library's settings.

    The proxy folds as the library does (least fold 6,000 tokens). Replaying the recorded
    Claude Code sessions through the proxy (`benchmarks/proxy_replay.py`, `anthropic-1h`)
    agrees with `cachepilot bench` on them within 1 % at 6,000 and at 15,000 tokens
    (docs/proxy-vs-bench.md); on the sources held out of that replay the bench prices
    6,000-token folds cheaper than 15,000-token ones.
    """
    return Config(provider=provider)


class ProxyEngine:
    """Answers client requests for one upstream (see the module docstring).

    Args:
        config: the proxy settings.
        pilot: the pilot (default: one with `proxy_pilot_config(config.provider)` and its
            archive in `config.store`, else the per-user default archive).
        state_store: where thread states are kept (default: `config.store`, else memory).
        transport: an httpx transport for the upstream (tests).
        metrics: the counters `/metrics` shows (default: this process's; a server with
            several workers passes the ones they share).
    """

    def __init__(
        self,
        config: ProxyConfig,
        *,
        pilot: CachePilot | None = None,
        state_store: StateStore | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        metrics: ProxyMetrics | None = None,
    ) -> None:
        self.config = config
        artifacts, states = (None, None)
        if config.store is not None:
            # Opened on first use: a store that cannot be reached yet gets 503s, not an exit.
            artifacts, states = open_stores(config.store, deferred=True)
        opened = artifacts if pilot is None else None
        if pilot is None:
            pilot = CachePilot(proxy_pilot_config(config.provider), store=artifacts)
        if state_store is None:
            state_store = states
        self.pilot = pilot
        self.threads = Threads(pilot, state_store)
        self._opener = StoreOpener(opened, state_store)
        self.families = Families(self.threads)
        self.pipeline = Pipeline(pilot, config)
        self.metrics = metrics or ProxyMetrics(per_thread=config.metrics_per_thread)
        self._secret: Secret | None = None
        self._secret_lock = asyncio.Lock()
        self._transport = transport
        self._client: httpx.AsyncClient | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def client(self) -> httpx.AsyncClient:
        """The upstream HTTP client (created on first use, in the serving event loop)."""
        if self._client is None:
            timeout = httpx.Timeout(self.config.timeout, connect=min(self.config.timeout, 30.0))
            self._client = httpx.AsyncClient(
                timeout=timeout, transport=self._transport, follow_redirects=False
            )
        return self._client

    async def aclose(self) -> None:
        """Close the upstream client and the state store's connections."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        close = getattr(self.threads.store, "aclose", None)
        if close is not None:
            await close()

    async def secret(self) -> Secret:
        """The store's secret (loaded, or created, on first use; `SecretUnavailableError` while the
        store cannot give it: asked again on the next call)."""
        if self._secret is None:
            async with self._secret_lock:
                if self._secret is None:
                    self._secret = await self._opener.secret()
                    self.threads.label = self._secret.label
                    set_thread_labeler(self._secret.label)  # the library's log lines too
                    self.metrics.label = self._secret.label
        return self._secret

    async def check_store(self) -> bool:
        """Open the store at start (True when it answers); a store that cannot be reached
        does not stop the proxy (`StoreOpener.check`)."""
        return await self._opener.check()

    def label(self, thread: str) -> str:
        """What logs and metrics show for a thread (a salted digest, never the name)."""
        return self.threads.label(thread)

    # ------------------------------------------------------------------ entry point

    async def handle(
        self, method: str, path: str, query: str, headers: Mapping[str, str], raw: bytes
    ) -> Answer:
        """Answer one client request (never raises)."""
        with foreground():  # what is computed ahead waits meanwhile (not for the upstream)
            return await self._handle(method, path, query, headers, raw)

    async def _handle(
        self, method: str, path: str, query: str, headers: Mapping[str, str], raw: bytes
    ) -> Answer:
        headers = {k.lower(): v for k, v in headers.items()}
        api = api_from_path(path)
        if method != "POST" or api is None:
            return await self._passthrough(
                method=method, path=path, query=query, headers=headers, raw=raw, api=api
            )
        try:
            body = json.loads(raw)
        except (UnicodeDecodeError, ValueError):
            body = None
        except RecursionError:
            body = TOO_DEEP
        limit = self.config.max_json_depth
        if body is TOO_DEEP or nesting_depth(body, limit) > limit:
            message = f"request body nested deeper than the proxy's limit of {limit} levels"
            return error_answer(api, 400, message, "invalid_request")
        if not isinstance(body, dict):
            return await self._passthrough(
                method=method, path=path, query=query, headers=headers, raw=raw, api=api
            )
        previous = body.get("previous_response_id")
        if api == "responses" and isinstance(previous, str):
            body["previous_response_id"] = self.threads.actual(previous)
        where = gemini_path(path) if api == "gemini" else None
        if where is not None and where.streamed and not _sse(query):
            logger.info("forwarding a gemini stream without alt=sse unchanged")
            return await self._passthrough(
                method=method, path=path, query=query, headers=headers, raw=raw, api=api
            )
        try:
            view = read_view(body, api)
        except WireError:
            logger.info("forwarding a %s request the proxy cannot read unchanged", api)
            return await self._passthrough(
                method=method, path=path, query=query, headers=headers, raw=raw, api=api
            )
        try:
            secret = await self.secret()
        except SecretUnavailableError:
            return error_answer(api, 503, STORE_UNAVAILABLE, "store_unavailable")
        thread = identify(
            _with_query_key(headers, query) if api == "gemini" else headers,
            view,
            header=self.config.thread_header,
            scoped=self.config.key_scope,
            secret=secret,
            previous=self.threads.responses,
        )
        try:
            memory = await self.threads.get(await self.families.resolve(thread, view.messages))
        except StoreUnavailableError:
            return error_answer(api, 503, STORE_UNAVAILABLE, "store_unavailable")
        if thread.family is not None and self.families.enabled:
            memory.family = thread.family  # so that forgetting the thread finds its family
        digest = hashlib.sha256(raw).hexdigest()  # a resend of the same request is the same call
        async with memory.lock:
            try:
                prepared = await self._prepare(view, memory, digest)
            except StoreUnavailableError:
                return error_answer(api, 503, STORE_UNAVAILABLE, "store_unavailable")
            except Exception:
                memory.stale = True  # the preparation may have changed it half-way
                logger.warning(
                    "thread %s: preparing the request failed; forwarding it unchanged",
                    self.label(thread.name),
                    exc_info=True,
                )
                return await self._passthrough(
                    method=method, path=path, query=query, headers=headers, raw=raw, api=api
                )
            memory.requests += 1
        if self.config.fold_ahead and not prepared.view.stateful:
            # The next maintenance point's summary, computed while the upstream answers.
            self.pilot.precompute_soon(prepared.thread)
        logger.debug("thread %s (%s): request %d", memory.name, thread.source, memory.requests)
        target = self._target(path, query)
        if _streamed(api, path, body):
            return await self._streamed(api, target, headers, prepared, memory)
        return await self._complete(api, target, headers, prepared, memory)

    async def _prepare(
        self, view: BodyView, memory: ThreadMemory, digest: str, attempts: int = 8
    ) -> Prepared:
        """The request as the thread's state makes it, that state saved before it is sent.

        With a store that several processes share, the thread is loaded again when another
        process saved it since, and the prepared state is saved only over the version it was
        prepared from; when another process saved first, it is prepared again over theirs.
        So every process sends what one process serving all the requests would, and no two
        processes apply two different plans. The call counts once it is answered: a resend of
        an unanswered request (`digest`: of its body) is prepared over the state the first
        one was prepared over (`Threads.begin`). (Called with the thread's lock held.)
        """
        for _ in range(attempts):
            await self.threads.refresh(memory)
            token = self.threads.begin(memory, digest)
            if memory.epochs_seen is None:  # what the stored state brought: not this request's
                memory.epochs_seen = len(self.pilot.state(memory.name).plan.epochs)
            prepared = await asyncio.to_thread(self.pipeline.prepare, view, memory)
            prepared.call = token
            if await self.threads.commit(memory):
                return prepared
        logger.warning(
            "thread %s: still conflicting after %d attempts; sending the last preparation",
            self.label(memory.name),
            attempts,
        )
        return prepared

    def _target(self, path: str, query: str) -> str:
        url = self.config.target(path)
        return f"{url}?{query}" if query else url

    def _forward_headers(self, headers: Mapping[str, str]) -> dict[str, str]:
        drop = _HOP_BY_HOP | {self.config.thread_header}
        return {k: v for k, v in headers.items() if k not in drop}

    @staticmethod
    def _reply_headers(response: httpx.Response) -> dict[str, str]:
        return {k: v for k, v in response.headers.items() if k.lower() not in _RESPONSE_DROP}

    async def _send(
        self, target: str, headers: Mapping[str, str], payload: bytes, method: str = "POST"
    ) -> httpx.Response:
        request = self.client.build_request(
            method, target, content=payload, headers=self._forward_headers(headers)
        )
        with waiting():
            return await self.client.send(request, stream=True)

    async def _passthrough(
        self,
        *,
        method: str,
        path: str,
        query: str,
        headers: Mapping[str, str],
        raw: bytes,
        api: Api | None,
    ) -> Answer:
        try:
            response = await self._send(self._target(path, query), headers, raw, method)
        except httpx.TimeoutException:
            return error_answer(api, 504, f"upstream timed out after {self.config.timeout:g} s")
        except httpx.HTTPError as exc:
            return error_answer(api, 502, f"upstream unreachable: {type(exc).__name__}")

        async def relay() -> AsyncIterator[bytes]:
            try:
                async for chunk in response.aiter_raw():
                    yield chunk
            except httpx.HTTPError:
                logger.warning("upstream stream broke off during a forwarded request")
            finally:
                await response.aclose()

        return Answer(response.status_code, self._reply_headers(response), stream=relay())

    # ------------------------------------------------------------------ whole replies

    async def _post_json(
        self, api: Api, target: str, headers: Mapping[str, str], body: Mapping[str, Any]
    ) -> tuple[httpx.Response | None, bytes, Answer | None]:
        """(response, its body, None), or (None, b"", the error to send the client)."""
        late = f"upstream timed out after {self.config.timeout:g} s"
        try:
            response = await self._send(target, headers, dumps(body).encode())
        except httpx.TimeoutException:
            return None, b"", error_answer(api, 504, late)
        except httpx.HTTPError as exc:
            return None, b"", error_answer(api, 502, f"upstream unreachable: {type(exc).__name__}")
        try:
            with waiting():
                data = await response.aread()
        except httpx.TimeoutException:
            return None, b"", error_answer(api, 504, late)
        except httpx.HTTPError as exc:
            return None, b"", error_answer(api, 502, f"upstream broke off: {type(exc).__name__}")
        finally:
            await response.aclose()
        return response, data, None

    async def _complete(
        self,
        api: Api,
        target: str,
        headers: Mapping[str, str],
        prepared: Prepared,
        memory: ThreadMemory,
    ) -> Answer:
        history: list[Message] = []
        sent: list[dict[str, Any]] = []  # the replies and answers since, as the upstream saw them
        usages: list[Mapping[str, Any]] = []
        body: Mapping[str, Any] = prepared.body
        usage_key = "usageMetadata" if api == "gemini" else "usage"
        rounds = 0
        while True:
            response, data, failed = await self._post_json(api, target, headers, body)
            if failed is not None or response is None:
                return failed or error_answer(api, 502, "upstream failed")
            if response.status_code != 200:
                resend = None
                if rounds == 0:
                    resend = _without_marks(prepared, memory, response.status_code, data)
                if resend is not None:
                    body = resend
                    continue
                return Answer(response.status_code, self._reply_headers(response), data)
            try:
                payload = json.loads(data)
            except ValueError:
                payload = None
            if not isinstance(payload, dict):
                return Answer(response.status_code, self._reply_headers(response), data)
            info = parse_response(payload, api)
            model = payload.get("modelVersion" if api == "gemini" else "model")
            self._record(prepared, memory, info.usage, model)
            if isinstance(payload.get(usage_key), Mapping):
                usages.append(payload[usage_key])
            reply = _one(info.output)
            if _chainable(api, prepared):
                self._note_calls(memory, reply.tool_calls)
            calls = recall_calls(reply) if prepared.recall else []
            mixed = len(calls) < len(reply.tool_calls)
            if not calls or mixed or rounds >= self.config.max_recall_rounds:
                break
            answers = await self._answer(prepared.thread, calls)
            history.extend([reply, *answers])
            sent.extend([*reply_elements(api, payload), *wire_messages(api, answers)])
            body = self._follow_up(
                prepared,
                memory,
                sent=sent,
                history=history,
                response_id=info.response_id,
                answers=answers,
            )
            rounds += 1
        if calls:
            answers = await self._answer(prepared.thread, calls)
            sent.extend([*reply_elements(api, payload), *wire_messages(api, answers)])
            payload = strip_recall(api, payload)
        elif history:
            sent.extend(reply_elements(api, payload))
        # The client resends what it was shown: this very body's reply.
        shown = _one(parse_response(payload, api).output)
        if calls or history:
            self._splice(prepared, memory, shown, sent)
        await self.families.replied(prepared.thread, shown)
        if len(usages) > 1:
            total: dict[str, Any] = {}
            for block in usages:
                total = add_usage(total, block)
            payload[usage_key] = total
        if api == "responses" and info.response_id:
            self.threads.remember_response(info.response_id, prepared.thread)
        await self.threads.save(memory)
        return Answer(200, self._reply_headers(response), dumps(payload).encode())

    async def _answer(self, thread: str, calls: Sequence[ToolCall]) -> list[Message]:
        return await asyncio.to_thread(lambda: [answer(self.pilot, thread, c) for c in calls])

    def _follow_up(
        self,
        prepared: Prepared,
        memory: ThreadMemory,
        *,
        sent: Sequence[Mapping[str, Any]],
        history: Sequence[Message],
        response_id: str | None,
        answers: Sequence[Message],
    ) -> dict[str, Any]:
        """The body that asks the upstream again with the recall answers (`sent`: the replies
        and answers since the client's request, raw; `history`: the same, neutral)."""
        if prepared.view.stateful and response_id:
            body = dict(prepared.body)
            body["previous_response_id"] = response_id
            body.pop("conversation", None)
            body["input"] = responses_input(answers)
            return body
        return self.pipeline.follow_up(prepared, memory, sent, history)

    def _splice(
        self,
        prepared: Prepared,
        memory: ThreadMemory,
        shown: Message,
        upstream: Sequence[Mapping[str, Any]],
    ) -> None:
        """Remember what the upstream saw where the client was shown `shown`."""
        if prepared.view.stateful:
            return  # the server holds the conversation, recall exchange included
        memory.apply(lambda: memory.splices.add(shown, prepared.view.api, upstream))

    @staticmethod
    def _note_calls(memory: ThreadMemory, calls: Sequence[ToolCall]) -> None:
        """Remember the tool calls of a relayed Responses reply: a later request that
        continues the server-held conversation sends their results without them."""
        kept = [c for c in calls if c.name != RECALL_TOOL_NAME]
        if kept:
            memory.apply(lambda: memory.calls.note(kept))

    def _note_streamed(self, memory: ThreadMemory, data: Any) -> None:
        """`_note_calls` of the call a stream event completes, before the client sees it
        (its next request may come before the stream's end is processed)."""
        call = streamed_call(data)
        if call is not None:
            self._note_calls(memory, [call])

    def _record(
        self, prepared: Prepared, memory: ThreadMemory, usage: Usage | None, model: Any
    ) -> None:
        """Note that the upstream answered; add the call's usage to the thread's state and
        metrics."""
        self.threads.answered(memory, prepared.call)
        if usage is None:
            return
        try:
            memory.apply(lambda: self.pilot.record_usage(usage, prepared.thread))
            state = self.pilot.state(prepared.thread)
            # Recalls the proxy served since this thread's last recorded call.
            seen = memory.recalls_seen
            served = 0 if seen is None else state.recalls - seen
            memory.recalls_seen = state.recalls
            epochs = len(state.plan.epochs)
            new_epoch = epochs > (memory.epochs_seen or 0)
            memory.epochs_seen = epochs
            self.metrics.record(
                call_metrics(
                    usage,
                    thread=prepared.thread,
                    call=max(0, state.calls - 1),
                    provider=self.config.provider,
                    recalls=max(0, served),
                    epoch=epochs - 1 if new_epoch else None,
                    model=str(model) if model else None,
                )
            )
        except Exception:
            logger.warning(
                "thread %s: usage not recorded", self.label(prepared.thread), exc_info=True
            )

    # ------------------------------------------------------------------ streams

    async def _streamed(
        self,
        api: Api,
        target: str,
        headers: Mapping[str, str],
        prepared: Prepared,
        memory: ThreadMemory,
    ) -> Answer:
        try:
            response = await self._send(target, headers, dumps(prepared.body).encode())
        except httpx.TimeoutException:
            return error_answer(api, 504, f"upstream timed out after {self.config.timeout:g} s")
        except httpx.HTTPError as exc:
            return error_answer(api, 502, f"upstream unreachable: {type(exc).__name__}")
        kind = response.headers.get("content-type", "")
        if response.status_code != 200 or "text/event-stream" not in kind:
            try:
                with waiting():
                    data = await response.aread()
            except httpx.HTTPError as exc:
                return error_answer(api, 502, f"upstream broke off: {type(exc).__name__}")
            finally:
                await response.aclose()
            if _without_marks(prepared, memory, response.status_code, data) is not None:
                return await self._streamed(api, target, headers, prepared, memory)
            return Answer(response.status_code, self._reply_headers(response), data)
        return Answer(
            200,
            self._reply_headers(response),
            stream=self._relay(
                api=api,
                target=target,
                headers=headers,
                prepared=prepared,
                memory=memory,
                response=response,
            ),
        )

    async def _relay(
        self,
        *,
        api: Api,
        target: str,
        headers: Mapping[str, str],
        prepared: Prepared,
        memory: ThreadMemory,
        response: httpx.Response,
    ) -> AsyncIterator[bytes]:
        relay = Relay(api, watch=prepared.recall)
        chainable = _chainable(api, prepared)
        history: list[Message] = []
        sent: list[dict[str, Any]] = []  # the replies and answers since, as the upstream saw them
        current: httpx.Response | None = response
        rounds = 0
        try:
            while current is not None:
                splitter = EventSplitter()
                try:
                    async for chunk in current.aiter_bytes():
                        for event in splitter.feed(chunk):
                            if chainable:
                                self._note_streamed(memory, event.data)
                            out = relay.push(event)
                            if out is not None:
                                yield out
                except (httpx.HTTPError, ValueError) as exc:
                    logger.warning(
                        "thread %s: upstream stream broke off", self.label(prepared.thread)
                    )
                    yield stream_error(api, f"upstream stream broke off: {type(exc).__name__}")
                    return
                for event in splitter.close():
                    if chainable:
                        self._note_streamed(memory, event.data)
                    out = relay.push(event)
                    if out is not None:
                        yield out
                await current.aclose()
                current = None
                self._record(prepared, memory, relay.reply.usage, None)
                reply = relay.reply.message()
                if api == "responses" and relay.reply.response_id:
                    self.threads.remember_response(relay.reply.response_id, prepared.thread)
                if not relay.holding:
                    if api == "responses" and relay.response_id and relay.reply.response_id:
                        self.threads.alias(relay.response_id, relay.reply.response_id)
                    if history:
                        # The client resends the message its whole stream added up to.
                        sent.extend(reply_elements(api, relay.reply.payload()))
                        self._splice(prepared, memory, relay.client.message(), sent)
                    await self.families.replied(prepared.thread, relay.client.message())
                    break
                calls = recall_calls(reply)
                answers = await self._answer(prepared.thread, calls)
                others = [c for c in reply.tool_calls if c.name != RECALL_TOOL_NAME]
                sent.extend(reply_elements(api, relay.reply.payload()))
                sent.extend(wire_messages(api, answers))
                if others or rounds >= self.config.max_recall_rounds:
                    for out in relay.flush_without_recall():
                        yield out
                    self._splice(prepared, memory, relay.client.message(), sent)
                    await self.families.replied(prepared.thread, relay.client.message())
                    break
                history.extend([reply, *answers])
                body = self._follow_up(
                    prepared,
                    memory,
                    sent=sent,
                    history=history,
                    response_id=relay.reply.response_id,
                    answers=answers,
                )
                try:
                    current = await self._send(target, headers, dumps(body).encode())
                except httpx.HTTPError as exc:
                    yield stream_error(api, f"upstream unreachable: {type(exc).__name__}")
                    return
                if current.status_code != 200:
                    status = current.status_code
                    detail = (await current.aread()).decode("utf-8", "replace")[:500]
                    await current.aclose()
                    current = None
                    yield stream_error(api, f"upstream answered {status}: {detail}")
                    return
                relay = relay.next_round()
                rounds += 1
        finally:
            if current is not None:
                await current.aclose()
            with foreground():
                await self.threads.save(memory)
