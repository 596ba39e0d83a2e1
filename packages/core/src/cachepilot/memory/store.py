"""`SessionMemory`: the typed session graph, filled incrementally from a transcript.

Sources, most exact first: tool-call structure (paths and commands in arguments), tool
results (exit codes, test summaries, error lines, commits), then user and assistant text
(requests, decisions, symbols). Each message is processed once (by its stable key); every
table is capped with deterministic eviction, so the model stays small and JSON-serialisable.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from cachepilot.memory import outputs, patterns
from cachepilot.memory.model import (
    ACTION_WEIGHTS,
    INITIAL_STATUS,
    Edge,
    ItemKind,
    MemoryItem,
    Relation,
    Status,
    item_id,
)
from cachepilot.memory.render import resume_block
from cachepilot.memory.tools import (
    READ_PROGRAMS,
    CallFacts,
    FileTouch,
    analyze_call,
    command_key,
)
from cachepilot.messages import Message, message_keys
from cachepilot.support.foreground import yield_to_foreground
from cachepilot.support.redact import redact
from cachepilot.tokens import TokenCounter

__all__ = ["ACTION_WEIGHTS", "CAP_SHARES", "PendingCall", "SessionMemory"]

logger = logging.getLogger(__name__)


CAP_SHARES: dict[ItemKind, float] = {
    ItemKind.DECISION: 0.5,
    ItemKind.COMMAND: 0.5,
    ItemKind.ERROR: 0.5,
    ItemKind.TASK: 0.25,
    ItemKind.MILESTONE: 0.25,
    ItemKind.ENVIRONMENT: 0.25,
}
"""Share of `cap_per_kind` kept for kinds with long texts or few useful items (default 1)."""

_MAX_SEEN = 20_000
_MAX_EDGES = 800
_MAX_PENDING = 256
_REDACT_WINDOW = 4_096
"""Characters of an item's text searched for credentials before it is cut to size."""
_TEXT_WINDOW = 32_000


def _digest(key: str) -> str:
    return hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=6).hexdigest()


def _norm_path(path: str) -> str:
    value = path.strip().strip("'\"`")
    while value.startswith("./"):
        value = value[2:]
    while "//" in value:
        value = value.replace("//", "/")
    return value.rstrip("/") if len(value) > 1 else value


class PendingCall(BaseModel):
    """A tool call waiting for its result (what the result should update)."""

    model_config = ConfigDict(extra="forbid")

    tool: str
    family: str
    command: str | None = None
    """Item id of the shell command, when the call ran one."""
    files: list[str] = Field(default_factory=list)
    """Item ids of the files the call touched."""
    errors_expected: bool = True
    reads: bool = False
    """True when the output is file content or a listing (not scanned for errors)."""


class SessionMemory(BaseModel):
    """Typed graph of a session: tasks, files, commands, errors, decisions, facts, environment.

    Build it with `update` (incremental: only messages whose key was not seen are processed)
    and render budgeted resume blocks with `resume_block`. JSON round trip:
    `SessionMemory.model_validate_json(memory.model_dump_json())`.

    Attributes:
        cap_per_kind: items kept per kind (times `CAP_SHARES` for some kinds); beyond it the
            least important, oldest go first (open tasks and errors last).
        items: the nodes, by item id (`<kind>:<key>`).
        edges: dependencies between items (most recent `_MAX_EDGES` kept).
        seen: digests of processed message keys, oldest first (capped).
        seq: number of messages processed (the clock of `first_seen` / `last_seen`).
        pending: tool calls waiting for their result, by call id.
        current_task: id of the task being worked on.
        open_file: the file an editor tool last opened (for edits that name no path).
        awaiting_answer: the assistant's last turn asked the user a question, so the next user
            message is an answer (kept as a user decision), not a new task.
    """

    model_config = ConfigDict(extra="forbid")

    cap_per_kind: int = Field(default=200, ge=1, le=10_000)
    items: dict[str, MemoryItem] = Field(default_factory=dict)
    edges: list[Edge] = Field(default_factory=list)
    seen: list[str] = Field(default_factory=list)
    seq: int = 0
    pending: dict[str, PendingCall] = Field(default_factory=dict)
    current_task: str | None = None
    open_file: str | None = None
    awaiting_answer: bool = False

    _trimmed: bool = PrivateAttr(default=False)
    _seen_set: set[str] | None = PrivateAttr(default=None)
    _edge_set: set[Edge] | None = PrivateAttr(default=None)
    _open_errors: set[str] | None = PrivateAttr(default=None)

    @classmethod
    def from_messages(
        cls, messages: Sequence[Message], keys: Sequence[str] | None = None, **config: Any
    ) -> SessionMemory:
        """A memory built from `messages` in one go (`config`: model fields, e.g. caps)."""
        memory = cls(**config)
        memory.update(messages, keys)
        return memory

    @property
    def trimmed(self) -> bool:
        """True once a cap dropped an item (the memory then depends on when caps were
        enforced, not only on the messages it saw)."""
        return self._trimmed

    # ------------------------------------------------------------------ public API

    def update(self, messages: Sequence[Message], keys: Sequence[str] | None = None) -> int:
        """Process the messages whose key was not seen before.

        Args:
            messages: the transcript (or any slice of it).
            keys: their stable keys (`messages.message_keys` of the whole transcript, so a
                slice keeps its keys); computed from `messages` alone when omitted.

        Returns:
            How many messages were new.

        Raises:
            ValueError: when `keys` does not align with `messages`.
        """
        if keys is None:
            keys = message_keys(messages)
        elif len(keys) != len(messages):
            raise ValueError(f"keys ({len(keys)}) must align with messages ({len(messages)})")
        seen = self._seen()
        new = 0
        for message, key in zip(messages, keys, strict=True):
            digest = _digest(key)
            if digest in seen:
                continue
            self._mark_seen(digest)
            self.seq += 1
            new += 1
            yield_to_foreground()  # a precomputation's pause (a no-op on a request's thread)
            try:
                self._ingest(message)
            except Exception as exc:  # bad input never stops the agent (DESIGN §2.6)
                logger.warning(
                    "memory: message %s not understood (%s: %s)", key, type(exc).__name__, exc
                )
            if new % 64 == 0:
                self._enforce_caps()
        if new:
            self._enforce_caps()
        return new

    def resume_block(
        self, budget_tokens: int | None = 300, counter: TokenCounter | None = None
    ) -> str:
        """A structured plain-text resume block that fits `budget_tokens` under `counter`.

        See `cachepilot.memory.render.resume_block`.
        """
        return resume_block(self, budget_tokens, counter)

    def by_kind(self, kind: ItemKind) -> list[MemoryItem]:
        """Items of one kind, in first-seen order."""
        found = [item for item in self.items.values() if item.kind == kind]
        found.sort(key=lambda it: (it.first_seen, it.key))
        return found

    def get(self, kind: ItemKind, key: str) -> MemoryItem | None:
        """The item of `kind` with `key`, if present."""
        return self.items.get(item_id(kind, key))

    def file(self, path: str) -> MemoryItem | None:
        """The file item for `path` (normalized like the memory does)."""
        return self.get(ItemKind.FILE, _norm_path(path))

    def neighbours(self, iid: str, rel: Relation | None = None) -> list[str]:
        """Ids linked to `iid` by an edge (either direction), optionally of one relation."""
        out: list[str] = []
        for edge in self.edges:
            if rel is not None and edge.rel != rel:
                continue
            if edge.src == iid:
                out.append(edge.dst)
            elif edge.dst == iid:
                out.append(edge.src)
        return out

    # ------------------------------------------------------------------ bookkeeping

    def _seen(self) -> set[str]:
        if self._seen_set is None:
            self._seen_set = set(self.seen)
        return self._seen_set

    def _mark_seen(self, digest: str) -> None:
        seen = self._seen()
        seen.add(digest)
        self.seen.append(digest)
        if len(self.seen) > _MAX_SEEN:
            drop = len(self.seen) - _MAX_SEEN
            for old in self.seen[:drop]:
                seen.discard(old)
            del self.seen[:drop]

    def _touch(
        self,
        kind: ItemKind,
        key: str,
        text: str,
        weight: float,
        *,
        group: str | None = None,
        call_id: str | None = None,
    ) -> MemoryItem:
        # Credential shapes never enter the memory (it feeds resume blocks); redacted before
        # the cut, so a cut cannot leave a recognisable part of one behind.
        key = patterns.scrub(redact(key[:_REDACT_WINDOW])[:300])
        text = patterns.scrub(redact(text[:_REDACT_WINDOW])[:600])
        group = patterns.scrub(group) if group else group
        call_id = patterns.scrub(call_id) if call_id else call_id
        iid = item_id(kind, key)
        item = self.items.get(iid)
        if item is None:
            item = MemoryItem(
                kind=kind,
                key=key,
                text=text[:600],
                status=INITIAL_STATUS.get(kind, Status.ACTIVE),
                first_seen=self.seq,
                last_seen=self.seq,
                weight=weight,
                group=group or "",
                call_id=call_id,
            )
            self.items[iid] = item
            return item
        if item.last_seen != self.seq:
            item.hits += 1
        item.last_seen = self.seq
        item.weight = min(item.weight + weight, 1_000.0)
        if text:
            item.text = text[:600]
        if group:
            item.group = group
        if call_id is not None:
            item.call_id = call_id
        return item

    def _link(self, src: str, rel: Relation, dst: str) -> None:
        if src == dst or src not in self.items or dst not in self.items:
            return
        if self._edge_set is None:
            self._edge_set = set(self.edges)
        edge = Edge(src=src, rel=rel, dst=dst)
        if edge in self._edge_set:
            return
        self._edge_set.add(edge)
        self.edges.append(edge)
        if len(self.edges) > _MAX_EDGES:
            for old in self.edges[: len(self.edges) - _MAX_EDGES]:
                self._edge_set.discard(old)
            del self.edges[: len(self.edges) - _MAX_EDGES]

    def _keep_score(self, item: MemoryItem) -> float:
        recency = item.last_seen / max(1, self.seq)
        score = min(item.weight, 50.0) * (0.4 + 0.6 * recency) + math.log1p(item.hits)
        if item.status == Status.OPEN:
            score += 1_000.0
        return score

    def _enforce_caps(self) -> None:
        by_kind: dict[ItemKind, list[MemoryItem]] = {}
        for item in self.items.values():
            by_kind.setdefault(item.kind, []).append(item)
        removed: set[str] = set()
        for kind, items in by_kind.items():
            cap = max(1, int(self.cap_per_kind * CAP_SHARES.get(kind, 1.0)))
            if len(items) <= cap:
                continue
            items.sort(key=lambda it: (self._keep_score(it), it.last_seen, it.key))
            for item in items[: len(items) - cap]:
                removed.add(item.id)
                del self.items[item.id]
        if not removed:
            return
        self._trimmed = True
        self.edges = [e for e in self.edges if e.src not in removed and e.dst not in removed]
        self._edge_set = None
        self._open_errors = None
        if self.current_task in removed:
            self.current_task = None
        for call in self.pending.values():
            if call.command in removed:
                call.command = None
            call.files = [f for f in call.files if f not in removed]

    # ------------------------------------------------------------------ ingestion

    def _ingest(self, message: Message) -> None:
        if message.role == "user":
            self._ingest_user(message)
        elif message.role == "assistant":
            self._ingest_assistant(message)
        elif message.role == "tool":
            self._ingest_result(message)
        else:
            self._ingest_env(patterns.window(message.text, 16_000, 4_000), allow_repo=False)

    def _ingest_user(self, message: Message) -> None:
        text = patterns.scrub(message.text[:200_000])
        body = patterns.task_body(text)
        task = patterns.task_text(text) if body is not None else None
        if body is None or task is None:
            return
        if self.awaiting_answer and self.current_task in self.items:
            self.awaiting_answer = False
            answer = patterns.clip(task, 200)
            key = "user:" + patterns.signature(answer).lower()[:150]
            self._touch(ItemKind.DECISION, key, f"user: {answer}", 1.5, group="user")
            for value, weight in patterns.identifiers(body[:_TEXT_WINDOW])[:30]:
                self._touch_identifier(value, weight * 1.5, "user")
            for value in patterns.numbers_with_units(body[:_TEXT_WINDOW])[:10]:
                self._touch_identifier(value, 0.8, "user")
            return
        current = self.items.get(self.current_task or "")
        first = not any(it.kind == ItemKind.TASK for it in self.items.values())
        item = self._touch(ItemKind.TASK, patterns.signature(task).lower()[:160], task, 3.0)
        if first:
            item.weight += 5.0
        if item.status == Status.DONE:
            item.transition(Status.OPEN)
        if current is not None and current.id != item.id and current.status == Status.OPEN:
            current.detail = current.detail or "superseded by a later request"
        self.current_task = item.id
        region = body[:_TEXT_WINDOW]
        for path in patterns.paths_in_text(region)[:40]:
            self._touch_file(path, "mention", None, weight=1.0)
        for value, weight in patterns.identifiers(region)[:60]:
            self._touch_identifier(value, weight * 1.5, "user")

    def _ingest_assistant(self, message: Message) -> None:
        text = patterns.window(message.text, _TEXT_WINDOW, 8_000)
        self.awaiting_answer = not message.tool_calls and patterns.asks_user(text)
        if text.strip():
            self._ingest_prose(text)
            self._ingest_plan(text)
            if not message.tool_calls and patterns.completion_cue(text):
                self._finish_task("assistant reported completion")
        for call in message.tool_calls:
            facts = analyze_call(call.name, call.parsed_arguments())
            self._apply_call(call.id, facts)

    def _ingest_plan(self, text: str) -> None:
        plan = patterns.plan_steps(text)
        if plan:
            steps = "; ".join(plan[:8])
            self._touch(ItemKind.DECISION, "plan", f"Plan: {steps}", 1.0, group="plan")

    def _ingest_prose(self, text: str) -> None:
        for sentence, strength in patterns.decisions(text)[:12]:
            key = patterns.signature(sentence).lower()[:160]
            self._touch(ItemKind.DECISION, key, sentence, strength, group="assistant")
        for value, weight in patterns.identifiers(text)[:60]:
            self._touch_identifier(value, weight * 0.8, "assistant")
        for value in patterns.numbers_with_units(text)[:10]:
            self._touch_identifier(value, 0.3, "number")
        for path in patterns.paths_in_text(text)[:30]:
            self._touch_file(path, "mention", None, weight=ACTION_WEIGHTS["mention"])

    def _touch_identifier(self, value: str, weight: float, origin: str) -> None:
        value = value.strip()
        if not value or len(value) > 120:
            return
        item = self._touch(
            ItemKind.IDENTIFIER,
            value,
            value,
            weight * patterns.specificity(value),
            group=origin,
        )
        item.add_action(origin)  # where it was seen: user, assistant prose, tool calls

    def _finish_task(self, why: str) -> None:
        task = self.items.get(self.current_task or "")
        if task is not None and task.transition(Status.DONE):
            task.detail = why

    def _touch_file(
        self, path: str, action: str, call_id: str | None, weight: float | None = None
    ) -> MemoryItem | None:
        key = _norm_path(path)
        if not key or key in (".", "..") or len(key) > 300 or "\n" in key or key.count(" ") > 2:
            return None
        existing = self.items.get(item_id(ItemKind.FILE, key))
        if (
            action == "create"
            and existing is not None
            and "create" not in existing.actions
            and set(existing.actions) - {"mention"}
        ):
            action = "edit"  # writing a file the session already knew is an edit
        item = self._touch(
            ItemKind.FILE,
            key,
            key,
            ACTION_WEIGHTS.get(action, 0.5) if weight is None else weight,
            call_id=call_id,
        )
        item.add_action(action)
        if action != "mention" or not item.detail:
            item.detail = action
        if action in ("edit", "create", "delete"):
            item.changed_at = self.seq
        return item

    def _apply_call(self, call_id: str, facts: CallFacts) -> None:
        files = list(facts.files)
        if not files and self.open_file and facts.tool.lower() in ("edit", "insert"):
            files = [FileTouch(self.open_file, "edit")]
        file_ids: list[str] = []
        for touch in files[:40]:
            item = self._touch_file(touch.path, touch.action, call_id)
            if item is None:
                continue
            file_ids.append(item.id)
            if touch.action in ("read", "create") and facts.command is None:
                self.open_file = item.key
        command_id: str | None = None
        if facts.command:
            command = self._touch(
                ItemKind.COMMAND,
                command_key(facts.command),
                facts.command,
                1.0,
                group=facts.family,
                call_id=call_id,
            )
            command_id = command.id
            for fid in file_ids:
                self._link(command_id, Relation.TOUCHES, fid)
        for value, weight in facts.identifiers[:60]:
            self._touch_identifier(value, weight, "call")
        for note in facts.notes:
            self._ingest_prose(note)
        for text, done in facts.todos:
            todo = self._touch(
                ItemKind.TASK,
                "todo:" + patterns.signature(text).lower()[:150],
                text,
                1.0,
                group="todo",
            )
            todo.transition(Status.DONE if done else Status.OPEN)
        if facts.cwd:
            self._touch(ItemKind.ENVIRONMENT, "cwd", f"cwd: {facts.cwd}", 1.0)
        for manager in facts.package_managers:
            self._touch(ItemKind.ENVIRONMENT, f"pm:{manager}", manager, 1.0, group="pm")
        if facts.finish:
            self._finish_task("agent submitted")
            self._touch(ItemKind.MILESTONE, f"finish:{self.seq}", "submitted the work", 2.0)
        program = (facts.family or "").split(" ", 1)[0]
        self.pending[patterns.scrub(call_id)] = PendingCall(
            tool=patterns.scrub(facts.tool[:200]),
            family=facts.family or f"tool:{facts.tool}",
            command=command_id,
            files=file_ids,
            errors_expected=facts.errors_expected,
            reads=(command_id is None and any(f.action in ("read", "search") for f in files))
            or (command_id is not None and program in READ_PROGRAMS),
        )
        while len(self.pending) > _MAX_PENDING:
            del self.pending[next(iter(self.pending))]

    def _ingest_result(self, message: Message) -> None:
        call = self.pending.pop(patterns.scrub(message.tool_call_id or ""), None)
        text = message.text
        if call is None:
            name = patterns.scrub((message.name or "tool")[:200])
            call = PendingCall(tool=name, family=f"tool:{name}")
        scan = patterns.window(text)
        code = outputs.exit_code(scan[:4_000] + "\n" + scan[-4_000:])
        summary = outputs.test_summary(scan[-24_000:])
        failed = (code is not None and code != 0) or (summary is not None and summary.failed > 0)
        hits: list[outputs.ErrorHit] = []
        is_shell = call.command is not None
        if is_shell:
            if failed or (code is None and not call.reads):
                hits = outputs.error_hits(scan)
            if failed and not hits and call.errors_expected:
                last = next(
                    (
                        ln
                        for ln in reversed(scan[-8_000:].splitlines())
                        if ln.strip() and not outputs.is_wrapper_line(ln)
                    ),
                    "(no output)",
                )
                hits = [outputs.ErrorHit(patterns.clip(f"exit {code}: {last}", 200))]
            if not call.errors_expected and not (summary and summary.failed):
                hits = []
            if summary is not None and summary.failed == 0 and code in (None, 0):
                hits = []  # a passing test summary outranks log lines that look like errors
        else:
            head = scan[:2_000].lstrip()
            if "<tool_use_error>" in head or head.startswith(
                ("Error", "ERROR", "error:", "Traceback", "Exception", "Failed", "Invalid")
            ):
                hits = outputs.error_hits(head) or [outputs.ErrorHit(patterns.clip(head, 200))]
        succeeded = not failed and not hits
        self._resolve(call, succeeded, hits)
        source = call.command or f"tool:{call.tool}"
        for hit in hits:
            self._add_error(hit, call, source)
        if is_shell:
            self._describe_command(call, code, summary, hits, scan)
            self._ingest_env(scan, allow_repo=call.family.startswith("git"))
            commit = outputs.git_commit(scan[:4_000])
            if commit is not None:
                branch, sha, subject = commit
                self._touch(ItemKind.ENVIRONMENT, "branch", f"branch: {branch}", 1.0)
                self._touch(ItemKind.MILESTONE, f"commit:{sha}", f"commit {sha}: {subject}", 2.0)
        elif "(Open file: " in scan[-2_000:]:
            tail = scan[-2_000:]
            opened = tail[tail.rfind("(Open file: ") + 12 :].split(")", 1)[0].strip()
            if opened and opened != "n/a":
                self.open_file = _norm_path(opened)
                self._ingest_env(tail, allow_repo=False)
        if summary is not None and summary.failed == 0 and call.command is not None:
            command = self.items.get(call.command)
            label = command.key if command is not None else call.family
            self._touch(
                ItemKind.MILESTONE,
                f"pass:{call.family}",
                patterns.clip(f"{label} → {summary.text}", 200),
                1.0,
            )

    def _open_error_ids(self) -> set[str]:
        if self._open_errors is None:
            self._open_errors = {
                iid
                for iid, item in self.items.items()
                if item.kind == ItemKind.ERROR and item.status == Status.OPEN
            }
        return self._open_errors

    def _resolve(self, call: PendingCall, succeeded: bool, hits: list[outputs.ErrorHit]) -> None:
        current = {patterns.signature(h.line) for h in hits}
        open_ids = self._open_error_ids()
        for iid in sorted(open_ids):
            item = self.items.get(iid)
            if item is None or item.status != Status.OPEN:
                open_ids.discard(iid)
                continue
            if succeeded and item.group == call.family:
                if item.transition(Status.RESOLVED):
                    item.detail = f"resolved: later `{call.family}` passed"
                    open_ids.discard(iid)
            elif (
                not succeeded
                and call.command is not None
                and item.source == call.command
                and item.key not in current
                and item.last_seen < self.seq
            ) and item.transition(Status.RESOLVED):
                item.detail = "resolved: no longer reported by the same command"
                open_ids.discard(iid)

    def _add_error(self, hit: outputs.ErrorHit, call: PendingCall, source: str) -> None:
        item = self._touch(
            ItemKind.ERROR, patterns.signature(hit.line), hit.line, 3.0, group=call.family
        )
        item.source = source
        if item.status == Status.RESOLVED:
            item.transition(Status.OPEN)
            item.detail = "recurred"
        if item.status == Status.OPEN:
            self._open_error_ids().add(item.id)
        if source in self.items:
            self._link(source, Relation.PRODUCED, item.id)
        targets = list(call.files)
        if hit.path:
            file_item = self._touch_file(hit.path, "error", None)
            if file_item is not None:
                targets = [file_item.id]
        for fid in targets[:3]:
            self._link(fid, Relation.RAISED, item.id)
        if self.current_task:
            self._link(item.id, Relation.PART_OF, self.current_task)

    def _describe_command(
        self,
        call: PendingCall,
        code: int | None,
        summary: outputs.TestSummary | None,
        hits: list[outputs.ErrorHit],
        scan: str,
    ) -> None:
        command = self.items.get(call.command or "")
        if command is None:
            return
        command.exit_code = code
        if summary is not None:
            outcome = summary.text
        elif hits:
            outcome = hits[0].line
        else:
            outcome = next(
                (
                    ln.strip()
                    for ln in scan[:4_000].splitlines()
                    if ln.strip() and not outputs.is_wrapper_line(ln)
                ),
                "(no output)",
            )
        prefix = f"exit {code}: " if code is not None else ""
        if outcome.startswith(prefix):
            prefix = ""
        command.detail = patterns.clip(prefix + outcome, 160)

    def _ingest_env(self, text: str, *, allow_repo: bool) -> None:
        for name, value in outputs.env_facts(text):
            if name == "repo" and not allow_repo:
                continue
            self._touch(ItemKind.ENVIRONMENT, name, f"{name}: {value}", 1.0)
