"""Amber driven by scripted models: the exact sequence of prompts for each path, the ablation
switches, concurrent filter calls, parse fallbacks, the paper's prompt texts, and one run of the
real local model."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult
from pydantic import Field, PrivateAttr
from test_note_graphs import CORPUS, QUESTION
from test_prompts import paper, words

from noterag.base.errors import ConfigError
from noterag.core.parsing import Verdict, parse_new_question, parse_nli
from noterag.graphs import amber
from noterag.prompts import adaptive_note
from noterag.prompts import amber as amber_prompts
from scripted import KeywordRetriever, ScriptedModel, method_events

USEFUL, USELESS = '{"NLI result":"useful"}', '{"NLI result":"useless"}'
TRUE, FALSE = '{"status": "True"}', '{"status": "False"}'
AGENTS = ["reviewer", "challenger", "refiner"]


def script(**overrides: Any) -> dict[str, Any]:
    """Every passage useful, every memory better, never sufficient; each new question finds
    one unseen passage with top_k=3 (Aurelio Fenwick, then Ostra River)."""
    base = {
        "filter": USEFUL,
        "extract": lambda prompt: "Extracted: " + prompt.split("Text: ")[1].split("\n")[0],
        "init_note": "The Velmora Bridge was designed by Aurelio Fenwick.",
        "reviewer": "Strength: names the architect. Weakness: no birth year.",
        "challenger": "Add the architect's birth year.",
        "refiner": [
            "Memory 0: Fenwick designed the bridge.",
            "Memory 1: Fenwick was born in 1871.",
            "Memory 2",
        ],
        "accumulate": "Draft: Fenwick (1871-1938) designed the Velmora Bridge.",
        "review": TRUE,
        "sufficiency": FALSE,
        "refine_query": [
            "The birth year is missing.\n### New Question: When was Aurelio Fenwick born?",
            "### New Question\nOstra River length",
            "### New Question: Pellin Bridge",
        ],
        "answer": "1871",
    }
    return base | overrides


def run(model: ScriptedModel, **context: Any) -> dict[str, Any]:
    graph = amber.build(model=model, retriever=KeywordRetriever(passages=CORPUS))
    return graph.invoke({"question": QUESTION}, context={"top_k": 3} | context)


def iteration(filtered: int, kept: int, *, first: bool = False, agents: bool = True) -> list[str]:
    """The stages of one iteration up to the memory comparison: new query, filters, draft,
    agents, comparison (t = 0 has no new query and no comparison)."""
    stages = [] if first else ["refine_query"]
    stages += ["filter"] * filtered + ["extract"] * kept
    if kept:
        stages += ["init_note" if first else "accumulate"] + (AGENTS if agents else [])
        stages += [] if first else ["review"]
    return stages


def calls_add_up(out: dict[str, Any], model: ScriptedModel) -> bool:
    return out["llm_calls"] == len(model.calls) == sum(e["llm_calls"] for e in out["trace"]) + 1


# --- the loop's paths ------------------------------------------------------------------------------


def test_sufficient_after_the_first_iteration():
    # Section 3.4: the collector judges the memory after every memory update, the first included.
    model = ScriptedModel(script=script(sufficiency=TRUE))
    out = run(model)
    assert model.stages == [*iteration(3, 3, first=True), "sufficiency", "answer"]
    assert out["steps"] == 0 and out["sufficient"] is True
    assert out["best_note"] == "Memory 0: Fenwick designed the bridge."  # the refiner's memory
    assert "sufficient after 1 iteration" in out["stop_reason"]
    assert [e["step"] for e in out["trace"]] == [0]
    assert out["trace"][0]["sufficient"] is True and out["trace"][0]["verdict"] is None
    assert calls_add_up(out, model)
    # the sufficiency check reads the best memory
    assert "Notes: Memory 0: Fenwick designed the bridge.\n" in model.prompts_for("sufficiency")[0]


def test_sufficient_after_the_first_update():
    model = ScriptedModel(script=script(sufficiency=[FALSE, TRUE]))
    out = run(model)
    assert model.stages == [
        *iteration(3, 3, first=True),
        "sufficiency",
        *iteration(1, 1),
        "sufficiency",
        "answer",
    ]
    assert out["steps"] == 1 and out["query_log"] == ["When was Aurelio Fenwick born?"]
    assert out["best_note"] == "Memory 1: Fenwick was born in 1871."
    assert out["trace"][1]["new_passage_ids"] == ["p2"]
    assert calls_add_up(out, model)


def test_never_sufficient_runs_max_steps_iterations():
    model = ScriptedModel(script=script())
    out = run(model)  # max_steps = 3 iterations, the first included
    assert model.stages == [
        *iteration(3, 3, first=True),
        "sufficiency",
        *iteration(1, 1),
        "sufficiency",
        *iteration(1, 1),  # the last iteration: the cap ends the loop, no sufficiency check
        "answer",
    ]
    assert out["steps"] == 2 and "max_steps = 3" in out["stop_reason"]
    assert out["query_log"] == ["When was Aurelio Fenwick born?", "Ostra River length"]
    assert [e["sufficient"] for e in out["trace"]] == [False, False, None]
    assert calls_add_up(out, model)
    assert out["passage_ids"] == ["p1", "p7", "p3", "p2", "p4"]


def test_one_iteration_makes_no_sufficiency_check():
    model = ScriptedModel(script=script())
    out = run(model, max_steps=1)
    assert model.stages == [*iteration(3, 3, first=True), "answer"]
    assert out["trace"][0]["sufficiency_reason"].startswith("not asked")


def test_rejected_memory_is_not_judged_again():
    # An unchanged best memory was already judged insufficient: straight to a new query.
    model = ScriptedModel(script=script(review=FALSE))
    out = run(model)
    assert model.stages == [
        *iteration(3, 3, first=True),
        "sufficiency",
        *iteration(1, 1),
        *iteration(1, 1),
        "answer",
    ]
    assert out["best_note"] == "Memory 0: Fenwick designed the bridge." and out["failures"] == 2
    assert [e["verdict"] for e in out["trace"]] == [None, False, False]


def test_all_passages_filtered_out_reads_nothing_new():
    model = ScriptedModel(script=script(filter=USELESS))
    out = run(model)
    # no extraction, no memory call, no sufficiency check of an empty memory: only new queries
    assert model.stages == [
        *iteration(3, 0, first=True),
        *iteration(1, 0),
        *iteration(1, 0),
        "answer",
    ]
    assert out["best_note"] == "" and out["steps"] == 2
    assert out["trace"][0]["dropped_passage_ids"] == ["p1", "p7", "p3"]
    assert [e["reason"] for e in out["trace"]] == ["no new passages"] * 3
    assert all(e["sufficient"] is not True for e in out["trace"])
    assert out["answer"] == "1871" and calls_add_up(out, model)
    assert "Notes: \n" in model.prompts_for("refine_query")[0]


def test_a_later_iteration_filtered_out_goes_straight_to_a_new_query():
    model = ScriptedModel(
        script=script(filter=lambda p: USELESS if "Aurelio Fenwick (1871" in p else USEFUL)
    )
    out = run(model)
    assert model.stages == [
        *iteration(3, 3, first=True),
        "sufficiency",
        *iteration(1, 0),  # Aurelio Fenwick's passage is dropped: nothing to read
        *iteration(1, 1),
        "answer",
    ]
    assert (
        out["trace"][1]["dropped_passage_ids"] == ["p2"]
        and out["trace"][1]["new_passage_ids"] == []
    )


def test_empty_retrieval_makes_only_query_calls():
    model = ScriptedModel(script=script())
    graph = amber.build(model=model, retriever=KeywordRetriever(passages=[]))
    out = graph.invoke({"question": QUESTION})
    assert model.stages == ["refine_query", "refine_query", "answer"]
    assert out["best_note"] == "" and out["passage_ids"] == [] and out["answer"] == "1871"


# --- ablations (Table 2) ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("switches", "absent"),
    [
        ({"chunk_filter": False}, {"filter"}),
        ({"sentence_filter": False}, {"extract"}),
        ({"chunk_filter": False, "sentence_filter": False}, {"filter", "extract"}),
        ({"agent_updater": False}, set(AGENTS)),
    ],
    ids=["w/o CF", "w/o SF", "w/o ALL", "w/o AMU"],
)
def test_each_switch_removes_its_calls(switches: dict[str, bool], absent: set[str]):
    model = ScriptedModel(script=script(sufficiency=[FALSE, TRUE]))
    run(model, **switches)
    full = [*iteration(3, 3, first=True), "sufficiency", *iteration(1, 1), "sufficiency", "answer"]
    assert model.stages == [stage for stage in full if stage not in absent]


def test_without_the_chunk_filter_useless_passages_reach_the_memory():
    model = ScriptedModel(script=script(filter=USELESS, sufficiency=TRUE))
    out = run(model, chunk_filter=False)
    assert out["trace"][0]["new_passage_ids"] == ["p1", "p7", "p3"]


def test_sentence_filter_replaces_passage_text_and_off_keeps_it():
    model = ScriptedModel(script=script(sufficiency=TRUE))
    run(model)
    init = model.prompts_for("init_note")[0]
    assert "Text: Extracted: The Velmora Bridge over the Ostra" in init
    off = ScriptedModel(script=script(sufficiency=TRUE))
    run(off, sentence_filter=False)
    assert "Text: The Velmora Bridge over the Ostra" in off.prompts_for("init_note")[0]


def test_without_agents_the_draft_is_the_candidate():
    model = ScriptedModel(script=script(sufficiency=[FALSE, TRUE]))
    out = run(model, agent_updater=False)
    assert out["trace"][0]["candidate_note"] == script()["init_note"]
    assert out["best_note"] == script()["accumulate"]


# --- concurrency ------------------------------------------------------------------------------------


class RendezvousModel(ScriptedModel):
    """Holds every call of a stage in ``parties`` until that many calls of it are in flight at
    once, so the calls only return if the graph runs them concurrently; a call left waiting
    fails after a timeout instead of hanging the test."""

    parties: dict[str, int] = Field(default_factory=dict)
    timeout: float = 10.0
    _barriers: dict[str, threading.Barrier] = PrivateAttr(default_factory=dict)
    _waiting: dict[str, list[Any]] = PrivateAttr(default_factory=dict)

    def model_post_init(self, context: Any) -> None:
        super().model_post_init(context)
        self._barriers.update(
            {s: threading.Barrier(n, timeout=self.timeout) for s, n in self.parties.items()}
        )

    @staticmethod
    def _stage(run_manager: Any) -> str:
        return (run_manager.metadata or {}).get("noterag_stage", "?") if run_manager else "?"

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        if (barrier := self._barriers.get(self._stage(run_manager))) is not None:
            barrier.wait()  # BrokenBarrierError after the timeout unless all parties arrive
        return super()._generate(messages, stop, run_manager, **kwargs)

    async def _agenerate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        stage = self._stage(run_manager)
        if stage in self.parties:
            # on the event loop itself: only asyncio.gather lets the other calls arrive
            waiting = self._waiting.setdefault(stage, [0, asyncio.Event()])
            waiting[0] += 1
            if waiting[0] == self.parties[stage]:
                waiting[1].set()
            await asyncio.wait_for(waiting[1].wait(), self.timeout)
        return ScriptedModel._generate(self, messages, stop, run_manager, **kwargs)


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
def test_the_filter_calls_of_one_step_overlap(mode: str):
    model = RendezvousModel(script=script(), parties={"filter": 3, "extract": 3})
    graph = amber.build(model=model, retriever=KeywordRetriever(passages=CORPUS))
    args = ({"question": QUESTION},)
    context = {"top_k": 3, "max_steps": 1}
    if mode == "invoke":
        out = graph.invoke(*args, context=context)
    else:
        out = asyncio.run(graph.ainvoke(*args, context=context))
    assert sorted(model.stages) == sorted(iteration(3, 3, first=True) + ["answer"])
    assert out["trace"][0]["new_passage_ids"] == ["p1", "p7", "p3"]


def test_async_and_sync_runs_send_the_same_prompts():
    sync_model, async_model = ScriptedModel(script=script()), ScriptedModel(script=script())
    sync_out = run(sync_model)
    graph = amber.build(model=async_model, retriever=KeywordRetriever(passages=CORPUS))
    async_out = asyncio.run(graph.ainvoke({"question": QUESTION}, context={"top_k": 3}))
    # concurrent calls of one step may arrive in any order
    assert sorted(async_model.calls) == sorted(sync_model.calls)
    assert async_out["trace"] == sync_out["trace"]


# --- parse fallbacks --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "kept", "parsed"),
    [
        ('```json\n{"NLI result": "Useless"}\n```', False, True),
        ("{'NLI result': 'USEFUL'}", True, True),
        ("{“NLI result”: “useless”}", False, True),
        ("useless", False, True),
        ('{"NLI result":"xxx"}', True, False),  # no verdict: the passage is kept
        ("", True, False),
    ],
)
def test_nli_replies_parse_or_keep_the_passage(reply: str, kept: bool, parsed: bool):
    graph = amber.build(
        model=ScriptedModel(script=script(filter=reply)),
        retriever=KeywordRetriever(passages=CORPUS),
    )
    events = [
        chunk
        for chunk in graph.stream(
            {"question": QUESTION}, context={"top_k": 3, "max_steps": 1}, stream_mode="custom"
        )
        if chunk["type"] == "filter"
    ]
    assert [(e["id"], e["useful"], e["parsed"]) for e in events] == [
        (p, kept, parsed) for p in ("p1", "p7", "p3")
    ]
    out = run(ScriptedModel(script=script(filter=reply)), max_steps=1)
    assert out["unparsed_filters"] == (0 if parsed else 3)
    assert len(out["trace"][0]["dropped_passage_ids"]) == (0 if kept else 3)


def test_parse_nli():
    assert parse_nli('{"NLI result":"useful"}') == Verdict(True, True)
    assert parse_nli('{"nli_result": "Useless"}') == Verdict(False, True)
    assert parse_nli("The NLI result is useful.") == Verdict(True, True)
    assert parse_nli("useful or useless, hard to say") == Verdict(False, False)
    assert parse_nli("no idea") == Verdict(False, False)


@pytest.mark.parametrize(
    ("reply", "logged"),
    [
        (
            "The year is missing.\n### New Question: When was Aurelio Fenwick born?",
            ["When was Aurelio Fenwick born?"],
        ),
        (
            '### New Question\n\n"When was Aurelio Fenwick born?"',
            ["When was Aurelio Fenwick born?"],
        ),
        ("**New Question:** Aurelio Fenwick birth year", ["Aurelio Fenwick birth year"]),
        (
            "I would search for his birth.\nAurelio Fenwick birth year",
            ["Aurelio Fenwick birth year"],
        ),
        ("Aurelio Fenwick birth year\n### New Question", ["Aurelio Fenwick birth year"]),
        (f"### New Question: {QUESTION}", []),  # a repeat of the question is not searched
        ("", []),
    ],
)
def test_new_question_parse_and_fallbacks(reply: str, logged: list[str]):
    model = ScriptedModel(script=script(refine_query=reply))
    out = run(model, max_steps=2)
    assert out["query_log"] == logged
    assert out["trace"][1]["queries"] == logged


def test_parse_new_question():
    assert parse_new_question("### New Question: A?\n### New Question: B?") == "B?"
    assert parse_new_question("The new question should be concise.\nB?") == "B?"
    assert parse_new_question("### New Question:\n") == ""
    assert parse_new_question("1. First?") == "First?"


@given(st.text())
def test_amber_parsers_never_raise(text: str):
    assert isinstance(parse_nli(text), Verdict)
    assert isinstance(parse_new_question(text), str)


def test_unparsed_sufficiency_means_insufficient():
    model = ScriptedModel(script=script(sufficiency="I think so."))
    out = run(model)
    assert out["steps"] == 2
    assert [e["sufficiency_parsed"] for e in out["trace"]] == [False, False, None]


# --- prompts ----------------------------------------------------------------------------------------


AMBER_OWN = [
    "init_note",
    "refine_query",
    "review",
    "chunk_filter",
    "sentence_filter",
    "reviewer",
    "challenger",
    "refiner",
]


@pytest.mark.parametrize("name", AMBER_OWN)
def test_prompts_are_the_papers(name: str):
    text = getattr(amber_prompts.PAPER, name).text
    if name == "refiner":  # the marked deviation: the paper prints "suggestions: suggestions"
        assert "suggestions: {suggestions}\n" in text
        text = text.replace("{suggestions}", "suggestions")
    assert words(text) in paper("amber.txt")


def test_borrowed_and_own_prompts_say_where_they_come_from():
    prompts = amber_prompts.PAPER
    assert prompts.accumulate.text == adaptive_note.PAPER.accumulate.text
    assert "Adaptive-Note" in prompts.accumulate.source
    # the same texts, marked as borrowed (own objects: no accidental sharing)
    for task, prompt in prompts.answer.items():
        assert prompt.text == adaptive_note.PAPER.answer[task].text
        assert prompt.borrowed_from == adaptive_note.PAPER.answer[task].source
    assert prompts.accumulate.borrowed_from and prompts.init_note.borrowed_from
    assert "ours" in prompts.sufficiency.source
    assert words(prompts.sufficiency.text) not in paper("amber.txt")
    assert '{"status": "True"}' in prompts.review.text and "“" not in prompts.review.text


def test_prompts_carry_what_each_agent_wrote():
    model = ScriptedModel(script=script(sufficiency=[FALSE, TRUE]))
    run(model)
    refiner = model.prompts_for("refiner")[1]
    assert f"reviewer information: {script()['reviewer']}\n" in refiner
    assert f"suggestions: {script()['challenger']}\n" in refiner
    assert f"Notes: {script()['accumulate']}\n" in refiner  # the agents revise the draft
    # the memory-updating comparison: Note 1 is M_opt, Note 2 the refined candidate
    review = model.prompts_for("review")[0]
    assert (
        "Provided Note 1: Memory 0: Fenwick designed the bridge.\nProvided Note 2: Memory 1: "
        in review
    )
    # one passage and the original question per NLI call
    nli = model.prompts_for("filter")[0]
    assert nli.count("Title: ") == 1 and f"Question: {QUESTION}\n" in nli
    query = model.prompts_for("refine_query")[0]
    assert (
        query.endswith('starting with "### New Question".')
        and "Existing question list: \n" in query
    )


# --- events, roles, configuration --------------------------------------------------------------------


def test_stream_reports_each_decision_and_only_answer_tokens():
    model = ScriptedModel(script=script(sufficiency=[FALSE, TRUE]))
    graph = amber.build(model=model, retriever=KeywordRetriever(passages=CORPUS))
    custom, messages = [], []
    for mode, chunk in graph.stream(
        {"question": QUESTION}, context={"top_k": 3}, stream_mode=["custom", "messages"]
    ):
        (custom if mode == "custom" else messages).append(chunk)
    custom = method_events(custom)
    kinds = [e["type"] for e in custom]
    assert kinds == [
        "passages",
        *["filter"] * 3,
        "sentences",
        "note",
        *["memory_review"] * 3,
        "verdict",
        "sufficiency",
        "queries",
        "passages",
        "filter",
        "sentences",
        *["memory_review"] * 3,
        "verdict",
        "sufficiency",
        "answer",
    ]
    assert [e["agent"] for e in custom if e["type"] == "memory_review"] == AGENTS * 2
    assert [(e["step"], e["sufficient"]) for e in custom if e["type"] == "sufficiency"] == [
        (0, False),
        (1, True),
    ]
    assert [e["accepted"] for e in custom if e["type"] == "verdict"] == [True, True]
    assert {meta["langgraph_node"] for _, meta in messages} == {"answer"}
    assert "".join(str(m.content) for m, _ in messages) == "1871"


def test_filter_model_serves_the_chunk_filter_only():
    model, nli = (
        ScriptedModel(script=script(sufficiency=TRUE)),
        ScriptedModel(script={"filter": USELESS}),
    )
    graph = amber.build(model=model, retriever=KeywordRetriever(passages=CORPUS), filter_model=nli)
    out = graph.invoke({"question": QUESTION}, context={"top_k": 3, "max_steps": 1})
    assert nli.stages == ["filter"] * 3 and "filter" not in model.stages
    assert out["trace"][0]["dropped_passage_ids"] == ["p1", "p7", "p3"]


def test_bad_configuration_is_refused():
    model = ScriptedModel(script=script())
    with pytest.raises(ConfigError, match="official"):
        run(model, profile="official")
    with pytest.raises(ConfigError, match="max_steps"):
        run(model, max_steps=0)
    with pytest.raises(ConfigError, match="no model role"):
        amber.build(model=model, retriever=KeywordRetriever(passages=CORPUS), judge_model=model)


def test_studio_schemas():
    graph = amber.build(model=ScriptedModel(), retriever=KeywordRetriever(passages=CORPUS))
    context = graph.get_context_jsonschema()["properties"]
    assert context["max_steps"]["default"] == 3
    assert {"chunk_filter", "sentence_filter", "agent_updater"} <= set(context)
    assert "w/o CF" in context["chunk_filter"]["description"]
    assert set(graph.get_input_jsonschema()["properties"]) == {"question", "messages", "task"}
    assert {"answer", "best_note", "trace", "query_log", "llm_calls"} <= set(
        graph.get_output_jsonschema()["properties"]
    )


# --- the real local model ------------------------------------------------------------------------


def test_local_model_end_to_end(local_model):
    from noterag.retrievers import load_retriever
    from noterag.retrievers.sample import sample_index, sample_questions

    graph = amber.build(model=local_model, retriever=load_retriever(f"bm25:{sample_index()}"))
    question = sample_questions()[0]["question"]
    out = graph.invoke({"question": question}, context={"max_tokens": 96, "top_k": 2})
    assert out["answer"].strip()
    # the call count is the path the run took, iteration by iteration
    expected = 1  # the answer
    for entry in out["trace"]:
        retrieved = len(entry["new_passage_ids"]) + len(entry["dropped_passage_ids"])
        kept = len(entry["new_passage_ids"])
        calls = (entry["step"] > 0) + retrieved + kept  # new query, NLI verdicts, extractions
        calls += (1 + 3 + (entry["step"] > 0)) if kept else 0  # draft, agents, comparison
        calls += entry["sufficiency_parsed"] is not None  # None: not asked
        assert entry["llm_calls"] == calls
        expected += calls
    assert out["llm_calls"] == expected
