"""Hostile table files and run directories (issue 33's defects 8, 9, 11 and 12, and its
reproduce / compare findings): a YAML alias bomb refused at once, table paths kept inside
--data, run names that two different runs never share, no write through a symbolic link in a
run directory, no credentials left in ``.noterag.lock``, and untrusted text kept out of the
terminal, table.md and the plot's warnings.

Models are scripted and in-process; the alias bomb runs the real command in a subprocess with
a deadline, so that a hang is a failure rather than a stuck suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from test_reproduce import TABLE, write_table
from typer.testing import CliRunner

from noterag.base.errors import NoteragError
from noterag.cli import app
from noterag.eval import run_eval
from noterag.eval.lock import LOCK_FILE, RunLockedError, command_name, run_lock
from noterag.eval.runs import RunDirError
from noterag.reproduce import report
from noterag.reproduce.plan import _readable_name, make_plan, run_name
from noterag.reproduce.run import execute
from noterag.reproduce.tables import load_table
from scripted import VELMORA_ROWS, KeywordRetriever, ScriptedModel, passages

CLEAN_ENV = {"COLUMNS": "250", "NOTERAG_SKIP_MODEL_CHECK": "1"}


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), env=CLEAN_ENV)


def error_lines(result: Any) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.strip()]


# --------------------------------------------------------------------------- defect 8


def _alias_bomb(levels: int) -> str:
    """A table file whose datasets expand to 10**levels strings through nested aliases."""
    lines = ["a0: &a0 [" + ", ".join(['"xxxxxxxxxx"'] * 10) + "]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    lines.append(
        'id: toy-table1\npaper: deepnote\nnumber: "1"\ntitle: t\nseed: s\nbackbones: [B]\n'
        f"datasets: {{hotpotqa: *a{levels - 1}}}\ncolumns: []\nrows: []"
    )
    return "\n".join(lines) + "\n"


def test_a_yaml_alias_bomb_is_refused_at_once_in_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "bomb"
    folder.mkdir()
    (folder / "toy-table1.yaml").write_text(_alias_bomb(9))  # 10**9 strings if expanded
    # a subprocess with a generous deadline: before the fix it ran for minutes, gigabytes on
    proc = subprocess.run(
        [sys.executable, "-m", "noterag", "reproduce", "toy-table1", "--tables", str(folder),
         "--dry-run"],
        capture_output=True, text=True, timeout=120, check=False,
        env=os.environ | CLEAN_ENV,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "expands to over 200,000 values through YAML aliases" in lines[0]
    assert "xxxxxxxxxx" not in proc.stderr


def test_aliases_within_bounds_are_read_and_a_self_reference_is_refused(tmp_path: Path) -> None:
    # yaml.safe_dump writes an alias for a value used twice (TABLE's datasets share parts)
    folder = write_table(tmp_path / "t")
    assert "*id" in (folder / "toy-table1.yaml").read_text()
    assert load_table("toy-table1", folder).datasets["strategyqa"].questions.path
    (folder / "toy-table1.yaml").write_text("a: &a [1, *a]\n")
    result = invoke("reproduce", "toy-table1", "--tables", str(folder), "--dry-run")
    assert result.exit_code == 1
    (line,) = error_lines(result)
    assert line.endswith("line 1: a YAML alias refers to a value holding it"), line


def test_an_error_in_a_table_file_never_quotes_its_content(tmp_path: Path) -> None:
    # no alias: a big wrong value, and a hostile key; the message names where, not what
    big = ["y" * 5000, "\x1b]0;pwned\x07"]
    table = TABLE | {"datasets": {"hotpotqa": big, "strategyqa": TABLE["datasets"]["strategyqa"]}}
    folder = write_table(tmp_path / "t", table)
    result = invoke("reproduce", "toy-table1", "--tables", str(folder), "--dry-run")
    assert result.exit_code == 1
    (line,) = error_lines(result)
    assert line.startswith(f"error: {folder}/toy-table1.yaml: datasets.hotpotqa: "), line
    assert "yyyy" not in line and "pwned" not in line and len(line) < 600
    # a YAML syntax error: where it is, not the snippet PyYAML quotes
    (folder / "toy-table1.yaml").write_text("id: [\n  " + "z" * 3000 + ": {\n")
    result = invoke("reproduce", "toy-table1", "--tables", str(folder), "--dry-run")
    (line,) = error_lines(result)
    assert line.startswith(f"error: {folder}/toy-table1.yaml: line "), line
    assert "zzzz" not in line


# --------------------------------------------------------------------------- table paths


@pytest.mark.parametrize(
    "where",
    [
        {"questions": {"path": "../outside/questions.jsonl", "what": "q"}},
        {"questions": {"path": "/etc/passwd", "what": "q"}},
        {"index": {"path": "hotpotqa/../../index", "what": "i"}},
        {"retriever_spec": "bm25:/var/index"},
        {"retriever_spec": "bm25:{data}/../index"},
    ],
    ids=["dotdot", "absolute", "inner-dotdot", "spec-absolute", "spec-dotdot"],
)
def test_table_paths_stay_inside_data(where: dict[str, Any], tmp_path: Path) -> None:
    hotpot = TABLE["datasets"]["hotpotqa"] | where
    table = TABLE | {"datasets": TABLE["datasets"] | {"hotpotqa": hotpot}}
    folder = write_table(tmp_path / "t", table)
    data = tmp_path / "data"
    data.mkdir()
    result = invoke("reproduce", "toy-table1", "--tables", str(folder), "--data", str(data),
                    "--dry-run")  # fmt: skip
    assert result.exit_code == 1, result.output
    (line,) = error_lines(result)
    assert "inside --data" in line or "relative to --data" in line, line


# --------------------------------------------------------------------------- defect 9


PROMPT_A = "Passages: {refs}\nAnswer the question: {query}"
PROMPT_B = "Passages; {refs}\nAnswer the question; {query}"  # the same but for its punctuation


def test_run_names_are_injective_and_readable_names_stay_as_they_were() -> None:
    names = {
        run_name("hotpotqa", "vanilla", "paper", settings)
        for settings in ({"x": "a b"}, {"x": "a,b"}, {"x": "a_b"}, {"x": "a/b"}, {"x": "a"},
                         {"x": "a_"}, {"x": ["a", "b"]}, {"x": "5"}, {"x": 5}, {"x.y": 1},
                         {"x": {"y": 1}}, {"x": {"y": "1"}})
    }  # fmt: skip
    assert len(names) == 12
    assert all(len(name) < 220 for name in names)
    # dense or not: two runs
    assert run_name("hotpotqa", "vanilla", "paper", {"x": "a b"}) != run_name(
        "hotpotqa", "vanilla", "paper", {"x": "a b"}, dense=True
    )
    # a word is written bare (a run named ...official_code=_deepnote_... by an earlier version
    # resumes there: tests/test_reproduce_plan.py)
    assert run_name("hotpotqa", "vanilla", "official", {"official_code": "deepnote", "top_k": 3}) \
        == "hotpotqa.vanilla.official.official_code=deepnote.top_k=3"  # fmt: skip
    assert run_name("hotpotqa", "deepnote", "paper", {"top_k": 5}) == (
        "hotpotqa.deepnote.paper.top_k=5"
    )
    assert run_name("musique", "vanilla", "paper", {}, dense=True) == "musique.vanilla.paper.dense"


def _twin_table() -> dict[str, Any]:
    row = TABLE["rows"][0]
    return TABLE | {
        "rows": [
            row | {"id": "colon", "settings": {"prompts": {"answer.multihop": PROMPT_A}}},
            row | {"id": "semicolon", "settings": {"prompts": {"answer.multihop": PROMPT_B}}},
        ]
    }


def test_rows_differing_only_in_punctuation_get_their_own_runs(tmp_path: Path) -> None:
    table = load_table("toy-table1", write_table(tmp_path / "t", _twin_table()))

    def answer(prompt: str) -> str:  # right only under the colon's prompt
        return "1871" if "Answer the question:" in prompt else "no idea"

    model = ScriptedModel(default="", script={"answer": answer})
    plan = make_plan(table, out=tmp_path / "out", model=model, datasets=["hotpotqa"], limit=1)
    assert [run.rows for run in plan.runs] == [["colon"], ["semicolon"]]
    assert len({run.run_dir for run in plan.runs}) == 2
    outcomes = execute(plan, model=model, progress=False)
    for outcome, prompt in zip(outcomes, (PROMPT_A, PROMPT_B)):
        config = json.loads((outcome.run_dir / "run.json").read_text())
        assert config["context"]["prompts"] == {"answer.multihop": prompt}
    ems = {r.cell.row: r.ours for r in report.score_cells(plan, outcomes) if r.cell.metric == "em"}
    assert ems == {"colon": 100.0, "semicolon": 0.0}


def test_a_run_made_under_its_old_name_is_found_and_another_rows_is_not(tmp_path: Path) -> None:
    table = load_table("toy-table1", write_table(tmp_path / "t", _twin_table()))
    model = ScriptedModel(default="1871")
    plan = make_plan(table, out=tmp_path / "out", model=model, datasets=["hotpotqa"], limit=1)
    # an earlier noterag ran "colon" under the lossy name both rows shared
    colon = plan.runs[0]
    old = Path(colon.run_dir).parent / _readable_name(
        "hotpotqa", "vanilla", "paper", colon.settings
    )
    assert old.name == _readable_name("hotpotqa", "vanilla", "paper", plan.runs[1].settings)
    run_eval(colon.method, colon.questions, old, index=KeywordRetriever(passages=passages(*VELMORA_ROWS)),
             model=model, context=colon.context, limit=1, progress=False)  # fmt: skip
    again = make_plan(table, out=tmp_path / "out", model=model, datasets=["hotpotqa"], limit=1)
    assert again.runs[0].run_dir == str(old)  # its own: resumed where it is
    assert again.runs[1].run_dir != str(old)  # the other row's: never scored from it


# --------------------------------------------------------------------------- defect 11


def _questions(path: Path, n: int = 2) -> Path:
    path.write_text("".join(
        json.dumps({"id": f"q{i}", "question": f"Question {i}: who designed the Velmora Bridge?",
                    "answers": ["Aurelio Fenwick"]}) + "\n"
        for i in range(1, n + 1)
    ))  # fmt: skip
    return path


def _evaluate(data: Path, out: Path) -> dict[str, Any]:
    return run_eval("vanilla", data, out, model=ScriptedModel(script={"answer": "Aurelio Fenwick"}),
                    index=KeywordRetriever(passages=passages(*VELMORA_ROWS)), progress=False)  # fmt: skip


def test_a_linked_lock_file_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    out = tmp_path / "run"
    out.mkdir()
    (out / LOCK_FILE).symlink_to(target)
    with pytest.raises(RunLockedError, match="symbolic link"):
        _evaluate(_questions(tmp_path / "q.jsonl"), out)
    assert target.read_text() == "keep me\n"
    # a dangling link is refused too (O_CREAT would have made its target)
    (out / LOCK_FILE).unlink()
    (out / LOCK_FILE).symlink_to(tmp_path / "made-by-the-link")
    with pytest.raises(RunLockedError, match="symbolic link"), run_lock(out):
        pass
    assert not (tmp_path / "made-by-the-link").exists()


def test_a_linked_results_file_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    data = _questions(tmp_path / "q.jsonl")
    out = tmp_path / "run"
    _evaluate(data, out)
    target = tmp_path / "precious.jsonl"
    # a file of results elsewhere with a torn tail: a repair through the link would cut it
    whole = (out / "results.jsonl").read_bytes()
    target.write_bytes(whole + b'{"id": "torn')
    (out / "results.jsonl").unlink()
    (out / "results.jsonl").symlink_to(target)
    for retry in (False, True):
        with pytest.raises(NoteragError, match="symbolic link"):
            run_eval("vanilla", data, out, model=ScriptedModel(script={"answer": "x"}),
                     index=KeywordRetriever(passages=passages(*VELMORA_ROWS)), progress=False,
                     retry_errors=retry)  # fmt: skip
        assert target.read_bytes() == whole + b'{"id": "torn'
    # the command says it in one line
    from noterag.retrievers.sample import sample_index

    index = sample_index(tmp_path / "cache")
    result = invoke("eval", "-m", "vanilla", "-d", str(data), "-i", str(index),
                    "-o", str(out), "--model", "openai:m@http://127.0.0.1:9/v1")  # fmt: skip
    assert result.exit_code == 1
    (line,) = error_lines(result)
    assert line.startswith("error: ") and "symbolic link" in line, line
    assert target.read_bytes() == whole + b'{"id": "torn'


def test_the_results_writer_never_appends_through_a_link(tmp_path: Path) -> None:
    from noterag.base.files import LinkRefusedError
    from noterag.eval.loop import LineWriter, repair_lines

    target = tmp_path / "target.jsonl"
    target.write_bytes(b'{"id": "a"}\n{"id": "b')
    link = tmp_path / "results.jsonl"
    link.symlink_to(target)
    with pytest.raises(LinkRefusedError):
        LineWriter(link)
    with pytest.raises(LinkRefusedError):
        repair_lines(link)
    assert target.read_bytes() == b'{"id": "a"}\n{"id": "b'


# --------------------------------------------------------------------------- defect 12


def test_the_lock_file_names_its_holder_without_the_command_line_and_is_emptied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret_argv = ["/usr/bin/noterag", "eval", "--model",
                   "openai:m@http://alice:PW-123@h/v1?api_key=sk-SECRET", "-o", "x"]  # fmt: skip
    monkeypatch.setattr(sys, "argv", secret_argv)
    out = tmp_path / "run"
    inside = threading.Event()
    with run_lock(out, "eval"):
        held = (out / LOCK_FILE).read_text()
        inside.set()
        # a second writer is told who holds it, and nothing of its command line
        with pytest.raises(RunLockedError) as refused, run_lock(out, "eval"):
            pass
    assert inside.is_set()
    holder = json.loads(held)
    assert holder["pid"] == os.getpid() and holder["command"] == "noterag eval"
    assert set(holder) == {"pid", "host", "command", "since"}
    for text in (held, str(refused.value)):
        assert "PW-123" not in text and "sk-SECRET" not in text and "alice" not in text
    assert "(noterag eval)" in str(refused.value)
    # after the run: nothing left in the file (no stale holder, no secret)
    assert (out / LOCK_FILE).read_bytes() == b""


def test_a_stale_lock_file_of_an_older_noterag_loses_its_secrets_at_the_next_run(
    tmp_path: Path,
) -> None:
    data = _questions(tmp_path / "q.jsonl")
    out = tmp_path / "run"
    out.mkdir()
    (out / LOCK_FILE).write_text(json.dumps({"pid": 1, "command": "noterag eval --model "
                                             "openai:m@http://u:PW@h/v1"}) + "\n")  # fmt: skip
    _evaluate(data, out)
    assert b"PW" not in (out / LOCK_FILE).read_bytes()


@pytest.mark.parametrize(
    ("argv", "name"),
    [
        (["/x/bin/noterag", "eval", "--model", "u:pw"], "noterag eval"),
        (["/x/noterag/__main__.py", "reproduce", "t"], "noterag reproduce"),
        (["holder.py", "/data/q.jsonl"], "holder.py"),
        (["noterag", "--model=openai:m@http://u:p@h", "eval"], "noterag"),
        ([], "python"),
    ],
)
def test_command_name(argv: list[str], name: str) -> None:
    assert command_name(argv) == name


# --------------------------------------------------------------------------- findings


HOSTILE = "Row \x1b]0;pwned\x07\x1b[31mred\x9b2J\x85 $x^{2$"


def test_reproduce_json_table_md_and_the_plot_carry_no_control_characters(
    tmp_path: Path,
) -> None:
    hostile = TABLE | {
        "title": f"Title {HOSTILE}",
        "rows": [TABLE["rows"][0] | {"label": HOSTILE}, TABLE["rows"][4] | {"skip": HOSTILE}],
    }
    folder = write_table(tmp_path / "t", hostile)
    result = invoke("reproduce", "toy-table1", "--tables", str(folder), "--dry-run", "--json")
    assert result.exit_code == 0, result.output
    assert not any(0x7F <= ord(c) <= 0x9F for c in result.stdout)
    assert "\x1b" not in result.stdout
    plan = json.loads(result.stdout)  # the data whole: the escapes decode back to it
    assert plan["title"] == f"Title {HOSTILE}"

    table = load_table("toy-table1", folder)
    model = ScriptedModel(default="1871")
    plan_ = make_plan(table, out=tmp_path / "out", model=model, datasets=["hotpotqa"], limit=1)
    outcomes = execute(plan_, model=model, progress=False)
    results = report.score_cells(plan_, outcomes)
    # the plot: in a subprocess, so matplotlib's warnings are seen as a user sees them
    code = (
        "import sys, pickle; from noterag.reproduce import report;"
        "plan, results = pickle.load(open(sys.argv[1], 'rb'));"
        "open(sys.argv[2], 'wb').write(report.plot_png(plan, results))"
    )
    import pickle

    state = tmp_path / "state.pickle"
    state.write_bytes(pickle.dumps((plan_, results)))
    png = tmp_path / "t.png"
    proc = subprocess.run([sys.executable, "-c", code, str(state), str(png)],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert png.read_bytes().startswith(b"\x89PNG")
    assert not any(ord(c) < 0x20 and c not in "\n\t" or 0x7F <= ord(c) <= 0x9F
                   for c in proc.stderr), proc.stderr  # fmt: skip
    paths = report.write_outputs(plan_, results, outcomes, tmp_path / "out")
    for path in paths[:2]:  # table.md, table.json
        text = path.read_text()
        assert not any(ord(c) < 0x20 and c not in "\n" or 0x7F <= ord(c) <= 0x9F for c in text)
    assert json.loads(paths[1].read_text())["title"] == f"Title {HOSTILE}"


def _write_run(run_dir: Path, metrics: dict[str, Any]) -> None:
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text(
        json.dumps({"method": "vanilla", "model": "m", "context": {}, "dataset": "d", "index": "i"})
    )
    row = {"id": "q1", "metrics": metrics, "latency_s": 1.0, "started_at": 0.0,
           "finished_at": 1.0, "llm_calls": 1, "prompt_tokens": 1, "completion_tokens": 1,
           "passages": 1}  # fmt: skip
    (run_dir / "results.jsonl").write_text(json.dumps(row) + "\n")


def test_compare_on_a_string_valued_metric_is_one_line_naming_the_file(tmp_path: Path) -> None:
    _write_run(tmp_path / "a", {"em": 1.0})
    _write_run(tmp_path / "b", {"em": "\x1b[2Jhigh"})
    result = invoke("compare", str(tmp_path / "a"), str(tmp_path / "b"), "--no-plot")
    assert result.exit_code == 1
    (line,) = error_lines(result)
    assert line.startswith(f"error: {tmp_path / 'b' / 'results.jsonl'} line 1: metric em is ")
    assert "unexpected" not in line and "\x1b" not in line
    with pytest.raises(RunDirError, match="not a finite number"):
        from noterag.eval.report import compute_summary

        compute_summary(tmp_path / "b")


def test_a_holder_line_an_older_noterag_wrote_is_shown_redacted_and_short(tmp_path: Path) -> None:
    import fcntl

    out = tmp_path / "run"
    out.mkdir()
    stale = {"pid": 7, "host": "h", "since": "then",
             "command": "noterag eval --model openai:m@http://u:PW-9@h/v1 " + "-x " * 500}  # fmt: skip
    (out / LOCK_FILE).write_text(json.dumps(stale) + "\n")
    with open(out / LOCK_FILE, "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as the older noterag's live run would
        with pytest.raises(RunLockedError) as refused, run_lock(out):
            pass
    message = str(refused.value)
    assert message.startswith(f"{out} is being written by pid 7 on h (noterag eval --model ")
    assert "PW-9" not in message and len(message) < 400


def test_compare_plots_hostile_labels_without_control_characters_on_stderr(
    tmp_path: Path,
) -> None:
    _write_run(tmp_path / "a", {"em": 50.0, "f1": 60.0})
    _write_run(tmp_path / "b", {"em": 40.0, "f1": 70.0})
    config = json.loads((tmp_path / "b" / "run.json").read_text())
    (tmp_path / "b" / "run.json").write_text(json.dumps(config | {"method": HOSTILE}))
    proc = subprocess.run(
        [sys.executable, "-m", "noterag", "compare", str(tmp_path / "a"), str(tmp_path / "b"),
         "--plot", str(tmp_path / "c.png")],
        capture_output=True, text=True, timeout=120, check=False, env=os.environ | CLEAN_ENV,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "c.png").read_bytes().startswith(b"\x89PNG")
    for text in (proc.stdout, proc.stderr):
        assert not any(ord(c) < 0x20 and c not in "\n\t" or 0x7F <= ord(c) <= 0x9F for c in text)


def test_a_fifo_at_results_jsonl_is_refused_rather_than_waited_on(tmp_path: Path) -> None:
    data = _questions(tmp_path / "q.jsonl")
    out = tmp_path / "run"
    _evaluate(data, out)
    (out / "results.jsonl").unlink()
    os.mkfifo(out / "results.jsonl")  # opening it to read would wait for a writer forever
    raised: list[BaseException] = []

    def run() -> None:
        try:
            _evaluate(data, out)
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            raised.append(exc)

    # in a daemon thread with a generous deadline: before the fix the open never returned
    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(120)
    assert not worker.is_alive(), "the run waited on the FIFO"
    assert len(raised) == 1 and isinstance(raised[0], NoteragError), raised
    assert "not a regular file" in str(raised[0])
