"""A total deadline per attempt of a model request: ``ModelSettings.timeout`` bounds the whole
attempt, from its send to the last byte of its reply, not only each read.

httpx's timeouts are per operation: a read timeout bounds the wait for the *next* bytes, so an
endpoint that drips its reply a byte every 0.25 s never trips a 2 s timeout and an attempt
lasts as long as the endpoint likes (59 s measured for a 2 s timeout). Here, the clients
noterag builds its models with (``noterag.models.retries.counting_clients``) give each attempt
a deadline of its timeout (the SDK's per-request ``read`` timeout, which is
``ModelSettings.timeout``):

* the async client (every eval's) runs the attempt under ``asyncio.timeout`` once it has its
  turn (``noterag.models.turns``; the wait for a turn is the eval's queue, not the attempt),
  which bounds the connection, the headers and the body, however slowly they come;
* both clients wrap the reply's body so that reading it past the deadline fails: on the sync
  client, this is the bound (its headers are bounded by the read timeout only: nothing
  interrupts a blocking read short of the socket's own timeout).

An expired deadline is the HTTP library's ``ReadTimeout``, so the openai SDK treats it as any
timeout: retried up to ``max_retries`` times, then an ``APITimeoutError``, the question's own
failure.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from noterag.models.http import http_library

_KEY = "noterag_deadline"
# Set on a request whose reply the async client reads within ``bounded`` (not streamed): its
# body is bounded there, so the per-chunk check of ``abound_body`` is not needed.
_READ_IN_SEND = "noterag_read_in_send"


def start_attempt(request: Any) -> float | None:
    """Give ``request`` its deadline (now + its read timeout), once; return it (None: the
    request has no timeout)."""
    found = request.extensions.get(_KEY)
    if found is not None:
        return float(found[0])
    timeout = request.extensions.get("timeout")
    total = timeout.get("read") if isinstance(timeout, dict) else None
    if not total:
        return None
    deadline = time.monotonic() + float(total)
    request.extensions[_KEY] = (deadline, float(total))
    return deadline


def expired(request: Any) -> Exception:
    """The error of an attempt past its deadline: a ``ReadTimeout`` (retried as one)."""
    total = request.extensions.get(_KEY, (0.0, 0.0))[1]
    return http_library().ReadTimeout(
        f"no complete reply within the {total:g} s timeout", request=request
    )


async def astart_attempt(request: Any) -> None:
    """httpx request hook (async client): ``start_attempt``."""
    start_attempt(request)


def sync_start_attempt(request: Any) -> None:
    """httpx request hook (sync client): ``start_attempt``."""
    start_attempt(request)


def bound_body(response: Any) -> None:
    """httpx response hook: the reply's body fails with ``expired`` once the attempt's
    deadline has passed (it runs before the hooks that read the body)."""
    found = response.request.extensions.get(_KEY)
    if found is not None:
        response.stream = _stream_class()(response.stream, found[0], response.request)


async def abound_body(response: Any) -> None:
    """httpx response hook (async client): ``bound_body``, unless the reply is read within
    the attempt's ``bounded`` send (a timer per chunk of every reply, saved)."""
    if not response.request.extensions.get(_READ_IN_SEND):
        bound_body(response)


@functools.cache
def _stream_class() -> type:
    lib = http_library()

    class DeadlineStream(lib.SyncByteStream, lib.AsyncByteStream):  # type: ignore[name-defined]
        """A reply's body that fails past its attempt's deadline."""

        def __init__(self, stream: Any, deadline: float, request: Any) -> None:
            self._stream, self._deadline, self._request = stream, deadline, request

        def __iter__(self) -> Iterator[bytes]:
            for chunk in self._stream:
                if time.monotonic() > self._deadline:
                    raise expired(self._request)
                yield chunk

        async def __aiter__(self) -> AsyncIterator[bytes]:
            chunks = self._stream.__aiter__()
            while True:
                remaining = self._deadline - time.monotonic()
                if remaining <= 0:
                    raise expired(self._request)
                try:
                    async with asyncio.timeout(remaining):
                        chunk = await chunks.__anext__()
                except StopAsyncIteration:
                    return
                except TimeoutError:
                    raise expired(self._request) from None
                yield chunk

        def close(self) -> None:
            self._stream.close()

        async def aclose(self) -> None:
            await self._stream.aclose()

    return DeadlineStream


async def bounded(request: Any, send: Any, *, stream: bool = True) -> Any:
    """``await send()`` (the attempt) within ``request``'s deadline, started now. ``stream``
    False: ``send`` reads the whole reply (httpx's ``send(stream=False)``), so the deadline
    bounds its body here and ``abound_body`` leaves it alone."""
    deadline = start_attempt(request)
    if deadline is None:
        return await send()
    if not stream:
        request.extensions[_READ_IN_SEND] = True
    try:
        async with asyncio.timeout(deadline - time.monotonic()):
            return await send()
    except TimeoutError:
        raise expired(request) from None
