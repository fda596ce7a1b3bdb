"""Vanilla RAG, the papers' single-round baseline ("fair top-k" runs set top_k to the mean
number of distinct passages the compared method read):

    P = retrieve(q)                 retrieve   (top_k passages)
    answer = LLM(prompt(q, P))      answer     (the task's prompt, passages formatted by the profile)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langgraph.graph import END, START, StateGraph

from noterag.context import BaselineContext
from noterag.methods import lazy_graph, method_deps
from noterag.nodes.answer import answer
from noterag.nodes.question import question
from noterag.nodes.retrieve import retrieve
from noterag.nodes.step import node
from noterag.prompts import baselines
from noterag.state import BaselineOutput, BaselineState, QuestionInput

NAME = "vanilla"
CONTEXT = BaselineContext
ROLES = ("answer",)


def single_pass(
    name: str,
    prompts: Any,
    steps: Sequence[Callable[..., Any]],
    model: Any,
    retriever: Any,
    role_models: Mapping[str, Any],
) -> Any:
    """A baseline: the question step, ``steps`` once each, in order, then the end."""
    # the papers print no baseline prompts: both profiles send the official files (their
    # passage formats differ; noterag.profiles)
    deps = method_deps(
        name, {"paper": prompts, "official": prompts}, BaselineContext, ROLES, model, retriever,
        role_models,
    )
    graph = StateGraph(
        BaselineState,
        context_schema=BaselineContext,
        input_schema=QuestionInput,
        output_schema=BaselineOutput,
    )
    graph.add_node("question", question)
    graph.add_edge(START, "question")
    previous = "question"
    for step in steps:
        graph.add_node(step.__name__, node(step, deps))
        graph.add_edge(previous, step.__name__)
        previous = step.__name__
    graph.add_edge(previous, END)
    return graph.compile(name=name)


def build(model: Any = None, retriever: Any = None, **role_models: Any) -> Any:
    return single_pass(NAME, baselines.VANILLA, (retrieve, answer), model, retriever, role_models)


__getattr__ = lazy_graph(build, globals())
