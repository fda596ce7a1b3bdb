"""Evaluation at scale (issue 15): worker processes (killed at random, then resumed), shards and
their merge, and the persistent model cache (a second run makes no request).

Kill points come from a seeded generator, as in test_crash.py; nothing asserts on time.
"""

from __future__ import annotations

import importlib.util
import json
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from test_crash import (
    MODEL_CODE,
    _children,
    _complete_rows,
    _env,
    _finish,
    _kill,
    _killed_and_resumed,
    _stable,
    _wait_for,
)
from test_eval_runner import write_dataset
from typer.testing import CliRunner

from noterag.eval import run_eval
from noterag.eval.merge import MergeError, merge_runs, parse_shard, shard_of
from noterag.eval.report import compute_summary
from scripted import VELMORA_ROWS, KeywordRetriever, passages

SEED = 20261501
N_QUESTIONS = 16
# The parent's kill test asks more (as test_crash's): each kill round's share of them is then a
# few times the 4 in flight, so that kills land amid the workers' questions, not only once the
# round's held questions are all that is left (see test_crash._kill_rounds).
N_KILLED = 40
CONTEXT = {"max_steps": 2, "max_failures": 2}
WORKERS = textwrap.dedent(
    """
    import sys
    from crash_model import make_model
    from scripted import VELMORA_ROWS, KeywordRetriever, passages
    from noterag.eval import run_eval

    run_eval("deepnote", sys.argv[1], sys.argv[2], model=make_model(), model_label="scripted",
             index=KeywordRetriever(passages=passages(*VELMORA_ROWS)), concurrency=2,
             context={"max_steps": 2, "max_failures": 2}, progress=False, workers=2)
    """
)


def _crash_model(tmp_path: Path) -> Any:
    (tmp_path / "crash_model.py").write_text(MODEL_CODE)
    spec = importlib.util.spec_from_file_location("crash_model", tmp_path / "crash_model.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _retriever() -> KeywordRetriever:
    return KeywordRetriever(passages=passages(*VELMORA_ROWS))


def _reference(tmp_path: Path, data: Path, model: Any) -> dict[str, dict[str, Any]]:
    run_eval(
        "deepnote", data, tmp_path / "reference", model=model, model_label="scripted",
        index=_retriever(), concurrency=3, context=CONTEXT, progress=False,
    )  # fmt: skip
    return {
        row["id"]: _stable(row) for row in _complete_rows(tmp_path / "reference" / "results.jsonl")
    }


def test_workers_give_the_rows_of_a_single_process_run(tmp_path: Path) -> None:
    data = write_dataset(tmp_path / "q.jsonl", n=N_QUESTIONS)
    crash_model = _crash_model(tmp_path)
    expected = _reference(tmp_path, data, crash_model.make_model())
    summary = run_eval(
        "deepnote", data, tmp_path / "w", model=crash_model.make_model(), model_label="scripted",
        index=_retriever(), concurrency=2, context=CONTEXT, progress=False, workers=3,
    )  # fmt: skip
    rows = _complete_rows(tmp_path / "w" / "results.jsonl")
    assert {row["id"]: _stable(row) for row in rows} == expected
    assert len(rows) == N_QUESTIONS == summary["n"]
    assert json.loads((tmp_path / "w" / "run.json").read_text())["workers"] == 3


def test_parent_killed_at_random_points_resumes_to_the_uninterrupted_rows(tmp_path: Path) -> None:
    data = write_dataset(tmp_path / "q.jsonl", n=N_KILLED)
    expected = _reference(tmp_path, data, _crash_model(tmp_path).make_model())
    # after each kill, _kill_rounds also checks that the workers died with their parent: none
    # goes on calling the model
    run = _killed_and_resumed(tmp_path, WORKERS, data, expected, SEED)
    assert json.loads((run / "summary.json").read_text())["n"] == N_KILLED


def test_a_killed_worker_is_reported_and_its_questions_rerun_on_resume(tmp_path: Path) -> None:
    data = write_dataset(tmp_path / "q.jsonl", n=N_QUESTIONS)
    expected = _reference(tmp_path, data, _crash_model(tmp_path).make_model())
    rng = random.Random(SEED + 1)
    run = tmp_path / "run"
    results = run / "results.jsonl"
    args = [sys.executable, "-c", WORKERS, str(data), str(run)]
    proc = subprocess.Popen(
        args, env=_env(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    target = rng.randint(1, N_QUESTIONS // 3)
    assert _wait_for(lambda: len(_complete_rows(results)) >= target, proc, "rows")
    time.sleep(rng.uniform(0, 0.05))
    workers = _children(proc.pid)
    assert len(workers) == 2
    victim = rng.choice(workers)
    Path(f"/proc/{victim}").exists() and __import__("os").kill(victim, signal.SIGKILL)
    try:
        _, stderr = proc.communicate(timeout=120)
    finally:
        _kill(proc)
    assert proc.returncode == 1, stderr
    line = stderr.strip().splitlines()[-1]
    assert "died (killed by SIGKILL)" in line and "run the same command again" in line, line
    rows = _complete_rows(results)
    ids = [row["id"] for row in rows]
    assert len(ids) == len(set(ids))
    assert len(rows) < N_QUESTIONS  # the dead worker's questions are missing
    _finish(args, _env(tmp_path), results, expected)


# --------------------------------------------------------------------------- shards and merge


def test_shards_are_stable_disjoint_and_covering() -> None:
    ids = [f"q{i}" for i in range(500)]
    for n in (1, 2, 3, 7):
        parts = {i: {q for q in ids if shard_of(q, n) == i} for i in range(1, n + 1)}
        assert set().union(*parts.values()) == set(ids)
        assert sum(len(p) for p in parts.values()) == len(ids)
        if n > 1:  # a hash, not a block: every shard gets a fair part
            assert min(len(p) for p in parts.values()) > len(ids) / n / 2
    assert shard_of("q1", 4) == shard_of("q1", 4)
    assert parse_shard("2/4") == (2, 4)
    for bad in ("0/3", "4/3", "x", "1/0"):
        with pytest.raises(Exception, match="shard"):
            parse_shard(bad)


def _shards(tmp_path: Path, data: Path, model: Any, n: int, **kwargs: Any) -> list[Path]:
    dirs = []
    for i in range(1, n + 1):
        out = tmp_path / f"shard{i}"
        run_eval(
            "deepnote", data, out, model=model, model_label="scripted", index=_retriever(),
            concurrency=3, progress=False, shard=f"{i}/{n}", context=CONTEXT, **kwargs,
        )  # fmt: skip
        dirs.append(out)
    return dirs


def test_merged_shards_equal_the_whole_run(tmp_path: Path) -> None:
    data = write_dataset(tmp_path / "q.jsonl", n=N_QUESTIONS)
    model = _crash_model(tmp_path).make_model()
    expected = _reference(tmp_path, data, model)
    dirs = _shards(tmp_path, data, model, 3)
    per_shard = [{r["id"] for r in _complete_rows(d / "results.jsonl")} for d in dirs]
    assert sum(map(len, per_shard)) == N_QUESTIONS and set().union(*per_shard) == set(expected)
    summary = merge_runs(dirs, tmp_path / "merged")
    rows = _complete_rows(tmp_path / "merged" / "results.jsonl")
    assert {row["id"]: _stable(row) for row in rows} == expected
    whole = compute_summary(tmp_path / "reference")
    for key in ("n", "n_errors", "questions", "metrics", "cost"):
        assert summary[key] == whole[key], key
    result = CliRunner().invoke(
        __import__("noterag.cli", fromlist=["app"]).app,
        ["merge", *map(str, dirs), "--out", str(tmp_path / "merged")],
    )
    assert result.exit_code == 1 and "already holds a run" in result.output


def test_merge_refuses_runs_that_are_not_the_shards_of_one_evaluation(tmp_path: Path) -> None:
    data = write_dataset(tmp_path / "q.jsonl", n=N_QUESTIONS)
    model = _crash_model(tmp_path).make_model()
    one, two = _shards(tmp_path, data, model, 2)
    out = tmp_path / "merged"
    # another setting in shard 2
    other = tmp_path / "other2"
    run_eval(
        "deepnote", data, other, model=model, model_label="scripted", index=_retriever(),
        concurrency=3, progress=False, shard="2/2", context={"max_steps": 1, "max_failures": 2},
    )  # fmt: skip
    with pytest.raises(MergeError, match="context"):
        merge_runs([one, other], out)
    with pytest.raises(MergeError, match="missing"):
        merge_runs([one], out)
    with pytest.raises(MergeError, match="both shard 1/2"):
        merge_runs([one, one], out)
    # another model
    relabelled = tmp_path / "relabelled2"
    run_eval(
        "deepnote", data, relabelled, model=model, model_label="other", index=_retriever(),
        concurrency=3, progress=False, shard="2/2", context=CONTEXT,
    )  # fmt: skip
    with pytest.raises(MergeError, match="model"):
        merge_runs([one, relabelled], out)
    # an incomplete shard: its last row lost
    lines = (two / "results.jsonl").read_bytes().splitlines(keepends=True)
    (two / "results.jsonl").write_bytes(b"".join(lines[:-1]))
    with pytest.raises(MergeError, match="not complete"):
        merge_runs([one, two], out)
    assert not out.exists()  # nothing written for a refused merge
    # the CLI: one line, exit 1
    from noterag.cli import app

    result = CliRunner().invoke(app, ["merge", str(one), str(two), "--out", str(out)])
    assert result.exit_code == 1
    assert len(result.output.strip().splitlines()) == 1 and "not complete" in result.output


# --------------------------------------------------------------------------- cache


def _sim() -> Any:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import sim_endpoint

    return sim_endpoint


def test_a_stage_finds_its_cached_reply_whichever_model_call_came_first(tmp_path: Path) -> None:
    """The cause of a cached rerun with workers asking the endpoint again: the copy of the
    model that never streams (``Deps.model_for``, made at a stage's first call) kept LangChain's
    memoized serialization of the model when the answer stage (the model itself) had called
    first, so one process stored a stage's reply under one key and another looked it up under
    another. Here two graphs' deps meet the calls in the two orders."""
    from noterag.eval.cache import SQLiteLLMCache, with_cache
    from noterag.models import load_chat_model
    from noterag.registry.methods import METHODS

    sim = _sim()
    model = sim.SimModel(0.001, 0.0)
    server, url = sim.start(model)
    try:
        cache = SQLiteLLMCache(tmp_path / "cache.sqlite")

        def deps() -> Any:
            chat = with_cache(load_chat_model(f"openai:sim@{url}"), cache)
            return METHODS["deepnote"].bind(chat, _retriever())

        answered_first = deps()
        answered_first.model_for("answer", stream=True).invoke("Answer: who designed it?")
        stored = answered_first.model_for("accumulate").invoke("Supplement the notes.")
        other = deps()  # another run, or the other worker: the stage before any answer
        replayed = other.model_for("accumulate").invoke("Supplement the notes.")
        assert len(model.records) == 2  # the answer and the first accumulate
        assert replayed.content == stored.content
    finally:
        server.shutdown()


def test_the_cache_key_leaves_out_how_a_reply_is_fetched_not_what_it_says() -> None:
    from noterag.eval.cache import reply_key
    from noterag.models import load_chat_model

    model = load_chat_model("openai:sim@http://127.0.0.1:9/v1")
    transport: tuple[dict[str, Any], ...] = (
        {},
        {"request_timeout": 5.0, "max_retries": 0},
        {"disable_streaming": True},
    )
    keys = {reply_key(model.model_copy(update=u)._get_llm_string()) for u in transport}
    assert len(keys) == 1
    for other in ({"temperature": 0.9}, {"model_name": "other"}):
        assert reply_key(model.model_copy(update=other)._get_llm_string()) not in keys
    assert reply_key("[('_type', 'scripted')]") == "[('_type', 'scripted')]"


def test_the_local_model_is_keyed_by_its_model_file_not_its_port(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--model local` starts llama.cpp on a free port, another each run: a replay must still
    find the first run's replies (it asked all of them again before)."""
    from noterag.eval.cache import reply_key
    from noterag.models import load_chat_model, local_server

    gguf = tmp_path / "smollm2.gguf"
    gguf.write_bytes(b"weights")
    monkeypatch.setattr(local_server, "find_local_gguf", lambda: gguf)
    keys = []
    for port in (41001, 41002):  # two runs, two servers
        url = f"http://127.0.0.1:{port}/v1"
        monkeypatch.setattr(local_server, "local_server_url", lambda url=url: url)
        model = load_chat_model(f"openai:{local_server.LOCAL_MODEL_NAME}@{url}")
        keys.append(reply_key(model._get_llm_string()))
    assert keys[0] == keys[1]
    assert "41001" not in keys[0] and "local:smollm2.gguf:7" in keys[0]
    # an endpoint that is not the local server keeps its URL: another port, another server
    other = load_chat_model("openai:smollm2@http://127.0.0.1:41003/v1")
    assert "41003" in reply_key(other._get_llm_string())
    gguf.write_bytes(b"other weights")  # another model file (NOTERAG_LOCAL_GGUF): other replies
    url = "http://127.0.0.1:41004/v1"
    monkeypatch.setattr(local_server, "local_server_url", lambda: url)
    model = load_chat_model(f"openai:{local_server.LOCAL_MODEL_NAME}@{url}")
    assert reply_key(model._get_llm_string()) != keys[0]


def test_a_cached_second_run_makes_no_request_and_gives_the_same_rows(tmp_path: Path) -> None:
    sim = _sim()
    SimModel, start = sim.SimModel, sim.start
    data = write_dataset(tmp_path / "q.jsonl", n=8)
    sim = SimModel(0.001, 0.0)
    server, url = start(sim)
    try:
        cache = tmp_path / "cache.sqlite"
        runs = []
        for name, workers in (("first", 2), ("second", 1), ("third", 2)):
            before = len(sim.records)
            summary = run_eval(
                "deepnote", data, tmp_path / name, model=f"openai:sim@{url}",
                index=_retriever(), concurrency=2, progress=False, cache=cache,
                workers=workers, context=CONTEXT,
            )  # fmt: skip
            runs.append((len(sim.records) - before, summary))
    finally:
        server.shutdown()
    (first_requests, first), (second_requests, second), (third_requests, third) = runs
    assert first_requests > 0
    assert second_requests == third_requests == 0
    # The first run asks the endpoint for every prompt it had not seen (a prompt repeated
    # within the run, as a note that did not change, is a hit already).
    calls = first["cache"]["calls_from_cache"] + first["cache"]["calls_from_endpoint"]
    assert first["cache"]["calls_from_endpoint"] == first_requests
    assert second["cache"]["calls_from_cache"] == calls
    assert second["cache"]["calls_from_endpoint"] == second["cache"]["tokens_from_endpoint"] == 0
    tokens = first["cache"]["tokens_from_cache"] + first["cache"]["tokens_from_endpoint"]
    assert second["cache"]["tokens_from_cache"] == tokens > 0
    assert third["cache"] == second["cache"]  # counted in the workers as in one process

    def stable(name: str) -> dict[str, Any]:
        volatile = ("cache_calls", "cache_tokens")
        return {
            row["id"]: {k: v for k, v in _stable(row).items() if k not in volatile}
            for row in _complete_rows(tmp_path / name / "results.jsonl")
        }

    assert stable("first") == stable("second") == stable("third")
    rows = _complete_rows(tmp_path / "second" / "results.jsonl")
    assert all(row["cache_calls"] == row["llm_calls"] for row in rows)


def _cache_summary(run_dir: Path) -> dict[str, int]:
    written = json.loads((run_dir / "summary.json").read_text())
    assert written == json.loads(json.dumps(compute_summary(run_dir)))  # one computation
    return written["cache"]


def test_merged_shards_add_up_the_cache_counts_of_their_shards(tmp_path: Path) -> None:
    data = write_dataset(tmp_path / "q.jsonl", n=N_QUESTIONS)
    model = _crash_model(tmp_path).make_model()
    cache = tmp_path / "cache.sqlite"
    # shard 1's prompts asked once before: its shard answers from the cache, shard 2 does not
    run_eval(
        "deepnote", data, tmp_path / "warm", model=model, model_label="scripted",
        index=_retriever(), progress=False, shard="1/2", context=CONTEXT, cache=cache,
    )  # fmt: skip
    dirs = _shards(tmp_path, data, model, 2, cache=cache)
    one, two = (_cache_summary(d) for d in dirs)
    assert one["calls_from_endpoint"] == 0 < one["calls_from_cache"]
    assert two["calls_from_endpoint"] > 0
    merged = merge_runs(dirs, tmp_path / "merged")
    assert merged["cache"] == {key: one[key] + two[key] for key in one}
    assert _cache_summary(tmp_path / "merged") == merged["cache"]


def test_a_resumed_run_counts_the_cache_over_all_its_rows(tmp_path: Path) -> None:
    data = write_dataset(tmp_path / "q.jsonl", n=6)
    model = _crash_model(tmp_path).make_model()
    cache, run = tmp_path / "cache.sqlite", tmp_path / "run"
    kwargs: dict[str, Any] = {"model": model, "model_label": "scripted", "progress": False,
                              "context": CONTEXT}  # fmt: skip
    run_eval("deepnote", data, tmp_path / "warm", index=_retriever(), cache=cache, **kwargs)
    # 2 questions with the warm cache, then the resume asks the other 4 without it
    run_eval("deepnote", data, run, index=_retriever(), cache=cache, limit=2, **kwargs)
    summary = run_eval("deepnote", data, run, index=_retriever(), **kwargs)
    rows = _complete_rows(run / "results.jsonl")
    assert summary["n"] == len(rows) == 6
    cached = [row for row in rows if "cache_calls" in row]
    assert len(cached) == 2 and all(row["cache_calls"] == row["llm_calls"] for row in cached)
    tokens = {row["id"]: row["prompt_tokens"] + row["completion_tokens"] for row in rows}
    assert summary["cache"] == {
        "calls_from_cache": sum(row["llm_calls"] for row in cached),
        "calls_from_endpoint": sum(row["llm_calls"] for row in rows if row not in cached),
        "tokens_from_cache": sum(tokens[row["id"]] for row in cached),
        "tokens_from_endpoint": sum(tokens[row["id"]] for row in rows if row not in cached),
    }
    assert summary["cache"]["tokens_from_cache"] > 0
    assert _cache_summary(run) == summary["cache"]


def test_the_eval_command_prints_the_cache_counts(tmp_path: Path) -> None:
    from noterag.cli import app
    from noterag.retrievers.sample import sample_index

    sim = _sim()
    server, url = sim.start(sim.SimModel(0.001, 0.0))
    try:
        args = ["eval", "-m", "vanilla", "-d", str(write_dataset(tmp_path / "q.jsonl", n=3)),
                "-i", str(sample_index(tmp_path / "index")), "--model", f"openai:sim@{url}",
                "--cache", str(tmp_path / "cache.sqlite")]  # fmt: skip
        outputs = []
        for name in ("first", "second"):
            result = CliRunner().invoke(
                app, [*args, "-o", str(tmp_path / name)], env={"COLUMNS": "200"}
            )
            assert result.exit_code == 0, result.output
            outputs.append(result.stdout)
        plain = CliRunner().invoke(
            app, [*args[:-2], "-o", str(tmp_path / "plain")], env={"COLUMNS": "200"}
        )
    finally:
        server.shutdown()

    def cell(output: str, label: str) -> str:
        (line,) = [line for line in output.splitlines() if line.strip().startswith(label)]
        return line.split("│")[1].strip()

    first = json.loads((tmp_path / "first" / "summary.json").read_text())["cache"]
    second = json.loads((tmp_path / "second" / "summary.json").read_text())["cache"]
    assert (second["calls_from_cache"], second["calls_from_endpoint"]) == (3, 0)  # one each
    assert cell(outputs[0], "model calls from cache · endpoint") == "0 · 3"
    assert cell(outputs[1], "model calls from cache · endpoint") == "3 · 0"
    assert cell(outputs[0], "tokens from cache · endpoint") == (
        f"0 · {first['tokens_from_endpoint']:,}"
    )
    assert cell(outputs[1], "tokens from cache · endpoint") == (
        f"{second['tokens_from_cache']:,} · 0"
    )
    assert second["tokens_from_cache"] == first["tokens_from_endpoint"] > 0
    assert plain.exit_code == 0 and "from cache" not in plain.stdout


def test_a_run_keeps_its_long_lived_objects_out_of_full_collections(tmp_path: Path) -> None:
    """While a run answers, the objects alive when it started (modules, graph, clients) are
    frozen: a full collection would walk them all and stall every question in flight. After the
    run they are unfrozen, single process or with workers."""
    import gc

    from scripted import ScriptedModel, velmora_script

    frozen_during: list[int] = []

    class Recording(ScriptedModel):
        def _generate(
            self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any
        ) -> Any:
            frozen_during.append(gc.get_freeze_count())
            return super()._generate(messages, stop, run_manager, **kw)

    data = write_dataset(tmp_path / "q.jsonl", n=2)
    before = gc.get_freeze_count()
    run_eval(
        "deepnote", data, tmp_path / "one", model=Recording(script=velmora_script()),
        model_label="scripted", index=_retriever(), context=CONTEXT, progress=False,
    )  # fmt: skip
    assert frozen_during and min(frozen_during) > before + 1000
    assert gc.get_freeze_count() == before
    crash_model = _crash_model(tmp_path)
    run_eval(
        "deepnote", data, tmp_path / "two", model=crash_model.make_model(), model_label="scripted",
        index=_retriever(), context=CONTEXT, progress=False, workers=2,
    )  # fmt: skip
    assert gc.get_freeze_count() == before
