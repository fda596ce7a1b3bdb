"""The note-centric steps of Adaptive-Note and DeepNote (the papers' names in brackets).

Each step is one paper step: it yields its model call (see ``noterag.core.step``) and returns
the state update. Method differences live in the prompts, the profile and the stop rule.
"""

from __future__ import annotations

from typing import Any

from noterag.core.state import Passage
from noterag.core.step import Ask, Env, StepGen
from noterag.nodes.retrieve import retrieve


def init_note(state: dict[str, Any], env: Env) -> StepGen:
    """Note initialization: P_0 = retrieve(q), then the first note from P_0 (``first_note``)."""
    found = yield from retrieve(state, env)
    return found | (yield from first_note(state, env, found["passages"]))


def first_note(state: dict[str, Any], env: Env, passages: list[Passage]) -> StepGen:
    """N_0 = LLM(prompt_init(q, P_0)), stored as the best note (M_opt). The initial note is
    never reviewed."""
    note = ""
    if passages or not env.profile.skip_empty_steps:
        note = yield Ask(
            "init_note",
            env.prompts.init_note.format(
                query=state["question"], refs=env.profile.format_passages(passages)
            ),
        )
        note = note.strip() if env.profile.skip_empty_steps else note
    env.emit({"type": "note", "step": 0, "note": note, "accepted": True})
    return {
        "best_note": note,
        "steps": 0,
        "failures": 0,
        "trace": [
            {
                "step": 0,
                "queries": [state["question"]],
                "new_passage_ids": [p["id"] for p in passages],
                "candidate_note": note,
                "verdict": None,
                "llm_calls": 1 if passages or not env.profile.skip_empty_steps else 0,
            }
        ],
    }


def refine_query(state: dict[str, Any], env: Env) -> StepGen:
    """Query refinement (iterative information collection): new questions from the question,
    the best note and the questions already asked (q_t not in Q_ask)."""
    reply = yield Ask(
        "refine_query",
        env.prompts.refine_query.format(
            query=state["question"],
            note=state["best_note"],
            query_log=env.profile.format_query_log(state.get("query_log", [])),
        ),
    )
    logged, queries = env.profile.new_queries(reply, state["question"], state.get("query_log", []))
    env.emit({"type": "queries", "step": state["steps"] + 1, "queries": queries})
    return {"query_log": logged, "queries": queries}


def accumulate(state: dict[str, Any], env: Env) -> StepGen:
    """Knowledge accumulation: P_t = retrieve(q_t) (the passages the loop has not read), then
    the updated note from P_t (``updated_note``)."""
    found = yield from retrieve(state, env)
    return found | (yield from updated_note(state, env, found["passages"]))


def updated_note(state: dict[str, Any], env: Env, passages: list[Passage]) -> StepGen:
    """Note updating: N_t = LLM(prompt_update(q, P_t, M_opt)), the candidate the review judges."""
    if not passages and env.profile.skip_empty_steps:
        return {"candidate_note": None}
    reply = yield Ask(
        "accumulate",
        env.prompts.accumulate.format(
            query=state["question"],
            refs=env.profile.format_passages(passages),
            note=state["best_note"],
        ),
    )
    return {"candidate_note": env.profile.clean_note(reply)}


def review(state: dict[str, Any], env: Env) -> StepGen:
    """Adaptive memory review (adaptive retrieval decision): does N_t improve on M_opt?
    True: N_t becomes the best note; False: one more failed step."""
    candidate = state.get("candidate_note")
    step = state["steps"] + 1
    calls = 1 if candidate is None else 3  # refine_query (+ accumulate + review)
    if candidate is None:
        accepted, parsed, reason = False, True, "no new passages"
    else:
        reply = yield Ask(
            "review",
            env.prompts.review.format(
                query=state["question"], best_note=state["best_note"], new_note=candidate
            ),
        )
        verdict = env.profile.parse_verdict(reply)
        accepted, parsed = verdict.accepted, verdict.parsed
        reason = "reviewed" if parsed else "verdict did not parse"
    env.emit(
        {
            "type": "verdict",
            "step": step,
            "accepted": accepted,
            "parsed": parsed,
            "reason": reason,
            "note": candidate,
        }
    )
    update: dict[str, Any] = {
        "steps": step,
        "failures": state["failures"] + (not accepted),
        "trace": [
            {
                "step": step,
                "queries": state.get("queries", []),
                "new_passage_ids": [p["id"] for p in state.get("passages", [])],
                "candidate_note": candidate,
                "verdict": accepted,
                "verdict_parsed": parsed,
                "reason": reason,
                "llm_calls": calls,
            }
        ],
    }
    if accepted:
        update["best_note"] = candidate
    if not parsed:
        update["unparsed_verdicts"] = state.get("unparsed_verdicts", 0) + 1
    return update
