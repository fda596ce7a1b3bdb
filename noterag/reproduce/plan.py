"""What ``noterag reproduce TABLE`` runs: the plan of a published table.

A *run* is one distinct (method, profile, settings, dataset) among the selected rows of the
chosen backbone; the cells of every row that shares it share its run (one eval run directory,
``OUT/<model>/<run name>``). A row that cannot be run faithfully is *skipped* with its reason
(the table says so, it needs an input the user did not give, its method or profile is not in
this noterag), never run with something else. Every input a run needs and does not find
(questions, corpus, index) is listed with what provides it: the download source or the command
from the table file.

Without ``--data`` every dataset stands on the shipped sample (6 questions over a 50-passage
corpus, its BM25 index built once into ``OUT/sample-index``): a smoke run needs nothing else,
and its numbers say only that the pipeline runs, not what the paper measured.

The estimate of model calls and tokens per run is the method's measured mean per question
(``noterag/data/method_costs.json``, written by ``bench/method_costs.py``: every method on the
sample questions against the simulated endpoint) times the run's questions.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from noterag.errors import ConfigError, NoteragError
from noterag.reproduce.tables import UNSCORED_METRICS, Dataset, Input, Row, Table, published_number

SAMPLE = "sample"
SAMPLE_INDEX = "sample-index"  # OUT/sample-index: noterag.sample.sample_index(OUT) builds it
_UNSAFE = re.compile(r"[^A-Za-z0-9._=-]+")


@dataclass(frozen=True)
class Missing:
    """An input a run needs and does not find, with what provides it."""

    dataset: str
    what: str
    path: str
    provide: str  # the command that makes it, or where to download it from


@dataclass(frozen=True)
class Estimate:
    """Model calls and tokens of a run: the method's measured means per question × questions."""

    llm_calls: float | None
    tokens: float | None
    measured_as: str | None  # the cost file's key (method/profile) the means come from


@dataclass(frozen=True)
class PlannedRun:
    name: str  # its directory's name under OUT/<model>/
    method: str
    profile: str
    settings: dict[str, Any]
    dataset: str  # the table's dataset key
    rows: list[str]  # the ids of the rows whose cells it gives
    questions: str  # the question file
    n_questions: int | None  # after --limit; None: the file is missing
    index: str  # the retriever spec
    run_dir: str
    estimate: Estimate
    missing: list[Missing] = field(default_factory=list)

    @property
    def context(self) -> dict[str, Any]:
        """The method's settings for ``run_eval``."""
        return self.settings | {"profile": self.profile}


@dataclass(frozen=True)
class Skipped:
    row: str
    label: str
    reason: str


@dataclass(frozen=True)
class Cell:
    row: str
    column: int  # index into the table's columns
    dataset: str
    metric: str
    published: str | None  # as printed
    published_value: float | None
    run: str | None  # the run giving our value; None: a skipped row, or a metric not scored
    # why ours is not compared with the printed value (the table's Column.not_comparable): shown,
    # never starred, never given a Δ
    not_comparable: str | None = None
    unscored: str | None = None  # why noterag does not compute this metric (UNSCORED_METRICS)


@dataclass(frozen=True)
class Plan:
    table: Table
    backbone: str
    model: str
    out: Path
    data: Path | None  # None: the shipped sample
    limit: int | None
    datasets: list[str]
    rows: list[Row]
    columns: list[int]  # indices into the table's columns
    runs: list[PlannedRun]
    skipped: list[Skipped]
    cells: list[Cell]

    @property
    def missing(self) -> list[Missing]:
        seen: dict[tuple[str, str], Missing] = {}
        for run in self.runs:
            for item in run.missing:
                seen.setdefault((item.dataset, item.path), item)
        return list(seen.values())

    def to_json(self) -> dict[str, Any]:
        table = self.table
        return {
            "table": table.id,
            "paper": table.paper,
            "number": table.number,
            "title": table.title,
            "backbone": self.backbone,
            "model": self.model,
            "out": str(self.out),
            "data": str(self.data) if self.data else None,
            "limit": self.limit,
            "runs": [asdict(run) | {"context": run.context} for run in self.runs],
            "skipped": [asdict(s) for s in self.skipped],
            "missing": [asdict(m) for m in self.missing],
            "cells": [
                asdict(c)
                | {"row_label": _label(table, c.row), "column_label": table.columns[c.column].label}
                for c in self.cells
            ],
        }


def make_plan(
    table: Table,
    *,
    out: str | os.PathLike[str],
    model: str | None = None,
    data: str | os.PathLike[str] | None = None,
    datasets: list[str] | None = None,
    rows: list[str] | None = None,
    backbone: str | None = None,
    limit: int | None = None,
) -> Plan:
    """The plan of ``table``: its runs, skipped rows, missing inputs and cells (see the module).
    A dataset, row or backbone the table does not have is a ConfigError naming the choices."""
    from noterag.eval.loop import model_label

    if limit is not None and limit < 1:
        raise ConfigError(f"--limit must be at least 1, not {limit}")
    backbone = _choose_backbone(table, backbone)
    chosen_datasets = _choose(datasets, list(table.datasets), "dataset", table.id)
    chosen_rows = _choose_rows(table, rows, backbone)
    columns = [i for i, c in enumerate(table.columns) if c.dataset in chosen_datasets]
    out_dir = Path(out).expanduser()
    data_dir = Path(data).expanduser() if data is not None else None
    if data_dir is not None and not data_dir.is_dir():
        raise ConfigError(f"--data {data_dir}: not a directory")
    label = model_label(model)
    model_dir = out_dir / _safe(label.split("@", 1)[0])

    runs: dict[str, PlannedRun] = {}
    skipped: list[Skipped] = []
    cells: list[Cell] = []
    for row in chosen_rows:
        reason = skip_reason(row)
        if reason is None and row.retrieval == "dense" and data_dir is None:
            reason = (
                "runs with the dense retriever of the paper (the table's dense index): pass "
                "--data DIR holding it (the shipped sample has a BM25 index only)"
            )
        if reason is not None:
            skipped.append(Skipped(row.id, row.label, reason))
        printed = row  # `row` below: as run on each column's dataset (its settings added)
        for column, value in table.cells(printed):
            row = with_dataset_settings(printed, table.datasets[column.dataset])
            if column.dataset not in chosen_datasets:
                continue
            if column.backbone not in (None, backbone):  # a column of another backbone
                continue
            i = table.columns.index(column)
            name = None
            unscored = UNSCORED_METRICS.get(column.metric)
            if reason is None and unscored is None:  # never a run for cells it cannot fill
                assert row.method is not None  # skip_reason's
                name = run_name(column.dataset, row.method, profile_of(row), row.settings,
                                dense=row.retrieval == "dense")  # fmt: skip
                run = runs.get(name)
                if run is None:
                    ds = table.datasets[column.dataset]
                    run = _planned(
                        name, row, column.dataset, ds, data_dir, out_dir, model_dir, limit
                    )
                if row.id not in run.rows:
                    run.rows.append(row.id)
                runs[name] = run
            cells.append(
                Cell(
                    row.id,
                    i,
                    column.dataset,
                    column.metric,
                    value,
                    published_value(value),
                    name,
                    column.not_comparable,
                    unscored,
                )
            )
    return Plan(
        table=table,
        backbone=backbone,
        model=label,
        out=out_dir,
        data=data_dir,
        limit=limit,
        datasets=chosen_datasets,
        rows=chosen_rows,
        columns=columns,
        runs=list(runs.values()),
        skipped=skipped,
        cells=cells,
    )


def skip_reason(row: Row) -> str | None:
    """Why ``row`` cannot be run as published, or None."""
    from noterag.context import resolve_context
    from noterag.methods import METHODS

    if row.skip:
        return row.skip
    if row.kind == "derived" or row.method is None:
        return "not a run (the table derives it from other rows)"
    if row.requires:
        from noterag.reproduce.tables import REQUIREMENTS

        needs = "; ".join(f"{name} ({REQUIREMENTS[name]})" for name in row.requires)
        return f"needs {needs}, which reproduce is not given"
    if row.method not in METHODS:
        return f"method {row.method!r} is not registered in this noterag"
    spec = METHODS[row.method]
    profile = profile_of(row)
    if profile not in spec.profiles:
        return f"{row.method} has no profile {profile!r} (its profiles: {', '.join(spec.profiles)})"
    try:
        resolve_context(spec.context, row.settings | {"profile": profile})
    except NoteragError as exc:
        return f"its settings are not {row.method}'s: {exc}"
    return None


def with_dataset_settings(row: Row, ds: Dataset) -> Row:
    """``row`` as run on dataset ``ds``: the dataset's settings (Adaptive-Note's CRUD top_k 2,
    ReSP's max_tokens 200) under the row's own, which win."""
    if not ds.settings or ds.settings.items() <= row.settings.items():
        return row
    return row.model_copy(update={"settings": ds.settings | row.settings})


def profile_of(row: Row) -> str:
    """The row's profile; a row that names none runs the methods' default, paper."""
    return row.profile or "paper"


def run_name(
    dataset: str, method: str, profile: str, settings: dict[str, Any], *, dense: bool = False
) -> str:
    """A run's directory name, from its identity: ``hotpotqa.deepnote.official.top_k=5``
    (``.dense`` after it for a row on the dense retriever).

    Names are injective: two runs that differ in anything (a setting's punctuation too) never
    share a directory, so a row is never scored from another row's run. The readable name is
    the identity itself where it can be read back unambiguously (``_readable_is_exact``: plain
    names, numbers, booleans and plain words as values, the shipped tables' every run), and
    keeps the name earlier versions gave such runs, so their directories resume. Anything else
    (a value with spaces or punctuation, a list, a key with a dot) loses information in a file
    name: its name is a shortened readable part and ``.h-`` with a hash of the whole identity.
    """
    readable = _readable_name(dataset, method, profile, settings, dense=dense)
    if _readable_is_exact(dataset, method, profile, settings) and len(readable) <= _MAX_NAME:
        return readable
    identity = json.dumps(
        [dataset, method, profile, settings, dense], sort_keys=True, ensure_ascii=False
    )
    digest = hashlib.sha256(identity.encode()).hexdigest()[:12]
    return f"{readable[: _MAX_NAME - 16].rstrip('._-')}.h-{digest}"


def _readable_name(
    dataset: str, method: str, profile: str, settings: dict[str, Any], *, dense: bool = False
) -> str:
    """The identity as a file name, every run of other characters as one ``_`` (the only name
    before names became injective: what ``_earlier_dir`` looks for)."""
    parts = [dataset, method, profile]
    parts += [f"{k}={json.dumps(v, sort_keys=True)}" for k, v in sorted(settings.items())]
    readable = _safe(".".join(parts))
    return _safe(f"{readable}.dense") if dense else readable


# A file name's room (255 bytes on most filesystems), less a shard's suffix (.shard-I-of-N).
_MAX_NAME = 200
_PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
_WORD = re.compile(r"[A-Za-z0-9_-]*[A-Za-z0-9-]")  # a string value, written "_word" in a name
_NUMBER_TEXT = re.compile(r"-?[0-9][0-9.eE-]*")


def _readable_is_exact(dataset: str, method: str, profile: str, settings: dict[str, Any]) -> bool:
    """Whether the readable name can be read back into exactly this identity: the names and
    keys plain (no ``.`` or ``=``, which separate the parts), every value a number, a boolean,
    null or a plain word (``"deepnote"`` is written ``_deepnote``; one ending in ``_`` would
    lose it to the name's trimmed end). A hashed name always ends in ``.h-<hex>``, which no
    readable name does (its last part holds ``=``, is a profile after exactly two parts, a
    number's digits or ``dense``)."""
    if not all(_PLAIN.fullmatch(name) for name in (dataset, method, profile, *settings)):
        return False
    for value in settings.values():
        if isinstance(value, str):
            if not _WORD.fullmatch(value):
                return False
        elif isinstance(value, bool) or value is None:
            continue
        elif isinstance(value, int | float):
            if not _NUMBER_TEXT.fullmatch(json.dumps(value)):
                return False  # inf, nan, 1e+20
        else:
            return False
    return True


def published_value(value: str | None) -> float | None:
    """A printed cell as a number (``tables.published_number``, the one parser): ``"14.6↑"`` →
    14.6, ``"(13.9↑)"`` → 13.9; ``None`` ("-" in the paper) or a text with no number → None."""
    try:
        return published_number(value)
    except ValueError:  # a user's table may print text ("n/a"): shown, not compared
        return None


# --------------------------------------------------------------------------- selection


def _choose_backbone(table: Table, backbone: str | None) -> str:
    if backbone is None:
        return table.backbones[0]
    if backbone not in table.backbones:
        raise ConfigError(
            f"{table.id} has no backbone {backbone!r}; choose one of {', '.join(table.backbones)}"
        )
    return backbone


def _choose(wanted: list[str] | None, known: list[str], what: str, table: str) -> list[str]:
    if not wanted:
        return known
    unknown = [w for w in wanted if w not in known]
    if unknown:
        raise ConfigError(
            f"{table} has no {what} {', '.join(map(repr, unknown))}; choose among {', '.join(known)}"
        )
    return [k for k in known if k in wanted]


def _choose_rows(table: Table, rows: list[str] | None, backbone: str) -> list[Row]:
    """The rows run with ``backbone`` (or with no backbone of their own), ``rows`` only if given."""
    ids = _choose(rows, [r.id for r in table.rows], "row", table.id)
    chosen = []
    for row in table.rows:
        if row.id not in ids:
            continue
        if row.backbone not in (None, backbone):
            if rows:  # named on purpose: say how to get it
                raise ConfigError(
                    f"row {row.id!r} of {table.id} was run with {row.backbone}, not {backbone}; "
                    f"pass --backbone {row.backbone!r}"
                )
            continue
        chosen.append(row)
    return chosen


# --------------------------------------------------------------------------- one run


def _planned(
    name: str,
    row: Row,
    key: str,
    ds: Dataset,
    data: Path | None,
    out: Path,
    model_dir: Path,
    limit: int | None,
) -> PlannedRun:
    assert row.method is not None
    profile = profile_of(row)
    missing: list[Missing] = []
    if data is None:
        from noterag.sample import sample_questions_path

        questions = sample_questions_path()
        index = sample_index_spec(out)
    else:
        questions = data / ds.questions.path
        if not questions.exists():
            missing.append(_missing(key, ds.questions, data))
        if retrieves(row.method):
            index = _index_spec(key, ds, data, missing, dense=row.retrieval == "dense")
        else:  # closed book: no index, no corpus; the sample index stands in, never searched
            index = sample_index_spec(out)
    n = _count(questions, limit) if questions.exists() else None
    run_dir = _earlier_dir(model_dir, name, key, row, questions) or model_dir / name
    return PlannedRun(
        name=name,
        method=row.method,
        profile=profile,
        settings=dict(row.settings),
        dataset=key,
        rows=[],
        questions=str(questions),
        n_questions=n,
        index=index,
        run_dir=str(run_dir),
        estimate=estimate(row.method, profile, n),
        missing=missing,
    )


def sample_index_spec(out: Path) -> str:
    """The spec of the sample index built once into ``OUT/sample-index`` (``run.execute``)."""
    return f"bm25:{out / SAMPLE_INDEX}"


def retrieves(method: str) -> bool:
    """Whether ``method`` searches a retriever (``MethodSpec.retrieves``): a closed-book run
    needs no index or corpus."""
    from noterag.methods import METHODS

    return METHODS[method].retrieves


def _earlier_dir(model_dir: Path, name: str, key: str, row: Row, questions: Path) -> Path | None:
    """The directory an earlier noterag gave this run, where its name now has a hash
    (``run_name``) and only that directory exists: used if its run.json is this very run
    (method, settings, questions), so a run started before the names became injective
    resumes. Another row's run that shared the old name is never picked up."""
    if not name.rsplit(".", 1)[-1].startswith("h-") or (model_dir / name).exists():
        return None
    assert row.method is not None
    from noterag.eval.runs import RUN_FILE, RunDirError, read_json_file

    legacy = _readable_name(
        key, row.method, profile_of(row), row.settings, dense=row.retrieval == "dense"
    )
    old = model_dir / legacy
    if not (old / RUN_FILE).is_file():
        return None
    try:
        config = read_json_file(old / RUN_FILE)
    except RunDirError:
        return None
    context = json.loads(json.dumps(row.settings | {"profile": profile_of(row)}))
    same = (
        config.get("method") == row.method
        and config.get("context") == context
        and config.get("dataset") == str(questions.expanduser().resolve())
    )
    return old if same else None


def _index_spec(
    key: str, ds: Dataset, data: Path, missing: list[Missing], *, dense: bool = False
) -> str:
    """The retriever spec of dataset ``key`` under ``data`` (``dense``: its dense retriever);
    what it needs and lacks goes to ``missing`` (the index, and the corpus it is built from)."""
    spec, index = ds.retriever_spec, ds.index
    if dense:
        spec, index = ds.dense_retriever_spec, ds.dense_index
    if spec is None and index is not None:
        spec = f"{'dense' if dense else 'bm25'}:{{data}}/{index.path}"
    if spec is None:
        missing.append(
            Missing(key, "a retriever for this dataset", "-", "the table file names none")
        )
        return ""
    if index is not None and not (data / index.path).exists():
        missing.append(_missing(key, index, data))
        if ds.corpus is not None and not (data / ds.corpus.path).exists():
            missing.append(_missing(key, ds.corpus, data))
    return spec.replace("{data}", str(data))


def _missing(key: str, item: Input, data: Path) -> Missing:
    path = data / item.path
    if item.command:
        provide = "run: " + item.command.replace("{data}", str(data))
    elif item.source:
        provide = f"download from {item.source} into {path}"
    else:
        provide = "the table file says nothing of where it comes from"
    return Missing(key, item.what, str(path), provide)


def _count(path: Path, limit: int | None) -> int:
    from noterag.datasets import load_dataset

    return len(load_dataset(path, limit=limit))


# --------------------------------------------------------------------------- estimate

COSTS_FILE = "method_costs.json"


@cache
def method_costs() -> dict[str, Any]:
    """The measured costs per question (``bench/method_costs.py`` writes the file)."""
    text = resources.files("noterag").joinpath("data", COSTS_FILE).read_text("utf-8")
    value: dict[str, Any] = json.loads(text)
    return value


def estimate(method: str, profile: str, questions: int | None) -> Estimate:
    """The run's model calls and tokens: the measured means of (method, profile), else of the
    method's paper profile, times ``questions``; None where nothing was measured."""
    costs = method_costs()["costs"]
    key = next((k for k in (f"{method}/{profile}", f"{method}/paper") if k in costs), None)
    if key is None or questions is None:
        return Estimate(None, None, key)
    cost = costs[key]
    tokens = cost["prompt_tokens"] + cost["completion_tokens"]
    return Estimate(round(cost["llm_calls"] * questions, 1), round(tokens * questions), key)


def _label(table: Table, row_id: str) -> str:
    return table.row_title(row_id)


def _safe(text: str) -> str:
    """A file name from ``text``: every run of other characters as one ``_``."""
    return _UNSAFE.sub("_", text).strip("_") or "_"
