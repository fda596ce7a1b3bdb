"""The command line: help texts, one-line errors, index + ask with a scripted model.

Most cases run in-process through typer's CliRunner (with ``noterag.models.load_chat_model``
patched to a scripted model); the error cases that involve real I/O also run as a real
``python -m noterag`` subprocess, to prove that no traceback reaches a terminal.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import typer.main
from langchain_core.language_models import BaseChatModel
from typer.testing import CliRunner

import noterag
import noterag.models
from noterag.cli import app
from scripted import QUESTION, VELMORA_ROWS, ScriptedModel, velmora_script

PASSAGES = VELMORA_ROWS
ASK_OPTIONS = [
    "--method", "--index", "--model", "--top-k", "--max-steps", "--max-failures",
    "--max-passages", "--task", "--profile", "--temperature", "--top-p", "--max-tokens",
    "--context", "--json", "--quiet",
]  # fmt: skip
INDEX_OPTIONS = ["--out", "--skip-bad-lines", "--force"]


# --------------------------------------------------------------------------- helpers


def cli(*args: str, env: dict[str, str] | None = None) -> Any:
    # Wide columns so rich does not wrap or elide option names in help output.
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200", **(env or {})})


def stderr_lines(result: Any) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.strip()]


def assert_one_error_line(result: Any, *fragments: str) -> str:
    """Exit code 1, nothing on stdout, exactly one ``error: ...`` line on stderr."""
    lines = stderr_lines(result)
    assert result.exit_code == 1, (result.exit_code, result.stderr, result.exception)
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines
    assert "Traceback" not in result.output
    assert result.stdout == ""
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def write_corpus(path: Path, rows: list[tuple[str, str]] = PASSAGES) -> Path:
    path.write_text(
        "".join(
            json.dumps({"id": f"p{i}", "title": title, "text": text}) + "\n"
            for i, (title, text) in enumerate(rows, 1)
        )
    )
    return path


@pytest.fixture
def index_dir(tmp_path: Path) -> Path:
    out = tmp_path / "index"
    result = cli("index", str(write_corpus(tmp_path / "corpus.jsonl")), "--out", str(out))
    assert result.exit_code == 0, result.output
    return out


def script(**overrides: Any) -> dict[str, Any]:
    # the first note is accepted, the second rejected
    return velmora_script(review=['{"status": "True"}', '{"status": "False"}']) | overrides


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Every model spec the CLI loads becomes one ScriptedModel; returns {"model", "specs"}."""
    state: dict[str, Any] = {"model": ScriptedModel(script=script()), "specs": []}

    def load(spec: Any = None, settings: Any = None, **kwargs: Any) -> Any:
        if isinstance(spec, BaseChatModel):  # as the real factory: objects pass through
            return spec
        state["specs"].append(spec)
        return state["model"]

    monkeypatch.setattr(noterag.models, "load_chat_model", load)
    return state


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_module(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "noterag", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )


# --------------------------------------------------------------------------- help


@pytest.mark.parametrize(("command", "expected"), [("ask", ASK_OPTIONS), ("index", INDEX_OPTIONS)])
def test_help_documents_every_option(command: str, expected: list[str]) -> None:
    result = cli(command, "--help")
    assert result.exit_code == 0, result.output
    click_command = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    declared = {opt for p in click_command.params for opt in p.opts if opt.startswith("--")}
    assert set(expected) <= declared
    for param in click_command.params:
        assert (param.help or "").strip(), f"{param.name} has no help text"
        for opt in param.opts:
            assert re.search(rf"{re.escape(opt)}\b", result.stdout), f"{opt} missing from help"


def test_help_names_the_method_defaults() -> None:
    # --max-failures defaults differ per method: the help says the chosen method's (--method's
    # default without one); tests/test_contributor_traps.py checks every method's
    text = " ".join(cli("ask", "--help").stdout.split())
    assert "rejected (deepnote's default: 2)" in text
    text = " ".join(cli("ask", "--method", "adaptive-note", "--help").stdout.split())
    assert "rejected (adaptive-note's default: 1)" in text


# --------------------------------------------------------------------------- one-line errors


def test_empty_question_is_one_error_line(index_dir: Path, scripted: dict) -> None:
    assert_one_error_line(cli("ask", "   ", "--index", str(index_dir)), "question is empty")
    assert scripted["specs"] == []  # refused before any model is loaded


def test_missing_index_names_the_directory(tmp_path: Path, scripted: dict) -> None:
    missing = tmp_path / "no-such-index"
    assert_one_error_line(cli("ask", QUESTION, "--index", str(missing)), str(missing))


def test_missing_index_from_env_names_the_directory(tmp_path: Path, scripted: dict) -> None:
    missing = tmp_path / "env-index"
    result = cli("ask", QUESTION, env={"NOTERAG_INDEX": str(missing)})
    assert_one_error_line(result, str(missing))


def test_malformed_corpus_line_is_reported_with_its_number(tmp_path: Path) -> None:
    corpus = tmp_path / "bad.jsonl"
    corpus.write_text('{"id": "1", "title": "A", "text": "a"}\n{"id": "2", "text": \n')
    out = tmp_path / "idx"
    assert_one_error_line(cli("index", str(corpus), "--out", str(out)), "line 2")
    assert not out.exists()


def test_skip_bad_lines_indexes_the_rest(tmp_path: Path) -> None:
    corpus = tmp_path / "bad.jsonl"
    corpus.write_text(
        '{"id": "1", "title": "A", "text": "a"}\nnot json\n{"id": "3", "title": "C", "text": "c"}\n'
    )
    result = cli("index", str(corpus), "--out", str(tmp_path / "idx"), "--skip-bad-lines")
    assert result.exit_code == 0, result.output
    assert "indexed 2 passages" in result.stderr
    assert "1 bad line skipped" in result.stderr


BAD_CORPUS_LINES = {
    "invalid JSON": b'{"id": "2", "text": ',
    "missing field": b'{"id": "2", "title": "no text"}',
    "duplicate id": b'{"id": "1", "text": "again"}',
    "empty passage": b'{"id": "2", "title": "", "text": "  "}',
    "non-UTF-8": b'{"id": "2", "text": "caf\xe9"}',
    "line too long": b"[" + b"0," * (8 * 2**20 + 1) + b"0]",
}


@pytest.mark.parametrize("kind", sorted(BAD_CORPUS_LINES))
def test_each_bad_corpus_line_is_one_error_naming_it(tmp_path: Path, kind: str) -> None:
    corpus = tmp_path / "bad.jsonl"
    good = b'{"id": "1", "title": "A", "text": "a"}\n'
    corpus.write_bytes(good + BAD_CORPUS_LINES[kind] + b"\n" + good.replace(b'"1"', b'"3"'))
    out = tmp_path / "idx"
    assert_one_error_line(
        cli("index", str(corpus), "--out", str(out)), "bad.jsonl line 2: ", "--skip-bad-lines"
    )
    assert not out.exists()


def test_skip_bad_lines_prints_the_count_by_kind(tmp_path: Path) -> None:
    corpus = tmp_path / "bad.jsonl"
    good = b'{"id": "1", "title": "A", "text": "a"}\n'
    corpus.write_bytes(good + b"\n".join(BAD_CORPUS_LINES.values()) + b"\nnot json\n")
    result = cli("index", str(corpus), "--out", str(tmp_path / "idx"), "--skip-bad-lines")
    assert result.exit_code == 0, result.output
    assert "indexed 1 passage" in result.stderr
    assert (
        "7 bad lines skipped: 1 bad field, 1 duplicate id, 1 empty passage, 2 invalid JSON, "
        "1 invalid UTF-8, 1 line too long)"
    ) in " ".join(result.stderr.split())


def test_missing_corpus_is_one_error_line(tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"
    assert_one_error_line(cli("index", str(missing), "--out", str(tmp_path / "idx")), str(missing))


def test_existing_index_needs_force(tmp_path: Path, index_dir: Path) -> None:
    corpus = write_corpus(tmp_path / "other.jsonl", PASSAGES[:3])
    assert_one_error_line(cli("index", str(corpus), "--out", str(index_dir)), "--force")
    manifest = json.loads((index_dir / "noterag-index.json").read_text())
    assert manifest["count"] == len(PASSAGES)  # untouched

    result = cli("index", str(corpus), "--out", str(index_dir), "--force")
    assert result.exit_code == 0, result.output
    assert "indexed 3 passages" in result.stderr
    assert json.loads((index_dir / "noterag-index.json").read_text())["count"] == 3


def test_force_never_replaces_a_directory_that_is_not_an_index(tmp_path: Path) -> None:
    mine = tmp_path / "my-files"
    mine.mkdir()
    (mine / "thesis.tex").write_text("precious")
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    assert_one_error_line(cli("index", str(corpus), "--out", str(mine), "--force"), str(mine))
    assert (mine / "thesis.tex").read_text() == "precious"


def test_unknown_model_spec_is_one_error_line(index_dir: Path) -> None:
    # the line lists every spec form, the in-process Hugging Face model's too
    assert_one_error_line(
        cli("ask", QUESTION, "--index", str(index_dir), "--model", "gpt9"),
        "gpt9",
        "'openai:<model>'",
        "'hf:<dir>'",
        "'local'",
    )


def test_the_shared_model_option_names_every_spec_form() -> None:
    # `align data --model` is the shared option (noterag.cli.options.model_option)
    text = " ".join(cli("align", "data", "--help").stdout.split())
    for form in ("'local'", "'openai:NAME'", "'openai:NAME@URL'", "'hf:DIR'"):
        assert form in text, form
    assert "The generator: 'local'" in text


def test_unreachable_endpoint_names_the_url(index_dir: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    result = cli(
        "ask", QUESTION, "--index", str(index_dir), "--model", "openai:x",
        env={"OPENAI_BASE_URL": url, "NOTERAG_BASE_URL": None, "OPENAI_API_KEY": "test"},
    )  # fmt: skip
    assert_one_error_line(result, url)


def test_invalid_option_value_is_a_usage_error(index_dir: Path, scripted: dict) -> None:
    # A value click cannot read is a usage error (exit 2); one out of the setting's range is
    # the context's to refuse, as for -c (exit 1): both one error line, before any model.
    result = cli("ask", QUESTION, "--index", str(index_dir), "--top-k", "many")
    assert result.exit_code == 2
    assert [line.split(":")[0] for line in stderr_lines(result)] == ["error"]
    assert "Traceback" not in result.output
    assert_one_error_line(
        cli("ask", QUESTION, "--index", str(index_dir), "--top-k", "0"), "top_k must be at least 1"
    )
    assert scripted["specs"] == []


def test_an_error_during_the_run_is_one_line(index_dir: Path, scripted: dict) -> None:
    def broken(prompt: str) -> str:
        raise RuntimeError("model exploded\nwith a second line")

    scripted["model"] = ScriptedModel(script=script(refine_query=broken))
    result = cli("ask", QUESTION, "--index", str(index_dir), "--quiet")
    line = assert_one_error_line(result, "RuntimeError", "model exploded with a second line")
    assert "NOTERAG_DEBUG" in line


# --------------------------------------------------------------------------- ask


def test_index_then_ask_streams_progress_and_prints_the_answer(
    index_dir: Path, scripted: dict
) -> None:
    result = cli(
        "ask", QUESTION, "--index", str(index_dir), "--model", "openai:whatever",
        "--max-steps", "3", "--max-failures", "1", "--max-passages", "100",
    )  # fmt: skip
    assert result.exit_code == 0, (result.output, result.exception)
    assert result.stdout == "1871\n"
    assert scripted["specs"] == ["openai:whatever"]
    model = scripted["model"]
    loop = ["refine_query", "accumulate", "review"]
    assert model.stages == ["init_note", *loop, *loop, "answer"]

    lines = stderr_lines(result)
    assert any(line.startswith("[step 0] retrieved") and "Velmora Bridge" in line for line in lines)
    assert "[step 0] initial note written (10 words)" in lines
    assert "[step 1] new query: When was Aurelio Fenwick born?" in lines
    assert "[step 1] new query: Marrowgate Institute" in lines
    assert "[step 1] note accepted (reviewed)" in lines
    assert "[step 2] note rejected (reviewed)" in lines
    assert lines.index("[step 1] note accepted (reviewed)") < lines.index(
        "[step 2] note rejected (reviewed)"
    )
    assert "answer: 1871" in lines  # stdout is not a terminal, so stderr repeats it
    summary = lines[-1]
    assert summary.startswith("stopped: 1 failed step(s) (max_failures = 1)")
    assert f"{len(model.calls)} LLM calls" in summary


def test_json_prints_the_final_state(index_dir: Path, scripted: dict) -> None:
    result = cli(
        "ask", QUESTION, "--index", str(index_dir), "--json", "--top-k", "2",
        "--max-steps", "2", "--max-passages", "100",
    )  # fmt: skip
    assert result.exit_code == 0, (result.output, result.exception)
    state = json.loads(result.stdout)
    assert state["answer"] == "1871"
    assert state["best_note"] == script()["accumulate"]
    assert [entry["step"] for entry in state["trace"]] == [0, 1, 2]
    assert [entry["verdict"] for entry in state["trace"]] == [None, True, False]
    assert state["steps"] == 2 and state["failures"] == 1
    assert "max_steps" in state["stop_reason"]
    assert state["llm_calls"] == len(scripted["model"].calls)
    # --top-k 2: at most two passages per query (one query at step 0, two per later step)
    assert len(state["trace"][0]["new_passage_ids"]) == 2
    assert all(len(entry["new_passage_ids"]) <= 4 for entry in state["trace"][1:])


def test_method_option_selects_adaptive_note(index_dir: Path, scripted: dict) -> None:
    scripted["model"] = ScriptedModel(script=script(review='{"status": "False"}'))
    result = cli("ask", QUESTION, "--index", str(index_dir), "--method", "adaptive-note", "--json")
    assert result.exit_code == 0, (result.output, result.exception)
    state = json.loads(result.stdout)
    # Adaptive-Note stops after one invalid update (T_IU = 1); DeepNote would go on to two.
    assert (state["steps"], state["failures"]) == (1, 1)
    assert "max_failures = 1" in state["stop_reason"]
    # Adaptive-Note's own prompt wording reached the model
    init_prompt = scripted["model"].prompts_for("init_note")[0]
    assert "Passage" in init_prompt or "[1]" in init_prompt


def test_sampling_options_reach_the_model(index_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[dict[str, Any]] = []

    class Recording(ScriptedModel):
        def _generate(
            self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any
        ) -> Any:
            seen.append(kw)
            return super()._generate(messages, stop, run_manager, **kw)

    monkeypatch.setattr(
        noterag.models, "load_chat_model", lambda *a, **k: Recording(script=script())
    )
    result = cli(
        "ask", QUESTION, "--index", str(index_dir), "--quiet", "--max-steps", "1",
        "--temperature", "0.5", "--top-p", "0.7", "--max-tokens", "33",
    )  # fmt: skip
    assert result.exit_code == 0, (result.output, result.exception)
    assert seen and all(
        (kw.get("temperature"), kw.get("top_p"), kw.get("max_tokens")) == (0.5, 0.7, 33)
        for kw in seen
    )


def test_quiet_prints_only_the_answer(index_dir: Path, scripted: dict) -> None:
    result = cli("ask", QUESTION, "--index", str(index_dir), "--quiet", "--max-steps", "1")
    assert result.exit_code == 0, (result.output, result.exception)
    assert result.stdout == "1871\n"
    assert result.stderr == ""


def test_index_defaults_to_env_then_to_the_sample(
    index_dir: Path, tmp_path: Path, scripted: dict
) -> None:
    from_env = cli(
        "ask", QUESTION, "--json", "--max-steps", "1", env={"NOTERAG_INDEX": str(index_dir)}
    )
    assert from_env.exit_code == 0, (from_env.output, from_env.exception)
    assert "sample" not in from_env.stderr
    ids = json.loads(from_env.stdout)["passage_ids"]
    assert ids and all(re.fullmatch(r"p\d+", i) for i in ids)  # the test corpus's ids

    sample = cli(
        "ask", QUESTION, "--json", "--max-steps", "1",
        env={"NOTERAG_INDEX": None, "NOTERAG_CACHE": str(tmp_path / "cache")},
    )  # fmt: skip
    assert sample.exit_code == 0, (sample.output, sample.exception)
    assert "using the bundled sample corpus" in sample.stderr
    ids = json.loads(sample.stdout)["passage_ids"]
    assert ids and all(re.fullmatch(r"s\d+", i) for i in ids)  # the sample corpus's ids
    assert (tmp_path / "cache" / "sample-index" / "noterag-index.json").is_file()


def test_stops_only_a_local_server_it_started(
    index_dir: Path, scripted: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = {"pid": None, "stops": 0}
    monkeypatch.setattr(noterag.models, "local_server_pid", lambda: server["pid"])

    def stop() -> None:
        server["stops"] += 1
        server["pid"] = None

    monkeypatch.setattr(noterag.models, "stop_local_server", stop)
    load = noterag.models.load_chat_model

    def start_then_load(spec: Any = None, *args: Any, **kwargs: Any) -> Any:
        if spec == "local" and server["pid"] is None:
            server["pid"] = 4242
        return load(spec, *args, **kwargs)

    monkeypatch.setattr(noterag.models, "load_chat_model", start_then_load)
    ask = ("ask", QUESTION, "--index", str(index_dir), "--quiet", "--max-steps", "1")

    # Already running (say, shared by the embedding program): not ours to stop.
    server["pid"] = 1111
    assert cli(*ask, "--model", "local").exit_code == 0
    assert server == {"pid": 1111, "stops": 0}

    # Started by this command: stopped before it returns.
    server["pid"] = None
    assert cli(*ask, "--model", "local").exit_code == 0
    assert server == {"pid": None, "stops": 1}


# --------------------------------------------------------------------------- real processes


def test_python_dash_m_errors_reach_the_terminal_as_one_line(tmp_path: Path) -> None:
    corpus = tmp_path / "bad.jsonl"
    corpus.write_text('{"id": "1", "text": "a"}\n[1, 2]\n')
    bad_corpus = run_module("index", str(corpus), "--out", str(tmp_path / "idx"))
    assert bad_corpus.returncode == 1
    assert bad_corpus.stderr.strip().splitlines() == [
        (
            "error: bad.jsonl line 2: expected a JSON object, got list "
            "(--skip-bad-lines skips such lines)"
        )
    ]
    missing = run_module("ask", QUESTION, "--index", str(tmp_path / "missing"))
    assert missing.returncode == 1
    assert len(missing.stderr.strip().splitlines()) == 1, missing.stderr
    assert str(tmp_path / "missing") in missing.stderr


def test_python_dash_m_unreachable_endpoint(tmp_path: Path) -> None:
    out = tmp_path / "idx"
    built = run_module("index", str(write_corpus(tmp_path / "c.jsonl")), "--out", str(out))
    assert built.returncode == 0, built.stderr
    assert built.stdout == ""  # the summary goes to stderr
    url = f"http://127.0.0.1:{closed_port()}/v1"
    result = run_module(
        "ask", QUESTION, "--index", str(out), "--model", "openai:some-model",
        env={"OPENAI_BASE_URL": url, "NOTERAG_BASE_URL": "", "OPENAI_API_KEY": "test"},
    )  # fmt: skip
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and url in lines[0], result.stderr
    assert result.stdout == ""


class _HangingEndpoint(ThreadingHTTPServer):
    """An OpenAI-compatible endpoint that lists models but never answers a completion."""

    daemon_threads = True

    def __init__(self) -> None:
        self.release = threading.Event()
        self.asked = threading.Event()  # a completion request is in flight
        release, asked = self.release, self.asked

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # /v1/models, the CLI's reachability check
                body = json.dumps({"object": "list", "data": [{"id": "x", "object": "model"}]})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body.encode())

            def do_POST(self) -> None:
                asked.set()
                release.wait(120)

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)


def test_ctrl_c_during_a_run_leaves_with_one_line(tmp_path: Path) -> None:
    out = tmp_path / "idx"
    assert (
        run_module("index", str(write_corpus(tmp_path / "c.jsonl")), "--out", str(out)).returncode
        == 0
    )
    endpoint = _HangingEndpoint()
    threading.Thread(target=endpoint.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{endpoint.server_address[1]}/v1"
    # A test runner started in the background may ignore SIGINT, and children inherit that:
    # restore Python's handler, then run the CLI as `noterag` would.
    restore_then_run = (
        "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "from noterag.cli import main; main()"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", restore_then_run, "ask", QUESTION, "--index", str(out),
         "--model", "openai:x"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OPENAI_BASE_URL": url, "OPENAI_API_KEY": "test", "NOTERAG_BASE_URL": ""},
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        seen = []
        for line in proc.stderr:  # the first retrieval precedes the first (hanging) model call
            seen.append(line)
            if line.startswith("[step 0] retrieved"):
                break
        assert seen and seen[-1].startswith("[step 0] retrieved"), seen
        # the state under test: a model request in flight (on a loaded machine it may come
        # seconds after the retrieval's line)
        assert endpoint.asked.wait(120), "no model request came"
        proc.send_signal(signal.SIGINT)
        # The model request never returns: the CLI must not wait for it. It leaves at once
        # (os._exit in its SIGINT handler); the bound only turns a hang into a failure instead
        # of a stuck test run, generous for a machine under load.
        stdout, rest = proc.communicate(timeout=120)
    finally:
        proc.kill()
        endpoint.release.set()
        endpoint.shutdown()
    assert proc.returncode == 1
    assert rest.strip().splitlines() == ["error: interrupted"]
    assert stdout == ""


def test_python_dash_m_help_and_version() -> None:
    result = run_module("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"noterag {noterag.__version__}"
    usage = run_module("ask", "--help")
    assert usage.returncode == 0 and "Usage: noterag ask" in usage.stdout


# --------------------------------------------------------------------------- every method


EVERY_STAGE = {
    "filter": '{"NLI result": "useful"}',
    "sufficiency": '{"status": "True"}',
    "judge": "Yes",
}


@pytest.mark.parametrize("method", noterag.METHODS)
def test_every_method_runs_through_ask(method: str, index_dir: Path, scripted: dict[str, Any]):
    scripted["model"] = ScriptedModel.for_method(
        method, script=script(**EVERY_STAGE), default="1871"
    )
    result = cli("ask", QUESTION, "--method", method, "--index", str(index_dir), "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["answer"] == "1871"
    # the answer is the last call, where the method answers with a model call (SuRe's is its
    # winning candidate)
    assert scripted["model"].stages[-1] == "answer" or "answer" not in noterag.METHODS[method].roles


def test_context_pairs_reach_the_method(index_dir: Path, scripted: dict[str, Any]):
    scripted["model"] = ScriptedModel(script=script(**EVERY_STAGE), default="1. Aurelio Fenwick")
    result = cli(
        "ask", QUESTION, "--method", "amber", "--index", str(index_dir),
        "-c", "chunk_filter=false", "--context", "sentence_filter=no",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    stages = scripted["model"].stages
    assert "filter" not in stages and "extract" not in stages and "reviewer" in stages
    assert "memory sufficient to answer" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--method", "amber", "--max-failures", "2"], "amber has no --max-failures setting"),
        (["-c", "max_step=2"], "unknown setting 'max_step'"),
        (["-c", "max_steps"], "--context takes KEY=VALUE"),
        (["--method", "amber", "-c", "chunk_filter=maybe"], "chunk_filter takes true or false"),
        (["-c", "top_k=many"], "top_k takes a number"),
        (["-c", "top_k=0"], "top_k must be at least 1"),
    ],
)
def test_settings_a_method_does_not_have_are_one_error(
    args: list[str], message: str, index_dir: Path
):
    assert_one_error_line(cli("ask", QUESTION, "--index", str(index_dir), *args), message)


def test_methods_lists_every_method_and_its_settings():
    result = cli("methods")
    assert result.exit_code == 0
    for method in noterag.METHODS:
        assert method in result.stdout
    assert "chunk_filter" in result.stdout and "max_failures" in result.stdout


def test_json_output_holds_the_answer_as_a_chat_message(index_dir: Path, scripted: dict[str, Any]):
    result = cli("ask", QUESTION, "--index", str(index_dir), "--json")
    assert result.exit_code == 0, result.output
    messages = json.loads(result.stdout)["messages"]
    assert messages[-1]["type"] == "ai" and messages[-1]["data"]["content"] == "1871"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_index_into_unreachable_elasticsearch_is_one_line(tmp_path: Path):
    pytest.importorskip(
        "elasticsearch", reason="the es extra (langchain-elasticsearch) is not installed"
    )
    url = f"http://127.0.0.1:{_closed_port()}"
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    assert_one_error_line(cli("index", str(corpus), "--es", url, "--index", "hotpot"), url)
    assert_one_error_line(cli("index", str(corpus), "--es", url), "--es takes --index NAME")
    assert_one_error_line(cli("index", str(corpus)), "--out DIR is required")


def test_index_dense_then_ask_over_it(tmp_path: Path, scripted: dict[str, Any]):
    pytest.importorskip(
        "sentence_transformers", reason="the dense extra (sentence-transformers) is not installed"
    )
    corpus, out = write_corpus(tmp_path / "corpus.jsonl"), tmp_path / "dense"
    built = cli("index", str(corpus), "--out", str(out), "--dense")
    assert built.exit_code == 0, built.output
    assert "passages/s" in built.stderr
    result = cli("ask", QUESTION, "--index", f"dense:{out}", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["passage_ids"]


def test_a_prompt_file_replaces_one_prompt_for_the_run(
    index_dir: Path, scripted: dict[str, Any], tmp_path: Path
):
    variant = tmp_path / "refine.txt"
    variant.write_text(
        "Two new questions about {query}, please. Known: {note} | asked: {query_log}"
    )
    result = cli("ask", QUESTION, "--index", str(index_dir), "--max-steps", "1",
                 "--prompt", f"refine_query={variant}")  # fmt: skip
    assert result.exit_code == 0, result.output
    (sent,) = scripted["model"].prompts_for("refine_query")
    assert sent.startswith(f"Two new questions about {QUESTION}, please. Known: ")
    # the verbatim prompt is untouched for the next run
    assert cli("ask", QUESTION, "--index", str(index_dir), "--max-steps", "1").exit_code == 0
    assert scripted["model"].prompts_for("refine_query")[1].startswith("Task: Based on the notes")


@pytest.mark.parametrize(
    ("pair", "message"),
    [
        ("nonsense={file}", "no prompt named 'nonsense'; prompts: init_note, refine_query"),
        (
            "refine_query=/nonexistent/p.txt",
            "--prompt refine_query: cannot read /nonexistent/p.txt",
        ),
        ("refine_query", "--prompt takes NAME=FILE"),
    ],
)
def test_bad_prompt_overrides_are_one_error_line_before_any_model(
    index_dir: Path, scripted: dict[str, Any], tmp_path: Path, pair: str, message: str
):
    (tmp_path / "p.txt").write_text("x {query}")
    result = cli(
        "ask", QUESTION, "--index", str(index_dir), "--prompt", pair.format(file=tmp_path / "p.txt")
    )
    assert_one_error_line(result, message)
    assert scripted["model"].calls == []


def test_an_unknown_method_is_a_usage_error_naming_the_methods(index_dir: Path):
    result = cli("ask", QUESTION, "--method", "deepnot", "--index", str(index_dir))
    assert result.exit_code == 2
    assert "'deepnot' is not a method; choose one of adaptive-note, deepnote" in result.output


def test_methods_says_which_profile_produced_the_published_numbers():
    out = cli("methods").stdout
    assert (
        "official (reproduces the official code: the configuration that produced the published numbers)"
        in " ".join(out.split())
    )
    assert "prompts (--prompt NAME=FILE): init_note, refine_query" in " ".join(out.split())


def test_methods_says_what_profile_original_changes():
    out = " ".join(cli("methods").stdout.split())
    assert "original (the baseline as its own paper and code ran it (docs/deviations.md))" in out
    assert "profile original sets (unless given): qa_reader=True, top_k=6, top_p=1.0, " in out


def test_ask_refuses_profile_original_for_a_method_without_one(
    index_dir: Path, scripted: dict[str, Any]
):
    result = cli(
        "ask", QUESTION, "--index", str(index_dir), "--method", "vanilla", "--profile", "original"
    )
    assert_one_error_line(result, "vanilla has no original profile")
    assert scripted["model"].calls == []


def test_ask_refuses_a_task_the_method_cannot_answer_before_any_model(
    index_dir: Path, scripted: dict[str, Any]
):
    result = cli(
        "ask", QUESTION, "--index", str(index_dir), "--method", "deepnote", "--task", "crud"
    )
    assert_one_error_line(result, "deepnote cannot answer task 'crud'")
    assert scripted["specs"] == [] and scripted["model"].calls == []
