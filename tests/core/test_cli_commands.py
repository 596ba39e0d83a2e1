"""The `cachepilot` command's subcommands: the product's own, and the bench's through entry
points (`cachepilot.cli`), with a clear message when the bench is not installed."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from cachepilot import cli
from cachepilot.cli import main
from cachepilot.diagnose import inspect as inspect_state


def test_the_bench_registers_bench_and_demo_through_entry_points(
    capsys: pytest.CaptureFixture[str],
) -> None:
    names = {entry.name for entry in cli.entry_points(group=cli.CLI_ENTRY_POINTS)}
    assert {"bench", "demo"} <= names
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "--strategy" in out and "--provider" in out and "--json" in out


@pytest.mark.parametrize("command", ["bench", "demo"])
def test_without_the_bench_the_command_says_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    command: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli, "entry_points", lambda group: [])
    assert main([command, "some/traces", "--json", "x.json"]) == 2
    err = capsys.readouterr().err
    assert "install cachepilot-bench" in err
    assert not Path("x.json").exists()


def test_the_product_commands_stay_without_the_bench(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "entry_points", lambda group: [])
    _, handlers = cli._build_parser()
    assert {"audit", "inspect", "optimize-guideline", "proxy"} <= set(handlers)


def test_the_command_runs_as_an_installed_script() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "cachepilot.cli", "--help"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    for command in ("bench", "demo", "audit", "inspect", "proxy"):
        assert command in out.stdout


def _checkpoint_database(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE checkpoints (thread_id TEXT, checkpoint BLOB)")
    conn.commit()
    conn.close()


def test_inspect_of_a_langgraph_database_without_the_plugin_says_to_install_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    database = tmp_path / "checkpoints.sqlite"
    _checkpoint_database(database)
    monkeypatch.setattr(inspect_state, "entry_points", lambda group: [])
    with pytest.raises(ValueError, match="install cachepilot-langgraph"):
        inspect_state.load_threads(database)


def test_inspect_of_a_langgraph_database_uses_the_plugin_reader(tmp_path: Path) -> None:
    database = tmp_path / "checkpoints.sqlite"
    _checkpoint_database(database)
    names = {e.name for e in inspect_state.entry_points(group=inspect_state.INSPECT_ENTRY_POINTS)}
    assert "langgraph" in names
    # An empty checkpoint table: the plugin's reader ran and found no thread.
    with pytest.raises(ValueError, match="no pilot state found"):
        inspect_state.load_threads(database)
