"""An on-call diagnosis loop with the OpenAI Agents SDK, its tools served by `aci serve`.

The model is scripted (the SDK's own `agents.testing.ScriptedModel`, no network):
it asks for the application logs and the runbook at once (`call_A1`, `call_A2`),
then for an expired certificate in the system events (`call_A3`, which finds
nothing), then answers, citing
every observation by the tool call id the observation carries.

The point is the `tool_meta_resolver`: it sends the SDK's own tool call id and
the run id in each `tools/call` request's `_meta`, so the boundary records the
call under exactly the id the model will cite.

    python openai_agents_diagnosis.py --store redis://127.0.0.1:6379/0 --run-id incident-42
    aci verify --run incident-42 --store redis://127.0.0.1:6379/0 call_A1 call_A2 call_A3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agents import Agent, RunConfig, Runner
from agents.mcp import MCPServer, MCPServerStdio, MCPServerStreamableHttp, MCPToolMetaContext
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call
from agents.tool_context import ToolContext

# The diagnosis the scripted model walks through: (tool call id, tool, arguments), per turn.
DIAGNOSIS: list[list[tuple[str, str, dict[str, Any]]]] = [
    [
        ("call_A1", "query_logs", {"topic": "APPLICATION", "query": "connection is not available"}),
        ("call_A2", "lookup_knowledge", {"query": "connection pool exhausted"}),
    ],
    [("call_A3", "query_logs", {"topic": "SYSTEM_EVENTS", "query": "certificate expired"})],
]


@dataclass
class AciRun:
    """The run the agent works in: the `context` of `Runner.run`."""

    run_id: str


def aci_meta(ctx: MCPToolMetaContext) -> dict[str, str]:
    """`tool_meta_resolver`: the SDK's tool call id and the run id, as `_meta` of the call."""
    tool_context = ctx.run_context
    if not isinstance(tool_context, ToolContext):
        raise TypeError("an MCP tool call without a tool context has no tool call id")
    return {
        "aci/tool_call_id": tool_context.tool_call_id,
        "aci/run_id": tool_context.context.run_id,
    }


def stdio_server(aci: str, store: str, run_id: str) -> MCPServerStdio:
    """`aci serve` as a child process on stdio, forwarding the SDK's ids."""
    return MCPServerStdio(
        name="aci",
        params={"command": aci, "args": ["serve", "--store", store, "--run-id", run_id]},
        tool_meta_resolver=aci_meta,
        cache_tools_list=True,
        client_session_timeout_seconds=60,
    )


def http_server(url: str, token: str) -> MCPServerStreamableHttp:
    """`aci serve --http` at `url` (e.g. `http://127.0.0.1:8080/mcp`) with a bearer token.

    Tested against a real `aci serve --http` replica in `tests/test_http.py`.
    """
    return MCPServerStreamableHttp(
        name="aci",
        params={"url": url, "headers": {"Authorization": f"Bearer {token}"}, "timeout": 60},
        tool_meta_resolver=aci_meta,
        cache_tools_list=True,
        client_session_timeout_seconds=60,
    )


def observations(call: ModelCall) -> list[dict[str, Any]]:
    """The observations the model has seen so far: every tool output, as JSON."""
    seen = []
    for item in call.input if isinstance(call.input, list) else []:
        if isinstance(item, dict) and item.get("type") == "function_call_output":
            output = item["output"]
            if isinstance(output, list):  # content items: the one text block
                output = "".join(part.get("text", "") for part in output)
            seen.append(json.loads(output))
    return seen


def final_answer(call: ModelCall) -> list[Any]:
    """The scripted model's last turn: a diagnosis citing each observation by its id."""
    lines = ["Diagnosis: the order service's database connection pool is exhausted."]
    for observation in observations(call):
        call_id, status = observation["tool_call_id"], observation["evidence_status"]
        if status == "EVIDENCE_FOUND":
            lines.append(f"- evidence [cite:{call_id}]")
        elif status == "NO_EVIDENCE":
            lines.append(f"- nothing found within the scope queried [cite:{call_id}]")
        else:
            lines.append(f"- {call_id} failed: {observation['error_code']} (not cited)")
    return [assistant_message("\n".join(lines))]


def scripted_model(turns: Sequence[Sequence[tuple[str, str, dict[str, Any]]]]) -> ScriptedModel:
    """A model that makes `turns` of tool calls, then answers with citations."""
    steps: list[Any] = [
        ModelStep(output=[function_call(name, args, call_id=cid) for cid, name, args in turn])
        for turn in turns
    ]
    steps.append(ModelStep.respond(final_answer))
    return ScriptedModel(steps)


async def diagnose(
    server: MCPServer,
    run_id: str,
    turns: Sequence[Sequence[tuple[str, str, dict[str, Any]]]] = DIAGNOSIS,
) -> str:
    """Runs the scripted diagnosis through `server`; returns the final answer."""
    model = scripted_model(turns)
    async with server:
        agent = Agent(
            name="oncall",
            instructions="Diagnose the incident. Cite every tool result by its tool_call_id.",
            model=model,
            mcp_servers=[server],
            mcp_config={"convert_schemas_to_strict": True},
        )
        result = await Runner.run(
            agent,
            "Checkout is failing with 504s. What is wrong?",
            context=AciRun(run_id=run_id),
            run_config=RunConfig(tracing_disabled=True),
        )
    model.assert_complete()
    return str(result.final_output)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aci", default=os.environ.get("ACI_BIN", "aci"))
    parser.add_argument("--store", default="memory")
    parser.add_argument("--run-id", default="incident-42")
    parser.add_argument("--http", metavar="URL", help="aci serve --http endpoint instead of stdio")
    parser.add_argument(
        "--token-env", default="ACI_TOKEN", help="variable holding the bearer token"
    )
    args = parser.parse_args()
    if args.http:
        server: MCPServer = http_server(args.http, os.environ[args.token_env])
    else:
        server = stdio_server(args.aci, args.store, args.run_id)
    print(asyncio.run(diagnose(server, args.run_id)))


if __name__ == "__main__":
    main()
