"""``noterag reproduce TABLE --dry-run`` says what the paper used and what a run needs (issue 34,
point 7): the table's other backbones and the flag that picks one, the question counts the
table knows where the files are missing, the download links of every missing input, what
``--data`` would need, and the cost of an index the plan proposes to build."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from noterag.cli import app
from noterag.reproduce.plan import (
    backbone_cells,
    download_links,
    make_plan,
    method_costs,
    table_questions,
)
from noterag.reproduce.tables import load_table, table_names


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, ["reproduce", *args])


# --------------------------------------------------------------------------- 1. backbones


def test_the_plan_names_the_other_backbones_and_their_cells(tmp_path: Path) -> None:
    table = load_table("deepnote-table1")
    plan = make_plan(table, out=tmp_path / "o")
    assert plan.backbone == "GPT-4o-mini"
    assert len(plan.cells) == 144 and plan.cells_in_table == 320
    assert list(plan.other_backbones) == table.backbones[1:]
    # each figure is the number of cells a plan for that backbone holds
    for backbone, count in plan.other_backbones.items():
        assert count == len(make_plan(table, out=tmp_path / "o", backbone=backbone).cells)
    result = invoke("deepnote-table1", "--dry-run", "--out", str(tmp_path / "o"))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "backbone: GPT-4o-mini (144 of the table's 320 cells)" in lines
    others = next(line for line in lines if line.startswith("the table's other backbones"))
    for backbone in table.backbones[1:]:
        assert f"{backbone} ({plan.other_backbones[backbone]} cells)" in others
    assert others.endswith("pick one with --backbone NAME")


def test_a_one_backbone_table_names_no_other(tmp_path: Path) -> None:
    single = [n for n in table_names() if len(load_table(n).backbones) == 1]
    assert single, "a shipped table with one backbone"
    plan = make_plan(load_table(single[0]), out=tmp_path)
    assert plan.other_backbones == {}
    result = invoke(single[0], "--dry-run", "--out", str(tmp_path))
    assert "other backbones" not in result.stdout


def test_backbone_cells_count_only_that_backbones_columns(tmp_path: Path) -> None:
    # Amber Table 2's columns differ by backbone: a plan holds its own columns only
    for name in table_names():
        table = load_table(name)
        for backbone in table.backbones:
            plan = make_plan(table, out=tmp_path, backbone=backbone)
            assert backbone_cells(table, backbone, list(table.datasets)) == len(plan.cells)


# --------------------------------------------------------------------------- 2. counts


@pytest.mark.parametrize(
    ("table", "dataset", "count"),
    [
        ("deepnote-table1", "hotpotqa", 500),
        ("deepnote-table1", "asqa", 948),
        ("deepnote-table1", "strategyqa", 500),
        ("adaptive-note-table1", "crud", 2400),
        ("resp-table2", "hotpotqa", 1000),
    ],
)
def test_the_table_knows_its_question_counts(table: str, dataset: str, count: int) -> None:
    assert table_questions(load_table(table).datasets[dataset]) == count


def test_a_sample_that_states_no_count_gives_none() -> None:
    from noterag.reproduce.tables import Dataset, Input

    ds = Dataset(name="x", task="multihop", sample="not stated by the paper",
                 questions=Input(path="x/q.json", what="q"), retriever="BM25")  # fmt: skip
    assert table_questions(ds) is None


def test_missing_questions_are_estimated_with_the_tables_count(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    table = load_table("deepnote-table1")
    plan = make_plan(table, out=tmp_path / "o", data=data, datasets=["hotpotqa", "asqa"])
    costs = method_costs()["costs"]
    for run in plan.runs:
        assert run.n_questions is None
        expected = 500 if run.dataset == "hotpotqa" else 948
        assert run.n_questions_table == expected
        calls = costs[run.estimate.measured_as]["llm_calls"] * expected
        assert run.estimate.llm_calls == pytest.approx(calls, abs=0.05)
    # --limit caps the table's count as it caps a file's
    limited = make_plan(table, out=tmp_path / "o", data=data, datasets=["asqa"], limit=10)
    assert {run.n_questions_table for run in limited.runs} == {10}
    result = invoke("deepnote-table1", "--dry-run", "--out", str(tmp_path / "o"),
                    "--data", str(data), "--datasets", "asqa")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "≈ –" not in result.stdout
    assert "questions: missing; the table's figure: 948" in result.stdout
    assert "× the table's 948 questions" in result.stdout


# --------------------------------------------------------------------------- 3. sources


def test_download_links_are_found_with_or_without_a_scheme() -> None:
    text = ("thunlp/DeepNote README's data folder (https://drive.google.com/drive/folders/1NeE, "
            "eval/x.json); ALCE also publishes huggingface.co/datasets/p/gtr-index.")  # fmt: skip
    assert download_links(text, None, "https://www.dropbox.com/s/7e/data_ids.zip (ircot)") == [
        "https://drive.google.com/drive/folders/1NeE",
        "https://huggingface.co/datasets/p/gtr-index",
        "https://www.dropbox.com/s/7e/data_ids.zip",
    ]


def test_every_missing_input_prints_its_links_and_raw_inputs_their_source(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    result = invoke("deepnote-table1", "--dry-run", "--out", str(tmp_path / "o"),
                    "--data", str(data))  # fmt: skip
    assert result.exit_code == 0, result.output
    out = result.stdout
    # Drive (the question lists), Dropbox (2Wiki's raw files), Hugging Face (ALCE's data and
    # GTR index)
    assert (
        "  download: https://drive.google.com/drive/folders/1NeEm-r7l43MQxGS1n7jJ8tPvltgcaPjY"
        in out
    )
    assert (f"  {data}/2wikimqa/raw comes from: https://www.dropbox.com/s/7ep3h8unu2njfxv/"
            "data_ids.zip") in out  # fmt: skip
    assert f"  {data}/musique/raw comes from: https://drive.google.com/file/d/" in out
    assert ("  download: https://huggingface.co/datasets/princeton-nlp/"
            "gtr-t5-xxl-wikipedia-psgs_w100-index") in out  # fmt: skip
    # a path shared by two datasets is listed once, with both
    plan = make_plan(load_table("deepnote-table1"), out=tmp_path / "o", data=data)
    paths = [m.path for m in plan.missing]
    assert len(paths) == len(set(paths))
    gtr = next(m for m in plan.missing if m.path.endswith("index-gtr"))
    assert gtr.dataset == "asqa, strategyqa"
    # every missing input whose table entry has a link prints it
    for m in plan.missing:
        for link in m.links:
            assert f"download: {link}" in out


def test_without_data_the_plan_says_what_data_would_need(tmp_path: Path) -> None:
    table = load_table("deepnote-table1")
    plan = make_plan(table, out=tmp_path / "o", datasets=["2wikimqa", "asqa"])
    assert plan.missing == []
    needs = {m.path for m in plan.data_needs}
    assert {"DIR/2wikimqa/ircot-test500.json", "DIR/2wikimqa/index", "DIR/2wikimqa/corpus.jsonl",
            "DIR/asqa/alce-dev948.json", "DIR/wikipedia/index-gtr",
            "DIR/wikipedia/psgs_w100.tsv"} <= needs  # fmt: skip
    # the dense rows (skipped without --data: Table 8's) name the dense indexes they would read
    assert "DIR/2wikimqa/index-bge" not in needs
    table8 = make_plan(load_table("deepnote-table8"), out=tmp_path / "o")
    assert any(s.reason.startswith("runs with the dense retriever") for s in table8.skipped)
    assert "DIR/2wikimqa/index-bge" in {m.path for m in table8.data_needs}
    result = invoke("deepnote-table1", "--dry-run", "--out", str(tmp_path / "o"),
                    "--datasets", "2wikimqa")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert (
        "--data DIR (the paper's data; without it every run stands on the shipped sample) "
        "would need to hold:" in result.stdout
    )
    assert (
        "  (2wikimqa) the BM25 index of the corpus: DIR/2wikimqa/index; run: noterag index "
        "DIR/2wikimqa/corpus.jsonl --out DIR/2wikimqa/index --style deepnote" in result.stdout
    )
    with_data = json.loads(invoke("deepnote-table1", "--dry-run", "--json", "--out",
                                  str(tmp_path / "o"), "--data", str(tmp_path)).stdout)  # fmt: skip
    assert with_data["data_needs"] == []


# --------------------------------------------------------------------------- 4. cost


def test_a_proposed_index_build_carries_its_estimate(tmp_path: Path) -> None:
    from noterag.retrievers.estimate import estimate

    data = tmp_path / "data"
    data.mkdir()
    # the paper searched exactly: a flat index by default, with what searching it holds
    exact = make_plan(load_table("deepnote-table1"), out=tmp_path / "o", data=data)
    flat = next(m for m in exact.missing if m.path.endswith("wikipedia/index-gtr"))
    assert flat.cost is not None and "--dense-index flat" in flat.provide
    assert flat.cost.startswith(
        "building it (flat index of 21,015,324 passages, the table's count)"
    )
    assert f"about {21_015_324 * 768 * 4 / 2**30:,.1f} GiB to hold in memory" in flat.cost
    assert not any(run.approximate for run in exact.runs)
    # IVF-PQ only when asked, beside the exact index, its cells marked approximate
    plan = make_plan(
        load_table("deepnote-table1"), out=tmp_path / "o", data=data, index_type="ivfpq"
    )
    gtr = next(m for m in plan.missing if m.path.endswith("wikipedia/index-gtr-ivfpq"))
    assert "--dense-index ivfpq" in gtr.provide and gtr.provide.endswith("index-gtr-ivfpq")
    dense_runs = [run for run in plan.runs if run.index.startswith("dense:")]
    assert dense_runs and all(run.approximate for run in dense_runs)
    assert all("ivfpq (approximate)" in run.index_type for run in dense_runs)
    marked = {c.run for c in plan.cells if c.approximate}
    assert marked == {run.name for run in dense_runs}
    guess = estimate(21_015_324, "ivfpq")
    assert gtr.cost is not None
    assert gtr.cost.startswith(
        "building it (ivfpq index of 21,015,324 passages, the table's count)"
    )
    assert (
        f"about {guess.build_s / 60:,.0f} min plus embedding 21,015,324 passages with "
        "sentence-transformers/gtr-t5-xxl" in gtr.cost
    )
    assert f"disk about {guess.disk_gib:,.1f} GiB" in gtr.cost
    bm25 = next(m for m in plan.missing if m.path.endswith("hotpotqa/index"))
    assert bm25.cost is not None and "bm25 index of 5,233,329 passages" in bm25.cost
    # a downloaded input is not built: no cost
    assert all(
        m.cost is None for m in plan.missing if not m.provide.startswith("run: noterag index")
    )
    result = invoke("deepnote-table1", "--dry-run", "--out", str(tmp_path / "o"),
                    "--data", str(data), "--datasets", "asqa", "--index-type", "ivfpq")  # fmt: skip
    assert f"  warning: {gtr.cost}" in result.stdout.splitlines()
    result = invoke("deepnote-table1", "--dry-run", "--out", str(tmp_path / "o"),
                    "--data", str(data), "--datasets", "asqa")  # fmt: skip
    assert f"  warning: {flat.cost}" in result.stdout.splitlines()


def test_a_corpus_on_disk_is_counted_for_the_estimate(tmp_path: Path) -> None:
    from noterag.retrievers.sample import sample_corpus

    data = tmp_path / "data"
    (data / "2wikimqa").mkdir(parents=True)
    (data / "2wikimqa" / "corpus.jsonl").write_bytes(sample_corpus().read_bytes())
    lines = len(sample_corpus().read_bytes().splitlines())
    plan = make_plan(load_table("deepnote-table1"), out=tmp_path / "o", data=data,
                     datasets=["2wikimqa"])  # fmt: skip
    index = next(m for m in plan.missing if m.path.endswith("2wikimqa/index"))
    assert index.cost is not None
    assert f"bm25 index of {lines:,} passages, counted in the corpus" in index.cost


# --------------------------------------------------------------------------- 5. run names


def test_words_are_written_bare_and_every_name_reads_back() -> None:
    from noterag.reproduce.plan import run_name

    name = run_name("musique", "deepnote", "official", {"official_code": "deepnote", "top_k": 5})
    assert name == "musique.deepnote.official.official_code=deepnote.top_k=5"
    # a word JSON reads as a number, boolean or null is not written bare: the name would not
    # say which it is
    plain = {run_name("h", "vanilla", "paper", {"x": v}) for v in (5, "5", True, "true", None,
                                                                   "null", "NaN", "a", "_a")}  # fmt: skip
    assert len(plain) == 9
    assert run_name("h", "vanilla", "paper", {"x": 5}) == "h.vanilla.paper.x=5"
    assert run_name("h", "vanilla", "paper", {"x": "_a"}) == "h.vanilla.paper.x=_a"
    assert ".h-" in run_name("h", "vanilla", "paper", {"x": "5"})


def test_every_shipped_run_has_a_readable_name_of_its_own(tmp_path: Path) -> None:
    names: dict[str, tuple[Any, ...]] = {}
    for table_name in table_names():
        table = load_table(table_name)
        for backbone in table.backbones:
            for run in make_plan(table, out=tmp_path, backbone=backbone).runs:
                identity = (
                    run.dataset,
                    run.method,
                    run.profile,
                    json.dumps(run.settings, sort_keys=True),
                )
                assert names.setdefault(run.name, identity) == identity
                assert ".h-" not in run.name and '"' not in run.name and "=_" not in run.name


def _official_table(tmp_path: Path) -> Path:
    from test_reproduce import TABLE, write_table

    row = TABLE["rows"][0] | {"id": "official", "profile": "official",
                              "settings": {"official_code": "deepnote", "top_k": 3}}  # fmt: skip
    return write_table(tmp_path / "t", TABLE | {"rows": [row]})


@pytest.mark.parametrize("shard", [None, "1/2"])
def test_a_run_under_its_name_from_before_words_lost_their_quotes_resumes_there(
    tmp_path: Path, shard: str | None
) -> None:
    from noterag.eval import run_eval
    from noterag.reproduce.plan import _readable_name
    from noterag.reproduce.run import run_dir_of
    from scripted import VELMORA_ROWS, KeywordRetriever, ScriptedModel, passages

    table = load_table("toy-table1", _official_table(tmp_path))
    model = ScriptedModel(default="1871")
    plan = make_plan(table, out=tmp_path / "out", model=model, datasets=["hotpotqa"], limit=1)
    (run,) = plan.runs
    assert run.name == "hotpotqa.vanilla.official.official_code=deepnote.top_k=3"
    old = Path(run.run_dir).parent / _readable_name("hotpotqa", "vanilla", "official", run.settings)
    assert old.name == "hotpotqa.vanilla.official.official_code=_deepnote_.top_k=3"
    run_eval(run.method, run.questions, run_dir_of(replace(run, run_dir=str(old)), shard),
             index=KeywordRetriever(passages=passages(*VELMORA_ROWS)), model=model,
             context=run.context, limit=1, progress=False)  # fmt: skip
    again = make_plan(table, out=tmp_path / "out", model=model, datasets=["hotpotqa"], limit=1)
    assert again.runs[0].run_dir == str(old)  # found, and resumed where it is
    # another run that the old name would fit (other questions) is not picked up
    other = tmp_path / "data"
    (other / "hotpotqa").mkdir(parents=True)
    from noterag.retrievers.sample import sample_questions_path

    (other / "hotpotqa" / "questions.jsonl").write_bytes(sample_questions_path().read_bytes())
    elsewhere = make_plan(table, out=tmp_path / "out", model=model, data=other,
                          datasets=["hotpotqa"], limit=1)  # fmt: skip
    assert elsewhere.runs[0].run_dir == str(Path(run.run_dir))
    # once the run's own directory exists, it is the one used
    Path(run.run_dir).mkdir()
    mine = make_plan(table, out=tmp_path / "out", model=model, datasets=["hotpotqa"], limit=1)
    assert mine.runs[0].run_dir == run.run_dir


# --------------------------------------------------------------------------- what the paper ran


@pytest.mark.parametrize("name", table_names())
def test_the_dry_run_shows_each_runs_settings_and_each_datasets_sample(
    name: str, tmp_path: Path
) -> None:
    table = load_table(name)
    plan = make_plan(table, out=tmp_path / "o")
    result = invoke(name, "--dry-run", "--out", str(tmp_path / "o"))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    for run in plan.runs:
        settings = json.dumps(run.context, sort_keys=True, ensure_ascii=False)
        at = lines.index(f"{run.name} (rows: {', '.join(run.rows)})") + 1
        block = lines[at : at + 8]
        assert block[0] == f"  {run.method}, profile {run.profile}, settings: {settings}"
        # what produced the published number: backbone, decoding, sample, index, metric
        assert block[1].startswith(f"  backbone: {run.backbone} (the published number's")
        assert block[2] == f"  decoding: {run.decoding}" and run.decoding
        assert block[3] == f"  the paper's sample: {table.datasets[run.dataset].sample}"
        assert block[5] == f"  index: {run.index_type}: {run.index}" and run.index_type
        # on the shipped sample, the index the paper searched is named beside the stand-in
        assert "(the paper's: " in run.index_type or run.index_type == "none (closed book)"
        assert block[6] == f"  metrics: {', '.join(run.metrics)}" and run.metrics
    # every cell no run gives says why: its row skipped, its metric not scored, or apart
    text = "\n".join(lines)
    skipped = {s.row: s.reason for s in plan.skipped}
    for cell in plan.cells:
        if cell.run is None:
            why = skipped.get(cell.row) or cell.unscored
            assert why and why in text, (cell.row, cell.metric)
        if cell.not_comparable:
            assert cell.not_comparable in text
    for key in {run.dataset for run in plan.runs}:
        ds = table.datasets[key]
        line = f"{key} ({ds.name}): the paper's sample: {ds.sample}; retriever: {ds.retriever}"
        assert line in lines


def test_a_built_index_is_judged_by_its_manifest(tmp_path: Path) -> None:
    """An index already under --data is what it is: an IVF-PQ one (its manifest's faiss kind)
    marks its runs' cells approximate even without --index-type; a flat one does not."""
    from noterag.retrievers.indexdir import MANIFEST_NAME

    data = tmp_path / "data"
    index = data / "wiki18" / "index-e5"
    index.mkdir(parents=True)
    for kind, approximate in (("ivfpq", True), ("flat", False)):
        (index / MANIFEST_NAME).write_text(json.dumps({"kind": "dense", "faiss": {"kind": kind}}))
        plan = make_plan(load_table("resp-table2"), out=tmp_path / "o", data=data, rows=["resp"])
        assert plan.runs and all(bool(run.approximate) == approximate for run in plan.runs)
        assert all(f"dense, {'ivfpq (approximate)' if approximate else 'exact (FAISS flat)'}, built"
                   in run.index_type for run in plan.runs)  # fmt: skip
        assert all(bool(c.approximate) == approximate for c in plan.cells if c.run)
