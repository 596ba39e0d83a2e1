"""Real clients through the proxy: each runs the scripted task straight and through the proxy.

Claude Code (`claude -p`), Codex (`codex exec`), OpenCode (`opencode run`), mini-swe-agent
(litellm, Chat Completions), pydantic-ai (Chat, Responses with and without
`previous_response_id`, Anthropic), aider (four edit turns, `aider_client.py`) and a small loop
on each official Python client (`openai` Chat Completions and Responses, `anthropic` Messages)
each run the task of `task.py` twice against a scripted upstream on
127.0.0.1 that enforces the providers' request rules (`cachepilot_bench.provider_rules`):
once straight, once through `cachepilot proxy` (the real command, as a subprocess). The
suite checks that both runs executed the same tools, left the same files, gave the same final
answer, exited 0 with no request refused, and that every upstream request of the agent's
thread starts with the previous one (marks aside) except at the proxy's maintenance points.
Claude Code with sub-agents (`subagents.py`) runs two conversations: each is checked on its
own, and neither may carry the other's content through the proxy.
It prints the input saving and the prefix share per client.

    uv run python benchmarks/real_clients/run.py [--full] [--clients codex,...] [--docs PAGE]

Without `--clients` it runs the CI set; `--full` adds the heaviest variants (`Client.full`).

Exit status: 0 all passed, 1 a check failed, 3 the npm registry (or PyPI for the Python
clients) could not be reached (`--skip-unreachable` turns that into 0 with a message). Clients are
installed into `.cache/real_clients/` (git-ignored); the clients' request bodies are saved
under `.cache/real_clients/requests/` for inspection.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import logging
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from aider_client import (  # noqa: E402
    EDITS,
    AiderModel,
    applied_edits,
    is_edit_request,
    request_date,
)
from client_base import Client, ClientRun  # noqa: E402
from clients import CLIENTS  # noqa: E402
from install import (  # noqa: E402
    AIDER,
    CLAUDE_CODE,
    CODEX,
    GEMINI_CLI,
    MINI_SWE_AGENT,
    OPENCODE,
    PYDANTIC_AI,
    InstallError,
    RegistryUnreachableError,
)
from long_session import (  # noqa: E402
    LONG_ANSWER,
    LONG_EDITS,
    LONG_MODELS,
    RECENT,
    LongModel,
    long_edits_applied,
    make_parts,
)
from scripted import PLANS, ScriptedModel  # noqa: E402
from subagents import (  # noqa: E402
    MAIN_PLAN,
    SubagentModel,
    conversation_leaks,
    split_conversations,
)
from task import (  # noqa: E402
    EDIT_NEW,
    FINAL_ANSWER,
    MODULE_PATH,
    STEPS,
    git_init,
    make_repo,
    snapshot,
)

from cachepilot.sim.profiles import get_profile  # noqa: E402
from cachepilot_bench.provider_rules import ProviderRules  # noqa: E402
from cachepilot_bench.replay import ReplayProvider, ReplayRecord, ReplayScript  # noqa: E402

__all__ = ["main"]

logger = logging.getLogger("real_clients")

WORKSPACE = HERE.parents[1]
CACHE = WORKSPACE / ".cache" / "real_clients"
PROFILES = {
    "anthropic": "anthropic",
    "chat": "openai-gpt-5.4-mini",
    "responses": "openai-gpt-5.4-mini",
    "gemini": "gemini-2.5-flash",
}
VERSIONS = {
    "claude-code": f"@anthropic-ai/claude-code {CLAUDE_CODE}",
    "codex": f"@openai/codex {CODEX}",
    "opencode": f"opencode-ai {OPENCODE}",
    "mini-swe-agent": f"mini-swe-agent {MINI_SWE_AGENT} (litellm)",
    "gemini-cli": f"@google/gemini-cli {GEMINI_CLI}",
    "pydantic-ai": f"pydantic-ai-slim {PYDANTIC_AI}",
    "aider": f"aider-chat {AIDER}",
}
"""Installed versions, by the first part of the client names."""


@dataclass(slots=True)
class Outcome:
    """One run of one client (straight or proxied)."""

    client: str
    mode: str
    run: ClientRun
    records: list[ReplayRecord]
    refusals: list[str]
    files: dict[str, str]
    edited: bool
    executed: list[tuple[str, str]]
    breaks: list[int]
    """Indexes (among the thread's requests) where the prefix of the previous one broke."""
    marks: list[frozenset[tuple[str, int, int]]] = field(default_factory=list)
    """Per request the client sent in the agent's thread (the proxy's own recall follow-ups
    left out), where the upstream saw `cache_control` marks (`mark_places`)."""
    maintenance: int = 0
    """Maintenance points the proxy reported (its /metrics epochs)."""
    recalls: int = 0
    """Recall calls the scripted model made."""
    proxy_recalls: int = 0
    """Recalls the proxy answered itself (its /metrics)."""
    proxy_log: str = ""
    dates: list[str | None] = field(default_factory=list)
    """aider: the date each of its edit requests carried."""
    restarts: int = 0
    """Times the proxy was restarted during the run."""
    profile: str = "anthropic"
    """The provider cache profile the upstream priced the run with."""
    steps: list[str] = field(default_factory=list)
    """Long sessions: the steps the model asked for, in order."""
    compactions: int = 0
    """Long sessions: times the client asked the model to summarise its history."""
    recent_view: int | None = None
    """Long sessions: of the last `RECENT` parts, how many the final request held whole."""
    conversations: list[tuple[str, Mapping[str, Any]]] = field(default_factory=list)
    """Sub-agent runs: the agent requests in order as the upstream saw them, each with its
    conversation (`main`, `sub`)."""

    @property
    def input_tokens(self) -> int:
        return sum(r.usage.input_tokens for r in self.records)

    @property
    def cached_tokens(self) -> int:
        return sum(r.usage.cached_tokens for r in self.records)

    @property
    def body_bytes(self) -> int:
        return sum(len(json.dumps(r.body)) for r in self.records)

    @property
    def cost_usd(self) -> float:
        """The run's bill: each request's usage as the upstream reported it (reads, writes,
        uncached input, output), priced by the profile's rates."""
        rates = get_profile(self.profile)
        return sum(rates.cost(r.usage).total_usd for r in self.records)

    @property
    def prefix_share(self) -> float:
        return self.cached_tokens / self.input_tokens if self.input_tokens else 0.0


@dataclass(slots=True)
class Verdict:
    """Both runs of one client and the checks' findings."""

    client: Client
    straight: Outcome
    proxied: Outcome
    failures: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ProxyProcess:
    """`cachepilot proxy` as a subprocess on a loopback port, restartable in place (same port,
    same store: what a user's restart does)."""

    def __init__(self, upstream: str, profile: str, folder: Path) -> None:
        self.port = _free_port()
        self.root = f"http://127.0.0.1:{self.port}"
        self.restarts = 0
        self._folder = folder
        self._command = [
            sys.executable,
            "-m",
            "cachepilot.cli",
            "proxy",
            "--upstream",
            upstream,
            "--port",
            str(self.port),
            "--provider",
            profile,
            "--store",
            str(folder / "proxy.sqlite"),
        ]
        self._process: subprocess.Popen[bytes] | None = None
        self._totals: dict[str, float] = {}
        """Metrics of the processes stopped so far (a restart starts the counters anew)."""

    def start(self) -> None:
        log = (self._folder / "proxy.log").open("a")
        self._process = subprocess.Popen(self._command, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + 180  # a loaded CI machine starts it slowly
        while True:
            try:
                with urllib.request.urlopen(f"{self.root}/healthz", timeout=2):
                    return
            except OSError:
                if self._process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the proxy did not start: {self.log()[-2000:]}") from None
                time.sleep(0.2)

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        with contextlib.suppress(OSError):
            for name, value in _metrics(self.root).items():
                self._totals[name] = self._totals.get(name, 0.0) + value
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def restart(self) -> None:
        """Stop the proxy and start it again on the same port and store."""
        self.stop()
        self.restarts += 1
        self.start()

    def metrics(self) -> dict[str, float]:
        """Totals of `/metrics` over every process so far (the running one included)."""
        totals = dict(self._totals)
        if self._process is not None:
            with contextlib.suppress(OSError):
                for name, value in _metrics(self.root).items():
                    totals[name] = totals.get(name, 0.0) + value
        return totals

    def log(self) -> str:
        path = self._folder / "proxy.log"
        return path.read_text() if path.is_file() else ""


@contextlib.contextmanager
def running_proxy(upstream: str, profile: str, folder: Path) -> Iterator[ProxyProcess]:
    """A started `ProxyProcess`, stopped on exit."""
    proxy = ProxyProcess(upstream, profile, folder)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()


def _metrics(root: str) -> dict[str, float]:
    """The proxy's totals from `/metrics` (Prometheus text): sample name -> value."""
    with urllib.request.urlopen(f"{root}/metrics", timeout=10) as response:
        text = response.read().decode("utf-8")
    totals: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or "{" not in line or 'thread="' in line:
            continue
        name, rest = line.split("{", 1)
        totals[name] = totals.get(name, 0.0) + float(rest.rsplit(" ", 1)[1])
    return totals


def _tool_names(body: Mapping[str, Any]) -> set[str]:
    names: set[str] = set()
    for tool in body.get("tools") or []:
        if isinstance(tool, Mapping) and isinstance(tool.get("functionDeclarations"), list):
            names.update(
                str(d["name"]) for d in tool["functionDeclarations"]
                if isinstance(d, Mapping) and "name" in d
            )  # fmt: skip
            continue
        if isinstance(tool, Mapping):
            function = tool.get("function")
            name = function.get("name") if isinstance(function, Mapping) else tool.get("name")
            if isinstance(name, str):
                names.add(name)
    return names


def _unmarked(value: Any) -> Any:
    """`value` without `cache_control` marks (clients move theirs on every request)."""
    if isinstance(value, dict):
        return {k: _unmarked(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_unmarked(v) for v in value]
    return value


def _head_and_items(api: str, body: Mapping[str, Any]) -> tuple[str, list[Any]]:
    tools = sorted(_tool_names(body))
    if api == "anthropic":
        head = [_unmarked(body.get("system")), tools]
        items = body.get("messages") or []
    elif api == "chat":
        head, items = [tools], body.get("messages") or []
    elif api == "gemini":
        head, items = [body.get("systemInstruction"), tools], body.get("contents") or []
    else:
        head = [body.get("instructions"), tools]
        raw = body.get("input")
        items = raw if isinstance(raw, list) else [{"role": "user", "content": raw}]
    return json.dumps(head, sort_keys=True), [_unmarked(i) for i in items]


def mark_places(body: Mapping[str, Any]) -> frozenset[tuple[str, int, int]]:
    """Where a Messages body carries marks: (`tools/<name>`, 0, 0) per marked tool, (`system`,
    index, 0) per marked system block, (`messages`, n, k) for block k from the end of message n
    from the end (so places stay comparable when the proxy splices a recall exchange in
    earlier)."""
    out: set[tuple[str, int, int]] = set()
    tools = body.get("tools")
    if isinstance(tools, list):
        # By name: the proxy sorts the tools (README), so an index would move.
        out.update(
            (f"tools/{t.get('name')}", 0, 0)
            for t in tools
            if isinstance(t, Mapping) and t.get("cache_control")
        )
    blocks = body.get("system")
    if isinstance(blocks, list):
        out.update(
            ("system", i, 0)
            for i, b in enumerate(blocks)
            if isinstance(b, Mapping) and b.get("cache_control")
        )
    messages = body.get("messages") or []
    for n, message in enumerate(reversed(messages)):
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, list):
            out.update(
                ("messages", n, k)
                for k, b in enumerate(reversed(content))
                if isinstance(b, Mapping) and b.get("cache_control")
            )
    return frozenset(out)


def client_requests(thread: list[ReplayRecord]) -> list[ReplayRecord]:
    """The thread's upstream requests that carry a client request: the proxy's follow-up
    after a reply whose only calls were recalls is its own."""
    out: list[ReplayRecord] = []
    for k, record in enumerate(thread):
        before = thread[k - 1].reply.tool_calls if k else ()
        if before and all(c.name == "recall" for c in before):
            continue
        out.append(record)
    return out


def chained_bodies(records: list[ReplayRecord]) -> list[Mapping[str, Any]]:
    """Each record's body as the model saw it: a Responses body that names a
    `previous_response_id` gets that response's input and output items in front of its own
    (the stateful mode sends only the new items); other bodies as sent."""
    seen: dict[str, list[Any]] = {}
    out: list[Mapping[str, Any]] = []
    for record in records:
        body = record.body
        previous = body.get("previous_response_id") if record.api == "responses" else None
        if isinstance(previous, str) and previous in seen:
            raw = body.get("input")
            own = raw if isinstance(raw, list) else [{"role": "user", "content": raw}]
            items = [*seen[previous], *own]
            body = {k: v for k, v in body.items() if k != "previous_response_id"} | {"input": items}
        if record.api == "responses" and record.response_id:
            raw = body.get("input")
            items = raw if isinstance(raw, list) else [{"role": "user", "content": raw}]
            seen[record.response_id] = [*items, *(record.response or {}).get("output", [])]
        out.append(body)
    return out


def prefix_breaks(api: str, thread: list[ReplayRecord]) -> list[int]:
    """Indexes where a request does not start with the previous one's items (marks aside)."""
    out: list[int] = []
    bodies = chained_bodies(thread)
    for k in range(1, len(thread)):
        head_a, items_a = _head_and_items(api, bodies[k - 1])
        head_b, items_b = _head_and_items(api, bodies[k])
        if head_a != head_b or items_b[: len(items_a)] != items_a:
            out.append(k)
    return out


def executed_tools(api: str, body: Mapping[str, Any], repo: str) -> list[tuple[str, str]]:
    """(name, arguments) of the task's tool calls in the last request (recall left out), the
    scratch repository's path written `<repo>` (each run has its own)."""
    found: list[tuple[str, str]] = []

    def add(call_id: Any, name: Any, arguments: Any) -> None:
        if isinstance(call_id, str) and "_cp_" in call_id and not call_id.endswith("_cp_recall"):
            text = json.dumps(arguments, sort_keys=True).replace(repo, "<repo>")
            found.append((str(name), text))

    if api == "anthropic":
        for message in body.get("messages") or []:
            for block in message.get("content") or []:
                if isinstance(block, Mapping) and block.get("type") == "tool_use":
                    add(block.get("id"), block.get("name"), block.get("input"))
    elif api == "gemini":
        for turn in body.get("contents") or []:
            for part in turn.get("parts") or [] if isinstance(turn, Mapping) else []:
                call = part.get("functionCall") if isinstance(part, Mapping) else None
                if isinstance(call, Mapping):
                    add(call.get("id"), call.get("name"), call.get("args") or {})
    elif api == "chat":
        for message in body.get("messages") or []:
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                add(
                    call.get("id"),
                    function.get("name"),
                    json.loads(function.get("arguments") or "{}"),
                )
    else:
        for item in body.get("input") or []:
            if isinstance(item, Mapping) and item.get("type") == "function_call":
                add(
                    item.get("call_id"), item.get("name"), json.loads(item.get("arguments") or "{}")
                )
    return found


def run_once(client: Client, mode: str, cache: Path) -> Outcome:
    """Run `client` on a fresh copy of the task, straight or through the proxy."""
    folder = cache / "runs" / client.name / mode
    shutil.rmtree(folder, ignore_errors=True)
    repo = make_repo(folder / "repo")
    if client.task == "long":
        make_parts(repo)
    git_init(repo)
    plan = MAIN_PLAN if client.plan == "claude-code-subagents" else PLANS.get(client.plan)
    model: ScriptedModel | AiderModel | LongModel | SubagentModel
    if client.task == "long":
        model = LONG_MODELS[client.plan]()
    elif client.plan == "claude-code-subagents":
        model = SubagentModel(str(repo))
    elif plan is None:
        model = AiderModel()
    else:
        model = ScriptedModel(plan, str(repo))
    rules = ProviderRules()
    profile = client.profile or PROFILES[client.api]
    provider = ReplayProvider(ReplayScript([]), profile, responder=model, rules=rules)
    metrics: dict[str, float] = {}
    proxy_log = ""
    restarts = 0
    with provider:
        upstream = provider.base_url.removesuffix("/v1")
        if mode == "proxied":
            with running_proxy(upstream, profile, folder) as proxy:
                run = client.run(cache, proxy.root, repo, folder / "home", proxy.restart)
                metrics = proxy.metrics()
            proxy_log, restarts = proxy.log(), proxy.restarts
        else:
            run = client.run(cache, upstream, repo, folder / "home", lambda: None)
    records = provider.records
    requests = cache / "requests"
    requests.mkdir(parents=True, exist_ok=True)
    provider.write_log(requests / f"{client.name}-{mode}.jsonl")
    # Each conversation of the run: one, or the main one and the sub-agent's.
    conversations: dict[str, list[ReplayRecord]]
    if isinstance(model, LongModel):
        conversations = {"main": [r for r in records if model.tools <= _tool_names(r.body)]}
    elif plan is None:  # aider: its edit turns (no tools; the commit messages are side calls)
        conversations = {"main": [r for r in records if is_edit_request(r.body)]}
    elif isinstance(model, SubagentModel):
        split = split_conversations([r.body for r in records])
        conversations = {name: [records[k] for k in ks] for name, ks in split.items()}
    else:
        conversations = {"main": [r for r in records if plan.tools <= _tool_names(r.body)]}
    thread = conversations["main"]
    if thread:
        first = json.dumps(thread[0].body, indent=1)
        (requests / f"{client.name}-{mode}-first.json").write_text(first)
    maintenance = int(metrics.get("cachepilot_proxy_maintenance_epochs_total", 0))
    module = repo / MODULE_PATH
    text = module.read_text(encoding="utf-8")
    return Outcome(
        client=client.name,
        mode=mode,
        run=run,
        records=records,
        refusals=list(rules.refusals),
        files=snapshot(repo),
        edited=long_edits_applied(text) == LONG_EDITS
        if isinstance(model, LongModel)
        else EDIT_NEW in text
        if plan is not None
        else applied_edits(text) == len(EDITS),
        executed=[
            call
            for c in conversations.values()
            if c
            for call in executed_tools(client.api, chained_bodies(c)[-1], str(repo))
        ],
        breaks=_breaks(client.api, list(conversations.values())),
        marks=[mark_places(r.body) for c in conversations.values() for r in client_requests(c)]
        if client.api == "anthropic"
        else [],
        maintenance=maintenance,
        recalls=model.recalls if isinstance(model, ScriptedModel | SubagentModel) else 0,
        proxy_recalls=int(metrics.get("cachepilot_proxy_recalls_total", 0)),
        proxy_log=proxy_log,
        dates=[request_date(r.body) for r in thread],
        restarts=restarts,
        profile=profile,
        # Step replies only (`s<k>`; a side call's reply, `side`, is no step).
        steps=[r for r in model.replies if r[1:].isdigit() and r.startswith("s")]
        if isinstance(model, LongModel)
        else [],
        compactions=model.compactions if isinstance(model, LongModel) else 0,
        recent_view=model.final_view if isinstance(model, LongModel) else None,
        conversations=_in_order(records, conversations) if isinstance(model, SubagentModel) else [],
    )


def _in_order(
    records: list[ReplayRecord], conversations: dict[str, list[ReplayRecord]]
) -> list[tuple[str, Mapping[str, Any]]]:
    """The conversations' requests in the order they reached the upstream, each with its
    conversation's name."""
    owner = {id(r): name for name, thread in conversations.items() for r in thread}
    return [(owner[id(r)], r.body) for r in records if id(r) in owner]


def _breaks(api: str, conversations: list[list[ReplayRecord]]) -> list[int]:
    """`prefix_breaks` of each conversation, numbered across them in order (a sub-agent's
    requests follow the main conversation's)."""
    out: list[int] = []
    offset = 0
    for thread in conversations:
        out.extend(offset + k for k in prefix_breaks(api, thread))
        offset += len(thread)
    return out


def judge(client: Client, straight: Outcome, proxied: Outcome) -> Verdict:
    """The checks of one client's two runs."""
    verdict = Verdict(client, straight, proxied)
    fail = verdict.failures.append
    if client.task == "aider":
        _judge_aider(verdict)
    if client.task == "long":
        _judge_long(verdict)
    for outcome in (straight, proxied):
        tag = outcome.mode
        if outcome.run.returncode != 0:
            fail(f"{tag}: exit status {outcome.run.returncode}: {outcome.run.log[-800:]}")
        refused = [r for r in outcome.refusals if r not in client.probes]
        if refused:
            fail(f"{tag}: the upstream refused {len(refused)} request(s): {refused[0]}")
        if client.task != "fix":
            continue
        if outcome.run.answer.strip() != FINAL_ANSWER:
            fail(f"{tag}: final answer {outcome.run.answer[:200]!r}")
        if not outcome.edited:
            fail(f"{tag}: {MODULE_PATH} was not edited")
        if len(outcome.executed) < len(STEPS):
            fail(f"{tag}: {len(outcome.executed)} of {len(STEPS)} task steps reached the upstream")
    if sorted(proxied.refusals) != sorted(straight.refusals):
        fail(f"refusals differ: {straight.refusals} straight, {proxied.refusals} proxied")
    # A long session's history is compacted (its last request holds a few steps, and
    # compaction requests shift the request indexes): its steps are compared in `_judge_long`.
    if client.task != "long":
        _compare_requests(verdict)
    if proxied.conversations or straight.conversations:
        _judge_subagents(verdict)
    if client.cost_cap is not None and proxied.cost_usd > straight.cost_usd * client.cost_cap:
        fail(
            f"the proxied run costs {proxied.cost_usd / straight.cost_usd:.4f}x straight "
            f"(at most {client.cost_cap}x)"
        )
    allowed = len(straight.breaks) + proxied.maintenance
    if len(proxied.breaks) > allowed:
        fail(
            f"proxied prefix broke at requests {proxied.breaks} ({proxied.maintenance} maintenance "
            f"points, {len(straight.breaks)} breaks straight)"
        )
    return verdict


def _compare_requests(verdict: Verdict) -> None:
    """The request-by-request checks: the same tools, files, recalls and client marks."""
    fail = verdict.failures.append
    straight, proxied = verdict.straight, verdict.proxied
    if straight.executed != proxied.executed:
        fail(f"different tools executed: {straight.executed} vs {proxied.executed}")
    if straight.files != proxied.files:
        changed = sorted(
            k
            for k in straight.files.keys() | proxied.files.keys()
            if straight.files.get(k) != proxied.files.get(k)
        )
        fail(f"different files at the end: {changed}")
    if proxied.proxy_recalls != proxied.recalls:
        fail(
            f"the model called recall {proxied.recalls} time(s), the proxy answered "
            f"{proxied.proxy_recalls} (the client must never see a recall call)"
        )
    # The straight run's upstream requests are the client's own: each of its marks must reach
    # the upstream on the same block through the proxy (which may add marks, never move one).
    if len(straight.marks) != len(proxied.marks):
        fail(f"{len(straight.marks)} client requests straight, {len(proxied.marks)} proxied")
    for k, (own, seen) in enumerate(zip(straight.marks, proxied.marks, strict=False)):
        if not own <= seen:
            fail(f"request {k}: the client's marks {sorted(own - seen)} did not reach the upstream")
            break


def _judge_subagents(verdict: Verdict) -> None:
    """A sub-agent run's checks: both conversations ran in both runs (the same number of
    requests each), and no proxied request of one carries content of the other that the
    client did not send."""
    fail = verdict.failures.append
    straight, proxied = verdict.straight.conversations, verdict.proxied.conversations
    for name in ("main", "sub"):
        counts = sum(n == name for n, _ in straight), sum(n == name for n, _ in proxied)
        if not all(counts):
            fail(f"the {name} conversation has {counts[0]} requests straight, {counts[1]} proxied")
    for leak in conversation_leaks(straight, proxied):
        fail(leak)


def _two_days(dates: list[str | None]) -> bool:
    """`dates` is one day's date, then (at least once, to the end) the next day's."""
    if not dates or dates[0] is None:
        return False
    first = datetime.date.fromisoformat(dates[0])
    later = (first + datetime.timedelta(days=1)).isoformat()
    split = next((k for k, d in enumerate(dates) if d != dates[0]), len(dates))
    return 0 < split < len(dates) and all(d == later for d in dates[split:])


def _judge_aider(verdict: Verdict) -> None:
    """aider's own checks: every edit applied in both runs, each session's requests carry
    that session's date, and the proxy was restarted once."""
    fail = verdict.failures.append
    for outcome in (verdict.straight, verdict.proxied):
        tag = outcome.mode
        if outcome.run.answer != f"{len(EDITS)} of {len(EDITS)} edits applied":
            fail(f"{tag}: {outcome.run.answer or 'no edit applied'}")
        if not _two_days(outcome.dates):
            fail(
                f"{tag}: the edit requests carried the dates {outcome.dates}: not one date in "
                "the first session and the next day's in the second"
            )
    if verdict.proxied.restarts != 1:
        fail(f"the proxy was restarted {verdict.proxied.restarts} times, not once")


def _judge_long(verdict: Verdict) -> None:
    """A long session's checks: the same steps and edits in both runs, the answer, a
    compaction straight (else the session proves nothing), and a smaller bill proxied."""
    fail = verdict.failures.append
    straight, proxied = verdict.straight, verdict.proxied
    for outcome in (straight, proxied):
        if outcome.run.answer.strip() != LONG_ANSWER:
            fail(f"{outcome.mode}: final answer {outcome.run.answer[:200]!r}")
        if not outcome.edited:
            fail(f"{outcome.mode}: not all {LONG_EDITS} edits were made")
    if straight.files != proxied.files:
        fail("different files at the end")
    if straight.steps != proxied.steps:
        fail(f"different steps: {len(straight.steps)} straight, {len(proxied.steps)} proxied")
    if straight.compactions == 0:
        fail("the straight run never compacted: the session is too short to measure")
    if proxied.cost_usd >= straight.cost_usd:
        fail(
            f"the proxied session costs {proxied.cost_usd / straight.cost_usd:.3f}x straight "
            "(it must cost less)"
        )


def long_note(verdicts: list[Verdict]) -> str:
    """What each long session's model still saw at the end, and what it cost."""
    lines = []
    for v in verdicts:
        if v.client.task != "long":
            continue
        s, p = v.straight, v.proxied
        ratio = p.cost_usd / s.cost_usd if s.cost_usd else 0.0
        lines.append(
            f"- {v.client.name}: {len(s.steps)} steps; compactions {s.compactions} straight, "
            f"{p.compactions} proxied; cost ${s.cost_usd:.2f} straight, ${p.cost_usd:.2f} "
            f"proxied ({ratio:.3f}x); of the last {RECENT} log parts the final request held "
            f"{s.recent_view} whole straight, {p.recent_view} proxied."
        )
    return "\n".join(lines)


def _row(v: Verdict) -> list[str]:
    s, p = v.straight, v.proxied
    ratio = p.input_tokens / s.input_tokens if s.input_tokens else 0.0
    return [
        v.client.name,
        v.client.api,
        f"{len(s.records)} / {len(p.records)}",
        f"{s.input_tokens:,} / {p.input_tokens:,}",
        f"{1 - ratio:.1%}",
        f"{p.body_bytes / s.body_bytes:.2f}x" if s.body_bytes else "-",
        f"{p.cost_usd / s.cost_usd:.3f}x" if s.cost_usd else "-",
        f"{s.prefix_share:.1%} / {p.prefix_share:.1%}",
        f"{len(p.breaks)} ({p.maintenance})",
        str(p.recalls),
        "pass" if v.passed else "FAIL",
    ]


HEADER = [
    "client",
    "API",
    "requests straight / proxied",
    "input tokens straight / proxied",
    "input saving",
    "bytes proxied/straight",
    "cost proxied/straight",
    "prefix share straight / proxied",
    "prefix breaks (maintenance)",
    "recalls",
    "result",
]


def table(verdicts: list[Verdict]) -> str:
    """The results as a Markdown table."""
    rows = [HEADER, ["---"] * len(HEADER), *(_row(v) for v in verdicts)]
    return "\n".join("| " + " | ".join(r) + " |" for r in rows)


def write_docs(path: Path, verdicts: list[Verdict], command: str) -> None:
    """Regenerate the results section of docs/real-clients.md."""
    seen = {v.client.name.split("-")[0] for v in verdicts}
    prefixes = {key.split("-")[0]: key for key in VERSIONS}
    versions = ", ".join(VERSIONS[prefixes[p]] for p in prefixes if p in seen)
    marker = "<!-- results -->"
    text = path.read_text(encoding="utf-8") if path.is_file() else f"{marker}\n"
    head = text.split(marker, 1)[0]
    body = (
        f"{marker}\n\nProduced by `{command}` ({time.strftime('%Y-%m-%d', time.gmtime())}; "
        f"{versions}; Python clients openai and anthropic from the project's lock).\n\n"
        f"{table(verdicts)}\n"
    )
    note = long_note(verdicts)
    if note:
        body += f"\nLong sessions (`--long`):\n\n{note}\n"
    path.write_text(head + body, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    """Run the suite; see the module docstring for the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument(
        "--clients",
        help="comma-separated client names (default: the CI set, or every client with --full)",
    )
    parser.add_argument(
        "--long",
        action="store_true",
        help="also run the long sessions (64 steps, minutes per client; docs/real-clients.md)",
    )
    parser.add_argument(
        "--full",
        action="store_true",
        help="also run the heaviest variants (clients marked full; see docs/real-clients.md)",
    )
    parser.add_argument(
        "--skip-unreachable",
        action="store_true",
        help="exit 0 with a message when a registry cannot be reached",
    )
    parser.add_argument("--docs", type=Path, help="write the results table into this Markdown page")
    parser.add_argument(
        "--cache",
        type=Path,
        default=CACHE,
        help="folder for the installed clients, the runs and the request logs "
        "(default .cache/real_clients, ignored by git)",
    )
    parser.add_argument("--jobs", type=int, default=2, help="clients run side by side (default 2)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    default = [
        n
        for n, c in CLIENTS.items()
        if (c.task == "long" and args.long) or (c.task != "long" and (args.full or not c.full))
    ]
    names = [n.strip() for n in (args.clients or ",".join(default)).split(",") if n.strip()]
    unknown = [n for n in names if n not in CLIENTS]
    if unknown:
        parser.error(f"unknown clients {unknown}; known: {', '.join(CLIENTS)}")
    verdicts: list[Verdict] = []
    skipped: list[str] = []

    def both_runs(client: Client) -> tuple[Verdict, float]:
        started = time.monotonic()
        straight = run_once(client, "straight", args.cache)
        proxied = run_once(client, "proxied", args.cache)
        return judge(client, straight, proxied), time.monotonic() - started

    # Clients run side by side (each has its own upstream, proxy, ports and folders).
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [(name, pool.submit(both_runs, CLIENTS[name])) for name in names]
        for name, future in futures:
            try:
                verdict, seconds = future.result()
            except RegistryUnreachableError as exc:
                skipped.append(f"{name}: skipped, {exc}")
                print(skipped[-1], flush=True)
                continue
            except InstallError as exc:
                if not args.skip_unreachable:
                    raise
                skipped.append(f"{name}: skipped, could not be installed: {exc}")
                print(skipped[-1], flush=True)
                continue
            verdicts.append(verdict)
            status = "pass" if verdict.passed else "FAIL"
            print(f"{name}: {status} in {seconds:.0f} s", flush=True)
            for failure in verdict.failures:
                print(f"  - {failure}", flush=True)
    if verdicts:
        print(table(verdicts))
        note = long_note(verdicts)
        if note:
            print(note)
    if args.docs and verdicts:
        command = (
            "uv run python benchmarks/real_clients/run.py"
            + (" --full" if args.full else "")
            + (" --long" if args.long else "")
            + (f" --clients {args.clients}" if args.clients else "")
            + f" --docs {args.docs}"
        )
        write_docs(args.docs, verdicts, command)
    if any(not v.passed for v in verdicts):
        return 1
    if skipped and not args.skip_unreachable:
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
