"""`cachepilot.diagnose.breaks.explain`: every cause class on hand-made request pairs."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cachepilot.diagnose.breaks import CAUSES, explain, message_text
from cachepilot.messages import Message, ReasoningPart, TextPart, ToolCall
from cachepilot.plan.epochs import FOLD_ID_PREFIX
from cachepilot.sim import Request

PROFILE = "openai-gpt-5.4-mini"
SYSTEM = "\n".join(f"Rule {i}: run the tests of module {i} before committing." for i in range(150))
TOOLS = [
    {"type": "function", "function": {"name": n, "description": f"Run {n}.", "parameters": {}}}
    for n in ("bash", "read", "write")
]
LOG = "\n".join(f"tests/test_{i}.py::test_case PASSED" for i in range(200))


def history() -> list[Message]:
    call = ToolCall("c1", "bash", '{"cmd": "pytest"}')
    return [
        Message("user", "Fix module 3."),
        Message("assistant", (ReasoningPart("think"), TextPart("Running.")), tool_calls=(call,)),
        Message("tool", LOG, tool_call_id="c1", name="bash"),
        Message("assistant", "Tests pass."),
        Message("user", "Update the changelog."),
        Message("assistant", "Done: " + LOG[:2000]),
    ]


def req(messages: list[Message], **kw: object) -> Request:
    return Request(
        system=kw.pop("system", SYSTEM),  # type: ignore[arg-type]
        messages=messages,
        tools=kw.pop("tools", TOOLS),  # type: ignore[arg-type]
        **kw,  # type: ignore[arg-type]
    )


def test_extension_is_no_break() -> None:
    h = history()
    why = explain(req(h[:3]), req(h), profile=PROFILE)
    assert why.cause == "none" and not why.is_break
    assert why.remissed_tokens == 0 and why.divergence is None
    assert why.common_tokens == why.previous_tokens


@pytest.mark.parametrize(
    ("old", "new", "kind"),
    [
        ("Today is 2025-01-01.", "Today is 2025-01-02.", "date"),
        (
            "session 0b9c3d1e-1111-4aaa-8bbb-0123456789ab",
            "session 7f00aa11-2222-4ccc-9ddd-abcdefabcdef",
            "uuid",
        ),
        ("cwd /home/alice/work/repo-1", "cwd /home/alice/work/repo-2", "path"),
    ],
)
def test_volatile_value_in_system(old: str, new: str, kind: str) -> None:
    h = history()
    why = explain(
        req(h[:3], system=old + "\n" + SYSTEM), req(h, system=new + "\n" + SYSTEM), profile=PROFILE
    )
    assert (why.cause, why.detail) == ("volatile_value", kind)
    assert why.divergence is not None and why.divergence.area == "system"
    assert why.divergence.char_offset == next(
        i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b
    )
    assert old[why.divergence.char_offset :][:5] in why.divergence.previous_snippet
    assert why.prefix_break and why.avoidable
    assert why.remissed_tokens > 1000  # everything after the first line misses


def test_volatile_value_in_first_user_message() -> None:
    h = history()
    cur = [Message("user", "Fix module 3. (sent 2025-03-04 10:00)"), *h[1:]]
    prev = [Message("user", "Fix module 3. (sent 2025-03-03 09:00)"), *h[1:3]]
    why = explain(req(prev), req(cur), profile=PROFILE)
    assert why.cause == "volatile_value" and why.detail in ("datetime", "date")
    assert why.divergence is not None and why.divergence.label == "message 0"


@pytest.mark.parametrize(
    ("cur_tools", "detail"),
    [
        (TOOLS[::-1], "reordered"),
        ([*TOOLS, {"type": "function", "function": {"name": "zz", "parameters": {}}}], "added"),
        (TOOLS[:2], "removed"),
        (
            [*TOOLS[:2], {"type": "function", "function": {"name": "new", "parameters": {}}}],
            "replaced",
        ),
        (
            [
                *TOOLS[:2],
                {
                    "type": "function",
                    "function": {"name": "write", "description": "Write a file.", "parameters": {}},
                },
            ],
            "schema_changed",
        ),
    ],
)
def test_tool_changes(cur_tools: list[dict[str, object]], detail: str) -> None:
    h = history()
    why = explain(req(h[:3]), req(h, tools=cur_tools), profile=PROFILE)
    assert (why.cause, why.detail) == ("tool_change", detail)
    assert why.divergence is not None and why.divergence.area == "tools"
    assert why.remissed_tokens > 1000


def test_system_edit_and_removal() -> None:
    h = history()
    edited = explain(
        req(h[:3]), req(h, system=SYSTEM.replace("Rule 5:", "Policy 5:")), profile=PROFILE
    )
    assert (edited.cause, edited.detail) == ("system_change", "edited")
    removed = explain(req(h[:3]), req(h, system=None), profile=PROFILE)
    assert (removed.cause, removed.detail) == ("system_change", "removed")


def _rewrite(prev: list[Message], cur: list[Message]) -> tuple[str, str]:
    why = explain(req(prev), req(cur), profile=PROFILE)
    return why.cause, why.detail


def test_history_rewrites() -> None:
    h = history()
    stub = Message("tool", "[cleared]", tool_call_id="c1", name="bash")
    assert _rewrite(h[:4], [*h[:2], stub, *h[3:]]) == ("history_rewrite", "stubbed")
    assert _rewrite(h[:5], [h[0], *h[3:]]) == ("history_rewrite", "removed")
    extra = Message("user", "Also: keep the API stable.")
    assert _rewrite(h[:4], [h[0], extra, *h[1:]]) == ("history_rewrite", "inserted")
    summary = Message("user", "Summary: fixed module 3.", id=f"{FOLD_ID_PREFIX}abc")
    assert _rewrite(h[:5], [summary, *h[4:]]) == ("history_rewrite", "folded")
    short = Message("user", "Summary so far.")
    assert _rewrite(h, [short, Message("user", "next")]) == ("history_rewrite", "folded")
    no_reasoning = Message("assistant", "Running.", tool_calls=h[1].tool_calls)
    assert _rewrite(h[:4], [h[0], no_reasoning, *h[2:]]) == ("history_rewrite", "reasoning_changed")
    spaced = Message(
        "assistant", h[1].content, tool_calls=(ToolCall("c1", "bash", '{"cmd":"pytest"}'),)
    )
    assert _rewrite(h[:4], [h[0], spaced, *h[2:]]) == ("history_rewrite", "reserialized")
    assert _rewrite(h[:5], [h[0], h[1], h[2], h[4], h[3]]) == ("history_rewrite", "reordered")
    edited = Message("user", "Update the README instead.")
    assert _rewrite(h[:5], [*h[:4], edited]) == ("history_rewrite", "edited")


def test_stubs_in_a_batch_are_counted() -> None:
    calls = [ToolCall(f"c{i}", "bash", "{}") for i in range(3)]
    msgs: list[Message] = [Message("user", "go")]
    for call in calls:
        msgs += [
            Message("assistant", "", tool_calls=(call,)),
            Message("tool", LOG, tool_call_id=call.id),
        ]
    stubbed = [
        m if m.role != "tool" else Message("tool", "[x]", tool_call_id=m.tool_call_id) for m in msgs
    ]
    why = explain(req(msgs), req([*stubbed, Message("user", "more")]), profile=PROFILE)
    assert (why.cause, why.detail) == ("history_rewrite", "stubbed")
    assert any("3 of the" in n for n in why.notes)


def test_model_and_parameter_changes() -> None:
    h = history()
    model = explain(req(h[:3], model="gpt-5.4-mini"), req(h, model="gpt-5.4"), profile=PROFILE)
    assert model.cause == "model_change" and model.common_tokens == 0
    assert model.remissed_tokens >= model.previous_tokens - 128
    base = {
        "model": "gpt-5.4-mini",
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "hi"}],
    }
    key = explain(
        {**base, "prompt_cache_key": "a"}, {**base, "prompt_cache_key": "b"}, profile=PROFILE
    )
    assert (key.cause, key.detail) == ("parameter_change", "prompt_cache_key")
    assert key.common_tokens == 0 and key.remissed_tokens > 1000
    # Anthropic: tool_choice invalidates the cached messages, not tools + system.
    body = {
        "model": "claude-sonnet-4-5",
        "system": SYSTEM,
        "max_tokens": 10,
        "messages": [{"role": "user", "content": LOG}],
    }
    tc = explain(
        {**body, "tool_choice": {"type": "auto"}},
        {**body, "tool_choice": {"type": "any"}},
        profile="anthropic",
    )
    assert (tc.cause, tc.detail) == ("parameter_change", "tool_choice")
    assert 0 < tc.common_tokens < tc.previous_tokens
    # The same tool_choice change means nothing to the OpenAI cache.
    chat = {**base, "tool_choice": "auto"}
    assert explain(chat, {**base, "tool_choice": "required"}, profile=PROFILE).cause == "none"


def test_ttl_expiry_and_minimum_length() -> None:
    h = history()
    late = explain(req(h[:3], timestamp=0.0), req(h, timestamp=301.0), profile=PROFILE)
    assert late.cause == "ttl_expiry" and late.idle_seconds == 301.0 and not late.avoidable
    assert late.remissed_tokens > 1000
    in_time = explain(req(h[:3], timestamp=0.0), req(h, timestamp=299.0), profile=PROFILE)
    assert in_time.cause == "none"
    hour = explain(req(h[:3], timestamp=0.0), req(h, timestamp=600.0), profile="anthropic-1h")
    assert hour.cause == "none"
    tiny = [Message("user", "hi")]
    short = explain(
        Request("Be brief.", tiny),
        Request("Be brief.", [*tiny, Message("assistant", "yo")]),
        profile=PROFILE,
    )
    assert (short.cause, short.detail) == ("below_minimum", "request")
    # A content break after an expiry is reported, but it cost nothing more.
    both = explain(
        req(h[:3], timestamp=0.0), req(h, timestamp=900.0, tools=TOOLS[::-1]), profile=PROFILE
    )
    assert both.cause == "tool_change" and not both.avoidable
    assert any("expired anyway" in n for n in both.notes)


def test_raw_bodies_of_each_api() -> None:
    chat_a = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "Today is 2025-01-01.\n" + SYSTEM},
            {"role": "user", "content": "hi"},
        ],
    }
    chat_b = json.loads(json.dumps(chat_a).replace("2025-01-01", "2025-01-02"))
    assert explain(chat_a, chat_b, profile=PROFILE).cause == "volatile_value"
    resp_a = {"model": "m", "instructions": SYSTEM, "input": "hello"}
    resp_b = {
        **resp_a,
        "input": [{"role": "user", "content": "hello"}, {"role": "user", "content": "more"}],
    }
    assert explain(resp_a, resp_b, profile=PROFILE).cause == "none"
    ant_a = {
        "model": "c",
        "system": SYSTEM,
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "hi"}],
    }
    ant_b = {**ant_a, "system": SYSTEM.replace("Rule 1:", "Rule one:")}
    assert explain(ant_a, ant_b, profile="anthropic").cause == "system_change"
    with pytest.raises(TypeError):
        explain(42, chat_a)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="neither"):
        explain({"model": "m"}, chat_a)


def test_describe_and_to_dict() -> None:
    h = history()
    why = explain(req(h[:3]), req(h, system="x\n" + SYSTEM))
    assert why.cause == "system_change"
    doc = why.to_dict()
    assert doc["cause"] in CAUSES and doc["divergence"]["area"] == "system"
    assert json.loads(json.dumps(doc)) == doc
    assert "previous:" in why.describe() and "current:" in why.describe()


def test_message_text_shows_every_part() -> None:
    m = Message(
        "assistant", (ReasoningPart("why"), TextPart("say")), tool_calls=(ToolCall("1", "f", "{}"),)
    )
    assert message_text(m) == "[reasoning] why\nsay\n[call f {}]"


words = st.text(alphabet="abcdefgh ", min_size=1, max_size=30)


@settings(max_examples=40, deadline=None)
@given(
    texts=st.lists(words, min_size=2, max_size=8),
    extra=st.lists(words, min_size=1, max_size=3),
    edit=st.integers(min_value=0, max_value=7),
)
def test_property_extension_never_breaks_and_edit_is_located(
    texts: list[str], extra: list[str], edit: int
) -> None:
    msgs = [Message("user" if i % 2 == 0 else "assistant", t) for i, t in enumerate(texts)]
    grown = msgs + [Message("user", t) for t in extra]
    ok = explain(req(msgs), req(grown), profile=PROFILE)
    assert ok.cause == "none" and ok.remissed_tokens == 0
    index = edit % len(msgs)
    changed = list(grown)
    changed[index] = Message(msgs[index].role, msgs[index].text + "!?")
    why = explain(req(msgs), req(changed), profile=PROFILE)
    # Content appended to the last message already sent is still an extension.
    if index == len(msgs) - 1:
        assert why.cause == "none" and why.divergence is None
    else:
        assert why.divergence is not None and why.divergence.area == "messages"
        assert why.divergence.index == index and why.cause == "history_rewrite"
        assert why.remissed_tokens >= 0 and why.common_tokens <= why.previous_tokens
