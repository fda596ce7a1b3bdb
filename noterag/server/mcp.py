"""Every method as a Model Context Protocol tool: ``/mcp`` (streamable HTTP, JSON-RPC 2.0).

langgraph-api serves ``/mcp`` itself, but its ``tools/call`` starts a run from JSON-RPC
``arguments`` and ``context`` that no request guard reads, lists every assistant whatever its
name, describes a tool as "Tool based on the X assistant" and answers with the Python ``repr``
of the run's values. So langgraph.json keeps langgraph-api's own route off (``disable_mcp``)
and the request guard (``noterag.server.http.RequestGuard``) answers ``/mcp`` here, after the
checks every request gets there (the API key, the body limit, the origin):

- ``initialize``, ``ping`` and notifications as the protocol has them (stateless: no session,
  ``application/json`` replies, no server-sent stream: ``GET /mcp`` is 405, as langgraph-api's);
- ``tools/list``: one tool per method the operator offers (``NOTERAG_MCP_TOOLS``, default: every
  method), named by its graph id, described by its declaration (``MethodSpec.title`` and
  ``summary``), its input schema a ``question`` and the settings a client may choose on this
  server (bounds and descriptions from the method's context; sampling and prompts only where
  the operator opened them; ``model`` and ``index`` among the operator's names);
- ``tools/call``: the call becomes the run it stands for (``POST /runs/stream`` of the method,
  ``arguments`` as its question and settings, ``context`` as its settings, as langgraph-api
  reads them) and goes through ``RequestGuard.check_run``, the same checks a run sent to the
  runs API gets (question cap, settings and their bounds, what the operator opened, offered
  models and indexes, the recursion limit, cancel on disconnect); a refusal is a JSON-RPC error
  carrying the reason, and no run starts. A run that starts is held to the method's call budget
  by the graph itself (``noterag.core.budget``), as every run is.
- The result reads as an answer: the run's output (its graph's output schema: what LangGraph
  returns) gives the answer first, then the best note (ReSP: its memory) and the titles of the
  passages it kept, which the run's retrieval events name (the state keeps passage ids only);
  ``structuredContent`` holds the same fields for a program.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import typing
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, fields
from types import SimpleNamespace
from typing import Any, Protocol

from pydantic import TypeAdapter
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from noterag.base.errors import ConfigError
from noterag.base.terminal import printable
from noterag.core.context import MAX_QUESTION_CHARS, client_settings, refuse_human_review
from noterag.core.policy import ServerPolicy, offers


class Guard(Protocol):
    """What this module uses of ``noterag.server.http.RequestGuard``, which calls it."""

    app: ASGIApp  # langgraph-api behind the guard (its auth included)
    policy: ServerPolicy
    mcp_tools: tuple[str, ...]

    def check_run(self, path: str, body: bytes) -> tuple[tuple[int, str] | None, bytes]: ...


__all__ = ["MCP_PATH", "answer_text", "mcp_tools", "serve", "tool", "tool_result"]

log = logging.getLogger("noterag.server")

MCP_PATH = "/mcp"
# the protocol versions a client may ask for (the specification's dated revisions); any other
# is answered with the latest, which the client may refuse
PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
LATEST = PROTOCOL_VERSIONS[-1]
# JSON-RPC 2.0's error codes
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS = -32700, -32600, -32601, -32602
# a refused run: the reason is the client's to fix (its question or settings), as -32602 says
REFUSED = INVALID_PARAMS
# the passages' titles a result lists; more are counted
MOST_TITLES = 20


def mcp_tools(env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The methods offered as tools: ``NOTERAG_MCP_TOOLS`` (comma-separated graph ids;
    ``none``: ``/mcp`` off), every method when unset. An unknown name is a ConfigError
    naming the methods."""
    from noterag.registry.methods import METHODS

    raw = (os.environ if env is None else env).get("NOTERAG_MCP_TOOLS", "").strip()
    if not raw:
        return tuple(METHODS)
    if raw.lower() == "none":
        return ()
    names = tuple(dict.fromkeys(n.strip() for n in raw.split(",") if n.strip()))
    unknown = [n for n in names if n not in METHODS]
    if unknown:
        raise ConfigError(
            f"NOTERAG_MCP_TOOLS: no method {', '.join(map(repr, unknown))}; methods: "
            f"{', '.join(METHODS)}"
        )
    return names


def _setting_schema(schema: type, name: str, hint: Any, meta: Mapping[str, Any]) -> dict[str, Any]:
    """One setting as a JSON Schema property: its type (pydantic's schema of the field's
    annotation), bounds and description, as the method declares them."""
    prop: dict[str, Any] = dict(TypeAdapter(hint).json_schema())
    prop.pop("title", None)
    if "ge" in meta:
        prop["minimum"] = meta["ge"]
    if "le" in meta:
        prop["maximum"] = meta["le"]
    if meta.get("description"):
        prop["description"] = meta["description"]
    return prop


def tool_settings(method: str, policy: ServerPolicy) -> dict[str, dict[str, Any]]:
    """The settings a client may choose for ``method`` on this server, as JSON Schema
    properties: the method's context fields, less those the operator keeps (sampling, prompts
    unless opened), plus ``model`` and ``index`` among the operator's names when offered."""
    from noterag.registry.methods import METHODS

    schema = METHODS[method].context
    # nobody answers a review within a tool call: its run is stateless, and the client waits
    closed: set[str] = {"human_review"}
    if not policy.allow_client_sampling:
        closed |= set(client_settings(schema, "sampling"))
    if not policy.allow_client_prompts:
        closed |= set(client_settings(schema, "prompts"))
    hints = typing.get_type_hints(schema)
    found: dict[str, dict[str, Any]] = {}
    for f in fields(schema):
        if f.name in closed or f.name.startswith("_"):
            continue
        prop = _setting_schema(schema, f.name, hints[f.name], f.metadata)
        if f.default is not MISSING:
            prop["default"] = f.default
        found[f.name] = prop
    for key, entries, variable in (
        ("model", policy.models, "NOTERAG_SERVER_MODELS"),
        ("index", policy.indexes, "NOTERAG_SERVER_INDEXES"),
    ):
        if entries:
            names = list(offers(entries, variable))
            found[key] = {
                "type": "string",
                "enum": names,
                "description": f"The {key} to run with, by the server's name for it (default: "
                "the server's own).",
            }
    return found


def tool(method: str, policy: ServerPolicy) -> dict[str, Any]:
    """``method``'s entry in ``tools/list``."""
    from noterag.registry.methods import METHODS

    spec = METHODS[method]
    settings = tool_settings(method, policy)
    properties: dict[str, Any] = {
        "question": {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_QUESTION_CHARS,
            "description": "The question to research and answer, on its own (no earlier turns).",
        },
        **settings,
    }
    taken = ", ".join(settings) or "none"
    keys = spec.output_keys
    memory = "best note" if "best_note" in keys else "memory" if "memory" in keys else None
    if not spec.retrieves:
        how = "It answers from the model alone, searching nothing."
    elif memory:
        how = "It searches the server's index over several rounds, keeps what it learns in its "
        how += f"{memory}, and answers from it."
    else:
        how = "It searches the server's index and answers from the passages."
    returns = "the answer" + (f", its {memory}" if memory else "")
    returns += " and the titles of the passages it used" if spec.retrieves else ""
    return {
        "name": method,
        "title": spec.title,
        "description": f"{spec.title}: {spec.summary.rstrip('.')}. {how} Returns {returns}. Optional "
        f"settings: {taken}.",
        "inputSchema": {
            "type": "object",
            "properties": properties,
            "required": ["question"],
            "additionalProperties": False,
        },
        "annotations": {
            "title": spec.title,
            # a stateless run: it reads the index and calls the model, and writes nothing a
            # later call sees
            "readOnlyHint": True,
            "destructiveHint": False,
            "idempotentHint": False,
            "openWorldHint": False,
        },
    }


def _titles(output: Mapping[str, Any], events: Sequence[Mapping[str, Any]]) -> list[str]:
    """The titles of the passages the run kept (its output's ``passage_ids``), named by its
    retrieval events; without ids, every retrieved passage's title, in order."""
    named: dict[str, str] = {}
    for event in events:
        for passage in event.get("passages") or []:
            if isinstance(passage, Mapping) and isinstance(passage.get("id"), str):
                named.setdefault(passage["id"], str(passage.get("title") or passage["id"]))
    ids = output.get("passage_ids")
    kept = [i for i in ids if isinstance(i, str)] if isinstance(ids, list) else list(named)
    return list(dict.fromkeys(named.get(i, i) for i in kept))


def tool_result(output: Mapping[str, Any], events: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A finished run's ``tools/call`` result: ``answer_text`` as the text, and its fields."""
    note = output.get("best_note") or output.get("memory") or ""
    structured = {
        "answer": str(output.get("answer") or ""),
        "note": str(note),
        "passages": _titles(output, events),
        "stop_reason": str(output.get("stop_reason") or ""),
    }
    return {
        "content": [
            {
                "type": "text",
                "text": answer_text(structured, memory="best_note" not in output and bool(note)),
            }
        ],
        "structuredContent": structured,
        "isError": False,
    }


def answer_text(result: Mapping[str, Any], *, memory: bool = False) -> str:
    """The answer, then the best note (ReSP's memory: ``memory``), then the passages' titles."""
    parts = [str(result.get("answer") or "(no answer)").strip()]
    if result.get("note"):
        parts.append(f"{'Memory' if memory else 'Best note'}:\n{str(result['note']).strip()}")
    titles = list(result.get("passages") or [])
    if titles:
        shown = " · ".join(titles[:MOST_TITLES])
        if len(titles) > MOST_TITLES:
            shown += f" (and {len(titles) - MOST_TITLES} more)"
        parts.append(f"Passages: {shown}")
    return "\n\n".join(parts)


def _sse_events(body: bytes) -> list[tuple[str, Any]]:
    """(event, data) of each server-sent event of a runs stream."""
    found = []
    for block in body.replace(b"\r\n", b"\n").split(b"\n\n"):
        event, data = "message", []
        for line in block.split(b"\n"):
            if line.startswith(b"event:"):
                event = line[6:].strip().decode()
            elif line.startswith(b"data:"):
                data.append(line[5:].strip())
        if data:
            try:
                found.append((event, json.loads(b"\n".join(data))))
            except ValueError:
                continue
    return found


def _error(id_: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": id_, "error": error}


def replaying(body: bytes, receive: Receive) -> Receive:
    """An ASGI ``receive`` that gives the body already read once, then the client's own
    messages (its disconnect, which cancels the run)."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if replayed:
            return await receive()
        replayed = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


async def serve(guard: Guard, scope: Scope, receive: Receive, send: Send, body: bytes) -> None:
    """Answer a request to ``/mcp`` (the guard has checked its key, origin and size)."""
    tools = guard.mcp_tools
    if not tools:
        await JSONResponse({"detail": "MCP is off on this server (NOTERAG_MCP_TOOLS=none)"},
                           status_code=404)(scope, receive, send)  # fmt: skip
        return
    if scope["method"] != "POST":
        # no server-sent stream to open (GET) and no session to end (DELETE): stateless
        await Response(status_code=405, headers={"allow": "POST"})(scope, receive, send)
        return
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        await JSONResponse(_error(None, PARSE_ERROR, "the body is not JSON"), status_code=400)(
            scope, receive, send
        )
        return
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        reply = _error(None, INVALID_REQUEST, "one JSON-RPC 2.0 message per request (no batches)")
        await JSONResponse(reply, status_code=400)(scope, receive, send)
        return
    if "id" not in message or not isinstance(message.get("method"), str):
        # a notification (notifications/initialized, cancelled) or a response: accepted
        await Response(status_code=202)(scope, receive, send)
        return
    id_, method = message["id"], message["method"]
    params = message.get("params") or {}
    if not isinstance(params, dict):
        reply = _error(id_, INVALID_PARAMS, "params must be an object")
    elif method == "initialize":
        asked = params.get("protocolVersion")
        reply = {"jsonrpc": "2.0", "id": id_, "result": {
            "protocolVersion": asked if asked in PROTOCOL_VERSIONS else LATEST,
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": "noterag", "title": "noterag: note-centric research",
                           "version": _version()},
            "instructions": "Each tool is a retrieval-augmented research method over this "
            "server's index: give it a self-contained question. deepnote and adaptive-note "
            "gather evidence over several searches into a note; vanilla searches once.",
        }}  # fmt: skip
    elif method == "ping":
        reply = {"jsonrpc": "2.0", "id": id_, "result": {}}
    elif method == "tools/list":
        listed = [tool(name, guard.policy) for name in tools]
        reply = {"jsonrpc": "2.0", "id": id_, "result": {"tools": listed}}
    elif method == "tools/call":
        reply = await _call(guard, scope, receive, id_, params, tools)
    else:
        reply = _error(id_, METHOD_NOT_FOUND, f"method not found: {str(method)[:80]}")
    await JSONResponse(reply)(scope, receive, send)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("noterag")
    except PackageNotFoundError:
        return "0"


def run_request(params: Mapping[str, Any]) -> dict[str, Any]:
    """The runs-API request a ``tools/call`` stands for: its ``arguments``' question as the
    input, every other argument and its ``context`` (langgraph-api's extension) as settings.
    A malformed call is a ConfigError."""
    arguments = params.get("arguments")
    arguments = {} if arguments is None else arguments
    context = params.get("context")
    context = {} if context is None else context
    if not isinstance(arguments, dict):
        raise ConfigError('arguments must be an object: {"question": ...}')
    if not isinstance(context, dict):
        raise ConfigError("context must be an object of settings")
    settings = {k: v for k, v in arguments.items() if k != "question"}
    refuse_human_review(SimpleNamespace(**context, **settings), "an MCP tool call")
    question = arguments.get("question")
    if question is None or (isinstance(question, str) and not question.strip()):
        raise ConfigError('the tool needs a question: {"question": "..."}')
    return {
        "assistant_id": params["name"],
        "input": {"question": question},
        "context": {**context, **settings},
        "stream_mode": ["values", "custom"],
    }


async def _call(
    guard: Guard,
    scope: Scope,
    receive: Receive,
    id_: Any,
    params: Mapping[str, Any],
    tools: tuple[str, ...],
) -> dict[str, Any]:
    name = params.get("name")
    if not isinstance(name, str) or name not in tools:
        shown = repr(name)[:80]
        return _error(id_, INVALID_PARAMS, f"unknown tool {shown}; tools: {', '.join(tools)}")
    try:
        request = run_request(params)
    except ConfigError as error:
        return _refused(scope, id_, 422, str(error))
    path = "/runs/stream"
    refusal, body = await asyncio.to_thread(guard.check_run, path, json.dumps(request).encode())
    if refusal is not None:
        return _refused(scope, id_, *refusal)
    status, reply = await _dispatch(guard, scope, receive, path, body)
    if status >= 400:
        detail = _detail(reply) or f"HTTP {status}"
        return _refused(scope, id_, status, detail)
    events = _sse_events(reply)
    errors = [data for event, data in events if event == "error"]
    if errors:
        failure = errors[-1]
        text = failure.get("message") or failure.get("error") if isinstance(failure, dict) else None
        return {"jsonrpc": "2.0", "id": id_, "result": {
            "content": [{"type": "text", "text": f"the run failed: {text or failure}"}],
            "isError": True,
        }}  # fmt: skip
    values = [data for event, data in events if event == "values" and isinstance(data, dict)]
    retrievals = [
        data for event, data in events
        if event == "custom" and isinstance(data, dict) and data.get("type") == "retrieval"
    ]  # fmt: skip
    output = values[-1] if values else {}
    return {"jsonrpc": "2.0", "id": id_, "result": tool_result(output, retrievals)}


def _detail(reply: bytes) -> str | None:
    try:
        parsed = json.loads(reply)
    except ValueError:
        return None
    detail = parsed.get("detail") if isinstance(parsed, dict) else None
    return str(detail) if detail else None


def _refused(scope: Scope, id_: Any, status: int, detail: str) -> dict[str, Any]:
    """A refused tool call: a JSON-RPC error with the reason (and the HTTP status the same run
    would have got from the runs API), logged as the guard logs its refusals."""
    shown = printable(detail).replace("\n", " ")
    log.warning("refused %s %s tools/call: %d %s", scope["method"], scope["path"], status,
                shown if len(shown) <= 200 else shown[:200] + "...")  # fmt: skip
    return _error(id_, REFUSED, detail, {"status": status})


async def _dispatch(
    guard: Guard, scope: Scope, receive: Receive, path: str, body: bytes
) -> tuple[int, bytes]:
    """POST ``body`` to ``path`` of langgraph-api (behind the guard, its auth included) with
    the MCP request's credentials; (status, the whole reply). After the body, the client's own
    messages: its disconnect cancels the run (the guard imposed ``on_disconnect="cancel"``)."""
    keep = (b"x-api-key", b"authorization", b"host")
    headers = [(k, v) for k, v in scope["headers"] if k in keep] + [
        (b"content-type", b"application/json"),
        (b"accept", b"text/event-stream"),
        (b"content-length", str(len(body)).encode()),
    ]
    sub = dict(scope) | {
        "method": "POST",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": headers,
    }
    replay = replaying(body, receive)
    status, chunks = 500, []

    async def collect(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await guard.app(sub, replay, collect)
    return status, b"".join(chunks)
