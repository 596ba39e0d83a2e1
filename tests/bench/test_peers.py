"""Peer baselines: each fires when its own rules say so, and not below its thresholds."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

from cachepilot.messages import (
    ImagePart,
    Message,
    ReasoningPart,
    TextPart,
    ToolCall,
    pairing_issues,
)
from cachepilot.tokens import TokenCounter
from cachepilot_bench.peers import (
    AgentsTrimmer,
    KeepLastN,
    LcClearToolUses,
    LcClearToolUsesScaled,
    LcSummarization,
    OpenCodePrune,
)
from cachepilot_bench.peers.agents_convert import from_items, items_to_messages, to_items
from cachepilot_bench.peers.opencode_prune import (
    CLEARED_PLACEHOLDER,
    estimate_tokens,
    prune_candidates,
)
from cachepilot_bench.strategy import CallContext, PreparedCall, SessionContext, Strategy

COUNTER = TokenCounter("approximate")
SYSTEM = "You are a careful coding agent."
TOOLS = ({"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}},)


# --- helpers -----------------------------------------------------------------------------


def turn(n: int, outputs: Sequence[int], *, tool: str = "bash", char: str = "x") -> list[Message]:
    """One user turn: a user message, one tool call per output size (chars), a final answer."""
    msgs = [Message("user", f"task {n}: please do step {n}", id=f"u{n}")]
    for k, size in enumerate(outputs):
        call_id = f"c{n}_{k}"
        msgs.append(
            Message(
                "assistant",
                f"running step {n}.{k}",
                tool_calls=(ToolCall(call_id, tool, json.dumps({"cmd": f"run {n} {k}"})),),
                id=f"a{n}_{k}",
            )
        )
        body = f"out {n}.{k} " + char * max(0, size - len(f"out {n}.{k} "))
        msgs.append(Message("tool", body, tool_call_id=call_id, name=tool, id=f"t{n}_{k}"))
    msgs.append(Message("assistant", f"done with step {n}", id=f"f{n}"))
    return msgs


def session(*turns: list[Message]) -> list[Message]:
    return [m for t in turns for m in t]


def peak_tokens(transcript: Sequence[Message]) -> int:
    return COUNTER.count(SYSTEM) + COUNTER.count_messages(transcript)


def replay(
    strategy: Strategy,
    transcript: Sequence[Message],
    *,
    context_window: int = 1_000_000,
    peak: int | None = None,
) -> list[PreparedCall]:
    """Every assistant message is one call; the strategy gets what arrived since its last call."""
    strategy.start(
        SessionContext(
            session_id="s",
            system=SYSTEM,
            tools=TOOLS,
            context_window=context_window,
            counter=COUNTER,
            trace_peak_tokens=peak_tokens(transcript) if peak is None else peak,
        )
    )
    calls: list[PreparedCall] = []
    last = 0
    for i, message in enumerate(transcript):
        if message.role != "assistant":
            continue
        ctx = CallContext(
            call_number=len(calls),
            new_messages=tuple(transcript[last:i]),
            history=tuple(transcript[:i]),
            timestamp=None,
        )
        calls.append(strategy.prepare(ctx))
        last = i
    for call in calls:
        assert call.system == SYSTEM
        assert pairing_issues(call.messages) == []
        assert not call.archived
    return calls


def first_call_after(transcript: Sequence[Message], user_id: str) -> int:
    """Index (call number) of the first call after the user message `user_id`."""
    seen = False
    number = 0
    for message in transcript:
        if message.id == user_id:
            seen = True
        if message.role == "assistant":
            if seen:
                return number
            number += 1
    raise AssertionError(user_id)


def by_id(call: PreparedCall) -> dict[str, Message]:
    return {m.id: m for m in call.messages if m.id}


# --- keep-last-n -------------------------------------------------------------------------


def test_keep_last_n_keeps_everything_below_40_percent() -> None:
    transcript = session(*(turn(n, [400]) for n in range(1, 9)))
    calls = replay(KeepLastN(), transcript, context_window=10 * peak_tokens(transcript))
    assert calls[-1].messages == transcript[:-1]
    assert not any(c.maintenance for c in calls)


def test_keep_last_n_keeps_last_five_user_turns_past_40_percent() -> None:
    transcript = session(*(turn(n, [2000]) for n in range(1, 9)))
    window = int(peak_tokens(transcript) / 0.4 * 0.6)  # 40% is passed around turn 5
    calls = replay(KeepLastN(), transcript, context_window=window)
    last = calls[-1].messages
    assert last[0].id == "u4"  # turns 4..8 are the last five
    assert [m.id for m in last if m.role == "user"] == ["u4", "u5", "u6", "u7", "u8"]
    assert last == transcript[transcript.index(last[0]) : -1]
    assert calls[0].messages == transcript[:1]
    assert any(c.maintenance for c in calls)


def test_keep_last_n_single_user_turn_is_never_cut() -> None:
    transcript = turn(1, [3000] * 10)
    calls = replay(KeepLastN(), transcript, context_window=peak_tokens(transcript))
    assert calls[-1].messages == transcript[:-1]


# --- opencode-prune ----------------------------------------------------------------------


def test_opencode_token_estimate_is_chars_over_four_rounded_half_up() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("a") == 0
    assert estimate_tokens("ab") == 1
    assert estimate_tokens("abcdef") == 2
    assert estimate_tokens("x" * 80_000) == 20_000
    assert estimate_tokens("\U0001f600") == 1  # 2 UTF-16 units


def test_opencode_prune_fires_before_a_user_turn_and_persists() -> None:
    big = 60_000  # chars = 15k estimated tokens each
    transcript = session(
        turn(1, [big] * 4), turn(2, [100]), turn(3, [100]), turn(4, [100]), turn(5, [100])
    )
    strategy = OpenCodePrune()
    calls = replay(strategy, transcript)
    at = first_call_after(transcript, "u4")
    before, after = calls[at - 1], calls[at]
    # Before u4 arrives only two turns are complete-and-old: nothing eligible, nothing pruned.
    assert all(m.text != CLEARED_PLACEHOLDER for m in before.messages)
    # Walking back from turn 1: t1_3, t1_2 fill the 40k protection (30k), t1_1 crosses it,
    # so t1_1 + t1_0 = 30k > 20k are pruned.
    msgs = by_id(after)
    assert msgs["t1_0"].content == CLEARED_PLACEHOLDER
    assert msgs["t1_1"].content == CLEARED_PLACEHOLDER
    assert msgs["t1_2"].text.startswith("out 1.2")
    assert msgs["t1_3"].text.startswith("out 1.3")
    assert msgs["t1_0"].tool_call_id == "c1_0" and msgs["t1_0"].name == "bash"
    assert after.maintenance and not before.maintenance
    # Persisted: every later call still shows them compacted, without a new rewrite.
    for later in calls[at + 1 :]:
        assert by_id(later)["t1_0"].content == CLEARED_PLACEHOLDER
    assert sum(c.maintenance for c in calls) == 1
    assert strategy.prunes == 1
    # The last two user turns are never touched.
    last = by_id(calls[-1])
    assert last["t4_0"].text.startswith("out 4.0") and last["t5_0"].text.startswith("out 5.0")


def test_opencode_prune_needs_strictly_more_than_20k() -> None:
    transcript = session(turn(1, [80_000] * 3), turn(2, [100]), turn(3, [100]), turn(4, [100]))
    # 3 x 20k: the third crosses 40k with exactly 20k -> not > PRUNE_MINIMUM.
    calls = replay(OpenCodePrune(), transcript)
    assert all(m.text != CLEARED_PLACEHOLDER for c in calls for m in c.messages)
    assert not any(c.maintenance for c in calls)


def test_opencode_prune_skips_skill_and_stops_at_compacted() -> None:
    msgs = session(turn(1, [80_000] * 2), turn(2, [80_000] * 2, tool="skill"), turn(3, []))
    msgs += [Message("user", "next", id="u4")]
    # skill outputs (turn 2) are neither counted nor pruned; turn 1: 20k + 20k = 40k protected.
    to_prune, pruned, total = prune_candidates(msgs, set())
    assert (to_prune, pruned, total) == ([], 0, 40_000)
    # An already-compacted part stops the walk.
    index = next(i for i, m in enumerate(msgs) if m.id == "t1_1")
    assert prune_candidates(msgs, {index}) == ([], 0, 0)


# --- lc-clear-tool-uses ------------------------------------------------------------------


def test_lc_clear_tool_uses_scaled_clears_all_but_last_three() -> None:
    transcript = turn(1, [4000] * 8)
    strategy = LcClearToolUsesScaled()
    calls = replay(strategy, transcript)
    trigger = strategy.trigger_for(strategy.ctx)
    assert trigger == max(2000, peak_tokens(transcript) // 2)
    last = calls[-1]
    results = [m for m in last.messages if m.role == "tool"]
    assert [m.content for m in results[:5]] == ["[cleared]"] * 5
    assert all(m.text.startswith("out 1.") for m in results[5:])
    assert [m.tool_call_id for m in results] == [f"c1_{k}" for k in range(8)]
    # Below the trigger (early calls) nothing is cleared.
    assert calls[1].messages == transcript[: len(calls[1].messages)]
    # Not persisted: the strategy's state keeps the full outputs; the edit is per call.
    assert all(m.content != "[cleared]" for m in strategy.state)
    assert any(c.maintenance for c in calls)


def test_lc_clear_tool_uses_defaults_do_not_fire_below_100k() -> None:
    transcript = turn(1, [4000] * 8)
    calls = replay(LcClearToolUses(), transcript)
    assert all(m.content != "[cleared]" for c in calls for m in c.messages)
    assert calls[-1].messages == transcript[:-1]
    assert not any(c.maintenance for c in calls)


def test_lc_clear_tool_uses_defaults_fire_past_100k() -> None:
    transcript = turn(1, [40_000] * 12)  # ~120k approximate tokens
    calls = replay(LcClearToolUses(), transcript)
    results = [m for m in calls[-1].messages if m.role == "tool"]
    assert [m.content == "[cleared]" for m in results] == [True] * 9 + [False] * 3


# --- lc-summarization --------------------------------------------------------------------


def test_lc_summarization_summarizes_persists_and_bills() -> None:
    transcript = session(*(turn(n, [1500, 1500]) for n in range(1, 9)))
    strategy = LcSummarization()
    calls = replay(strategy, transcript)
    fired = [i for i, c in enumerate(calls) if c.maintenance]
    assert fired, "the scaled trigger should fire"
    first = calls[fired[0]]
    head = first.messages[0]
    assert head.role == "user"
    assert head.text.startswith("Here is a summary of the conversation to date:\n\nSummary ")
    assert head.id == "lc-summary-1"
    assert len(first.messages) <= 21
    # The summarizer's own request is billed before the call.
    assert len(first.extra_calls) == 1
    extra = first.extra_calls[0]
    assert extra.system is None and extra.purpose == "summarize"
    assert extra.messages[0].role == "user" and "<messages>" in extra.messages[0].text
    assert 400 <= extra.output_tokens <= 700
    # Persisted: a call after a summary starts from the summarized state.
    quiet = [i for i in fired if i + 1 < len(calls) and not calls[i + 1].maintenance]
    assert quiet
    done, after = calls[quiet[0]], calls[quiet[0] + 1]
    assert list(after.messages[: len(done.messages)]) == list(done.messages)
    assert not after.extra_calls
    # Below the trigger: untouched, nothing billed.
    assert calls[0].messages == transcript[:1] and not calls[0].extra_calls
    assert all(not c.extra_calls for c in calls[: fired[0]])
    assert strategy.summaries == len(fired)


def test_lc_summarization_is_deterministic() -> None:
    transcript = session(*(turn(n, [1500, 1500]) for n in range(1, 9)))
    a = replay(LcSummarization(), transcript)
    b = replay(LcSummarization(), transcript)
    assert [c.messages for c in a] == [c.messages for c in b]


def test_lc_summarization_no_user_message_in_trim_window_upstream_placeholder() -> None:
    # One user message then a long tool loop: LangChain trims the summarized part with
    # start_on="human", finds no user message in its last 4,000 tokens, never calls the
    # model and writes a placeholder (langchain-ai/langchain#39261). Measured as is.
    transcript = turn(1, [3000] * 40)
    calls = replay(LcSummarization(), transcript)
    fired = [c for c in calls if c.maintenance]
    assert fired
    assert fired[0].messages[0].text.endswith("Previous conversation was too long to summarize.")
    assert not any(c.extra_calls for c in calls)
    # Without the trim the stand-in summarizer is called and billed.
    calls = replay(LcSummarization(trim_tokens_to_summarize=None), transcript)
    assert any(c.extra_calls for c in calls)


def test_lc_summarization_below_trigger_does_nothing() -> None:
    transcript = session(turn(1, [500]), turn(2, [500]))
    calls = replay(LcSummarization(), transcript, peak=1_000_000)
    assert calls[-1].messages == transcript[:-1]
    assert not any(c.maintenance or c.extra_calls for c in calls)


# --- agents-trimmer ----------------------------------------------------------------------


def test_agents_trimmer_trims_outputs_older_than_two_user_turns() -> None:
    transcript = session(turn(1, [2000, 300]), turn(2, [2000]), turn(3, [2000]))
    calls = replay(AgentsTrimmer(), transcript)
    # While turn 1 and 2 are the last two user turns, nothing is old.
    before = calls[first_call_after(transcript, "u3") - 1]
    assert all(m == o for m, o in zip(before.messages, transcript, strict=False))
    last = by_id(calls[-1])
    trimmed = last["t1_0"]
    assert trimmed.text.startswith(
        "[Trimmed: bash output — 2000 chars → 200 char preview]\nout 1.0"
    )
    assert trimmed.text.endswith("...")
    assert trimmed.tool_call_id == "c1_0" and trimmed.name == "bash" and trimmed.id == "t1_0"
    assert last["t1_1"].text.startswith("out 1.1")  # 300 chars <= 500: kept
    assert last["t2_0"].text.startswith("out 2.0")  # recent turns untouched
    assert last["t3_0"].text.startswith("out 3.0")
    assert calls[first_call_after(transcript, "u3")].maintenance


def test_agents_trimmer_trims_structured_outputs_with_images() -> None:
    first = turn(1, [100])
    image = ImagePart("data:image/png;base64," + "A" * 800, detail="high")
    first[2] = Message(
        "tool", (TextPart("shot " + "y" * 600), image), tool_call_id="c1_0", name="bash", id="t1_0"
    )
    calls = replay(AgentsTrimmer(), session(first, turn(2, [100]), turn(3, [100])))
    trimmed = by_id(calls[-1])["t1_0"]
    assert isinstance(trimmed.content, str)
    assert trimmed.content.startswith(
        "[Trimmed: bash; payload 1431; preview 200; dropped 1 input_image]"
    )
    assert len(trimmed.content) <= 500


def test_agents_trimmer_single_user_turn_trims_nothing() -> None:
    transcript = turn(1, [5000] * 6)
    calls = replay(AgentsTrimmer(), transcript)
    assert calls[-1].messages == transcript[:-1]
    assert not any(c.maintenance for c in calls)


# --- converters --------------------------------------------------------------------------

ROUND_TRIP = [
    Message("user", "hello"),
    Message(
        "user", (TextPart("look"), ImagePart("data:image/png;base64,AAAA", "image/png", "high"))
    ),
    Message(
        "assistant",
        (ReasoningPart("thinking", signature="sig=="), TextPart("calling")),
        tool_calls=(
            ToolCall("c1", "bash", '{"cmd":   "ls -la"}'),
            ToolCall("c2", "edit", "not json"),
        ),
        id="a1",
    ),
    Message("tool", "listing", tool_call_id="c1", name="bash"),
    Message("tool", (TextPart("shot"), ImagePart("https://x.test/a.png")), tool_call_id="c2"),
    Message("assistant", "", tool_calls=(ToolCall("c3", "bash", "{}"),)),
    Message("tool", "", tool_call_id="c3", name="bash", id="t3"),
    Message("assistant", "final"),
    Message("user", "hello"),
    Message("system", "mid-session note"),
]


def test_lc_convert_round_trip_is_exact() -> None:
    from langchain_core.messages import AIMessage

    from cachepilot_bench.peers.lc_convert import from_lc, to_lc

    lc = to_lc(ROUND_TRIP)
    assert from_lc(lc) == ROUND_TRIP
    ids = [m.id for m in lc]
    assert len(set(ids)) == len(ids) and all(ids)  # stable, unique ids for LangChain
    assert to_lc(ROUND_TRIP)[0].id == ids[0]  # deterministic
    ai = lc[2]
    assert isinstance(ai, AIMessage)
    assert ai.tool_calls[0]["args"] == {"cmd": "ls -la"}
    assert ai.additional_kwargs["tool_calls"][0]["function"]["arguments"] == '{"cmd":   "ls -la"}'


def test_lc_convert_shows_edited_tool_arguments() -> None:
    from langchain_core.messages import AIMessage

    from cachepilot_bench.peers.lc_convert import from_lc_message, to_lc

    ai = to_lc(ROUND_TRIP)[2]
    assert isinstance(ai, AIMessage)
    edited = ai.model_copy(update={"tool_calls": [{**ai.tool_calls[0], "args": {}}]})
    back = from_lc_message(edited)
    assert back.tool_calls[0].arguments == "{}"


def test_agents_convert_round_trip_is_exact() -> None:
    items, spans = to_items(ROUND_TRIP)
    assert from_items(items, spans) == ROUND_TRIP
    kinds = [i.get("type", i.get("role")) for i in items]
    assert kinds[:5] == ["user", "user", "reasoning", "message", "function_call"]
    assert items[5] == {
        "type": "function_call",
        "call_id": "c2",
        "name": "edit",
        "arguments": "not json",
    }
    assert items[6] == {"type": "function_call_output", "call_id": "c1", "output": "listing"}


def test_agents_convert_without_spans_for_plain_shapes() -> None:
    plain = [
        Message("user", "hi"),
        Message("assistant", "ok", tool_calls=(ToolCall("c1", "bash", '{"a": 1}'),)),
        Message("tool", "out", tool_call_id="c1"),
        Message("assistant", "more", tool_calls=(ToolCall("c2", "bash", "{}"),)),
        Message(
            "tool",
            (TextPart("img"), ImagePart("https://x.test/i.png", detail="low")),
            tool_call_id="c2",
        ),
        Message("assistant", "bye"),
    ]
    items, _ = to_items(plain)
    assert items_to_messages(items) == plain


def test_agents_convert_rebuilds_a_changed_span() -> None:
    items, spans = to_items(ROUND_TRIP)
    items = [dict(i) for i in items]
    items[6]["output"] = "short"
    back = from_items(items, spans)
    assert back[3] == Message("tool", "short", tool_call_id="c1", name="bash")
    assert back[:3] == ROUND_TRIP[:3] and back[4:] == ROUND_TRIP[4:]


@pytest.mark.parametrize(
    "strategy",
    [
        KeepLastN,
        OpenCodePrune,
        LcClearToolUses,
        LcClearToolUsesScaled,
        LcSummarization,
        AgentsTrimmer,
    ],
)
def test_peers_declare_names_and_cannot_recall(strategy: type[Strategy]) -> None:
    instance = strategy()
    assert instance.name in {
        "keep-last-n",
        "opencode-prune",
        "lc-clear-tool-uses",
        "lc-clear-tool-uses-scaled",
        "lc-summarization",
        "agents-trimmer",
    }
    assert instance.can_recall is False


def test_importing_peers_loads_no_framework() -> None:
    import subprocess
    import sys

    code = (
        "import sys, cachepilot_bench.peers\n"
        "import cachepilot_bench.peers.keep_last_n, cachepilot_bench.peers.opencode_prune\n"
        "import cachepilot_bench.peers.agents_convert\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'langchain', 'langchain_core', 'langgraph', 'agents'})\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
