"""`noterag reproduce TABLE`: the plan of a published table (runs, skipped rows, missing inputs,
estimates), the runs (ordinary eval run directories, resumed, never repeating a finished
question's model calls, even after SIGKILL) and the table of published | ours | Δ | CI.

The tables here are written by each test into a tmp folder (``--tables``), so that the
published tables' own files stay as transcribed; the dry run is also checked on every shipped
table.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from noterag.base.errors import ConfigError
from noterag.cli import app
from noterag.eval.report import compute_summary
from noterag.eval.significance import mean_interval
from noterag.reproduce import report
from noterag.reproduce.plan import make_plan, method_costs, published_value, run_name
from noterag.reproduce.run import execute
from noterag.reproduce.tables import load_table, table_names
from noterag.retrievers import build_bm25_index
from noterag.retrievers.sample import sample_corpus, sample_questions, sample_questions_path
from scripted import ScriptedModel

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from sim_endpoint import SimModel, start

N_SAMPLE = len(sample_questions())

HOTPOT = {
    "name": "HotpotQA",
    "task": "multihop",
    "sample": "500 test questions",
    "questions": {
        "path": "hotpotqa/questions.jsonl",
        "what": "the HotpotQA test sample",
        "source": "https://example.org/hotpotqa.jsonl",
    },
    "corpus": {
        "path": "hotpotqa/corpus.jsonl",
        "what": "the HotpotQA corpus",
        "source": "https://example.org/corpus.jsonl",
    },
    "index": {
        "path": "hotpotqa/index",
        "what": "its BM25 index",
        "command": "noterag index {data}/hotpotqa/corpus.jsonl --out {data}/hotpotqa/index",
    },
    "retriever": "BM25, top-5",
    "retriever_spec": "bm25:{data}/hotpotqa/index",
}


def _row(id: str, method: str | None, values: list[str | None], **more: Any) -> dict[str, Any]:
    return {"id": id, "label": id.title(), "method": method, "values": values} | more


TABLE = {
    "id": "toy-table1",
    "paper": "deepnote",
    "number": "1",
    "title": "Toy results.",
    "seed": "deepnote.txt",
    "backbones": ["Big-70B", "Small-8B"],
    "datasets": {
        "hotpotqa": HOTPOT,
        "strategyqa": HOTPOT
        | {"name": "StrategyQA", "task": "strategyqa", "retriever_spec": None, "index": None},
    },
    "columns": [
        {"dataset": "hotpotqa", "metric": "acc", "label": "acc."},
        {"dataset": "hotpotqa", "metric": "f1", "label": "f1"},
        {"dataset": "hotpotqa", "metric": "em", "label": "em"},
        {"dataset": "hotpotqa", "metric": "avg", "label": "avg."},
        {"dataset": "strategyqa", "metric": "acc", "label": "acc."},
    ],
    "rows": [
        _row("vanilla", "vanilla", ["30.0", "40.0", "20.0", "30.0", "60.0"],
             profile="paper", backbone="Big-70B"),
        # the same run as "vanilla", under another heading: it shares the run
        _row("vanilla-again", "vanilla", ["30.0", "40.0", "20.0", "30.0", "60.0"],
             section="again", profile="paper", backbone="Big-70B"),
        # no profile: the default, paper
        _row("vanilla-k3", "vanilla", ["31.0", "41.0", "21.0", "31.0", None],
             settings={"top_k": 3}, backbone="Big-70B"),
        _row("dpo", "deepnote", ["50.0", "60.0", "40.0", "50.0", "70.0"],
             profile="official", backbone="Big-70B", requires=["dpo-model"]),
        _row("cannot", "vanilla", ["1.0", "1.0", "1.0", "1.0", "1.0"],
             backbone="Big-70B", skip="the paper does not say its settings"),
        _row("delta", None, ["14.6↑", "13.6↑", "12.0↑", "13.4↑", "5.2↑"]),
        _row("small", "vanilla", ["10.0", "11.0", "12.0", "11.0", "50.0"],
             profile="paper", backbone="Small-8B"),
    ],
}  # fmt: skip


def write_table(folder: Path, table: dict[str, Any] = TABLE) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{table['id']}.yaml").write_text(yaml.safe_dump(table, allow_unicode=True))
    return folder


@pytest.fixture
def tables(tmp_path: Path) -> Path:
    return write_table(tmp_path / "tables")


def invoke(*args: str, **kwargs: Any) -> Any:
    return CliRunner().invoke(app, ["reproduce", *args], env={"COLUMNS": "250"}, **kwargs)


# --------------------------------------------------------------------------- the plan


def test_the_plan_has_one_run_per_distinct_method_settings_and_dataset(
    tables: Path, tmp_path: Path
) -> None:
    table = load_table("toy-table1", tables)
    plan = make_plan(table, out=tmp_path / "out", model="openai:m@http://x/v1")
    names = [run.name for run in plan.runs]
    assert names == [
        run_name("hotpotqa", "vanilla", "paper", {}),
        run_name("strategyqa", "vanilla", "paper", {}),
        run_name("hotpotqa", "vanilla", "paper", {"top_k": 3}),
        run_name("strategyqa", "vanilla", "paper", {"top_k": 3}),
    ]
    assert names[2] == "hotpotqa.vanilla.paper.top_k=3"
    # the rows of one (method, settings, dataset) share its run
    assert plan.runs[0].rows == ["vanilla", "vanilla-again"]
    assert plan.runs[2].context == {"top_k": 3, "profile": "paper"}
    # the other backbone's row is not in the plan; the others are skipped with their reasons
    assert [r.id for r in plan.rows] == [r["id"] for r in TABLE["rows"][:-1]]
    assert {s.row: s.reason for s in plan.skipped} == {
        "dpo": "needs dpo-model (the backbone DPO-trained on DNAlign (DeepNote §3.5; thunlp/DeepNote src/train.sh)), which reproduce is not given",
        "cannot": "the paper does not say its settings",
        "delta": "not a run (the table derives it from other rows)",
    }
    # every cell of the chosen rows, its published value as printed and as a number
    assert len(plan.cells) == 6 * 5
    delta = [c for c in plan.cells if c.row == "delta"]
    assert [c.published for c in delta] == TABLE["rows"][5]["values"]
    assert [c.published_value for c in delta] == [14.6, 13.6, 12.0, 13.4, 5.2]
    assert {c.run for c in delta} == {None}
    # run directories: one folder per model (the endpoint's URL left out), one per run
    assert plan.runs[0].run_dir == str(tmp_path / "out" / "openai_m" / names[0])


def test_the_sample_data_stands_in_for_every_dataset_without_data(
    tables: Path, tmp_path: Path
) -> None:
    plan = make_plan(load_table("toy-table1", tables), out=tmp_path / "out", limit=4)
    assert plan.missing == []
    for run in plan.runs:
        assert run.questions == str(sample_questions_path())
        assert run.n_questions == min(4, N_SAMPLE)
        assert run.index == f"bm25:{tmp_path / 'out' / 'sample-index'}"


def test_the_estimate_is_the_measured_cost_per_question_times_the_questions(
    tables: Path, tmp_path: Path
) -> None:
    plan = make_plan(load_table("toy-table1", tables), out=tmp_path / "out", limit=5)
    measured = method_costs()["costs"]["vanilla/paper"]
    run = plan.runs[0]
    assert run.estimate.measured_as == "vanilla/paper"
    assert run.estimate.llm_calls == pytest.approx(measured["llm_calls"] * 5, abs=0.05)
    tokens = (measured["prompt_tokens"] + measured["completion_tokens"]) * 5
    assert run.estimate.tokens == pytest.approx(tokens, abs=0.5)
    # the file says how it was measured, and covers every method this noterag registers
    assert method_costs()["command"] == "python bench/method_costs.py"


def test_every_registered_method_has_a_measured_cost() -> None:
    from noterag.registry.methods import METHODS

    measured = {key.split("/")[0] for key in method_costs()["costs"]}
    missing = sorted(set(METHODS) - measured)
    assert not missing, (
        f"noterag/data/method_costs.json has no cost for {', '.join(missing)}: run "
        "`make register` (it measures the methods the file lacks) and commit the file"
    )


def test_missing_inputs_name_the_download_or_the_command_that_makes_them(
    tables: Path, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    table = load_table("toy-table1", tables)
    plan = make_plan(table, out=tmp_path / "out", data=data, datasets=["hotpotqa"])
    assert [(m.path, m.provide) for m in plan.missing] == [
        (f"{data}/hotpotqa/questions.jsonl",
         f"download from https://example.org/hotpotqa.jsonl into {data}/hotpotqa/questions.jsonl"),
        (f"{data}/hotpotqa/index",
         f"run: noterag index {data}/hotpotqa/corpus.jsonl --out {data}/hotpotqa/index"),
        (f"{data}/hotpotqa/corpus.jsonl",
         f"download from https://example.org/corpus.jsonl into {data}/hotpotqa/corpus.jsonl"),
    ]  # fmt: skip
    assert plan.runs[0].n_questions is None
    # provide them (the corpus and questions as downloaded, the index by its command)
    (data / "hotpotqa").mkdir()
    (data / "hotpotqa" / "questions.jsonl").write_bytes(sample_questions_path().read_bytes())
    (data / "hotpotqa" / "corpus.jsonl").write_bytes(sample_corpus().read_bytes())
    plan = make_plan(table, out=tmp_path / "out", data=data, datasets=["hotpotqa"])
    assert [m.path for m in plan.missing] == [f"{data}/hotpotqa/index"]
    build_bm25_index(data / "hotpotqa" / "corpus.jsonl", data / "hotpotqa" / "index")
    plan = make_plan(table, out=tmp_path / "out", data=data, datasets=["hotpotqa"], limit=2)
    assert plan.missing == []
    assert plan.runs[0].index == f"bm25:{data}/hotpotqa/index"
    assert plan.runs[0].n_questions == 2


def test_a_dataset_without_a_retriever_is_missing_one(tables: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    plan = make_plan(
        load_table("toy-table1", tables), out=tmp_path / "o", data=data, datasets=["strategyqa"]
    )
    assert ("a retriever for this dataset", "the table file names none") in {
        (m.what, m.provide) for m in plan.missing
    }


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"datasets": ["nq"]}, "toy-table1 has no dataset 'nq'; choose among hotpotqa, strategyqa"),
        ({"rows": ["x"]}, "toy-table1 has no row 'x'; choose among vanilla, vanilla-again"),
        ({"backbone": "GPT-5"}, ("toy-table1 has no backbone 'GPT-5'; choose one of Big-70B, "
         "Small-8B")),
        ({"rows": ["small"]}, ("row 'small' of toy-table1 was run with Small-8B, not Big-70B; "
         "pass --backbone 'Small-8B'")),
    ],
)  # fmt: skip
def test_a_selection_the_table_does_not_have_names_the_choices(
    tables: Path, tmp_path: Path, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as err:
        make_plan(load_table("toy-table1", tables), out=tmp_path, **options)
    assert str(err.value).startswith(message)


def test_the_backbone_picks_its_rows(tables: Path, tmp_path: Path) -> None:
    plan = make_plan(load_table("toy-table1", tables), out=tmp_path, backbone="Small-8B")
    assert [r.id for r in plan.rows] == ["delta", "small"]
    assert plan.runs[0].rows == ["small"]


def test_published_values_are_read_as_printed() -> None:
    assert [published_value(v) for v in ("44.0", "14.6↑", "-3.5", None, "n/a")] == [
        44.0, 14.6, -3.5, None, None,
    ]  # fmt: skip


# --------------------------------------------------------------------------- --dry-run


@pytest.mark.parametrize("name", table_names())
def test_dry_run_works_on_every_shipped_table(name: str, tmp_path: Path) -> None:
    result = invoke(name, "--dry-run", "--json", "--out", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    table = load_table(name)
    assert plan["table"] == name and plan["backbone"] == table.backbones[0]
    # every cell of the default backbone's rows, with its published value as transcribed
    # (a row of a one-dataset sub-table prints that dataset's columns; a column of another
    # backbone, as Amber Table 2's, is not this backbone's cell)
    published = {
        (row.id, table.columns.index(col)): value
        for row in table.rows
        if row.backbone in (None, table.backbones[0])
        for col, value in table.cells(row)
        if col.backbone in (None, table.backbones[0])
    }
    assert {(c["row"], c["column"]): c["published"] for c in plan["cells"]} == published
    assert all(run["n_questions"] == N_SAMPLE for run in plan["runs"])
    human = invoke(name, "--dry-run", "--out", str(tmp_path / "out"))
    assert human.exit_code == 0, human.output
    assert f"{len(plan['runs'])} runs" in human.stdout


def test_dry_run_lists_runs_estimates_skips_and_missing_inputs(
    tables: Path, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    result = invoke("toy-table1", "--tables", str(tables), "--dry-run", "--data", str(data),
                    "--datasets", "hotpotqa", "--rows", "vanilla,dpo")  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "1 runs" in result.stdout
    assert any(line.startswith("skipped Dpo (dpo): needs dpo-model") for line in lines)
    assert (
        f"missing (hotpotqa) its BM25 index: {data}/hotpotqa/index; run: noterag index "
        f"{data}/hotpotqa/corpus.jsonl --out {data}/hotpotqa/index"
    ) in lines
    # nothing ran, nothing was written
    assert not (tmp_path / "reproduce").exists() and list(data.iterdir()) == []


def test_bad_input_is_one_error_line(tables: Path, tmp_path: Path) -> None:
    for args, message in [
        (["nope", "--tables", str(tables)], "error: unknown table 'nope'; choose one of toy-table1"),
        (["toy-table1", "--tables", str(tables), "--datasets", "nq", "--dry-run"],
         "error: toy-table1 has no dataset 'nq'"),
        (["toy-table1", "--tables", str(tmp_path / "none")], "error: --tables "),
        (["toy-table1", "--tables", str(tables), "--data", str(tmp_path / "nodata")],
         f"error: --data {tmp_path / 'nodata'}: not a directory"),
    ]:  # fmt: skip
        result = invoke(*args)
        assert result.exit_code == 1, result.output
        assert result.stdout == ""
        assert result.stderr.count("\n") == 1 and result.stderr.startswith(message)


def test_a_broken_table_file_is_named(tmp_path: Path) -> None:
    write_table(tmp_path / "t", TABLE | {"columns": TABLE["columns"][:2]})
    result = invoke("toy-table1", "--tables", str(tmp_path / "t"), "--dry-run")
    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: {tmp_path / 't'}/toy-table1.yaml: ")
    assert "row 'vanilla': 5 values for 2 columns" in result.stderr


# --------------------------------------------------------------------------- runs and table


def _scripted() -> ScriptedModel:
    # right on the first sample question only (gold 1871): scores that vary over questions
    return ScriptedModel(default="1871")


def test_runs_are_eval_run_directories_and_the_table_scores_them(
    tables: Path, tmp_path: Path
) -> None:
    model = _scripted()
    table = load_table("toy-table1", tables)
    plan = make_plan(table, out=tmp_path / "out", model=model, datasets=["hotpotqa"])
    outcomes = execute(plan, model=model, progress=False)
    assert [o.status for o in outcomes] == ["ran", "ran"]
    calls = len(model.calls)
    assert calls == 2 * N_SAMPLE  # vanilla: one call a question
    results = report.score_cells(plan, outcomes)
    by_cell = {(r.cell.row, r.column_label): r for r in results}
    # ours = the eval summary's metric of the run (both average the same per-question scores)
    summary = compute_summary(outcomes[0].run_dir)
    for label, metric in [("acc.", "acc"), ("f1", "f1"), ("em", "em")]:
        cell = by_cell[("vanilla", label)]
        assert cell.ours == pytest.approx(summary["metrics"][metric])
        assert cell.n == N_SAMPLE and cell.note == ""
        assert cell.delta == pytest.approx(cell.ours - cell.cell.published_value)
        assert cell.ci_low <= cell.ours <= cell.ci_high
        assert cell.outside == (not cell.ci_low <= cell.cell.published_value <= cell.ci_high)
        # the row sharing the run has the same values
        assert by_cell[("vanilla-again", label)].ours == cell.ours
    avg = by_cell[("vanilla", "avg.")].ours
    assert avg == pytest.approx(sum(summary["metrics"][m] for m in ("acc", "f1", "em")) / 3)
    # skipped rows have no value and say why
    assert by_cell[("dpo", "em")].ours is None
    assert by_cell[("dpo", "em")].note.startswith("skipped: needs dpo-model")

    # a second reproduce: every run finished, not started again, no model call
    again = execute(plan, model=model, progress=False)
    assert [o.status for o in again] == ["finished", "finished"]
    assert len(model.calls) == calls
    assert report.score_cells(plan, again) == results

    paths = report.write_outputs(plan, results, outcomes, tmp_path / "out")
    assert [p.name for p in paths] == ["table.md", "table.json", "table.png"]
    written = json.loads(paths[1].read_text())
    assert len(written["cells"]) == len(results)
    first = written["cells"][0]
    assert (first["row"], first["column_label"], first["published"]) == ("vanilla", "acc.", "30.0")
    assert first["ours"] == by_cell[("vanilla", "acc.")].ours
    md = paths[0].read_text().splitlines()
    assert md[2] == "| row | column | published | ours | Δ | 95% CI | n |  |"
    assert paths[2].read_bytes().startswith(b"\x89PNG")


def test_failed_questions_count_0_and_the_table_says_so(tables: Path, tmp_path: Path) -> None:
    first = sample_questions()[0]["question"]

    def reply(prompt: str) -> str:
        if first in prompt:  # the first sample question fails
            raise ValueError("the model broke")
        return "Tamsford"

    model = ScriptedModel(default="", script={"answer": reply})
    table = load_table("toy-table1", tables)
    plan = make_plan(table, out=tmp_path / "out", model=model, datasets=["hotpotqa"],
                     rows=["vanilla"], limit=2)  # fmt: skip
    outcomes = execute(plan, model=model, progress=False)
    results = report.score_cells(plan, outcomes)
    em = next(r for r in results if r.cell.metric == "em")
    # q1 failed (0), q2 right (100)
    assert (em.ours, em.n, em.note) == (50.0, 2, "1 failed")
    assert report.legends(results)[-1] == report.FAILED_LEGEND
    # --retry-errors asks the failed question again, and only it
    calls = len(model.calls)
    execute(plan, model=model, progress=False, retry_errors=True)
    assert len(model.calls) == calls + 1


def test_a_larger_limit_runs_only_the_new_questions(tables: Path, tmp_path: Path) -> None:
    model = _scripted()
    table = load_table("toy-table1", tables)
    options = {"out": tmp_path / "out", "model": model, "datasets": ["hotpotqa"],
               "rows": ["vanilla"]}  # fmt: skip
    execute(make_plan(table, limit=2, **options), model=model, progress=False)
    assert len(model.calls) == 2
    plan = make_plan(table, limit=5, **options)
    outcomes = execute(plan, model=model, progress=False)
    assert len(model.calls) == 5
    assert {r.n for r in report.score_cells(plan, outcomes) if r.cell.run} == {5}


def test_shards_merged_into_the_run_directory_give_the_whole_table_without_a_call(
    tables: Path, tmp_path: Path
) -> None:
    from noterag.eval.merge import merge_runs

    model = _scripted()
    table = load_table("toy-table1", tables)
    plan = make_plan(table, out=tmp_path / "out", model=model, datasets=["hotpotqa"],
                     rows=["vanilla"])  # fmt: skip
    shards = [execute(plan, model=model, shard=s, progress=False)[0] for s in ("1/2", "2/2")]
    assert [o.run_dir.name for o in shards] == [
        f"{plan.runs[0].name}.shard-1-of-2", f"{plan.runs[0].name}.shard-2-of-2",
    ]  # fmt: skip
    assert sorted(shards[0].ids + shards[1].ids) == sorted(q["id"] for q in sample_questions())
    calls = len(model.calls)
    assert calls == N_SAMPLE
    merge_runs([o.run_dir for o in shards], plan.runs[0].run_dir)
    whole = execute(plan, model=model, progress=False)
    assert [o.status for o in whole] == ["finished"] and len(model.calls) == calls
    assert {r.n for r in report.score_cells(plan, whole) if r.cell.run} == {N_SAMPLE}


def test_untrusted_text_reaches_the_terminal_inert(tmp_path: Path) -> None:
    hostile = TABLE | {
        "title": "Evil \x1b]0;pwned\x07[bold red]title[/]",
        "rows": [TABLE["rows"][0] | {"label": "[link=http://x]row\x1b[2J[/link]"}],
    }
    tables = write_table(tmp_path / "t", hostile)
    result = invoke("toy-table1", "--tables", str(tables), "--dry-run")
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.stdout and "pwned" not in result.stdout
    assert "[bold red]title[/]" in result.stdout


def test_mean_interval() -> None:
    assert mean_interval([50.0]) == (None, None)
    assert mean_interval([100.0, 100.0, 100.0]) == (100.0, 100.0)
    few = mean_interval([0.0, 100.0] * 5)
    many = mean_interval([0.0, 100.0] * 200)
    assert few[0] < 50 < few[1] and many[0] < 50 < many[1]
    assert many[1] - many[0] < few[1] - few[0]


# --------------------------------------------------------------------------- the command line


class PromptRecordingSim(SimModel):
    """The simulated endpoint, keeping every prompt it was sent."""

    def serve(self, prompt: str) -> tuple[str, int]:
        self.prompts.append(prompt)
        return super().serve(prompt)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.prompts: list[str] = []


def test_the_command_runs_the_table_and_prints_it(tables: Path, tmp_path: Path) -> None:
    sim = PromptRecordingSim(0.0, 0.0)
    server, url = start(sim)
    try:
        args = ["toy-table1", "--tables", str(tables), "--model", f"openai:sim@{url}",
                "--limit", "2", "--datasets", "hotpotqa", "--out", str(tmp_path / "out"),
                "--rows", "vanilla,dpo", "--json"]  # fmt: skip
        result = invoke(*args)
        assert result.exit_code == 0, result.output
        assert len(sim.prompts) == 2
        table = json.loads(result.stdout)
        assert [c["published"] for c in table["cells"]] == TABLE["rows"][0]["values"][:4] + (
            TABLE["rows"][3]["values"][:4]
        )
        assert {c["questions"] for c in table["cells"] if c["run"]} == {2}
        assert json.loads((tmp_path / "out" / "table.json").read_text()) == table
        # again: nothing to run, the same table
        again = json.loads(invoke(*args).stdout)
        assert again["cells"] == table["cells"] and len(sim.prompts) == 2
        assert [r["status"] for r in again["runs"]] == ["finished"]
        human = invoke(*args[:-1])
        assert human.exit_code == 0
        assert "Vanilla" in human.stdout and "hotpotqa avg." in human.stdout
        assert "skipped Dpo (dpo): needs dpo-model" in human.stdout
    finally:
        server.shutdown()


def _results(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "results.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def test_sigkill_loses_nothing_and_the_next_reproduce_repeats_no_finished_question(
    tables: Path, tmp_path: Path
) -> None:
    sim = PromptRecordingSim(0.4, 0.0)  # slow enough to be killed mid-run
    server, url = start(sim)
    out = tmp_path / "out"
    args = [sys.executable, "-m", "noterag", "reproduce", "toy-table1", "--tables", str(tables),
            "--model", f"openai:sim@{url}", "--datasets", "hotpotqa", "--rows", "vanilla",
            "--out", str(out), "--quiet"]  # fmt: skip
    env = os.environ | {"NOTERAG_BASE_URL": ""}
    run_dir = out / "openai_sim" / run_name("hotpotqa", "vanilla", "paper", {})
    try:
        proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        while len(_results(run_dir)) < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(60)
        finished = {row["question"] for row in _results(run_dir)}
        assert 2 <= len(finished) < N_SAMPLE
        before = len(sim.prompts)
        done = subprocess.run(
            args, env=env, capture_output=True, text=True, timeout=300, check=False
        )
        assert done.returncode == 0, done.stderr
        asked_first, asked_again = sim.prompts[:before], sim.prompts[before:]
        # no finished question is asked again; every other one is asked again or, when its
        # reply reached the cache before the kill (the workers run questions side by side),
        # replayed from it: its prompt was sent once, by the killed run
        assert not [q for q in finished for prompt in asked_again if q in prompt]
        unfinished = {q["question"] for q in sample_questions()} - finished
        assert len(unfinished) == N_SAMPLE - len(finished)
        for question in unfinished:
            again = sum(question in prompt for prompt in asked_again)
            replayed = any(question in prompt for prompt in asked_first)
            assert again == 1 or (again == 0 and replayed), question
        assert len({row["id"] for row in _results(run_dir)}) == N_SAMPLE
        assert "Vanilla" in done.stdout
    finally:
        server.shutdown()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _sim_process(port: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "sim_endpoint.py"), "--port", str(port),
         "--base-ms", "300", "--per-token-ms", "0"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline().startswith("serving")
    return proc


def test_a_dead_endpoint_stops_the_run_and_the_next_reproduce_resumes_it(
    tables: Path, tmp_path: Path
) -> None:
    port = _free_port()
    out = tmp_path / "out"
    args = [sys.executable, "-m", "noterag", "reproduce", "toy-table1", "--tables", str(tables),
            "--model", f"openai:sim@http://127.0.0.1:{port}/v1", "--datasets", "hotpotqa",
            "--rows", "vanilla", "--out", str(out), "--quiet", "--max-retries", "1"]  # fmt: skip
    env = os.environ | {"NOTERAG_BASE_URL": ""}
    run_dir = out / "openai_sim" / run_name("hotpotqa", "vanilla", "paper", {})
    sim = _sim_process(port)
    try:
        proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        while len(_results(run_dir)) < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        sim.send_signal(signal.SIGKILL)  # the endpoint dies mid-run
        sim.wait(30)
        _, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 1
        assert stderr.decode().count("\n") == 1 and stderr.startswith(b"error: ")
        before = (run_dir / "results.jsonl").read_text().splitlines()
        assert 2 <= len(before) < N_SAMPLE
        sim = _sim_process(port)  # back, at the same address
        done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300,
                              check=False)  # fmt: skip
        assert done.returncode == 0, done.stderr
        after = (run_dir / "results.jsonl").read_text().splitlines()
        # the answers from before the death are kept as they were; the others were added
        assert after[: len(before)] == before
        assert sorted(json.loads(line)["id"] for line in after) == sorted(
            q["id"] for q in sample_questions()
        )
        # a question cut off as the endpoint died is kept as failed: the table says so
        failed = sum(1 for line in after if json.loads(line)["error"])
        table = json.loads((out / "table.json").read_text())
        notes = {c["note"] for c in table["cells"] if c["row"] == "vanilla"}
        assert notes == {
            f"{failed} failed (count 0; --retry-errors asks them again)" if failed else ""
        }
    finally:
        sim.kill()
        sim.wait(30)


# --------------------------------------------------------------------------- the local model


def test_the_smoke_command_runs_offline_with_the_local_model(
    local_model: Any, tmp_path: Path
) -> None:
    # Two of Table 1's rows on one question (the whole HotpotQA column, seven runs, takes half an
    # hour on 2 cores: the README shows that run)
    result = invoke("deepnote-table1", "--model", "local", "--limit", "1",
                    "--datasets", "hotpotqa", "--rows", "vanilla-gpt-4o-mini,deepnote-gpt-4o-mini",
                    "--out", str(tmp_path / "out"), "--json")  # fmt: skip
    assert result.exit_code == 0, result.output
    table = json.loads(result.stdout)
    ran = [c for c in table["cells"] if c["run"]]
    assert ran and all(c["ours"] is not None and c["questions"] == 1 for c in ran)
    assert all(c["published"] is not None for c in ran)
    assert (tmp_path / "out" / "table.png").exists()
