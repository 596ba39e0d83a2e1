"""`headroom`: Headroom's real LangChain integration, `HeadroomChatModel`, run per call.

Headroom (`headroom-ai` 0.42) wraps a chat model: `HeadroomChatModel(ChatOpenAI(...))` goes
into `create_agent` like any model. On every call it takes the whole message list the agent
sends (system prompt included), converts it to OpenAI dicts, runs its `TransformPipeline`
with the default `HeadroomConfig()` and calls the wrapped model with the result. The agent
state keeps the originals, so the compression is recomputed on every call. This strategy
drives it the same way: each call invokes the wrapper with `[SystemMessage, *state]`, and
the wrapped model is a stand-in that records what it is called with (the request the
provider would get). The stand-in carries the model name of the replay's provider profile,
so Headroom's provider detection (token counting, context limit) is the one the real
`ChatOpenAI` / `ChatAnthropic` would get.

What the default pipeline does (Headroom 0.42, as installed by `headroom-ai[langchain]`):
the cache aligner is off; the content router compresses tool outputs by type (JSON arrays
become tables, logs, search results, configuration files, HTML, minified lines) and folds
repeated runs of lines (`... (repeats 7 lines from 12 lines back)`), in the assistant's own
earlier messages too; a file read that a later edit made stale becomes `[Read content stale:
<path> was modified after this read … Retrieve original: hash=…]`; the user's messages and
error outputs are left alone. The LangChain wrapper passes no frozen-prefix count (the
proxy derives one from `cache_control`), so any message of the history may be rewritten
when a later event changes its verdict: such a call breaks the provider's prefix cache, and
it is marked as maintenance here.

Recall: where Headroom compresses with a retrieval marker it keeps the original in its CCR
store, and its `headroom_retrieve` tool returns it by hash. The LangChain wrapper does not
add that tool itself (the proxy and the MCP server offer it), so this strategy binds
Headroom's own tool definition (`create_ccr_tool_definition`) next to the agent's tools from
the first call, as a user wiring retrieval in would, and archives exactly the originals
Headroom's store holds for the markers in the view (found by Headroom's `CCRToolInjector`,
read without counting a retrieval). The store's expiry (30 minutes by default) is not
modelled: originals stay retrievable for the whole session.

Left out: Kompress, Headroom's ML text compressor, needs the `[ml]` extra (or onnxruntime
and transformers) and downloads the `chopratejas/kompress-v2-base` model from Hugging Face
on first use; offline it logs that the model "is not cached and HEADROOM_OFFLINE forbids
fetching it" and falls back to the non-ML path. `headroom-ai[langchain]` installs neither,
so plain text goes through that non-ML path.

Offline and side-effect free: before Headroom is imported, `HEADROOM_OFFLINE=1` (no model
download, beacon or update check), `HEADROOM_TELEMETRY=off`, `HEADROOM_STATELESS=1`
(nothing written to disk), `HEADROOM_CCR_BACKEND=memory` and
`LITELLM_LOCAL_MODEL_COST_MAP=True` (litellm's import-time price fetch) are set unless the
environment already sets them. Each session starts with an empty CCR store.

Headroom and its dependencies (litellm among them) are not part of the workspace: run the
strategy in an environment that has them, e.g.
`uv run --with 'headroom-ai[langchain]==0.42.0' cachepilot bench TRACES --strategy headroom`.
Importing this module without Headroom raises `ImportError` (the registry turns it into a
message saying so).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langsmith.run_helpers import tracing_context
from pydantic import PrivateAttr

from cachepilot.messages import Message, TextPart
from cachepilot.sim import DEFAULT_PROFILE, get_profile
from cachepilot_bench.peers._common import PairingWatch, is_prefix
from cachepilot_bench.peers.headroom_convert import ViewRestorer
from cachepilot_bench.peers.lc_convert import LcConverter
from cachepilot_bench.strategy import CallContext, PreparedCall, SessionContext, StatefulStrategy

__all__ = ["OFFLINE_ENVIRONMENT", "RETRIEVE_TOOL_NAME", "CaptureModel", "Headroom"]

logger = logging.getLogger(__name__)

OFFLINE_ENVIRONMENT: dict[str, str] = {
    "HEADROOM_OFFLINE": "1",
    "HEADROOM_TELEMETRY": "off",
    "HEADROOM_STATELESS": "1",
    "HEADROOM_CCR_BACKEND": "memory",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
}
"""Set (unless already set) before Headroom is imported: no network, no files."""

for _key, _value in OFFLINE_ENVIRONMENT.items():
    os.environ.setdefault(_key, _value)

# Headroom reads these variables when it is imported and first used: it comes after them.
from headroom.cache.compression_store import (  # noqa: E402
    get_compression_store,
    reset_compression_store,
)
from headroom.ccr.tool_injection import (  # noqa: E402
    CCR_TOOL_NAME,
    CCRToolInjector,
    create_ccr_tool_definition,
)
from headroom.integrations.langchain import HeadroomChatModel  # noqa: E402

RETRIEVE_TOOL_NAME: str = CCR_TOOL_NAME
"""Name of Headroom's retrieval tool (`headroom_retrieve`)."""


class CaptureModel(BaseChatModel):
    """Stands for the agent's chat model: records every request, answers with nothing."""

    model_name: str = "gpt-5.4-mini"
    """Read by Headroom's provider detection (`gpt…` -> OpenAI, `claude…` -> Anthropic)."""

    _requests: list[list[BaseMessage]] = PrivateAttr(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "cachepilot-capture"

    @property
    def requests(self) -> list[list[BaseMessage]]:
        """Every message list the model was called with, oldest first."""
        return self._requests

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self._requests.append(list(messages))
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=""))])


def _text_of(message: Message) -> str:
    if isinstance(message.content, str):
        return message.content
    return "\n".join(p.text for p in message.content if isinstance(p, TextPart))


class Headroom(StatefulStrategy):
    """Headroom's `HeadroomChatModel` (default `HeadroomConfig()`), applied on every call.

    Args:
        bind_retrieve_tool: send Headroom's `headroom_retrieve` definition with the tools
            (needed for its archive to count as recallable).
    """

    name = "headroom"
    can_recall = True

    def __init__(self, *, bind_retrieve_tool: bool = True) -> None:
        super().__init__()
        self.bind_retrieve_tool = bind_retrieve_tool
        self._capture: CaptureModel | None = None
        self._model: Any = None
        self._converter = LcConverter()
        self._lc: list[AnyMessage] = []
        self._restorer = ViewRestorer()
        self._tools: list[dict[str, Any]] = []
        self._previous: Sequence[Message] = ()
        self._scanned: dict[int, Message] = {}
        self._hashes: set[str] = set()
        self._edited_calls = 0
        self._pairing = PairingWatch(logger, self.name)

    def start(self, session: SessionContext) -> None:
        super().start(session)
        # One agent process per session: its CCR store starts empty.
        reset_compression_store()
        model_name = get_profile(session.provider or DEFAULT_PROFILE).price.model
        self._capture = CaptureModel(model_name=model_name)
        self._model = HeadroomChatModel(self._capture)
        self._converter = LcConverter()
        self._lc = []
        self._restorer = ViewRestorer()
        self._tools = [dict(t) for t in session.tools]
        if self.bind_retrieve_tool and self.can_recall:
            self._tools.append(create_ccr_tool_definition("openai"))
        self._previous = ()
        self._scanned = {}
        self._hashes = set()
        self._edited_calls = 0
        self._pairing = PairingWatch(logger, self.name)

    def _sync(self) -> None:
        for message in self.state[len(self._lc) :]:
            self._lc.append(self._converter.convert(message))

    def compressed(self, system: str | None) -> tuple[str | None, list[Message]]:
        """Invoke the wrapper over the current state: (system, messages) the model gets."""
        if self._capture is None or self._model is None:
            raise RuntimeError(f"strategy {self.name!r} used before start()")
        self._sync()
        head: list[BaseMessage] = [SystemMessage(content=system)] if system is not None else []
        seen = len(self._capture.requests)
        with tracing_context(enabled=False):
            self._model.invoke([*head, *self._lc])
        if len(self._capture.requests) != seen + 1:
            raise RuntimeError("HeadroomChatModel did not call the wrapped model once")
        received = self._capture.requests[-1]
        out_system = system
        if head and received and isinstance(received[0], SystemMessage):
            first = received[0]
            out_system = first.content if isinstance(first.content, str) else system
            received = received[1:]
        return out_system, self._restorer.restore(self.state, self._lc, received)

    def _new_originals(self, messages: Sequence[Message]) -> list[str]:
        """Originals Headroom's store holds for retrieval markers new in this view."""
        fresh = [
            m
            for m, original in zip(messages, self.state, strict=False)
            if m is not original and id(m) not in self._scanned
        ]
        if not fresh:
            return []
        for m in fresh:
            self._scanned[id(m)] = m
        store = get_compression_store()
        injector = CCRToolInjector(provider="openai", compression_store=store)
        injector.scan_for_markers([{"role": m.role, "content": _text_of(m)} for m in fresh])
        hashes = [h for h in injector.verify_ownership(store) if h not in self._hashes]
        self._hashes.update(hashes)
        return [str(e["original_content"]) for e in store.export_entries(hashes)]

    def view(self, call: CallContext) -> PreparedCall:
        system, messages = self.compressed(self.system_for(call))
        if any(m is not o for m, o in zip(messages, self.state, strict=False)):
            self._edited_calls += 1
        self._pairing.check(messages, call.call_number)
        maintenance = bool(self._previous) and not is_prefix(self._previous, messages)
        self._previous = messages
        return PreparedCall(
            system=system,
            messages=messages,
            tools=self._tools,
            archived=tuple(self._new_originals(messages)),
            maintenance=maintenance,
        )

    def stats(self) -> dict[str, float]:
        return {
            "headroom_calls_with_edits": self._edited_calls,
            "headroom_retrievable_originals": len(self._hashes),
            "headroom_unaligned_calls": self._restorer.unaligned_calls,
        }
