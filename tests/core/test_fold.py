"""The fold: safe cut, fold edits in the plan, differential folds, summarizers, emergencies."""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.fold import (
    DEFAULT_GUIDELINE,
    FOLD_HEADER_PREFIX,
    ChatModelSummarizer,
    FoldRequest,
    ResumeBlockSummarizer,
    Summarizer,
    aplan_fold,
    build_summary_prompt,
    chat_messages,
    emergency_fold,
    fold_start,
    is_context_length_error,
    plan_fold,
    safe_cut,
)
from cachepilot.fold.facts_in_use import FACTS_HEADER
from cachepilot.maintenance.policy import MaintenanceConfig
from cachepilot.messages import Message, ToolCall, message_keys, pairing_issues
from cachepilot.plan.epochs import FOLD_ID_PREFIX, Edit, Epoch, Plan, apply_plan, render_plan
from cachepilot.tokens import TokenCounter, get_counter

TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "traces"


class CharEncoding:
    """One token per character: hand-computable sizes."""

    name = "chars"

    def encode_ordinary(self, text: str) -> list[int]:
        return [ord(c) for c in text]


CHARS = TokenCounter(CharEncoding())


def _transcript(steps: list[tuple[int, int, bool]], *, tail_user: bool = False) -> list[Message]:
    """A task, then steps of (parallel tool calls, output size, new user turn before it)."""
    out = [
        Message(role="system", content="You are a coder."),
        Message(role="user", content="Fix the failing test in src/app/models.py, please."),
    ]
    for n, (calls, size, new_turn) in enumerate(steps):
        if new_turn:
            out.append(Message(role="user", content=f"Also check part {n}."))
        tool_calls = tuple(
            ToolCall(f"s{n}c{k}", "bash", json.dumps({"command": f"pytest tests/t{n}_{k}.py"}))
            for k in range(calls)
        )
        out.append(Message(role="assistant", content=f"step {n}", tool_calls=tool_calls))
        for k in range(calls):
            body = "\n".join(f"line {i} of {n}/{k}: value={i * 7 + n}" for i in range(size // 25))
            out.append(Message(role="tool", content=body, tool_call_id=f"s{n}c{k}", name="bash"))
    if tail_user:
        out.append(Message(role="user", content="Go on."))
    return out


def _plan(*edits: Edit) -> Plan:
    return Plan(epochs=[Epoch(index=i, reason="fold", edits=[e]) for i, e in enumerate(edits)])


def _archived(store: InMemoryArtifactStore, ref: str | None) -> list[Message]:
    assert ref is not None
    artifact = store.get("t", ref)
    assert artifact is not None
    return [Message.from_dict(d) for d in json.loads(artifact.text)]


class Recording:
    """A summarizer that records its requests and answers with a fixed text."""

    mode = "standalone"

    def __init__(self, answer: str = "## Goal\nfix it") -> None:
        self.answer = answer
        self.requests: list[FoldRequest] = []

    def summarize(self, request: FoldRequest) -> str:
        self.requests.append(request)
        return self.answer

    async def asummarize(self, request: FoldRequest) -> str:
        return self.summarize(request)


# --- the safe cut and pairing, over random transcripts --------------------------------------

_steps = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=4),  # parallel tool calls
        st.integers(min_value=0, max_value=3_000),  # output chars per call
        st.booleans(),  # a new user turn before the step
    ),
    min_size=1,
    max_size=18,
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_steps, st.integers(min_value=0, max_value=12_000), st.booleans())
def test_fold_never_splits_pairs_and_archives_exactly(
    steps: list[tuple[int, int, bool]], protect: int, tail_user: bool
) -> None:
    messages = _transcript(steps, tail_user=tail_user)
    keys = message_keys(messages)
    assert pairing_issues(messages) == []
    store = InMemoryArtifactStore()
    cut = safe_cut(messages, keys, protect_tail_tokens=protect, counter=CHARS, min_messages=1)
    edit = plan_fold(
        messages,
        keys,
        store=store,
        thread="t",
        counter=CHARS,
        protect_tail_tokens=protect,
        min_messages=1,
        min_tokens=0,
    )
    if cut is None:
        assert edit is None
        return
    start = fold_start(messages)
    assert start == 2  # system and the task statement stay
    assert messages[cut].role != "tool"
    assert cut < len(messages)
    assert edit is not None and edit.kind == "fold"
    assert edit.key == keys[start] and edit.end_key == keys[cut - 1]
    view = apply_plan(messages, _plan(edit), keys)
    assert pairing_issues(view) == []
    assert view[:start] == messages[:start]
    assert view[start + 1 :] == messages[cut:]
    assert view[start].role == "user" and view[start].content == edit.text
    assert view[start].text.startswith(FOLD_HEADER_PREFIX)
    assert f'recall(ref="{edit.ref}")' in edit.text
    assert _archived(store, edit.ref) == messages[start:cut]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_steps, _steps, st.integers(min_value=0, max_value=6_000))
def test_differential_folds_keep_pairing_and_recall(
    first: list[tuple[int, int, bool]], more: list[tuple[int, int, bool]], protect: int
) -> None:
    early = _transcript(first)
    late = _transcript(first + more)
    store = InMemoryArtifactStore()
    kw: dict[str, Any] = {
        "store": store,
        "thread": "t",
        "counter": CHARS,
        "protect_tail_tokens": protect,
        "min_messages": 1,
        "min_tokens": 0,
    }
    plan = Plan()
    one = plan_fold(early, **kw)
    if one is not None:
        plan = _plan(one)
    two = plan_fold(late, plan=plan, epoch_index=len(plan.epochs), **kw)
    if two is not None:
        plan = Plan(epochs=[*plan.epochs, Epoch(index=len(plan.epochs), reason="f", edits=[two])])
    view = render_plan(late, plan)
    assert pairing_issues(view.messages) == []
    assert sum(1 for f in view.folds if f is not None) <= 1
    # every original is recoverable: the summaries chain to their archives
    recovered: list[Message] = []

    def expand(message: Message) -> None:
        if message.id and message.id.startswith(FOLD_ID_PREFIX):
            ref = message.text.split('recall(ref="')[1][:12]
            for inner in _archived(store, ref):
                expand(inner)
        else:
            recovered.append(message)

    for message in view.messages:
        expand(message)
    assert recovered == late


# --- apply_plan with folds ------------------------------------------------------------------


def _simple() -> tuple[list[Message], list[str]]:
    messages = _transcript([(1, 100, False), (2, 100, False), (0, 0, True), (1, 100, False)])
    return messages, message_keys(messages)


def test_apply_plan_replaces_the_range_by_one_memoised_summary() -> None:
    messages, keys = _simple()
    edit = Edit(kind="fold", key=keys[2], end_key=keys[7], text="[summary]", ref="0" * 12)
    plan = _plan(edit)
    first = apply_plan(messages, plan, keys)
    second = apply_plan(list(messages), plan)
    assert len(first) == len(messages) - 6 + 1
    assert first[2].content == "[summary]" and first[2].role == "user"
    assert first[2].id is not None and first[2].id.startswith(FOLD_ID_PREFIX)
    assert all(a is b for a, b in zip(first, second, strict=True))
    assert first[:2] == messages[:2] and all(
        a is b for a, b in zip(first[3:], messages[8:], strict=True)
    )
    assert pairing_issues(first) == []
    # JSON round trip of the plan keeps the fold (and old edits without end_key still parse)
    again = Plan.model_validate_json(plan.model_dump_json())
    assert apply_plan(messages, again, keys)[2] is first[2]
    legacy = Edit.model_validate({"kind": "stub", "key": "k", "text": "x"})
    assert legacy.end_key is None and legacy.last_key == "k"


def test_stubs_and_folds_compose() -> None:
    messages, keys = _simple()
    stub = Edit(kind="stub", key=keys[-1], text="[pruned]", ref="1" * 12)
    fold = Edit(kind="fold", key=keys[2], end_key=keys[3], text="[summary]")
    plan = Plan(epochs=[Epoch(index=0, reason="p", edits=[stub, fold])])
    view = render_plan(messages, plan, keys)
    assert view.messages[-1].content == "[pruned]"
    assert view.keys[2] == f"id:{view.messages[2].id}" and view.folds[2] is fold
    assert view.keys == message_keys(view.messages)[:2] + view.keys[2:3] + keys[4:]
    assert view.spans[2] == (keys[2], keys[3])
    assert view.keys[3:] == keys[4:]
    assert plan.edited_keys() >= {keys[2], keys[3], keys[-1]}


def test_newer_fold_containing_an_older_one_supersedes_it() -> None:
    messages, keys = _simple()
    old = Edit(kind="fold", key=keys[2], end_key=keys[3], text="[old]")
    new = Edit(kind="fold", key=keys[2], end_key=keys[7], text="[new]")
    view = apply_plan(messages, _plan(old, new), keys)
    assert [m.text for m in view if m.text.startswith("[")] == ["[new]"]
    assert len(view) == len(messages) - 6 + 1
    # the older fold alone still renders when the newer one is gone from the plan
    assert apply_plan(messages, _plan(old), keys)[2].text == "[old]"


def test_invalid_folds_are_skipped_with_a_log_line(caplog: pytest.LogCaptureFixture) -> None:
    messages, keys = _simple()
    cases = [
        Edit(kind="fold", key=keys[2], end_key=keys[4], text="[splits s1 from its results]"),
        Edit(kind="fold", key=keys[3], end_key=keys[4], text="[starts with a result]"),
        Edit(kind="fold", key=keys[7], end_key=keys[2], text="[reversed]"),
        Edit(kind="fold", key=keys[2], end_key="h:missing:0", text="[half missing]"),
    ]
    for edit in cases:
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="cachepilot.plan.epochs"):
            view = apply_plan(messages, _plan(edit), keys)
        assert view == messages, edit.text
        assert len(caplog.records) == 1, edit.text
    gone = Edit(kind="fold", key="h:gone:0", end_key="h:gone:1", text="[gone]")
    assert apply_plan(messages, _plan(gone), keys) == messages
    # a later fold overlapping an earlier one only partly is skipped; the earlier one stays
    a = Edit(kind="fold", key=keys[2], end_key=keys[6], text="[a]")
    b = Edit(kind="fold", key=keys[4], end_key=keys[7], text="[b]")
    assert apply_plan(messages, _plan(a, b), keys)[2].text == "[a]"
    assert apply_plan(messages, _plan(b), keys)[4].text == "[b]"  # b alone is valid
    overlap = Edit(kind="fold", key=keys[4], end_key=keys[7], text="[c]")
    bigger = Edit(kind="fold", key=keys[2], end_key=keys[6], text="[d]")
    with caplog.at_level(logging.WARNING, logger="cachepilot.plan.epochs"):
        view = apply_plan(messages, _plan(overlap, bigger), keys)
    assert [m.text for m in view if m.text.startswith("[")] == ["[c]"]


def test_folds_persisted_into_the_transcript_render_as_is_without_warnings(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A framework that writes each fold into its state (summary under the first folded
    message's id, the rest removed) and plans the next, differential fold on that state: the
    older fold is superseded by the newer summary at the same id, not a broken range."""
    messages = [replace(m, id=f"m{i}") for i, m in enumerate(_simple()[0])]
    keys = message_keys(messages)
    first = Edit(kind="fold", key=keys[2], end_key=keys[3], text="[first]")
    after_first = [*messages[:2], Message(role="user", content="[first]", id="m2"), *messages[4:]]
    assert apply_plan(after_first, _plan(first)) == after_first
    # planned on the persisted transcript: [first] plus the newer messages up to m7
    second = Edit(kind="fold", key=keys[2], end_key=keys[7], text="[second]")
    plan = _plan(first, second)
    with caplog.at_level(logging.DEBUG, logger="cachepilot.plan.epochs"):
        view = apply_plan(after_first, plan)
    assert [m.text for m in view][:3] == [messages[0].text, messages[1].text, "[second]"]
    after_second = [*messages[:2], Message(role="user", content="[second]", id="m2"), *messages[8:]]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="cachepilot.plan.epochs"):
        assert apply_plan(after_second, plan) == after_second
    assert caplog.records == []
    # a summary that no fold of the plan wrote is still a range that does not resolve
    foreign = [
        *after_second[:2],
        Message(role="user", content="[other]", id="m2"),
        *after_second[3:],
    ]
    with caplog.at_level(logging.WARNING, logger="cachepilot.plan.epochs"):
        assert apply_plan(foreign, plan) == foreign
    assert len(caplog.records) == 2


# --- differential fold ----------------------------------------------------------------------


def test_second_fold_gets_the_previous_summary_and_only_new_messages() -> None:
    early = _transcript([(1, 400, False)] * 6)
    late = _transcript([(1, 400, False)] * 6 + [(2, 400, True)] * 5)
    store = InMemoryArtifactStore()
    summarizer = Recording("## Goal\nfix the test\n## Facts\nsrc/app/models.py")
    kw: dict[str, Any] = {
        "store": store,
        "thread": "t",
        "summarizer": summarizer,
        "counter": CHARS,
        "protect_tail_tokens": 900,
        "min_tokens": 0,
    }
    one = plan_fold(early, **kw)
    assert one is not None
    plan = _plan(one)
    view_before = apply_plan(late, plan)
    two = plan_fold(late, plan=plan, epoch_index=1, **kw)
    assert two is not None
    first_request, second_request = summarizer.requests
    assert first_request.previous_summary is None
    assert second_request.previous_summary == summarizer.answer  # body, header stripped
    assert second_request.folded_messages[0] is view_before[3]  # only messages after summary
    assert all(m.text != one.text for m in second_request.folded_messages)
    assert two.key == one.key  # starts where the first fold starts: it supersedes it
    both = Plan(epochs=[*plan.epochs, Epoch(index=1, reason="fold", edits=[two])])
    view = apply_plan(late, both)
    assert [m.text for m in view if m.text.startswith(FOLD_HEADER_PREFIX)] == [two.text]
    assert pairing_issues(view) == []
    # the second archive holds the first summary (which names the first archive) + new messages
    archived = _archived(store, two.ref)
    assert archived[0].text == one.text
    assert archived[1:] == list(second_request.folded_messages)
    header = two.text.splitlines()[0]
    assert f"{len(second_request.folded_messages)} messages" in header
    # a framework that writes the view back into its state: the summary is a transcript
    # message now, and the next fold is still differential
    persisted = apply_plan(late, plan)
    three = plan_fold(persisted, **kw)
    assert three is not None
    assert summarizer.requests[-1].previous_summary == summarizer.answer
    assert three.key == message_keys(persisted)[2]
    assert list(summarizer.requests[-1].folded_messages) == list(second_request.folded_messages)


def test_nothing_to_fold_returns_none() -> None:
    messages = _transcript([(1, 50, False)])
    store = InMemoryArtifactStore()
    assert plan_fold(messages, store=store, thread="t", counter=CHARS) is None
    assert store.list("t") == []
    big = _transcript([(1, 50, False)] * 10)
    # under min_tokens → no fold, no archive
    assert plan_fold(big, store=store, thread="t", counter=CHARS, protect_tail_tokens=10) is None


# --- summarizers ----------------------------------------------------------------------------


@pytest.mark.parametrize("budget", [60, 120, 300, 600])
def test_resume_block_summarizer_respects_budget(budget: int) -> None:
    messages = _transcript([(2, 800, n % 3 == 0) for n in range(12)])
    counter = get_counter()
    previous = "\n".join(f"- fact {i}: path src/mod_{i}.py value {i * 13}" for i in range(80))
    for prev in (None, previous):
        request = FoldRequest(folded_messages=tuple(messages[2:]), previous_summary=prev)
        text = ResumeBlockSummarizer(budget, counter=counter).summarize(request)
        assert text
        assert counter.count(text) <= budget
        assert text == ResumeBlockSummarizer(budget, counter=counter).summarize(request)
        if prev is not None and budget >= 300:
            assert "Earlier:" in text and "fact 0" in text
    assert isinstance(ResumeBlockSummarizer(), Summarizer)
    with pytest.raises(ValueError):
        ResumeBlockSummarizer(0)


class FakeChatModel:
    """A recorded LangChain-style chat model: `.bind`, `.invoke`, `.ainvoke` → `.content`."""

    def __init__(self, content: Any = "## Goal\nship it") -> None:
        self.content = content
        self.calls: list[tuple[Any, dict[str, Any]]] = []
        self.bound: dict[str, Any] = {}

    def bind(self, **kwargs: Any) -> FakeChatModel:
        self.bound = kwargs
        return self

    def invoke(self, messages: Any) -> SimpleNamespace:
        self.calls.append((messages, dict(self.bound)))
        return SimpleNamespace(content=self.content)

    async def ainvoke(self, messages: Any) -> SimpleNamespace:
        return self.invoke(messages)


class FakeCompletions:
    def __init__(self, answer: str, *, is_async: bool = False) -> None:
        self.answer = answer
        self.is_async = is_async
        self.calls: list[dict[str, Any]] = []

    def _response(self) -> SimpleNamespace:
        message = SimpleNamespace(content=self.answer)
        return SimpleNamespace(choices=[SimpleNamespace(message=message)])

    def create(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        if self.is_async:

            async def respond() -> SimpleNamespace:
                return self._response()

            return respond()
        return self._response()


def _client(answer: str = "## Goal\nship it", *, is_async: bool = False) -> SimpleNamespace:
    return SimpleNamespace(
        chat=SimpleNamespace(completions=FakeCompletions(answer, is_async=is_async))
    )


def _request(mode: str = "standalone") -> FoldRequest:
    view = _transcript([(2, 200, False)] * 4)
    return FoldRequest(
        folded_messages=tuple(view[2:7]),
        previous_summary=None,
        view_messages=tuple(view[1:]),
        kept_messages=len(view) - 7,
        system="You are a coder.",
        mode=mode,  # type: ignore[arg-type]
        budget_tokens=500,
    )


def test_chat_model_summarizer_langchain_style() -> None:
    model = FakeChatModel([{"type": "text", "text": "## Goal\n"}, {"type": "text", "text": "x"}])
    summarizer = ChatModelSummarizer(model, max_tokens=700)
    assert isinstance(summarizer, Summarizer)
    request = _request()
    assert summarizer.summarize(request) == "## Goal\nx"
    payload, bound = model.calls[0]
    system, messages = build_summary_prompt(request)
    assert payload == chat_messages(system, messages)
    assert bound == {"max_tokens": 700}
    assert payload[0]["role"] == "system" and DEFAULT_GUIDELINE in payload[0]["content"]
    assert (
        "<conversation>" in payload[1]["content"]
        and "pytest tests/t0_0.py" in payload[1]["content"]
    )
    assert asyncio.run(summarizer.asummarize(request)) == "## Goal\nx"


def test_chat_model_summarizer_suffix_mode_extends_the_view() -> None:
    model = FakeChatModel()
    summarizer = ChatModelSummarizer(model, mode="suffix", max_tokens=None)
    request = _request("suffix")
    summarizer.summarize(request)
    payload, _ = model.calls[0]
    agent_request = chat_messages(request.system, request.view_messages)
    assert payload[: len(agent_request)] == agent_request  # the cached prefix, byte for byte
    assert len(payload) == len(agent_request) + 1
    last = payload[-1]
    assert last["role"] == "user" and DEFAULT_GUIDELINE in last["content"]
    assert f"last {request.kept_messages} message(s)" in last["content"]
    system, messages = build_summary_prompt(request)
    assert system == request.system and messages[:-1] == list(request.view_messages)


def test_chat_model_summarizer_openai_client_sync_and_async() -> None:
    client = _client("  ## Goal\nfrom client  ")
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {}}}]
    summarizer = ChatModelSummarizer(
        client, model_name="gpt-5.4-mini", mode="suffix", tools=tools, max_tokens=900
    )
    request = _request("suffix")
    assert summarizer.summarize(request) == "## Goal\nfrom client"
    call = client.chat.completions.calls[0]
    assert call["model"] == "gpt-5.4-mini" and call["max_completion_tokens"] == 900
    assert call["tools"] == tools and call["tool_choice"] == "none"
    prefix = chat_messages(request.system, request.view_messages)
    assert call["messages"][: len(prefix)] == prefix
    aclient = _client("async summary", is_async=True)
    asummarizer = ChatModelSummarizer(aclient, model_name="m")
    assert asyncio.run(asummarizer.asummarize(_request())) == "async summary"
    with pytest.raises(TypeError):
        asummarizer.summarize(_request())
    # sync client used from async code runs fine too
    assert asyncio.run(summarizer.asummarize(request)) == "## Goal\nfrom client"


def test_chat_model_summarizer_misuse_fails_fast() -> None:
    with pytest.raises(ValueError):
        ChatModelSummarizer(object())
    with pytest.raises(ValueError):
        ChatModelSummarizer(_client())  # no model_name
    with pytest.raises(ValueError):
        ChatModelSummarizer(FakeChatModel(), mode="sideways")  # type: ignore[arg-type]


def test_standalone_prompt_is_deterministic_and_differential() -> None:
    request = FoldRequest(
        folded_messages=tuple(_transcript([(1, 20_000, False)])[2:]),
        previous_summary="## Goal\nold goal",
    )
    one = build_summary_prompt(request, max_message_chars=1_000)
    assert one == build_summary_prompt(request, max_message_chars=1_000)
    system, (message,) = one
    assert system is not None and DEFAULT_GUIDELINE in system
    assert "<previous-summary>\n## Goal\nold goal\n</previous-summary>" in message.text
    assert "chars omitted" in message.text and len(message.text) < 3_000
    # the oldest messages are dropped beyond the prompt cap, with a note
    long = FoldRequest(folded_messages=tuple(_transcript([(1, 3_000, False)] * 20)[2:]))
    _, (capped,) = build_summary_prompt(long, max_prompt_chars=10_000)
    assert "earlier messages omitted" in capped.text and len(capped.text) < 12_000


# --- failures fall back ---------------------------------------------------------------------


class Failing:
    mode = "standalone"

    def summarize(self, request: FoldRequest) -> str:
        raise RuntimeError("provider down")

    async def asummarize(self, request: FoldRequest) -> str:
        raise RuntimeError("provider down")


@pytest.mark.parametrize("summarizer", [Failing(), Recording("   ")])
def test_failing_summarizer_falls_back_with_one_warning(
    summarizer: Summarizer, caplog: pytest.LogCaptureFixture
) -> None:
    messages = _transcript([(1, 600, False)] * 8)
    kw: dict[str, Any] = {
        "store": InMemoryArtifactStore(),
        "thread": "t",
        "summarizer": summarizer,
        "counter": CHARS,
        "protect_tail_tokens": 800,
        "min_tokens": 0,
    }
    expected = plan_fold(messages, **{**kw, "summarizer": None})
    with caplog.at_level(logging.WARNING, logger="cachepilot"):
        edit = plan_fold(messages, **kw)
    assert edit is not None and expected is not None
    assert edit == expected  # the zero-LLM resume block, same bytes
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "resume block" in warnings[0].getMessage()
    assert "provider down" not in warnings[0].getMessage()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="cachepilot"):
        again = asyncio.run(aplan_fold(messages, **kw))
    assert again == expected
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1


def test_archive_failure_means_no_fold(caplog: pytest.LogCaptureFixture) -> None:
    class Broken(InMemoryArtifactStore):
        def put(self, *args: Any, **kwargs: Any) -> str:
            raise OSError("disk full")

    messages = _transcript([(1, 600, False)] * 8)
    with caplog.at_level(logging.WARNING, logger="cachepilot.fold"):
        edit = plan_fold(
            messages, store=Broken(), thread="t", counter=CHARS, protect_tail_tokens=500
        )
    assert edit is None and "archiving failed" in caplog.text


# --- emergency fold and context-length errors -----------------------------------------------


def test_emergency_fold_keeps_only_a_small_tail() -> None:
    messages = _transcript([(1, 3_000, False)] * 10)
    store = InMemoryArtifactStore()
    summarizer = Recording()
    summarizer.mode = "suffix"
    edit = emergency_fold(messages, store=store, thread="t", summarizer=summarizer, counter=CHARS)
    assert edit is not None
    view = apply_plan(messages, _plan(edit))
    assert pairing_issues(view) == []
    assert len(view) <= 5 and CHARS.count_messages(view) < 10_000
    assert summarizer.requests[0].mode == "standalone"  # the view no longer fits: no suffix


class APIError(Exception):
    def __init__(self, message: str, *, code: str | None = None, body: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.body = body


class ContextWindowExceededError(Exception):
    pass


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (APIError("Error code: 400", code="context_length_exceeded"), True),
        (
            APIError(
                "This model's maximum context length is 128000 tokens. However, your messages "
                "resulted in 130512 tokens."
            ),
            True,
        ),
        (APIError("bad", body={"error": {"code": "context_length_exceeded"}}), True),
        (APIError("prompt is too long: 215000 tokens > 200000 maximum"), True),
        (ValueError("Input is too long for requested model."), True),
        (ContextWindowExceededError("litellm"), True),
        (APIError("Rate limit reached for requests", code="rate_limit_exceeded"), False),
        (ValueError("invalid tool schema"), False),
        (TimeoutError(), False),
    ],
)
def test_is_context_length_error(exc: BaseException, expected: bool) -> None:
    assert is_context_length_error(exc) is expected


def test_is_context_length_error_follows_the_cause_chain() -> None:
    try:
        try:
            raise APIError("x", code="context_length_exceeded")
        except APIError as inner:
            raise RuntimeError("model call failed") from inner
    except RuntimeError as outer:
        assert is_context_length_error(outer)


# --- a real trace ---------------------------------------------------------------------------


@pytest.mark.traces
def test_fold_on_a_real_trace_shrinks_the_view() -> None:
    if not TRACES.is_dir():
        pytest.skip(f"shared traces not found at {TRACES}")
    from cachepilot_bench.traces import load_paths

    counter = get_counter()
    sessions = load_paths([TRACES / "claude_code_spotter"])
    session = max(sessions, key=lambda s: counter.count_messages(s.messages))
    messages = session.messages
    assert pairing_issues(messages) == []
    keys = message_keys(messages)
    before = counter.count_messages(messages, keys)
    store = InMemoryArtifactStore()
    half = len(messages) // 2
    while messages[half].role == "tool":
        half += 1
    # a first fold half-way, then a differential fold at the end
    one = plan_fold(
        messages[:half], keys[:half], store=store, thread="t", protect_tail_tokens=8_000
    )
    assert one is not None
    plan = _plan(one)
    two = plan_fold(messages, keys, store=store, thread="t", protect_tail_tokens=8_000, plan=plan)
    assert two is not None and two.key == one.key
    plan = Plan(epochs=[*plan.epochs, Epoch(index=1, reason="fold", edits=[two])])
    view = apply_plan(messages, plan, keys)
    after = counter.count_messages(view)
    assert pairing_issues(view) == []
    assert before > 50_000 and after * 4 < before, (before, after)
    folded = _archived(store, two.ref)
    assert folded[0].text == one.text
    start = fold_start(messages)
    assert view[start].text == two.text and view[start].text.startswith(FOLD_HEADER_PREFIX)


def test_differential_folds_hand_the_whole_source_range_to_the_summarizer() -> None:
    early = _transcript([(1, 400, False)] * 6)
    late = _transcript([(1, 400, False)] * 6 + [(2, 400, True)] * 5)
    store = InMemoryArtifactStore()
    summarizer = Recording()
    kw: dict[str, Any] = {
        "store": store,
        "thread": "t",
        "summarizer": summarizer,
        "counter": CHARS,
        "protect_tail_tokens": 900,
        "min_tokens": 0,
    }
    one = plan_fold(early, **kw)
    assert one is not None
    two = plan_fold(late, plan=_plan(one), epoch_index=1, **kw)
    assert two is not None
    first, second = summarizer.requests
    keys = message_keys(late)
    assert first.source_messages == tuple(early[2 : keys.index(one.end_key) + 1])
    # the second request covers the first fold's range too, as ingested (no summary inside)
    assert second.source_messages == tuple(late[2 : keys.index(two.end_key) + 1])
    assert len(second.source_messages) > len(second.folded_messages)


def test_zero_llm_differential_summary_is_rebuilt_not_nested() -> None:
    steps = [(1, 400, False)] * 6 + [(2, 400, True)] * 5 + [(1, 400, False)] * 6
    transcript = _transcript(steps)
    store = InMemoryArtifactStore()
    plan = Plan()
    texts: list[str] = []
    for n, end in enumerate((14, 26, len(transcript))):
        edit = plan_fold(
            transcript[:end],
            store=store,
            thread="t",
            counter=CHARS,
            protect_tail_tokens=500,
            min_tokens=0,
            plan=plan,
            epoch_index=n,
            summary_tokens=400,
            # the session-memory block alone: the facts section would take part of so small
            # a budget (tests/core/test_facts_in_use.py covers it)
            summarizer=ResumeBlockSummarizer(counter=CHARS, facts_share=0.0),
        )
        assert edit is not None
        plan = Plan(epochs=[*plan.epochs, Epoch(index=n, reason="fold", edits=[edit])])
        texts.append(edit.text)
    assert all("Earlier:" not in text for text in texts)
    assert all(CHARS.count(text) <= 400 + 120 for text in texts)  # budget + header line
    # the third summary still names work from the first range
    assert "tests/t2_0.py" in texts[-1]


def test_the_facts_share_of_a_zero_llm_summary_sets_how_many_exact_values_it_keeps() -> None:
    transcript = _transcript([(1, 30, False)] * 40)  # a session memory that fills its part
    for n in range(12):
        call = ToolCall(f"r{n}", "bash", json.dumps({"command": f"cat src/mod_{n}.py"}))
        body = "\n".join(f"def handler_{n}_{i}(request_{i}): return {1000 + i}" for i in range(40))
        transcript.append(Message(role="assistant", content=f"read {n}", tool_calls=(call,)))
        transcript.append(Message(role="tool", content=body, tool_call_id=f"r{n}", name="bash"))
    sections: dict[float, list[str]] = {}
    for share in (0.0, 0.3, 0.7):
        edit = plan_fold(
            transcript,
            store=InMemoryArtifactStore(),
            thread="t",
            protect_tail_tokens=200,
            min_tokens=0,
            summary_tokens=600,
            facts_share=share,
        )
        assert edit is not None
        _, _, facts = edit.text.partition(FACTS_HEADER)
        sections[share] = [v for line in facts.splitlines() for v in line.split(", ") if v]
        assert get_counter().count(edit.text) <= 600 + 60  # budget + header line
    assert sections[0.0] == []
    assert 0 < len(sections[0.3]) < len(sections[0.7])
    with pytest.raises(ValueError, match="fold_facts_share"):
        MaintenanceConfig(fold_facts_share=0.95)
