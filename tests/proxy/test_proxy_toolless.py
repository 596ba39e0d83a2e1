"""A tool-less client through the proxy (aider's request shape): nothing it sends is folded.

aider sends no tools: its request holds the system prompt, few-shot examples, a repo map and
the files it edits as messages, then the chat. No recall tool can be offered to such a
request, so the proxy never folds or elides any of it (DESIGN §2.7): the model keeps reading
the file it edits, and every SEARCH/REPLACE edit applies as in the straight run. The real
`openai` client talks over HTTP to the proxy, in front of the scripted upstream that enforces
the providers' rules; the proxy's clock jumps past the cache TTL between requests (every
rewrite is free then, the case that used to fold) or stays warm, and the proxy restarts
half-way.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pytest
from openai import OpenAI
from proxy_helpers import RunningProxy, running_proxy

from cachepilot import CachePilot, Config
from cachepilot.artifacts import InMemoryArtifactStore
from cachepilot.messages import Message
from cachepilot.state.base import MemoryStateStore
from cachepilot_bench.provider_rules import ProviderRules
from cachepilot_bench.replay import ReplayProvider, ReplayScript

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

PATH = "src/engine.py"
SYSTEM = (
    "Act as an expert software developer. Always use best practices when coding.\n"
    "Describe each change with a *SEARCH/REPLACE block*: the file path alone on a line, "
    "then <<<<<<< SEARCH, the exact lines to find, =======, the new lines, >>>>>>> REPLACE."
)
FEW_SHOT = [
    {"role": "user", "content": "Change get_factorial() to use math.factorial"},
    {
        "role": "assistant",
        "content": (
            "mathweb/flask/app.py\n<<<<<<< SEARCH\nfrom flask import Flask\n=======\n"
            "import math\nfrom flask import Flask\n>>>>>>> REPLACE\n"
        ),
    },
    {"role": "user", "content": "Refactor hello() into its own file."},
    {
        "role": "assistant",
        "content": (
            "hello.py\n<<<<<<< SEARCH\n=======\ndef hello():\n    print('hello')\n>>>>>>> REPLACE\n"
        ),
    },
]
REPO_MAP = "Here are summaries of some files present in my git repository:\n\n" + "\n".join(
    f"src/module_{i}.py:\n│def helper_{i}(value):\n│class Model{i}:" for i in range(120)
)
EDITS = [7, 311, 805, 1203, 42, 999]
"""The step functions the user asks to change, one per turn."""


def _engine() -> str:
    return "".join(
        f"def step_{i}(state):\n    return state + {i * 13 + 5}\n\n" for i in range(1_500)
    )


def _chat_files(text: str) -> list[dict[str, str]]:
    return [
        {
            "role": "user",
            "content": f"I have *added these files to the chat*:\n\n{PATH}\n```\n{text}```\n",
        },
        {"role": "assistant", "content": "Ok, any changes I propose will be to those files."},
    ]


def _request(text: str, done: list[dict[str, str]], ask: str) -> list[dict[str, str]]:
    """aider's message layout for one request."""
    return [
        {"role": "system", "content": SYSTEM},
        *FEW_SHOT,
        {"role": "user", "content": REPO_MAP},
        {"role": "assistant", "content": "Ok, I won't try and edit those files without asking."},
        *_chat_files(text),
        *done,
        {"role": "user", "content": ask},
    ]


def _ask(step: int) -> str:
    return f"In {PATH}, make step_{step} add 1 more than it does now."


def _model(api: str, body: Mapping[str, Any], request: object) -> Message:
    """A scripted model that edits what it reads: it finds the line in the file it was sent
    (the latest copy) and answers with a SEARCH/REPLACE block, or says it cannot see it."""
    assert api == "chat" and "tools" not in body
    texts = [str(m.get("content")) for m in body["messages"]]
    step = int(re.findall(r"make step_(\d+) add", texts[-1])[-1])
    files = [t for t in texts if t.startswith("I have *added these files to the chat*")]
    found = re.search(rf"def step_{step}\(state\):\n    return state \+ (\d+)\n", "".join(files))
    if found is None:
        return Message("assistant", f"I cannot see step_{step} in the files you added.")
    old = int(found.group(1))
    return Message(
        "assistant",
        f"{PATH}\n<<<<<<< SEARCH\ndef step_{step}(state):\n    return state + {old}\n=======\n"
        f"def step_{step}(state):\n    return state + {old + 1}\n>>>>>>> REPLACE\n",
    )


_BLOCK = re.compile(r"<<<<<<< SEARCH\n(.*?)=======\n(.*?)>>>>>>> REPLACE", re.DOTALL)


def _apply(text: str, reply: str) -> tuple[str, bool]:
    """aider's part: apply the reply's block when its SEARCH text is in the file."""
    block = _BLOCK.search(reply)
    if block is None or block.group(1) not in text:
        return text, False
    return text.replace(block.group(1), block.group(2), 1), True


class _Aider:
    """The client's side: the file it edits, the chat so far, the requests it sent."""

    def __init__(self) -> None:
        self.text = _engine()
        self.done: list[dict[str, str]] = []
        self.applied = 0
        self.sent: list[list[dict[str, str]]] = []

    def turn(self, base_url: str, step: int) -> None:
        """One edit request: send, apply the reply's block, keep the exchange."""
        api = OpenAI(base_url=base_url, api_key="sk-test", max_retries=0, timeout=60)
        messages = _request(self.text, self.done, _ask(step))
        self.sent.append(messages)
        reply = api.chat.completions.create(model="gpt-4.1", messages=messages)  # type: ignore[arg-type]
        content = reply.choices[0].message.content or ""
        self.text, ok = _apply(self.text, content)
        self.applied += ok
        self.done += [
            {"role": "user", "content": _ask(step)},
            {"role": "assistant", "content": content},
        ]


@contextmanager
def _upstream(rules: ProviderRules) -> Iterator[ReplayProvider]:
    with ReplayProvider(ReplayScript([]), responder=_model, rules=rules) as upstream:
        yield upstream


@pytest.mark.parametrize("gap", [3_600.0, 5.0], ids=["cold-cache", "warm-cache"])
def test_aider_shaped_requests_keep_every_message_and_apply_every_edit(gap: float) -> None:
    rules = ProviderRules()
    straight = _Aider()
    with _upstream(rules) as upstream:
        for step in EDITS:
            straight.turn(upstream.base_url, step)
    assert straight.applied == len(EDITS)

    clock = itertools.count(start=1_000_000.0, step=gap)  # cold: every rewrite is free
    artifacts = InMemoryArtifactStore()
    states = MemoryStateStore()
    proxied = _Aider()
    with _upstream(rules) as upstream:

        @contextmanager
        def proxy() -> Iterator[RunningProxy]:
            pilot = CachePilot(Config(provider="openai-gpt-5.4"), store=artifacts)
            with running_proxy(
                upstream.base_url,
                pilot=pilot,
                state_store=states,
                provider="openai-gpt-5.4",
                clock=lambda: next(clock),
            ) as running:
                yield running

        half = len(EDITS) // 2
        with proxy() as first:
            for step in EDITS[:half]:
                proxied.turn(first.base_url, step)
        # The proxy restarts (same stores): the rest of the session goes through the new one.
        with proxy() as second:
            for step in EDITS[half:]:
                proxied.turn(second.base_url, step)
        records = upstream.records
    assert rules.refusals == []
    assert proxied.applied == len(EDITS)
    assert proxied.text == straight.text
    assert len(records) == len(proxied.sent)
    for record, messages in zip(records, proxied.sent, strict=True):
        seen = [(m["role"], m["content"]) for m in record.body["messages"]]
        # Nothing the client sent was folded, elided or stubbed: every message reaches the
        # upstream with its text (the system prompt may carry canonical placeholders).
        assert seen[1:] == [(m["role"], m["content"]) for m in messages[1:]]
        assert "tools" not in record.body
