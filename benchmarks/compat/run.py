"""Host-suite compatibility harness: the frameworks' own agent tests, without and with cachepilot.

For the installed `langchain` and `openai-agents` versions it downloads their sdists from the
package index, builds a venv for their tests (`hostenv`), runs the tests plain, then with
cachepilot injected by a small pytest plugin (`inject_langchain`, `inject_agents`), and prints
every test that passes plain and fails injected, classified (`classify`). Differences listed in
`allowlist` are expected; anything else is a regression and makes the exit status 1.

    uv run python benchmarks/compat/run.py --framework all --position both --json out/compat.json

Exit status: 0 no regression outside the allow-list, 1 regressions, 3 the package index could
not be reached (`--skip-unreachable` turns that into 0 with a message).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import allowlist
import classify
from hostenv import IndexUnreachable, build_venv, fetch_sdist, installed_version
from suites import SUITES, Suite

__all__ = ["main"]

logger = logging.getLogger("compat")

HERE = Path(__file__).resolve().parent
WORKSPACE = HERE.parents[1]
RUN_TIMEOUT = 3600
TEST_TIMEOUT = 120
PASSED = "passed"


@dataclass(slots=True)
class Run:
    """One pytest run of a suite: its per-test results and how long it took."""

    label: str
    results: dict[str, dict[str, Any]]
    seconds: float
    returncode: int

    def count(self, outcome: str) -> int:
        """Tests with this outcome."""
        return sum(1 for r in self.results.values() if r["outcome"] == outcome)


@dataclass(slots=True)
class Regression:
    """A test that passes plain and does not pass injected."""

    nodeid: str
    outcome: str
    error: str
    category: str
    allowed: str | None
    confirmed: bool = True


@dataclass(slots=True)
class Comparison:
    """Plain against one injected position."""

    position: str
    injected: Run
    regressions: list[Regression] = field(default_factory=list)
    fixed: list[str] = field(default_factory=list)

    def blocking(self) -> list[Regression]:
        """Regressions outside the allow-list that reproduced on a second run."""
        return [r for r in self.regressions if r.allowed is None and r.confirmed]


def _host_env(suite: Suite, sdist: Path, work: Path) -> dict[str, str]:
    """The environment of a host test run: no provider keys, no tracing, a private home."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("LANGSMITH_", "LANGCHAIN_", "VIRTUAL_ENV", "UV_", "PYTEST_"))
        and key not in {"OPENAI_API_KEY", "ANTHROPIC_API_KEY", "PYTHONPATH", "OPENAI_BASE_URL"}
    }
    paths = [str(HERE)]
    if suite.src_dir:
        paths.insert(0, str(sdist / suite.src_dir))
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["CACHEPILOT_HOME"] = str(work / "cachepilot-home")
    if "TIKTOKEN_CACHE_DIR" not in env and (WORKSPACE.parent / "shared" / "tiktoken").is_dir():
        env["TIKTOKEN_CACHE_DIR"] = str(WORKSPACE.parent / "shared" / "tiktoken")
    return env


def run_suite(
    suite: Suite,
    python: Path,
    sdist: Path,
    args: list[str],
    work: Path,
    *,
    label: str,
    position: str | None,
    only: list[str] | None = None,
    workers: int = 2,
) -> Run:
    """Run the suite's tests once (`position=None`: plain) and read back per-test results."""
    results_file = work / f"{suite.name}-{label}.json"
    log_file = work / f"{suite.name}-{label}.log"
    env = _host_env(suite, sdist, work)
    env["CACHEPILOT_COMPAT_RESULTS"] = str(results_file)
    plugins = ["-p", "collect"]
    if position is not None:
        plugins += ["-p", suite.inject]
        env["CACHEPILOT_COMPAT_POSITION"] = position
    if only is not None:
        only_file = work / f"{suite.name}-{label}.only"
        only_file.write_text("\n".join(only), encoding="utf-8")
        env["CACHEPILOT_COMPAT_ONLY"] = str(only_file)
    command = [
        str(python),
        "-m",
        "pytest",
        *args,
        "-p",
        "no:cacheprovider",
        *plugins,
        "-o",
        "addopts=",
        "-q",
        # pytest's own traceback style parses the source of every frame: ten times slower.
        "--tb=native",
        "--continue-on-collection-errors",
        f"--timeout={TEST_TIMEOUT}",
        "-n",
        str(workers),
        *(f"--deselect={prefix}" for prefix in suite.deselect),
    ]
    started = time.monotonic()
    with log_file.open("w", encoding="utf-8") as log:
        try:
            done = subprocess.run(
                command,
                cwd=sdist,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=RUN_TIMEOUT,
                check=False,
            )
            code = done.returncode
        except subprocess.TimeoutExpired:
            code = -1
    seconds = time.monotonic() - started
    if not results_file.exists():
        raise RuntimeError(f"{suite.name} {label}: pytest wrote no results (see {log_file})")
    results = json.loads(results_file.read_text(encoding="utf-8"))
    logger.info(
        "%s %s: %d tests in %.0f s (exit %d)", suite.name, label, len(results), seconds, code
    )
    return Run(label, results, seconds, code)


def compare(suite: Suite, plain: Run, injected: Run, position: str) -> Comparison:
    """Tests that pass plain and not injected, classified and checked against the allow-list."""
    comparison = Comparison(position, injected)
    for nodeid, result in sorted(plain.results.items()):
        after = injected.results.get(nodeid, {"outcome": "missing", "error": "", "text": ""})
        if result["outcome"] == PASSED and after["outcome"] != PASSED:
            comparison.regressions.append(
                Regression(
                    nodeid=nodeid,
                    outcome=after["outcome"],
                    error=after.get("error", ""),
                    category=classify.classify(suite.name, nodeid, after),
                    allowed=allowlist.reason(suite.name, nodeid, position),
                )
            )
        elif result["outcome"] == "failed" and after["outcome"] == PASSED:
            comparison.fixed.append(nodeid)
    return comparison


def confirm(
    suite: Suite, python: Path, sdist: Path, work: Path, comparison: Comparison, workers: int
) -> None:
    """Re-run the failing tests injected once: one that passes then is marked unconfirmed."""
    ids = [r.nodeid for r in comparison.regressions if r.allowed is None]
    if not ids:
        return
    files = sorted({nodeid.split("::", 1)[0] for nodeid in ids})
    again = run_suite(
        suite,
        python,
        sdist,
        files,
        work,
        label=f"confirm-{comparison.position}",
        position=comparison.position,
        only=ids,
        workers=workers,
    )
    for regression in comparison.regressions:
        if again.results.get(regression.nodeid, {}).get("outcome") == PASSED:
            regression.confirmed = False


def _counts(run: Run) -> str:
    # Not pytest's closing-line shape: CI reads that shape as the test count of the job.
    return (
        f"passed {run.count(PASSED)}, failed {run.count('failed')}, "
        f"skipped {run.count('skipped')} ({run.seconds:.0f} s)"
    )


def _total(plain: Run, comparisons: list[Comparison]) -> int:
    return max([len(plain.results), *(len(c.injected.results) for c in comparisons)])


def _print_report(
    suite: Suite, version: str, plain: Run, comparisons: list[Comparison], mode: str
) -> None:
    print(f"\n== {suite.name} {version}: {_total(plain, comparisons)} tests ==")
    scope = ""
    if mode != "full":
        scope = f" (fast mode: only the {len(plain.results)} not passing injected)"
    print(f"plain            : {_counts(plain)}{scope}")
    for comp in comparisons:
        allowed = [r for r in comp.regressions if r.allowed is not None]
        flaky = [r for r in comp.regressions if r.allowed is None and not r.confirmed]
        print(f"injected ({comp.position:5}): {_counts(comp.injected)}")
        print(
            f"  pass plain, fail injected: {len(comp.regressions)} = {len(allowed)} allow-listed"
            f" + {len(flaky)} not reproduced + {len(comp.blocking())} regressions"
        )
        by_category: dict[str, list[Regression]] = {}
        for regression in comp.blocking():
            by_category.setdefault(regression.category, []).append(regression)
        for category, items in sorted(by_category.items(), key=lambda kv: -len(kv[1])):
            kind, title = classify.kind(category), classify.title(category)
            print(f"  [{category}] ({kind}) {len(items)}: {title}")
            for regression in items:
                print(f"    {regression.nodeid}  -- {regression.error[:160]}")
        for regression in allowed:
            print(f"  allowed: {regression.nodeid}  ({regression.allowed})")
        for regression in flaky:
            print(f"  not reproduced: {regression.nodeid}  -- {regression.error[:160]}")


def _summary(version: str, plain: Run, comparisons: list[Comparison], mode: str) -> dict[str, Any]:
    return {
        "version": version,
        "mode": mode,
        "tests": _total(plain, comparisons),
        "plain": {
            "tests": len(plain.results),
            "passed": plain.count(PASSED),
            "failed": plain.count("failed"),
            "skipped": plain.count("skipped"),
            "seconds": round(plain.seconds, 1),
        },
        "injected": {
            comp.position: {
                "passed": comp.injected.count(PASSED),
                "failed": comp.injected.count("failed"),
                "skipped": comp.injected.count("skipped"),
                "seconds": round(comp.injected.seconds, 1),
                "pass_plain_fail_injected": len(comp.regressions),
                "allow_listed": sum(1 for r in comp.regressions if r.allowed is not None),
                "not_reproduced": sum(
                    1 for r in comp.regressions if r.allowed is None and not r.confirmed
                ),
                "regressions": len(comp.blocking()),
                "fixed_by_injection": comp.fixed,
                "tests": [
                    {
                        "nodeid": r.nodeid,
                        "outcome": r.outcome,
                        "category": r.category,
                        "kind": classify.kind(r.category),
                        "allowed": r.allowed,
                        "confirmed": r.confirmed,
                        "error": r.error,
                    }
                    for r in comp.regressions
                ],
            }
            for comp in comparisons
        },
    }


def _run_framework(
    suite: Suite,
    python: Path,
    sdist: Path,
    work: Path,
    positions: list[str],
    *,
    full: bool,
    workers: int,
    subset: bool = False,
) -> tuple[list[Comparison], Run]:
    """Plain and injected runs of one suite, compared.

    `full`: the whole suite plain, then injected. Otherwise the whole suite injected, and plain
    only the tests that failed injected (what a regression verdict needs, in about half the
    time); the plain figures then cover those tests only. `subset`: the suite's CI files only.
    """
    files = list(suite.ci_paths) if subset and suite.ci_paths else suite.files(sdist)
    # A suite with one meaningful position runs it once, whatever was asked.
    wanted = [p for p in positions if p in suite.positions] or [suite.positions[0]]
    plain: Run | None = None
    if full:
        plain = run_suite(
            suite, python, sdist, files, work, label="plain", position=None, workers=workers
        )
    injected = {
        position: run_suite(
            suite,
            python,
            sdist,
            files,
            work,
            label=f"injected-{position}",
            position=position,
            workers=workers,
        )
        for position in wanted
    }
    if plain is None:
        failing = sorted(
            {
                n
                for run in injected.values()
                for n, r in run.results.items()
                if r["outcome"] != PASSED
            }
        )
        rerun_files = sorted({n.split("::", 1)[0] for n in failing})
        plain = (
            run_suite(
                suite,
                python,
                sdist,
                rerun_files,
                work,
                label="plain",
                position=None,
                only=failing,
                workers=workers,
            )
            if failing
            else Run("plain", {}, 0.0, 0)
        )
    comparisons = []
    for position, run in injected.items():
        comparison = compare(suite, plain, run, position)
        confirm(suite, python, sdist, work, comparison, workers)
        comparisons.append(comparison)
    return comparisons, plain


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--framework", choices=[*SUITES, "all"], default="all")
    parser.add_argument("--position", choices=["first", "last", "both"], default="both")
    parser.add_argument("--json", type=Path, help="write the figures and every difference here")
    parser.add_argument("--keep", type=Path, help="keep each run's results and log here")
    parser.add_argument(
        "--cache", type=Path, default=WORKSPACE / ".cache" / "compat", help="sdists and venvs"
    )
    parser.add_argument("--workers", type=int, default=2, help="pytest-xdist workers")
    parser.add_argument(
        "--subset",
        choices=["all", "ci"],
        default="all",
        help="ci: only the suite's files where the plugin acts (benchmarks/compat/README.md)",
    )
    parser.add_argument(
        "--mode",
        choices=["full", "fast"],
        default="full",
        help="full: the whole suite plain and injected; fast: plain only where injected failed",
    )
    parser.add_argument(
        "--skip-unreachable",
        action="store_true",
        help="exit 0 with a message when the package index cannot be reached",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the harness; the exit status says whether regressions were found."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    names = list(SUITES) if args.framework == "all" else [args.framework]
    positions = ["first", "last"] if args.position == "both" else [args.position]
    cache = args.cache.resolve()
    work = args.keep.resolve() if args.keep else Path(tempfile.mkdtemp(prefix="compat-"))
    work.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {}
    regressions = unreachable = False
    try:
        for name in names:
            suite = SUITES[name]
            version = installed_version(suite.dist)
            try:
                sdist = fetch_sdist(suite.dist, version, cache)
                python = build_venv(suite, sdist, WORKSPACE, cache)
            except IndexUnreachable as exc:
                print(f"compat: skipped {name}: the package index is not reachable ({exc})")
                unreachable = True
                continue
            comparisons, plain = _run_framework(
                suite,
                python,
                sdist,
                work,
                positions,
                full=args.mode == "full",
                workers=args.workers,
                subset=args.subset == "ci",
            )
            regressions = regressions or any(c.blocking() for c in comparisons)
            _print_report(suite, version, plain, comparisons, args.mode)
            report[name] = _summary(version, plain, comparisons, args.mode)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2), encoding="utf-8")
    if regressions:
        return 1
    return 3 if unreachable and not args.skip_unreachable else 0


if __name__ == "__main__":
    sys.exit(main())
