"""ReSP's steps (Jiang et al., 2024, Algorithm 1): the dual-function summarizer and the
reasoner's two functions, judge and plan. Retrieval and the generator are the shared steps.

Model stages: ``global_summary`` and ``local_summary`` (role ``summarizer``), ``judge`` and
``plan`` (role ``reasoner``), ``answer`` (role ``generator``); see graphs/resp.py.

Events and trace entries number iterations from 0, as the shared retrieve step and the note
loops do: step 0 retrieves for the question itself, step k for the k-th planned sub-question.
``steps`` counts the iterations run (Algorithm 1's run_cnt).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from noterag.core.parsing import parse_sub_question, parse_yes_no, until_done
from noterag.core.state import LocalPathway
from noterag.core.step import Ask, Effect, Env, StepGen


def combined_memory(global_memory: Sequence[str], local_memory: Sequence[LocalPathway]) -> str:
    """Table 1's "combined memory queues": the global evidence summaries, then each retrieved
    sub-question with its response, one entry per line."""
    entries = [*global_memory, *(f"{e['sub_question']} {e['response']}" for e in local_memory)]
    return "\n".join(entry for entry in entries if entry)


def summarize(state: dict[str, Any], env: Env) -> StepGen:
    """Dual-function summarizer over this iteration's documents D_q: the global evidence
    summary for the question Q, and, once the sub-question q is not Q itself, the local pathway
    response for q, stored with q. The two calls run concurrently."""
    question, refs = state["question"], env.profile.format_passages(state["passages"])
    sub_question = state.get("sub_question")
    asks: list[Effect] = [
        Ask("global_summary", env.prompts.global_evidence.format(refs=refs, query=question))
    ]
    if sub_question is not None:  # Algorithm 1: "if q != Q"
        asks.append(
            Ask(
                "local_summary",
                env.prompts.local_pathway.format(sub_question=sub_question, refs=refs),
            )
        )
    replies = yield asks
    summary = until_done(replies[0])
    local = None
    if sub_question is not None:
        local = LocalPathway(sub_question=sub_question, response=replies[1].strip())
    global_memory = [*state.get("global_memory", []), summary]
    local_memory = [*state.get("local_memory", []), *([local] if local else [])]
    step = state.get("steps", 0)
    env.emit(
        {
            "type": "summaries",
            "step": step,
            "sub_question": sub_question or question,
            "global_summary": summary,
            "local_summary": local,
        }
    )
    return {
        "global_memory": [summary],
        "local_memory": [local] if local else [],
        "memory": combined_memory(global_memory, local_memory),
        "steps": step + 1,
        "summaries": {"global": summary, "local": local},
    }


def judge(state: dict[str, Any], env: Env) -> StepGen:
    """Reasoner, judge: can the combined memory queues answer Q completely and accurately?
    An unreadable reply counts as "No" (the loop is bounded by max_steps) and is counted."""
    reply = yield Ask(
        "judge", env.prompts.judge.format(query=state["question"], memory=state["memory"])
    )
    verdict = parse_yes_no(reply)
    step, summaries = state["steps"] - 1, state["summaries"]
    env.emit(
        {"type": "judgment", "step": step, "sufficient": verdict.accepted, "parsed": verdict.parsed}
    )
    update: dict[str, Any] = {
        "sufficient": verdict.accepted,
        "trace": [
            {
                "step": step,
                "sub_question": state.get("sub_question") or state["question"],
                "passage_ids": [p["id"] for p in state["passages"]],
                "global_summary": summaries["global"],
                "local_summary": summaries["local"],
                "sufficient": verdict.accepted,
                "judge_parsed": verdict.parsed,
                "refused": None,
                # global summary + judge; a planned sub-question adds its plan and local summary
                "llm_calls": 2 if summaries["local"] is None else 4,
            }
        ],
    }
    if not verdict.parsed:
        update["unparsed_judgments"] = state.get("unparsed_judgments", 0) + 1
    return update


def _key(question: str) -> str:
    return " ".join(re.findall(r"\w+", question.casefold()))


def plan(state: dict[str, Any], env: Env) -> StepGen:
    """Reasoner, plan: the next sub-question Q*, which must not be one already retrieved (the
    question itself or a logged sub-question). A plan that repeats one, or names none, gives
    the loop nothing new to retrieve: it is refused, the loop stops and the generator answers
    (re-asking the same prompt would mostly repeat the same reply)."""
    question, log = state["question"], state.get("query_log", [])
    sub_question = parse_sub_question(
        (yield Ask("plan", env.prompts.plan.format(memory=state["memory"], query=question)))
    )
    refused = ""
    if not sub_question:
        refused = "the plan named no sub-question"
    elif _key(sub_question) in {_key(q) for q in (question, *log)}:
        refused = f"the plan repeated an already retrieved sub-question: {sub_question!r}"
    step = state["steps"]
    env.emit(
        {
            "type": "sub_question",
            "step": step,
            "sub_question": sub_question,
            "accepted": not refused,
            "reason": refused,
        }
    )
    if refused:
        return {
            "stalled": refused,
            "trace": [
                {
                    "step": step,
                    "sub_question": sub_question,
                    "passage_ids": [],
                    "global_summary": None,
                    "local_summary": None,
                    "sufficient": None,
                    "judge_parsed": None,
                    "refused": refused,
                    "llm_calls": 1,
                }
            ],
        }
    return {"sub_question": sub_question, "queries": [sub_question], "query_log": [sub_question]}
