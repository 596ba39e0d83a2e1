"""Credential shapes removed from the text cachepilot writes itself.

cachepilot composes text of its own from what tools and models said: reduced previews and
stubs of tool outputs, fold summaries and resume blocks, model-compressed outputs, reports and
log lines. `redact` replaces well-known credential shapes in such text with a fixed marker
(`[redacted:openai-key]`), so the same input always gives the same bytes (prefixes stay
cache-stable) and applying it twice changes nothing.

What is recognised: OpenAI (`sk-`, `sk-proj-`), Anthropic (`sk-ant-`), AWS access key ids and
secret access keys (the latter next to their name), GitHub, GitLab, Slack, Stripe, Hugging Face
and Google API tokens, JWTs, PEM private key blocks, `Bearer` and `Basic` authorization values,
passwords in URLs, and values assigned to credential-like names (`password=`, `api_key: "…"`,
`DB_PASSWORD=…`). It is a list of shapes, not a detector of every secret.

Every pattern runs in time linear in its input: token runs are possessive (no backtracking),
every other repetition is bounded, and each pattern starts with a literal or a short bounded
prefix. A rule runs only when the text contains one of its literals, and case-insensitive rules
match the lower-cased text (several times faster than `re.IGNORECASE`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = [
    "MARKER_PREFIX",
    "RedactingFilter",
    "contains_secret",
    "install_logging",
    "marker",
    "redact",
    "redact_slice",
]

MARKER_PREFIX = "[redacted:"
"""Every replacement starts with this (`[redacted:<kind>]`)."""


def marker(kind: str) -> str:
    """The replacement text of a credential of `kind`."""
    return f"{MARKER_PREFIX}{kind}]"


# A token begins here: the character before it is not part of a token. Placed after the
# literal that starts each pattern (`sk-(?<!…sk-)`), so the regex engine can still search for
# the literal quickly.
_TOKEN = r"A-Za-z0-9_\-"


def _starts_token(prefix: str) -> str:
    """`prefix` (a fixed-width regex) where a token begins."""
    return f"{prefix}(?<![{_TOKEN}]{prefix})"


@dataclass(frozen=True, slots=True)
class _Rule:
    kind: str
    pattern: re.Pattern[str]
    needles: tuple[str, ...]
    """Lower-case substrings one of which every match contains: a cheap test before the regex."""
    keep_prefix: bool = False
    """The match has groups `head` (kept) and `value` (replaced), e.g. `password=` + value."""
    caseless: re.Pattern[str] | None = None
    """The pattern with `re.IGNORECASE`, for a case-insensitive rule: `pattern` (lower-case
    literals, no flag) matches the lower-cased text, this one the text itself when lowering
    changes its length (a few non-ASCII letters do)."""


def _token(kind: str, needles: tuple[str, ...], pattern: str) -> _Rule:
    return _Rule(kind, re.compile(pattern), needles)


def _valued(kind: str, needles: tuple[str, ...], pattern: str, *, caseless: bool = False) -> _Rule:
    compiled = re.compile(pattern)
    folded = re.compile(pattern, re.IGNORECASE) if caseless else None
    return _Rule(kind, compiled, needles, keep_prefix=True, caseless=folded)


# A value after `name =` / `name: ` / `"name": `: quoted, or a bare run; never a marker. A bare
# run of letters, underscores and dots only is code or prose, not a credential: an identifier
# (`api_key=api_key`, `password: str`, `secret = settings.SECRET`), a keyword (`true`, `None`)
# or an ellipsis.
_SEPARATOR = r"[\"']?[ \t]{0,8}[:=][ \t]{0,8}"
_BARE_STOP = r"\s\"'`,;&<>(){}\[\]"
_VALUE = (
    r"(?P<value>\"(?!\[redacted:)[^\"\n]{1,512}\"|'(?!\[redacted:)[^'\n]{1,512}'"
    r"|(?![A-Za-z_.]++(?:[" + _BARE_STOP + r"]|$))"
    r"[^" + _BARE_STOP + r"]{3,512}+)"
)
_CREDENTIAL_NAME = (
    r"(?:pass(?:word|wd|phrase)|secret|api[_\-]?key|apikey|client[_\-]?secret"
    r"|private[_\-]?key|(?:access|auth|refresh|id|session|api)[_\-]?token)"
)

_RULES: tuple[_Rule, ...] = (
    _token(
        "private-key",
        ("-----begin",),
        r"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
        r"(?:[A-Za-z0-9+/=\s:,.]|-(?!----)){0,65536}+"
        r"(?:-----END[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----)?",
    ),
    _token("anthropic-key", ("sk-ant-",), _starts_token("sk-ant-") + rf"[{_TOKEN}]{{20,}}+"),
    _token(
        "openai-key",
        ("sk-",),
        _starts_token("sk-") + rf"(?:proj-|svcacct-|admin-)?[{_TOKEN}]{{20,}}+",
    ),
    _token(
        "stripe-key",
        ("k_live_", "k_test_"),
        _starts_token("[sr]k_(?:live|test)_") + r"[A-Za-z0-9]{16,}+",
    ),
    _token("huggingface-token", ("hf_",), _starts_token("hf_") + r"[A-Za-z0-9]{30,}+"),
    _token("github-token", ("gh",), _starts_token("gh[pousr]_") + r"[A-Za-z0-9]{30,}+"),
    _token("github-token", ("github_pat_",), _starts_token("github_pat_") + r"\w{30,}+"),
    _token("gitlab-token", ("glpat-",), _starts_token("glpat-") + rf"[{_TOKEN}]{{20,}}+"),
    _token("slack-token", ("xox",), _starts_token("xox[abposr]-") + r"[A-Za-z0-9\-]{10,}+"),
    _token(
        "slack-webhook",
        ("hooks.slack.com",),
        r"https://hooks\.slack\.com/services/[A-Za-z0-9/_\-]{20,}+",
    ),
    _token("google-api-key", ("aiza",), _starts_token("AIza") + r"[A-Za-z0-9_\-]{35}"),
    _token(
        "aws-access-key-id",
        ("akia", "asia", "abia", "acca"),
        r"(?:AKIA|ASIA|ABIA|ACCA)(?<![A-Za-z0-9](?:AKIA|ASIA|ABIA|ACCA))"
        r"[A-Z0-9]{16}(?![A-Za-z0-9])",
    ),
    _token(
        "jwt",
        ("eyj",),
        _starts_token("eyJ") + rf"[{_TOKEN}]{{8,}}+\.eyJ[{_TOKEN}]{{8,}}+\.[{_TOKEN}]{{8,}}+",
    ),
    _valued(
        "aws-secret-key",
        ("secret",),
        r"(?P<head>(?:aws_?)?secret_?access_?key" + _SEPARATOR + r"[\"']?)"
        r"(?P<value>[A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])",
        caseless=True,
    ),
    _valued(
        "bearer-token",
        ("bearer",),
        r"(?P<head>\bbearer[ \t]{1,8})(?P<value>[A-Za-z0-9._~+/\-]{16,}+=*)",
        caseless=True,
    ),
    _valued(
        "basic-auth",
        ("authorization",),
        r"(?P<head>\bauthorization" + _SEPARATOR + r"[\"']?basic[ \t]{1,8})"
        r"(?P<value>[A-Za-z0-9+/]{8,}+=*)",
        caseless=True,
    ),
    _valued(
        "url-password",
        ("://",),
        r"(?P<head>://[^\s/?#@:\"'<>]{0,128}:)"
        r"(?P<value>(?!\[redacted:)[^\s/?#@\"'<>]{1,256}+)(?=@)",
    ),
    _valued(
        "secret",
        ("pass", "secret", "key", "token"),
        r"(?P<head>" + _CREDENTIAL_NAME + r"[A-Za-z0-9_\-]{0,24}+" + _SEPARATOR + r")" + _VALUE,
        caseless=True,
    ),
)


def _matches(rule: _Rule, text: str, lowered: str) -> Iterator[re.Match[str]]:
    """The rule's matches; their spans index `text` (a case-insensitive rule may have matched
    `lowered`, which has the same length)."""
    if rule.caseless is None:
        return rule.pattern.finditer(text)
    if len(lowered) == len(text):
        return rule.pattern.finditer(lowered)
    return rule.caseless.finditer(text)


def _replacement(rule: _Rule, match: re.Match[str], text: str) -> tuple[int, int, str]:
    """`(start, end, new text)` of one match: the credential's span and its marker."""
    if not rule.keep_prefix:
        return match.start(), match.end(), marker(rule.kind)
    start, end = match.span("value")
    value = text[start:end]
    quote = value[0] if value[:1] in ("'", '"') and value[-1:] == value[:1] else ""
    head = text[match.start("head") : match.end("head")]
    kind = "password" if rule.kind == "secret" and head[:4].lower() == "pass" else rule.kind
    return start, end, f"{quote}{marker(kind)}{quote}"


def redact(text: str) -> str:
    """`text` with every recognised credential replaced by `[redacted:<kind>]`.

    Deterministic and idempotent; the same object is returned when nothing matched.
    """
    if not text:
        return text
    out = text
    lowered = text.lower()
    needles = lowered
    for rule in _RULES:
        if not any(needle in needles for needle in rule.needles):
            continue
        pieces: list[str] = []
        pos = 0
        for match in _matches(rule, out, lowered):
            start, end, new = _replacement(rule, match, out)
            pieces += (out[pos:start], new)
            pos = end
        if pieces:
            pieces.append(out[pos:])
            out = "".join(pieces)
            lowered = out.lower()
    return text if out == text else out


def _spans(text: str) -> list[tuple[int, int, str]]:
    """Non-overlapping `(start, end, marker)` of the credentials in `text`, in order."""
    found: list[tuple[int, int, int, str]] = []
    lowered = text.lower()
    for order, rule in enumerate(_RULES):
        if not any(needle in lowered for needle in rule.needles):
            continue
        for match in _matches(rule, text, lowered):
            start, end, new = _replacement(rule, match, text)
            found.append((start, order, end, new))
    found.sort()  # by position, then as `redact` applies the rules
    merged: list[tuple[int, int, str]] = []
    for start, _, end, replacement in found:
        if merged and start < merged[-1][1]:
            continue  # inside an earlier credential: already covered
        merged.append((start, end, replacement))
    return merged


def redact_slice(text: str, start: int, end: int, margin: int = 1_024) -> str:
    """`text[start:end]` with every credential overlapping it replaced by its marker.

    A credential cut by the slice's edges is still recognised: the search looks `margin`
    characters beyond both ends (snippets around an offset, previews of a long text).
    """
    start, end = max(0, start), min(len(text), end)
    if start >= end:
        return ""
    lo, hi = max(0, start - margin), min(len(text), end + margin)
    region = text[lo:hi]
    first, stop = start - lo, end - lo
    out: list[str] = []
    pos = first
    for s, e, replacement in _spans(region):
        if e <= pos or s >= stop:
            continue
        out.append(region[pos:s])
        out.append(replacement)
        pos = e
    if pos < stop:
        out.append(region[pos:stop])
    return "".join(out)


def contains_secret(text: str) -> bool:
    """True when `redact` would change `text`."""
    return redact(text) is not text


class RedactingFilter(logging.Filter):
    """A logging filter that redacts credentials from a record's final message.

    Attach it to a handler (`handler.addFilter(RedactingFilter())`) to keep credential shapes
    out of log files whatever logged them; the `cachepilot` command installs it on its own.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite the record's message in place; never drops a record."""
        try:
            message = record.getMessage()
        except Exception:  # a broken record is the logging module's problem to report
            return True
        cleaned = redact(message)
        if cleaned is not message:
            record.msg, record.args = cleaned, None
        if record.exc_info and not record.exc_text:
            formatter = logging.Formatter()
            record.exc_text = redact(formatter.formatException(record.exc_info))
        elif record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


LOG_FORMAT = "%(levelname)s %(name)s: %(message)s"
"""The format of the lines the `cachepilot` command (and each proxy worker) logs."""


def install_logging(level: int) -> None:
    """Log to stderr at `level` in `LOG_FORMAT`, every handler of the root logger redacting
    credential shapes (`RedactingFilter`). For the `cachepilot` command and each process it
    starts (proxy workers), so no process logs a line the others would have redacted."""
    logging.basicConfig(level=level, format=LOG_FORMAT)
    root = logging.getLogger()
    root.setLevel(level)
    for handler in root.handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
