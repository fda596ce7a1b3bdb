"""Self-Refine driven by scripted models: one search, the refinement call (the authors' file,
whole prompt compared), the answer from the refinement only (Adaptive-Note's generator), tasks,
both profiles, cost, trace, events, async, roles; and one run of the local model."""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any

import pytest

from noterag.base.errors import ConfigError
from noterag.graphs import self_refine
from scripted import (
    QUESTION,
    VELMORA_ROWS,
    KeywordRetriever,
    ScriptedModel,
    custom_events,
    generator_prompt,
    numbered,
    official_refs,
    passages,
    progress_of,
    ranked,
    run_recorded,
    vendored,
)

CORPUS = passages(*VELMORA_ROWS)
SUMMARY = "Summary: the Velmora Bridge was designed by Aurelio Fenwick.\nAnalysis: no birth year."
SCRIPT = {"refine": f"\n{SUMMARY}  ", "answer": "1871"}


top = partial(ranked, CORPUS, QUESTION)  # top(k): the passages ranked first, in order
run = partial(run_recorded, self_refine.build, CORPUS, SCRIPT)  # -> (output, model, retriever)


def test_one_search_the_refinement_then_the_answer():
    out, model, retriever = run()
    assert model.stages == ["refine", "answer"]
    assert retriever.queries == [(QUESTION, 5)]
    assert out["passage_ids"] == [p["id"] for p in top(5)]
    assert out["best_note"] == SUMMARY and out["answer"] == "1871"
    assert out["llm_calls"] == len(model.calls) == 2
    assert out["prompt_tokens"] > 0 and out["completion_tokens"] > 0
    assert out["stop_reason"] == "single pass (the baseline has no loop)"
    assert out.get("fallbacks", {}) == {}


def test_both_prompts_whole():
    _, model, _ = run()
    assert model.calls == [
        ("refine", vendored("self_refine", query=QUESTION, refs=numbered(top(5)))),
        # Adaptive-Note's generator (paper, Table A4: Multi-hop QA), the refinement as its note
        ("answer", generator_prompt(SUMMARY)),
    ]
    assert model.calls[0][1].startswith("Complete the following task:\nThe questions that need")
    assert not any(p["text"] in model.calls[1][1] for p in top(5))


def test_official_profile_sends_the_files_with_the_official_passage_format():
    _, model, _ = run(profile="official", top_k=1)
    assert model.calls == [
        ("refine", vendored("self_refine", query=QUESTION, refs=official_refs(top(1)))),
        ("answer", vendored("gen_answer", query=QUESTION, note=SUMMARY)),
    ]


def test_asqa_official_answer_is_the_asqa_file():
    _, model, _ = run(graph_input={"question": QUESTION, "task": "asqa"}, profile="official")
    assert model.prompts_for("answer") == [
        vendored("gen_answer_asqa", query=QUESTION, note=SUMMARY)
    ]


def test_crud_is_refused_in_one_line():
    model = ScriptedModel(script=SCRIPT)
    graph = self_refine.build(model=model, retriever=KeywordRetriever(passages=CORPUS))
    with pytest.raises(
        ConfigError, match=r"^self-refine answers tasks multihop, asqa, strategyqa, not 'crud' "
    ):
        graph.invoke({"question": QUESTION, "task": "crud"})
    assert model.calls == []


def test_the_trace_has_one_entry_with_the_refinement():
    out, _, _ = run()
    assert out["trace"] == [
        {
            "step": 0,
            "queries": [QUESTION],
            "new_passage_ids": [p["id"] for p in top(5)],
            "refinement": SUMMARY,
            "llm_calls": 1,
        }
    ]


def test_progress_events():
    graph = self_refine.build(
        model=ScriptedModel(script=SCRIPT), retriever=KeywordRetriever(passages=CORPUS)
    )
    events = custom_events(graph, {"question": QUESTION})
    assert [e["type"] for e in events] == ["passages", "refinement", "answer"]
    assert events[1] == {"type": "refinement", "step": 0, "passages": 5, "refinement": SUMMARY}
    line = progress_of(self_refine.SPEC)["refinement"](events[1])
    assert line == f"refined 5 passages into a summary ({len(SUMMARY.split())} words)"


def test_async_run_makes_the_same_calls():
    expected, by_invoke, _ = run()
    model = ScriptedModel(script=SCRIPT)
    out = asyncio.run(
        self_refine.build(model=model, retriever=KeywordRetriever(passages=CORPUS)).ainvoke(
            {"question": QUESTION}
        )
    )
    assert model.calls == by_invoke.calls
    for key in ("answer", "best_note", "trace", "llm_calls", "stop_reason", "passage_ids"):
        assert out[key] == expected[key], key


def test_each_role_can_have_its_own_model():
    refiner, answerer = ScriptedModel(script=SCRIPT), ScriptedModel(script=SCRIPT)
    self_refine.build(
        model=answerer, retriever=KeywordRetriever(passages=CORPUS), refine_model=refiner
    ).invoke({"question": QUESTION})
    assert refiner.stages == ["refine"] and answerer.stages == ["answer"]


@pytest.mark.e2e
def test_local_model_end_to_end(local_model: Any):
    from noterag.retrievers import load_retriever
    from noterag.retrievers.sample import sample_index, sample_questions

    graph = self_refine.build(model=local_model, retriever=load_retriever(f"bm25:{sample_index()}"))
    out = graph.invoke({"question": sample_questions()[0]["question"]}, context={"max_tokens": 96})
    assert out["answer"].strip() and out["best_note"].strip()
    assert out["llm_calls"] == 2 and len(out["passage_ids"]) == 5
    assert out["trace"][0]["refinement"] == out["best_note"]
    assert out["stop_reason"] == "single pass (the baseline has no loop)"
