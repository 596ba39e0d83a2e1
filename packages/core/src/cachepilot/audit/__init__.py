"""`cachepilot audit`: per-call cache usage and every prefix break of a recorded run, explained.

```python
from cachepilot.audit import audit_file, format_report

report = audit_file("tests/cassettes/agent.yaml", provider="openai-gpt-5.4-mini")
print(format_report(report))
report.totals["hit_rate"], report.totals["avoidable_usd"]
for call in report.prefix_breaks:
    print(call.explanation.describe())
```

Inputs: vcrpy cassettes (YAML or JSON) and JSONL request logs of OpenAI Chat, OpenAI
Responses and Anthropic Messages calls (`cachepilot.audit.sources`). Calls are grouped into
threads (`cachepilot.audit.threads`), simulated under a provider profile and explained with
`cachepilot.diagnose.breaks.explain` (`cachepilot.audit.run`); `cachepilot_bench.request_logs` turns
recorded trajectories into request logs.

Part `audit` of the core (docs/architecture.md). May import: `canonical`, `diagnose`,
`messages`, `pricing`, `sim`, `tokens`, `usage`, `wire`; tests/layout/test_parts.py checks it.
"""

from __future__ import annotations

from cachepilot.audit.report import format_report
from cachepilot.audit.run import (
    AuditReport,
    CallAudit,
    ThreadAudit,
    audit_calls,
    audit_file,
    default_profile_for,
)
from cachepilot.audit.sources import (
    LoggedCall,
    calls_from_cassette,
    calls_from_entries,
    calls_from_interactions,
    load_calls,
)
from cachepilot.audit.threads import Thread, group_threads
from cachepilot.wire import ParsedBody, detect_api, parse_body, parse_response

__all__ = [
    "AuditReport",
    "CallAudit",
    "LoggedCall",
    "ParsedBody",
    "Thread",
    "ThreadAudit",
    "audit_calls",
    "audit_file",
    "calls_from_cassette",
    "calls_from_entries",
    "calls_from_interactions",
    "default_profile_for",
    "detect_api",
    "format_report",
    "group_threads",
    "load_calls",
    "parse_body",
    "parse_response",
]
