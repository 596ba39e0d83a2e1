from __future__ import annotations

import base64
import io
import json
import logging
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel

from cachepilot.reduce import (
    NO_OUTPUT,
    PASS_NAMES,
    PASSES,
    REDUCED_STUB_RE,
    STUB_OVERHEAD,
    IngestMemory,
    PassContext,
    Pipeline,
    ReduceConfig,
    Reduction,
    ReductionPass,
    ToolProfile,
    ToolResult,
    call_signature,
    classify_tool,
    default_pipeline,
    normalize_output,
    source_key,
)
from cachepilot.reduce.passes import PASSES_BY_NAME
from cachepilot.reduce.passes.html import html_to_text, looks_like_html
from cachepilot.reduce.passes.json_slim import slim_json
from cachepilot.reduce.passes.payload import pillow_available
from cachepilot.reduce.passes.size import head_tail_preview
from cachepilot.refs import is_ref, make_ref

# --- helpers -------------------------------------------------------------------------------


def run(
    output: object,
    tool: str = "bash",
    args: dict[str, Any] | None = None,
    call_id: str = "call_1",
    memory: IngestMemory | None = None,
    config: ReduceConfig | None = None,
) -> Reduction:
    pipeline = Pipeline(config) if config is not None else default_pipeline()
    return pipeline.run(
        tool,
        args if args is not None else {"command": "x"},
        call_id,
        normalize_output(output),
        memory if memory is not None else IngestMemory(),
    )


def ctx_for(output: object, tool: str = "bash", config: ReduceConfig | None = None) -> PassContext:
    config = config or ReduceConfig()
    result = normalize_output(output)
    return PassContext(
        tool_name=tool,
        args={},
        call_id="c",
        result=result,
        config=config,
        profile=config.profile_for(tool, {}),
        source=f"{tool}:x",
        ref=make_ref(result.original),
        signature="0" * 12,
        read_key=None,
        previous_read_ref=None,
        previous_read_call=None,
        first_seen_call=None,
        loop_run=1,
        loop_same_output=False,
        loop_last_call=None,
        gate_open=False,
    )


def apply(
    name: str, text: str, tool: str = "bash", config: ReduceConfig | None = None
) -> str | None:
    return PASSES_BY_NAME[name].apply(text, ctx_for(text, tool, config))


def names(reduction: Reduction) -> list[str]:
    return [s.pass_name for s in reduction.steps]


PYTEST_LOG = (
    "\x1b[1m============================= test session starts "
    "==============================\x1b[0m\n"
    "platform linux -- Python 3.11.7, pytest-8.3.2   \n"
    "collected 3 items\n\n"
    "tests/test_a.py \x1b[32m.\x1b[0m\x1b[31mF\x1b[0m\x1b[32m.\x1b[0m"
    "\x1b[32m                                                     [100%]\x1b[0m\n\n\n\n"
    "\x1b[31m\x1b[1m___ test_b ___\x1b[0m\n"
    "\x1b]8;;file:///x\x1b\\link\x1b]8;;\x1b\\\n"
    "\x1b[31mFAILED\x1b[0m tests/test_a.py::test_b - assert 1 == 2\n"
)

PIP_PROGRESS = (
    "Collecting numpy\n"
    "  Downloading numpy-2.0.whl (18.2 MB)\n"
    + "".join(f"\r     |{'#' * i}{' ' * (20 - i)}| {i * 5}%" for i in range(21))
    + "\r\n"
    "Installing collected packages: numpy\r\n"
    "Successfully installed numpy-2.0\r\n"
)


# --- normalize_output --------------------------------------------------------------------


def test_normalize_str_and_none() -> None:
    assert normalize_output("hi") == ToolResult("hi", "hi", "text", "text/plain", True)
    for empty in (None, "", b""):
        result = normalize_output(empty)
        assert result.kind == "empty"
        assert result.text == ""


def test_normalize_bytes_utf8_and_invalid() -> None:
    ok = normalize_output("héllo".encode())
    assert (ok.kind, ok.text, ok.exact, ok.original) == ("text", "héllo", True, "héllo".encode())
    bad = normalize_output(b"caf\xe9 au lait\n")
    assert bad.kind == "invalid_utf8"
    assert bad.text == "caf\ufffd au lait\n"
    assert bad.original == b"caf\xe9 au lait\n"
    assert not bad.exact


def test_normalize_binary_and_image() -> None:
    binary = normalize_output(bytes(range(256)) * 4)
    assert binary.kind == "binary"
    assert binary.media_type == "application/octet-stream"
    pdf = normalize_output(b"%PDF-1.7\n" + b"x" * 100)
    assert (pdf.kind, pdf.media_type) == ("binary", "application/pdf")
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 20
    image = normalize_output(png)
    assert image.kind == "image"
    assert image.text == "data:image/png;base64," + base64.b64encode(png).decode()
    assert image.original == png
    url = normalize_output("data:image/gif;base64,R0lGODlhAQABAAAAACw=")
    assert (url.kind, url.media_type) == ("image", "image/gif")


def test_normalize_structured_values() -> None:
    class Model(BaseModel):
        name: str
        size: int | None = None

    @dataclass
    class Point:
        x: int
        y: int

    assert normalize_output({"a": 1, "é": None}).text == '{"a": 1, "é": null}'
    assert normalize_output({"a": 1}).kind == "json"
    assert normalize_output([1, 2]).text == "[1, 2]"
    assert normalize_output(Model(name="x")).text == '{"name": "x", "size": null}'
    assert normalize_output(Point(1, 2)).text == '{"x": 1, "y": 2}'
    assert normalize_output({"s": {3, 1}}).text == '{"s": [1, 3]}'
    assert normalize_output(True).text == "true"

    circular: list[Any] = []
    circular.append(circular)
    assert normalize_output(circular).kind == "text"

    class Hostile:
        def __str__(self) -> str:
            raise RuntimeError("no")

    hostile = normalize_output(Hostile())
    assert hostile.kind == "text"
    assert "Hostile" in hostile.text


# --- source keys -------------------------------------------------------------------------


def test_source_key() -> None:
    assert source_key("Read", {"file_path": "/repo/a.py", "offset": 3}) == "Read:/repo/a.py"
    assert source_key("bash", {"command": "ls -la"}) == "bash:ls -la"
    assert source_key("Grep", {"pattern": "TODO", "path": "src"}) == "Grep:src :: TODO"
    assert source_key("fetch", {"url": "https://x.org"}) == "fetch:https://x.org"
    assert source_key("bash", '{"command": "ls"}') == "bash:ls"
    hashed = source_key("lookup", {"user_id": 7})
    assert hashed.startswith("lookup:") and len(hashed) == len("lookup:") + 12
    assert source_key("lookup", {"user_id": 7}) == hashed
    assert source_key("lookup", {"user_id": 8}) != hashed
    long = source_key("bash", {"command": "x" * 5000})
    assert len(long) < 200
    assert source_key("t", None) == source_key("t", {})
    assert call_signature("t", {"a": 1, "b": 2}) == call_signature("t", {"b": 2, "a": 1})


# --- passes, one by one ------------------------------------------------------------------


def test_ansi_pass_strips_escapes_only() -> None:
    out = apply("ansi", PYTEST_LOG)
    assert out is not None
    assert "\x1b" not in out
    assert "FAILED tests/test_a.py::test_b - assert 1 == 2" in out
    assert "tests/test_a.py .F." in out
    assert "link\n" in out
    assert apply("ansi", "plain text") is None


def test_progress_pass_keeps_last_state() -> None:
    out = apply("progress", PIP_PROGRESS)
    assert out is not None
    lines = out.split("\n")
    assert "     |####################| 100%" in lines
    assert "0%" not in out.replace("100%", "")
    assert "Successfully installed numpy-2.0\r" in lines  # CRLF endings are whitespace's job
    assert "\r" not in out.replace("\r\n", "\n")


def test_whitespace_pass() -> None:
    out = apply("whitespace", "\n\n  a   \n\n\n\nb\t\n\n")
    assert out == "  a\n\nb\n"  # one final newline is kept
    assert apply("whitespace", "a\nb") is None
    assert apply("whitespace", "a\nb\n") is None  # a lone final newline is not worth a change


def test_line_number_strip_cat_n() -> None:
    text = "".join(f"{i:6d}\tline {i}\n" for i in range(1, 40))
    out = apply("line_numbers", text, tool="read_file")
    assert out is not None
    assert out.startswith("[lines 1-39; line-number prefixes removed]\nline 1\nline 2\n")
    assert out.endswith("line 39\n")
    claude = "".join(f"{i:6d}→x = {i}\n" for i in range(120, 130))
    out = apply("line_numbers", claude)
    assert out is not None and out.startswith("[lines 120-129;") and "→" not in out
    body = "".join(f"{i}:import module_{i}\n" for i in range(11, 31))
    swe = f"[File: a.py (300 lines total)]\n(10 more lines above)\n{body}(270 more lines below)"
    out = apply("line_numbers", swe)
    assert out is not None
    assert out.startswith(
        "[File: a.py (300 lines total)]\n(10 more lines above)\n"
        "[lines 11-30; line-number prefixes removed]\nimport module_11\n"
    )
    assert out.endswith("import module_30\n(270 more lines below)")
    short = "1:a\n2:b\n3:c"
    assert apply("line_numbers", short) is None  # the marker would cost more than it saves


def test_line_number_strip_requires_every_line_consecutive() -> None:
    gap = "1\ta\n2\tb\n4\tc\n5\td\n"
    assert apply("line_numbers", gap) is None
    mixed = "1\ta\n2\tb\nplain\n3\tc\n4\td\nplain\nplain\nplain"
    assert apply("line_numbers", mixed) is None
    mixed_sep = "1\ta\n2:b\n3\tc\n"
    assert apply("line_numbers", mixed_sep) is None


def test_repeats_pass_folds_exact_runs() -> None:
    text = "start\n" + "WARNING: deprecated call\n" * 58 + "end"
    out = apply("repeats", text)
    assert out == "start\nWARNING: deprecated call\n[… line repeated 57 more times]\nend"
    block = "a\nb\n" * 20
    out = apply("repeats", block)
    assert out == "a\nb\n[… 2 lines repeated 19 more times]\n"
    assert apply("repeats", "x\nx\ny") is None  # run of 2 < min_repeat


def test_similar_lines_pass() -> None:
    lines = [f"Downloading shard {i} of 400 (eta {i * 3}s)" for i in range(400)]
    text = "head\n" + "\n".join(lines) + "\ntail"
    roomy = ReduceConfig(profiles={"bash": ToolProfile(limit=50_000)})
    assert apply("similar_lines", text, config=roomy) is None  # under the limit: not folded
    small = ReduceConfig(profiles={"bash": ToolProfile(limit=5_000)})
    out = apply("similar_lines", text, config=small)
    assert out == (
        "head\nDownloading shard 0 of 400 (eta 0s)\n[… 398 similar lines omitted]\n"
        "Downloading shard 399 of 400 (eta 1197s)\ntail"
    )
    numbers = "\n".join(f"{i},{i * 2},{i * 3}" for i in range(100))
    assert apply("similar_lines", numbers * 10, config=small) is None  # data is not folded


HTML_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
  <meta charset="utf-8"><title>Release notes</title>
  <link rel="stylesheet" href="/s.css">
  <script>window.dataLayer = []; function gtag(){dataLayer.push(arguments);}</script>
  <style>body { font-family: sans-serif; } .nav { display: flex; }</style>
</head>
<body class="page" data-x="1">
  <!-- navigation -->
  <nav class="nav"><a href="/">Home</a> <a href="javascript:void(0)">Menu</a></nav>
  <h1 id="t">Version 2.0</h1>
  <p style="color:red">The <b>new</b> release &amp; its <a href="/changes">changes</a>.</p>
  <svg width="10" height="10"><path d="M0 0L10 10"/></svg>
  <ul><li>Faster</li><li>Smaller<ul><li>nested</li></ul></li></ul>
  <table><tr><th>Name</th><th>Size</th></tr><tr><td>core</td><td>12 KB</td></tr></table>
  <pre>  indented
    code</pre>
  <img src="/logo.png" alt="Logo"><img src="data:image/png;base64,AAAA" alt="inline">
  <noscript>Enable JS</noscript>
  <script src="/app.js"></script>
</body>
</html>"""


def test_html_pass_slims_page() -> None:
    out = apply("html", HTML_PAGE, tool="fetch")
    assert out is not None
    assert len(out) < len(HTML_PAGE) / 2
    for gone in ("dataLayer", "font-family", "navigation", "M0 0", "Enable JS", "class=", "<"):
        assert gone not in out
    assert out.startswith("Title: Release notes\n")
    assert "# Version 2.0" in out
    assert "The new release & its [changes](/changes)." in out
    assert "[Home](/)" in out and "Menu" in out and "javascript" not in out
    assert "- Faster" in out and "  - nested" in out
    assert "| Name | Size |" in out and "| core | 12 KB |" in out
    assert "```\n  indented\n    code```" in out or "  indented\n    code" in out
    assert "![Logo](/logo.png)" in out and "![inline]" in out and "AAAA" not in out


def test_html_detection() -> None:
    assert looks_like_html("  <!doctype html><p>x")
    assert looks_like_html("<html><body>x</body></html>")
    assert not looks_like_html("a < b and <b>bold</b> in text")
    assert not looks_like_html("<div>fragment</div>")
    assert apply("html", "The tag <html> is documented here.") is None
    assert html_to_text("<html><body><p>unclosed <a href='/x'>link") == "unclosed [link](/x)"


def test_json_pass_drops_nulls_and_empties() -> None:
    text = json.dumps(
        {"id": 7, "name": "x", "note": None, "tags": [], "meta": {"a": None, "b": ""},
         "items": [1, None, {"k": None}], "z": False, "n": 0},
        indent=2,
    )  # fmt: skip
    out = apply("json", text)
    assert out == '{"id":7,"name":"x","items":[1,null,{}],"z":false,"n":0}'
    assert slim_json({"a": {"b": {"c": None}}}) == {}
    assert apply("json", "not json {") is None
    assert apply("json", '"a string"') is None
    assert apply("json", "{not: valid}") is None
    assert apply("json", '{"a":1}') is None  # nothing to gain


def test_head_tail_preview_format() -> None:
    text = "\n".join(f"line {i:05d} " + "x" * 40 for i in range(1, 2001))
    ref = make_ref(text)
    out = head_tail_preview(text, 600, 400, ref, original_chars=len(text))
    match = REDUCED_STUB_RE.search(out)
    assert match is not None
    assert match.group("before") == f"{len(text):,}"
    assert match.group("after") == f"{len(out):,}"
    assert match.group("ref") == ref
    head, _, _ = out.partition("\n[")
    assert text.startswith(head + "\n")
    assert out.split("\n")[-1] == text.split("\n")[-1]
    assert "[… lines 12-1993 of 2000 omitted …]" in out


# --- the pipeline ------------------------------------------------------------------------


def test_pytest_log_cleaned_and_archived() -> None:
    reduction = run(PYTEST_LOG)
    assert reduction.lossy
    assert reduction.ref == make_ref(PYTEST_LOG)
    assert "\x1b" not in reduction.text
    assert "\n\n\n" not in reduction.text
    assert names(reduction)[:2] == ["ansi", "whitespace"]
    assert all(s.lossless for s in reduction.steps)


def test_pip_progress() -> None:
    reduction = run(PIP_PROGRESS, args={"command": "pip install numpy"})
    assert reduction.text.endswith(
        "100%\nInstalling collected packages: numpy\nSuccessfully installed numpy-2.0\n"
    )
    assert "progress" in names(reduction)


def test_unchanged_output_is_not_lossy() -> None:
    reduction = run("all good\n2 files changed")
    assert reduction == Reduction(
        text="all good\n2 files changed", lossy=False, ref=None, steps=[], reason=None,
        source="bash:x", kind="text",
    )  # fmt: skip


def test_cat_n_file_read() -> None:
    text = "".join(f"{i:6d}\tdef f{i}():  \n" for i in range(1, 30))
    reduction = run(text, tool="read_file", args={"path": "a.py"})
    assert names(reduction) == ["line_numbers"]
    assert "def f1():  \n" in reduction.text  # file text kept verbatim (trailing spaces too)


def test_html_output_through_pipeline() -> None:
    reduction = run(HTML_PAGE, tool="web_fetch", args={"url": "https://example.org"})
    assert "html" in names(reduction)
    assert reduction.lossy and reduction.ref == make_ref(HTML_PAGE)


def test_dict_output() -> None:
    output = {"user": {"id": 1, "email": None, "roles": []}, "orders": [{"id": 9, "note": ""}]}
    reduction = run(output, tool="get_user_details", args={"user_id": 1})
    assert reduction.text == '{"user":{"id":1},"orders":[{"id":9}]}'
    assert reduction.kind == "json"
    assert reduction.ref == make_ref(json.dumps(output, ensure_ascii=False))


def test_duplicate_output_pointer() -> None:
    memory = IngestMemory()
    body = "\n".join(f"src/module_{i}.py" for i in range(40))
    first = run(body, args={"command": "find src"}, call_id="call_a", memory=memory)
    assert not first.lossy
    second = run(body, tool="bash", args={"command": "ls src/*"}, call_id="call_b", memory=memory)
    assert second.text == f'[same output as call call_a; full text: recall(ref="{make_ref(body)}")]'
    assert second.lossy and second.ref == make_ref(body)
    again = run(body, args={"command": "find src"}, call_id="call_a", memory=memory)
    assert again.text == body  # the same call ingested twice does not point at itself
    tiny = run("ok", args={"command": "true"}, call_id="c1", memory=memory)
    tiny2 = run("ok", args={"command": "true2"}, call_id="c2", memory=memory)
    assert tiny.text == tiny2.text == "ok"


def test_superseded_read_and_changed_reread() -> None:
    memory = IngestMemory()
    config = ReduceConfig()
    big = "\n".join(f"    value_{i} = compute({i})  # keep" for i in range(3000))
    assert len(big) > config.reread_limit
    first = run(big, tool="read_file", args={"path": "m.py"}, call_id="r1", memory=memory)
    assert first.text == big and not first.lossy  # first read exempt from the size gate
    second = run(big, tool="read_file", args={"path": "m.py"}, call_id="r2", memory=memory)
    assert second.text.startswith("[file unchanged since call r1")
    assert f'recall(ref="{make_ref(big)}")' in second.text
    changed = big.replace("value_7 ", "value_seven ")
    third = run(changed, tool="read_file", args={"path": "m.py"}, call_id="r3", memory=memory)
    assert names(third) == ["size_gate", "loop_note"]  # third identical read call in a row
    assert REDUCED_STUB_RE.search(third.text) is not None
    other = run(big, tool="read_file", args={"path": "m.py", "offset": 10}, call_id="r4",
                memory=memory)  # fmt: skip
    assert "size_gate" not in names(other)  # other arguments: a first read (exempt)


def test_ten_thousand_line_log_is_gated() -> None:
    text = "\n".join(
        f"2024-01-01 INFO worker-{i % 7} processed request {i} for tenant {['a', 'b', 'c'][i % 3]}"
        f" ({'ok' if i % 11 else 'retry'})"
        for i in range(10_000)
    )
    reduction = run(text, args={"command": "cat app.log"})
    assert reduction.lossy
    config = ReduceConfig()
    assert len(reduction.text) < config.head_chars + config.tail_chars + 400
    match = REDUCED_STUB_RE.search(reduction.text)
    assert match is not None and match.group("ref") == make_ref(text)
    assert match.group("before") == f"{len(text):,}"
    assert match.group("after") == f"{len(reduction.text):,}"
    assert reduction.text.startswith(text.split("\n")[0])
    assert reduction.text.endswith(text.split("\n")[-1])


def test_fifty_megabyte_string() -> None:
    line = "x" * 99 + "\n"
    text = line * 524_288  # 50 MiB
    reduction = run(text, args={"command": "yes"})
    assert reduction.lossy and reduction.ref == make_ref(text)
    assert len(reduction.text) < ReduceConfig().head_chars + ReduceConfig().tail_chars + 400
    assert REDUCED_STUB_RE.search(reduction.text) is not None
    one_line = "y" * 50_000_000  # no newline at all
    reduction = run(one_line, tool="fetch", args={"url": "u"})
    assert len(reduction.text) < ReduceConfig().head_chars + ReduceConfig().tail_chars + 400
    assert reduction.text.startswith("y" * 600)


def test_huge_output_preview_is_tidied_losslessly() -> None:
    text = "\x1b[32mgreen\x1b[0m   \n" * 100_000  # over max_scan_chars
    config = ReduceConfig()
    assert len(text) > config.max_scan_chars
    reduction = run(text)
    assert "\x1b" not in reduction.text
    assert REDUCED_STUB_RE.search(reduction.text) is not None


def test_bytes_outputs() -> None:
    binary = bytes(range(256)) * 100
    reduction = run(binary)
    assert reduction.text == (
        f"[binary output not shown: 25,600 bytes, application/octet-stream; full payload: "
        f'recall(ref="{make_ref(binary)}")]'
    )
    assert reduction.lossy and reduction.kind == "binary"
    text_bytes = run(b"hello\nworld")
    assert text_bytes.text == "hello\nworld" and not text_bytes.lossy


def test_invalid_utf8() -> None:
    payload = b"build ok\nlog: caf\xe9\n"
    reduction = run(payload)
    assert reduction.lossy and reduction.ref == make_ref(payload)
    assert reduction.text.startswith("build ok\nlog: caf\ufffd")
    assert reduction.text.endswith(f'original bytes: recall(ref="{make_ref(payload)}")]')


def test_empty_outputs() -> None:
    for empty in (None, "", b""):
        reduction = run(empty)
        assert reduction.text == NO_OUTPUT
        assert not reduction.lossy and reduction.ref is None
    spaces = "   \n\t\n"
    blank = run(spaces)
    assert blank.lossy and blank.text.startswith("[output was blank")
    assert f'recall(ref="{make_ref(spaces)}")' in blank.text


def test_images() -> None:
    small = b"\x89PNG\r\n\x1a\n" + b"\x00" * 100
    reduction = run(small, tool="screenshot", args={})
    assert reduction.text.startswith("data:image/png;base64,") and not reduction.lossy
    config = ReduceConfig(image_max_bytes=1_000)
    junk = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 20  # not decodable: stub
    reduction = run(junk, tool="screenshot", args={}, config=config)
    assert reduction.text == (
        f"[image not shown: image/png, 5,128 bytes (limit 1,000); full image: "
        f'recall(ref="{make_ref(junk)}")]'
    )


@pytest.mark.skipif(not pillow_available(), reason="Pillow not installed")
def test_image_downsampled_with_pillow() -> None:
    from PIL import Image

    image = Image.effect_noise((600, 600), 64).convert("RGB")
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    data = buffer.getvalue()
    assert len(data) > 100_000
    first = run(data, tool="screenshot", args={})
    second = run(data, tool="screenshot", args={})
    assert first.text == second.text  # deterministic
    assert first.text.startswith("data:image/jpeg;base64,")
    shrunk = base64.b64decode(first.text.split(",", 1)[1])
    assert len(shrunk) <= 100_000
    assert first.lossy and first.ref == make_ref(data)


def test_loop_detection() -> None:
    memory = IngestMemory()
    body = "\n".join(f"FAILED test_{i}" for i in range(30))
    outs = [
        run(body, args={"command": "pytest"}, call_id=f"c{i}", memory=memory).text
        for i in range(1, 7)
    ]
    assert outs[0] == body
    assert outs[1].startswith("[same output as call c1")
    assert outs[2].endswith("[note: identical bash call #3 in a row; same output as before]")
    assert outs[3].endswith("#4 in a row; same output as before]")
    assert outs[4].startswith("[identical call #5 in a row, same output as call c4;")
    assert outs[5].startswith("[identical call #6 in a row, same output as call c5;")
    # a different call breaks the run
    run("x", args={"command": "ls"}, call_id="d", memory=memory)
    assert "note" not in run(body, args={"command": "pytest"}, call_id="e", memory=memory).text


def test_loop_note_when_output_changes() -> None:
    memory = IngestMemory()
    for i in range(3):
        text = run(f"tick {i}", args={"command": "date"}, call_id=f"c{i}", memory=memory).text
    assert text == "tick 2\n[note: identical bash call #3 in a row; the output changed]"


def test_gate_opens_after_recall() -> None:
    memory = IngestMemory()
    args = {"command": "cat big.log"}
    text = "\n".join(f"entry {i}: payload {'z' * (1 + i % 50)}" for i in range(4_000))
    first = run(text, args=args, call_id="c1", memory=memory)
    assert "size_gate" in names(first)
    memory.note_recall(source_key("bash", args))
    later = text + "\nmore"
    second = run(later, args=args, call_id="c2", memory=memory)
    assert second.text == later and not second.lossy  # passes unreduced
    assert memory.recall_count("bash:cat big.log") == 1


def test_gate_opens_by_ref_and_keeps_hard_cap() -> None:
    memory = IngestMemory()
    config = ReduceConfig()
    huge = "\n".join(f"row {i} " + "q" * 80 for i in range(4_000))
    assert len(huge) > config.hard_cap
    first = run(huge, args={"command": "dump"}, call_id="c1", memory=memory)
    assert first.ref is not None
    memory.note_recall(first.ref)  # a recall by ref counts for its source too
    assert memory.recall_count("bash:dump") == 1
    second = run(huge + "!", args={"command": "dump"}, call_id="c2", memory=memory)
    assert names(second) == ["hard_cap"]
    assert config.hard_cap - 1_000 < len(second.text) <= config.hard_cap


def test_gate_keeps_lossless_cleanup() -> None:
    memory = IngestMemory()
    memory.note_recall("bash:x")
    reduction = run("\x1b[31mred\x1b[0m\n" + "dup\n" * 10, memory=memory)
    assert reduction.text == "red\ndup\n[… line repeated 9 more times]\n"


def test_tool_profiles() -> None:
    config = ReduceConfig()
    assert config.profile_for("bash").limit == config.shell_limit
    assert config.profile_for("execute_command").tool_kind == "shell"
    assert config.profile_for("run_tests").limit == config.shell_limit
    assert config.profile_for("Grep").limit == config.search_limit
    assert config.profile_for("search_dir").tool_kind == "search"
    assert config.profile_for("WebSearch").tool_kind == "search"
    assert config.profile_for("Read").tool_kind == "file_read"
    assert config.profile_for("str_replace_editor", {"command": "view"}).tool_kind == "file_read"
    assert config.profile_for("str_replace_editor", {"command": "create"}).tool_kind == "generic"
    assert config.profile_for("get_user_details").limit == config.default_limit
    assert classify_tool("open_file") == "file_read"


def test_per_tool_profile_override() -> None:
    text = "\n".join(f"result line {i} " + chr(97 + i % 26) * 30 for i in range(200))  # ~9k
    assert len(text) < ReduceConfig().shell_limit
    assert "size_gate" not in names(run(text, tool="bash"))
    profile = ToolProfile(limit=5_000, head_chars=100, tail_chars=300)
    config = ReduceConfig(profiles={"bash": profile})
    reduction = run(text, tool="bash", config=config)
    assert "size_gate" in names(reduction)
    assert len(reduction.text) < 800
    verbatim = ReduceConfig(profiles={"bash": ToolProfile(disabled=("ansi",))})
    assert run("\x1b[1mbold\x1b[0m", config=verbatim).text == "\x1b[1mbold\x1b[0m"
    as_read = ReduceConfig(profiles={"my_cat": ToolProfile(kind="file_read")})
    assert run("a  \n\n\n\nb", tool="my_cat", args={"p": 1}, config=as_read).text == "a  \n\n\n\nb"


def test_config_enabled_and_disabled() -> None:
    config = ReduceConfig(disabled=("ansi",))
    assert "ansi" not in Pipeline(config).pass_names
    only = ReduceConfig(enabled=("json",))
    assert Pipeline(only).pass_names == ("json", "hard_cap")
    assert ReduceConfig().active_passes() == PASS_NAMES


@pytest.mark.parametrize(
    "kwargs",
    [
        {"disabled": ("nope",)},
        {"enabled": ("ansi", "bogus")},
        {"disabled": ("hard_cap",)},
        {"default_limit": 10},
        {"head_chars": -1},
        {"head_chars": 40_000},
        {"hard_cap": 10_000},
        {"gate_threshold": 0},
        {"loop_flag_after": 1},
        {"loop_flag_after": 4, "loop_stub_after": 3},
        {"loop_stub_after": 500},
        {"image_max_bytes": 0},
        {"image_max_bytes": 500_000},
        {"max_scan_chars": 1_000},
        {"min_repeat": 1},
        {"profiles": {"bash": ToolProfile(limit=300_000)}},
        {"profiles": {"": ToolProfile()}},
        {"unknown_field": 1},
    ],
)
def test_config_validation(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        ReduceConfig(**kwargs)


def test_profile_validation() -> None:
    with pytest.raises(ValueError):
        ToolProfile(limit=5)
    with pytest.raises(ValueError):
        ToolProfile(disabled=("nope",))
    with pytest.raises(ValueError):
        ToolProfile(kind="weird")  # type: ignore[arg-type]


def test_config_documents_every_field() -> None:
    for model in (ReduceConfig, ToolProfile):
        for name, info in model.model_fields.items():
            assert info.description, f"{model.__name__}.{name} has no docstring"


def test_registry_matches_names() -> None:
    assert tuple(p.name for p in PASSES) == PASS_NAMES
    for step in PASSES:
        assert isinstance(step.lossless, bool)


class Exploding(ReductionPass):
    name: ClassVar[str] = "exploding"
    lossless: ClassVar[bool] = True

    def apply(self, text: str, ctx: PassContext) -> str | None:
        raise RuntimeError("secret payload " + text)


class Growing(ReductionPass):
    name: ClassVar[str] = "growing"
    lossless: ClassVar[bool] = True

    def apply(self, text: str, ctx: PassContext) -> str | None:
        return text + "!" * (STUB_OVERHEAD + 1)


def test_failing_pass_is_skipped_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    pipeline = Pipeline(passes=(Exploding(), PASSES_BY_NAME["whitespace"]))
    with caplog.at_level(logging.WARNING, logger="cachepilot.reduce"):
        first = pipeline.run("bash", {}, "c1", normalize_output("keep me  \n"), IngestMemory())
        pipeline.run("bash", {}, "c2", normalize_output("again"), IngestMemory())
    assert first.text == "keep me\n"
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "exploding" in warnings[0].getMessage()
    assert "secret payload" not in caplog.text and "keep me" not in caplog.text


def test_growing_pass_is_discarded() -> None:
    pipeline = Pipeline(passes=(Growing(),))
    reduction = pipeline.run("bash", {}, "c", normalize_output("abc"), IngestMemory())
    assert reduction.text == "abc" and not reduction.lossy


def test_custom_pass_validation() -> None:
    with pytest.raises(ValueError):
        Pipeline(passes=(Growing(), Growing()))
    with pytest.raises(ValueError):
        Pipeline(passes=("ansi",))  # type: ignore[arg-type]


def test_run_accepts_raw_outputs_and_odd_arguments() -> None:
    pipeline = default_pipeline()
    reduction = pipeline.run("bash", '{"command": "ls"}', None, {"a": None, "b": 1})  # type: ignore[arg-type]
    assert reduction.text == '{"b":1}' and reduction.source == "bash:ls"


def test_memory_is_bounded_and_serialisable() -> None:
    memory = IngestMemory()
    config = ReduceConfig(memory_max_entries=16)
    pipeline = Pipeline(config)
    for i in range(200):
        pipeline.run(
            "read_file", {"path": f"f{i}.py"}, f"c{i}", normalize_output(f"body {i}"), memory
        )
        memory.note_recall(f"read_file:f{i}.py")
    assert len(memory.seen) <= 16 and len(memory.reads) <= 16 and len(memory.sources) <= 16
    assert len(memory.recent) <= 32 and len(memory.recalls) <= 256
    restored = IngestMemory.model_validate_json(memory.model_dump_json())
    assert restored == memory
    assert all(is_ref(ref) for ref in restored.seen)


def test_memory_updates_only_through_run() -> None:
    memory = IngestMemory()
    snapshot = memory.model_dump()
    ctx_for("x")  # building a context does not touch memory
    assert memory.model_dump() == snapshot
    run("hello", memory=memory)
    assert memory.seen == {make_ref("hello"): "call_1"}
    assert memory.recent[-1].call_id == "call_1"
