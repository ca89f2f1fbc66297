"""Both frameworks against the real `aci serve --http` (bearer token) on a real Redis."""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import langgraph_diagnosis as lg
import openai_agents_diagnosis as oa
from conftest import _free_port, _stop
from support import citations


@dataclass
class HttpAci:
    url: str
    token: str


def _wait_healthy(proc: subprocess.Popen[bytes], base: str, log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(
                f"aci serve --http exited ({proc.returncode}): {log.read_text()}", pytrace=False
            )
        try:
            with urllib.request.urlopen(f"{base}/healthz", timeout=1) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    pytest.fail(
        f"aci serve --http did not answer /healthz in 60 s: {log.read_text()}", pytrace=False
    )


@pytest.fixture(scope="module")
def aci_http(
    aci_bin: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[HttpAci]:
    """One `aci serve --http` replica on a free loopback port, with one static token."""
    workdir = tmp_path_factory.mktemp("aci-http")
    token = secrets.token_urlsafe(24)
    config = workdir / "aci.toml"
    config.write_text(
        f'[auth.tokens.py-tests]\nsha256 = "{hashlib.sha256(token.encode()).hexdigest()}"\n'
    )
    log = workdir / "serve.log"
    port = _free_port()
    with log.open("wb") as stderr:
        proc = subprocess.Popen(
            [
                aci_bin,
                "serve",
                "--http",
                f"127.0.0.1:{port}",
                "--config",
                str(config),
                "--store",
                redis_url,
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        base = f"http://127.0.0.1:{port}"
        _wait_healthy(proc, base, log)
        yield HttpAci(url=f"{base}/mcp", token=token)
    finally:
        _stop(proc)


def _check_run(aci, run_id: str, answer: str, model_ids: list[str]) -> None:
    records = aci.inspect(run_id)
    assert sorted(r["tool_call_id"] for r in records) == sorted(model_ids), records
    assert all(r["status"] == "READY" for r in records), records
    assert citations(answer) == model_ids, answer
    status, verdicts = aci.verify(run_id, citations(answer))
    assert status == 0, verdicts
    assert [verdicts[i]["verdict"] for i in model_ids] == [
        "EVIDENCE",
        "EVIDENCE",
        "NEGATIVE_OBSERVATION",
    ]


def test_openai_agents_over_http_records_the_sdk_ids(aci, aci_http, run_id):
    model_ids = [cid for turn in oa.DIAGNOSIS for cid, _, _ in turn]
    answer = asyncio.run(oa.diagnose(oa.http_server(aci_http.url, aci_http.token), run_id))
    _check_run(aci, run_id, answer, model_ids)

    retry = [[("call_A1", "query_logs", {"topic": "DATABASE_SLOW_QUERY", "query": "orders"})]]
    answer = asyncio.run(oa.diagnose(oa.http_server(aci_http.url, aci_http.token), run_id, retry))
    assert "call_A1 failed: DUPLICATE_TOOL_CALL" in answer, answer
    assert len(aci.inspect(run_id)) == len(model_ids)


def test_langgraph_over_http_forwards_the_runtime_ids_as_headers(aci, aci_http, run_id):
    model_ids = [cid for turn in lg.DIAGNOSIS for cid, _, _ in turn]
    repeat = [("call_L1", "query_logs", {"topic": "DATABASE_SLOW_QUERY", "query": "orders"})]
    answer = asyncio.run(
        lg.diagnose_http(aci_http.url, aci_http.token, run_id, [*lg.DIAGNOSIS, repeat])
    )
    assert "call_L1 failed: DUPLICATE_TOOL_CALL" in answer, answer
    _check_run(aci, run_id, answer, model_ids)
    first = next(r for r in aci.inspect(run_id) if r["tool_call_id"] == "call_L1")
    assert first["request"]["topic"] == "APPLICATION"


def test_a_wrong_token_reaches_nothing(aci, aci_http, run_id):
    request = urllib.request.Request(
        aci_http.url,
        method="POST",
        data=b"{}",
        headers={"Authorization": "Bearer not-the-token", "Content-Type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 401
    assert "resource_metadata" in refused.value.headers.get("WWW-Authenticate", "")

    with pytest.raises(Exception):  # noqa: B017 - the SDK's own (grouped) connection error
        asyncio.run(oa.diagnose(oa.http_server(aci_http.url, "not-the-token"), run_id))
    assert aci.inspect(run_id) == []
