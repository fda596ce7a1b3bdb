"""Every method as an MCP tool (issue 45), with the real clients against `langgraph dev`: the
official ``mcp`` SDK over streamable HTTP (initialize, list, a call to ``deepnote``, refused
calls, the API key) and ``langchain-mcp-adapters`` loading the tools into a LangChain agent.
The server's model is the simulated OpenAI-compatible endpoint (bench/sim_endpoint.py), whose
request log tells whether a refused call reached the model."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from noterag.core.context import MAX_QUESTION_CHARS
from scripted import QUESTION

pytest.importorskip("mcp", reason="the mcp SDK is in the dev extra")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from sim_endpoint import SimModel, start

KEY = "mcp-test-key-5c1d"
TOOLS = "deepnote,vanilla"


@pytest.fixture(scope="module")
def endpoint() -> Iterator[tuple[SimModel, str]]:
    """The simulated endpoint (its request log, its URL)."""
    sim = SimModel(base_s=0, per_token_s=0)
    server, url = start(sim)
    yield sim, url
    server.shutdown()


@pytest.fixture(scope="module")
def model(endpoint: tuple[SimModel, str]) -> SimModel:
    return endpoint[0]


@pytest.fixture(scope="module")
def mcp_server(
    tmp_path_factory: pytest.TempPathFactory, endpoint: tuple[SimModel, str]
) -> Iterator[str]:
    """`langgraph dev` with a key, two tools offered, the simulated endpoint as its model."""
    from devserver import serve

    yield from serve(tmp_path_factory, {
        "NOTERAG_MODEL": f"openai:sim@{endpoint[1]}",
        "NOTERAG_API_KEY": KEY,
        "NOTERAG_ALLOW_CLIENT_SAMPLING": "0",
        "NOTERAG_MAX_RETRIES": "0",
        "NOTERAG_MCP_TOOLS": TOOLS,
    })  # fmt: skip


def _session(url: str, key: str | None = KEY) -> Any:
    """An MCP client session over streamable HTTP (the SDK's own client), with the key."""
    import contextlib

    import httpx
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    @contextlib.asynccontextmanager
    async def session() -> Any:
        headers = {"x-api-key": key} if key else {}
        async with (
            httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(120)) as http,
            streamable_http_client(f"{url}/mcp", http_client=http) as (read, write, _),
            ClientSession(read, write) as client,
        ):
            yield client

    return session()


@pytest.mark.server
def test_initialize_list_and_call_deepnote(mcp_server: str, model: SimModel) -> None:
    async def go() -> tuple[Any, Any, Any]:
        async with _session(mcp_server) as client:
            init = await client.initialize()
            listed = await client.list_tools()
            called = await client.call_tool("deepnote", {"question": QUESTION, "max_steps": 1})
            return init, listed, called

    before = len(model.records)
    init, listed, called = asyncio.run(go())
    assert init.serverInfo.name == "noterag" and init.capabilities.tools is not None
    tools = {t.name: t for t in listed.tools}
    # the operator's NOTERAG_MCP_TOOLS, in its order
    assert list(tools) == ["deepnote", "vanilla"]
    deepnote = tools["deepnote"]
    assert deepnote.description.startswith("DeepNote")
    schema = deepnote.inputSchema
    assert schema["required"] == ["question"]
    assert schema["properties"]["question"]["maxLength"] == MAX_QUESTION_CHARS
    assert schema["properties"]["max_steps"]["maximum"] == 20
    # sampling is the operator's here: not offered
    assert "temperature" not in schema["properties"] and "prompts" not in schema["properties"]
    # the call ran DeepNote on the simulated model and reads as an answer
    assert not called.isError
    text = called.content[0].text
    structured = called.structuredContent
    assert structured["answer"] and text.startswith(structured["answer"].strip())
    assert "Best note:" in text and structured["note"].strip() in text
    assert structured["passages"] and "Passages: " + structured["passages"][0] in text
    assert "{" not in text.split("\n", 1)[0]  # no Python repr of the state
    assert len(model.records) > before


async def _refusal(url: str, tool: str, arguments: dict[str, Any]) -> Any:
    """The JSON-RPC error a call gets (the SDK raises it as McpError)."""
    from mcp.shared.exceptions import McpError

    async with _session(url) as client:
        await client.initialize()
        try:
            await client.call_tool(tool, arguments)
        except McpError as error:
            return error.error
    raise AssertionError(f"{tool} {arguments} was not refused")


@pytest.mark.server
@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        ({"question": "x" * (MAX_QUESTION_CHARS + 1)}, "the question is 8,001 characters long"),
        ({"question": QUESTION, "max_steps": 100000}, "max_steps must be at most 20"),
        ({"question": QUESTION, "temperature": 1.5}, "temperature: set by this server's operator"),
        ({"question": QUESTION, "bogus": 1}, "unknown context field(s) bogus"),
        ({"question": QUESTION, "model": "openai:gpt-5"}, "model cannot be chosen on this server"),
    ],
)
def test_a_refused_call_is_a_json_rpc_error_and_nothing_runs(
    mcp_server: str, model: SimModel, arguments: dict[str, Any], reason: str
) -> None:
    before = len(model.records)
    error = asyncio.run(_refusal(mcp_server, "deepnote", arguments))
    assert error.code == -32602 and reason in error.message
    assert error.data["status"] == 422  # what the runs API answers the same run
    assert len(model.records) == before  # no model call


@pytest.mark.server
def test_a_tool_the_operator_did_not_offer_is_unknown(mcp_server: str, model: SimModel) -> None:
    before = len(model.records)
    error = asyncio.run(_refusal(mcp_server, "amber", {"question": QUESTION}))
    assert error.message == "unknown tool 'amber'; tools: deepnote, vanilla"
    assert len(model.records) == before


@pytest.mark.server
@pytest.mark.parametrize("key", [None, "wrong"])
def test_mcp_wants_the_key(mcp_server: str, model: SimModel, key: str | None) -> None:
    import httpx

    headers = {"accept": "application/json, text/event-stream"} | (
        {"x-api-key": key} if key else {}
    )
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "vanilla", "arguments": {"question": QUESTION}}}  # fmt: skip
    before = len(model.records)
    for message in (call, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}):
        reply = httpx.post(f"{mcp_server}/mcp", json=message, headers=headers, timeout=60)
        assert reply.status_code == 401, reply.text
    assert len(model.records) == before
    # and the SDK's client fails to connect without it: HTTP 401 at initialize

    async def go() -> None:
        async with _session(mcp_server, key=key) as client:
            await client.initialize()

    with pytest.raises(BaseExceptionGroup) as failed:  # anyio's task group around the client
        asyncio.run(go())
    statuses = []
    todo: list[BaseException] = [failed.value]
    while todo:
        error = todo.pop()
        if isinstance(error, BaseExceptionGroup):
            todo.extend(error.exceptions)
        elif isinstance(error, httpx.HTTPStatusError):
            statuses.append(error.response.status_code)
    assert statuses == [401]


@pytest.mark.server
def test_a_langchain_agent_answers_with_a_noterag_tool(
    mcp_server: str, endpoint: tuple[SimModel, str]
) -> None:
    """langchain-mcp-adapters loads the tools; a LangChain agent, its model the simulated
    endpoint (which calls the first tool that takes a question, then answers with the tool's
    first paragraph: bench/sim_endpoint.agent_reply), calls ``deepnote`` and answers from its
    result."""
    pytest.importorskip(
        "langchain_mcp_adapters", reason="langchain-mcp-adapters is in the dev extra"
    )
    agents = pytest.importorskip("langchain.agents", reason="create_agent is in langchain")
    from langchain_core.messages import ToolMessage
    from langchain_mcp_adapters.client import MultiServerMCPClient
    from langchain_openai import ChatOpenAI

    model, url = endpoint
    client = MultiServerMCPClient({
        "noterag": {"transport": "streamable_http", "url": f"{mcp_server}/mcp",
                    "headers": {"x-api-key": KEY}},
    })  # fmt: skip

    async def go() -> tuple[list[Any], dict[str, Any]]:
        tools = await client.get_tools()
        chat = ChatOpenAI(model="sim", base_url=url, api_key="sim", max_retries=0)
        agent = agents.create_agent(chat, tools)
        return tools, await agent.ainvoke({"messages": [("user", QUESTION)]})

    before = len(model.records)
    tools, out = asyncio.run(go())
    assert [t.name for t in tools] == ["deepnote", "vanilla"]
    assert "question" in tools[0].args_schema["properties"]
    tool_messages = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert len(tool_messages) == 1 and tool_messages[0].name == "deepnote"
    result = tool_messages[0].content
    text = result if isinstance(result, str) else result[0]["text"]
    answer = out["messages"][-1].content
    # the agent's answer is the tool's answer, which DeepNote wrote on the server's model
    assert answer and text.startswith(answer + "\n\nBest note:") and "Passages: " in text
    assert len(model.records) > before  # DeepNote's calls (the agent's own are not recorded)
