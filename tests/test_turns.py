"""Model turns (noterag.models.turns): at most N questions' requests at the endpoint at once,
however many questions are in progress; a question's concurrent requests share its turn; the
wait is counted and left out of the latency; an eval runs spare questions only with a model
whose requests take turns."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from test_eval_runner import read_rows, retriever, write_dataset

from noterag.base.errors import ConfigError
from noterag.eval import run_eval
from noterag.models import load_chat_model
from noterag.models.http import http_library
from noterag.models.turns import (
    ModelTurns,
    question_turns,
    spare_questions,
    takes_turns,
    turn_taking_async_client,
)
from scripted import ScriptedModel

http = http_library()


class Endpoint:
    """A mock transport: each request waits ``delay`` s; records the most requests in flight."""

    def __init__(self, delay: float = 0.02, fail: Callable[[Any], bool] = lambda r: False):
        self.delay, self.fail = delay, fail
        self.in_flight = self.peak = 0
        self.order: list[str] = []

    async def __call__(self, request: Any) -> Any:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        self.order.append(request.url.path)
        try:
            await asyncio.sleep(self.delay)
            if self.fail(request):
                raise http.ConnectError("refused", request=request)
            if request.url.path == "/streamed":  # a body that arrives after the headers
                return http.Response(200, stream=Body())
            return http.Response(200, json={"ok": request.url.path})
        finally:
            self.in_flight -= 1


class Body(http.AsyncByteStream):  # type: ignore[misc]
    async def __aiter__(self) -> Any:
        for chunk in (b"data: 1\n\n", b"data: 2\n\n"):
            await asyncio.sleep(0)
            yield chunk


def client(endpoint: Endpoint) -> Any:
    return turn_taking_async_client(transport=http.MockTransport(endpoint))


async def ask(
    session: Any, turns: ModelTurns | None, paths: list[str], waited: list[float]
) -> None:
    """One question: its requests to ``paths`` sent together."""
    with question_turns(turns) as mine:
        await asyncio.gather(*(session.get(f"http://sim{path}") for path in paths))
    waited.append(mine.waited_s if mine else 0.0)


async def test_n_turns_bound_the_requests_of_more_questions() -> None:
    endpoint = Endpoint()
    turns, waited = ModelTurns(2), []
    async with client(endpoint) as session:
        await asyncio.gather(*(ask(session, turns, [f"/q{i}"], waited) for i in range(6)))
    assert endpoint.peak == 2 and len(endpoint.order) == 6
    # two went at once; the others waited for one, two or so requests' time
    assert sorted(waited)[:2] == [pytest.approx(0, abs=0.01)] * 2
    assert max(waited) >= 2 * endpoint.delay * 0.9


async def test_a_questions_concurrent_requests_share_its_turn() -> None:
    endpoint = Endpoint()
    turns, waited = ModelTurns(1), []
    async with client(endpoint) as session:
        await asyncio.gather(
            ask(session, turns, ["/a1", "/a2", "/a3"], waited),
            ask(session, turns, ["/b1", "/b2"], waited),
        )
    # one question's three at once (the turn is the question's), never both questions'
    assert endpoint.peak == 3
    first = endpoint.order[0][1]
    assert {p[1] for p in endpoint.order[: 3 if first == "a" else 2]} == {first}


async def test_no_turns_outside_a_question_or_without_a_run() -> None:
    endpoint = Endpoint()
    async with client(endpoint) as session:
        await asyncio.gather(*(session.get(f"http://sim/{i}") for i in range(4)))  # no question
        waited: list[float] = []
        await asyncio.gather(*(ask(session, None, [f"/{i}"], waited) for i in range(4)))
    assert endpoint.peak == 4 and waited == [0.0] * 4


async def test_a_failed_request_gives_its_turn_back() -> None:
    endpoint = Endpoint(fail=lambda request: request.url.path == "/bad")
    turns, waited = ModelTurns(1), []
    async with client(endpoint) as session:
        with pytest.raises(http.ConnectError):
            await ask(session, turns, ["/bad"], waited)
        await asyncio.wait_for(ask(session, turns, ["/good"], waited), 2)
    assert endpoint.order == ["/bad", "/good"]


async def test_a_streamed_reply_holds_the_turn_until_its_body_is_closed() -> None:
    endpoint = Endpoint(delay=0.0)
    turns = ModelTurns(1)
    async with client(endpoint) as session:
        with question_turns(turns):
            async with session.stream("GET", "http://sim/streamed") as response:
                # the headers are in, the body is not: the turn is still this question's
                other = asyncio.ensure_future(ask(session, turns, ["/other"], []))
                await asyncio.sleep(0.05)
                assert endpoint.order == ["/streamed"] and not other.done()
                assert await response.aread() == b"data: 1\n\ndata: 2\n\n"  # read: closed
                await asyncio.wait_for(other, 2)
    assert endpoint.order == ["/streamed", "/other"]


def test_models_from_an_openai_spec_take_turns_others_do_not() -> None:
    assert takes_turns(load_chat_model("openai:sim@http://127.0.0.1:1/v1"))
    assert not takes_turns(FakeListChatModel(responses=["x"]))
    assert spare_questions(1) == 0 and spare_questions(16) == 16


def test_spare_questions_need_a_model_that_takes_turns(tmp_path: Path) -> None:
    data, model = write_dataset(tmp_path / "q.jsonl"), ScriptedModel(script={"answer": "x"})
    run = tmp_path / "run"
    with pytest.raises(
        ConfigError, match=r"spare question.*openai: spec.*5 questions at once, not 3"
    ):
        run_eval(
            "vanilla", data, run, model=model, index=retriever(), concurrency=3, spare=2,
            progress=False,
        )  # fmt: skip
    assert not run.exists()
    run_eval("vanilla", data, run, model=model, index=retriever(), concurrency=3, progress=False)
    assert json.loads((run / "run.json").read_text())["spare_questions"] == 0


@pytest.mark.parametrize("workers", [1, 2])
def test_an_eval_keeps_n_questions_at_the_endpoint_and_as_many_more_in_progress(
    tmp_path: Path, workers: int
) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import sim_endpoint

    # the first requests wait for each other: the peak is reached however late a worker starts
    sim = sim_endpoint.SimModel(0.03, 0.0, gather=2 * workers)
    server, url = sim_endpoint.start(sim)
    try:
        run_eval(
            "vanilla", write_dataset(tmp_path / "q.jsonl", n=16), tmp_path / "run",
            model=f"openai:sim@{url}", index=retriever(), concurrency=2, workers=workers,
            progress=False,
        )  # fmt: skip
    finally:
        server.shutdown()
    rows = read_rows(tmp_path / "run")
    assert len(rows) == 16 and not any(row["error"] for row in rows)
    assert json.loads((tmp_path / "run" / "run.json").read_text())["spare_questions"] == 2
    # the endpoint: never more than the turns; the questions: as many again in progress
    assert max(record.in_flight for record in sim.records) == 2 * workers
    events = sorted([(r["started_at"], 1) for r in rows] + [(r["finished_at"], -1) for r in rows])
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    assert peak == 4 * workers
    # a question's wait for its turn is counted, and not in its latency
    assert sum(row["waited_s"] for row in rows) > 0.03
    for row in rows:
        own = row["finished_at"] - row["started_at"] - row["waited_s"]
        assert row["latency_s"] == pytest.approx(own, abs=0.002)
