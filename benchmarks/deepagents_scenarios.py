"""The two deepagents scenarios of `tests/langgraph/test_deepagents.py`, priced.

Runs each scenario (the evicted build log and the summarization one) three ways, deepagents
alone, with `CachePilotMiddleware` added as a plain user adds it, and with the recipe, and
prints requests, characters sent and input cost (cache simulator, `openai-gpt-5.4-mini`): the
tables of docs/deepagents.md.

    uv run python benchmarks/deepagents_scenarios.py
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

if importlib.util.find_spec("deepagents") is None:
    sys.exit(
        "deepagents_scenarios.py needs deepagents: pip install 'cachepilot-langgraph[deepagents]'"
    )

# The scenarios are the test file's own (one scripted model, one set of tools), so the figures
# describe exactly what the tests assert on.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "langgraph"))

import test_deepagents as scenario

from cachepilot.sim import get_profile

_PROFILE = get_profile("openai-gpt-5.4-mini")


def main() -> int:
    runs: tuple[tuple[str, Any], ...] = (
        ("evicted build log", scenario._run),
        ("summarization", scenario._long),
    )
    for title, run in runs:
        print(f"{title}:")
        print(
            f"  {'run':<8} {'requests':>8} {'summaries':>9} {'chars':>10} {'x':>6} "
            f"{'largest':>8} {'tokens':>9} {'input $':>9} {'x':>6}"
        )
        base: tuple[int, float] | None = None
        for kind in ("alone", "plain", "recipe"):
            model = run(kind)[1]
            chars = scenario._chars(model)
            usd = sum(_PROFILE.cost(u).input_usd for u in model.usages)
            base = base or (chars, usd)
            print(
                f"  {kind:<8} {len(model.requests):>8} {scenario._summary_calls(model):>9} "
                f"{chars:>10,} {chars / base[0]:>6.3f} "
                f"{max(u.input_tokens for u in model.usages):>8,} "
                f"{sum(u.input_tokens for u in model.usages):>9,} {usd:>9.5f} "
                f"{usd / base[1]:>6.3f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
