"""Cost of recounting a growing history: memoised TokenCounter vs a fresh count every call.

Run: uv run python benchmarks/token_counting.py [--messages 400]
"""

from __future__ import annotations

import argparse
import time

from cachepilot.messages import Message, ToolCall
from cachepilot.tokens import TokenCounter


def _history(n: int) -> list[Message]:
    out: list[Message] = []
    for i in range(n):
        if i % 2 == 0:
            call = ToolCall(f"c{i}", "read_file", f'{{"path": "src/module_{i}.py"}}')
            out.append(Message(role="assistant", content=f"step {i}", tool_calls=(call,)))
        else:
            body = "\n".join(f"{j:>6}\tdef function_{i}_{j}(x): return x * {j}" for j in range(60))
            out.append(Message(role="tool", tool_call_id=f"c{i - 1}", content=body))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=400)
    args = parser.parse_args()
    history = _history(args.messages)

    memo = TokenCounter()
    started = time.perf_counter()
    for k in range(1, len(history) + 1):
        memo.count_messages(history[:k])
    memo_s = time.perf_counter() - started

    started = time.perf_counter()
    for k in range(1, len(history) + 1, 10):  # every 10th call: full recount is slow
        TokenCounter(memo.encoding).count_messages(history[:k])
    fresh_s = (time.perf_counter() - started) * 10

    print(f"encoding {memo.encoding.name}, {len(history)} messages, one count per call")
    print(f"memoised recount, whole session:   {memo_s * 1000:9.1f} ms")
    print(f"fresh recount, whole session (est): {fresh_s * 1000:9.1f} ms")


if __name__ == "__main__":
    main()
