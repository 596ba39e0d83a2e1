"""Read model calls from vcrpy cassettes (YAML or JSON) and JSONL request logs.

A **request log** holds one JSON object per line, either a bare request body or an entry
`{"api": "chat" | "responses" | "anthropic" | "gemini", "url_path": "/v1/chat/completions",
"timestamp": 1700000000.0 | "2025-11-21T11:03:00Z" | null, "request": {...}, "usage": {...},
"response": {...}}` (every key but `request` optional; `cachepilot_bench.replay` writes them).
A **cassette** is vcrpy's `{"interactions": [{"request": {...}, "response": {...}}]}`, or the
`langchain_tests` layout `{"requests": [...], "responses": [...]}` (two parallel lists), in YAML
(one or several documents, plain or `.yaml.gz`) or JSON. Only POSTs to a model endpoint
(`/chat/completions`, `/responses`, Anthropic's `/messages`, Gemini's
`…:generateContent` and `…:streamGenerateContent`) are calls; when the URI was
redacted, the body's shape names the API. A body may be recorded as text, bytes, or already
parsed (`parsed_body`, as pydantic-ai records it); responses may be JSON or event streams,
compressed with gzip, deflate, zstd or br, and the response `Date` header gives the call time
(whole seconds). Compressed bodies are inflated within limits (`cachepilot.audit.inflate`:
32 MiB, 100× the compressed size). Responses with an HTTP error status (4xx, 5xx) are not
calls: nothing was generated or billed.

What cannot be read is never dropped silently: a skipped interaction or a response whose body
could not be decoded (its usage unknown) leaves a note (`LoggedCall.notes`, the `notes` list
the readers fill, `AuditReport.notes`). A file with no call at all raises `ValueError`.
"""

from __future__ import annotations

import email.utils
import importlib
import json
import logging
import os
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from cachepilot.audit.inflate import (
    ENCODINGS,
    BodyTooLargeError,
    DecoderMissingError,
    body_limit,
    inflate,
)
from cachepilot.messages import Message
from cachepilot.sim.render import Request
from cachepilot.usage import Usage
from cachepilot.wire import Api, api_from_path, detect_api, parse_body, parse_response

__all__ = [
    "MAX_FILE_BYTES",
    "LoggedCall",
    "calls_from_cassette",
    "calls_from_entries",
    "calls_from_interactions",
    "iso_to_unix",
    "load_calls",
]

logger = logging.getLogger(__name__)

MAX_FILE_BYTES = 256 * 1024 * 1024
"""A compressed cassette (`.yaml.gz`) expands to at most this (and 100× its size)."""


def iso_to_unix(value: Any) -> float | None:
    """ISO-8601 text (`Z` or offset; naive means UTC) or a number -> unix seconds."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


@dataclass(frozen=True, slots=True)
class LoggedCall:
    """One model call read from a log or a cassette.

    Attributes:
        index: position among the file's calls (0-based).
        source: where it came from (`line 12`, `interaction 3`).
        api: `chat`, `responses` or `anthropic`.
        request: the request in neutral form (timestamp and model included).
        params: cache-relevant parameters as sent.
        keys: thread keys of the body, strongest first.
        previous_response_id: Responses API chaining.
        response_id: id of the response, when recorded.
        usage: the provider's usage, when recorded.
        output: the generated messages, when recorded (rebuilds server-held context).
        url_path: endpoint path, when recorded.
        cache_mode: Anthropic calls: `explicit` (`cache_control` marks), `automatic` (a
            top-level `cache_control`) or `none` (nothing is cached); None for OpenAI.
        cache_ttl_seconds: Anthropic calls: the longest TTL a mark asks for.
        notes: what could not be read (e.g. a response body in an encoding without decoder).
    """

    index: int
    source: str
    api: Api
    request: Request
    params: Mapping[str, Any] = field(default_factory=dict)
    keys: Mapping[str, str] = field(default_factory=dict)
    previous_response_id: str | None = None
    response_id: str | None = None
    usage: Usage | None = None
    output: tuple[Message, ...] = ()
    url_path: str | None = None
    cache_mode: str | None = None
    cache_ttl_seconds: float | None = None
    notes: tuple[str, ...] = ()

    @property
    def timestamp(self) -> float | None:
        """Unix time the call was made, when known."""
        return self.request.timestamp

    @property
    def server_state(self) -> bool:
        """The request carries only new input; the server holds the earlier context."""
        return self.previous_response_id is not None or "conversation" in self.keys

    def with_request(self, request: Request) -> LoggedCall:
        """A copy with another request (e.g. the full context rebuilt)."""
        return replace(self, request=request)


def _timestamp(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str) and value.strip():
        try:
            return float(value)
        except ValueError:
            return iso_to_unix(value)
    return None


def _call(
    index: int,
    source: str,
    body: Mapping[str, Any],
    *,
    api: Api | None,
    url_path: str | None,
    timestamp: float | None,
    response: Any = None,
    usage: Any = None,
    notes: tuple[str, ...] = (),
) -> LoggedCall:
    parsed = parse_body(body, api=api, url_path=url_path, timestamp=timestamp)
    info = parse_response(response, parsed.api) if response is not None else None
    recorded = None
    if usage is not None:
        from cachepilot.wire import parse_usage

        recorded = parse_usage(usage, parsed.api)
    if recorded is None and info is not None:
        recorded = info.usage
    return LoggedCall(
        index=index,
        source=source,
        api=parsed.api,
        request=parsed.request,
        params=parsed.params,
        keys=parsed.keys,
        previous_response_id=parsed.previous_response_id,
        response_id=info.response_id if info else None,
        usage=recorded,
        output=info.output if info else (),
        url_path=url_path,
        cache_mode=parsed.cache_mode,
        cache_ttl_seconds=parsed.cache_ttl_seconds,
        notes=notes,
    )


def calls_from_entries(entries: Iterable[tuple[str, Any]]) -> list[LoggedCall]:
    """Calls from request-log entries `(source label, parsed JSON)`; bad entries are skipped."""
    calls: list[LoggedCall] = []
    for label, entry in entries:
        if not isinstance(entry, Mapping):
            logger.warning("%s: not a JSON object; skipped", label)
            continue
        wrapped = isinstance(entry.get("request"), Mapping)
        body = entry["request"] if wrapped else entry
        api = entry.get("api") if wrapped else None
        if api == "messages":
            api = "anthropic"
        if api not in (None, "chat", "responses", "anthropic", "gemini"):
            logger.warning("%s: unknown api %r; detecting it from the body", label, api)
            api = None
        url_path = entry.get("url_path") if wrapped else None
        response = entry.get("response") if wrapped else None
        usage = entry.get("usage") if wrapped else None
        try:
            calls.append(
                _call(
                    len(calls),
                    label,
                    body,
                    api=api,
                    url_path=url_path if isinstance(url_path, str) else None,
                    timestamp=_timestamp(entry.get("timestamp")) if wrapped else None,
                    response=response,
                    usage=usage,
                )
            )
        except ValueError as exc:
            logger.warning("%s: skipped (%s)", label, exc)
    return calls


# --------------------------------------------------------------------------------------------
# Cassettes


def _header(headers: Any, name: str) -> str | None:
    if not isinstance(headers, Mapping):
        return None
    for key, value in headers.items():
        if str(key).lower() == name:
            if isinstance(value, list | tuple):
                return str(value[0]) if value else None
            return str(value)
    return None


def _status(response: Mapping[str, Any] | None) -> int | None:
    """The HTTP status code of a recorded response (vcrpy `status.code`, or a bare number)."""
    if response is None:
        return None
    status = response.get("status")
    if isinstance(status, Mapping):
        status = status.get("code")
    if status is None:
        status = response.get("status_code")
    try:
        return int(status) if status is not None and not isinstance(status, bool) else None
    except (TypeError, ValueError):
        return None


def _decode(data: Any, encoding: str | None) -> tuple[str | None, str | None]:
    """The text of a recorded body and, when it could not be read, why.

    Compressed bodies are inflated within bounded limits; an already parsed body comes back
    as JSON text.
    """
    if data is None:
        return None, None
    if isinstance(data, Mapping) and "string" in data:  # vcrpy response bodies
        data = data.get("string")
    if isinstance(data, str):
        return data, None
    if isinstance(data, Mapping | list):
        return json.dumps(data), None
    if not isinstance(data, bytes | bytearray):
        return None, None
    raw = bytes(data)
    names = [e.strip() for e in (encoding or "").lower().split(",") if e.strip()]
    if not names and raw[:2] == b"\x1f\x8b":
        names = ["gzip"]
    # Content-Encoding lists codings in the order applied; undo them in reverse.
    for method in reversed(names):
        if method == "identity":
            continue
        if method not in ENCODINGS:
            return None, f"body skipped (unknown content encoding {method!r})"
        if method == "gzip" and raw[:2] != b"\x1f\x8b":
            continue  # recorders that stored the decoded body but kept the header
        try:
            raw = inflate(raw, method)
        except (BodyTooLargeError, DecoderMissingError) as exc:
            return None, f"body skipped ({method}): {exc}"
        except zlib.error as exc:
            if method in ("zstd", "br") and raw[:1] in (b"{", b"e", b"d"):
                continue  # stored decoded under its original header
            return None, f"body skipped ({method}): {exc}"
    return raw.decode("utf-8", "replace"), None


_REDACTED_HOSTS = ("redacted", "**", "xxx", "example")


def _api_of(uri: str, body: Mapping[str, Any]) -> tuple[Api | None, str | None]:
    """The API of an interaction and the path to parse it with (the body's shape when the
    URI was redacted, else its path)."""
    parts = urlsplit(uri)
    api = api_from_path(parts.path)
    if api is not None:
        return api, parts.path
    redacted = not parts.netloc or any(mark in uri.lower() for mark in _REDACTED_HOSTS)
    if not redacted or not ("messages" in body or "input" in body) or "model" not in body:
        return None, None
    try:
        return detect_api(body), None
    except ValueError:
        return None, None


def _request_json(request: Mapping[str, Any]) -> tuple[Any, str | None]:
    """The JSON request body of an interaction and, when it could not be read, why."""
    parsed = request.get("parsed_body")
    if isinstance(parsed, Mapping):
        return parsed, None
    text, problem = _decode(
        request.get("body"), _header(request.get("headers"), "content-encoding")
    )
    if problem:
        return None, f"request {problem}"
    if not text:
        return None, "empty request body"
    try:
        return json.loads(text), None
    except ValueError:
        return None, "request body is not JSON"


def _response_text(response: Mapping[str, Any]) -> tuple[str | None, str | None]:
    parsed = response.get("parsed_body")
    if isinstance(parsed, Mapping | list):
        return json.dumps(parsed), None
    if isinstance(parsed, str):
        return parsed, None
    return _decode(response.get("body"), _header(response.get("headers"), "content-encoding"))


def calls_from_interactions(
    interactions: Sequence[tuple[Mapping[str, Any], Mapping[str, Any] | None]],
    *,
    label: str = "interaction",
    notes: list[str] | None = None,
) -> list[LoggedCall]:
    """Calls from vcrpy interactions `(request dict, response dict)`.

    The request dict has `method`, `uri`, `body` (or `parsed_body`), `headers`; the response
    dict `status`, `headers`, `body` (`{"string": ...}`) or `parsed_body`, as vcrpy and its
    extensions store them. What is skipped or could not be decoded is appended to `notes`.
    """
    found = notes if notes is not None else []
    calls: list[LoggedCall] = []
    for n, (request, response) in enumerate(interactions):
        source = f"{label} {n}"
        method = str(request.get("method", "POST")).upper()
        uri = str(request.get("uri", ""))
        path = urlsplit(uri).path
        if method != "POST" or path.rstrip("/").endswith("/count_tokens"):
            continue
        if api_from_path(path) is None and not (
            not urlsplit(uri).netloc or any(m in uri.lower() for m in _REDACTED_HOSTS)
        ):
            continue  # another endpoint (embeddings, files, telemetry…)
        body, problem = _request_json(request)
        if not isinstance(body, Mapping):
            if api_from_path(path) is not None:
                note = f"{source}: skipped ({problem or 'request body is not a JSON object'})"
                logger.warning("%s", note)
                found.append(note)
            continue
        api, url_path = _api_of(uri, body)
        if api is None:
            continue
        status = _status(response)
        if status is not None and status >= 400:
            found.append(f"{source}: HTTP {status} response, not a billed call; skipped")
            continue
        response_text = None
        timestamp = None
        call_notes: tuple[str, ...] = ()
        if response is not None:
            headers = response.get("headers")
            response_text, problem = _response_text(response)
            if problem:
                note = f"{source}: response {problem}; recorded usage unknown"
                logger.warning("%s", note)
                found.append(note)
                call_notes = (note,)
            date = _header(headers, "date")
            if date:
                try:
                    timestamp = email.utils.parsedate_to_datetime(date).timestamp()
                except (TypeError, ValueError):
                    timestamp = None
        try:
            call = _call(
                len(calls),
                source,
                body,
                api=api,
                url_path=url_path,
                timestamp=timestamp,
                response=response_text,
                notes=call_notes,
            )
        except ValueError as exc:
            note = f"{source}: skipped ({exc})"
            logger.warning("%s", note)
            found.append(note)
            continue
        calls.append(call)
    return calls


def _pairs(data: Mapping[str, Any]) -> list[tuple[Mapping[str, Any], Mapping[str, Any] | None]]:
    """Interactions of one cassette document: vcrpy or the `langchain_tests` layout."""
    pairs: list[tuple[Mapping[str, Any], Mapping[str, Any] | None]] = []
    raw = data.get("interactions")
    if isinstance(raw, list):
        for item in raw:
            if isinstance(item, Mapping) and isinstance(item.get("request"), Mapping):
                response = item.get("response")
                pairs.append((item["request"], response if isinstance(response, Mapping) else None))
        return pairs
    requests, responses = data.get("requests"), data.get("responses")
    if isinstance(requests, list):
        answers = responses if isinstance(responses, list) else []
        for i, request in enumerate(requests):
            if isinstance(request, Mapping):
                response = answers[i] if i < len(answers) else None
                pairs.append((request, response if isinstance(response, Mapping) else None))
        return pairs
    raise ValueError("not a vcrpy cassette: no 'interactions' (or 'requests') list")


def _is_cassette(data: Any) -> bool:
    return isinstance(data, Mapping) and (
        isinstance(data.get("interactions"), list) or isinstance(data.get("requests"), list)
    )


def calls_from_cassette(
    data: Mapping[str, Any] | Sequence[Mapping[str, Any]],
    *,
    notes: list[str] | None = None,
) -> list[LoggedCall]:
    """Calls from a loaded cassette: one document (vcrpy's `{"interactions": [...]}` or the
    `langchain_tests` `{"requests": [...], "responses": [...]}`) or several, in order."""
    documents = [data] if isinstance(data, Mapping) else list(data)
    pairs: list[tuple[Mapping[str, Any], Mapping[str, Any] | None]] = []
    for document in documents:
        pairs.extend(_pairs(document))
    return calls_from_interactions(pairs, notes=notes)


def _load_yaml(text: str) -> Any:
    try:
        # Imported by name: PyYAML ships with vcrpy but is not a dependency of the core.
        yaml: Any = importlib.import_module("yaml")
    except ImportError as exc:  # pragma: no cover - PyYAML ships with vcrpy
        raise ValueError("reading YAML cassettes needs PyYAML (pip install pyyaml)") from exc
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        documents = [d for d in yaml.load_all(text, Loader=loader) if d is not None]
    except yaml.YAMLError as exc:
        raise ValueError(f"invalid YAML: {exc}") from exc
    return documents[0] if len(documents) == 1 else documents


def _read_text(file: Path) -> tuple[str, str]:
    """The text of a file (a gzip file inflated within bounds) and its suffix without `.gz`."""
    try:
        raw = file.read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read {file}: {exc}") from exc
    name = file.name.lower()
    if name.endswith(".gz") or raw[:2] == b"\x1f\x8b":
        if name.endswith(".gz"):
            name = name[:-3]
        try:
            raw = inflate(raw, "gzip", body_limit(len(raw), max_bytes=MAX_FILE_BYTES))
        except (BodyTooLargeError, zlib.error) as exc:
            raise ValueError(f"{file}: cannot decompress: {exc}") from exc
    return raw.decode("utf-8", "replace"), Path(name).suffix


def load_calls(path: str | os.PathLike[str], *, notes: list[str] | None = None) -> list[LoggedCall]:
    """Every model call of a cassette or request log, in file order.

    Args:
        path: the file (`.yaml`, `.yml`, `.json`, `.jsonl`, each optionally `.gz`).
        notes: filled with what was skipped or could not be decoded.

    Raises:
        ValueError: when the file is missing or unreadable, or holds no model call.
    """
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"no such file: {file}")
    text, suffix = _read_text(file)
    if not text.strip():
        raise ValueError(f"{file}: empty file")
    calls: list[LoggedCall]
    if suffix in (".yaml", ".yml"):
        data = _load_yaml(text)
        documents = data if isinstance(data, list) else [data]
        cassettes = [d for d in documents if _is_cassette(d)]
        if not cassettes:
            raise ValueError(f"{file}: not a vcrpy cassette")
        calls = calls_from_cassette(cassettes, notes=notes)
    else:
        whole: Any = None
        try:
            whole = json.loads(text)
        except ValueError:
            whole = None
        if _is_cassette(whole):
            calls = calls_from_cassette(whole, notes=notes)
        elif isinstance(whole, list):
            calls = calls_from_entries((f"entry {i}", e) for i, e in enumerate(whole))
        elif isinstance(whole, Mapping):
            calls = calls_from_entries([("entry 0", whole)])
        else:
            calls = _jsonl(text, file, notes)
    if not calls:
        raise ValueError(f"{file}: no model request found (expected a cassette or a request log)")
    return calls


def _jsonl(text: str, file: Path, notes: list[str] | None) -> list[LoggedCall]:
    entries: list[tuple[str, Any]] = []
    bad = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entries.append((f"line {number}", json.loads(line)))
        except ValueError:
            bad += 1
    if bad and not entries:
        try:
            data = _load_yaml(text)  # a cassette without its .yaml suffix
        except ValueError:
            data = None
        documents = data if isinstance(data, list) else [data]
        cassettes = [d for d in documents if _is_cassette(d)]
        if cassettes:
            return calls_from_cassette(cassettes, notes=notes)
    if bad:
        logger.warning("%s: %d line(s) are not JSON; skipped", file, bad)
    return calls_from_entries(entries)
