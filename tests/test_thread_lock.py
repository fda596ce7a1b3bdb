"""One run a thread at a time, and checkpoint locations that say what is wrong (issue 33,
defect 10 and the threads' lesser findings).

Two `noterag ask` on one thread at once would each read the thread's last checkpoint and write
a turn over the other's (the thread held Human(A), Human(B), AI): the second is refused at once
in one line naming the first (pid, host, since), against SQLite (a lock file beside the
database) and a Postgres started by the test (an advisory lock; tests/test_threads.py's
fixture). The first run is held mid-step by bench/sim_endpoint.py's model (test_threads's
HoldingModel), so the second comes while it is surely running.

A location that is no SQLite file and no Postgres server (a foreign URL, a libpq string, a
malformed URL) is one `error:` line naming it without its password, and creates no file.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import test_threads
from test_threads import WAIT, HoldingModel, start

NOTERAG = Path(sys.executable).parent / "noterag"
FIRST = "In which year was the architect of the Velmora Bridge born?"
SECOND = "Who designed the Velmora Bridge?"
HOST = socket.gethostname()
# test_threads's fixtures: its sample index, and a throwaway Postgres server
index_dir = test_threads.index_dir
postgres = test_threads.postgres


def ask_on(
    index: Path, url: str, checkpoint: str, thread: str, question: str, **popen: object
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            str(NOTERAG), "ask", question, "--method", "deepnote", "--index", str(index),
            "--model", f"openai:sim@{url}", "--skip-model-check", "--max-steps", "2",
            "--thread", thread, "--checkpoint", checkpoint, "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ | {"NO_COLOR": "1", "COLUMNS": "200"},
        **popen,  # type: ignore[arg-type]
    )  # fmt: skip


def second_run_is_refused(index: Path, checkpoint: str) -> None:
    """While one ask holds thread t1 (its first review held by the model), a second ask on t1
    is refused naming the first; the thread keeps one turn; afterwards t1 takes a second."""
    import json

    model = HoldingModel(hold="review")
    server, url = start(model)
    try:
        first = ask_on(index, url, checkpoint, "t1", FIRST)
        assert model.held.wait(WAIT), first.communicate()
        second = ask_on(index, url, checkpoint, "t1", SECOND)
        out, err = second.communicate(timeout=WAIT)
        assert second.returncode == 1, (out, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        assert lines[0].startswith(
            f"error: thread t1 is in use by another run (pid {first.pid} on {HOST} since "
        ), lines[0]
        assert lines[0].endswith("UTC): wait for it to finish, or ask on another --thread")
        # another thread of the same store is not held up
        other = ask_on(index, url, checkpoint, "t2", SECOND)
        assert model.release.set() is None
        assert other.communicate(timeout=WAIT)[0]
        assert other.returncode == 0
        out, err = first.communicate(timeout=WAIT)
        assert first.returncode == 0, err
        state = json.loads(out)
        kinds = [m["type"] for m in state["messages"]]
        assert kinds == ["human", "ai"], kinds  # the refused question left no turn
        # the thread is free again: a follow-up is its second turn
        again = ask_on(index, url, checkpoint, "t1", SECOND)
        out, err = again.communicate(timeout=WAIT)
        assert again.returncode == 0, err
        assert [m["type"] for m in json.loads(out)["messages"]] == ["human", "ai"] * 2
    finally:
        model.release.set()
        server.shutdown()


def test_a_second_ask_on_a_busy_sqlite_thread_is_refused(index_dir: Path, tmp_path: Path) -> None:
    database = tmp_path / "threads.sqlite"
    second_run_is_refused(index_dir, str(database))
    # the lock files go with their runs
    assert sorted(p.name for p in tmp_path.iterdir() if "-lock-" in p.name) == []


def test_a_second_ask_on_a_busy_postgres_thread_is_refused(index_dir: Path, postgres: str) -> None:
    second_run_is_refused(index_dir, postgres)


def test_the_lock_file_of_a_killed_run_is_taken_over(tmp_path: Path) -> None:
    """A holder killed with SIGKILL leaves its file; the kernel let go of its lock."""
    from noterag.server.checkpointer import ThreadBusy, hold_thread, lock_file

    database = tmp_path / "threads.sqlite"
    holder = subprocess.Popen(
        [sys.executable, "-c",
         ("import sys; from noterag.server.checkpointer import hold_thread\n"
         f"with hold_thread({str(database)!r}, 'x'):\n"
         "    print('held', flush=True); sys.stdin.read()")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with (
            pytest.raises(ThreadBusy, match=rf"\(pid {holder.pid} on "),
            hold_thread(str(database), "x"),
        ):
            pass
    finally:
        holder.kill()
        holder.wait(WAIT)
    assert lock_file(database, "x").exists()
    with hold_thread(str(database), "x"):
        assert lock_file(database, "x").exists()
    assert not lock_file(database, "x").exists()


def test_a_linked_lock_file_is_refused(tmp_path: Path) -> None:
    from noterag.base.errors import ConfigError
    from noterag.server.checkpointer import hold_thread, lock_file

    database, target = tmp_path / "threads.sqlite", tmp_path / "precious"
    target.write_text("keep me")
    lock_file(database, "x").symlink_to(target)
    with (
        pytest.raises(ConfigError, match=r"^cannot lock thread x at .*-lock-"),
        hold_thread(str(database), "x"),
    ):
        pass
    assert target.read_text() == "keep me"


# --------------------------------------------------------------------------- locations


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_ask(index: Path, cwd: Path, *args: str | bytes) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(NOTERAG), "ask", *args, "--index", str(index), "--model",
         "openai:sim@http://127.0.0.1:9/v1", "--skip-model-check"],
        capture_output=True, text=True, cwd=cwd, timeout=WAIT, check=False,
        env=os.environ | {"NO_COLOR": "1", "COLUMNS": "200"},
    )  # fmt: skip


def bad_locations() -> list[tuple[str, str]]:
    port = _free_port()  # nothing listens there
    return [
        (
            f"postgresql+psycopg://u:PW@127.0.0.1:{port}/db",
            rf"^error: cannot connect to postgres://127\.0\.0\.1:{port}/db: ",
        ),
        (
            f"host=127.0.0.1 port={port} user=u password=PW dbname=db",
            (
                rf"^error: cannot connect to postgres host=127\.0\.0\.1 port={port} user=u "
                r"password=\*\*\* dbname=db: "
            ),
        ),
        (
            "postgresql://u:PW@127.0.0.1:99999/db",
            (
                r"^error: the checkpoint URL postgresql://\*\*\*@127\.0\.0\.1:99999/db is malformed: "
                r"Port out of range 0-65535$"
            ),
        ),
        (
            "postgresql://u:PW@[::zz/db",
            (
                r"^error: the checkpoint URL postgresql://\*\*\*@\[::zz/db is malformed: "
                r"Invalid IPv6 URL$"
            ),
        ),
        (
            "mysql://u:PW@127.0.0.1/db",
            (
                r"^error: the checkpoint location mysql://\*\*\*@127\.0\.0\.1/db is a mysql:// URL, "
                r"which noterag does not keep threads in \(a SQLite file \(or sqlite:///path\), "
                r"a postgres:// URL or none\)$"
            ),
        ),
        (
            "sqlite://",
            r"^error: the checkpoint URL sqlite:// names no file: write sqlite:///path ",
        ),
    ]


@pytest.mark.parametrize("where", range(len(bad_locations())))
def test_a_location_that_is_no_file_is_one_line_and_makes_none(
    index_dir: Path,
    tmp_path: Path,
    where: int,
) -> None:
    pytest.importorskip(
        "psycopg", reason="psycopg is not installed (pip install 'noterag[postgres]')"
    )
    location, expected = bad_locations()[where]
    done = run_ask(index_dir, tmp_path, "a question", "--checkpoint", location)
    assert done.returncode == 1, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "PW" not in done.stderr, done.stderr
    import re

    assert re.match(expected, lines[0]), lines[0]
    assert list(tmp_path.iterdir()) == []  # no file named after the URL (and its password)


def test_a_sqlite_url_is_the_file_it_names(index_dir: Path, tmp_path: Path) -> None:
    import json

    server, url = start(HoldingModel(hold="none"))
    try:
        done = subprocess.run(
            [str(NOTERAG), "ask", FIRST, "--index", str(index_dir), "--model",
             f"openai:sim@{url}", "--skip-model-check", "--max-steps", "1",
             "--checkpoint", "sqlite:///kept.sqlite", "--thread", "u", "--json"],
            capture_output=True, text=True, cwd=tmp_path, timeout=WAIT, check=False,
        )  # fmt: skip
    finally:
        server.shutdown()
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["answer"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".sqlite") == ["kept.sqlite"]
    with sqlite3.connect(tmp_path / "kept.sqlite") as conn:
        threads = {row[0] for row in conn.execute("SELECT thread_id FROM checkpoints")}
    assert threads == {"u"}


def test_a_locked_or_unwritable_sqlite_file_is_named(index_dir: Path, tmp_path: Path) -> None:
    from noterag.server.checkpointer import open_checkpointer

    fresh, used = tmp_path / "fresh.sqlite", tmp_path / "used.sqlite"
    with open_checkpointer(str(used)):
        pass  # set up: the run's first write is what waits for the lock
    for database, expected in (
        (fresh, f"error: cannot open the checkpoint file {fresh}: database is locked"),
        (used, f"error: the checkpoint file {used}: database is locked"),
    ):
        holder = sqlite3.connect(database, isolation_level=None)
        holder.execute("PRAGMA journal_mode=WAL")  # as noterag keeps it
        holder.execute("CREATE TABLE IF NOT EXISTS other (x)")
        holder.execute("BEGIN EXCLUSIVE")  # another writer, for longer than SQLite waits (5 s)
        try:
            done = run_ask(index_dir, tmp_path, "a question", "--checkpoint", str(database))
        finally:
            holder.close()
        assert done.returncode == 1
        assert done.stderr.strip().splitlines()[-1:] == [expected]
        assert not done.stderr.strip().splitlines()[-1].startswith("error: unexpected")
    if Path("/dev/full").exists():
        done = run_ask(index_dir, tmp_path, "a question", "--checkpoint", "/dev/full")
        assert done.returncode == 1
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and "/dev/full" in lines[0]
        assert "unexpected" not in lines[0]


def test_undecodable_bytes_in_a_question_or_thread_are_one_line(
    index_dir: Path,
    tmp_path: Path,
) -> None:
    done = run_ask(index_dir, tmp_path, b"caf\xff?")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "error: the question is not valid UTF-8 (undecodable bytes)"
    ]
    done = run_ask(index_dir, tmp_path, "a question", "--thread", b"t\xff")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "error: the --thread value is not valid UTF-8 (undecodable bytes)"
    ]


def test_locations_are_read_before_anything_is_made() -> None:
    from noterag.base.errors import ConfigError
    from noterag.server.checkpointer import Location, describe, locate

    assert locate("sqlite:////var/x.sqlite") == Location("sqlite", "/var/x.sqlite")
    assert locate("sqlite:///x.sqlite") == Location("sqlite", "x.sqlite")
    assert locate("./host=x") == Location("sqlite", "./host=x")
    assert locate("NONE") == Location("none", "")
    assert locate("postgresql+psycopg://u:p@h/d") == Location("postgres", "postgresql://u:p@h/d")
    assert describe("postgresql://u:p@h:5/d") == "postgres://h:5/d"
    assert "p@" not in describe("postgresql://u:p@[::zz/d")
    for bad in ("redis://h", "sqlite:///x.db?mode=ro", "sqlite://host/x.db", "s3://b/k"):
        with pytest.raises(ConfigError):
            locate(bad)
