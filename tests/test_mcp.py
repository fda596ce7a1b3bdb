"""``/mcp`` in-process (issue 45): the request guard answering MCP's JSON-RPC in front of a
recording stand-in for langgraph-api, so that what a tool call sends on (or never sends) is
seen whole. tests/test_server_mcp.py runs the same against `langgraph dev` with the real
clients."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from noterag.base.errors import ConfigError
from noterag.core.context import MAX_QUESTION_CHARS
from noterag.core.policy import ServerPolicy
from noterag.registry.methods import METHODS
from noterag.server.http import RequestGuard
from noterag.server.mcp import answer_text, mcp_tools, tool, tool_result
from scripted import request_body

KEY = "k-1"
OUTPUT = {
    "question": "q",
    "answer": "1871",
    "best_note": "Aurelio Fenwick, born 1871, designed the Velmora Bridge.",
    "passage_ids": ["s002", "s001"],
    "stop_reason": "max_steps",
    "trace": [{"step": 0}],
}
RETRIEVAL = {
    "type": "retrieval",
    "query": "q",
    "k": 2,
    "passages": [
        {"id": "s001", "title": "Velmora Bridge", "text": "..."},
        {"id": "s002", "title": "Aurelio Fenwick", "text": "..."},
    ],
}


class LangGraphAPI:
    """Stands in for langgraph-api behind the guard: records each request and answers a run's
    stream with ``events`` (server-sent events, as langgraph-api writes them)."""

    def __init__(self, events: list[tuple[str, Any]]) -> None:
        self.events = events
        self.requests: list[tuple[str, str, dict[bytes, bytes], Any]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        body = await request_body(receive)
        self.requests.append(
            (scope["method"], scope["path"], dict(scope["headers"]), json.loads(body or b"null"))
        )
        stream = b"".join(
            f"event: {event}\r\ndata: {json.dumps(data)}\r\n\r\n".encode()
            for event, data in self.events
        )
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})  # fmt: skip
        await send({"type": "http.response.body", "body": stream})


def _post(guard: Any, message: Any, key: str | None = KEY) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=guard)
        headers = {"accept": "application/json, text/event-stream"}
        if key:
            headers["x-api-key"] = key
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.post("/mcp", json=message, headers=headers)

    return asyncio.run(go())


def _guard(
    events: list[tuple[str, Any]] | None = None, **policy: Any
) -> tuple[RequestGuard, LangGraphAPI]:
    api = LangGraphAPI(events if events is not None else
                       [("metadata", {"run_id": "r"}), ("custom", RETRIEVAL), ("values", OUTPUT)])  # fmt: skip
    guard = RequestGuard(api, ServerPolicy(api_key=KEY, **policy), server_settings=False,
                         cors={"allow_origins": []}, tools=("deepnote", "vanilla"))  # fmt: skip
    return guard, api


def _call(arguments: Any, name: str = "deepnote", **params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": name, "arguments": arguments, **params}}  # fmt: skip


def test_a_call_runs_its_method_with_the_checks_a_run_gets_and_reads_as_an_answer() -> None:
    guard, api = _guard()
    reply = _post(guard, _call({"question": "Who?", "max_steps": 2}, context={"top_k": 3}))
    assert reply.status_code == 200
    result = reply.json()["result"]
    assert result["content"][0]["text"] == (
        "1871\n\nBest note:\nAurelio Fenwick, born 1871, designed the Velmora Bridge.\n\n"
        "Passages: Aurelio Fenwick · Velmora Bridge"
    )
    assert result["structuredContent"]["passages"] == ["Aurelio Fenwick", "Velmora Bridge"]
    [(method, path, headers, run)] = api.requests
    # the run the call stands for, as the runs API would have got it after the guard
    assert (method, path) == ("POST", "/runs/stream")
    assert headers[b"x-api-key"] == KEY.encode()  # langgraph-api's auth sees the caller's key
    assert run["assistant_id"] == "deepnote" and run["input"] == {"question": "Who?"}
    assert run["context"] == {"top_k": 3, "max_steps": 2}
    assert run["on_disconnect"] == "cancel"  # the client leaving cancels the run
    assert 0 < run["config"]["recursion_limit"] <= 10_000  # the method's cap
    assert run["stream_mode"] == ["values", "custom"]


@pytest.mark.parametrize(
    ("arguments", "params", "reason"),
    [
        ({"question": "x" * (MAX_QUESTION_CHARS + 1)}, {}, "the question is 8,001 characters"),
        ({"question": 3}, {}, "the question must be a string"),
        ({}, {}, "the tool needs a question"),
        ({"question": "q", "max_steps": 21}, {}, "max_steps must be at most 20"),
        ({"question": "q"}, {"context": {"max_steps": 21}}, "max_steps must be at most 20"),
        ({"question": "q", "temperature": 0.5}, {}, "temperature: set by this server's operator"),
        ({"question": "q", "prompts": {"answer": "{x}"}}, {}, "prompts: set by this server"),
        ({"question": "q", "index": "web"}, {}, "index cannot be chosen on this server"),
        ({"question": "q", "nope": 1}, {}, "unknown context field(s) nope"),
        ("q", {}, "arguments must be an object"),
        ({"question": "q", "human_review": "note"}, {}, "does not pause for a human review"),
        ({"question": "q"}, {"context": {"human_review": "both"}}, "does not pause for a human"),
    ],
)
def test_a_refused_call_is_a_json_rpc_error_and_nothing_runs(
    arguments: Any, params: dict[str, Any], reason: str
) -> None:
    guard, api = _guard()
    reply = _post(guard, _call(arguments, **params))
    assert reply.status_code == 200
    error = reply.json()["error"]
    assert error["code"] == -32602 and reason in error["message"], error
    assert error["data"] == {"status": 422}
    assert api.requests == []


def test_what_the_operator_opened_is_taken() -> None:
    guard, api = _guard(allow_client_sampling=True, models=("fast=openai:a", "strong=openai:b"))
    reply = _post(guard, _call({"question": "q", "temperature": 0.5, "model": "fast"}))
    assert "result" in reply.json() and api.requests[0][3]["context"]["model"] == "fast"
    refused = _post(guard, _call({"question": "q", "model": "openai:c"}))
    assert "is not offered here; models: fast, strong" in refused.json()["error"]["message"]


def test_mcp_wants_the_key_before_anything() -> None:
    guard, api = _guard()
    for key in (None, "wrong"):
        for message in (
            _call({"question": "q"}),
            {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        ):
            assert _post(guard, message, key=key).status_code == 401
    assert api.requests == []


def test_tools_not_offered_and_unknown_methods() -> None:
    guard, api = _guard()
    error = _post(guard, _call({"question": "q"}, name="amber")).json()["error"]
    assert error["message"] == "unknown tool 'amber'; tools: deepnote, vanilla"
    error = _post(guard, {"jsonrpc": "2.0", "id": 2, "method": "resources/list"}).json()["error"]
    assert error["code"] == -32601
    assert api.requests == []


def test_the_protocol_around_the_tools() -> None:
    guard, _ = _guard()
    init = _post(guard, {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                         "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                    "clientInfo": {"name": "t", "version": "0"}}})  # fmt: skip
    assert init.json()["result"]["protocolVersion"] == "2025-06-18"
    assert init.json()["result"]["capabilities"] == {"tools": {"listChanged": False}}
    assert (
        _post(guard, {"jsonrpc": "2.0", "method": "notifications/initialized"}).status_code == 202
    )
    assert _post(guard, {"jsonrpc": "2.0", "id": 1, "method": "ping"}).json()["result"] == {}
    assert _post(guard, [{"jsonrpc": "2.0", "id": 1, "method": "ping"}]).status_code == 400
    listed = _post(guard, {"jsonrpc": "2.0", "id": 3, "method": "tools/list"}).json()["result"]
    assert [t["name"] for t in listed["tools"]] == ["deepnote", "vanilla"]


def test_a_failed_run_is_a_tool_error() -> None:
    guard, _ = _guard([("error", {"error": "CallBudgetError", "message": "over budget"})])
    result = _post(guard, _call({"question": "q"})).json()["result"]
    assert result["isError"] is True and "over budget" in result["content"][0]["text"]


@pytest.mark.parametrize("method", list(METHODS))
def test_each_method_describes_itself_and_its_settings(method: str) -> None:
    spec = METHODS[method]
    listed = tool(method, ServerPolicy())
    assert listed["name"] == method and listed["description"].startswith(spec.title)
    assert spec.summary in listed["description"]
    schema = listed["inputSchema"]
    assert schema["required"] == ["question"] and schema["additionalProperties"] is False
    settings = set(schema["properties"]) - {"question"}
    # every setting the runs API takes from a client here, none that the operator keeps
    assert "max_tokens" not in settings and "prompts" not in settings
    assert "human_review" not in settings  # nobody answers a review within a tool call
    assert "model" not in settings  # no models offered
    assert settings and all(name in listed["description"] for name in settings)
    for prop in schema["properties"].values():
        if prop.get("type") == "integer":
            assert "maximum" in prop  # every numeric setting's bound is shown
    opened = tool(method, ServerPolicy(allow_client_sampling=True, indexes=("wiki=bm25:/x",)))
    assert "max_tokens" in opened["inputSchema"]["properties"]
    assert opened["inputSchema"]["properties"]["index"]["enum"] == ["wiki"]


def test_noterag_mcp_tools() -> None:
    assert mcp_tools({}) == tuple(METHODS)
    assert mcp_tools({"NOTERAG_MCP_TOOLS": " deepnote, vanilla ,deepnote"}) == (
        "deepnote",
        "vanilla",
    )
    assert mcp_tools({"NOTERAG_MCP_TOOLS": "none"}) == ()
    with pytest.raises(ConfigError, match="NOTERAG_MCP_TOOLS: no method 'deepnot'; methods: "):
        mcp_tools({"NOTERAG_MCP_TOOLS": "deepnote,deepnot"})
    guard = RequestGuard(LangGraphAPI([]), ServerPolicy(), server_settings=False, tools=())
    assert _post(guard, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).status_code == 404


def test_the_result_of_each_output_shape() -> None:
    # ReSP: its memory; a baseline: no note; passages named by id when no event named them
    resp = tool_result({"answer": "a", "memory": "m", "passage_ids": ["x"]}, [])
    assert resp["content"][0]["text"] == "a\n\nMemory:\nm\n\nPassages: x"
    baseline = tool_result({"answer": "a", "passage_ids": []}, [RETRIEVAL])
    assert baseline["content"][0]["text"] == "a"
    many = answer_text({"answer": "a", "passages": [f"t{i}" for i in range(25)]})
    assert many.endswith("t19 (and 5 more)")
