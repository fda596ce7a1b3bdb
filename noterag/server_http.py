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

Widening: add origins to ``http.cors.allow_origins`` (or widen ``allow_origin_regex``) in
langgraph.json, or set ``CORS_CONFIG`` to a JSON object of the same shape in the server's
environment, which replaces the block; both this guard and the CORS headers follow it.
``"allow_origins": ["*"]`` restores langgraph-api's default (any origin).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["OriginGuard", "app", "origin_allowed"]


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


class OriginGuard:
    """ASGI middleware: HTTP 403 for a request whose ``Origin`` the CORS settings refuse (read
    once, on the first request: the server's configuration is fixed by then)."""

    def __init__(
        self,
        app: ASGIApp,
        cors: Mapping[str, Any] | None = None,
        *,
        server_settings: bool = True,
    ) -> None:
        self.app = app
        # server_settings: the server's own, looked up on the first request (the tests pass
        # theirs as ``cors``).
        self._cors = cors
        self._pending = server_settings

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
            if origin is not None and not origin_allowed(origin, self._settings()):
                response = JSONResponse(
                    {
                        "detail": f"origin {origin} is not allowed: add it to http.cors in "
                        "langgraph.json to let its pages use this server"
                    },
                    status_code=403,
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


# langgraph.json "http": {"app": "./noterag/server_http.py:app"}: no routes of its own, only the
# guard, which langgraph-api runs in front of every route (its custom app's middleware).
app = Starlette(middleware=[Middleware(OriginGuard)])
