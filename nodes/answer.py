"""The task-oriented generator every method ends with."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langchain_core.messages import AIMessage
from langgraph.types import Command

from noterag.core.step import Ask, Env, RoutingStepGen, reply_text
from noterag.nodes.human import ANSWER, review_note, reviews

# What each answer-prompt slot is filled with; a prompt uses the slots it declares (the note
# methods: the best note only; ReSP: its memory queues; vanilla RAG: the passages).
_SLOTS: dict[str, Callable[[dict[str, Any], Env], str]] = {
    "query": lambda state, env: state["question"],
    "note": lambda state, env: state["best_note"],
    "memory": lambda state, env: state["memory"],
    "refs": lambda state, env: env.profile.format_passages(state["passages"]),
}


def answer(state: dict[str, Any], env: Env) -> RoutingStepGen:
    """Answer the question with the task's prompt, from what that prompt reads (the best note,
    the memory, the passages or the question alone). This is the one call whose tokens stream
    to ``stream_mode="messages"``. The answer is also appended to ``messages`` as an AI message
    (what a chat UI shows) with the streamed reply's id, so the messages stream, which already
    carried its tokens, does not send it again.

    With ``human_review`` note or both, a person first reviews the note the prompt reads
    (``nodes.human``): the answer is written from the note as reviewed."""
    task = state.get("task") or env.ctx.task
    prompt = env.prompts.answer_for(task)
    reviewed: dict[str, Any] = {}
    if "note" in prompt.slots and reviews(env.ctx, "note"):
        outcome = yield from review_note(state, env, goto=ANSWER)
        if isinstance(outcome, Command):
            return outcome
        reviewed = outcome
        state = {**state, **reviewed}
    reply = yield Ask(
        "answer",
        prompt.format(**{slot: _SLOTS[slot](state, env) for slot in prompt.slots}),
        stream=True,
        verbatim=True,  # the answer is the reply, stripped
    )
    text = reply_text(reply).strip()
    update: dict[str, Any] = reviewed | {
        "answer": text,
        "question": state["question"],
        "messages": [AIMessage(text, id=reply.id)],
    }
    env.emit({"type": "answer", "answer": text})
    return update
