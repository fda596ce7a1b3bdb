"""The JavaScript SDK (`@langchain/langgraph-sdk`, what a web page or Agent Chat UI uses) streams
a run of every method from `langgraph dev`: the method's progress events (`custom`) arrive before
the answer, and the `messages-tuple` stream carries the answer node's tokens only, once, which
add up to the answer in the final state. Real local model, bundled sample index; the runs are
driven by tests/js/stream_methods.mjs, which prints each event it receives as a JSON line."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from test_server import QUESTION, RUNS, SHORT

pytestmark = pytest.mark.server

JS = Path(__file__).resolve().parent / "js"
# npm's own words when it cannot reach the registry.
_OFFLINE = re.compile(r"ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENETUNREACH|network")


def require_node() -> None:
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{' and '.join(missing)} not found on PATH")


def npm_ci(folder: Path) -> None:
    """Install ``folder``'s locked npm dependencies when node_modules is missing or older than
    package-lock.json (npm ci writes node_modules/.package-lock.json last)."""
    require_node()
    installed = folder / "node_modules" / ".package-lock.json"
    lock = folder / "package-lock.json"
    if installed.exists() and installed.stat().st_mtime >= lock.stat().st_mtime:
        return
    done = subprocess.run(
        ["npm", "ci", "--no-audit", "--no-fund"],
        cwd=folder,
        check=False,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        output = (done.stdout + done.stderr)[-4000:]
        if _OFFLINE.search(output):
            pytest.fail(f"npm ci in {folder} could not reach the npm registry:\n{output}")
        pytest.fail(f"npm ci in {folder} failed ({done.returncode}):\n{output}")


def node_env() -> dict[str, str]:
    # No API key of any kind reaches the local server from the JS side either.
    return {
        key: value
        for key, value in os.environ.items()
        if not key.endswith("_API_KEY") and not key.startswith(("LANGSMITH_", "LANGCHAIN_"))
    }


def run_node(script: str, *args: str) -> list[Any]:
    """Run tests/js/``script`` and parse the JSON lines it prints."""
    done = subprocess.run(
        ["node", str(JS / script), *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=900,
        env=node_env(),
    )
    assert done.returncode == 0, f"{script} failed:\n{done.stderr[-4000:]}"
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def stream(
    url: str, graph_id: str, graph_input: dict[str, Any], context: dict[str, Any]
) -> list[dict[str, Any]]:
    """Every event of one streamed run, as the JS client received them, in order."""
    return run_node(
        "stream_methods.mjs", url, graph_id, json.dumps(graph_input), json.dumps(context)
    )


# The progress events each method's short run must send (more may come: Amber filters and
# reviews only what it found).
PROGRESS = {
    "adaptive-note": {"passages", "note", "queries", "verdict"},
    "deepnote": {"passages", "note", "queries", "verdict"},
    "amber": {"passages", "note", "verdict", "sufficiency"},
    "resp": {"passages", "summaries", "judgment"},
    "vanilla": {"passages"},
    "no-retrieval": set(),
}
CONTEXTS = RUNS | {"deepnote": {"max_steps": 1}}
# Chat-shaped input (as Agent Chat UI sends it) for some methods, the question for the others.
INPUTS = {
    "deepnote": {"messages": [{"role": "user", "content": QUESTION}]},
    "resp": {"messages": [{"role": "human", "content": QUESTION}]},
}


@pytest.fixture(scope="module")
def js_deps() -> None:
    npm_ci(JS)


@pytest.mark.parametrize("graph_id", list(PROGRESS))
def test_js_client_streams_progress_then_the_answer_tokens(
    server: str, js_deps: None, graph_id: str
) -> None:
    graph_input = INPUTS.get(graph_id, {"question": QUESTION})
    events = stream(server, graph_id, graph_input, SHORT | CONTEXTS[graph_id])
    errors = [e["data"] for e in events if e["event"] == "error"]
    assert not errors, errors

    kinds = [e["event"] for e in events]
    custom = [(i, e["data"]) for i, e in enumerate(events) if e["event"] == "custom"]
    tokens = [(i, e["data"]) for i, e in enumerate(events) if e["event"] == "messages"]
    progress = [(i, event) for i, event in custom if event["type"] != "answer"]
    answer_events = [(i, event) for i, event in custom if event["type"] == "answer"]

    assert PROGRESS[graph_id] <= {event["type"] for _, event in progress}, [
        event["type"] for _, event in custom
    ]
    assert len(answer_events) == 1, [event["type"] for _, event in custom]
    assert tokens, f"no messages-tuple events: {kinds}"
    # Progress first, then the answer's tokens, then the answer event.
    first_token, last_token = tokens[0][0], tokens[-1][0]
    assert all(i < first_token for i, _ in progress), kinds
    assert last_token < answer_events[0][0]

    # Only the answer node's call streams (every internal call is tagged nostream), as one
    # message: the AI message the answer node writes to state is not streamed again.
    assert {meta["langgraph_node"] for _, (_, meta) in tokens} == {"answer"}
    assert {chunk["id"] for _, (chunk, _) in tokens} == {tokens[0][1][0]["id"]}
    streamed = "".join(chunk["content"] for _, (chunk, _) in tokens)

    final = [e["data"] for e in events if e["event"] == "values"][-1]
    answer = final["answer"]
    assert answer.strip() and answer == answer_events[0][1]["answer"]
    # The answer node strips the reply.
    assert streamed.strip() == answer
    assert final["question"] == QUESTION
    assert final["messages"][-1]["type"] == "ai" and final["messages"][-1]["content"] == answer
