"""One model served from several endpoints: ``openai:<model>@<url1>,<url2>,...``.

vLLM, SGLang and llama.cpp scale out by replicas, each with its own base URL. A model spec that
names several sends each request to the replica with the fewest requests outstanding (from the
send to the end of the reply's body; ties go round-robin), so a slow replica gets less work.

A replica that fails (a connection error, a timeout, HTTP 5xx) is left out for a cool-off that
doubles with each consecutive failure (``COOL_OFF``) and comes back with its first success; the
failed request is sent at once to another replica that is not cooling off, and when every one
is, the openai client's own retries take over (the request then goes to the replica whose
cool-off ends first). A reply of 4xx is the request's fault, not the replica's: it is returned
as it is. A completion reply of 2xx that is none (garbage, an error body, an HTML page:
``noterag.models.replies``) is the replica's fault: it fails over like a 5xx, and when no
other replica is left its error names the replica that sent it.

Each replica keeps its own credentials: the user and password of its URL (sent as HTTP Basic
auth, to it alone) and its query (``?api_key=...``, added to its requests alone). A replica
without either gets the client's own ``Authorization`` (``Bearer <api_key>``). The model's
client is given the first replica's URL without them (``bare_url``), so no request, log line
or error carries one replica's secret to another, or anywhere else.

Two URLs naming the same replica (``.../v1`` and ``.../v1/``, ``HTTP://Host:80``) are refused
as one named twice.

The routing sits in the HTTP transport of the model's clients, under the openai SDK: its
retries, timeouts, retry counting (``noterag.models.retries``) and an eval's turns
(``noterag.models.turns``) all work as with one endpoint.
"""

from __future__ import annotations

import base64
import itertools
import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from noterag.base.errors import ConfigError
from noterag.base.redact import redact

__all__ = [
    "COOL_OFF",
    "Endpoint",
    "EndpointPool",
    "bare_url",
    "replicas_of",
    "spreading_transports",
    "url_query",
]

# Seconds a failed replica is left out: the first failure, the cap.
COOL_OFF = {"initial_s": 1.0, "max_s": 30.0}


def bare_url(url: str, keep_userinfo: bool = False) -> str:
    """``url`` without its query and (unless ``keep_userinfo``) its user and password: where
    a replica's credentials go."""
    import httpx

    parsed = httpx.URL(url)
    return str(parsed.copy_with(userinfo=parsed.userinfo if keep_userinfo else b"", query=None))


def url_query(url: str) -> list[tuple[str, str]]:
    """The query parameters of ``url`` (``?api_key=...``), in order."""
    import httpx

    return httpx.URL(url).params.multi_items()


def _basic_auth(url: Any) -> str | None:
    """The ``Authorization`` header of ``url``'s user and password (what httpx sends for a URL
    with them); None without."""
    if not url.username and not url.password:
        return None
    token = base64.b64encode(f"{url.username}:{url.password}".encode()).decode("ascii")
    return f"Basic {token}"


@dataclass
class Endpoint:
    """One replica: its base URL (``label``: with its credentials redacted), its own
    credentials and what the pool knows of it."""

    url: str
    scheme: str = ""
    host: str = ""
    port: int | None = None
    path: str = ""
    query: list[tuple[str, str]] = field(default_factory=list)
    authorization: str | None = None
    label: str = ""
    outstanding: int = 0
    failures: int = 0  # consecutive
    down_until: float = 0.0
    sent: int = 0
    failed: int = 0


@dataclass
class EndpointPool:
    """The replicas of one model, shared by its sync and async clients."""

    endpoints: list[Endpoint]
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _turn: Iterator[int] = field(default_factory=itertools.count)

    @classmethod
    def from_urls(cls, urls: Sequence[str]) -> EndpointPool:
        import httpx

        endpoints: list[Endpoint] = []
        seen: dict[tuple[str, str, int | None, str], Endpoint] = {}
        for url in urls:
            parsed = httpx.URL(url)
            endpoint = Endpoint(
                url=url,
                scheme=parsed.scheme,
                host=parsed.host,
                port=parsed.port,  # None for the scheme's default port
                path=parsed.path.rstrip("/"),
                query=parsed.params.multi_items(),
                authorization=_basic_auth(parsed),
                label=redact(url),
            )
            # one server, whatever the spelling (a trailing slash, the default port, a
            # capital) or the credentials: counted twice, it would get twice the requests
            where = (endpoint.scheme, endpoint.host, endpoint.port, endpoint.path)
            if where in seen:
                raise ConfigError(
                    f"a base URL is named twice in {redact(','.join(urls))} "
                    f"({endpoint.label} is {seen[where].label})"
                )
            seen[where] = endpoint
            endpoints.append(endpoint)
        return cls(endpoints)

    def choose(self, exclude: set[int]) -> int | None:
        """The replica for the next request: the fewest outstanding among those not cooling
        off (round-robin among equals); when all are, the one whose cool-off ends first; None
        when every replica is in ``exclude``."""
        now = time.monotonic()
        with self._lock:
            candidates = [i for i in range(len(self.endpoints)) if i not in exclude]
            if not candidates:
                return None
            up = [i for i in candidates if self.endpoints[i].down_until <= now]
            if up:
                start = next(self._turn) % len(self.endpoints)
                order = sorted(up, key=lambda i: (i - start) % len(self.endpoints))
                chosen = min(order, key=lambda i: self.endpoints[i].outstanding)
            else:
                chosen = min(candidates, key=lambda i: self.endpoints[i].down_until)
            self.endpoints[chosen].outstanding += 1
            self.endpoints[chosen].sent += 1
            return chosen

    def cooling_all(self, exclude: set[int]) -> bool:
        now = time.monotonic()
        return all(e.down_until > now for i, e in enumerate(self.endpoints) if i not in exclude)

    def done(self, index: int) -> None:
        with self._lock:
            self.endpoints[index].outstanding -= 1

    def succeeded(self, index: int) -> None:
        with self._lock:
            endpoint = self.endpoints[index]
            endpoint.failures, endpoint.down_until = 0, 0.0

    def failed(self, index: int) -> None:
        with self._lock:
            endpoint = self.endpoints[index]
            endpoint.failures += 1
            endpoint.failed += 1
            cool = min(COOL_OFF["max_s"], COOL_OFF["initial_s"] * 2 ** (endpoint.failures - 1))
            endpoint.down_until = time.monotonic() + cool

    def rewrite(self, request: Any, index: int) -> Any:
        """``request`` (addressed to the first replica's ``bare_url``, the client's base URL)
        re-addressed to replica ``index``, with that replica's credentials and none other's."""
        first, target = self.endpoints[0], self.endpoints[index]
        path = request.url.path
        if path.startswith(first.path):
            path = target.path + path[len(first.path) :]
        url = request.url.copy_with(
            scheme=target.scheme,
            userinfo=b"",
            host=target.host,
            port=target.port,
            path=path,
            params=[*target.query, *request.url.params.multi_items()],
        )
        headers = request.headers.copy()
        headers["host"] = url.netloc.decode("ascii")
        if target.authorization is not None:  # else the client's own (Bearer <api_key>)
            headers["authorization"] = target.authorization
        stream = getattr(request, "stream", None)
        return type(request)(
            request.method, url, headers=headers, stream=stream, extensions=request.extensions
        )

    def stats(self) -> list[dict[str, Any]]:
        """Per replica: its URL (credentials redacted), requests sent, failures, outstanding
        now."""
        with self._lock:
            return [
                {"url": e.label, "sent": e.sent, "failed": e.failed, "outstanding": e.outstanding}
                for e in self.endpoints
            ]


def replicas_of(model: Any) -> EndpointPool | None:
    """The replicas of a chat model built from an ``openai:`` spec naming several; else None."""
    return getattr(getattr(model, "http_client", None), "noterag_replicas", None)


def spreading_transports(pool: EndpointPool, **transport_kwargs: Any) -> tuple[Any, Any]:
    """A sync and an async HTTP transport that send each request to ``pool``'s replicas
    (``transport_kwargs``: the underlying transports' verify, limits, ...)."""
    from noterag.models.deadline import bound_body
    from noterag.models.http import http_library
    from noterag.models.replies import REPLICA, is_completion_reply, reply_problem

    httpx = http_library()

    class _Closing(httpx.SyncByteStream):  # type: ignore[name-defined]
        def __init__(self, stream: Any, index: int) -> None:
            self._stream, self._index, self._open = stream, index, True

        def __iter__(self) -> Iterator[bytes]:
            yield from self._stream

        def close(self) -> None:
            try:
                self._stream.close()
            finally:
                if self._open:
                    self._open = False
                    pool.done(self._index)

    class _AsyncClosing(httpx.AsyncByteStream):  # type: ignore[name-defined]
        def __init__(self, stream: Any, index: int) -> None:
            self._stream, self._index, self._open = stream, index, True

        async def __aiter__(self) -> AsyncIterator[bytes]:
            async for chunk in self._stream:
                yield chunk

        async def aclose(self) -> None:
            try:
                await self._stream.aclose()
            finally:
                if self._open:
                    self._open = False
                    pool.done(self._index)

    class _Attempts:
        """One request's way through the replicas, the same for the sync and async transports:
        which replica to try next, and what a failure or a reply means for the pool."""

        def __init__(self) -> None:
            self.tried: set[int] = set()
            self.last: Exception | None = None

        def next(self) -> int:
            """The replica to send to; when none is left (every other one cooling off), the
            last connection error is raised, for the SDK's retry to decide."""
            cooling = bool(self.tried) and pool.cooling_all(self.tried)
            index = None if cooling else pool.choose(self.tried)
            if index is None:
                assert self.last is not None
                raise self.last
            self.tried.add(index)
            return index

        def unreachable(self, index: int, error: Exception) -> None:
            pool.done(index)
            pool.failed(index)
            self.last = error

        def reads(self, sent: Any, response: Any) -> bool:
            """Whether the transport reads ``response``'s body to judge it: a completion reply
            of 2xx (not streamed), within the attempt's deadline (``noterag.models.deadline``,
            which the client's hooks would apply only after the transport)."""
            if not is_completion_reply(sent, response):
                return False
            response.request = sent  # the client sets its own request on it afterwards
            bound_body(response)
            return True

        def keep(self, index: int, response: Any, sent: Any, read: bool) -> bool:
            """Whether to return ``response``: a 5xx, or a read completion reply that is none
            (``noterag.models.replies``), only when no other replica is up (the caller closes
            a dropped one and calls ``pool.done``)."""
            response.extensions[REPLICA] = pool.endpoints[index].label
            bad = response.status_code >= 500 or (
                read and reply_problem(sent, response) is not None
            )
            if not bad:
                pool.succeeded(index)
                return True
            pool.failed(index)
            return pool.cooling_all(self.tried)

    class SpreadingTransport(httpx.BaseTransport):  # type: ignore[name-defined]
        def __init__(self) -> None:
            self._inner = httpx.HTTPTransport(**transport_kwargs)

        def handle_request(self, request: Any) -> Any:
            attempts = _Attempts()
            while True:
                index = attempts.next()
                sent = pool.rewrite(request, index)
                try:
                    response = self._inner.handle_request(sent)
                    read = attempts.reads(sent, response)
                    if read:
                        try:
                            response.read()
                        finally:
                            response.close()
                except httpx.TransportError as exc:
                    attempts.unreachable(index, exc)
                    continue
                if attempts.keep(index, response, sent, read):
                    if read:  # and closed: its body is the response's content
                        pool.done(index)
                    else:
                        response.stream = _Closing(response.stream, index)
                    return response
                response.close()
                pool.done(index)

        def close(self) -> None:
            self._inner.close()

    class AsyncSpreadingTransport(httpx.AsyncBaseTransport):  # type: ignore[name-defined]
        def __init__(self) -> None:
            self._inner = httpx.AsyncHTTPTransport(**transport_kwargs)

        async def handle_async_request(self, request: Any) -> Any:
            attempts = _Attempts()
            while True:
                index = attempts.next()
                sent = pool.rewrite(request, index)
                try:
                    response = await self._inner.handle_async_request(sent)
                    read = attempts.reads(sent, response)
                    if read:
                        try:
                            await response.aread()
                        finally:
                            await response.aclose()
                except httpx.TransportError as exc:
                    attempts.unreachable(index, exc)
                    continue
                if attempts.keep(index, response, sent, read):
                    if read:  # and closed: its body is the response's content
                        pool.done(index)
                    else:
                        response.stream = _AsyncClosing(response.stream, index)
                    return response
                await response.aclose()
                pool.done(index)

        async def aclose(self) -> None:
            await self._inner.aclose()

    return SpreadingTransport(), AsyncSpreadingTransport()
