"""Self-RAG driven by scripted models whose replies carry reflection tokens and token
log-probabilities (as langchain-openai returns them from a vLLM-served Self-RAG model): the
retrieval decision against the threshold, the segment scores and the choice on a hand-worked
example of the paper's formulas, the clear errors for a model that is not a Self-RAG model,
the original's prompt strings, cost, stop reasons, trace, events, async and chat.

No end-to-end run with a real Self-RAG model is possible here (no weights, no GPU); the e2e
test runs the local model, which is not one, and checks the error it must get."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field
from typing import Any

import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.checkpoint.memory import InMemorySaver

import noterag
from noterag.base.errors import ConfigError
from noterag.core.parsing import count_fallbacks
from noterag.graphs import self_rag
from noterag.nodes.self_rag import Token, critique, read_tokens, retrieve_score, short_form
from noterag.prompts import self_rag as self_rag_prompts
from scripted import (
    KeywordRetriever,
    RendezvousModel,
    ScriptedModel,
    invoke_by,
    method_events,
    passages,
    progress_of,
    usage,
)

QUESTION = "In which year was the architect of the Velmora Bridge born?"
ROWS = [
    ("Aurelio Fenwick", "Aurelio Fenwick, the architect of the Velmora Bridge, was born in 1871."),
    ("Tobias Wren", "Tobias Wren, architect, was born in 1848 in Quenby."),
    ("Velmora Bridge", "The Velmora Bridge was painted in 1866."),
]
CORPUS = passages(*ROWS)  # p1, p2, p3: the keyword retriever ranks them in this order


# --- a model whose replies carry log-probabilities ------------------------------------------------


@dataclass
class Generation:
    """A scripted reply as a token sequence: (text, p, {alternative: p}) per generated token.
    The model lists, at each position, the token itself and its alternatives, the most
    probable first, at most ``top_logprobs`` of them (as an OpenAI-compatible endpoint does)."""

    tokens: list[tuple[str, float, dict[str, float]]] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(text for text, _, _ in self.tokens)

    def logprobs(self, top: int) -> dict[str, Any]:
        content = []
        for text, p, alternatives in self.tokens:
            listed = sorted({text: p, **alternatives}.items(), key=lambda kv: -kv[1])[:top]
            content.append(
                {
                    "token": text,
                    "bytes": list(text.encode()),
                    "logprob": math.log(p),
                    "top_logprobs": [
                        {"token": t, "bytes": list(t.encode()), "logprob": math.log(q)}
                        for t, q in listed
                    ],
                }
            )
        return {"content": content}


def gen(*tokens: tuple[str, float] | tuple[str, float, dict[str, float]]) -> Generation:
    return Generation([(t[0], t[1], t[2] if len(t) > 2 else {}) for t in tokens])  # type: ignore[misc]


class LogprobModel(ScriptedModel):
    """ScriptedModel whose script entries may be ``Generation``s: the reply then carries
    ``response_metadata["logprobs"]`` when the call asks for ``logprobs`` (a plain string
    reply carries none, as a model without log-probabilities). (ScriptedModel records each
    call's kwargs: ``kwargs_for``.)"""

    extra_body: dict[str, Any] | None = None

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        stage, prompt = self._record(messages, stop, run_manager, kwargs)
        entry = self._reply(stage, prompt)
        if isinstance(entry, Generation):
            text = entry.text
            info = (
                {"logprobs": entry.logprobs(kwargs.get("top_logprobs") or 0)}
                if kwargs.get("logprobs")
                else {}
            )
        else:
            text, info = entry, {}
        message = AIMessage(text, usage_metadata=usage(prompt, text, least=1))
        return ChatResult(generations=[ChatGeneration(message=message, generation_info=info)])


# --- the hand-worked example ------------------------------------------------------------------------
#
# Three passages, one generation each (p = each generated token's probability; the
# alternatives listed at its position in braces; a token not listed counts exp(-100) ~ 0):
#
# p1 "[Relevant]1871[Fully supported][Utility:5]", every token p = .8
#    s_rel = .8 / (.8 + .2) = .8                      {[Irrelevant] .2}
#    s_sup = .8/1 + .5 * .1/1 = .85                    {[Partially supported] .1, [No support] .1}
#    s_use = (1 * .8 + .5 * .2) / 1 = .9               {[Utility:4] .2}
#    s_seq = exp(mean(log .8)) = .8
#    score = .8 + 1 * .8 + 1 * .85 + .5 * .9 = 2.9
# p2 "[Relevant]1848[Partially supported][Utility:4]", every token p = .5
#    s_rel = .5, s_sup = .25 + .5 * .5 = .5, s_use = .5 * .5 + 1 * .25 + 0 * .25 = .5, s_seq = .5
#    score = .5 + .5 + .5 + .5 * .5 = 1.75
# p3 "[Irrelevant]1866[Utility:2]", every token p = .9: no support token (s_sup = 0)
#    s_rel = .1 / (.1 + .9) = .1, s_use = -.5 * .9 + -1 * .1 = -.55, s_seq = .9
#    score = .9 + .1 + 0 + .5 * -.55 = .725
# The best is p1: "1871". By the sequence probability alone p3 would win (.9).

FS, PS, NS = "[Fully supported]", "[Partially supported]", "[No support / Contradictory]"

GENERATIONS = {
    "Aurelio Fenwick": gen(
        ("[Relevant]", 0.8, {"[Irrelevant]": 0.2}),
        ("1871", 0.8),
        (FS, 0.8, {PS: 0.1, NS: 0.1}),
        ("[Utility:5]", 0.8, {"[Utility:4]": 0.2}),
    ),
    "Tobias Wren": gen(
        ("[Relevant]", 0.5, {"[Irrelevant]": 0.5}),
        ("1848", 0.5),
        (PS, 0.5, {FS: 0.25, NS: 0.25}),
        ("[Utility:4]", 0.5, {"[Utility:5]": 0.25, "[Utility:3]": 0.25}),
    ),
    "Velmora Bridge": gen(
        ("[Irrelevant]", 0.9, {"[Relevant]": 0.1}),
        ("1866", 0.9),
        ("[Utility:2]", 0.9, {"[Utility:1]": 0.1}),
    ),
}
SCORES = [2.9, 1.75, 0.725]

RETRIEVE = gen(("[Retrieval]", 0.6, {"[No Retrieval]": 0.4}))  # .6 > .2
NO_RETRIEVE = gen(("[No Retrieval]", 0.9, {"[Retrieval]": 0.1}))  # .1 <= .2
WITHOUT = "Aurelio Fenwick was born in 1871.[Utility:5]"


def by_passage(generations: dict[str, Any]) -> Any:
    """A ``generate`` reply by the passage's title in the prompt (the calls run concurrently)."""

    def reply(prompt: str) -> Any:
        for title, generation in generations.items():
            if f"<paragraph>{title}\n" in prompt:
                return generation
        return WITHOUT

    return reply


def script(decision: Any = RETRIEVE, generations: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"retrieve_token": decision, "generate": by_passage(generations or GENERATIONS)}


def graph(model: ScriptedModel, rows: list[dict[str, str]] | None = None) -> Any:
    return self_rag.build(model=model, retriever=KeywordRetriever(passages=rows or CORPUS))


def run(model: ScriptedModel, **context: Any) -> dict[str, Any]:
    return graph(model).invoke({"question": QUESTION}, context=context or None)


def base(question: str = QUESTION) -> str:
    """run_short_form.py: PROMPT_DICT["prompt_no_input"].format_map(row), the instruction
    being the question (preprocess_input_data, no TASK_INST entry for QA)."""
    return "### Instruction:\n{instruction}\n\n### Response:\n".format_map(
        {"instruction": question}
    )


def with_paragraph(row: dict[str, str]) -> str:
    """call_model_rerank_w_scores_batch's evidence_augmented_inputs, for one passage."""
    evidence = "[Retrieval]<paragraph>{0}\n{1}</paragraph>"  # the original's string
    return base() + evidence.format(row["title"], row["text"])


def calls_add_up(out: dict[str, Any], model: ScriptedModel) -> None:
    assert out["llm_calls"] == len(model.calls) == sum(e["llm_calls"] for e in out["trace"])


# --- the hand-worked example -----------------------------------------------------------------------


def test_segment_scores_and_choice_match_the_hand_worked_example():
    model = LogprobModel(script=script())
    out = run(model)
    assert model.stages[0] == "retrieve_token" and sorted(model.stages[1:]) == ["generate"] * 3
    assert out["retrieved"] is True and out["retrieve_score"] == pytest.approx(0.6)
    segments = out["segments"]
    assert [s["passage_id"] for s in segments] == ["p1", "p2", "p3"] == out["passage_ids"]
    assert [s["relevance"] for s in segments] == pytest.approx([0.8, 0.5, 0.1])
    assert [s["support"] for s in segments] == pytest.approx([0.85, 0.5, 0.0])
    assert [s["utility"] for s in segments] == pytest.approx([0.9, 0.5, -0.55])
    assert [s["sequence"] for s in segments] == pytest.approx([0.8, 0.5, 0.9])
    assert [s["score"] for s in segments] == pytest.approx(SCORES)
    assert out["chosen"] == 0 and out["answer"] == "1871"
    assert segments[0]["text"] == "[Relevant]1871[Fully supported][Utility:5]"
    assert segments[0]["reflection"] == ["[Relevant]", FS, "[Utility:5]"]
    assert segments[2]["reflection"] == ["[Irrelevant]", "[Utility:2]"]
    assert out["stop_reason"] == (
        "single pass with retrieval ([Retrieval] 0.6 > threshold 0.2): the generation for "
        "passage 1 of 3 scored best (2.900)"
    )
    assert out["messages"][-1:] == [AIMessage("1871", id=out["messages"][-1].id)]
    assert out["fallbacks"] == {}
    calls_add_up(out, model)
    assert out["llm_calls"] == 4


@pytest.mark.parametrize(
    ("weights", "scores", "answer"),
    [
        # the sequence probability alone: .8, .5, .9 -> p3
        ({"w_rel": 0.0, "w_sup": 0.0, "w_use": 0.0}, [0.8, 0.5, 0.9], "1866"),
        # run_short_form.py's argparse weights (w_use 1.0) without --use_seqscore:
        # .8 + .85 + .9, .5 + .5 + .5, .1 + 0 - .55
        ({"w_use": 1.0, "use_seqscore": False}, [2.55, 1.5, -0.45], "1871"),
        # relevance alone: .8, .5, .1
        ({"w_sup": 0.0, "w_use": 0.0, "use_seqscore": False}, [0.8, 0.5, 0.1], "1871"),
        # support against utility: w_sup 0, w_use 4 -> .8 + .8 + 3.6, .5 + .5 + 2, .9 + .1 - 2.2
        ({"w_sup": 0.0, "w_use": 4.0}, [5.2, 3.0, -1.2], "1871"),
    ],
)
def test_the_weights_combine_the_scores(weights: dict[str, Any], scores: list[float], answer: str):
    out = run(LogprobModel(script=script()), **weights)
    assert [s["score"] for s in out["segments"]] == pytest.approx(scores)
    assert out["answer"] == answer


def test_the_original_profile_scores_with_the_scripts_weights():
    # AkariAsai/self-rag @ 1fcdc42: the README's QA command gives no weight, so --w_use 1.0
    original = run(LogprobModel(script=script()), profile="original")
    scripts = run(LogprobModel(script=script()), w_use=1.0, top_k=10)
    paper = run(LogprobModel(script=script()))
    scores = [s["score"] for s in original["segments"]]
    assert scores == pytest.approx([s["score"] for s in scripts["segments"]])
    assert scores == pytest.approx([3.35, 2.0, 0.45])  # .8 + .85 + .9 + seq .8, ...
    assert scores != pytest.approx([s["score"] for s in paper["segments"]])


def test_the_scores_from_the_functions_alone():
    """critique() on the parsed listing of p2's reply gives the same numbers."""
    message = AIMessage(
        GENERATIONS["Tobias Wren"].text,
        response_metadata={"logprobs": GENERATIONS["Tobias Wren"].logprobs(20)},
    )
    tokens = read_tokens(message)
    assert tokens is not None and [t.text for t in tokens] == [
        "[Relevant]", "1848", PS, "[Utility:4]",
    ]  # fmt: skip
    with count_fallbacks() as counts:
        c = critique(tokens)
    assert (c.relevance, c.support, c.utility, c.sequence) == pytest.approx((0.5, 0.5, 0.5, 0.5))
    assert counts == {}


def test_a_tie_goes_to_the_first_passage():
    same = GENERATIONS["Tobias Wren"]
    model = LogprobModel(script=script(generations={t: same for t in GENERATIONS}))
    out = run(model)
    assert [s["score"] for s in out["segments"]] == pytest.approx([1.75] * 3)
    assert out["chosen"] == 0
    assert out["stop_reason"].endswith("scored best (1.750); a tie: the first")


def test_a_support_token_counts_only_where_it_is_generated():
    """The support score reads the first position whose *generated* token is a support token:
    support tokens listed as alternatives elsewhere do not count."""
    generation = gen(
        ("[Relevant]", 0.8, {"[Irrelevant]": 0.2}),
        ("1871", 0.8, {FS: 0.2}),  # listed, not generated
        ("[Utility:5]", 0.8, {"[Utility:4]": 0.2}),
    )
    out = run(
        LogprobModel(script=script(generations=GENERATIONS | {"Aurelio Fenwick": generation}))
    )
    assert out["segments"][0]["support"] == 0.0
    assert out["segments"][0]["utility"] == pytest.approx(0.9)


def test_a_listing_cut_short_counts_the_unlisted_tokens_as_exp_minus_100():
    """top_logprobs = 1: only the generated token is listed, so [Irrelevant] counts exp(-100)
    and p1's relevance is ~1; the request carries the setting."""
    model = LogprobModel(script=script())
    out = run(model, top_logprobs=1)
    assert out["segments"][0]["relevance"] == pytest.approx(1.0)
    assert out["segments"][0]["support"] == pytest.approx(1.0)  # FS alone
    assert {k["top_logprobs"] for k in model.kwargs_for()} == {1}


def test_a_generation_without_relevance_tokens_first_takes_the_fallback():
    generation = gen(("1871", 0.8), (FS, 0.8, {PS: 0.2}), ("[Utility:5]", 0.8))
    model = LogprobModel(script=script(generations=GENERATIONS | {"Aurelio Fenwick": generation}))
    out = run(model)
    assert out["segments"][0]["relevance"] == 0.5  # both at exp(-100)
    assert out["fallbacks"] == {"relevance": 1}


# --- the retrieval decision -------------------------------------------------------------------------


def test_below_the_threshold_the_no_retrieval_generation_answers():
    model = LogprobModel(script=script(decision=NO_RETRIEVE))
    out = run(model)
    assert model.stages == ["retrieve_token", "generate"]
    assert model.prompts_for("retrieve_token") == [base()]
    assert model.prompts_for("generate") == [base() + "[No Retrieval]"]
    assert out["retrieved"] is False and out["retrieve_score"] == pytest.approx(0.1)
    assert out["answer"] == "Aurelio Fenwick was born in 1871."
    assert out.get("passage_ids", []) == []
    assert out["segments"] == [
        {
            "passage_id": None,
            "title": None,
            "text": WITHOUT,
            "answer": "Aurelio Fenwick was born in 1871.",
            "reflection": ["[Utility:5]"],
            "relevance": None,
            "support": None,
            "utility": None,
            "sequence": None,
            "score": None,
        }
    ]
    assert out["stop_reason"] == (
        "single pass without retrieval ([Retrieval] 0.1 <= threshold 0.2): the [No Retrieval] "
        "generation answers"
    )
    calls_add_up(out, model)


@pytest.mark.parametrize(
    ("p_retrieval", "threshold", "retrieves"),
    [(0.9, 0.2, True), (0.3, 0.2, True), (0.2, 0.5, False), (0.5, 0.5, False), (0.6, 0.5, True)],
)
def test_retrieval_exactly_when_the_normalised_probability_exceeds_the_threshold(
    p_retrieval: float, threshold: float, retrieves: bool
):
    decision = gen(("[Retrieval]", p_retrieval, {"[No Retrieval]": 1 - p_retrieval}))
    model = LogprobModel(script=script(decision=decision))
    out = run(model, threshold=threshold)
    assert out["retrieved"] is retrieves
    assert out["retrieve_score"] == pytest.approx(p_retrieval)
    assert model.stages.count("generate") == (3 if retrieves else 1)


def test_the_decision_divides_probabilities_not_log_probabilities():
    """p([Retrieval]) .9 against .1: the paper's ratio .9 retrieves; the original code's ratio
    of log-probabilities, log .9 / (log .9 + log .1) = .04, would not."""
    decision = gen(("[Retrieval]", 0.9, {"[No Retrieval]": 0.1}))
    out = run(LogprobModel(script=script(decision=decision)))
    assert out["retrieve_score"] == pytest.approx(0.9) and out["retrieved"] is True
    assert math.log(0.9) / (math.log(0.9) + math.log(0.1)) < 0.2


def test_the_decision_reads_only_the_first_position():
    # [Retrieval] listed at the second position only: the first lists [No Retrieval] alone
    decision = gen(("[No Retrieval]", 0.7, {"Sure": 0.3}), ("!", 0.5, {"[Retrieval]": 0.5}))
    out = run(LogprobModel(script=script(decision=decision)))
    assert out["retrieve_score"] == pytest.approx(0.0) and out["retrieved"] is False


def test_no_retrieve_token_listed_takes_the_fallback_and_retrieves_at_the_default_threshold():
    model = LogprobModel(script=script(decision=gen(("Sure", 0.9, {"The": 0.1}))))
    out = run(model)
    assert out["retrieve_score"] == 0.5 and out["retrieved"] is True
    assert out["fallbacks"] == {"retrieval_token": 1}
    assert out["answer"] == "1871"
    assert out["trace"][0] == {
        "step": 0,
        "mode": "adaptive_retrieval",
        "retrieved": True,
        "retrieve_score": 0.5,
        "threshold": 0.2,
        "listed": False,
        "llm_calls": 1,
    }


@pytest.mark.parametrize(
    ("mode", "stages"),
    [("always_retrieve", ["generate"] * 3), ("no_retrieval", ["generate"])],
)
def test_the_fixed_modes_make_no_decision_call(mode: str, stages: list[str]):
    model = LogprobModel(script=script())
    out = run(model, mode=mode)
    assert model.stages == stages
    assert out["retrieve_score"] is None
    assert out["trace"][0] == {
        "step": 0,
        "mode": mode,
        "retrieved": mode == "always_retrieve",
        "llm_calls": 0,
    }
    assert out["answer"] == (
        "1871" if mode == "always_retrieve" else "Aurelio Fenwick was born in 1871."
    )
    assert out["stop_reason"].startswith(
        f"single pass with{'' if mode == 'always_retrieve' else 'out'} retrieval (mode {mode})"
    )
    calls_add_up(out, model)


def test_retrieval_that_finds_nothing_answers_without_retrieval():
    model = LogprobModel(script=script())
    out = graph(model, rows=passages(("Unrelated", "Nothing matches here."))).invoke(
        {"question": QUESTION}
    )
    assert model.stages == ["retrieve_token", "generate"]
    assert model.prompts_for("generate") == [base() + "[No Retrieval]"]
    assert out["answer"] == "Aurelio Fenwick was born in 1871."
    assert out["stop_reason"] == (
        "single pass: retrieval ([Retrieval] 0.6 > threshold 0.2) found no passage: the "
        "[No Retrieval] generation answers"
    )


# --- the clear errors --------------------------------------------------------------------------------


def one_line_error(model: ScriptedModel, match: str, **context: Any) -> str:
    for call in ("invoke", "ainvoke"):
        g = graph(model)
        with pytest.raises(ConfigError, match=match) as raised:
            invoke_by(call, g, {"question": QUESTION}, context=context or None)
        assert "\n" not in str(raised.value)
    return str(raised.value)


def test_a_model_without_log_probabilities_is_one_clear_error():
    model = ScriptedModel(
        default="[Retrieval]", logprobs=False
    )  # reflection text, no log-probabilities
    message = one_line_error(model, "returned none for the retrieval decision")
    assert message.startswith("self-rag reads its reflection tokens from token log-probabilities")
    assert "model 'ScriptedModel'" in message
    assert model.stages == ["retrieve_token"] * 2  # invoke, ainvoke: nothing after the error


def test_always_retrieve_without_log_probabilities_fails_at_the_generations():
    model = ScriptedModel(default="[Relevant]1871[Utility:5]", logprobs=False)
    message = one_line_error(
        model, "returned none for the generation for passage 1 of 3", mode="always_retrieve"
    )
    assert "self-rag" in message and "'ScriptedModel'" in message


def test_a_model_without_reflection_tokens_is_one_clear_error():
    """Log-probabilities, but plain text: the decision lists no Retrieve token (fallback 0.5,
    retrieve), and none of the generations shows a reflection token."""
    plain = gen(("The", 0.6, {"A": 0.4}), (" year", 0.9))
    model = LogprobModel(script={"retrieve_token": plain, "generate": plain})
    message = one_line_error(model, "needs a Self-RAG-trained model")
    assert message == (
        "self-rag needs a Self-RAG-trained model (e.g. selfrag/selfrag_llama2_7b), and model "
        "'LogprobModel' wrote no reflection token ([Relevant], [Fully supported], [Utility:5], "
        "...) in its 3 per-passage generation(s); a Self-RAG model served by vLLM must keep its "
        "special tokens (skip_special_tokens false)"
    )
    assert model.stages.count("retrieve_token") == 2 and model.stages.count("generate") == 6


def test_no_reflection_token_on_the_no_retrieval_path_is_the_same_error():
    plain = gen(("The", 0.6, {"A": 0.4}))
    model = LogprobModel(script={"retrieve_token": plain, "generate": "The year 1871."})
    one_line_error(
        model,
        r"wrote no reflection token .* in the retrieval decision or the generation without retrieval",
        threshold=0.6,
    )


def test_the_model_name_comes_from_the_endpoint():
    class Named(LogprobModel):
        model_name: str = "smollm2"

    model = Named(script={"retrieve_token": "x", "generate": "y"})
    one_line_error(model, "model 'smollm2' returned none")


def test_mode_no_retrieval_reads_no_reflection_token_and_needs_no_log_probabilities():
    model = ScriptedModel(default="Aurelio Fenwick.", logprobs=False)
    out = run(model, mode="no_retrieval")
    assert out["answer"] == "Aurelio Fenwick."
    assert model.stages == ["generate"]


# --- what each call sends ------------------------------------------------------------------------------


def test_prompts_are_the_originals_strings():
    model = LogprobModel(script=script())
    run(model)
    assert model.prompts_for("retrieve_token") == [base()]
    assert sorted(model.prompts_for("generate")) == sorted(with_paragraph(r) for r in CORPUS)
    assert base() == f"### Instruction:\n{QUESTION}\n\n### Response:\n"


def test_each_call_asks_for_what_it_reads():
    model = LogprobModel(script=script())
    run(model)
    (decision,) = model.kwargs_for("retrieve_token")
    assert decision == {
        "temperature": 0.0,
        "top_p": 1.0,
        "max_tokens": 1,
        "logprobs": True,
        "top_logprobs": 20,
        "extra_body": {"skip_special_tokens": False},
    }
    assert model.kwargs_for("generate") == [decision | {"max_tokens": 100}] * 3
    model = LogprobModel(script=script(decision=NO_RETRIEVE))
    run(model)
    (without,) = model.kwargs_for("generate")
    assert without == {
        "temperature": 0.0,
        "top_p": 1.0,
        "max_tokens": 100,
        "extra_body": {"skip_special_tokens": False},
    }


def test_run_settings_reach_the_calls():
    model = LogprobModel(script=script(), extra_body={"priority": 1})
    run(model, max_tokens=40, temperature=0.3, top_logprobs=5)
    decision = model.kwargs_for("retrieve_token")[0]
    assert (decision["max_tokens"], decision["temperature"], decision["top_logprobs"]) == (
        1,
        0.3,
        5,
    )
    assert decision["extra_body"] == {"priority": 1, "skip_special_tokens": False}
    assert {k["max_tokens"] for k in model.kwargs_for("generate")} == {40}
    model = LogprobModel(script=script())
    run(model, skip_special_tokens=None)
    assert all("extra_body" not in k for k in model.kwargs_for())


def test_a_prompt_override_reaches_the_calls():
    """FlashRAG's instruction for QA datasets, as an override of ``instruction``."""
    flashrag = "Answer the following question, give me a short answer.\n\n## Input:\n\n{question}"
    model = LogprobModel(script=script())
    run(model, prompts={"instruction": flashrag})
    (prompt,) = model.prompts_for("retrieve_token")
    assert prompt == base(flashrag.format(question=QUESTION))


def test_the_raw_chat_template_passes_the_prompt_through():
    """Rendered as transformers and vLLM render chat templates (a sandboxed Jinja2 environment
    with trim_blocks and lstrip_blocks), the template gives BOS + the prompt, byte for byte."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    template = env.from_string(self_rag_prompts.RAW_CHAT_TEMPLATE)
    prompt = with_paragraph(CORPUS[0]) + "{{ not a slot }}\n"
    rendered = template.render(
        messages=[{"role": "user", "content": prompt}], bos_token="<s>", add_generation_prompt=True
    )
    assert rendered == "<s>" + prompt
    assert self_rag_prompts.RAW_CHAT_TEMPLATE in self_rag.__doc__


def test_each_prompt_names_its_source():
    for name in ("instruction", "prompt_no_input", "paragraph", "no_retrieval"):
        prompt = getattr(self_rag_prompts.PAPER, name)
        assert prompt.source.startswith("AkariAsai/self-rag retrieval_lm/")
        assert "@ 1fcdc42" in prompt.source
    assert self_rag_prompts.PAPER.answer == {}


# --- the answer ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("[Relevant]1871[Fully supported][Utility:5]", "1871"),
        ("[Relevant] Aurelio Fenwick [Partially supported] [Utility:4]", "Aurelio Fenwick"),
        ("Paris is the capital.[No Retrieval]It is in France.[Utility:5]</s>",
         "Paris is the capital.It is in France."),
        ("[Relevant]1871\n[Continue to Use Evidence]", "1871"),
        ("#1871", "1871"),
        (": 1871", "1871"),
        ("[Irrelevant]<paragraph>x</paragraph>", "x"),
        ("", ""),
    ],
)  # fmt: skip
def test_the_answer_is_the_generation_without_reflection_tokens(text: str, answer: str):
    assert short_form(text) == answer


def test_retrieve_score_reads_the_first_position():
    first = Token(
        "[Retrieval]",
        math.log(0.25),
        {"[Retrieval]": math.log(0.25), "[No Retrieval]": math.log(0.75)},
    )
    with count_fallbacks() as counts:
        assert retrieve_score([first]) == (pytest.approx(0.25), True)
        assert retrieve_score([]) == (0.5, False)
    assert counts == {"retrieval_token": 1}


# --- trace, events, concurrency, async ------------------------------------------------------------------


def test_trace_has_the_decision_then_one_entry_per_passage():
    model = LogprobModel(script=script())
    out = run(model)
    decision, first, second, third = out["trace"]
    assert decision == {
        "step": 0,
        "mode": "adaptive_retrieval",
        "retrieved": True,
        "retrieve_score": pytest.approx(0.6),
        "threshold": 0.2,
        "listed": True,
        "llm_calls": 1,
    }
    assert first == {
        "step": 1,
        "passage_ids": ["p1"],
        "segment": "[Relevant]1871[Fully supported][Utility:5]",
        "reflection": ["[Relevant]", FS, "[Utility:5]"],
        "relevance": pytest.approx(0.8),
        "support": pytest.approx(0.85),
        "utility": pytest.approx(0.9),
        "sequence": pytest.approx(0.8),
        "score": pytest.approx(2.9),
        "chosen": True,
        "llm_calls": 1,
    }
    assert [(e["step"], e["passage_ids"], e["chosen"]) for e in (second, third)] == [
        (2, ["p2"], False),
        (3, ["p3"], False),
    ]


def test_stream_reports_each_decision_and_the_answer_once():
    model = LogprobModel(script=script())
    custom, messages = [], []
    for mode, chunk in graph(model).stream(
        {"question": QUESTION}, stream_mode=["custom", "messages"]
    ):
        (custom if mode == "custom" else messages).append(chunk)
    custom = method_events(custom)
    assert [e["type"] for e in custom] == ["retrieval_decision", "passages", "segments", "answer"]
    decision = custom[0]
    assert (decision["mode"], decision["retrieve"], decision["threshold"]) == (
        "adaptive_retrieval", True, 0.2,
    )  # fmt: skip
    assert custom[2]["chosen"] == 0 and len(custom[2]["segments"]) == 3
    assert custom[-1] == {"type": "answer", "answer": "1871"}
    # no generation streams (they carry reflection tokens); the answer arrives once, whole
    assert [(m.content, meta["langgraph_node"]) for m, meta in messages] == [("1871", "answer")]


class LogprobRendezvous(RendezvousModel, LogprobModel):
    """A LogprobModel whose calls of a stage can wait for each other (``meet``)."""


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
def test_the_per_passage_generations_run_concurrently(mode: str):
    model = LogprobRendezvous(script=script())
    # the three per-passage generations: sent one after the other, the first waits alone and
    # the barrier breaks (after the timeout) instead of hanging
    barrier = model.meet(3, "generate")
    out = invoke_by(mode, graph(model), {"question": QUESTION})
    assert out["answer"] == "1871" and len(model.calls) == 4
    assert not barrier.broken


def test_async_run_gives_the_same_result():
    sync_model, async_model = LogprobModel(script=script()), LogprobModel(script=script())
    expected = run(sync_model)
    out = asyncio.run(graph(async_model).ainvoke({"question": QUESTION}))
    assert sorted(async_model.calls) == sorted(sync_model.calls)
    assert {k: v for k, v in out.items() if k != "messages"} == {
        k: v for k, v in expected.items() if k != "messages"
    }


# --- what the generic contract tests check, with a Self-RAG-shaped double -----------------------------
# tests/test_method_contracts.py and tests/test_chat_io.py run every method with a plain
# ScriptedModel, which returns no log-probabilities: self-rag stops there with its error. The
# same checks pass with a double that shapes each plain reply as a Self-RAG model would.


def selfrag_shaped(stage: str, text: str) -> Generation:
    """A plain scripted reply as a Self-RAG model's: the decision retrieves; a generation is
    "[Relevant]<text>[Fully supported][Utility:5]", every token at probability 1."""
    if stage == "retrieve_token":
        return gen(("[Retrieval]", 1.0))
    return gen(("[Relevant]", 1.0), (text, 1.0), (FS, 1.0), ("[Utility:5]", 1.0))


class SelfRAGScripted(LogprobModel):
    def _reply(self, stage: str, prompt: str) -> Any:
        entry = super()._reply(stage, prompt)
        return selfrag_shaped(stage, entry) if isinstance(entry, str) else entry


ANSWER = "Aurelio Fenwick was born in 1871"


@pytest.mark.parametrize("call", ["invoke", "ainvoke"])
def test_contract_checks_pass_with_a_selfrag_shaped_double(call: str):
    model = SelfRAGScripted(default="ok")
    g = noterag.build_graph("self-rag", model=model, retriever=KeywordRetriever(passages=CORPUS))
    out = invoke_by(call, g, {"question": QUESTION})
    assert out["answer"] == "ok"
    assert out["llm_calls"] == len(model.calls) >= 1
    assert out["prompt_tokens"] > 0 and out["completion_tokens"] > 0
    assert out["trace"] and all("step" in e and "llm_calls" in e for e in out["trace"])
    assert out["stop_reason"]


def test_chat_checks_pass_with_a_selfrag_shaped_double():
    model = SelfRAGScripted(default=ANSWER)
    # a Self-RAG model is not trained to rewrite a follow-up: a plain chat model does it
    rewriter = ScriptedModel(script={"condense_question": "Who painted the bridge?"})
    g = self_rag.build(
        model=model,
        condense_question_model=rewriter,
        retriever=KeywordRetriever(passages=CORPUS),
        checkpointer=InMemorySaver(),
    )
    thread = {"configurable": {"thread_id": "chat"}}
    first = g.invoke({"messages": [{"role": "user", "content": QUESTION}]}, thread)
    assert first["answer"] == ANSWER and first["messages"][-1].content == ANSWER
    calls = len(model.calls)
    second = g.invoke(
        {"messages": [{"role": "user", "content": "Who painted the bridge?"}]}, thread
    )
    assert second["question"] == "Who painted the bridge?"
    assert [m.type for m in second["messages"]] == ["human", "ai", "human", "ai"]
    assert isinstance(second["messages"][-2], HumanMessage)
    # the second turn is rewritten from the conversation (issue 23), then starts over: its own
    # decision, retrieval and generations
    assert rewriter.stages == ["condense_question"]
    assert model.stages[calls] == "retrieve_token"
    assert second["trace"][0]["step"] == 0 and len(second["trace"]) == 1 + len(second["segments"])


# --- settings, schemas, progress ---------------------------------------------------------------------


def test_configuration_is_checked():
    model = LogprobModel(script=script())
    for bad, message in (
        (
            {"mode": "sometimes"},
            "mode must be one of adaptive_retrieval, always_retrieve, no_retrieval",
        ),
        ({"threshold": 1.5}, "threshold must be between 0 and 1, not 1.5"),
        ({"top_logprobs": 0}, "top_logprobs must be at least 1, not 0"),
        ({"max_tokens": 0}, "max_tokens must be at least 1, not 0"),
    ):
        with pytest.raises(ConfigError, match=message):
            run(model, **bad)
    with pytest.raises(ConfigError, match="self-rag runs the paper's short-form QA inference"):
        run(model, task="strategyqa")
    with pytest.raises(ConfigError, match="profile 'official'"):
        run(model, profile="official")
    with pytest.raises(
        ConfigError, match="self-rag runs the paper's short-form QA inference"
    ) as raised:
        graph(model).invoke({"question": QUESTION, "task": "asqa"})
    assert "\n" not in str(raised.value)
    assert model.calls == []


def test_studio_schemas():
    g = graph(LogprobModel())
    context = g.get_context_jsonschema()["properties"]
    assert context["top_k"]["default"] == 5 and context["threshold"]["default"] == 0.2
    assert (
        context["w_rel"]["default"],
        context["w_sup"]["default"],
        context["w_use"]["default"],
    ) == (1.0, 1.0, 0.5)
    assert context["mode"]["default"] == "adaptive_retrieval"
    assert "max_steps" not in context  # no loop
    output = set(g.get_output_jsonschema()["properties"])
    assert {"answer", "retrieved", "retrieve_score", "segments", "chosen"} <= output
    assert not {"passages", "seen", "task", "retrieval_token_listed"} & output


def test_progress_lines():
    progress = progress_of(self_rag.SPEC)
    line = progress["retrieval_decision"](
        {"mode": "adaptive_retrieval", "retrieve": False, "score": 0.1, "threshold": 0.2}
    )
    assert line == "[Retrieval] 0.10 ≤ threshold 0.2: answering without retrieval"
    line = progress["retrieval_decision"](
        {"mode": "always_retrieve", "retrieve": True, "score": None}
    )
    assert line == "mode always_retrieve: retrieving"
    out = run(LogprobModel(script=script()))
    line = progress["segments"]({"segments": out["segments"], "chosen": 0})
    assert line == (
        "scored 3 generations (one per passage); kept passage 1 (Aurelio Fenwick): score 2.90 = "
        "sequence 0.80 + relevance 0.80, support 0.85, utility 0.90 (weighted)"
    )
    assert progress["segments"]({"segments": [{"score": None}], "chosen": 0}) == (
        "generated after [No Retrieval]"
    )


# --- the local model ---------------------------------------------------------------------------------


@pytest.mark.e2e
def test_local_model_is_not_a_selfrag_model(local_model: Any):
    """SmolLM2 (llama.cpp's server returns chat log-probabilities) is no Self-RAG model: the run
    stops with the one error, after the decision call and the per-passage generations."""
    from noterag.retrievers import load_retriever
    from noterag.retrievers.sample import sample_index, sample_questions

    question = sample_questions()[0]["question"]
    g = self_rag.build(model=local_model, retriever=load_retriever(f"bm25:{sample_index()}"))
    with pytest.raises(ConfigError, match="self-rag needs a Self-RAG-trained model") as raised:
        g.invoke({"question": question}, context={"max_tokens": 8})
    assert "'smollm2'" in str(raised.value)
