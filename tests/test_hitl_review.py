"""Human review (``human_review``) speaks LangChain v1's HITL protocol in-process: the pause is a
HITL request (``action_requests`` / ``review_configs``, as Agent Chat UI recognises it), resumed
with ``{"decisions": [...]}``: approve, edit (``edited_action.args``), reject with a message (the
reviewer's feedback used as a query). The older HumanResponse payloads and ``respond`` are still
understood; a malformed or oversized decision pauses the review again, saying why, and is not
kept in the checkpoint."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from test_embedding import CORPUS, graph_with, thread

from noterag.base.errors import ConfigError
from noterag.core.context import MAX_QUESTION_CHARS
from noterag.nodes.human import _VALIDATED_RESUME, MAX_EDIT_CHARS, check_resume
from scripted import QUESTION, RecordingRetriever, ScriptedModel, generator_prompt, velmora_script

NOTE = {"human_review": "note"}
NOT_UNDERSTOOD = "The last decision was not understood: "


def pending(graph: Any, name: str) -> Any:
    """The one interrupt the thread waits on, its value."""
    interrupts = graph.get_state(thread(name)).interrupts
    assert len(interrupts) == 1, interrupts
    return interrupts[0]


def agent_chat_ui_renders(value: Any) -> bool:
    """agent-chat-ui's isAgentInboxInterruptSchema (src/lib/agent-inbox-interrupt.ts), in
    Python: what decides whether it shows a review card or raw JSON."""
    requests, configs = value.get("action_requests"), value.get("review_configs")
    return (
        isinstance(requests, list)
        and bool(requests)
        and isinstance(configs, list)
        and bool(configs)
        and all(
            isinstance(r.get("name"), str) and isinstance(r.get("args"), dict) for r in requests
        )
        and all(
            isinstance(c.get("action_name"), str) and isinstance(c.get("allowed_decisions"), list)
            for c in configs
        )
    )


def paused(model: Any, name: str, context: dict[str, Any] = NOTE, **kw: Any) -> Any:
    graph = graph_with(model, **kw)
    graph.invoke({"question": QUESTION}, thread(name), context=context)
    return graph


def test_the_note_review_is_a_hitl_request_agent_chat_ui_renders() -> None:
    model = ScriptedModel(script=velmora_script())
    graph = paused(model, "n")
    interrupt = pending(graph, "n")
    value = interrupt.value
    assert agent_chat_ui_renders(value)
    [action] = value["action_requests"]
    assert action["name"] == "review_note"
    assert "approve it, edit it, or reject it with what to look for" in action["description"]
    state = graph.get_state(thread("n")).values
    # the note is the request's one argument: Agent Chat UI's one text box to edit (issue 42)
    assert action["args"] == {"note": state["best_note"]}
    # what it was written from, as text the card renders (the description's Markdown): the
    # passages numbered with their titles, each step's queries and verdict, never raw JSON
    description = action["description"]
    for i, p in enumerate(state["passages"], 1):
        assert f"{i}. **{p['title']}**: {p['text']}" in description
    assert "- Step 0: searched" in description and "the first note" in description
    assert "- Step 1: searched" in description and "the note was improved and kept" in description
    assert "{" not in description and "Reject: your words are searched for" in description
    assert value["review_configs"] == [
        {"action_name": "review_note", "allowed_decisions": ["approve", "edit", "reject"]}
    ]
    if _VALIDATED_RESUME:  # the resume's JSON schema, for clients that render typed forms
        schema = interrupt.response_schema
        assert schema["required"] == ["decisions"]
        kinds = [
            b["properties"]["type"]["const"]
            for b in schema["properties"]["decisions"]["items"]["oneOf"]
        ]
        assert kinds == ["approve", "edit", "reject"]
    assert "answer" not in model.stages


APPROVALS = {
    "decisions": {"decisions": [{"type": "approve"}]},
    "bare decision": {"type": "approve"},
    "HumanResponse accept": {"type": "accept", "args": None},
    "HumanResponse list": [{"type": "accept", "args": None}],
    "HumanResponse ignore": {"type": "ignore", "args": None},
}


@pytest.mark.parametrize("resume", APPROVALS.values(), ids=APPROVALS.keys())
def test_approve_answers_from_the_note_without_repeating_a_call(resume: Any) -> None:
    model = ScriptedModel(script=velmora_script())
    graph = paused(model, "a")
    before = Counter(model.stages)
    note = graph.get_state(thread("a")).values["best_note"]
    out = graph.invoke(Command(resume=resume), thread("a"), context=NOTE)
    assert out["answer"] == "1871"
    assert Counter(model.stages) - before == Counter({"answer": 1})
    assert model.prompts_for("answer") == [generator_prompt(note)]


EDITS = {
    # as Agent Chat UI sends it: every arg back, the ones not edited as they came (or as text)
    "decisions": {
        "decisions": [
            {
                "type": "edit",
                "edited_action": {
                    "name": "review_note",
                    "args": {"note": "HUMAN NOTE", "passages": "[...]", "verdicts": []},
                },
            }
        ]
    },
    "HumanResponse": {
        "type": "edit",
        "args": {"action": "review_note", "args": {"note": "HUMAN NOTE"}},
    },
}


@pytest.mark.parametrize("resume", EDITS.values(), ids=EDITS.keys())
def test_an_edit_is_the_note_the_answer_prompt_reads(resume: Any) -> None:
    model = ScriptedModel(script=velmora_script())
    graph = paused(model, "ed")
    out = graph.invoke(Command(resume=resume), thread("ed"), context=NOTE)
    assert model.prompts_for("answer") == [generator_prompt("HUMAN NOTE")]
    assert out["best_note"] == "HUMAN NOTE"


REJECTS = {
    "reject": {"decisions": [{"type": "reject", "message": "Ostra River"}]},
    "respond": {"decisions": [{"type": "respond", "message": "Ostra River"}]},
    "HumanResponse response": {"type": "response", "args": "Ostra River"},
}


@pytest.mark.parametrize("resume", REJECTS.values(), ids=REJECTS.keys())
def test_a_reject_retrieves_with_its_message_updates_the_note_and_reviews_again(
    resume: Any,
) -> None:
    model = ScriptedModel(script=velmora_script(accumulate="NOTE FROM THE FEEDBACK"))
    retriever = RecordingRetriever(passages=CORPUS)
    graph = paused(model, "r", retriever=retriever)
    searched, before = len(retriever.queries), Counter(model.stages)
    events = [
        part
        for part in graph.stream(
            Command(resume=resume), thread("r"), context=NOTE, stream_mode="custom"
        )
        if part.get("type") == "human_review"
    ]
    assert retriever.queries[searched:] == [("Ostra River", 5)]
    assert Counter(model.stages) - before == Counter({"accumulate": 1})
    assert events == [
        {
            "type": "human_review",
            "action": "review_note",
            "decision": "reject",
            "sent_as": (resume.get("decisions") or [resume])[0]["type"],
            "query": "Ostra River",
            "note": "NOTE FROM THE FEEDBACK",
        }
    ]
    action = pending(graph, "r").value["action_requests"][0]  # reviewed again, the new note
    assert action["args"]["note"] == "NOTE FROM THE FEEDBACK"
    out = graph.invoke(
        Command(resume={"decisions": [{"type": "approve"}]}), thread("r"), context=NOTE
    )
    assert model.prompts_for("answer") == [generator_prompt("NOTE FROM THE FEEDBACK")]
    assert "Ostra River" in out["query_log"]


def test_the_answer_review_edits_the_answer_and_the_chat_message() -> None:
    model = ScriptedModel(script=velmora_script())
    graph = graph_with(model)
    context = {"human_review": "answer"}
    graph.invoke({"messages": [HumanMessage(QUESTION)]}, thread("ans"), context=context)
    [action] = pending(graph, "ans").value["action_requests"]
    assert (action["name"], action["args"]) == ("review_answer", {"answer": "1871"})
    assert action["description"].endswith(f"**The question**: {QUESTION}")
    edit = {
        "type": "edit",
        "edited_action": {"name": "review_answer", "args": {"answer": "in 1871"}},
    }
    out = graph.invoke(Command(resume={"decisions": [edit]}), thread("ans"), context=context)
    assert out["answer"] == "in 1871"
    assert [(type(m), m.content) for m in out["messages"]] == [
        (HumanMessage, QUESTION),
        (AIMessage, "in 1871"),
    ]
    assert model.stages.count("answer") == 1


def test_a_reject_of_the_answer_retrieves_answers_again_and_reviews_again() -> None:
    model = ScriptedModel(script=velmora_script(accumulate="NOTE FROM THE FEEDBACK"))
    retriever = RecordingRetriever(passages=CORPUS)
    graph = paused(model, "ra", {"human_review": "answer"}, retriever=retriever)
    reject = {"decisions": [{"type": "reject", "message": "Aurelio Fenwick birth"}]}
    graph.invoke(Command(resume=reject), thread("ra"), context={"human_review": "answer"})
    assert retriever.queries[-1] == ("Aurelio Fenwick birth", 5)
    assert model.stages.count("answer") == 2
    assert model.prompts_for("answer")[-1] == generator_prompt("NOTE FROM THE FEEDBACK")
    assert pending(graph, "ra").value["action_requests"][0]["name"] == "review_answer"


def test_both_reviews_pause_twice_and_approve_goes_through() -> None:
    model = ScriptedModel(script=velmora_script())
    context = {"human_review": "both"}
    graph = paused(model, "both", context)
    approve = {"decisions": [{"type": "approve"}]}
    assert pending(graph, "both").value["action_requests"][0]["name"] == "review_note"
    graph.invoke(Command(resume=approve), thread("both"), context=context)
    assert pending(graph, "both").value["action_requests"][0]["name"] == "review_answer"
    out = graph.invoke(Command(resume=approve), thread("both"), context=context)
    assert out["answer"] == "1871"
    assert graph.get_state(thread("both")).next == ()


def test_a_method_without_a_note_update_offers_no_reject() -> None:
    model = ScriptedModel.for_method("vanilla")
    context = {"human_review": "answer"}
    graph = paused(model, "v", context, method="vanilla")
    value = pending(graph, "v").value
    assert value["review_configs"][0]["allowed_decisions"] == ["approve", "edit"]
    assert "reject" not in value["action_requests"][0]["description"]
    reject = {"decisions": [{"type": "reject", "message": "more"}]}
    graph.invoke(Command(resume=reject), thread("v"), context=context)
    description = pending(graph, "v").value["action_requests"][0]["description"]
    assert description.startswith(NOT_UNDERSTOOD + "this review allows approve, edit, not reject")


MARK = "MALFORMED-MARK"
MALFORMED = {
    "unknown type": ({"decisions": [{"type": "yes", "why": MARK}]}, "resume a review with"),
    "two decisions": (
        {"decisions": [{"type": "approve"}, {"type": "approve", "x": MARK}]},
        "send one decision",
    ),
    "edit of a wrong arg": (
        {"decisions": [{"type": "edit", "edited_action": {"name": "review_note", "args": {"notes": MARK}}}]},
        "{'name': 'review_note', 'args': {'note': '<text>'}}",
    ),
    "edit of another action": (
        {"decisions": [{"type": "edit", "edited_action": {"name": "review_answer", "args": {"answer": MARK}}}]},
        "{'name': 'review_note', 'args': {'note': '<text>'}}",
    ),
    "reject without a message": (
        {"decisions": [{"type": "reject", "x": MARK}]},
        "a reject needs a message: what to look for",
    ),
    "blank HumanResponse query": ({"type": "response", "args": " ", "x": MARK}, "a response needs a message"),
    "edit too long": (
        {"decisions": [{"type": "edit", "edited_action": {"name": "review_note", "args": {"note": MARK + "x" * MAX_EDIT_CHARS}}}]},
        f"at most {MAX_EDIT_CHARS:,} are accepted",
    ),
    "query too long": (
        {"decisions": [{"type": "reject", "message": MARK + "x" * MAX_QUESTION_CHARS}]},
        f"at most {MAX_QUESTION_CHARS:,} are accepted (it is a query)",
    ),
}  # fmt: skip


@pytest.mark.parametrize("resume, says", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_decision_pauses_again_saying_why_and_is_not_kept(
    resume: Any, says: str
) -> None:
    model = ScriptedModel(script=velmora_script())
    saver = InMemorySaver()
    graph = paused(model, "bad", checkpointer=saver)
    before = Counter(model.stages)
    graph.invoke(Command(resume=resume), thread("bad"), context=NOTE)
    [action] = pending(graph, "bad").value["action_requests"]
    assert action["description"].startswith(NOT_UNDERSTOOD), action["description"]
    assert says in action["description"]
    # what was sent is shown cut, never whole (the passages and steps follow the first paragraph)
    assert len(action["description"].split("\n\n", 1)[0]) < 800
    assert Counter(model.stages) == before  # no call, no retrieval, nothing lost
    out = graph.invoke(
        Command(resume={"decisions": [{"type": "approve"}]}), thread("bad"), context=NOTE
    )
    assert out["answer"] == "1871"
    if _VALIDATED_RESUME:  # the malformed value was replaced by the next decision, not kept
        stored = repr(
            [saver.serde.loads_typed(w[2]) for ws in saver.writes.values() for w in ws.values()]
        )
        assert MARK not in stored
        assert MARK not in repr(graph.get_state(thread("bad")).values)


def test_at_the_limits_an_edit_and_a_query_are_taken() -> None:
    model = ScriptedModel(script=velmora_script())
    graph = paused(model, "lim")
    note = "n" * MAX_EDIT_CHARS
    edit = {"type": "edit", "edited_action": {"name": "review_note", "args": {"note": note}}}
    out = graph.invoke(Command(resume={"decisions": [edit]}), thread("lim"), context=NOTE)
    assert out["best_note"] == note and model.prompts_for("answer") == [generator_prompt(note)]


def test_check_resume_refuses_what_no_review_understands() -> None:
    for good in (
        {"decisions": [{"type": "approve"}]},
        {
            "decisions": [
                {
                    "type": "edit",
                    "edited_action": {"name": "review_answer", "args": {"answer": "x"}},
                }
            ]
        },
        {"type": "accept"},
        {"0123456789abcdef0123456789abcdef": {"decisions": [{"type": "approve"}]}},
    ):
        check_resume(good)
    for bad, says in (
        (None, "resume a review with {'decisions': [{'type': 'approve'}]}"),
        ({"decisions": []}, "send one decision"),
        ({"0123456789abcdef0123456789abcdef": None}, "resume a review with"),
        (
            {"decisions": [{"type": "reject", "message": "q" * (MAX_QUESTION_CHARS + 1)}]},
            "it is a query",
        ),
    ):
        with pytest.raises(ConfigError, match=f"^{says[:20]}|{says}"):
            check_resume(bad)


def test_review_async() -> None:
    model = ScriptedModel(script=velmora_script())
    graph = graph_with(model)
    edited = {"name": "review_note", "args": {"note": "ASYNC"}}

    async def run() -> dict[str, Any]:
        await graph.ainvoke({"question": QUESTION}, thread("as"), context=NOTE)
        edit = {"decisions": [{"type": "edit", "edited_action": edited}]}
        return await graph.ainvoke(Command(resume=edit), thread("as"), context=NOTE)

    assert asyncio.run(run())["answer"] == "1871"
    assert model.prompts_for("answer") == [generator_prompt("ASYNC")]


def test_without_a_validated_resume_a_malformed_decision_still_pauses_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The path for langgraph before interrupt(response_schema=...) (tests/pins-lowest.txt)."""
    from noterag.nodes import human

    monkeypatch.setattr(human, "_VALIDATED_RESUME", False)
    model = ScriptedModel(script=velmora_script())
    graph = paused(model, "old")
    graph.invoke(Command(resume={"decisions": [{"type": "maybe"}]}), thread("old"), context=NOTE)
    [action] = pending(graph, "old").value["action_requests"]
    assert action["description"].startswith(NOT_UNDERSTOOD + "resume a review with")
    edit = {"type": "edit", "edited_action": {"name": "review_note", "args": {"note": "OLD"}}}
    out = graph.invoke(Command(resume={"decisions": [edit]}), thread("old"), context=NOTE)
    assert out["best_note"] == "OLD" and model.prompts_for("answer") == [generator_prompt("OLD")]
