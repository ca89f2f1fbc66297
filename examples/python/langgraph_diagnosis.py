"""An on-call diagnosis loop with LangGraph (`langchain.agents.create_agent`) over MCP.

The tools come from `aci serve` through langchain-mcp-adapters. The model is
scripted (a small `BaseChatModel` with `bind_tools`, no network): it asks for
the application logs and the runbook at once (`call_L1`, `call_L2`), then for an
expired certificate in the system events (`call_L3`, which finds nothing), then
answers, citing every observation by the tool call id the observation carries.

The point is `ForwardToolCallId`, a tool-call interceptor that hands the
LangGraph runtime's tool call id (and the run id) to the boundary:

- over HTTP (`aci serve --http`) as the `Aci-Tool-Call-Id` / `Aci-Run-Id`
  request headers;
- over stdio as `_meta["aci/tool_call_id"]` / `_meta["aci/run_id"]`. The
  adapter's `MCPToolCallRequest` (0.3.2) has no `_meta` field, so on stdio the
  interceptor makes the call itself, with `_meta`, on the session it was given.

Without an interceptor (the adapter's default client) no framework id reaches
the server, which then keys the record by the id it composes from the
JSON-RPC id and the MCP session; the model's own ids are not recorded.

    python langgraph_diagnosis.py --store redis://127.0.0.1:6379/0 --run-id incident-43
    aci verify --run incident-43 --store redis://127.0.0.1:6379/0 call_L1 call_L2 call_L3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_mcp_adapters.client import MultiServerMCPClient
from langchain_mcp_adapters.interceptors import MCPToolCallRequest
from langchain_mcp_adapters.tools import load_mcp_tools
from mcp import ClientSession

# The diagnosis the scripted model walks through: (tool call id, tool, arguments), per turn.
DIAGNOSIS: list[list[tuple[str, str, dict[str, Any]]]] = [
    [
        ("call_L1", "query_logs", {"topic": "APPLICATION", "query": "connection is not available"}),
        ("call_L2", "lookup_knowledge", {"query": "connection pool exhausted"}),
    ],
    [("call_L3", "query_logs", {"topic": "SYSTEM_EVENTS", "query": "certificate expired"})],
]


@dataclass
class AciRun:
    """The run the agent works in: the graph's runtime `context`."""

    run_id: str


class ForwardToolCallId:
    """Tool-call interceptor: the runtime's tool call id and the run id, to `aci`."""

    def __init__(self, stdio_session: ClientSession | None = None) -> None:
        self.stdio_session = stdio_session

    async def __call__(
        self,
        request: MCPToolCallRequest,
        handler: Callable[[MCPToolCallRequest], Awaitable[Any]],
    ) -> Any:
        runtime = request.runtime
        tool_call_id = getattr(runtime, "tool_call_id", None)
        run_id = getattr(getattr(runtime, "context", None), "run_id", None)
        if not tool_call_id or not run_id:
            raise RuntimeError("a tool call outside the graph has no tool call id to forward")
        if self.stdio_session is not None:
            meta = {"aci/tool_call_id": tool_call_id, "aci/run_id": run_id}
            return await self.stdio_session.call_tool(request.name, request.args, meta=meta)
        headers = {
            **(request.headers or {}),
            "Aci-Tool-Call-Id": tool_call_id,
            "Aci-Run-Id": run_id,
        }
        return await handler(request.override(headers=headers))


Step = AIMessage | Callable[[list[BaseMessage]], AIMessage]


class ScriptedChatModel(BaseChatModel):
    """A chat model that answers with the next scripted step (a message, or a function of
    the conversation so far); `bind_tools` keeps the script."""

    steps: list[Any]

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        if not self.steps:
            raise RuntimeError("the scripted model has no step left")
        step = self.steps.pop(0)
        message = step(messages) if callable(step) else step
        return ChatResult(generations=[ChatGeneration(message=message)])


def observation_of(message: ToolMessage) -> dict[str, Any]:
    """The observation a tool message carries: the one JSON text block."""
    content = message.content
    if isinstance(content, list):
        content = "".join(
            part.get("text", "") if isinstance(part, dict) else str(part) for part in content
        )
    return json.loads(content)


def final_answer(messages: list[BaseMessage]) -> AIMessage:
    """The scripted model's last turn: a diagnosis citing each observation by its id."""
    lines = ["Diagnosis: the order service's database connection pool is exhausted."]
    for message in messages:
        if not isinstance(message, ToolMessage):
            continue
        observation = observation_of(message)
        call_id, status = observation["tool_call_id"], observation["evidence_status"]
        if status == "EVIDENCE_FOUND":
            lines.append(f"- evidence [cite:{call_id}]")
        elif status == "NO_EVIDENCE":
            lines.append(f"- nothing found within the scope queried [cite:{call_id}]")
        else:
            lines.append(f"- {call_id} failed: {observation['error_code']} (not cited)")
    return AIMessage(content="\n".join(lines))


def scripted_model(turns: Sequence[Sequence[tuple[str, str, dict[str, Any]]]]) -> ScriptedChatModel:
    """A model that makes `turns` of tool calls, then answers with citations."""
    steps: list[Any] = [
        AIMessage(content="", tool_calls=[{"name": n, "args": a, "id": cid} for cid, n, a in turn])
        for turn in turns
    ]
    steps.append(final_answer)
    return ScriptedChatModel(steps=steps)


async def run_agent(
    tools: list[Any], run_id: str, turns: Sequence[Sequence[tuple[str, str, dict[str, Any]]]]
) -> str:
    """Runs the scripted diagnosis with `tools`; returns the final answer."""
    model = scripted_model(turns)
    agent = create_agent(model, tools, context_schema=AciRun)
    state = await agent.ainvoke(
        {
            "messages": [
                {"role": "user", "content": "Checkout is failing with 504s. What is wrong?"}
            ]
        },
        context=AciRun(run_id=run_id),
    )
    if model.steps:
        raise RuntimeError(f"{len(model.steps)} scripted model step(s) were not consumed")
    return str(state["messages"][-1].content)


def stdio_connection(aci: str, store: str, run_id: str) -> dict[str, Any]:
    """`aci serve` as a child process on stdio."""
    return {
        "transport": "stdio",
        "command": aci,
        "args": ["serve", "--store", store, "--run-id", run_id],
    }


def http_connection(url: str, token: str) -> dict[str, Any]:
    """`aci serve --http` at `url` (e.g. `http://127.0.0.1:8080/mcp`) with a bearer token.

    Tested against a real `aci serve --http` replica in `tests/test_http.py`.
    """
    return {
        "transport": "streamable_http",
        "url": url,
        "headers": {"Authorization": f"Bearer {token}"},
    }


async def diagnose_stdio(
    aci: str,
    store: str,
    run_id: str,
    turns: Sequence[Sequence[tuple[str, str, dict[str, Any]]]] = DIAGNOSIS,
) -> str:
    """The diagnosis over one stdio session, forwarding the runtime's ids as `_meta`."""
    client = MultiServerMCPClient({"aci": stdio_connection(aci, store, run_id)})
    async with client.session("aci") as session:
        tools = await load_mcp_tools(
            session, tool_interceptors=[ForwardToolCallId(session)], server_name="aci"
        )
        return await run_agent(tools, run_id, turns)


async def diagnose_http(
    url: str,
    token: str,
    run_id: str,
    turns: Sequence[Sequence[tuple[str, str, dict[str, Any]]]] = DIAGNOSIS,
) -> str:
    """The diagnosis over Streamable HTTP, forwarding the runtime's ids as headers."""
    client = MultiServerMCPClient(
        {"aci": http_connection(url, token)}, tool_interceptors=[ForwardToolCallId()]
    )
    return await run_agent(await client.get_tools(), run_id, turns)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aci", default=os.environ.get("ACI_BIN", "aci"))
    parser.add_argument("--store", default="memory")
    parser.add_argument("--run-id", default="incident-43")
    parser.add_argument("--http", metavar="URL", help="aci serve --http endpoint instead of stdio")
    parser.add_argument(
        "--token-env", default="ACI_TOKEN", help="variable holding the bearer token"
    )
    args = parser.parse_args()
    if args.http:
        answer = asyncio.run(diagnose_http(args.http, os.environ[args.token_env], args.run_id))
    else:
        answer = asyncio.run(diagnose_stdio(args.aci, args.store, args.run_id))
    print(answer)


if __name__ == "__main__":
    main()
