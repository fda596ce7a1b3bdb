"""Issue 42, defect 5: replies are bounded. An endpoint that ignores ``max_tokens`` (60 MB
replies) made ``eval`` write a 300 MB row, and then refuse its own run directory ("over the 64
MiB limit ... not a results file noterag wrote"). A reply is now cut at a bound derived from
``max_tokens`` (noterag.core.budget: 16 characters a token), counted in the run's ``fallbacks``
as ``reply_truncated``; and a row over the reader's limit is cut to fit, naming what was cut."""

from __future__ import annotations

import json
from pathlib import Path

from langchain_core.messages import AIMessage

from noterag.core.budget import CHARS_PER_TOKEN, REPLY_CUT_MARK, bounded
from noterag.core.parsing import count_fallbacks
from noterag.eval.loop import LineWriter, encode_row
from noterag.eval.runs import MAX_ROW_BYTES, scan_results
from noterag.registry.methods import build_graph
from scripted import QUESTION, VELMORA_ROWS, KeywordRetriever, ScriptedModel, passages

HUGE = "lorem ipsum " * 500_000  # 6 MB: a reply of an endpoint that ignores max_tokens


def test_a_reply_past_max_tokens_is_cut_and_counted() -> None:
    model = ScriptedModel(script={"answer": HUGE})
    graph = build_graph(
        "vanilla", model=model, retriever=KeywordRetriever(passages=passages(*VELMORA_ROWS))
    )
    out = graph.invoke({"question": QUESTION}, context={"max_tokens": 100})
    assert out["answer"] == (HUGE[: 100 * CHARS_PER_TOKEN] + REPLY_CUT_MARK).strip()
    assert out["fallbacks"] == {"reply_truncated": 1}
    assert len(out["messages"][-1].content) <= 100 * CHARS_PER_TOKEN + len(REPLY_CUT_MARK)
    # a reply within the bound is left as it is, and nothing is counted
    model = ScriptedModel(script={"answer": "Velmora"})
    graph = build_graph(
        "vanilla", model=model, retriever=KeywordRetriever(passages=passages(*VELMORA_ROWS))
    )
    out = graph.invoke({"question": QUESTION}, context={"max_tokens": 100})
    assert out["answer"] == "Velmora" and out["fallbacks"] == {}


def test_token_log_probabilities_are_cut_with_the_text() -> None:
    entries = [{"token": "a", "logprob": -0.1}] * 1000
    message = AIMessage("a" * 1000, response_metadata={"logprobs": {"content": entries}})
    with count_fallbacks() as counted:
        cut = bounded([message, "short"], tokens=10, chars=10 * CHARS_PER_TOKEN)
    assert cut[1] == "short" and counted == {"reply_truncated": 1}
    assert len(cut[0].response_metadata["logprobs"]["content"]) == 10
    assert cut[0].content == "a" * 160 + REPLY_CUT_MARK


def test_a_row_over_the_readers_limit_is_cut_to_fit(tmp_path: Path) -> None:
    """Before: the row was written whole and the run directory refused by its own reader."""
    row = {
        "id": "q1",
        "answer": "x" * (MAX_ROW_BYTES + 1000),
        "trace": [{"note": "n" * 1000}] * 100,
        "metrics": {"em": 0.0},
        "error": None,
    }
    line = encode_row(row)
    assert len(line) <= MAX_ROW_BYTES
    results = tmp_path / "results.jsonl"
    writer = LineWriter(results)
    writer.append(row)
    writer.close()
    (read,), _ = scan_results(results)
    assert read["trimmed"] == ["answer"] and read["answer"].startswith("x" * 1000)
    assert read["metrics"] == {"em": 0.0} and len(read["trace"]) == 100
    # a row within the limit is written as it is
    assert json.loads(encode_row({"id": "q2", "answer": "a"})) == {"id": "q2", "answer": "a"}
