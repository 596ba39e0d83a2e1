"""The audit of maintenance actions: each action against a replay of the session without it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from cachepilot.cli import main
from cachepilot.pilot.facade import Config
from cachepilot_bench import cli as bench_cli
from cachepilot_bench.audit import (
    AuditedAction,
    AuditStrategy,
    audit_session,
    audit_strategy,
    fact_shape,
    sample_actions,
    set_marginals,
)
from cachepilot_bench.audit_pilot import TakenAction, Veto
from cachepilot_bench.audit_report import audit_doc, format_audit
from cachepilot_bench.harness import BenchConfig, CallResult, SessionResult, run_session
from cachepilot_bench.ours import CachePilotStrategy
from cachepilot_bench.synthetic import large_write_session
from cachepilot_bench.traces.session import Session
from cachepilot_bench.variants import parse_variant

# A setting that acts early on a short session: prunes and argument reductions pay at once.
EAGER = "cachepilot[horizon=4,prune=true,protect_results=1,protect_tool_tokens=500]"
CONFIG = BenchConfig(workers=1)


@pytest.fixture(scope="module")
def session() -> Session:
    return large_write_session(writes=3, chars=24_000, runs=3)


def _costs(result: SessionResult) -> list[float]:
    return _costs_of(result.calls)


def test_without_a_veto_the_audited_pilot_is_the_policy_unchanged(session: Session) -> None:
    config = Config(maintenance=parse_variant(EAGER))
    plain = run_session(session, CachePilotStrategy(config), CONFIG)
    audited = AuditStrategy(EAGER, config, None)
    result = run_session(session, audited, CONFIG)
    assert _costs(result) == _costs(plain)
    assert [c.facts_visible for c in result.calls] == [c.facts_visible for c in plain.calls]
    kinds = {a.kind for a in audited.actions}
    assert {"stub", "args"} <= kinds, kinds
    for action in audited.actions:
        assert action.edits > 0 and action.call > 0


def test_a_counterfactual_is_the_same_replay_until_the_action_and_never_takes_it(
    session: Session,
) -> None:
    config = Config(maintenance=parse_variant(EAGER))
    actual = AuditStrategy(EAGER, config, None)
    base = run_session(session, actual, CONFIG)
    checked = 0
    for action in actual.actions:
        if action.kind not in ("stub", "args"):
            continue
        other = AuditStrategy(EAGER, config, Veto(action.kind, action.call, action.keys))
        result = run_session(session, other, CONFIG)
        before = [c for c in result.calls if c.call_number < action.call]
        assert _costs_of(before) == _costs_of(
            [c for c in base.calls if c.call_number < action.call]
        )
        state = other.pilot.state(other.ctx.session_id)
        edited = {
            e.key for epoch in state.plan.epochs for e in epoch.edits if e.kind == action.kind
        }
        assert not edited & action.keys
        checked += 1
    assert checked >= 2


def _costs_of(calls: Sequence[CallResult]) -> list[float]:
    return [c.input_cost_usd for c in calls]


def test_the_realized_saving_is_the_counterfactual_cost_less_the_actual(session: Session) -> None:
    audit = audit_session(session, CONFIG, name=EAGER, max_actions=3, group="g")
    assert audit.taken >= len(audit.actions) == 3
    assert audit.replays == 2 + 3
    actual = sum(c.input_cost_usd for c in audit.actual.calls)
    config = Config(maintenance=parse_variant(EAGER))
    for audited in audit.actions:
        action = audited.action
        veto = Veto(action.kind, action.call, action.keys)
        other = run_session(session, AuditStrategy(EAGER, config, veto), CONFIG)
        cost = sum(c.input_cost_usd for c in other.calls)
        assert audited.realized_usd == pytest.approx(cost - actual)
        assert audited.group == "g"
    assert audit.vanilla.strategy == "vanilla"
    with pytest.raises(ValueError, match="max_actions"):
        audit_session(session, CONFIG, name=EAGER, max_actions=0)


def test_only_cachepilot_settings_are_audited() -> None:
    assert audit_strategy("cachepilot") == Config()
    assert audit_strategy("cachepilot[horizon=1]").maintenance.horizon == 1
    for bad in ("vanilla", "cachepilot-no-evict", "cachepilot[nope=1]"):
        with pytest.raises(ValueError):
            audit_strategy(bad)


def _audited(kind: str, call: int, realized: float) -> AuditedAction:
    action = TakenAction(kind=kind, call=call, reason="cost-model", predicted_usd=0.01)  # type: ignore[arg-type]
    return AuditedAction("s", "src", "g", action, realized_usd=realized, facts_lost=0)


def test_nested_marginals_add_up_to_leaving_the_kind_out() -> None:
    # Leaving out the fold at call 5 also leaves out the later ones: 0.5 in all.
    folds = [_audited("fold", 5, 0.5), _audited("fold", 9, 0.2), _audited("fold", 14, -0.1)]
    stubs = [_audited("stub", 5, 0.3), _audited("stub", 9, 0.1)]
    set_marginals([*folds, *stubs])
    assert [a.marginal_usd for a in folds] == pytest.approx([0.3, 0.3, -0.1])
    assert sum(a.marginal_usd for a in folds) == pytest.approx(folds[0].realized_usd)
    # Pruning leaves out only the results it stubbed: each action stands on its own.
    assert [a.marginal_usd for a in stubs] == [0.3, 0.1]


def test_fact_shapes() -> None:
    assert fact_shape("src/app/models.py") == "path"
    assert fact_shape("12345") == "number"
    assert fact_shape("3.11.4") == "number"
    assert fact_shape("deadbeef12") == "hex"
    assert fact_shape("os.path.join") == "dotted"
    assert fact_shape("max_retries") == "snake"
    assert fact_shape("parseHeader") == "camel"
    assert fact_shape("the field is required") == "quoted"


def test_the_report_totals_and_table(session: Session) -> None:
    audit = audit_session(session, CONFIG, name=EAGER, max_actions=4, group="g")
    doc = audit_doc([audit], CONFIG, strategy=EAGER, max_actions=4)
    kinds = doc["by_kind"]
    assert sum(k["actions"] for k in kinds.values()) == len(audit.actions)
    assert sum(doc["actions_taken_by_kind"].values()) == audit.taken >= len(audit.actions)
    for kind, totals in kinds.items():
        assert doc["actions_taken_by_kind"][kind] >= totals["actions"]
    realized = sum(a.marginal_usd for a in audit.actions)
    assert sum(k["realized_usd"] for k in kinds.values()) == pytest.approx(realized, abs=1e-5)
    assert doc["per_source"]["synthetic"] == kinds
    assert doc["per_group"]["synthetic/g"] == kinds
    (row,) = doc["groups"]
    low, high = row["fidelity_interval"]
    assert low <= row["fidelity_visible"] <= high
    assert len(doc["actions"]) == len(audit.actions)
    text = format_audit(doc)
    assert "all sources" in text and "synthetic/g" in text and "worst group" in text
    json.dumps(doc)


def test_the_cli_audits_and_writes_json(
    session: Session,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(bench_cli, "_load_sessions", lambda _paths: ([session], 1))
    out = tmp_path / "audit.json"
    argv = ["bench", "--audit", "--strategy", EAGER, "--mode", "isolated", "--workers", "1"]
    assert main([*argv, "--audit-max-actions", "2", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "audit of" in text and "realized" in text
    doc = json.loads(out.read_text(encoding="utf-8"))["audit"]
    assert list(doc) == ["isolated"]
    assert doc["isolated"]["actions_audited"] == 2


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--audit-max-actions", "0"], "must be >= 1"),
        (["--sweep"], "on its own"),
        (["--strategy", "vanilla"], "audits cachepilot"),
        (["--strategy", "cachepilot", "--strategy", "cachepilot[horizon=1]"], "one setting"),
    ],
)
def test_the_cli_rejects_bad_audit_options(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "--audit", *extra]) == 2
    assert message in capsys.readouterr().err


def test_the_max_actions_option_needs_the_audit(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--audit-max-actions", "3"]) == 2
    assert "add --audit" in capsys.readouterr().err


def test_a_capped_audit_gives_every_kind_its_share() -> None:
    folds = [TakenAction(kind="fold", call=c, reason="cost-model-fold") for c in range(0, 40, 2)]
    rare = [TakenAction(kind="task-fold", call=13, reason="finished-task-fold")]
    stubs = [TakenAction(kind="stub", call=c, reason="cost-model") for c in (5, 21)]
    actions = sorted([*folds, *rare, *stubs], key=lambda a: a.call)
    picked = sample_actions(actions, 6)
    kinds = [a.kind for a in picked]
    assert kinds.count("task-fold") == 1 and kinds.count("stub") == 2 and kinds.count("fold") == 3
    assert [a.call for a in picked] == sorted(a.call for a in picked)
    # A kind's share is spread over the session: its first and last action are in.
    assert {0, 38} <= {a.call for a in picked if a.kind == "fold"}
    assert sample_actions(actions, 100) == actions
    assert len(sample_actions(actions, 1)) == 1
