"""Human in the loop (the setting ``human_review``): a person reviews the note before the answer
and the final answer, through LangGraph's ``interrupt()``.

Each pause sends one request in the shape Agent Chat UI (and Agent Inbox) renders, LangGraph's
``HumanInterrupt`` (langgraph-prebuilt 1.1.0, ``langgraph/prebuilt/interrupt.py``; the
TypedDicts there are deprecated, the shape is not): ``[{"action_request": {"action", "args"},
"config": {"allow_accept", "allow_edit", "allow_respond", "allow_ignore"}, "description"}]``.
The run resumes with ``Command(resume=...)`` carrying a ``HumanResponse`` (or a list of one, as
Agent Chat UI sends it):

* ``{"type": "accept"}``: go on as is;
* ``{"type": "edit", "args": {"action": ..., "args": {"note": "..."}}}`` (``"answer"`` at the
  answer's review): the edited text is what the next step reads (the answer prompt reads the
  edited note) and what the state keeps;
* ``{"type": "response", "args": "<a query>"}``: retrieve with that query, update the note from
  what it found (the method's knowledge-accumulation prompt), then ask again (the answer's
  review: answer again from the new note, then ask again);
* ``{"type": "ignore"}``: go on as is, the review skipped.

A review resumes without repeating a model call: the pause comes before the step's calls
(LangGraph re-runs a resumed node from its start), and a ``response`` goes back through the
graph (a ``Command``), so the next pause is a new step.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.messages import AIMessage
from langgraph.types import Command, interrupt

from noterag.errors import ConfigError
from noterag.nodes.notes import updated_note
from noterag.step import Env, RoutingStepGen, Search

RESPONSE_TYPES = ("accept", "edit", "response", "ignore")


def reviews(ctx: Any, what: str) -> bool:
    """Whether a run with context ``ctx`` pauses for a person to review ``what`` ("note" or
    "answer")."""
    setting = getattr(ctx, "human_review", "none")
    return setting in (what, "both")


def can_retrieve_more(env: Env) -> bool:
    """A ``response`` (more retrieval) needs the method's note-update prompt."""
    return hasattr(env.prompts, "accumulate")


def request(action: str, args: dict[str, Any], description: str, *, respond: bool) -> list:
    """One HumanInterrupt, in the list Agent Chat UI renders."""
    return [
        {
            "action_request": {"action": action, "args": args},
            "config": {
                "allow_accept": True,
                "allow_edit": True,
                "allow_respond": respond,
                "allow_ignore": True,
            },
            "description": description,
        }
    ]


def ask_human(
    action: str, args: dict[str, Any], description: str, *, respond: bool, field: str
) -> tuple[str, Any]:
    """Pause with the request until a response of the right shape comes back: (type, value)
    (``human_response``). A malformed response is not an error of the run: the review is asked
    again, its description saying what was wrong (LangGraph keeps every resume value of a node,
    so the next response answers the next ``interrupt()``)."""
    problem = ""
    while True:
        resume = interrupt(request(action, args, problem + description, respond=respond))
        try:
            return human_response(resume, field)
        except ConfigError as error:
            problem = f"The last response was not understood: {error}. "


def human_response(resume: Any, field: str) -> tuple[str, Any]:
    """(type, value) of the HumanResponse a run was resumed with: value is the edited ``field``
    for edit, the query for response, None otherwise. Anything else is a ConfigError naming
    the shape expected."""
    if isinstance(resume, list) and len(resume) == 1:
        resume = resume[0]
    kind = resume.get("type") if isinstance(resume, Mapping) else None
    if kind not in RESPONSE_TYPES:
        raise ConfigError(
            f"resume a human review with a HumanResponse: {{'type': one of "
            f"{', '.join(RESPONSE_TYPES)}, 'args': ...}}; got {resume!r:.200}"
        )
    args = resume.get("args")
    if kind == "edit":
        edited = args.get("args", {}).get(field) if isinstance(args, Mapping) else None
        if not isinstance(edited, str):
            raise ConfigError(
                f"an edit resumes with {{'type': 'edit', 'args': {{'action': ..., 'args': "
                f"{{'{field}': '<text>'}}}}}}; got {resume!r:.200}"
            )
        return kind, edited
    if kind == "response":
        if not isinstance(args, str) or not args.strip():
            raise ConfigError(
                "a response resumes with {'type': 'response', 'args': '<a query to retrieve "
                f"more with>'}}; got {resume!r:.200}"
            )
        return kind, args.strip()
    return kind, None


def review_note(state: dict[str, Any], env: Env, goto: str) -> RoutingStepGen:
    """The note review before the answer: pause with the note, the passages and the verdict
    history; returns the state the answer reads (the note as reviewed) and the update to keep,
    or a ``Command`` back to ``goto`` after a response's retrieval."""
    verdicts = [
        {k: entry.get(k) for k in ("step", "queries", "verdict", "reason", "candidate_note")}
        for entry in state.get("trace") or []
    ]
    passages = [
        {"id": p["id"], "title": p["title"], "text": p["text"]} for p in state.get("passages") or []
    ]
    kind, value = ask_human(
        "review_note",
        {"note": state.get("best_note") or "", "passages": passages, "verdicts": verdicts},
        "Review the note the answer will be written from: accept it, edit it, or send a query "
        "to retrieve more.",
        respond=can_retrieve_more(env),
        field="note",
    )
    if kind == "edit":
        env.emit({"type": "human_review", "action": "review_note", "response": kind})
        return {"best_note": value}
    if kind == "response":
        return (yield from retrieve_more(state, env, value, goto))
    env.emit({"type": "human_review", "action": "review_note", "response": kind})
    return {}


def retrieve_more(state: dict[str, Any], env: Env, query: str, goto: str) -> RoutingStepGen:
    """A person's query: its passages, the note updated from them (taken as the best note: the
    person asked for them), then back to ``goto`` for the next review."""
    if not can_retrieve_more(env):
        raise ConfigError(f"{env.deps.method} cannot retrieve more for a review: no note update")
    passages = yield Search(query, env.ctx.top_k)
    update = yield from updated_note(state, env, passages)
    note = update.get("candidate_note") or state.get("best_note") or ""
    env.emit({"type": "human_review", "response": "response", "query": query, "note": note})
    return Command(
        goto=goto,
        update={
            "answer": None,  # the answer is written again (graphs.assemble.build's edge after answer)
            "best_note": note,
            "passages": passages,
            "query_log": [query],
            "passage_ids": [p["id"] for p in passages],
            "seen": [env.profile.passage_key(p) for p in passages],
        },
    )


def review_answer(state: dict[str, Any], env: Env) -> RoutingStepGen:
    """The final answer's review (a step after ``answer`` when ``human_review`` is answer or
    both; a no-op otherwise)."""
    if not reviews(env.ctx, "answer") or state.get("answer") is None:
        return {}
    kind, value = ask_human(
        "review_answer",
        {"question": state.get("question"), "answer": state["answer"]},
        "Review the answer: accept it, edit it, or send a query to retrieve more and answer again.",
        respond=can_retrieve_more(env) and state.get("best_note") is not None,
        field="answer",
    )
    env.emit({"type": "human_review", "action": "review_answer", "response": kind})
    if kind == "edit":
        messages = state.get("messages") or []
        last = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
        # the same id: add_messages replaces the streamed answer instead of adding a second one
        return {"answer": value, "messages": [AIMessage(value, id=last.id if last else None)]}
    if kind == "response":
        return (yield from retrieve_more(state, env, value, "answer"))
    return {}
