"""Fixtures of the LangGraph plugin tests (helpers live in `lg_scripted`: a module name no other
test folder uses)."""

from __future__ import annotations

from lg_scripted import scripted

__all__ = ["scripted"]
