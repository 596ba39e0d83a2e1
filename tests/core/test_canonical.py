from __future__ import annotations

import copy
import datetime as dt
import itertools
import json
import logging
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from cachepilot.canonical import (
    KINDS,
    CanonicalConfig,
    Canonicalizer,
    CanonicalState,
    VolatileSpan,
    canonical_json,
    canonicalize_text,
    canonicalize_tool,
    detect_volatile,
    order_tools,
    render_block,
    tool_fingerprint,
    tool_name,
)
from cachepilot.messages import ImagePart, Message, TextPart, ToolCall

FIRST_CALL = CanonicalConfig(move_when_changed=False)
"""The block from the first call (the mechanics of the block itself)."""

# ---------------------------------------------------------------------------------------------
# helpers


def kinds_values(text: str, config: CanonicalConfig | None = None) -> list[tuple[str, str]]:
    return [(s.kind, s.value) for s in detect_volatile(text, config)]


def transcript() -> list[Message]:
    return [
        Message("user", "Please fix the failing test.", id="u1"),
        Message(
            "assistant",
            "Running the tests.",
            tool_calls=(ToolCall("c1", "bash", '{"command": "pytest"}'),),
            id="a1",
        ),
        Message("tool", "1 failed at 2026-03-17 14:05:09", tool_call_id="c1", name="bash"),
        Message("user", "Go on.", id="u2"),
    ]


TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file.",
            "parameters": {
                "type": "object",
                "required": ["path", "limit"],
                "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}},
            },
        },
    },
    {"name": "bash", "input_schema": {"type": "object", "properties": {"command": {}}}},
    {"name": "grep", "parameters": {"type": "object"}, "description": "Search."},
]


def render_prompt(now: dt.datetime, cwd: str, session: str, pid: int) -> str:
    return (
        "You are a coding agent. Be concise and follow the repository conventions.\n"
        f"Current date: {now:%A, %B} {now.day}, {now.year}\n"
        f"Current time: {now.isoformat(timespec='seconds')}Z\n"
        f"Working directory: {cwd}\n"
        f"Scratch space: /tmp/agent-{pid}/work\n"
        f"session_id={session} (pid {pid})\n"
        "Use Python 3.11.7 and keep line length at 100.\n"
        f"Reminder: the working directory is {cwd}.\n"
    )


# ---------------------------------------------------------------------------------------------
# detectors: positives


@pytest.mark.parametrize(
    ("text", "kind", "value"),
    [
        ("at 2026-03-17 now", "date", "2026-03-17"),
        ("ts 2026-03-17T14:05:09Z.", "datetime", "2026-03-17T14:05:09Z"),
        ("ts 2026-03-17T14:05:09.123456+00:00 x", "datetime", "2026-03-17T14:05:09.123456+00:00"),
        ("ts 2026-03-17 14:05:09 UTC ok", "datetime", "2026-03-17 14:05:09 UTC"),
        ("ts 2026-03-17 14:05 -0500 ok", "datetime", "2026-03-17 14:05 -0500"),
        ("compact 20260317T140509Z here", "datetime", "20260317T140509Z"),
        ("Today is Tuesday, March 17, 2026.", "date", "Tuesday, March 17, 2026"),
        ("on 17 Mar 2026 we", "date", "17 Mar 2026"),
        ("due 03/17/2026 ok", "date", "03/17/2026"),
        ("due 17/03/26 ok", "date", "17/03/26"),
        ("due 2026/03/17 ok", "date", "2026/03/17"),
        ("due 17.03.2026 ok", "date", "17.03.2026"),
        ("the 17th of March, 2026 ok", "date", "17th of March, 2026"),
        ("as of March 2026 the", "date", "March 2026"),
        ("Mar 17 14:05:09 host sshd: ok", "datetime", "Mar 17 14:05:09"),
        ("Tue Mar 17 14:05:09 UTC 2026", "datetime", "Tue Mar 17 14:05:09 UTC 2026"),
        ("Tue, 17 Mar 2026 14:05:09 +0000", "datetime", "Tue, 17 Mar 2026 14:05:09 +0000"),
        (
            "It is Tuesday, March 17, 2026 at 2:05 PM PST now",
            "datetime",
            "Tuesday, March 17, 2026 at 2:05 PM PST",
        ),
        ("started 14:05:09 sharp", "time", "14:05:09"),
        ("started 2:05 PM sharp", "time", "2:05 PM"),
        ("started 2:05pm sharp", "time", "2:05pm"),
        ("started 2 PM sharp", "time", "2 PM"),
        ("started 9:05 GMT+1 sharp", "time", "9:05 GMT+1"),
        ("started 14:05 (UTC) x", "time", "14:05 (UTC)"),
        ("at 14:05 Europe/Berlin x", "time", "14:05 Europe/Berlin"),
        ("Today is Tuesday.", "weekday", "Tuesday"),
        ("day: Friday", "weekday", "Friday"),
        (
            "id 550e8400-e29b-41d4-a716-446655440000 ok",
            "uuid",
            "550e8400-e29b-41d4-a716-446655440000",
        ),
        (
            "blob 3f2a9c1b7d4e5f60718293a4b5c6d7e8f9012345",
            "hex",
            "3f2a9c1b7d4e5f60718293a4b5c6d7e8f9012345",
        ),
        ("digest a1b2c3d4e5f6 end", "hex", "a1b2c3d4e5f6"),
        ("<obj at 0x7ffe5d3a1b20>", "hex", "0x7ffe5d3a1b20"),
        ("last commit a1b2c3d on main", "hex", "a1b2c3d"),
        ("HEAD is at 9fceb02 Fix", "hex", "9fceb02"),
        ("version v1.2.3-14-ga1b2c3d4", "hex", "a1b2c3d4"),
        ("Recent commits:\n4e1f2a9 Fix the parser\n", "hex", "4e1f2a9"),
        ("epoch 1773756309 now", "number", "1773756309"),
        ("epoch 1773756309.123456 now", "number", "1773756309.123456"),
        ("pid 4821337 ok", "number", "4821337"),
        ("cwd /home/dev/projects/inventory.", "path", "/home/dev/projects/inventory"),
        ("file /Users/alice/src/app.py:12:3 x", "path", "/Users/alice/src/app.py:12:3"),
        ("tmp /tmp/pytest-of-dev/pytest-12/test0 x", "path", "/tmp/pytest-of-dev/pytest-12/test0"),
        ("mac /var/folders/x1/abc/T/tmp9 x", "path", "/var/folders/x1/abc/T/tmp9"),
        ("mac /private/var/folders/x1 x", "path", "/private/var/folders/x1"),
        ("home /home/dev x", "path", "/home/dev"),
        ("--dir=/root/work/x", "path", "/root/work/x"),
        ("win C:\\Users\\dev\\proj\\a.py x", "path", "C:\\Users\\dev\\proj\\a.py"),
        ('"/home/dev/a b.txt"', "path", "/home/dev/a"),
        ("session_id=abc", "id", "abc"),
        ("request-id: 9f8e7d", "id", "9f8e7d"),
        ('{"trace_id": "t-1 x"}', "id", "t-1 x"),
        ("sessionId='s-9'", "id", "s-9"),
        ("Session ID: s42.", "id", "s42"),
        ("X-Request-Id: req_abc", "id", "req_abc"),
        ("session: 4f2a", "id", "4f2a"),
        ("your session id is ab12", "id", "ab12"),
        ("PID: 12345", "id", "12345"),
    ],
)
def test_detector_positives(text: str, kind: str, value: str) -> None:
    assert (kind, value) in kinds_values(text), kinds_values(text)


def test_weekday_next_to_a_date_is_flagged_separately() -> None:
    found = kinds_values("Date: 2026-03-17 (Tuesday)")
    assert found == [("date", "2026-03-17"), ("weekday", "Tuesday")]


def test_configured_roots_catch_paths_outside_the_default_roots() -> None:
    config = CanonicalConfig(cwd="/srv/my app", home="/opt/homes/dev", path_roots=("/ci/ws/",))
    text = "cwd /srv/my app/src/x.py, home /opt/homes/dev and /ci/ws/build/1; not /srv/my apple"
    assert kinds_values(text, config) == [
        ("path", "/srv/my app/src/x.py"),
        ("path", "/opt/homes/dev"),
        ("path", "/ci/ws/build/1"),
    ]
    assert kinds_values("/opt/homes/devx", config) == []


def test_default_roots_can_be_turned_off() -> None:
    config = CanonicalConfig(default_path_roots=False)
    assert kinds_values("cwd /home/dev/x", config) == []


def test_a_path_beats_the_date_and_number_inside_it() -> None:
    text = "log /tmp/run-2026-03-17/1773756309/out.txt"
    assert kinds_values(text) == [("path", "/tmp/run-2026-03-17/1773756309/out.txt")]


def test_an_id_value_beats_the_uuid_it_holds() -> None:
    text = "session_id=550e8400-e29b-41d4-a716-446655440000"
    assert kinds_values(text) == [("id", "550e8400-e29b-41d4-a716-446655440000")]


def test_a_date_list_is_several_values() -> None:
    assert [v for _, v in kinds_values("on 2026-03-17, 2026-03-18 and 2026-03-19")] == [
        "2026-03-17",
        "2026-03-18",
        "2026-03-19",
    ]


def test_min_number_digits() -> None:
    assert kinds_values("pid 12345") == []
    assert kinds_values("pid 12345", CanonicalConfig(min_number_digits=5)) == [("number", "12345")]


def test_enabled_kinds_limits_detection() -> None:
    text = "2026-03-17 /home/dev/x 1773756309"
    config = CanonicalConfig(enabled_kinds=frozenset({"path"}))
    assert kinds_values(text, config) == [("path", "/home/dev/x")]
    assert kinds_values("2026-03-17 14:05", CanonicalConfig(enabled_kinds={"date", "time"})) == []


def test_custom_id_keys() -> None:
    config = CanonicalConfig(id_keys=("tenant",))
    assert kinds_values("tenant=acme-7 session_id=abc", config) == [("id", "acme-7")]
    assert kinds_values("tenant=acme", config) == []  # no digit, key is not an *id
    assert kinds_values("session_id=abc", CanonicalConfig(id_keys=())) == []


# ---------------------------------------------------------------------------------------------
# detectors: negatives (versions, prose, short hex words, stable system paths)


@pytest.mark.parametrize(
    "text",
    [
        "Use Python 3.11.7, Node 20.11.1, numpy 1.26.4 and Ubuntu 22.04.",
        "Release 2.0.0-rc.1 and v10.0.19045.3803",
        "We meet on Monday to discuss the plan. Sunday is a rest day.",
        "May I help you? March forward. Sat on the mat. Wed the sun.",
        "deadbeef facade cafebabe decade added faded",
        "commit message, commit to the plan, committed changes, merge conflicts",
        "Read John 3:16 and verse 2:1; the ratio is 3:2.",
        "Copyright 2026 Acme. It was founded in 1999.",
        "Paths /usr/bin/python, /etc/hosts, /var/log/syslog, /opt/app, ~/projects/x, /tmp, /home",
        "See https://example.com/2026/03/17/post and https://x.org/home/alice/file",
        "Budget 1,000,000 tokens; port 8080; index 42; 0.5 temperature; 1_000_000",
        "main.py:12:34 error and mac 00:11:22:33:44:55",
        "session is active; session: main; user_id=None; trace_id: null; run_id=",
        "the session id is unknown",
        "ISO 8601, UTF-8, SHA-256, e.g., i.e., 3rd place, the 1st step",
        "the build a1b2c3d is not in git context",
        "The exact model ID is claude-sonnet-4-5-20250929; fallback gpt-4o-2024-08-06.",
    ],
)
def test_detector_negatives(text: str) -> None:
    assert detect_volatile(text) == []


def test_short_hex_needs_git_context_and_a_digit() -> None:
    assert kinds_values("build a1b2c3d done") == []
    assert kinds_values("commit deadbee") == []
    assert kinds_values("commit a1b2c3d") == [("hex", "a1b2c3d")]


def test_non_string_and_empty_text_give_no_spans() -> None:
    assert detect_volatile("") == []
    assert detect_volatile(None) == []  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# user patterns and named values


def test_user_patterns_group_semantics_and_priority() -> None:
    config = CanonicalConfig(
        patterns={
            "build": r"build #(\d+)",
            "ticket": r"(?P<value>[A-Z]+-\d+)",
            "host": r"host-[a-z0-9]+",
            "stamp": r"T\d{4}",
        }
    )
    text = "build #42 for ABC-123 on host-x1 at 2026-03-17T1405"
    assert kinds_values(text, config) == [
        ("build", "42"),
        ("ticket", "ABC-123"),
        ("host", "host-x1"),
        ("date", "2026-03-17"),
        ("stamp", "T1405"),
    ]


def test_named_values_win_and_respect_word_edges() -> None:
    config = CanonicalConfig(named_values={"user_id": "u-123", "team": "blue team"})
    text = "user u-123 (not u-1234) of the blue team, session_id=u-123"
    assert kinds_values(text, config) == [
        ("user_id", "u-123"),
        ("team", "blue team"),
        ("user_id", "u-123"),
    ]
    canon = canonicalize_text(text, config)
    assert canon.text == "user {{user_id}} (not u-1234) of the {{team}}, session_id={{user_id}}"
    assert canon.values == {"user_id": "u-123", "team": "blue team"}


# ---------------------------------------------------------------------------------------------
# config validation


@pytest.mark.parametrize(
    "kwargs",
    [
        {"patterns": {"bad": "("}},
        {"patterns": {"empty": "a*"}},
        {"patterns": {"1bad": "x"}},
        {"patterns": {"has space": "x"}},
        {"named_values": {"user": ""}},
        {"named_values": {"a": "v", "b": "v"}},
        {"named_values": {"date": "v"}},
        {"named_values": {"date_1": "v"}},
        {"named_values": {"x": "v"}, "patterns": {"x": "y"}},
        {"enabled_kinds": ["date", "color"]},
        {"placement": "middle"},
        {"refresh": "sometimes"},
        {"cwd": "relative/dir"},
        {"cwd": "/"},
        {"home": "C:\\"},
        {"path_roots": "/tmp/x"},
        {"min_number_digits": 2},
        {"id_keys": ("",)},
        {"id_keys": ("9lives",)},
        {"placeholder_open": ""},
        {"placeholder_open": "{ "},
        {"placeholder_close": "x"},
        {"block_tag": "bad tag"},
        {"block_header": "two\nlines"},
        {"unknown_option": True},
    ],
)
def test_bad_config_raises_value_error(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        CanonicalConfig(**kwargs)


def test_config_accepts_pathlike_and_normalises_roots(tmp_path: Any) -> None:
    config = CanonicalConfig(cwd=tmp_path, path_roots=["/ci/ws/"])
    assert config.cwd == str(tmp_path)
    assert config.path_roots == ("/ci/ws",)
    assert CanonicalConfig.model_fields["refresh"].description  # docstrings are field docs


# ---------------------------------------------------------------------------------------------
# placeholders


def test_placeholders_are_kind_plus_ordinal_and_same_value_same_placeholder() -> None:
    text = "from 2026-03-17 to 2026-03-18, again 2026-03-17, in /home/a/x and /home/b/y"
    canon = canonicalize_text(text)
    assert canon.text == (
        "from {{date_1}} to {{date_2}}, again {{date_1}}, in {{path_1}} and {{path_2}}"
    )
    assert canon.values == {
        "date_1": "2026-03-17",
        "date_2": "2026-03-18",
        "path_1": "/home/a/x",
        "path_2": "/home/b/y",
    }
    assert all(isinstance(s, VolatileSpan) for s in canon.spans)


def test_dedupe_can_be_turned_off() -> None:
    canon = canonicalize_text("a 2026-03-17 b 2026-03-17", CanonicalConfig(dedupe_values=False))
    assert canon.text == "a {{date_1}} b {{date_2}}"


def test_custom_delimiters_and_block() -> None:
    config = CanonicalConfig(
        placeholder_open="<<", placeholder_close=">>", block_tag="env", block_header=""
    )
    assert canonicalize_text("on 2026-03-17", config).text == "on <<date_1>>"
    assert render_block([("date_1", "2026-03-17")], config) == (
        "<env>\n<<date_1>> = 2026-03-17\n</env>"
    )
    assert render_block([], config) == ""
    assert render_block([("x", " two\nlines")]).splitlines()[2] == '{{x}} = " two\\nlines"'


# ---------------------------------------------------------------------------------------------
# the datetime.now() case and cross-thread identity


def thread_prompts(n: int, start: dt.datetime, cwd: str, seed: int) -> list[str]:
    return [
        render_prompt(
            start + dt.timedelta(minutes=17 * i, seconds=7 * i + 1),
            cwd,
            f"s-{seed}-{i:04d}",
            10_000_000 + seed * 1000 + i,
        )
        for i in range(n)
    ]


@pytest.mark.parametrize("refresh", ["maintenance", "never"])
def test_datetime_now_prompt_is_byte_stable_across_a_thread(refresh: str) -> None:
    canon = Canonicalizer(CanonicalConfig(move_when_changed=False, refresh=refresh))  # type: ignore[arg-type]
    state = CanonicalState()
    prompts = thread_prompts(30, dt.datetime(2026, 3, 17, 23, 30), "/home/dev/inventory", 1)
    assert len(set(prompts)) == 30
    history = transcript()
    outputs = []
    for i, prompt in enumerate(prompts):
        history = [*history, Message("user", f"Step {i}.", id=f"step{i}")]
        outputs.append(canon.apply(prompt, history, TOOLS, state))
    systems = {s for s, _, _ in outputs}
    first_users = {m[0].content for _, m, _ in outputs}
    assert len(systems) == 1 and len(first_users) == 1
    system = systems.pop()
    assert system is not None and "{{" in system
    assert "2026" not in system and "/home/dev" not in system and "s-1-" not in system
    assert "Python 3.11.7" in system and "line length at 100" in system
    # The block keeps the first call's values.
    block = str(first_users.pop())
    assert "/home/dev/inventory" in block and "s-1-0000" in block
    assert state.calls == 30 and state.epoch == 0 and state.placement == "first_user"
    # Every request is a prefix-extension of the previous one: its messages start with the
    # previous request's, byte for byte.
    for (_, before, _), (_, after, _) in itertools.pairwise(outputs):
        assert [m.to_dict() for m in after[: len(before)]] == [m.to_dict() for m in before]
    # ... and the model reads each call's current session id, in a note on that call's turn.
    for i, (_, out, _) in enumerate(outputs[1:], start=1):
        assert f"s-1-{i:04d}" in out[-1].text and "<context-update>" in out[-1].text


def test_refresh_always_changes_the_block_but_not_the_system() -> None:
    canon = Canonicalizer(CanonicalConfig(move_when_changed=False, refresh="always"))
    state = CanonicalState()
    prompts = thread_prompts(30, dt.datetime(2026, 3, 17, 9, 0), "/home/dev/inventory", 2)
    outputs = [canon.apply(p, transcript(), TOOLS, state) for p in prompts]
    assert len({s for s, _, _ in outputs}) == 1
    blocks = [m[0].content for _, m, _ in outputs]
    assert len(set(blocks)) == 30
    assert "s-2-0029" in str(blocks[-1])
    assert state.epoch == 29


def test_refresh_at_maintenance_only() -> None:
    canon = Canonicalizer(
        CanonicalConfig(
            move_when_changed=False,
        )
    )
    state = CanonicalState()
    prompts = thread_prompts(3, dt.datetime(2026, 3, 17, 9, 0), "/home/dev/x", 3)
    first = canon.apply(prompts[0], transcript(), TOOLS, state)
    second = canon.apply(prompts[1], transcript(), TOOLS, state)
    assert first[1][0].content == second[1][0].content
    third = canon.apply(prompts[2], transcript(), TOOLS, state, maintenance=True)
    assert third[0] == first[0]
    assert third[1][0].content != first[1][0].content
    assert "s-3-0002" in str(third[1][0].content)
    assert state.epoch == 1
    # Maintenance with unchanged values changes nothing.
    again = canon.apply(prompts[2], transcript(), TOOLS, state, maintenance=True)
    assert again[1][0].content == third[1][0].content and state.epoch == 1


def test_never_refresh_ignores_maintenance() -> None:
    canon = Canonicalizer(CanonicalConfig(move_when_changed=False, refresh="never"))
    state = CanonicalState()
    prompts = thread_prompts(2, dt.datetime(2026, 3, 17, 9, 0), "/home/dev/x", 4)
    first = canon.apply(prompts[0], transcript(), TOOLS, state)
    second = canon.apply(prompts[1], transcript(), TOOLS, state, maintenance=True)
    assert first[1][0].content == second[1][0].content and state.epoch == 0


def test_two_threads_share_the_canonical_system_prompt() -> None:
    canon = Canonicalizer(FIRST_CALL)
    a = thread_prompts(1, dt.datetime(2026, 3, 17, 9, 0), "/home/alice/shop", 5)[0]
    b = thread_prompts(1, dt.datetime(2027, 11, 2, 18, 45), "/Users/bob/work/inventory", 6)[0]
    sa, ma, ta = canon.apply(a, transcript(), TOOLS, CanonicalState())
    sb, mb, tb = canon.apply(b, transcript(), list(reversed(TOOLS)), CanonicalState())
    assert sa == sb and ta == tb
    assert json.dumps(ta) == json.dumps(tb)
    assert ma[0].content != mb[0].content  # the values differ, after the shared prefix


# ---------------------------------------------------------------------------------------------
# new volatile values mid-thread


def test_new_placeholder_mid_thread_refreshes_for_free() -> None:
    canon = Canonicalizer(FIRST_CALL)
    state = CanonicalState()
    base = "Agent. Date: 2026-03-17. Dir: /home/dev/old."
    s1, m1, _ = canon.apply(base, transcript(), TOOLS, state)
    s2, m2, _ = canon.apply(base.replace("17", "18"), transcript(), TOOLS, state)
    assert (s1, m1[0].content) == (s2, m2[0].content)
    # A new path appears *before* the old one: path_1 now names the new value. The system
    # changed anyway (the cache misses from there), so every value is rebound.
    grown = "Agent. Date: 2026-03-19. Extra: /home/dev/new. Dir: /home/dev/old."
    s3, m3, _ = canon.apply(grown, transcript(), TOOLS, state)
    assert s3 != s1
    assert s3 == "Agent. Date: {{date_1}}. Extra: {{path_1}}. Dir: {{path_2}}."
    block = str(m3[0].content)
    assert "{{path_1}} = /home/dev/new" in block and "{{path_2}} = /home/dev/old" in block
    assert "{{date_1}} = 2026-03-19" in block
    assert state.epoch == 1
    # Then stable again.
    s4, m4, _ = canon.apply(grown.replace("19", "20"), transcript(), TOOLS, state)
    assert (s4, m4[0].content) == (s3, m3[0].content)


def test_new_placeholder_mid_thread_with_never_keeps_old_values() -> None:
    canon = Canonicalizer(CanonicalConfig(move_when_changed=False, refresh="never"))
    state = CanonicalState()
    canon.apply("Date: 2026-03-17.", transcript(), TOOLS, state)
    _, m2, _ = canon.apply("Date: 2026-03-18. Dir: /home/dev/x.", transcript(), TOOLS, state)
    block = str(m2[0].content)
    assert "{{date_1}} = 2026-03-17" in block and "{{path_1}} = /home/dev/x" in block
    assert state.values == {"date_1": "2026-03-17", "path_1": "/home/dev/x"}


def test_prefix_change_refresh_can_be_disabled() -> None:
    canon = Canonicalizer(CanonicalConfig(move_when_changed=False, refresh_on_prefix_change=False))
    state = CanonicalState()
    canon.apply("Date: 2026-03-17.", transcript(), TOOLS, state)
    _, m2, _ = canon.apply("Date: 2026-03-18. Dir: /home/dev/x.", transcript(), TOOLS, state)
    assert "{{date_1}} = 2026-03-17" in str(m2[0].content)
    assert "{{path_1}} = /home/dev/x" in str(m2[0].content)


# ---------------------------------------------------------------------------------------------
# placement


def test_first_user_placement_with_text_and_parts() -> None:
    canon = Canonicalizer(FIRST_CALL)
    parts_user = Message("user", (TextPart("look"), ImagePart("https://x/y.png")), id="u1")
    history = [parts_user, Message("assistant", "ok")]
    system, out, _ = canon.apply("Now 2026-03-17 14:05:09.", history, [], CanonicalState())
    assert system == "Now {{datetime_1}}."
    content = out[0].content
    assert isinstance(content, tuple) and len(content) == 3
    assert isinstance(content[0], TextPart) and content[0].text.startswith("<context>\n")
    assert content[1:] == parts_user.content
    assert out[0].id == "u1" and out[1] is history[1]
    # String content: the block, a blank line, then the text.
    _, out2, _ = canon.apply("Now 2026-03-17 14:05:09.", transcript(), [], CanonicalState())
    text = str(out2[0].content)
    assert text.endswith("</context>\n\nPlease fix the failing test.")
    assert "{{datetime_1}} = 2026-03-17 14:05:09" in text


def test_system_tail_placement() -> None:
    canon = Canonicalizer(CanonicalConfig(move_when_changed=False, placement="system_tail"))
    history = transcript()
    system, out, _ = canon.apply("Dir /home/dev/x.", history, [], CanonicalState())
    assert system is not None
    assert system.startswith("Dir {{path_1}}.\n\n<context>\n")
    assert system.endswith("{{path_1}} = /home/dev/x\n</context>")
    assert all(a is b for a, b in zip(out, history, strict=True))


def test_no_user_message_goes_to_system_tail_and_stays_there_until_refresh() -> None:
    canon = Canonicalizer(FIRST_CALL)
    state = CanonicalState()
    s1, out1, _ = canon.apply("Dir /home/dev/x at 2026-03-17.", [], [], state)
    assert s1 is not None and s1.endswith("</context>") and out1 == []
    assert state.placement == "system_tail"
    history = transcript()
    s2, out2, _ = canon.apply("Dir /home/dev/x at 2026-03-18.", history, [], state)
    assert s2 == s1 and all(a is b for a, b in zip(out2[:-1], history[:-1], strict=True))
    assert "{{date_1}} = 2026-03-18" in out2[-1].text  # the current date, after the prefix
    s3, out3, _ = canon.apply(
        "Dir /home/dev/x at 2026-03-18.", history, [], state, maintenance=True
    )
    assert state.placement == "first_user"
    assert s3 == "Dir {{path_1}} at {{date_1}}."
    assert str(out3[0].content).startswith("<context>")


def test_leading_system_messages_are_canonicalized_and_hold_the_tail() -> None:
    history = [Message("system", "Dir /home/dev/x.", id="s0"), *transcript()]
    canon = Canonicalizer(CanonicalConfig(move_when_changed=False, placement="system_tail"))
    system, out, _ = canon.apply(None, history, [], CanonicalState())
    assert system is None
    assert str(out[0].content).startswith("Dir {{path_1}}.\n\n<context>")
    assert out[0].id == "s0" and all(a is b for a, b in zip(out[1:], history[1:], strict=True))
    off = Canonicalizer(CanonicalConfig(move_when_changed=False, leading_system_messages=False))
    system2, out2, _ = off.apply(None, history, [], CanonicalState())
    assert system2 is None and all(a is b for a, b in zip(out2, history, strict=True))


def test_block_is_not_prepended_twice() -> None:
    canon = Canonicalizer(FIRST_CALL)
    state = CanonicalState()
    _, out, _ = canon.apply("Dir /home/dev/x.", transcript(), [], state)
    again_in = [out[0], *transcript()[1:]]
    _, again, _ = canon.apply("Dir /home/dev/x.", again_in, [], state)
    assert again[0] is out[0]


# ---------------------------------------------------------------------------------------------
# tools


def test_order_tools_handles_all_shapes() -> None:
    tools = [
        {"name": "zeta"},
        {"type": "function", "function": {"name": "alpha"}},
        {"name": "mid", "input_schema": {}},
        {"type": "web_search"},
    ]
    assert [tool_name(t) for t in order_tools(tools)] == ["alpha", "mid", "web_search", "zeta"]
    assert order_tools(tools)[0] is tools[1]
    assert order_tools(list(reversed(tools))) == order_tools(tools)


def test_canonical_tool_keys_sorted_and_lists_kept() -> None:
    tool = TOOLS[0]
    out = canonicalize_tool(tool)
    assert list(out) == ["function", "type"]
    params = out["function"]["parameters"]
    assert list(params) == ["properties", "required", "type"]
    assert list(params["properties"]) == ["limit", "path"]
    assert params["required"] == ["path", "limit"]
    assert json.dumps(out, separators=(",", ":"), ensure_ascii=False) == canonical_json(tool)
    assert canonical_json({"b": (1, 2), "a": {"d": 1, "c": 2}}) == '{"a":{"c":2,"d":1},"b":[1,2]}'


def test_apply_sorts_tools_and_reuses_tool_objects() -> None:
    canon = Canonicalizer(FIRST_CALL)
    state = CanonicalState()
    _, _, t1 = canon.apply("x", transcript(), TOOLS, state)
    _, _, t2 = canon.apply("x", transcript(), copy.deepcopy(TOOLS), state)
    assert [tool_name(t) for t in t1] == ["bash", "grep", "read_file"]
    assert t1 is not t2 and all(a is b for a, b in zip(t1, t2, strict=True))
    unsorted = Canonicalizer(
        CanonicalConfig(move_when_changed=False, sort_tools=False, canonical_tool_keys=False)
    )
    _, _, t3 = unsorted.apply("x", transcript(), TOOLS, CanonicalState())
    assert [tool_name(t) for t in t3] == ["read_file", "bash", "grep"]
    assert list(t3[0]) == list(TOOLS[0])


def test_tool_fingerprint_and_tool_set_change() -> None:
    assert tool_fingerprint(TOOLS) != tool_fingerprint(list(reversed(TOOLS)))
    assert tool_fingerprint(TOOLS, ordered=False) == tool_fingerprint(
        list(reversed(TOOLS)), ordered=False
    )
    assert len(tool_fingerprint(TOOLS)) == 16
    canon = Canonicalizer(FIRST_CALL)
    state = CanonicalState()
    canon.apply("x", transcript(), TOOLS, state)
    canon.apply("x", transcript(), list(reversed(TOOLS)), state)
    assert state.tool_changes == 0
    canon.apply("x", transcript(), TOOLS[:2], state)
    assert state.tool_changes == 1
    assert state.tool_fingerprint == tool_fingerprint(order_tools(TOOLS[:2]))


def test_tool_descriptions_optionally_canonicalized() -> None:
    tools = [{"name": "fs", "description": "Files under /home/dev/x only."}]
    plain = Canonicalizer(FIRST_CALL)
    _, _, t1 = plain.apply("Dir /home/dev/x", transcript(), tools, CanonicalState())
    assert t1[0]["description"] == "Files under /home/dev/x only."
    canon = Canonicalizer(
        CanonicalConfig(move_when_changed=False, canonicalize_tool_descriptions=True)
    )
    s2, m2, t2 = canon.apply("Dir /home/dev/x", transcript(), tools, CanonicalState())
    assert t2[0]["description"] == "Files under {{path_1}} only."
    assert s2 == "Dir {{path_1}}"
    assert str(m2[0].content).count("/home/dev/x") == 1
    assert tools[0]["description"] == "Files under /home/dev/x only."


# ---------------------------------------------------------------------------------------------
# state, purity, identity, robustness


def test_state_json_round_trip() -> None:
    canon = Canonicalizer(FIRST_CALL)
    state = CanonicalState()
    prompt = thread_prompts(1, dt.datetime(2026, 3, 17, 9, 0), "/home/dev/x", 7)[0]
    canon.apply(prompt, transcript(), TOOLS, state)
    restored = CanonicalState.model_validate_json(state.model_dump_json())
    assert restored == state
    assert list(restored.values) == list(state.values)
    assert restored.block_emitted and restored.ordinals["path"] == 2
    assert restored.by_value["/home/dev/x"] == "path_1"
    later = thread_prompts(2, dt.datetime(2026, 3, 17, 9, 0), "/home/dev/x", 7)[1]
    assert canon.apply(later, transcript(), TOOLS, restored) == canon.apply(
        later, transcript(), TOOLS, state
    )
    assert CanonicalState.model_validate({"values": {}, "future_field": 1}).values == {}


def test_inputs_never_mutated_and_unchanged_messages_are_the_same_objects() -> None:
    history = transcript()
    tools = copy.deepcopy(TOOLS)
    snapshot_tools = copy.deepcopy(tools)
    snapshot_history = [m.to_dict() for m in history]
    prompt = "Dir /home/dev/x, now 2026-03-17 14:05:09."
    system, out, out_tools = Canonicalizer(FIRST_CALL).apply(
        prompt, history, tools, CanonicalState()
    )
    assert tools == snapshot_tools and [m.to_dict() for m in history] == snapshot_history
    assert out is not history and out[0] is not history[0]
    assert out[0].id == history[0].id
    assert all(a is b for a, b in zip(out[1:], history[1:], strict=True))
    assert out_tools == [canonicalize_tool(t) for t in order_tools(tools)]
    out_tools[0]["name"] = "mutated"
    assert tools == snapshot_tools
    assert system == "Dir {{path_1}}, now {{datetime_1}}."


def test_nothing_volatile_means_nothing_changes() -> None:
    history = transcript()
    system, out, _ = Canonicalizer(FIRST_CALL).apply("Be nice.", history, [], CanonicalState())
    assert system == "Be nice."
    assert all(a is b for a, b in zip(out, history, strict=True))
    system2, out2, _ = Canonicalizer(FIRST_CALL).apply(None, history, [], CanonicalState())
    assert system2 is None and all(a is b for a, b in zip(out2, history, strict=True))


def test_transcript_is_not_canonicalized() -> None:
    history = transcript()
    _, out, _ = Canonicalizer(FIRST_CALL).apply("Dir /home/dev/x.", history, [], CanonicalState())
    assert out[2] is history[2] and "2026-03-17 14:05:09" in str(out[2].content)
    assert out[3] is history[3]


def test_failure_passes_the_request_through(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    canon = Canonicalizer(FIRST_CALL)

    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("detector exploded")

    monkeypatch.setattr(canon, "_apply", boom)
    history = transcript()
    with caplog.at_level(logging.WARNING):
        system, out, tools = canon.apply("Dir /home/dev/x.", history, TOOLS, CanonicalState())
    assert system == "Dir /home/dev/x." and out == history and tools == TOOLS
    assert "canonicalization failed" in caplog.text


def test_info_logs_carry_no_payload(caplog: pytest.LogCaptureFixture) -> None:
    canon = Canonicalizer(FIRST_CALL)
    state = CanonicalState()
    with caplog.at_level(logging.INFO, logger="cachepilot.canonical"):
        canon.apply("Secret dir /home/dev/secret-project.", transcript(), TOOLS, state)
        canon.apply("Secret dir /home/dev/secret-project.", transcript(), TOOLS[:1], state)
    assert "tool set changed" in caplog.text
    assert "secret" not in caplog.text.lower()


# ---------------------------------------------------------------------------------------------
# properties


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(
        st.text(),
        st.text(alphabet="0123456789abcdefABCDEF:-/.T Z+,\n\\_=\"' PMAMonTueMarUTC"),
        st.lists(
            st.sampled_from(
                [
                    "2026-03-17",
                    "T14:05:09",
                    " ",
                    "Tuesday",
                    ", ",
                    "Mar 17",
                    "/home/a/",
                    "session_id=",
                    "commit ",
                    "a1b2c3d",
                    "1773756309",
                    "550e8400-e29b-41d4-a716-446655440000",
                    " PM",
                    "\n",
                    "C:\\Users\\x",
                    "0x",
                    "UTC",
                    "-",
                    ":",
                ]
            ),
            max_size=20,
        ).map("".join),
    )
)
def test_detect_volatile_spans_are_valid(text: str) -> None:
    config = CanonicalConfig(patterns={"p": r"[A-Z]{3}\d"}, named_values={"n": "a1"})
    for cfg in (None, config):
        spans = detect_volatile(text, cfg)
        previous_end = 0
        for span in spans:
            assert 0 <= span.start < span.end <= len(text)
            assert span.start >= previous_end
            assert text[span.start : span.end] == span.value
            assert span.kind in KINDS or span.kind in ("p", "n")
            previous_end = span.end
        assert detect_volatile(text, cfg) == spans


@settings(max_examples=100)
@given(st.text(max_size=300), st.booleans(), st.sampled_from(["maintenance", "never", "always"]))
def test_apply_is_deterministic(system: str, maintenance: bool, refresh: str) -> None:
    config = CanonicalConfig(refresh=refresh)  # type: ignore[arg-type]
    history = transcript()
    results = []
    for _ in range(2):
        state = CanonicalState()
        first = Canonicalizer(config).apply(system, history, TOOLS, state)
        second = Canonicalizer(config).apply(system, history, TOOLS, state, maintenance=maintenance)
        results.append((first, second, state.model_dump_json()))
    assert results[0] == results[1]


_SAFE_PROSE = [
    "You are a careful coding agent.",
    "Follow the user's instructions and keep answers short.",
    "Use Python 3.11.7 with ruff 0.6.9.",
    "Never push to main without review.",
    "Tests live under tests/ and run with pytest -q.",
    "May the tools serve you well on Monday or any day.",
]


def _slot_values() -> dict[str, st.SearchStrategy[str]]:
    moments = st.datetimes(min_value=dt.datetime(2000, 1, 1), max_value=dt.datetime(2099, 12, 31))
    word = st.from_regex(r"[a-z][a-z0-9]{2,8}", fullmatch=True)
    return {
        "iso": moments.map(lambda d: d.isoformat(timespec="seconds")),
        "phrase": moments.map(lambda d: f"{d:%A, %B} {d.day}, {d.year}"),
        "clock": moments.map(lambda d: f"{d:%H:%M:%S} UTC"),
        "uuid": st.uuids().map(str),
        "sha": st.binary(min_size=20, max_size=20)
        .map(bytes.hex)
        .filter(lambda h: any(c.isdigit() for c in h) and any(c.isalpha() for c in h)),
        "epoch": st.integers(10**9, 10**10 - 1).map(str),
        "path": st.tuples(word, word).map(lambda p: f"/home/{p[0]}/{p[1]}"),
        "session": word.filter(lambda w: w not in {"none", "null", "nil", "true", "false"}).map(
            lambda w: f"session_id={w}"
        ),
    }


@st.composite
def _template_and_fills(draw: st.DrawFn) -> tuple[list[str], list[list[str]]]:
    slots = _slot_values()
    pieces = draw(st.lists(st.sampled_from([*_SAFE_PROSE, *(f"<{k}>" for k in slots)]), min_size=1))
    fills: list[list[str]] = []
    for _ in range(2):
        lines = []
        for piece in pieces:
            if piece.startswith("<"):
                lines.append(f"Value: {draw(slots[piece[1:-1]])}")
            else:
                lines.append(piece)
        fills.append(lines)
    return pieces, fills


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(_template_and_fills())
def test_replacing_values_keeps_the_canonical_system(
    case: tuple[list[str], list[list[str]]],
) -> None:
    pieces, fills = case
    n_slots = sum(p.startswith("<") for p in pieces)
    texts = ["\n".join(lines) for lines in fills]
    for lines in fills:
        values = [line for line in lines if line.startswith("Value: ")]
        assume(len(set(values)) == len(values))  # distinct values (same value: same placeholder)
    canon = Canonicalizer(FIRST_CALL)
    outputs = [canon.apply(text, [], [], CanonicalState())[0] for text in texts]
    spans = [detect_volatile(text) for text in texts]
    assert [len(s) for s in spans] == [n_slots, n_slots]
    # The canonical system, without the block (system tail here: no user message).
    stable = [o.split("\n\n<context>")[0] if o else o for o in outputs]
    assert stable[0] == stable[1]
    assert [s.kind for s in spans[0]] == [s.kind for s in spans[1]]
