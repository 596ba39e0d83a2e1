"""cachepilot's core in a hand-written agent loop, offline.

The "model" here is scripted (it replays the built-in demo session's tool calls) and the tools
are the demo's real tools over the files the project ships; the provider is the prompt-cache
simulator. What is real is how an agent loop calls cachepilot: `ingest` once per tool result,
`prepare` once per model call, and `recall` when the model asks for an original.

Run: uv run python examples/core_quickstart.py
"""

from __future__ import annotations

from cachepilot import CachePilot, Config, InMemoryArtifactStore, Message
from cachepilot.pricing import cost
from cachepilot.sim import CacheSimulator, Request, get_profile
from cachepilot_bench.demo_workload import (
    DEMO_TOOL_SCHEMAS,
    DemoToolState,
    build_demo_session,
    call_timestamp,
    run_demo_tool,
    volatile_system_prompt,
)


def run(pilot: CachePilot | None) -> tuple[float, float, str]:
    """Drive the scripted session; returns (input cost USD, hit rate, one reduced output)."""
    session = build_demo_session()
    profile = get_profile("openai-gpt-5.4-mini")
    sim = CacheSimulator(profile)
    tools = DemoToolState()
    transcript: list[Message] = []
    spent = cached = total = 0.0
    example = ""
    n = 0
    for recorded in session.messages[1:]:  # [0] is the recorded system prompt
        if recorded.role == "user":
            transcript.append(recorded)
        if recorded.role != "assistant":
            continue  # tool results are produced below by running the real tools
        system = volatile_system_prompt(n)  # rendered with "now" on every call, as agents do
        if pilot is None:
            request = Request(system, list(transcript), DEMO_TOOL_SCHEMAS, call_timestamp(n))
        else:
            sys_, msgs, schemas = pilot.prepare(
                system, transcript, DEMO_TOOL_SCHEMAS, thread="demo", now=call_timestamp(n)
            )
            request = Request(sys_, msgs, schemas, call_timestamp(n))
        usage = sim.submit(request, output_tokens=50)
        spent += cost(usage, profile.price).input_usd
        cached += usage.cached_tokens
        total += usage.input_tokens
        transcript.append(recorded)  # the "model's" reply
        for call in recorded.tool_calls:
            output = run_demo_tool(call.name, call.arguments, tools)
            if pilot is not None:
                output = pilot.ingest(call.name, call.arguments, output, call.id, thread="demo")
                if "recall(ref=" in output and not example:
                    example = output
            transcript.append(
                Message(role="tool", content=output, tool_call_id=call.id, name=call.name)
            )
        n += 1
    return spent, cached / total, example


def main() -> None:
    plain_cost, plain_hits, _ = run(None)
    pilot = CachePilot(Config(), store=InMemoryArtifactStore())
    ours_cost, ours_hits, example = run(pilot)
    print(f"without cachepilot: input ${plain_cost:.4f}, cache hits {plain_hits:.0%}")
    print(f"with cachepilot:    input ${ours_cost:.4f}, cache hits {ours_hits:.0%}")
    print("\nA reduced tool output as the model sees it (tail):")
    print("  ..." + example[-160:].replace("\n", "\n  "))
    ref = example.split('recall(ref="')[1][:12]
    print(f"\nThe model calls recall(ref={ref!r}, lines='1-5') and gets:")
    print(pilot.recall(ref, lines="1-5", thread="demo"))


if __name__ == "__main__":
    main()
