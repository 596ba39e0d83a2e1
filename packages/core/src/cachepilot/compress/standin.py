"""A deterministic stand-in compressor for benchmark replays (not a language model).

It answers an observation-compression prompt (`build_observation_prompt`) the way a careful
compressor would, by rule: it keeps the first and last lines, then the lines that carry
errors, paths, line numbers and other exact values, within a budget of about `ratio` of the
output's tokens (at least `min_tokens`, at most the prompt's output limit), in their original
order with a marker where lines were left out. Equal prompts give byte-identical answers, so a
replay is reproducible; the bench bills every prompt and answer as a real model call.
"""

from __future__ import annotations

import re

from cachepilot.tokens import TokenCounter, get_counter

__all__ = ["StandInCompressor"]

_OUTPUT = re.compile(r"<tool-output chars=\d+>\n(?P<body>.*)\n</tool-output>", re.DOTALL)
_LIMIT = re.compile(r"in at most about (?P<n>[\d,]+) tokens")
_ERROR = re.compile(
    r"error|exception|traceback|fail|warning|assert|denied|not found|invalid|cannot|panic",
    re.IGNORECASE,
)
_PATH = re.compile(
    r"(?:[\w.-]+/)+[\w.-]+|\b[\w-]+\.(?:py|js|ts|go|rs|java|c|h|cpp|md|json|yaml|toml)\b"
)
_LOCATION = re.compile(r"line \d+|:\d+(?::\d+)?\b")
_VALUE = re.compile(r"\b\d[\d.,]*\b|\b[0-9a-f]{7,40}\b|=")
_LINE_MAX = 300


class StandInCompressor:
    """Rule-based answers to compression prompts, for replays (deterministic, offline).

    Args:
        ratio: answer size as a fraction of the output's tokens.
        min_tokens: smallest answer budget.
        counter: token counter (default: the shared one).
    """

    model_name = "stand-in-compressor"

    def __init__(
        self, ratio: float = 0.25, min_tokens: int = 200, counter: TokenCounter | None = None
    ) -> None:
        if not 0 < ratio <= 1:
            raise ValueError(f"ratio must be in (0, 1], got {ratio}")
        if min_tokens < 1:
            raise ValueError(f"min_tokens must be >= 1, got {min_tokens}")
        self.ratio = ratio
        self.min_tokens = min_tokens
        self.counter = counter or get_counter()

    def complete(self, system: str | None, prompt: str) -> str:
        """The compressed tool output found in `prompt` (empty when there is none)."""
        found = _OUTPUT.search(prompt)
        if found is None:
            return ""
        body = found.group("body")
        limit = _LIMIT.search(prompt)
        cap = int(limit.group("n").replace(",", "")) if limit else 1_024
        budget = min(cap, max(self.min_tokens, int(self.ratio * self.counter.count(body))))
        return self._select(body.splitlines(), budget)

    @staticmethod
    def _score(line: str) -> int:
        score = 0
        if _ERROR.search(line):
            score += 4
        if _PATH.search(line):
            score += 2
        if _LOCATION.search(line):
            score += 2
        if _VALUE.search(line):
            score += 1
        return score

    def _select(self, lines: list[str], budget: int) -> str:
        clipped = [line if len(line) <= _LINE_MAX else line[:_LINE_MAX] + " …" for line in lines]
        n = len(clipped)
        must = [i for i in (*range(min(2, n)), *range(max(0, n - 3), n)) if clipped[i].strip()]
        ranked = sorted(
            (i for i in range(n) if clipped[i].strip() and i not in must),
            key=lambda i: (-self._score(clipped[i]), i),
        )
        chosen: set[int] = set()
        seen: set[str] = set()
        used = 0
        for i in [*must, *ranked]:
            text = clipped[i].strip()
            if text in seen:
                continue
            cost = self.counter.count(clipped[i]) + 1
            if used + cost > budget and chosen:
                if i in must:
                    continue
                break
            chosen.add(i)
            seen.add(text)
            used += cost
        out: list[str] = []
        gap = 0
        for i in range(n):
            if i in chosen:
                if gap:
                    out.append(f"[… {gap:,} lines omitted …]")
                    gap = 0
                out.append(clipped[i])
            else:
                gap += 1
        if gap:
            out.append(f"[… {gap:,} lines omitted …]")
        return "\n".join(out)
