"""A run's settings as its steps read them: the runtime's context (None, a dict or the
dataclass) resolved against the method's settings, an invalid one refused every time, and a
context dict reused and changed between runs read anew by each run."""

from __future__ import annotations

from typing import Any

import pytest

import noterag
from noterag.base.errors import ConfigError
from noterag.core.context import DeepNoteContext
from noterag.core.step import run_context
from scripted import (
    QUESTION,
    VELMORA_ROWS,
    KeywordRetriever,
    ScriptedModel,
    passages,
    velmora_script,
)


def deepnote() -> Any:
    model = ScriptedModel(script=velmora_script())
    return noterag.build_graph(
        "deepnote", model=model, retriever=KeywordRetriever(passages=passages(*VELMORA_ROWS))
    )


def test_a_context_is_resolved_from_none_a_dict_or_the_dataclass() -> None:
    assert run_context(DeepNoteContext, None) == DeepNoteContext()
    assert run_context(DeepNoteContext, {"max_steps": 1}).max_steps == 1
    instance = DeepNoteContext(max_steps=3)
    assert run_context(DeepNoteContext, instance) is instance
    # a configurable setting goes beneath the context: the context's own value wins
    assert run_context(DeepNoteContext, None, {"max_steps": 4}).max_steps == 4
    assert run_context(DeepNoteContext, {"max_steps": 2}, {"max_steps": 4}).max_steps == 2
    for _ in range(2):  # an invalid context is refused every time
        with pytest.raises(ConfigError, match="unknown context field"):
            run_context(DeepNoteContext, {"max_stepz": 1})


def test_a_context_dict_reused_and_changed_between_runs_steers_each_run() -> None:
    graph = deepnote()
    context: dict[str, Any] = {"max_steps": 1, "max_failures": 5}
    assert graph.invoke({"question": QUESTION}, context=context)["steps"] == 1
    context["max_steps"] = 2
    assert graph.invoke({"question": QUESTION}, context=context)["steps"] == 2


@pytest.mark.parametrize("method", noterag.METHODS)
def test_update_state_after_a_finished_run_runs_the_routes_that_read_the_settings(
    method: str,
) -> None:
    # update_state runs the writing node's routes with no run under way (no Runtime): a route
    # that reads the run's settings (the answer's review, REComp's compressor) reads the
    # defaults there instead of failing ("Missing required config key 'N/A'")
    from langgraph.checkpoint.memory import InMemorySaver

    graph = noterag.build_graph(
        method, model=ScriptedModel.for_method(method), checkpointer=InMemorySaver()
    )
    config: Any = {"configurable": {"thread_id": f"update-{method}"}}
    graph.invoke({"question": QUESTION}, config)
    graph.update_state(config, {"answer": "edited"})
    state = graph.get_state(config)
    assert state.values["answer"] == "edited" and state.next == ()
