"""The facts-in-use section of fold summaries: what it keeps, in which order, within budget."""

from __future__ import annotations

import gc
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.fold import FoldRequest, ResumeBlockSummarizer, plan_fold
from cachepilot.fold.facts_in_use import FACTS_HEADER, _candidates, facts_in_use, values_in_view
from cachepilot.memory.facts import count_candidates, view_text
from cachepilot.messages import Message, ToolCall
from cachepilot.plan.epochs import Epoch, Plan, apply_plan
from cachepilot.tokens import get_counter

COUNTER = get_counter()
SECRET = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0" * 3


def _read(call_id: str, path: str, body: str) -> list[Message]:
    return [
        Message(
            role="assistant",
            content="",
            tool_calls=(ToolCall(call_id, "Read", json.dumps({"file_path": path})),),
        ),
        Message(role="tool", content=body, tool_call_id=call_id, name="Read"),
    ]


def _module(name: str, functions: list[str]) -> str:
    lines = [f"defmodule Spotter.{name} do"]
    for fn in functions:
        lines.append(f"  def {fn}(session, opts) do")
        lines.append(f"    Repo.get_by({name}Record, session_id: session.transcript_id)")
        lines.append("  end")
    lines.append("end")
    return "\n".join(f"{i + 1:>6}\t{line}" for i, line in enumerate(lines))


def _session() -> list[Message]:
    messages = [Message(role="user", content="Add a registry for review sessions.")]
    messages += _read("r1", "lib/spotter/registry.ex", _module("SessionRegistry", ["lookup_all"]))
    messages += _read("r2", "lib/spotter/commits.ex", _module("CommitLinks", ["link_commit"]))
    messages.append(
        Message(
            role="assistant",
            content="I will call Spotter.SessionRegistry from the new module.",
        )
    )
    return messages


def test_values_the_agent_acted_on_come_first_and_the_newest_source_leads() -> None:
    section = facts_in_use(_session(), 400, COUNTER)
    lines = section.splitlines()
    assert lines[0] == FACTS_HEADER
    # Newest source first: the commits module was read last.
    assert lines[1].startswith("- file lib/spotter/commits.ex: ")
    assert lines[2].startswith("- file lib/spotter/registry.ex: ")
    # What the agent repeated is the first value of its source's line.
    assert lines[2].split(": ", 1)[1].startswith("Spotter.SessionRegistry")
    # Names the outputs define are carried.
    assert "link_commit" in section and "lookup_all" in section
    assert COUNTER.count(section) <= 400


def test_a_tight_budget_keeps_the_values_in_use_over_newer_unused_ones() -> None:
    section = facts_in_use(_session(), 45, COUNTER)
    assert "Spotter.SessionRegistry" in section
    assert "link_commit" not in section
    assert COUNTER.count(section) <= 45


def test_reads_of_one_file_gather_on_one_line_placed_by_the_latest() -> None:
    messages = _session()
    messages += _read("r3", "lib/spotter/registry.ex", _module("SessionRegistry", ["fetch_one"]))
    section = facts_in_use(messages, 400, COUNTER)
    lines = section.splitlines()
    registry = next(line for line in lines if "registry.ex" in line)
    assert "fetch_one" in registry and "lookup_all" in registry  # a part read earlier too
    assert section.count("registry.ex") == 1
    assert lines[1] == registry  # the newest read leads
    # an edit's confirmation adds a line of its own: it does not replace the read
    messages += [
        Message(
            role="assistant",
            content="",
            tool_calls=(
                ToolCall("e1", "Edit", json.dumps({"file_path": "lib/spotter/registry.ex"})),
            ),
        ),
        Message(role="tool", content="Updated fetch_all_sessions", tool_call_id="e1", name="Edit"),
    ]
    section = facts_in_use(messages, 400, COUNTER)
    assert "- edit lib/spotter/registry.ex: fetch_all_sessions" in section
    assert "lookup_all" in section


def test_values_still_in_view_are_not_repeated() -> None:
    section = facts_in_use(_session(), 400, COUNTER, exclude_text="see link_commit here")
    assert "link_commit" not in section
    assert "lookup_all" in section


def test_credentials_and_empty_input_give_nothing_to_leak() -> None:
    messages = [
        Message(role="user", content="Deploy."),
        Message(
            role="assistant",
            content="",
            tool_calls=(ToolCall("c1", "bash", json.dumps({"command": "cat .env"})),),
        ),
        Message(
            role="tool",
            content=f"OPENAI_API_KEY={SECRET}\nDATABASE_HOST=db.internal.example\n",
            tool_call_id="c1",
            name="bash",
        ),
    ]
    section = facts_in_use(messages, 400, COUNTER)
    assert SECRET not in section and "sk-proj" not in section
    assert facts_in_use([], 400, COUNTER) == ""
    assert facts_in_use(messages, 0, COUNTER) == ""


def test_a_huge_output_is_scanned_through_a_bounded_window() -> None:
    body = "\n".join(f"value_{i} = compute_{i}(arg_{i})" for i in range(300_000))
    messages = [
        Message(
            role="assistant",
            content="",
            tool_calls=(ToolCall("c1", "bash", json.dumps({"command": "python gen.py"})),),
        ),
        Message(role="tool", content=body, tool_call_id="c1", name="bash"),
    ]
    section = facts_in_use(messages, 200, COUNTER)
    assert section.startswith(FACTS_HEADER)
    assert COUNTER.count(section) <= 200


_WORDS = st.sampled_from(
    ["alpha_beta", "GammaDelta", "src/app/x.py", "12345", "os.path.join", "plain", "zeta_eta"]
)


@settings(max_examples=60, deadline=None)
@given(
    outputs=st.lists(st.lists(_WORDS, max_size=12), min_size=1, max_size=6),
    said=st.lists(_WORDS, max_size=4),
    budget=st.integers(min_value=1, max_value=120),
)
def test_the_section_fits_and_names_only_values_of_tool_outputs(
    outputs: list[list[str]], said: list[str], budget: int
) -> None:
    messages: list[Message] = []
    for n, words in enumerate(outputs):
        call = ToolCall(f"c{n}", "bash", json.dumps({"command": f"run {n}"}))
        messages.append(Message(role="assistant", content=" ".join(said), tool_calls=(call,)))
        messages.append(
            Message(role="tool", content=" ".join(words), tool_call_id=f"c{n}", name="bash")
        )
    section = facts_in_use(messages, budget, COUNTER)
    assert section == facts_in_use(messages, budget, COUNTER)
    if not section:
        return
    assert COUNTER.count(section) <= budget
    tool_text = "\n".join(m.text for m in messages if m.role == "tool")
    for line in section.splitlines()[1:]:
        for value in line.split(": ", 1)[1].split(", "):
            assert value in tool_text


def test_the_resume_block_summary_carries_the_section_within_its_budget() -> None:
    messages = _session()
    request = FoldRequest(folded_messages=tuple(messages), budget_tokens=500)
    text = ResumeBlockSummarizer(counter=COUNTER).summarize(request)
    assert FACTS_HEADER in text and "Spotter.SessionRegistry" in text
    assert COUNTER.count(text) <= 500
    plain = ResumeBlockSummarizer(counter=COUNTER, facts_share=0.0).summarize(request)
    assert FACTS_HEADER not in plain
    for bad in (-0.1, 0.95):
        try:
            ResumeBlockSummarizer(facts_share=bad)
        except ValueError:
            continue
        raise AssertionError(f"facts_share={bad} accepted")


def test_a_fold_keeps_an_identifier_of_a_folded_read_in_view() -> None:
    messages = [Message(role="system", content="You are a coder."), *_session()]
    filler = "\n".join(f"{i:>6}\tcomment line {i} of the log" for i in range(900))
    for n in range(6):
        messages += _read(f"f{n}", f"log/part_{n}.txt", filler)
    store = InMemoryArtifactStore()
    edit = plan_fold(messages, store=store, thread="t", counter=COUNTER, protect_tail_tokens=3_000)
    assert edit is not None
    view = apply_plan(messages, Plan(epochs=[Epoch(index=0, reason="fold", edits=[edit])]))
    folded_reads = [m for m in view if m.role == "tool" and m.tool_call_id == "r1"]
    assert not folded_reads  # the registry read is inside the fold…
    assert "Spotter.SessionRegistry" in view_text(None, view)  # …its identifier is not lost


def test_the_range_stage_keeps_nothing_the_garbage_collector_walks() -> None:
    """The stage memo keeps thousands of candidates per fold range; a full collection walks
    every tracked object (stalling every request in flight), so they hold atomic items only."""
    messages = _session()
    for n in range(20):
        messages += _read(f"x{n}", f"lib/spotter/m{n}.ex", _module(f"Mod{n}", ["a_fn", "b_fn"]))
    newest_first, in_order, ordered = _candidates(messages)
    gc.collect()
    assert len(ordered) > 100
    assert not any(gc.is_tracked(c) for c in ordered)
    # The index names the source whose values it ranks.
    assert all(value in in_order[newest_first[index].label] for _, _, value, index in ordered)
    assert facts_in_use(messages, 400, COUNTER) == facts_in_use(list(messages), 400, COUNTER)


_PIECE = st.text(alphabet="ab_AZ09.f/-() \"'\nx", max_size=60) | st.builds(
    lambda ch, n: ch * n, st.sampled_from(["a", "a_", "9", "a/", "a."]), st.integers(100, 300)
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_PIECE, max_size=6), st.lists(_PIECE, max_size=4))
def test_values_in_view_found_piece_by_piece_are_those_of_the_joined_text(
    texts: list[str], bodies: list[str]
) -> None:
    """What `values_in_view` finds message by message equals one scan of the joined text
    (the search text of a request), long runs and quotes included."""
    messages = [
        Message(role="tool", content=body, tool_call_id=f"c{i}", name="bash")
        if i % 2
        else Message(role="assistant", content=body, tool_calls=(ToolCall(f"c{i}", "bash", body),))
        for i, body in enumerate(bodies)
    ]
    joined = "\n".join([*texts, view_text(None, messages)]) if messages else "\n".join(texts)
    assert values_in_view(texts, messages) == frozenset(count_candidates(joined))


def test_the_facts_left_out_by_the_values_in_view_are_those_left_out_by_the_text() -> None:
    messages = _session()
    for n in range(12):
        messages += _read(f"x{n}", f"lib/spotter/m{n}.ex", _module(f"Mod{n}", ["a_fn", "b_fn"]))
    folded, kept = messages[:-6], messages[-6:]
    block = "Earlier: Spotter.SessionRegistry lookup_all"
    seen = "\n".join([block, view_text(None, kept)])
    for budget in (30, 80, 200, 600):
        by_text = facts_in_use(folded, budget, COUNTER, exclude_text=seen)
        assert by_text == facts_in_use(folded, budget, COUNTER, shown=values_in_view([block], kept))
        assert "Mod11" not in by_text  # read in the kept tail: in view


_EDGE = st.sampled_from(
    ["\\", "\r", "\r\n", '"', "'", "é", "ß", "٣", "١٢٣٤", "_", ".", "/", "()", "-", " ", "\t", ""]
)
_ADVERSARIAL = st.lists(
    st.text(alphabet="aZé٣0_./()-\"'\\\r \t", max_size=12)
    | _EDGE
    | st.builds(
        lambda ch, n: ch * n,
        st.sampled_from(["a", "é", "٣", "9", "a_", "a/", "a.", "f0", "ab.", "x_y/"]),
        st.sampled_from([1, 127, 128, 255, 256, 257, 258, 300]),
    ),
    max_size=5,
).map("".join)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(_ADVERSARIAL, max_size=4),
    st.lists(st.tuples(_ADVERSARIAL, _ADVERSARIAL, _ADVERSARIAL), max_size=3),
)
def test_values_in_view_hold_at_piece_edges_an_adversary_picks(
    texts: list[str], bodies: list[tuple[str, str, str]]
) -> None:
    """Pieces ending in a backslash, a carriage return, a quote or unicode word characters and
    digits, runs of 256/257 characters either side of a newline, empty pieces, and a kept tail
    with reasoning and call arguments holding newlines: the values found piece by piece are
    those of the joined text."""
    from cachepilot.messages import ReasoningPart, TextPart

    messages = [
        Message(
            role="assistant",
            content=(ReasoningPart(reasoning + "\n" + text), TextPart(text)),
            tool_calls=(ToolCall(f"c{i}", "bash", arguments + "\n" + text),),
        )
        for i, (text, reasoning, arguments) in enumerate(bodies)
    ]
    joined = "\n".join([*texts, view_text(None, messages)]) if messages else "\n".join(texts)
    assert values_in_view(texts, messages) == frozenset(count_candidates(joined))
    # Asked again (memoised by message and by text), the answer is the same.
    assert values_in_view(texts, messages) == frozenset(count_candidates(joined))


def test_the_values_memoised_for_a_message_hold_no_more_than_its_text() -> None:
    """The memo keeps each message's values while the message lives: a long paste of distinct
    numbers or names must not be held again many times over (a set of small strings costs
    about twenty times their characters)."""
    import sys

    from cachepilot.fold import facts_in_use as module

    text = " ".join(f"{n} a_{n}" for n in range(100_000, 130_000))
    message = Message(role="user", content=text)
    values = values_in_view([], [message])
    assert len(values) == 60_000
    held = module._MESSAGE_VALUES.get(message)
    assert held is not None
    retained = sys.getsizeof(held)
    if not isinstance(held, str):
        retained += sum(sys.getsizeof(v) for v in held)
    assert retained <= 2 * len(text)
    assert values_in_view([], [message]) == values  # the memoised form answers the same
