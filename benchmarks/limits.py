"""Hostile-input and scale probes: each runs in its own interpreter with a time limit.

Prints one line per probe (what was measured, the figure, seconds). A probe that does not
finish within its limit is reported as such (the process is killed). The PostgreSQL probes need
`CACHEPILOT_TEST_POSTGRES_URL` (see `.ci/services.sh`) and PostgreSQL's binaries; they are
skipped otherwise.

Run: uv run python benchmarks/limits.py [--only NAME ...] [--timeout 60]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

PROBES: dict[str, str] = {
    "fact_scan_long_run": """
        import time
        from cachepilot.memory.facts import count_candidates
        for size in (30_000, 1_000_000):
            started = time.perf_counter()
            count_candidates("x" * size)
            print(f"fact scan of {size:,} characters without a separator: "
                  f"{time.perf_counter() - started:.3f} s")
    """,
    "regex_backtracking": """
        import time
        from cachepilot import CachePilot, Config
        from cachepilot.artifacts import InMemoryArtifactStore
        pilot = CachePilot(Config(), store=InMemoryArtifactStore())
        ref = pilot.store.put("t", "a" * 40 + "!")
        started = time.perf_counter()
        pilot.recall(ref, grep="(a+)+$", thread="t")
        print(f"recall grep='(a+)+$' on 40 a's: {time.perf_counter() - started:.3f} s")
    """,
    "regex_echo": """
        from cachepilot import CachePilot, Config
        from cachepilot.artifacts import InMemoryArtifactStore
        pilot = CachePilot(Config(), store=InMemoryArtifactStore())
        ref = pilot.store.put("t", "x" * 5_000)
        out = pilot.recall(ref, grep="x" * 1_000_000, max_chars=1_000, thread="t")
        print(f"1 MB grep pattern, max_chars=1000: {len(out):,} characters returned")
    """,
    "html_br_div_180k": """
        import time
        from cachepilot.reduce import Pipeline
        html = "<html><body>" + "<br><div>" * 20_000
        started = time.perf_counter()
        Pipeline().run("fetch", {"url": "x"}, "c", html)
        seconds = time.perf_counter() - started
        print(f"HTML <br><div> x 20,000 ({len(html):,} chars): {seconds:.2f} s")
    """,
    "html_br_div_900k": """
        import time
        from cachepilot.reduce import Pipeline
        html = "<html><body>" + "<br><div>" * 100_000
        started = time.perf_counter()
        Pipeline().run("fetch", {"url": "x"}, "c", html)
        seconds = time.perf_counter() - started
        print(f"HTML <br><div> x 100,000 ({len(html):,} chars): {seconds:.2f} s")
    """,
    "html_nested_lists": """
        import resource, time
        from cachepilot.reduce.passes.html import html_to_text
        html = "<html><body>" + "<ul><li>i" * 20_000
        started = time.perf_counter()
        out = html_to_text(html)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"HTML <ul><li> x 20,000: output {len(out):,} chars, peak RSS {peak:,.0f} MiB, "
              f"{time.perf_counter() - started:.2f} s")
    """,
    "state_2000_calls": """
        import json
        from cachepilot import CachePilot, Config
        from cachepilot.artifacts import InMemoryArtifactStore
        from cachepilot.messages import Message, ToolCall
        pilot = CachePilot(Config(), store=InMemoryArtifactStore())
        msgs = [Message(role="user", content="Task 0: fix the bug in module 0")]
        now = 1_700_000_000.0
        for i in range(2_000):
            now += 5
            if i and i % 25 == 0:
                msgs.append(Message(role="assistant", content=f"Done with task {i // 25 - 1}."))
                msgs.append(Message(role="user", content=f"Task {i // 25}: fix module {i // 25}"))
            pilot.prepare("You are a coder.", msgs, [], thread="t", now=now)
            path = f"/repo/src/mod{i % 40}.py"
            tool = "read_file" if i % 3 else "bash"
            args = {"path": path} if tool == "read_file" else {"command": f"pytest t{i % 17}.py"}
            call = ToolCall(id=f"call_{i}", name=tool, arguments=json.dumps(args))
            msgs.append(Message(role="assistant", content="", tool_calls=(call,)))
            lines = ([f"{path}:{j}: v_{j} = {i * j}" for j in range(60)] if tool == "read_file"
                     else [f"test_{k} PASSED" for k in range(40)])
            out = "\\n".join(lines)
            text = pilot.ingest(tool, args, out, call.id, "t")
            msgs.append(Message(role="tool", content=text, tool_call_id=call.id, name=tool))
        size = len(pilot.state("t").model_dump_json())
        print(f"PilotState after 2,000 calls: {size:,} bytes ({size / 2_000:.0f} B/call)")
    """,
    "checkpoints_200_calls": """
        import sys
        sys.path.insert(0, "tests/langgraph")
        from langchain.agents import create_agent
        from langchain_core.messages import AIMessage
        from langgraph.checkpoint.memory import InMemorySaver
        from lg_scripted import TOOLS, ScriptedChatModel, coding_responder, tool_call
        from cachepilot import CachePilot, Config
        from cachepilot.artifacts import InMemoryArtifactStore
        from cachepilot_langgraph import CachePilotMiddleware

        def notes(i):
            return tool_call("read_note", {"name": f"n{i}"}, i) if i < 200 else AIMessage("done")

        for label, responder in (("400-line logs", coding_responder(200)),
                                 ("short notes", lambda messages, i: notes(i))):
            for middleware in (False, True):
                saver = InMemorySaver()
                pilot = CachePilot(Config(), store=InMemoryArtifactStore())
                agent = create_agent(ScriptedChatModel(responder=responder), TOOLS,
                                     middleware=[CachePilotMiddleware(pilot)] if middleware else [],
                                     checkpointer=saver)
                agent.invoke({"messages": [("user", "go")]},
                             {"configurable": {"thread_id": "t"}, "recursion_limit": 10_000})
                sizes = {}
                for key, blob in saver.blobs.items():
                    sizes[key[2]] = sizes.get(key[2], 0) + len(blob[1])
                total = sum(sizes.values()) / 2**20
                state = sizes.get("cachepilot", 0) / 2**20
                print(f"create_agent, 200 calls, {label}, middleware={middleware}: checkpoint "
                      f"blobs {total:.1f} MiB (pilot state {state:.1f} MiB)")
    """,
    "evicted_ref": """
        from cachepilot import CachePilot, Config
        from cachepilot.artifacts import InMemoryArtifactStore
        pilot = CachePilot(Config(), store=InMemoryArtifactStore(max_bytes_per_thread=250_000))
        logs = ["\\n".join(f"build {i}: step {j}" for j in range(6_000)) for i in range(4)]
        texts = [pilot.ingest("bash", {"command": f"b{i}"}, log, f"c{i}", "t")
                 for i, log in enumerate(logs)]
        ref = texts[0].split('recall(ref="', 1)[1][:12]
        print("recall of an evicted ref:", pilot.recall(ref, thread="t").splitlines()[0])
    """,
    "postgres_saves": """
        import asyncio, logging, os, sys
        sys.path.insert(0, "tests/servers")
        from server_helpers import database, with_driver
        from sqlalchemy.ext.asyncio import create_async_engine
        from cachepilot_agents.state import SQLAlchemyStateStore
        url = os.environ["CACHEPILOT_TEST_POSTGRES_URL"]
        async def saves(db, driver):
            engine = create_async_engine(with_driver(db, driver), pool_size=25)
            store = SQLAlchemyStateStore(engine)
            await store.save("warm", "{}")
            results = await asyncio.gather(*(store.save("one", f"state {i}") for i in range(20)),
                                           return_exceptions=True)
            await engine.dispose()
            return sum(isinstance(r, Exception) for r in results)
        for driver in ("asyncpg", "psycopg"):
            with database(url) as db:
                print(f"20 concurrent saves of one thread ({driver}): "
                      f"{asyncio.run(saves(db, driver))} failed")
    """,
    "postgres_restart": """
        import sys
        sys.path.insert(0, "tests/servers")
        from server_helpers import PrivatePostgres
        from langgraph.store.postgres import PostgresStore
        from cachepilot import CachePilot, Config
        from cachepilot_langgraph.store import LangGraphArtifactStore
        log = "\\n".join(f"{i:06d} INFO worker-{i % 7} processed batch {i} in {i % 97} ms"
                         for i in range(4_000))
        server = PrivatePostgres()
        try:
            with PostgresStore.from_conn_string(server.url) as lg:
                lg.setup()
                pilot = CachePilot(Config(), store=LangGraphArtifactStore(lg))
                before = pilot.ingest("bash", {"command": "a"}, log + "a", "c1", "t")
                server.restart()
                after = pilot.ingest("bash", {"command": "b"}, log + "b", "c2", "t")
                failures = getattr(pilot.state("t"), "archive_failures", "n/a")
                print(f"ingest of {len(log):,} chars: {len(before):,} before a server restart, "
                      f"{len(after):,} after (archive failures counted: {failures})")
        finally:
            server.close()
    """,
    "first_ingest_200mb": """
        import os, subprocess, sys, time
        sys.path.insert(0, "tests/servers")
        from server_helpers import database
        from langgraph.store.postgres import PostgresStore
        from cachepilot_langgraph.store import LangGraphArtifactStore
        url = os.environ["CACHEPILOT_TEST_POSTGRES_URL"]
        with database(url) as db:
            with PostgresStore.from_conn_string(db) as lg:
                lg.setup()
                filler = LangGraphArtifactStore(lg, auto_prune=False)
                blob = os.urandom(375_000).hex()
                for i in range(270):
                    filler.put(f"th{i % 30}", blob + str(i))
            code = (
                "import sys, time\\n"
                "from langgraph.store.postgres import PostgresStore\\n"
                "from cachepilot import CachePilot, Config\\n"
                "from cachepilot_langgraph.store import LangGraphArtifactStore\\n"
                "with PostgresStore.from_conn_string(sys.argv[1]) as lg:\\n"
                "    pilot = CachePilot(Config(), store=LangGraphArtifactStore(lg))\\n"
                "    out = '\\\\n'.join(f'line {i}' for i in range(20000))\\n"
                "    t = time.perf_counter()\\n"
                "    pilot.ingest('bash', {'command': 'x'}, out, 'c1', 'fresh')\\n"
                "    print(f'{time.perf_counter() - t:.2f}')\\n"
            )
            seconds = subprocess.run([sys.executable, "-c", code, db], capture_output=True,
                                     text=True, check=True).stdout.strip()
            print(f"first ingest of a fresh process over ~200 MB of archive: {seconds} s")
    """,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=sorted(PROBES), help="probes to run")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per probe")
    args = parser.parse_args()
    for name in args.only or list(PROBES):
        if name.startswith(("postgres", "first_ingest")) and not os.environ.get(
            "CACHEPILOT_TEST_POSTGRES_URL"
        ):
            print(f"{name}: skipped (CACHEPILOT_TEST_POSTGRES_URL is not set)")
            continue
        started = time.perf_counter()
        try:
            done = subprocess.run(
                [sys.executable, "-c", textwrap.dedent(PROBES[name])],
                capture_output=True,
                text=True,
                timeout=args.timeout,
                cwd=HERE.parent,
                check=False,
            )
        except subprocess.TimeoutExpired:
            print(f"{name}: did not finish within {args.timeout:g} s (killed)")
            continue
        elapsed = time.perf_counter() - started
        if done.returncode != 0:
            error = (done.stderr.strip().splitlines() or ["?"])[-1]
            print(f"{name}: failed ({error[:160]}) [{elapsed:.1f} s]")
            continue
        for line in done.stdout.strip().splitlines():
            print(f"{name}: {line}")


if __name__ == "__main__":
    main()
