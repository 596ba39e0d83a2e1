"""Real Redis and PostgreSQL servers for the store tests.

Shared servers come from the environment (`.ci/services.sh` starts them and exports
`CACHEPILOT_TEST_REDIS_URL` and `CACHEPILOT_TEST_POSTGRES_URL`). Tests that restart a server
start a private one on a free loopback port (`PrivateRedis`, `PrivatePostgres`) and restart only
that one. Without a server the tests skip and say why.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

__all__ = [
    "PrivatePostgres",
    "PrivateRedis",
    "database",
    "postgres_url_or_skip",
    "redis_url_or_skip",
    "with_driver",
]

REDIS_ENV = "CACHEPILOT_TEST_REDIS_URL"
POSTGRES_ENV = "CACHEPILOT_TEST_POSTGRES_URL"
_HINT = "start one with `. .ci/services.sh` (Debian packages, loopback only)"


def redis_url_or_skip() -> str:
    """The shared Redis server's URL, or a skip that says why there is none."""
    url = os.environ.get(REDIS_ENV, "").strip()
    if not url:
        pytest.skip(f"no Redis server: {REDIS_ENV} is not set; {_HINT}")
    redis = pytest.importorskip("redis")
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=3, socket_timeout=3)
        client.ping()
        client.close()
    except Exception as exc:
        pytest.skip(f"Redis at {url} does not answer ({type(exc).__name__}: {exc}); {_HINT}")
    return url


def postgres_url_or_skip() -> str:
    """The shared PostgreSQL server's URL (libpq form), or a skip that says why there is none."""
    url = os.environ.get(POSTGRES_ENV, "").strip()
    if not url:
        pytest.skip(f"no PostgreSQL server: {POSTGRES_ENV} is not set; {_HINT}")
    psycopg = pytest.importorskip("psycopg")
    try:
        with psycopg.connect(url, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:
        pytest.skip(f"PostgreSQL at {url} does not answer ({type(exc).__name__}); {_HINT}")
    return url


def with_driver(url: str, driver: str) -> str:
    """`postgresql://...` as an SQLAlchemy URL for `driver` (`asyncpg`, `psycopg`)."""
    scheme, rest = url.split("://", 1)
    assert scheme in ("postgresql", "postgres"), url
    return f"postgresql+{driver}://{rest}"


@contextlib.contextmanager
def database(server_url: str) -> Iterator[str]:
    """A fresh database on the server (dropped afterwards): tests never share tables."""
    import psycopg

    name = f"cp_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base, _, _ = server_url.rpartition("/")
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(server_url, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait(check: Any, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not come up within {timeout:g} s")


class PrivateRedis:
    """A redis-server of this test's own on a free loopback port (no persistence)."""

    def __init__(self) -> None:
        binary = os.environ.get("CACHEPILOT_TEST_REDIS_SERVER") or shutil.which("redis-server")
        if not binary:
            pytest.skip(f"no redis-server binary to start a private server; {_HINT}")
        self.binary = binary
        self.port = _free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._proc: subprocess.Popen[bytes] | None = None
        self.start()

    def _ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def start(self) -> None:
        """Start the server (again)."""
        args = [self.binary, "--bind", "127.0.0.1", "--port", str(self.port)]
        args += ["--save", "", "--appendonly", "no", "--daemonize", "no"]
        self._proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait(self._ping, "the private Redis server")

    def stop(self) -> None:
        """Stop the server (its data is gone: no persistence)."""
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(30)
            self._proc = None

    def restart(self) -> None:
        """Stop and start it on the same port."""
        self.stop()
        self.start()


class PrivatePostgres:
    """A PostgreSQL cluster of this test's own (initdb in a temporary folder, a free port).

    As root the server runs as the ``postgres`` user (PostgreSQL refuses to run as root).
    """

    def __init__(self) -> None:
        self.bin = self._bin_dir()
        self.port = _free_port()
        self.root = Path(tempfile.mkdtemp(prefix="cachepilot-pg-"))
        self.data = self.root / "data"
        self.socket_dir = self.root / "sock"
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self._as_root = os.geteuid() == 0
        self.root.chmod(0o755)
        if self._as_root:
            shutil.chown(self.root, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync")
        self._run("mkdir", "-p", str(self.socket_dir), tool=False)
        self.start()

    @staticmethod
    def _bin_dir() -> Path:
        given = os.environ.get("CACHEPILOT_TEST_PG_BIN")
        candidates = [Path(given)] if given else []
        candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
        for folder in candidates:
            if (folder / "initdb").exists() and (folder / "pg_ctl").exists():
                return folder
        pytest.skip(f"no PostgreSQL binaries (initdb, pg_ctl) to start a private server; {_HINT}")

    def _run(self, name: str, *args: str, tool: bool = True) -> None:
        command = [str(self.bin / name) if tool else name, *args]
        if self._as_root:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        """Start the server (again) on the same port and data."""
        options = (
            f"-c listen_addresses=127.0.0.1 -p {self.port} "
            f"-c unix_socket_directories={self.socket_dir} -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off"
        )
        self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.root / "server.log"),
            "-o", options, "-w", "-t", "60", "start",
        )  # fmt: skip

    def stop(self) -> None:
        """Stop the server (fast shutdown: open connections are cut)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "60", "stop")

    def restart(self) -> None:
        """Stop and start it: every open connection breaks."""
        self.stop()
        self.start()

    def close(self) -> None:
        """Stop it and remove its files."""
        with contextlib.suppress(Exception):
            self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
