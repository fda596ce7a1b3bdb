"""Crash safety: SIGKILL at random moments, over several rounds, of `noterag eval` (then
resumed) and of `noterag index` (then loaded and rebuilt).

The kill points are drawn from a seeded random generator, so a failing round can be replayed;
they are spread over the work (after a random number of result rows plus a random fraction of
a question's measured latency, or a random fraction of a measured build) rather than over the
interpreter's start-up. Nothing asserts on time.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_eval_runner import write_dataset

from noterag.base.errors import IndexNotFoundError
from noterag.eval import run_eval
from noterag.eval.report import compute_summary
from noterag.retrievers import build_bm25_index
from noterag.retrievers.bm25 import Bm25Index
from scripted import VELMORA_ROWS, KeywordRetriever, passages

TESTS = Path(__file__).resolve().parent
SEED = 20261122


def _env(*paths: Path) -> dict[str, str]:
    path = os.pathsep.join(
        filter(None, [*map(str, paths), str(TESTS), os.environ.get("PYTHONPATH")])
    )
    return os.environ | {"PYTHONPATH": path, "NOTERAG_BASE_URL": ""}


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait(60)


def _wait_for(condition: Any, proc: subprocess.Popen, what: str) -> bool:
    """Poll until ``condition()``; False when the process ended first."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if condition():
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.005)
    _kill(proc)
    pytest.fail(f"gave up waiting for {what}")


def _kill_when(proc: subprocess.Popen, ready: Any, delay: float | Callable[[], float]) -> bool:
    """SIGKILL ``proc`` ``delay`` seconds after ``ready()`` (a callable: computed then); True
    when it had already exited (successfully: anything else fails the test)."""
    if _wait_for(ready, proc, "the moment to kill"):
        time.sleep(delay() if callable(delay) else delay)
    finished = proc.poll() is not None
    _kill(proc)
    stderr = proc.stderr.read().decode() if proc.stderr else ""
    if proc.stderr:
        proc.stderr.close()
    if finished:
        assert proc.returncode == 0, stderr
    return finished


# --------------------------------------------------------------------------- eval


# Enough questions that each kill round's share (_kill_rounds) is a few times the questions in
# flight (3), so that most kills land amid the share's work, not once only held questions are
# left; each question is ~0.03 s of a run whose start-up takes seconds.
N_QUESTIONS = 40

# The environment variable that holds questions in a kill round (see _kill_rounds).
HOLD = "NOTERAG_TEST_HOLD_FROM"
# A deterministic DeepNote: every reply is a function of the question's number, and each call
# sleeps a little so that a run lasts long enough to be killed in the middle of its questions.
# With NOTERAG_TEST_HOLD_FROM=n, the first call of every question numbered n or more never
# returns (until the process is killed): a run can then finish only the questions before n.
MODEL_CODE = textwrap.dedent(
    """
    import os, re, threading, time
    from scripted import ScriptedModel

    HOLD_FROM = int(os.environ.get("NOTERAG_TEST_HOLD_FROM") or 0)

    def number(prompt):
        return int(re.search(r"Question (\\d+):", prompt).group(1))

    def slow(reply):
        def answer(prompt):
            if HOLD_FROM and number(prompt) >= HOLD_FROM:
                threading.Event().wait()  # held until the test's SIGKILL
            time.sleep(0.01)
            return reply(number(prompt))
        return answer

    def make_model():
        return ScriptedModel(script={
            "init_note": slow(lambda i: f"Note {i}: the Velmora Bridge is by Aurelio Fenwick."),
            "refine_query": slow(lambda i: "1. When was Aurelio Fenwick born?\\n2. Ostra River"),
            "accumulate": slow(lambda i: f"Note {i}: Fenwick (1871-1938) built the bridge."),
            "review": slow(lambda i: '{"status": "%s"}' % (i % 3 != 0)),
            "answer": slow(lambda i: "Aurelio Fenwick" if i % 4 else f"answer {i}"),
        })
    """
)
WORKER = textwrap.dedent(
    """
    import sys
    from crash_model import make_model
    from scripted import VELMORA_ROWS, KeywordRetriever, passages
    from noterag.eval import run_eval

    run_eval("deepnote", sys.argv[1], sys.argv[2], model=make_model(), model_label="scripted",
             index=KeywordRetriever(passages=passages(*VELMORA_ROWS)), concurrency=3,
             context={"max_steps": 2, "max_failures": 2}, progress=False)
    """
)
VOLATILE = ("latency_s", "waited_s", "started_at", "finished_at")


def _complete_rows(results: Path) -> list[dict[str, Any]]:
    """The rows on complete lines; a torn last line is allowed (the runner repairs it)."""
    if not results.exists():
        return []
    data = results.read_bytes()
    lines = data.split(b"\n")
    complete, tail = lines[:-1], lines[-1]
    rows = [json.loads(line) for line in complete]  # every complete line is a whole row
    if tail:
        with pytest.raises(ValueError):
            json.loads(tail)
    return rows


def _stable(row: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in row.items() if key not in VOLATILE}


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


KILL_ROUNDS = 3  # as many kills as _killed_and_resumed asks for: each round kills (the hold)


def _questions(data: Path) -> dict[str, int]:
    """The dataset's question ids, in its order (the order a run asks them in), and the number
    MODEL_CODE reads in each: increasing, so that holding the numbers from n on holds the
    questions from n's on."""
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    numbers = {row["id"]: int(row["question"].split()[1].rstrip(":")) for row in rows}
    assert list(numbers.values()) == sorted(numbers.values())
    return numbers


def _kill_rounds(
    args: list[str],
    env: dict[str, str],
    results: Path,
    rng: random.Random,
    questions: dict[str, int],
) -> int:
    """Start the run ``args`` again and again (KILL_ROUNDS times), each time SIGKILLed once a
    random number of new rows is out, plus a random fraction of a question's latency (measured
    in the rows so far, so it follows the machine's load) that lands between rows, inside model
    calls, or as a row is written. After each kill: no child process (a worker) outlives it, no
    question is there twice, no finished row is lost, and work is left. Returns the number of
    kills.

    Each round's run may finish only its share of the questions left: the model holds the rest
    at their first call (MODEL_CODE's hold), so however late a kill lands (a slow poll, a loaded
    machine, a long delay) it finds the run alive with work left, and no round uses up the
    questions of the rounds after it. (Kill delays drawn in seconds raced the run: 0.15 s is
    several rows of this model, so two rounds could take all the questions, the next kill then
    landing in the run's shutdown or after its end, and the rounds stopped at two kills.)"""
    kills = 0
    for round_ in range(KILL_ROUNDS):
        done = {row["id"] for row in _complete_rows(results)}
        left = [q for q in questions if q not in done]
        # Up to an equal share of the questions left for each round to come, at least one
        # question always left for the last run: held from the first question past the share.
        share = max(1, (len(left) - 1) // (KILL_ROUNDS - round_))
        assert share < len(left), "too few questions left for the kill rounds"
        hold = {**env, HOLD: str(questions[left[share]])}
        proc = subprocess.Popen(args, env=hold, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        # Half the share at most: the kill delay (up to a question's latency) finishes the
        # questions in flight, and the kill should mostly land before the share is all done.
        target = len(done) + rng.randint(1, max(1, share // 2))
        seen: list[int] = []

        def ready(n: int = target, pid: int = proc.pid, seen: list[int] = seen) -> bool:
            seen[:] = seen or _children(pid)
            return len(_complete_rows(results)) >= n

        fraction = rng.random()

        def delay(fraction: float = fraction) -> float:
            return fraction * statistics.median(r["latency_s"] for r in _complete_rows(results))

        assert not _kill_when(proc, ready, delay), "a run finished with questions held"
        kills += 1
        deadline = time.monotonic() + 30
        while any(_alive(pid) for pid in seen):
            assert time.monotonic() < deadline, "a child process outlived its killed parent"
            time.sleep(0.01)
        ids = [row["id"] for row in _complete_rows(results)]
        assert len(ids) == len(set(ids)), f"duplicated questions after a kill: {ids}"
        assert len(ids) >= len(done)  # finished rows are never lost
        assert len(ids) < len(questions)  # the held questions are the next round's work
    return kills


def _finish(
    args: list[str], env: dict[str, str], results: Path, expected: dict[str, dict[str, Any]]
) -> None:
    """Run ``args`` to the end: it succeeds, and the rows are ``expected`` (by id, ``_stable``)."""
    final = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert final.returncode == 0, final.stderr
    rows = _complete_rows(results)
    assert sorted(row["id"] for row in rows) == sorted(expected)
    assert {row["id"]: _stable(row) for row in rows} == expected


def _killed_and_resumed(
    tmp_path: Path, code: str, data: Path, expected: dict[str, dict[str, Any]], seed: int
) -> Path:
    """The run directory of ``code`` (a script taking the dataset and the run directory) over
    ``data``, killed in rounds (``_kill_rounds``, at least 3 kills) and then run to the end: the
    ``expected`` rows."""
    run = tmp_path / "run"
    args = [sys.executable, "-c", code, str(data), str(run)]
    results = run / "results.jsonl"
    questions = _questions(data)
    assert sorted(questions) == sorted(expected)
    kills = _kill_rounds(args, _env(tmp_path), results, random.Random(seed), questions)
    assert kills >= 3, "too few rounds were killed to test anything"
    _finish(args, _env(tmp_path), results, expected)
    return run


def test_eval_killed_at_random_points_resumes_to_the_uninterrupted_results(tmp_path: Path) -> None:
    data = write_dataset(tmp_path / "q.jsonl", n=N_QUESTIONS)
    # The very model the worker runs, as a module both processes import.
    (tmp_path / "crash_model.py").write_text(MODEL_CODE)
    spec = importlib.util.spec_from_file_location("crash_model", tmp_path / "crash_model.py")
    assert spec is not None and spec.loader is not None
    crash_model = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(crash_model)
    reference = run_eval(
        "deepnote", data, tmp_path / "reference", model=crash_model.make_model(),
        model_label="scripted", index=KeywordRetriever(passages=passages(*VELMORA_ROWS)),
        concurrency=3, context={"max_steps": 2, "max_failures": 2}, progress=False,
    )  # fmt: skip
    expected = {
        row["id"]: _stable(row) for row in _complete_rows(tmp_path / "reference" / "results.jsonl")
    }
    assert len(expected) == N_QUESTIONS

    run = _killed_and_resumed(tmp_path, WORKER, data, expected, SEED)
    results = run / "results.jsonl"
    assert results.read_bytes().endswith(b"\n")
    summary = json.loads((run / "summary.json").read_text())
    assert summary == json.loads(json.dumps(compute_summary(run)))  # written from these rows
    for key in ("n", "n_errors", "questions", "metrics", "cost", "fallbacks"):
        assert summary[key] == json.loads(json.dumps(reference))[key], key
    assert summary["n"] == summary["questions"] == N_QUESTIONS


# --------------------------------------------------------------------------- index


def _corpus(path: Path, n: int, word: str, seed: int = 0) -> Path:
    rng = random.Random(seed)
    vocabulary = [f"w{i}" for i in range(3000)]
    with path.open("w") as f:
        for i in range(n):
            text = " ".join(rng.choices(vocabulary, k=30)) + f" {word}"
            f.write(json.dumps({"id": f"{word}{i}", "title": f"T{i}", "text": text}) + "\n")
    return path


def _building(index_dir: Path) -> list[Path]:
    return sorted(index_dir.parent.glob(f".{index_dir.name}.building-*"))


def _content(index_dir: Path) -> tuple[int, str] | None:
    """(passage count, the marker word of its passages), or None when no index loads; a
    loaded index must be whole: its count is the manifest's and its passages search."""
    try:
        index = Bm25Index(index_dir)
    except IndexNotFoundError:
        return None
    count = index.num_passages
    assert count == index.manifest["count"]
    (passage, _), *_ = index.search("old new", 1)  # every passage has one
    return count, passage["id"].rstrip("0123456789")


def _index_cmd(corpus: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "noterag", "index", str(corpus), "--out", str(out), "-q", *extra]


@pytest.fixture(scope="module")
def big_corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    """A corpus whose build takes a couple of seconds, and how long its build takes here."""
    root = tmp_path_factory.mktemp("crash-corpus")
    corpus = _corpus(root / "new.jsonl", 60_000, "new")
    clock = time.perf_counter()
    build_bm25_index(corpus, root / "timing-index", progress=False)
    return corpus, time.perf_counter() - clock


def _kill_builds(rng: random.Random, corpus: Path, out: Path, seconds: float, *extra: str) -> str:
    """Start a build, wait until its temporary directory exists, kill it a random fraction of
    a build later. Returns what happened ("killed" or "finished")."""
    proc = subprocess.Popen(_index_cmd(corpus, out, *extra), env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    before = set(_building(out))
    finished = _kill_when(proc, lambda: set(_building(out)) - before, rng.uniform(0, 1.1 * seconds))
    return "finished" if finished else "killed"


def test_index_rebuild_killed_at_random_points_keeps_the_old_index(
    tmp_path: Path, big_corpus: tuple[Path, float]
) -> None:
    corpus, seconds = big_corpus
    old_corpus = _corpus(tmp_path / "old.jsonl", 5, "old")
    out = tmp_path / "index"
    build_bm25_index(old_corpus, out, progress=False)
    rng = random.Random(SEED)
    outcomes: list[str] = []
    # Rounds until three builds were killed: under load a build can win the race.
    while outcomes.count("killed") < 3 and len(outcomes) < 8:
        outcomes.append(_kill_builds(rng, corpus, out, 0.8 * seconds, "--force"))
        # At every instant the directory holds a whole index: the old one, or the new one when
        # the build won the race; never none and never a partial one.
        content = _content(out)
        assert content in ((5, "old"), (60_000, "new")), (content, outcomes)
        if content == (60_000, "new"):
            build_bm25_index(old_corpus, out, progress=False)  # back to the old one
    assert "killed" in outcomes, outcomes
    # The leftovers of killed builds neither break the next build nor survive a clean one's
    # own temporary directory; the next build replaces the old index.
    result = subprocess.run(_index_cmd(corpus, out, "--force"), env=_env(), capture_output=True,
                            text=True, timeout=300, check=False)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert _content(out) == (60_000, "new")


def test_first_index_build_killed_leaves_no_index_and_says_why(
    tmp_path: Path, big_corpus: tuple[Path, float]
) -> None:
    corpus, seconds = big_corpus
    rng = random.Random(SEED + 1)
    out = tmp_path / "index"
    killed_mid_build = 0
    for _ in range(6):
        if killed_mid_build == 2:
            break
        # Kill points in the first half of a build, so that most land in the middle of it.
        _kill_builds(rng, corpus, out, 0.5 * seconds)
        if out.exists():  # killed after the rename (or finished): the whole new index
            assert _content(out) == (60_000, "new")
            shutil.rmtree(out)  # start over: this round interrupted nothing
            continue
        killed_mid_build += 1
        leftovers = _building(out)
        assert leftovers  # SIGKILL leaves the temporary directory of each killed build
        with pytest.raises(IndexNotFoundError, match="unfinished build") as info:
            Bm25Index(out)
        assert "does not exist" in str(info.value) and str(leftovers[0]) in str(info.value)
    assert killed_mid_build >= 1
    result = subprocess.run(_index_cmd(corpus, out), env=_env(), capture_output=True, text=True,
                            timeout=300, check=False)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert _content(out) == (60_000, "new")


def test_a_rebuild_interrupted_between_renames_is_named_by_the_loader(tmp_path: Path) -> None:
    # Without an atomic exchange (not Linux) a kill between "old aside" and "new in" leaves
    # the old index in a sibling: the error says where, and how to get it back.
    old_corpus = _corpus(tmp_path / "old.jsonl", 5, "old")
    out = tmp_path / "index"
    build_bm25_index(old_corpus, out, progress=False)
    aside = out.with_name(f".{out.name}.old-1234abcd")
    out.rename(aside)
    with pytest.raises(
        IndexNotFoundError, match="an interrupted rebuild left the previous index"
    ) as info:
        Bm25Index(out)
    assert f"{aside}: rename it to {out}" in str(info.value)
    aside.rename(out)
    assert _content(out) == (5, "old")


def test_the_fallback_swap_also_replaces_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from noterag.retrievers import indexdir

    monkeypatch.setattr(indexdir, "exchange", lambda a, b: False)
    out = tmp_path / "index"
    build_bm25_index(_corpus(tmp_path / "old.jsonl", 5, "old"), out, progress=False)
    build_bm25_index(_corpus(tmp_path / "new.jsonl", 7, "new"), out, progress=False)
    assert _content(out) == (7, "new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index", "new.jsonl", "old.jsonl"]


DENSE_WORKER = textwrap.dedent(
    """
    import sys, time
    from langchain_core.embeddings import DeterministicFakeEmbedding
    from noterag.retrievers.dense import build_dense_index

    class Slow(DeterministicFakeEmbedding):
        def embed_documents(self, texts):
            time.sleep(0.05)
            return super().embed_documents(texts)

    build_dense_index(sys.argv[1], sys.argv[2], progress=False, embeddings=Slow(size=384))
    """
)


def test_dense_rebuild_killed_mid_embedding_keeps_the_old_index(tmp_path: Path) -> None:
    """Several kills while the dense builder streams vectors to disk. A fake embedding model
    stands in for the real one, whose start-up alone (torch, the model) takes 20-50 s here:
    the build, its files and the swap are the real ones."""
    pytest.importorskip(
        "faiss", reason="faiss-cpu is not installed (the dense extra: pip install 'noterag[dense]')"
    )
    from langchain_core.embeddings import DeterministicFakeEmbedding

    from noterag.retrievers.dense import DenseIndex, build_dense_index

    out = tmp_path / "dense"
    old = _corpus(tmp_path / "old.jsonl", 3, "old")
    build_dense_index(old, out, progress=False, embeddings=DeterministicFakeEmbedding(size=384))
    corpus = _corpus(tmp_path / "new.jsonl", 6000, "new")
    rng = random.Random(SEED + 2)
    for _ in range(2):
        proc = subprocess.Popen([sys.executable, "-c", DENSE_WORKER, str(corpus), str(out)],
                                env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
        before = set(_building(out))
        started = lambda b=before: set(_building(out)) - b
        finished = _kill_when(proc, started, rng.uniform(0, 1.0))
        index = DenseIndex(out)
        if finished or index.num_passages != 3:  # the build won the race: whole and new
            assert index.num_passages == 6000 and index.passage(5999)["id"] == "new5999"
            index.close()
            build_dense_index(
                old, out, progress=False, embeddings=DeterministicFakeEmbedding(size=384)
            )
            continue
        assert index.passage(0)["id"].startswith("old")
        index.close()
