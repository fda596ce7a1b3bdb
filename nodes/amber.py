"""Amber's own steps (Qin et al., 2025): the multi-granular content filter, the agent-based memory
updater and the adaptive information collector's sufficiency decision (the paper's names).

Amber reuses the note methods' shared steps: ``retrieve``, their first note (memory
initialization) and note update (memory drafting) over the filtered passages, ``review`` (memory
updating: does the new memory improve on the best one, M_opt?), ``refine_query`` (the new
question, with the query log) and ``answer``. The state key of M_opt is ``best_note``, as for
every note method.

What the paper leaves open, decided here:
- both filters judge a passage against the original question q (Section 3.5: "relevant to q"),
  one passage per call, formatted as in the other prompts;
- agent_updater off (w/o AMU) removes the three agents only: the draft is the candidate and is
  still compared with M_opt;
- t = 0: M_0 is empty, so the revised initial memory becomes M_opt without a comparison (as
  Adaptive-Note, whose prompts Amber builds on, never reviews its initial note);
- a chunk-filter reply that is no NLI verdict keeps its passage (a filter that loses evidence
  does more harm than one that lets noise through) and counts in ``unparsed_filters``; an empty
  sentence-filter reply keeps the passage's text;
- an iteration with nothing new to read (every passage seen before or filtered out) makes no
  memory call: no draft, no agents, no comparison (a failed step, as in the other note methods);
- the collector asks whether M_opt is sufficient only when the iteration changed M_opt: an
  unchanged memory was already judged insufficient (or is still empty), so it goes straight to
  a new query. It does not ask when the iteration cap ends the loop anyway;
- a sufficiency reply without a status counts as insufficient (keep collecting, within the cap).
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from typing import Any

from noterag.core.parsing import parse_nli
from noterag.core.state import Passage
from noterag.core.step import Ask, Effect, Env, StepGen
from noterag.nodes.notes import first_note, review, updated_note


def _step(state: Mapping[str, Any]) -> int:
    """The current iteration t: each finished iteration left one trace entry."""
    return len(state.get("trace", []))


def chunk_filter(state: dict[str, Any], env: Env) -> StepGen:
    """Chunk-level filter: an NLI verdict F(q, c_i) -> useful | useless for every retrieved
    passage, all of them concurrently; the useless ones are dropped."""
    passages = state["passages"]
    dropped: list[Passage] = []
    if not env.ctx.chunk_filter or not passages:
        kept, unparsed = list(passages), 0
    else:
        replies = yield [
            Ask(
                "filter",
                env.prompts.chunk_filter.format(
                    External_Knowledge=env.profile.format_passages([p]), Question=state["question"]
                ),
            )
            for p in passages
        ]
        kept, dropped, unparsed = [], [], 0
        for passage, reply in zip(passages, replies):
            verdict = parse_nli(reply)
            useful = verdict.accepted or not verdict.parsed
            (kept if useful else dropped).append(passage)
            unparsed += not verdict.parsed
            env.emit(
                {
                    "type": "filter",
                    "step": _step(state),
                    "id": passage["id"],
                    "title": passage["title"],
                    "useful": useful,
                    "parsed": verdict.parsed,
                }
            )
    return {
        "passages": kept,
        "filtered": {"kept": [p["id"] for p in kept], "dropped": [p["id"] for p in dropped]},
        "unparsed_filters": state.get("unparsed_filters", 0) + unparsed,
    }


def sentence_filter(state: dict[str, Any], env: Env) -> StepGen:
    """Sentence-level filter: the helpful sentences of every kept passage replace its text, all
    passages concurrently."""
    passages = state["passages"]
    if not env.ctx.sentence_filter or not passages:
        return {}
    replies = yield [
        Ask(
            "extract",
            env.prompts.sentence_filter.format(
                query=state["question"], context=env.profile.format_passages([p])
            ),
        )
        for p in passages
    ]
    extracted = [
        {**p, "text": reply.strip()} if reply.strip() else p for p, reply in zip(passages, replies)
    ]
    env.emit(
        {
            "type": "sentences",
            "step": _step(state),
            "passages": [
                {"id": p["id"], "title": p["title"], "text": p["text"]} for p in extracted
            ],
        }
    )
    return {"passages": extracted}


def init_memory(state: dict[str, Any], env: Env) -> StepGen:
    """Memory initialization (t = 0): the note methods' first note drafts the memory from q and
    the filtered P_0. M_0 is empty, so the draft is the candidate the agents revise."""
    update = yield from first_note(state, env, state["passages"])
    draft = update["best_note"] if state["passages"] else None
    return {"candidate_note": draft, "steps": 0, "failures": 0}


def accumulate(state: dict[str, Any], env: Env) -> StepGen:
    """Memory drafting (t >= 1): the note methods' note update, m = LLM_update(q, P_t, M_opt),
    over the filtered P_t."""
    return (yield from updated_note(state, env, state["passages"]))


def _agent(
    state: dict[str, Any], env: Env, agent: str, **feedback: str
) -> Generator[Effect | list[Effect], Any, str | None]:
    """One agent of the memory updater on the draft (q, P_t, m_{t+1}); None when it is off or
    there is no draft (nothing new was read)."""
    draft = state.get("candidate_note")
    if not env.ctx.agent_updater or draft is None:
        return None
    reply = yield Ask(
        agent,
        getattr(env.prompts, agent).format(
            query=state["question"],
            refs=env.profile.format_passages(state["passages"]),
            note=draft,
            **feedback,
        ),
    )
    env.emit({"type": "memory_review", "step": _step(state), "agent": agent, "text": reply})
    return reply.strip()


def reviewer(state: dict[str, Any], env: Env) -> StepGen:
    """Reviewer: the strengths and weaknesses of the memory draft against q and P_t."""
    info = yield from _agent(state, env, "reviewer")
    return {} if info is None else {"review_info": info}


def challenger(state: dict[str, Any], env: Env) -> StepGen:
    """Challenger: actionable suggestions to improve the draft, from the reviewer's analysis."""
    suggestions = yield from _agent(
        state, env, "challenger", review_info=state.get("review_info", "")
    )
    return {} if suggestions is None else {"suggestions": suggestions}


def refiner(state: dict[str, Any], env: Env) -> StepGen:
    """Refiner: the draft revised with the reviewer's analysis and the challenger's suggestions;
    the result is the candidate memory."""
    refined = yield from _agent(
        state,
        env,
        "refiner",
        review_info=state.get("review_info", ""),
        suggestions=state.get("suggestions", ""),
    )
    return {} if refined is None else {"candidate_note": env.profile.clean_note(refined)}


def memory_update(state: dict[str, Any], env: Env) -> StepGen:
    """Memory updating: from t = 1 the shared review compares the candidate with M_opt
    ({"status": "True"}: it becomes M_opt); at t = 0 the candidate becomes M_opt (M_0 is empty)."""
    if _step(state) > 0:
        update = yield from review(state, env)
        entry = update.pop("trace")[0]
        return update | {"memory_changed": entry["verdict"], "step_entry": entry}
    candidate = state.get("candidate_note")
    reason = "no new passages" if candidate is None else "initial memory"
    env.emit(
        {
            "type": "verdict",
            "step": 0,
            "accepted": candidate is not None,
            "parsed": True,
            "reason": reason,
            "note": candidate,
        }
    )
    entry = {
        "step": 0,
        "queries": [state["question"]],
        "new_passage_ids": [p["id"] for p in state["passages"]],
        "candidate_note": candidate,
        "verdict": None,
        "verdict_parsed": None,
        "reason": reason,
    }
    return {
        "best_note": candidate or "",
        "memory_changed": candidate is not None,
        "step_entry": entry,
    }


def sufficiency(state: dict[str, Any], env: Env) -> StepGen:
    """Adaptive information collector: is M_opt sufficient to answer q? (Our prompt: the paper
    publishes none.) Completes the iteration's trace entry."""
    asked = False
    if iterations_spent(state, env.ctx):
        sufficient, parsed, reason = None, None, "not asked: the last iteration ran"
    elif not state.get("memory_changed"):
        sufficient, parsed, reason = False, None, "not asked: the best memory did not change"
    else:
        reply = yield Ask(
            "sufficiency",
            env.prompts.sufficiency.format(query=state["question"], note=state["best_note"]),
        )
        verdict = env.profile.parse_verdict(reply)
        asked, sufficient, parsed = True, verdict.accepted, verdict.parsed
        reason = "judged" if parsed else "reply did not parse: insufficient"
    env.emit(
        {
            "type": "sufficiency",
            "step": state["steps"],
            "sufficient": sufficient,
            "parsed": parsed,
            "reason": reason,
        }
    )
    # Every call since the previous entry belongs to this iteration (its new query included).
    earlier = sum(entry["llm_calls"] for entry in state.get("trace", []))
    entry = state["step_entry"] | {
        "dropped_passage_ids": state["filtered"]["dropped"],
        "sufficient": sufficient,
        "sufficiency_parsed": parsed,
        "sufficiency_reason": reason,
        "llm_calls": state.get("llm_calls", 0) - earlier + asked,
    }
    return {"sufficient": bool(sufficient), "trace": [entry]}


def iterations_spent(state: Mapping[str, Any], ctx: Any) -> bool:
    """Amber: whether the iteration that just ended was the last one allowed (t + 1 >= max_steps)."""
    return state.get("steps", 0) + 1 >= ctx.max_steps
