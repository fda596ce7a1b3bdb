"""The baselines' shape: the question step, a fixed sequence of steps once each, the answer.

    question -> [retrieve] -> stop_check (single pass) -> answer

Vanilla RAG and no retrieval are this shape (graphs/vanilla.py, no_retrieval.py), declared
alike by ``declare``; this module declares no method.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langgraph.graph import END, StateGraph

from noterag.core.context import BaselineContext
from noterag.core.decision import Decision, single_pass, stop_check
from noterag.core.spec import Deps, MethodSpec
from noterag.core.state import BaselineOutput, BaselineState
from noterag.core.step import node
from noterag.nodes.answer import answer


def single_pass_trace(state: Mapping[str, Any]) -> dict[str, Any]:
    """The baseline's one trace entry: what it searched and read, and its one model call."""
    searched = state.get("passages") is not None
    return {
        "trace": [
            {
                "step": 0,
                "queries": [state["question"]] if searched else [],
                "new_passage_ids": [p["id"] for p in state.get("passages") or []],
                "llm_calls": 1,
            }
        ]
    }


def wiring(steps: Sequence[Callable[..., Any]]) -> Callable[[StateGraph, Deps], None]:
    """A ``MethodSpec.wire`` running ``steps`` once each, in order, then the answer."""

    def wire(graph: StateGraph, deps: Deps) -> None:
        previous = "question"
        for step in steps:
            graph.add_node(step.__name__, node(step, deps))
            graph.add_edge(previous, step.__name__)
            previous = step.__name__
        check = Decision(single_pass, go_on="answer", record=single_pass_trace)
        graph.add_node("stop_check", stop_check(check, deps))
        graph.add_conditional_edges("stop_check", check.route, check.routes)
        graph.add_edge(previous, "stop_check")
        graph.add_node("answer", node(answer, deps))
        graph.add_edge("answer", END)

    return wire


def declare(
    *,
    name: str,
    title: str,
    summary: str,
    steps: Sequence[Callable[..., Any]],
    prompts: Any,
    trace_view: str,
    retrieves: bool = True,
    flashrag: Any = None,
) -> MethodSpec:
    """A single-pass baseline's ``MethodSpec``: the baselines' settings and schemas, one model
    role (the answer), ``wiring(steps)``, and ``prompts`` for both profiles: the papers print no
    baseline prompts, so both send the official files (their passage formats differ;
    noterag.core.profiles), and the run's official_code setting chooses whose. ``flashrag``:
    the method's prompt set under profile flashrag (FlashRAG's, noterag.prompts.flashrag)."""
    return MethodSpec(
        name=name,
        title=title,
        summary=summary,
        context=BaselineContext,
        state=BaselineState,
        stops=(single_pass,),
        output=BaselineOutput,
        roles=("answer",),
        prompts={"paper": prompts, "official": prompts}
        | ({"flashrag": flashrag} if flashrag is not None else {}),
        wire=wiring(steps),
        trace_view=trace_view,
        retrieves=retrieves,
        official_code="adaptive-note",
    )
