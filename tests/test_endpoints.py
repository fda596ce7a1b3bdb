"""One model on several endpoints (``openai:<model>@<url1>,<url2>``): requests are spread over
the replicas, fewest outstanding first, and a replica that fails is left out until it recovers,
the failed request going to another at once. The replicas are bench/sim_endpoint.py servers on
127.0.0.1; a "dead" one is a port nobody listens on."""

from __future__ import annotations

import asyncio
import socket
import sys
from importlib import resources
from pathlib import Path

import pytest

from noterag.base.errors import ConfigError
from noterag.eval import run_eval
from noterag.models import ModelSettings, load_chat_model
from noterag.models.endpoints import COOL_OFF, EndpointPool, replicas_of
from noterag.retrievers.sample import sample_index

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from sim_endpoint import Faults, SimModel, start

SETTINGS = ModelSettings(timeout=10, max_retries=0)


@pytest.fixture
def replicas():
    servers, urls, models = [], [], []
    for _ in range(2):
        model = SimModel(base_s=0.02, per_token_s=0.0)
        server, url = start(model)
        servers.append(server)
        urls.append(url)
        models.append(model)
    yield urls, models
    for server in servers:
        server.shutdown()


def _dead_urls(count: int = 1) -> list[str]:
    """Ports nobody listens on, all different: each socket stays bound until every port is
    picked (one at a time, the kernel may hand a just-closed port out again)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [f"http://127.0.0.1:{s.getsockname()[1]}/v1" for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _dead_url() -> str:
    return _dead_urls()[0]


def test_requests_are_spread_over_the_replicas(replicas) -> None:
    urls, models = replicas
    llm = load_chat_model(f"openai:sim@{','.join(urls)}", SETTINGS)
    for _ in range(6):  # one at a time: round-robin among equals
        assert llm.invoke("write a note about Velmora").content
    assert [len(m.records) for m in models] == [3, 3]


async def test_concurrent_requests_go_to_the_least_outstanding(replicas) -> None:
    urls, models = replicas
    llm = load_chat_model(f"openai:sim@{','.join(urls)}", SETTINGS)
    replies = await asyncio.gather(*(llm.ainvoke(f"question {i}") for i in range(10)))
    assert all(r.content for r in replies)
    counts = sorted(len(m.records) for m in models)
    assert sum(counts) == 10 and counts[0] >= 4  # balanced, not all on one


def test_a_dead_replica_is_skipped_and_its_request_sent_elsewhere(replicas, monkeypatch) -> None:
    # a cool-off no loaded machine outlasts in five calls (the 1 s default did once: tried twice)
    monkeypatch.setitem(COOL_OFF, "initial_s", 120.0)
    urls, models = replicas
    llm = load_chat_model(f"openai:sim@{_dead_url()},{urls[0]}", SETTINGS)
    for _ in range(5):
        assert llm.invoke("hello").content  # max_retries=0: the transport moved it
    assert len(models[0].records) == 5
    pool = _pool_of(llm)
    dead, alive = pool.stats()
    assert dead["failed"] == 1  # tried once, then cooling off
    assert alive["sent"] == 5 and dead["outstanding"] == alive["outstanding"] == 0


def test_a_replica_answering_5xx_is_left_out_until_it_recovers(replicas) -> None:
    urls, models = replicas
    faults = Faults(error_rate=1.0)
    failing, failing_url = start(SimModel(base_s=0.0), faults=faults)
    try:
        llm = load_chat_model(f"openai:sim@{failing_url},{urls[1]}", SETTINGS)
        pool = _pool_of(llm)
        for _ in range(4):
            assert llm.invoke("hello").content
        assert faults.counts["error"] == 1 and len(models[1].records) == 4
        # It recovers: once its cool-off is over it is tried again and kept on success.
        faults.error_rate = 0.0
        pool.endpoints[0].down_until = 0.0
        for _ in range(4):
            assert llm.invoke("hello").content
        assert faults.counts["ok"] >= 1 and pool.endpoints[0].failures == 0
    finally:
        failing.shutdown()


def test_every_replica_failing_is_the_clients_error(replicas) -> None:
    llm = load_chat_model(f"openai:sim@{','.join(_dead_urls(2))}", SETTINGS)
    with pytest.raises(Exception, match="onnect"):
        llm.invoke("hello")


def test_an_eval_keeps_going_when_one_of_two_replicas_returns_errors(replicas, tmp_path) -> None:
    urls, models = replicas
    faults = Faults(error_rate=0.5, seed=3)
    flaky, flaky_url = start(SimModel(base_s=0.01, per_token_s=0.0), faults=faults)
    try:
        summary = run_eval(
            "vanilla",
            Path(str(resources.files("noterag") / "data" / "sample_questions.jsonl")),
            tmp_path / "run",
            index=sample_index(tmp_path / "cache"),
            model=f"openai:sim@{flaky_url},{urls[0]}",
            settings=SETTINGS,
            concurrency=4,
            progress=False,
        )
    finally:
        flaky.shutdown()
    assert summary["n_errors"] == 0 and summary["n"] == summary["questions"] > 0
    assert faults.counts["error"] >= 1 and len(models[0].records) >= 1


def test_replica_urls_are_checked() -> None:
    with pytest.raises(ConfigError, match="not an http"):
        load_chat_model("openai:sim@http://127.0.0.1:1/v1,127.0.0.1:2/v1", SETTINGS)
    with pytest.raises(ConfigError, match="twice"):
        EndpointPool.from_urls(["http://a/v1", "http://a/v1"])


def _pool_of(llm) -> EndpointPool:
    pool = replicas_of(llm)
    assert pool is not None
    return pool
