"""LangGraph with langchain-mcp-adapters against the real `aci serve` on a real Redis."""

from __future__ import annotations

import asyncio
import re

from langchain_mcp_adapters.client import MultiServerMCPClient

from langgraph_diagnosis import DIAGNOSIS, diagnose_stdio, run_agent, stdio_connection
from support import citations

MODEL_IDS = [cid for turn in DIAGNOSIS for cid, _, _ in turn]


def test_stdio_records_and_citations_carry_the_runtime_ids(aci, run_id):
    answer = asyncio.run(diagnose_stdio(aci.bin, aci.store, run_id))

    records = aci.inspect(run_id)
    # One record per model tool call, keyed by exactly the model's ids.
    assert sorted(r["tool_call_id"] for r in records) == sorted(MODEL_IDS)
    assert all(r["status"] == "READY" for r in records), records
    by_id = {r["tool_call_id"]: r for r in records}
    assert by_id["call_L1"]["tool_name"] == "query_logs"
    assert by_id["call_L2"]["tool_name"] == "lookup_knowledge"
    assert citations(answer) == MODEL_IDS, answer

    status, verdicts = aci.verify(run_id, citations(answer))
    assert status == 0, verdicts
    assert verdicts["call_L1"]["verdict"] == "EVIDENCE"
    assert verdicts["call_L2"]["verdict"] == "EVIDENCE"
    assert verdicts["call_L3"]["verdict"] == "NEGATIVE_OBSERVATION"
    assert verdicts["call_L3"]["scope"]["query"] == "certificate expired"


def test_a_repeated_runtime_id_is_duplicate_and_runs_once(aci, run_id):
    # LangGraph lets a later turn reuse an id; the boundary answers it, in the same graph run.
    repeat = [("call_L1", "query_logs", {"topic": "DATABASE_SLOW_QUERY", "query": "orders"})]
    answer = asyncio.run(diagnose_stdio(aci.bin, aci.store, run_id, [*DIAGNOSIS, repeat]))

    assert "call_L1 failed: DUPLICATE_TOOL_CALL" in answer, answer
    assert citations(answer) == MODEL_IDS, answer
    records = aci.inspect(run_id)
    # Still one record for call_L1, the first call's: the repeated call never ran.
    assert sorted(r["tool_call_id"] for r in records) == sorted(MODEL_IDS)
    first = next(r for r in records if r["tool_call_id"] == "call_L1")
    assert first["status"] == "READY"
    assert first["request"] == {"topic": "APPLICATION", "query": "connection is not available"}
    status, verdicts = aci.verify(run_id, ["call_L1"])
    assert (status, verdicts["call_L1"]["verdict"]) == (0, "EVIDENCE")


def test_the_default_client_makes_ten_calls_in_one_run_without_duplicate(aci, run_id):
    # The adapter's default client, no interceptor: a new MCP session (a new
    # `aci serve` process) per call, each sending JSON-RPC id 1 and no `_meta`.
    queries = [
        "connection is not available",
        "HikariPool-1",
        "CannotGetJdbcConnectionException",
        "active=20",
        "503",
        "timeout",
        "order",
        "request timed out",
        "Connection",
        "pool",
    ]
    turns = [
        [
            (
                f"call_D{2 * t + i}",
                "query_logs",
                {"topic": "APPLICATION", "query": queries[2 * t + i]},
            )
            for i in range(2)
        ]
        for t in range(5)
    ]

    async def run() -> str:
        client = MultiServerMCPClient({"aci": stdio_connection(aci.bin, aci.store, run_id)})
        return await run_agent(await client.get_tools(), run_id, turns)

    answer = asyncio.run(run())

    assert "DUPLICATE_TOOL_CALL" not in answer, answer
    records = aci.inspect(run_id)
    assert len(records) == 10, records
    assert all(r["status"] == "READY" for r in records), records
    ids = [r["tool_call_id"] for r in records]
    assert len(set(ids)) == 10, ids
    # The documented composed form: mcp:<session>:<JSON-RPC id>, the session being the process.
    assert all(re.fullmatch(r"mcp:stdio-[0-9a-f]{16}:[0-9]+", i) for i in ids), ids
    # No framework id reached the server: the records carry the ids it composed,
    # and those are what the observations told the model to cite.
    assert sorted(citations(answer)) == sorted(ids), answer
    status, verdicts = aci.verify(run_id, citations(answer))
    assert status == 0, verdicts
    assert all(v["verdict"] == "EVIDENCE" for v in verdicts.values()), verdicts
