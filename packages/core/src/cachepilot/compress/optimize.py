"""Guideline optimization from paired runs (Acon-style), without touching model weights.

Input: runs of the same tasks with the full context and with compressed context, each with a
success flag (JSONL, one trajectory per line, see `load_trajectories`). The loop:

1. **Utility step.** For contrastive pairs of the training split (the full-context run
   succeeded, the compressed one failed), an optimizer model compares the two runs and says
   what the compressed context lost; the feedback is aggregated into `candidates` candidate
   guidelines.
2. **Evaluation.** Each candidate (and the current guideline) is scored on the held-out
   pairs; the best is kept. The default score replays compression on the held-out full runs
   with the compressor model and measures how many of the facts the agent used later
   (paths, identifiers, numbers, quoted strings, as in the bench's fidelity check) survive,
   minus `length_weight` times the compressed/original size ratio. Pass `evaluate=` to
   score by re-running your agent instead.
3. **Compression step.** On successful compressed runs, the optimizer says what the agent
   never used; candidates that ask for less are kept when their retention does not drop by
   more than `tolerance` and they compress more.

The result is a `Guideline` (written by `cachepilot optimize-guideline` as a guideline file)
that `ObservationCompressor` and `fold.ChatModelSummarizer` load. Works with any chat model:
LangChain chat models, OpenAI clients, or objects with `complete(system, prompt)`.

Trajectory line (JSON)::

    {"task_id": "t1", "variant": "full" | "compressed", "success": true,
     "messages": [{"role": "user", "content": "..."}, ...],
     "environment": "swe", "split": "train" | "heldout"}

Messages use `Message.to_dict()` or OpenAI Chat Completions shape (tool calls with
`function.name` / `function.arguments`); `environment` and `split` are optional (without a
split, pairs are assigned by a hash of the task id).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, model_validator

from cachepilot.compress.chat import ChatModel
from cachepilot.compress.guideline import Guideline, GuidelineTarget, guideline_text
from cachepilot.compress.observation import (
    CompletionModel,
    CompressorConfig,
    build_observation_prompt,
)
from cachepilot.fold import FoldRequest, build_summary_prompt
from cachepilot.messages import Message
from cachepilot.tokens import get_counter

__all__ = [
    "Evaluation",
    "OptimizeConfig",
    "OptimizeResult",
    "Trajectory",
    "TrajectoryPair",
    "load_trajectories",
    "optimize_guideline",
    "pair_trajectories",
    "parse_trajectory",
    "render_trajectory",
]

logger = logging.getLogger(__name__)

Variant: TypeAlias = Literal["full", "compressed"]
Split: TypeAlias = Literal["train", "heldout"]

_SYSTEM = (
    "You improve the guideline that tells a context compressor what to keep. An AI agent "
    "works on tasks; a compressor model shortens the agent's context under the guideline."
)
_VARIANTS = (
    "Integrate every rule of the feedback.",
    "Integrate the rules that recur in the feedback, each in its most general form.",
    "Rewrite the guideline as a short checklist that covers the feedback.",
    "Integrate the feedback and state the most important rule first.",
)


# --------------------------------------------------------------------------- trajectories


@dataclass(frozen=True, slots=True)
class Trajectory:
    """One run of one task."""

    task_id: str
    variant: Variant
    success: bool
    messages: tuple[Message, ...]
    environment: str = "default"
    split: Split | None = None


@dataclass(frozen=True, slots=True)
class TrajectoryPair:
    """The full-context and the compressed-context run of one task."""

    task_id: str
    full: Trajectory
    compressed: Trajectory
    split: Split

    @property
    def contrastive(self) -> bool:
        """The full run succeeded and the compressed one failed: compression lost something."""
        return self.full.success and not self.compressed.success


def _message(data: Mapping[str, Any]) -> Message:
    calls = data.get("tool_calls") or ()
    if any(isinstance(c, Mapping) and "function" in c for c in calls):
        data = dict(data)
        data["tool_calls"] = [
            {
                "id": c.get("id", f"call_{i}"),
                "name": c["function"].get("name", "tool"),
                "arguments": c["function"].get("arguments", "{}"),
            }
            for i, c in enumerate(calls)
        ]
    return Message.from_dict(data)


def parse_trajectory(data: Mapping[str, Any]) -> Trajectory:
    """A `Trajectory` from one JSON object.

    Raises:
        ValueError: on a missing or malformed field.
    """
    if not isinstance(data, Mapping):
        raise ValueError("a trajectory must be a JSON object")
    task_id = data.get("task_id")
    if not isinstance(task_id, str | int) or not str(task_id).strip():
        raise ValueError("task_id must be a non-empty string")
    variant = data.get("variant")
    if variant not in ("full", "compressed"):
        raise ValueError(f"variant must be 'full' or 'compressed', not {variant!r}")
    success = data.get("success")
    if not isinstance(success, bool):
        raise ValueError("success must be true or false")
    raw = data.get("messages")
    if not isinstance(raw, list) or not raw:
        raise ValueError("messages must be a non-empty list")
    try:
        messages = tuple(_message(m) for m in raw)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"malformed message: {exc}") from exc
    split = data.get("split")
    if split not in (None, "train", "heldout"):
        raise ValueError(f"split must be 'train' or 'heldout', not {split!r}")
    environment = data.get("environment") or "default"
    return Trajectory(
        task_id=str(task_id),
        variant=variant,
        success=success,
        messages=messages,
        environment=str(environment),
        split=split,
    )


def load_trajectories(paths: str | Path | Iterable[str | Path]) -> list[Trajectory]:
    """Read trajectories from JSONL files (blank lines skipped).

    Raises:
        ValueError: unreadable file or bad line (the message names the file and line).
    """
    items = [paths] if isinstance(paths, str | Path) else list(paths)
    out: list[Trajectory] = []
    for item in items:
        path = Path(item)
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"cannot read {path}: {exc}") from exc
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                out.append(parse_trajectory(json.loads(line)))
            except ValueError as exc:
                raise ValueError(f"{path}:{number}: {exc}") from exc
    return out


def _hash_split(task_id: str, heldout_fraction: float) -> Split:
    digest = int(hashlib.sha256(task_id.encode("utf-8")).hexdigest()[:8], 16)
    return "heldout" if digest / 0xFFFFFFFF < heldout_fraction else "train"


def pair_trajectories(
    trajectories: Sequence[Trajectory], heldout_fraction: float = 0.3
) -> list[TrajectoryPair]:
    """Pair each task's first full run with its first compressed run.

    A pair's split comes from either run's `split`, else from a hash of the task id (so it is
    stable across runs). When every pair lands on one side and there are two or more, the
    last pair (by task id) moves to the other side, so both splits are non-empty.
    """
    if not 0 <= heldout_fraction < 1:
        raise ValueError(f"heldout_fraction must be in [0, 1), got {heldout_fraction}")
    full: dict[str, Trajectory] = {}
    compressed: dict[str, Trajectory] = {}
    for t in trajectories:
        (full if t.variant == "full" else compressed).setdefault(t.task_id, t)
    pairs: list[TrajectoryPair] = []
    for task_id in sorted(full.keys() & compressed.keys()):
        f, c = full[task_id], compressed[task_id]
        split: Split = f.split or c.split or _hash_split(task_id, heldout_fraction)
        pairs.append(TrajectoryPair(task_id, f, c, split))
    explicit = any(p.full.split or p.compressed.split for p in pairs)
    if len(pairs) >= 2 and not explicit and heldout_fraction > 0:
        splits = {p.split for p in pairs}
        if splits == {"train"}:
            pairs[-1] = _with_split(pairs[-1], "heldout")
        elif splits == {"heldout"}:
            pairs[0] = _with_split(pairs[0], "train")
    return pairs


def _with_split(pair: TrajectoryPair, split: Split) -> TrajectoryPair:
    return TrajectoryPair(pair.task_id, pair.full, pair.compressed, split)


def render_trajectory(messages: Sequence[Message], max_chars: int = 24_000) -> str:
    """A run as text for the optimizer (each message clipped; the middle cut past the cap)."""
    rendered: list[str] = []
    per_message = max(400, max_chars // 8)
    for message in messages:
        label = message.role if message.role != "tool" else f"tool result {message.name or ''}"
        lines = [f"[{label.strip()}]"]
        text = message.text
        if text:
            lines.append(_clip(text, per_message))
        for call in message.tool_calls:
            lines.append(f"→ {call.name}({_clip(call.arguments, 600)})")
        rendered.append("\n".join(lines))
    return _clip("\n\n".join(rendered), max_chars)


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    return f"{text[:head]}\n[… {len(text) - head - tail:,} chars cut …]\n{text[-tail:]}"


# --------------------------------------------------------------------------- config/result


class OptimizeConfig(BaseModel):
    """Settings of `optimize_guideline`. Every field is validated when built."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    target: GuidelineTarget = "observation"
    """Which guideline is optimized: `observation` (tool outputs) or `history` (fold)."""
    environment: str = "default"
    """Environment name written into the guideline file."""
    candidates: int = 2
    """Candidate guidelines per step."""
    max_cases: int = 8
    """Most pairs the optimizer reads per step (contrastive or successful ones)."""
    heldout_fraction: float = 0.3
    """Share of pairs (by task-id hash) held out for scoring, when runs carry no split."""
    rounds: int = 1
    """Utility + compression rounds."""
    compression_step: bool = True
    """Run the compression step after each utility step."""
    length_weight: float = 0.2
    """Score = fact retention − length_weight × compressed/original size ratio."""
    tolerance: float = 0.0
    """Compression step: retention a candidate may lose and still be kept."""
    min_output_tokens: int = 256
    """Scoring: observation outputs smaller than this are not compressed."""
    max_probes: int = 4
    """Scoring: most compressions per held-out run."""
    max_trajectory_chars: int = 24_000
    """Characters of one run shown to the optimizer."""

    @model_validator(mode="after")
    def _check(self) -> OptimizeConfig:
        for name in ("candidates", "max_cases", "rounds", "min_output_tokens", "max_probes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.heldout_fraction < 1:
            raise ValueError(f"heldout_fraction must be in [0, 1), got {self.heldout_fraction}")
        if self.length_weight < 0 or self.tolerance < 0:
            raise ValueError("length_weight and tolerance must be >= 0")
        if self.max_trajectory_chars < 2_000:
            raise ValueError("max_trajectory_chars must be >= 2000")
        if not self.environment.strip():
            raise ValueError("environment must be a non-empty name")
        return self


@dataclass(frozen=True, slots=True)
class Evaluation:
    """A guideline's score on the held-out pairs."""

    score: float
    retention: float
    """Share of later-used facts the compressions kept (1.0 when no fact was at stake)."""
    ratio: float
    """Compressed size / original size (characters), mean over the compressions."""
    probes: int
    """Compressions scored."""

    def as_dict(self) -> dict[str, float]:
        """JSON-ready numbers."""
        return {
            "score": round(self.score, 6),
            "retention": round(self.retention, 6),
            "ratio": round(self.ratio, 6),
            "probes": self.probes,
        }


@dataclass(slots=True)
class OptimizeResult:
    """What `optimize_guideline` produced."""

    guideline: Guideline
    baseline: Evaluation
    best: Evaluation
    steps: list[dict[str, Any]] = field(default_factory=list)
    optimizer_calls: int = 0
    compressor_calls: int = 0


Evaluator: TypeAlias = Callable[[str], Evaluation | float]


# --------------------------------------------------------------------------- scoring


class _Probe:
    """One compression to replay for scoring: the input and the facts used later."""

    def __init__(
        self, system: str | None, messages: Sequence[Message], facts: Sequence[str]
    ) -> None:
        self.system = system
        self.messages = tuple(messages)
        self.facts = tuple(facts)


def _facts_by_source(messages: Sequence[Message]) -> tuple[dict[int, set[str]], dict[int, int]]:
    """Facts used later, by the index of the tool message they came from; and the index of
    the first assistant message that used each source."""
    from cachepilot.memory.facts import (
        FactIndex,  # the same definition of a fact the bench measures
    )

    index = FactIndex(messages)
    by_source: dict[int, set[str]] = {}
    first_use: dict[int, int] = {}
    for i, message in enumerate(messages):
        if message.role != "assistant":
            continue
        for fact in index.needed_at(i):
            by_source.setdefault(fact.source_index, set()).add(fact.text)
            first_use.setdefault(fact.source_index, i)
    return by_source, first_use


class FactRetentionEvaluator:
    """Scores a guideline by replaying compressions of held-out full runs.

    Observation target: the largest tool outputs (at least `min_output_tokens`) that later
    calls take facts from are compressed under the guideline. History target: the run is cut
    before the first later use of an earlier tool fact and the part before it is summarized.
    """

    def __init__(
        self,
        compressor: CompletionModel,
        pairs: Sequence[TrajectoryPair],
        config: OptimizeConfig,
    ) -> None:
        self.compressor = compressor
        self.config = config
        self.calls = 0
        self._cache: dict[str, Evaluation] = {}
        self._probes = [p for pair in pairs for p in self._probes_of(pair.full.messages)]

    def _probes_of(self, messages: Sequence[Message]) -> list[_Probe]:
        by_source, first_use = _facts_by_source(messages)
        counter = get_counter()
        if self.config.target == "observation":
            sized = [
                (counter.count(messages[i].text), i)
                for i in by_source
                if counter.count(messages[i].text) >= self.config.min_output_tokens
            ]
            sized.sort(key=lambda t: (-t[0], t[1]))
            return [
                _Probe(None, messages[max(0, i - 6) : i + 1], sorted(by_source[i]))
                for _, i in sized[: self.config.max_probes]
            ]
        # history: cut before the latest first-use that still leaves earlier facts to keep
        uses = sorted(set(first_use.values()))
        probes: list[_Probe] = []
        for cut in reversed(uses):
            facts = sorted({f for s, fs in by_source.items() if s < cut for f in fs})
            start = 1 if messages and messages[0].role == "system" else 0
            start += 1 if len(messages) > start and messages[start].role == "user" else 0
            if facts and cut - start >= 2:
                probes.append(_Probe(None, messages[start:cut], facts))
                break
        return probes

    def _compress(self, guideline: str, probe: _Probe) -> tuple[str, str]:
        """(original text, compressed text) of one probe under `guideline`."""
        if self.config.target == "observation":
            *history, output = probe.messages
            call_name, args = output.name or "tool", "{}"
            for message in reversed(history):
                found = next((c for c in message.tool_calls if c.id == output.tool_call_id), None)
                if found is not None:
                    call_name, args = found.name, found.arguments
                    break
            parsed: Mapping[str, Any]
            try:
                loaded = json.loads(args)
                parsed = loaded if isinstance(loaded, dict) else {"input": args}
            except ValueError:
                parsed = {"input": args}
            system, prompt = build_observation_prompt(
                call_name,
                parsed,
                output.text,
                history,
                guideline=guideline,
                config=CompressorConfig(),
            )
            original = output.text
        else:
            request = FoldRequest(folded_messages=probe.messages, guideline=guideline)
            summary_system, summary_messages = build_summary_prompt(request)
            system, prompt = summary_system or "", summary_messages[0].text
            original = "\n".join(m.text for m in probe.messages)
        self.calls += 1
        return original, self.compressor.complete(system, prompt)

    def __call__(self, guideline: str) -> Evaluation:
        known = self._cache.get(guideline)
        if known is not None:
            return known
        kept = needed = 0
        ratios: list[float] = []
        for probe in self._probes:
            try:
                original, compressed = self._compress(guideline, probe)
            except Exception as exc:  # a failed compression keeps nothing
                logger.warning("scoring: compression failed (%s)", type(exc).__name__)
                original, compressed = "x", ""
            needed += len(probe.facts)
            kept += sum(1 for f in probe.facts if f in compressed)
            ratios.append(min(1.0, len(compressed) / max(1, len(original))))
        retention = kept / needed if needed else 1.0
        ratio = sum(ratios) / len(ratios) if ratios else 1.0
        result = Evaluation(
            score=retention - self.config.length_weight * ratio,
            retention=retention,
            ratio=ratio,
            probes=len(self._probes),
        )
        self._cache[guideline] = result
        return result


# --------------------------------------------------------------------------- prompts


def _rules(answer: str) -> str:
    return answer.strip()


def _utility_feedback_prompt(guideline: str, pair: TrajectoryPair, limit: int) -> str:
    return (
        f"<guideline>\n{guideline}\n</guideline>\n\n"
        f'<full-context-run outcome="success">\n'
        f"{render_trajectory(pair.full.messages, limit)}\n</full-context-run>\n\n"
        f'<compressed-context-run outcome="failure">\n'
        f"{render_trajectory(pair.compressed.messages, limit)}\n</compressed-context-run>\n\n"
        "The agent solved this task with its full context and failed with the compressed "
        "context. Name the information the compressed context lost or distorted that the "
        "agent needed, and how its loss led to the failure. Then state, as short imperative "
        "rules, what the guideline must add or change so that a compressor keeps it. Answer "
        'with the rules only, one per line, each starting with "- ".'
    )


def _compression_feedback_prompt(guideline: str, run: Trajectory, limit: int) -> str:
    return (
        f"<guideline>\n{guideline}\n</guideline>\n\n"
        f'<compressed-context-run outcome="success">\n'
        f"{render_trajectory(run.messages, limit)}\n</compressed-context-run>\n\n"
        "The agent solved this task with the compressed context. Name the kinds of content "
        "in the compressed context that the agent never used later, and state, as short "
        "imperative rules, what the guideline should ask the compressor to drop or shorten "
        "without losing anything the agent did use. Answer with the rules only, one per "
        'line, each starting with "- ".'
    )


def _candidate_prompt(
    guideline: str,
    feedback: Sequence[str],
    target: GuidelineTarget,
    index: int,
    total: int,
    *,
    compression: bool,
) -> str:
    kind = "tool outputs" if target == "observation" else "the conversation history"
    goal = (
        "keeps what the feedback says was lost"
        if not compression
        else "makes the compressor's output shorter, dropping what the feedback says was "
        "never used, while keeping every rule about information the agent did use"
    )
    how = _VARIANTS[index % len(_VARIANTS)]
    items = "\n\n".join(f"<item>\n{f}\n</item>" for f in feedback)
    return (
        f"<guideline>\n{guideline}\n</guideline>\n\n<feedback>\n{items}\n</feedback>\n\n"
        f"Write an improved guideline for the compressor of {kind} that {goal}. Keep what "
        "works in the current guideline; keep it under about 400 words. "
        f"{how} (candidate {index + 1} of {total}). "
        "Answer with the guideline text only."
    )


# --------------------------------------------------------------------------- the loop


def _as_model(model: Any, model_name: str | None) -> CompletionModel:
    if isinstance(model, CompletionModel):
        return model
    return ChatModel(model, model_name=model_name)


def _as_evaluation(value: Evaluation | float) -> Evaluation:
    if isinstance(value, Evaluation):
        return value
    score = float(value)
    return Evaluation(score=score, retention=score, ratio=1.0, probes=0)


def optimize_guideline(
    trajectories: Sequence[Trajectory] | Sequence[TrajectoryPair],
    optimizer: Any,
    *,
    compressor: Any | None = None,
    config: OptimizeConfig | None = None,
    initial: Guideline | str | None = None,
    evaluate: Evaluator | None = None,
    model_name: str | None = None,
    compressor_model_name: str | None = None,
) -> OptimizeResult:
    """Improve a compression guideline from paired runs (see the module docstring).

    Args:
        trajectories: runs (paired by task id) or ready pairs.
        optimizer: the model that writes feedback and candidates (LangChain chat model,
            OpenAI client with `model_name`, or an object with `complete(system, prompt)`).
        compressor: the model that compresses when scoring (default: the optimizer).
        config: settings (`OptimizeConfig()` when omitted).
        initial: the guideline to start from (default: the target's built-in one).
        evaluate: scores a guideline text (higher is better); default: fact retention on the
            held-out pairs with `compressor`.
        model_name: the `model=` of an OpenAI client optimizer.
        compressor_model_name: the `model=` of an OpenAI client compressor.

    Raises:
        ValueError: no pairs, no held-out pair for the default evaluator, bad arguments.
    """
    cfg = config or OptimizeConfig()
    if trajectories and all(isinstance(t, TrajectoryPair) for t in trajectories):
        pairs = [t for t in trajectories if isinstance(t, TrajectoryPair)]
    else:
        runs = [t for t in trajectories if isinstance(t, Trajectory)]
        if len(runs) != len(trajectories):
            raise ValueError("pass trajectories or pairs, not a mix")
        pairs = pair_trajectories(runs, cfg.heldout_fraction)
    if not pairs:
        raise ValueError("no task has both a full and a compressed run")
    train = [p for p in pairs if p.split == "train"]
    heldout = [p for p in pairs if p.split == "heldout"]
    opt_model = _as_model(optimizer, model_name)
    comp_model = opt_model if compressor is None else _as_model(compressor, compressor_model_name)
    scorer: FactRetentionEvaluator | None = None
    if evaluate is None:
        if not heldout:
            raise ValueError("no held-out pair to score candidates on (add runs or a split)")
        scorer = FactRetentionEvaluator(comp_model, heldout, cfg)
        evaluate = scorer
    current = guideline_text(initial, cfg.target)
    calls = 0

    def ask(prompt: str) -> str:
        nonlocal calls
        calls += 1
        return opt_model.complete(_SYSTEM, prompt).strip()

    baseline = _as_evaluation(evaluate(current))
    best = baseline
    steps: list[dict[str, Any]] = [{"step": "baseline", **baseline.as_dict()}]
    logger.info("guideline baseline score %.4f", baseline.score)
    for round_index in range(cfg.rounds):
        contrastive = [p for p in train if p.contrastive][: cfg.max_cases]
        if contrastive:
            feedback = [
                _rules(ask(_utility_feedback_prompt(current, p, cfg.max_trajectory_chars)))
                for p in contrastive
            ]
            current, best = _choose(
                "utility", round_index, current, best, feedback, cfg, ask, evaluate, steps,
                compression=False,
            )  # fmt: skip
        else:
            steps.append({"step": "utility", "round": round_index, "skipped": "no contrastive"})
        if not cfg.compression_step:
            continue
        successes = [p.compressed for p in train if p.compressed.success][: cfg.max_cases]
        if successes:
            feedback = [
                _rules(ask(_compression_feedback_prompt(current, r, cfg.max_trajectory_chars)))
                for r in successes
            ]
            current, best = _choose(
                "compression", round_index, current, best, feedback, cfg, ask, evaluate, steps,
                compression=True,
            )  # fmt: skip
        else:
            steps.append({"step": "compression", "round": round_index, "skipped": "no success"})
    guideline = Guideline(
        target=cfg.target,
        text=current,
        environment=cfg.environment,
        score=round(best.score, 6),
        history=steps,
    )
    return OptimizeResult(
        guideline=guideline,
        baseline=baseline,
        best=best,
        steps=steps,
        optimizer_calls=calls,
        compressor_calls=scorer.calls if scorer is not None else 0,
    )


def _choose(  # noqa: PLR0917 - private, called in two places
    step: str,
    round_index: int,
    current: str,
    best: Evaluation,
    feedback: Sequence[str],
    cfg: OptimizeConfig,
    ask: Callable[[str], str],
    evaluate: Evaluator,
    steps: list[dict[str, Any]],
    *,
    compression: bool,
) -> tuple[str, Evaluation]:
    """Write the step's candidates, score them, and keep the best one that qualifies."""
    usable = [f for f in feedback if f]
    if not usable:
        steps.append({"step": step, "round": round_index, "skipped": "empty feedback"})
        return current, best
    chosen, chosen_eval = current, best
    record: dict[str, Any] = {"step": step, "round": round_index, "feedback": len(usable)}
    scored: list[dict[str, Any]] = []
    for i in range(cfg.candidates):
        text = ask(
            _candidate_prompt(
                current, usable, cfg.target, i, cfg.candidates, compression=compression
            )
        )
        if not text.strip():
            scored.append({"candidate": i, "skipped": "empty"})
            continue
        result = _as_evaluation(evaluate(text.strip()))
        scored.append({"candidate": i, **result.as_dict()})
        if compression:
            better = (
                result.retention >= best.retention - cfg.tolerance
                and result.ratio < chosen_eval.ratio
            )
        else:
            better = result.score > chosen_eval.score
        if better:
            chosen, chosen_eval = text.strip(), result
    record["candidates"] = scored
    record["kept"] = chosen != current
    record.update({f"best_{k}": v for k, v in chosen_eval.as_dict().items()})
    steps.append(record)
    logger.info(
        "guideline %s step %d: %s (score %.4f)",
        step,
        round_index,
        "improved" if chosen != current else "kept the current guideline",
        chosen_eval.score,
    )
    return chosen, chosen_eval
