"""The evaluation runner: result rows, bounded concurrency, resume (after a normal stop, a
half-written line and a SIGKILL of the real command), failures, refused reconfiguration,
fair top-k, and the `eval` / `compare` / `corpus-from` commands.

Scripted models answer in-process; the SIGKILL test runs `python -m noterag eval` against a
tiny OpenAI-compatible HTTP server. Nothing here asserts on time.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import PrivateAttr
from typer.testing import CliRunner

import noterag.models
from noterag.base.errors import ConfigError, ModelUnavailableError
from noterag.cli import app
from noterag.eval import run_eval
from noterag.eval.runs import RunDirError
from noterag.models import local_extra_installed
from scripted import VELMORA_ROWS, KeywordRetriever, ScriptedModel, passages, velmora_script

CORPUS = passages(*VELMORA_ROWS)
ROW_FIELDS = {
    "id", "question", "golds", "task", "dataset", "answer", "metrics",
    "stop_reason", "steps", "queries", "trace", "llm_calls", "prompt_tokens",
    "completion_tokens", "passages", "passage_ids", "latency_s", "waited_s", "started_at",
    "finished_at", "error", "method", "context", "model", "retries", "fallbacks",
}  # fmt: skip
HOTPOT = Path(__file__).resolve().parents[2] / "shared" / "data" / "hotpotqa_dev500"


def write_dataset(path: Path, n: int = 6) -> Path:
    """n questions in our JSONL format, ids q1..qn; the gold of each is Aurelio Fenwick."""
    path.write_text(
        "".join(
            json.dumps({"id": f"q{i}", "dataset": "velmora", "answers": ["Aurelio Fenwick"],
                        "question": f"Question {i}: who designed the Velmora Bridge?"}) + "\n"
            for i in range(1, n + 1)
        )
    )  # fmt: skip
    return path


def read_rows(run_dir: Path) -> list[dict[str, Any]]:
    text = (run_dir / "results.jsonl").read_text()
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def retriever() -> KeywordRetriever:
    return KeywordRetriever(passages=CORPUS)


def evaluate(method: str, dataset: Path, out: Path, model: Any, **kwargs: Any) -> dict[str, Any]:
    kwargs.setdefault("index", retriever())
    return run_eval(method, dataset, out, model=model, progress=False, **kwargs)


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    return write_dataset(tmp_path / "questions.jsonl")


# --------------------------------------------------------------------------- rows


@pytest.mark.parametrize(
    ("method", "script", "memory_key"),
    [
        ("vanilla", {"answer": "Aurelio Fenwick"}, None),
        ("deepnote", velmora_script(answer="Aurelio Fenwick"), "best_note"),
        (
            "resp",
            {
                "judge": "Yes",
                "summarize": "The architect is Aurelio Fenwick.",
                "answer": "Aurelio Fenwick",
            },
            "memory",
        ),
    ],
)
def test_every_row_has_every_field(
    method: str, script: dict[str, Any], memory_key: str | None, dataset: Path, tmp_path: Path
) -> None:
    model = ScriptedModel(script=script)
    summary = evaluate(method, dataset, tmp_path / "run", model, limit=2, context={"top_k": 2})
    rows = read_rows(tmp_path / "run")
    assert sorted(r["id"] for r in rows) == ["q1", "q2"]
    calls_per_question = len(model.calls) / 2
    for r in rows:
        # every method's fields, and the ones its declaration keeps
        assert set(r) == ROW_FIELDS | set(noterag.METHODS[method].result_fields)
        assert r["error"] is None and r["answer"] == "Aurelio Fenwick"
        assert r["golds"] == ["Aurelio Fenwick"] and r["task"] == "multihop"
        assert r["metrics"] == {
            "em": 100.0,
            "f1": 100.0,
            "acc": 100.0,
            "acc_norm": 100.0,
            "f1_flashrag": 100.0,
        }
        assert r["prompt_tokens"] > 0 and r["completion_tokens"] > 0
        assert r["passages"] == len(r["passage_ids"]) == len(set(r["passage_ids"])) > 0
        assert r["method"] == method and r["context"] == {"top_k": 2}
        assert r["model"] == "ScriptedModel"
        assert r["latency_s"] >= 0 and r["finished_at"] >= r["started_at"]
        assert r["trace"]
        if memory_key is not None:
            assert r[memory_key]
    # each row counts its own question's calls (they may differ: a step that finds nothing new
    # makes no note calls)
    assert sum(r["llm_calls"] for r in rows) == len(model.calls)
    assert summary["n"] == 2 and summary["metrics"]["em"] == 100.0
    assert summary["cost"]["llm_calls"] == calls_per_question
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["n"] == 2


def test_the_dataset_task_reaches_the_graph_and_the_scoring(tmp_path: Path) -> None:
    data = tmp_path / "sqa.jsonl"
    data.write_text(json.dumps({"id": "s1", "question": "Is the Ostra a river?", "answers": ["yes"],
                                "task": "strategyqa"}) + "\n")  # fmt: skip
    model = ScriptedModel(script={"answer": "Yes."})
    evaluate("vanilla", data, tmp_path / "run", model)
    (r,) = read_rows(tmp_path / "run")
    assert r["task"] == "strategyqa" and r["metrics"] == {"acc": 100.0, "acc_strict": 100.0}
    # the strategyqa answer prompt, not the multi-hop one
    assert "Only give me 'yes' or 'no'" in model.prompts_for("answer")[0]


# --------------------------------------------------------------------------- concurrency


class GateModel(BaseChatModel):
    """Async only. Each call waits until ``goal`` calls are in flight (or 10 s pass, so a bug
    fails instead of hanging) and records the most calls ever in flight."""

    goal: int
    _in_flight: int = PrivateAttr(default=0)
    _peak: int = PrivateAttr(default=0)
    _gate: asyncio.Event = PrivateAttr(default_factory=asyncio.Event)

    @property
    def _llm_type(self) -> str:
        return "gate"

    @property
    def peak(self) -> int:
        return self._peak

    def _generate(self, *args: Any, **kwargs: Any) -> ChatResult:
        raise AssertionError("the runner must call models asynchronously")

    async def _agenerate(self, messages: Any, stop: Any = None, run_manager: Any = None,
                         **kwargs: Any) -> ChatResult:  # fmt: skip
        self._in_flight += 1
        self._peak = max(self._peak, self._in_flight)
        if self._in_flight >= self.goal:
            self._gate.set()
        try:
            await asyncio.wait_for(self._gate.wait(), 10)
        except TimeoutError:
            pass
        self._in_flight -= 1
        usage = {"input_tokens": 3, "output_tokens": 1, "total_tokens": 4}
        return ChatResult(
            generations=[ChatGeneration(message=AIMessage("x", usage_metadata=usage))]
        )


@pytest.mark.parametrize("concurrency", [1, 3])
def test_concurrency_is_bounded_and_used(concurrency: int, tmp_path: Path) -> None:
    model = GateModel(goal=concurrency)
    data = write_dataset(tmp_path / "q.jsonl", n=8)
    summary = evaluate("vanilla", data, tmp_path / "run", model, concurrency=concurrency)
    assert summary["n"] == 8 and summary["n_errors"] == 0
    assert model.peak == concurrency


def test_concurrency_must_be_positive(dataset: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="concurrency"):
        evaluate("vanilla", dataset, tmp_path / "run", ScriptedModel(), concurrency=0)


# --------------------------------------------------------------------------- resume


def test_resume_after_a_partial_run_does_not_redo_questions(dataset: Path, tmp_path: Path) -> None:
    model = ScriptedModel(script={"answer": "Aurelio Fenwick"})
    evaluate("vanilla", dataset, tmp_path / "run", model, limit=3)
    assert len(read_rows(tmp_path / "run")) == 3
    summary = evaluate("vanilla", dataset, tmp_path / "run", model, limit=6)
    rows = read_rows(tmp_path / "run")
    assert len(rows) == 6 and len({r["id"] for r in rows}) == 6
    assert len(model.calls) == 6  # 3 + 3: the first three were not asked again
    assert summary["n"] == summary["questions"] == 6
    assert json.loads((tmp_path / "run" / "run.json").read_text())["limit"] == 6
    # a third run finds nothing to do; a smaller limit keeps the rows the run has, and its
    # summary counts the questions it was asked for
    evaluate("vanilla", dataset, tmp_path / "run", model, limit=6)
    assert len(model.calls) == 6 and len(read_rows(tmp_path / "run")) == 6
    summary = evaluate("vanilla", dataset, tmp_path / "run", model, limit=2)
    assert len(model.calls) == 6 and summary["n"] == summary["questions"] == 2
    assert len(read_rows(tmp_path / "run")) == 6


def test_a_half_written_last_line_is_ignored_and_repaired(dataset: Path, tmp_path: Path) -> None:
    model = ScriptedModel(script={"answer": "Aurelio Fenwick"})
    run = tmp_path / "run"
    evaluate("vanilla", dataset, run, model, limit=2)
    with open(run / "results.jsonl", "ab") as f:  # a crash in the middle of writing q3's row
        f.write(b'{"id": "q3", "question": "Question 3: who des')
    evaluate("vanilla", dataset, run, model)
    rows = read_rows(run)  # valid JSONL: every line parses
    assert sorted(r["id"] for r in rows) == [f"q{i}" for i in range(1, 7)]
    assert len(model.calls) == 6


def test_sigkill_mid_run_then_rerun_gives_every_question_once(tmp_path: Path) -> None:
    from noterag.retrievers import build_bm25_index

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(p) + "\n" for p in CORPUS))
    build_bm25_index(corpus, tmp_path / "index")
    data = write_dataset(tmp_path / "q.jsonl", n=8)
    run = tmp_path / "run"
    server = FakeOpenAI(answer_first=3)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    args = [sys.executable, "-m", "noterag", "eval", "--method", "vanilla", "--dataset", str(data),
            "--index", str(tmp_path / "index"), "--model", "openai:fake", "--out", str(run),
            "--concurrency", "2"]  # fmt: skip
    env = os.environ | {"OPENAI_BASE_URL": server.url, "OPENAI_API_KEY": "test",
                        "NOTERAG_BASE_URL": ""}  # fmt: skip
    try:
        proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            # The server answers 3 requests, then holds the rest: the run cannot finish.
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and proc.poll() is None:
                results = run / "results.jsonl"
                if results.exists() and results.read_bytes().count(b"\n") >= 2:
                    break
                time.sleep(0.05)
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
        finally:
            proc.kill()
            if proc.stderr:
                proc.stderr.close()
        before = read_rows(run)
        assert 2 <= len(before) <= 3
        server.release.set()
        server.requests = 0
        done = subprocess.run(
            args, env=env, capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, done.stderr
    finally:
        server.release.set()
        server.shutdown()
    rows = read_rows(run)
    assert sorted(r["id"] for r in rows) == [f"q{i}" for i in range(1, 9)]
    assert all(r["error"] is None and r["answer"] == "Aurelio Fenwick" for r in rows)
    assert rows[: len(before)] == before  # the finished rows were kept as they were
    assert server.requests == 8 - len(before)  # and their questions not asked again
    assert json.loads((run / "summary.json").read_text())["n"] == 8


class FakeOpenAI(ThreadingHTTPServer):
    """An OpenAI-compatible endpoint on 127.0.0.1: lists one model and answers chat completions
    with "Aurelio Fenwick" and a usage block; after ``answer_first`` completions it holds every
    request until ``release`` is set."""

    daemon_threads = True

    def __init__(self, answer_first: int) -> None:
        self.release = threading.Event()
        self.requests = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._send({"object": "list", "data": [{"id": "fake", "object": "model"}]})

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                server.requests += 1
                if server.requests > answer_first:
                    server.release.wait(120)
                self._send({
                    "id": "c", "object": "chat.completion", "created": 0, "model": "fake",
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": "Aurelio Fenwick"}}],
                    "usage": {"prompt_tokens": 40, "completion_tokens": 2, "total_tokens": 42},
                })  # fmt: skip

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # the killed runner's connections break mid-reply


# --------------------------------------------------------------------------- failures


def explode_on(marker: str, reply: str = "Aurelio Fenwick") -> Any:
    def answer(prompt: str) -> str:
        if marker in prompt:
            raise RuntimeError("the model\nexploded")
        return reply

    return answer


def test_a_failing_question_is_recorded_and_the_run_goes_on(dataset: Path, tmp_path: Path) -> None:
    model = ScriptedModel(script={"answer": explode_on("Question 3:")})
    summary = evaluate("vanilla", dataset, tmp_path / "run", model)
    rows = {r["id"]: r for r in read_rows(tmp_path / "run")}
    assert len(rows) == 6
    failed = rows["q3"]
    assert failed["error"] == "RuntimeError: the model exploded"  # one line
    assert failed["answer"] is None and failed["llm_calls"] is None and failed["trace"] is None
    assert failed["metrics"] == {
        "em": 0.0,
        "f1": 0.0,
        "acc": 0.0,
        "acc_norm": 0.0,
        "f1_flashrag": 0.0,
    }
    assert all(rows[q]["error"] is None for q in rows if q != "q3")
    assert summary["n_errors"] == 1 and summary["error_ids"] == ["q3"]
    assert summary["metrics"]["em"] == pytest.approx(500 / 6)
    assert summary["cost"]["llm_calls"] == 1.0  # over the five answered questions


def test_retry_errors_runs_the_failed_questions_again(dataset: Path, tmp_path: Path) -> None:
    evaluate(
        "vanilla",
        dataset,
        tmp_path / "run",
        ScriptedModel(script={"answer": explode_on("Question 3:")}),
    )
    fixed = ScriptedModel(script={"answer": "Aurelio Fenwick"})
    evaluate("vanilla", dataset, tmp_path / "run", fixed)  # a plain resume keeps the failure
    assert fixed.calls == []
    summary = evaluate("vanilla", dataset, tmp_path / "run", fixed, retry_errors=True)
    assert len(fixed.calls) == 1 and summary["n_errors"] == 0
    rows = read_rows(tmp_path / "run")
    assert sorted(r["id"] for r in rows) == [f"q{i}" for i in range(1, 7)]


class RefusedModel(ScriptedModel):
    """Answers until it reaches ``marker``, then fails as a client whose endpoint went away."""

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any):
        if "Question 3:" in str(messages[-1].content):
            request = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
            raise openai.APIConnectionError(request=request)
        return super()._generate(messages, stop, run_manager, **kw)


def test_an_error_that_fails_every_question_stops_the_run(dataset: Path, tmp_path: Path) -> None:
    model = RefusedModel(script={"answer": "Aurelio Fenwick"})
    with pytest.raises(ModelUnavailableError) as raised:
        evaluate("vanilla", dataset, tmp_path / "run", model, concurrency=1)
    message = str(raised.value)
    assert "cannot reach the model endpoint http://127.0.0.1:9/v1" in message
    assert "stopped after 2 of 6 questions" in message and "\n" not in message
    assert [r["id"] for r in read_rows(tmp_path / "run")] == ["q1", "q2"]
    assert not (tmp_path / "run" / "summary.json").exists()


def test_an_unreachable_endpoint_stops_before_anything_is_written(
    dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NOTERAG_BASE_URL", raising=False)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"  # closed once the block ends
    with pytest.raises(ModelUnavailableError, match=f"cannot reach the model endpoint {url}"):
        evaluate("vanilla", dataset, tmp_path / "run", f"openai:m@{url}")
    assert not (tmp_path / "run").exists()


# --------------------------------------------------------------------------- configuration


def test_another_configuration_into_the_same_run_dir_is_refused(
    dataset: Path, tmp_path: Path
) -> None:
    model = ScriptedModel(script={"answer": "x"})
    evaluate("vanilla", dataset, tmp_path / "run", model, limit=2, context={"top_k": 2})
    with pytest.raises(RunDirError, match=r'context \{"top_k": 2\} → \{"top_k": 3\}'):
        evaluate("vanilla", dataset, tmp_path / "run", model, context={"top_k": 3})
    with pytest.raises(RunDirError, match='method "vanilla" → "no-retrieval".*--force'):
        evaluate("no-retrieval", dataset, tmp_path / "run", model, context={"top_k": 2})
    assert len(model.calls) == 2  # refused before any question ran
    summary = evaluate(
        "vanilla", dataset, tmp_path / "run", model, context={"top_k": 3}, force=True
    )
    assert summary["n"] == 6 and summary["context"] == {"top_k": 3}
    assert {r["context"]["top_k"] for r in read_rows(tmp_path / "run")} == {3}


def test_results_without_a_run_file_are_not_touched(dataset: Path, tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "results.jsonl").write_text("mine\n")
    with pytest.raises(RunDirError, match="no run.json"):
        evaluate("vanilla", dataset, tmp_path / "run", ScriptedModel())
    assert (tmp_path / "run" / "results.jsonl").read_text() == "mine\n"


def test_fair_top_k_is_the_rounded_mean_of_the_runs_passages(dataset: Path, tmp_path: Path) -> None:
    source = tmp_path / "deepnote"
    source.mkdir()
    (source / "run.json").write_text(json.dumps({"method": "deepnote", "context": {}}))
    answered = [
        {"id": f"q{i}", "metrics": {"em": 0.0}, "passages": n, "llm_calls": 4,
         "prompt_tokens": 1, "completion_tokens": 1, "latency_s": 1.0, "started_at": 0,
         "finished_at": 1, "error": None}
        for i, n in enumerate([2, 3, 4], 1)  # mean 3
    ]  # fmt: skip
    # a failed question has no passages and does not pull the mean down
    failed = {"id": "q4", "metrics": {"em": 0.0}, "passages": None, "latency_s": 1.0,
              "started_at": 0, "finished_at": 1, "error": "boom"}  # fmt: skip
    (source / "results.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in [*answered, failed])
    )
    model = ScriptedModel(script={"answer": "x"})
    summary = evaluate("vanilla", dataset, tmp_path / "fair", model, fair_topk_from=source)
    assert summary["context"] == {"top_k": 3}
    assert summary["fair_topk_from"] == str(source.resolve())
    assert summary["cost"]["passages"] == 3.0  # the corpus has more, vanilla read top_k
    with pytest.raises(ConfigError, match="vanilla"):
        evaluate("deepnote", dataset, tmp_path / "x", model, fair_topk_from=source)
    with pytest.raises(ConfigError, match="top_k"):
        evaluate("vanilla", dataset, tmp_path / "y", model, fair_topk_from=source,
                 context={"top_k": 2})  # fmt: skip


# --------------------------------------------------------------------------- command line


def cli(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def one_error_line(result: Any) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 1, (result.exit_code, result.output, result.exception)
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output and result.stdout == ""
    return lines[0]


@pytest.fixture
def scripted_cli(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Every model spec the CLI loads becomes one scripted model."""
    state: dict[str, Any] = {"model": ScriptedModel(script=velmora_script(answer="Aurelio Fenwick")),
                             "specs": []}  # fmt: skip

    def load(spec: Any = None, settings: Any = None, **kwargs: Any) -> Any:
        if isinstance(spec, BaseChatModel):
            return spec
        state["specs"].append(spec)
        return state["model"]

    monkeypatch.setattr(noterag.models, "load_chat_model", load)
    return state


@pytest.fixture
def index_dir(tmp_path: Path) -> Path:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(p) + "\n" for p in CORPUS))
    result = cli("index", str(corpus), "--out", str(tmp_path / "index"))
    assert result.exit_code == 0, result.output
    return tmp_path / "index"


def test_eval_command_runs_and_prints_the_summary(
    index_dir: Path, dataset: Path, tmp_path: Path, scripted_cli: dict[str, Any]
) -> None:
    run = tmp_path / "run"
    result = cli("eval", "--method", "deepnote", "--dataset", str(dataset), "--index",
                 str(index_dir), "--model", "openai:m", "-c", "max_steps=1", "--limit", "4",
                 "--out", str(run), "-j", "2")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert scripted_cli["specs"] == ["openai:m"]
    rows = read_rows(run)
    assert len(rows) == 4 and {r["model"] for r in rows} == {"openai:m"}
    assert {r["context"]["max_steps"] for r in rows} == {1}
    config = json.loads((run / "run.json").read_text())
    assert config["index"] == f"bm25:{index_dir.resolve()}" and config["limit"] == 4
    assert "EM" in result.stdout and "100.0" in result.stdout and "4/4 questions" in result.stdout
    assert "LLM calls / question" in result.stdout
    # a line per tenth of the run when stderr is not a terminal
    assert "4/4 · EM 100.0" in result.stderr


def test_eval_command_refuses_a_setting_the_method_lacks(
    index_dir: Path, dataset: Path, tmp_path: Path, scripted_cli: dict[str, Any]
) -> None:
    line = one_error_line(cli("eval", "-m", "amber", "-d", str(dataset), "-i", str(index_dir),
                              "-c", "max_failures=2", "--out", str(tmp_path / "run")))  # fmt: skip
    assert "max_failures" in line
    assert scripted_cli["specs"] == [] and not (tmp_path / "run").exists()


def test_eval_command_errors_are_one_line(
    index_dir: Path, dataset: Path, tmp_path: Path, scripted_cli: dict[str, Any]
) -> None:
    run = str(tmp_path / "run")
    base = ["eval", "-m", "vanilla", "-d", str(dataset), "-i", str(index_dir), "--out", run]
    assert "nope.jsonl" in one_error_line(cli(*base[:4], str(tmp_path / "nope.jsonl"), *base[5:]))
    assert cli(*base, "--limit", "2").exit_code == 0
    line = one_error_line(cli(*base, "-c", "top_k=9"))
    assert "another configuration" in line and "top_k" in line
    line = one_error_line(cli(*base[:-2], "--out", str(tmp_path / "fair"), "--fair-topk-from",
                              str(tmp_path / "missing")))  # fmt: skip
    assert "missing" in line
    line = one_error_line(cli("eval", "-m", "deepnote", "-d", str(dataset), "-i", str(index_dir),
                              "--out", str(tmp_path / "f"), "--fair-topk-from", run))  # fmt: skip
    assert "vanilla" in line


def test_compare_command_prints_the_table_and_writes_the_plot(
    index_dir: Path,
    dataset: Path,
    tmp_path: Path,
    scripted_cli: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("NOTERAG_MODEL", raising=False)  # no --model: "local" names the model
    runs = []
    for method in ("vanilla", "deepnote"):
        runs.append(str(tmp_path / method))
        assert cli("eval", "-m", method, "-d", str(dataset), "-i", str(index_dir), "--out",
                   runs[-1]).exit_code == 0  # fmt: skip
    png = tmp_path / "out" / "q.png"
    result = cli("compare", *runs, "--plot", str(png), "--x", "tokens")
    assert result.exit_code == 0, result.output
    table, tests = result.stdout.strip().split("\n\n", 1)  # the tests against the baseline follow
    table = table.splitlines()
    assert len(table) == 4 and table[0].startswith("| method | n | EM | F1 | Acc |")
    assert "Against the baseline vanilla · local" in tests
    assert "| deepnote · local | EM | 6 |" in tests
    assert table[2].startswith("| vanilla · local | 6 | 100.0")
    assert table[3].startswith("| deepnote · local | 6 | 100.0")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert str(png) in result.stderr
    assert "not an evaluation run" in one_error_line(cli("compare", str(tmp_path / "nope")))


def test_compare_writes_compare_png_in_the_first_run_directory_by_default(
    dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    evaluate("vanilla", dataset, tmp_path / "run", ScriptedModel(script={"answer": "x"}))
    monkeypatch.chdir(tmp_path)
    assert cli("compare", "run", "--no-plot").exit_code == 0
    assert not (tmp_path / "run" / "compare.png").exists()
    assert cli("compare", "run").exit_code == 0
    assert (tmp_path / "run" / "compare.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (tmp_path / "compare.png").exists()  # never the current directory


def test_corpus_from_pools_a_datasets_paragraphs(tmp_path: Path) -> None:
    data = tmp_path / "hotpot.json"
    records = [
        {"_id": "h1", "question": "Q1?", "answer": "A", "supporting_facts": [["Velmora Bridge", 0]],
         "context": [["Velmora Bridge", ["Designed by ", "Fenwick."]], ["Ostra", ["A river."]]]},
        {"_id": "h2", "question": "Q2?", "answer": "B", "supporting_facts": [["Ostra", 0]],
         "context": [["Ostra", ["A river."]], ["Pellin", ["Opened 1899."]]]},
    ]  # fmt: skip
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "corpus.jsonl"
    result = cli("corpus-from", str(data), "--out", str(out))
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [p["title"] for p in lines] == ["Velmora Bridge", "Ostra", "Pellin"]
    assert "wrote 3 passages" in result.stderr and "1 duplicate paragraph dropped" in result.stderr
    assert "already exists" in one_error_line(cli("corpus-from", str(data), "--out", str(out)))
    assert cli("corpus-from", str(data), "--out", str(out), "--force").exit_code == 0
    assert "no paragraphs" in one_error_line(
        cli("corpus-from", str(write_dataset(tmp_path / "q.jsonl")), "--out", str(tmp_path / "c2"))
    )


# --------------------------------------------------------------------------- end to end


@pytest.fixture(scope="session")
def hotpot_index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not (HOTPOT / "questions.jsonl").is_file():
        pytest.skip(f"{HOTPOT} is absent")
    from noterag.retrievers import build_bm25_index

    out = tmp_path_factory.mktemp("hotpot") / "index"
    build_bm25_index(HOTPOT / "corpus.jsonl", out)
    return out


@pytest.mark.e2e
@pytest.mark.skipif(not local_extra_installed(), reason="the local extra is not installed")
def test_eval_with_the_local_model_on_hotpotqa(hotpot_index: Path, tmp_path: Path) -> None:
    data = tmp_path / "hotpot3.jsonl"
    with open(HOTPOT / "questions.jsonl") as f:
        data.write_text("".join(next(f) for _ in range(3)))
    run = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "noterag", "eval", "--method", "vanilla", "--dataset", str(data),
         "--index", str(hotpot_index), "--model", "local", "-c", "max_tokens=32", "--out",
         str(run)],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["n"] == 3 and summary["n_errors"] == 0
    assert summary["cost"]["llm_calls"] == 1.0 and summary["cost"]["passages"] == 5.0
    assert summary["cost"]["prompt_tokens"] > 0 and summary["cost"]["completion_tokens"] > 0
    assert all(r["answer"] is not None for r in read_rows(run))
    assert "3/3 questions" in done.stdout
