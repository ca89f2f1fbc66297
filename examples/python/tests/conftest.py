"""Fixtures: the real `aci` binary and a real Redis server.

- `ACI_BIN` names the binary; else `<repo>/target/debug/aci` (or under
  `CARGO_TARGET_DIR`). Build it with `cargo build -p aci-cli`.
- `REDIS_URL` names a Redis to use; else a throwaway `redis-server` is spawned
  on a free loopback port for the session and killed by its PID afterwards.

Neither is ever skipped: without them the tests fail, saying what is missing.
Every test works in a run id of its own, so nothing is flushed.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]

# No network at test time: neither framework may export traces.
os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"
os.environ["LANGSMITH_TRACING"] = "false"
os.environ["LANGCHAIN_TRACING_V2"] = "false"


def _aci_path() -> Path:
    if os.environ.get("ACI_BIN"):
        return Path(os.environ["ACI_BIN"])
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    if not target.is_absolute():
        target = REPO / target
    return target / "debug" / "aci"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL if it has not exited within 30 s."""
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _spawn_redis(redis_server: str, workdir: str) -> tuple[subprocess.Popen[bytes], int]:
    """A throwaway redis-server on a free loopback port (a few tries: the port may be taken
    between choosing it and binding it)."""
    for _ in range(5):
        port = _free_port()
        proc = subprocess.Popen(
            [
                redis_server,
                "--bind",
                "127.0.0.1",
                "--port",
                str(port),
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                workdir,
                "--maxmemory-policy",
                "noeviction",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and proc.poll() is None:
            if _ping(port):
                return proc, port
            time.sleep(0.05)
        proc.kill()
        proc.wait()
    pytest.fail(f"could not start {redis_server} on a loopback port (5 tries)", pytrace=False)


@pytest.fixture(scope="session")
def aci_bin() -> str:
    path = _aci_path()
    if not os.access(path, os.X_OK):
        pytest.fail(
            f"no aci binary at {path}: run `cargo build -p aci-cli` or set ACI_BIN", pytrace=False
        )
    return str(path)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    if os.environ.get("REDIS_URL"):
        yield os.environ["REDIS_URL"]
        return
    redis_server = shutil.which("redis-server")
    if redis_server is None:
        pytest.fail(
            "these tests need a real Redis: install redis-server "
            "(Debian: apt-get install redis-server) or set REDIS_URL",
            pytrace=False,
        )
    with tempfile.TemporaryDirectory(prefix="aci-py-redis-") as workdir:
        proc, port = _spawn_redis(redis_server, workdir)
        try:
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            proc.kill()
            proc.wait()


@pytest.fixture
def run_id() -> str:
    return f"py-{uuid.uuid4().hex[:16]}"


@dataclass
class Aci:
    """`aci inspect` and `aci verify` against the test's Redis."""

    bin: str
    store: str

    def inspect(self, run: str) -> list[dict[str, Any]]:
        out = subprocess.run(
            [self.bin, "inspect", "--run", run, "--store", self.store, "--json"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert out.returncode == 0, f"aci inspect failed ({out.returncode}): {out.stderr}"
        return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]

    def verify(self, run: str, ids: list[str]) -> tuple[int, dict[str, dict[str, Any]]]:
        """The exit status, and each citation's verdict by citation."""
        out = subprocess.run(
            [self.bin, "verify", "--run", run, "--store", self.store, *ids],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert out.returncode in (0, 2), f"aci verify failed ({out.returncode}): {out.stderr}"
        checks = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
        return out.returncode, {c["citation"]: c["verdict"] for c in checks}


@pytest.fixture
def aci(aci_bin: str, redis_url: str) -> Aci:
    return Aci(aci_bin, redis_url)
