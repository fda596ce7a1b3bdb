"""Issue 42, defect 1: a run's call budget (noterag.core.budget). Lists written into a thread's
state (candidates, summaries, passages) made one step call the model once per item or pair:
SuRe's verify 1,600 times over 40 written candidates, REPLUG once per written passage. Every
run now stops at a budget its settings give, before the call past it, with a clear reason."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from test_sure import script

from noterag.base.errors import CallBudgetError
from noterag.core.budget import REJECT_CALLS, REVIEW_REJECTS, budget, generic_calls
from noterag.registry.methods import METHODS, build_graph
from scripted import QUESTION, VELMORA_ROWS, KeywordRetriever, ScriptedModel, passages

CORPUS = passages(*VELMORA_ROWS)


def _thread(method: str, model: ScriptedModel, **context: Any) -> tuple[Any, dict[str, Any]]:
    graph = build_graph(
        method,
        model=model,
        retriever=KeywordRetriever(passages=CORPUS),
        checkpointer=InMemorySaver(),
    )
    config: dict[str, Any] = {"configurable": {"thread_id": "t"}}
    graph.invoke({"question": QUESTION}, config, context=context or None)
    return graph, config


def test_written_candidates_stop_sure_at_its_budget_before_any_call() -> None:
    """The issue's attack: 40 candidates and summaries written as the summarize step, so that
    verify runs next. Before the fix: 40 validations and 1,560 rankings, in one request."""
    model = ScriptedModel(script=script())
    graph, config = _thread("sure", model)
    first = len(model.calls)
    assert first == 7  # 1 + 2K + K(K-1) at K = 2
    written = [f"answer {i}" for i in range(40)]
    graph.update_state(
        config,
        {"candidates": written, "summaries": written, "scores": None, "stop_reason": None},
        as_node="summarize",
    )
    assert graph.get_state(config).next == ("verify",)
    with pytest.raises(CallBudgetError, match=r"call budget of 8 model calls") as raised:
        graph.invoke(None, config)
    assert "'verify' asked for 1,600 more" in str(raised.value)
    assert len(model.calls) == first  # stopped before the first call past it


def test_written_passages_stop_replug_at_its_budget() -> None:
    model = ScriptedModel.for_method("replug")
    graph, config = _thread("replug", model, top_k=3)
    first = len(model.calls)
    assert first == 3  # one pass per passage
    many = [{"id": str(i), "title": "t", "text": "x"} for i in range(1000)]
    graph.update_state(config, {"passages": many, "stop_reason": None}, as_node="stop_check")
    with pytest.raises(CallBudgetError, match="call budget of 4 model calls"):
        graph.invoke(None, config, context={"top_k": 3})
    assert len(model.calls) == first


def test_the_budget_follows_the_settings_and_counts_the_turn() -> None:
    """SuRe's grows with K as its algorithm does; a follow-up turn starts counting again (its
    question step resets llm_calls), so a thread's turns each have the whole budget."""
    sure = METHODS["sure"]
    assert budget(sure.calls, sure.context(n_candidates=2)) == 7 + 1
    assert budget(sure.calls, sure.context(n_candidates=26)) == 703 + 1
    reviewed = sure.context(n_candidates=2, human_review="answer")
    assert budget(sure.calls, reviewed) == 8 + REVIEW_REJECTS * REJECT_CALLS
    # a method without its own: (max_steps + 1) iterations x (roles + 1) x top_k
    roles = len(METHODS["deepnote"].roles)
    deepnote = METHODS["deepnote"].context(max_steps=3, top_k=5)
    assert generic_calls(roles)(deepnote) == (3 + 1) * (roles + 1) * 5
    assert (
        generic_calls(roles)(deepnote.__class__(max_steps=20, top_k=100)) == 21 * (roles + 1) * 100
    )
    model = ScriptedModel(script=script())
    graph, config = _thread("sure", model)
    for _ in range(3):  # three more turns, each within its own budget
        out = graph.invoke({"question": QUESTION}, config)
        assert out["llm_calls"] <= 8


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_method_runs_its_defaults_within_its_budget(method: str) -> None:
    """A contract over the registry: a whole run at the default settings (and at the largest
    loop settings, tests/test_server_bounds.py) never reaches the budget."""
    spec = METHODS[method]
    model = ScriptedModel.for_method(method)
    out = build_graph(method, model=model, retriever=KeywordRetriever(passages=CORPUS)).invoke(
        {"question": QUESTION}
    )
    calls = spec.calls or generic_calls(len(spec.roles))
    assert 0 < out["llm_calls"] <= budget(calls, spec.context())
