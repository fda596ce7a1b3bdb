"""Fidelity to the official code and to the papers (issue: official prompts byte for byte, k
passages per step, the official loop's edge cases).

Under ``profile="official"`` the prompt stream is compared, whole prompt by whole prompt, with a
transcription of the official loop (thunlp/DeepNote and thunlp/Adaptive-Note ``src/main.py``
``retrieve_note``) that renders the vendored prompt files with ``str.format`` itself, reading
them from disk without noterag's loader.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import threading
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import InMemoryVectorStore
from pydantic import PrivateAttr

import noterag
from official_loop import OFFICIAL, official_file, official_stream
from scripted import (
    QUESTION,
    VELMORA_ROWS,
    KeywordRetriever,
    ScriptedModel,
    passages,
    velmora_script,
)

CORPUS = passages(*VELMORA_ROWS)
LOOP = ["refine_query", "accumulate", "review"]


# --- the vendored files ---------------------------------------------------------------------


@pytest.mark.parametrize("folder", sorted(p.name for p in OFFICIAL.iterdir()))
def test_vendored_prompt_files_are_the_official_bytes(folder: str):
    """Each file's git blob id, computed here, equals the one recorded from the repository at
    the recorded commit: the copy is byte for byte (no network needed)."""
    source = json.loads((OFFICIAL / folder / "SOURCE.json").read_text())
    assert source["repository"] == folder.replace("-", "/", 1)
    assert len(source["commit"]) == 40
    files = sorted(p.name for p in (OFFICIAL / folder).iterdir() if p.name != "SOURCE.json")
    assert files == sorted(source["git_blobs"])
    for name in files:
        data = (OFFICIAL / folder / name).read_bytes()
        blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        assert blob == source["git_blobs"][name], name


# --- the official loop, transcribed (tests/official_loop.py) -----------------------------------


class Recording(KeywordRetriever):
    """Records every query it is asked."""

    _queries: list[str] = PrivateAttr(default_factory=list)

    def _get_relevant_documents(self, query: str, *, run_manager: Any = None, k: int | None = None):
        self._queries.append(query)
        return super()._get_relevant_documents(query, run_manager=run_manager, k=k)


OFFICIAL_SCRIPT = velmora_script(
    # a note with newlines (the official loop deletes them), verdicts that exercise the brace
    # cut, the substring fallback and a rejection
    accumulate=[
        "Aurelio Fenwick (1871-1938)\ndesigned the bridge.",
        "Clara Fenwick\npainted it.",
        "Lise Ambrath was born in 1866.",
    ],
    review=[
        '```json {"status":"True"}```',
        "I think Note 2 is better: true",
        '{"status": "False"}',
    ],
)


@pytest.mark.parametrize(
    ("method", "settings"),
    [
        ("deepnote", {"max_steps": 3, "max_failures": 2}),  # the official README's 3 / 2
        ("deepnote", {"max_steps": 3, "max_failures": 1, "top_k": 3, "max_passages": 8}),
        ("adaptive-note", {"max_steps": 3, "max_failures": 1}),  # the paper's T_CI 3, T_IU 1
        ("adaptive-note", {"max_steps": 2, "max_failures": 2, "top_k": 4, "max_passages": 10}),
    ],
)
def test_official_prompt_stream_is_the_official_loops(method: str, settings: dict[str, Any]):
    model = ScriptedModel(script=OFFICIAL_SCRIPT)
    retriever = Recording(passages=CORPUS)
    graph = noterag.build_graph(method, model=model, retriever=retriever)
    graph.invoke({"question": QUESTION}, context={"profile": "official", "top_k": 5} | settings)
    expected = official_stream(
        method,
        QUESTION,
        KeywordRetriever(passages=CORPUS),
        ScriptedModel(script=OFFICIAL_SCRIPT)._reply,
        settings.get("top_k", 5),
        settings["max_steps"],
        settings["max_failures"],
        settings.get("max_passages", 15),
    )
    assert [stage for stage, _ in model.calls] == [stage for stage, _ in expected]
    for (stage, sent), (_, want) in zip(model.calls, expected, strict=True):
        assert sent == want, stage  # whole prompts, byte for byte


def test_official_deepnote_prompts_are_not_the_papers():
    """The official query-refinement file, not Table 11's "Please provide the note you wrote:"."""
    model = ScriptedModel(script=velmora_script())
    noterag.build_graph(
        "deepnote", model=model, retriever=KeywordRetriever(passages=CORPUS)
    ).invoke({"question": QUESTION}, context={"profile": "official", "max_steps": 1})
    assert model.prompts_for("refine_query")[0].endswith(
        "Do not print any other words. Do not explain. Output only the two new questions you asked."
    )
    assert '```json {"status":"True"}```' in model.prompts_for("review")[0]
    paper = ScriptedModel(script=velmora_script())
    noterag.build_graph(
        "deepnote", model=paper, retriever=KeywordRetriever(passages=CORPUS)
    ).invoke({"question": QUESTION}, context={"max_steps": 1})
    assert paper.prompts_for("refine_query")[0].endswith("Please provide the note you wrote:")


@pytest.mark.parametrize(
    ("task", "file"), [("asqa", "gen_answer_asqa"), ("strategyqa", "gen_answer_strategyqa")]
)
def test_official_deepnote_answer_files_per_task(task: str, file: str):
    model = ScriptedModel(script=velmora_script(accumulate="N"))
    noterag.build_graph(
        "deepnote", model=model, retriever=KeywordRetriever(passages=CORPUS)
    ).invoke({"question": QUESTION, "task": task}, context={"profile": "official", "max_steps": 1})
    assert model.prompts_for("answer") == [
        official_file("thunlp-DeepNote", file).format(query=QUESTION, note="N")
    ]


# --- the official loop's edge cases -----------------------------------------------------------


def test_max_failures_zero_runs_one_step_under_official_and_none_under_paper():
    official = ScriptedModel(script=velmora_script())
    out = noterag.build_graph(
        "deepnote", model=official, retriever=KeywordRetriever(passages=CORPUS)
    ).invoke({"question": QUESTION}, context={"profile": "official", "max_failures": 0})
    # the official loop tests the failure count after a step: count(False) >= 0 then stops
    assert official.stages == ["init_note", *LOOP, "answer"]
    assert "max_failures" in out["stop_reason"]
    paper = ScriptedModel(script=velmora_script())
    noterag.build_graph(
        "deepnote", model=paper, retriever=KeywordRetriever(passages=CORPUS)
    ).invoke({"question": QUESTION}, context={"max_failures": 0})
    assert paper.stages == ["init_note", "answer"]


class KwargsModel(ScriptedModel):
    """Records the per-call model arguments."""

    _kwargs: list[dict[str, Any]] = PrivateAttr(default_factory=list)

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self._kwargs.append(kwargs)
        return super()._generate(messages, stop, run_manager, **kwargs)


def test_official_sampling_reaches_a_model_object_the_caller_built():
    model = KwargsModel(script=velmora_script())
    graph = noterag.build_graph(
        "deepnote", model=model, retriever=KeywordRetriever(passages=CORPUS)
    )
    graph.invoke({"question": QUESTION}, context={"profile": "official", "max_steps": 1})
    assert model._kwargs and all(
        k == {"temperature": 0.1, "top_p": 0.9, "max_tokens": 1280} for k in model._kwargs
    )
    # a setting of the run wins over the profile's
    model._kwargs.clear()
    graph.invoke(
        {"question": QUESTION}, context={"profile": "official", "max_steps": 1, "temperature": 0.0}
    )
    assert all(k["temperature"] == 0.0 and k["max_tokens"] == 1280 for k in model._kwargs)
    # the paper profile leaves the model's own
    model._kwargs.clear()
    graph.invoke({"question": QUESTION}, context={"max_steps": 1})
    assert all(k == {} for k in model._kwargs)


def test_official_dense_runs_send_the_joined_title_text_format():
    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=16))
    store.add_documents(
        [
            Document(p["text"], id=p["id"], metadata={"id": p["id"], "title": p["title"]})
            for p in CORPUS
        ]
    )
    retriever = store.as_retriever(search_kwargs={"k": 5})
    model = ScriptedModel(script=velmora_script())
    noterag.build_graph("deepnote", model=model, retriever=retriever).invoke(
        {"question": QUESTION}, context={"profile": "official", "max_steps": 0, "top_k": 2}
    )
    first_two = [d for d in retriever.invoke(QUESTION, k=2)]
    refs = "\n".join(f"{d.metadata['title']}\n{d.page_content}" for d in first_two)
    assert model.prompts_for("init_note") == [
        official_file("thunlp-DeepNote", "init_note").format(query=QUESTION, refs=refs)
    ]


@pytest.mark.parametrize(
    ("method", "task"), [("deepnote", "strategyqa"), ("adaptive-note", "asqa")]
)
def test_official_tasks_run_on_dense_retrieval_use_the_joined_format(method: str, task: str):
    model = ScriptedModel(script=velmora_script())
    noterag.build_graph(method, model=model, retriever=KeywordRetriever(passages=CORPUS)).invoke(
        {"question": QUESTION, "task": task},
        context={"profile": "official", "max_steps": 0, "top_k": 1},
    )
    assert (
        "Document content: Velmora Bridge\nThe Velmora Bridge over the Ostra"
        in model.prompts_for("init_note")[0]
    )


@pytest.mark.parametrize(
    ("code", "task", "refs"),
    [
        (
            "adaptive-note",
            "multihop",
            "Passage #1 Title: Velmora Bridge\nPassage #1 Text: {text} \n\n",
        ),
        ("deepnote", "multihop", "Title: Velmora Bridge\nText: {text} \n\n"),
        ("deepnote", "strategyqa", "Velmora Bridge\n{text}"),
    ],
)
def test_official_baselines_follow_the_named_official_code(code: str, task: str, refs: str):
    model = ScriptedModel(script={"answer": "yes"})
    noterag.build_graph("vanilla", model=model, retriever=KeywordRetriever(passages=CORPUS)).invoke(
        {"question": QUESTION, "task": task},
        context={"profile": "official", "top_k": 1, "official_code": code},
    )
    file = {"multihop": "base", "strategyqa": "base_strategyqa"}[task]
    assert model.prompts_for("answer") == [
        official_file("thunlp-DeepNote", file).format(
            query=QUESTION, refs=refs.format(text=CORPUS[0]["text"])
        )
    ]


# --- the paper profile: k passages per step ---------------------------------------------------


class Fresh(BaseRetriever):
    """Always has k passages nobody has seen; records the queries of each call."""

    _counter: Any = PrivateAttr(default_factory=itertools.count)
    _queries: list[str] = PrivateAttr(default_factory=list)
    _lock: Any = PrivateAttr(default_factory=threading.Lock)

    def _get_relevant_documents(self, query: str, *, run_manager: Any = None, k: int | None = None):
        with self._lock:
            self._queries.append(query)
            ids = [next(self._counter) for _ in range(k or 5)]
        return [
            Document(f"text {i}", id=f"f{i}", metadata={"id": f"f{i}", "title": f"T{i}"})
            for i in ids
        ]


def accepting() -> dict[str, Any]:
    questions = [f"1. question {i}a?\n2. question {i}b?" for i in range(1, 9)]
    return velmora_script(refine_query=questions, review='{"status": "True"}')


def test_paper_adaptive_note_reads_k_per_step_and_stops_on_t_rp_after_the_step_reaching_it():
    model, retriever = ScriptedModel(script=accepting()), Fresh()
    out = noterag.build_graph("adaptive-note", model=model, retriever=retriever).invoke(
        {"question": QUESTION}
    )
    # k = 5, T_RP = 15: 5 initial + 5 + 5 reaches it after step 2 (T_CI = 3 would allow a third)
    assert model.stages == ["init_note", *LOOP * 2, "answer"]
    for prompt in model.prompts_for("accumulate"):
        assert prompt.count("Title: T") == 5
    assert len(out["passage_ids"]) == 15
    assert "distinct passages" in out["stop_reason"]
    # both new questions are still searched, each for top-k
    assert len(retriever._queries) == 1 + 2 * 2


def test_paper_deepnote_has_no_passage_cap_and_runs_to_max_steps():
    model, retriever = ScriptedModel(script=accepting()), Fresh()
    out = noterag.build_graph("deepnote", model=model, retriever=retriever).invoke(
        {"question": QUESTION}
    )
    assert model.stages == ["init_note", *LOOP * 3, "answer"]  # max_step 3
    assert [p.count("Title: T") for p in model.prompts_for("accumulate")] == [5, 5, 5]
    assert len(out["passage_ids"]) == 20
    assert "max_steps" in out["stop_reason"]
    assert len(retriever._queries) == 1 + 3 * 2


def test_official_deepnote_keeps_the_cap_of_fifteen_strictly_greater():
    model = ScriptedModel(script=accepting())
    out = noterag.build_graph("deepnote", model=model, retriever=Fresh()).invoke(
        {"question": QUESTION}, context={"profile": "official", "max_steps": 10, "max_failures": 10}
    )
    # 5, 10, 15 distinct: not > 15, one more step; 20 > 15 stops
    assert model.stages == ["init_note", *LOOP * 3, "answer"]
    assert out["stop_reason"] == "20 distinct passages (max_passages = 15)"
