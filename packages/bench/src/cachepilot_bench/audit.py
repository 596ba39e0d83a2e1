"""`cachepilot bench --audit`: does each maintenance action pay where it was taken?

For every session, cachepilot (its defaults, or the settings a `cachepilot[...]` name gives)
is replayed once as it runs, recording each maintenance action (`audit_pilot.AuditPilot`):
pruning stubs, lifecycle evictions, argument reductions, cost-model folds, finished-task folds
and refreshes of the frozen volatile values. Then, per action, the same session is replayed
again with that action left out from the call it was taken on (a counterfactual: the policy
runs on as it would without it). The two replays are identical up to that call, so the
difference of their input costs is the saving the action realized over the rest of the
session; the facts needed later that the counterfactual shows and the actual view does not
are the facts the action removed that were used. Beside it stands the saving the cost model
predicted when it acted.

Cost of a run: per session, one replay of vanilla, one of cachepilot and one per audited
action (at most `max_actions`, spread evenly over the session when it took more), each as
long as a bench replay of one strategy. When a session took more actions than that, every
kind gets an equal share of the replays (so a rare kind is audited beside a frequent one).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field

from cachepilot.memory.facts import Fact, FactIndex
from cachepilot.pilot.facade import Config
from cachepilot.sim import Request, render_request
from cachepilot.tokens import get_counter
from cachepilot_bench.audit_pilot import AuditPilot, TakenAction, Veto
from cachepilot_bench.baselines import Vanilla
from cachepilot_bench.calibrate import estimate_hidden_prefix
from cachepilot_bench.harness import BenchConfig, SessionResult, run_session
from cachepilot_bench.ours import CachePilotStrategy
from cachepilot_bench.populations import population
from cachepilot_bench.strategy import PreparedCall
from cachepilot_bench.traces.session import Session, split_system
from cachepilot_bench.variants import VARIANT_BASE, is_variant, parse_variant

__all__ = [
    "DEFAULT_MAX_ACTIONS",
    "AuditStrategy",
    "AuditedAction",
    "SessionAudit",
    "audit_session",
    "audit_strategy",
    "fact_shape",
    "run_audit",
    "sample_actions",
    "set_marginals",
]

logger = logging.getLogger(__name__)

DEFAULT_MAX_ACTIONS = 24
"""Counterfactual replays per session at most (the run time grows with it)."""

_SHAPES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("path", re.compile(r"(?:\.{0,2}/)?(?:[\w.-]+/)+[\w.-]+")),
    ("number", re.compile(r"\d{4,}(?:\.\d+)?|\d+\.\d+\.\d+")),
    ("hex", re.compile(r"[0-9a-f]{7,40}")),
    ("dotted", re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?:\(\))?")),
    ("snake", re.compile(r"[A-Za-z]\w*_\w+")),
    ("camel", re.compile(r"[a-z]+[A-Z]\w+|[A-Z][a-z]+[A-Z]\w+")),
)


def fact_shape(text: str) -> str:
    """The shape of a fact (`path`, `number`, `hex`, `dotted`, `snake`, `camel`, else
    `quoted`: a quoted string), to tell which kinds of facts an action drops."""
    for name, pattern in _SHAPES:
        if pattern.fullmatch(text):
            return name
    return "quoted"


@dataclass(slots=True)
class AuditedAction:
    """One action with its prediction and what it realized."""

    session_id: str
    source: str
    group: str
    """The population inside the source (`populations.population`)."""
    action: TakenAction
    realized_usd: float
    """Input cost of the counterfactual replay minus that of the actual one (> 0: it paid)."""
    facts_lost: int
    """Facts needed at later calls that the counterfactual view shows and the actual one
    does not."""
    lost_shapes: dict[str, int] = field(default_factory=dict)
    """`facts_lost` by `fact_shape`."""
    marginal_usd: float = 0.0
    """What this action adds on its own: `realized_usd`, less (for the kinds whose
    counterfactual also leaves out the later actions of the kind: folds and refreshes) the
    `realized_usd` of the next audited action of its kind in the session. The marginal
    savings of a kind add up to leaving the whole kind out from its first action on."""


@dataclass(slots=True)
class SessionAudit:
    """The audit of one session: the actual and vanilla replays and the audited actions."""

    session_id: str
    source: str
    group: str
    actual: SessionResult
    vanilla: SessionResult
    actions: list[AuditedAction] = field(default_factory=list)
    taken: int = 0
    """Actions the session took (more than `actions` holds when some were not audited)."""
    taken_kinds: dict[str, int] = field(default_factory=dict)
    """`taken` by kind."""
    replays: int = 0
    """Replays run for this session (vanilla, actual and counterfactuals)."""


class AuditStrategy(CachePilotStrategy):
    """cachepilot on an `AuditPilot` (the policy unchanged; actions recorded, one vetoed)."""

    def __init__(self, name: str, config: Config, veto: Veto | None) -> None:
        self.veto = veto
        super().__init__(config)
        self.name = name

    def _make_pilot(self) -> AuditPilot:
        return AuditPilot(self._session_config(), veto=getattr(self, "veto", None))

    @property
    def actions(self) -> list[TakenAction]:
        """The actions the pilot took in this session."""
        pilot = self.pilot
        return pilot.actions if isinstance(pilot, AuditPilot) else []


def audit_strategy(name: str) -> Config:
    """The config of the setting to audit: `cachepilot` or `cachepilot[key=value,...]`.

    Raises:
        ValueError: for any other name.
    """
    if name == VARIANT_BASE:
        return Config()
    if is_variant(name):
        return Config(maintenance=parse_variant(name))
    raise ValueError(f"--audit audits cachepilot or a cachepilot[...] setting, not {name!r}")


@dataclass(slots=True)
class _Replay:
    result: SessionResult
    missed: dict[int, set[str]]
    actions: list[TakenAction]


def _replay(
    session: Session,
    name: str,
    config: Config,
    bench: BenchConfig,
    shared: tuple[FactIndex, int, int],
    *,
    veto: Veto | None,
) -> _Replay:
    facts, hidden, peak = shared
    strategy = AuditStrategy(name, config, veto)
    missed: dict[int, set[str]] = {}

    def observe(index: int, _view: PreparedCall, lost: Sequence[Fact]) -> None:
        if lost:
            missed[index] = {f.text for f in lost}

    result = run_session(
        session,
        strategy,
        bench,
        facts=facts,
        hidden_prefix_tokens=hidden,
        peak_tokens=peak,
        observe=observe,
    )
    return _Replay(result, missed, list(strategy.actions))


def _input_cost(result: SessionResult) -> float:
    return sum(c.input_cost_usd for c in result.calls)


def sample_actions(actions: Sequence[TakenAction], limit: int) -> list[TakenAction]:
    """At most `limit` actions: every kind gets an equal share (a share a kind does not use
    goes to the others), each kind's actions spread evenly over the session (its first and
    last kept); in session order."""
    if len(actions) <= limit:
        return list(actions)
    by_kind: dict[str, list[TakenAction]] = {}
    for action in actions:
        by_kind.setdefault(action.kind, []).append(action)
    quota = dict.fromkeys(by_kind, 0)
    left = limit
    while left > 0:
        open_kinds = [k for k in by_kind if quota[k] < len(by_kind[k])]
        if not open_kinds:
            break
        for kind in open_kinds[:left]:
            quota[kind] += 1
            left -= 1
    picked: list[TakenAction] = []
    for kind, members in by_kind.items():
        picked += _spread(members, quota[kind])
    order = {id(a): i for i, a in enumerate(actions)}
    return sorted(picked, key=lambda a: order[id(a)])


def _spread(actions: Sequence[TakenAction], count: int) -> list[TakenAction]:
    if count >= len(actions):
        return list(actions)
    if count <= 1:
        return list(actions[:count])
    step = (len(actions) - 1) / (count - 1)
    return [actions[round(i * step)] for i in range(count)]


def audit_session(
    session: Session,
    bench: BenchConfig,
    *,
    name: str = VARIANT_BASE,
    max_actions: int = DEFAULT_MAX_ACTIONS,
    group: str | None = None,
) -> SessionAudit:
    """Audit every maintenance action of one session (at most `max_actions` of them).

    `group`: the session's population (default: `populations.population(session)`).
    """
    if max_actions < 1:
        raise ValueError("max_actions must be >= 1")
    config = audit_strategy(name)
    counter = get_counter(bench.encoding)
    system, body = split_system(session.messages)
    shared = (
        FactIndex(body),
        estimate_hidden_prefix(session, counter),
        render_request(
            Request(system=system, messages=body, tools=session.tools), counter
        ).total_tokens,
    )
    group = group if group is not None else population(session)
    vanilla = run_session(
        session,
        Vanilla(),
        bench,
        counter=counter,
        facts=shared[0],
        hidden_prefix_tokens=shared[1],
        peak_tokens=shared[2],
    )
    actual = _replay(session, name, config, bench, shared, veto=None)
    out = SessionAudit(
        session.id,
        session.source,
        group,
        actual.result,
        vanilla,
        taken=len(actual.actions),
        replays=2,
    )
    for action in actual.actions:
        out.taken_kinds[action.kind] = out.taken_kinds.get(action.kind, 0) + 1
    if actual.result.error:
        return out
    cost = _input_cost(actual.result)
    for action in sample_actions(actual.actions, max_actions):
        veto = Veto(action.kind, action.call, action.keys)
        other = _replay(session, name, config, bench, shared, veto=veto)
        out.replays += 1
        if other.result.error:
            logger.warning("counterfactual replay failed on %s: %s", session.id, other.result.error)
            continue
        shapes: dict[str, int] = {}
        lost = 0
        for index, texts in actual.missed.items():
            for text in texts - other.missed.get(index, set()):
                lost += 1
                shape = fact_shape(text)
                shapes[shape] = shapes.get(shape, 0) + 1
        out.actions.append(
            AuditedAction(
                session.id,
                session.source,
                group,
                action,
                realized_usd=_input_cost(other.result) - cost,
                facts_lost=lost,
                lost_shapes=shapes,
            )
        )
    set_marginals(out.actions)
    return out


_NESTED: frozenset[str] = frozenset({"fold", "task-fold", "refresh"})


def set_marginals(actions: Sequence[AuditedAction]) -> None:
    """Set `marginal_usd` of each action (see `AuditedAction`); `actions` of one session."""
    following: dict[str, AuditedAction] = {}
    for audited in sorted(actions, key=lambda a: -a.action.call):
        kind = audited.action.kind
        later = following.get(kind) if kind in _NESTED else None
        audited.marginal_usd = audited.realized_usd - (later.realized_usd if later else 0.0)
        following[kind] = audited


def _audit_one(args: tuple[Session, BenchConfig, str, int, str]) -> SessionAudit:
    session, bench, name, limit, group = args
    return audit_session(session, bench, name=name, max_actions=limit, group=group)


def run_audit(
    sessions: Sequence[Session],
    bench: BenchConfig,
    *,
    name: str = VARIANT_BASE,
    max_actions: int = DEFAULT_MAX_ACTIONS,
    groups: dict[str, str] | None = None,
    progress: Callable[[int, int, str], None] | None = None,
) -> list[SessionAudit]:
    """Audit every session (in processes, as `run_bench`); results in input order.

    `groups`: session id → population (default: `populations.population` of each).
    """
    audit_strategy(name)  # fail fast on a bad name
    if max_actions < 1:
        raise ValueError("max_actions must be >= 1")
    jobs = [
        (s, bench, name, max_actions, (groups or {}).get(s.id) or population(s)) for s in sessions
    ]
    workers = bench.workers or min(os.cpu_count() or 1, len(jobs))
    if workers <= 1 or len(jobs) <= 1:
        out: list[SessionAudit] = []
        for done, job in enumerate(jobs, 1):
            out.append(_audit_one(job))
            if progress:
                progress(done, len(jobs), job[0].id)
        return out
    order = sorted(range(len(jobs)), key=lambda i: -len(jobs[i][0].messages))
    found: dict[int, SessionAudit] = {}
    with ProcessPoolExecutor(max_workers=workers, initializer=_quiet) as pool:
        futures = {pool.submit(_audit_one, jobs[i]): i for i in order}
        for done, future in enumerate(as_completed(futures), 1):
            i = futures[future]
            found[i] = future.result()
            if progress:
                progress(done, len(jobs), jobs[i][0].id)
    return [found[i] for i in range(len(jobs))]


def _quiet() -> None:
    logging.getLogger("cachepilot").setLevel(logging.WARNING)
