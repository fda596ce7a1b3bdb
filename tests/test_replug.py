"""REPLUG driven by scripted models that return token log-probabilities: the answer-level
ensemble on a hand-worked example (the retrieval-score weights against the majority), each
pass's whole prompt and model arguments, the pass probability, ties, empty replies, the
closed-book pass, the one clear error without log-probabilities or retrieval scores, async,
events, and one run of the local model."""

from __future__ import annotations

import asyncio
import json
import math
import re
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.messages import AIMessage
from langchain_core.retrievers import BaseRetriever
from pydantic import Field

from noterag.base.errors import ConfigError
from noterag.graphs import replug
from noterag.nodes import replug as steps
from noterag.nodes.logprobs import LogprobsUnavailableError, Token
from scripted import QUESTION, ScriptedModel, method_events, progress_of

TOKEN = re.compile(r"\s*\w+|\s*[^\w\s]")
# three passages; the answer each pass gives is scripted by the passage it reads
PASSAGES = [
    ("p1", "Lise Ambrath", "Lise Ambrath, architect of the Pellin Bridge, was born in 1866."),
    ("p2", "Velmora Bridge", "The Velmora Bridge was designed by the architect Aurelio Fenwick."),
    ("p3", "Aurelio Fenwick", "Aurelio Fenwick (1871-1938) studied at the Marrowgate Institute."),
]
ANSWERS = {"p1": "Lise Ambrath", "p2": "Aurelio Fenwick", "p3": "Aurelio Fenwick"}
# per-token log-probabilities: pass 1 is unsure (mean -0.7); passes 2 and 3 sure (-0.1 each)
LOGPROBS = {"Lise": -0.9, "Ambrath": -0.5}


def by_passage(prompt: str) -> str:
    return next(ANSWERS[pid] for pid, _, text in PASSAGES if f"Knowledge: {text}\n" in prompt)


class LogprobModel(ScriptedModel):
    """Returns log-probabilities as an OpenAI-compatible endpoint does when asked: one token per
    word or punctuation mark, its log-probability ``logprobs.get(<token stripped>)``, else
    ``default_logprob`` (or the one per reply in ``per_reply``). Records each call's model
    arguments."""

    logprobs: dict[str, float] = Field(default_factory=dict)
    per_reply: dict[str, float] = Field(default_factory=dict)
    default_logprob: float = -0.05

    def _generate(
        self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> Any:
        result = super()._generate(messages, stop, run_manager, **kwargs)
        message = result.generations[0].message
        text = str(message.content)
        if kwargs.get("logprobs"):
            fallback = self.per_reply.get(text, self.default_logprob)
            message.response_metadata["logprobs"] = {
                "content": [
                    {
                        "token": t,
                        "logprob": self.logprobs.get(t.strip(), fallback),
                        "top_logprobs": [],
                    }
                    for t in TOKEN.findall(text)
                ]
            }
        return result


class ScoredRetriever(BaseRetriever):
    """Returns its passages in order with the given retrieval scores (None: no score)."""

    scores: list[float | None]
    queries: list[tuple[str, int | None]] = Field(default_factory=list)

    def _get_relevant_documents(
        self, query: str, *, run_manager: Any = None, k: int | None = None
    ) -> list[Document]:
        self.queries.append((query, k))
        docs = []
        for (pid, title, text), score in zip(PASSAGES, self.scores, strict=False):
            metadata: dict[str, Any] = {"id": pid, "title": title}
            if score is not None:
                metadata["score"] = score
            docs.append(Document(text, id=pid, metadata=metadata))
        return docs[: k or 5]


def hand_worked_model() -> LogprobModel:
    return LogprobModel(
        script={"generate": by_passage},
        logprobs=LOGPROBS,
        per_reply={"Aurelio Fenwick": -0.1},
    )


def run(
    model: ScriptedModel, scores: list[float | None] | None = None, **context: Any
) -> dict[str, Any]:
    retriever = ScoredRetriever(scores=[2.0, 1.0, 0.0] if scores is None else scores)
    return replug.build(model=model, retriever=retriever).invoke(
        {"question": QUESTION}, context=context
    )


# --- the demonstrations ---------------------------------------------------------------------------

DEMOS = [
    {"id": "d1", "question": "Who designed the Pellin Bridge?", "answers": ["Lise Ambrath"]},
    {"id": "d2", "question": "Where did Aurelio Fenwick study?",
     "answers": [" the Marrowgate Institute ", "Marrowgate"]},
    {"id": "d3", "question": "Not shown?", "answers": ["no"]},
]  # fmt: skip


def test_a_dataset_files_first_questions_open_every_pass_as_the_originals_demonstrations(
    tmp_path: Any,
):
    # swj0419/REPLUG @ 6cbe797, downstream_eval/qa_final.py, main(): each demonstration as
    # "Knowledge: <its top-1 document>\nQuestion: <q>\nAnswer: <first answer, stripped>\n\n"
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in DEMOS), encoding="utf-8")
    model = LogprobModel(script={"generate": "Aurelio Fenwick"})
    retriever = ScoredRetriever(scores=[2.0, 1.0, 0.0])
    graph = replug.build(model=model, retriever=retriever)
    graph.invoke({"question": QUESTION}, context={"demos_file": str(path), "max_demos": 2})
    top = PASSAGES[0][2]  # the retriever's first passage, whatever the query
    shown = (
        f"Knowledge: {top}\nQuestion: Who designed the Pellin Bridge?\nAnswer: Lise Ambrath\n\n"
        f"Knowledge: {top}\nQuestion: Where did Aurelio Fenwick study?\n"
        "Answer: the Marrowgate Institute\n\n"
    )
    assert model.prompts_for("generate") == [
        f"{shown}Knowledge: {text}\nQuestion: {QUESTION}\nAnswer:" for _, _, text in PASSAGES
    ]
    assert retriever.queries == [
        (QUESTION, 5),
        ("Who designed the Pellin Bridge?", 1),
        ("Where did Aurelio Fenwick study?", 1),
    ]
    # the same under ainvoke
    model = LogprobModel(script={"generate": "Aurelio Fenwick"})
    graph = replug.build(model=model, retriever=ScoredRetriever(scores=[2.0, 1.0, 0.0]))
    asyncio.run(
        graph.ainvoke({"question": QUESTION}, context={"demos_file": str(path), "max_demos": 2})
    )
    assert model.prompts_for("generate")[0].startswith(shown + "Knowledge: ")


def test_the_original_profile_shows_sixteen_demonstrations_and_needs_their_file(tmp_path: Any):
    model = LogprobModel(script={"generate": "Aurelio Fenwick"})
    graph = replug.build(model=model, retriever=ScoredRetriever(scores=[2.0, 1.0, 0.0]))
    with pytest.raises(ConfigError, match="max_demos=16 .* set demos_file="):
        graph.invoke({"question": QUESTION}, context={"profile": "original"})
    with pytest.raises(ConfigError, match="max_demos=3 .* set demos_file="):
        replug.REPLUGContext(max_demos=3)
    assert model.calls == []
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in DEMOS), encoding="utf-8")
    retriever = ScoredRetriever(scores=[2.0, 1.0, 0.0])
    graph = replug.build(model=model, retriever=retriever)
    graph.invoke({"question": QUESTION}, context={"profile": "original", "demos_file": str(path)})
    # all three questions of the file (fewer than 16), each with its top-1; 10 passages asked
    assert [k for _, k in retriever.queries] == [10, 1, 1, 1]
    assert model.prompts_for("generate")[0].count("\nAnswer: ") == 3


# --- the ensemble ---------------------------------------------------------------------------------


def test_the_retrieval_weights_outvote_the_majority_in_a_hand_worked_example():
    out = run(hand_worked_model(), scores=[2.0, 1.0, 0.0])
    # λ = softmax(2, 1, 0) = e^2, e, 1 over e^2 + e + 1
    assert out["weights"] == pytest.approx([0.665241, 0.244728, 0.090031], abs=1e-6)
    # p = exp(mean log-prob): exp(-0.7), exp(-0.1), exp(-0.1)
    assert out["passage_probs"] == pytest.approx([0.496585, 0.904837, 0.904837], abs=1e-6)
    assert out["passage_answers"] == ["Lise Ambrath", "Aurelio Fenwick", "Aurelio Fenwick"]
    # Lise Ambrath: 0.665241 · 0.496585 = 0.330349
    # Aurelio Fenwick: 0.244728 · 0.904837 + 0.090031 · 0.904837 = 0.302902
    assert out["ensemble"] == [
        {"answer": "Lise Ambrath", "probability": pytest.approx(0.330349, abs=1e-6), "passes": [0]},
        {"answer": "Aurelio Fenwick", "probability": pytest.approx(0.302902, abs=1e-6), "passes": [1, 2]},
    ]  # fmt: skip
    assert out["answer"] == "Lise Ambrath"


def test_with_equal_scores_the_answer_two_passes_agree_on_wins():
    out = run(hand_worked_model(), scores=[1.0, 1.0, 1.0])
    assert out["weights"] == pytest.approx([1 / 3] * 3)
    # Aurelio Fenwick: (0.904837 + 0.904837) / 3 = 0.603225; Lise Ambrath: 0.496585 / 3
    assert [(c["answer"], c["probability"]) for c in out["ensemble"]] == [
        ("Aurelio Fenwick", pytest.approx(0.603225, abs=1e-6)),
        ("Lise Ambrath", pytest.approx(0.165528, abs=1e-6)),
    ]
    assert out["answer"] == "Aurelio Fenwick"


def test_a_tie_goes_to_the_answer_of_the_higher_ranked_pass():
    model = LogprobModel(script={"generate": ["1866", "1871"]})
    out = run(model, scores=[3.0, 3.0])
    assert out["ensemble"][0]["probability"] == out["ensemble"][1]["probability"]
    assert out["answer"] == "1866"


def test_the_pass_probability_is_the_geometric_mean_of_the_token_probabilities():
    def tokens(*pairs: tuple[str, float]) -> list[Token]:
        return [Token(text, logprob) for text, logprob in pairs]

    assert steps.pass_probability(tokens(("18", -0.2), ("71", -0.4))) == pytest.approx(
        math.exp(-0.3)
    )
    # newline tokens are skipped, nothing after the end-of-text token counts
    assert steps.pass_probability(
        tokens(("\n", -5.0), ("1871", -0.1), ("<|endoftext|>", -9.0), ("x", -9.0))
    ) == pytest.approx(math.exp(-0.1))
    assert steps.pass_probability([]) == 0.0
    assert steps.passage_weights([]) == []
    # softmax is shift-free: large BM25 scores do not overflow
    assert steps.passage_weights([1000.0, 999.0]) == pytest.approx([0.731059, 0.268941], abs=1e-6)


def test_an_empty_reply_answers_nothing_with_probability_zero_and_is_counted():
    model = LogprobModel(script={"generate": ["", "1871", ""]})
    out = run(model)
    assert out["passage_answers"] == ["", "1871", ""] and out["passage_probs"][0] == 0.0
    assert out["answer"] == "1871" and out["fallbacks"] == {"empty_answer": 2}


# --- prompts, arguments, cost --------------------------------------------------------------------


def test_each_passage_is_prepended_to_the_question_in_its_own_pass():
    model = hand_worked_model()
    out = run(model)
    assert model.stages == ["generate"] * 3
    assert sorted(model.prompts_for("generate")) == sorted(
        f"Knowledge: {text}\nQuestion: {QUESTION}\nAnswer:" for _, _, text in PASSAGES
    )
    assert (
        model.arguments()
        == [
            {
                "stop": ["\n"],
                "logprobs": True,
                "top_logprobs": 1,
                "max_tokens": 10,
                "temperature": 0.0,
            }
        ]
        * 3
    )
    assert out["llm_calls"] == len(model.calls) == 3 == out["trace"][0]["llm_calls"]
    assert out["stop_reason"] == "single pass (the baseline has no loop)"
    assert out["passage_ids"] == ["p1", "p2", "p3"] and out["scores"] == [2.0, 1.0, 0.0]
    assert out["messages"][-1].content == "Lise Ambrath" and isinstance(
        out["messages"][-1], AIMessage
    )
    entry = out["trace"][0]
    assert entry["step"] == 0 and entry["queries"] == [QUESTION] and not entry["closed_book"]
    assert entry["answers"] == out["passage_answers"] and entry["ensemble"] == out["ensemble"]


def test_top_k_passes_and_the_run_settings_win():
    model = LogprobModel(script={"generate": "1871"})
    retriever = ScoredRetriever(scores=[2.0, 1.0, 0.0])
    graph = replug.build(model=model, retriever=retriever)
    out = graph.invoke(
        {"question": QUESTION}, context={"top_k": 2, "max_tokens": 4, "temperature": 0.5}
    )
    assert retriever.queries == [(QUESTION, 2)] and len(model.calls) == 2
    assert out["weights"] == pytest.approx([0.731059, 0.268941], abs=1e-6)
    assert {a["max_tokens"] for a in model.arguments()} == {4}
    assert {a["temperature"] for a in model.arguments()} == {0.5}


def test_no_passage_is_answered_by_one_closed_book_pass():
    model = LogprobModel(script={"generate": "1871"})
    out = run(model, scores=[])
    assert model.calls == [("generate", f"Question: {QUESTION}\nAnswer:")]
    assert out["answer"] == "1871" and out["weights"] == [1.0]
    assert out["trace"][0]["closed_book"] and out["passage_ids"] == []


# --- errors ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("call", ["invoke", "ainvoke"])
def test_a_model_without_log_probabilities_is_one_clear_error(call: str):
    model = ScriptedModel(default="1871", logprobs=False)  # an endpoint without them
    graph = replug.build(model=model, retriever=ScoredRetriever(scores=[2.0, 1.0, 0.0]))
    with pytest.raises(LogprobsUnavailableError) as raised:
        if call == "invoke":
            graph.invoke({"question": QUESTION})
        else:
            asyncio.run(graph.ainvoke({"question": QUESTION}))
    message = str(raised.value)
    assert isinstance(raised.value, ConfigError) and "\n" not in message
    assert (
        message.startswith("replug needs the token log-probabilities")
        and "ScriptedModel" in message
    )


def test_a_retriever_without_scores_is_one_clear_error():
    model = LogprobModel(script={"generate": "1871"})
    with pytest.raises(ConfigError, match=r"ScoredRetriever returned a passage without one"):
        run(model, scores=[2.0, None, 0.0])
    assert model.calls == []


def test_only_short_answers_are_ensembled():
    model, retriever = LogprobModel(), ScoredRetriever(scores=[1.0])
    with pytest.raises(ConfigError, match="no answer prompt for task 'asqa'"):
        replug.build(model=model, retriever=retriever).invoke(
            {"question": QUESTION, "task": "asqa"}
        )
    assert retriever.queries == [] and model.calls == []


# --- async, events ---------------------------------------------------------------------------------


def test_async_runs_the_same_passes():
    sync_model, async_model = hand_worked_model(), hand_worked_model()
    expected = run(sync_model)
    graph = replug.build(model=async_model, retriever=ScoredRetriever(scores=[2.0, 1.0, 0.0]))
    out = asyncio.run(graph.ainvoke({"question": QUESTION}))
    assert sorted(async_model.calls) == sorted(sync_model.calls)
    for key in ("answer", "passage_answers", "passage_probs", "weights", "ensemble", "llm_calls"):
        assert out[key] == expected[key], key


def test_the_ensemble_is_one_progress_event():
    graph = replug.build(
        model=hand_worked_model(), retriever=ScoredRetriever(scores=[2.0, 1.0, 0.0])
    )
    events = [e for _, e in graph.stream({"question": QUESTION}, stream_mode=["custom"])]
    events = method_events(events)
    assert [e["type"] for e in events] == ["passages", "ensemble", "answer"]
    line = progress_of(replug.SPEC)["ensemble"](events[1])
    assert line == "ensemble: Lise Ambrath 0.330 · Aurelio Fenwick 0.303"


# --- the local model ----------------------------------------------------------------------------------


@pytest.mark.e2e
def test_local_model_end_to_end(local_model: Any):
    """llama.cpp's server returns log-probabilities through the OpenAI-compatible API (when
    top_logprobs is set): REPLUG runs on the local model."""
    from noterag.retrievers import load_retriever
    from noterag.retrievers.sample import sample_index, sample_questions

    graph = replug.build(model=local_model, retriever=load_retriever(f"bm25:{sample_index()}"))
    out = graph.invoke({"question": sample_questions()[0]["question"]}, context={"top_k": 3})
    assert out["llm_calls"] == 3 == len(out["passage_answers"])
    assert sum(out["weights"]) == pytest.approx(1.0)
    answered = [p for a, p in zip(out["passage_answers"], out["passage_probs"], strict=True) if a]
    assert all(0.0 < p <= 1.0 for p in answered)
    assert out["answer"] == out["ensemble"][0]["answer"]
