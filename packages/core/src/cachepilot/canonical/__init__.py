"""Prefix canonicalization: volatile-value placeholders, frozen per-thread values, tool order.

Providers bill a byte-identical cached prompt prefix at a fraction of the price. A system prompt
rendered with ``datetime.now()``, the working directory or a session id differs on every call
(or in every thread), so the cache misses from the very first token. `Canonicalizer.apply`
rewrites one model request so its stable part (tools + system prompt) stays byte-identical:

* **Detection** (`detect_volatile`): dates, datetimes, times, weekdays, UUIDs, long hex and git
  SHAs, long numbers, absolute paths under home/tmp/cwd roots, values of id-like keys
  (``session_id=…``), plus user patterns and named values. Spans never overlap; user spans
  (named values, then patterns) beat built-in ones, and among built-ins the longest wins.
* **Placeholders** look like ``{{date_1}}``: kind plus ordinal of first appearance, so the
  canonical text is a pure function of the prompt's *stable* text (and of which values are
  equal). It is identical across the calls of a thread and across threads whose prompts differ
  only in their volatile values, so a new thread's first call already hits the shared prefix.
  The same value gets the same placeholder everywhere in one request. Named values use their
  name without an ordinal (``{{user_id}}``). The format is ASCII on purpose: ``{{``/``}}`` are
  common tokens in code-trained BPE vocabularies, JSON serializers with ``ensure_ascii`` leave them
  alone (``⟨…⟩`` would turn into ``\\u27e8`` escapes), and models read ``{{name}}`` as a template
  variable. Both delimiters are configurable. Send the result straight to the model: an
  f-string or mustache prompt template applied afterwards would read the braces as variables.
* **Dynamic-context block**: the real values, one ``{{label}} = value`` line each, in a small
  ``<context>`` block placed after the stable part: at the head of the first user message
  (default) or at the system tail. When there is no user message yet, the block goes to the
  system tail, and the thread keeps it there until the next refresh point (moving it on the next
  call would break the system prompt).

**In place until a value changes** (`CanonicalConfig.move_when_changed`, on by default): while
every value equals the previous call's, the request goes as the client wrote it (no
placeholders, no block; equally byte-stable and shorter). The call where a value of the same
conversation first differs moves the values into the block; its prompt changed there anyway.

Per-thread values live in `CanonicalState` and are *frozen* when they move into the block, so
the block and with it the first user message stay byte-identical across calls. The model still
reads every value's current text: a value that changed since the block (or an earlier note)
was written gets an update note at the end of the newest user or tool message of the request
where the change was first seen (`cachepilot.canonical.notes`), re-rendered byte-identically
in later requests; clocks are noted only when they moved by `clock_resolution_seconds` and
read "as of" their reading. A request whose history does not continue the thread's (another
conversation under the same thread id) refreshes the values and learns nothing across it.
The block itself is rewritten (the notes coalesced into it):

* ``refresh="maintenance"`` (default): when ``apply(..., maintenance=True)`` is called, i.e. at a
  scheduled maintenance point that rewrites history anyway;
* ``refresh="always"``: on every call (the block follows the current values; tools + system still
  cache, the prefix breaks from the first user message on);
* ``refresh="never"``: the first value of each placeholder is kept for the thread's lifetime.

**New values mid-thread.** A placeholder the state has not seen can only appear when the canonical
stable part itself changed since the previous call (its text did not contain that placeholder
before). The provider cache then misses from that change onwards anyway, and the block lies after
it, so rewriting the block costs nothing: the new placeholder is added with its current value,
and (unless ``refresh="never"`` or ``refresh_on_prefix_change=False``) every frozen value is
refreshed and the block placement re-resolved ("refresh when it is free"). This also repairs the
one hazard of ordinal numbering: when a new path is inserted before an old one, ``path_1`` names
a different value, and the refresh rebinds it. So the block changes only (a) when something
before it already changed, (b) at maintenance points, or (c) with ``refresh="always"``: the
behaviour is deterministic and prefix-safe. Under ``refresh="never"`` existing placeholders keep
their first value even then (choose it only for prompts whose layout of volatile values is fixed).

**Learned spans.** A token-like span that changed between two calls of a thread while the text
around it stayed (a session id or build number no pattern knows) is learned
(`cachepilot.canonical.volatility`) and frozen like a built-in value from then on
(``{{learned_1}}``), in the system prompt, leading system messages and tool descriptions; a
genuine instruction change is passed through. The spans are part of `CanonicalState`.

Only the system prompt (and, by default, system-role messages at the head of ``messages``) is
canonicalized; the transcript is not (tool outputs legitimately contain dates). Tool
descriptions can be canonicalized too (off by default). Tools are sorted by name and rendered
with recursively sorted keys (lists, e.g. a schema's ``required``, keep their order);
`tool_fingerprint` identifies a tool set so a change mid-thread is detectable (counted in the
state and logged).

Known limits: a raw prompt that already contains placeholder-shaped text (``{{date_1}}``) is not
escaped; paths containing spaces are only recognised under a configured ``cwd``/``home``/root;
with ``dedupe_values=True`` two fields that coincidentally hold the same value (a start time equal
to "now" on the first call) share one placeholder, which changes the canonical text when they
diverge later: set ``dedupe_values=False`` for such prompts.

Part `canonical` of the core (docs/architecture.md). May import: `messages`, `support`;
tests/layout/test_parts.py checks it.
"""

from __future__ import annotations

from cachepilot.canonical.config import (
    DEFAULT_ID_KEYS,
    KINDS,
    CanonicalConfig,
    Placement,
    Refresh,
    VolatileKind,
    VolatileSpan,
)
from cachepilot.canonical.detect import detect_volatile
from cachepilot.canonical.freeze import Canonicalizer, CanonicalState
from cachepilot.canonical.text import CanonicalText, canonicalize_text, render_block
from cachepilot.canonical.tools import (
    canonical_json,
    canonicalize_tool,
    order_tools,
    tool_fingerprint,
    tool_name,
)
from cachepilot.canonical.volatility import LearnedSpan

__all__ = [
    "DEFAULT_ID_KEYS",
    "KINDS",
    "CanonicalConfig",
    "CanonicalState",
    "CanonicalText",
    "Canonicalizer",
    "LearnedSpan",
    "Placement",
    "Refresh",
    "VolatileKind",
    "VolatileSpan",
    "canonical_json",
    "canonicalize_text",
    "canonicalize_tool",
    "detect_volatile",
    "order_tools",
    "render_block",
    "tool_fingerprint",
    "tool_name",
]
