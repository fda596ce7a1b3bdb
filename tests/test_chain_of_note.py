"""Chain-of-Note driven by scripted models: one search, the reading-notes call (the authors'
file, whole prompt compared), the answer from the notes only (Adaptive-Note's generator),
tasks, both profiles, cost, trace, events, async, roles; and one run of the local model."""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any

import pytest

from noterag.base.errors import ConfigError
from noterag.core.progress import progress_lines
from noterag.graphs import chain_of_note
from scripted import (
    QUESTION,
    VELMORA_ROWS,
    KeywordRetriever,
    RecordingRetriever,
    ScriptedModel,
    generator_prompt,
    method_events,
    numbered,
    official_refs,
    passages,
    ranked,
    run_recorded,
    vendored,
)

CORPUS = passages(*VELMORA_ROWS)
NOTES = (
    "Passage 1 says the Velmora Bridge was designed by Aurelio Fenwick. The other passages are "
    "about other people. Answer: not given."
)
SCRIPT = {"notes": f"  {NOTES}\n", "answer": "1871"}


top = partial(ranked, CORPUS, QUESTION)  # top(k): the passages ranked first, in order
run = partial(run_recorded, chain_of_note.build, CORPUS, SCRIPT)  # -> (output, model, retriever)


def test_one_search_the_notes_then_the_answer():
    out, model, retriever = run()
    assert model.stages == ["notes", "answer"]
    assert retriever.queries == [(QUESTION, 5)]  # top-k 5, the papers' setting
    assert out["passage_ids"] == [p["id"] for p in top(5)]
    assert out["best_note"] == NOTES  # the reply, without surrounding whitespace
    assert out["answer"] == "1871"
    assert out["llm_calls"] == len(model.calls) == 2
    assert out["prompt_tokens"] > 0 and out["completion_tokens"] > 0
    assert out["stop_reason"] == "single pass (the baseline has no loop)"
    assert out.get("fallbacks", {}) == {}  # nothing is parsed from the notes


@pytest.mark.parametrize("top_k", [1, 3, 5])
def test_the_notes_prompt_is_the_authors_file_with_the_question_and_the_top_k_passages(top_k: int):
    _, model, retriever = run(top_k=top_k)
    (prompt,) = model.prompts_for("notes")
    assert prompt == vendored("chain-of-note", query=QUESTION, refs=numbered(top(top_k)))
    assert prompt.startswith("Task Description:\n1. Read the given question and a few passages")
    assert retriever.queries == [(QUESTION, top_k)]


def test_the_answer_reads_the_notes_and_not_the_passages():
    _, model, _ = run()
    (prompt,) = model.prompts_for("answer")
    # Adaptive-Note's generator (paper, Table A4: Multi-hop QA), the notes as its note
    assert prompt == generator_prompt(NOTES)
    assert not any(p["text"] in prompt for p in top(5))


def test_official_profile_sends_the_files_with_the_official_passage_format():
    _, model, _ = run(profile="official", top_k=2)
    assert model.calls == [
        ("notes", vendored("chain-of-note", query=QUESTION, refs=official_refs(top(2)))),
        ("answer", vendored("gen_answer", query=QUESTION, note=NOTES)),
    ]


@pytest.mark.parametrize(
    ("task", "start", "end"),
    [
        ("asqa", "Write an accurate, engaging, and concise answer", f"Notes: {NOTES}\n\nAnswer:"),
        # DeepNote's StrategyQA prompt (Table 16), the one Adaptive-Note borrows
        ("strategyqa", 'Answer the question based on the given notes. Only give me "yes" or "no"',
         f"The following are given notes: {NOTES}\nQuestion: {QUESTION}\n\nAnswer:"),
    ],
)  # fmt: skip
def test_the_task_chooses_the_answer_prompt_not_the_notes_prompt(task: str, start: str, end: str):
    by_input, model, _ = run(graph_input={"question": QUESTION, "task": task})
    _, by_context, _ = run(task=task)
    assert by_context.calls == model.calls
    notes, answer = (prompt for _, prompt in model.calls)
    assert notes == vendored("chain-of-note", query=QUESTION, refs=numbered(top(5)))
    assert answer.startswith(start) and answer.endswith(end)
    assert by_input["answer"] == "1871"


def test_crud_is_refused_before_any_call():
    model, retriever = ScriptedModel(script=SCRIPT), RecordingRetriever(passages=CORPUS)
    graph = chain_of_note.build(model=model, retriever=retriever)
    with pytest.raises(ConfigError) as by_context:
        graph.invoke({"question": QUESTION}, context={"task": "crud"})
    assert retriever.queries == []
    with pytest.raises(ConfigError) as by_input:
        graph.invoke({"question": QUESTION, "task": "crud"})
    assert model.calls == []
    for raised in (by_context, by_input):
        message = str(raised.value)
        assert "multihop, asqa, strategyqa, not 'crud'" in message and "\n" not in message
    assert str(by_input.value).startswith("chain-of-note answers tasks")


def test_the_trace_has_one_entry_with_the_notes():
    out, _, _ = run()
    assert out["trace"] == [
        {
            "step": 0,
            "queries": [QUESTION],
            "new_passage_ids": [p["id"] for p in top(5)],
            "notes": NOTES,
            "llm_calls": 1,
        }
    ]
    # the answer's call is the run's other one, as in every method
    assert sum(entry["llm_calls"] for entry in out["trace"]) + 1 == out["llm_calls"]


def test_progress_events_and_the_streamed_answer():
    graph = chain_of_note.build(
        model=ScriptedModel(script=SCRIPT), retriever=KeywordRetriever(passages=CORPUS)
    )
    custom: list[dict[str, Any]] = []
    tokens: list[Any] = []
    for mode, chunk in graph.stream({"question": QUESTION}, stream_mode=["custom", "messages"]):
        (custom if mode == "custom" else tokens).append(chunk)
    custom = method_events(custom)
    assert [e["type"] for e in custom] == ["passages", "reading_notes", "answer"]
    assert custom[1] == {"type": "reading_notes", "step": 0, "passages": 5, "notes": NOTES}
    assert {meta["langgraph_node"] for _, meta in tokens} == {"answer"}
    (line,) = progress_lines(chain_of_note.SPEC.progress, custom[1])
    assert line.plain == f"wrote reading notes on 5 passages ({len(NOTES.split())} words)"


def test_async_run_makes_the_same_calls():
    expected, by_invoke, _ = run()
    model = ScriptedModel(script=SCRIPT)
    graph = chain_of_note.build(model=model, retriever=KeywordRetriever(passages=CORPUS))
    out = asyncio.run(graph.ainvoke({"question": QUESTION}))
    assert model.calls == by_invoke.calls
    assert {k: out[k] for k in ("answer", "best_note", "trace", "llm_calls", "stop_reason")} == {
        k: expected[k] for k in ("answer", "best_note", "trace", "llm_calls", "stop_reason")
    }


def test_each_role_can_have_its_own_model():
    reader, answerer = ScriptedModel(script=SCRIPT), ScriptedModel(script=SCRIPT)
    graph = chain_of_note.build(
        model=reader, retriever=KeywordRetriever(passages=CORPUS), answer_model=answerer
    )
    graph.invoke({"question": QUESTION})
    assert reader.stages == ["notes"] and answerer.stages == ["answer"]
    with pytest.raises(ConfigError, match="no model role refine_model"):
        chain_of_note.build(model=reader, refine_model=answerer)


def test_a_run_can_replace_the_notes_prompt():
    _, model, _ = run(prompts={"notes": "Notes on {refs} for {query}, please."}, top_k=1)
    assert model.prompts_for("notes") == [f"Notes on {numbered(top(1))} for {QUESTION}, please."]


@pytest.mark.e2e
def test_local_model_end_to_end(local_model: Any):
    from noterag.retrievers import load_retriever
    from noterag.retrievers.sample import sample_index, sample_questions

    graph = chain_of_note.build(
        model=local_model, retriever=load_retriever(f"bm25:{sample_index()}")
    )
    out = graph.invoke({"question": sample_questions()[0]["question"]}, context={"max_tokens": 96})
    assert out["answer"].strip() and out["best_note"].strip()
    assert out["llm_calls"] == 2 and len(out["passage_ids"]) == 5
    assert out["trace"][0]["notes"] == out["best_note"]
    assert out["stop_reason"] == "single pass (the baseline has no loop)"
