"""`langgraph dev` serves every graph from langgraph.json: Studio's schemas carry the context
fields' descriptions, and a run of each method streams its custom events and answer over the API,
with the real local model over the bundled sample index."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import pytest

import noterag
from noterag.registry.methods import context_schema
from scripted import method_events

pytestmark = pytest.mark.server

QUESTION = "In which year was the architect of the Velmora Bridge born?"


def _client(url: str) -> Any:
    from langgraph_sdk import get_sync_client

    # api_key=None: never forward a LangSmith key from the environment to the local server.
    # A long read timeout: the tiny model is slow on a busy machine, and a slow reply is no failure.
    return get_sync_client(url=url, api_key=None, timeout=600)


def _assistant(client: Any, graph_id: str) -> str:
    found = client.assistants.search(graph_id=graph_id)
    assert found, f"no assistant for graph {graph_id!r}: is it in langgraph.json?"
    return found[0]["assistant_id"]


@pytest.mark.parametrize("graph_id", noterag.METHODS)
def test_schemas_expose_the_context_fields(server: str, graph_id: str) -> None:
    context = context_schema(graph_id)
    client = _client(server)
    schemas = client.assistants.get_schemas(_assistant(client, graph_id))
    properties = schemas["context_schema"]["properties"]
    for field in fields(context):
        assert field.name in properties, f"{graph_id}: {field.name} not in the context schema"
        assert properties[field.name]["description"] == field.metadata["description"]
        assert properties[field.name]["default"] == field.default
    assert set(schemas["input_schema"]["properties"]) == {"question", "messages", "task"}
    assert "answer" in schemas["output_schema"]["properties"]


def test_deepnote_run_streams_notes_verdicts_and_the_answer(server: str) -> None:
    client = _client(server)
    parts = list(
        client.runs.stream(
            None,
            "deepnote",
            input={"question": QUESTION},
            context={"max_steps": 1, "max_tokens": 64},
            stream_mode=["updates", "custom"],
        )
    )
    errors = [part.data for part in parts if part.event == "error"]
    assert not errors, errors
    custom = method_events(part.data for part in parts if part.event == "custom")
    kinds = [event["type"] for event in custom]

    first = custom[0]
    assert first["type"] == "passages" and first["step"] == 0
    # NOTERAG_INDEX is unset, so the graph searched the bundled sample corpus.
    assert "Velmora Bridge" in [p["title"] for p in first["passages"]]

    notes = [event for event in custom if event["type"] == "note"]
    assert len(notes) == 1 and notes[0]["step"] == 0 and notes[0]["accepted"] is True
    assert isinstance(notes[0]["note"], str)

    # max_steps=1: exactly one reviewed step, then the answer.
    verdicts = [event for event in custom if event["type"] == "verdict"]
    assert len(verdicts) == 1, kinds
    assert verdicts[0]["step"] == 1 and isinstance(verdicts[0]["accepted"], bool)
    assert kinds.index("note") < kinds.index("verdict") < kinds.index("answer")

    updates = [part.data for part in parts if part.event == "updates"]
    answers = [update["answer"] for update in updates if "answer" in update]
    assert len(answers) == 1 and updates[-1] is not None and "answer" in updates[-1], updates[-1]
    final = answers[0]
    assert isinstance(final["answer"], str) and final["answer"].strip()
    # the stop decision is the adaptive retrieval decision's (review), with its reason
    stops = [
        update[name]
        for update in updates
        for name in update or {}
        if (update[name] or {}).get("stop_reason")
    ]
    assert len(stops) == 1 and "max_steps = 1" in stops[0]["stop_reason"]
    assert [update for update in updates if "review" in (update or {})][-1]["review"] is stops[0]
    assert final["answer"] == next(e for e in custom if e["type"] == "answer")["answer"]


# The tiny model is slow: a short run of each method, enough to cross every node once.
SHORT = {"max_tokens": 48, "top_k": 2}
RUNS = {
    "adaptive-note": {"max_steps": 1},
    "amber": {"max_steps": 1},
    "resp": {"max_steps": 1},
    "vanilla": {},
    "no-retrieval": {},
}


@pytest.mark.parametrize("graph_id", list(RUNS))
def test_every_method_streams_a_run_to_its_answer(server: str, graph_id: str) -> None:
    client = _client(server)
    parts = list(
        client.runs.stream(
            None,
            graph_id,
            input={"question": QUESTION},
            context=SHORT | RUNS[graph_id],
            stream_mode=["updates", "custom"],
        )
    )
    errors = [part.data for part in parts if part.event == "error"]
    assert not errors, errors
    custom = method_events(part.data for part in parts if part.event == "custom")
    assert custom and custom[-1]["type"] == "answer", [e["type"] for e in custom]
    if graph_id != "no-retrieval":
        assert custom[0]["type"] == "passages"
    updates = [part.data for part in parts if part.event == "updates"]
    final = next(update["answer"] for update in updates if update and "answer" in update)
    assert final["answer"].strip() and final["answer"] == custom[-1]["answer"]


# --------------------------------------------------------------------------- who may call it


def _call(url: str, method: str, origin: str | None, **headers: str) -> Any:
    import httpx

    sent = {"Origin": origin, **headers} if origin is not None else headers
    body = b"{}" if method == "POST" else None
    return httpx.request(method, f"{url}/assistants/search", headers=sent, content=body, timeout=30)


def _preflight(url: str, origin: str) -> Any:
    return _call(url, "OPTIONS", origin, **{
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type"})  # fmt: skip


@pytest.mark.parametrize("origin", ["http://localhost:8000", "http://127.0.0.1:5173",
                                    "https://smith.langchain.com"])  # fmt: skip
def test_a_local_page_and_studio_may_call_the_server(server: str, origin: str) -> None:
    allowed = _preflight(server, origin)
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == origin
    sent = _call(server, "POST", origin, **{"Content-Type": "application/json"})
    assert sent.status_code == 200 and isinstance(sent.json(), list)
    assert sent.headers["access-control-allow-origin"] == origin


@pytest.mark.parametrize("origin", ["https://evil.example", "http://localhost.evil.example"])
def test_a_page_from_another_origin_is_refused(server: str, origin: str) -> None:
    refused = _preflight(server, origin)
    assert refused.status_code == 403
    assert "access-control-allow-origin" not in refused.headers
    # `langgraph dev` grants Private Network Access on every preflight it answers; not on this
    # one, refused before it
    pna = _call(server, "OPTIONS", origin, **{"Access-Control-Request-Method": "POST",
                "Access-Control-Request-Private-Network": "true"})  # fmt: skip
    assert pna.status_code == 403 and "access-control-allow-private-network" not in pna.headers
    # A "simple" request needs no preflight: refused as well, rather than run unread.
    simple = _call(server, "POST", origin, **{"Content-Type": "text/plain"})
    assert simple.status_code == 403 and "access-control-allow-origin" not in simple.headers
    # Not a browser (no Origin): the SDKs and curl are served as before.
    assert _call(server, "POST", None, **{"Content-Type": "application/json"}).status_code == 200
