"""Model turns: at most N questions waiting on the endpoint at once, with more in progress.

An eval at ``--concurrency N`` against a fast endpoint keeps N requests in flight only while
none of its N questions is between two requests. Between requests the client works (it parses
the reply, runs the graph's next step, renders and sends the next prompt: a few ms of CPU a call
in LangChain, LangGraph, the openai client and httpx) and waits for its event loop, busy with
the other questions' work; a slot of the endpoint sits empty meanwhile. Measured in
bench/throughput.py (DeepNote, total concurrency 32 over 2 workers, 100 ms + 2 ms/token): 30.3
requests in flight on average, not 32, while every question was running.

So the eval runs a few more questions than N (``spare_questions``) and gives a question a
*turn* at the endpoint: a question holds one of the N turns while it has an HTTP request in
flight, from the request's send to the end of its reply's body (its own concurrent requests,
such as Amber's chunk filters, share the one turn: they come on top of the concurrency, as
before). A question that wants a turn while all N are taken waits for one. The endpoint never
serves more than N questions at once, and one question's client-side work overlaps another's
turn. A retried request gives its turn back during the backoff.

The turn is taken by the model's HTTP client (``TurnTakingAsyncClient``, the async client of
every model built from an ``openai:`` spec), so that only the request itself holds it; a model
without one (a LangChain model object, ``hf:``) takes no turns, and its eval has no spare
questions (``takes_turns``).

The wait for a turn is the eval's own queue, not the question's: it is counted per question
(``QuestionTurns.waited_s``) and left out of the question's latency.

Outside an eval (``noterag ask``, the server, a graph run by hand) there are no turns.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

__all__ = [
    "ModelTurns",
    "QuestionTurns",
    "question_turns",
    "spare_questions",
    "takes_turns",
    "turn_taking_async_client",
]


def spare_questions(concurrency: int) -> int:
    """Questions run beyond ``concurrency`` by default: as many again (none at concurrency 1,
    so that a run against the local server, which answers one request at a time, asks one
    question at a time). With a ready question waiting whenever a turn frees, the endpoint's
    slots stay busy while the other questions' client-side work is done: DeepNote at total
    concurrency 32 over 2 workers (bench/throughput.py) went from 1.21x its ideal time with no
    spare questions to 1.15x with a quarter as many spare and 1.13x with as many again."""
    return concurrency if concurrency > 1 else 0


class ModelTurns(asyncio.Semaphore):
    """The N turns of one run (one event loop): ``ModelTurns(N)``."""


class QuestionTurns:
    """One question's use of the run's turns: how many of its requests are in flight (they
    share one turn) and how long it waited for a turn in all."""

    def __init__(self, turns: ModelTurns) -> None:
        self.turns = turns
        self.waited_s = 0.0
        self._requests = 0
        self._lock = asyncio.Lock()  # the first of several concurrent requests takes the turn

    async def enter(self) -> None:
        async with self._lock:
            if self._requests == 0:
                start = time.perf_counter()
                await self.turns.acquire()
                self.waited_s += time.perf_counter() - start
            self._requests += 1

    def leave(self) -> None:
        self._requests -= 1
        if self._requests == 0:
            self.turns.release()


_QUESTION: ContextVar[QuestionTurns | None] = ContextVar("noterag_turns", default=None)


@contextmanager
def question_turns(turns: ModelTurns | None) -> Iterator[QuestionTurns | None]:
    """The requests sent in this context (an asyncio task and the tasks it starts, which copy
    the context) take ``turns``; None: no turns. Yields the question's record (``waited_s``)."""
    mine = QuestionTurns(turns) if turns is not None else None
    token = _QUESTION.set(mine)
    try:
        yield mine
    finally:
        _QUESTION.reset(token)


@functools.cache
def _client_class() -> type:
    import openai

    from noterag.models.deadline import bounded
    from noterag.models.http import http_library

    class LeavingStream(http_library().AsyncByteStream):  # type: ignore[misc]
        """A streamed reply's body that gives the question's turn back when it is closed."""

        def __init__(self, stream: Any, leave: Callable[[], None]) -> None:
            self._stream, self._leave = stream, leave

        async def __aiter__(self) -> AsyncIterator[bytes]:
            async for chunk in self._stream:
                yield chunk

        async def aclose(self) -> None:
            try:
                await self._stream.aclose()
            finally:
                leave, self._leave = self._leave, lambda: None  # once
                leave()

    class TurnTakingAsyncClient(openai.DefaultAsyncHttpxClient):
        """The openai SDK's async HTTP client, each request taking its question's turn
        (``noterag.models.turns``) from its send to the end of its reply's body."""

        async def send(self, request: Any, *, stream: bool = False, **kwargs: Any) -> Any:
            def attempt() -> Any:
                return super(TurnTakingAsyncClient, self).send(request, stream=stream, **kwargs)

            # the attempt within its total deadline (noterag.models.deadline), from the moment
            # it has its turn: the wait for one is the eval's queue
            mine = _QUESTION.get()
            if mine is None:
                return await bounded(request, attempt, stream=stream)
            await mine.enter()
            try:
                response = await bounded(request, attempt, stream=stream)
            except BaseException:
                mine.leave()
                raise
            if stream and not response.is_closed:  # the body is read later: the turn lasts
                response.stream = LeavingStream(response.stream, mine.leave)  # until it closes
            else:  # read by send
                mine.leave()
            return response

    return TurnTakingAsyncClient


def turn_taking_async_client(**kwargs: Any) -> Any:
    """``openai.DefaultAsyncHttpxClient(**kwargs)`` whose requests take turns."""
    return _client_class()(**kwargs)


def takes_turns(model: Any) -> bool:
    """Whether the requests of ``model`` (a chat model) take turns: its async HTTP client is a
    ``turn_taking_async_client``."""
    return isinstance(getattr(model, "http_async_client", None), _client_class())
