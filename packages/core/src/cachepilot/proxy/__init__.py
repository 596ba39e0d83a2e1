"""`cachepilot proxy`: cache-aware context management for any agent, through an HTTP proxy.

Point an agent's OpenAI, Anthropic or Gemini client at the proxy (`base_url`); it forwards
Chat Completions, Responses, Anthropic Messages and Gemini `generateContent` requests
(streaming or not) to the upstream, after showing each tool result as its reduced view
(originals archived), canonicalizing the system prompt, applying the thread's maintenance
plan, offering a `recall` tool it answers itself, and, for Anthropic, placing
`cache_control` breakpoints. Needs `cachepilot[proxy]`.

```python
from cachepilot.proxy import ProxyConfig, ProxyEngine, create_app, serve

serve(ProxyConfig(upstream="https://api.anthropic.com", port=8787))
```

Part `proxy` of the core (docs/architecture.md). May import: `artifacts`, `canonical`,
`diagnose`, `messages`, `pilot`, `recall`, `sim`, `state`, `support`, `tokens`, `usage`, `wire`;
tests/layout/test_parts.py checks it.
"""

from __future__ import annotations

from cachepilot.proxy.config import DEFAULT_THREAD_HEADER, ProxyConfig
from cachepilot.proxy.engine import Answer, ProxyEngine
from cachepilot.proxy.threads import ThreadId, identify

__all__ = [
    "DEFAULT_THREAD_HEADER",
    "Answer",
    "ProxyConfig",
    "ProxyEngine",
    "ThreadId",
    "create_app",
    "identify",
    "serve",
]


def __getattr__(name: str) -> object:
    # The ASGI app needs Starlette: imported only when asked for.
    if name in ("create_app", "serve"):
        from cachepilot.proxy import app

        return getattr(app, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
