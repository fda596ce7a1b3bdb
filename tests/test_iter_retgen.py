"""Iter-RetGen driven by scripted models: T iterations with the previous generation in the next
query, each iteration reading its own paragraphs, the whole prompt, the answer parsed from the
T-th generation (and its counted fallback), no stop sequence, the tasks' demonstrations, and one
run of the local model."""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any

import pytest

from noterag.base.errors import ConfigError
from noterag.core.profiles import numbered_passages
from noterag.core.state import Passage
from noterag.graphs import iter_retgen
from noterag.nodes.iter_retgen import parse_answer
from noterag.prompts import iter_retgen as prompts
from scripted import (
    QUESTION,
    VELMORA_ROWS,
    KeywordRetriever,
    RecordingRetriever,
    ScriptedModel,
    passages,
    run_over,
)

CORPUS = passages(*VELMORA_ROWS)
Y1 = "The Velmora Bridge was designed by Aurelio Fenwick.\nSo the answer is unknown"
Y2 = "Aurelio Fenwick studied at the Marrowgate Institute.\nSo the answer is 1870"
Y3 = "Aurelio Fenwick (1871-1938) designed the Velmora Bridge.\nSo the answer is 1871"


run = partial(run_over, iter_retgen.build, CORPUS, {})  # run(model, retriever=None, **context)


def script(**overrides: Any) -> dict[str, Any]:
    return {"generate": [Y1, Y2], "answer": Y3} | overrides


# --- T iterations ----------------------------------------------------------------------------------


def test_three_iterations_each_query_carries_the_previous_generation():
    model, retriever = ScriptedModel(script=script()), RecordingRetriever(passages=CORPUS)
    out = run(model, retriever)
    assert model.stages == ["generate", "generate", "answer"]  # T = 3 by default
    assert retriever.queries == [(QUESTION, 5), (f"{QUESTION} {Y1}", 5), (f"{QUESTION} {Y2}", 5)]
    assert out["generations"] == [Y1, Y2, Y3] and out["steps"] == 3
    assert out["answer"] == "1871"  # the T-th generation's, not an earlier one's
    assert out["stop_reason"] == "3 iteration(s) (max_steps = T = 3)"
    assert [e["query"] for e in out["trace"]] == [q for q, _ in retriever.queries]
    assert [e["generation"] for e in out["trace"]] == [Y1, Y2, Y3]
    assert [e["answer"] for e in out["trace"]] == [None, None, "1871"]
    assert out["llm_calls"] == len(model.calls) == sum(e["llm_calls"] for e in out["trace"]) == 3
    assert out["messages"][-1].content == "1871"
    assert not out.get("fallbacks")


@pytest.mark.parametrize("t", [1, 2, 5])
def test_max_steps_is_t(t: int):
    model, retriever = (
        ScriptedModel(script=script(generate=Y1)),
        RecordingRetriever(passages=CORPUS),
    )
    out = run(model, retriever, max_steps=t)
    assert model.stages == ["generate"] * (t - 1) + ["answer"]
    assert len(retriever.queries) == t and out["steps"] == t
    assert out["stop_reason"] == f"{t} iteration(s) (max_steps = T = {t})"
    # the first query is the question alone, every later one the question and y_{t-1}
    assert [q for q, _ in retriever.queries] == [QUESTION] + [f"{QUESTION} {Y1}"] * (t - 1)


def test_each_iteration_reads_only_its_own_paragraphs():
    model, retriever = ScriptedModel(script=script()), RecordingRetriever(passages=CORPUS)
    out = run(model, retriever, top_k=2)
    for prompt, entry in zip(
        model.prompts_for("generate") + model.prompts_for("answer"), out["trace"], strict=True
    ):
        shown = prompt.count("] Title: ")
        assert shown == len(entry["passage_ids"]) == 2
        by_id = {p["id"]: p for p in CORPUS}
        for pid in entry["passage_ids"]:
            assert f"Title: {by_id[pid]['title']}\nText: " in prompt
    assert set(out["passage_ids"]) == {pid for e in out["trace"] for pid in e["passage_ids"]}


def test_ainvoke_takes_the_same_path():
    model = ScriptedModel(script=script())
    graph = iter_retgen.build(model=model, retriever=KeywordRetriever(passages=CORPUS))
    out = asyncio.run(graph.ainvoke({"question": QUESTION}, context={"max_steps": 2}))
    assert model.stages == ["generate", "answer"] and out["answer"] == "1871"


# --- prompts ----------------------------------------------------------------------------------------


def test_the_whole_prompt_demonstrations_paragraphs_question():
    model = ScriptedModel(script=script())
    out = run(model, max_steps=1, top_k=2)
    (prompt,) = model.prompts_for("answer")
    by_id = {p["id"]: Passage(id=p["id"], title=p["title"], text=p["text"]) for p in CORPUS}
    knowledge = numbered_passages([by_id[i] for i in out["trace"][0]["passage_ids"]])
    assert prompt == (
        prompts.DEMONSTRATIONS["hotpotqa"].text
        + f"\n\n{knowledge}\nQuestion: {QUESTION}\nLet's think step by step.\n"
    )


def test_the_demonstrations_are_the_papers():
    hotpot = prompts.DEMONSTRATIONS["hotpotqa"].text
    assert hotpot.startswith(
        "Question: What is the name of this American musician, singer, actor, comedian, and "
        "songwriter, who worked with Modern Records and born in December 5, 1932?\n"
        "Let's think step by step.\nArtists who worked with Modern Records include Etta James"
    )
    assert hotpot.endswith("and is an American rapper.\nSo the answer is 1979")
    assert hotpot.count("Let's think step by step.") == 3 and "{Knowledge}" not in hotpot
    assert "Random House was form in 2001." in prompts.DEMONSTRATIONS["musique"].text  # as printed
    assert prompts.DEMONSTRATIONS["strategyqa"].text.startswith(
        "You are required to answer the following questions. The final answer to a question "
        "should always be either Yes or No, and NOTHING ELSE.\n\nQuestion: Is it common"
    )
    for name, demos in prompts.DEMONSTRATIONS.items():
        assert demos.text.count("\nSo the answer is ") == 3, name
        assert "Appendix B" in demos.source
    assert prompts.PAPER.answer["multihop"].source.startswith("ours:")


@pytest.mark.parametrize(("context", "task", "demos"), [
    ({"demos": "musique"}, None, "musique"),
    ({"demos": "2wikimultihopqa"}, None, "2wikimultihopqa"),
    ({"demos": "musique"}, "strategyqa", "strategyqa"),
])  # fmt: skip
def test_the_run_picks_its_demonstrations(context: dict[str, Any], task: str | None, demos: str):
    model = ScriptedModel(script=script(answer="So the answer is Yes"))
    graph = iter_retgen.build(model=model, retriever=KeywordRetriever(passages=CORPUS))
    graph.invoke({"question": QUESTION} | ({"task": task} if task else {}), context=context)
    for prompt in model.prompts_for("generate") + model.prompts_for("answer"):
        assert prompt.startswith(prompts.DEMONSTRATIONS[demos].text + "\n\n[1] Title: ")


def test_an_unknown_task_is_one_clear_error():
    model = ScriptedModel()
    graph = iter_retgen.build(model=model, retriever=KeywordRetriever(passages=CORPUS))
    with pytest.raises(ConfigError, match="no answer prompt for task 'asqa'"):
        graph.invoke({"question": QUESTION, "task": "asqa"})
    assert model.calls == []


@pytest.mark.parametrize("bad", [{"max_steps": 0}, {"demos": "nq"}])
def test_bad_settings_are_one_clear_error(bad: dict[str, Any]):
    with pytest.raises(ConfigError, match=next(iter(bad))):
        iter_retgen.IterRetGenContext(**bad)


# --- stop sequences and the answer's parsing --------------------------------------------------------


def test_no_stop_sequence_is_passed():
    model = ScriptedModel(script=script())
    run(model)
    assert model.stops == [("generate", None), ("generate", None), ("answer", None)]


@pytest.mark.parametrize(
    ("generation", "answer"),
    [
        ("Reasoning.\nSo the answer is 1871", "1871"),
        ("Reasoning.\nSo the answer is: 1871.", "1871"),
        ("So the answer is Walls and Bridges.\n", "Walls and Bridges"),
        ('The answer is "Paris"', "Paris"),
        ("**So the answer is:** 1871", "1871"),
        ("First the answer is A. Later the answer is B.", "B"),
    ],
)
def test_the_answer_is_what_follows_answer_is(generation: str, answer: str):
    assert parse_answer(generation) == answer


def test_a_last_generation_without_answer_is_falls_back_to_its_last_line_and_is_counted():
    # the earlier generations are not parsed: only the answer's fallback counts
    model = ScriptedModel(script=script(generate="no marker here", answer="Fenwick.\n1871\n"))
    out = run(model)
    assert out["answer"] == "1871" and out["fallbacks"] == {"answer_is": 1}


def test_the_answer_streams_and_the_message_holds_the_parsed_answer():
    model = ScriptedModel(script=script())
    graph = iter_retgen.build(model=model, retriever=KeywordRetriever(passages=CORPUS))
    events = list(
        graph.stream({"question": QUESTION}, context={"max_steps": 2},
                     stream_mode=["messages", "values"])
    )  # fmt: skip
    streamed = [chunk for mode, chunk in events if mode == "messages"]
    assert {meta["langgraph_node"] for _, meta in streamed} == {"answer"}
    assert "".join(str(m.content) for m, _ in streamed) == Y3  # the generation's tokens
    final = [chunk for mode, chunk in events if mode == "values"][-1]
    assert final["messages"][-1].content == "1871" and final["messages"][-1].id == streamed[0][0].id


def test_the_trace_page_shows_each_iteration():
    from noterag.trace.page import record, render_html

    model = ScriptedModel(script=script())
    graph = iter_retgen.build(model=model, retriever=KeywordRetriever(passages=CORPUS))
    page = render_html(record(graph, QUESTION, None, method="iter-retgen"))
    assert all(f"Iteration {t}" in page for t in (1, 2, 3))
    assert "Aurelio Fenwick studied at the Marrowgate Institute." in page


# --- the local model ---------------------------------------------------------------------------------


@pytest.mark.e2e
def test_local_model_end_to_end(local_model: Any):
    from noterag.retrievers import load_retriever
    from noterag.retrievers.sample import sample_index, sample_questions

    graph = iter_retgen.build(model=local_model, retriever=load_retriever(f"bm25:{sample_index()}"))
    out = graph.invoke(
        {"question": sample_questions()[0]["question"]}, context={"max_steps": 2, "max_tokens": 64}
    )
    assert isinstance(out["answer"], str) and out["steps"] == 2
    assert out["llm_calls"] == 2 and len(out["generations"]) == 2
    assert out["stop_reason"] == "2 iteration(s) (max_steps = T = 2)"
