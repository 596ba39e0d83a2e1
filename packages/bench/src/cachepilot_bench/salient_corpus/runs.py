"""Test runners, runtimes and clusters: pytest, go test, jest, a Python traceback in a job
log, a Rust panic, a Node stack, a Java server log, kubectl logs and describe, journalctl,
and a web page."""

# Templates of tool output lines read best whole, as the tools print them.
# ruff: noqa: E501

from __future__ import annotations

import random

from cachepilot_bench.salient_corpus.doc import WORDS, Doc, Sample, ident, path

__all__ = [
    "go_test",
    "html_page",
    "java_server",
    "jest",
    "journalctl",
    "kubectl_describe",
    "kubectl_logs",
    "node_stack",
    "pytest_run",
    "python_traceback",
    "rust_panic",
]


def _stamp(rng: random.Random, second: int) -> str:
    return (
        f"2024-05-02T{10 + second // 3600 % 10:02d}:{second // 60 % 60:02d}:{second % 60:02d}."
        f"{rng.randint(0, 999):03d}Z"
    )


def pytest_run(rng: random.Random, target: int, share: float) -> Sample:
    doc = Doc(rng)
    doc.add("============================= test session starts ==============================")
    doc.add("platform linux -- Python 3.12.3, pytest-8.2.0, pluggy-1.5.0")
    doc.add("rootdir: /app, configfile: pyproject.toml")
    doc.add("collected 2841 items")

    def test(d: Doc) -> None:
        d.add(
            f"tests/{ident(rng, 1)}/test_{ident(rng)}.py::test_{ident(rng, 3)} "
            f"{rng.choice(('PASSED', 'PASSED', 'PASSED', 'PASSED', 'SKIPPED (no network)', 'XFAIL'))}"
            f" [{rng.randint(0, 99):3d}%]"
        )

    doc.fill(target, test)
    name = f"test_{ident(rng, 3)}"
    module = f"tests/api/test_{ident(rng)}.py"
    doc.insert_at(share, [(f"{module}::{name} FAILED [ 51%]", True)])
    doc.add("=================================== FAILURES ===================================")
    doc.add(f"_________________________ {name} _________________________")
    doc.add(f"    def {name}(client):")
    doc.add("        resp = client.get('/v1/orders?limit=5')")
    doc.add(">       assert resp.status_code == 200")
    doc.add("E       assert 500 == 200", mark=True)
    doc.add("E        +  where 500 = <Response [500]>.status_code")
    doc.add(f"{module}:88: AssertionError")
    doc.add("=========================== short test summary info ============================")
    doc.add(f"FAILED {module}::{name} - assert 500 == 200", mark=True)
    doc.add("============ 1 failed, 2790 passed, 47 skipped, 3 xfailed in 312.45s ============")
    return doc.sample("pytest", "bash", {"command": f"pytest -v {module.rsplit('/', 1)[0]}"}, share)


def go_test(rng: random.Random, target: int, share: float) -> Sample:
    doc = Doc(rng)

    def run(d: Doc) -> None:
        name = "Test" + "".join(w.title() for w in rng.sample(WORDS, 3))
        d.add(f"=== RUN   {name}")
        if rng.random() < 0.3:
            d.add(
                f"    {ident(rng)}_test.go:{rng.randint(10, 300)}: seeded {rng.randint(1, 99999)}"
                f" rows into {ident(rng)}"
            )
        d.add(f"--- PASS: {name} ({rng.uniform(0, 2):.2f}s)")

    doc.fill(target, run)
    name = "Test" + "".join(w.title() for w in rng.sample(WORDS, 3))
    file = f"{ident(rng)}_test.go"
    doc.insert_at(
        share,
        [
            (f"=== RUN   {name}", False),
            (f'    {file}:{rng.randint(20, 400)}: got status "pending", want "settled"', True),
            (f"--- FAIL: {name} ({rng.uniform(0, 3):.2f}s)", True),
        ],
    )
    doc.add("FAIL")
    doc.add(
        f"FAIL\tgithub.com/acme/ledger/internal/{ident(rng, 1)}\t{rng.uniform(5, 60):.3f}s",
        mark=True,
    )
    doc.add("FAIL")
    return doc.sample("go-test", "bash", {"command": "go test -v ./..."}, share)


def jest(rng: random.Random, target: int, share: float) -> Sample:
    doc = Doc(rng)

    def suite(d: Doc) -> None:
        d.add(
            f"PASS src/{ident(rng, 1)}/{ident(rng)}.test.{rng.choice(('ts', 'tsx', 'js'))} "
            f"({rng.uniform(0.2, 9):.3f} s)"
        )
        for _ in range(rng.randint(1, 6)):
            d.add(
                f"  ✓ {ident(rng, 1)} {rng.choice(('renders', 'handles', 'rejects', 'returns', 'updates'))} "
                f"{ident(rng, 2, ' ')} ({rng.randint(1, 400)} ms)"
            )
        if rng.random() < 0.1:
            d.add(f"  console.warn src/{ident(rng, 1)}/{ident(rng)}.ts:{rng.randint(1, 90)}")
            d.add(f"    Deprecated prop `{ident(rng)}` passed to <{ident(rng, 1).title()}>")

    doc.fill(target, suite)
    test_file = f"src/{ident(rng, 1)}/{ident(rng)}.test.tsx"
    title = f"{ident(rng, 1)} submits {ident(rng, 2, ' ')}"
    doc.insert_at(
        share,
        [
            (f"FAIL {test_file}", True),
            (f"  ● Checkout › {title}", True),
            ("", False),
            ("    expect(received).toHaveBeenCalledWith(...expected)", False),
            ('    Expected: {"amount": 1299, "currency": "EUR"}', True),
            ('    Received: {"amount": 12.99, "currency": "EUR"}', True),
        ],
    )
    doc.add(
        f"Test Suites: 1 failed, {rng.randint(200, 400)} passed, {rng.randint(201, 401)} total",
        mark=True,
    )
    doc.add(f"Tests:       1 failed, {rng.randint(2000, 3000)} passed, 3001 total")
    doc.add(f"Time:        {rng.uniform(30, 200):.3f} s")
    return doc.sample("jest", "bash", {"command": "npx jest --ci"}, share)


def python_traceback(rng: random.Random, target: int, share: float) -> Sample:
    doc = Doc(rng)
    second = [0]

    def record(d: Doc) -> None:
        second[0] += rng.randint(0, 3)
        level = rng.choice(("INFO", "INFO", "INFO", "DEBUG", "WARNING"))
        d.add(
            f"{_stamp(rng, second[0])} {level:<7} {ident(rng, 2, '.')}: "
            f"{rng.choice(('processed batch', 'fetched page', 'flushed', 'retrying shard', 'loaded'))}"
            f" {rng.randint(1, 9999)} ({ident(rng)}={rng.randint(0, 500)})"
        )

    doc.fill(target, record)
    fn = ident(rng)
    doc.insert_at(
        share,
        [
            (f"{_stamp(rng, second[0] // 2)} ERROR   etl.runner: job {fn} crashed", True),
            ("Traceback (most recent call last):", False),
            ('  File "/app/etl/runner.py", line 212, in run_job', False),
            ("    rows = transform(batch, schema)", False),
            (f'  File "/app/etl/{fn}.py", line {rng.randint(20, 300)}, in transform', True),
            ("    return [coerce(row[k], t) for k, t in schema.items()]", False),
            (f"KeyError: '{ident(rng)}'", True),
        ],
    )
    return doc.sample("python-traceback", "bash", {"command": "python -m etl.runner --all"}, share)


def rust_panic(rng: random.Random, target: int, share: float) -> Sample:
    doc = Doc(rng)

    def trace(d: Doc) -> None:
        d.add(
            f"{_stamp(rng, rng.randint(0, 9000))}  {rng.choice(('INFO', 'DEBUG', 'TRACE'))} "
            f"{ident(rng, 2, '::')}: {rng.choice(('accepted', 'routed', 'closed', 'polled'))} "
            f"conn_id={rng.randint(1, 99999)} peer=10.0.{rng.randint(0, 255)}.{rng.randint(0, 255)}"
        )

    doc.fill(target, trace)
    src = path(rng, "rs")
    doc.insert_at(
        share,
        [
            (
                f"thread 'tokio-runtime-worker' panicked at {src}:{rng.randint(10, 500)}:"
                f"{rng.randint(5, 40)}:",
                True,
            ),
            ("called `Option::unwrap()` on a `None` value", True),
            (
                "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace",
                False,
            ),
        ],
    )
    return doc.sample("rust-panic", "bash", {"command": "cargo run --bin gateway"}, share)


def node_stack(rng: random.Random, target: int, share: float) -> Sample:
    doc = Doc(rng)

    def request(d: Doc) -> None:
        d.add(
            f"[{_stamp(rng, rng.randint(0, 9000))}] {rng.choice(('GET', 'POST', 'PUT'))} "
            f"/api/{ident(rng, 1)}/{rng.randint(1, 9999)} {rng.choice((200, 200, 201, 204, 304, 404))} "
            f"{rng.randint(1, 900)}ms - {rng.randint(100, 99999)} bytes"
        )

    doc.fill(target, request)
    fn = ident(rng)
    doc.insert_at(
        share,
        [
            (f"TypeError: Cannot read properties of undefined (reading '{ident(rng, 1)}')", True),
            (
                f"    at {fn} (/app/src/services/{ident(rng)}.js:{rng.randint(10, 400)}:"
                f"{rng.randint(5, 40)})",
                True,
            ),
            (
                "    at process.processTicksAndRejections (node:internal/process/task_queues:95:5)",
                False,
            ),
            ("    at async /app/src/routes/orders.js:58:19", False),
        ],
    )
    return doc.sample("node-stack", "bash", {"command": "node server.js"}, share)


def java_server(rng: random.Random, target: int, share: float) -> Sample:
    doc = Doc(rng)
    second = [0]

    def record(d: Doc) -> None:
        second[0] += rng.randint(0, 2)
        level = rng.choice(("INFO", "INFO", "INFO", "DEBUG", "WARN"))
        cls = f"c.a.{ident(rng, 1)}.{ident(rng, 1).title()}{rng.choice(('Controller', 'Service', 'Repository'))}"
        d.add(
            f"{_stamp(rng, second[0])}  {level:>5} {rng.randint(1000, 9999)} --- "
            f"[nio-8080-exec-{rng.randint(1, 20)}] {cls:<40} : "
            f"{rng.choice(('Handled request', 'Cache refreshed', 'Query took', 'Session opened'))} "
            f"{ident(rng)} in {rng.randint(1, 900)} ms"
        )

    doc.fill(target, record)
    svc = ident(rng, 1).title()
    doc.insert_at(
        share,
        [
            (
                f"{_stamp(rng, second[0] // 2)} ERROR 4242 --- [nio-8080-exec-7] o.a.c.c.C.[.[.[/]."
                "[dispatcherServlet]    : Servlet.service() for servlet [dispatcherServlet] threw "
                "exception",
                True,
            ),
            (
                f'java.lang.NullPointerException: Cannot invoke "com.acme.{svc}.getId()" because '
                '"account" is null',
                True,
            ),
            (
                f"\tat com.acme.billing.{svc}Service.charge({svc}Service.java:{rng.randint(20, 400)})",
                True,
            ),
            ("\tat com.acme.billing.BillingController.checkout(BillingController.java:88)", False),
            (
                "\tat java.base/jdk.internal.reflect.DirectMethodHandleAccessor.invoke(Unknown Source)",
                False,
            ),
        ],
    )
    return doc.sample("java-server", "bash", {"command": "tail -n 3000 logs/app.log"}, share)


def kubectl_logs(rng: random.Random, target: int, share: float) -> Sample:
    doc = Doc(rng)

    def record(d: Doc) -> None:
        d.add(
            f'{{"ts":"{_stamp(rng, rng.randint(0, 9000))}","level":"'
            f'{rng.choice(("info", "info", "debug", "warn"))}","msg":"'
            f'{rng.choice(("reconciled", "synced", "watch event", "lease renewed"))}",'
            f'"resource":"{ident(rng, 2, "-")}","generation":{rng.randint(1, 999)}}}'
        )

    doc.fill(target, record)
    doc.insert_at(
        share,
        [
            (
                f'{{"ts":"{_stamp(rng, 4000)}","level":"error","msg":"failed to reconcile",'
                f'"resource":"{ident(rng, 2, "-")}","error":"admission webhook \\"validate.acme.io\\" '
                'denied the request: spec.replicas must be <= 20"}',
                True,
            ),
        ],
    )
    return doc.sample(
        "kubectl-logs",
        "bash",
        {"command": "kubectl logs deploy/operator -n platform --tail=5000"},
        share,
    )


def kubectl_describe(rng: random.Random, target: int, share: float) -> Sample:
    doc = Doc(rng)
    pods = [0]

    def pod(d: Doc) -> None:
        pods[0] += 1
        name = f"{ident(rng, 2, '-')}-{rng.randbytes(5).hex()[:10]}-{rng.randbytes(3).hex()[:5]}"
        d.add(f"Name:             {name}")
        d.add("Namespace:        shop")
        d.add(f"Node:             ip-10-0-{rng.randint(0, 255)}-{rng.randint(0, 255)}.ec2.internal")
        d.add("Status:           Running")
        d.add(f"IP:               10.1.{rng.randint(0, 255)}.{rng.randint(0, 255)}")
        d.add("Containers:")
        d.add(f"  {ident(rng, 1)}:")
        d.add(
            f"    Image:          registry.acme.io/{ident(rng, 1)}:{rng.randint(1, 9)}."
            f"{rng.randint(0, 40)}.{rng.randint(0, 9)}"
        )
        d.add("    State:          Running")
        d.add(f"    Restart Count:  {rng.randint(0, 2)}")
        d.add("Events:")
        d.add(
            f"  Normal  Pulled     {rng.randint(2, 59)}m   kubelet  Container image already "
            "present on machine"
        )
        d.add("")

    doc.fill(target, pod)
    name = f"{ident(rng, 2, '-')}-7d9f8c6b5-x2k4q"
    doc.insert_at(
        share,
        [
            (f"Name:             {name}", True),
            ("Namespace:        shop", False),
            ("Status:           Running", False),
            ("    State:          Waiting", False),
            ("      Reason:       CrashLoopBackOff", True),
            ("    Last State:     Terminated", False),
            ("      Reason:       OOMKilled", True),
            ("      Exit Code:    137", True),
            (
                "  Warning  BackOff  2m (x41 over 12m)  kubelet  Back-off restarting failed container",
                True,
            ),
            ("", False),
        ],
    )
    return doc.sample(
        "kubectl-describe", "bash", {"command": "kubectl describe pods -n shop"}, share
    )


def journalctl(rng: random.Random, target: int, share: float) -> Sample:
    doc = Doc(rng)
    second = [0]
    units = ("nginx.service", "sshd[812]", "systemd[1]", "cron[1021]", "kernel", "dockerd[944]")

    def record(d: Doc) -> None:
        second[0] += rng.randint(0, 5)
        unit = rng.choice(units)
        d.add(
            f"May 02 {10 + second[0] // 3600 % 10:02d}:{second[0] // 60 % 60:02d}:"
            f"{second[0] % 60:02d} web-{rng.randint(1, 3)} {unit}: "
            f"{rng.choice(('Started', 'Accepted publickey for deploy from', 'pam_unix(cron:session): session opened for', 'Reloading', 'veth' + rng.randbytes(3).hex() + ': link becomes ready'))}"
            f" {ident(rng, 2, '-')} {rng.randint(1, 65000)}"
        )

    doc.fill(target, record)
    doc.insert_at(
        share,
        [
            (
                'May 02 13:37:01 web-2 postgres[2201]: FATAL:  could not open file "pg_wal/'
                '000000010000000A000000F3": No space left on device',
                True,
            ),
            (
                "May 02 13:37:01 web-2 systemd[1]: postgresql.service: Main process exited, "
                "code=exited, status=1/FAILURE",
                True,
            ),
            (
                "May 02 13:37:01 web-2 systemd[1]: postgresql.service: Failed with result 'exit-code'.",
                False,
            ),
        ],
    )
    return doc.sample(
        "journalctl",
        "bash",
        {"command": "journalctl -u postgresql --since today --no-pager"},
        share,
    )


def html_page(rng: random.Random, target: int, share: float) -> Sample:
    doc = Doc(rng)
    doc.add("<!DOCTYPE html>")
    doc.add('<html lang="en"><head><meta charset="utf-8"><title>Release notes — acme-sdk</title>')
    doc.add(
        '<script>window.__CONFIG__={"env":"prod","build":"'
        + rng.randbytes(8).hex()
        + '"};</script></head><body>'
    )

    def block(d: Doc) -> None:
        r = rng.random()
        if r < 0.4:
            d.add(
                f'<li class="change"><a href="/docs/{ident(rng, 1)}/{ident(rng)}">'
                f"{ident(rng, 2, ' ').capitalize()}</a>: {rng.choice(('improved', 'fixed', 'added'))}"
                f" {ident(rng, 3, ' ')} (#{rng.randint(100, 9999)})</li>"
            )
        elif r < 0.7:
            d.add(
                f'<div class="nav-item" data-id="{rng.randbytes(4).hex()}"><span>'
                f"{ident(rng, 1).title()}</span></div>"
            )
        else:
            d.add(
                f"<p>The {ident(rng, 2, ' ')} module now {rng.choice(('supports', 'caches', 'streams'))}"
                f" {ident(rng, 2, ' ')} when {ident(rng, 2, ' ')} is set.</p>"
            )

    doc.fill(target, block)
    doc.insert_at(
        share,
        [
            ('<h2 id="breaking">Breaking changes in 5.0</h2>', True),
            (
                "<p><code>Client.connect(timeout=...)</code> was removed: pass <code>"
                "ConnectOptions(timeout_ms=...)</code> instead; it raises <code>TypeError</code> "
                "otherwise.</p>",
                True,
            ),
        ],
    )
    doc.add("</body></html>")
    return doc.sample(
        "html-page",
        "web_fetch",
        {"url": "https://docs.acme.io/sdk/release-notes", "prompt": "breaking changes in 5.0"},
        share,
    )
