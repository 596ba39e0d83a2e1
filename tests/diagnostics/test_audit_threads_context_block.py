"""The audit sees through cachepilot's own context block only: a user's `<context>` block or
template placeholders never merge two conversations."""

from __future__ import annotations

from cachepilot.audit.sources import LoggedCall
from cachepilot.audit.threads import group_threads
from cachepilot.messages import Message
from cachepilot.sim.render import Request

SYSTEM = "You are a coding assistant."


def call(index: int, first_user: str) -> LoggedCall:
    request = Request(system=SYSTEM, messages=(Message(role="user", content=first_user),))
    return LoggedCall(index=index, source=f"line {index}", api="chat", request=request)


def test_two_conversations_whose_user_context_blocks_differ_are_two_threads() -> None:
    # Two users paste different material in a <context> block of their own (many clients do);
    # the questions after it are the same. Nothing of cachepilot is involved.
    a = "<context>\nrepo: payments-service, file billing.py\n</context>\nFix the failing test."
    b = "<context>\nrepo: auth-service, file tokens.go\n</context>\nFix the failing test."
    threads = group_threads([call(0, a), call(1, b)])
    assert len(threads) == 2, "two different conversations merged into one thread"


def test_two_conversations_whose_user_templates_differ_are_two_threads() -> None:
    a = "Write a Jinja template that greets {{customer_name}}."
    b = "Write a Jinja template that greets {{admin_password}}."
    threads = group_threads([call(0, a), call(1, b)])
    assert len(threads) == 2, "two different conversations merged into one thread"
