"""The baselines driven by scripted models: one call each, what the prompt carries (top-k
passages from the context, or the question alone), task switch, both passage formats."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from test_resp import CORPUS, QUESTION, RecordingRetriever  # ReSP's small corpus

from noterag.base.errors import ConfigError
from noterag.graphs import no_retrieval, vanilla
from noterag.prompts import baselines
from scripted import KeywordRetriever, ScriptedModel, method_events


class RefusingRetriever(BaseRetriever):
    def _get_relevant_documents(self, query: str, *, run_manager: Any = None) -> list[Document]:
        raise AssertionError("the no-retrieval baseline searched")


def run_vanilla(model: ScriptedModel, **context: Any) -> tuple[dict[str, Any], RecordingRetriever]:
    retriever = RecordingRetriever(passages=CORPUS)
    out = vanilla.build(model=model, retriever=retriever).invoke(
        {"question": QUESTION}, context=context or None
    )
    return out, retriever


@pytest.mark.parametrize("top_k", [1, 5, 7])
def test_vanilla_sends_the_top_k_passages_in_one_call(top_k: int):
    model = ScriptedModel(script={"answer": "the Serrow"})
    out, retriever = run_vanilla(model, top_k=top_k)
    assert model.stages == ["answer"] and out["llm_calls"] == 1
    assert retriever.queries == [(QUESTION, top_k)]
    assert len(out["passage_ids"]) == top_k
    (prompt,) = model.prompts_for("answer")
    titles = [p["title"] for p in CORPUS if p["id"] in out["passage_ids"]]
    assert all(f"Title: {t}\nText: " in prompt for t in titles)
    assert f"[{top_k}] Title: " in prompt and f"[{top_k + 1}] Title: " not in prompt
    assert prompt.startswith("Answer the question based on the given passages.")
    assert prompt.endswith(f"\n\nQuestion: {QUESTION}\nAnswer:")
    assert out["answer"] == "the Serrow"


def test_vanilla_official_profile_uses_the_official_passage_format():
    model = ScriptedModel(script={"answer": "x"})
    run_vanilla(model, top_k=2, profile="official")
    (prompt,) = model.prompts_for("answer")
    assert prompt == (
        "Answer the question based on the given passages. Only give me the answer and do not output "
        "any other words.\n\nThe following are given passages:\n"
        "Passage #1 Title: Harrowdale Suite\nPassage #1 Text: The Harrowdale Suite is an orchestral "
        "work by the composer Ilse Marrin. \n\n"
        "Passage #2 Title: Serrow\nPassage #2 Text: The Serrow is a river of 140 km that flows through "
        "Tolvany and Quill. \n\n"
        f"\n\nQuestion: {QUESTION}\nAnswer:"
    )


def test_no_retrieval_makes_one_call_and_no_search():
    model = ScriptedModel(script={"answer": "the Serrow"})
    out = no_retrieval.build(model=model, retriever=RefusingRetriever()).invoke(
        {"question": QUESTION}
    )
    assert model.calls == [
        (
            "answer",
            f"Only give me the answer and do not output any other words.\n\nQuestion: {QUESTION}\nAnswer:",
        )
    ]
    assert out["llm_calls"] == 1 and out["answer"] == "the Serrow"
    assert out.get("passage_ids", []) == []


@pytest.mark.parametrize(
    ("task", "vanilla_marker", "closed_marker"),
    [
        ("asqa", "using only the provided passages", "Instruction: Write an accurate, engaging"),
        (
            "strategyqa",
            "Only give me 'yes' or 'no'",
            "Only give me 'yes' or 'no'",
        ),  # thunlp/DeepNote's files
    ],
)
def test_task_selects_the_prompt(task: str, vanilla_marker: str, closed_marker: str):
    open_book, closed_book = ScriptedModel(), ScriptedModel()
    vanilla.build(model=open_book, retriever=KeywordRetriever(passages=CORPUS)).invoke(
        {"question": QUESTION, "task": task}
    )
    no_retrieval.build(model=closed_book, retriever=RefusingRetriever()).invoke(
        {"question": QUESTION}, context={"task": task}
    )
    assert vanilla_marker in open_book.prompts_for("answer")[0]
    assert "Title: Harrowdale Suite" in open_book.prompts_for("answer")[0]
    assert closed_marker in closed_book.prompts_for("answer")[0]
    assert "Title:" not in closed_book.prompts_for("answer")[0]


def test_asqa_prompts_are_the_official_files():
    model = ScriptedModel()
    no_retrieval.build(model=model, retriever=RefusingRetriever()).invoke(
        {"question": "Q?", "task": "asqa"}
    )
    assert model.prompts_for("answer") == [
        (
            "Instruction: Write an accurate, engaging, and concise answer for the given question. "
            "Use an unbiased and journalistic tone.\n\nQuestion:\nQ?\n"
        )
    ]
    assert baselines.VANILLA.answer["asqa"].format(query="Q?", refs="R") == (
        "Instruction: Write an accurate, engaging, and concise answer for the given question using only "
        "the provided passages. Use an unbiased and journalistic tone.\n\n\nQuestion:\nQ?\n\n\n"
        "Passages:\nR\n\n"
    )


def test_crud_has_no_baseline_prompt():
    with pytest.raises(ConfigError, match="no answer prompt for task 'crud'"):
        no_retrieval.build(model=ScriptedModel(), retriever=RefusingRetriever()).invoke(
            {"question": QUESTION, "task": "crud"}
        )


def test_answer_model_role_and_async():
    base, answerer = ScriptedModel(), ScriptedModel(script={"answer": "Serrow"})
    g = vanilla.build(
        model=base, retriever=KeywordRetriever(passages=CORPUS), answer_model=answerer
    )
    out = asyncio.run(g.ainvoke({"question": QUESTION}))
    assert base.calls == [] and answerer.stages == ["answer"] and out["answer"] == "Serrow"


def test_only_answer_tokens_stream():
    model = ScriptedModel(script={"answer": "the Serrow"})
    g = vanilla.build(model=model, retriever=KeywordRetriever(passages=CORPUS))
    custom, messages = [], []
    for mode, chunk in g.stream({"question": QUESTION}, stream_mode=["custom", "messages"]):
        (custom if mode == "custom" else messages).append(chunk)
    custom = method_events(custom)
    assert [e["type"] for e in custom] == ["passages", "answer"]
    assert "".join(str(m.content) for m, _ in messages) == "the Serrow"


def test_studio_schemas():
    for module in (vanilla, no_retrieval):
        g = module.build(model=ScriptedModel(), retriever=KeywordRetriever(passages=CORPUS))
        assert set(g.get_input_jsonschema()["properties"]) == {"question", "messages", "task"}
        assert g.get_context_jsonschema()["properties"]["top_k"]["default"] == 5
        assert {"answer", "passage_ids", "llm_calls"} <= set(
            g.get_output_jsonschema()["properties"]
        )


@pytest.mark.parametrize("module", [vanilla, no_retrieval], ids=lambda m: m.SPEC.name)
def test_local_model_end_to_end(local_model: Any, module: Any):
    from noterag.retrievers import load_retriever
    from noterag.retrievers.sample import sample_index, sample_questions

    g = module.build(model=local_model, retriever=load_retriever(f"bm25:{sample_index()}"))
    out = g.invoke({"question": sample_questions()[0]["question"]}, context={"max_tokens": 96})
    assert out["answer"].strip() and out["llm_calls"] == 1
    assert len(out.get("passage_ids", [])) == (5 if module is vanilla else 0)
