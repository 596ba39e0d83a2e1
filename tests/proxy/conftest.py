"""Fixtures for the proxy tests: the replay provider upstream and a proxy in front of it."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
