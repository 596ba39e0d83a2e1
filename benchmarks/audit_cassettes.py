"""How many public cassettes `cachepilot audit` reads: one row per source directory.

    uv run python benchmarks/audit_cassettes.py DIR [--json OUT]

DIR holds one folder per source (e.g. `DIR/pydantic-ai/`, `DIR/crewai/`), each with cassette
files at any depth (`.yaml`, `.yml`, `.json`, optionally `.gz`). For every file the script
loads the model calls (`cachepilot.audit.load_calls`) and audits them; the table gives per
source: cassettes, cassettes read (at least one model call), calls priced, cassettes not read
by reason, and the notes the reader left (HTTP errors skipped, bodies not decoded). It runs
against whichever `cachepilot` is importable, so the same command measures another checkout
(`PYTHONPATH=<checkout>/packages/core/src`).
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from cachepilot.audit import audit_calls, load_calls

__all__ = ["main", "scan"]

_SUFFIXES = (".yaml", ".yml", ".json", ".yaml.gz", ".yml.gz", ".json.gz")
_HEX = re.compile(r"[0-9a-f]{8,}|\d+")


_URI = re.compile(r"uri: '?(https?://[^/\s']+)")
_FAMILIES = (
    ("googleapis.com", "Google Gemini / Vertex"),
    ("amazonaws.com", "AWS Bedrock"),
    ("api.aws", "AWS Bedrock"),
    ("cohere", "Cohere"),
    ("telemetry", "telemetry"),
    ("traceloop", "telemetry"),
    ("localhost", "local servers"),
    ("127.0.0.1", "local servers"),
)


def _hosts(path: Path) -> str:
    """What a file without a model call talks to, by its most frequent host."""
    raw = path.read_bytes()
    if path.name.endswith(".gz"):
        raw = gzip.decompress(raw)
    hosts = Counter(_URI.findall(raw.decode("utf-8", "replace")))
    if not hosts:
        return "no HTTP interaction"
    host = hosts.most_common(1)[0][0].lower()
    family = next((name for mark, name in _FAMILIES if mark in host), None)
    return family or "other endpoints (embeddings, errors only, other APIs)"


def _reason(exc: Exception, path: Path) -> str:
    """A short, file-independent reason."""
    text = str(exc).replace(str(path), "").lstrip(": ")
    if "no model request found" in text:
        return f"no OpenAI/Anthropic call: {_hosts(path)}"
    text = text.split("\n", 1)[0]
    return _HEX.sub("N", text)[:80]


def _audit(path: Path, notes: list[str]) -> int:
    """Calls priced in one file (raises ValueError when it is not read); fills `notes`."""
    try:
        calls = load_calls(path, notes=notes)  # type: ignore[call-arg,unused-ignore]
    except TypeError:  # a checkout whose reader keeps no notes
        calls = load_calls(path)
    report = audit_calls(calls, path=str(path))
    return len(report.calls)


def scan(root: Path) -> list[dict[str, Any]]:
    """One row per source folder of `root`."""
    rows: list[dict[str, Any]] = []
    for source in sorted(p for p in root.iterdir() if p.is_dir()):
        files = sorted(
            p for p in source.rglob("*") if p.is_file() and p.name.lower().endswith(_SUFFIXES)
        )
        reasons: Counter[str] = Counter()
        notes: Counter[str] = Counter()
        read = priced = 0
        for path in files:
            found: list[str] = []
            try:
                calls = _audit(path, found)
            except Exception as exc:  # every failure is a row of the table, not a crash
                reasons[_reason(exc, path) if isinstance(exc, ValueError) else repr(exc)] += 1
                calls = -1
            for note in found:
                notes[_HEX.sub("N", note.split(": ", 1)[-1])[:80]] += 1
            if calls >= 0:
                read += 1
                priced += calls
        rows.append(
            {
                "source": source.name,
                "cassettes": len(files),
                "read": read,
                "calls_priced": priced,
                "unreadable": dict(reasons.most_common()),
                "notes": dict(notes.most_common()),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    """Print the table (and write JSON with --json)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("root", type=Path, help="folder with one sub-folder per source")
    parser.add_argument("--json", type=Path, help="write the rows as JSON")
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)  # one warning per skipped interaction is too many here
    rows = scan(args.root)
    print("| source | cassettes | read | calls priced | not read (reason: files) |")
    print("|---|---:|---:|---:|---|")
    for row in rows:
        reasons = "; ".join(f"{k}: {v}" for k, v in row["unreadable"].items()) or "-"
        print(
            f"| {row['source']} | {row['cassettes']} | {row['read']} | {row['calls_priced']} "
            f"| {reasons} |"
        )
    for row in rows:
        if row["notes"]:
            print(f"\n{row['source']}: reader notes")
            for note, count in row["notes"].items():
                print(f"  {count:>5}  {note}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
