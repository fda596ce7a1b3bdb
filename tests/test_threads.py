"""Durable threads (issue 23, item 1): `noterag ask` checkpoints every step of its thread (SQLite
by default, Postgres by URL); killed with SIGKILL in the middle of a question, the same command
on the same thread finishes the run without sending the finished steps' model calls again.

The model is bench/sim_endpoint.py's simulated OpenAI-compatible endpoint, run in this process,
which counts the requests of each stage and holds the first request of the stage the test kills
at, so the kill lands while that step is in flight. The Postgres case starts a throwaway server
from the machine's own initdb / pg_ctl (Debian: /usr/lib/postgresql/*/bin) in a temporary
directory, and skips naming what is missing otherwise.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from noterag.retrievers import build_bm25_index

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from sim_endpoint import SimModel, stage_of, start

REPO = Path(__file__).resolve().parents[1]
NOTERAG = Path(sys.executable).parent / "noterag"
QUESTION = "In which year was the architect of the Velmora Bridge born?"
WAIT = 120.0
# the calls of one uninterrupted deepnote run here: init_note, two steps, the answer
UNINTERRUPTED = Counter(init_note=1, refine_query=2, accumulate=2, review=2, answer=1)


class HoldingModel(SimModel):
    """SimModel that counts requests by stage and holds the first request of ``hold`` until
    ``release`` is set (the process that sent it is killed meanwhile)."""

    def __init__(self, hold: str) -> None:
        super().__init__(base_s=0.0, per_token_s=0.0, seed=3)
        self.hold = hold
        self.held = threading.Event()
        self.release = threading.Event()
        self.stages: Counter[str] = Counter()
        self.answered: Counter[str] = Counter()
        self.prompts: list[tuple[str, str]] = []  # (stage, prompt) of every request

    def reply(self, prompt: str) -> tuple[str, str]:
        if prompt.rstrip().endswith("Standalone question:"):
            # a follow-up's rewrite (the sim names no such stage): a question in the
            # conversation's words; three random capitalised words of the prompt ("Chat History
            # Human") would be off-topic, and the words asked would stand (noterag.core.question)
            return "answer", "Where was the architect of the Velmora Bridge born?"
        stage, text = super().reply(prompt)
        # every new note accepted: the run's path (hence its calls) is known in advance
        return stage, '{"status": "True"}' if stage == "review" else text

    def serve(self, prompt: str) -> tuple[str, int]:
        stage = stage_of(prompt)
        with self._lock:
            self.stages[stage] += 1
            self.prompts.append((stage, prompt))
            first = stage == self.hold and not self.held.is_set()
            if first:
                self.held.set()
        if first:
            self.release.wait(WAIT)
        text, tokens = super().serve(prompt)
        with self._lock:
            self.answered[stage] += 1
        return text, tokens


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("idx") / "index"
    build_bm25_index(REPO / "noterag" / "data" / "sample_corpus.jsonl", out, progress=False)
    return out


def ask(index: Path, url: str, checkpoint: str, thread: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            str(NOTERAG),
            "ask",
            QUESTION,
            "--method",
            "deepnote",
            "--index",
            str(index),
            "--model",
            f"openai:sim@{url}",
            "--skip-model-check",
            "--max-steps",
            "2",
            "--max-failures",
            "5",
            "--thread",
            thread,
            "--checkpoint",
            checkpoint,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ | {"NO_COLOR": "1", "COLUMNS": "200"},
    )


def kill_and_resume(index: Path, checkpoint: str) -> None:
    """Kill the run while its second step's review is in flight, then run the same command."""
    model = HoldingModel(hold="review")
    server, url = start(model)
    try:
        first = ask(index, url, checkpoint, "t1")
        assert model.held.wait(WAIT), first.communicate()
        finished = Counter(model.answered)  # every call before the held review returned
        first.send_signal(signal.SIGKILL)
        first.wait(WAIT)
        model.release.set()
        time.sleep(0.2)  # the held request's reply goes to a closed socket
        before = Counter(model.stages)
        second = ask(index, url, checkpoint, "t1")
        out, err = second.communicate(timeout=WAIT)
        assert second.returncode == 0, err
        assert "resuming thread t1" in err
        assert out.strip()  # the answer
        again = Counter(model.stages) - before
        # the finished steps' calls are not sent again: over both processes, the calls are an
        # uninterrupted run's (max_steps=2, every note accepted) plus the one review the kill
        # cut off
        assert finished == Counter(init_note=1, refine_query=1, accumulate=1)
        assert again == Counter(review=2, refine_query=1, accumulate=1, answer=1)
        assert Counter(model.stages) == UNINTERRUPTED + Counter(review=1)
    finally:
        model.release.set()
        server.shutdown()


def test_sqlite_thread_survives_sigkill(index_dir: Path, tmp_path: Path) -> None:
    kill_and_resume(index_dir, str(tmp_path / "threads.sqlite"))


def test_a_follow_up_on_a_cli_thread_is_read_with_the_first_turn(
    index_dir: Path, tmp_path: Path
) -> None:
    model = HoldingModel(hold="none")
    server, url = start(model)
    try:
        checkpoint = str(tmp_path / "threads.sqlite")
        first = ask(index_dir, url, checkpoint, "chat")
        assert first.communicate(timeout=WAIT)[0].strip()
        assert model.stages["condense_question"] == 0 and model.stages["answer"] == 1
        follow = subprocess.run(
            [
                str(NOTERAG),
                "ask",
                "And where was he born?",
                "--method",
                "deepnote",
                "--index",
                str(index_dir),
                "--model",
                f"openai:sim@{url}",
                "--skip-model-check",
                "--thread",
                "chat",
                "--checkpoint",
                checkpoint,
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=WAIT,
            check=False,
        )
        assert follow.returncode == 0, follow.stderr
        import json

        state = json.loads(follow.stdout)
        assert state["asked"] == "And where was he born?"
        assert state["question"] != state["asked"]
        # the sim endpoint answers the rewrite prompt as the "answer" stage: one more call
        assert model.stages["answer"] == 3
    finally:
        server.shutdown()


def test_ask_refuses_a_human_review_in_one_line(index_dir: Path) -> None:
    done = subprocess.run(
        [str(NOTERAG), "ask", QUESTION, "--index", str(index_dir), "-c", "human_review=note"],
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )
    assert done.returncode != 0
    refusal = (
        "error: noterag ask does not pause for a human review: human_review is for apps "
        "(Agent Chat UI, Python with a checkpointer; docs/embedding.md)"
    )
    assert done.stderr.strip().splitlines() == [refusal]


# --------------------------------------------------------------------------- Postgres


def _pg_bin() -> Path | None:
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(versions[-1]).parent if versions else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _as_server_user(home: Path) -> list[str]:
    """The command prefix that runs the Postgres binaries: as root (which Postgres refuses),
    as the machine's ``postgres`` user, owning a directory of its own."""
    if os.geteuid() != 0:
        return []
    import pwd

    try:
        user = pwd.getpwnam("postgres")
    except KeyError:
        pytest.skip("running as root and there is no postgres user to run Postgres as")
    runuser = shutil.which("runuser")
    if runuser is None:
        pytest.skip("running as root and runuser is missing to run Postgres as postgres")
    os.chown(home, user.pw_uid, user.pw_gid)
    return [runuser, "-u", "postgres", "--"]


@pytest.fixture
def postgres() -> Iterator[str]:
    """A throwaway Postgres server (the machine's own binaries) and its URL."""
    pytest.importorskip(
        "langgraph.checkpoint.postgres",
        reason="langgraph-checkpoint-postgres is not installed (pip install 'noterag[postgres]')",
    )
    bin_dir = _pg_bin()
    if bin_dir is None:
        pytest.skip("no initdb/pg_ctl on this machine (Debian: apt-get install postgresql)")
    # a directory of its own under /tmp: pytest's (0700, the test runner's) may be closed to
    # the postgres user
    home = Path(tempfile.mkdtemp(prefix="noterag-pg-"))
    prefix = _as_server_user(home)
    data, port = home / "data", _free_port()
    subprocess.run(
        [*prefix, str(bin_dir / "initdb"), "-D", str(data), "-U", "noterag", "--auth=trust"],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [
            *prefix,
            str(bin_dir / "pg_ctl"),
            "-D",
            str(data),
            "-l",
            str(home / "pg.log"),
            "-o",
            f"-p {port} -k {home} -c listen_addresses=127.0.0.1",
            "-w",
            "start",
        ],
        check=True,
        capture_output=True,
    )
    try:
        yield f"postgresql://noterag@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [*prefix, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
            capture_output=True,
            check=False,
        )
        shutil.rmtree(home, ignore_errors=True)


def test_postgres_thread_survives_sigkill(index_dir: Path, postgres: str) -> None:
    kill_and_resume(index_dir, postgres)


# --------------------------------------------------------------------------- langgraph dev


def _ops_saved_since(workdir: Path, since: float) -> bool:
    """Whether `langgraph dev` has written its list of threads and runs (it does every 10 s)
    since ``since``."""
    ops = workdir / ".langgraph_api" / ".langgraph_ops.pckl"
    return ops.exists() and ops.stat().st_mtime > since


def server_kill_and_resume(
    tmp_path_factory: pytest.TempPathFactory,
    workdir: Path,
    env: dict[str, str],
    list_lost: bool = False,
) -> None:
    """A deepnote run on a thread of `langgraph dev` is killed (SIGKILL to the server's process
    group) while its second review is in flight; a new server in the same directory takes the
    run up again and finishes it from the thread's checkpoints. With ``list_lost``, the server's
    own list of threads and runs is gone (as when the kill comes before the server writes it):
    the client resumes the thread by its id (input None, the thread created if missing)."""
    from langgraph_sdk import get_sync_client

    from devserver import PIDS, serve

    model = HoldingModel(hold="review")
    sim, sim_url = start(model)
    env = env | {"NOTERAG_MODEL": f"openai:sim@{sim_url}", "NOTERAG_SKIP_MODEL_CHECK": "1"}
    first = serve(tmp_path_factory, env, workdir)
    try:
        url = next(first)
        client = get_sync_client(url=url, api_key=None, timeout=WAIT)
        thread = client.threads.create()["thread_id"]
        created = time.time()
        run = client.runs.create(
            thread,
            "deepnote",
            input={"question": QUESTION},
            context={"max_steps": 2, "max_failures": 5},
        )
        assert model.held.wait(WAIT), client.runs.get(thread, run["run_id"])
        # the server's own record of the run reaches its disk every 10 s: kill after it has
        deadline = time.monotonic() + 30
        while not _ops_saved_since(workdir, created) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _ops_saved_since(workdir, created)
        finished = Counter(model.answered)
        os.killpg(PIDS[url], signal.SIGKILL)
    finally:
        first.close()
    if list_lost:
        (workdir / ".langgraph_api" / ".langgraph_ops.pckl").unlink()
    model.release.set()
    time.sleep(0.2)  # the held request's reply goes to a closed socket
    before = Counter(model.stages)
    second = serve(tmp_path_factory, env, workdir)
    try:
        url = next(second)
        client = get_sync_client(url=url, api_key=None, timeout=WAIT)
        if list_lost:
            state = client.runs.wait(
                thread,
                "deepnote",
                input=None,
                context={"max_steps": 2, "max_failures": 5},
                if_not_exists="create",
            )
        else:
            state = client.runs.join(thread, run["run_id"])
            assert client.runs.get(thread, run["run_id"])["status"] == "success"
        assert state.get("answer"), state
        assert client.threads.get_state(thread)["values"]["answer"] == state["answer"]
    finally:
        second.close()
        model.release.set()
        sim.shutdown()
    again = Counter(model.stages) - before
    # as with `noterag ask`: the finished steps' calls are not sent again
    assert finished == Counter(init_note=1, refine_query=1, accumulate=1)
    assert again == Counter(review=2, refine_query=1, accumulate=1, answer=1)
    assert Counter(model.stages) == UNINTERRUPTED + Counter(review=1)


@pytest.mark.server
def test_a_server_thread_survives_sigkill_in_sqlite_by_default(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    server_kill_and_resume(tmp_path_factory, tmp_path, {})
    # the default: a SQLite file beside the server's own list of threads
    assert (tmp_path / ".langgraph_api" / "threads.sqlite").is_file()


@pytest.mark.server
def test_a_server_thread_resumes_by_its_id_when_the_servers_list_is_lost(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    server_kill_and_resume(tmp_path_factory, tmp_path, {}, list_lost=True)


@pytest.mark.server
def test_a_server_thread_survives_sigkill_in_postgres(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, postgres: str
) -> None:
    server_kill_and_resume(tmp_path_factory, tmp_path, {"NOTERAG_CHECKPOINT": postgres})
    assert not (tmp_path / ".langgraph_api" / "threads.sqlite").exists()


def test_the_server_checkpointer_follows_noterag_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio
    import importlib.util

    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    from noterag.base.errors import ConfigError
    from noterag.server.checkpointer import server_checkpointer

    async def opened() -> object:
        async with server_checkpointer() as saver:
            return saver

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NOTERAG_CHECKPOINT")
    assert isinstance(asyncio.run(opened()), AsyncSqliteSaver)
    assert (tmp_path / ".langgraph_api" / "threads.sqlite").is_file()
    monkeypatch.setenv("NOTERAG_CHECKPOINT", "none")
    assert isinstance(asyncio.run(opened()), InMemorySaver)
    monkeypatch.setenv("NOTERAG_CHECKPOINT", str(tmp_path))
    with pytest.raises(ConfigError, match="is a directory, not a SQLite file"):
        asyncio.run(opened())
    if importlib.util.find_spec("langgraph.checkpoint.postgres") is None:
        return  # without the postgres extra there is no Postgres saver to try
    monkeypatch.setenv("NOTERAG_CHECKPOINT", f"postgresql://nobody@127.0.0.1:{_free_port()}/x")
    with pytest.raises(ConfigError, match=r"^cannot connect to postgres://127\.0\.0\.1:\d+/x: "):
        asyncio.run(opened())
