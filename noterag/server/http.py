"""What ``langgraph dev`` (and a deployment of langgraph.json) lets a web browser do.

langgraph-api answers any origin by default (``access-control-allow-origin: *``; ``langgraph
dev`` also grants Private Network Access): any page a user visits could stream runs and read the
corpus through a dev server running on their machine. langgraph.json's ``http.cors`` narrows
CORS to the local origins (``http://localhost:PORT``, ``http://127.0.0.1:PORT``,
``http://[::1]:PORT``, any port, http or https) and LangSmith's hosted Studio
(``https://smith.langchain.com``, ``https://eu.smith.langchain.com``), which talks to the local
server from the browser.

CORS only stops a page from *reading* a reply: a "simple" cross-origin request (a POST with a
``text/plain`` body, which the browser sends without asking first) would still start a run,
since the server reads the body as JSON whatever its type. ``app`` (langgraph.json's
``http.app``) therefore refuses, with HTTP 403, every request that carries an ``Origin`` the same
CORS settings do not allow, preflights included. Requests without an ``Origin`` (the Python and
JavaScript SDKs, curl, ``RemoteGraph``) are not browser requests and pass.

Widening: list origins in ``NOTERAG_CORS_ORIGINS`` (comma-separated, read when the server
starts: ``https://agentchat.vercel.app`` admits the hosted Agent Chat UI), which this guard
allows and answers with CORS headers of their own; or add them to ``http.cors.allow_origins`` (or widen ``allow_origin_regex``) in
langgraph.json, or set ``CORS_CONFIG`` to a JSON object of the same shape in the server's
environment, which replaces the block; both this guard and the CORS headers follow it.
``"allow_origins": ["*"]`` restores langgraph-api's default (any origin).

``RequestGuard`` applies the operator's policy (``noterag.core.policy``) to every request
before langgraph-api reads or stores it: body size (every method), question length, settings,
commands and state writes and each run's recursion limit (``noterag.server.bounds``), crons,
cancellation on disconnect, and the API key on langgraph-api's own pages (``/metrics``,
``/docs``, ``/openapi.json``), which its auth does not cover.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Mapping
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from noterag.base.errors import ConfigError
from noterag.core.policy import ServerPolicy, check_input, check_run_settings
from noterag.server.bounds import (
    check_command,
    check_recursion_limit,
    check_state_values,
    ends_only,
)
from noterag.server.key import given_key, key_matches
from noterag.server.mcp import MCP_PATH, mcp_tools, replaying
from noterag.server.mcp import serve as serve_mcp

__all__ = ["BATCH_CAP", "OriginGuard", "RequestGuard", "app", "origin_allowed"]

# every refusal of the guards is logged here (the server's log: `langgraph dev` prints it)
log = logging.getLogger("noterag.server")

# The most runs one POST /runs/batch may create: each is a run as any other, and a 1 MiB body
# held about 17,000 of them. Far above what a client's batch of questions needs at once.
BATCH_CAP = 100


def server_cors_config() -> Mapping[str, Any] | None:
    """The CORS settings langgraph-api runs with (``CORS_CONFIG`` from the environment, else
    langgraph.json's ``http.cors``); None when neither is set (its default: any origin)."""
    from langgraph_api import config

    return config.CORS_CONFIG


def origin_allowed(origin: str, cors: Mapping[str, Any] | None) -> bool:
    """Whether ``cors`` (langgraph.json's ``http.cors`` shape) allows ``origin``, by the rule
    of Starlette's CORSMiddleware, which applies the same settings to the CORS headers."""
    if cors is None:
        return True
    origins = cors.get("allow_origins") or []
    if "*" in origins or origin in origins:
        return True
    pattern = cors.get("allow_origin_regex")
    return isinstance(pattern, str) and bool(pattern) and re.fullmatch(pattern, origin) is not None


def _cors_middleware(app: ASGIApp, cors: Mapping[str, Any] | None, origins: tuple[str, ...]) -> Any:
    """Starlette's CORSMiddleware for ``origins``, with the server's other CORS settings."""
    from starlette.middleware.cors import CORSMiddleware

    settings = {k: v for k, v in (cors or {}).items() if not k.startswith("allow_origin")}
    settings.setdefault("allow_methods", ["GET", "POST", "PUT", "PATCH", "DELETE"])
    settings.setdefault("allow_headers", ["*"])
    return CORSMiddleware(app, allow_origins=list(origins), **settings)


class OriginGuard:
    """ASGI middleware: HTTP 403 for a request whose ``Origin`` the CORS settings refuse (read
    once, on the first request: the server's configuration is fixed by then)."""

    def __init__(
        self,
        app: ASGIApp,
        cors: Mapping[str, Any] | None = None,
        *,
        server_settings: bool = True,
        extra_origins: tuple[str, ...] | None = None,
    ) -> None:
        self.app = app
        # server_settings: the server's own, looked up on the first request (the tests pass
        # theirs as ``cors``).
        self._cors = cors
        self._pending = server_settings
        # NOTERAG_CORS_ORIGINS: allowed here, and answered with CORS headers by a
        # CORSMiddleware of their own (langgraph-api's answers only its configured origins)
        self.extra = SERVER_POLICY.cors_origins if extra_origins is None else extra_origins
        self._extra_app: ASGIApp | None = None

    def _settings(self) -> Mapping[str, Any] | None:
        if self._pending:
            self._cors, self._pending = server_cors_config(), False
        return self._cors

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            origin = next(
                (value.decode("latin-1") for key, value in scope["headers"] if key == b"origin"),
                None,
            )
            if origin is not None and origin in self.extra:
                if self._extra_app is None:
                    self._extra_app = _cors_middleware(self.app, self._settings(), self.extra)
                await self._extra_app(scope, receive, send)
                return
            if origin is not None and not origin_allowed(origin, self._settings()):
                log.warning(
                    "refused %s %s: 403 origin %s is not allowed",
                    scope["method"],
                    scope["path"],
                    _printable(origin),
                )
                response = JSONResponse(
                    {
                        "detail": f"origin {origin} is not allowed: add it to "
                        "NOTERAG_CORS_ORIGINS (or http.cors in langgraph.json) to let its pages "
                        "use this server"
                    },
                    status_code=403,
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


# POST paths that create runs (stateless, on a thread, in batches, as crons) and the ones whose
# client waits on the run (streams or waits): those get on_disconnect="cancel".
_RUNS = re.compile(r"^(?:/threads/[^/]+)?/runs(?:/stream|/wait|/batch|/crons)?/?$")
_WAITS = re.compile(r"/(?:stream|wait)/?$")
_ASSISTANTS = re.compile(r"^/assistants(?:/[^/]+)?/?$")
# crons: created (POST, stateless or on a thread) and changed (PATCH /runs/crons/{id})
_CRONS = re.compile(r"^(?:/threads/[^/]+)?/runs/crons/?$")
_CRON = re.compile(r"^/runs/crons/[^/]+/?$")
# state writes: a thread's state, and a new thread's supersteps
_STATE = re.compile(r"^/threads/[^/]+/state/?$")
_THREADS = re.compile(r"^/threads/?$")
# langgraph-api's own pages, served outside its auth: the key is checked here
_KEYED_PAGES = frozenset({"/metrics", "/docs", "/openapi.json"})
# routes that start runs in a form this guard does not read (the v2 event-streaming protocol's
# commands, over HTTP or a WebSocket; A2A's JSON-RPC): closed. langgraph.json turns
# langgraph-api's MCP and A2A off as well (/mcp is the guard's own: noterag.server.mcp); the
# v2 protocol has no switch there (langgraph-api drops "disable_event_streaming" from the
# http block it parses; FF_V2_EVENT_STREAMING=false does)
_UNREAD = re.compile(r"^(?:/threads/[^/]+/(?:commands|stream/events)|/a2a(?:/.*)?)/?$")


class _Refused(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


def _printable(text: str, limit: int = 200) -> str:
    """A client's text as one log line: control characters escaped, cut at ``limit``."""
    shown = text.encode("unicode_escape").decode("ascii")
    return shown if len(shown) <= limit else shown[:limit] + "..."


def _cors_settings(cors: Mapping[str, Any] | None) -> dict[str, Any]:
    """The keyword arguments of the CORSMiddleware langgraph-api runs with ``cors``
    (langgraph_api.server: its default block when None)."""
    if cors is not None:
        return dict(cors)
    return {
        "allow_origins": ["*"],
        "allow_credentials": False,
        "allow_methods": ["*"],
        "allow_headers": ["*"],
        "expose_headers": ["x-pagination-total", "x-pagination-next", "content-location"],
    }


# routes open without the API key: the health checks every client calls first (docs/security.md)
_OPEN = frozenset({"/ok", "/info"})
_THREAD_RUN = re.compile(r"^/threads/([^/]+)/runs(?:/stream|/wait)?/?$")
_UUID = re.compile(r"^[0-9a-fA-F]{8}-?(?:[0-9a-fA-F]{4}-?){3}[0-9a-fA-F]{12}$")


class RequestGuard:
    """ASGI middleware: the operator's policy (``noterag.core.policy``) applied to a request
    before langgraph-api reads it, so nothing refused is ever stored.

    - A body longer than ``max_body_bytes`` is refused with HTTP 413 at its Content-Length, or
      as soon as a chunked body passes the limit: at most that much is ever held.
    - A run's input whose question (or message) is too long, and a run's or an assistant's
      settings that the method or the policy refuses, get HTTP 422 naming the setting (for an
      assistant named by its UUID the graph factory checks them, at the run).
    - A run whose client streams it or waits for it is cancelled when that client disconnects
      (``on_disconnect="cancel"``) unless the operator turned that off, or allows resumable
      runs (``NOTERAG_ALLOW_RESUMABLE``) and the client asked for one (``stream_resumable``
      with ``on_disconnect="continue"``).
    - A run's ``command`` and a thread's state writes (``noterag.server.bounds``), and each
      run's ``recursion_limit`` (set to the method's cap when absent).
    - Crons are refused (HTTP 403) unless the operator allows them, and checked like runs then.
    - With an API key set, ``/metrics``, ``/docs`` and ``/openapi.json`` need it as well.
    - ``/mcp`` is answered by ``noterag.server.mcp``, each tool call checked as its run.
    """

    def __init__(
        self,
        app: ASGIApp,
        policy: ServerPolicy | None = None,
        *,
        cors: Mapping[str, Any] | None = None,
        server_settings: bool = True,
        tools: tuple[str, ...] | None = None,
    ) -> None:
        self.app = app
        self.policy = policy or SERVER_POLICY
        # the methods /mcp offers as tools (noterag.server.mcp; NOTERAG_MCP_TOOLS)
        self.mcp_tools = MCP_TOOLS if tools is None else tools
        # the CORS settings a refusal is answered with (langgraph-api's, read on the first
        # refusal when server_settings; the tests pass theirs as ``cors``)
        self._cors, self._pending = cors, server_settings and cors is None

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, refused: _Refused) -> None:
        """Answer ``refused`` with the CORS headers langgraph-api gives its own replies (the
        guard answers before its CORS layer: without them a browser reads no reason, and Agent
        Chat UI says it cannot connect), and log it."""
        log.warning(
            "refused %s %s: %d %s",
            scope["method"],
            scope["path"],
            refused.status,
            _printable(refused.detail),
        )
        response: ASGIApp = JSONResponse({"detail": refused.detail}, status_code=refused.status)
        origin = dict(scope["headers"]).get(b"origin")
        if origin is not None and origin.decode("latin-1") not in self.policy.cors_origins:
            # NOTERAG_CORS_ORIGINS' origins get theirs from OriginGuard, around this guard
            from starlette.middleware.cors import CORSMiddleware

            if self._pending:
                self._cors, self._pending = server_cors_config(), False
            response = CORSMiddleware(response, **_cors_settings(self._cors))
        await response(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket" and _UNREAD.match(scope["path"]):
            await receive()  # websocket.connect; then refuse it (policy violation)
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            if (
                self.policy.api_key
                and scope["method"] != "OPTIONS"  # a preflight carries no key; CORS answers it
                and scope["path"] not in _OPEN
                and not key_matches(given_key(dict(scope["headers"])), self.policy.api_key)
            ):
                # before any check: an anonymous client learns nothing of the policy
                raise _Refused(
                    401, "this server needs its API key: send it as the x-api-key header"
                )
            if _UNREAD.match(scope["path"]):
                raise _Refused(
                    404,
                    "this route is off on this server: it starts runs in a form the server's "
                    "checks do not read (use the runs API: POST /threads/{id}/runs/stream)",
                )
            if scope["path"] in _KEYED_PAGES and not key_matches(
                given_key(dict(scope["headers"])), self.policy.api_key
            ):
                raise _Refused(
                    401, "this server needs its API key: send it as the x-api-key header"
                )
            # every method: a DELETE (or a GET) may carry a body as well
            sent = await self._body(scope, receive)
            if scope["path"].rstrip("/") == MCP_PATH:
                # MCP's JSON-RPC (noterag.server.mcp): a tool call is checked as its run
                await serve_mcp(self, scope, receive, send, sent)
                return
            body = sent
            if sent.strip():
                looked_up = await self._look_up(scope, sent)
                # in a worker thread: the checks read the whole payload, and the first one
                # builds the methods' recursion caps
                body = await asyncio.to_thread(
                    self._checked, scope["method"], scope["path"], sent, looked_up
                )
                if looked_up.get("end"):
                    await self._end(scope, looked_up["end"])
        except _Refused as refused:
            await self._refuse(scope, receive, send, refused)
            return
        replay = replaying(body, receive)

        if body is sent and not sent:
            await self.app(scope, replay, send)  # no body: the request as it came
            return
        # the body may have been rewritten (on_disconnect), and may have come chunked
        scope = dict(scope)
        scope["headers"] = [(k, v) for k, v in scope["headers"] if k != b"content-length"] + [
            (b"content-length", str(len(body)).encode())
        ]
        await self.app(scope, replay, send)

    async def _body(self, scope: Scope, receive: Receive) -> bytes:
        limit = self.policy.max_body_bytes
        too_big = _Refused(
            413,
            f"the request body is larger than this server accepts ({limit:,} bytes; the "
            "operator sets NOTERAG_MAX_BODY_BYTES)",
        )
        for key, value in scope["headers"]:
            if key == b"content-length" and value.isdigit() and int(value) > limit:
                raise too_big
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _Refused(400, "the client went away")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise too_big
            chunks.append(chunk)
            if not message.get("more_body"):
                return b"".join(chunks)

    async def _get(self, scope: Scope, path: str, post: Any = None) -> tuple[int, Any]:
        """GET ``path`` from langgraph-api itself (its public HTTP API, with the request's own
        credentials), or POST ``post`` there: (status, the JSON reply, None when it is none)."""
        keep = (b"x-api-key", b"authorization", b"host")
        body = b"" if post is None else json.dumps(post).encode()
        headers = [(k, v) for k, v in scope["headers"] if k in keep]
        if post is not None:
            headers += [(b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode())]  # fmt: skip
        sub = dict(scope) | {
            "method": "GET" if post is None else "POST",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "headers": headers,
        }
        sent: list[Message] = []

        async def receive() -> Message:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: Message) -> None:
            sent.append(message)

        await self.app(sub, receive, send)
        status = next((m["status"] for m in sent if m["type"] == "http.response.start"), 500)
        body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
        try:
            return status, json.loads(body)
        except ValueError:
            return status, None

    async def _end(self, scope: Scope, thread: str) -> None:
        """End ``thread`` for a run whose command only ends it (``goto: "__end__"``, Agent
        Chat UI's Mark as Resolved): LangGraph reads a ``goto`` to END from the input as a
        write to no channel, and the paused step would run again and pause again; a state
        update of no values as END clears the thread's pending steps (LangGraph's
        ``update_state(config, None, as_node=END)``), so the run then finds nothing to do."""
        status, reply = await self._get(
            scope, f"/threads/{thread}/state", post={"values": None, "as_node": "__end__"}
        )
        if status >= 400:
            detail = reply.get("detail") if isinstance(reply, dict) else None
            raise _Refused(status, f"the thread could not be ended: {detail or status}")

    async def _look_up(self, scope: Scope, body: bytes) -> dict[str, Any]:
        """What the checks of a run need from the server's store: the graph of each assistant
        named by its id (``graphs``: the settings are checked against its method, not left to
        fail inside the run), and for a ``command.resume`` on a thread whether that thread is
        paused (``paused``)."""
        from noterag.registry.methods import METHODS

        method, path = scope["method"], scope["path"]
        runs = method == "POST" and _RUNS.match(path) is not None
        assistant = method == "PATCH" and _ASSISTANTS.match(path) is not None
        if not (runs or assistant):
            return {}
        found: dict[str, Any] = {"graphs": {}, "loopback": _over_loopback(scope)}
        try:
            payload = json.loads(body)
        except (ValueError, RecursionError):
            return {}  # refused by the checks
        items = payload if isinstance(payload, list) else [payload]
        items = [i for i in items[: BATCH_CAP + 1] if isinstance(i, dict)]
        ids = {i.get("assistant_id") for i in items}
        if assistant and not any(i.get("graph_id") for i in items):
            ids.add(path.rstrip("/").rsplit("/", 1)[-1])
        for name in ids:
            if isinstance(name, str) and name not in METHODS and _UUID.match(name):
                status, reply = await self._get(scope, f"/assistants/{name}")
                if status == 200 and isinstance(reply, dict):
                    found["graphs"][name] = reply.get("graph_id")
        resumes = any(
            isinstance(i.get("command"), dict) and "resume" in i["command"] for i in items
        )
        thread = _THREAD_RUN.match(path)
        if thread and any(
            isinstance(i.get("command"), dict) and ends_only(i["command"]) for i in items
        ):
            found["end"] = thread.group(1)
        if resumes and thread:
            status, state = await self._get(scope, f"/threads/{thread.group(1)}/state")
            tasks = state.get("tasks") if status == 200 and isinstance(state, dict) else None
            found["paused"] = any(
                isinstance(task, dict) and task.get("interrupts") for task in tasks or []
            )
        elif resumes:
            found["paused"] = False  # a stateless run has no paused thread to resume
        return found

    def _checked(
        self, method: str, path: str, body: bytes, looked_up: Mapping[str, Any] | None = None
    ) -> bytes:
        """``body``, with ``on_disconnect`` and ``recursion_limit`` imposed where they apply;
        _Refused for a refused run, cron, state write or assistant. ``looked_up``: what
        ``_look_up`` found."""
        looked_up = looked_up or {}
        crons = (method == "POST" and _CRONS.match(path) is not None) or (
            method == "PATCH" and _CRON.match(path) is not None
        )
        if crons and not self.policy.allow_crons:
            raise _Refused(
                403,
                "crons (scheduled runs) are off on this server: they call the model with nobody "
                "connected (the operator allows them with NOTERAG_ALLOW_CRONS=1)",
            )
        runs = crons or (method == "POST" and _RUNS.match(path) is not None)
        state = method == "POST" and (_STATE.match(path) or _THREADS.match(path)) is not None
        assistants = method in ("POST", "PATCH") and _ASSISTANTS.match(path) is not None
        if not (runs or state or assistants):
            return body
        try:
            payload = json.loads(body)
        except (ValueError, RecursionError):
            raise _Refused(422, "the request body is not valid JSON") from None
        items = payload if isinstance(payload, list) else [payload]
        if len(items) > BATCH_CAP:
            raise _Refused(
                413, f"a batch holds at most {BATCH_CAP} runs on this server, not {len(items):,}"
            )
        changed = False
        try:
            for item in items:
                if not isinstance(item, dict):
                    continue
                if state:
                    self._check_state_write(item, thread=_THREADS.match(path) is not None)
                    continue
                graph = _graph(item, looked_up.get("graphs") or {}, path)
                if crons:
                    _check_schedule(item.get("schedule"))
                if runs:
                    check_input(item.get("input"))
                    check_command(item.get("command"), self.policy.allow_state_writes, graph)
                    _check_resume(item.get("command"), looked_up.get("paused"))
                    if self.policy.cancel_on_disconnect and _WAITS.search(path):
                        changed |= self._impose_cancel(item, looked_up.get("loopback", False))
                changed |= _check_settings(item, self.policy, runs=runs, graph=graph)
        except ConfigError as error:
            raise _Refused(422, str(error)) from None
        return json.dumps(payload).encode() if changed else body

    def check_run(self, path: str, body: bytes) -> tuple[tuple[int, str] | None, bytes]:
        """A run that does not come to the runs API (an MCP tool call: noterag.server.mcp)
        checked as if it were POSTed to ``path``: (None, the body to send there, with what the
        checks impose), or ((HTTP status, reason), b"") when refused."""
        try:
            return None, self._checked("POST", path, body)
        except _Refused as refused:
            return (refused.status, refused.detail), b""

    def _impose_cancel(self, item: dict[str, Any], loopback: bool = False) -> bool:
        """``on_disconnect="cancel"`` on a run its client waits on, unless the client asked for
        a resumable stream explicitly and the operator honours that: with
        ``NOTERAG_ALLOW_RESUMABLE`` (by default with a key), or, unless the operator turned it
        off, for a client connected over loopback (``loopback``: a page on the operator's own
        machine reloading mid-run, Agent Chat UI's ``reconnectOnMount``). True when changed."""
        honoured = self.policy.allow_resumable or (loopback and self.policy.resumable_on_loopback)
        if (
            honoured
            and item.get("stream_resumable") is True
            and item.get("on_disconnect") == "continue"
        ):
            return False
        changed = item.get("on_disconnect") != "cancel"
        item["on_disconnect"] = "cancel"
        return changed

    def _check_state_write(self, item: dict[str, Any], *, thread: bool) -> None:
        """``POST /threads/{id}/state`` (``values``), ``POST /threads`` (its ``supersteps``)."""
        if thread:
            supersteps = item.get("supersteps") or []
            if not isinstance(supersteps, list):
                raise ConfigError("supersteps must be a list")
            writes: list[Any] = []
            for superstep in supersteps:
                updates = superstep.get("updates") if isinstance(superstep, dict) else None
                writes.extend(updates if isinstance(updates, list) else [])
        else:
            writes = [item]
        if not writes:
            return
        if not self.policy.allow_state_writes:
            raise ConfigError(
                "a client does not write a thread's state on this server: its runs do (the "
                "operator allows client writes with NOTERAG_ALLOW_STATE_WRITES=1)"
            )
        for write in writes:
            if not isinstance(write, dict):
                raise ConfigError("a state update must be an object with its values")
            check_state_values(write.get("values"), "values")
            check_command(write.get("command"), True)


# croniter's named schedules, each at most hourly
_CRON_ALIASES = frozenset(
    {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}
)


def _over_loopback(scope: Scope) -> bool:
    """Whether the request came over loopback: the server's address it arrived at and the
    client's are both loopback addresses (a server bound to 127.0.0.1, `langgraph dev`'s
    default, takes no other; one bound to all addresses takes other machines' too, which are
    not loopback). A reverse proxy on the same machine looks like loopback: an operator who
    puts one in front sets NOTERAG_ALLOW_RESUMABLE=0, or a key."""
    import ipaddress

    for end in (scope.get("server"), scope.get("client")):
        host = end[0] if isinstance(end, list | tuple) and end else None
        try:
            if host is None or not ipaddress.ip_address(host).is_loopback:
                return False
        except ValueError:
            return False
    return True


def _check_schedule(schedule: Any) -> None:
    """A cron's schedule fires at most once a minute: five fields (minute, hour, day, month,
    weekday). croniter, under langgraph-api, also reads a sixth field as seconds (and a
    seventh as the year), so ``* * * * * *`` would call the model every second."""
    if schedule is None:
        return
    if not isinstance(schedule, str):
        raise ConfigError("a cron's schedule must be a text of five fields")
    parts = schedule.split()
    if len(parts) == 1 and parts[0] in _CRON_ALIASES:
        return
    if len(parts) != 5:
        raise ConfigError(
            f"a cron's schedule has five fields (minute hour day month weekday), at most once a "
            f"minute; not {len(parts)}"
        )


def _check_resume(command: Any, paused: bool | None = None) -> None:
    """A run's ``command.resume`` (a human review's decision, ``nodes.human``): refused here
    when no review would understand it (null included, which LangGraph itself fails on), or
    when the thread is not paused for one (``paused`` False: it never ran, or finished), so a
    malformed, oversized or pointless decision is never stored with the thread."""
    if isinstance(command, dict) and "resume" in command:
        from noterag.nodes.human import check_resume

        check_resume(command["resume"])
        if paused is False:
            raise _Refused(
                409,
                "command.resume answers a paused review, and this thread is not paused for one "
                "(it has not run, or its run finished): send input to start a run",
            )


def _graph(item: Mapping[str, Any], graphs: Mapping[str, Any], path: str) -> str | None:
    """The method a run or an assistant is for: its ``graph_id``, its ``assistant_id`` when
    that is a graph's name, else the graph of the assistant it names by id (looked up)."""
    from noterag.registry.methods import METHODS

    named = item.get("graph_id") or item.get("assistant_id")
    if not isinstance(named, str) and _ASSISTANTS.match(path):
        named = path.rstrip("/").rsplit("/", 1)[-1]
    if isinstance(named, str) and named not in METHODS:
        named = graphs.get(named)
    return named if isinstance(named, str) and named in METHODS else None


def _check_settings(
    item: dict[str, Any], policy: ServerPolicy, *, runs: bool, graph: str | None = None
) -> bool:
    """A run's or an assistant's recursion limit (a run's set to the cap when absent: True,
    the item changed), and its settings when its method is known (``graph``: a graph id as
    ``assistant_id``, ``graph_id``, or the graph of the assistant it names by id)."""
    from noterag.core.spec import check_run_prompts
    from noterag.registry.methods import METHODS

    method = graph
    config = item.get("config")
    changed = False
    if config is None and runs:
        config = item["config"] = {}
    if isinstance(config, dict) and (runs or "recursion_limit" in config):
        changed = check_recursion_limit(config, method) and runs
    if method is None:
        return changed
    values = item.get("context") or (config or {}).get("configurable")
    if values is None:
        return changed
    if not isinstance(values, dict):
        raise ConfigError(f"context must be an object of settings, not {type(values).__name__}")
    settings = check_run_settings(METHODS[method].context, values, policy)
    check_run_prompts(METHODS[method], settings.context)
    return changed


SERVER_POLICY = ServerPolicy.from_env()
MCP_TOOLS = mcp_tools()

# langgraph.json "http": {"app": "./noterag/server/http.py:app"}: no routes of its own, only the
# guards, which langgraph-api runs in front of every route (its custom app's middleware).
app = Starlette(middleware=[Middleware(OriginGuard), Middleware(RequestGuard)])
