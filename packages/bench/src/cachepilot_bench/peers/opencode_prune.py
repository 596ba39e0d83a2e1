"""`opencode-prune`: OpenCode's tool-output pruning, mirrored line by line.

Source mirrored (TypeScript, not importable from Python, so this is a faithful port):

- `sst/opencode` `packages/opencode/src/session/compaction.ts`, function `prune`, at commit
  `3df4a25506fb5ef55e4a02142708448c07fa754a` (the same `prune` at
  `31e22f65a23c498639b8cef24b90e6ae193cdcb6`):
  `PRUNE_MINIMUM = 20_000`, `PRUNE_PROTECT = 40_000`, `PRUNE_PROTECTED_TOOLS = ["skill"]`;
  walk messages backwards counting user messages, skip everything until the second user
  message from the end (the last 2 user turns are protected), stop at an assistant summary
  or at the first already-compacted tool part; within a message walk tool parts backwards,
  sum `Token.estimate(output)`; parts beyond the first 40k tokens are candidates; mark them
  compacted only when their total is strictly above 20k.
- `Token.estimate` (`packages/opencode/src/util/token.ts`, upstream `CHARS_PER_TOKEN = 4`):
  `Math.max(0, Math.round((input || "").length / 4))` on UTF-16 length.
- What the model sees for a compacted part (`packages/opencode/src/session/message-v2.ts`,
  `toModelMessages`, `anomalyco/opencode` at `007a9409bafea06d6b9084ff1f6d1fe9f5e3a803`): the
  output becomes `"[Old tool result content cleared]"` and its attachments are dropped (the
  same string `compaction.ts` uses when it serializes a compacted part).
- When it runs (`packages/opencode/src/session/prompt.ts`, `sst/opencode` at
  `00d0a710e3c90c3661126ded4df5302d54a8c6e6`): forked once the run loop of a user turn ends,
  i.e. before the next user message. Here: when a call's new messages contain a user
  message, the persisted state up to that message is pruned first.

Mapping to the neutral transcript: an OpenCode assistant message owns its tool parts; here
the results are the `tool` messages that follow the assistant message, visited in the same
backwards order. Every tool result counts as `completed` (traces carry no error status) and
transcripts carry no OpenCode summary messages. Compaction is persisted (a compacted result
stays compacted), as in OpenCode's database. Recent OpenCode versions make pruning opt-in
(`compaction.prune: true`); this peer is OpenCode with pruning enabled.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from cachepilot.messages import Message
from cachepilot_bench.peers._common import PairingWatch
from cachepilot_bench.strategy import CallContext, PreparedCall, SessionContext, StatefulStrategy

__all__ = [
    "CLEARED_PLACEHOLDER",
    "PRUNE_MINIMUM",
    "PRUNE_PROTECT",
    "PRUNE_PROTECTED_TOOLS",
    "OpenCodePrune",
    "estimate_tokens",
    "prune_candidates",
]

logger = logging.getLogger(__name__)

PRUNE_MINIMUM = 20_000
PRUNE_PROTECT = 40_000
PRUNE_PROTECTED_TOOLS: tuple[str, ...] = ("skill",)
CLEARED_PLACEHOLDER = "[Old tool result content cleared]"
_CHARS_PER_TOKEN = 4


def estimate_tokens(text: str) -> int:
    """OpenCode's `Token.estimate`: UTF-16 length / 4, rounded half up (JS `Math.round`)."""
    if not text:
        return 0
    units = len(text.encode("utf-16-le", "surrogatepass")) // 2
    return max(0, (units + _CHARS_PER_TOKEN // 2) // _CHARS_PER_TOKEN)


def prune_candidates(
    messages: Sequence[Message], compacted: set[int]
) -> tuple[list[int], int, int]:
    """One pass of OpenCode's `prune` loop.

    Args:
        messages: the session's messages (no system prompt).
        compacted: indexes of tool results already compacted.

    Returns:
        (indexes to compact, pruned token estimate, total token estimate); the caller
        compacts only when `pruned > PRUNE_MINIMUM`.
    """
    call_names: dict[str, str] = {}
    for message in messages:
        for call in message.tool_calls:
            call_names[call.id] = call.name
    total = 0
    pruned = 0
    to_prune: list[int] = []
    turns = 0
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.role == "user":
            turns += 1
        if turns < 2:
            continue
        # (`msg.info.summary` break: neutral transcripts carry no OpenCode summary messages.)
        if message.role != "tool":
            continue
        tool = message.name or call_names.get(message.tool_call_id or "", "")
        if tool in PRUNE_PROTECTED_TOOLS:
            continue
        if index in compacted:
            break
        estimate = estimate_tokens(message.text)
        total += estimate
        if total <= PRUNE_PROTECT:
            continue
        pruned += estimate
        to_prune.append(index)
    return to_prune, pruned, total


def _compact(message: Message) -> Message:
    # Output replaced, attachments (images) dropped; call id, tool name and id kept.
    return Message(
        role="tool",
        content=CLEARED_PLACEHOLDER,
        tool_call_id=message.tool_call_id,
        name=message.name,
        id=message.id,
    )


class OpenCodePrune(StatefulStrategy):
    """OpenCode's `SessionCompaction.prune`, run before every user turn, persisted."""

    name = "opencode-prune"
    can_recall = False

    def __init__(self) -> None:
        super().__init__()
        self.compacted: set[int] = set()
        self.prunes = 0
        """Prune passes that compacted something in this session."""
        self._pruned_this_call = False
        self._pairing = PairingWatch(logger, self.name)

    def start(self, session: SessionContext) -> None:
        super().start(session)
        self.compacted = set()
        self.prunes = 0
        self._pairing = PairingWatch(logger, self.name)

    def prune(self) -> bool:
        """Run one prune pass over the persisted state; True when it compacted anything."""
        to_prune, pruned, total = prune_candidates(self.state, self.compacted)
        logger.debug("opencode-prune found pruned=%d total=%d", pruned, total)
        if pruned <= PRUNE_MINIMUM:
            return False
        for index in to_prune:
            self.state[index] = _compact(self.state[index])
            self.compacted.add(index)
        self.prunes += 1
        logger.debug("opencode-prune pruned count=%d", len(to_prune))
        return True

    def prepare(self, call: CallContext) -> PreparedCall:
        self._pruned_this_call = False
        for message in call.new_messages:
            if message.role == "user" and self.state and self.prune():
                self._pruned_this_call = True
            self.state.append(message)
        return self.view(call)

    def view(self, call: CallContext) -> PreparedCall:
        messages = list(self.state)
        self._pairing.check(messages, call.call_number)
        return PreparedCall(
            system=self.system_for(call),
            messages=messages,
            tools=self.ctx.tools,
            maintenance=self._pruned_this_call,
        )
