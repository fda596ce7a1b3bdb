"""Counting the model requests the openai client sent again after a transient failure.

The client retries by itself, per request (never a whole graph node): HTTP 408, 409, 429 and
5xx replies, timeouts and connection errors (refused, reset) are sent again up to
``ModelSettings.max_retries`` times, after the backoff in ``RETRY_BACKOFF``. Those retries
happen inside one call, invisibly to LangChain's callbacks, so they are counted at the HTTP
client: ``counting_clients()`` gives ChatOpenAI clients whose request hook reports every
re-sent attempt to the innermost active ``count_retries()``; their other hooks give each
attempt its total deadline (``noterag.models.deadline``) and check that a reply is one
(``noterag.models.replies``).
"""

from __future__ import annotations

import functools
import ssl
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from noterag.models.http import http_library

__all__ = ["RETRY_BACKOFF", "RetryCount", "count_retries", "counting_clients"]

# The openai SDK's backoff (openai._constants), stated here so that it is documented and a
# test notices when an SDK upgrade changes it: first delay, cap, and the longest Retry-After
# the client waits for (a longer one is not retried).
RETRY_BACKOFF = {"initial_s": 0.5, "max_s": 8.0, "max_retry_after_s": 120.0}

# The SDK numbers every attempt of a request in this header: 0 first, then 1, 2, ...
_RETRY_HEADER = "x-stainless-retry-count"


class RetryCount:
    """Requests re-sent after a transient failure while ``count_retries()`` was active; a count
    opened inside another adds to both."""

    def __init__(self, parent: RetryCount | None = None) -> None:
        self._lock = threading.Lock()
        self._parent = parent
        self.value = 0

    def add(self) -> None:
        with self._lock:  # sync model calls count from worker threads
            self.value += 1
        if self._parent is not None:
            self._parent.add()


_RETRIES: ContextVar[RetryCount | None] = ContextVar("noterag_retries", default=None)


@contextmanager
def count_retries() -> Iterator[RetryCount]:
    """Count the retries of the model requests made in this context (an asyncio task and the
    tasks and LangChain worker threads it starts, which copy the context), by models built
    here: ``with count_retries() as retries: graph.invoke(...)``; then ``retries.value``."""
    counter = RetryCount(_RETRIES.get())
    token = _RETRIES.set(counter)
    try:
        yield counter
    finally:
        _RETRIES.reset(token)


def _note_attempt(request: Any) -> None:
    # The SDK retries inside one call, invisibly to LangChain's callbacks; every attempt goes
    # through the HTTP client, though, numbered in a header.
    counter = _RETRIES.get()
    if counter is None:
        return
    try:
        retry = int(request.headers.get(_RETRY_HEADER, "0")) > 0
    except ValueError:
        return
    if retry:
        counter.add()


async def _anote_attempt(request: Any) -> None:
    _note_attempt(request)


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The TLS context of every model client this process opens: the one the SDK's HTTP library
    builds by default (its CA bundle, ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``), built once. Each
    build reads the CA bundle (18 ms), and every ChatOpenAI has two clients: an eval worker
    took 37 ms to open its model, half its start; forked, it now inherits the parent's."""
    context: ssl.SSLContext = http_library().create_ssl_context()
    return context


def counting_clients(base_urls: Sequence[str] | None = None) -> dict[str, Any]:
    """HTTP clients for ChatOpenAI that report each retried attempt to ``count_retries``: the
    SDK's default clients (its limits and redirects; the process's one ``tls_context``; the
    async one taking an eval's turns, ``noterag.models.turns``) with a request hook; and a
    response hook that turns a completion reply that is none (an HTML
    page, an empty body, invalid JSON, no choices) into one line naming the endpoint
    (``noterag.models.replies``). ``base_urls``: several replicas of the model, each request
    sent to one of them (``noterag.models.endpoints``)."""
    import openai

    from noterag.models import deadline
    from noterag.models.replies import acheck_reply, check_reply
    from noterag.models.turns import turn_taking_async_client

    pool = None
    sync: dict[str, Any] = {"verify": tls_context()}
    asynchronous: dict[str, Any] = {"verify": tls_context()}
    if base_urls is not None and len(base_urls) > 1:
        from openai import DEFAULT_CONNECTION_LIMITS

        from noterag.models.endpoints import EndpointPool, spreading_transports

        pool = EndpointPool.from_urls(base_urls)
        transports = spreading_transports(
            pool, verify=tls_context(), limits=DEFAULT_CONNECTION_LIMITS
        )
        sync = {"transport": transports[0]}
        asynchronous = {"transport": transports[1]}
    # The deadline's hooks first: the body check reads the body, within the attempt's total
    # deadline (noterag.models.deadline).
    clients = {
        "http_client": openai.DefaultHttpxClient(
            **sync,
            event_hooks={
                "request": [_note_attempt, deadline.sync_start_attempt],
                "response": [deadline.bound_body, check_reply],
            },
        ),
        "http_async_client": turn_taking_async_client(
            **asynchronous,
            event_hooks={
                "request": [_anote_attempt, deadline.astart_attempt],
                "response": [deadline.abound_body, acheck_reply],
            },
        ),
    }
    for client in clients.values():  # what the replicas did: endpoints.replicas_of(model)
        client.noterag_replicas = pool if len(base_urls or ()) > 1 else None
    return clients
