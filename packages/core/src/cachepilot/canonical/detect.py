"""Volatile-span detection: dates, times, weekdays, ids, hashes, numbers and paths."""

from __future__ import annotations

import bisect
import functools
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cachepilot.canonical.config import (
    _KIND_PRIORITY,
    _PATH_CHARS,
    _STOP_VALUES,
    _TRAILING_PUNCT,
    CanonicalConfig,
    VolatileSpan,
)

__all__ = [
    "detect_volatile",
]

_MONTH_NAMES = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
_MONTH_ABBRS = ("Jan", "Feb", "Mar", "Apr", "Jun", "Jul", "Aug", "Sept", "Sep", "Oct", "Nov", "Dec")
_WEEKDAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_WEEKDAY_ABBRS = ("Mon", "Tues", "Tue", "Wed", "Thurs", "Thur", "Thu", "Fri", "Sat", "Sun")
_TZ_NAMES = (
    "UTC",
    "GMT",
    "UT",
    "EST",
    "EDT",
    "CST",
    "CDT",
    "MST",
    "MDT",
    "PST",
    "PDT",
    "AKST",
    "AKDT",
    "HST",
    "CET",
    "CEST",
    "EET",
    "EEST",
    "WET",
    "WEST",
    "BST",
    "IST",
    "JST",
    "KST",
    "AEST",
    "AEDT",
    "ACST",
    "ACDT",
    "AWST",
    "NZST",
    "NZDT",
    "MSK",
    "SGT",
    "HKT",
    "ICT",
    "PHT",
    "WIB",
)


def _words(full: Sequence[str], abbr: Sequence[str] = ()) -> str:
    """A flat alternation (longest first; Title and UPPER case), abbreviations with an opt. dot."""
    alts = [*full, *(w.upper() for w in full)]
    alts += [f"{w}\\.?" for w in (*abbr, *(a.upper() for a in abbr))]
    ordered = sorted(alts, key=lambda w: (-len(w.replace("\\.?", "")), w))
    return "(?:" + "|".join(ordered) + r")(?![A-Za-z])"


_MONTH = _words(_MONTH_NAMES, _MONTH_ABBRS)
_WEEKDAY = _words(_WEEKDAY_NAMES, _WEEKDAY_ABBRS)
_WEEKDAY_FULL = re.compile(_words(_WEEKDAY_NAMES))
_DAY = r"(?:3[01]|[12]\d|0?[1-9])(?:st|nd|rd|th)?(?![0-9A-Za-z])"
_YEAR = r"(?:19|20)\d{2}(?!\d|:\d)"
_TZ_NAME = "|".join(sorted(_TZ_NAMES, key=lambda w: (-len(w), w)))
_TZ = (
    r"(?:Z(?![A-Za-z0-9])"
    r"|[ \t]?[+-](?:[01]\d|2[0-3]):?[0-5]\d(?!\d)"
    rf"|[ \t]?\((?:{_TZ_NAME})(?:[ \t]?[+-]\d{{1,2}}(?::?[0-5]\d)?)?\)"
    rf"|[ \t]?(?:UTC|GMT)(?:[ \t]?[+-]\d{{1,2}}(?::?[0-5]\d)?)?(?![A-Za-z0-9])"
    rf"|[ \t](?:{_TZ_NAME})(?![A-Za-z0-9]))"
)
_AMPM = r"[ \t]?[AaPp]\.?[Mm]\.?(?![A-Za-z])"


@dataclass(frozen=True, slots=True)
class _Rx:
    """A pattern plus the characters that must not directly precede a match."""

    pattern: re.Pattern[str]
    left: str = ""
    """Forbidden preceding characters; ``\\w`` stands for any alphanumeric or ``_``."""
    in_identifier: bool = True
    """False: skip matches that continue a hyphenated identifier (``gpt-4o-2024-08-06``,
    ``claude-sonnet-4-5-20250929``: model snapshots are constants, not volatile values)."""

    def scan(self, text: str) -> Iterable[re.Match[str]]:
        left = self.left
        word = "\\w" in left
        for m in self.pattern.finditer(text):
            start = m.start()
            if start and left:
                before = text[start - 1]
                if before in left or (word and (before.isalnum() or before == "_")):
                    continue
            if (
                not self.in_identifier
                and start >= 2
                and text[start - 1] == "-"
                and text[start - 2].isalnum()
            ):
                continue
            yield m


_ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
_LETTERS = _ALNUM[:52]
_DIGITS = _ALNUM[52:]

# Atoms of date phrases. Types: d = date, t = time, dt = both, w = weekday, y = year, z = zone.
_ATOMS: tuple[tuple[str, _Rx], ...] = (
    (
        "d",
        _Rx(
            re.compile(r"(?:19|20)\d{2}-(?:0[1-9]|1[0-2])-(?:3[01]|[12]\d|0[1-9])(?!\d)"),
            _DIGITS,
            in_identifier=False,
        ),
    ),
    (
        "d",
        _Rx(
            re.compile(r"(?:19|20)\d{2}/(?:1[0-2]|0?[1-9])/(?:3[01]|[12]\d|0?[1-9])(?![\w/])"),
            "\\w/.",
        ),
    ),
    (
        "dn",  # numeric day/month/year in either order: validated in code
        _Rx(
            re.compile(
                r"(?P<a>\d{1,2})(?P<sep>[/.-])(?P<b>\d{1,2})(?P=sep)"
                r"(?P<y>(?:19|20)\d{2}|\d{2})(?![\w/]|[.-]\d)"
            ),
            "\\w/.:-",
        ),
    ),
    ("d", _Rx(re.compile(rf"{_MONTH}[ \t]+{_DAY}(?:,?[ \t]+{_YEAR})?"), _LETTERS)),
    ("d", _Rx(re.compile(rf"{_DAY}[ \t]+(?:of[ \t]+)?{_MONTH}(?:,?[ \t]+{_YEAR})?"), "\\w.")),
    ("d", _Rx(re.compile(rf"{_MONTH}[ \t]+{_YEAR}"), _LETTERS)),
    (
        "dt",
        _Rx(
            re.compile(r"(?:19|20)\d{6}T\d{4}(?:\d{2})?(?:\.\d+)?(?:Z|[+-]\d{4})?(?![\w])"),
            "\\w",
            in_identifier=False,
        ),
    ),
    (
        "t",
        _Rx(
            re.compile(
                r"(?P<h>\d{1,2}):[0-5]\d(?P<s>:(?:[0-5]\d|60)(?:[.,]\d{1,9})?)?(?!\d|:\d)"
                rf"(?P<ampm>{_AMPM})?(?P<tz>{_TZ})?"
            ),
            _ALNUM.replace("T", "") + ":.",
        ),
    ),
    ("t12", _Rx(re.compile(rf"(?P<h>\d{{1,2}}){_AMPM}(?:{_TZ})?"), "\\w.:")),
    ("w", _Rx(re.compile(_WEEKDAY), _LETTERS)),
    ("y", _Rx(re.compile(r"(?:19|20)\d{2}(?![\w]|[.:]\d)"), "\\w.")),
    (
        "z",
        _Rx(
            re.compile(
                r"(?:Africa|America|Antarctica|Asia|Atlantic|Australia|Europe|Indian|Pacific|Etc)"
                r"/[A-Z][A-Za-z_+-]*(?:/[A-Z][A-Za-z_+-]*)?(?![\w/])"
            ),
            "\\w/",
        ),
    ),
)
_SLOTS: dict[str, frozenset[str]] = {
    "d": frozenset("d"),
    "t": frozenset("t"),
    "dt": frozenset("dt"),
    "w": frozenset("w"),
    "y": frozenset("y"),
    "z": frozenset("z"),
}
"""What each atom type fills in a date phrase: a phrase has at most one of each (two dates
separated by a comma are two values, not one)."""
_JOIN = re.compile(r"[ \t]*,[ \t]*|[ \t]+|T|[ \t]+(?:at|on|@)[ \t]+|[ \t]*,[ \t]+(?:at|on)[ \t]+")
_JOIN_WEAK = re.compile(r"[ \t]+")  # years and zones only join across plain blanks
_NEAR = re.compile(r"[ \t]*[(\[)\],;-]{0,2}[ \t]*")
_WEEKDAY_CUE = re.compile(
    r"(?i:\b(?:today|tomorrow|yesterday)(?:[ \t]+(?:is|was|will[ \t]+be)|[ \t]*[:=])"
    r"|\b(?:day(?:[ \t]+of[ \t]+(?:the[ \t]+)?week)?|weekday)[ \t]*(?:[:=]|[ \t]is)"
    r"|\bit(?:'s|[ \t]+is))[ \t]*\Z"
)

_UUID = _Rx(
    re.compile(
        r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
        r"(?![0-9A-Za-z])"
    ),
    _ALNUM,
)
_HEX_RUN = re.compile(r"[0-9a-fA-F]{7,}(?![0-9A-Za-z])")
_HEX_0X = _Rx(re.compile(r"0[xX][0-9a-fA-F]{6,}(?![0-9A-Za-z])"), _ALNUM)
_GIT_CUE = re.compile(
    r"(?i:\b(?:commit|sha1?|rev(?:ision)?|head[ \t]+is[ \t]+(?:now[ \t]+)?at|hash|checkout"
    r"|cherry-pick|revert|fixup!?|squash!?|parent|tree|merge))[ \t]*[:=#]?[ \t]*\Z"
)
_GIT_LOG_PREFIX = re.compile(r"[ \t*|\\/]*")
_PATH_TOKEN = _Rx(re.compile(rf"/{_PATH_CHARS}*"), "\\w.~/\\$-")
_DRIVE_TOKEN = re.compile(rf":[\\/]{_PATH_CHARS}*")
_DEFAULT_ROOT = re.compile(
    r"/(?:home|Users|root)/[^/\\]+"
    r"|/(?:tmp|var/tmp|private/tmp|private/var|var/folders)/[^/\\]+"
    r"|/mnt/[a-z]/Users/[^/\\]+"
    r"|[A-Za-z]:[\\/](?:Users|Documents and Settings)[\\/][^/\\]+"
)
_PATH_EXTEND = re.compile(rf"{_PATH_CHARS}*")
_ID_SEP = re.compile(r"=>|->|[:=]")
_ID_VALUE = re.compile(
    r"[ \t]*(?:\"(?P<dq>[^\"\n]{1,200})\"|'(?P<sq>[^'\n]{1,200})'"
    r"|(?P<bare>[A-Za-z0-9][^\s\"'`,;&)\]}>]{0,199}(?![^\s\"'`,;&)\]}>])))"
)
_CACHE_ENTRIES = 64
_KEY_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")


@dataclass(frozen=True, slots=True)
class _Candidate:
    start: int
    end: int
    kind: str
    tier: int  # 0 named value, 1 user pattern, 2 built-in

    @property
    def rank(self) -> tuple[int, int, int, int, str]:
        priority = _KIND_PRIORITY.get(self.kind, 99)
        return (self.tier, self.start - self.end, priority, self.start, self.kind)


def _normal_key(key: str) -> str:
    return "".join(w.lower() for w in _KEY_WORDS.findall(key))


class _Detectors:
    """Compiled detectors of one `CanonicalConfig`."""

    def __init__(self, config: CanonicalConfig) -> None:
        self.kinds = config.enabled_kinds
        self.patterns = [(name, re.compile(p)) for name, p in config.patterns.items()]
        self.named = sorted(config.named_values.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        self.number = _Rx(
            re.compile(rf"\d{{{config.min_number_digits},}}(?:\.\d+)?(?![0-9A-Za-z]|[.,]\d)"),
            _ALNUM + ".,",
            in_identifier=False,
        )
        self.roots = [r for r in (config.cwd, config.home, *config.path_roots) if r]
        self.default_roots = config.default_path_roots
        self.id_keys = {_normal_key(k) for k in config.id_keys} - {""}
        self.id_key_ends = {k[-1] for k in self.id_keys}
        # Prompts repeat across calls (and threads): remember the spans of recent texts.
        self._cache: OrderedDict[str, tuple[VolatileSpan, ...]] = OrderedDict()
        self._lock = threading.Lock()

    # -- entry point --------------------------------------------------------------------------

    def detect(self, text: str) -> list[VolatileSpan]:
        with self._lock:
            cached = self._cache.get(text)
            if cached is not None:
                self._cache.move_to_end(text)
                return list(cached)
        spans = tuple(self._detect(text))
        with self._lock:
            self._cache[text] = spans
            while len(self._cache) > _CACHE_ENTRIES:
                self._cache.popitem(last=False)
        return list(spans)

    def _detect(self, text: str) -> list[VolatileSpan]:
        found: list[_Candidate] = []
        for name, literal in self.named:
            found.extend(_literal_hits(text, literal, name))
        for name, pattern in self.patterns:
            found.extend(_pattern_hits(text, pattern, name))
        kinds = self.kinds
        if kinds & {"datetime", "date", "time", "weekday"}:
            found.extend(self._dates(text))
        if "uuid" in kinds:
            found.extend(_Candidate(m.start(), m.end(), "uuid", 2) for m in _UUID.scan(text))
        if "hex" in kinds:
            found.extend(self._hex(text))
        if "number" in kinds:
            found.extend(
                _Candidate(m.start(), m.end(), "number", 2) for m in self.number.scan(text)
            )
        if "path" in kinds:
            found.extend(self._paths(text))
        if "id" in kinds and self.id_keys:
            found.extend(self._ids(text))
        chosen = _select(found)
        return [VolatileSpan(c.start, c.end, c.kind, text[c.start : c.end]) for c in chosen]

    # -- dates and times ----------------------------------------------------------------------

    def _dates(self, text: str) -> list[_Candidate]:
        atoms: list[_Candidate] = []
        for kind, rx in _ATOMS:
            for m in rx.scan(text):
                if kind == "dn":
                    if not _valid_numeric_date(m):
                        continue
                    kind_ = "d"
                elif kind in ("t", "t12"):
                    if not _valid_time(m, twelve=kind == "t12"):
                        continue
                    kind_ = "t"
                else:
                    kind_ = kind
                atoms.append(_Candidate(m.start(), m.end(), kind_, 2))
        if not atoms:
            return []
        # Longest atom wins an overlap (a year inside a date, a day inside a datetime).
        groups: list[list[_Candidate]] = []
        for atom in _select(atoms):
            if groups:
                last = groups[-1][-1]
                gap = text[last.end : atom.start]
                weak = "y" in (last.kind, atom.kind) or "z" in (last.kind, atom.kind)
                taken = set().union(*(_SLOTS[a.kind] for a in groups[-1]))
                joins = _JOIN_WEAK if weak else _JOIN
                if not (_SLOTS[atom.kind] & taken) and joins.fullmatch(gap):
                    groups[-1].append(atom)
                    continue
            groups.append([atom])
        out: list[_Candidate] = []
        lone_weekdays: list[_Candidate] = []
        for group in groups:
            types = {a.kind for a in group}
            has_date = bool(types & {"d", "dt"})
            has_time = bool(types & {"t", "dt"})
            start, end = group[0].start, group[-1].end
            if has_time and (has_date or "w" in types):
                kind = "datetime"
            elif has_date:
                kind = "date"
            elif has_time:
                kind = "time"
            elif types == {"w"}:
                lone_weekdays.append(_Candidate(start, end, "weekday", 2))
                continue
            else:
                continue  # a year or a zone alone is not volatile enough
            if kind in self.kinds:
                out.append(_Candidate(start, end, kind, 2))
        if "weekday" in self.kinds and lone_weekdays:
            out.extend(_standalone_weekdays(text, lone_weekdays, out))
        return out

    # -- hex and git SHAs ---------------------------------------------------------------------

    def _hex(self, text: str) -> list[_Candidate]:
        out = [_Candidate(m.start(), m.end(), "hex", 2) for m in _HEX_0X.scan(text)]
        for m in _HEX_RUN.finditer(text):
            start, end, value = m.start(), m.end(), m.group()
            if not _digit_and_letter(value):
                continue
            before = text[start - 1] if start else ""
            if before.isalnum() or before == "_":
                # `git describe`: v1.2.3-14-g<sha>
                if text[start - 2 : start] == "-g" and value.islower():
                    out.append(_Candidate(start, end, "hex", 2))
                continue
            if len(value) >= 12 or (value.islower() and _git_context(text, start, end)):
                out.append(_Candidate(start, end, "hex", 2))
        return out

    # -- paths --------------------------------------------------------------------------------

    def _paths(self, text: str) -> list[_Candidate]:
        out: list[_Candidate] = []
        if self.default_roots:
            tokens = [(m.start(), m.group()) for m in _PATH_TOKEN.scan(text)]
            for m in _DRIVE_TOKEN.finditer(text):
                at = m.start() - 1
                if at >= 0 and text[at].isascii() and text[at].isalpha():
                    before = text[at - 1] if at else ""
                    if not (before.isalnum() or before in "_.~/\\$-"):
                        tokens.append((at, text[at : m.end()]))
            for at, raw in tokens:
                token = raw.rstrip(_TRAILING_PUNCT)
                if _DEFAULT_ROOT.match(token):
                    out.append(_Candidate(at, at + len(token), "path", 2))
        for root in self.roots:
            at = text.find(root)
            while at != -1:
                end = at + len(root)
                before = text[at - 1] if at else ""
                after = text[end] if end < len(text) else ""
                left_ok = not before or not (before.isalnum() or before in "._~/\\$-")
                slash = after in ("/", "\\")
                right_ok = not after or slash or not re.match(_PATH_CHARS, after)
                if left_ok and right_ok:
                    tail = _PATH_EXTEND.match(text, end) if slash else None
                    stop = tail.end() if tail else end
                    token = text[at:stop].rstrip(_TRAILING_PUNCT)
                    if len(token) >= len(root):
                        out.append(_Candidate(at, at + len(token), "path", 2))
                at = text.find(root, at + 1)
        return out

    # -- id-like keys -------------------------------------------------------------------------

    def _ids(self, text: str) -> list[_Candidate]:
        out: list[_Candidate] = []
        seps = [(m.start(), m.end(), False) for m in _ID_SEP.finditer(text)]
        at = text.find(" is ")
        while at != -1:
            seps.append((at, at + 3, True))
            at = text.find(" is ", at + 1)
        for start, end, is_sep in seps:
            key = self._key_before(text, start)
            if key is None:
                continue
            m = _ID_VALUE.match(text, end)
            if m is None:
                continue
            group = next(g for g in ("dq", "sq", "bare") if m.group(g) is not None)
            vstart, vend = m.start(group), m.end(group)
            value = m.group(group)
            if group == "bare":
                value = value.rstrip(_TRAILING_PUNCT)
                vend = vstart + len(value)
            if not value.strip() or value.strip().lower() in _STOP_VALUES:
                continue
            if (is_sep or not key.endswith("id")) and not any(c.isdigit() for c in value):
                continue
            out.append(_Candidate(vstart, vend, "id", 2))
        return out

    def _key_before(self, text: str, at: int) -> str | None:
        """The id key that ends just before a separator at `at`, if any."""
        i = at
        while i > 0 and text[i - 1] in " \t":
            i -= 1
        if i > 0 and text[i - 1] in "\"'":
            i -= 1
        if i == 0 or text[i - 1].lower() not in self.id_key_ends:
            return None
        j = i
        while j > 0 and i - j < 48 and (text[j - 1].isalnum() or text[j - 1] in "_- "):
            j -= 1
        words = [w.lower() for w in _KEY_WORDS.findall(text[j:i])]
        for k in range(len(words)):
            key = "".join(words[k:])
            if key in self.id_keys:
                return key
        return None


def _git_context(text: str, start: int, end: int) -> bool:
    """A 7–11 hex run counts as a short SHA after a git cue or at the head of a log line."""
    if _GIT_CUE.search(text, max(0, start - 40), start):
        return True
    line_start = text.rfind("\n", 0, start) + 1
    return bool(
        _GIT_LOG_PREFIX.fullmatch(text, line_start, start)
        and end + 1 < len(text)
        and text[end] in " \t"
        and not text[end + 1].isspace()
    )


def _valid_time(m: re.Match[str], *, twelve: bool) -> bool:
    hour_text = m.group("h")
    hour = int(hour_text)
    if twelve:
        return 1 <= hour <= 12
    if hour > 23:
        return False
    # "3:16" (a verse, a ratio) is prose; a time needs a 2-digit hour, seconds, AM/PM or a zone.
    return len(hour_text) == 2 or any(m.group(g) for g in ("s", "ampm", "tz"))


def _valid_numeric_date(m: re.Match[str]) -> bool:
    a, b, year, sep = int(m.group("a")), int(m.group("b")), m.group("y"), m.group("sep")
    if sep != "/" and len(year) != 4:
        return False  # 1.2.26 is a version; 03-17-26 too ambiguous
    if a < 1 or b < 1 or a > 31 or b > 31:
        return False
    return a <= 12 or b <= 12


def _standalone_weekdays(
    text: str, lone: list[_Candidate], dated: list[_Candidate]
) -> list[_Candidate]:
    """Weekdays alone count only next to a date/time or in 'Today is Tuesday'-like phrases."""
    out: list[_Candidate] = []
    spans = sorted((c.start, c.end) for c in dated)
    starts = [s for s, _ in spans]
    for day in lone:
        if not _WEEKDAY_FULL.fullmatch(text, day.start, day.end):
            continue  # "Sun", "Sat" alone are too ambiguous
        if _WEEKDAY_CUE.search(text, max(0, day.start - 40), day.start):
            out.append(day)
            continue
        i = bisect.bisect_left(starts, day.end)
        after = spans[i] if i < len(spans) else None
        before = spans[i - 1] if i > 0 else None
        if (after and _NEAR.fullmatch(text, day.end, after[0])) or (
            before and before[1] <= day.start and _NEAR.fullmatch(text, before[1], day.start)
        ):
            out.append(day)
    return out


def _digit_and_letter(value: str) -> bool:
    return any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


def _literal_hits(text: str, literal: str, name: str) -> Iterable[_Candidate]:
    at = text.find(literal)
    while at != -1:
        end = at + len(literal)
        left_ok = at == 0 or not (literal[0].isalnum() and text[at - 1].isalnum())
        right_ok = end == len(text) or not (literal[-1].isalnum() and text[end].isalnum())
        if left_ok and right_ok:
            yield _Candidate(at, end, name, 0)
        at = text.find(literal, at + 1)


def _pattern_hits(text: str, pattern: re.Pattern[str], name: str) -> Iterable[_Candidate]:
    group: int | str = (
        "value" if "value" in pattern.groupindex else (1 if pattern.groups >= 1 else 0)
    )
    for m in pattern.finditer(text):
        start, end = m.span(group)
        if start >= 0 and end > start:
            yield _Candidate(start, end, name, 1)


def _select(candidates: Iterable[_Candidate]) -> list[_Candidate]:
    """Non-overlapping spans, sorted by start: tier first, then longest, then kind priority."""
    starts: list[int] = []
    chosen: list[_Candidate] = []
    for cand in sorted(set(candidates), key=lambda c: c.rank):
        if cand.end <= cand.start:
            continue
        i = bisect.bisect_right(starts, cand.start)
        if i > 0 and chosen[i - 1].end > cand.start:
            continue
        if i < len(chosen) and chosen[i].start < cand.end:
            continue
        starts.insert(i, cand.start)
        chosen.insert(i, cand)
    return chosen


def _detectors(config: CanonicalConfig) -> _Detectors:
    compiled = config._compiled
    if not isinstance(compiled, _Detectors):  # compiled once per config, on first use
        compiled = config._compiled = _Detectors(config)
    return compiled


@functools.cache
def _default_config() -> CanonicalConfig:
    return CanonicalConfig()


def detect_volatile(text: str, config: CanonicalConfig | None = None) -> list[VolatileSpan]:
    """Find the volatile values in `text`.

    Args:
        text: any text (non-strings give no spans).
        config: detector settings; the defaults when None.

    Returns:
        Non-overlapping spans sorted by start. Named values, then user patterns, win over
        built-in detectors; among built-ins the longest span wins (ties: `id`, `uuid`,
        `datetime`, `date`, `time`, `path`, `hex`, `number`, `weekday`).
    """
    if not isinstance(text, str) or not text:
        return []
    return _detectors(config or _default_config()).detect(text)


# --------------------------------------------------------------------------------------------
# Placeholder assignment
