"""The retrieval step every method shares."""

from __future__ import annotations

from itertools import chain, zip_longest
from typing import Any

from noterag.core.state import Passage
from noterag.core.step import Env, Search, StepGen


def retrieve(state: dict[str, Any], env: Env) -> StepGen:
    """Top-k passages for each of the step's queries (the question itself at first), searched
    concurrently, their rankings fused round-robin (rank 1 of every query, then rank 2, ...);
    inside the note loop only the passages the profile keeps go on (paper: the first k not
    seen before, so a step reads k passages as in the papers however many questions it asked)."""
    queries = state["queries"] if state.get("queries") is not None else [state["question"]]
    results: list[list[Passage]] = yield [Search(q, env.ctx.top_k) for q in queries]
    found = _interleave(results, env.profile.passage_key)
    in_loop = state.get("best_note") is not None
    if in_loop:
        # A method without a passage cap (Amber) has no max_passages field: cap None.
        cap = env.profile.cap(getattr(env.ctx, "max_passages", None))
        found = env.profile.select_passages(found, set(state.get("seen", [])), cap, env.ctx.top_k)
    env.emit(
        {
            "type": "passages",
            "step": state.get("steps", 0) + in_loop,
            "queries": queries,
            "passages": [{"id": p["id"], "title": p["title"]} for p in found],
        }
    )
    return {
        "passages": found,
        "passage_ids": [p["id"] for p in found],
        "seen": [env.profile.passage_key(p) for p in found],
    }


def _interleave(results: list[list[Passage]], key: Any) -> list[Passage]:
    """Round-robin fusion: rank 1 of every query, then rank 2, ...; trimming to k keeps each
    query's best passages. A passage found by two queries of one step appears once. (Not
    reciprocal-rank fusion: with two lists of equal length, RRF orders the same way except
    where a passage is in both, and round-robin needs no constant.)"""
    if len(results) == 1:
        return list(results[0])
    out, keys = [], set()
    for passage in chain.from_iterable(zip_longest(*results)):
        if passage is not None and key(passage) not in keys:
            keys.add(key(passage))
            out.append(passage)
    return out
