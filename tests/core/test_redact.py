"""Credential shapes never appear in text cachepilot writes itself: reduced previews, stubs,
fold summaries and resume blocks, memory, model-compressed outputs, state and log lines.
The archived originals keep them, byte-identical, for `recall` in the same thread."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap

import pytest

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.diagnose.breaks import explain
from cachepilot.fold import ResumeBlockSummarizer, plan_fold
from cachepilot.maintenance.policy import MaintenanceConfig, stub_text
from cachepilot.memory import SessionMemory
from cachepilot.messages import Message, ToolCall
from cachepilot.reduce import Pipeline
from cachepilot.reduce.pipeline import REDACT_STEP
from cachepilot.sim import Request
from cachepilot.support.redact import (
    MARKER_PREFIX,
    RedactingFilter,
    contains_secret,
    redact,
    redact_slice,
)

# Built at run time: no credential-shaped literal sits in the repository.
OPENAI = "sk-proj-" + "Ab3dEf9hIjK1mNoPqR5tUvWxYz" * 3 + "_-Q7"
OPENAI_LEGACY = "sk-" + "T3BlbkFJ" * 6
ANTHROPIC = "sk-ant-api03-" + "Zx9_Yw8-Vu7" * 8
AWS_ID = "AKIA" + "IOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYEXAMPLEKEY"
GITHUB = "ghp_" + "a1B2c3D4e5F6g7H8i9J0" * 2
GITHUB_PAT = "github_pat_" + "11ABCDEFG0" + "x7Y8z9" * 8
SLACK = "xoxb-" + "123456789012-1234567890123-" + "AbCdEfGhIjKl" * 2
GOOGLE = "AIza" + "SyA-1234567890abcdefghijklmnopqrstu"
JWT = ".".join(
    ["eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9", "eyJzdWIiOiIxMjM0NTY3ODkwIn0", "dozjgNryP4J3jVmNHl0w"]
)
PEM = (
    "-----BEGIN RSA "
    + "PRIVATE KEY-----\nMIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6\n"
    "ffAt0gunVTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxKLxoS2tFczGkP\n"
    "-----END RSA " + "PRIVATE KEY-----"
)
BEARER_VALUE = "tok_" + "9f8e7d6c5b4a" * 2
DB_PASSWORD = "Hunter2-" + "correct-horse"
URL_PASSWORD = "S3cretPw" + "0rd"

SECRETS = {
    "openai": OPENAI,
    "openai-legacy": OPENAI_LEGACY,
    "anthropic": ANTHROPIC,
    "aws-id": AWS_ID,
    "aws-secret": AWS_SECRET,
    "github": GITHUB,
    "github-pat": GITHUB_PAT,
    "slack": SLACK,
    "google": GOOGLE,
    "jwt": JWT,
    "pem-body": "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6",
    "bearer": BEARER_VALUE,
    "db-password": DB_PASSWORD,
    "url-password": URL_PASSWORD,
}
"""What must never appear (for the PEM block: a line of its body)."""

ENV_FILE = "\n".join(
    [
        f"OPENAI_API_KEY={OPENAI}",
        f"LEGACY_KEY={OPENAI_LEGACY}",
        f"ANTHROPIC_API_KEY={ANTHROPIC}",
        f"aws_access_key_id = {AWS_ID}",
        f"aws_secret_access_key = {AWS_SECRET}",
        f"GITHUB_TOKEN={GITHUB}",
        f"GH_PAT={GITHUB_PAT}",
        f"SLACK_BOT={SLACK}",
        f"MAPS={GOOGLE}",
        f"SESSION_JWT={JWT}",
        f"DB_PASSWORD={DB_PASSWORD}",
        f"DATABASE_URL=postgres://app:{URL_PASSWORD}@db.internal:5432/app",
        PEM,
    ]
)


def _leaks(text: str) -> list[str]:
    return [name for name, secret in SECRETS.items() if secret in text]


# --- the patterns ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        (f"key {OPENAI} end", "openai-key"),
        (f"x={OPENAI_LEGACY}", "openai-key"),
        (ANTHROPIC, "anthropic-key"),
        (f"id {AWS_ID}.", "aws-access-key-id"),
        (f'"SecretAccessKey": "{AWS_SECRET}"', "aws-secret-key"),
        (f"aws_secret_access_key={AWS_SECRET}", "aws-secret-key"),
        (GITHUB, "github-token"),
        (GITHUB_PAT, "github-token"),
        (SLACK, "slack-token"),
        (GOOGLE, "google-api-key"),
        (f"token: {JWT}", "jwt"),
        (PEM, "private-key"),
        (f"Authorization: Bearer {BEARER_VALUE}", "bearer-token"),
        ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "basic-auth"),
        (f"DB_PASSWORD={DB_PASSWORD}", "password"),
        ('{"client_secret": "abc123def"}', "secret"),
        (f"redis://:{URL_PASSWORD}@cache:6379", "url-password"),
        ("sk_live_" + "0123456789abcdefABCDEF", "stripe-key"),
        ("hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz012345", "huggingface-token"),
    ],
)
def test_each_shape_is_replaced_by_its_marker(text: str, kind: str) -> None:
    out = redact(text)
    assert f"{MARKER_PREFIX}{kind}]" in out, out
    assert _leaks(out) == []
    assert redact(out) == out  # idempotent
    assert contains_secret(text) and not contains_secret(out)


def test_keys_and_quotes_around_a_value_stay() -> None:
    assert redact(f"export DB_PASSWORD={DB_PASSWORD}") == "export DB_PASSWORD=[redacted:password]"
    assert redact("api_key: 'abc123def'") == "api_key: '[redacted:secret]'"
    assert redact(f"postgres://app:{URL_PASSWORD}@db:5432/x") == (
        "postgres://app:[redacted:url-password]@db:5432/x"
    )


@pytest.mark.parametrize(
    "text",
    [
        "see https://example.com:8080/path?q=1 and http://host:5000/",
        "max_tokens=100 tokens: 512 token=abc passwords are hashed",
        "password: true, secret: null, api_key: none",
        "git checkout task-1234-fix-the-login-flow; desk-lamp; sk-short",
        "sha256 9f2c41d07a1b9f2c41d07a1b9f2c41d07a1b9f2c41d07a1b9f2c41d07a1b9f2c",
        'recall(ref="9f2c41d07a1b") [output reduced 48,213 → 1,020 chars]',
        "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
        # code that names credentials without holding one
        "client = OpenAI(api_key=api_key)\ndef login(password: str, secret: bytes) -> None:",
        "csrf_secret = _unsalt_cipher_token(request.META)\nsecret_key_base: ...",
        "API_KEY = os.environ.get('API_KEY')\npassword=settings.DB_PASSWORD",
    ],
)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert redact(text) is text


def test_a_truncated_key_block_is_still_redacted_and_the_text_after_it_kept() -> None:
    preview = (
        PEM.split("\n", maxsplit=1)[0]
        + "\nMIIEowIBAAKCAQEAu1SU1Lf\n[… lines 3-40 of 50 omitted …]\ntail"
    )
    out = redact(preview)
    assert out.startswith("[redacted:private-key]") and out.endswith("omitted …]\ntail")


def test_adversarial_inputs_finish(tmp_path: object) -> None:
    """Every pattern is linear: megabyte-sized worst cases run in a child with a hard limit."""
    code = textwrap.dedent(
        """
        from cachepilot.support.redact import redact
        n = 400_000
        cases = ["sk-" * n, "eyJ" * n, "a" * 3 * n, "-----BEGIN PRIVATE KEY-----" * (n // 8),
                 "password=" * (n // 3), "://a:" * n, "AKIA" * n, "bearer " * n,
                 "Authorization: Basic " * (n // 7), "ghp_" * n, "xoxb-" * n, "x" * n + "=" * n,
                 "api_key=" + "[" * n, "api_key=" + "a" * n, "secret: a" * n, "-" * 3 * n]
        for case in cases:
            redact(case)
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_the_logging_filter_redacts_messages_and_tracebacks() -> None:
    record = logging.LogRecord("x", logging.WARNING, __file__, 1, "key %s", (OPENAI,), None)
    try:
        raise RuntimeError(f"upstream said {GITHUB}")
    except RuntimeError:
        record.exc_info = sys.exc_info()
    assert RedactingFilter().filter(record)
    formatted = logging.Formatter().format(record)
    assert _leaks(formatted) == [] and "[redacted:openai-key]" in formatted


# --- where cachepilot writes text ----------------------------------------------------------------


def test_reduced_previews_are_redacted_and_the_original_archived_whole() -> None:
    pilot = CachePilot(Config(), store=InMemoryArtifactStore())
    noisy = "\n".join(f"line {i}: ok" for i in range(4_000))
    output = f"{ENV_FILE}\n{noisy}\n{ENV_FILE}\n"
    report = pilot.ingest_report("bash", {"command": "cat .env; ./run"}, output, "c1", "t1")
    assert report.ref is not None and report.steps[0] != REDACT_STEP  # a real reduction ran
    assert REDACT_STEP in report.steps
    assert _leaks(report.text) == [] and "[redacted:openai-key]" in report.text
    # nothing is lost: the archive holds the original, served only in its own thread
    artifact = pilot.store.get("t1", report.ref)
    assert artifact is not None and artifact.text == output
    assert OPENAI in pilot.recall(report.ref, grep="OPENAI_API_KEY", thread="t1")
    assert OPENAI not in pilot.recall(report.ref, grep="OPENAI_API_KEY", thread="t2")


def test_an_output_passed_through_unchanged_is_the_tools_own_text() -> None:
    pilot = CachePilot(Config(), store=InMemoryArtifactStore())
    short = f"OPENAI_API_KEY={OPENAI}"
    report = pilot.ingest_report("bash", {"command": "cat .env"}, short, "c1", "t1")
    assert report.text == short and report.ref is None  # not cachepilot's text: left alone


def test_the_pipeline_redacts_every_text_it_changes() -> None:
    # a lossless cleanup alone makes the text cachepilot's: redacted, and recorded as lossy
    reduction = Pipeline().run("bash", {}, "c1", f"\x1b[31m{ENV_FILE}\x1b[0m")
    assert reduction.lossy and reduction.ref is not None
    assert reduction.steps[-1].pass_name == REDACT_STEP and not reduction.steps[-1].lossless
    assert _leaks(reduction.text) == []


def _secret_session() -> tuple[str, list[Message]]:
    system = "You are a coding agent."
    messages = [Message("user", f"Deploy the app; the staging key is {OPENAI}.")]
    for n in range(8):
        command = f'curl -H "Authorization: Bearer {BEARER_VALUE}" https://api.internal/{n}'
        args = json.dumps({"command": command if n % 2 else "cat .env"})
        messages.append(
            Message("assistant", f"step {n}", tool_calls=(ToolCall(f"c{n}", "bash", args),))
        )
        body = ENV_FILE if n % 2 == 0 else f"Error: auth failed for {AWS_ID} key {GITHUB}"
        output = "\n".join([body, *(f"log {n}.{i} value={i * 7}" for i in range(400)), body])
        messages.append(Message("tool", output, tool_call_id=f"c{n}", name="bash"))
    messages.append(Message("assistant", f"Done; I used {ANTHROPIC} and {SLACK}."))
    return system, messages


def test_no_credential_in_anything_ingest_fold_and_memory_produce(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="cachepilot")
    system, session = _secret_session()
    config = Config(
        maintenance=MaintenanceConfig(
            context_window=4_000, fold_protect_tokens=500, protect_tool_tokens=500
        )
    )
    pilot = CachePilot(config, store=InMemoryArtifactStore())
    transcript: list[Message] = []
    written: list[str] = []
    for original in session:
        message = original
        if message.role == "tool":
            text = pilot.ingest("bash", {}, message.text, message.tool_call_id or "", "t1")
            if text != message.text:  # an output passed through unchanged is the tool's own
                written.append(text)
            message = Message("tool", text, tool_call_id=message.tool_call_id, name="bash")
        if message.role == "assistant":
            pilot.prepare(system, transcript, thread="t1")
        transcript.append(message)
    state = pilot.state("t1")
    folds = [e for ep in state.plan.epochs for e in ep.edits if e.kind == "fold"]
    assert folds, "the small window must force a fold"
    written += [e.text for ep in state.plan.epochs for e in ep.edits]
    written.append(json.dumps(pilot.export_state("t1")))
    _, view, _ = pilot.prepare(system, transcript, thread="t1", maintain=False)
    sent = {m.text for m in transcript}
    rewritten = [m.text for m in view if m.text not in sent]  # stubs and fold summaries
    assert rewritten
    written += rewritten
    # the zero-LLM resume block of the whole session, at every budget
    memory = SessionMemory.from_messages(session)
    written += [memory.resume_block(budget) for budget in (100, 300, 600, None)]
    written += [r.getMessage() for r in caplog.records]
    leaks = {name for text in written for name in _leaks(text)}
    assert leaks == set()
    assert any(MARKER_PREFIX in text for text in written)
    # folds archived the messages they replaced as they were, credentials included (a fold
    # a later one replaced may have left the plan, never the archive)
    assert all(fold.ref is not None for fold in folds)
    archived = [pilot.store.get("t1", info.ref) for info in pilot.store.list("t1")]
    assert any(
        a is not None and a.meta.get("epoch") is not None and OPENAI in a.text for a in archived
    )


class Parrot:
    """A summarizer model that copies the secrets it was shown (the worst case)."""

    mode = "standalone"

    def summarize(self, request: object) -> str:
        return (
            f"## Goal\nDeploy with {OPENAI}\naws_secret_access_key={AWS_SECRET}\n"
            f"password={DB_PASSWORD}"
        )

    async def asummarize(self, request: object) -> str:
        return self.summarize(request)


def test_a_model_written_summary_is_redacted_too() -> None:
    _, session = _secret_session()
    store = InMemoryArtifactStore()
    edit = plan_fold(
        session, store=store, thread="t", summarizer=Parrot(), protect_tail_tokens=200,
        min_tokens=0,
    )  # fmt: skip
    assert edit is not None and _leaks(edit.text) == []
    assert "[redacted:openai-key]" in edit.text and "password=[redacted:password]" in edit.text
    fallback = ResumeBlockSummarizer(budget_tokens=300)
    zero = plan_fold(
        session, store=store, thread="t", summarizer=fallback, protect_tail_tokens=200,
        min_tokens=0,
    )  # fmt: skip
    assert zero is not None and _leaks(zero.text) == []


def test_stub_reasons_from_a_model_are_redacted() -> None:
    message = Message("tool", "x", tool_call_id="c1", name="bash")
    stub = stub_text("evict", message, 900, "9f2c41d07a1b", f"done; used {OPENAI}")
    assert OPENAI not in stub and "[redacted:openai-key]" in stub


def test_a_slice_hides_credentials_cut_by_its_edges() -> None:
    text = f"config: OPENAI_API_KEY={OPENAI} then password: '{DB_PASSWORD}' end"
    at = text.index(OPENAI) + 10
    for start, end in [(0, at), (at, at + 30), (at, len(text)), (0, len(text))]:
        piece = redact_slice(text, start, end)
        assert _leaks(piece) == [] and OPENAI[12:30] not in piece
    assert redact_slice(text, 0, len(text)) == redact(text)


def test_explain_snippets_never_show_a_credential() -> None:
    rules = "\n".join(f"Rule {i}: run the tests of module {i}." for i in range(200))
    old = f"{rules}\nUse the key {OPENAI} for staging."
    new = old.replace(OPENAI, OPENAI[:-6] + "ZZZZZZ")  # a rotated key
    history = [Message("user", "Deploy.")]
    why = explain(Request(system=old, messages=history), Request(system=new, messages=history))
    assert why.is_break and why.divergence is not None
    shown = why.describe() + json.dumps(why.to_dict())
    assert OPENAI[8:40] not in shown and "[redacted:openai-key]" in shown


def test_case_insensitive_rules_survive_letters_that_lowering_lengthens() -> None:
    # "İ".lower() is two characters: the lower-cased text no longer lines up with the text
    text = f"İstanbul BEARER {BEARER_VALUE} İ Password={DB_PASSWORD} İ"
    out = redact(text)
    assert out == "İstanbul BEARER [redacted:bearer-token] İ Password=[redacted:password] İ"
    assert redact_slice(text, 0, len(text)) == out
