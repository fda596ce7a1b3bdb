"""The app-facing features of issue 23 against `langgraph dev` through the Python SDK, as Agent
Chat UI and Studio use them: the human review's HITL requests (LangChain v1's, issue 32) resumed
with decisions: approve / edit / reject with a message (more retrieval; the edited note reaches
the answer prompt), the older HumanResponse still understood, a malformed or null resume refused
with HTTP 422 while the thread stays paused (issue 33), "interrupt before answer, update the
state, continue", and a follow-up question rewritten from the thread's conversation.

The model is bench/sim_endpoint.py's simulated OpenAI-compatible endpoint in this process
(test_threads.HoldingModel: it accepts every note and records each request's stage and prompt),
so the tests count the calls the server sends and read the prompts."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from test_threads import QUESTION, WAIT, HoldingModel, start

pytestmark = pytest.mark.server

EDITED = "EDITED NOTE: Aurelio Fenwick, the architect of the Velmora Bridge, was born in 1871."
# a deepnote run with max_steps=1 and every note accepted
ONE_STEP = Counter(init_note=1, refine_query=1, accumulate=1, review=1, answer=1)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, HoldingModel]]:
    from langgraph_sdk import get_sync_client

    from devserver import serve

    model = HoldingModel(hold="none")
    sim, sim_url = start(model)
    # the operator opens state writes: "update the state, continue" (Studio's edit) needs them
    env = {"NOTERAG_MODEL": f"openai:sim@{sim_url}", "NOTERAG_SKIP_MODEL_CHECK": "1",
           "NOTERAG_ALLOW_STATE_WRITES": "1"}  # fmt: skip
    server = serve(tmp_path_factory, env)
    try:
        url = next(server)
        yield get_sync_client(url=url, api_key=None, timeout=WAIT), model
    finally:
        server.close()
        sim.shutdown()


class Calls(Counter[str]):
    """The endpoint's requests while a run ran, by stage; ``prompts`` keeps their prompts (an
    assertion on the counts shows them, to tell a request this server sent from a stray)."""

    prompts: list[tuple[str, str]]

    def requests(self) -> str:
        return "the requests:\n" + "\n".join(
            f"--- {stage}: {prompt[:600]!r}" for stage, prompt in self.prompts
        )


def calls_of(model: HoldingModel, run: Any) -> Calls:
    """The endpoint's requests while ``run()`` ran, by stage."""
    before, seen = Counter(model.stages), len(model.prompts)
    run()
    calls = Calls(Counter(model.stages) - before)
    calls.prompts = model.prompts[seen:]
    return calls


def interrupts(client: Any, thread: str) -> list[Any]:
    """The values of the interrupts the thread waits on."""
    state = client.threads.get_state(thread)
    return [i["value"] for task in state["tasks"] for i in task.get("interrupts", [])]


def answer_prompts(model: HoldingModel) -> list[str]:
    return [prompt for stage, prompt in model.prompts if stage == "answer"]


REVIEW = {"human_review": "note", "max_steps": 1}


def paused_at_the_note(client: Any, model: HoldingModel) -> str:
    thread = client.threads.create()["thread_id"]
    done = calls_of(
        model,
        lambda: client.runs.wait(thread, "deepnote", input={"question": QUESTION}, context=REVIEW),
    )
    assert done == ONE_STEP - Counter(answer=1), done.requests()  # paused before the answer's call
    [request] = interrupts(client, thread)
    [action] = request["action_requests"]
    assert action["name"] == "review_note"
    assert request["review_configs"] == [
        {"action_name": "review_note", "allowed_decisions": ["approve", "edit", "reject"]}
    ]
    values = client.threads.get_state(thread)["values"]
    assert action["args"]["note"] == values["best_note"]
    assert client.threads.get_state(thread)["next"]
    return thread


def resume(client: Any, thread: str, response: Any) -> dict[str, Any]:
    return client.runs.wait(thread, "deepnote", command={"resume": response}, context=REVIEW)


@pytest.mark.parametrize(
    "decision",
    [{"decisions": [{"type": "approve"}]}, [{"type": "accept", "args": None}]],
    ids=["approve", "HumanResponse accept"],
)
def test_approve_at_the_note_answers_without_repeating_a_call(served: Any, decision: Any) -> None:
    client, model = served
    thread = paused_at_the_note(client, model)
    out: dict[str, Any] = {}
    done = calls_of(model, lambda: out.update(resume(client, thread, decision)))
    assert done == Counter(answer=1), done.requests()
    assert out["answer"] and not interrupts(client, thread)


def test_an_edited_note_is_what_the_answer_prompt_reads(served: Any) -> None:
    client, model = served
    thread = paused_at_the_note(client, model)
    edited = {"name": "review_note", "args": {"note": EDITED, "passages": [], "verdicts": []}}
    edit = {"decisions": [{"type": "edit", "edited_action": edited}]}
    out: dict[str, Any] = {}
    done = calls_of(model, lambda: out.update(resume(client, thread, edit)))
    assert done == Counter(answer=1), done.requests()
    assert EDITED in answer_prompts(model)[-1]
    assert out["best_note"] == EDITED and out["answer"]


def test_a_reject_retrieves_more_with_its_message_and_asks_again(served: Any) -> None:
    client, model = served
    thread = paused_at_the_note(client, model)
    query = "Aurelio Fenwick birth year"
    reject = {"decisions": [{"type": "reject", "message": query}]}
    done = calls_of(model, lambda: resume(client, thread, reject))
    # the method's accumulation with the passages the reviewer's query found, then the human
    # review again, of the note it wrote
    assert done == Counter(accumulate=1), done.requests()
    [request] = interrupts(client, thread)
    [action] = request["action_requests"]
    assert action["name"] == "review_note"
    values = client.threads.get_state(thread)["values"]
    assert action["args"]["note"] == values["best_note"]
    assert query in values["query_log"]
    out: dict[str, Any] = {}
    done = calls_of(model, lambda: out.update(resume(client, thread, {"type": "ignore"})))
    assert done == Counter(answer=1), done.requests()
    assert out["answer"]


@pytest.mark.parametrize(
    ("decision", "says"),
    [
        (None, "resume a review with {'decisions': [{'type': 'approve'}]}"),
        ({"decisions": [{"type": "maybe"}]}, "resume a review with"),
        ({"decisions": [{"type": "reject"}]}, "a reject needs a message"),
        (
            {"decisions": [{"type": "edit", "edited_action": {"name": "review_note", "args": {"note": "x" * 20_001}}}]},
            "the edited note is 20,001 characters long; at most 20,000 are accepted",
        ),
        ({"decisions": [{"type": "reject", "message": "q" * 8_001}]}, "at most 8,000 are accepted"),
    ],
    ids=["null", "unknown type", "reject without a message", "edit too long", "query too long"],
)  # fmt: skip
def test_a_malformed_resume_is_refused_and_the_review_still_waits(
    served: Any, decision: Any, says: str
) -> None:
    client, model = served
    thread = paused_at_the_note(client, model)
    before = client.threads.get_state(thread)
    stages = Counter(model.stages)
    # the request as sent over HTTP (the SDK leaves out a null resume)
    run = {"assistant_id": "deepnote", "command": {"resume": decision}, "context": REVIEW}
    refused = client.http.client.post(f"/threads/{thread}/runs/wait", json=run)
    assert refused.status_code == 422, refused.text
    assert says in refused.json()["detail"]
    assert Counter(model.stages) == stages  # no call
    after = client.threads.get_state(thread)
    # nothing stored: the same checkpoint, the same pending review
    assert after["checkpoint"] == before["checkpoint"]
    assert interrupts(client, thread) == [t["interrupts"][0]["value"] for t in before["tasks"]]
    out: dict[str, Any] = {}
    done = calls_of(
        model, lambda: out.update(resume(client, thread, {"decisions": [{"type": "approve"}]}))
    )
    assert done == Counter(answer=1), done.requests()
    assert out["answer"]


def test_interrupt_before_answer_update_state_and_continue_answers_from_the_edit(
    served: Any,
) -> None:
    client, model = served
    thread = client.threads.create()["thread_id"]
    client.runs.wait(
        thread,
        "deepnote",
        input={"question": QUESTION},
        context={"max_steps": 1},
        interrupt_before=["answer"],
    )
    assert client.threads.get_state(thread)["next"] == ["answer"]
    client.threads.update_state(thread, {"best_note": EDITED})
    assert client.threads.get_state(thread)["next"] == ["answer"]
    out: dict[str, Any] = {}
    done = calls_of(
        model,
        lambda: out.update(
            client.runs.wait(thread, "deepnote", input=None, context={"max_steps": 1})
        ),
    )
    assert done == Counter(answer=1), done.requests()
    assert out["answer"] and out["best_note"] == EDITED
    assert EDITED in answer_prompts(model)[-1]


def test_a_follow_up_on_a_thread_is_rewritten_from_the_conversation(served: Any) -> None:
    client, model = served
    thread = client.threads.create()["thread_id"]
    ask = {"messages": [{"role": "user", "content": QUESTION}]}
    first = calls_of(
        model, lambda: client.runs.wait(thread, "deepnote", input=ask, context={"max_steps": 1})
    )
    assert first == ONE_STEP, first.requests()  # a first turn is not rewritten
    follow = {"messages": [{"role": "user", "content": "And where was he born?"}]}
    parts = list(
        client.runs.stream(
            thread, "deepnote", input=follow, context={"max_steps": 1}, stream_mode="custom"
        )
    )
    condensed = [p.data for p in parts if p.event == "custom" and p.data["type"] == "condensed"]
    assert len(condensed) == 1 and condensed[0]["asked"] == "And where was he born?"
    # the rewrite's prompt holds the first turn (the sim answers it as the "answer" stage)
    rewrite = next(p for p in answer_prompts(model) if "And where was he born?" in p)
    assert QUESTION in rewrite
    values = client.threads.get_state(thread)["values"]
    assert values["asked"] == "And where was he born?"
    assert values["question"] == condensed[0]["question"] != values["asked"]
