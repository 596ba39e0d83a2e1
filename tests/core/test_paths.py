"""The per-user directory (`cachepilot.support.paths`)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cachepilot.support.paths import cache_home


def test_cache_home_honours_the_override_and_the_platform(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CACHEPILOT_HOME", str(tmp_path / "home"))
    home = cache_home()
    assert home == tmp_path / "home" and home.is_dir()
    assert (home.stat().st_mode & 0o777) == 0o700
    monkeypatch.setenv("CACHEPILOT_HOME", "relative/dir")
    with pytest.raises(ValueError, match="absolute"):
        cache_home()
    monkeypatch.delenv("CACHEPILOT_HOME")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    if sys.platform.startswith("linux"):
        assert cache_home(create=False) == tmp_path / "xdg" / "cachepilot"
    assert not (tmp_path / "xdg").exists()
