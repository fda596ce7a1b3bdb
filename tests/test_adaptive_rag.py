"""Adaptive-RAG driven by scripted models: each class routes to its method (the exact stage
sequence of A, B and C), the routed method runs exactly as it runs alone (same calls, prompts,
searches, answer, trace) and its calls and tokens are this run's cost; the classifier's prompt,
its reply parser and counted fallbacks; a classifier that is not a chat model; async; events;
and one run of the local model."""

from __future__ import annotations

import asyncio
import hashlib
import json
from importlib import resources
from typing import Any

import pytest
from langchain_core.runnables import RunnableLambda
from pydantic import Field

import noterag
from noterag.base.errors import ConfigError
from noterag.core.progress import progress_lines
from noterag.graphs import adaptive_rag
from noterag.models.runnable import RunnableModel
from noterag.nodes.adaptive_rag import parse_complexity
from noterag.prompts import baselines
from noterag.prompts import ircot as ircot_prompts
from scripted import (
    QUESTION,
    VELMORA_ROWS,
    KeywordRetriever,
    ScriptedModel,
    method_events,
    passages,
)

CORPUS = passages(*VELMORA_ROWS)
FACT = "The Velmora Bridge was designed by the architect Aurelio Fenwick."
CONCLUDE = "So the answer is: 1871."
SHORT = {"max_demos": 1, "prompt_tokens": None}  # IRCoT with one demonstration, no length rule
CLASSIFY = (
    "Classify the complexity of the following question, to decide how to answer it.\n"
    "A: straightforward: you can answer it from your own knowledge, without retrieving any "
    "document.\n"
    "B: moderate: answering it needs one retrieval of documents (a single-hop question).\n"
    "C: complex: answering it needs several retrieval and reasoning steps (a multi-hop question).\n"
    "Reply with the letter only.\n\n"
    f"Question: {QUESTION}\n"
    "Complexity:"
)


class RecordingRetriever(KeywordRetriever):
    queries: list[tuple[str, int | None]] = Field(default_factory=list)

    def _get_relevant_documents(self, query: str, *, run_manager: Any = None, k: int | None = None):
        self.queries.append((query, k))
        return super()._get_relevant_documents(query, run_manager=run_manager, k=k)


def script(complexity: str, **replies: Any) -> dict[str, Any]:
    return {"classify": complexity, "reason": [FACT, CONCLUDE], "answer": "1871"} | replies


def run(
    method: str, model: ScriptedModel, retriever: KeywordRetriever | None = None, **kwargs: Any
) -> dict[str, Any]:
    graph = noterag.build_graph(
        method, model=model, retriever=retriever or KeywordRetriever(passages=CORPUS), **kwargs
    )
    return graph.invoke({"question": QUESTION}, context=SHORT if method != "vanilla" else None)


def alone(method: str, replies: dict[str, Any]) -> tuple[dict[str, Any], ScriptedModel, Any]:
    """The routed method run by itself, with the same replies (the classifier's left out)."""
    model, retriever = ScriptedModel(script=replies), RecordingRetriever(passages=CORPUS)
    graph = noterag.build_graph(method, model=model, retriever=retriever)
    # IRCoT alone, with the demonstration files Adaptive-RAG's route C reads by default
    context = SHORT | {"demo_files": "adaptive-rag"} if method == "ircot" else None
    return graph.invoke({"question": QUESTION}, context=context), model, retriever


# --- routing: each class runs its method, exactly as the method runs alone ---------------------

ROUTES = {
    "A": ("no-retrieval", ["classify", "answer"]),
    "B": ("vanilla", ["classify", "answer"]),
    "C": ("ircot", ["classify", "reason", "reason"]),  # the second sentence concludes
}


@pytest.mark.parametrize("complexity", ROUTES)
def test_each_class_runs_its_method_with_that_methods_calls_and_cost(complexity: str):
    strategy, stages = ROUTES[complexity]
    model, retriever = ScriptedModel(script=script(complexity)), RecordingRetriever(passages=CORPUS)
    out = run("adaptive-rag", model, retriever)
    assert model.stages == stages
    assert out["complexity"] == complexity and out["strategy"] == strategy

    expected, by_itself, its_retriever = alone(strategy, script(complexity))
    # the routed method's calls, prompts and searches are the ones it makes alone
    assert model.calls[1:] == by_itself.calls
    assert retriever.queries == its_retriever.queries
    assert out["answer"] == expected["answer"] == "1871"
    assert out["passage_ids"] == expected.get("passage_ids", [])
    assert out["trace"][1:] == expected["trace"]
    assert out["stop_reason"] == f"class {complexity} ({strategy}): {expected['stop_reason']}"
    # this run's cost: the classifier's call and tokens, and the routed method's
    classify_prompt = model.prompts_for("classify")[0]
    assert out["llm_calls"] == len(model.calls) == 1 + expected["llm_calls"]
    assert out["prompt_tokens"] == len(classify_prompt.split()) + expected["prompt_tokens"]
    assert out["completion_tokens"] == 1 + expected["completion_tokens"]
    assert out["messages"][-1].content == "1871"
    assert not out.get("fallbacks")


def test_class_a_reads_no_passage_and_answers_with_the_no_retrieval_prompt():
    model, retriever = ScriptedModel(script=script("A")), RecordingRetriever(passages=CORPUS)
    out = run("adaptive-rag", model, retriever)
    assert retriever.queries == [] and out["passage_ids"] == []
    (prompt,) = model.prompts_for("answer")
    assert prompt == baselines.NO_RETRIEVAL.answer["multihop"].format(query=QUESTION)
    assert out["trace"][1] == {"step": 0, "queries": [], "new_passage_ids": [], "llm_calls": 1}


def test_class_b_retrieves_once_and_answers_with_vanillas_prompt():
    model, retriever = ScriptedModel(script=script("B")), RecordingRetriever(passages=CORPUS)
    out = run("adaptive-rag", model, retriever)
    assert retriever.queries == [(QUESTION, 5)]
    (prompt,) = model.prompts_for("answer")
    assert prompt.startswith("Answer the question based on the given passages.")
    assert "[1] Title: Velmora Bridge\nText: The Velmora Bridge over the Ostra" in prompt
    assert prompt.endswith(f"Question: {QUESTION}\nAnswer:")
    assert out["trace"][1] == {
        "step": 0,
        "queries": [QUESTION],
        "new_passage_ids": out["passage_ids"],
        "llm_calls": 1,
    }


def test_class_c_loops_as_ircot_and_its_reader_answers_at_the_cap():
    replies = script("C", reason=FACT, answer="So the answer is: 1871.")
    model = ScriptedModel(script=replies)
    graph = adaptive_rag.build(model=model, retriever=KeywordRetriever(passages=CORPUS))
    out = graph.invoke({"question": QUESTION}, context=SHORT | {"max_steps": 2})
    assert model.stages == ["classify", "reason", "reason", "answer"]
    assert out["cot"] == [FACT, FACT] and out["steps"] == 2 and out["answer"] == "1871"
    assert out["stop_reason"] == (
        "class C (ircot): 2 reasoning step(s) without an answer (max_steps = 2)"
    )
    assert out["trace"][-1]["reader"] is True
    assert out["llm_calls"] == 4 == sum(entry["llm_calls"] for entry in out["trace"])


def route_c_prompt(files: str) -> str:
    """Route C's first reasoning prompt, whole: the first demonstration of ``files``, the
    paragraphs the question retrieved, the question."""
    demo = ircot_prompts.demonstrations("hotpotqa", 1, files)[0]
    found = KeywordRetriever(passages=CORPUS).invoke(
        "In year was the architect of the Velmora Bridge born?", k=5
    )
    paragraphs = "\n\n".join(
        f"Wikipedia Title: {doc.metadata['title']}\n{doc.page_content}" for doc in found
    )
    return f"{demo}\n\n\n{paragraphs}\n\nQ: {QUESTION}\nA:"


def test_route_c_reads_the_authors_one_distractor_demonstrations():
    # starsuzi/Adaptive-RAG @ 0c88670: the classifier's inputs are the runs
    # "ircot_qa_..._distractor_count__1" of its own prompt files
    model = ScriptedModel(script=script("C"))
    run("adaptive-rag", model)
    first = model.prompts_for("reason")[0]
    assert first == route_c_prompt(ircot_prompts.DEMO_FILES["adaptive-rag"])
    assert first != route_c_prompt(ircot_prompts.DEMO_FILES["ircot"])
    # IRCoT's 2-distractor files on request
    model = ScriptedModel(script=script("C"))
    graph = adaptive_rag.build(model=model, retriever=KeywordRetriever(passages=CORPUS))
    graph.invoke({"question": QUESTION}, context=SHORT | {"demo_files": "ircot"})
    assert model.prompts_for("reason")[0] == route_c_prompt(ircot_prompts.DEMO_FILES["ircot"])


def test_the_adaptive_rag_demonstration_files_are_the_authors():
    folder = resources.files("noterag.prompts").joinpath("original", "starsuzi-Adaptive-RAG")
    source = json.loads((folder / "SOURCE.json").read_text(encoding="utf-8"))
    assert source["repository"] == "starsuzi/Adaptive-RAG"
    assert set(source["git_blobs"]) == {f"{d}.txt" for d in ircot_prompts.DATASETS}
    for name, blob in source["git_blobs"].items():
        data = (folder / name).read_bytes()
        assert hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() == blob, name
        assert "gold_with_1_distractors" in source["files"][name]
    for dataset in ircot_prompts.DATASETS:  # every prompt set's 15 demonstrations are there
        for prompt_set in (1, 2, 3):
            assert (
                len(ircot_prompts.demonstrations(dataset, prompt_set, "starsuzi-Adaptive-RAG"))
                == 15
            )


@pytest.mark.parametrize("complexity", ["A", "B", "C"])
def test_every_route_decodes_greedily_as_the_authors_generator(complexity: str):
    # the authors' GPT3Generator: temperature 0 (commaqa/models/gpt3generator.py @ 0c88670)
    model = ScriptedModel(script=script(complexity))
    run("adaptive-rag", model)
    assert model.kwargs_for() == [{"temperature": 0.0}] * len(model.calls)


@pytest.mark.parametrize(
    ("context", "k"),
    [({}, 5), ({"profile": "original"}, 15), ({"single_step_top_k": 3}, 3), ({"top_k": 4}, 4)],
)
def test_route_b_retrieves_its_own_k_where_one_is_set(context: dict[str, Any], k: int):
    # starsuzi/Adaptive-RAG @ 0c88670: the single-step runs "oner_qa_..._bm25_retrieval_count__15"
    model, retriever = ScriptedModel(script=script("B")), RecordingRetriever(passages=CORPUS)
    graph = adaptive_rag.build(model=model, retriever=retriever)
    graph.invoke({"question": QUESTION}, context=SHORT | context)
    assert retriever.queries == [(QUESTION, k)]


def test_the_original_profile_retrieves_six_and_always_reads_with_the_qa_reader():
    model, retriever = ScriptedModel(script=script("C")), RecordingRetriever(passages=CORPUS)
    graph = adaptive_rag.build(model=model, retriever=retriever)
    out = graph.invoke({"question": QUESTION}, context=SHORT | {"profile": "original"})
    assert model.stages == [
        "classify",
        "reason",
        "reason",
        "answer",
    ]  # the reader after "answer is"
    assert {k for _, k in retriever.queries} == {6}
    original = {"temperature": 0.0, "top_p": 1.0, "max_tokens": 300}
    assert model.kwargs_for() == [original] * 4
    assert out["answer"] == "1871"


def test_the_classifier_entry_opens_the_trace():
    out = run("adaptive-rag", ScriptedModel(script=script("C")))
    assert out["trace"][0] == {
        "step": "classify",
        "complexity": "C",
        "strategy": "ircot",
        "reply": "C",
        "fallback": False,
        "llm_calls": 1,
    }
    assert [entry["step"] for entry in out["trace"]] == ["classify", 0, 1]


def test_the_classifier_prompt_is_ours_with_the_question():
    model = ScriptedModel(script=script("B"))
    run("adaptive-rag", model)
    assert model.prompts_for("classify") == [CLASSIFY]
    assert adaptive_rag.SPEC.prompts["paper"].classify.source.startswith("ours:")


# --- the classifier's replies -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "label"),
    [
        ("C", "C"),
        (" B.\n", "B"),
        ("(A)", "A"),
        ("**C**", "C"),
        ("C: complex, several hops", "C"),
        ("B (moderate)\nIt needs one document.", "B"),
        ("Answer: B", "B"),
        ("The complexity is C.", "C"),
        ("I would say (A).", "A"),
        ("A single retrieval is enough.", None),  # the article, not a class
        ("A, B or C", None),  # the options repeated
        ("(A) or (C)", None),
        ("It needs retrieval.", None),
        ("", None),
    ],
)
def test_replies_are_read_as_a_class_or_none(reply: str, label: str | None):
    assert parse_complexity(reply) == label


def test_an_unreadable_reply_takes_the_fallback_class_and_is_counted():
    model = ScriptedModel(script=script("It depends on the documents."))
    out = run("adaptive-rag", model)
    assert model.stages == ["classify", "answer"]  # B: vanilla RAG
    assert out["complexity"] == "B" and out["strategy"] == "vanilla"
    assert out["fallbacks"] == {"complexity": 1}
    assert out["trace"][0]["fallback"] is True
    assert out["stop_reason"].startswith("class B (vanilla): single pass")


def test_the_fallback_class_is_a_setting():
    model = ScriptedModel(script=script("no idea"))
    graph = adaptive_rag.build(model=model, retriever=KeywordRetriever(passages=CORPUS))
    out = graph.invoke({"question": QUESTION}, context=SHORT | {"fallback_class": "C"})
    assert out["strategy"] == "ircot" and model.stages == ["classify", "reason", "reason"]
    assert out["fallbacks"] == {"complexity": 1}
    with pytest.raises(ConfigError, match="fallback_class must be one of A, B, C"):
        graph.invoke({"question": QUESTION}, context={"fallback_class": "D"})


# --- a classifier that is not a chat model ----------------------------------------------------


def test_a_runnable_classifier_reads_the_question_alone_and_is_counted():
    seen: list[str] = []

    def t5(question: str) -> str:  # stands in for the authors' T5 through HuggingFacePipeline
        seen.append(question)
        return "C"

    model = ScriptedModel(script=script("A"))  # would route A if it were asked
    graph = noterag.build_graph(
        "adaptive-rag",
        model=model,
        retriever=KeywordRetriever(passages=CORPUS),
        classifier_model=RunnableLambda(t5),
    )
    out = asyncio.run(graph.ainvoke({"question": f"  {QUESTION} "}, context=SHORT))
    assert seen == [QUESTION]  # the authors' classifier input: the question, stripped
    assert model.stages == ["reason", "reason"]  # the chat model was not asked to classify
    assert out["complexity"] == "C" and out["strategy"] == "ircot"
    assert out["llm_calls"] == len(model.calls) + 1  # the classifier's call counts
    assert out["trace"][0]["reply"] == "C"


def test_a_pipeline_shaped_output_and_a_plain_function_are_read():
    model = ScriptedModel(script=script("C"))
    graph = noterag.build_graph(
        "adaptive-rag",
        model=model,
        retriever=KeywordRetriever(passages=CORPUS),
        # a text-classification pipeline's output shape
        classifier_model=lambda q: [{"label": "A", "score": 0.91}],
    )
    out = graph.invoke({"question": QUESTION}, context=SHORT)
    assert out["complexity"] == "A" and model.stages == ["answer"]


def test_a_runnable_can_read_the_prompt_instead():
    seen: list[str] = []

    def llm(prompt: str) -> str:  # a non-chat LLM that follows instructions
        seen.append(prompt)
        return "B"

    classifier = RunnableModel(runnable=RunnableLambda(llm), reads="prompt")
    out = run("adaptive-rag", ScriptedModel(script=script("A")), classifier_model=classifier)
    assert seen == [CLASSIFY] and out["complexity"] == "B"


def test_an_unusable_classifier_is_one_error():
    with pytest.raises(ConfigError, match="model spec must be"):
        noterag.build_graph("adaptive-rag", model=ScriptedModel(), classifier_model=42)


# --- the rest of the contract -------------------------------------------------------------------


@pytest.mark.parametrize("complexity", ROUTES)
def test_ainvoke_takes_the_same_route(complexity: str):
    sync_model, async_model = (
        ScriptedModel(script=script(complexity)),
        ScriptedModel(script=script(complexity)),
    )
    expected = run("adaptive-rag", sync_model)
    graph = adaptive_rag.build(model=async_model, retriever=KeywordRetriever(passages=CORPUS))
    out = asyncio.run(graph.ainvoke({"question": QUESTION}, context=SHORT))
    assert async_model.calls == sync_model.calls
    same = (
        "answer",
        "complexity",
        "strategy",
        "trace",
        "stop_reason",
        "llm_calls",
        "prompt_tokens",
    )
    assert {key: out[key] for key in same} == {key: expected[key] for key in same}


def test_events_say_the_class_first_and_the_cli_line_reads_it():
    graph = adaptive_rag.build(
        model=ScriptedModel(script=script("C")), retriever=KeywordRetriever(passages=CORPUS)
    )
    events = [
        chunk for chunk in graph.stream({"question": QUESTION}, context=SHORT, stream_mode="custom")
    ]
    events = method_events(events)
    assert events[0] == {
        "type": "complexity",
        "complexity": "C",
        "strategy": "ircot",
        "fallback": False,
    }
    assert [e["type"] for e in events] == [
        "complexity",
        "passages",
        "thought",
        "passages",
        "thought",
        "answer",
    ]
    shown = progress_lines(adaptive_rag.SPEC.progress, events[0])
    assert [line.plain for line in shown] == ["query complexity C: ircot"]


def test_prompt_overrides_reach_the_routes():
    model = ScriptedModel(script=script("B"))
    graph = noterag.build_graph(
        "adaptive-rag",
        model=model,
        retriever=KeywordRetriever(passages=CORPUS),
        prompts={"classify": "Hard? {question}"},
    )
    graph.invoke({"question": QUESTION}, context={"prompts": {"vanilla": "Q: {query}\n{refs}"}})
    assert model.prompts_for("classify") == [f"Hard? {QUESTION}"]
    (prompt,) = model.prompts_for("answer")
    assert prompt.startswith(f"Q: {QUESTION}\n[1] Title: Velmora Bridge")


def test_other_tasks_and_the_official_profile_are_refused_before_any_call():
    model = ScriptedModel(script=script("B"))
    graph = adaptive_rag.build(model=model, retriever=KeywordRetriever(passages=CORPUS))
    with pytest.raises(ConfigError, match="adaptive-rag answers task multihop only"):
        graph.invoke({"question": QUESTION, "task": "asqa"})
    with pytest.raises(ConfigError, match="multihop only"):
        graph.invoke({"question": QUESTION}, context={"task": "asqa"})
    with pytest.raises(ConfigError, match="no official code"):
        graph.invoke({"question": QUESTION}, context={"profile": "official"})
    assert model.calls == []


def test_the_method_is_declared():
    spec = noterag.METHODS["adaptive-rag"]
    assert spec.roles == ("classifier", "reasoner", "answer")
    assert spec.result_fields == ("complexity", "strategy")
    assert "replaced by a prompted LLM (ours)" in spec.summary  # `noterag methods` says so
    docstring = " ".join((adaptive_rag.__doc__ or "").split())
    assert "trained component is replaced by a prompted one" in docstring


def test_local_model_end_to_end(local_model: Any):
    from noterag.retrievers import load_retriever
    from noterag.retrievers.sample import sample_index, sample_questions

    graph = adaptive_rag.build(
        model=local_model, retriever=load_retriever(f"bm25:{sample_index()}")
    )
    out = graph.invoke(
        {"question": sample_questions()[0]["question"]},
        context={"max_tokens": 64, "max_steps": 2, "max_demos": 2},
    )
    assert out["complexity"] in ("A", "B", "C") and out["answer"].strip()
    assert out["strategy"] == adaptive_rag.prompts.STRATEGIES[out["complexity"]]
    assert out["stop_reason"].startswith(f"class {out['complexity']} ({out['strategy']})")
    assert out["llm_calls"] >= 2 and out["trace"][0]["step"] == "classify"
