"""Where cachepilot keeps per-user files (the default artifact archive, plugin state).

`$CACHEPILOT_HOME` when set; else the platform's per-user cache directory from
`platformdirs` (`$XDG_CACHE_HOME/cachepilot` or `~/.cache/cachepilot` on Linux,
`~/Library/Caches/cachepilot` on macOS, `%LOCALAPPDATA%\\cachepilot\\Cache` on Windows).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["APP_NAME", "HOME_ENV", "cache_home"]

APP_NAME = "cachepilot"
HOME_ENV = "CACHEPILOT_HOME"
"""Environment variable that overrides the per-user directory."""


def cache_home(*, create: bool = True) -> Path:
    """The per-user cachepilot directory; created with mode 0700 unless `create` is False.

    Raises:
        ValueError: when `$CACHEPILOT_HOME` is set to a relative path.
    """
    override = os.environ.get(HOME_ENV, "").strip()
    if override:
        base = Path(override).expanduser()
        if not base.is_absolute():
            raise ValueError(f"${HOME_ENV} must be an absolute path, not {override!r}")
    else:
        from platformdirs import user_cache_path

        base = user_cache_path(APP_NAME, appauthor=False)
    if create:
        base.mkdir(mode=0o700, parents=True, exist_ok=True)
    return base
