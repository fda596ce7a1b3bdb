"""What keeps a step's orchestration cheap without changing what it does (issue 15, item 5):
a step node opens no run of its own inside LangGraph's node run; the nodes and routers that
only compute run on the event loop under ainvoke (no worker-thread hop) and still run under
invoke; a run's context is resolved once, yet a context changed between runs is read anew."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from typing import Any, Literal

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

import noterag
import noterag.core.question as question_module
from noterag.base.errors import ConfigError
from noterag.core.context import DeepNoteContext
from noterag.core.decision import Decision
from noterag.core.step import on_loop, run_context
from scripted import (
    QUESTION,
    VELMORA_ROWS,
    KeywordRetriever,
    ScriptedModel,
    passages,
    velmora_script,
)


class CountState(TypedDict):
    n: int


def deepnote(**script: Any) -> Any:
    model = ScriptedModel(script=velmora_script(**script))
    return noterag.build_graph(
        "deepnote", model=model, retriever=KeywordRetriever(passages=passages(*VELMORA_ROWS))
    )


class Runs(BaseCallbackHandler):
    """The chain runs LangGraph and noterag open, by name, and the threads they start on."""

    run_inline = True

    def __init__(self) -> None:
        self.names: Counter[str] = Counter()
        self.threads: dict[str, set[int]] = {}

    def on_chain_start(self, serialized: Any, inputs: Any, **kw: Any) -> None:
        name = kw.get("name") or ""
        self.names[name] += 1
        self.threads.setdefault(name, set()).add(threading.get_ident())


def node_runs(state: dict[str, Any]) -> Counter[str]:
    """How often each DeepNote node ran, from the run's trace and counters."""
    steps = state["steps"]
    return Counter(
        {
            "question": 1,
            "init_note": 1,
            "answer": 1,
            "refine_query": steps,
            "accumulate": steps,
            "review": steps,
        }
    )


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
def test_a_step_node_is_one_run_and_computing_steps_stay_on_the_event_loop(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    bodies: dict[str, set[int]] = {}
    calls: Counter[str] = Counter()

    def recorded(name: str, func: Any) -> Any:
        def body(*args: Any) -> Any:
            bodies.setdefault(name, set()).add(threading.get_ident())
            calls[name] += 1
            return func(*args)

        return body

    monkeypatch.setattr(question_module, "ask", recorded("question", question_module.ask))
    # counted where a deciding step applies its rule (the rule itself is declared in the
    # method's spec, and a step deciding by another function is refused at build)
    monkeypatch.setattr(Decision, "settle", recorded("stop_check", Decision.settle))
    runs = Runs()
    graph = deepnote()
    config: Any = {"callbacks": [runs]}
    if mode == "invoke":
        state = graph.invoke({"question": QUESTION}, config)
    else:
        state = asyncio.run(graph.ainvoke({"question": QUESTION}, config))
    assert state["steps"] >= 1 and state["answer"]
    # one run per node run: the node's own (a RunnableLambda used to open a second inside it)
    for name, count in node_runs(state).items():
        assert runs.names[name] == count, name
    # the stop rule is applied inside the steps that decide (init_note, review): one graph
    # step each, no routing step or router run of its own
    assert calls["stop_check"] == state["steps"] + 1
    assert not {"stop_check", "retrieve", "after_retrieve"} & set(runs.names)
    # under ainvoke (asyncio.run runs the loop in this thread) the bodies that only compute run
    # on the event loop: LangGraph would run a plain sync function in a worker thread
    if mode == "ainvoke":
        assert bodies == {
            "question": {threading.get_ident()},
            "stop_check": {threading.get_ident()},
        }


def test_on_loop_runs_a_router_and_a_node_on_the_event_loop_and_under_invoke() -> None:
    threads: list[tuple[str, int]] = []

    def count(state: CountState) -> dict[str, int]:
        threads.append(("count", threading.get_ident()))
        return {"n": state["n"] + 1}

    def again(state: CountState) -> Literal["count", "__end__"]:
        threads.append(("again", threading.get_ident()))
        return "count" if state["n"] < 3 else END

    builder = StateGraph(CountState)
    builder.add_node("count", on_loop(count))
    builder.add_edge(START, "count")
    builder.add_conditional_edges("count", on_loop(again, trace=True))
    graph = builder.compile()
    assert asyncio.run(graph.ainvoke({"n": 0})) == {"n": 3}
    assert {thread for _, thread in threads} == {threading.get_ident()}
    assert [name for name, _ in threads] == ["count", "again"] * 3
    assert graph.invoke({"n": 1}) == {"n": 3}
    # the router's declared destinations are read through on_loop as from the function
    assert {e.target for e in graph.get_graph().edges if e.source == "count"} == {"count", END}


def test_the_context_is_resolved_once_per_context_object() -> None:
    assert run_context(DeepNoteContext, None) is run_context(DeepNoteContext, None)
    assert run_context(DeepNoteContext, None) == DeepNoteContext()
    given = {"max_steps": 1}
    first = run_context(DeepNoteContext, given)
    assert first.max_steps == 1 and run_context(DeepNoteContext, given) is first
    given["max_steps"] = 2  # changed in place between runs: read anew
    assert run_context(DeepNoteContext, given).max_steps == 2
    given["prompts"] = {"refine_query": "a"}
    assert run_context(DeepNoteContext, given).prompts == {"refine_query": "a"}
    given["prompts"]["refine_query"] = "b"  # a nested change too
    assert run_context(DeepNoteContext, given).prompts == {"refine_query": "b"}
    instance = DeepNoteContext(max_steps=4)
    assert run_context(DeepNoteContext, instance) is instance
    for _ in range(2):  # an invalid context is refused every time, never cached
        with pytest.raises(ConfigError, match="unknown context field"):
            run_context(DeepNoteContext, {"max_stepz": 1})


def test_a_context_dict_reused_and_changed_between_runs_steers_each_run() -> None:
    graph = deepnote()
    context: dict[str, Any] = {"max_steps": 1, "max_failures": 5}
    assert graph.invoke({"question": QUESTION}, context=context)["steps"] == 1
    context["max_steps"] = 2
    assert graph.invoke({"question": QUESTION}, context=context)["steps"] == 2
