"""The observation compressor: archiving, threshold, failures, timeouts, replay, sent history."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.language_models.fake_chat_models import FakeListChatModel

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.compress import (
    META_KEY,
    ChatModel,
    CompressorConfig,
    CompressorTimeoutError,
    ObservationCompressor,
    build_observation_prompt,
)
from cachepilot.compress.guideline import DEFAULT_OBSERVATION_GUIDELINE
from cachepilot.maintenance.policy import MaintenanceConfig
from cachepilot.messages import Message, ToolCall
from cachepilot.reduce import COMPRESS_STEP, IngestMemory, Pipeline, normalize_output
from cachepilot.tokens import get_counter

ANSWER = "FAILED tests/test_api.py::test_login - AssertionError: expected 200, got 500\n149 passed"
LOGGER = "cachepilot.compress.observation"


def pytest_log(seed: int = 0, lines: int = 150) -> str:
    body = [
        f"tests/test_mod_{seed}_{i}.py::test_case_{i} PASSED [{i * 100 // lines:3d}%]"
        for i in range(lines)
    ]
    body.insert(lines // 2, "FAILED tests/test_api.py::test_login - AssertionError: expected 200")
    return "\n".join(body)


LOG = pytest_log()


class FakeModel:
    """A `complete(system, prompt)` model that records its calls."""

    def __init__(self, answer: str = ANSWER, fail: bool = False) -> None:
        self.answer = answer
        self.fail = fail
        self.calls: list[tuple[str | None, str]] = []

    def complete(self, system: str | None, prompt: str) -> str:
        self.calls.append((system, prompt))
        if self.fail:
            raise RuntimeError("compressor endpoint down")
        return self.answer


def _pilot(model: Any, store: Any = None, **config: Any) -> tuple[CachePilot, Any]:
    compressor = ObservationCompressor(model, config=CompressorConfig(**config))
    pilot = CachePilot(store=store or InMemoryArtifactStore(), compressor=compressor)
    return pilot, compressor


def test_log_is_above_the_default_threshold() -> None:
    assert get_counter().count(LOG) > 1_024 > get_counter().count(pytest_log(lines=20))


def test_compressed_output_archives_the_original() -> None:
    model = FakeModel()
    pilot, compressor = _pilot(model)
    report = pilot.ingest_report("bash", {"command": "pytest"}, LOG, "call_1")
    assert COMPRESS_STEP in report.steps
    assert report.text.startswith(ANSWER)
    assert report.ref is not None and f'recall(ref="{report.ref}")' in report.text
    assert "compressed by a model" in report.text and len(report.text) < len(LOG) // 10
    artifact = pilot.store.get("default", report.ref)
    assert artifact is not None and artifact.text == LOG  # byte-identical original
    assert artifact.meta[META_KEY] == {"key": compressor.key, "text": ANSWER}
    assert "FAILED tests/test_api.py" in pilot.recall(report.ref, grep="FAILED")
    assert len(model.calls) == 1
    system, prompt = model.calls[0]
    assert system is not None and DEFAULT_OBSERVATION_GUIDELINE in system
    assert "<tool-call>\nbash(" in prompt and LOG in prompt


def test_below_threshold_is_left_to_the_rules() -> None:
    small = pytest_log(lines=20)
    model = FakeModel()
    pilot, _ = _pilot(model)
    plain = CachePilot(store=InMemoryArtifactStore())
    got = pilot.ingest_report("bash", {"command": "pytest"}, small, "call_1")
    want = plain.ingest_report("bash", {"command": "pytest"}, small, "call_1")
    assert model.calls == []
    assert (got.text, got.ref, got.steps) == (want.text, want.ref, want.steps)
    # a lower threshold sends it
    pilot2, _ = _pilot(model, threshold_tokens=100)
    assert COMPRESS_STEP in pilot2.ingest_report("bash", {}, small, "call_1").steps


def test_failing_compressor_falls_back_and_logs_once(caplog: pytest.LogCaptureFixture) -> None:
    model = FakeModel(fail=True)
    pilot, compressor = _pilot(model, failures_before_pause=10)
    plain = CachePilot(store=InMemoryArtifactStore())
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    for n in range(3):
        output = pytest_log(seed=n)
        got = pilot.ingest_report("bash", {"command": f"pytest -k {n}"}, output, f"call_{n}")
        want = plain.ingest_report("bash", {"command": f"pytest -k {n}"}, output, f"call_{n}")
        assert (got.text, got.steps) == (want.text, want.steps)
        assert COMPRESS_STEP not in got.steps
    assert len(model.calls) == 3 and compressor.failures == 3
    warnings = [r for r in caplog.records if r.name == LOGGER and r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "RuntimeError" in warnings[0].getMessage()
    assert ANSWER not in caplog.text and LOG not in caplog.text  # no payloads in logs


def test_repeated_failures_rest_the_compressor() -> None:
    model = FakeModel(fail=True)
    pilot, _ = _pilot(model, failures_before_pause=2, pause_outputs=2)
    for n in range(6):
        pilot.ingest("bash", {"command": f"pytest -k {n}"}, pytest_log(seed=n), f"call_{n}")
    # 2 failures, 2 outputs skipped while resting, then 2 more tries
    assert len(model.calls) == 4


class _BlockingLangChainModel:
    """Duck-typed LangChain chat model whose `invoke` hangs until released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = threading.Event()

    def invoke(self, payload: Any) -> Any:
        self.started.set()
        self.release.wait(30)
        return type("Answer", (), {"content": ANSWER})()


def test_slow_compressor_times_out_and_falls_back(caplog: pytest.LogCaptureFixture) -> None:
    slow = _BlockingLangChainModel()
    pilot, compressor = _pilot(slow, timeout_seconds=0.05)
    plain = CachePilot(store=InMemoryArtifactStore())
    caplog.set_level(logging.WARNING, logger=LOGGER)
    try:
        got = pilot.ingest_report("bash", {"command": "pytest"}, LOG, "call_1")
        assert slow.started.is_set()
    finally:
        slow.release.set()
    want = plain.ingest_report("bash", {"command": "pytest"}, LOG, "call_1")
    assert (got.text, got.steps) == (want.text, want.steps)
    assert compressor.failures == 1
    assert "CompressorTimeoutError" in caplog.text
    with pytest.raises(CompressorTimeoutError):
        blocked = _BlockingLangChainModel()
        try:
            ChatModel(blocked, timeout=0.01).complete(None, "hi")
        finally:
            blocked.release.set()


def test_real_langchain_chat_model() -> None:
    model = FakeListChatModel(responses=[ANSWER])
    pilot, _ = _pilot(model)
    report = pilot.ingest_report("run_tests", {"target": "all"}, LOG, "call_1")
    assert COMPRESS_STEP in report.steps and report.text.startswith(ANSWER)


def test_replay_reuses_the_stored_answer_without_calling_the_model() -> None:
    store = InMemoryArtifactStore()
    first_model = FakeModel()
    first, _ = _pilot(first_model, store=store)
    one = first.ingest("bash", {"command": "pytest"}, LOG, "call_1", thread="t")
    again = first.ingest("bash", {"command": "pytest"}, LOG, "call_1", thread="t")
    assert again == one and len(first_model.calls) == 1  # memo
    # a new process replaying the same thread against the same archive
    replay_model = FakeModel(answer="a different answer that must not be used")
    replay, _ = _pilot(replay_model, store=store)
    assert replay.ingest("bash", {"command": "pytest"}, LOG, "call_1", thread="t") == one
    assert replay_model.calls == []
    # another guideline is another key: the stored answer is not reused
    other = ObservationCompressor(replay_model, guideline="Keep only failures.")
    fresh = CachePilot(store=store, compressor=other)
    assert fresh.ingest("bash", {"command": "pytest"}, LOG, "call_1", thread="t") != one
    assert len(replay_model.calls) == 1


def test_pointer_stubs_and_the_recall_gate_win() -> None:
    model = FakeModel()
    pilot, _ = _pilot(model)
    first = pilot.ingest_report("bash", {"command": "pytest"}, LOG, "call_1")
    dup = pilot.ingest_report("bash", {"command": "pytest -x"}, LOG, "call_2")
    assert "duplicate" in dup.steps and COMPRESS_STEP not in dup.steps
    assert len(model.calls) == 1
    assert first.ref is not None
    pilot.recall(first.ref)  # the agent wanted the whole output: the source's gate opens
    # (the ref counts for the source that produced it last: `pytest -x`)
    later = pilot.ingest_report("bash", {"command": "pytest -x"}, pytest_log(seed=9), "call_3")
    assert COMPRESS_STEP not in later.steps and len(model.calls) == 1
    # the same decisions at the pipeline level
    pipeline = Pipeline()
    memory = IngestMemory()
    result = normalize_output(LOG)
    pipeline.run("bash", {}, "c1", result, memory)
    stubbed = pipeline.run("bash", {}, "c2", result, memory, compressed=ANSWER)
    assert COMPRESS_STEP not in [s.pass_name for s in stubbed.steps]


def test_file_reads_are_exempt_by_default() -> None:
    model = FakeModel()
    pilot, _ = _pilot(model)
    pilot.ingest("read_file", {"path": "src/app.py"}, LOG, "call_1")
    assert model.calls == []
    pilot2, _ = _pilot(model, skip_file_reads=False)
    assert COMPRESS_STEP in pilot2.ingest_report("read_file", {"path": "a"}, LOG, "c").steps


def test_compressor_never_runs_on_already_sent_history() -> None:
    model = FakeModel()
    config = Config(
        maintenance=MaintenanceConfig(
            prune=True, schedule="fixed", every=1, protect_tool_tokens=0, protect_results=1,
            min_prune_tokens=1, min_result_tokens=1, fold=False, stub_keeps_chars=0,
        )
    )  # fmt: skip
    compressor = ObservationCompressor(model)
    pilot = CachePilot(config, store=InMemoryArtifactStore(), compressor=compressor)
    transcript = [Message(role="user", content="Fix the failing login test.")]
    previous: list[Message] | None = None
    epochs_seen = 0
    for n in range(6):
        call = ToolCall(id=f"call_{n}", name="bash", arguments=f'{{"command": "pytest -k {n}"}}')
        transcript.append(Message(role="assistant", content="", tool_calls=(call,)))
        before = len(model.calls)
        text = pilot.ingest("bash", {"command": f"pytest -k {n}"}, pytest_log(seed=n), call.id)
        assert len(model.calls) == before + 1  # once per new output, at ingestion
        transcript.append(Message(role="tool", content=text, tool_call_id=call.id, name="bash"))
        _, view, _ = pilot.prepare("You are a coder.", transcript, [], now=float(n))
        assert len(model.calls) == before + 1  # prepare (and its maintenance) never calls it
        epochs = len(pilot.state().plan.epochs)
        if previous is not None and epochs == epochs_seen:
            assert view[: len(previous)] == previous  # append-only between maintenance points
        previous, epochs_seen = view, epochs
    assert epochs_seen > 0  # maintenance did rewrite history, without the compressor
    # the compressor saw the recent history the pilot noted at prepare
    assert "Fix the failing login test." in model.calls[1][1]


def test_async_ingest_and_acompress() -> None:
    model = FakeModel()
    pilot, _ = _pilot(model)
    text = asyncio.run(pilot.aingest("bash", {"command": "pytest"}, LOG, "call_1"))
    assert text.startswith(ANSWER)

    class AsyncOnly:
        async def ainvoke(self, payload: Any) -> Any:
            return type("Answer", (), {"content": ANSWER})()

    async_compressor = ObservationCompressor(AsyncOnly())
    result = normalize_output(pytest_log(seed=3))
    got = asyncio.run(async_compressor.acompress("bash", {}, "c", result))
    assert got is not None and got.text == ANSWER and got.origin == "model"
    # the sync path drives an async-only model too (in its worker thread)
    assert async_compressor.compress("bash", {}, "c", normalize_output(LOG)) is not None


def test_unusable_answers_are_discarded() -> None:
    too_long = FakeModel(answer=LOG)
    pilot, compressor = _pilot(too_long)
    report = pilot.ingest_report("bash", {"command": "pytest"}, LOG, "call_1")
    assert COMPRESS_STEP not in report.steps and compressor.failures == 0
    empty = FakeModel(answer="   ")
    pilot2, compressor2 = _pilot(empty)
    assert COMPRESS_STEP not in pilot2.ingest_report("bash", {}, LOG, "c").steps
    assert compressor2.failures == 1


def test_openai_client_through_a_cassette(stub_server: Any, cassette: Any) -> None:
    server = stub_server(lambda body: ANSWER)
    client = openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
    compressor = ObservationCompressor(client, model_name="gpt-5.4-nano")
    pilot = CachePilot(store=InMemoryArtifactStore(), compressor=compressor)
    with cassette("observation_openai"):
        report = pilot.ingest_report("bash", {"command": "pytest"}, LOG, "call_1")
    assert COMPRESS_STEP in report.steps and report.text.startswith(ANSWER)
    for body in server.requests:  # only when recording
        assert body["model"] == "gpt-5.4-nano" and body["max_completion_tokens"] == 1_024
        assert body["messages"][0]["role"] == "system"


def test_prompt_is_deterministic_and_bounded() -> None:
    history = [Message(role="user", content="task " * 5_000)]
    one = build_observation_prompt("bash", {"b": 1, "a": 2}, "x" * 300_000, history, guideline="G")
    two = build_observation_prompt("bash", {"a": 2, "b": 1}, "x" * 300_000, history, guideline="G")
    assert one == two
    assert len(one[1]) < 120_000 and "characters cut here" in one[1]


@pytest.mark.parametrize(
    "bad",
    [
        {"threshold_tokens": 0},
        {"timeout_seconds": 0},
        {"max_ratio": 1.5},
        {"tools": ()},
        {"max_input_chars": 10},
        {"history_messages": -1},
    ],
)
def test_bad_config_fails_fast(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        CompressorConfig(**bad)


def test_bad_model_or_guideline_fails_fast() -> None:
    with pytest.raises(ValueError):
        ObservationCompressor(object())
    with pytest.raises(ValueError):
        ObservationCompressor(FakeModel(), guideline="  ")
    with pytest.raises(ValueError):
        ObservationCompressor(openai.OpenAI(api_key="sk-test", base_url="http://127.0.0.1:9"))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    text=st.text(min_size=0, max_size=6_000),
    repeat=st.integers(min_value=1, max_value=40),
    answer=st.text(min_size=0, max_size=200),
)
def test_property_nothing_is_lost(text: str, repeat: int, answer: str) -> None:
    output = "\n".join([text] * repeat)
    model = FakeModel(answer=answer)
    pilot, _ = _pilot(model, threshold_tokens=64)
    report = pilot.ingest_report("bash", {"command": "x"}, output, "call_1")
    if get_counter().count(output) < 64:
        assert model.calls == []
    if report.text != output and output:  # an empty output shows `[no output]`
        assert report.ref is not None  # archived (a lossless cleanup need not name it)
        artifact = pilot.store.get("default", report.ref)
        assert artifact is not None and artifact.text == output
    if COMPRESS_STEP in report.steps or "size_gate" in report.steps:
        assert f'recall(ref="{report.ref}")' in report.text
    if COMPRESS_STEP in report.steps:
        assert report.text.startswith(answer.strip())
