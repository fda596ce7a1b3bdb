"""SuRe driven by scripted models: the calls each candidate count makes, candidate parsing and
its counted fallbacks, the score combination on hand-worked examples, the concurrent
per-candidate calls, the official code's prompts byte for byte, and one run of the local model."""

from __future__ import annotations

import asyncio
import itertools
import re
import threading
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from pydantic import PrivateAttr

from noterag.base.errors import ConfigError
from noterag.core.parsing import count_fallbacks
from noterag.graphs import sure
from noterag.nodes.sure import parse_candidates, parse_preference, parse_validity, select
from noterag.prompts import sure as sure_prompts
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
SUMMARY = "Summary for ({}): the passages support it."


def shown(prompt: str) -> tuple[str, str]:
    """The letters of the two summaries a ranking prompt shows, as Passage 1 and Passage 2."""
    first, second = re.findall(r"Summary for \((\w)\)", prompt)
    return first, second


def validated(prompt: str) -> str:
    """The letter of the summary a validation prompt shows."""
    return re.search(r"Summary for \((\w)\)", prompt).group(1)


def script(
    candidates: str = "(a) 1871, (b) 1848",
    valid: str = "ab",
    prefer: dict[tuple[str, str], str] | None = None,
) -> dict[str, Any]:
    """Replies by content, since the per-candidate calls run concurrently in any order: each
    summary names its candidate's letter; the summaries whose letter is in ``valid`` are
    validated True; ``prefer[(first, second)]`` is the ranking reply for that order (default:
    the earlier letter wins in both orders)."""

    def ranking(prompt: str) -> str:
        first, second = shown(prompt)
        if prefer is not None:
            return prefer[(first, second)]
        return "Passage 1" if first < second else "Passage 2"

    return {
        "candidates": candidates,
        "summary": lambda p: (
            SUMMARY.format(re.search(r"Prediction:\((\w)\)", p).group(1)) + " [DONE]"
        ),
        "validation": lambda p: "True" if validated(p) in valid else "False",
        "ranking": ranking,
    }


def graph(model: ScriptedModel, retriever: Any = None, **role_models: Any) -> Any:
    return sure.build(
        model=model, retriever=retriever or KeywordRetriever(passages=CORPUS), **role_models
    )


def run(model: ScriptedModel, **context: Any) -> dict[str, Any]:
    return graph(model).invoke({"question": QUESTION}, context=context or None)


def expected_stages(k: int) -> list[Any]:
    """The candidate call, then the K concurrent summaries, then the K validations and K(K-1)
    rankings, concurrent with each other (each group sorted: its order is the scheduler's)."""
    return ["candidates", ["summary"] * k, sorted(["validation"] * k + ["ranking"] * k * (k - 1))]


def grouped(stages: list[str], k: int) -> list[Any]:
    return [stages[0], sorted(stages[1 : 1 + k]), sorted(stages[1 + k :])]


def calls_add_up(out: dict[str, Any], model: ScriptedModel) -> None:
    assert out["llm_calls"] == len(model.calls) == sum(e["llm_calls"] for e in out["trace"])


# --- the calls each candidate count makes ------------------------------------------------------


def test_two_candidates_two_summaries_two_validations_two_rankings():
    model = ScriptedModel(script=script(valid="a"))
    out = run(model)
    assert grouped(model.stages, 2) == expected_stages(2)
    assert out["candidates"] == ["1871", "1848"]
    assert out["summaries"] == [SUMMARY.format("a"), SUMMARY.format("b")]  # cut at [DONE]
    assert out["validity"] == [True, False]
    assert out["ranking"] == [1.0, 0.0] and out["scores"] == [2.0, 0.0]
    assert out["answer"] == "1871" and out["chosen"] == 0
    assert out["stop_reason"] == "single pass: candidate (a) of 2 scored best (validity + ranking)"
    # the thread's chat: the question as the user's message, then the answer
    asked, answered = out["messages"]
    assert asked == HumanMessage(QUESTION, id=asked.id)
    assert answered == AIMessage("1871", id=answered.id)
    assert out["fallbacks"] == {}
    # both orders of the one pair are ranked
    assert sorted(shown(p) for p in model.prompts_for("ranking")) == [("a", "b"), ("b", "a")]
    calls_add_up(out, model)
    assert out["llm_calls"] == 1 + 2 * 2 + 2 * 1


def test_trace_has_the_candidates_then_one_entry_per_candidate():
    model = ScriptedModel(script=script(valid="a"))
    out = run(model)
    first, a, b = out["trace"]
    assert first == {
        "step": 0,
        "queries": [QUESTION],
        "passage_ids": out["passage_ids"],
        "candidates": ["1871", "1848"],
        "candidates_parsed": True,
        "llm_calls": 1,
    }
    assert len(out["passage_ids"]) == 5  # top_k = 5 (ReSP, Table 2)
    assert a == {
        "step": 1,
        "candidate": "(a) 1871",
        "summary": SUMMARY.format("a"),
        "valid": True,
        "validation_parsed": True,
        "preferred_over": ["(b)"],
        "ranking": 1.0,
        "score": 2.0,
        "chosen": True,
        "llm_calls": 3,  # its summary, its validation, the ranking showing it first
    }
    assert (b["candidate"], b["valid"], b["preferred_over"], b["chosen"]) == (
        "(b) 1848",
        False,
        [],
        False,
    )


@pytest.mark.parametrize("k", [3, 4])
def test_k_candidates_k_summaries_k_validations_and_every_ordered_pair_ranked(k: int):
    letters = "abcd"[:k]
    reply = ", ".join(f"({x}) answer {x}" for x in letters)
    model = ScriptedModel(script=script(candidates=reply, valid=letters))
    out = run(model, n_candidates=k)
    assert grouped(model.stages, k) == expected_stages(k)
    assert sorted(shown(p) for p in model.prompts_for("ranking")) == sorted(
        itertools.permutations(letters, 2)
    )
    assert sorted(validated(p) for p in model.prompts_for("validation")) == list(letters)
    assert len(out["trace"]) == 1 + k
    calls_add_up(out, model)
    # the earlier letter wins every comparison: (a) beats all, ranking k-1, k-2, ..., 0
    assert out["ranking"] == [float(k - 1 - i) for i in range(k)]
    assert out["answer"] == "answer a"
    # p_can asks for K candidates in the official words' shape (ours beyond two)
    (prompt,) = model.prompts_for("candidates")
    words = {3: "three", 4: "four"}[k]
    form = ", ".join(f"({x}) {p}" for x, p in zip(letters, ["xx", "yy", "zz", "ww"], strict=False))
    assert f"provide {words} correct candidates" in prompt
    assert f"in the form: {form}, and should not exceed 3 words" in prompt


def test_more_candidates_than_k_keep_the_first_k():
    model = ScriptedModel(script=script(candidates="(a) 1871 (b) 1848 (c) 1866"))
    out = run(model)
    assert out["candidates"] == ["1871", "1848"]
    assert grouped(model.stages, 2) == expected_stages(2)


def test_one_candidate_is_the_answer_without_summaries_or_rankings():
    model = ScriptedModel(script=script(candidates="(a) 1871"))
    out = run(model)
    assert model.stages == ["candidates"]
    assert out["answer"] == "1871"
    assert out["stop_reason"] == "one answer candidate: nothing to compare, answered with it"
    assert [e["step"] for e in out["trace"]] == [0]
    assert out.get("scores") is None and out["fallbacks"] == {}
    calls_add_up(out, model)


def test_a_repeated_candidate_counts_once():
    model = ScriptedModel(script=script(candidates="(a) 1871, (b) 1871."))
    out = run(model)
    assert out["candidates"] == ["1871"] and model.stages == ["candidates"]


def test_a_blank_candidate_reply_gives_an_empty_answer_and_says_why():
    model = ScriptedModel(script=script(candidates="  \n"))
    out = run(model)
    assert model.stages == ["candidates"]
    assert out["answer"] == "" and out["candidates"] == []
    assert out["stop_reason"] == "the candidate reply named no answer candidate: no answer"
    assert out["fallbacks"] == {"candidates": 1}
    assert out["trace"][0]["candidates_parsed"] is False


# --- candidate parsing and its counted fallbacks -------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "found", "parsed"),
    [
        ("(a) 1871, (b) 1848", ["1871", "1848"], True),
        ("(a) Aurelio Fenwick (b) Tobias Wren.", ["Aurelio Fenwick", "Tobias Wren"], True),
        ("(a) 1871\n(b) 1848\n\nBoth years appear in the passages.", ["1871", "1848"], True),
        ("Answer: (A) **1871**, (B) '1848'", ["1871", "1848"], True),
        ("(a) Paris (France), (b) Lyon", ["Paris (France)", "Lyon"], True),
        ("(a) 1871, (b) 1848, (c) 1866", ["1871", "1848"], True),  # the first K = 2
        ("(a) 1871", ["1871"], True),
        ("(a) , (b) 1848", ["1848"], True),
        # no marks: the first line, split at commas when it has 2-4 parts
        ("1871, 1848", ["1871", "1848"], False),
        ("Answer: 1871\nThe architect was born then.", ["1871"], False),
        ("a, b, c, d, e", ["a, b, c, d, e"], False),  # five parts: kept whole
        ("", [], False),
        ("(a) (b)", [], False),  # marks without text
    ],
)
def test_candidate_replies(reply: str, found: list[str], parsed: bool):
    with count_fallbacks() as counts:
        assert parse_candidates(reply, 2) == (found, parsed)
    assert counts == ({} if parsed else {"candidates": 1})


@pytest.mark.parametrize(
    ("reply", "valid", "parsed"),
    [
        ("True", True, True),
        ("False.", False, True),
        ("**True** - the passage names the year", True, True),
        ("Answer: False", False, True),
        ("The passage supports it: true", True, True),
        ("I cannot say", False, False),
        ("Is it true? Hard to say; it could be false.", False, False),
        ("", False, False),
    ],
)
def test_validation_replies(reply: str, valid: bool, parsed: bool):
    with count_fallbacks() as counts:
        verdict = parse_validity(reply)
    assert (verdict.accepted, verdict.parsed) == (valid, parsed)
    assert counts == ({} if parsed else {"validation": 1})


@pytest.mark.parametrize(
    ("reply", "preference"),
    [
        ("Passage 1", 1),
        ("passage 2.", 2),
        ("Answer: [Passage 2]", 2),
        ("**Passage 1** is more informative than Passage 2.", 1),
        ("The more informative one is Passage 2.", 2),
        ("Summary 1", 1),
        ("2", 2),
        ("Between Passage 1 and Passage 2, neither.", None),
        ("Both are equally informative.", None),
        ("", None),
    ],
)
def test_ranking_replies(reply: str, preference: int | None):
    with count_fallbacks() as counts:
        assert parse_preference(reply) == preference
    assert counts == ({} if preference else {"ranking": 1})


def test_unreadable_verdicts_are_counted_and_score_as_the_paper_says():
    # every validation unreadable (v = 0), every ranking unreadable (0.5 each way): a tie of
    # 0.5 each, and the first candidate answers
    model = ScriptedModel(script=script() | {"validation": "Maybe.", "ranking": "I cannot tell."})
    out = run(model)
    assert out["fallbacks"] == {"validation": 2, "ranking": 2}
    assert out["validity"] == [False, False] and out["scores"] == [0.5, 0.5]
    assert out["answer"] == "1871"
    assert out["stop_reason"].endswith(", tied with (b): the first")
    assert [e["validation_parsed"] for e in out["trace"][1:]] == [False, False]


def test_a_summary_without_done_is_kept_whole_and_counted():
    fixed = {"validation": "True", "ranking": "Passage 1"}
    model = ScriptedModel(script=script() | fixed | {"summary": "A summary without the marker."})
    out = run(model)
    assert out["summaries"] == ["A summary without the marker."] * 2
    assert out["fallbacks"] == {"done_marker": 2}
    # what follows "[DONE]" never reaches validation or ranking
    model = ScriptedModel(script=script() | fixed | {"summary": "Kept. [DONE] Response: dropped"})
    assert run(model)["summaries"] == ["Kept."] * 2
    assert all("dropped" not in p for s, p in model.calls if s in ("validation", "ranking"))


# --- the score combination, worked by hand -------------------------------------------------------


def test_hand_worked_three_candidates():
    """K = 3, validity (a) False, (b) True, (c) True; rankings (reply for s_first vs s_second):
    (a,b) "Passage 2", (b,a) "Passage 1": (b) wins both orders -> r_pair(a,b) = 0, r_pair(b,a) = 1
    (a,c) "Passage 1", (c,a) "Passage 1": position bias -> 0.5 each
    (b,c) "Passage 1", (c,b) unreadable: (b) 1 and 0.5 -> r_pair(b,c) = 0.75, r_pair(c,b) = 0.25
    r = (a) 0 + 0.5 = 0.5, (b) 1 + 0.75 = 1.75, (c) 0.5 + 0.25 = 0.75
    v + r = (a) 0.5, (b) 2.75, (c) 1.75 -> (b)."""
    prefer = {
        ("a", "b"): "Passage 2", ("b", "a"): "Passage 1",
        ("a", "c"): "Passage 1", ("c", "a"): "Passage 1",
        ("b", "c"): "Passage 1", ("c", "b"): "Hard to say.",
    }  # fmt: skip
    model = ScriptedModel(
        script=script(candidates="(a) 1866 (b) 1871 (c) 1848", valid="bc", prefer=prefer)
    )
    out = run(model, n_candidates=3)
    assert out["validity"] == [False, True, True]
    assert out["ranking"] == [0.5, 1.75, 0.75]
    assert out["scores"] == [0.5, 2.75, 1.75]
    assert out["answer"] == "1871" and out["chosen"] == 1
    assert out["fallbacks"] == {"ranking": 1}
    assert [e["preferred_over"] for e in out["trace"][1:]] == [[], ["(a)", "(c)"], []]
    # the same numbers from the scoring function alone
    index = {"a": 0, "b": 1, "c": 2}
    with count_fallbacks():
        preferences = {(index[x], index[y]): parse_preference(r) for (x, y), r in prefer.items()}
    chosen = select([False, True, True], preferences)
    assert (chosen.ranking, chosen.scores, chosen.chosen, chosen.tied) == (
        [0.5, 1.75, 0.75], [0.5, 2.75, 1.75], 1, [1],
    )  # fmt: skip


def test_a_ranking_win_against_a_validity_loss_is_a_tie_and_the_first_answers():
    """K = 2: (a) wins both ranking orders (r = 1, 0) but only (b) is valid (v = 0, 1): 1 + 0 vs
    0 + 1, a tie; the official code's rule picks the first candidate (its 0.5·rank + 0.5·v is
    [0.5, 0.5] here too)."""
    model = ScriptedModel(script=script(valid="b"))
    out = run(model)
    assert out["scores"] == [1.0, 1.0]
    assert out["answer"] == "1871"
    assert out["stop_reason"] == (
        "single pass: candidate (a) of 2 scored best (validity + ranking), tied with (b): the first"
    )


def test_position_bias_cancels_and_validity_decides():
    prefer = {("a", "b"): "Passage 1", ("b", "a"): "Passage 1"}
    model = ScriptedModel(script=script(valid="b", prefer=prefer))
    out = run(model)
    assert out["ranking"] == [0.5, 0.5] and out["scores"] == [0.5, 1.5]
    assert out["answer"] == "1848"


def test_the_second_candidate_wins_on_ranking_when_both_are_valid():
    prefer = {("a", "b"): "Passage 2", ("b", "a"): "Passage 1"}
    model = ScriptedModel(script=script(valid="ab", prefer=prefer))
    out = run(model)
    assert out["scores"] == [1.0, 2.0] and out["answer"] == "1848"


# --- the per-candidate calls run concurrently ---------------------------------------------------


class RendezvousModel(ScriptedModel):
    """The K summaries wait for each other, and so do the K validations with the K(K-1)
    rankings: sent one after the other, a call waits alone and the barrier breaks (after the
    timeout) instead of hanging."""

    _barriers: dict[str, threading.Barrier] = PrivateAttr(default_factory=dict)

    def barriers(self, k: int) -> None:
        self._barriers["summary"] = threading.Barrier(k, timeout=10)
        verify = threading.Barrier(k + k * (k - 1), timeout=10)
        self._barriers["validation"] = self._barriers["ranking"] = verify

    def _generate(
        self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> Any:
        stage = (run_manager.metadata or {}).get("noterag_stage") if run_manager else None
        if stage in self._barriers:
            self._barriers[stage].wait()
        return super()._generate(messages, stop, run_manager, **kwargs)


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
def test_the_per_candidate_calls_overlap(mode: str):
    model = RendezvousModel(script=script(valid="a"))
    model.barriers(2)
    g = graph(model)
    if mode == "invoke":
        out = g.invoke({"question": QUESTION})
    else:
        out = asyncio.run(g.ainvoke({"question": QUESTION}))
    assert out["answer"] == "1871" and len(model.calls) == 7
    assert not any(b.broken for b in model._barriers.values())


def test_calls_sent_one_after_the_other_would_break_the_barrier():
    model = RendezvousModel(script=script())
    model.barriers(2)
    model._barriers["summary"] = threading.Barrier(2, timeout=0.2)
    with pytest.raises(threading.BrokenBarrierError):
        model.invoke("x", config={"metadata": {"noterag_stage": "summary"}})


def test_async_run_sends_the_same_prompts():
    sync_model, async_model = ScriptedModel(script=script()), ScriptedModel(script=script())
    expected = run(sync_model)
    out = asyncio.run(graph(async_model).ainvoke({"question": QUESTION}))
    assert sorted(async_model.calls) == sorted(sync_model.calls)
    assert grouped(async_model.stages, 2) == expected_stages(2)
    assert {k: v for k, v in out.items() if k != "messages"} == {
        k: v for k, v in expected.items() if k != "messages"
    }


# --- the official code's prompts, byte for byte ---------------------------------------------------
# Transcribed from bbuing9/ICLR24_SuRe @ 6320590 (functions/gen_candidates.py get_query_candidate,
# functions/gen_summary.py gen_summary_mcq and convert_choices_to_texts, functions/verification.py
# verification and ranking_summary), for data = {"question", "contexts": [{"title", "text"}]}.


def official_candidates(data: dict[str, Any], n_articles: int) -> str:
    text = f"Below are {n_articles} passages related to the question at the end. After reading the passages, provide two correct candidates for the answer to the question at the end. Each answer should be in the form: (a) xx, (b) yy, and should not exceed 3 words for each candidate."
    for i in range(n_articles):
        ctx = data["contexts"][i % len(data["contexts"])]
        text += f"\n\nPassage #{i + 1} Title: {ctx['title']}\nPassage #{i + 1} Text: {ctx['text']}"
    text += f"\n\nQuestion:\n{data['question']}"
    text += "\n\nAnswer: "
    return text


def official_choices(choices: list[str]) -> str:
    res = ""
    for i, item in enumerate(choices):
        res += "({})".format(chr(ord("a") + i)) + " " + item + " "
    return res[:-1]


def official_summary(
    data: dict[str, Any], choices: list[str], pred_idx: int, n_articles: int
) -> str:
    text = ""
    for i in range(n_articles):
        ctx = data["contexts"][i % len(data["contexts"])]
        text += f"\n\nPassage #{i + 1} Title: {ctx['title']}\nPassage #{i + 1} Text: {ctx['text']}"
    text += '\n\nYour job is to act as a professional writer. You will write a good-quality passage that can support the given prediction about the question only based on the information in the provided supporting passages.\n\nNow, let\'s start. After you write, please write [DONE] to indicate you are done. Do not write a prefix (e.g., "Response:") while writing a passage.'
    text += f"\n\nQuestion: {data['question']}\nChoices:{official_choices(choices)}\nPrediction:({chr(ord('a') + pred_idx)}) {choices[pred_idx]}"
    text += "\nPassage: "
    return text


def official_verification(data: dict[str, Any], pred: str, passage: str) -> str:
    text = ""
    text += f"Question:\n{data['question']}"
    text += f"\n\nPrediction:\n{pred}"
    text += f"\n\nPassage:\n{passage}"
    text += "\n\nDoes the passage correctly support the prediction? Choices: [True, False]. Answer:"
    return text


def official_ranking(data: dict[str, Any], passages1: str, passages2: str) -> str:
    query = f"Question: {data['question']}"
    text = "Question: Given the following passages, determine which one provides a more informative answer to the subsequent question."
    text += f"\n\nPassage 1:\n{passages1}"
    text += f"\n\nPassage 2:\n{passages2}"
    text += f"\n\nTarget Question:\n{query}"
    text += "\n\nYour Task:\nIdentify which passage (Passage 1 or Passage 2) is more relevant and informative to answer the question at hand. Choices: [Passage 1, Passage 2].\n\nAnswer:"
    return text


def test_prompts_are_the_official_codes_byte_for_byte():
    model = ScriptedModel(script=script())
    out = run(model, top_k=3)
    by_id = {p["id"]: p for p in CORPUS}
    data = {
        "question": QUESTION,
        "contexts": [
            {"title": by_id[i]["title"], "text": by_id[i]["text"]} for i in out["passage_ids"]
        ],
    }
    assert model.prompts_for("candidates") == [official_candidates(data, 3)]
    choices = out["candidates"]
    assert sorted(model.prompts_for("summary")) == sorted(
        official_summary(data, choices, k, 3) for k in range(2)
    )
    summaries = out["summaries"]
    assert sorted(model.prompts_for("validation")) == sorted(
        official_verification(data, c, s) for c, s in zip(choices, summaries, strict=True)
    )
    assert sorted(model.prompts_for("ranking")) == sorted(
        [
            official_ranking(data, summaries[0], summaries[1]),
            official_ranking(data, summaries[1], summaries[0]),
        ]
    )


def test_each_prompt_names_its_source():
    for name in ("candidates", "summary", "validation", "ranking"):
        prompt = getattr(sure_prompts.PAPER, name)
        assert prompt.source.startswith("bbuing9/ICLR24_SuRe functions/")
        assert "@ 6320590" in prompt.source
    assert sure_prompts.PAPER.answer == {}


def test_a_prompt_override_reaches_its_calls():
    model = ScriptedModel(script=script())
    run(model, prompts={"validation": "Is {summary} right about {candidate} for {question}?"})
    assert sorted(model.prompts_for("validation")) == [
        f"Is {SUMMARY.format(x)} right about {c} for {QUESTION}?"
        for x, c in (("a", "1871"), ("b", "1848"))
    ]


# --- streaming, models, configuration --------------------------------------------------------------


def test_stream_reports_each_decision_and_the_answer_once():
    model = ScriptedModel(script=script(valid="a"))
    custom, messages = [], []
    for mode, chunk in graph(model).stream(
        {"question": QUESTION}, stream_mode=["custom", "messages"]
    ):
        (custom if mode == "custom" else messages).append(chunk)
    custom = method_events(custom)
    assert [e["type"] for e in custom] == [
        "passages", "candidates", "candidate_summaries", "selection", "answer",
    ]  # fmt: skip
    selection = custom[3]
    assert (selection["scores"], selection["chosen"], selection["tied"]) == ([2.0, 0.0], 0, [0])
    assert custom[-1] == {"type": "answer", "answer": "1871"}
    # no model call streams; the answer reaches the messages stream once, from the answer step
    assert [(m.content, meta["langgraph_node"]) for m, meta in messages] == [("1871", "answer")]


def test_progress_lines():
    progress = progress_of(sure.SPEC)
    line = progress["candidates"]({"candidates": ["1871", "1848"], "parsed": True})
    assert line == "answer candidates: (a) 1871 · (b) 1848"
    assert "without (a)/(b) marks" in progress["candidates"]({"candidates": ["x"], "parsed": False})
    assert progress["candidates"]({"candidates": []}) == "no answer candidate in the reply"
    assert progress["candidate_summaries"]({"summaries": ["s", "t"]}) == (
        "summarised the passages for each of 2 candidates"
    )
    event = {"candidates": ["1871", "1848"], "scores": [1.0, 1.0], "chosen": 0, "tied": [0, 1]}
    assert progress["selection"](event) == "selected (a) 1871 (scores 1, 1; a tie: the first)"


def test_sampling_is_temperature_zero_unless_the_run_sets_one():
    class Recording(ScriptedModel):
        _kwargs: list[dict[str, Any]] = PrivateAttr(default_factory=list)

        def _generate(
            self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any
        ) -> Any:
            self._kwargs.append(kwargs)
            return super()._generate(messages, stop, run_manager, **kwargs)

    model = Recording(script=script())
    run(model)
    assert [k.get("temperature") for k in model._kwargs] == [0.0] * 7
    model = Recording(script=script())
    run(model, temperature=0.7)
    assert [k.get("temperature") for k in model._kwargs] == [0.7] * 7


def test_role_models_each_get_only_their_stages():
    base = ScriptedModel(script=script())
    roles = {role: ScriptedModel(script=script()) for role in sure.SPEC.roles}
    out = graph(base, **{f"{role}_model": m for role, m in roles.items()}).invoke(
        {"question": QUESTION}
    )
    assert base.calls == [] and out["answer"] == "1871"
    assert {role: sorted(set(m.stages)) for role, m in roles.items()} == {
        role: [role] for role in roles
    }


def test_configuration_is_checked():
    model = ScriptedModel(script=script())
    for bad, rule in ((1, "be at least 2"), (27, "be at most 26")):
        with pytest.raises(ConfigError, match=f"n_candidates must {rule}, not {bad}"):
            run(model, n_candidates=bad)
    with pytest.raises(ConfigError, match="profile 'official'"):
        run(model, profile="official")
    with pytest.raises(ConfigError, match="no model role answer"):
        sure.build(model=model, retriever=KeywordRetriever(passages=CORPUS), answer_model=model)
    with pytest.raises(ConfigError, match="sure answers short-answer questions only") as raised:
        graph(model).invoke({"question": QUESTION, "task": "asqa"})
    assert "\n" not in str(raised.value)
    assert "candidates" not in model.stages


def test_studio_schemas():
    g = graph(ScriptedModel())
    context = g.get_context_jsonschema()["properties"]
    assert context["top_k"]["default"] == 5 and context["n_candidates"]["default"] == 2
    assert "max_steps" not in context  # no loop
    output = set(g.get_output_jsonschema()["properties"])
    assert {
        "answer",
        "candidates",
        "summaries",
        "validity",
        "ranking",
        "scores",
        "chosen",
    } <= output
    assert not {"passages", "seen", "task"} & output


# --- the local model ------------------------------------------------------------------------------


@pytest.mark.e2e
def test_local_model_end_to_end(local_model: Any):
    from noterag.retrievers import load_retriever
    from noterag.retrievers.sample import sample_index, sample_questions

    question = sample_questions()[0]["question"]
    g = sure.build(model=local_model, retriever=load_retriever(f"bm25:{sample_index()}"))
    out = g.invoke({"question": question}, context={"max_tokens": 96})
    assert out["stop_reason"]
    assert len(out["passage_ids"]) == 5
    # the path taken fixes the calls: 1 when fewer than two candidates, else 1 + 2K + K(K-1)
    k = len(out["candidates"])
    assert out["llm_calls"] == (1 if k < 2 else 1 + 2 * k + k * (k - 1))
    assert out["llm_calls"] == sum(e["llm_calls"] for e in out["trace"])
    assert out["answer"] == (out["candidates"][out.get("chosen") or 0] if k else "")
    assert out["messages"][-1].content == out["answer"]
