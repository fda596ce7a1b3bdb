"""The toy follow-up method's step (tests/test_toy_method.py copies this file to
nodes/toy_followup.py of a copy of the package tree)."""

from __future__ import annotations

from typing import Any

from noterag.core.step import Ask, Env, Search, StepGen


def follow_up(state: dict[str, Any], env: Env) -> StepGen:
    """One follow-up question from the question and what is known (at first the question's
    passages); a reply that is a question is searched and its passages added to what is known,
    any other reply asks none."""
    step = state.get("steps", 0) + 1
    known = state.get("best_note") or "\n".join(p["text"] for p in state.get("passages") or [])
    reply = yield Ask(
        "follow_up",
        env.prompts.follow_up.format(question=state["question"], known=known or "nothing yet"),
    )
    lines = reply.strip().splitlines()
    question = lines[0].strip() if lines else ""
    entry = {"step": step, "reply": reply, "llm_calls": 1}
    if not question.endswith("?"):
        return {"steps": step, "asked_none": True, "best_note": known, "trace": [entry]}
    found = yield Search(question, env.ctx.top_k)
    env.emit({"type": "follow_up", "step": step, "question": question})
    return {
        "steps": step,
        "follow_ups": [question],
        "best_note": "\n".join([known, *(p["text"] for p in found)]).strip(),
        "passage_ids": [p["id"] for p in found],
        "asked_none": False,
        "trace": [entry | {"question": question, "passage_ids": [p["id"] for p in found]}],
    }
