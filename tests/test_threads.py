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

    def reply(self, prompt: str) -> tuple[str, str]:
        stage, text = super().reply(prompt)
        # every new note accepted: the run's path (hence its calls) is known in advance
        return stage, '{"status": "True"}' if stage == "review" else text

    def serve(self, prompt: str) -> tuple[str, int]:
        stage = stage_of(prompt)
        with self._lock:
            self.stages[stage] += 1
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
