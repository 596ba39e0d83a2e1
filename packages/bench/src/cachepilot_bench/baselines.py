"""The reference strategy: the full history on every call, as agents send it by default."""

from __future__ import annotations

from cachepilot_bench.strategy import CallContext, PreparedCall, StatefulStrategy

__all__ = ["Vanilla"]


class Vanilla(StatefulStrategy):
    """Sends everything, unchanged. Every other strategy is reported as a ratio to this one."""

    name = "vanilla"

    def view(self, call: CallContext) -> PreparedCall:
        ctx = self.ctx
        return PreparedCall(
            system=self.system_for(call), messages=tuple(self.state), tools=ctx.tools
        )
