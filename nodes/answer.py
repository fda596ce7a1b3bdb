"""The task-oriented generator every method ends with."""

from __future__ import annotations

from typing import Any

from noterag.nodes.step import Ask, Env, StepGen, emit


def answer(state: dict[str, Any], env: Env) -> StepGen:
    """Answer the question from the best note only, with the task's prompt. This is the one
    call whose tokens stream to ``stream_mode="messages"``."""
    task = state.get("task") or env.ctx.task
    reply = yield Ask(
        "answer",
        env.prompts.answer_for(task).format(query=state["question"], note=state["best_note"]),
        stream=True,
    )
    text = reply.strip()
    update: dict[str, Any] = {"answer": text, "question": state["question"]}
    if env.deps.stop_rule is not None:
        update["stop_reason"] = env.deps.stop_rule(state, env.ctx, env.profile) or ""
    emit({"type": "answer", "answer": text})
    return update
