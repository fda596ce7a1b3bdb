"""Issue 33 (defects 1, 5, 6 and the server's lesser findings) and issue 32 item 7: what a
server's client may write into a thread, crons, bodies of every method, the API key on
langgraph-api's own pages, and resumable runs.

The server tests run the real `langgraph dev` (tests/devserver.py) over bench/sim_endpoint.py's
simulated OpenAI-compatible endpoint in this process (test_threads.HoldingModel: every note
accepted, each request counted by stage), so a test counts the model calls a request made.
Two servers: one with the operator's defaults, one "opened" (an API key of non-Latin-1
characters, state writes and crons allowed, so resumable runs are honoured by default)."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import fields
from typing import Any

import httpx
import pytest
from test_server_policy import _guard, _json, _request
from test_threads import QUESTION, WAIT, HoldingModel, start

from devserver import leave_mid_run
from noterag.base.errors import ConfigError
from noterag.core.context import MAX_QUESTION_CHARS, MOST_STEPS
from noterag.registry.methods import METHODS, build_graph
from noterag.server.bounds import check_command, check_state_values, recursion_cap
from scripted import VELMORA_ROWS, KeywordRetriever, ScriptedModel, passages, velmora_script

CORPUS = passages(*VELMORA_ROWS)
# the request: counters rewritten, the question step skipped, a long recursion limit
ATTACK = {
    "assistant_id": "deepnote",
    "command": {
        "update": {"steps": -1000, "failures": -1000, "stop_reason": None},
        "goto": "refine_query",
    },
    "context": {"max_steps": 3},
    "config": {"recursion_limit": 3000},
}
# a key no Latin-1 header decoding reads back: the SDKs send it UTF-8 encoded
KEY = "clé-π-🔑"
ONE_STEP = Counter(init_note=1, refine_query=1, accumulate=1, review=1, answer=1)


# --------------------------------------------------------------------------- in-process


def _deepnote(model: ScriptedModel) -> Any:
    from langgraph.checkpoint.memory import InMemorySaver

    return build_graph(
        "deepnote",
        model=model,
        retriever=KeywordRetriever(passages=CORPUS),
        checkpointer=InMemorySaver(),
    )


def test_written_counters_stop_the_loop_in_process() -> None:
    """update_state with steps = -1000 (as the review, whose edge then goes on to refine_query):
    the next review stops the loop, whatever max_steps says."""
    model = ScriptedModel(script=velmora_script())
    graph = _deepnote(model)
    config: dict[str, Any] = {"configurable": {"thread_id": "t"}}
    graph.invoke({"question": QUESTION}, config, context={"max_steps": 1})
    graph.update_state(
        config, {"steps": -1000, "failures": -1000, "stop_reason": None}, as_node="review"
    )
    assert graph.get_state(config).next == ("refine_query",)
    before = len(model.calls)
    # before the fix: GraphRecursionError (the loop ran on to the recursion limit)
    out = graph.invoke(None, config | {"recursion_limit": 40}, context={"max_steps": 3})
    # one round (here the refined queries find no passage the note has not read: no
    # accumulate or review call), then the answer
    assert len(model.calls) - before <= 4 and model.stages[-1] == "answer"
    assert out["stop_reason"].startswith("steps = -999 was written into the state")


def test_a_written_question_over_the_cap_is_refused_where_the_prompt_is_built() -> None:
    model = ScriptedModel(script=velmora_script())
    graph = _deepnote(model)
    config: dict[str, Any] = {"configurable": {"thread_id": "t"}}
    graph.invoke({"question": QUESTION}, config, context={"max_steps": 1})
    graph.update_state(
        config, {"question": "q" * (MAX_QUESTION_CHARS * 10), "stop_reason": None}, as_node="review"
    )
    before = len(model.calls)
    with pytest.raises(ConfigError, match="the question is 80,000 characters long"):
        graph.invoke(None, config, context={"max_steps": 3})
    assert model.calls[before:] == []


def test_the_recursion_cap_covers_the_longest_run_of_each_method() -> None:
    """A deepnote run at the largest max_steps fits in its cap (every note accepted, so it
    runs every step), and the caps are what the docs say: nodes x (MOST_STEPS + 2)."""
    model = ScriptedModel(script=velmora_script())
    graph = build_graph("deepnote", model=model, retriever=KeywordRetriever(passages=CORPUS))
    out = graph.invoke(
        {"question": QUESTION},
        {"recursion_limit": recursion_cap("deepnote")},
        context={"max_steps": MOST_STEPS, "max_failures": MOST_STEPS, "max_passages": 1000},
    )
    assert out["stop_reason"].endswith(f"(max_steps = {MOST_STEPS})")
    assert recursion_cap("deepnote") == len(graph.nodes) * (MOST_STEPS + 2)
    # FLARE's loop is its sentences, up to 10,000 (max_steps' bound)
    flare = build_graph("flare", model=model, retriever=KeywordRetriever(passages=CORPUS))
    assert recursion_cap("flare") == len(flare.nodes) * (10_000 + 2)
    assert recursion_cap(None) == max(recursion_cap(m) for m in METHODS)


@pytest.mark.parametrize("method", list(METHODS))
def test_every_method_runs_its_largest_loop_settings_within_its_cap(method: str) -> None:
    """Each method at the upper bounds of its loop settings (max_steps, max_failures,
    max_passages) with a scripted model: the run ends within its recursion cap, so the cap the
    server sets never cuts a run the settings allow short (a contract over the registry)."""
    from noterag.registry.methods import context_schema

    loops = {"max_steps", "max_failures", "max_passages"}
    largest = {
        item.name: item.metadata["le"]
        for item in fields(context_schema(method))
        if item.name in loops and isinstance(item.metadata.get("le"), int)
    }
    model = ScriptedModel.for_method(method)
    graph = build_graph(method, model=model, retriever=KeywordRetriever(passages=CORPUS))
    out = graph.invoke(
        {"question": QUESTION}, {"recursion_limit": recursion_cap(method)}, context=largest
    )
    assert out["answer"] is not None and out.get("stop_reason")


def test_commands_and_state_values_are_checked() -> None:
    check_command({"resume": {"decisions": [{"type": "approve"}]}}, False)
    for command in ({"update": {"steps": 1}}, {"goto": "answer"}):
        with pytest.raises(ConfigError, match="NOTERAG_ALLOW_STATE_WRITES=1"):
            check_command(command, False)
    check_command({"update": {"steps": 1, "best_note": "a note"}, "goto": "answer"}, True)
    for values, message in [
        ({"steps": -1000}, "steps must be a whole number >= 0, not -1000"),
        ({"tokens": -1}, "tokens must be a whole number"),
        ({"failures": 1e9}, "failures must be a whole number"),
        ({"question": "q" * 80_033}, "the question is 80,033 characters long"),
        ({"best_note": "n" * 20_000}, "best_note holds a text of 20,000 characters"),
        ({"thoughts": ["t"] * 5000}, "thoughts holds 5,000 items"),
        ({"bogus": 1}, "no method's state has bogus"),
        ([["steps", -5]], "steps must be a whole number"),
        ("steps", "must be an object of state fields"),
    ]:
        with pytest.raises(ConfigError, match=message):
            check_state_values(values)
    with pytest.raises(ConfigError, match="command.goto input: steps"):
        check_command({"goto": [{"node": "review", "input": {"steps": -1}}]}, True)


def test_the_guard_refuses_state_writes_crons_and_long_recursion() -> None:
    guard, inner = _guard()
    status, body, _ = _request(guard, "/threads/t/runs/wait", _json(ATTACK))
    assert status == 422 and b"NOTERAG_ALLOW_STATE_WRITES" in body and inner.bodies == []
    assert _request(guard, "/threads/t/state", _json({"values": {"steps": 0}}))[0] == 422
    supersteps = {"supersteps": [{"updates": [{"values": {"steps": -5}, "as_node": "review"}]}]}
    assert _request(guard, "/threads", _json(supersteps))[0] == 422
    assert _request(guard, "/threads", _json({"metadata": {}}))[0] == 200
    run = {"assistant_id": "deepnote", "input": {"question": QUESTION}}
    too_long = run | {"config": {"recursion_limit": 3000}}
    status, body, _ = _request(guard, "/threads/t/runs", _json(too_long))
    assert status == 422 and f"from 1 to {recursion_cap('deepnote')}".encode() in body
    for method, path in (("POST", "/runs/crons"), ("POST", "/threads/t/runs/crons"),
                         ("PATCH", "/runs/crons/c1")):  # fmt: skip
        status, body, _ = _request(guard, path, _json(run), method=method)
        assert status == 403 and b"NOTERAG_ALLOW_CRONS=1" in body
    assert len(inner.bodies) == 1  # only the thread without supersteps passed
    # allowed by the operator: checked like runs and state values
    guard, inner = _guard(allow_state_writes=True, allow_crons=True)
    assert _request(guard, "/threads/t/runs/wait", _json(ATTACK))[0] == 422  # recursion 3000
    attack = ATTACK | {"config": {}}
    status, body, _ = _request(guard, "/threads/t/runs/wait", _json(attack))
    assert status == 422 and b"steps must be a whole number >= 0" in body
    cron = run | {"schedule": "* * * * *", "context": {"max_steps": 100}}
    assert _request(guard, "/runs/crons", _json(cron))[0] == 422
    assert _request(guard, "/runs/crons", _json(cron | {"context": {"max_steps": 1}}))[0] == 200


def test_assistants_and_batches_are_bounded_as_runs() -> None:
    guard, inner = _guard()
    assistant = {"graph_id": "deepnote", "config": {"recursion_limit": 10_007}}
    status, body, _ = _request(guard, "/assistants", _json(assistant))
    assert status == 422 and b"recursion_limit" in body
    assert _request(guard, "/assistants", _json({"graph_id": "deepnote"}))[0] == 200
    assert json.loads(inner.bodies[-1]) == {"graph_id": "deepnote"}  # stored as sent
    run = {"assistant_id": "deepnote", "input": {"question": QUESTION}}
    batch = [run, run | {"command": {"goto": "answer"}}]
    assert _request(guard, "/runs/batch", _json(batch))[0] == 422
    assert _request(guard, "/runs/batch", _json([run, run]))[0] == 200
    sent = json.loads(inner.bodies[-1])
    assert [item["config"]["recursion_limit"] for item in sent] == [recursion_cap("deepnote")] * 2
    # an assistant by UUID: the largest cap of all methods
    by_uuid = {"assistant_id": "5f1e0c1e-0000-0000-0000-000000000000", "input": {}}
    _request(guard, "/threads/t/runs", _json(by_uuid))
    assert json.loads(inner.bodies[-1])["config"]["recursion_limit"] == recursion_cap(None)


def test_a_delete_body_is_bounded() -> None:
    guard, inner = _guard(max_body_bytes=4096)
    chunks = iter([b"x" * 1024] * 100)
    status, _, read = _request(guard, "/store/items", chunks, method="DELETE")
    assert status == 413 and read <= 5 and inner.bodies == []
    status, _, _ = _request(guard, "/store/items", _json({"namespace": ["a"], "key": "k"}),
                            method="DELETE")  # fmt: skip
    assert status == 200


def test_a_resumable_stream_is_honoured_only_where_the_operator_allows() -> None:
    resumable = {"assistant_id": "deepnote", "input": {"question": QUESTION},
                 "on_disconnect": "continue", "stream_resumable": True}  # fmt: skip
    guard, inner = _guard()  # anonymous server: cancelled on disconnect
    _request(guard, "/threads/t/runs/stream", _json(resumable))
    assert json.loads(inner.bodies[-1])["on_disconnect"] == "cancel"
    guard, inner = _guard(allow_resumable=True)
    _request(guard, "/threads/t/runs/stream", _json(resumable))
    assert json.loads(inner.bodies[-1])["on_disconnect"] == "continue"
    # not asked for explicitly: cancelled as before
    _request(guard, "/threads/t/runs/stream", _json(resumable | {"stream_resumable": False}))
    assert json.loads(inner.bodies[-1])["on_disconnect"] == "cancel"


def test_the_key_may_hold_any_character() -> None:
    from noterag.server.key import key_matches

    assert key_matches(KEY.encode(), KEY)
    assert key_matches("clé".encode("latin-1"), "clé")  # a browser's bytes
    assert not key_matches(b"cl", "clé") and not key_matches(None, KEY)


# --------------------------------------------------------------------------- against the server


def _serve(tmp_path_factory: pytest.TempPathFactory, **env: str) -> Iterator[tuple[str, Any]]:
    from devserver import serve

    model = HoldingModel(hold="review")
    model.release.set()  # no hold unless a test clears it
    sim, sim_url = start(model)
    server = serve(
        tmp_path_factory,
        {"NOTERAG_MODEL": f"openai:sim@{sim_url}", "NOTERAG_SKIP_MODEL_CHECK": "1", **env},
    )
    try:
        yield next(server), model
    finally:
        server.close()
        model.release.set()
        sim.shutdown()


@pytest.fixture(scope="module")
def closed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any]]:
    yield from _serve(tmp_path_factory)


@pytest.fixture(scope="module")
def opened(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any]]:
    yield from _serve(
        tmp_path_factory,
        NOTERAG_API_KEY=KEY,
        NOTERAG_ALLOW_STATE_WRITES="1",
        NOTERAG_ALLOW_CRONS="1",
    )


def _headers(key: str | None = None) -> dict[bytes, bytes]:
    return {b"x-api-key": key.encode()} if key else {}


def _thread_after_one_run(url: str, model: HoldingModel, key: str | None = None) -> str:
    h = _headers(key)
    thread = httpx.post(f"{url}/threads", json={}, headers=h, timeout=30).json()["thread_id"]
    before = Counter(model.stages)
    done = httpx.post(
        f"{url}/threads/{thread}/runs/wait",
        json={"assistant_id": "deepnote", "input": {"question": QUESTION},
              "context": {"max_steps": 1}},
        headers=h, timeout=WAIT,
    )  # fmt: skip
    assert done.status_code == 200 and done.json()["answer"], done.text
    assert Counter(model.stages) - before == ONE_STEP
    return thread


@pytest.mark.server
def test_a_client_cannot_rewrite_a_threads_state(closed: tuple[str, Any]) -> None:
    url, model = closed
    thread = _thread_after_one_run(url, model)
    before = Counter(model.stages)
    attack = httpx.post(f"{url}/threads/{thread}/runs/wait", json=ATTACK, timeout=WAIT)
    assert attack.status_code == 422, attack.text
    assert "NOTERAG_ALLOW_STATE_WRITES=1" in attack.json()["detail"]
    write = httpx.post(
        f"{url}/threads/{thread}/state",
        json={"values": {"steps": -1000, "question": "q" * 80_033}, "as_node": "review"},
        timeout=30,
    )
    assert write.status_code == 422, write.text
    superstep = {"supersteps": [{"updates": [{"values": {"steps": -5}, "as_node": "review"}]}]}
    assert httpx.post(f"{url}/threads", json=superstep, timeout=30).status_code == 422
    long = {"assistant_id": "deepnote", "input": {"question": QUESTION},
            "config": {"recursion_limit": 3000}}  # fmt: skip
    refused = httpx.post(f"{url}/threads/{thread}/runs", json=long, timeout=30)
    assert refused.status_code == 422 and "recursion_limit" in refused.json()["detail"]
    assert Counter(model.stages) == before  # not one model call
    state = httpx.get(f"{url}/threads/{thread}/state", timeout=30).json()
    assert state["values"]["steps"] == 1 and state["values"]["question"] == QUESTION


@pytest.mark.server
def test_state_writes_the_operator_allows_stay_bounded(opened: tuple[str, Any]) -> None:
    url, model = opened
    h = _headers(KEY)
    thread = _thread_after_one_run(url, model, KEY)
    attack = ATTACK | {"config": {}}
    refused = httpx.post(f"{url}/threads/{thread}/runs/wait", json=attack, headers=h, timeout=30)
    assert refused.status_code == 422 and "steps must be a whole number" in refused.text
    # a write within the checks: the run goes back into the loop and stops at its own bound
    allowed = {**attack, "command": {"update": {"steps": 0, "stop_reason": None},
                                     "goto": "refine_query"}}  # fmt: skip
    before = Counter(model.stages)
    done = httpx.post(f"{url}/threads/{thread}/runs/wait", json=allowed, headers=h, timeout=WAIT)
    assert done.status_code == 200 and done.json()["answer"], done.text
    calls = Counter(model.stages) - before
    # three rounds (max_steps = 3; a round whose queries find nothing new asks no accumulate
    # or review), then the answer
    assert calls["refine_query"] == 3 and calls["answer"] == 1, calls
    assert calls.total() <= 3 * 3 + 1, calls
    write = httpx.post(f"{url}/threads/{thread}/state",
                       json={"values": {"best_note": "n" * 20_000}}, headers=h, timeout=30)  # fmt: skip
    assert write.status_code == 422 and "20,000 characters" in write.text
    write = httpx.post(f"{url}/threads/{thread}/state",
                       json={"values": {"best_note": "a short note"}}, headers=h, timeout=30)  # fmt: skip
    assert write.status_code == 200, write.text


@pytest.mark.server
def test_crons_are_off_unless_the_operator_allows_them(
    closed: tuple[str, Any], opened: tuple[str, Any]
) -> None:
    cron = {"assistant_id": "deepnote", "schedule": "0 0 1 1 *",
            "input": {"question": QUESTION}, "context": {"max_steps": 1}}  # fmt: skip
    url, _ = closed
    thread = httpx.post(f"{url}/threads", json={}, timeout=30).json()["thread_id"]
    for path in ("/runs/crons", f"/threads/{thread}/runs/crons"):
        refused = httpx.post(f"{url}{path}", json=cron, timeout=30)
        assert refused.status_code == 403 and "NOTERAG_ALLOW_CRONS" in refused.text
    refused = httpx.patch(f"{url}/runs/crons/{thread}", json={"schedule": "* * * * *"}, timeout=30)
    assert refused.status_code == 403
    assert httpx.post(f"{url}/runs/crons/search", json={}, timeout=30).json() == []
    url, _ = opened
    h = _headers(KEY)
    bad = httpx.post(f"{url}/runs/crons", json=cron | {"context": {"max_steps": 100}},
                     headers=h, timeout=30)  # fmt: skip
    assert bad.status_code == 422 and "max_steps must be at most 20" in bad.text
    made = httpx.post(f"{url}/runs/crons", json=cron, headers=h, timeout=30)
    assert made.status_code == 200, made.text
    cron_id = made.json()["cron_id"]
    try:
        changed = httpx.patch(f"{url}/runs/crons/{cron_id}",
                              json={"config": {"recursion_limit": 99_999}}, headers=h, timeout=30)  # fmt: skip
        assert changed.status_code == 422 and "recursion_limit" in changed.text
    finally:
        httpx.delete(f"{url}/runs/crons/{cron_id}", headers=h, timeout=30)


@pytest.mark.server
def test_a_delete_body_over_the_limit_is_refused(closed: tuple[str, Any]) -> None:
    url, _ = closed

    def body() -> Iterator[bytes]:  # 200 MiB, chunked: never all in memory here or there
        for _ in range(200 * 16):
            yield b"x" * (64 << 10)

    refused = httpx.request("DELETE", f"{url}/store/items", content=body(), timeout=60)
    assert refused.status_code == 413
    assert "NOTERAG_MAX_BODY_BYTES" in refused.json()["detail"]


@pytest.mark.server
def test_the_key_guards_langgraph_apis_own_pages(opened: tuple[str, Any]) -> None:
    url, _ = opened
    for page in ("/metrics", "/docs", "/openapi.json"):
        assert httpx.get(f"{url}{page}", timeout=30).status_code == 401, page
        assert httpx.get(f"{url}{page}", headers=_headers(KEY), timeout=30).status_code == 200
    # the health checks answer without it (Agent Chat UI and Studio call /info first; it
    # tells the server's version and flags, nothing of the operator's)
    assert httpx.get(f"{url}/ok", timeout=30).status_code == 200
    assert httpx.get(f"{url}/info", timeout=30).status_code == 200
    # the API itself: a UTF-8 key is the key
    search = f"{url}/assistants/search"
    assert httpx.post(search, json={}, timeout=30).status_code == 401
    assert httpx.post(search, json={}, headers=_headers(KEY), timeout=30).status_code == 200
    wrong = {b"x-api-key": KEY.encode()[:-1]}
    assert httpx.post(search, json={}, headers=wrong, timeout=30).status_code == 401


@pytest.mark.server
def test_a_resumable_stream_survives_its_client_leaving(opened: tuple[str, Any]) -> None:
    """What useStream does with reconnectOnMount: stream with on_disconnect="continue" and
    stream_resumable=True, drop the connection mid-run, join the run's stream again."""
    from langgraph_sdk import get_sync_client

    url, model = opened
    # httpx sends a str header as ASCII only: the UTF-8 key goes as bytes, as a Bearer token
    # (the SDK reserves x-api-key for its api_key=)
    bearer = {"authorization": b"Bearer " + KEY.encode()}
    client = get_sync_client(url=url, api_key=None, headers=bearer, timeout=WAIT)
    thread = client.threads.create()["thread_id"]
    model.held.clear()
    model.release.clear()  # the run's review waits until the client has joined again
    try:
        run_id = leave_mid_run(client, thread, QUESTION)
        assert run_id is not None and model.held.wait(WAIT)
        joined: list[Any] = []
        rejoined = threading.Event()

        def join() -> None:
            # useStream's joinStream: from the first event (last_event_id "-1")
            for part in client.runs.join_stream(thread, run_id, stream_mode=["updates"],
                                                last_event_id="-1"):  # fmt: skip
                joined.append(part)
                rejoined.set()
            rejoined.set()

        joiner = threading.Thread(target=join, daemon=True)
        joiner.start()
        assert rejoined.wait(WAIT)  # the earlier events replayed: joined while the run waits
        model.release.set()
        joiner.join(WAIT)
        answers = [p.data["answer"] for p in joined
                   if p.event == "updates" and "answer" in (p.data or {})]  # fmt: skip
        assert answers and answers[-1]["answer"], [p.event for p in joined]
        assert client.runs.get(thread, run_id)["status"] == "success"
    finally:
        model.release.set()


@pytest.mark.server
def test_the_doors_the_guard_does_not_read_are_closed(closed: tuple[str, Any]) -> None:
    """A2A and the v2 event-streaming protocol start runs by routes whose inputs and commands
    the guard does not read (JSON-RPC, WebSocket frames): off in langgraph.json. (``/mcp`` is
    the guard's own, each tool call checked as its run: tests/test_server_mcp.py.)"""
    url, model = closed
    thread = httpx.post(f"{url}/threads", json={}, timeout=30).json()["thread_id"]
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    command = {"id": 1, "method": "run.start",
               "params": {"assistant_id": "deepnote", "input": {"question": QUESTION}}}  # fmt: skip
    before = Counter(model.stages)
    for path, body in (("/a2a/deepnote", call), (f"/threads/{thread}/commands", command)):
        answer = httpx.post(f"{url}{path}", json=body, timeout=30)
        assert answer.status_code in (404, 405), (path, answer.status_code, answer.text[:200])
    assert Counter(model.stages) == before


def test_a_websocket_to_the_v2_protocol_is_closed() -> None:
    import asyncio

    guard, inner = _guard()
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "websocket.connect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "websocket", "path": "/threads/t/stream/events", "headers": []}
    asyncio.run(guard(scope, receive, send))
    assert sent == [{"type": "websocket.close", "code": 1008}] and inner.bodies == []
