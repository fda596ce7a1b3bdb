"""Self-Refine driven by scripted models: one search, the refinement call (the authors' file,
whole prompt compared), the answer from the refinement only (Adaptive-Note's generator), tasks,
both profiles, cost, trace, events, async, roles; and one run of the local model."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from pydantic import Field

import noterag.prompts
from noterag.errors import ConfigError
from noterag.graphs import self_refine
from scripted import QUESTION, VELMORA_ROWS, KeywordRetriever, ScriptedModel, passages

CORPUS = passages(*VELMORA_ROWS)
VENDORED = Path(noterag.prompts.__file__).parent / "official" / "thunlp-Adaptive-Note"
SUMMARY = "Summary: the Velmora Bridge was designed by Aurelio Fenwick.\nAnalysis: no birth year."
SCRIPT = {"refine": f"\n{SUMMARY}  ", "answer": "1871"}


class RecordingRetriever(KeywordRetriever):
    queries: list[tuple[str, int | None]] = Field(default_factory=list)

    def _get_relevant_documents(self, query: str, *, run_manager: Any = None, k: int | None = None):
        self.queries.append((query, k))
        return super()._get_relevant_documents(query, run_manager=run_manager, k=k)


def vendored(file: str, **values: str) -> str:
    """The authors' prompt file rendered as their code renders it: ``read().format(**values)``."""
    with (VENDORED / file).open(encoding="utf-8", newline="") as handle:
        return handle.read().format(**values)


def top(k: int) -> list[dict[str, Any]]:
    docs = KeywordRetriever(passages=CORPUS).invoke(QUESTION, k=k)
    return [{"id": d.id, "title": d.metadata["title"], "text": d.page_content} for d in docs]


def numbered(found: list[dict[str, Any]]) -> str:
    # profile="paper"'s passage format, written out here so a change there shows
    return "\n\n".join(
        f"[{i}] Title: {p['title']}\nText: {p['text']}" for i, p in enumerate(found, 1)
    )


def run(
    model: ScriptedModel | None = None, graph_input: dict[str, Any] | None = None, **context: Any
) -> tuple[dict[str, Any], ScriptedModel, RecordingRetriever]:
    model = model or ScriptedModel(script=SCRIPT)
    retriever = RecordingRetriever(passages=CORPUS)
    out = self_refine.build(model=model, retriever=retriever).invoke(
        graph_input or {"question": QUESTION}, context=context or None
    )
    return out, model, retriever


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
        (
            "answer",
            (
                "Answer the question based on the given note. Only give me the answer and do not "
                f"output any other words.\n\nThe following are given notes: {SUMMARY}\n"
                f"Question: {QUESTION}\n\nAnswer:"
            ),
        ),
    ]
    assert model.calls[0][1].startswith("Complete the following task:\nThe questions that need")
    assert not any(p["text"] in model.calls[1][1] for p in top(5))


def test_official_profile_sends_the_files_with_the_official_passage_format():
    _, model, _ = run(profile="official", top_k=1)
    (first,) = top(1)
    refs = f"Passage #1 Title: {first['title']}\nPassage #1 Text: {first['text']} \n\n"
    assert model.calls == [
        ("refine", vendored("self_refine", query=QUESTION, refs=refs)),
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
    events = [
        e
        for mode, e in graph.stream({"question": QUESTION}, stream_mode=["custom"])
        if mode == "custom"
    ]
    assert [e["type"] for e in events] == ["passages", "refinement", "answer"]
    assert events[1] == {"type": "refinement", "step": 0, "passages": 5, "refinement": SUMMARY}
    line = self_refine.SPEC.progress["refinement"](events[1])
    assert line.plain == f"refined 5 passages into a summary ({len(SUMMARY.split())} words)"


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
    from noterag.sample import sample_index, sample_questions

    graph = self_refine.build(model=local_model, retriever=load_retriever(f"bm25:{sample_index()}"))
    out = graph.invoke({"question": sample_questions()[0]["question"]}, context={"max_tokens": 96})
    assert out["answer"].strip() and out["best_note"].strip()
    assert out["llm_calls"] == 2 and len(out["passage_ids"]) == 5
    assert out["trace"][0]["refinement"] == out["best_note"]
    assert out["stop_reason"] == "single pass (the baseline has no loop)"
