"""Family documents in the state store: their marker key, and removing one member.

Apart from `cachepilot.proxy.families` so that forgetting a thread (`cachepilot.proxy.memory`,
the `forget` command) needs nothing the families build on.
"""

from __future__ import annotations

import json

from cachepilot.state.base import StateStore

__all__ = ["FAMILY_DOC_KEY", "forget_member"]

FAMILY_DOC_KEY = "cachepilot_family"
"""Marks a family document in the state store (it is not a thread's state)."""


async def forget_member(store: StateStore, family: str, thread: str) -> None:
    """Remove `thread` (and the system prompt kept for it) from the stored family `family`;
    the family's document goes with its last member (store failures raise)."""
    saved = await store.load(family)
    data = json.loads(saved) if saved else {}
    if not isinstance(data, dict) or FAMILY_DOC_KEY not in data:
        return
    members = [m for m in data.get("members", ()) if m.get("thread") != thread]
    if not members:
        await store.delete(family)
        return
    data["members"] = members
    await store.save(family, json.dumps(data, ensure_ascii=False))
