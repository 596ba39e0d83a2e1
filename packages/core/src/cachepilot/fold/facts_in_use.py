"""Facts in use: the exact values from folded tool output that the agent is working with.

A fold replaces tool outputs by a summary; what an agent most often needs back later is an
exact value it read there (a class it codes against, a path, an id, a number), not the prose.
This section carries them, grouped by where they came from (the file a read showed, the
command that printed them), most recent source first:

* values the agent already repeated or acted on (its text or tool-call arguments) come first
  in their group, then names the output defines (`class X`, `def f`), then the rest by how
  specific and how frequent they are;
* a file read several times (in parts, or again after a change) gathers the values of
  every read and takes the place of its latest;
* values already in the rest of the summary, or in the kept tail, are left out.

Pure, deterministic and linear in the folded text: each output is scanned through a bounded
window and the number of values kept per source is capped.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from functools import lru_cache

from cachepilot.fold.ahead import SUMMARY_STAGES
from cachepilot.memory import patterns
from cachepilot.memory.facts import count_candidates, extract_candidates, message_search_text
from cachepilot.memory.tools import analyze_call
from cachepilot.memory.values import SCAN_HEAD, SCAN_TAIL
from cachepilot.memory.values import output_scores as _output_scores
from cachepilot.memory.values import ranked as _ranked
from cachepilot.messages import Message, ToolCall
from cachepilot.support.foreground import yield_to_foreground
from cachepilot.support.identity_memo import IdentityMemo
from cachepilot.support.redact import redact
from cachepilot.tokens import TokenCounter

__all__ = ["FACTS_HEADER", "facts_in_use", "values_in_view"]

FACTS_HEADER = "Facts in use (exact values from folded tool output, latest first):"

_MAX_SOURCES = 200
_LABEL_CHARS = 80
_KEY_CHARS = 300
_READ_LABEL = "file "
_HALF_LIFE = 30.0
"""Messages after which a value's priority halves."""
_MAX_MISSES = 64
_MAX_MESSAGES = 8 * int(_HALF_LIFE) * 2
_IN_USE = 10.0
"""Score added to a value the agent repeated or acted on."""


@dataclass(slots=True)
class _Source:
    label: str
    """The file or command the values came from, whole (the key of the source)."""
    order: int
    values: dict[str, float] = field(default_factory=dict)
    seen: dict[str, int] = field(default_factory=dict)
    """Index of the message that last showed or used each value."""


def facts_in_use(
    messages: Sequence[Message],
    budget_tokens: int,
    counter: TokenCounter,
    *,
    exclude_text: str = "",
    shown: AbstractSet[str] | None = None,
) -> str:
    """The "facts in use" section for `messages` (a folded range), within `budget_tokens`.

    Args:
        messages: the folded messages, in order.
        budget_tokens: the section's size limit under `counter` (0 → empty).
        counter: token counter.
        exclude_text: text the model still sees (the rest of the summary, the kept tail):
            values found in it (as fact-shaped values of their own) are not repeated.
        shown: the values found in that text, when the caller has them (`values_in_view`);
            `exclude_text` is then not read.

    Returns:
        The section (header and one line per source), or "" when nothing fits.
    """
    if budget_tokens <= 0 or not messages:
        return ""
    # Messages older than 16 half-lives weigh under 1/65,000 of a new one: not read.
    messages = messages[-_MAX_MESSAGES:]
    # What the range alone decides may have been computed ahead (`fold.ahead`): the sources,
    # their values ranked, and the candidates in pick order; what the model still sees is
    # left out here (the candidates' order is total, so filtering keeps it).
    newest_first, in_order, ordered = SUMMARY_STAGES.get(
        "facts", (messages,), lambda: _candidates(messages)
    )
    if not newest_first:
        return ""
    # The values in view, found in one pass (a substring test per value would cost the
    # text's length for each of them).
    if shown is None:
        shown = set(count_candidates(exclude_text)) if exclude_text else set()
    chosen: dict[int, set[str]] = {id(s): set() for s in newest_first}
    order: list[tuple[int, str]] = []  # pick order: the last picked goes first when trimming
    used = counter.count(FACTS_HEADER)
    misses = 0
    # The values in view are skipped as they come: the pick usually stops long before the end.
    for _, _, value, index in ordered:
        if value in shown:
            continue
        source = newest_first[index]
        picked = chosen[id(source)]
        cost = counter.count(value) + 1
        if not picked:
            cost += counter.count(f"- {_display(source.label)}: ") + 1
        if used + cost > budget_tokens:
            misses += 1
            if misses > _MAX_MISSES:
                break
            continue
        used += cost
        picked.add(value)
        order.append((id(source), value))
    while order:
        text = _render(newest_first, chosen, in_order)
        over = counter.count(text) - budget_tokens
        if over <= 0:
            return text
        # Counted apart, values under-count the joined text a little: drop the least
        # important ones until the estimate covers the excess, then count again.
        while order and over > 0:
            key, value = order.pop()
            chosen[key].discard(value)
            over -= counter.count(value) + 1
    return ""


def values_in_view(texts: Sequence[str], messages: Sequence[Message]) -> frozenset[str]:
    """The fact-shaped values of `texts` and `messages` joined by newlines, as
    `count_candidates` finds them in the joined text, found piece by piece.

    No value spans a newline and a newline starts or ends every one as the text's own start or
    end does, so the joined text holds exactly the pieces' values. Each message's are memoised
    by the message (a fold's kept tail is mostly the last fold's), each text's by the text.
    """
    found: set[str] = set()
    for text in texts:
        found |= _text_values(text)
    for message in messages:
        values = _MESSAGE_VALUES.get(message)
        if values is None:
            values = "\n".join(count_candidates(message_search_text(message)))
            _MESSAGE_VALUES.put(message, values)
        if values:
            found.update(values.split("\n"))
    return frozenset(found)


_MESSAGE_VALUES: IdentityMemo[Message, str] = IdentityMemo(4_096)
"""Each message's values joined by newlines (no value holds one): held while the message
lives, in about its text's size, where a set of the small strings would take some twenty
times as much."""


@lru_cache(maxsize=64)
def _text_values(text: str) -> frozenset[str]:
    return frozenset(count_candidates(text))


def _render(
    newest_first: Sequence[_Source], chosen: dict[int, set[str]], in_order: dict[str, list[str]]
) -> str:
    # What was chosen is never in view: each source's chosen values in its own order.
    lines = [
        f"- {_display(s.label)}: " + ", ".join(v for v in in_order[s.label] if v in chosen[id(s)])
        for s in newest_first
        if chosen[id(s)]
    ]
    return "\n".join([FACTS_HEADER, *lines]) if lines else ""


_Candidate = tuple[float, int, str, int]
"""(score, -order, value, index of its source in the newest-first list): atomic items only, so
the garbage collector stops tracking the tuples (the stage memo keeps many thousands of them,
and every full collection would walk them, on the request path too)."""


def _candidates(
    messages: Sequence[Message],
) -> tuple[list[_Source], dict[str, list[str]], list[_Candidate]]:
    """The sources of `messages` (newest first), each one's ranked values (its label's own
    left out), and every candidate value in pick order: a function of the range alone (the
    result is shared, never changed)."""
    newest_first = sorted(_collect(messages), key=lambda s: -s.order)
    in_order = {s.label: [v for v in _ranked(s.values) if v not in s.label] for s in newest_first}
    # One ranking across sources: a value's score (in use, defined, specific) fades with the
    # messages since the agent last saw or used it, so recent work wins over old work and a
    # value in use wins over one of the same age never used.
    end = len(messages)
    candidates = sorted(
        (
            (
                -s.values[v] * 0.5 ** ((end - s.seen.get(v, s.order)) / _HALF_LIFE),
                -s.order,
                v,
                index,
            )
            for index, s in enumerate(newest_first)
            for v in in_order[s.label]
        ),
        key=lambda c: c[:3],
    )
    return newest_first, in_order, candidates


def _collect(messages: Sequence[Message]) -> list[_Source]:
    """Values of each tool output, scored and gathered by file or command."""
    labels: dict[str, str] = {}
    for message in messages:
        for call in message.tool_calls:
            labels[call.id] = _call_label(call)
    by_label: dict[str, _Source] = {}
    origin: dict[str, str] = {}  # value → label of the newest output that shows it
    for order, message in enumerate(messages):
        yield_to_foreground()  # a precomputation's pause (a no-op on a request's thread)
        if message.role == "tool":
            label = labels.get(message.tool_call_id or "") or _bounded(message.name or "tool")
            values = _output_scores(message.text)
            if not values:
                continue
            source = by_label.get(label)
            if source is None:
                source = _Source(label, order)
                by_label[label] = source
            source.order = order
            for value, score in values.items():
                source.values[value] = max(score, source.values.get(value, 0.0))
                source.seen[value] = order
                origin[value] = label
            if len(by_label) > _MAX_SOURCES:
                oldest = min(by_label.values(), key=lambda s: s.order)
                del by_label[oldest.label]
        elif message.role == "assistant" and origin:
            for value in _agent_values(message):
                found = by_label.get(origin.get(value) or "")
                if found is not None and value in found.values:
                    # The agent repeated it or acted on it: it is in use.
                    found.values[value] += _IN_USE
                    found.seen[value] = order
    return [s for s in by_label.values() if s.values]


def _agent_values(message: Message) -> Iterable[str]:
    text = message_search_text(message)
    return extract_candidates(patterns.window(text, SCAN_HEAD, SCAN_TAIL))


_MEMO_ARGUMENT_CHARS = 2_000


def _call_label(call: ToolCall) -> str:
    # Memoised by the call's text (a fold labels every call of its range again), unless it is
    # long (a file's content in a write, a name the model made up): the memo holds its keys.
    if len(call.arguments) + len(call.name) > _MEMO_ARGUMENT_CHARS:
        return _label(call.name, call.parsed_arguments())
    return _labelled(call.name, call.arguments)


@lru_cache(maxsize=4_096)
def _labelled(name: str, arguments: str) -> str:
    return _label(name, ToolCall(id="", name=name, arguments=arguments).parsed_arguments())


def _label(name: str, args: dict[str, object] | object) -> str:
    facts = analyze_call(name, args if isinstance(args, dict) else {})
    for touch in facts.files:
        if touch.action == "read":
            return _READ_LABEL + _bounded(touch.path)
    for touch in facts.files:
        if touch.action in ("create", "edit"):
            # An edit's output (a confirmation, a snippet) adds to what is known of the
            # file; it does not replace the read.
            return "edit " + _bounded(touch.path)
    if facts.command:
        return "$ " + _bounded(facts.command.splitlines()[0])
    return _bounded(name)


def _bounded(text: str) -> str:
    return redact(text.strip()[:_KEY_CHARS])


def _display(label: str) -> str:
    """A label as shown: a path keeps its end (the file name tells files apart), a command
    its start."""
    if len(label) <= _LABEL_CHARS:
        return label
    kind, _, rest = label.partition(" ")
    if kind in (_READ_LABEL.strip(), "edit"):
        return f"{kind} …{rest[-(_LABEL_CHARS - len(kind) - 2) :]}"
    return label[: _LABEL_CHARS - 1] + "…"
