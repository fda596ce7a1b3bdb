"""FLARE driven by scripted models that return token log-probabilities: it retrieves exactly when
a look-ahead token's probability is at most θ (masking the tokens at most β), the explicit-query
variant's questions, the stage sequence of each stop path, the whole prompt, the per-call model
arguments, parse fallbacks, the one clear error when the model returns no log-probabilities,
the original's exemplars, and one run of the local model."""

from __future__ import annotations

import asyncio
import hashlib
import math
import re
from functools import partial
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from pydantic import Field

from noterag.base.errors import ConfigError
from noterag.graphs import flare
from noterag.nodes import flare as steps
from noterag.nodes.logprobs import LogprobsUnavailableError, Token
from noterag.prompts import flare as flare_prompts
from noterag.prompts import vendored
from scripted import (
    QUESTION,
    VELMORA_ROWS,
    KeywordRetriever,
    RecordingRetriever,
    ScriptedModel,
    method_events,
    passages,
    progress_of,
    run_over,
)

# the first 2WikiMultihopQA exemplar's question finds this passage
CORPUS = passages(
    *VELMORA_ROWS,
    ("Hypocrite (film)", "Hypocrite is a 1949 Mexican film directed by Miguel Morayta."),
)
FACT = "The Velmora Bridge was designed by the architect Aurelio Fenwick."
BORN = "Aurelio Fenwick was born in 1871."
CONCLUDE = "So the answer is 1871."
DEMO_QUESTION = "When did the director of film Hypocrite (Film) die?"
SHORT = {"max_demos": 1, "demo_top_k": 1, "top_k": 2}


def more(sentence: str) -> str:
    """A reply that goes on after its first sentence (a lone sentence ends the answer)."""
    return f"{sentence} Then"


# words and punctuation marks, each with the whitespace before it (as BPE tokens carry it)
TOKEN = re.compile(r"\s*\w+|\s*[^\w\s]")


class LogprobModel(ScriptedModel):
    """Returns log-probabilities as an OpenAI-compatible endpoint does when asked: one token per
    word or punctuation mark, each with probability ``probs.get(<token stripped>, 0.95)``;
    finish_reason "length" for the replies in ``cut``. (ScriptedModel records every call's model
    arguments.)"""

    probs: dict[str, float] = Field(default_factory=dict)
    cut: frozenset[str] = frozenset()

    def _generate(
        self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> Any:
        result = super()._generate(messages, stop, run_manager, **kwargs)
        message = result.generations[0].message
        text = str(message.content)
        if kwargs.get("logprobs"):
            message.response_metadata["logprobs"] = {
                "content": [
                    {
                        "token": t,
                        "logprob": math.log(self.probs.get(t.strip(), 0.95)),
                        "top_logprobs": [],
                    }
                    for t in TOKEN.findall(text)
                ]
            }
        message.response_metadata["finish_reason"] = "length" if text in self.cut else "stop"
        return result


run = partial(run_over, flare.build, CORPUS, SHORT)  # run(model, retriever=None, **context)


def top(query: str, k: int = 2) -> list[Any]:
    return KeywordRetriever(passages=CORPUS).invoke(query, k=k)


def ids(query: str, k: int = 2) -> list[str]:
    return [str(doc.id) for doc in top(query, k)]


def search_results(query: str, k: int = 2) -> str:
    lines = "\n".join(f"[{i}]: {doc.page_content}" for i, doc in enumerate(top(query, k), 1))
    return f"Search results ranked based on relevance in descending order:\n{lines}"


# --- when it retrieves --------------------------------------------------------------------------


def test_a_confident_look_ahead_is_accepted_and_nothing_more_is_retrieved():
    model, retriever = (
        LogprobModel(script={"look_ahead": [more(FACT), CONCLUDE]}),
        RecordingRetriever(passages=CORPUS),
    )
    out = run(model, retriever)
    assert model.stages == ["look_ahead", "look_ahead"]  # no regeneration, no retrieval
    assert retriever.queries == [(QUESTION, 2), (DEMO_QUESTION, 1)]  # x, then the exemplar's
    assert out["retrievals"] == 0 and out["steps"] == 2
    assert out["generation"] == f"{FACT} {CONCLUDE}" and out["sentences"] == [FACT, CONCLUDE]
    assert out["answer"] == "1871" and out["query_log"] == [QUESTION]
    assert out["stop_reason"] == "the generator ended its answer at step 1"
    read = ids(QUESTION)
    assert out["trace"] == [
        {"step": 0, "look_ahead": FACT, "min_prob": 0.95, "low_confidence": [], "retrieved": False,
         "llm_calls": 1, "passage_ids": read, "sentence": FACT},
        {"step": 1, "look_ahead": CONCLUDE, "min_prob": 0.95, "low_confidence": [],
         "retrieved": False, "llm_calls": 1, "passage_ids": read, "sentence": CONCLUDE},
    ]  # fmt: skip
    assert out["llm_calls"] == len(model.calls) == 2
    assert out["messages"][-1].content == "1871" and isinstance(out["messages"][-1], AIMessage)
    assert not out.get("fallbacks")


def test_a_token_at_most_beta_is_masked_out_of_the_query_and_the_sentence_regenerated():
    model = LogprobModel(
        script={"look_ahead": [more(FACT), CONCLUDE], "regenerate": more(BORN)},
        probs={"Fenwick": 0.3},
    )
    retriever = RecordingRetriever(passages=CORPUS)
    out = run(model, retriever)
    masked = "The Velmora Bridge was designed by the architect Aurelio ."  # " Fenwick" masked
    assert model.stages == ["look_ahead", "regenerate", "look_ahead"]
    assert retriever.queries[2:] == [(masked, 2)]
    assert out["retrievals"] == 1 and out["query_log"] == [QUESTION, masked]
    # the regenerated sentence is accepted as it comes (its own low token is not looked at)
    assert out["sentences"] == [BORN, CONCLUDE] and out["answer"] == "1871"
    new = ids(masked)
    assert out["trace"][0] == {
        "step": 0, "look_ahead": FACT, "min_prob": 0.3, "low_confidence": [" Fenwick"],
        "queries": [masked], "retrieved": True, "new_passage_ids": new, "passage_ids": new,
        "sentence": BORN, "llm_calls": 2,
    }  # fmt: skip
    # the regeneration reads the new passages; the next look-ahead continues after its sentence
    (regenerate,) = model.prompts_for("regenerate")
    assert regenerate.endswith(f"{search_results(masked)}\nQuestion: {QUESTION}\nAnswer:")
    assert model.prompts_for("look_ahead")[1].endswith(
        f"{search_results(masked)}\nQuestion: {QUESTION}\nAnswer: {BORN}"
    )
    assert out["passage_ids"] == list(dict.fromkeys(ids(QUESTION) + new))
    assert out["llm_calls"] == len(model.calls) == sum(e["llm_calls"] for e in out["trace"]) == 3


@pytest.mark.parametrize(
    ("prob", "retrieves", "query"),
    [
        (0.81, False, None),  # above θ = 0.8: accepted
        (0.8, True, FACT),  # at θ retrieves (the original's <=); above β: nothing masked
        (0.79, True, FACT),  # under θ, above β = 0.4: retrieves with the whole sentence
        (0.4, True, "The Velmora Bridge was designed by the  Aurelio Fenwick."),  # at β: masked
    ],
)
def test_it_retrieves_exactly_when_a_token_is_at_most_theta(
    prob: float, retrieves: bool, query: str | None
):
    model = LogprobModel(
        script={"look_ahead": [more(FACT), CONCLUDE], "regenerate": more(FACT)},
        probs={"architect": prob},
    )
    retriever = RecordingRetriever(passages=CORPUS)
    out = run(model, retriever)
    assert out["retrievals"] == int(retrieves)
    assert ("regenerate" in model.stages) is retrieves
    assert retriever.queries[2:] == ([(query, 2)] if retrieves else [])
    assert out["trace"][0]["retrieved"] is retrieves


def test_theta_and_beta_are_settings():
    model = LogprobModel(
        script={"look_ahead": [more(FACT), CONCLUDE], "regenerate": more(FACT)},
        probs={"architect": 0.6},
    )
    assert run(model, threshold=0.5)["retrievals"] == 0
    model = LogprobModel(
        script={"look_ahead": [more(FACT), CONCLUDE], "regenerate": more(FACT)},
        probs={"architect": 0.6},
    )
    retriever = RecordingRetriever(passages=CORPUS)
    run(model, retriever, mask_threshold=0.7)
    assert retriever.queries[2:] == [
        ("The Velmora Bridge was designed by the  Aurelio Fenwick.", 2)
    ]


def test_a_look_ahead_with_every_token_masked_is_accepted_without_retrieval():
    model = LogprobModel(
        script={"look_ahead": [more("Fenwick!"), CONCLUDE]}, probs={"Fenwick": 0.1, "!": 0.1}
    )
    out = run(model)
    assert model.stages == ["look_ahead", "look_ahead"]
    assert out["retrievals"] == 0 and out["sentences"] == ["Fenwick!", CONCLUDE]
    assert out["trace"][0]["low_confidence"] == ["Fenwick", "!"]


# --- the explicit-query variant -----------------------------------------------------------------------


def test_questions_are_asked_about_the_low_confidence_terms():
    question = "Who designed the Velmora Bridge?"
    model = LogprobModel(
        script={
            "look_ahead": [more(FACT), CONCLUDE],
            "regenerate": more(FACT),
            "ask_question": question,
        },
        probs={"Aurelio": 0.2, "Fenwick": 0.3, "Velmora": 0.3},
    )
    retriever = RecordingRetriever(passages=CORPUS)
    out = run(model, retriever, query="questions")
    # "Velmora" and "Aurelio" are 7 tokens apart: two terms, two questions
    assert model.stages == [
        "look_ahead",
        "ask_question",
        "ask_question",
        "regenerate",
        "look_ahead",
    ]
    tail = (
        "\n\nGiven the above passage, ask a question to which the answer is the term/entity/phrase"
    )
    assert sorted(model.prompts_for("ask_question")) == sorted(
        [f' {FACT}{tail} "Velmora".', f' {FACT}{tail} "Aurelio Fenwick".']
    )
    # both queries' passages, merged rank by rank, top_k in all
    assert retriever.queries[2:] == [(question, 2), (question, 2)]
    assert out["trace"][0]["queries"] == [question, question]
    assert out["trace"][0]["llm_calls"] == 4 == out["llm_calls"] - 1
    assert out["trace"][0]["new_passage_ids"] == ids(question)


def test_a_question_without_a_question_mark_leaves_the_sentence_as_the_query():
    model = LogprobModel(
        script={
            "look_ahead": [more(BORN), CONCLUDE],
            "regenerate": more(BORN),
            "ask_question": "The architect",
        },
        probs={"born": 0.1},
    )
    retriever = RecordingRetriever(passages=CORPUS)
    out = run(model, retriever, query="questions")
    assert retriever.queries[2:] == [(BORN, 2)]
    assert out["fallbacks"] == {"question": 1}


def test_questions_are_asked_with_the_text_generated_so_far():
    model = LogprobModel(
        script={
            "look_ahead": [more(FACT), more(BORN), CONCLUDE],
            "regenerate": more(BORN),
            "ask_question": "When?",
        },
        probs={"born": 0.1},
    )
    run(model, query="questions")
    (prompt,) = model.prompts_for("ask_question")
    assert prompt.startswith(f"{FACT} {BORN}\n\nGiven the above passage") and prompt.endswith(
        '"born".'
    )


def test_a_term_between_beta_and_theta_asks_nothing_and_queries_the_sentence():
    model = LogprobModel(
        script={"look_ahead": [more(FACT), CONCLUDE], "regenerate": more(FACT)},
        probs={"architect": 0.6},
    )
    retriever = RecordingRetriever(passages=CORPUS)
    run(model, retriever, query="questions")
    assert "ask_question" not in model.stages and retriever.queries[2:] == [(FACT, 2)]


# --- stop paths --------------------------------------------------------------------------------------


def test_max_steps_ends_an_answer_that_goes_on_and_the_answer_falls_back_to_the_generation():
    reply = f"{BORN} He studied at the Marrowgate Institute."  # more after the first sentence
    model = LogprobModel(script={"look_ahead": reply})
    out = run(model, max_steps=3)
    assert model.stages == ["look_ahead"] * 3
    assert out["stop_reason"] == "3 sentence(s) (max_steps = 3)"
    assert out["answer"] == f"{BORN} {BORN} {BORN}" and out["fallbacks"] == {"answer_is": 1}


def test_max_length_counts_the_tokens_generated():
    model = LogprobModel(script={"look_ahead": f"{BORN} More."})
    out = run(model, max_length=12)
    # BORN is 7 tokens (6 words and the full stop): two sentences reach 12
    assert model.stages == ["look_ahead"] * 2
    assert out["stop_reason"] == "14 tokens generated (max_length = 12)"


def test_a_reply_cut_at_the_token_cap_does_not_end_the_answer():
    model = LogprobModel(script={"look_ahead": [BORN, CONCLUDE]}, cut=frozenset({BORN}))
    out = run(model)
    assert model.stages == ["look_ahead", "look_ahead"] and out["steps"] == 2


def test_an_empty_reply_ends_the_answer():
    model = LogprobModel(script={"look_ahead": [more(FACT), "  "]})
    out = run(model)
    assert out["stop_reason"] == "the generator wrote no sentence at step 1"
    assert out["sentences"] == [FACT, ""] and out["answer"] == FACT
    assert out["fallbacks"] == {"answer_is": 1}


def test_the_default_settings_are_the_authors_2wikimultihopqa_configuration():
    ctx = flare.FlareContext()
    assert (ctx.threshold, ctx.mask_threshold, ctx.look_ahead_tokens, ctx.max_length) == (
        0.8,
        0.4,
        64,
        256,
    )
    assert ctx.top_k == 5 and ctx.max_steps == 10 and ctx.query == "masked"


# --- prompts and model arguments -----------------------------------------------------------------


def test_the_whole_first_prompt():
    model = LogprobModel(script={"look_ahead": CONCLUDE})
    run(model)
    (prompt,) = model.prompts_for("look_ahead")
    demo = (
        f"{search_results(DEMO_QUESTION, 1)}\nQuestion: {DEMO_QUESTION}\nAnswer: The film "
        "Hypocrite was directed by Miguel Morayta. Miguel Morayta died on 19 June 2013. So the "
        "answer is 19 June 2013."
    )
    assert prompt == f"{demo}\n\n{search_results(QUESTION)}\nQuestion: {QUESTION}\nAnswer:"


def test_exemplars_without_passages_and_their_count():
    model = LogprobModel(script={"look_ahead": CONCLUDE})
    retriever = RecordingRetriever(passages=CORPUS)
    run(model, retriever, max_demos=None, demo_top_k=0)
    assert retriever.queries == [(QUESTION, 2)]
    (prompt,) = model.prompts_for("look_ahead")
    assert prompt.count("\nAnswer:") == 9 and prompt.count("Search results") == 1  # 8 exemplars
    assert prompt.startswith(f"Question: {DEMO_QUESTION}\nAnswer: The film Hypocrite")


def test_every_generator_call_asks_for_log_probabilities_with_the_originals_arguments():
    model = LogprobModel(
        script={"look_ahead": [more(FACT), CONCLUDE], "regenerate": more(FACT)},
        probs={"architect": 0.5},
    )
    run(model)
    for args in model.arguments("look_ahead") + model.arguments("regenerate"):
        assert args == {"stop": ["\n\n"], "logprobs": True, "top_logprobs": 1, "max_tokens": 64,
                        "temperature": 0.0}  # fmt: skip
    # a run's own max_tokens and temperature win (and are not passed twice)
    model = LogprobModel(script={"look_ahead": CONCLUDE})
    run(model, max_tokens=30, temperature=0.7)
    (args,) = model.arguments("look_ahead")
    assert args["max_tokens"] == 30 and args["temperature"] == 0.7


def test_no_call_asks_for_more_tokens_than_are_left_of_max_length():
    # FACT is 11 tokens, BORN 7 (TOKEN: words and punctuation marks). The original asks its
    # continuation for min(max_generation_len - generated, 64) tokens (jzbjyb/FLARE @ ec4b06b,
    # src/openai_api.py); noterag keeps a confident look-ahead, so the look-ahead obeys it too.
    assert [len(TOKEN.findall(s)) for s in (FACT, BORN)] == [11, 7]
    model = LogprobModel(
        script={"look_ahead": [more(FACT), more(BORN)], "regenerate": more(BORN)},
        probs={"1871": 0.5},
    )
    out = run(model, max_length=20)
    assert model.stages == ["look_ahead", "look_ahead", "regenerate", "look_ahead", "regenerate"]
    assert [args["max_tokens"] for args in model.arguments()] == [20, 9, 9, 2, 2]
    # (the scripted model ignores max_tokens: a real one would stop at 20)
    assert out["stop_reason"] == "25 tokens generated (max_length = 20)"
    model = LogprobModel(script={"look_ahead": [more(FACT), more(FACT), CONCLUDE]})
    run(model, max_length=25)
    assert [args["max_tokens"] for args in model.arguments()] == [25, 14, 3]


@pytest.mark.parametrize(
    ("task", "reply", "expected"),
    [
        ("strategyqa", ["Thus, it could not. More", "So the final answer is no."], "no"),
        ("asqa", ["It has 2 interpretations. More",
                  "The answers to all interpretations are: (1) Aurelio Fenwick, (2) Lise Ambrath."],
         "(1) Aurelio Fenwick, (2) Lise Ambrath."),
        ("asqa", ["Aurelio Fenwick designed it. More", "Lise Ambrath did not."],
         "Aurelio Fenwick designed it. Lise Ambrath did not."),
    ],
)  # fmt: skip
def test_each_tasks_answer_is_read_as_the_originals_evaluation_reads_it(
    task: str, reply: list[str], expected: str
):
    model = LogprobModel(script={"look_ahead": reply})
    out = flare.build(model=model, retriever=KeywordRetriever(passages=CORPUS)).invoke(
        {"question": QUESTION, "task": task}, context={"demo_top_k": 0}
    )
    assert model.stages == ["look_ahead", "look_ahead"]
    assert out["answer"] == expected and not out.get("fallbacks")
    template = flare_prompts.PAPER.answer[task].format(question=QUESTION)
    assert model.prompts_for("look_ahead")[0].endswith(template)


def test_an_unknown_task_fails_before_any_search():
    model, retriever = LogprobModel(), RecordingRetriever(passages=CORPUS)
    with pytest.raises(ConfigError, match="no answer prompt for task 'crud'"):
        flare.build(model=model, retriever=retriever).invoke({"question": QUESTION, "task": "crud"})
    assert retriever.queries == [] and model.calls == []


# --- no log-probabilities ------------------------------------------------------------------------


@pytest.mark.parametrize("call", ["invoke", "ainvoke"])
def test_a_model_without_log_probabilities_is_one_clear_error(call: str):
    model = ScriptedModel(default=FACT, logprobs=False)  # an endpoint without them
    graph = flare.build(model=model, retriever=KeywordRetriever(passages=CORPUS))
    with pytest.raises(LogprobsUnavailableError) as raised:
        if call == "invoke":
            graph.invoke({"question": QUESTION}, context=SHORT)
        else:
            asyncio.run(graph.ainvoke({"question": QUESTION}, context=SHORT))
    message = str(raised.value)
    assert isinstance(raised.value, ConfigError) and "\n" not in message
    assert (
        message.startswith("flare needs the token log-probabilities") and "ScriptedModel" in message
    )
    assert model.stages == ["look_ahead"]  # the first call, nothing after it


def test_the_error_names_the_model_the_endpoint_reported():
    reply = AIMessage(FACT, response_metadata={"model_name": "gpt-4o-mini"})
    with pytest.raises(LogprobsUnavailableError, match="the model gpt-4o-mini returned none"):
        steps.token_logprobs(reply, method="flare", model=object())


def test_settings_are_checked():
    for bad, message in [
        ({"threshold": 1.5}, "threshold must be between 0 and 1, not 1.5"),
        ({"mask_threshold": -0.1}, "mask_threshold must be between 0 and 1, not -0.1"),
        ({"query": "both"}, "query must be one of masked, questions"),
        ({"look_ahead_tokens": 0}, "look_ahead_tokens must be at least 1"),
        ({"max_steps": 0}, "max_steps must be at least 1"),
        ({"demo_top_k": -1}, "demo_top_k must not be negative"),
    ]:
        with pytest.raises(ConfigError, match=message):
            flare.FlareContext(**bad)


# --- async, events ---------------------------------------------------------------------------------


def test_async_runs_the_same_steps():
    def model() -> LogprobModel:
        return LogprobModel(
            script={"look_ahead": [more(FACT), CONCLUDE], "regenerate": more(BORN)},
            probs={"Fenwick": 0.3},
        )

    sync_model, async_model = model(), model()
    expected = run(sync_model)
    graph = flare.build(model=async_model, retriever=KeywordRetriever(passages=CORPUS))
    out = asyncio.run(graph.ainvoke({"question": QUESTION}, context=SHORT))
    assert async_model.calls == sync_model.calls
    for key in ("answer", "sentences", "retrievals", "trace", "stop_reason", "llm_calls"):
        assert out[key] == expected[key], key


def test_each_decision_is_one_progress_event():
    model = LogprobModel(
        script={"look_ahead": [more(FACT), CONCLUDE], "regenerate": more(BORN)},
        probs={"Fenwick": 0.3},
    )
    graph = flare.build(model=model, retriever=KeywordRetriever(passages=CORPUS))
    events = [
        e for _, e in graph.stream({"question": QUESTION}, context=SHORT, stream_mode=["custom"])
    ]
    events = method_events(events)
    assert [(e["type"], e.get("step")) for e in events] == [
        ("passages", 0), ("look_ahead", 0), ("passages", 0), ("sentence", 0), ("look_ahead", 1),
        ("answer", None),
    ]  # fmt: skip
    assert events[0]["initial"] and not events[2]["initial"]
    assert events[1]["queries"] == ["The Velmora Bridge was designed by the architect Aurelio ."]
    assert events[4]["queries"] == [] and events[4]["look_ahead"] == CONCLUDE
    lines = [progress_of(flare.SPEC)[e["type"]](e) for e in events[:5]]
    assert lines[1].startswith("low confidence ('Fenwick'): ") and lines[4].startswith(
        "confident: "
    )


# --- the parts ---------------------------------------------------------------------------------------


def tokens(*pairs: tuple[str, float]) -> list[Token]:
    return [Token(text, math.log(p)) for text, p in pairs]


def test_the_first_sentence_is_at_least_five_characters_long_and_keeps_its_tokens():
    found = steps.first_sentence(
        tokens(("No", 0.9), (".", 0.9), (" It", 0.5), (" is", 0.9), (".", 0.9), (" Then", 0.1))
    )
    assert found.text == "No. It is." and [t.text for t in found.tokens] == [
        "No",
        ".",
        " It",
        " is",
        ".",
    ]
    assert found.rest == " Then"
    assert steps.first_sentence(tokens(("Dr", 0.9), (".", 0.9), (" Who", 0.9))).text == "Dr. Who"


def test_low_confidence_terms_join_tokens_fewer_than_five_apart():
    sentence = tokens(("A", 0.1), (" b", 0.9), (" c", 0.9), (" d", 0.9), (" e", 0.1),
                      (" f", 0.9), (" g", 0.9), (" h", 0.9), (" i", 0.9), (" j", 0.1), (".", 0.1))  # fmt: skip
    # A..e are 4 apart: one term; j is 5 after e: a new term (the full stop joins it)
    assert steps.low_confidence_terms(sentence, 0.4) == ["A b c d e", "j."]
    assert steps.low_confidence_terms(tokens((" x", 0.9), (",", 0.1)), 0.4) == []  # punctuation
    assert steps.masked_query(sentence, 0.4) == "b c d  f g h i"


def test_the_exemplars_are_the_originals_and_the_vendored_file_is_the_original():
    assert [len(flare_prompts.demonstrations(t)) for t in ("multihop", "strategyqa", "asqa")] == [
        8,
        6,
        8,
    ]
    strategy = flare_prompts.demonstrations("strategyqa")[0].text
    assert strategy == (
        "Generate a yes or no answer to the following question.\nQuestion: Do hamsters provide "
        "food for any animals?\nAnswer: Hamsters are prey animals. Prey are food for predators. "
        "Thus, hamsters provide food for some animals. So the final answer is yes."
    )
    asqa = flare_prompts.demonstrations("asqa")[0].text
    assert asqa.startswith(
        "Given an ambiguous question, figure out its interpretations and answer them one by one."
        "\nQuestion: Who played bonnie in gone with the wind?\nAnswer: This question is ambiguous "
        "in terms of which version or adaptation of Gone with the Wind is being referred to. In "
        "order to figure out its interpretations, we need to consider"
    )
    folder = vendored.folder(flare_prompts.REPOSITORY)
    data = (folder / flare_prompts.DATASETS_FILE).read_bytes()
    blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    assert blob == flare_prompts.source()["git_blobs"][flare_prompts.DATASETS_FILE]


def test_the_trace_page_shows_each_look_ahead():
    from noterag.trace.page import record, render_html

    model = LogprobModel(
        script={"look_ahead": [more(FACT), CONCLUDE], "regenerate": more(BORN)},
        probs={"Fenwick": 0.3},
    )
    graph = flare.build(model=model, retriever=KeywordRetriever(passages=CORPUS))
    page = render_html(record(graph, QUESTION, SHORT, method="flare"))
    assert page.count("retrieval: <b>True</b>") == 1 and page.count("retrieval: <b>False</b>") == 1
    assert "Aurelio ." in page and BORN in page


# --- the local model ----------------------------------------------------------------------------------


@pytest.mark.e2e
def test_local_model_end_to_end(local_model: Any):
    """llama.cpp's server returns log-probabilities through the OpenAI-compatible API (when
    top_logprobs is set): FLARE runs on the local model."""
    from noterag.retrievers import load_retriever
    from noterag.retrievers.sample import sample_index, sample_questions

    graph = flare.build(model=local_model, retriever=load_retriever(f"bm25:{sample_index()}"))
    out = graph.invoke(
        {"question": sample_questions()[0]["question"]},
        context={"max_steps": 2, "max_demos": 2, "top_k": 2, "look_ahead_tokens": 32},
    )
    assert isinstance(out["answer"], str) and out["stop_reason"]
    assert 1 <= out["steps"] <= 2 and len(out["sentences"]) == out["steps"]
    assert 0 <= out["retrievals"] <= out["steps"]
    assert (
        out["llm_calls"]
        == sum(e["llm_calls"] for e in out["trace"])
        == out["steps"] + out["retrievals"]
    )
    for entry in out["trace"]:  # every look-ahead came back with its tokens' probabilities
        assert entry["look_ahead"] == "" or 0.0 < entry["min_prob"] <= 1.0
