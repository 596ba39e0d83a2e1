"""Zero-LLM resume blocks vs Claude Code's own compaction summaries.

For each Claude Code session with a compaction, builds the session memory from the history
before the compaction, renders resume blocks at 100 / 300 / 600 tokens and uncapped, and
prints what share of the file paths and identifiers named in Claude Code's summary each block
also names, and the block sizes.

Run: TIKTOKEN_CACHE_DIR=../shared/tiktoken uv run python benchmarks/resume_vs_compact.py \
    [TRACES...] [--json FILE] [--show-blocks] [--show-missing]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from cachepilot.memory import SessionMemory
from cachepilot_bench.memory_eval import compaction_pairs, evaluate_resume, names
from cachepilot_bench.traces import load_paths

DEFAULT_TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "traces"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="*", default=[str(DEFAULT_TRACES / "claude_code_spotter")])
    parser.add_argument("--json", type=Path, help="write the report as JSON")
    parser.add_argument("--show-blocks", action="store_true", help="print every block")
    parser.add_argument("--show-missing", action="store_true", help="terms no block names")
    args = parser.parse_args()

    sessions = load_paths(args.traces)
    report = evaluate_resume(sessions=sessions)
    if not report.sessions:
        print("no Claude Code session with a compaction summary found in", args.traces)
        return
    print(report.format_table())
    if args.show_blocks or args.show_missing:
        for before, after in compaction_pairs(s for s in sessions if s.source == "claude-code"):
            memory = SessionMemory()
            memory.update(before.messages)
            result = next(r for r in report.sessions if r.session_id == after.id)
            for budget in report.budgets:
                block = memory.resume_block(budget)
                if args.show_blocks:
                    print(f"\n===== {after.id} @ {budget}\n{block}")
                if args.show_missing and budget is None:
                    missing = [
                        t for t in (*result.paths, *result.identifiers) if not names(block, t)
                    ]
                    print(f"\n{after.id}: not named uncapped ({len(missing)}): {missing}")
    if args.json:
        args.json.write_text(json.dumps(report.to_dict(), indent=2) + "\n", encoding="utf-8")
        print("wrote", args.json)


if __name__ == "__main__":
    main()
