"""The demo session script: two coding tasks on the shipped ``inventory`` project.

Task 1 fixes a real bug (expired reservations never return their units), with a wrong first
fix, a three-times repeated test run, a superseded full re-read of a 22 kB module, an ANSI
pytest log, a pip log with ``\\r`` progress bars, the docs HTML page and a 39 kB JSON API
body. Task 2, after a 12-minute idle gap, adds a low-stock report and re-reads files of
task 1. Every tool message is the output of `run_demo_tool` on the shipped files, run in
order on one `DemoToolState`, so edits show up in later reads, diffs and test runs.

The session is a pure function of the shipped data: no clock, no randomness, no paths of
the machine it runs on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from cachepilot.messages import Message, ToolCall
from cachepilot_bench.demo_workload.tools import (
    DEMO_CWD,
    DEMO_TOOL_SCHEMAS,
    DOCS_URL,
    STAGING_STOCK_URL,
    DemoToolState,
    run_demo_tool,
)
from cachepilot_bench.traces.session import RecordedCall, Session

__all__ = [
    "AGENT_SESSION_UUID",
    "DEMO_MODEL",
    "DEMO_SESSION_ID",
    "IDLE_GAP_SECONDS",
    "START_EPOCH",
    "TASK2_FIRST_CALL",
    "build_demo_session",
    "call_timestamp",
    "record_demo_session",
    "volatile_system_prompt",
]

DEMO_SESSION_ID = "demo:inventory-bugfix-then-feature"
"""`Session.id` of the demo session."""
DEMO_MODEL = "gpt-5.4-mini"
AGENT_SESSION_UUID = "5f0c8e2a-3b1d-4c7e-9a6f-2d8b1e4c7a90"
"""The agent's own session id, printed in its system prompt (a volatile value)."""
START_EPOCH = int(datetime(2026, 3, 17, 14, 5, 9, tzinfo=UTC).timestamp())
"""Time of the first model call: Tuesday, 2026-03-17 14:05:09 UTC."""
IDLE_GAP_SECONDS = 735
"""Idle time before the first call of task 2 (longer than every provider's 5-10 min TTL)."""
TASK2_FIRST_CALL = 32
"""0-based number of the first model call of task 2 (the call after the idle gap)."""


def call_timestamp(call_number: int) -> int:
    """Unix time of model call `call_number` (0-based): 20-90 s apart, one idle gap.

    Raises:
        ValueError: when `call_number` is negative.
    """
    if call_number < 0:
        raise ValueError(f"call_number must be >= 0, got {call_number}")
    elapsed = sum(20 + (k * 37) % 71 for k in range(call_number))
    if call_number >= TASK2_FIRST_CALL:
        elapsed += IDLE_GAP_SECONDS
    return START_EPOCH + elapsed


_SYSTEM_TEMPLATE = """\
You are Forge, an autonomous software engineering agent working in the user's repository.
Today is {today}
Working directory: {cwd}
Session: {session}
Platform: linux (x86_64); shell: bash; Python 3.12.3 in a virtualenv at {cwd}/.venv

# How you work
- Understand before you change: read the relevant code, tests and docs first. Prefer
  targeted reads (grep, then read_file with a line range) over reading whole large files,
  unless you need the whole picture.
- Reproduce a bug before fixing it, and run the relevant tests after every change. A fix is
  done when the full test suite passes and the linter is clean.
- Keep changes minimal and in the style of the surrounding code. Never weaken, skip or
  delete a test to make it pass; if a test is wrong, say so and explain why.
- When a hypothesis turns out wrong, revert your change before trying the next one.
- Update CHANGELOG.md (Keep a Changelog format) for user-visible changes.
- Do not commit, push or open merge requests: the user reviews the working tree.

# Tools
- read_file: numbered lines (like `cat -n`). The numbers are not part of the file: never
  copy them into edit_file.
- edit_file: exact, unique snippet replacement. Include enough surrounding lines.
- grep: Python regular expressions, recursive over a directory.
- bash: tests (pytest), lint (ruff), pip, git. Output is returned when the command ends.
- fetch_url: raw HTTP response body (HTML or JSON).

# Communication
Be brief. Before each tool call, say in one or two sentences what you learned from the
previous result and what you will do next, quoting exact names, paths, line numbers and
values. When a task is done, summarise the root cause, the change and how it was verified.
"""


def volatile_system_prompt(call_number: int = 0) -> str:
    """The agent's system prompt as rendered for call `call_number`.

    The header carries the current time, the working directory and the agent's session id,
    like agents that call ``datetime.now()`` every turn: the text changes on every call, so
    it breaks the provider's prompt cache unless it is canonicalized. The recorded session
    uses the rendering of call 0.
    """
    moment = datetime.fromtimestamp(call_timestamp(call_number), tz=UTC)
    today = moment.strftime("%A, %Y-%m-%d %H:%M:%S UTC")
    return _SYSTEM_TEMPLATE.format(today=today, cwd=DEMO_CWD, session=AGENT_SESSION_UUID)


# --------------------------------------------------------------------------- recorder


@dataclass(slots=True)
class _Recorder:
    state: DemoToolState = field(default_factory=DemoToolState)
    messages: list[Message] = field(default_factory=list)
    calls: list[RecordedCall] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    next_call_id: int = 1

    def user(self, text: str) -> None:
        self.messages.append(Message(role="user", content=text))

    def say(self, text: str, *tool_calls: tuple[str, dict[str, Any]]) -> list[str]:
        """One model call: assistant text plus tool calls, then the tools' real outputs."""
        calls = []
        for name, arguments in tool_calls:
            calls.append(
                ToolCall(
                    id=f"call_{self.next_call_id:04d}",
                    name=name,
                    arguments=json.dumps(arguments, ensure_ascii=False),
                )
            )
            self.next_call_id += 1
        self.calls.append(
            RecordedCall(
                index=len(self.messages),
                timestamp=float(call_timestamp(len(self.calls))),
                model=DEMO_MODEL,
            )
        )
        self.messages.append(Message(role="assistant", content=text, tool_calls=tuple(calls)))
        outputs = []
        for call in calls:
            output = run_demo_tool(call.name, call.arguments, self.state)
            self.messages.append(
                Message(role="tool", content=output, tool_call_id=call.id, name=call.name)
            )
            outputs.append(output)
        self.outputs.extend(outputs)
        return outputs

    def line_of(self, path: str, needle: str) -> int:
        """1-based line of the first line containing `needle` in the current `path`."""
        for number, line in enumerate(self.state.files[path].split("\n"), start=1):
            if needle in line:
                return number
        raise LookupError(f"{needle!r} not in {path}")


def _read(
    path: str, start: int | None = None, end: int | None = None
) -> tuple[str, dict[str, Any]]:
    args: dict[str, Any] = {"path": path}
    if start is not None:
        args["start_line"] = start
    if end is not None:
        args["end_line"] = end
    return ("read_file", args)


def _bash(command: str) -> tuple[str, dict[str, Any]]:
    return ("bash", {"command": command})


def _edit(path: str, old: str, new: str) -> tuple[str, dict[str, Any]]:
    return ("edit_file", {"path": path, "old": old, "new": new})


# --------------------------------------------------------------------------- task 1

_TASK1 = f"""\
CI on main has been red since yesterday's merge: \
`tests/test_service.py::test_expired_reservation_returns_stock` fails, and a few other tests \
with it. Ops also opened INV-482: on staging, SKU WID-0042 in WH-EAST shows available=0 although \
no order holds it. Staging snapshot: {STAGING_STOCK_URL}

Please find the root cause and fix it. Don't weaken the tests; the expected behaviour is \
documented at {DOCS_URL}. Add a CHANGELOG entry when you're done."""

_GUARD_OLD = """\
        if reservation.status.is_final:
            # Already settled (committed, released or expired): giving the units back
            # again would count them twice.
            return reservation
"""
_GUARD_WRONG = """\
        if reservation.status in (ReservationStatus.COMMITTED, ReservationStatus.RELEASED):
            # Already settled (committed or released): giving the units back again would
            # count them twice. Expired reservations still hold their units (INV-482).
            return reservation
"""
_EXPIRY_OLD = """\
        for reservation in self._repo.reservations_expiring_before(now):
            # Mark the reservation first so a concurrent commit() sees it as final (#231).
            reservation = replace(
                reservation, status=ReservationStatus.EXPIRED, released_reason="ttl"
            )
            self._repo.update_reservation(reservation)
            expired.append(self._release(reservation, ReservationStatus.EXPIRED, reason="ttl"))
"""
_EXPIRY_FIXED = """\
        for reservation in self._repo.reservations_expiring_before(now):
            # _release() returns the units and marks the reservation expired in one step.
            # Marking it expired first (#231) made _release() skip it as already settled,
            # so its units stayed reserved forever (INV-482). commit() refuses expired
            # reservations on its own, by expires_at.
            expired.append(self._release(reservation, ReservationStatus.EXPIRED, reason="ttl"))
"""
_CHANGELOG_OLD = """\
### Changed
- Reservation expiry now goes through `_release()` so `reservation.expired` is published
  exactly once per reservation (#231).
"""
_CHANGELOG_FIX = (
    _CHANGELOG_OLD
    + """
### Fixed
- Expired reservations return their units to available stock again. Since #231 expiry
  marked a reservation expired before handing it to `_release()`, which then skipped it as
  already settled, so `reserved` never went down (INV-482).
"""
)


def _task1(r: _Recorder) -> None:
    svc = "inventory/service.py"
    r.user(_TASK1)
    r.say("Let me get oriented in the repository first.", ("list_dir", {"path": "."}))
    r.say(
        "A small package under `inventory/` with `tests/`, `docs/`, `README.md` and "
        "`CHANGELOG.md`. Listing the package and reading the README.",
        ("list_dir", {"path": "inventory"}),
        _read("README.md"),
    )
    r.say(
        "The README says the worker calls `InventoryService.expire_stale_reservations()` every "
        "minute and that expiry hands the units back to available stock. Since CI broke after "
        "yesterday's merge, checking the recent history.",
        _bash("git log -n 6"),
    )
    r.say(
        'HEAD is 969ea9e "Route reservation expiry through _release() (#231)" by Priya Raman, '
        "which changed exactly the expiry path; prime suspect. Running the test suite to see the "
        "current failures.",
        _bash("pytest -v"),
    )
    r.say(
        "Loading `tests/conftest.py` fails with `ModuleNotFoundError: No module named "
        "'inventory'`: the package is not installed in this virtualenv. Installing it in "
        "editable mode with the dev extra.",
        _bash("pip install -e '.[dev]'"),
    )
    r.say(
        "Installed `acme-inventory-2.7.0` with `pytest-8.3.5`. Running the suite again.",
        _bash("pytest -v"),
    )
    r.say(
        "4 failed, 59 passed. All four failures are about expiry: "
        "`test_availability_after_expiry` (`assert 5 == 12`), "
        "`test_expired_reservation_returns_stock` (`reserved` is still 12), "
        "`test_expiry_emits_one_event` (`assert 0 == 1`) and "
        "`test_release_after_expiry_is_noop` (`assert 0 == 12`). Expiry runs but the units "
        "stay reserved and no `reservation.expired` event is published. Finding the code path.",
        ("grep", {"pattern": r"def (expire_stale_reservations|_release)\b", "path": "inventory"}),
    )
    exp_line = r.line_of(svc, "def expire_stale_reservations")
    rel_line = r.line_of(svc, "def _release(")
    r.say(
        f"`expire_stale_reservations` is at `inventory/service.py:{exp_line}` and `_release` "
        f"right after it at line {rel_line}. The module is large, but I want the whole picture "
        "of the reservation rules, so reading all of it.",
        _read(svc),
    )
    r.say(
        "In `expire_stale_reservations` each reservation is first replaced with "
        "`status=ReservationStatus.EXPIRED` and saved, then passed to `_release()`, which returns "
        "early when `reservation.status.is_final`. Checking `is_final` in the models and the "
        "expiry query in the repository.",
        _read("inventory/models.py"),
        _read("inventory/repository.py"),
    )
    r.say(
        "`is_final` on `ReservationStatus` is `self is not ReservationStatus.ACTIVE`, and "
        "`reservations_expiring_before` only returns active reservations with "
        "`r.expires_at < now`, so the query side is fine. Who else relies on `is_final`?",
        ("grep", {"pattern": r"is_final|ReservationStatus\.EXPIRED", "path": "inventory"}),
    )
    r.say(
        "Only `_release` checks `is_final`, and EXPIRED is set in `expire_stale_reservations` "
        "and chosen in `_release`. Checking the event type the tests look for.",
        _read("inventory/events.py", 1, 40),
    )
    r.say(
        '`EventType.RESERVATION_EXPIRED` is `"reservation.expired"`. Reading the failing tests '
        "and their fixtures.",
        _read("tests/test_service.py"),
        _read("tests/conftest.py"),
    )
    r.say(
        "The `stocked` fixture receives 12 x `WID-0042` into `WH-EAST` (ref `PO-7731`); "
        "`test_release_after_expiry_is_noop` expects `release()` after expiry to leave "
        "`available == 12`. Checking what the docs promise before touching anything.",
        ("fetch_url", {"url": DOCS_URL}),
    )
    r.say(
        "The docs (Expiry, Idempotency) say each expiry run hands the units back and publishes "
        "`reservation.expired` once, and that releasing an already released or expired "
        "reservation is a no-op that never hands the units back twice. Now the staging snapshot "
        "from INV-482.",
        ("fetch_url", {"url": STAGING_STOCK_URL}),
    )
    r.say(
        'Staging shows `WID-0042` with `"on_hand":12,"reserved":12,"available":0` and '
        '`"reservations":[]`, and `GAD-0107` with `"reserved":6` and no reservations either: '
        "the stuck-reservations pattern from the runbook. Checking how the API triggers expiry.",
        _read("inventory/api.py"),
    )
    r.say(
        "`POST /api/v1/maintenance/expire` just calls `service.expire_stale_reservations()`, "
        "so the API failure is the same bug. Reproducing the main failing test on its own.",
        _bash("pytest tests/test_service.py -q -k test_expired_reservation_returns_stock"),
    )
    r.say(
        "Reproduced: `assert 12 == 0` on `availability.reserved`. "
        "First hypothesis: the guard in `_release` treats EXPIRED as settled, so expired "
        "reservations never give their units back. Letting EXPIRED through the guard.",
        _edit(svc, _GUARD_OLD, _GUARD_WRONG),
    )
    r.say("Running the service tests.", _bash("pytest tests/test_service.py -q"))
    r.say(
        "`test_expired_reservation_returns_stock` and `test_expiry_emits_one_event` pass now, "
        "but `test_release_after_expiry_is_noop` fails with "
        "`InventoryError: WID-0042@WH-EAST: reserved would become -12`. That looks like state "
        "leaking between tests; re-running the file to check whether it is order-dependent.",
        _bash("pytest tests/test_service.py -q"),
    )
    r.say(
        "Same failure. Running it once more to make sure it is deterministic.",
        _bash("pytest tests/test_service.py -q"),
    )
    r.say(
        "Deterministic, and it is my change: `release()` after expiry now passes the guard "
        "too, so the 12 units are handed back a second time. The guard is right (the docs say "
        "release after expiry is a no-op). Reverting it.",
        _edit(svc, _GUARD_WRONG, _GUARD_OLD),
    )
    exp_line = r.line_of(svc, "def expire_stale_reservations")
    r.say(
        "Reverted. The real problem must be the order in `expire_stale_reservations`; "
        "re-reading that part.",
        _read(svc, exp_line, exp_line + 20),
    )
    r.say(
        "Confirmed: the loop saves the reservation as EXPIRED and then calls `_release()`, "
        "which sees a final status and returns without `reserved=-reservation.quantity` and "
        "without the event. That is the #231 change. `_release()` already sets the status and "
        "publishes `reservation.expired`, and `commit()` rejects expired reservations by "
        "`expires_at`, so the pre-marking can simply go.",
        _edit(svc, _EXPIRY_OLD, _EXPIRY_FIXED),
    )
    r.say(
        "Running the previously failing expiry tests first.",
        _bash("pytest tests/test_service.py tests/test_api.py -q -k expir"),
    )
    r.say(
        "All expiry tests pass. Re-reading the whole module once more to make sure nothing "
        "else updates a reservation before `_release()`.",
        _read(svc),
    )
    r.say(
        "Only `_release()` and `commit()` write reservation statuses now, each after its own "
        "status check. Full suite.",
        _bash("pytest -q"),
    )
    r.say("63 passed. Lint:", _bash("ruff check ."))
    r.say("Clean. Reviewing the diff.", _bash("git diff"))
    r.say(
        "The diff only touches the expiry loop in `inventory/service.py`. Adding the CHANGELOG "
        "entry under Unreleased.",
        _read("CHANGELOG.md", 1, 14),
    )
    r.say(
        "Adding a Fixed section below the #231 entry.",
        _edit("CHANGELOG.md", _CHANGELOG_OLD, _CHANGELOG_FIX),
    )
    r.say("Final check of the working tree.", _bash("git status"))
    r.say(
        "Fixed.\n\n"
        "Root cause: commit 969ea9e (#231) made `expire_stale_reservations()` save each "
        "reservation as `EXPIRED` before calling `_release()`. `_release()` returns early for "
        "any final status, so expired reservations never decremented `reserved` and never "
        "published `reservation.expired`. That is INV-482: staging has `WID-0042` at "
        "on_hand 12 / reserved 12 / available 0 with no reservations (and `GAD-0107` with 6 "
        "stuck units).\n\n"
        "Change: `inventory/service.py` passes the active reservation straight to `_release()` "
        'with `ReservationStatus.EXPIRED` and `reason="ttl"`, which returns the units, '
        "sets the status and publishes the event once. My first attempt (letting EXPIRED "
        "through the guard in `_release`) broke `test_release_after_expiry_is_noop` by "
        "releasing the units twice, so I reverted it. CHANGELOG updated under Unreleased.\n\n"
        "Verified: `pytest -q` 63 passed, `ruff check .` clean. Staging still needs the stuck "
        "`reserved` counts repaired after deploy; per the runbook that is an escalation to "
        "#inventory-oncall, not an adjustment."
    )


# --------------------------------------------------------------------------- task 2

_TASK2 = """\
Thanks, that looks right. Next task in the same repo: purchasing wants a low-stock report.

Add `low_stock_report(service, warehouse_id, *, threshold=None)` to `inventory/reports.py`: \
one row per active SKU whose available stock is at or below its reorder point (or at or below \
`threshold` when given), with columns sku, name, available, reorder_point, shortfall, \
reorder_qty, biggest shortfall first. Add a CSV variant and expose both at \
`GET /api/v1/reports/low-stock/{warehouse}` (`?threshold=`, `?format=csv`) like the other \
reports. Tests, README and CHANGELOG please."""

_REPORTS_ALL_OLD = """\
__all__ = [
    "movements_csv",
"""
_REPORTS_ALL_NEW = """\
__all__ = [
    "low_stock_csv",
    "low_stock_report",
    "movements_csv",
"""
_VALUATION_CSV = """\
def valuation_csv(service: InventoryService, warehouse_id: str, *, method: str = "fifo") -> str:
    return _write_csv(VALUATION_COLUMNS, valuation_report(service, warehouse_id, method=method))
"""
_LOW_STOCK_CODE = """
LOW_STOCK_COLUMNS = ("sku", "name", "available", "reorder_point", "shortfall", "reorder_qty")


def low_stock_report(
    service: InventoryService, warehouse_id: str, *, threshold: int | None = None
) -> list[dict[str, object]]:
    \"\"\"Active SKUs at or below their reorder point (or ``threshold``), biggest shortfall first.

    ``shortfall`` is how far available stock is below the limit (0 when exactly at it).
    Inactive SKUs are skipped: purchasing never reorders them.
    \"\"\"
    if threshold is not None and threshold < 0:
        raise ValueError(f"threshold must be >= 0, got {threshold}")
    found: list[tuple[int, str, dict[str, object]]] = []
    for availability in service.availability_in(warehouse_id):
        sku = service.sku(availability.sku)
        limit = sku.reorder_point if threshold is None else threshold
        if not sku.active or availability.available > limit:
            continue
        shortfall = limit - availability.available
        row: dict[str, object] = {
            "sku": sku.code,
            "name": sku.name,
            "available": availability.available,
            "reorder_point": sku.reorder_point,
            "shortfall": shortfall,
            "reorder_qty": sku.reorder_qty,
        }
        found.append((-shortfall, sku.code, row))
    return [row for _, _, row in sorted(found)]


"""
_LOW_STOCK_CSV_V1 = """\
def low_stock_csv(
    service: InventoryService, warehouse_id: str, *, threshold: int | None = None
) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(LOW_STOCK_COLUMNS)
    for row in low_stock_report(service, warehouse_id, threshold=threshold):
        writer.writerow([row[column] for column in LOW_STOCK_COLUMNS])
    return buffer.getvalue()
"""
_LOW_STOCK_CSV_V2 = """\
def low_stock_csv(
    service: InventoryService, warehouse_id: str, *, threshold: int | None = None
) -> str:
    rows = low_stock_report(service, warehouse_id, threshold=threshold)
    return _write_csv(LOW_STOCK_COLUMNS, rows)
"""
_API_DOC_OLD = """\
    GET    /api/v1/reports/valuation/{warehouse}         ?method=average&format=csv
"""
_API_DOC_NEW = (
    _API_DOC_OLD
    + """\
    GET    /api/v1/reports/low-stock/{warehouse}         ?threshold=10&format=csv
"""
)
_API_ROUTE_ANCHOR = '@route("GET", "/reports/valuation/{warehouse}")\n'
_API_ROUTE = """\
@route("GET", "/reports/low-stock/{warehouse}")
def low_stock(service: InventoryService, request: Request) -> Response:
    warehouse = request.params["warehouse"]
    raw = request.arg("threshold")
    threshold = None if raw is None else int(raw)
    if request.arg("format") == "csv":
        return Response.csv(
            reports.low_stock_csv(service, warehouse, threshold=threshold),
            f"low-stock-{warehouse}.csv",
        )
    return Response.json(
        {"rows": reports.low_stock_report(service, warehouse, threshold=threshold)}
    )


"""
_TEST_IMPORT_OLD = """\
from inventory.reports import (
    movements_csv,
"""
_TEST_IMPORT_NEW = """\
from inventory.reports import (
    low_stock_csv,
    low_stock_report,
    movements_csv,
"""
_TEST_REPORTS_TAIL = '    assert lines[2].endswith(",shipment,-2,CS-88,,")\n'
_TEST_REPORTS_NEW = """

def test_low_stock_report_uses_reorder_points(stocked: InventoryService) -> None:
    rows = low_stock_report(stocked, "WH-EAST")
    # LEG-0001 is inactive; GAD-0107 (40) and WID-0042 (12) are above their reorder points.
    assert [(r["sku"], r["available"], r["shortfall"]) for r in rows] == [
        ("BOLT-M6-25", 18, 2),
        ("WID-0043", 3, 2),
    ]


def test_low_stock_report_threshold(stocked: InventoryService) -> None:
    rows = low_stock_report(stocked, "WH-EAST", threshold=15)
    assert [r["sku"] for r in rows] == ["WID-0043", "WID-0042"]


def test_low_stock_report_counts_reservations(stocked: InventoryService) -> None:
    stocked.reserve("GAD-0107", "WH-EAST", 35, order_ref="SO-2002")
    assert low_stock_report(stocked, "WH-EAST")[0] == {
        "sku": "GAD-0107",
        "name": "Gadget housing",
        "available": 5,
        "reorder_point": 10,
        "shortfall": 5,
        "reorder_qty": 0,
    }


def test_low_stock_csv(stocked: InventoryService) -> None:
    assert low_stock_csv(stocked, "WH-EAST").split("\\n") == [
        "sku,name,available,reorder_point,shortfall,reorder_qty",
        'BOLT-M6-25,"Hex bolt M6x25, box of 100",18,20,2,0',
        'WID-0043,"Widget, red, 40 mm",3,5,2,50',
        "",
    ]
"""
_TEST_API_TAIL = (
    '    assert response.body.decode().startswith("sku,name,on_hand,reserved,available,'
    'reorder_point\\n")\n'
)
_TEST_API_NEW = """

def test_low_stock_endpoint(app: App) -> None:
    path = "/api/v1/reports/low-stock/WH-EAST"
    body = app.handle("GET", path, query="threshold=15").data()
    assert [row["sku"] for row in body["rows"]] == ["WID-0043", "WID-0042"]
    response = app.handle("GET", path, query="format=csv")
    assert response.content_type.startswith("text/csv")
    assert response.body.decode().startswith("sku,name,available,reorder_point,shortfall")
    assert app.handle("GET", path, query="threshold=lots").status == 422
"""
_README_OLD = """\
- `GET /api/v1/reports/valuation/{warehouse}` — FIFO (default) or `?method=average`
"""
_README_NEW = (
    _README_OLD
    + """\
- `GET /api/v1/reports/low-stock/{warehouse}` — active SKUs at or below their reorder point
  (or `?threshold=N`), biggest shortfall first (`?format=csv`)
"""
)
_CHANGELOG_ADDED_OLD = """\
## [Unreleased]

"""
_CHANGELOG_ADDED_NEW = """\
## [Unreleased]

### Added
- Low-stock report: `reports.low_stock_report()` / `low_stock_csv()` and
  `GET /api/v1/reports/low-stock/{warehouse}` (`?threshold=`, `?format=csv`).

"""


def _task2(r: _Recorder) -> None:
    reports_py = "inventory/reports.py"
    r.user(_TASK2)
    if len(r.calls) != TASK2_FIRST_CALL:
        raise RuntimeError(
            f"task 2 starts at call {len(r.calls)}, but TASK2_FIRST_CALL is {TASK2_FIRST_CALL}"
        )
    r.say("Starting with the reports module.", _read(reports_py))
    sku_line = r.line_of("inventory/models.py", "class Sku:")
    r.say(
        "Reports build rows from `service.availability_in(warehouse_id)` and write CSV through "
        "`_write_csv(columns, rows)`. Re-reading the `Sku` model for `reorder_point`, "
        "`reorder_qty` and `active`.",
        _read("inventory/models.py", sku_line - 1, sku_line + 30),
    )
    r.say(
        "`Sku` has `reorder_point: int = 0`, `reorder_qty: int = 0` and `active: bool = True`. "
        "Checking how `reorder_point` is used elsewhere.",
        ("grep", {"pattern": "reorder_point", "path": "."}),
    )
    ai_line = r.line_of("inventory/service.py", "def below_reorder_point")
    r.say(
        "The `below_reorder_point` property of `Availability` in `inventory/service.py` is "
        "the rule for the `stock.low` event; the report should use the same comparison. "
        "Re-reading it.",
        _read("inventory/service.py", ai_line - 12, ai_line + 16),
    )
    r.say(
        "`available` is `max(self.on_hand - self.reserved, 0)` and `below_reorder_point` is "
        "`self.available <= self.reorder_point`, so at the reorder point counts as low. "
        "Checking the docs for conventions of new report endpoints.",
        ("fetch_url", {"url": DOCS_URL}),
    )
    r.say(
        "Docs: new reports use GET /api/v1/reports/<name>/{warehouse}, JSON "
        '`{"rows": [...]}` by default, CSV with `?format=csv`, and an unparsable numeric '
        "parameter is a `422 invalid`. Re-reading the API module for the route pattern.",
        _read("inventory/api.py"),
    )
    r.say(
        "Routes are plain functions under `@route`, and `class App` already maps `ValueError` "
        "to 422 `invalid`. Looking at the existing report tests and the fixtures again.",
        _read("tests/test_reports.py"),
        _read("tests/conftest.py"),
    )
    r.say(
        "In `stocked`, WH-EAST has `WID-0042` 12 (reorder point 5), `WID-0043` 3 (5), "
        "`GAD-0107` 40 (10), `BOLT-M6-25` 18 (20), and `LEG-0001` is inactive. Adding the "
        "report functions after `valuation_csv`.",
        _edit(reports_py, _VALUATION_CSV, _VALUATION_CSV + _LOW_STOCK_CODE + _LOW_STOCK_CSV_V1),
    )
    r.say(
        "Exporting them in `__all__`.",
        _edit(reports_py, _REPORTS_ALL_OLD, _REPORTS_ALL_NEW),
    )
    r.say(
        "Adding the route before the valuation report in `inventory/api.py`.",
        _edit("inventory/api.py", _API_ROUTE_ANCHOR, _API_ROUTE + _API_ROUTE_ANCHOR),
    )
    r.say(
        "And listing it in the module docstring.",
        _edit("inventory/api.py", _API_DOC_OLD, _API_DOC_NEW),
    )
    r.say(
        "Tests: importing the new functions in `tests/test_reports.py`.",
        _edit("tests/test_reports.py", _TEST_IMPORT_OLD, _TEST_IMPORT_NEW),
    )
    r.say(
        "With the fixture: BOLT-M6-25 (18 vs 20) and WID-0043 (3 vs 5) both have shortfall 2; "
        "with threshold=15, WID-0043 (12) comes before WID-0042 (3).",
        _edit("tests/test_reports.py", _TEST_REPORTS_TAIL, _TEST_REPORTS_TAIL + _TEST_REPORTS_NEW),
    )
    r.say(
        "An endpoint test in `tests/test_api.py`, including the 422 for a bad threshold.",
        _edit("tests/test_api.py", _TEST_API_TAIL, _TEST_API_TAIL + _TEST_API_NEW),
    )
    r.say(
        "Running the report and API tests.",
        _bash("pytest tests/test_reports.py tests/test_api.py -q"),
    )
    r.say(
        "One failure: `test_low_stock_csv`, the lines end with `\\r` because `csv.writer` "
        "defaults to \\r\\n line endings. The README says CSV exports always use `\\n`. "
        "Checking how the other exports do it.",
        ("grep", {"pattern": "lineterminator|def _write_csv", "path": "inventory"}),
    )
    r.say(
        '`_write_csv` sets `lineterminator="\\n"`. Re-reading my new code in context before '
        "switching to it.",
        _read(reports_py),
    )
    r.say(
        "`low_stock_csv` should just call `_write_csv` with `LOW_STOCK_COLUMNS`, like "
        "`valuation_csv` does.",
        _edit(reports_py, _LOW_STOCK_CSV_V1, _LOW_STOCK_CSV_V2),
    )
    r.say("Re-running the report tests verbosely.", _bash("pytest tests/test_reports.py -v"))
    r.say("All report tests pass. Full suite and lint.", _bash("pytest -q"))
    r.say("68 passed. Lint:", _bash("ruff check ."))
    r.say(
        "Clean. Documenting the endpoint in the README's Reports section.",
        _edit("README.md", _README_OLD, _README_NEW),
    )
    r.say(
        "And an Added entry in the CHANGELOG.",
        _edit("CHANGELOG.md", _CHANGELOG_ADDED_OLD, _CHANGELOG_ADDED_NEW),
    )
    r.say("Reviewing the report module diff.", _bash("git diff inventory/reports.py"))
    r.say("Overall change summary:", _bash("git diff --stat"))
    r.say(
        "Done.\n\n"
        "- `inventory/reports.py`: `low_stock_report(service, warehouse_id, *, threshold=None)` "
        "returns active SKUs whose `available` is at or below `reorder_point` (or `threshold`), "
        "sorted by "
        "`shortfall` (descending, then SKU), with columns `LOW_STOCK_COLUMNS`; "
        "`low_stock_csv()` writes them with the shared `_write_csv` helper (`\\n` endings; my "
        "first version used `csv.writer` and produced `\\r\\n`, caught by `test_low_stock_csv`).\n"
        "- `inventory/api.py`: `GET /api/v1/reports/low-stock/{warehouse}` with `?threshold=` "
        "and `?format=csv`; a non-numeric threshold returns 422 `invalid`, as documented.\n"
        "- Tests: four report tests and `test_low_stock_endpoint`; README and CHANGELOG "
        "updated.\n\n"
        "Verified: `pytest -q` 68 passed, `ruff check .` clean. Nothing is committed."
    )


# --------------------------------------------------------------------------- build


def build_demo_session() -> Session:
    """Build the demo session (about 60 model calls, two tasks) from the shipped files.

    Deterministic: two builds are equal message for message, on any machine.
    """
    return record_demo_session(DemoToolState())


def record_demo_session(state: DemoToolState) -> Session:
    """Play the session script on `state` (a fresh one for the shipped session).

    The capture script (``python -m cachepilot_bench.demo_workload._capture``) passes a state whose
    `DemoToolState.command_runner` runs test and lint commands for real.
    """
    recorder = _Recorder(state=state)
    recorder.messages.append(Message(role="system", content=volatile_system_prompt(0)))
    _task1(recorder)
    _task2(recorder)
    n_calls = len(recorder.calls)
    task_starts = [i for i, m in enumerate(recorder.messages) if m.role == "user"]
    return Session(
        id=DEMO_SESSION_ID,
        source="demo",
        messages=recorder.messages,
        tools=json.loads(json.dumps(DEMO_TOOL_SCHEMAS)),
        calls=recorder.calls,
        model=DEMO_MODEL,
        path=None,
        meta={
            "description": (
                "Built-in demo: a coding agent fixes a reservation-expiry bug in a fictional "
                "inventory service, then adds a low-stock report, with real tool outputs "
                "from the files cachepilot ships."
            ),
            "cwd": DEMO_CWD,
            "agent_session_id": AGENT_SESSION_UUID,
            "task_message_indices": task_starts,
            "task2_first_call": TASK2_FIRST_CALL,
            "idle_gap_seconds": IDLE_GAP_SECONDS,
            "system_per_call": [volatile_system_prompt(n) for n in range(n_calls)],
        },
    )
