"""ReSP driven by scripted models: the exact stage sequence of each stop path, the concurrent
dual summaries, parse fallbacks, role models, Table 1's words, and one run of the local model."""

from __future__ import annotations

import asyncio
import re
import threading
from pathlib import Path
from typing import Any

import pytest
from pydantic import PrivateAttr

from noterag.base.errors import ConfigError
from noterag.core.context import ReSPContext
from noterag.core.parsing import parse_sub_question, parse_yes_no, until_done
from noterag.graphs import resp
from noterag.prompts import resp as resp_prompts
from scripted import (
    KeywordRetriever,
    RecordingRetriever,
    RendezvousModel,
    ScriptedModel,
    invoke_by,
    method_events,
    passages,
)

QUESTION = "Which river flows through the birthplace of the composer of the Harrowdale Suite?"
CORPUS = passages(
    ("Harrowdale Suite", "The Harrowdale Suite is an orchestral work by the composer Ilse Marrin."),
    ("Ilse Marrin", "Ilse Marrin, composer, was born in Tolvany in 1902."),
    ("Tolvany", "Tolvany is a market town on the river Serrow."),
    ("Serrow", "The Serrow is a river of 140 km that flows through Tolvany and Quill."),
    ("Marrin Quartet", "The Marrin Quartet premiered works by the composer Ilse Marrin."),
    ("Harrowdale", "Harrowdale is a valley north of Quill."),
    ("Quill", "Quill is a port city at the mouth of the river Serrow."),
)
SUB_QUESTIONS = ["Sub-question: Where was Ilse Marrin born?", "Which river flows through Tolvany?"]
SUMMARIES = {"global_summary", "local_summary"}
# the judge says No, then Yes
TWO_ITERATIONS = ["global_summary", "judge", "plan", "summaries", "judge", "answer"]


def script(**overrides: Any) -> dict[str, Any]:
    base = {
        "global_summary": "The Harrowdale Suite was composed by Ilse Marrin. [DONE]",
        "local_summary": lambda prompt: (
            "Yes, Tolvany" if "question Where was" in prompt else "Yes, the Serrow"
        ),
        "judge": "No",
        "plan": SUB_QUESTIONS,
        "answer": "the Serrow",
    }
    return base | overrides


def graph(model: ScriptedModel, retriever: Any = None) -> Any:
    return resp.build(model=model, retriever=retriever or KeywordRetriever(passages=CORPUS))


def run(model: ScriptedModel, **context: Any) -> dict[str, Any]:
    return graph(model).invoke({"question": QUESTION}, context=context or None)


def iterations(stages: list[str]) -> list[str]:
    """The stage sequence with each iteration's two concurrent summaries (in either order) as
    one "summaries" item."""
    out: list[str] = []
    for stage in stages:
        if stage in SUMMARIES and out and out[-1] in SUMMARIES and out[-1] != stage:
            out[-1] = "summaries"
        else:
            out.append(stage)
    return out


def calls_add_up(out: dict[str, Any], model: ScriptedModel) -> None:
    assert out["llm_calls"] == len(model.calls) == sum(e["llm_calls"] for e in out["trace"]) + 1


# --- stop paths ---------------------------------------------------------------------------------


def test_judge_yes_at_once_answers_without_a_plan():
    model = ScriptedModel(script=script(judge="Yes"))
    out = run(model)
    assert model.stages == ["global_summary", "judge", "answer"]  # no local summary while q = Q
    assert out["steps"] == 1 and out["query_log"] == [] and out["local_memory"] == []
    assert out["global_memory"] == ["The Harrowdale Suite was composed by Ilse Marrin."]
    assert out["memory"] == "The Harrowdale Suite was composed by Ilse Marrin."
    assert "sufficient" in out["stop_reason"]
    assert out["answer"] == "the Serrow"
    assert model.prompts_for("answer")[0].endswith(
        f"The following are given reference: {out['memory']}\nQuestion: {QUESTION}"
    )
    calls_add_up(out, model)


def test_no_every_time_runs_max_steps_and_skips_the_last_plan():
    model, retriever = ScriptedModel(script=script()), RecordingRetriever(passages=CORPUS)
    out = graph(model, retriever).invoke({"question": QUESTION})
    assert iterations(model.stages) == [
        "global_summary", "judge", "plan",
        "summaries", "judge", "plan",
        "summaries", "judge", "answer",
    ]  # fmt: skip
    assert out["steps"] == 3 and "max_steps = 3" in out["stop_reason"]
    assert out["query_log"] == ["Where was Ilse Marrin born?", "Which river flows through Tolvany?"]
    assert out["local_memory"] == [
        {"sub_question": "Where was Ilse Marrin born?", "response": "Yes, Tolvany"},
        {"sub_question": "Which river flows through Tolvany?", "response": "Yes, the Serrow"},
    ]
    # one retrieval per iteration, top-5 for the question, then for each sub-question
    assert retriever.queries == [(q, 5) for q in (QUESTION, *out["query_log"])]
    assert [e["step"] for e in out["trace"]] == [0, 1, 2]
    assert [e["sub_question"] for e in out["trace"]] == [QUESTION, *out["query_log"]]
    assert out["trace"][1]["local_summary"] == out["local_memory"][0]
    calls_add_up(out, model)
    # the combined queues: global summaries, then each sub-question with its response
    assert model.prompts_for("answer")[0].count("Ilse Marrin.\n") == 3
    assert (
        "Where was Ilse Marrin born? Yes, Tolvany\nWhich river flows through Tolvany? Yes, the Serrow\n"
        in (model.prompts_for("answer")[0])
    )


def test_max_steps_one_is_a_single_round():
    model = ScriptedModel(script=script())
    out = run(model, max_steps=1)
    assert model.stages == ["global_summary", "judge", "answer"]
    assert "max_steps = 1" in out["stop_reason"]


def test_judge_yes_in_the_second_iteration_stops_there():
    model = ScriptedModel(script=script(judge=["No", "Yes"]))
    out = run(model)
    assert iterations(model.stages) == TWO_ITERATIONS
    assert out["steps"] == 2 and [e["sufficient"] for e in out["trace"]] == [False, True]


@pytest.mark.parametrize(
    "plans",
    [
        [QUESTION.upper().rstrip("?")],  # the question itself, case and punctuation aside
        ["Where was Ilse Marrin born?", "sub-question: where was ilse marrin born"],
    ],
    ids=["repeats-the-question", "repeats-a-sub-question"],
)
def test_a_repeated_sub_question_is_refused_and_the_loop_stops(plans: list[str]):
    model = ScriptedModel(script=script(plan=plans))
    out = run(model, max_steps=5)
    planned = len(plans) - 1  # the last plan repeats
    assert iterations(model.stages) == [
        "global_summary", "judge", *["plan", "summaries", "judge"] * planned, "plan", "answer",
    ]  # fmt: skip
    assert out["steps"] == 1 + planned
    assert "repeated an already retrieved sub-question" in out["stop_reason"]
    assert out["trace"][-1]["refused"] == out["stop_reason"]
    assert out["trace"][-1]["passage_ids"] == [] and len(out["query_log"]) == planned
    calls_add_up(out, model)


def test_an_empty_plan_stops_the_loop():
    model = ScriptedModel(script=script(plan="**Sub-question:**\n\n"))
    out = run(model)
    assert model.stages == ["global_summary", "judge", "plan", "answer"]
    assert out["stop_reason"] == "the plan named no sub-question"


# --- the dual summaries run concurrently -------------------------------------------------------


class SummariesRendezvous(RendezvousModel):
    """Every local summary, and every global summary after the first, waits until the other
    summary of its iteration has started (``meet(2, *SUMMARIES)``): run one after the other,
    they break the barrier (the run fails after the timeout) instead of hanging."""

    _globals: list[str] = PrivateAttr(default_factory=list)

    def barrier_for(self, stage: str) -> threading.Barrier | None:
        with self._lock:
            first_global = stage == "global_summary" and not self._globals
            if stage == "global_summary":
                self._globals.append(stage)
        return None if first_global else super().barrier_for(stage)


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
def test_the_two_summaries_of_an_iteration_overlap(mode: str):
    model = SummariesRendezvous(script=script())
    barrier = model.meet(2, *SUMMARIES)
    out = invoke_by(mode, graph(model), {"question": QUESTION})
    assert out["steps"] == 3 and len(model._globals) == 3
    assert not barrier.broken


def test_summaries_run_sequentially_would_break_the_barrier():
    # the rendezvous model really detects sequential calls: the first lone wait times out
    model = SummariesRendezvous(script=script())
    model.meet(2, *SUMMARIES, timeout=0.2)
    model._globals.append("global_summary")
    with pytest.raises(threading.BrokenBarrierError):
        model.invoke("x", config={"metadata": {"noterag_stage": "global_summary"}})


# --- what each prompt reads ----------------------------------------------------------------------


def test_each_summary_reads_its_question_and_this_iterations_documents():
    model = ScriptedModel(script=script(judge=["No", "Yes"]))
    run(model, top_k=2)
    first, second = model.prompts_for("global_summary")
    assert first.startswith("Passages: [1] Title: Harrowdale Suite\nText: ")
    assert first.endswith(f"Question:{QUESTION}\nPassage:")
    (local,) = model.prompts_for("local_summary")
    # Table 1 puts "?" after the slot, as printed, so a question ending in "?" shows two
    assert (
        "respond completely and accurately to the question Where was Ilse Marrin born?? \n" in local
    )
    # both summaries of iteration 2 read the documents retrieved for the sub-question
    docs = second.split("Passages: ")[1].split("\nYour job")[0]
    assert "Title: Ilse Marrin\n" in docs and f"Known information: {docs}. If yes" in local
    # the judge and the plan read the combined memory queues
    plan = model.prompts_for("plan")[0]
    assert (
        "[Known information]: The Harrowdale Suite was composed by Ilse Marrin.\n[Target question]: "
        in plan
    )
    judge = model.prompts_for("judge")[1]
    assert "Known information: The Harrowdale Suite was composed by Ilse Marrin.\n" in judge
    assert "Ilse Marrin.\nWhere was Ilse Marrin born? Yes, Tolvany. \nIf you can" in judge


# --- parse fallbacks ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "sufficient", "parsed"),
    [
        ("Yes.", True, True),
        ("yes, because the memory names the river", True, True),
        ("**No**", False, True),
        ("Answer: Yes", True, True),
        ("No. I need to know where Ilse Marrin was born.", False, True),
        ("I am not sure.", False, False),
        ("Maybe yes, maybe no", False, False),
        ("", False, False),
    ],
)
def test_judge_replies(reply: str, sufficient: bool, parsed: bool):
    verdict = parse_yes_no(reply)
    assert (verdict.accepted, verdict.parsed) == (sufficient, parsed)


def test_an_unreadable_judgment_counts_as_no_and_is_counted():
    model = ScriptedModel(script=script(judge=["I am not sure.", "Yes"]))
    out = run(model)
    assert iterations(model.stages) == TWO_ITERATIONS
    assert out["unparsed_judgments"] == 1
    assert [e["judge_parsed"] for e in out["trace"]] == [False, True]


@pytest.mark.parametrize(
    ("reply", "question"),
    [
        ("Where was Ilse Marrin born?", "Where was Ilse Marrin born?"),
        ("Sub-question: Where was Ilse Marrin born?", "Where was Ilse Marrin born?"),
        ("[You Thought]: Where was Ilse Marrin born?", "Where was Ilse Marrin born?"),
        ('**Next question:** "Where was Ilse Marrin born?"', "Where was Ilse Marrin born?"),
        (
            "Thought:\n1. Where was Ilse Marrin born?\n2. Which river?",
            "Where was Ilse Marrin born?",
        ),
        ("  \n", ""),
    ],
)
def test_plan_replies(reply: str, question: str):
    assert parse_sub_question(reply) == question


def test_global_summary_ends_at_done_and_loses_a_forbidden_prefix():
    assert (
        until_done("Passage: Ilse Marrin composed it. [DONE] trailing")
        == "Ilse Marrin composed it."
    )
    assert until_done("Response: no marker") == "no marker"


# --- models, configuration, streaming ---------------------------------------------------------


def test_role_models_each_get_only_their_stages():
    base = ScriptedModel(script=script())
    reasoner = ScriptedModel(script=script(judge=["No", "Yes"]))
    summarizer, generator = (
        ScriptedModel(script=script()),
        ScriptedModel(script=script(answer="Serrow")),
    )
    g = resp.build(
        model=base,
        retriever=KeywordRetriever(passages=CORPUS),
        reasoner_model=reasoner,
        summarizer_model=summarizer,
        generator_model=generator,
    )
    out = g.invoke({"question": QUESTION})
    assert base.calls == []
    assert reasoner.stages == ["judge", "plan", "judge"]
    assert sorted(summarizer.stages) == ["global_summary", "global_summary", "local_summary"]
    assert generator.stages == ["answer"] and out["answer"] == "Serrow"


def test_one_role_model_leaves_the_others_on_the_default():
    base, generator = ScriptedModel(script=script(judge="Yes")), ScriptedModel(script=script())
    resp.build(
        model=base, retriever=KeywordRetriever(passages=CORPUS), generator_model=generator
    ).invoke({"question": QUESTION})
    assert base.stages == ["global_summary", "judge"] and generator.stages == ["answer"]


def test_configuration_is_checked():
    model = ScriptedModel(script=script())
    with pytest.raises(ConfigError, match="no model role"):
        resp.build(model=model, retriever=KeywordRetriever(passages=CORPUS), answer_model=model)
    with pytest.raises(ConfigError, match="max_steps"):
        run(model, max_steps=0)
    with pytest.raises(ConfigError, match="profile 'official'"):
        run(model, profile="official")  # ReSP has no official code
    with pytest.raises(ConfigError, match="no answer prompt for task 'asqa'"):
        graph(ScriptedModel(script=script(judge="Yes"))).invoke(
            {"question": QUESTION, "task": "asqa"}
        )


def test_stream_reports_each_decision_and_only_answer_tokens():
    model = ScriptedModel(script=script(judge=["No", "Yes"]))
    custom, messages = [], []
    for mode, chunk in graph(model).stream(
        {"question": QUESTION}, stream_mode=["custom", "messages"]
    ):
        (custom if mode == "custom" else messages).append(chunk)
    custom = method_events(custom)
    assert [(e["type"], e["step"]) for e in custom if e["type"] != "answer"] == [
        ("passages", 0), ("summaries", 0), ("judgment", 0), ("sub_question", 1),
        ("passages", 1), ("summaries", 1), ("judgment", 1),
    ]  # fmt: skip
    assert [e["sufficient"] for e in custom if e["type"] == "judgment"] == [False, True]
    assert custom[-1] == {"type": "answer", "answer": "the Serrow"}
    assert {meta["langgraph_node"] for _, meta in messages} == {"answer"}
    assert "".join(str(m.content) for m, _ in messages) == "the Serrow"


def test_async_run_sends_the_same_prompts():
    sync_model, async_model = ScriptedModel(script=script()), ScriptedModel(script=script())
    run(sync_model)
    asyncio.run(graph(async_model).ainvoke({"question": QUESTION}))
    assert sorted(async_model.calls) == sorted(sync_model.calls)
    assert iterations(async_model.stages) == iterations(sync_model.stages)


def test_studio_schemas():
    g = graph(ScriptedModel())
    context = g.get_context_jsonschema()["properties"]
    assert context["max_steps"]["default"] == 3 and context["top_k"]["default"] == 5
    assert "iterations" in context["max_steps"]["description"]
    assert set(g.get_input_jsonschema()["properties"]) == {"question", "messages", "task"}
    output = set(g.get_output_jsonschema()["properties"])
    assert {"answer", "memory", "global_memory", "local_memory", "query_log", "trace"} <= output
    assert not {"passages", "summaries", "stalled"} & output
    assert ReSPContext().max_steps == 3


# --- Table 1, word for word -----------------------------------------------------------------------

SEED = Path(__file__).resolve().parents[2] / "shared" / "seeds" / "resp.txt"
# Table 1's placeholder names for our slots. The local pathway prompt's known information is
# printed as the memory queues; we fill in the documents (Algorithm 1; see prompts/resp.py).
TABLE_NAMES = {
    "query": "Overarching question",
    "sub_question": "Sub-question",
    "memory": "Combined memory queues",
    "refs": "docs",
}


def table_words(text: str) -> str:
    text = text.replace("\\n", " ").translate(str.maketrans({"”": '"', "“": '"', "’": "'"}))
    return re.sub(r"\s+", " ", text).strip()


@pytest.mark.parametrize(
    "prompt",
    [
        resp_prompts.PAPER.judge,
        resp_prompts.PAPER.plan,
        resp_prompts.PAPER.global_evidence,
        resp_prompts.PAPER.local_pathway,
        *resp_prompts.PAPER.answer.values(),
    ],
    ids=lambda p: p.name,
)
def test_prompts_are_table_1(prompt: Any):
    if not SEED.exists():
        pytest.skip(f"{SEED} is not present (the papers live in ../shared/seeds)")
    names = TABLE_NAMES | (
        {"refs": "Combined memory queues"} if prompt.name == "local_pathway" else {}
    )
    filled = prompt.format(**{slot: names[slot] for slot in prompt.slots})
    assert table_words(filled) in table_words(SEED.read_text())


# --- the local model ----------------------------------------------------------------------------


def test_local_model_end_to_end(local_model: Any):
    from noterag.retrievers import load_retriever
    from noterag.retrievers.sample import sample_index, sample_questions

    question = sample_questions()[0]["question"]
    g = resp.build(model=local_model, retriever=load_retriever(f"bm25:{sample_index()}"))
    out = g.invoke({"question": question}, context={"max_tokens": 96})
    assert out["answer"].strip()
    assert 1 <= out["steps"] <= 3 and out["stop_reason"]
    # the call count matches the path taken: each trace entry's calls, then the answer
    assert out["llm_calls"] == sum(e["llm_calls"] for e in out["trace"]) + 1
    assert len(out["trace"]) in (out["steps"], out["steps"] + 1)  # + a refused plan
