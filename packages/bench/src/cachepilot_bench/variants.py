"""cachepilot with other settings, named in the strategy list: `cachepilot[key=value,...]`.

Keys are `MaintenanceConfig` fields (the policy's knobs: `fold_protect_tokens`, `horizon`,
`fold_summary_tokens`…); values are validated as the config validates them, so a typo or an
out-of-range value stops the run before anything replays. `SWEEP_GRID` is the grid that
`cachepilot bench --sweep` runs to draw the cost / fidelity frontier.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from cachepilot.maintenance.policy import MaintenanceConfig

__all__ = [
    "SWEEP_GRID",
    "VARIANT_BASE",
    "is_variant",
    "parse_variant",
    "sweep_names",
    "variant_name",
]

VARIANT_BASE = "cachepilot"
_VARIANT = re.compile(r"cachepilot\[([^\[\]]{0,400})\]")
_MAX_SETTINGS = 12

SWEEP_GRID: Mapping[str, Sequence[Any]] = {
    "fold_summary_share": (0.4, 0.5, 0.6),
    "fold_summary_max_tokens": (6_400, 12_800),
    "fold_facts_share": (0.5, 0.7),
}
"""The knobs `--sweep` varies (every combination; the other settings keep their defaults,
which are one point of the grid): how large a fold summary may grow with what it replaces
and at most, and how much of a zero-LLM summary goes to the exact values of the folded tool
output. `docs/defaults.md` chose the defaults on this grid, leaving each trace source out in
turn, and says why the fold's protected tail, its least size and the cost model's horizon
are not in it any more."""


def is_variant(name: str) -> bool:
    """True when `name` has the `cachepilot[...]` shape (valid or not)."""
    return name.startswith(VARIANT_BASE + "[")


def parse_variant(name: str) -> MaintenanceConfig:
    """The maintenance settings a `cachepilot[key=value,...]` name asks for.

    Raises:
        ValueError: on a malformed name, an unknown key or a value the config rejects.
    """
    match = _VARIANT.fullmatch(name)
    if match is None:
        raise ValueError(
            f"strategy {name!r}: write settings as cachepilot[key=value,...] "
            "(e.g. cachepilot[fold_protect_tokens=4000,horizon=1])"
        )
    settings: dict[str, str] = {}
    body = match.group(1).strip()
    for item in body.split(",") if body else ():
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise ValueError(f"strategy {name!r}: {item.strip()!r} is not key=value")
        if key in settings:
            raise ValueError(f"strategy {name!r}: {key} is set twice")
        settings[key] = value
    if len(settings) > _MAX_SETTINGS:
        raise ValueError(f"strategy {name!r}: at most {_MAX_SETTINGS} settings")
    try:
        return MaintenanceConfig.model_validate(settings)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise ValueError(f"strategy {name!r}: {problems}") from None


def variant_name(settings: Mapping[str, Any]) -> str:
    """The strategy name of `settings` (keys sorted, so one setting has one name)."""
    body = ",".join(f"{k}={_format(v)}" for k, v in sorted(settings.items()))
    return f"{VARIANT_BASE}[{body}]"


def sweep_names(grid: Mapping[str, Sequence[Any]] = SWEEP_GRID) -> list[str]:
    """Every combination of `grid` as a strategy name, defaults included once."""
    defaults = MaintenanceConfig()
    keys = sorted(grid)
    names: list[str] = []
    for values in itertools.product(*(grid[k] for k in keys)):
        changed = {k: v for k, v in zip(keys, values, strict=True) if getattr(defaults, k) != v}
        name = variant_name(changed) if changed else VARIANT_BASE
        if name not in names:
            names.append(name)
    return names


def _format(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value)) if abs(value) >= 10 else f"{value:g}"
    return str(value)
