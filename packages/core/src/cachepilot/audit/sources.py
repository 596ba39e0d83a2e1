"""Read model calls from vcrpy cassettes (YAML or JSON) and JSONL request logs.

A **request log** holds one JSON object per line, either a bare request body or an entry
`{"api": "chat" | "responses" | "anthropic", "url_path": "/v1/chat/completions",
"timestamp": 1700000000.0 | "2025-11-21T11:03:00Z" | null, "request": {...}, "usage": {...},
"response": {...}}` (every key but `request` optional; `cachepilot_bench.replay` writes them).
A **cassette** is vcrpy's `{"interactions": [{"request": {...}, "response": {...}}]}`; only
POSTs to a model endpoint (`/chat/completions`, `/responses`, `/messages`) are calls, their
responses may be JSON, gzip/deflate-compressed or event streams, and the response `Date`
header gives the call time (whole seconds). Compressed bodies are inflated within limits
(`cachepilot.audit.inflate`: 32 MiB, 100× the compressed size); a body past them is skipped
with a warning naming it.

Bad lines and interactions are skipped with one warning each; a file with no call at all
raises `ValueError`.
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

from cachepilot.audit.inflate import BodyTooLargeError, inflate
from cachepilot.messages import Message
from cachepilot.sim.render import Request
from cachepilot.usage import Usage
from cachepilot.wire import Api, api_from_path, parse_body, parse_response

__all__ = [
    "LoggedCall",
    "calls_from_cassette",
    "calls_from_entries",
    "calls_from_interactions",
    "iso_to_unix",
    "load_calls",
]

logger = logging.getLogger(__name__)


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
        if api not in (None, "chat", "responses", "anthropic"):
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


def _decode(data: Any, encoding: str | None, where: str = "a body") -> str | None:
    """The text of a recorded body; compressed bodies are inflated within bounded limits."""
    if data is None:
        return None
    if isinstance(data, Mapping):  # vcrpy response bodies: {"string": ...}
        data = data.get("string")
    if isinstance(data, str):
        return data
    if not isinstance(data, bytes | bytearray):
        return None
    raw = bytes(data)
    encoding = (encoding or "").lower()
    method = (
        "gzip" if "gzip" in encoding or raw[:2] == b"\x1f\x8b" else
        "deflate" if "deflate" in encoding else None
    )  # fmt: skip
    if method is not None:
        try:
            raw = inflate(raw, method)
        except BodyTooLargeError as exc:
            logger.warning("%s body skipped (%s): %s", where, method, exc)
            return None
        except zlib.error:
            logger.warning("%s body skipped (%s): not valid compressed data", where, method)
            return None
    return raw.decode("utf-8", "replace")


def calls_from_interactions(
    interactions: Sequence[tuple[Mapping[str, Any], Mapping[str, Any] | None]],
    *,
    label: str = "interaction",
) -> list[LoggedCall]:
    """Calls from vcrpy interactions `(request dict, response dict)`.

    The request dict has `method`, `uri`, `body`, `headers`; the response dict `status`,
    `headers`, `body` (`{"string": ...}`), as vcrpy stores them.
    """
    calls: list[LoggedCall] = []
    for n, (request, response) in enumerate(interactions):
        method = str(request.get("method", "POST")).upper()
        path = urlsplit(str(request.get("uri", ""))).path
        api = api_from_path(path)
        if method != "POST" or api is None or path.rstrip("/").endswith("/count_tokens"):
            continue
        source = f"{label} {n}"
        text = _decode(
            request.get("body"),
            _header(request.get("headers"), "content-encoding"),
            f"{source}: request",
        )
        if not text:
            logger.warning("%s: empty request body; skipped", source)
            continue
        try:
            body = json.loads(text)
        except ValueError:
            logger.warning("%s: request body is not JSON; skipped", source)
            continue
        response_text = None
        timestamp = None
        if response is not None:
            headers = response.get("headers")
            response_text = _decode(
                response.get("body"), _header(headers, "content-encoding"), f"{source}: response"
            )
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
                api=None,
                url_path=path,
                timestamp=timestamp,
                response=response_text,
            )
        except ValueError as exc:
            logger.warning("%s: skipped (%s)", source, exc)
            continue
        calls.append(call)
    return calls


def calls_from_cassette(data: Mapping[str, Any]) -> list[LoggedCall]:
    """Calls from a loaded vcrpy cassette (`{"interactions": [...]}`)."""
    raw = data.get("interactions")
    if not isinstance(raw, list):
        raise ValueError("not a vcrpy cassette: no 'interactions' list")
    pairs: list[tuple[Mapping[str, Any], Mapping[str, Any] | None]] = []
    for item in raw:
        if isinstance(item, Mapping) and isinstance(item.get("request"), Mapping):
            response = item.get("response")
            pairs.append((item["request"], response if isinstance(response, Mapping) else None))
    return calls_from_interactions(pairs)


def _load_yaml(text: str) -> Any:
    try:
        # Imported by name: PyYAML ships with vcrpy but is not a dependency of the core.
        yaml: Any = importlib.import_module("yaml")
    except ImportError as exc:  # pragma: no cover - PyYAML ships with vcrpy
        raise ValueError("reading YAML cassettes needs PyYAML (pip install pyyaml)") from exc
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return yaml.load(text, Loader=loader)
    except yaml.YAMLError as exc:
        raise ValueError(f"invalid YAML: {exc}") from exc


def load_calls(path: str | os.PathLike[str]) -> list[LoggedCall]:
    """Every model call of a cassette or request log, in file order.

    Raises:
        ValueError: when the file is missing or unreadable, or holds no model call.
    """
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"no such file: {file}")
    try:
        text = file.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ValueError(f"cannot read {file}: {exc}") from exc
    suffix = file.suffix.lower()
    calls: list[LoggedCall]
    if suffix in (".yaml", ".yml"):
        data = _load_yaml(text)
        if not isinstance(data, Mapping):
            raise ValueError(f"{file}: not a vcrpy cassette")
        calls = calls_from_cassette(data)
    else:
        whole: Any = None
        try:
            whole = json.loads(text)
        except ValueError:
            whole = None
        if isinstance(whole, Mapping) and "interactions" in whole:
            calls = calls_from_cassette(whole)
        elif isinstance(whole, list):
            calls = calls_from_entries((f"entry {i}", e) for i, e in enumerate(whole))
        elif isinstance(whole, Mapping):
            calls = calls_from_entries([("entry 0", whole)])
        else:
            calls = _jsonl(text, file)
    if not calls:
        raise ValueError(f"{file}: no model request found (expected a cassette or a request log)")
    return calls


def _jsonl(text: str, file: Path) -> list[LoggedCall]:
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
        if isinstance(data, Mapping) and "interactions" in data:
            return calls_from_cassette(data)
    if bad:
        logger.warning("%s: %d line(s) are not JSON; skipped", file, bad)
    return calls_from_entries(entries)
