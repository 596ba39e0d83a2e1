"""Guideline optimization: input format, pairing, scoring, the loop and the CLI (recorded)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import openai
import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel

from cachepilot.cli import main
from cachepilot.compress import (
    OptimizeConfig,
    Trajectory,
    load_guideline,
    load_trajectories,
    optimize_guideline,
    pair_trajectories,
)
from cachepilot.compress.guideline import DEFAULT_OBSERVATION_GUIDELINE
from cachepilot.compress.optimize import Evaluation, FactRetentionEvaluator, parse_trajectory
from cachepilot.messages import Message, ToolCall

ENV_RULE = "- Keep environment variables (NAME=value lines) verbatim."
BANNER_RULE = "- Drop banners and separator lines."


def _env_dump(secret: str) -> str:
    lines = ["=== environment report ===", "=" * 40]
    lines += [f"step {i}: loaded module part_{i} ok" for i in range(120)]
    lines.insert(60, f"DATABASE_NAME={secret}")
    lines += ["=" * 40, "=== end of report ==="]
    return "\n".join(lines)


def _run(task: str, secret: str, variant: str, success: bool, split: str) -> dict[str, Any]:
    output = _env_dump(secret)
    if variant == "compressed":
        output = "=== environment report ===\n[… 124 lines omitted …]"
    call = ToolCall(id="c1", name="bash", arguments='{"command": "env-report"}')
    use = ToolCall(id="c2", name="psql", arguments=json.dumps({"database": secret}))
    messages = [
        Message(role="system", content="You are an ops agent."),
        Message(role="user", content=f"Task {task}: migrate the database."),
        Message(role="assistant", content="Checking the environment.", tool_calls=(call,)),
        Message(role="tool", content=output, tool_call_id="c1", name="bash"),
        Message(role="assistant", content="Connecting.", tool_calls=(use,)),
        Message(role="tool", content="connected", tool_call_id="c2", name="psql"),
        Message(role="assistant", content="Done."),
    ]
    return {
        "task_id": task,
        "variant": variant,
        "success": success,
        "split": split,
        "environment": "ops",
        "messages": [m.to_dict() for m in messages],
    }


def _rows() -> list[dict[str, Any]]:
    return [
        # contrastive: the compressed run lost DATABASE_NAME and failed
        _run("t1", "orders_prod_replica", "full", True, "train"),
        _run("t1", "orders_prod_replica", "compressed", False, "train"),
        # a successful compressed run (the compression step reads it)
        _run("t2", "billing_main_db", "full", True, "train"),
        {**_run("t2", "billing_main_db", "full", True, "train"), "variant": "compressed"},
        # held out: scores candidates
        _run("t3", "inventory_shadow_db", "full", True, "heldout"),
        _run("t3", "inventory_shadow_db", "compressed", False, "heldout"),
    ]


def _write(tmp_path: Path, rows: list[dict[str, Any]]) -> Path:
    path = tmp_path / "runs.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n", encoding="utf-8")
    return path


def _guideline_in(text: str) -> str:
    found = re.search(r"<guideline>\n(.*?)\n</guideline>", text, re.DOTALL)
    assert found is not None
    return found.group(1)


def respond(body: dict[str, Any]) -> str:
    """The scripted optimizer and compressor behind the stub endpoint."""
    system = body["messages"][0]["content"]
    prompt = body["messages"][-1]["content"]
    if system.startswith("You compress the output of a tool call"):
        output = re.search(r"<tool-output chars=\d+>\n(.*)\n</tool-output>", prompt, re.DOTALL)
        assert output is not None
        keep: list[str] = []
        for i, line in enumerate(output.group(1).splitlines()):
            banner = line.startswith("=") and "Drop banners" not in system
            variable = "environment variables" in system and re.match(r"^[A-Z_]+=", line)
            if i == 0 or banner or variable:
                keep.append(line)
        return "\n".join(keep)
    assert system.startswith("You improve the guideline")
    if "<full-context-run" in prompt:
        return ENV_RULE
    if '<compressed-context-run outcome="success">' in prompt:
        return BANNER_RULE
    current = _guideline_in(prompt)
    if "never used" in prompt:  # compression-step candidates
        return f"{current}\n{BANNER_RULE}"
    if "(candidate 1 of" in prompt:
        return f"{current}\n{ENV_RULE}"
    return f"{current}\n- Keep the first line."


# --- input format ------------------------------------------------------------------------


def test_load_and_pair(tmp_path: Path) -> None:
    runs = load_trajectories(_write(tmp_path, _rows()))
    assert len(runs) == 6 and runs[0].environment == "ops"
    assert runs[0].messages[3].name == "bash"
    pairs = pair_trajectories(runs)
    assert [p.task_id for p in pairs] == ["t1", "t2", "t3"]
    assert [p.split for p in pairs] == ["train", "train", "heldout"]
    assert [p.contrastive for p in pairs] == [True, False, True]


def test_openai_shaped_messages_are_accepted() -> None:
    run = parse_trajectory(
        {
            "task_id": 7,
            "variant": "full",
            "success": False,
            "messages": [
                {"role": "user", "content": "go"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "x",
                            "type": "function",
                            "function": {"name": "ls", "arguments": "{}"},
                        }
                    ],
                },
                {"role": "tool", "content": "a.py", "tool_call_id": "x"},
            ],
        }
    )
    assert run.task_id == "7" and run.messages[1].tool_calls[0].name == "ls"


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ('{"variant": "full", "success": true, "messages": [{"role": "user"}]}', "task_id"),
        ('{"task_id": "a", "variant": "half", "success": true, "messages": []}', "variant"),
        ('{"task_id": "a", "variant": "full", "success": "yes", "messages": []}', "success"),
        ('{"task_id": "a", "variant": "full", "success": true, "messages": []}', "messages"),
        ('{"task_id": "a", "variant": "full", "success": true, "messages": [{"role": "x"}]}', ""),
        ("not json", ""),
    ],
)
def test_bad_lines_name_file_and_line(tmp_path: Path, line: str, error: str) -> None:
    path = tmp_path / "bad.jsonl"
    good = json.dumps(_rows()[0])
    path.write_text(f"{good}\n{line}\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"bad.jsonl:2: .*{error}"):
        load_trajectories(path)


def test_hash_split_is_stable_and_never_one_sided() -> None:
    rows = [r for r in _rows() if r["task_id"] != "t3"]
    runs = [parse_trajectory({**r, "split": None}) for r in rows]
    first = pair_trajectories(runs, heldout_fraction=0.3)
    assert first == pair_trajectories(runs, heldout_fraction=0.3)
    assert {p.split for p in first} == {"train", "heldout"}
    with pytest.raises(ValueError):
        pair_trajectories(runs, heldout_fraction=1.0)


# --- scoring -----------------------------------------------------------------------------


class ScriptedModel:
    """`complete(system, prompt)` through the same script as the stub endpoint."""

    def __init__(self) -> None:
        self.calls = 0

    def complete(self, system: str | None, prompt: str) -> str:
        self.calls += 1
        return respond(
            {
                "messages": [
                    {"role": "system", "content": system},
                    {"role": "user", "content": prompt},
                ]
            }
        )


def _pairs() -> list[Any]:
    return pair_trajectories([parse_trajectory(r) for r in _rows()])


def test_fact_retention_scores_what_later_calls_use() -> None:
    heldout = [p for p in _pairs() if p.split == "heldout"]
    model = ScriptedModel()
    evaluator = FactRetentionEvaluator(model, heldout, OptimizeConfig(min_output_tokens=100))
    base = evaluator(DEFAULT_OBSERVATION_GUIDELINE)
    better = evaluator(f"{DEFAULT_OBSERVATION_GUIDELINE}\n{ENV_RULE}")
    assert base.probes == 1 and base.retention == 0.0
    assert better.retention == 1.0 and better.score > base.score
    calls = model.calls
    assert evaluator(DEFAULT_OBSERVATION_GUIDELINE) == base and model.calls == calls  # memo


def test_history_target_scores_a_summary() -> None:
    heldout = [p for p in _pairs() if p.split == "heldout"]

    class Summary:
        def complete(self, system: str | None, prompt: str) -> str:
            assert system is not None and "Keep exact values." in system
            return "Variables: inventory_shadow_db" if "exact" in system else "nothing"

    cfg = OptimizeConfig(target="history")
    evaluation = FactRetentionEvaluator(Summary(), heldout, cfg)("Keep exact values.")
    assert evaluation.retention == 1.0 and evaluation.probes == 1


# --- the loop ----------------------------------------------------------------------------


def test_loop_steps_with_a_scripted_model() -> None:
    model = ScriptedModel()
    result = optimize_guideline(
        _pairs(), model, config=OptimizeConfig(min_output_tokens=100, environment="ops")
    )
    text = result.guideline.text
    assert ENV_RULE in text and BANNER_RULE in text  # utility step, then compression step
    assert "Keep the first line" not in text  # the losing candidate was not kept
    assert result.baseline.retention == 0.0 and result.best.retention == 1.0
    assert result.best.ratio < result.baseline.ratio + 0.05
    steps = [s["step"] for s in result.steps]
    assert steps == ["baseline", "utility", "compression"]
    assert result.steps[1]["kept"] and result.steps[2]["kept"]
    # one feedback per contrastive train pair (t1) and per successful compressed run (t2),
    # plus two candidates per step
    assert result.optimizer_calls == 1 + 2 + 1 + 2
    assert result.guideline.environment == "ops" and result.guideline.target == "observation"


def test_custom_evaluator_and_no_improvement() -> None:
    seen: list[str] = []

    def evaluate(text: str) -> float:
        seen.append(text)
        return 0.5  # nothing beats the current guideline

    result = optimize_guideline(
        _pairs(), ScriptedModel(), evaluate=evaluate, config=OptimizeConfig(compression_step=False)
    )
    assert result.guideline.text == DEFAULT_OBSERVATION_GUIDELINE
    assert result.steps[1]["kept"] is False and len(seen) == 3


def test_misuse_fails_fast() -> None:
    runs = [parse_trajectory(r) for r in _rows()]
    with pytest.raises(ValueError, match="no task"):
        optimize_guideline([r for r in runs if r.variant == "full"], ScriptedModel())
    train_only = [parse_trajectory({**r, "split": "train"}) for r in _rows()]
    with pytest.raises(ValueError, match="held-out"):
        optimize_guideline(train_only, ScriptedModel())
    with pytest.raises(ValueError):
        OptimizeConfig(candidates=0)
    with pytest.raises(ValueError):
        optimize_guideline(runs, object())


def test_loop_end_to_end_with_the_openai_client(stub_server: Any, cassette: Any) -> None:
    server = stub_server(respond)
    client = openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
    with cassette("optimize_loop"):
        result = optimize_guideline(
            _pairs(),
            client,
            model_name="gpt-5.4",
            config=OptimizeConfig(min_output_tokens=100),
        )
    assert ENV_RULE in result.guideline.text and BANNER_RULE in result.guideline.text
    assert result.best.retention == 1.0


def test_cli_writes_a_guideline_file_the_plugins_load(
    tmp_path: Path,
    stub_server: Any,
    cassette: Any,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from cachepilot.compress import ObservationCompressor
    from cachepilot.fold import ChatModelSummarizer

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")  # never sent anywhere but loopback

    server = stub_server(respond)
    runs = _write(tmp_path, _rows())
    out = tmp_path / "ops-observation.json"
    report = tmp_path / "steps.json"
    with cassette("optimize_cli"):
        code = main(
            [
                "optimize-guideline", str(runs), "--out", str(out), "--model", "gpt-5.4",
                "--base-url", server.base_url, "--environment", "ops", "--report", str(report),
            ]
        )  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out
    assert "held-out score" in printed and f"wrote {out}" in printed
    guideline = load_guideline(out)
    assert guideline.target == "observation" and guideline.environment == "ops"
    assert ENV_RULE in guideline.text and guideline.history[0]["step"] == "baseline"
    assert json.loads(report.read_text())[0]["step"] == "baseline"
    compressor = ObservationCompressor(ScriptedModel(), guideline=guideline)
    assert ENV_RULE in compressor.guideline
    with pytest.raises(ValueError, match="observation guideline"):  # not for the fold
        ChatModelSummarizer(FakeListChatModel(responses=["x"]), guideline=guideline)


def test_cli_reports_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{}\n", encoding="utf-8")
    code = main(["optimize-guideline", str(bad), "--out", "x.json", "--model", "m"])
    assert code == 2 and "bad.jsonl:1" in capsys.readouterr().err


def test_trajectory_is_a_value() -> None:
    run = parse_trajectory(_rows()[0])
    assert isinstance(run, Trajectory) and run == parse_trajectory(_rows()[0])
    assert isinstance(Evaluation(1.0, 1.0, 0.5, 1).as_dict()["ratio"], float)
