"""Function-tool wrapping (ingestion) and the `recall` tool.

Every `FunctionTool` of a wrapped agent keeps its schema, guardrails, approval and failure
policies; only its invoker is wrapped so that the result passes `CachePilot.aingest` once,
when it first arrives. What happens to each kind of result:

- text (`str`, `ToolOutputText`, `{"type": "text", ...}`): reduced; the original is archived
  whenever the text changes and the reduced text names its `recall(ref=...)`;
- images and files (`ToolOutputImage`, `ToolOutputFileContent` and their dict forms): kept as
  they are, unless their inline data (data URL / base64) is longer than `max_media_chars`:
  then the payload is archived and a short text part takes its place;
- a list of those: each element as above, order kept;
- anything else (dicts, lists, pydantic models, dataclasses, numbers): serialized to JSON
  (what the model would otherwise get as Python `str()`), then reduced as text;
- tools that declare a typed output schema (`output_json_schema`) are left alone: the SDK
  validates their result against it.

Hosted tools (web search, file search, code interpreter, image generation, hosted MCP) run on
the provider's side and never pass through the SDK's invoker; MCP server tools are listed at
run time from `agent.mcp_servers`. Neither is wrapped; their items reach the model untouched.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from agents import FunctionTool
from agents.tool import ToolOutputFileContent, ToolOutputImage, ToolOutputText
from agents.tool_context import ToolContext
from pydantic import BaseModel, ValidationError

from cachepilot.recall import RECALL_TOOL_DESCRIPTION, RECALL_TOOL_NAME, RECALL_TOOL_PARAMETERS

if TYPE_CHECKING:
    from cachepilot import CachePilot

__all__ = ["ToolOwner", "ingesting_tool", "recall_tool", "reduce_tool_output"]

logger = logging.getLogger(__name__)

_BIND = "__agents_bind_function_tool__"
_SYNC_MARKER = "__agents_sync_function_tool__"

Invoker = Callable[[ToolContext[Any], str], Awaitable[Any]]


class ToolOwner(Protocol):
    """What the wrappers need from `CachePilotAgents`."""

    @property
    def pilot(self) -> CachePilot:
        """The pilot."""
        ...

    @property
    def max_media_chars(self) -> int:
        """Inline image / file data longer than this is archived."""
        ...

    def tool_thread(self, context: ToolContext[Any]) -> str:
        """The thread a tool call belongs to."""
        ...


class _IngestingInvoker:
    """`on_invoke_tool` that runs the original invoker, then ingests its result."""

    def __init__(self, owner: ToolOwner, tool_name: str, inner: Invoker) -> None:
        self._owner = owner
        self._tool_name = tool_name
        self._inner = inner
        if getattr(inner, _SYNC_MARKER, False):
            setattr(self, _SYNC_MARKER, True)

    async def __call__(self, context: ToolContext[Any], arguments: str) -> Any:
        output = await self._inner(context, arguments)
        try:
            thread = self._owner.tool_thread(context)
            call_id = str(getattr(context, "tool_call_id", "") or "")
            return await reduce_tool_output(
                self._owner,
                self._tool_name,
                arguments=arguments,
                output=output,
                call_id=call_id,
                thread=thread,
            )
        except Exception:
            # Ingestion must never cost the turn: the model gets the result as the tool gave it.
            logger.warning(
                "tool %r: ingestion failed; result passed through", self._tool_name, exc_info=True
            )
            return output

    def __agents_bind_function_tool__(self, function_tool: FunctionTool) -> _IngestingInvoker:
        """Rebind the wrapped invoker when the SDK copies the tool (keeps failure handling)."""
        bind = getattr(self._inner, _BIND, None)
        if not callable(bind):
            return self
        inner = bind(function_tool)
        return (
            self if inner is self._inner else _IngestingInvoker(self._owner, self._tool_name, inner)
        )


def ingesting_tool(owner: ToolOwner, tool: FunctionTool) -> FunctionTool:
    """A copy of `tool` whose results are ingested (the original is not changed)."""
    if isinstance(tool.on_invoke_tool, _IngestingInvoker):
        return tool
    if tool.output_json_schema is not None:
        return tool  # typed outputs are validated by the SDK: never rewritten
    wrapped = copy.copy(tool)
    wrapped.on_invoke_tool = _IngestingInvoker(owner, tool.name, wrapped.on_invoke_tool)
    return wrapped


def recall_tool(owner: ToolOwner) -> FunctionTool:
    """The `recall` FunctionTool (schema of `RECALL_TOOL_SCHEMA`), serving `pilot.arecall`."""

    async def invoke(context: ToolContext[Any], arguments: str) -> str:
        try:
            args = json.loads(arguments or "{}")
        except ValueError:
            return 'recall: the arguments are not valid JSON; call recall(ref="<12 hex>")'
        if not isinstance(args, dict) or not isinstance(args.get("ref"), str):
            return 'recall: a "ref" string is required, e.g. recall(ref="9f2c41d07a1b")'
        lines = args.get("lines")
        grep = args.get("grep")
        max_chars = args.get("max_chars", 20_000)
        if not isinstance(max_chars, int) or isinstance(max_chars, bool) or max_chars < 1:
            max_chars = 20_000
        return await owner.pilot.arecall(
            args["ref"],
            lines=lines if isinstance(lines, str) else None,
            grep=grep if isinstance(grep, str) else None,
            max_chars=max_chars,
            thread=owner.tool_thread(context),
        )

    return FunctionTool(
        name=RECALL_TOOL_NAME,
        description=RECALL_TOOL_DESCRIPTION,
        params_json_schema=json.loads(json.dumps(RECALL_TOOL_PARAMETERS)),
        on_invoke_tool=invoke,
        # Optional parameters: strict mode would make them all required and change the schema.
        strict_json_schema=False,
    )


# --- result reduction ------------------------------------------------------------------------


_STRUCTURED = (ToolOutputText, ToolOutputImage, ToolOutputFileContent)


def _structured(value: object) -> ToolOutputText | ToolOutputImage | ToolOutputFileContent | None:
    """The SDK's structured-output reading of one value (None when it is not one)."""
    if isinstance(value, _STRUCTURED):
        return value
    if isinstance(value, Mapping) and value.get("type") in ("text", "image", "file"):
        models: dict[str, type[BaseModel]] = {
            "text": ToolOutputText,
            "image": ToolOutputImage,
            "file": ToolOutputFileContent,
        }
        model = models[str(value["type"])]
        try:
            parsed = model.model_validate(dict(value))
        except ValidationError:
            return None
        if isinstance(parsed, _STRUCTURED):
            return parsed
    return None


def _as_text(output: object) -> str:
    """A non-structured result as the text the model should read (JSON for data)."""
    if isinstance(output, str):
        return output
    if isinstance(output, bytes | bytearray):
        return bytes(output).decode("utf-8", "replace")
    if isinstance(output, BaseModel):
        return output.model_dump_json()
    if dataclasses.is_dataclass(output) and not isinstance(output, type):
        output = dataclasses.asdict(output)
    if isinstance(output, dict | list | tuple):
        try:
            return json.dumps(output, ensure_ascii=False, default=str)
        except (TypeError, ValueError):
            return str(output)
    return str(output)


async def reduce_tool_output(
    owner: ToolOwner,
    tool_name: str,
    *,
    arguments: str,
    output: object,
    call_id: str,
    thread: str,
) -> object:
    """Ingest one tool result (see the module docstring for each kind)."""
    pilot = owner.pilot
    if isinstance(output, bytes | bytearray):
        # Raw bytes: the pilot archives the exact original and decodes what it can.
        return await pilot.aingest(tool_name, arguments, bytes(output), call_id, thread)
    single = _structured(output)
    if single is not None:
        reduced = await _reduce_parts(
            owner, tool_name, arguments=arguments, parts=[single], call_id=call_id, thread=thread
        )
        return reduced[0]
    if isinstance(output, list | tuple) and output:
        parts = [_structured(v) for v in output]
        if all(p is not None for p in parts):
            return await _reduce_parts(
                owner,
                tool_name,
                arguments=arguments,
                parts=[p for p in parts if p is not None],
                call_id=call_id,
                thread=thread,
            )
    return await pilot.aingest(tool_name, arguments, _as_text(output), call_id, thread)


async def _reduce_parts(
    owner: ToolOwner,
    tool_name: str,
    *,
    arguments: str,
    parts: list[ToolOutputText | ToolOutputImage | ToolOutputFileContent],
    call_id: str,
    thread: str,
) -> list[ToolOutputText | ToolOutputImage | ToolOutputFileContent]:
    out: list[ToolOutputText | ToolOutputImage | ToolOutputFileContent] = []
    for index, part in enumerate(parts):
        part_id = call_id if index == 0 else f"{call_id}:{index}"
        if isinstance(part, ToolOutputText):
            text = await owner.pilot.aingest(tool_name, arguments, part.text, part_id, thread)
            out.append(part if text == part.text else ToolOutputText(text=text))
            continue
        inline = (part.image_url if isinstance(part, ToolOutputImage) else part.file_data) or ""
        if len(inline) <= owner.max_media_chars or (
            isinstance(part, ToolOutputImage) and not inline.startswith("data:")
        ):
            out.append(part)  # URLs and file ids cost a few tokens; small inline data is kept
            continue
        out.append(
            await _archive_media(
                owner, tool_name, part=part, inline=inline, call_id=part_id, thread=thread
            )
        )
    return out


async def _archive_media(
    owner: ToolOwner,
    tool_name: str,
    *,
    part: ToolOutputImage | ToolOutputFileContent,
    inline: str,
    call_id: str,
    thread: str,
) -> ToolOutputText | ToolOutputImage | ToolOutputFileContent:
    kind = "image" if isinstance(part, ToolOutputImage) else "file"
    name = getattr(part, "filename", None) or kind
    try:
        ref = owner.pilot.store.put(
            thread,
            inline,
            meta={
                "tool": tool_name,
                "call_id": call_id,
                "reason": f"{kind}-too-large",
                "kind": kind,
                "original_chars": len(inline),
            },
        )
    except Exception:
        logger.error("tool %r: could not archive a large %s; kept inline", tool_name, kind)
        return part
    logger.info("tool %r: %s of %d chars archived (ref %s)", tool_name, kind, len(inline), ref)
    return ToolOutputText(
        text=(
            f"[{kind} {name!s} omitted: {len(inline):,} characters of inline data; "
            f'archived as recall(ref="{ref}")]'
        )
    )
