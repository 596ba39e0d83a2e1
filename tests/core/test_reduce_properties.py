"""Property tests of the reduction passes and pipeline: total, deterministic, bounded, honest."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cachepilot.reduce import (
    NO_OUTPUT,
    PASSES,
    STUB_OVERHEAD,
    IngestMemory,
    PassContext,
    Pipeline,
    ReduceConfig,
    ToolProfile,
    ToolResult,
    normalize_output,
)
from cachepilot.refs import make_ref

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Small limits so the size gate, hard cap and folding fire on hypothesis-sized inputs.
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
    min_similar=4,
    profiles={"tiny": ToolProfile(limit=1_000, head_chars=50, tail_chars=50)},
)
CONFIGS = st.sampled_from([ReduceConfig(), SMALL])

FRAGMENTS = st.sampled_from(
    [
        "\x1b[31m", "\x1b[0m", "\x1b]8;;http://x\x1b\\", "\x1b[2K", "\r", "\r\n", "\n", "\n\n\n",
        "   ", "\t", "     1\t", "  12→", "7:", "<html>", "<!DOCTYPE html>", "<script>x</script>",
        "<a href='/x'>", "</a>", "<p>", "<li>", "<td>", "<svg>", "</svg>", "<!-- c -->", "{", "}",
        "[", "]", '"k": null', ",", "null", "\x00", "\ufffd", "\ud800", "é", "line 42 of 99",
        "Downloading 50%", "same line\n", "data:image/png;base64,iVBORw0KGgo=", "\x07", "\x9b1m",
    ]
)  # fmt: skip
NOISY_TEXT = st.lists(st.one_of(FRAGMENTS, st.text(max_size=20)), max_size=60).map("".join)
TEXT = st.one_of(st.text(max_size=300), NOISY_TEXT)
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=25,
)
OUTPUTS = st.one_of(TEXT, st.binary(max_size=300), JSON_VALUES, st.none())
TOOLS = st.sampled_from(["bash", "grep", "read_file", "fetch", "lookup", "tiny", "Read"])
ARGS = st.one_of(
    st.fixed_dictionaries({"command": st.sampled_from(["ls", "pytest", "cat x"])}),
    st.fixed_dictionaries({"path": st.sampled_from(["a.py", "b.py"])}),
    st.dictionaries(st.text(max_size=6), st.integers() | st.text(max_size=6), max_size=3),
)


def big_text(draw: st.DrawFn) -> str:
    unit = draw(NOISY_TEXT) or "x"
    repeat = draw(st.integers(1, 5_000 // max(1, len(unit)) + 1))
    return unit * repeat + draw(TEXT)


@st.composite
def outputs_incl_big(draw: st.DrawFn) -> object:
    if draw(st.booleans()):
        return big_text(draw)
    return draw(OUTPUTS)


@st.composite
def contexts(draw: st.DrawFn) -> tuple[PassContext, str]:
    config = draw(CONFIGS)
    output = draw(outputs_incl_big())
    result = normalize_output(output)
    tool = draw(TOOLS)
    args = draw(ARGS)
    read = config.profile_for(tool, args).tool_kind == "file_read"
    ref = make_ref(result.original)
    ctx = PassContext(
        tool_name=tool,
        args=args,
        call_id=draw(st.sampled_from(["c1", "c2", "call_ü"])),
        result=result,
        config=config,
        profile=config.profile_for(tool, args),
        source=f"{tool}:x",
        ref=ref,
        signature="0" * 12,
        read_key="k" if read else None,
        previous_read_ref=draw(st.sampled_from([None, ref, "0" * 12])) if read else None,
        previous_read_call=draw(st.sampled_from([None, "c0", "c1"])),
        first_seen_call=draw(st.sampled_from([None, "c0", "c1"])),
        loop_run=draw(st.integers(1, 8)),
        loop_same_output=draw(st.booleans()),
        loop_last_call=draw(st.sampled_from([None, "c0"])),
        gate_open=draw(st.booleans()),
    )
    text = result.text if draw(st.booleans()) else draw(TEXT)
    return ctx, text


@FAST
@given(contexts())
def test_every_pass_is_total_deterministic_and_bounded(case: tuple[PassContext, str]) -> None:
    ctx, text = case
    before = copy.deepcopy(dict(ctx.args))
    for step in PASSES:
        out = step.apply(text, ctx)
        assert out is None or isinstance(out, str), step.name
        assert step.apply(text, ctx) == out, f"{step.name} is not deterministic"
        if out is not None:
            assert len(out) <= len(text) + STUB_OVERHEAD, f"{step.name} grew the text"
    assert dict(ctx.args) == before


def check_reduction(result: ToolResult, pipeline: Pipeline, memory: IngestMemory) -> None:
    twin = memory.model_copy(deep=True)
    reduction = pipeline.run("bash", {"command": "x"}, "c1", result, memory)
    again = pipeline.run("bash", {"command": "x"}, "c1", result, twin)
    assert reduction == again
    assert memory == twin
    check_invariants(result, reduction.text, reduction.lossy, reduction.ref)


def check_invariants(result: ToolResult, text: str, lossy: bool, ref: str | None) -> None:
    assert text, "the model always sees something"
    assert len(text) <= max(len(result.text), 0) + STUB_OVERHEAD
    if result.kind == "empty":
        assert text == NO_OUTPUT and not lossy and ref is None
        return
    assert lossy == (text != result.text or not result.exact)
    if lossy:
        assert ref == make_ref(result.original)
    else:
        assert ref is None
        # Not archived: the transcript text must be the original itself.
        if isinstance(result.original, bytes) and result.kind != "image":
            assert text.encode("utf-8", "surrogatepass") == result.original
        elif isinstance(result.original, str):
            assert text == result.original


@FAST
@given(OUTPUTS, CONFIGS)
def test_pipeline_total_deterministic_honest(output: object, config: ReduceConfig) -> None:
    check_reduction(normalize_output(output), Pipeline(config), IngestMemory())


@SLOW
@given(outputs_incl_big(), CONFIGS)
def test_pipeline_on_big_outputs(output: object, config: ReduceConfig) -> None:
    check_reduction(normalize_output(output), Pipeline(config), IngestMemory())


@FAST
@given(st.binary(max_size=2_000))
def test_bytes_are_always_recoverable(data: bytes) -> None:
    result = normalize_output(data)
    reduction = Pipeline(SMALL).run("bash", {}, "c", result, IngestMemory())
    if not reduction.lossy:
        assert result.kind in {"empty", "text", "image"}
    else:
        assert reduction.ref == make_ref(data)


@FAST
@given(JSON_VALUES)
def test_json_values(value: Any) -> None:
    result = normalize_output(value)
    if value is None or isinstance(value, str):
        assert result.kind in {"empty", "text", "image"}
    else:
        assert result.kind == "json"
        assert json.loads(result.text) == json.loads(json.dumps(value))
    reduction = Pipeline().run("api", {}, "c", result, IngestMemory())
    check_invariants(result, reduction.text, reduction.lossy, reduction.ref)
    if reduction.steps and reduction.steps[0].pass_name == "json":
        json.loads(reduction.text)  # slimmed JSON is still JSON


@SLOW
@given(
    st.lists(st.tuples(TOOLS, ARGS, OUTPUTS, st.sampled_from(["a", "b", "c", "d"])), max_size=12),
    st.lists(st.sampled_from(["bash:ls", "read_file:a.py", "tiny:x"]), max_size=3),
    CONFIGS,
)
def test_pipeline_over_a_thread(
    calls: list[tuple[str, dict[str, Any], object, str]],
    recalls: list[str],
    config: ReduceConfig,
) -> None:
    pipeline = Pipeline(config)
    memory = IngestMemory()
    twin = IngestMemory()
    for key in recalls:
        memory.note_recall(key)
        twin.note_recall(key)
    for index, (tool, args, output, call) in enumerate(calls):
        result = normalize_output(output)
        frozen_args = copy.deepcopy(args)
        reduction = pipeline.run(tool, args, f"{call}{index % 3}", result, memory)
        twin_reduction = pipeline.run(tool, args, f"{call}{index % 3}", result, twin)
        assert reduction == twin_reduction
        assert args == frozen_args
        check_invariants(result, reduction.text, reduction.lossy, reduction.ref)
    assert IngestMemory.model_validate_json(memory.model_dump_json()) == memory
    assert memory == twin
