"""Images inside structured tool output, and SVG documents.

Images the provider renders (image parts of a tool result, image blocks of a framework's
structured output) are downsampled under `ReduceConfig.image_max_bytes`; base64 images inside
a JSON output read as text become markers; a large SVG document becomes a summary. Every
original stays recallable byte-identical.
"""

from __future__ import annotations

import base64
import io
import json
import random

import pytest

from cachepilot import CachePilot, InMemoryArtifactStore
from cachepilot.messages import ImagePart, Message, TextPart, ToolCall
from cachepilot.recall.tool import recall
from cachepilot.reduce import Pipeline, ReduceConfig
from cachepilot.reduce import images as images_module
from cachepilot.reduce.images import (
    downsample_data_url,
    downsample_image_blocks,
    image_replacement,
)
from cachepilot.reduce.passes.payload import pillow_available
from cachepilot.reduce.passes.svg import is_svg
from cachepilot.refs import make_ref

needs_pillow = pytest.mark.skipif(not pillow_available(), reason="Pillow not installed")
LIMIT = 100_000


def noise_png(side: int = 400) -> bytes:
    from PIL import Image

    data = random.Random(7).randbytes(side * side * 3)
    buffer = io.BytesIO()
    Image.frombytes("RGB", (side, side), data).save(buffer, format="PNG")
    return buffer.getvalue()


def data_url(raw: bytes, media: str = "image/png") -> str:
    return f"data:{media};base64," + base64.b64encode(raw).decode("ascii")


def decoded_size(url: str) -> int:
    return len(base64.b64decode(url.split(",", 1)[1]))


@needs_pillow
def test_data_url_downsampled_under_the_limit() -> None:
    raw = noise_png()
    assert len(raw) > 4 * LIMIT
    smaller = downsample_data_url(data_url(raw), LIMIT)
    assert smaller is not None and smaller.startswith("data:image/jpeg;base64,")
    assert decoded_size(smaller) <= LIMIT
    assert downsample_data_url(data_url(noise_png(60)), LIMIT) is None  # within the limit
    assert image_replacement(ImagePart(url="https://example.com/a.png"), LIMIT) is None


def test_image_that_cannot_be_downsampled_becomes_a_stub(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(images_module, "downsample_image", lambda data, limit: None)
    url = data_url(b"\x89PNG\r\n\x1a\n" + bytes(200_000))
    stub = image_replacement(ImagePart(url=url), LIMIT)
    assert stub is not None and not stub.startswith("data:")
    assert f'recall(ref="{make_ref(url)}")' in stub


@needs_pillow
def test_every_block_shape_is_downsampled_and_keeps_its_shape() -> None:
    raw = noise_png()
    b64 = base64.b64encode(raw).decode("ascii")
    url = data_url(raw)
    blocks = [
        {"type": "image", "base64": b64, "mime_type": "image/png"},  # LangChain standard
        {"type": "image", "data": b64, "mimeType": "image/png"},  # MCP
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64}},
        {"type": "image_url", "image_url": {"url": url, "detail": "high"}},  # OpenAI Chat
        {"type": "image", "image_url": url, "detail": "auto"},  # Agents SDK ToolOutputImage
        {"type": "input_image", "image_url": url},  # Responses
        {"type": "image", "url": url},
        {"type": "text", "text": "caption"},
    ]
    out = downsample_image_blocks({"result": blocks}, LIMIT)["result"]
    assert out[0]["mime_type"] == "image/jpeg" and len(base64.b64decode(out[0]["base64"])) <= LIMIT
    assert out[1]["mimeType"] == "image/jpeg" and len(base64.b64decode(out[1]["data"])) <= LIMIT
    source = out[2]["source"]
    assert source["media_type"] == "image/jpeg" and len(base64.b64decode(source["data"])) <= LIMIT
    assert out[3]["image_url"]["detail"] == "high"
    assert decoded_size(out[3]["image_url"]["url"]) <= LIMIT
    assert out[4]["detail"] == "auto" and decoded_size(out[4]["image_url"]) <= LIMIT
    assert decoded_size(out[5]["image_url"]) <= LIMIT
    assert decoded_size(out[6]["url"]) <= LIMIT
    assert out[7] is blocks[7]
    small = {"type": "image", "data": base64.b64encode(noise_png(40)).decode(), "mimeType": "x"}
    assert downsample_image_blocks(small, LIMIT) is small


def test_base64_image_inside_json_text_becomes_a_marker() -> None:
    payload = base64.b64encode(bytes(range(256)) * 200).decode("ascii")
    output = {
        "status": "ok",
        "screenshot": {"type": "image", "data": payload, "mimeType": "image/png"},
    }
    pilot = CachePilot(store=InMemoryArtifactStore())
    report = pilot.ingest_report("browser", {"url": "x"}, output, "c1", "t")
    value = json.loads(report.text.split("\n[output shortened", 1)[0])
    assert value["status"] == "ok" and value["screenshot"]["mimeType"] == "image/png"
    assert payload not in report.text
    assert report.ref is not None and f'recall(ref="{report.ref}")' in value["screenshot"]["data"]
    original = pilot.store.get("t", report.ref)
    assert original is not None and json.loads(original.text) == output
    # Short image payloads (a tiny icon) stay.
    icon = {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}
    assert pilot.ingest("browser", {"url": "y"}, icon, "c2", "t") == json.dumps(icon)


@needs_pillow
def test_image_parts_of_a_tool_result_are_downsampled_in_the_view(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = data_url(noise_png())
    call = ToolCall("c1", "screenshot", "{}")
    transcript = [
        Message("user", "look"),
        Message("assistant", "", tool_calls=(call,)),
        Message(
            "tool", (TextPart("page"), ImagePart(url=url)), tool_call_id="c1", name="screenshot"
        ),
    ]
    store = InMemoryArtifactStore()
    pilot = CachePilot(store=store)
    view = pilot.reduce_results(transcript, "t")
    assert transcript[2].content[1].url == url  # the transcript is never changed
    part = view[2].content[1]
    assert isinstance(part, ImagePart) and part.media_type == "image/jpeg"
    assert decoded_size(part.url) <= LIMIT
    assert pilot.reduce_results(transcript, "t")[2] == view[2]
    original = store.get("t", make_ref(url))
    assert original is not None and original.text == url
    # A new process shows the same bytes, even one that could not downsample.
    monkeypatch.setattr(images_module, "downsample_image", lambda data, limit: None)
    again = CachePilot(store=store)
    again.load_state("t", pilot.export_state("t"))
    assert again.reduce_results(transcript, "t")[2] == view[2]


def svg(elements: int) -> str:
    body = "\n".join(
        f'<path d="M{i} {i} L{i + 10} {i + 5} Z" fill="#{i % 256:02x}0000"/>'
        for i in range(elements)
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<svg xmlns="http://www.w3.org/2000/svg" width="640" height="480" viewBox="0 0 640 480">\n'
        "<title>Sales by region</title>\n"
        f"{body}\n"
        '<text x="10" y="20">North</text><text x="10" y="40">South</text>\n'
        "</svg>\n"
    )


def test_large_svg_becomes_a_summary_not_a_text_cut() -> None:
    document = svg(2_000)
    assert len(document) > 30_000 and is_svg(document)
    pilot = CachePilot(store=InMemoryArtifactStore())
    report = pilot.ingest_report("bash", {"command": "cat chart.svg"}, document, "c1", "t")
    text = report.text
    assert text.startswith("[SVG image") and "svg" in report.steps
    for expected in ('width="640"', 'viewBox="0 0 640 480"', "path 2,000", "Sales by region"):
        assert expected in text
    assert '"North", "South"' in text
    assert report.ref is not None and f'recall(ref="{report.ref}")' in text
    got = recall(pilot.store, "t", report.ref, max_chars=200_000, max_chars_cap=200_000)
    assert got.content == document
    assert len(text) < 600


def test_small_svg_html_and_file_reads_are_not_summarised() -> None:
    pipeline = Pipeline(ReduceConfig())
    small = svg(5)
    assert pipeline.run("bash", {"command": "cat a.svg"}, "c1", small).text == small
    page = "<html><body>" + svg(2_000) + "</body></html>"
    assert not is_svg(page)
    assert "svg" not in [s.pass_name for s in pipeline.run("bash", {}, "c2", page).steps]
    first_read = pipeline.run("read_file", {"path": "chart.svg"}, "c3", svg(2_000))
    assert "svg" not in [s.pass_name for s in first_read.steps]
