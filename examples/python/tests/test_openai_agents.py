"""The OpenAI Agents SDK against the real `aci serve` on a real Redis."""

from __future__ import annotations

import asyncio

from openai_agents_diagnosis import DIAGNOSIS, diagnose, stdio_server
from support import citations

MODEL_IDS = [cid for turn in DIAGNOSIS for cid, _, _ in turn]


def test_stdio_records_and_citations_carry_the_sdk_ids(aci, run_id):
    answer = asyncio.run(diagnose(stdio_server(aci.bin, aci.store, run_id), run_id))

    records = aci.inspect(run_id)
    # One record per model tool call, keyed by exactly the model's ids.
    assert sorted(r["tool_call_id"] for r in records) == sorted(MODEL_IDS)
    assert all(r["status"] == "READY" for r in records), records
    by_id = {r["tool_call_id"]: r for r in records}
    assert by_id["call_A1"]["tool_name"] == "query_logs"
    assert by_id["call_A2"]["tool_name"] == "lookup_knowledge"
    # The model cited what the observations said their ids were: the SDK's ids.
    assert citations(answer) == MODEL_IDS, answer

    status, verdicts = aci.verify(run_id, citations(answer))
    assert status == 0, verdicts
    assert verdicts["call_A1"]["verdict"] == "EVIDENCE"
    assert verdicts["call_A2"]["verdict"] == "EVIDENCE"
    assert verdicts["call_A3"]["verdict"] == "NEGATIVE_OBSERVATION"
    assert verdicts["call_A3"]["scope"]["query"] == "certificate expired"


def test_a_repeated_sdk_id_is_duplicate_and_runs_once(aci, run_id):
    asyncio.run(diagnose(stdio_server(aci.bin, aci.store, run_id), run_id))
    before = {r["tool_call_id"]: r for r in aci.inspect(run_id)}

    # The SDK itself refuses a reused call id within one Runner.run (ModelBehaviorError);
    # across runs only the boundary can tell: a retried harness (a new Runner.run and a
    # new `aci serve`, the same run) re-issues call_A1, with other arguments.
    retry = [[("call_A1", "query_logs", {"topic": "DATABASE_SLOW_QUERY", "query": "orders"})]]
    answer = asyncio.run(diagnose(stdio_server(aci.bin, aci.store, run_id), run_id, retry))

    assert "call_A1 failed: DUPLICATE_TOOL_CALL" in answer, answer
    assert citations(answer) == []
    after = {r["tool_call_id"]: r for r in aci.inspect(run_id)}
    # Still one record for call_A1, untouched: the repeated call never ran.
    assert after == before
    assert after["call_A1"]["request"]["topic"] == "APPLICATION"
