"""Faults: the model client retries transient failures a bounded number of times and counts
them, every unreadable reply takes its parser's documented fallback and is counted, and an
evaluation against an endpoint that fails, hangs and talks nonsense still records an outcome
for every question, with the retries and fallbacks in its summary.

The endpoints are bench/sim_endpoint.py (with its fault injection) and small hand-written
servers, all on 127.0.0.1. Nothing here asserts on time: the client timeout is short only so
that a hang costs seconds, not minutes.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import openai
import pytest

import noterag
from noterag.base.errors import ConfigError
from noterag.eval import run_eval
from noterag.eval.report import print_summary
from noterag.models import RETRY_BACKOFF, ModelSettings, count_retries, load_chat_model
from noterag.models.errors import fatal_error
from noterag.retrievers.sample import sample_index, sample_questions
from scripted import VELMORA_ROWS, KeywordRetriever, ScriptedModel, passages, velmora_script

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from sim_endpoint import Faults, SimModel, start

CORPUS = passages(*VELMORA_ROWS)
# Text no parser reads: no status, yes/no, NLI label, list item, question mark, heading or [DONE].
GARBAGE = '{"lorem": "ipsum dolor sit amet'


@pytest.fixture(autouse=True)
def _no_env_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("NOTERAG_TIMEOUT", "NOTERAG_MAX_RETRIES", "NOTERAG_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


# --------------------------------------------------------------------------- retries


class _Scripted429(BaseHTTPRequestHandler):
    """Answers 429 (retry after 10 ms) to the first request, then a normal completion; records
    the attempt number the client sent with each request."""

    attempts: list[str]

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.attempts.append(self.headers.get("x-stainless-retry-count", ""))
        if len(self.attempts) == 1:
            body = json.dumps({"error": {"message": "slow down", "type": "rate_limit"}}).encode()
            self.send_response(429)
            self.send_header("retry-after-ms", "10")
        else:
            body = json.dumps(
                {
                    "id": "c1",
                    "object": "chat.completion",
                    "created": 0,
                    "model": "m",
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": "fine"},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                }
            ).encode()
            self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def rate_limited() -> Iterator[tuple[str, list[str]]]:
    attempts: list[str] = []
    handler = type("Handler", (_Scripted429,), {"attempts": attempts})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", attempts
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_429_then_success_is_retried_and_counted(
    mode: str, rate_limited: tuple[str, list[str]]
) -> None:
    url, attempts = rate_limited
    model = load_chat_model(f"openai:m@{url}", ModelSettings(timeout=5, max_retries=2))
    with count_retries() as outer:
        with count_retries() as retries:
            if mode == "sync":
                reply = model.invoke("hello")
            else:
                reply = asyncio.run(model.ainvoke("hello"))
        with count_retries() as later:  # a count sees only its own requests
            pass
    assert reply.content == "fine"
    assert attempts == ["0", "1"]
    assert retries.value == 1 and outer.value == 1 and later.value == 0


@pytest.fixture
def sim() -> Iterator[tuple[Faults, str]]:
    """The simulated endpoint with faults the test sets on the returned ``Faults``."""
    faults = Faults(seed=3)
    server, url = start(SimModel(base_s=0.005, per_token_s=0.0, seed=3), faults=faults)
    yield faults, url
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("fault", ["error_rate", "reset_rate"])
def test_retries_are_bounded_and_the_failure_is_the_questions_own(
    fault: str, sim: tuple[Faults, str]
) -> None:
    faults, url = sim
    setattr(faults, fault, 1.0)
    model = load_chat_model(f"openai:sim@{url}", ModelSettings(timeout=5, max_retries=2))
    with count_retries() as retries, pytest.raises(openai.APIError) as raised:
        model.invoke("write a note")
    assert faults.counts["requests"] == 3 and faults.counts["retried"] == 2
    assert retries.value == 2
    # after its retries, a 500 or a reset fails this question only: the eval goes on
    assert fatal_error(raised.value) is None


def test_a_hang_past_the_timeout_is_retried_then_a_timeout_error(sim: tuple[Faults, str]) -> None:
    faults, url = sim
    faults.hang_rate = 1.0
    model = load_chat_model(f"openai:sim@{url}", ModelSettings(timeout=0.5, max_retries=1))
    with count_retries() as retries, pytest.raises(openai.APITimeoutError) as raised:
        asyncio.run(model.ainvoke("write a note"))
    assert faults.counts["hang"] == 2 and retries.value == 1
    assert fatal_error(raised.value) is None


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_retries_inside_a_graph_run_are_counted_for_that_run(
    mode: str, sim: tuple[Faults, str]
) -> None:
    # LangGraph runs sync nodes in worker threads and async ones in tasks: both see the count
    faults, url = sim
    faults.error_rate = 0.3
    model = load_chat_model(f"openai:sim@{url}", ModelSettings(timeout=5, max_retries=3))
    graph = noterag.build_graph(
        "deepnote", model=model, retriever=KeywordRetriever(passages=CORPUS)
    )
    question = {"question": "Who designed the Velmora Bridge?"}
    with count_retries() as retries:
        if mode == "sync":
            graph.invoke(question, context={"max_steps": 2})
        else:
            asyncio.run(graph.ainvoke(question, context={"max_steps": 2}))
    assert retries.value == faults.counts["retried"] == faults.counts["error"] > 0


def test_the_documented_backoff_is_the_sdks() -> None:
    from openai import _constants

    assert RETRY_BACKOFF == {
        "initial_s": _constants.INITIAL_RETRY_DELAY,
        "max_s": _constants.MAX_RETRY_DELAY,
        "max_retry_after_s": _constants.MAX_RETRY_AFTER_DELAY,
    }


def test_timeout_and_retries_come_from_the_environment_then_the_options(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NOTERAG_TIMEOUT", "7.5")
    monkeypatch.setenv("NOTERAG_MAX_RETRIES", "5")
    model = load_chat_model("openai:m@http://127.0.0.1:9/v1")
    assert (model.request_timeout, model.max_retries) == (7.5, 5)
    settings = ModelSettings.from_env(max_retries=0, timeout=None)
    assert (settings.timeout, settings.max_retries) == (7.5, 0)
    monkeypatch.setenv("NOTERAG_MAX_RETRIES", "many")
    with pytest.raises(ConfigError, match="NOTERAG_MAX_RETRIES='many'"):
        ModelSettings.from_env()
    with pytest.raises(ConfigError, match="max_retries"):
        ModelSettings(max_retries=-1)


def test_eval_command_passes_timeout_and_retries_to_the_client(
    sim: tuple[Faults, str], tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from noterag.cli import app

    faults, url = sim
    faults.error_rate = 1.0
    result = CliRunner().invoke(
        app,
        ["eval", "-m", "vanilla", "-d", str(_fifty_questions(tmp_path / "q.jsonl")), "-n", "3",
         "-o", str(tmp_path / "run"), "-i", str(sample_index(tmp_path / "cache")),
         "--model", f"openai:sim@{url}", "--timeout", "5", "--max-retries", "1"],
        env={"COLUMNS": "200"},
    )  # fmt: skip
    # every question failed after one retry; the run finished, and fails saying so (issue 16)
    assert result.exit_code == 1, result.output
    assert result.stderr.strip().splitlines()[-1].startswith("error: 3 of 3 questions failed")
    assert faults.counts["requests"] == 6 and faults.counts["retried"] == 3
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["n_errors"] == 3 and summary["retries"] == 3
    assert "model requests retried" in result.stdout


def test_ask_reports_the_retries_and_unreadable_replies_of_its_run(
    sim: tuple[Faults, str], tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from noterag.cli import app

    faults, url = sim
    faults.error_rate, faults.garbage_rate = 0.3, 0.7  # every reply that comes is garbage
    result = CliRunner().invoke(
        app,
        ["ask", "Who designed the Velmora Bridge?", "-m", "deepnote", "--max-steps", "1",
         "-i", str(sample_index(tmp_path / "cache")), "--model", f"openai:sim@{url}",
         "--max-retries", "5", "--json"],
        env={"COLUMNS": "200"},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    final = json.loads(result.stdout)
    # the query list could not be read (searched whole, the garbage finds nothing new: no review)
    assert final["fallbacks"] == {"questions": 1}
    assert "1 unreadable reply" in result.stderr
    retried = faults.counts["retried"]
    assert retried == faults.counts["error"] > 0
    assert f"{retried} {'request' if retried == 1 else 'requests'} retried" in result.stderr


# --------------------------------------------------------------------------- fallbacks


def _run(method: str, script: dict[str, Any], **context: Any) -> dict[str, Any]:
    graph = noterag.build_graph(
        method, model=ScriptedModel(script=script), retriever=KeywordRetriever(passages=CORPUS)
    )
    return graph.invoke({"question": "Who designed the Velmora Bridge?"}, context=context)


def test_deepnote_replies_that_never_parse_take_their_fallbacks() -> None:
    state = _run(
        "deepnote",
        velmora_script(
            refine_query=["Aurelio Fenwick birth year", "Pellin Bridge Lise Ambrath"],
            review=GARBAGE,
        ),
        max_steps=2,
        max_failures=2,
        top_k=2,
    )
    steps = state["trace"][1:]
    # a reply that is no list is searched whole; an unreadable verdict rejects the note
    assert state["query_log"] == ["Aurelio Fenwick birth year", "Pellin Bridge Lise Ambrath"]
    assert [s["verdict"] for s in steps] == [False, False]
    assert [s["verdict_parsed"] for s in steps] == [False, False]
    assert state["fallbacks"] == {"questions": 2, "status": 2}


def test_resp_unreadable_judgment_and_summary_take_their_fallbacks() -> None:
    state = _run(
        "resp",
        {"judge": GARBAGE, "global_summary": "The bridge is by Aurelio Fenwick", "plan": ""},
        max_steps=3,
    )
    # the judgment counts as No, so the plan runs; it names nothing, so the loop stops
    assert state["trace"][0]["judge_parsed"] is False
    assert state["memory"].startswith("The bridge is by Aurelio Fenwick")
    assert state["fallbacks"] == {"yes_no": 1, "done_marker": 1, "sub_question": 1}


def test_amber_unreadable_filter_and_new_question_take_their_fallbacks() -> None:
    state = _run(
        "amber",
        {
            "filter": GARBAGE,
            "sufficiency": GARBAGE,
            "refine_query": "Who built it",
            "review": '{"status": "False"}',
        },
        max_steps=2,
        top_k=2,
    )
    first = state["trace"][0]
    # an unreadable NLI verdict keeps its passage
    assert first["dropped_passage_ids"] == [] and len(first["new_passage_ids"]) == 2
    assert state["query_log"] == ["Who built it"]
    assert state["fallbacks"] == {
        "nli": state["unparsed_filters"],
        "status": 1,  # the sufficiency reply: insufficient, so a new question
        "new_question": 1,
    }
    assert state["unparsed_filters"] >= 2


# --------------------------------------------------------------------------- the fault eval


def _fifty_questions(path: Path) -> Path:
    """The sample questions, cycled to 50 (each id once; the question text varies)."""
    sample = sample_questions()
    with path.open("w") as f:
        for i in range(50):
            q = sample[i % len(sample)]
            row = {"id": f"f{i}", "question": f"{q['question']} ({i})", "answers": q["answers"]}
            f.write(json.dumps(row) + "\n")
    return path


def test_an_eval_against_a_faulty_endpoint_records_every_question(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    faults = Faults(error_rate=0.2, hang_rate=0.05, garbage_rate=0.1, hang_s=120, seed=11)
    server, url = start(SimModel(base_s=0.02, per_token_s=0.0, seed=11), faults=faults)
    try:
        summary = run_eval(
            "deepnote",
            _fifty_questions(tmp_path / "questions.jsonl"),
            tmp_path / "run",
            index=sample_index(tmp_path / "cache"),
            model=f"openai:sim@{url}",
            settings=ModelSettings(timeout=2, max_retries=2),
            concurrency=8,
            progress=False,
        )
    finally:
        server.shutdown()  # also ends the requests still hanging
        server.server_close()
    rows = [
        json.loads(line) for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines()
    ]
    counts = faults.counts

    # every question ends with one recorded outcome: an answer, or the error that ended it
    assert sorted(r["id"] for r in rows) == sorted(f"f{i}" for i in range(50))
    assert summary["n"] == summary["questions"] == 50
    for r in rows:
        assert (r["error"] is None) == isinstance(r["answer"], str)
        if r["error"]:
            assert "HTTP 500" in r["error"] or "did not answer in time" in r["error"]
    errors = [r for r in rows if r["error"]]
    assert summary["n_errors"] == len(errors)

    # retries: what the client counted is what the endpoint saw, and every 500 or hang was
    # either retried or ended a question (deepnote's calls are sequential: one per failure)
    assert summary["retries"] == sum(r["retries"] for r in rows) == counts["retried"] > 0
    assert counts["error"] + counts["hang"] == counts["retried"] + len(errors)

    # fallbacks: the garbage that reached a parser, as the trace records it
    assert summary["fallbacks"] == _sum([r["fallbacks"] for r in rows if not r["error"]])
    assert 0 < sum(summary["fallbacks"].values()) <= counts["garbage"]
    assert set(summary["fallbacks"]) <= {"questions", "status"}
    for r in rows:
        if not r["error"]:
            unparsed = sum(s.get("verdict_parsed") is False for s in r["trace"])
            assert r["fallbacks"].get("status", 0) == unparsed

    with open(tmp_path / "run" / "summary.json") as f:
        assert json.load(f) == summary
    from rich.console import Console

    print_summary(summary, Console(width=120))
    printed = capsys.readouterr().out.splitlines()
    retried = next(line for line in printed if "model requests retried" in line)
    assert retried.split()[-1] == str(summary["retries"])
    fallbacks = next(line for line in printed if "fallbacks" in line)
    assert f"{sum(summary['fallbacks'].values())} (" in fallbacks
    print(
        f"\nfaults {dict(counts)}; retries {summary['retries']}; fallbacks "
        f"{summary['fallbacks']}; errors {summary['n_errors']}; wall {summary['wall_s']:.1f}s",
        file=sys.stderr,
    )


def _sum(counts: list[dict[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for c in counts:
        for k, n in c.items():
            total[k] = total.get(k, 0) + n
    return dict(sorted(total.items()))


def test_one_model_object_serves_several_eval_runs(sim: tuple[Faults, str], tmp_path: Path) -> None:
    """A model's async client pools keep-alive connections on the loop that opened them: a second
    run with the same model object must not find that loop closed."""
    _, url = sim
    model = load_chat_model(f"openai:sim@{url}", ModelSettings(timeout=5, max_retries=0))
    questions = tmp_path / "questions.jsonl"
    questions.write_text("".join(json.dumps(q) + "\n" for q in sample_questions()[:3]))
    for method in ("vanilla", "deepnote"):
        run_eval(
            method,
            questions,
            tmp_path / method,
            index=sample_index(tmp_path / "cache"),
            model=model,
            concurrency=2,
            progress=False,
        )
        rows = [json.loads(line) for line in (tmp_path / method / "results.jsonl").open()]
        assert [row["error"] for row in rows] == [None] * 3, method
