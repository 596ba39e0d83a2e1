"""Tests of the `CachePilot` facade, used the way a plugin or a user uses it.

Every test drives the public API only (`ingest`, `ingest_report`, `prepare`, `recall`,
`record_usage`, the state round-trip) and checks the DESIGN §2 invariants on what comes back:
nothing is lost (originals come back byte-identical from the store), bad input never crashes,
requests are deterministic and append-only, tools are stable from the first call, and the demo
workload's prefix caches across calls and across threads.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import hashlib
import json
import logging
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from cachepilot.artifacts import ArtifactStore, InMemoryArtifactStore, SQLiteArtifactStore
from cachepilot.canonical import CanonicalConfig
from cachepilot.maintenance.policy import MaintenanceConfig
from cachepilot.messages import Message, ToolCall
from cachepilot.pilot.facade import CachePilot, Config, IngestReport, PilotState
from cachepilot.recall.tool import RECALL_TOOL_NAME
from cachepilot.reduce import NO_OUTPUT, PASSES_BY_NAME, ReduceConfig
from cachepilot.sim import CacheSimulator, Request, common_prefix, get_profile, render_request
from cachepilot.support.log_labels import thread_label
from cachepilot.tokens import TokenCounter
from cachepilot.usage import Usage
from cachepilot_bench.demo_workload import (
    AGENT_SESSION_UUID,
    DEMO_CWD,
    TASK2_FIRST_CALL,
    build_demo_session,
    call_timestamp,
    volatile_system_prompt,
)
from cachepilot_bench.traces.session import Session

PROFILE = "openai-gpt-5.4-mini"
RECALL_IN_TEXT = re.compile(r'recall\(ref="([0-9a-f]{12})"\)')
DATA_URL = re.compile(r"data:image/[A-Za-z0-9.+-]+;base64,")
PILOT_LOGGER = "cachepilot.pilot.facade"

# --------------------------------------------------------------------------------------------
# helpers


NO_MAINTENANCE = Config(maintenance=MaintenanceConfig(enabled=False))


def _memory_pilot(config: Config | None = None) -> CachePilot:
    return CachePilot(config, store=InMemoryArtifactStore())


def _original_bytes(output: object) -> bytes:
    """The bytes the archive must hold for a tool output (what `recall` gives back)."""
    if output is None:
        return b""
    if isinstance(output, bytes):
        return output
    if isinstance(output, str):
        return output.encode("utf-8", "surrogatepass")
    return json.dumps(output, ensure_ascii=False).encode("utf-8", "surrogatepass")


def _exact_view(output: object) -> str | None:
    """The text that represents `output` exactly, or None when no text does (not UTF-8)."""
    if output is None:
        return ""
    if isinstance(output, bytes):
        try:
            return output.decode("utf-8")
        except UnicodeDecodeError:
            return None
    if isinstance(output, str):
        return output
    return json.dumps(output, ensure_ascii=False)


def _check_nothing_lost(
    pilot: CachePilot, thread: str, output: object, report: IngestReport
) -> None:
    """The returned text is the original, or the original is archived byte for byte."""
    original = _original_bytes(output)
    assert report.text, "the transcript never gets an empty tool message"
    if not original:
        assert report.text == NO_OUTPUT
        assert report.ref is None  # nothing to lose, nothing archived
        return
    view = _exact_view(output)
    for named in set(RECALL_IN_TEXT.findall(report.text)):  # every ref shown can be recalled
        if view is None or named not in view:
            assert pilot.store.get(thread, named) is not None, named
    if report.ref is not None:
        artifact = pilot.store.get(thread, report.ref)
        assert artifact is not None, "the report names a ref the store does not have"
        assert artifact.data == original
        assert artifact.sha256 == hashlib.sha256(original).hexdigest()
    if report.ref is None and report.text != view:
        # The one exact rendering that differs from the original: an image as a data URL.
        url = DATA_URL.match(report.text)
        assert url is not None, "the text changed but the original was not archived"
        assert base64.b64decode(report.text[url.end() :]) == original
    # Steps that are not passes (the redaction of credential shapes) are lossy.
    lossy = [s for s in report.steps if s not in PASSES_BY_NAME or not PASSES_BY_NAME[s].lossless]
    if lossy or (report.ref is not None and view is None):
        # Content was left out: the model must be able to see how to get it back.
        assert report.ref is not None
        assert report.ref in RECALL_IN_TEXT.findall(report.text), lossy


def _tool(name: str, description: str = "") -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description or f"The {name} tool.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string", "description": "A path."}},
                "required": ["path"],
            },
        },
    }


def _tool_names(tools: Sequence[dict[str, Any]]) -> list[str]:
    return [t["function"]["name"] if "function" in t else t["name"] for t in tools]


def _request_json(prepared: tuple[str | None, list[Message], list[dict[str, Any]]]) -> str:
    system, messages, tools = prepared
    return json.dumps(
        {"system": system, "messages": [m.to_dict() for m in messages], "tools": tools},
        ensure_ascii=False,
    )


def _distinct_lines(n: int, seed: str) -> str:
    """`n` lines that no reduction pass changes (no repeats, near-duplicates or blanks)."""
    return "\n".join(
        f"{hashlib.sha256(f'{seed}{i}'.encode()).hexdigest()[:40]} ok" for i in range(n)
    )


def _growing_transcript(turns: int) -> Iterator[list[Message]]:
    """Transcripts of a well-paired session, one per model call (each extends the last)."""
    messages: list[Message] = [Message("user", "Please fix the failing test in src/app.py.")]
    for turn in range(turns):
        yield list(messages)
        call = ToolCall(f"call_{turn}", "read_file", json.dumps({"path": f"src/m{turn}.py"}))
        messages.append(Message("assistant", f"Reading module {turn}.", tool_calls=(call,)))
        messages.append(
            Message(
                "tool",
                f"def f{turn}():\n    return {turn}\n",
                tool_call_id=call.id,
                name="read_file",
            )
        )
        if turn % 7 == 6:
            messages.append(Message("user", f"Status update {turn}: keep going."))


def _rendered_tokens(request: Request, counter: TokenCounter) -> int:
    return render_request(request, counter).total_tokens


# --------------------------------------------------------------------------------------------
# 1. bad input never crashes and loses nothing


_LOG_10K = "".join(
    f"2026-03-17 14:{(i // 60) % 60:02d}:{i % 60:02d} INFO worker-{i % 7} step {i} done\n"
    for i in range(10_000)
)
_BINARY = b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 40 + b"\x00\x00tail"
_INVALID_UTF8 = "".join(f"line {i}: temp 21\u00b0C\n" for i in range(300)).encode() + b"\xff\xfe"
_DICT = {
    "items": [{"sku": f"WID-{i:04d}", "note": None, "tags": []} for i in range(400)],
    "next": None,
    "meta": {"warehouse": "WH-EAST", "empty": {}},
}
CASES: dict[str, Callable[[], object]] = {
    "binary_with_nuls": lambda: _BINARY,
    "invalid_utf8": lambda: _INVALID_UTF8,
    "empty_str": lambda: "",
    "none": lambda: None,
    "empty_bytes": lambda: b"",
    "dict": lambda: _DICT,
    "log_10k_lines": lambda: _LOG_10K,
}


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ArtifactStore]:
    if request.param == "memory":
        yield InMemoryArtifactStore()
    else:
        sqlite = SQLiteArtifactStore(tmp_path / "artifacts.db")
        yield sqlite
        sqlite.close()


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_output_is_ingested_and_recallable(case: str, store: ArtifactStore) -> None:
    output = CASES[case]()
    pilot = CachePilot(store=store)
    report = pilot.ingest_report("bash", {"command": f"run {case}"}, output, "call_1", "t1")
    _check_nothing_lost(pilot, "t1", output, report)
    assert pilot.ingest("bash", {"command": f"run {case}"}, output, "call_1", "t2") == report.text
    if report.ref is None:
        return
    # The ref is the one the model can see, and recall serves the content.
    assert RECALL_IN_TEXT.findall(report.text) in ([], [report.ref])
    rendered = pilot.recall(report.ref, max_chars=300, thread="t1")
    assert rendered.startswith(f"[recall {report.ref}")
    text_view = _exact_view(output)
    if text_view is not None:
        assert text_view[:60] in rendered
    elif case == "invalid_utf8":
        assert "line 0: temp 21\u00b0C" in rendered
    else:
        assert "binary" in rendered
        assert f"{len(_BINARY):,} bytes" in rendered


def test_changed_outputs_name_their_ref_in_the_text() -> None:
    pilot = _memory_pilot()
    for case in ("binary_with_nuls", "invalid_utf8", "log_10k_lines"):
        report = pilot.ingest_report("bash", {"command": case}, CASES[case](), case, "t")
        assert report.ref is not None, case
        assert report.ref in RECALL_IN_TEXT.findall(report.text), case
    log = pilot.ingest_report("bash", {"command": "log"}, _LOG_10K, "log", "t")
    assert len(log.text) < len(_LOG_10K) // 10
    # A slice of the recalled log is the original's lines, verbatim.
    assert log.ref is not None
    sliced = pilot.recall(log.ref, lines="5000-5002", thread="t")
    assert _LOG_10K.splitlines(keepends=True)[4999] in sliced + "\n"
    assert _LOG_10K.splitlines()[5001] in sliced


def test_50_mb_output_is_reduced_and_archived_whole() -> None:
    block = "".join(f"{i:06d} compiling module_{i}.c ... ok\n" for i in range(1_000))
    output = block * (50_000_000 // len(block) + 1)
    assert len(output) >= 50_000_000
    pilot = _memory_pilot()
    report = pilot.ingest_report("bash", {"command": "make -j8"}, output, "call_big", "t")
    assert report.ref is not None
    assert len(report.text) <= Config().reduction.hard_cap
    assert report.ref in RECALL_IN_TEXT.findall(report.text)
    artifact = pilot.store.get("t", report.ref)
    assert artifact is not None
    assert artifact.data == output.encode("utf-8")
    rendered = pilot.recall(report.ref, max_chars=500, thread="t")
    assert rendered.startswith(f"[recall {report.ref}")
    assert block[:100] in rendered
    assert f"{len(output):,} chars" in rendered
    # The model cannot pull 50 MB back into its context: recall is capped too.
    hard_cap = Config().reduction.hard_cap
    whole = pilot.recall(report.ref, max_chars=10**9, thread="t")
    assert hard_cap // 2 < len(whole) <= hard_cap + 1_000
    assert "[continues: recall(" in whole


def test_odd_arguments_never_crash_ingest() -> None:
    cyclic: dict[str, Any] = {"command": "ls"}
    cyclic["self"] = cyclic
    odd_args: list[Any] = [
        None,
        "",
        "not json",
        "[1, 2]",
        '{"command": "ls"}',
        {1: "int key", "command": "ls"},
        cyclic,
        {"command": object()},
        {"command": "x" * 10_000},
        [1, 2, 3],
        42,
    ]
    pilot = _memory_pilot()
    big = _distinct_lines(2_000, "args")
    for i, args in enumerate(odd_args):
        report = pilot.ingest_report("bash", args, big, f"call_{i}", "t")
        assert report.ref is not None, repr(args)[:80]
        artifact = pilot.store.get("t", report.ref)
        assert artifact is not None
        assert artifact.data == big.encode()
        json.dumps(artifact.meta)  # metadata stays JSON


def test_unarchivable_original_is_bounded_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    class FlakyStore(InMemoryArtifactStore):
        down = True

        def put(self, *args: Any, **kwargs: Any) -> str:
            if self.down:
                raise OSError("disk full")
            return super().put(*args, **kwargs)

    store = FlakyStore()
    pilot = CachePilot(store=store)
    big = _distinct_lines(2_000, "broken")
    small = "x\x1b[1m bold\x1b[0m\n" * 10  # would be cleaned, but nothing may be lost
    with caplog.at_level(logging.WARNING, logger=PILOT_LOGGER):
        report = pilot.ingest_report("bash", {"command": "x"}, big, "c1", "t")
        whole = pilot.ingest_report("bash", {"command": "y"}, small, "c2", "t")
        store.down = False
        back = pilot.ingest_report("bash", {"command": "z"}, big + "!", "c3", "t")
    # Over the size limit: a head/tail preview that says the middle is gone (no ref to name).
    assert report.ref is None
    assert len(report.text) < 5_000 < len(big)
    assert report.text.startswith(big[:300]) and report.text.endswith(big[-200:])
    assert "the archive is unavailable, so the omitted part was not kept" in report.text
    assert whole.text == small and whole.ref is None  # under the limit: passed whole
    assert back.ref is not None
    assert pilot.state("t").archive_failures == 2
    levels = [(r.levelno, bool(r.exc_info)) for r in caplog.records]
    assert levels[:2] == [(logging.ERROR, True), (logging.WARNING, False)]  # once per outage
    assert "accepts originals again" in caplog.records[-1].getMessage()


def test_reduce_off_still_archives_undecodable_output() -> None:
    pilot = _memory_pilot(Config(reduce=False))
    big = _distinct_lines(2_000, "off")
    plain = pilot.ingest_report("bash", {"command": "x"}, big, "c1", "t")
    assert plain.text == big
    assert plain.ref is None
    report = pilot.ingest_report("bash", {"command": "y"}, _INVALID_UTF8, "c2", "t")
    assert report.text != _INVALID_UTF8.decode("utf-8", "surrogateescape")
    _check_nothing_lost(pilot, "t", _INVALID_UTF8, report)
    assert report.ref is not None


# --------------------------------------------------------------------------------------------
# 2. properties: total, deterministic, lossless

PROPERTY = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# Small limits so the size gate and the hard cap fire on hypothesis-sized inputs.
SMALL = ReduceConfig(
    default_limit=2_000,
    shell_limit=1_500,
    search_limit=1_200,
    reread_limit=1_500,
    head_chars=300,
    tail_chars=200,
    hard_cap=4_000,
    max_scan_chars=6_000,
    image_max_bytes=64,
)
CONFIGS = [Config(), Config(reduction=SMALL)]

tool_names = st.sampled_from(["bash", "read_file", "grep", "fetch_url", "mcp__db__query"])
tool_args = st.one_of(
    st.none(),
    st.text(max_size=20),
    st.fixed_dictionaries({"command": st.text(max_size=30)}),
    st.fixed_dictionaries({"path": st.sampled_from(["a.py", "/tmp/x", ""])}),
)
texts = st.one_of(
    st.text(),
    st.text(alphabet=st.characters(exclude_categories=())),  # lone surrogates too
    st.builds(lambda s, n: s * n, st.text(min_size=1, max_size=40), st.integers(0, 400)),
    st.builds(
        "\n".join,
        st.lists(st.sampled_from(["ok", "\x1b[31mFAIL\x1b[0m", "  ", "", "x" * 90]), max_size=300),
    ),
)
binaries = st.one_of(
    st.binary(),
    st.builds(lambda b, n: b * n, st.binary(min_size=1, max_size=40), st.integers(0, 400)),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda children: (
        st.lists(children, max_size=6) | st.dictionaries(st.text(max_size=8), children, max_size=6)
    ),
    max_leaves=60,
)


def _check_property(config: Config, tool: str, args: Any, output: object) -> None:
    first, second = CachePilot(config, store=InMemoryArtifactStore()), None
    report = first.ingest_report(tool, args, output, "call_1", "t")
    second = CachePilot(config, store=InMemoryArtifactStore())
    assert second.ingest(tool, args, output, "call_1", "t") == report.text
    _check_nothing_lost(first, "t", output, report)


@pytest.mark.parametrize("config", CONFIGS, ids=["default", "small"])
@PROPERTY
@given(tool=tool_names, args=tool_args, output=texts)
def test_property_text(config: Config, tool: str, args: Any, output: str) -> None:
    _check_property(config, tool, args, output)


@pytest.mark.parametrize("config", CONFIGS, ids=["default", "small"])
@PROPERTY
@given(tool=tool_names, args=tool_args, output=binaries)
def test_property_bytes(config: Config, tool: str, args: Any, output: bytes) -> None:
    _check_property(config, tool, args, output)


@pytest.mark.parametrize("config", CONFIGS, ids=["default", "small"])
@PROPERTY
@given(tool=tool_names, args=tool_args, output=json_values)
def test_property_json(config: Config, tool: str, args: Any, output: object) -> None:
    _check_property(config, tool, args, output)


# --------------------------------------------------------------------------------------------
# 3. prepare: tools, inputs, determinism, append-only

USER_TOOLS = [_tool("write_file"), _tool("bash"), _tool("read_file")]


def _clock_prompt(moment: datetime) -> str:
    return (
        "You are a careful coding agent.\n"
        f"Current date and time: {moment:%A, %d %B %Y %H:%M:%S} UTC\n"
        f"Request started at {moment.isoformat()}; unix time {int(moment.timestamp())}.\n"
        "Working directory: /home/ci-runner/builds/4411/repo\n"
        "Follow the repository's contribution guide. Run the tests after every change.\n"
    )


def test_recall_tool_present_from_first_call_and_tools_stable() -> None:
    pilot = _memory_pilot()
    start = datetime(2026, 1, 30, 23, 58, 1, tzinfo=UTC)
    seen: set[str] = set()
    for n, transcript in enumerate(_growing_transcript(6)):
        tools_in = list(reversed(USER_TOOLS)) if n % 2 else USER_TOOLS
        _, _, tools = pilot.prepare(
            _clock_prompt(start + timedelta(minutes=17 * n)), transcript, tools_in, "t"
        )
        names = _tool_names(tools)
        assert RECALL_TOOL_NAME in names, f"call {n}"
        assert names == sorted(names)
        assert len(names) == len(USER_TOOLS) + 1
        for tool in tools:  # key-sorted: every serializer emits the same bytes
            assert json.dumps(tool) == json.dumps(tool, sort_keys=True)
        seen.add(json.dumps(tools, sort_keys=True))
    assert len(seen) == 1


def test_prepare_does_not_mutate_its_inputs() -> None:
    pilot = _memory_pilot()
    tools = copy.deepcopy(USER_TOOLS)
    tools[0]["function"]["parameters"]["required"] = ["path", "content"]
    tools_before = copy.deepcopy(tools)
    transcript = list(_growing_transcript(5))[-1]
    transcript_before = [m.to_dict() for m in transcript]
    for minute in (0, 7):  # the clock moves on the second call: the values move out there
        system = _clock_prompt(datetime(2026, 2, 2, 9, minute, tzinfo=UTC))
        out_system, messages, out_tools = pilot.prepare(system, transcript, tools, "t")
        assert (out_system != system) == (minute == 7)
        assert messages is not transcript
        assert out_tools is not tools
    assert tools == tools_before
    assert [m.to_dict() for m in transcript] == transcript_before
    assert len(transcript) == len(transcript_before)
    # Unchanged messages come back as the same objects (only the first user message carries
    # the context block).
    assert all(a is b for a, b in zip(messages[1:], transcript[1:], strict=True))


def test_prepare_is_deterministic_for_equal_transcript_and_state() -> None:
    start = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
    transcripts = list(_growing_transcript(12))
    prompts = [_clock_prompt(start + timedelta(minutes=9 * n)) for n in range(12)]
    a = _memory_pilot()
    for n in range(11):
        a.prepare(prompts[n], transcripts[n], USER_TOOLS, "t")
    exported = a.export_state("t")
    b = _memory_pilot()
    b.load_state("t", json.dumps(exported))
    c = _memory_pilot()
    c.load_state("t", exported)
    replay = _memory_pilot()  # same transcript from scratch: same state, same request
    for n in range(11):
        replay.prepare(prompts[n], transcripts[n], USER_TOOLS, "t")
    requests = {
        _request_json(p.prepare(prompts[11], transcripts[11], USER_TOOLS, "t"))
        for p in (a, b, c, replay)
    }
    assert len(requests) == 1
    # And the placeholders carry no value of this run into the stable part.
    system = json.loads(requests.pop())["system"]
    assert "2026" not in system
    assert "/home/ci-runner" not in system


def test_requests_are_append_only_under_a_clock_in_the_system_prompt() -> None:
    pilot = _memory_pilot()
    counter = TokenCounter()
    start = datetime(2026, 2, 27, 21, 40, 3, 512_000, tzinfo=UTC)
    previous: tuple[str | None, list[Message], list[dict[str, Any]]] | None = None
    previous_rendered = None
    raw_systems: set[str] = set()
    for n, transcript in enumerate(_growing_transcript(30)):
        moment = start + timedelta(hours=3, minutes=7, seconds=13) * n  # crosses days, months
        raw = _clock_prompt(moment)
        raw_systems.add(raw)
        prepared = pilot.prepare(raw, transcript, USER_TOOLS, "t")
        system, messages, tools = prepared
        rendered = render_request(Request(system, messages, tools), counter)
        if n == 1:  # the clock moved: its values move into the block (one prefix break)
            assert previous is not None and previous[0] == _clock_prompt(start) != system
        elif previous is not None and previous_rendered is not None:
            assert system == previous[0], f"call {n}: system prompt changed"
            assert tools == previous[2], f"call {n}: tools changed"
            old = previous[1]
            assert [m.to_dict() for m in messages[: len(old)]] == [m.to_dict() for m in old]
            shared, _ = common_prefix(previous_rendered, rendered)
            assert shared == previous_rendered.total_tokens, f"call {n} breaks the prefix"
            assert rendered.total_tokens > previous_rendered.total_tokens
        previous, previous_rendered = prepared, rendered
    assert len(raw_systems) == 30  # the raw prompt really changed on every call


def test_without_canonicalization_the_prefix_breaks() -> None:
    """The contrast: the same clock prompt passed through breaks every call."""
    pilot = _memory_pilot(Config(canonicalize=False))
    start = datetime(2026, 2, 27, 21, 40, 3, tzinfo=UTC)
    systems = []
    for n, transcript in enumerate(_growing_transcript(3)):
        raw = _clock_prompt(start + timedelta(minutes=n))
        system, messages, _ = pilot.prepare(raw, transcript, USER_TOOLS, "t")
        assert system is raw  # passed through untouched
        assert [m.to_dict() for m in messages] == [m.to_dict() for m in transcript]
        systems.append(system)
    assert len(set(systems)) == 3


def test_config_switches_for_recall_tool_and_canonicalization() -> None:
    transcript = list(_growing_transcript(2))[-1]
    system = _clock_prompt(datetime(2026, 4, 1, 12, 0, tzinfo=UTC))
    _, _, no_recall = _memory_pilot(Config(recall_tool=False)).prepare(
        system, transcript, USER_TOOLS, "t"
    )
    assert RECALL_TOOL_NAME not in _tool_names(no_recall)
    assert sorted(_tool_names(no_recall)) == sorted(_tool_names(USER_TOOLS))
    _, _, only_recall = _memory_pilot().prepare(system, transcript, (), "t")
    assert _tool_names(only_recall) == [RECALL_TOOL_NAME]
    out_system, _, raw_tools = _memory_pilot(Config(canonicalize=False)).prepare(
        system, transcript, USER_TOOLS, "t"
    )
    assert out_system == system
    assert RECALL_TOOL_NAME in _tool_names(raw_tools)
    # A user tool already called "recall" is not doubled.
    own = {"type": "function", "function": {"name": "recall", "parameters": {}}}
    _, _, tools = _memory_pilot().prepare(system, transcript, [own], "t")
    assert _tool_names(tools) == [RECALL_TOOL_NAME]
    assert tools[0]["function"]["parameters"] == {}


def test_prepare_rejects_misuse_with_value_error() -> None:
    pilot = _memory_pilot()
    with pytest.raises(ValueError, match="Message"):
        pilot.prepare("sys", [{"role": "user", "content": "hi"}], [], "t")  # type: ignore[list-item]
    with pytest.raises(ValueError, match="tools"):
        pilot.prepare("sys", [], ["bash"], "t")  # type: ignore[list-item]
    with pytest.raises(ValueError, match="system"):
        pilot.prepare(b"sys", [], [], "t")  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# 4. the demo workload: append-only across the session, static prefix shared across threads


def _other_thread_prompt(n: int) -> str:
    """The demo prompt of another session: other date, working directory and session id."""
    original = volatile_system_prompt(n)
    today = re.search(r"Today is (.+)", original)
    assert today is not None
    other = (
        original.replace(today.group(1), "Friday, 2026-04-24 09:12:44 UTC")
        .replace(DEMO_CWD, "/home/alice/work/inventory-service")
        .replace(AGENT_SESSION_UUID, "0d9e7c1b-8a2f-4e63-b5d4-71c2a9f80e13")
    )
    assert other.count("/home/alice/work/inventory-service") == 2
    assert AGENT_SESSION_UUID not in other and DEMO_CWD not in other
    return other


@pytest.fixture(scope="module")
def demo() -> Session:
    return build_demo_session()


def _run_demo(
    pilot: CachePilot, sim: CacheSimulator, session: Session, thread: str
) -> tuple[list[tuple[int, int, bool, float | None]], set[str | None]]:
    """Feed the session through the pilot the way a plugin does: (cached, total, extends, idle)
    per call, and the system prompts sent. Tool results are ingested once, when they arrive."""
    assert session.messages[0].role == "system"
    calls = {c.id: c for m in session.messages for c in m.tool_calls}
    transcript: list[Message] = []
    out: list[tuple[int, int, bool, float | None]] = []
    systems: set[str | None] = set()
    n = 0
    for message in session.messages[1:]:
        if message.role == "assistant":
            system, messages, tools = pilot.prepare(
                volatile_system_prompt(n),
                transcript,
                session.tools,
                thread,
                now=call_timestamp(n),
            )
            systems.add(system)
            usage = sim.submit(Request(system, messages, tools, call_timestamp(n)))
            assert sim.last is not None
            out.append(
                (
                    usage.cached_tokens,
                    usage.input_tokens,
                    sim.last.prefix_extends,
                    sim.last.idle_seconds,
                )
            )
            n += 1
        if message.role == "tool":
            call = calls[message.tool_call_id or ""]
            text = pilot.ingest(call.name, call.arguments, message.content, call.id, thread)
            message = replace(message, content=text)  # noqa: PLW2901
        transcript.append(message)
    return out, systems


def _second_thread_first_call(
    pilot: CachePilot, sim: CacheSimulator, session: Session
) -> tuple[int, int, str | None, list[dict[str, Any]]]:
    first = session.assistant_indices[0]
    system, messages, tools = pilot.prepare(
        _other_thread_prompt(0), session.messages[1:first], session.tools, "thread-2"
    )
    usage = sim.submit(Request(system, messages, tools, call_timestamp(len(session.calls)) + 30))
    counter = sim.counter
    static = _rendered_tokens(Request(system, (), tools), counter)
    return usage.cached_tokens, static, system, tools


def test_demo_session_caches_across_calls_and_threads(demo: Session) -> None:
    profile = get_profile(PROFILE)
    # This test is about canonical prefixes: no maintenance point may rewrite history here
    # (tests/core/test_maintenance.py covers requests around maintenance points). With the
    # block from the first call, threads whose prompts differ only in values share the prefix
    # from their first call (the default keeps values in place until one changes).
    first_call = CanonicalConfig(move_when_changed=False)
    pilot = _memory_pilot(NO_MAINTENANCE.model_copy(update={"canonical": first_call}))
    sim = CacheSimulator(profile)
    records, systems = _run_demo(pilot, sim, demo, "thread-1")
    assert len(systems) == 1  # one system prompt for the whole session
    assert len(records) == len(demo.assistant_indices) > 40
    for n, (cached, _, extends, idle) in enumerate(records[1:], start=1):
        assert extends, f"call {n} does not extend call {n - 1}"
        if n == TASK2_FIRST_CALL:  # after the idle gap the provider cache has expired
            assert idle is not None and profile.ttl_seconds is not None
            assert idle > profile.ttl_seconds
            assert cached == 0
        else:
            # Everything sent before is a hit (down to the provider's 128-token grid).
            assert cached > 0, f"call {n} got no cached tokens"
            previous_total = records[n - 1][1]
            assert cached >= profile.billable_hit(previous_total), f"call {n}: {cached}"
    cached, static, system, _ = _second_thread_first_call(pilot, sim, demo)
    assert {system} == systems  # and the same one for every session
    assert system is not None
    for volatile in ("2026", DEMO_CWD, "/home/alice", AGENT_SESSION_UUID, "0d9e7c1b"):
        assert volatile not in system
    floor = profile.billable_hit(static)
    assert floor >= profile.min_cacheable_tokens
    assert cached >= floor

    # Contrast: without canonicalization the second thread's prompt misses from the date on.
    raw_pilot = _memory_pilot(NO_MAINTENANCE.model_copy(update={"canonicalize": False}))
    raw_sim = CacheSimulator(profile)
    raw_records, raw_systems = _run_demo(raw_pilot, raw_sim, demo, "thread-1")
    assert len(raw_systems) == len(raw_records)
    assert not any(extends for _, _, extends, _ in raw_records[1:])
    raw_cached, raw_static, raw_system, _ = _second_thread_first_call(raw_pilot, raw_sim, demo)
    assert raw_system == _other_thread_prompt(0)
    assert raw_cached < floor
    assert raw_cached < cached
    assert raw_static > 0


# --------------------------------------------------------------------------------------------
# 5. the recall gate through the facade


def test_recall_opens_the_gate_for_the_source() -> None:
    limits = Config().reduction
    pilot = _memory_pilot()
    args = {"command": "pytest -q tests/"}
    first = _distinct_lines(2_000, "run-1")
    assert limits.shell_limit < len(first) < limits.hard_cap
    r1 = pilot.ingest_report("bash", args, first, "call_1", "t")
    assert r1.ref is not None
    assert "size_gate" in r1.steps
    assert len(r1.text) < limits.shell_limit
    # Without a recall, the same source stays gated (control).
    control = _memory_pilot()
    control.ingest("bash", args, first, "call_1", "t")
    second = _distinct_lines(2_000, "run-2")
    assert control.ingest("bash", args, second, "call_2", "t") != second

    recalled = pilot.recall(r1.ref, lines="1-3", thread="t")
    assert first.splitlines()[0] in recalled
    assert pilot.state("t").recalls == 1
    r2 = pilot.ingest_report("bash", args, second, "call_2", "t")
    assert r2.text == second
    assert r2.ref is None
    # Another source is still reduced.
    other = pilot.ingest_report("bash", {"command": "ls -R /"}, second + "x\n", "call_3", "t")
    assert other.ref is not None and len(other.text) < limits.shell_limit
    # The gate is part of the thread's state: it survives export/load.
    restored = _memory_pilot()
    restored.load_state("t", json.dumps(pilot.export_state("t")))
    third = _distinct_lines(2_000, "run-3")
    assert restored.ingest("bash", args, third, "call_4", "t") == third
    # Up to the hard cap: beyond it the output is cut, and archived.
    huge = _distinct_lines(limits.hard_cap // 40, "huge")
    assert len(huge) > limits.hard_cap
    r5 = pilot.ingest_report("bash", args, huge, "call_5", "t")
    assert r5.ref is not None
    assert len(r5.text) <= limits.hard_cap
    assert len(r5.text) > limits.shell_limit  # the hard cap, not the size gate
    _check_nothing_lost(pilot, "t", huge, r5)


def test_recall_opens_the_gate_for_the_same_content_from_another_source() -> None:
    pilot = _memory_pilot()
    content = _distinct_lines(2_000, "content")
    first = pilot.ingest_report("bash", {"command": "cat a.log"}, content, "call_1", "t")
    assert first.ref is not None
    # Before any recall, the same content again is a pointer to the first result.
    control = _memory_pilot()
    control.ingest("bash", {"command": "cat a.log"}, content, "call_1", "t")
    assert "call_1" in control.ingest("bash", {"command": "cat b.log"}, content, "call_2", "t")
    pilot.recall(first.ref, thread="t")
    again = pilot.ingest_report("bash", {"command": "cat b.log"}, content, "call_2", "t")
    assert again.text == content
    assert again.ref is None


def test_recall_of_unknown_or_foreign_ref_is_a_message_not_an_error() -> None:
    pilot = _memory_pilot()
    report = pilot.ingest_report("bash", {"command": "x"}, _distinct_lines(2_000, "f"), "c", "a")
    assert report.ref is not None
    assert "not found" in pilot.recall(report.ref, thread="b")
    assert "not a valid ref" in pilot.recall("../etc/passwd", thread="a")
    assert pilot.state("b").recalls == 0


# --------------------------------------------------------------------------------------------
# 6. state round-trip and config validation


def test_state_round_trip_keeps_behaviour() -> None:
    start = datetime(2026, 5, 5, 5, 5, 5, tzinfo=UTC)
    transcripts = list(_growing_transcript(6))
    a = _memory_pilot()
    big = _distinct_lines(2_000, "state")
    for n in range(5):
        a.prepare(_clock_prompt(start + timedelta(minutes=n)), transcripts[n], USER_TOOLS, "t")
    a.ingest("bash", {"command": "make"}, big, "call_m", "t")
    a.record_usage(Usage(1_000, 512, 0, 40), "t")
    exported = a.export_state("t")
    text = json.dumps(exported)
    assert PilotState.model_validate_json(text) == a.state("t")
    b, c = _memory_pilot(), _memory_pilot()
    b.load_state("t", exported)
    c.load_state("t", text)
    assert b.export_state("t") == exported == c.export_state("t")
    # The same next request...
    nxt = _clock_prompt(start + timedelta(minutes=5))
    requests = {_request_json(p.prepare(nxt, transcripts[5], USER_TOOLS, "t")) for p in (a, b, c)}
    assert len(requests) == 1
    # ...and the same ingestion memory (a repeated output becomes a pointer stub in all three).
    again = {p.ingest("bash", {"command": "make again"}, big, "call_n", "t") for p in (a, b, c)}
    assert len(again) == 1
    assert "call_m" in again.pop()
    # Loading copies: changing one pilot's state does not leak into another's.
    b.record_usage(Usage(10, 0, 0, 1), "t")
    assert a.state("t").usage != b.state("t").usage


def test_config_validation_fails_fast_with_value_error() -> None:
    assert issubclass(ValidationError, ValueError)
    bad: list[dict[str, Any]] = [
        {"provider": "no-such-provider"},
        {"provider": ""},
        {"encoding": ""},
        {"encoding": "   "},
        {"no_such_field": True},
        {"reduction": {"shell_limit": 5}},
        {"canonical": {"cwd": "relative/path"}},
    ]
    for kwargs in bad:
        with pytest.raises(ValueError):
            Config(**kwargs)
    assert Config(provider=PROFILE).provider == PROFILE
    with pytest.raises(ValidationError):  # frozen
        Config().reduce = False  # type: ignore[misc]


@pytest.mark.parametrize("thread", ["", None, 7, "\ud800"])
def test_bad_thread_ids_raise_value_error(thread: Any) -> None:
    pilot = _memory_pilot()
    calls: list[Callable[[], object]] = [
        lambda: pilot.ingest("bash", {}, "out", "c", thread),
        lambda: pilot.prepare("sys", [], [], thread),
        lambda: pilot.recall("0123456789ab", thread=thread),
        lambda: pilot.state(thread),
        lambda: pilot.export_state(thread),
        lambda: pilot.load_state(thread, {}),
        lambda: pilot.record_usage(Usage(1), thread),
    ]
    for call in calls:
        with pytest.raises(ValueError):
            call()


# --------------------------------------------------------------------------------------------
# 7. pairing


def test_orphan_tool_result_is_logged_once_and_sent_unchanged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pilot = _memory_pilot()
    history = [
        Message("user", "Run the tests."),
        Message("tool", "3 passed", tool_call_id="call_gone", name="bash"),
        Message("assistant", "The tests pass."),
    ]
    before = [m.to_dict() for m in history]
    with caplog.at_level(logging.DEBUG, logger="cachepilot"):
        _, view, _ = pilot.prepare("You are helpful.", history, [], "orphan-thread")
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    # The thread shows as its label and the call id only at DEBUG (operations guide).
    assert thread_label("orphan-thread") in warnings[0].getMessage()
    assert "orphan-thread" not in warnings[0].getMessage()
    assert "call_gone" not in warnings[0].getMessage()
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert any("call_gone" in line for line in debug)
    assert [m.to_dict() for m in view] == before
    assert [m.to_dict() for m in history] == before
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=PILOT_LOGGER):
        pilot.prepare(
            "You are helpful.", [*history, Message("user", "Thanks.")], [], "orphan-thread"
        )
        pilot.prepare("You are helpful.", list(_growing_transcript(3))[-1], [], "clean-thread")
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


# --------------------------------------------------------------------------------------------
# 8. async twins


def test_async_twins_match_the_sync_calls() -> None:
    sync, other = _memory_pilot(), _memory_pilot()
    big = _distinct_lines(2_000, "async")
    outputs: list[tuple[str, dict[str, Any], object]] = [
        ("bash", {"command": "make"}, big),
        ("bash", {"command": "cat bin"}, _BINARY),
        ("fetch_url", {"url": "https://x.example"}, _DICT),
        ("bash", {"command": "true"}, None),
    ]
    transcript = list(_growing_transcript(4))[-1]
    system = _clock_prompt(datetime(2026, 6, 1, tzinfo=UTC))

    async def run_async() -> tuple[list[str], str, list[str]]:
        texts = [
            await other.aingest(tool, args, out, f"c{i}", "t")
            for i, (tool, args, out) in enumerate(outputs)
        ]
        prepared = await other.aprepare(system, transcript, USER_TOOLS, "t", now=1.0)
        refs = [m for t in texts for m in RECALL_IN_TEXT.findall(t)]
        recalled = [await other.arecall(ref, lines="2-4", thread="t") for ref in refs]
        return texts, _request_json(prepared), recalled

    texts = [
        sync.ingest(tool, args, out, f"c{i}", "t") for i, (tool, args, out) in enumerate(outputs)
    ]
    request = _request_json(sync.prepare(system, transcript, USER_TOOLS, "t", now=1.0))
    refs = [m for t in texts for m in RECALL_IN_TEXT.findall(t)]
    assert len(refs) >= 2
    recalled = [sync.recall(ref, lines="2-4", thread="t") for ref in refs]
    assert asyncio.run(run_async()) == (texts, request, recalled)
    assert other.export_state("t") == sync.export_state("t")


# --------------------------------------------------------------------------------------------
# 9. usage


def test_record_usage_accumulates_per_thread() -> None:
    pilot = _memory_pilot()
    pilot.record_usage(Usage(1_000, 768, 0, 50, 10), "t")
    pilot.record_usage(Usage(1_200, 1_024, 64, 70), "t")
    pilot.record_usage(Usage(5, 0, 0, 1), "other")
    assert pilot.state("t").usage == {
        "input_tokens": 2_200,
        "cached_tokens": 1_792,
        "cache_write_tokens": 64,
        "output_tokens": 120,
        "reasoning_tokens": 10,
    }
    assert pilot.state("other").usage["input_tokens"] == 5
    assert pilot.export_state("t")["usage"]["cached_tokens"] == 1_792
    assert Usage.from_dict(pilot.state("t").usage).hit_rate == pytest.approx(1_792 / 2_200)


def test_review_regressions() -> None:
    """Emergency folds leave state alone when they fail; parts survive pruning; misuse."""
    from cachepilot.messages import ImagePart, TextPart

    pilot = _memory_pilot()
    history = [Message(role="user", content="go")]
    pilot.prepare("Today is 2025-03-04.", history, (), "t", now=0.0)
    before = pilot.export_state("t")
    # Nothing to fold in a one-message history: False, and the frozen values are untouched.
    assert pilot.emergency_fold("Today is 2025-03-05.", history, "t") is False
    assert pilot.export_state("t")["canonical"] == before["canonical"]
    with pytest.raises(ValueError):
        pilot.emergency_fold(None, [{"role": "user"}], "t")  # type: ignore[list-item]
    with pytest.raises(ValueError, match="content"):
        Message(role="user", content=[{"type": "text", "text": "hi"}])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="content"):
        Message(role="user", content=5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="Usage"):
        pilot.record_usage({"input_tokens": 1}, "t")  # type: ignore[arg-type]

    # A pruned tool result with an image part is archived whole (the image is recallable).
    image = ImagePart("data:image/png;base64," + "A" * 4_000, "image/png")
    parts = (TextPart("screenshot " + "x" * 20_000), image)
    maint = MaintenanceConfig(
        prune=True, schedule="fixed", every=1, protect_tool_tokens=0, protect_results=0
    )
    p2 = _memory_pilot(Config(maintenance=maint))
    call = ToolCall("c1", "shot", "{}")
    msgs = [
        Message(role="user", content="look"),
        Message(role="assistant", tool_calls=(call,)),
        Message(role="tool", content=parts, tool_call_id="c1", name="shot"),
        Message(role="assistant", content="ok"),
        Message(role="user", content="next"),
    ]
    _, view, _ = p2.prepare(None, msgs, (), "t", now=0.0)
    stub = view[2].text
    assert "recall(ref=" in stub
    archived = p2.store.get("t", stub.split('recall(ref="')[1][:12])
    assert archived is not None and image.url in archived.text
