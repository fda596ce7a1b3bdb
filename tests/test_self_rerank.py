"""Self-Rerank driven by scripted models: one search, the labelling call (the authors' file,
whole prompt compared), the answer from the labelled reply only (Adaptive-Note's generator),
the labels read from the reply with counted fallbacks, both profiles, cost, trace, events,
async, roles; and one run of the local model."""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any

import pytest

from noterag.base.errors import ConfigError
from noterag.core.parsing import count_fallbacks
from noterag.graphs import self_rerank
from noterag.nodes.self_rerank import parse_labels
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
# The file's generation format, one line per passage, for the question's top 5 (p1 p7 p3 p6 p4)
LABELLED = (
    "1. passage: The Velmora Bridge was designed by Aurelio Fenwick, label: <useful><relevant>, "
    "reason: it names the architect\n"
    "2. passage: Lise Ambrath, label: <useless><relevant>, reason: another architect\n"
    "3. passage: Clara Fenwick, label: <useful><irrelevant>, reason: same surname\n"
    "4. passage: Tobias Wren, label: <useless><irrelevant>, reason: another architect\n"
    "5. passage: Ostra River, label: <useless><irrelevant>, reason: a river"
)
SCRIPT = {"rerank": LABELLED, "answer": "1871"}
TAGS = [(True, True), (False, True), (True, False), (False, False), (False, False)]


top = partial(ranked, CORPUS, QUESTION)  # top(k): the passages ranked first, in order
run = partial(run_recorded, self_rerank.build, CORPUS, SCRIPT)  # -> (output, model, retriever)


def labels_of(reply: str, found: list[dict[str, Any]]) -> tuple[list[tuple[Any, Any]], int]:
    with count_fallbacks() as counts:
        labels = parse_labels(reply, found)
    assert [label["id"] for label in labels] == [p["id"] for p in found]
    return [(label["useful"], label["relevant"]) for label in labels], counts["rerank_label"]


# --------------------------------------------------------------------------- the graph


def test_one_search_the_labels_then_the_answer():
    out, model, retriever = run()
    assert model.stages == ["rerank", "answer"]
    assert retriever.queries == [(QUESTION, 5)]
    assert out["passage_ids"] == [p["id"] for p in top(5)]
    assert out["best_note"] == LABELLED and out["answer"] == "1871"
    assert out["labels"] == [
        {"id": p["id"], "title": p["title"], "useful": useful, "relevant": relevant}
        for p, (useful, relevant) in zip(top(5), TAGS, strict=True)
    ]
    assert out["llm_calls"] == len(model.calls) == 2
    assert out["prompt_tokens"] > 0 and out["completion_tokens"] > 0
    assert out["stop_reason"] == "single pass (the baseline has no loop)"
    assert out.get("fallbacks", {}) == {}


def test_both_prompts_whole_and_the_answer_reads_the_labels_not_the_passages():
    _, model, _ = run()
    assert model.calls == [
        ("rerank", vendored("self_rerank", query=QUESTION, refs=numbered(top(5)))),
        # Adaptive-Note's generator, the labelled reply as its note
        ("answer", generator_prompt(LABELLED)),
    ]
    assert model.calls[0][1].endswith("Generation Format:\n1. passage:..., label:..., reason:...")
    assert not any(p["text"] in model.calls[1][1] for p in top(5))


def test_official_profile_sends_the_files_with_the_official_passage_format():
    _, model, _ = run(profile="official", top_k=2)
    assert model.calls == [
        ("rerank", vendored("self_rerank", query=QUESTION, refs=official_refs(top(2)))),
        ("answer", vendored("gen_answer", query=QUESTION, note=LABELLED)),
    ]


def test_unreadable_labels_are_counted_and_the_answer_still_comes():
    reply = "1. passage: Velmora Bridge, label: <useful><relevant>\nThe rest are not worth it."
    out, model, _ = run(ScriptedModel(script={"rerank": reply, "answer": "1871"}))
    assert out["fallbacks"] == {"rerank_label": 4}
    tags = [(label["useful"], label["relevant"]) for label in out["labels"]]
    assert tags == [(True, True)] + [(None, None)] * 4
    assert model.stages == ["rerank", "answer"] and out["answer"] == "1871"
    assert model.prompts_for("answer")[0].count(reply) == 1


def test_the_trace_shows_each_verdict_by_passage():
    reply = LABELLED.split("\n5.")[0]  # no item for the fifth passage
    out, _, _ = run(ScriptedModel(script={"rerank": reply, "answer": "1871"}))
    ids = [p["id"] for p in top(5)]
    assert out["trace"] == [
        {
            "step": 0,
            "queries": [QUESTION],
            "new_passage_ids": ids,
            "useful_passage_ids": [ids[0], ids[2]],
            "relevant_passage_ids": [ids[0], ids[1]],
            "unlabelled_passage_ids": [ids[4]],
            "labelled_passages": reply,
            "llm_calls": 1,
        }
    ]


def test_progress_events():
    reply = LABELLED.split("\n4.")[0]
    graph = self_rerank.build(
        model=ScriptedModel(script={"rerank": reply, "answer": "1871"}),
        retriever=KeywordRetriever(passages=CORPUS),
    )
    events = custom_events(graph, {"question": QUESTION})
    assert [e["type"] for e in events] == ["passages", "labels", "answer"]
    assert events[1]["step"] == 0 and len(events[1]["labels"]) == 5
    line = progress_of(self_rerank.SPEC)["labels"](events[1])
    assert line == "labelled 5 passages: 2 useful, 2 relevant (2 without a readable label)"


def test_crud_is_refused_in_one_line():
    model = ScriptedModel(script=SCRIPT)
    graph = self_rerank.build(model=model, retriever=KeywordRetriever(passages=CORPUS))
    with pytest.raises(
        ConfigError, match=r"^self-rerank answers tasks multihop, asqa, strategyqa, not 'crud' "
    ):
        graph.invoke({"question": QUESTION, "task": "crud"})
    assert model.calls == []


def test_async_run_makes_the_same_calls():
    expected, by_invoke, _ = run()
    model = ScriptedModel(script=SCRIPT)
    out = asyncio.run(
        self_rerank.build(model=model, retriever=KeywordRetriever(passages=CORPUS)).ainvoke(
            {"question": QUESTION}
        )
    )
    assert model.calls == by_invoke.calls
    for key in ("answer", "best_note", "labels", "trace", "llm_calls", "stop_reason"):
        assert out[key] == expected[key], key


def test_each_role_can_have_its_own_model():
    labeller, answerer = ScriptedModel(script=SCRIPT), ScriptedModel(script=SCRIPT)
    self_rerank.build(
        model=answerer, retriever=KeywordRetriever(passages=CORPUS), rerank_model=labeller
    ).invoke({"question": QUESTION})
    assert labeller.stages == ["rerank"] and answerer.stages == ["answer"]


# --------------------------------------------------------------------------- reading the labels

THREE = passages(("A", "a"), ("B", "b"), ("C", "c"))


@pytest.mark.parametrize(
    ("reply", "tags", "fallbacks"),
    [
        # the file's format
        (("1. passage: a, label: <useful><relevant>, reason: x\n"
          "2. passage: b, label: <useless><irrelevant>, reason: y\n"
          "3. passage: c, label: <useful> <irrelevant>, reason: z"),
         [(True, True), (False, False), (True, False)], 0),
        # other item markers, multi-line items, emphasis, words instead of tags
        (("Passage 1: a\nLabel: useless, relevant\nReason: x\n\n"
          "**2.** b — label: <Useful><Relevant>\n[3] c\n   label: not useful, not relevant"),
         [(False, True), (True, True), (False, False)], 0),
        # the official passage format echoed back
        ("Passage #2 Title: B, label: <useful><relevant>\nPassage #1 Title: A, label: <useless><relevant>",
         [(False, True), (True, True), (None, None)], 1),
        # the words before "label" (the passage's own text) do not count
        ("1. passage: a useful and relevant fact, label: useless, irrelevant, reason: relevant elsewhere",
         [(False, False), (None, None), (None, None)], 2),
        # the words in prose, without a label, are no verdict
        (("1. The passage is relevant to the question.\n"
          "It does not provide any useful information.\n2. label: useful and relevant"),
         [(None, None), (True, True), (None, None)], 2),
        # one tag missing; an item past the last passage and a repeated number are ignored
        ("1. label: <useful>\n1. label: <useless><irrelevant>\n4. label: <useful><relevant>",
         [(True, None), (None, None), (None, None)], 3),
        # no items at all
        ("All passages are <useful><relevant>.", [(None, None)] * 3, 3),
        ("", [(None, None)] * 3, 3),
    ],
)  # fmt: skip
def test_labels_are_read_per_passage(reply: str, tags: list[tuple[Any, Any]], fallbacks: int):
    assert labels_of(reply, THREE) == (tags, fallbacks)


def test_a_long_degenerate_reply_is_read_quickly():
    import time

    reply = "1." + " " * 20_000 + "label" + "\t" * 20_000 + "passage" * 5_000
    started = time.perf_counter()
    labels_of(reply, THREE)
    assert time.perf_counter() - started < 1.0


@pytest.mark.e2e
def test_local_model_end_to_end(local_model: Any):
    from noterag.retrievers import load_retriever
    from noterag.retrievers.sample import sample_index, sample_questions

    graph = self_rerank.build(model=local_model, retriever=load_retriever(f"bm25:{sample_index()}"))
    out = graph.invoke({"question": sample_questions()[0]["question"]}, context={"max_tokens": 128})
    assert out["answer"].strip() and out["best_note"].strip()
    assert out["llm_calls"] == 2 and len(out["passage_ids"]) == 5
    assert [label["id"] for label in out["labels"]] == out["passage_ids"]
    unread = sum(1 for label in out["labels"] if None in (label["useful"], label["relevant"]))
    assert out.get("fallbacks", {}).get("rerank_label", 0) == unread
    assert out["stop_reason"] == "single pass (the baseline has no loop)"
