"""`--recall-offer when_it_pays` through the real proxy and the real `anthropic` client: the
first request carries only the client's tools; the request that first holds a reduced output
adds `recall`, and every later request keeps the same tools."""

from __future__ import annotations

import anthropic
from proxy_helpers import running_proxy
from scripts import ANTHROPIC_BASH, BIG, BIG_REF, CALL, FINAL, SYSTEM, plain_script

from cachepilot.state_store import MemoryStateStore
from cachepilot_bench.replay import ReplayProvider


def _turns() -> list[list[dict[str, object]]]:
    first: list[dict[str, object]] = [{"role": "user", "content": "Build the project."}]
    second = [
        *first,
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Running the build."},
                {"type": "tool_use", "id": CALL.id, "name": "bash", "input": {"command": "make"}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": CALL.id, "content": BIG}],
        },
    ]
    third = [*second, {"role": "assistant", "content": FINAL}, {"role": "user", "content": "Ok"}]
    return [first, second, third]


def _tool_names(recall_offer: str) -> tuple[list[list[str]], list[str]]:
    with (
        ReplayProvider(plain_script(), profile="anthropic") as upstream,
        running_proxy(
            upstream.base_url,
            provider="anthropic",
            recall_offer=recall_offer,
            state_store=MemoryStateStore(),
        ) as proxy,
    ):
        api = anthropic.Anthropic(base_url=proxy.root, api_key="k", max_retries=0, timeout=30)
        for messages in _turns():
            api.messages.create(
                model="claude-test",
                max_tokens=256,
                system=SYSTEM,
                messages=messages,  # type: ignore[arg-type]
                tools=[ANTHROPIC_BASH],  # type: ignore[list-item]
            )
        records = upstream.records
    names = [[t["name"] for t in r.body["tools"]] for r in records]
    sent = [str(r.body["messages"]) for r in records]
    return names, sent


def test_recall_joins_with_the_first_reduced_output_and_stays() -> None:
    names, sent = _tool_names("when_it_pays")
    assert names == [["bash"], ["bash", "recall"], ["bash", "recall"]]
    assert f'recall(ref="{BIG_REF}")' in sent[1] and BIG not in sent[1]


def test_the_default_offers_recall_from_the_first_request() -> None:
    names, _ = _tool_names("first_call")
    assert names == [["bash", "recall"]] * 3
