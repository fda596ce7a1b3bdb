"""Issue 26, the eval / CLI / storage side: what a red-team pass found, one test (or more) per
class of failure.

1. one writer per run directory (two real processes; --force; a SIGKILLed holder);
4. --timeout is a total deadline per attempt, against an endpoint that drips its reply;
5. size limits on every reader (dataset lines and arrays, gzip bombs, /dev/zero, corpus-from,
   result rows, run.json) and JSON nested too deeply;
6. the model cache checked before the first call; its faults one line naming the file;
7. the endpoint is part of a run's identity (resume and merge);
8. credentials in a model URL never written or printed;
9./10. ids and labels with rich markup or escape sequences through eval, merge and compare;
13. --limit past any size, --shard with more shards than questions, --workers bounded, a last
    row without its newline kept; golds the official acc finds in any reply flagged.

Endpoints are small servers on 127.0.0.1; nothing asserts on time.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from typer.testing import CliRunner

import noterag.models
from noterag.base.errors import ConfigError, NoteragError
from noterag.base.redact import redact
from noterag.cli import app
from noterag.datasets import DatasetError, load_dataset
from noterag.datasets import records as records_module
from noterag.eval import run_eval
from noterag.eval import runs as runs_module
from noterag.eval.cache import CacheError, SQLiteLLMCache, reply_key
from noterag.eval.lock import LOCK_FILE, RunLockedError, run_lock
from noterag.eval.report import compute_summary
from noterag.eval.runs import RunDirError, read_run
from noterag.models import ModelSettings, load_chat_model
from scripted import VELMORA_ROWS, KeywordRetriever, ScriptedModel, passages, velmora_script

TESTS = Path(__file__).resolve().parent
CORPUS = passages(*VELMORA_ROWS)
GOLD = "Aurelio Fenwick"
SECRET = "s3cr3t-pa55"
KEY = "sk-live-123456"


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("NOTERAG_TIMEOUT", "NOTERAG_MAX_RETRIES", "NOTERAG_BASE_URL", "OPENAI_BASE_URL",
                 "NOTERAG_MODEL"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)


# --------------------------------------------------------------------------- helpers


def cli(*args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200", **(env or {})})


def one_error_line(result: Any, code: int = 1) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == code, (result.exit_code, result.output, result.exception)
    assert lines and lines[-1].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    return lines[-1]


def jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def questions(n: int, ids: list[str] | None = None) -> list[dict[str, Any]]:
    ids = ids or [f"q{i}" for i in range(1, n + 1)]
    return [
        {"id": qid, "question": f"Question {i}: who designed the Velmora Bridge?",
         "answers": [GOLD]}
        for i, qid in enumerate(ids, start=1)
    ]  # fmt: skip


def rows_of(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]


def evaluate(dataset: Path, out: Path, model: Any, **kwargs: Any) -> Any:
    kwargs.setdefault("index", KeywordRetriever(passages=CORPUS))
    return run_eval("vanilla", dataset, out, model=model, progress=False, **kwargs)


@pytest.fixture
def index_dir(tmp_path: Path) -> Path:
    from noterag.retrievers import build_bm25_index

    build_bm25_index(jsonl(tmp_path / "corpus.jsonl", CORPUS), tmp_path / "index", progress=False)
    return tmp_path / "index"


@pytest.fixture
def scripted_cli(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Every model spec the CLI loads becomes one scripted model (the specs are recorded)."""
    state: dict[str, Any] = {"model": ScriptedModel(script=velmora_script(answer=GOLD)),
                             "specs": []}  # fmt: skip

    def load(spec: Any = None, settings: Any = None, **kwargs: Any) -> Any:
        if isinstance(spec, BaseChatModel):
            return spec
        state["specs"].append(spec)
        return state["model"]

    monkeypatch.setattr(noterag.models, "load_chat_model", load)
    monkeypatch.setattr(noterag.models, "check_model_reachable", lambda model: None)
    return state


def eval_cli(data: Path, index: Path, out: Path, *extra: str, env: Any = None) -> Any:
    return cli("eval", "-m", "vanilla", "-d", str(data), "-i", str(index), "--out", str(out),
               *extra, env=env)  # fmt: skip


# --------------------------------------------------------------------------- endpoints


GOOD_USAGE = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}


def completion(text: str = GOLD, usage: Any = GOOD_USAGE) -> bytes:
    return json.dumps(
        {
            "id": "c1", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "stop"}],
            "usage": usage,
        }
    ).encode()  # fmt: skip


class _Endpoint(BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint: ``mode`` "ok" answers at once; "drip" sends the headers,
    then the body a byte every 0.25 s; "drip-headers" the status line and headers themselves
    a byte every 0.25 s. Every completion request is counted."""

    mode = "ok"
    requests: list[str]
    usage: Any = GOOD_USAGE

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:  # the reachability check: answered at once
        body = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()
        self._plain(200, body)

    def _plain(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.requests.append(self.path)
        body = completion(usage=self.usage)
        if self.mode == "ok":
            self._plain(200, body)
            return
        head = (
            f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        if self.mode == "drip":
            self.wfile.write(head)
            self.wfile.flush()
            self._drip(body)
        else:
            self._drip(head + body)

    def _drip(self, data: bytes) -> None:
        try:
            for i in range(len(data)):
                self.wfile.write(data[i : i + 1])
                self.wfile.flush()
                time.sleep(0.25)
        except OSError:  # the client gave up: what the deadline is for
            pass


@pytest.fixture
def endpoint() -> Iterator[Any]:
    """``endpoint(mode)`` → (base URL, the completion requests it received)."""
    servers: list[ThreadingHTTPServer] = []

    def start(mode: str = "ok", usage: Any = GOOD_USAGE) -> tuple[str, list[str]]:
        requests: list[str] = []
        attributes = {"mode": mode, "requests": requests, "usage": usage}
        handler = type("Handler", (_Endpoint,), attributes)
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/v1", requests

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


# =========================================================================== 1. one writer

HOLDER = textwrap.dedent(
    """
    import sys, threading
    from pathlib import Path
    from scripted import VELMORA_ROWS, KeywordRetriever, ScriptedModel, passages
    from noterag.eval import run_eval

    release = Path(sys.argv[3])

    def answer(prompt):
        # every question waits until the test says so: the run is live meanwhile
        while not release.exists():
            threading.Event().wait(0.05)
        return "Aurelio Fenwick"

    run_eval("vanilla", sys.argv[1], sys.argv[2], model=ScriptedModel(script={"answer": answer}),
             model_label="scripted", index=KeywordRetriever(passages=passages(*VELMORA_ROWS)),
             concurrency=2, progress=False)
    """
)


def _start_holder(tmp_path: Path, data: Path, out: Path) -> tuple[subprocess.Popen, Path]:
    script = tmp_path / "holder.py"
    script.write_text(HOLDER)
    release = tmp_path / f"release-{out.name}"
    env = os.environ | {
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])
    }
    proc = subprocess.Popen(
        [sys.executable, str(script), str(data), str(out), str(release)],
        env=env, stderr=subprocess.PIPE,
    )  # fmt: skip
    # Running once its holder is written into the lock file and its run.json exists.
    deadline = time.monotonic() + 120
    while not ((out / "run.json").exists() and f'"pid": {proc.pid}' in _read(out / LOCK_FILE)):
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        assert time.monotonic() < deadline, "the holder never started"
        time.sleep(0.02)
    return proc, release


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _cli_process(*args: str) -> subprocess.CompletedProcess:
    env = os.environ | {"NOTERAG_SKIP_MODEL_CHECK": "1"}
    return subprocess.run(
        [sys.executable, "-m", "noterag", *args], env=env, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip


def test_a_second_writer_is_refused_at_once_naming_the_holder_and_force_does_not_race(
    tmp_path: Path, index_dir: Path
) -> None:
    data = jsonl(tmp_path / "q.jsonl", questions(6))
    shards = [tmp_path / f"s{i}" for i in (1, 2)]
    for i, shard in enumerate(shards, start=1):
        evaluate(data, shard, ScriptedModel(script={"answer": GOLD}), shard=f"{i}/2")
    out = tmp_path / "twin"
    holder, release = _start_holder(tmp_path, data, out)
    try:
        for extra in ([], ["--force"]):
            second = _cli_process("eval", "-m", "vanilla", "-d", str(data), "-i", str(index_dir),
                                  "-o", str(out), "--model", "openai:m@http://127.0.0.1:9/v1",
                                  *extra)  # fmt: skip
            assert second.returncode == 1, second.stderr
            line = second.stderr.strip().splitlines()[-1]
            assert line.startswith(f"error: {out} is being written by pid {holder.pid} on "), line
            assert "holder.py" in line and "since" in line
        # a merge into the live run directory: refused the same way, forced or not
        for extra in ([], ["--force"]):
            merged = _cli_process("merge", *map(str, shards), "-o", str(out), *extra)
            assert merged.returncode == 1, merged.stderr
            line = merged.stderr.strip().splitlines()[-1]
            assert line.startswith(f"error: {out} is being written by pid {holder.pid} on "), line
        release.touch()
        assert holder.wait(120) == 0, holder.stderr.read().decode() if holder.stderr else ""
    finally:
        holder.kill()
        holder.wait(60)
    # the first run's answers are whole: one row per question, no duplicate, resumable
    rows = rows_of(out)
    assert sorted(row["id"] for row in rows) == [f"q{i}" for i in range(1, 7)]
    assert compute_summary(out)["n"] == 6


def test_a_killed_holder_frees_the_lock(tmp_path: Path) -> None:
    data = jsonl(tmp_path / "q.jsonl", questions(4))
    out = tmp_path / "run"
    holder, _ = _start_holder(tmp_path, data, out)
    holder.send_signal(signal.SIGKILL)
    holder.wait(60)
    # the same run resumes in this process: no stale lock to remove by hand
    summary = evaluate(data, out, ScriptedModel(script={"answer": GOLD}), model_label="scripted",
                       concurrency=2)  # fmt: skip
    assert summary["n"] == 4 and summary["n_errors"] == 0


def test_the_lock_in_process_and_a_failed_start_leaves_no_directory(tmp_path: Path) -> None:
    out = tmp_path / "new"
    with run_lock(out, "eval"):  # a second holder, in this very process too
        refused = pytest.raises(RunLockedError, match=f"pid {os.getpid()}")
        with refused, run_lock(out, "eval"):
            pass
    # a run whose configuration is refused creates nothing
    data = jsonl(tmp_path / "q.jsonl", questions(2))
    with pytest.raises(ConfigError):
        evaluate(data, tmp_path / "typo", ScriptedModel(script={"answer": GOLD}),
                 context={"no_such_setting": 1})  # fmt: skip
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(NoteragError):
        evaluate(missing, tmp_path / "typo", ScriptedModel(script={"answer": GOLD}))
    with pytest.raises(NoteragError):  # refused after the lock was taken: removed again
        evaluate(data, tmp_path / "typo", ScriptedModel(script={"answer": GOLD}), spare=3)
    assert not (tmp_path / "typo").exists()


# =========================================================================== 4. deadline


@pytest.mark.parametrize("mode", ["drip", "drip-headers"])
def test_an_endpoint_that_drips_its_reply_is_cut_at_the_timeout(endpoint: Any, mode: str) -> None:
    url, requests = endpoint(mode)
    model = load_chat_model(f"openai:m@{url}", ModelSettings(timeout=1, max_retries=1))
    import openai

    with pytest.raises(openai.APITimeoutError):
        asyncio.run(model.ainvoke("hello"))
    assert len(requests) == 2  # the attempt and its one retry, each cut at its deadline
    if mode == "drip":  # the sync client bounds the body (its headers: the read timeout)
        requests.clear()
        with pytest.raises(openai.APITimeoutError):
            model.invoke("hello")
        assert len(requests) == 2


def test_eval_timeout_bounds_each_attempt_against_a_dripping_endpoint(
    tmp_path: Path, endpoint: Any, index_dir: Path
) -> None:
    url, requests = endpoint("drip")
    data = jsonl(tmp_path / "q.jsonl", questions(3))
    result = eval_cli(data, index_dir, tmp_path / "run", "--limit", "1", "--timeout", "1",
                      "--max-retries", "0", "--model", f"openai:m@{url}")  # fmt: skip
    assert result.exit_code == 1, result.output
    (row,) = rows_of(tmp_path / "run")
    assert row["error"] == f"the model endpoint {url} did not answer in time", row["error"]
    assert len(requests) == 1
    # the same endpoint answering at once: the deadline does not cut a normal reply
    url, _ = endpoint("ok")
    result = eval_cli(data, index_dir, tmp_path / "ok", "--limit", "1", "--timeout", "1",
                      "--model", f"openai:m@{url}")  # fmt: skip
    assert result.exit_code == 0, result.output


# =========================================================================== 5. size limits


def _gzip_line(path: Path, size: int) -> Path:
    """A gzip file holding one JSON line of ``size`` bytes, written in pieces (small in memory;
    a few hundred KB on disk)."""
    piece = b"a" * (1 << 20)
    with gzip.open(path, "wb", compresslevel=1) as out:
        out.write(b'{"id": "q1", "question": "')
        for _ in range(size >> 20):
            out.write(piece)
        out.write(b'", "answers": ["x"]}\n')
    return path


def test_a_gzip_bomb_line_is_refused_at_the_limit(tmp_path: Path) -> None:
    bomb = _gzip_line(tmp_path / "bomb.jsonl.gz", records_module.MAX_LINE_BYTES + (1 << 20))
    assert bomb.stat().st_size < 2 << 20
    with pytest.raises(DatasetError, match=r"bomb\.jsonl\.gz line 1: longer than the 64 MiB"):
        load_dataset(bomb)
    result = cli("corpus-from", str(bomb), "-o", str(tmp_path / "corpus.jsonl"))
    assert "line 1: longer than the 64 MiB limit" in one_error_line(result)
    assert not (tmp_path / "corpus.jsonl").exists()


def test_dev_zero_as_a_dataset_is_one_line(tmp_path: Path, index_dir: Path) -> None:
    result = eval_cli(Path("/dev/zero"), index_dir, tmp_path / "run", "--model", "openai:m")
    assert "zero line 1: longer than the 64 MiB limit" in one_error_line(result)
    assert not (tmp_path / "run").exists()


def test_a_json_array_file_over_its_limit_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(records_module, "MAX_ARRAY_BYTES", 1 << 20)
    items = [{"question": f"Question {i}? " + "x" * 1000, "answer": ["a"]} for i in range(2000)]
    path = tmp_path / "big.json"
    path.write_text(json.dumps(items))
    with pytest.raises(DatasetError, match=r"big\.json: a JSON array file over the 1 MiB limit"):
        load_dataset(path)
    path.write_text(json.dumps(items[:50]))
    assert len(load_dataset(path)) == 50  # under it: read


def test_json_nested_too_deeply_is_one_line_in_every_reader(tmp_path: Path) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    line = tmp_path / "deep.jsonl"
    line.write_text('{"id": "q1", "question": "q?", "answers": ["a"], "x": ' + deep + "}\n")
    with pytest.raises(DatasetError, match=r"deep\.jsonl line 1: JSON nested too deeply"):
        load_dataset(line)
    array = tmp_path / "deep.json"
    array.write_text("[" + deep + "]")
    with pytest.raises(DatasetError, match=r"deep\.json: JSON nested too deeply"):
        load_dataset(array)
    # a run's files read back
    data = jsonl(tmp_path / "q.jsonl", questions(2))
    run = tmp_path / "run"
    evaluate(data, run, ScriptedModel(script={"answer": GOLD}))
    with (run / "results.jsonl").open("a") as results:
        results.write('{"id": "q9", "x": ' + deep + "}\n")
    with pytest.raises(RunDirError, match="line 3 holds JSON nested too deeply"):
        read_run(run)
    (run / "results.jsonl").unlink()
    (run / "run.json").write_text(deep)
    with pytest.raises(RunDirError, match="run.json is not readable JSON: nested too deeply"):
        read_run(run)


def test_a_result_row_over_its_limit_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = jsonl(tmp_path / "q.jsonl", questions(2))
    run = tmp_path / "run"
    evaluate(data, run, ScriptedModel(script={"answer": GOLD}))
    monkeypatch.setattr(runs_module, "MAX_ROW_BYTES", 64 << 10)
    with (run / "results.jsonl").open("a") as results:
        results.write('{"id": "q9", "answer": "' + "x" * (65 << 10) + '"}\n')
    with pytest.raises(RunDirError, match=r"results\.jsonl line 3 is over the 0 MiB limit"):
        read_run(run)
    monkeypatch.setattr(runs_module, "MAX_RUN_FILE_BYTES", 16)
    with pytest.raises(RunDirError, match=r"run\.json is over the 0 MiB limit"):
        read_run(run)


# =========================================================================== 6. the cache


def _damage(path: Path) -> None:
    data = bytearray(path.read_bytes())
    for offset in range(4096, len(data), 512):  # every page after the header: noise
        data[offset : offset + 64] = os.urandom(64)
    path.write_bytes(bytes(data))


def _filled_cache(path: Path, n: int = 200) -> Path:
    connection = sqlite3.connect(path)
    connection.execute(
        "CREATE TABLE full_llm_cache (prompt TEXT NOT NULL, llm TEXT NOT NULL, idx INTEGER NOT "
        "NULL, response TEXT, PRIMARY KEY (prompt, llm, idx))"
    )
    connection.executemany(
        "INSERT INTO full_llm_cache VALUES (?, ?, 0, ?)",
        [(f"prompt {i}" * 20, "llm", "x" * 300) for i in range(n)],
    )
    connection.commit()
    connection.close()
    return path


def test_a_cache_locked_by_another_process_is_refused_before_any_call(tmp_path: Path) -> None:
    cache = tmp_path / "cache.sqlite"
    SQLiteLLMCache(cache)  # a cache file as a run leaves it
    other = sqlite3.connect(cache, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")  # another tool, in the middle of a write
    try:
        with pytest.raises(CacheError, match=f"cannot open the model cache {cache}: .*locked"):
            SQLiteLLMCache(cache)
        model = ScriptedModel(script={"answer": GOLD})
        data = jsonl(tmp_path / "q.jsonl", questions(2))
        with pytest.raises(CacheError, match=str(cache)):
            evaluate(data, tmp_path / "run", model, cache=cache)
        assert model.calls == [] if hasattr(model, "calls") else True
        assert not (tmp_path / "run").exists()
    finally:
        other.execute("ROLLBACK")
        other.close()


@pytest.mark.parametrize("fault", ["damaged", "not sqlite", "full disk"])
def test_a_faulty_cache_is_one_line_naming_the_file(
    tmp_path: Path, index_dir: Path, scripted_cli: dict[str, Any], fault: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    cache = tmp_path / "cache.sqlite"
    if fault == "damaged":
        _damage(_filled_cache(cache))
    elif fault == "not sqlite":
        cache.write_bytes(b"\x00\x01binary\xff" * 500)
    else:
        import noterag.eval.cache as cache_module

        monkeypatch.setattr(cache_module, "_MIN_FREE_BYTES", 1 << 62)
    data = jsonl(tmp_path / "q.jsonl", questions(2))
    result = eval_cli(data, index_dir, tmp_path / "run", "--model", "openai:m",
                      "--cache", str(cache))  # fmt: skip
    line = one_error_line(result)
    assert line.startswith(f"error: cannot open the model cache {cache}: "), line
    assert line.isprintable()
    assert scripted_cli["specs"] == []  # refused before the model was even built
    assert not (tmp_path / "run").exists()


def test_a_cache_fault_mid_run_stops_the_run_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import noterag.eval.cache as cache_module

    monkeypatch.setattr(cache_module, "_BUSY_S", 0.2)
    cache = tmp_path / "cache.sqlite"
    other: list[sqlite3.Connection] = []

    def answer(prompt: str) -> str:
        if not other:  # the first call locks the cache from elsewhere, for good
            other.append(sqlite3.connect(cache, isolation_level=None, check_same_thread=False))
            other[0].execute("BEGIN EXCLUSIVE")
        return GOLD

    model = ScriptedModel(script={"answer": answer})
    data = jsonl(tmp_path / "q.jsonl", questions(20))
    try:
        with pytest.raises(CacheError, match=f"cannot write the model cache {cache}: .*locked"):
            evaluate(data, tmp_path / "run", model, cache=cache, concurrency=1)
    finally:
        other[0].close()
    # stopped at the first fault, not after failing (and paying for) every question
    assert len(rows_of(tmp_path / "run")) == 0


def test_a_locked_cache_never_blocks_the_event_loop(tmp_path: Path) -> None:
    import noterag.eval.cache as cache_module

    cache = SQLiteLLMCache(tmp_path / "cache.sqlite")
    other = sqlite3.connect(cache.path, isolation_level=None)
    ticks = 0

    async def ticker(stop: asyncio.Event) -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            await asyncio.sleep(0.01)

    async def main() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(ticker(stop))
        await asyncio.sleep(0)
        other.execute("BEGIN EXCLUSIVE")
        before = ticks
        writing = asyncio.create_task(cache.aupdate("p", "llm", []))
        await asyncio.sleep(0.3)  # the write waits for the lock meanwhile
        assert not writing.done()
        assert ticks > before + 5  # and the loop went on
        other.execute("ROLLBACK")
        await writing
        stop.set()
        await task

    old = cache_module._BUSY_S
    try:
        asyncio.run(main())
    finally:
        cache_module._BUSY_S = old
        other.close()


# =========================================================================== 7. endpoint


def test_a_resume_or_merge_across_endpoints_is_refused(
    tmp_path: Path, index_dir: Path, scripted_cli: dict[str, Any]
) -> None:
    data = jsonl(tmp_path / "q.jsonl", questions(4))
    run = tmp_path / "run"
    a = {"OPENAI_BASE_URL": "http://127.0.0.1:7001/v1"}
    b = {"OPENAI_BASE_URL": "http://127.0.0.1:7002/v1"}
    assert eval_cli(data, index_dir, run, "--model", "openai:m", "--limit", "2",
                    env=a).exit_code == 0  # fmt: skip
    assert json.loads((run / "run.json").read_text())["endpoint"] == a["OPENAI_BASE_URL"]
    line = one_error_line(eval_cli(data, index_dir, run, "--model", "openai:m", env=b))
    assert 'endpoint "http://127.0.0.1:7001/v1" → "http://127.0.0.1:7002/v1"' in line
    # the inline URL counts as much as the environment's
    line = one_error_line(
        eval_cli(data, index_dir, run, "--model", "openai:m@http://127.0.0.1:7002/v1", env=a)
    )
    assert "endpoint" in line and "model" in line
    # shards over two endpoints are not one evaluation
    for i, env in ((1, a), (2, b)):
        result = eval_cli(data, index_dir, tmp_path / f"s{i}", "--model", "openai:m",
                          "--shard", f"{i}/2", env=env)  # fmt: skip
        assert result.exit_code == 0, result.output
    line = one_error_line(cli("merge", str(tmp_path / "s1"), str(tmp_path / "s2"), "-o",
                              str(tmp_path / "merged")))  # fmt: skip
    assert "not shards of one evaluation: endpoint" in line


# =========================================================================== 8. credentials


def test_redact_removes_userinfo_and_secret_query_parameters() -> None:
    assert (
        redact(f"openai:m@http://user:{SECRET}@host:8000/v1") == "openai:m@http://***@host:8000/v1"
    )
    assert redact(f"https://host/v1?api_key={KEY}&model=x") == "https://host/v1?api_key=***&model=x"
    assert redact(f"see http://h/v1?x=1&access_token={KEY}, then") == (
        "see http://h/v1?x=1&access_token=***, then"
    )
    assert redact("openai:qwen2.5:7b@http://localhost:11434/v1") == (
        "openai:qwen2.5:7b@http://localhost:11434/v1"
    )


def _files_text(directory: Path) -> str:
    return "".join(p.read_bytes().decode("utf-8", "replace") for p in directory.rglob("*")
                   if p.is_file())  # fmt: skip


def test_credentials_in_the_model_url_are_never_written_or_printed(
    tmp_path: Path, endpoint: Any, index_dir: Path
) -> None:
    url, requests = endpoint("ok")
    secret_url = url.replace("http://", f"http://user:{SECRET}@") + f"?api_key={KEY}"
    data = jsonl(tmp_path / "q.jsonl", questions(2, ids=["q1", "q2"]))
    run, cache = tmp_path / "run", tmp_path / "cache.sqlite"
    result = eval_cli(data, index_dir, run, "--model", f"openai:m@{secret_url}",
                      "--cache", str(cache))  # fmt: skip
    assert result.exit_code == 0, result.output
    assert requests  # the endpoint answered
    written = _files_text(run) + cache.read_bytes().decode("utf-8", "replace")
    for text in (written, result.output):
        assert SECRET not in text and KEY not in text
    assert json.loads((run / "run.json").read_text())["model"] == (
        f"openai:m@{url.replace('http://', 'http://***@')}?api_key=***"
    )
    # the cached replies are found again under the redacted key: no new request
    before = len(requests)
    rerun = eval_cli(data, index_dir, tmp_path / "again", "--model", f"openai:m@{secret_url}",
                     "--cache", str(cache))  # fmt: skip
    assert rerun.exit_code == 0 and len(requests) == before
    # an endpoint that refuses: its error line names it, without the credentials
    dead = f"http://user:{SECRET}@127.0.0.1:9/v1?api_key={KEY}"
    result = eval_cli(data, index_dir, tmp_path / "dead", "--model", f"openai:m@{dead}")
    line = one_error_line(result)
    assert "127.0.0.1:9" in line and SECRET not in line and KEY not in line


def test_the_cache_key_holds_no_credentials() -> None:
    model = load_chat_model(f"openai:m@http://u:{SECRET}@127.0.0.1:9/v1?key={KEY}")
    key = reply_key(model._get_llm_string())
    assert SECRET not in key and KEY not in key and "127.0.0.1:9" in key


# =========================================================================== 9./10. escaping

HOSTILE_IDS = ["oops[/]", "\x1b[31mred\x1b[0m", "[bold]b[/bold]"]


def test_hostile_ids_and_labels_print_as_text_in_eval_merge_and_compare(
    tmp_path: Path, index_dir: Path, scripted_cli: dict[str, Any]
) -> None:
    def answer(prompt: str) -> str:
        if "Question 1:" in prompt or "Question 2:" in prompt:
            raise RuntimeError("boom \x1b]0;title\x07")
        return GOLD

    scripted_cli["model"] = ScriptedModel(script={"answer": answer})
    data = jsonl(tmp_path / "q.jsonl", questions(3, ids=HOSTILE_IDS))
    model = "openai:m[/]\x1b[2J"
    result = eval_cli(data, index_dir, tmp_path / "run", "--model", model)
    assert result.exit_code == 1  # 2 of 3 failed: over the error budget, after the summary
    assert "MarkupError" not in result.output and "\x1b" not in result.output
    failed = next(line for line in result.stdout.splitlines() if "failed questions" in line)
    # the ids as text: the markup shown, the escape sequences gone, nothing styled away
    assert failed.split("│")[1].strip() in ("2: oops[/], red", "2: red, oops[/]"), failed
    assert "vanilla · openai:m[/] · 3/3 questions" in result.stdout  # text; its escape gone
    # merge of two shards holding them
    for i in (1, 2):
        result = eval_cli(data, index_dir, tmp_path / f"s{i}", "--model", model,
                          "--shard", f"{i}/2", "--max-error-rate", "1")  # fmt: skip
        assert result.exit_code in (0, 1) and "MarkupError" not in result.output
    merged = cli("merge", str(tmp_path / "s1"), str(tmp_path / "s2"), "-o", str(tmp_path / "m"))
    assert merged.exit_code == 0, merged.output
    assert "MarkupError" not in merged.output and "\x1b" not in merged.output
    failed = next(line for line in merged.stdout.splitlines() if "failed questions" in line)
    assert failed.split("│")[1].strip() in ("2: oops[/], red", "2: red, oops[/]"), failed
    compared = cli("compare", str(tmp_path / "run"), str(tmp_path / "m"), "--no-plot")
    assert compared.exit_code == 0, compared.output
    assert "\x1b" not in compared.output and "openai:m[/]" in compared.stdout


# =========================================================================== 13. lower


def test_a_huge_limit_is_no_limit_and_too_many_shards_are_refused(
    tmp_path: Path, index_dir: Path, scripted_cli: dict[str, Any]
) -> None:
    data = jsonl(tmp_path / "q.jsonl", questions(3))
    result = eval_cli(data, index_dir, tmp_path / "run", "--model", "openai:m",
                      "--limit", "99999999999999999999999")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert len(rows_of(tmp_path / "run")) == 3
    line = one_error_line(eval_cli(data, index_dir, tmp_path / "s", "--model", "openai:m",
                                   "--shard", "1/99999999999"))  # fmt: skip
    assert "99999999999 shards of 3 questions" in line
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": "10", "completion_tokens": 2, "total_tokens": 12},
        {"prompt_tokens": -5, "completion_tokens": 2, "total_tokens": -3},
        {"prompt_tokens": "x"},
        "lots",
    ],
)
def test_a_usage_that_is_no_token_count_is_ignored_and_counted(
    tmp_path: Path, endpoint: Any, index_dir: Path, usage: Any
) -> None:
    url, requests = endpoint("ok", usage)
    data = jsonl(tmp_path / "q.jsonl", questions(2))
    result = eval_cli(data, index_dir, tmp_path / "run", "--model", f"openai:m@{url}")
    assert result.exit_code == 0, result.output
    rows = rows_of(tmp_path / "run")
    assert [row["error"] for row in rows] == [None, None]
    assert [row["prompt_tokens"] for row in rows] == [0, 0]  # unknown, not -5 or "10"
    assert [row["usage_ignored"] for row in rows] == [row["llm_calls"] for row in rows]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["usage_ignored"] == len(requests) == sum(row["llm_calls"] for row in rows)
    assert "replies with invalid usage (tokens not counted)" in result.stdout


def test_workers_are_bounded(tmp_path: Path, index_dir: Path, scripted_cli: dict[str, Any]) -> None:
    from noterag.eval.workers import max_workers, resolve_workers

    assert resolve_workers(str(max_workers())) == max_workers()
    data = jsonl(tmp_path / "q.jsonl", questions(2))
    line = one_error_line(eval_cli(data, index_dir, tmp_path / "run", "--model", "openai:m",
                                   "--workers", "200000"))  # fmt: skip
    assert f"--workers 200000 is more than {max_workers()}" in line


def test_a_last_row_without_its_newline_is_kept_not_asked_again(tmp_path: Path) -> None:
    data = jsonl(tmp_path / "q.jsonl", questions(3))
    run = tmp_path / "run"
    evaluate(data, run, ScriptedModel(script={"answer": GOLD}), limit=2)
    results = run / "results.jsonl"
    results.write_bytes(results.read_bytes().rstrip(b"\n"))  # an editor dropped it
    asked: list[str] = []

    def answer(prompt: str) -> str:
        asked.append(prompt)
        return GOLD

    summary = evaluate(data, run, ScriptedModel(script={"answer": answer}))
    assert summary["n"] == 3 and len(asked) == 1  # only the new question
    assert [row["id"] for row in rows_of(run)] == ["q1", "q2", "q3"]
    assert results.read_bytes().endswith(b"\n")


def test_golds_the_official_acc_finds_in_any_reply_are_flagged(
    tmp_path: Path, index_dir: Path, scripted_cli: dict[str, Any]
) -> None:
    records = questions(4)
    records[1]["answers"] = ["the"]
    records[2]["answers"] = ["A"]
    records[3]["answers"] = ["no"]  # a yes/no answer: not flagged
    data = jsonl(tmp_path / "q.jsonl", records)
    result = eval_cli(data, index_dir, tmp_path / "run", "--model", "openai:m")
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    weak = summary["weak_golds"]
    assert weak["count"] == 2 and sorted(weak["ids"]) == ["q2", "q3"]
    line = next(line for line in result.stdout.splitlines() if "stop word" in line)
    assert line.split("│")[0].strip() == "gold is a stop word or 1 char (acc ~ always right)"
    assert line.split("│")[1].strip() in ("2: q2, q3", "2: q3, q2")


def test_swapped_segment_files_of_an_index_are_refused_at_open(
    tmp_path: Path, index_dir: Path, scripted_cli: dict[str, Any]
) -> None:
    from noterag.retrievers.bm25 import Bm25Index
    from noterag.retrievers.indexdir import IndexDamagedError

    more = [{"id": f"n{i}", "title": "Ostra", "text": f"passage {i} on the Ostra River"}
            for i in range(20)]  # fmt: skip
    Bm25Index(index_dir).upsert(more)  # a second segment, changed in place
    assert Bm25Index(index_dir).num_passages == len(CORPUS) + 20  # no false alarm after it
    first, second = sorted(index_dir.glob("*.store"))[:2]
    swap = first.with_suffix(".swap")
    first.rename(swap)
    second.rename(first)
    swap.rename(second)
    with pytest.raises(IndexDamagedError, match="is not the file this index was built with"):
        Bm25Index(index_dir)
    data = jsonl(tmp_path / "q.jsonl", questions(2))
    line = one_error_line(eval_cli(data, index_dir, tmp_path / "run", "--model", "openai:m"))
    assert f"{first} is not the file this index was built with" in line or str(second) in line


def test_a_bomb_of_small_records_is_bounded_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(records_module, "MAX_RECORDS", 100)
    with gzip.open(tmp_path / "many.jsonl.gz", "wt") as out:
        out.writelines(json.dumps(q) + "\n" for q in questions(150))
    with pytest.raises(DatasetError, match=r"many\.jsonl\.gz line 101: more than 100 records"):
        load_dataset(tmp_path / "many.jsonl.gz")
    (tmp_path / "many.json").write_text(json.dumps(questions(150)))
    with pytest.raises(DatasetError, match=r"many\.json item 101: more than 100 records"):
        load_dataset(tmp_path / "many.json")
    assert len(load_dataset(tmp_path / "many.jsonl.gz", limit=100)) == 100  # --limit stops first


def test_workers_are_no_more_than_the_questions_to_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import noterag.eval.workers as workers_module

    started: list[int] = []

    def run_workers(setup: Any, todo: Any, n_workers: int, keep: Any, stopped: Any) -> None:
        started.append(n_workers)
        for example in todo:  # answered here: only the number of processes is the point
            keep([asyncio.run(answer_one(setup.build_graph(), spec, example, setup.config))])

    from noterag.eval.rows import answer_one
    from noterag.registry.methods import METHODS

    spec = METHODS["vanilla"]
    monkeypatch.setattr(workers_module, "run_workers", run_workers)
    data = jsonl(tmp_path / "q.jsonl", questions(3))
    summary = evaluate(data, tmp_path / "run", ScriptedModel(script={"answer": GOLD}), workers=8)
    assert started == [3] and summary["n"] == 3
