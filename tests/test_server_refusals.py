"""Issue 42, the server's defects 1-3, 6, 7, 9 and 10, at the HTTP guard
(noterag/server/http.py, noterag/server/bounds.py), driven in-process as test_server_policy
drives it: written lists bounded by the method's settings, the batch cap, CORS headers and a log
line on every refusal, Agent Chat UI's "Mark as Resolved" (``goto: "__end__"``), every
``[key, value]`` pair of an update checked, the question's cap on every input shape, a
``command.resume`` on a thread that is not paused, and the API key before any other check.
The same against a real ``langgraph dev``: tests/test_server_bounds.py."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from test_server_bounds import _serve
from test_threads import WAIT

from devserver import leave_mid_run
from noterag.core.policy import ServerPolicy
from noterag.server.bounds import check_state_values, list_bound
from noterag.server.http import BATCH_CAP, RequestGuard
from scripted import QUESTION, request_body

ASSISTANT = "5f1e0c1e-0000-4000-8000-000000000001"
ORIGIN = "http://localhost:3000"
# langgraph.json's http.cors, as the server runs with it
CORS = {
    "allow_origin_regex": r"https?://(localhost|127\.0\.0\.1|\[::1\])(:\d+)?",
    "allow_credentials": True,
    "allow_methods": ["*"],
    "allow_headers": ["*"],
}


class _Server:
    """langgraph-api behind the guard: records each request (method, path, body); answers an
    assistant's and a thread's state as ``assistants`` and ``paused`` say."""

    def __init__(self, paused: bool = False) -> None:
        self.requests: list[tuple[str, str, bytes]] = []
        self.paused = paused

    @property
    def bodies(self) -> list[bytes]:  # the requests that reached it other than the guard's GETs
        return [body for method, _, body in self.requests if method != "GET"]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        body = await request_body(receive)
        self.requests.append((scope["method"], scope["path"], body))
        status, reply = 200, {}
        if scope["path"] == f"/assistants/{ASSISTANT}":
            reply = {"assistant_id": ASSISTANT, "graph_id": "deepnote"}
        elif scope["path"].endswith("/state"):
            interrupts = [{"value": {"action_requests": []}, "id": "i"}] if self.paused else []
            reply = {"values": {}, "next": [], "tasks": [{"id": "t", "interrupts": interrupts}]}
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": json.dumps(reply).encode()})


def guard(paused: bool = False, **policy: Any) -> tuple[RequestGuard, _Server]:
    server = _Server(paused)
    return RequestGuard(server, ServerPolicy(**policy), cors=CORS), server


def post(
    app: Any,
    path: str,
    payload: Any,
    headers: dict[str, str] | None = None,
    peers: tuple[str, str] | None = None,
) -> Any:
    """(status, the reply's JSON, its headers) of a POST with ``headers`` added; ``peers``: the
    server's and the client's addresses."""
    sent: list[dict[str, Any]] = []
    body = json.dumps(payload).encode()
    given = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    given += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope: dict[str, Any] = {
        "type": "http", "method": "POST", "path": path, "headers": given, "query_string": b""
    }  # fmt: skip
    if peers is not None:
        scope |= {"server": (peers[0], 2024), "client": (peers[1], 51234)}
    asyncio.run(app(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    reply = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], json.loads(reply or b"null"), dict(start.get("headers") or [])


RUN = {"assistant_id": "deepnote", "input": {"question": QUESTION}}


# --- defect 1: written lists bounded by the method's settings -------------------------------------


def test_written_lists_are_bounded_by_the_methods_settings() -> None:
    """SuRe's candidates by n_candidates' bound (26), REPLUG's passages by top_k's (100); a
    list no method sizes stays at MOST_PASSAGES. Before: 1,000 items anywhere."""
    assert list_bound("candidates", "sure") == 26 and list_bound("passages", "replug") == 100
    assert list_bound("candidates") == 26  # the method unknown: the largest of those that have it
    app, server = guard(allow_state_writes=True)
    attack = {
        "assistant_id": "sure",
        "input": None,
        "command": {
            "update": {"candidates": ["x"] * 40, "summaries": ["x"] * 40},
            "goto": "verify",
        },
    }
    status, reply, _ = post(app, "/threads/t/runs/wait", attack)
    assert status == 422 and "candidates holds 40 items; at most 26" in reply["detail"]
    passages = [{"id": str(i), "title": "t", "text": "x"} for i in range(347)]
    replug = attack | {"assistant_id": "replug", "command": {"update": {"passages": passages}}}
    status, reply, _ = post(app, "/threads/t/runs/wait", replug)
    assert status == 422 and "passages holds 347 items; at most 100" in reply["detail"]
    assert server.bodies == []
    # the cost counters the budget reads are whole numbers, never an Overwrite of them
    with pytest.raises(ValueError, match="llm_calls must be a whole number"):
        check_state_values({"llm_calls": {"__overwrite__": 0}})
    with pytest.raises(ValueError, match="candidates holds 30 items"):
        check_state_values({"candidates": {"__overwrite__": ["x"] * 30}}, method="sure")


# --- defect 2: the batch cap ---------------------------------------------------------------------


def test_a_batch_holds_at_most_the_cap() -> None:
    app, server = guard()
    status, reply, _ = post(app, "/runs/batch", [RUN] * (BATCH_CAP + 1))
    assert status == 413 and f"at most {BATCH_CAP} runs" in reply["detail"]
    assert server.bodies == []
    assert post(app, "/runs/batch", [RUN] * BATCH_CAP)[0] == 200


# --- defect 3: CORS on refusals, Mark as Resolved, the log ----------------------------------------


def test_a_refusal_carries_the_cors_headers_a_browser_needs(caplog: Any) -> None:
    """Agent Chat UI read no reason from a 422 (no access-control-allow-origin: the browser
    hides the reply) and said it could not connect."""
    app, _ = guard()
    long = {"assistant_id": "deepnote", "input": {"question": "q" * 9000}}
    with caplog.at_level(logging.WARNING, logger="noterag.server"):
        status, reply, headers = post(app, "/threads/t/runs/stream", long, {"origin": ORIGIN})
    assert status == 422 and "9,000 characters" in reply["detail"]
    assert headers[b"access-control-allow-origin"] == ORIGIN.encode()
    assert headers[b"access-control-allow-credentials"] == b"true"
    # logged, the client's text escaped and cut
    (line,) = [r.getMessage() for r in caplog.records if r.name == "noterag.server"]
    assert line.startswith("refused POST /threads/t/runs/stream: 422 the question is 9,000")
    # an origin the CORS settings refuse gets no header from the refusal
    status, _, headers = post(app, "/threads/t/runs/stream", long, {"origin": "https://evil.test"})
    assert status == 422 and b"access-control-allow-origin" not in headers


def test_mark_as_resolved_ends_a_paused_thread_without_the_state_write_switch() -> None:
    """Agent Chat UI's Mark as Resolved: ``thread.submit({}, {command: {goto: END}})``
    (src/components/thread/agent-inbox/hooks/use-interrupted-actions.tsx)."""
    app, server = guard(paused=True)
    resolve = {"assistant_id": "deepnote", "input": {}, "command": {"goto": "__end__"}}
    assert post(app, "/threads/t/runs/stream", resolve)[0] == 200
    assert json.loads(server.bodies[-1])["command"] == {"goto": "__end__"}
    # the thread's pending steps cleared first (LangGraph reads a goto to END from the input as
    # a write to no channel: the paused step would run and pause again)
    method, path, body = server.requests[-2]
    assert (method, path, json.loads(body)) == (
        "POST",
        "/threads/t/state",
        {"values": None, "as_node": "__end__"},
    )
    # anything more than ending is still a state write
    for command in ({"goto": "answer"}, {"goto": "__end__", "update": {"best_note": "n"}}):
        status, reply, _ = post(app, "/threads/t/runs/stream", resolve | {"command": command})
        assert status == 422 and "NOTERAG_ALLOW_STATE_WRITES" in reply["detail"]


# --- defect 6: every [key, value] pair ------------------------------------------------------------


def test_every_pair_of_an_update_is_checked() -> None:
    """Before: ``dict(pairs)`` kept the last value per key, while LangGraph applies every pair
    (a reducer field took a 900,000-character item)."""
    pairs = [["global_memory", ["m" * 900_000]], ["global_memory", []]]
    with pytest.raises(ValueError, match="global_memory holds a text of 900,000 characters"):
        check_state_values(pairs)
    app, _ = guard(allow_state_writes=True)
    attack = {"assistant_id": "resp", "command": {"update": pairs, "goto": "judge"}}
    assert post(app, "/threads/t/runs/wait", attack)[0] == 422


# --- defect 7: every input shape, an assistant by its id ------------------------------------------


@pytest.mark.parametrize(
    "given",
    [
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "a" * 5000}] * 2}]},
        {"messages": [["human", "a" * 9000]]},
        {"messages": "a" * 9000},
        {"question": ["what?"]},
        {"question": {"text": "what?"}},
        {"task": "t" * 9000},
        {"messages": [{"no": "role"}]},
        "what?",
    ],
    ids=["two-text-blocks", "role-text-pair", "messages-string", "question-list",
         "question-dict", "long-task", "not-a-message", "input-string"],
)  # fmt: skip
def test_every_input_shape_is_checked_before_the_run_is_stored(given: Any) -> None:
    app, server = guard()
    status, reply, _ = post(
        app, "/threads/t/runs/wait", {"assistant_id": "deepnote", "input": given}
    )
    assert status == 422 and server.bodies == []
    assert "t" * 100 not in reply["detail"]  # a long task is not echoed back


def test_an_assistant_named_by_its_id_has_its_settings_checked() -> None:
    """The guard asks the server for the assistant's graph (GET /assistants/{id}, with the
    client's own headers) and checks the settings against that method."""
    app, server = guard()
    run = {"assistant_id": ASSISTANT, "input": {"question": QUESTION}}
    status, reply, _ = post(app, "/threads/t/runs", run | {"context": {"bogus": 1}})
    assert status == 422 and "unknown context field(s) bogus" in reply["detail"]
    status, reply, _ = post(app, "/threads/t/runs", run | {"context": {"max_steps": 100}})
    assert status == 422 and "max_steps must be at most 20" in reply["detail"]
    assert ("GET", f"/assistants/{ASSISTANT}", b"") in server.requests
    assert server.bodies == []
    assert post(app, "/threads/t/runs", run | {"context": {"max_steps": 2}})[0] == 200
    # the run's recursion limit is the method's cap, not the largest of all
    from noterag.server.bounds import recursion_cap

    sent = json.loads(server.bodies[-1])
    assert sent["config"]["recursion_limit"] == recursion_cap("deepnote")


# --- defect 9: a resume on a thread that is not paused --------------------------------------------


def test_a_resume_needs_a_paused_thread() -> None:
    resume = {
        "assistant_id": "deepnote",
        "command": {"resume": {"decisions": [{"type": "approve"}]}},
    }
    app, server = guard(paused=False)
    status, reply, _ = post(app, "/threads/t/runs/wait", resume)
    assert status == 409 and "not paused" in reply["detail"] and server.bodies == []
    assert post(app, "/runs/wait", resume)[0] == 409  # no thread at all
    app, server = guard(paused=True)
    assert post(app, "/threads/t/runs/wait", resume)[0] == 200


# --- defect 10: the key first ---------------------------------------------------------------------


def test_an_anonymous_client_is_refused_before_any_check() -> None:
    """Before: the guard's 422 named the policy (and the models on offer) to a client without
    the key; now 401 first. The health checks stay open."""
    app, server = guard(api_key="k3y")
    bad = RUN | {"context": {"model": "nope", "max_steps": 100}}
    status, reply, _ = post(app, "/threads/t/runs", bad)
    assert status == 401 and "API key" in reply["detail"] and "max_steps" not in reply["detail"]
    assert post(app, "/threads/t/runs", bad, {"x-api-key": "k3y"})[0] == 422
    assert post(app, "/info", {})[0] == 200
    assert server.bodies == [b"{}"]


# --- the browser clients: a reload mid-run on the default local server ---------------------------


def test_a_resumable_stream_is_honoured_over_loopback_on_an_anonymous_server() -> None:
    """Agent Chat UI asks for ``stream_resumable`` + ``on_disconnect: "continue"`` so that a
    reload joins the run again. An anonymous server honours it for a client over loopback (the
    default ``langgraph dev``), and cancels it for any other, and wherever the operator said
    NOTERAG_ALLOW_RESUMABLE=0."""
    resumable = RUN | {"on_disconnect": "continue", "stream_resumable": True}
    app, server = guard()
    post(app, "/threads/t/runs/stream", resumable, peers=("127.0.0.1", "127.0.0.1"))
    assert json.loads(server.bodies[-1])["on_disconnect"] == "continue"
    post(app, "/threads/t/runs/stream", resumable, peers=("::1", "::1"))
    assert json.loads(server.bodies[-1])["on_disconnect"] == "continue"
    for peers in (("10.1.2.3", "10.1.2.9"), ("0.0.0.0", "192.168.1.7"), None):
        post(app, "/threads/t/runs/stream", resumable, peers=peers)
        assert json.loads(server.bodies[-1])["on_disconnect"] == "cancel", peers
    post(app, "/threads/t/runs/stream", RUN, peers=("127.0.0.1", "127.0.0.1"))  # not asked for
    assert json.loads(server.bodies[-1])["on_disconnect"] == "cancel"
    closed = ServerPolicy.from_env({"NOTERAG_ALLOW_RESUMABLE": "0"})
    assert not closed.resumable_on_loopback and ServerPolicy.from_env({}).resumable_on_loopback
    app, server = guard(resumable_on_loopback=False)
    post(app, "/threads/t/runs/stream", resumable, peers=("127.0.0.1", "127.0.0.1"))
    assert json.loads(server.bodies[-1])["on_disconnect"] == "cancel"


# --- against a real `langgraph dev` (the operator's defaults) -------------------------------------


@pytest.fixture(scope="module")
def closed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any]]:
    """A `langgraph dev` with the operator's defaults over the simulated endpoint."""
    yield from _serve(tmp_path_factory)


@pytest.mark.server
def test_the_refusals_and_mark_as_resolved_on_a_real_server(closed: tuple[str, Any]) -> None:
    """A browser's view: a refusal carries the CORS headers (and reaches Agent Chat UI as its
    reason), a review's pause ends with Mark as Resolved, a resume on a thread that never ran
    is a 409, and an assistant created by the client is checked by its graph."""
    import httpx

    url, model = closed
    h = {"origin": ORIGIN}
    thread = httpx.post(f"{url}/threads", json={}, headers=h, timeout=30).json()["thread_id"]
    # a resume on a thread that never ran: 409, nothing stored, with CORS
    resume = {
        "assistant_id": "deepnote",
        "command": {"resume": {"decisions": [{"type": "approve"}]}},
    }
    refused = httpx.post(f"{url}/threads/{thread}/runs/stream", json=resume, headers=h, timeout=30)
    assert refused.status_code == 409, refused.text
    assert refused.headers["access-control-allow-origin"] == ORIGIN
    runs = httpx.get(f"{url}/threads/{thread}/runs", timeout=30).json()
    assert runs == []
    # a paused review, then Mark as Resolved: the thread ends, no model call
    paused = httpx.post(
        f"{url}/threads/{thread}/runs/wait",
        json={"assistant_id": "deepnote", "input": {"question": QUESTION},
              "context": {"max_steps": 1, "human_review": "note"}},
        headers=h, timeout=WAIT,
    )  # fmt: skip
    assert paused.status_code == 200 and paused.json().get("__interrupt__"), paused.text
    calls = len(model.stages)
    resolved = httpx.post(
        f"{url}/threads/{thread}/runs/wait",
        json={"assistant_id": "deepnote", "input": {}, "command": {"goto": "__end__"}},
        headers=h, timeout=WAIT,
    )  # fmt: skip
    assert resolved.status_code == 200, resolved.text
    state = httpx.get(f"{url}/threads/{thread}/state", timeout=30).json()
    assert state["next"] == [] and all(not t.get("interrupts") for t in state["tasks"])
    assert len(model.stages) == calls
    # an assistant of the client's, used by its id: its settings are checked by its graph
    made = httpx.post(f"{url}/assistants", json={"graph_id": "deepnote"}, timeout=30).json()
    bad = {"assistant_id": made["assistant_id"], "input": {"question": QUESTION},
           "context": {"bogus": 1}}  # fmt: skip
    refused = httpx.post(f"{url}/threads/{thread}/runs", json=bad, headers=h, timeout=30)
    assert refused.status_code == 422 and "bogus" in refused.json()["detail"]


# --- defect 11: schedules finer than a minute ----------------------------------------------------


def test_a_cron_fires_at_most_once_a_minute() -> None:
    app, server = guard(allow_crons=True)
    cron = RUN | {"schedule": "* * * * * *"}  # croniter reads the sixth field as seconds
    status, reply, _ = post(app, "/runs/crons", cron)
    assert status == 422 and "five fields" in reply["detail"] and server.bodies == []
    assert post(app, "/threads/t/runs/crons", cron | {"schedule": "*/5 * * * * * 2030"})[0] == 422
    assert post(app, "/runs/crons", cron | {"schedule": "*/5 * * * *"})[0] == 200
    assert post(app, "/runs/crons", cron | {"schedule": "@hourly"})[0] == 200


@pytest.mark.server
def test_a_method_without_log_probabilities_tells_the_client_why(closed: tuple[str, Any]) -> None:
    """FLARE, REPLUG and Self-RAG need token log-probabilities; against an endpoint without
    them the run fails, and the reason reaches the client as the run's error (what Agent Chat
    UI shows), not only the server's log."""
    from langgraph_sdk import get_sync_client

    url, model = closed
    client = get_sync_client(url=url)
    model.logprobs = False  # the simulated endpoint leaves them out
    try:
        for method in ("flare", "replug", "self-rag"):
            # as Agent Chat UI streams (its useStream): a thread, a chat message, these modes
            thread = client.threads.create()["thread_id"]
            parts = list(
                client.runs.stream(
                    thread,
                    method,
                    input={"messages": [{"type": "human", "content": QUESTION}]},
                    stream_mode=["values", "messages-tuple", "custom"],
                    stream_subgraphs=True,
                )
            )
            errors = [p.data for p in parts if p.event == "error"]
            assert errors, (method, parts[-3:])
            assert "log-probabilit" in json.dumps(errors), (method, errors)
    finally:
        model.logprobs = True


@pytest.mark.server
def test_a_reload_mid_run_finds_the_answer_on_the_default_local_server(
    closed: tuple[str, Any],
) -> None:
    """The anonymous server on 127.0.0.1 (`langgraph dev`'s default): a client streams with
    ``stream_resumable`` and ``on_disconnect: "continue"`` (Agent Chat UI), leaves mid-run (a
    page reload); the run goes on, and the answer is in the thread when the page is back."""
    import threading

    from langgraph_sdk import get_sync_client

    url, model = closed
    client = get_sync_client(url=url, timeout=WAIT)
    thread = client.threads.create()["thread_id"]
    model.held.clear()
    model.release.clear()  # the review waits until the client has left
    try:
        run_id = leave_mid_run(client, thread, QUESTION)
        assert run_id is not None and model.held.wait(WAIT)
        model.release.set()
        done = threading.Event()

        def join() -> None:  # the page back: joins the run, which ends
            for _ in client.runs.join_stream(thread, run_id, stream_mode=["updates"]):
                pass
            done.set()

        threading.Thread(target=join, daemon=True).start()
        assert done.wait(WAIT)
        assert client.runs.get(thread, run_id)["status"] == "success"
        assert client.threads.get_state(thread)["values"]["answer"]
    finally:
        model.release.set()
