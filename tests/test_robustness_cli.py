"""What a hostile or careless user found (issue 16), through the command line: usage errors as
one line, flags and ``-c`` agreeing, terminal escapes from corpus, model and endpoint stripped,
output files never clobbered, long passages cut in prompts, over-long questions refused, and the
endpoint checks (pre-check, base URL, replies that are no completion).

Runs in-process through typer's CliRunner with the model patched to a script (test_cli's
fixtures), or against small hand-written HTTP endpoints on 127.0.0.1."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import test_cli
from test_cli import assert_one_error_line, cli, script, stderr_lines, write_corpus

from noterag.base.errors import ConfigError
from noterag.base.terminal import printable
from scripted import QUESTION, VELMORA_ROWS, ScriptedModel

index_dir, scripted = test_cli.index_dir, test_cli.scripted

# Every byte a terminal may act on: ESC, the C1 range (0x9b is an 8-bit CSI), DEL, and the C0
# controls but newline and tab.
TERMINAL_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
BOX = "╭"  # typer/rich's error panel


def no_terminal_control(text: str) -> bool:
    return TERMINAL_CONTROL.search(text) is None


# --------------------------------------------------------------------------- 14: usage errors


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["ask", QUESTION, "--frobnicate"], "No such option: --frobnicate"),
        (["ask"], "Missing argument 'question'"),
        (["ask", QUESTION, "--top-k", "many"], "Invalid value for '--top-k'"),
        (["ask", QUESTION, "--method", "deepnot"], "'deepnot' is not a method"),
        (["ask", QUESTION, "--task", "poetry"], "'poetry' is not one of"),
        (["trace"], "Missing argument 'run_file'"),
        (["frobnicate"], "No such command 'frobnicate'"),
        (["eval", "--method", "deepnote"], "Missing option '--dataset'"),
    ],
)
def test_usage_errors_are_one_error_line_with_exit_2(args: list[str], fragment: str) -> None:
    result = cli(*args)
    lines = stderr_lines(result)
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert fragment in lines[0]
    assert BOX not in result.output and "Traceback" not in result.output
    assert result.stdout == ""
    # the line says where the options are explained
    assert "--help" in lines[0]


def test_help_and_no_arguments_still_print_help() -> None:
    assert cli("ask", "--help").exit_code == 0
    bare = cli()
    assert "Usage" in bare.output and "ask" in bare.output


@pytest.mark.parametrize(
    ("flag", "pair", "message"),
    [
        (["--temperature", "-5"], "temperature=-5", "temperature must be between 0 and 2, not -5"),
        (["--top-p", "2"], "top_p=2", "top_p must be between 0 and 1"),
        (["--max-tokens", "0"], "max_tokens=0", "max_tokens must be at least 1"),
        (["--top-k", "0"], "top_k=0", "top_k must be at least 1"),
        (["--max-steps", "-1"], "max_steps=-1", "max_steps must not be negative"),
        (["--temperature", "nan"], "temperature=nan", "temperature must be a finite number"),
        (["--top-p", "inf"], "top_p=inf", "top_p must be a finite number"),
    ],
)
def test_flags_and_context_pairs_refuse_the_same_values_alike(
    index_dir: Path, scripted: dict, flag: list[str], pair: str, message: str
) -> None:
    by_flag = cli("ask", QUESTION, "--index", str(index_dir), *flag)
    by_pair = cli("ask", QUESTION, "--index", str(index_dir), "-c", pair)
    assert assert_one_error_line(by_flag, message) == assert_one_error_line(by_pair, message)
    assert scripted["specs"] == []  # refused before any model was set up


def test_nan_and_infinity_are_refused_by_the_context_itself() -> None:
    from noterag.core.context import DeepNoteContext

    for value in (float("nan"), float("inf"), -float("inf")):
        with pytest.raises(ConfigError, match="temperature must be a finite number"):
            DeepNoteContext(temperature=value)


def test_a_flag_and_a_context_pair_for_one_setting_must_agree(
    index_dir: Path, scripted: dict
) -> None:
    result = cli("ask", QUESTION, "--index", str(index_dir), "--temperature", "0.5",
                 "-c", "temperature=0.7")  # fmt: skip
    assert_one_error_line(result, "--temperature 0.5", "-c temperature=0.7", "give one")
    assert scripted["specs"] == []
    # the same value twice is no conflict
    same = cli("ask", QUESTION, "--index", str(index_dir), "--top-k", "3", "-c", "top_k=3",
               "--json")  # fmt: skip
    assert same.exit_code == 0, same.output
    assert json.loads(same.stdout)["llm_calls"] > 0


# --------------------------------------------------------------------------- 14: trace --id


def _results_file(tmp_path: Path, ids: list[str]) -> Path:
    rows = [{"id": qid, "question": f"question {qid}?", "answer": qid, "trace": []} for qid in ids]
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_every_trace_id_writes_its_own_default_file(tmp_path: Path) -> None:
    ids = ["a", "b", "../../etc/x", "../../etc:x"]
    results = _results_file(tmp_path, ids)
    written: list[Path] = []
    for qid in ids:
        result = cli("trace", str(results), "--id", qid)
        assert result.exit_code == 0, result.output
        (line,) = [ln for ln in stderr_lines(result) if "trace written to" in ln]
        written.append(Path(line.split("trace written to ", 1)[1]))
    assert len(set(written)) == len(ids)  # no two ids share a page
    for qid, path in zip(ids, written):
        assert path.parent == tmp_path  # an id never leads the page out of the run's directory
        assert path.name.startswith("results.") and path.suffix == ".html"
        assert f"question {qid}?" in path.read_text()
    assert written[0].name == "results.a.html"


# --------------------------------------------------------------------------- 7: terminal escapes


HOSTILE_TITLE = "Velmora Bridge\x1b]0;pwned\x07\x1b[2J"
HOSTILE_TEXT = (
    "The Velmora Bridge \x9b31m was designed\r by the architect Aurelio Fenwick.\x1b[?1049h"
)


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("plain text\nline two\tend", "plain text\nline two\tend"),
        ("\x1b[31mred\x1b[0m", "red"),  # CSI sequences go whole
        ("title\x1b]0;pwned\x07after", "titleafter"),  # OSC with BEL
        ("a\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\b", "alinkb"),  # OSC with ST (hyperlink)
        ("a\x1bPq#0;2;0;0;0\x1b\\b", "ab"),  # DCS
        ("a\x1b(0b", "ab"),  # charset switch
        ("a\x1bcb", "ab"),  # reset
        ("a\x9b2Jb\x9d0;x\x9cc", "abc"),  # 8-bit CSI and OSC
        ("carriage\rreturn\x08\x07\x00\x7f", "carriagereturn"),
        (
            "unterminated \x1b]0;title",
            "unterminated 0;title",
        ),  # the introducer goes, the text stays
        ("Zürich — 東京 🚀", "Zürich — 東京 🚀"),
    ],
)
def test_printable_strips_what_a_terminal_would_act_on(raw: str, shown: str) -> None:
    assert printable(raw) == shown
    assert no_terminal_control(printable(raw).replace("\n", "").replace("\t", ""))


def _hostile_index(tmp_path: Path) -> Path:
    rows = [(HOSTILE_TITLE, HOSTILE_TEXT), *VELMORA_ROWS[1:]]
    corpus = write_corpus(tmp_path / "hostile.jsonl", rows)
    out = tmp_path / "hostile-index"
    assert cli("index", str(corpus), "--out", str(out)).exit_code == 0
    return out


def test_corpus_and_model_text_reach_the_terminal_without_control_characters(
    tmp_path: Path, scripted: dict
) -> None:
    scripted["model"] = ScriptedModel(
        script=script(
            refine_query="1. When was \x1b[8mAurelio\x1b[0m Fenwick born?\x1b]0;x\x07",
            answer="\x1b[2J\x1b[H1871\x9b\r",
        )
    )
    result = cli("ask", QUESTION, "--index", str(_hostile_index(tmp_path)), "--max-steps", "1")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "1871"
    assert "Velmora Bridge" in result.stderr and "Aurelio Fenwick born?" in result.stderr
    assert no_terminal_control(result.stdout.replace("\n", ""))
    assert no_terminal_control(result.stderr.replace("\n", ""))


def test_json_output_escapes_control_characters_and_keeps_the_data(
    tmp_path: Path, scripted: dict
) -> None:
    scripted["model"] = ScriptedModel(script=script(answer="1871\x9b\x1b[2J"))
    result = cli("ask", QUESTION, "--index", str(_hostile_index(tmp_path)), "--json",
                 "--max-steps", "1")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert no_terminal_control(result.stdout.replace("\n", ""))
    state = json.loads(result.stdout)
    assert state["answer"] == "1871\x9b\x1b[2J"  # escaped, not lost
    assert {p["title"] for p in state["retrieved_passages"]} >= {HOSTILE_TITLE}


class _Endpoint(BaseHTTPRequestHandler):
    """Answers every request with the server's ``reply(handler)`` (status, content type, body)."""

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self.server.seen.append((self.command, self.path))  # type: ignore[attr-defined]
        status, ctype, body = self.server.reply(self)  # type: ignore[attr-defined]
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _answer


Reply = Callable[[BaseHTTPRequestHandler], tuple[int, str, str]]


@pytest.fixture
def endpoint() -> Iterator[Callable[[Reply], str]]:
    """``endpoint(reply)`` starts a server on 127.0.0.1 answering with ``reply`` and returns its
    base URL (…/v1); ``endpoint.seen`` lists the (method, path) it was asked."""
    servers: list[ThreadingHTTPServer] = []

    def start(reply: Reply) -> str:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Endpoint)
        server.reply = reply  # type: ignore[attr-defined]
        server.seen = start.seen  # type: ignore[attr-defined]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/v1"

    start.seen = []  # type: ignore[attr-defined]
    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


COMPLETION = {
    "id": "c1", "object": "chat.completion", "created": 0, "model": "m",
    "choices": [{"index": 0, "finish_reason": "stop",
                 "message": {"role": "assistant", "content": "1871"}}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
}  # fmt: skip


def ask_endpoint(index: Path, url: str, *more: str) -> Any:
    return cli("ask", QUESTION, "--index", str(index), "--model", f"openai:m@{url}",
               "--method", "no-retrieval", "--max-retries", "0", "--timeout", "20", *more,
               env={"OPENAI_BASE_URL": None, "NOTERAG_BASE_URL": None, "OPENAI_API_KEY": "k",
                    "NOTERAG_SKIP_MODEL_CHECK": None})  # fmt: skip


def test_endpoint_error_text_reaches_the_terminal_without_control_characters(
    index_dir: Path, endpoint: Any
) -> None:
    def reply(handler: BaseHTTPRequestHandler) -> tuple[int, str, str]:
        if handler.command == "GET":
            return 200, "application/json", json.dumps({"object": "list", "data": []})
        message = "overloaded\x1b]0;pwned\x07\x1b[2J\x9b2J please retry"
        return 400, "application/json", json.dumps({"error": {"message": message}})

    result = ask_endpoint(index_dir, endpoint(reply))
    line = assert_one_error_line(result, "HTTP 400", "overloaded", "please retry")
    assert no_terminal_control(line)


# --------------------------------------------------------------------------- 8: output files


def _saved_run(tmp_path: Path) -> Path:
    run = {"question": QUESTION, "answer": "1871", "method": "deepnote", "trace": []}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run))
    return path


def test_trace_refuses_to_overwrite_a_file_it_did_not_write(tmp_path: Path) -> None:
    run = _saved_run(tmp_path)
    corpus = write_corpus(tmp_path / "small.jsonl")
    before = corpus.read_bytes()
    result = cli("trace", str(run), "--html", str(corpus))
    assert_one_error_line(result, str(corpus), "not a page noterag wrote", "--force")
    assert corpus.read_bytes() == before
    # --force overwrites it
    assert cli("trace", str(run), "--html", str(corpus), "--force").exit_code == 0
    assert "<title>noterag trace" in corpus.read_text()


def test_trace_overwrites_its_own_page_and_an_empty_file(tmp_path: Path) -> None:
    run = _saved_run(tmp_path)
    page = tmp_path / "page.html"
    assert cli("trace", str(run), "--html", str(page)).exit_code == 0
    first = page.read_text()
    run.write_text(run.read_text().replace("1871", "1872"))
    assert cli("trace", str(run), "--html", str(page)).exit_code == 0
    assert page.read_text() != first and "1872" in page.read_text()
    empty = tmp_path / "empty.html"
    empty.touch()
    assert cli("trace", str(run), "--html", str(empty)).exit_code == 0


def test_ask_html_refuses_a_file_it_did_not_write_before_any_model(
    index_dir: Path, scripted: dict, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.html"
    notes.write_text("<html><body>my notes</body></html>")
    result = cli("ask", QUESTION, "--index", str(index_dir), "--html", str(notes))
    assert_one_error_line(result, str(notes), "--force")
    assert scripted["specs"] == [] and notes.read_text() == "<html><body>my notes</body></html>"
    forced = cli("ask", QUESTION, "--index", str(index_dir), "--html", str(notes), "--force")
    assert forced.exit_code == 0, forced.output
    assert "<title>noterag trace" in notes.read_text()


@pytest.mark.parametrize(
    ("where", "fragment"),
    [
        ("/proc/noterag-test/x.html", "does not exist"),
        ("/proc/noterag-test.html", "cannot write"),
        ("{tmp}/afile/x.html", "is not a directory"),
    ],
)
def test_ask_html_to_an_unwritable_path_fails_before_any_model(
    index_dir: Path, scripted: dict, tmp_path: Path, where: str, fragment: str
) -> None:
    (tmp_path / "afile").write_text("x")
    result = cli("ask", QUESTION, "--index", str(index_dir), "--html", where.format(tmp=tmp_path))
    assert_one_error_line(result, fragment)
    assert scripted["specs"] == []


def test_a_failed_write_leaves_the_old_page_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import noterag.base.files

    run = _saved_run(tmp_path)
    page = tmp_path / "page.html"
    assert cli("trace", str(run), "--html", str(page)).exit_code == 0
    before = page.read_bytes()

    def broken_replace(src: Any, dst: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(noterag.base.files.os, "replace", broken_replace)
    assert_one_error_line(cli("trace", str(run), "--html", str(page)), "No space left on device")
    assert page.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["page.html", "run.json"]


def _run_dir(path: Path) -> Path:
    path.mkdir()
    row = {"id": "a", "question": "q?", "golds": ["x"], "task": "multihop", "answer": "x",
           "metrics": {"em": 100.0, "f1": 100.0, "acc": 100.0}, "llm_calls": 3,
           "prompt_tokens": 10, "completion_tokens": 2, "passages": 2, "passage_ids": ["p1", "p2"],
           "latency_s": 1.0, "started_at": 0.0, "finished_at": 1.0, "error": None}  # fmt: skip
    (path / "run.json").write_text(json.dumps(
        {"method": "deepnote", "model": "m", "context": {}, "dataset": "d", "index": "i",
         "questions": 1}))  # fmt: skip
    (path / "results.jsonl").write_text(json.dumps(row) + "\n")
    return path


def test_the_plot_never_overwrites_a_png_it_did_not_write(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from noterag.eval.report import plot

    runs = [_run_dir(tmp_path / "run")]
    photo = tmp_path / "photo.png"
    photo.write_bytes(b"\x89PNG\r\n\x1a\n" + b"holiday" * 100)
    with pytest.raises(ConfigError, match="not a plot noterag wrote"):
        plot(runs, photo)
    assert photo.read_bytes().endswith(b"holiday")
    result = cli("compare", str(runs[0]), "--plot", str(photo))
    assert result.exit_code == 1 and "not a plot noterag wrote" in result.stderr
    assert photo.read_bytes().endswith(b"holiday")
    # its own plot is replaced, and --force replaces anything
    mine = tmp_path / "mine.png"
    plot(runs, mine)
    plot(runs, mine)
    plot(runs, photo, force=True)
    assert not photo.read_bytes().endswith(b"holiday")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.png", "photo.png", "run"]


def test_index_force_keeps_files_the_index_did_not_write(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "corpus.jsonl")
    out = tmp_path / "idx"
    assert cli("index", str(corpus), "--out", str(out)).exit_code == 0
    (out / "my-notes.txt").write_text("do not lose me")
    result = cli("index", str(corpus), "--out", str(out), "--force")
    assert_one_error_line(result, "my-notes.txt")
    assert (out / "my-notes.txt").read_text() == "do not lose me"
    # the index's own files alone are replaced as before
    (out / "my-notes.txt").unlink()
    assert cli("index", str(corpus), "--out", str(out), "--force").exit_code == 0


# --------------------------------------------------------------------------- 9: long input


def test_a_long_passage_is_cut_in_prompts_and_the_cut_counted(
    tmp_path: Path, scripted: dict
) -> None:
    long_text = "Aurelio Fenwick was born in 1871. " + "filler words " * 20_000
    rows = [VELMORA_ROWS[0], ("Aurelio Fenwick", long_text), *VELMORA_ROWS[2:]]
    out = tmp_path / "idx"
    assert (
        cli("index", str(write_corpus(tmp_path / "c.jsonl", rows)), "--out", str(out)).exit_code
        == 0
    )
    args = ["ask", "When was Aurelio Fenwick born?", "--index", str(out), "--method", "vanilla"]
    result = cli(*args, "-c", "max_passage_chars=1000", "--json")
    assert result.exit_code == 0, result.output
    (prompt,) = scripted["model"].prompts_for("answer")
    assert "born in 1871" in prompt and len(prompt) < 1000 * 5 + 2000
    state = json.loads(result.stdout)
    assert state["fallbacks"] == {"passage_truncated": 1}
    summary = cli(*args, "-c", "max_passage_chars=1000")
    assert "1 passage cut to 1,000 characters" in summary.stderr
    assert "unreadable" not in summary.stderr
    # the default cap holds too: no prompt of hundreds of thousands of characters
    assert cli(*args).exit_code == 0
    assert len(scripted["model"].prompts_for("answer")[-1]) < 30_000
    # and no cap sends the passage whole
    assert cli(*args, "-c", "max_passage_chars=none").exit_code == 0
    assert long_text in scripted["model"].prompts_for("answer")[-1]


def test_a_passage_cap_below_one_is_refused(index_dir: Path, scripted: dict) -> None:
    result = cli("ask", QUESTION, "--index", str(index_dir), "-c", "max_passage_chars=0")
    assert_one_error_line(result, "max_passage_chars must be at least 1")


def test_an_over_long_question_is_one_error_line_before_any_model(
    index_dir: Path, scripted: dict
) -> None:
    result = cli("ask", "why? " * 10_000, "--index", str(index_dir))
    assert_one_error_line(result, "the question is 49,999 characters long", "at most 8,000")
    assert scripted["specs"] == []


# --------------------------------------------------------------------------- 10: the pre-check


def _completions_only(handler: BaseHTTPRequestHandler) -> tuple[int, str, str]:
    if handler.command == "GET":  # a server without GET /v1/models
        return 404, "text/html", "<html><title>404 Not Found</title></html>"
    return 200, "application/json", json.dumps(COMPLETION)


def test_an_endpoint_without_a_models_list_is_accepted(index_dir: Path, endpoint: Any) -> None:
    result = ask_endpoint(index_dir, endpoint(_completions_only))
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "1871"


def test_the_pre_check_can_be_skipped(index_dir: Path, endpoint: Any) -> None:
    url = endpoint(_completions_only)
    assert ask_endpoint(index_dir, url, "--skip-model-check").exit_code == 0
    assert ("GET", "/v1/models") not in endpoint.seen
    assert [m for m, _ in endpoint.seen] == ["POST"]


def test_the_pre_check_can_be_skipped_from_the_environment(endpoint: Any, monkeypatch: Any) -> None:
    from noterag.models import ModelSettings, check_model_reachable, load_chat_model

    model = load_chat_model(
        "openai:m", ModelSettings(), base_url=endpoint(_completions_only), api_key="k"
    )
    monkeypatch.setenv("NOTERAG_SKIP_MODEL_CHECK", "1")
    check_model_reachable(model)
    assert endpoint.seen == []


def test_the_pre_check_honours_the_timeout(endpoint: Any) -> None:
    from noterag.models import ModelSettings, check_model_reachable, load_chat_model

    def slow(handler: BaseHTTPRequestHandler) -> tuple[int, str, str]:
        time.sleep(6.0)  # longer than the old fixed 5 s, well within the run's timeout
        return 200, "application/json", json.dumps({"object": "list", "data": []})

    model = load_chat_model(
        "openai:m", ModelSettings(timeout=30, max_retries=0), base_url=endpoint(slow), api_key="k"
    )
    check_model_reachable(model)  # no error: the endpoint answered within the run's timeout


# --------------------------------------------------------------------------- 11: base URLs


@pytest.mark.parametrize(
    "spec",
    ["openai:sim@localhost:8000/v1", "openai:sim@127.0.0.1:8000", "openai:sim@gpu-box/v1",
     "openai:sim@ftp://localhost/v1"],
)  # fmt: skip
def test_a_base_url_without_http_is_refused(spec: str, index_dir: Path) -> None:
    result = cli("ask", QUESTION, "--index", str(index_dir), "--model", spec,
                 env={"OPENAI_BASE_URL": None, "NOTERAG_BASE_URL": None, "OPENAI_API_KEY": "k"})  # fmt: skip
    url = spec.split("@", 1)[1]
    assert_one_error_line(result, repr(url), "http://")


@pytest.mark.parametrize("variable", ["OPENAI_BASE_URL", "NOTERAG_BASE_URL"])
def test_a_base_url_variable_without_http_is_refused(variable: str, monkeypatch: Any) -> None:
    from noterag.models import load_chat_model

    monkeypatch.delenv("NOTERAG_BASE_URL", raising=False)
    monkeypatch.setenv(variable, "localhost:8000/v1")
    with pytest.raises(ConfigError, match=f"{variable}='localhost:8000/v1' .*http://"):
        load_chat_model("openai:sim")


def test_an_at_sign_in_a_model_name_is_still_a_model_name() -> None:
    from noterag.models import load_chat_model

    model = load_chat_model(
        "openai:claude-3-5-sonnet@20240620", base_url="http://h/v1", api_key="k"
    )
    assert model.model_name == "claude-3-5-sonnet@20240620"  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- 13: bad replies


def _reply_with(status: int, ctype: str, body: str) -> Reply:
    def reply(handler: BaseHTTPRequestHandler) -> tuple[int, str, str]:
        if handler.command == "GET":
            return 200, "application/json", json.dumps({"object": "list", "data": []})
        return status, ctype, body

    return reply


@pytest.mark.parametrize(
    ("status", "ctype", "body", "fragments"),
    [
        (200, "text/html", "<!DOCTYPE html><html><head><title>Sign in</title></head></html>",
         ["answered an HTML page", "'Sign in'", "/v1"]),
        (502, "text/html", "<html><head><title>502 Bad Gateway</title></head><body>x</body></html>",
         ["HTTP 502", "an HTML page", "'502 Bad Gateway'"]),
        (200, "application/json", '{"choices": [oops', ["answered invalid JSON"]),
        (200, "application/json", "", ["answered an empty body"]),
        (200, "application/json", json.dumps({**COMPLETION, "choices": []}), ["no choices"]),
        (200, "application/json", json.dumps({"id": "x", "object": "chat.completion"}),
         ["no choices"]),
        (200, "application/json", json.dumps({"error": {"message": "model is loading"}}),
         ["model is loading"]),
        (200, "application/json", json.dumps({"choices": [{"index": 0}]}), ["no message"]),
    ],
)  # fmt: skip
def test_a_reply_that_is_no_completion_is_one_line_naming_the_endpoint(
    index_dir: Path, endpoint: Any, status: int, ctype: str, body: str, fragments: list[str]
) -> None:
    url = endpoint(_reply_with(status, ctype, body))
    line = assert_one_error_line(ask_endpoint(index_dir, url), url, *fragments)
    assert "unexpected" not in line


# --------------------------------------------------------------------------- 6: CORS


ROOT = Path(__file__).resolve().parents[1]
FOREIGN = ["https://evil.example", "http://localhost.evil.example", "null",
           "http://127.0.0.1.evil.example:2024", "https://smith.langchain.com.evil.example"]  # fmt: skip
LOCAL = ["http://localhost:8000", "http://127.0.0.1:5173", "http://[::1]:3000",
         "https://localhost", "https://smith.langchain.com"]  # fmt: skip


def _http_config() -> dict[str, Any]:
    return json.loads((ROOT / "langgraph.json").read_text())["http"]


def _served(cors: dict[str, Any]) -> Any:
    """A Starlette app behind the same middleware langgraph-api puts in front of its routes:
    noterag's origin guard, then Starlette's CORSMiddleware with langgraph.json's settings."""
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.middleware.cors import CORSMiddleware
    from starlette.responses import JSONResponse
    from starlette.routing import Route
    from starlette.testclient import TestClient

    from noterag.server.http import OriginGuard

    async def runs(request: Any) -> JSONResponse:
        return JSONResponse({"started": True})

    app = Starlette(
        routes=[Route("/runs/wait", runs, methods=["POST"])],
        middleware=[Middleware(OriginGuard, cors=cors, server_settings=False),
                    Middleware(CORSMiddleware, **cors)],
    )  # fmt: skip
    return TestClient(app)


def _preflight(client: Any, origin: str) -> Any:
    return client.options("/runs/wait", headers={
        "Origin": origin, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type"})  # fmt: skip


def test_langgraph_json_allows_local_origins_and_studio_only() -> None:
    http = _http_config()
    assert http["app"] == "./noterag/server/http.py:app"
    client = _served(http["cors"])
    for origin in LOCAL:
        allowed = _preflight(client, origin)
        assert allowed.status_code == 200, origin
        assert allowed.headers["access-control-allow-origin"] == origin
        assert "POST" in allowed.headers["access-control-allow-methods"]
        sent = client.post("/runs/wait", json={}, headers={"Origin": origin})
        assert (
            sent.json() == {"started": True}
            and sent.headers["access-control-allow-origin"] == origin
        )
    for origin in FOREIGN:
        refused = _preflight(client, origin)
        assert refused.status_code >= 400, origin
        assert "access-control-allow-origin" not in refused.headers
        # a "simple" request (no preflight) is refused too: it would start a run unread
        simple = client.post("/runs/wait", content=b"{}", headers={"Origin": origin,
                             "Content-Type": "text/plain"})  # fmt: skip
        assert simple.status_code == 403 and "started" not in simple.text
    # no Origin: not a browser (the SDKs, curl): served
    assert client.post("/runs/wait", json={}).json() == {"started": True}


def test_a_widened_allow_list_is_followed_by_the_guard() -> None:
    client = _served(_http_config()["cors"] | {"allow_origins": ["*"]})
    assert (
        client.post(
            "/runs/wait", content=b"{}", headers={"Origin": "https://evil.example"}
        ).status_code
        == 200
    )


def test_async_calls_get_the_same_one_line(endpoint: Any) -> None:
    import asyncio

    from noterag.models import ModelSettings, friendly_model_error, load_chat_model

    url = endpoint(_reply_with(200, "text/html", "<html><title>Sign in</title></html>"))
    model = load_chat_model("openai:m", ModelSettings(max_retries=0), base_url=url, api_key="k")
    with pytest.raises(Exception) as caught:
        asyncio.run(model.ainvoke("hi"))
    assert f"the model endpoint {url} answered an HTML page ('Sign in')" in str(
        friendly_model_error(caught.value)
    )


def test_a_web_page_stops_an_evaluation_and_a_garbled_reply_fails_one_question() -> None:
    from noterag.models import fatal_error
    from noterag.models.replies import EndpointPageError, EndpointReplyError

    assert fatal_error(EndpointPageError("the model endpoint u answered an HTML page")) is not None
    assert fatal_error(EndpointReplyError("the model endpoint u answered invalid JSON")) is None


def test_one_setting_given_twice_by_context_pairs_must_agree(
    index_dir: Path, scripted: dict
) -> None:
    result = cli("ask", QUESTION, "--index", str(index_dir), "-c", "top_k=3", "-c", "top-k=5")
    assert_one_error_line(result, "-c top_k=3 and -c top_k=5", "give one")
    assert scripted["specs"] == []
