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

import glob
import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass, field, replace
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from noterag.base.errors import ConfigError, NoteragError
from noterag.reproduce.tables import (
    JUDGED_METRICS,
    UNSCORED_METRICS,
    Dataset,
    Input,
    Row,
    Table,
    published_number,
)

SAMPLE = "sample"
SAMPLE_INDEX = (
    "sample-index"  # OUT/sample-index: noterag.retrievers.sample.sample_index(OUT) builds it
)
_UNSAFE = re.compile(r"[^A-Za-z0-9._=-]+")


@dataclass(frozen=True)
class Missing:
    """An input a run needs and does not find, with what provides it."""

    dataset: str
    what: str
    path: str
    provide: str  # the command that makes it, or where to download it from
    # where the table says it (or the command's input) is downloaded from, as written there
    source: str | None = None
    # the download links in what the table says of it (Dropbox, Google Drive, Hugging Face...)
    links: list[str] = field(default_factory=list)
    # the command's own input where the table names a source for it (corpus-from's DIR/raw)
    needs: str | None = None
    # what building it costs (an index the plan proposes to build): one line, None if unknown
    cost: str | None = None


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
    # the number of questions the table's sample says (after --limit), where the file is
    # missing: what the estimate is made with then
    n_questions_table: int | None = None
    # what produced the published number, per run (--dry-run shows it): the row's backbone, the
    # decoding every call gets, the index searched, the paper's question sample, the metrics
    backbone: str | None = None
    decoding: str = ""
    index_type: str = ""
    sample: str = ""
    metrics: list[str] = field(default_factory=list)
    # why this run's cells are not the paper's search (an approximate index where it searched
    # exactly); None: the paper's
    approximate: str | None = None

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
    # the run's index is approximate where the paper searched exactly (PlannedRun.approximate)
    approximate: str | None = None


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
    # the table's other backbones, each with its cells among the chosen datasets (--backbone)
    other_backbones: dict[str, int] = field(default_factory=dict)
    cells_in_table: int = 0  # the table's cells among the chosen datasets, every backbone's
    # without --data: what --data DIR would need to hold for these runs ("DIR" in the paths)
    data_needs: list[Missing] = field(default_factory=list)
    # --judge: the model that scores the judged metrics (CRUD's RAGQuestEval); None: unscored
    judge: str | None = None

    @property
    def remote_indexes(self) -> list[str]:
        """The indexes the runs would search on another host (a table's ``es:http://...``
        spec): a table file is text from anywhere, so these are shown in the plan and searched
        only with ``--allow-remote-index``."""
        found = {
            part.strip() for run in self.runs for part in run.index.split(",") if "://" in part
        }
        return sorted(found)

    @property
    def missing(self) -> list[Missing]:
        """Every run's missing inputs, each path once (a corpus two datasets share is listed
        once, its datasets joined)."""
        seen: dict[str, Missing] = {}
        for run in self.runs:
            for item in run.missing:
                known = seen.get(item.path)
                if known is None:
                    seen[item.path] = item
                elif item.dataset not in known.dataset.split(", "):
                    seen[item.path] = replace(known, dataset=f"{known.dataset}, {item.dataset}")
        return list(seen.values())

    @property
    def judge_calls(self) -> int | None:
        """The judge's model calls (one per question of each run with a judged cell); None:
        no judge, or a run's questions unknown."""
        if self.judge is None:
            return None
        judged = {c.run for c in self.cells if c.run and c.metric in JUDGED_METRICS}
        counts = [
            r.n_questions if r.n_questions is not None else r.n_questions_table
            for r in self.runs
            if r.name in judged
        ]
        return None if any(n is None for n in counts) else sum(n or 0 for n in counts)

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
            "other_backbones": self.other_backbones,
            "cells_in_table": self.cells_in_table,
            "data_needs": [asdict(m) for m in self.data_needs],
            "judge": self.judge,
            "judge_calls": self.judge_calls,
            "remote_indexes": self.remote_indexes,
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
    index_type: str = "exact",
    judge: str | None = None,
) -> Plan:
    """The plan of ``table``: its runs, skipped rows, missing inputs and cells (see the module).
    A dataset, row or backbone the table does not have is a ConfigError naming the choices.
    ``index_type``: "exact" (default) searches each dense index exactly (FAISS flat, the papers'
    ``IndexFlatIP``); "ivfpq" builds and searches IVF-PQ indexes instead (beside the exact
    ones, ``<index>-ivfpq``), and the cells of those runs are marked approximate. ``judge``:
    the model scoring CRUD's RAGQuestEval cells (None: they are shown, not scored, not run)."""
    from noterag.eval.loop import model_label

    if limit is not None and limit < 1:
        raise ConfigError(f"--limit must be at least 1, not {limit}")
    if index_type not in INDEX_TYPES:
        raise ConfigError(
            f"--index-type must be one of {', '.join(INDEX_TYPES)}, not {index_type!r}"
        )
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
            if judge is not None and column.metric in JUDGED_METRICS:
                unscored = _unanswered(row, table.datasets[column.dataset])
            if reason is None and unscored is None:  # never a run for cells it cannot fill
                assert row.method is not None  # skip_reason's
                name = run_name(column.dataset, row.method, profile_of(row), row.settings,
                                dense=row.retrieval == "dense")  # fmt: skip
                run = runs.get(name)
                if run is None:
                    ds = with_index_type(table.datasets[column.dataset], index_type)
                    run = _planned(
                        name, row, column.dataset, ds, data_dir, out_dir, model_dir, limit
                    )
                    run = replace(run, backbone=row.backbone or backbone)
                if row.id not in run.rows:
                    run.rows.append(row.id)
                if column.metric not in run.metrics:
                    run.metrics.append(column.metric)
                gt = table.datasets[column.dataset].ground_truth
                if unscored is None and column.metric in JUDGED_METRICS and gt is not None:
                    _need_ground_truth(run, column.dataset, gt, data_dir)
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
                    table.not_comparable(printed, column),
                    unscored,
                    runs[name].approximate if name is not None else None,
                )
            )
    planned = list(runs.values())
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
        runs=planned,
        skipped=skipped,
        cells=cells,
        other_backbones={
            b: backbone_cells(table, b, chosen_datasets) for b in table.backbones if b != backbone
        },
        cells_in_table=sum(
            1
            for row in table.rows
            for column, _ in table.cells(row)
            if column.dataset in chosen_datasets
        ),
        data_needs=[]
        if data_dir is not None
        else _data_needs(table, chosen_rows, planned, index_type),
        judge=judge,
    )


def _unanswered(row: Row, ds: Dataset) -> str | None:
    """Why ``row`` makes no run for a judged cell of ``ds`` (its method has no answer prompt
    for the dataset's task), or None."""
    from noterag.core.tasks import answerable_tasks
    from noterag.registry.methods import METHODS

    if row.method is None or row.method not in METHODS:
        return None
    tasks = answerable_tasks(METHODS[row.method], profile_of(row))
    if tasks is None or ds.task in tasks:
        return None
    return (
        f"{row.method} has no {ds.task} answer prompt (the authors ran CRUD with Chinese prompt "
        "files noterag does not ship)"
    )


def _need_ground_truth(run: PlannedRun, key: str, gt: Input, data: Path | None) -> None:
    """The judge's ground truth among the run's missing inputs when it is not under --data
    (the shipped sample has none: its questions are not CRUD's, their cells stay empty)."""
    if data is None or (data / gt.path).exists():
        return
    item = _missing(key, gt, data)
    if all(m.path != item.path for m in run.missing):
        run.missing.append(item)


def backbone_cells(table: Table, backbone: str, datasets: list[str]) -> int:
    """How many of the table's cells on ``datasets`` a plan for ``backbone`` holds (its rows',
    and the rows' of no backbone, in its columns and the columns of no backbone)."""
    return sum(
        1
        for row in table.rows
        if row.backbone in (None, backbone)
        for column, _ in table.cells(row)
        if column.dataset in datasets and column.backbone in (None, backbone)
    )


# "500 test questions", "IRCoT's 500-question test list", "the 2,400 QA samples", "the first
# 1,000 questions": the count a table's sample text gives, the first such
_SAMPLE_COUNT = re.compile(
    r"\b(\d{1,3}(?:,\d{3})+|\d+)[ -](?:[A-Za-z]+ ){0,3}?(?:questions?|examples|samples)\b"
)


def table_questions(ds: Dataset) -> int | None:
    """The number of questions the table's sample says it holds (``Dataset.sample``), or None
    where it says none ("not stated by the paper")."""
    match = _SAMPLE_COUNT.search(ds.sample)
    return int(match.group(1).replace(",", "")) if match else None


# a download link as a table file writes it: a URL, or a known host's path without its scheme
_LINK = re.compile(
    r"https?://[^\s,;()]+|(?<![\w/.])(?:huggingface\.co|drive\.google\.com|(?:www\.)?dropbox\.com)"
    r"/[^\s,;()]+"
)


def download_links(*texts: str | None) -> list[str]:
    """The download links in ``texts`` (an input's source and description), each once, with
    its scheme: what a user opens to fetch a missing input."""
    links: list[str] = []
    for text in texts:
        for match in _LINK.finditer(text or ""):
            link = match.group().rstrip(".:")
            link = link if link.startswith(("http://", "https://")) else f"https://{link}"
            if link not in links:
                links.append(link)
    return links


def _data_needs(
    table: Table, rows: list[Row], runs: list[PlannedRun], index_type: str = "exact"
) -> list[Missing]:
    """Without --data: every input the runs would read from --data DIR (each dataset's
    questions; its index and corpus where a run retrieves; its dense index where a row runs
    on it, skipped without --data), with what provides it, under the placeholder ``DIR``."""
    placeholder = Path("DIR")
    needs: list[Missing] = []
    keys = list(dict.fromkeys(run.dataset for run in runs))
    dense = {
        key
        for row in rows
        if row.retrieval == "dense" and skip_reason(row) is None
        for key in table.datasets
        if any(c.dataset == key for c, _ in table.cells(row))
    }
    for key in table.datasets:
        if key not in keys and key not in dense:
            continue
        ds = with_index_type(table.datasets[key], index_type)
        needs.append(_missing(key, ds.questions, placeholder))
        lost: list[Missing] = []
        if any(run.dataset == key and retrieves(run.method) for run in runs):
            _index_spec(key, ds, placeholder, lost, exists=False)
        if key in dense:
            _index_spec(key, ds, placeholder, lost, dense=True, exists=False)
        for item in lost:
            if all(item.path != m.path for m in needs):
                needs.append(item)
    return needs


def skip_reason(row: Row) -> str | None:
    """Why ``row`` cannot be run as published, or None."""
    from noterag.core.context import resolve_context
    from noterag.registry.methods import METHODS

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
    """A run's directory name, from its identity:
    ``hotpotqa.vanilla.official.official_code=deepnote.top_k=5`` (``.dense`` after it for a
    row on the dense retriever).

    Names are injective: two runs that differ in anything (a setting's punctuation too) never
    share a directory, so a row is never scored from another row's run. The readable name is
    the identity itself where it can be read back unambiguously (``_readable_is_exact``: plain
    names, numbers, booleans and plain words as values, the shipped tables' every run): a word
    is written as it is (``official_code=deepnote``), a number, boolean or null as JSON writes
    it. Anything else (a value with spaces or punctuation, a word JSON would read as a number
    or boolean, a list, a key with a dot) loses information in a file name: its name is a
    shortened readable part and ``.h-`` with a hash of the whole identity. A run an earlier
    noterag named otherwise (``official_code=_deepnote``, before words lost their quotes) is
    found under that name (``_earlier_dir``) and resumes there.
    """
    if _readable_is_exact(dataset, method, profile, settings):
        exact = _exact_name(dataset, method, profile, settings, dense=dense)
        if len(exact) <= _MAX_NAME:
            return exact
    # the hashed names keep the readable part they were given when names became injective
    readable = _readable_name(dataset, method, profile, settings, dense=dense)
    identity = json.dumps(
        [dataset, method, profile, settings, dense], sort_keys=True, ensure_ascii=False
    )
    digest = hashlib.sha256(identity.encode()).hexdigest()[:12]
    return f"{readable[: _MAX_NAME - 16].rstrip('._-')}.h-{digest}"


def _exact_name(
    dataset: str, method: str, profile: str, settings: dict[str, Any], *, dense: bool = False
) -> str:
    """The readable name of an identity ``_readable_is_exact`` accepts: its parts joined by
    ``.``, each setting ``key=value``, a word bare and anything else as JSON writes it."""
    parts = [dataset, method, profile]
    parts += [
        f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in sorted(settings.items())
    ]
    return ".".join([*parts, "dense"] if dense else parts)


def _readable_name(
    dataset: str, method: str, profile: str, settings: dict[str, Any], *, dense: bool = False
) -> str:
    """The identity as a file name, every run of other characters as one ``_``: the name
    earlier versions gave every run (``official_code=_deepnote``), what ``_earlier_dir`` looks
    for, and the readable part of a hashed name."""
    parts = [dataset, method, profile]
    parts += [f"{k}={json.dumps(v, sort_keys=True)}" for k, v in sorted(settings.items())]
    readable = _safe(".".join(parts))
    return _safe(f"{readable}.dense") if dense else readable


# A file name's room (255 bytes on most filesystems), less a shard's suffix (.shard-I-of-N).
_MAX_NAME = 200
_PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
_WORD = re.compile(r"[A-Za-z0-9_-]*[A-Za-z0-9-]")  # a string value, written bare in a name
_NUMBER_TEXT = re.compile(r"-?[0-9][0-9.eE-]*")


def _readable_is_exact(dataset: str, method: str, profile: str, settings: dict[str, Any]) -> bool:
    """Whether the readable name can be read back into exactly this identity: the names and
    keys plain (no ``.`` or ``=``, which separate the parts), every value a number, a boolean,
    null or a plain word that JSON would not read as one of those (``"deepnote"`` is written
    ``deepnote``; ``"5"`` or ``"true"`` would read as a number or boolean; one ending in ``_``
    could lose it to a trimmed end). A hashed name always ends in ``.h-<hex>``, which no
    readable name does (its last part holds ``=``, is a profile after exactly two parts, a
    number's digits or ``dense``)."""
    if not all(_PLAIN.fullmatch(name) for name in (dataset, method, profile, *settings)):
        return False
    for value in settings.values():
        if isinstance(value, str):
            if not _WORD.fullmatch(value) or _reads_as_json(value):
                return False
        elif isinstance(value, bool) or value is None:
            continue
        elif isinstance(value, int | float):
            if not _NUMBER_TEXT.fullmatch(json.dumps(value)):
                return False  # inf, nan, 1e+20
        else:
            return False
    return True


def _reads_as_json(text: str) -> bool:
    """Whether ``text`` is a JSON value (a number, true, false, null; Python's NaN, Infinity):
    a word written bare must not be one, or the name would not say which it is."""
    try:
        json.loads(text)
    except ValueError:
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
        from noterag.retrievers.sample import sample_questions_path

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
    known = table_questions(ds) if n is None else None
    if known is not None and limit is not None:
        known = min(known, limit)
    run_dir = _earlier_dir(model_dir, name, key, row, questions) or model_dir / name
    kind: str = "none (closed book)"
    approximate: str | None = None
    if retrieves(row.method):
        dense = row.retrieval == "dense"
        if data is not None:
            kind, approximate = index_kind(index, ds, dense)
        else:  # the sample's BM25 index stands in: say which index the paper searched
            paper = ds.dense_retriever_spec if dense else ds.retriever_spec
            theirs = index_kind(paper, ds, dense)[0] if paper else "not stated"
            kind = (
                f"BM25 over the shipped sample (the paper's: {theirs.replace(', to be built', '')})"
            )
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
        estimate=estimate(row.method, profile, n if n is not None else known),
        missing=missing,
        n_questions_table=known,
        decoding=decoding(row),
        index_type=kind,
        sample=ds.sample,
        approximate=approximate,
    )


# --index-type: the dense indexes searched exactly (the papers' FAISS IndexFlatIP: FlashRAG's
# "Faiss Flat index", thunlp/Adaptive-Note and thunlp/DeepNote src/build_index/emb/index.py) or
# approximately (IVF-PQ, only when asked: recall@5 0.94-0.97 against exact, docs/scale.md)
INDEX_TYPES = ("exact", "ivfpq")
APPROXIMATE = (
    "searched on an IVF-PQ index (approximate: recall@5 0.94-0.97 against exact, docs/scale.md) "
    "where the paper searched exactly (FAISS IndexFlatIP)"
)
_FLAT = "--dense-index flat"


def with_index_type(ds: Dataset, index_type: str) -> Dataset:
    """``ds`` with its dense indexes built and searched as ``index_type`` says: "exact" as the
    table file writes them (``--dense-index flat``); "ivfpq" each in ``<index>-ivfpq`` with
    ``--dense-index ivfpq``, so an exact index already built is never overwritten."""
    if index_type == "exact":
        return ds
    update: dict[str, Any] = {}
    for field_name, spec_name in (
        ("index", "retriever_spec"),
        ("dense_index", "dense_retriever_spec"),
    ):
        item: Input | None = getattr(ds, field_name)
        if item is None or _FLAT not in (item.command or ""):
            continue
        path = f"{item.path}-ivfpq"
        command = (item.command or "").replace(_FLAT, "--dense-index ivfpq")
        command = command.replace(f"{{data}}/{item.path}", f"{{data}}/{path}")
        update[field_name] = item.model_copy(update={"path": path, "command": command})
        spec = getattr(ds, spec_name)
        if spec is not None:
            update[spec_name] = spec.replace(f"{{data}}/{item.path}", f"{{data}}/{path}")
    return ds.model_copy(update=update) if update else ds


def index_kind(spec: str, ds: Dataset, dense: bool) -> tuple[str, str | None]:
    """What the run searches, in words, and why its cells are approximate (None: they are
    not): a BM25 index, or a dense one of the kind its manifest records (built) or its command
    builds (not yet built)."""
    if not spec.startswith("dense:"):
        return ("BM25" if spec.startswith("bm25:") else spec.split(":", 1)[0]), None
    item = ds.dense_index if dense else ds.index
    kind = None
    from noterag.retrievers.indexdir import MANIFEST_NAME

    manifest = Path(spec.removeprefix("dense:")) / MANIFEST_NAME
    if manifest.is_file():
        try:
            recorded = json.loads(manifest.read_text("utf-8"))
            kind = (recorded.get("faiss") or {}).get("kind", "flat")
        except (OSError, ValueError, AttributeError):
            kind = None
    where = "built"
    if kind is None:
        command = (item.command if item else None) or ""
        match = re.search(r"--dense-index[ =](\w+)", command)
        kind, where = (match.group(1) if match else "auto"), "to be built"
    exact = kind == "flat"
    words = "exact (FAISS flat)" if exact else f"{kind} (approximate)"
    return f"dense, {words}, {where}", None if exact else APPROXIMATE


def decoding(row: Row) -> str:
    """The decoding every model call of ``row``'s runs gets: its settings' temperature, top_p
    and max_tokens over its profile's (noterag.core.profiles), in words."""
    from noterag.core.profiles import FLASHRAG_SAMPLING, OFFICIAL_SAMPLING

    profile = profile_of(row)
    defaults = {"official": OFFICIAL_SAMPLING, "flashrag": FLASHRAG_SAMPLING}.get(profile, {})
    if profile == "original" and row.method is not None:
        from noterag.registry.methods import METHODS

        original = METHODS[row.method].context.ORIGINAL
        defaults = {
            k: v for k, v in original.items() if k in ("temperature", "top_p", "max_tokens")
        }
    chosen = dict(defaults) | {
        k: row.settings[k] for k in ("temperature", "top_p", "max_tokens") if k in row.settings
    }
    if not chosen:
        return "the endpoint's own (no temperature, top_p or max_tokens set)"
    words = ", ".join(f"{k} {v}" for k, v in chosen.items())
    unset = [k for k in ("temperature", "top_p", "max_tokens") if k not in chosen]
    return words + (f" ({', '.join(unset)}: the endpoint's own)" if unset else "")


def sample_index_spec(out: Path) -> str:
    """The spec of the sample index built once into ``OUT/sample-index`` (``run.execute``)."""
    return f"bm25:{out / SAMPLE_INDEX}"


def retrieves(method: str) -> bool:
    """Whether ``method`` searches a retriever (``MethodSpec.retrieves``): a closed-book run
    needs no index or corpus."""
    from noterag.registry.methods import METHODS

    return METHODS[method].retrieves


def _earlier_dir(model_dir: Path, name: str, key: str, row: Row, questions: Path) -> Path | None:
    """The directory an earlier noterag gave this run under another name (every run before
    words lost their quotes, ``official_code=_deepnote``; a run now hashed): used where the
    run's own directory does not exist and the earlier one's run.json (or, for a sharded run,
    a shard's) is this very run (method, settings, questions), so a run started before the
    names changed resumes where it is. Another row's run that shared the old name is never
    picked up."""
    if (model_dir / name).exists() or any(model_dir.glob(f"{glob.escape(name)}.shard-*")):
        return None
    assert row.method is not None
    from noterag.eval.runs import RUN_FILE, RunDirError, read_json_file

    legacy = _readable_name(
        key, row.method, profile_of(row), row.settings, dense=row.retrieval == "dense"
    )
    if legacy == name:
        return None
    old = model_dir / legacy
    candidates = [old, *sorted(model_dir.glob(f"{glob.escape(legacy)}.shard-*-of-*"))]
    found = next((c for c in candidates if (c / RUN_FILE).is_file()), None)
    if found is None:
        return None
    try:
        config = read_json_file(found / RUN_FILE)
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
    key: str,
    ds: Dataset,
    data: Path,
    missing: list[Missing],
    *,
    dense: bool = False,
    exists: bool = True,
) -> str:
    """The retriever spec of dataset ``key`` under ``data`` (``dense``: its dense retriever);
    what it needs and lacks goes to ``missing`` (the index, and the corpus it is built from).
    ``exists`` False: nothing is looked for on disk (the placeholder DIR): all are listed."""
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
    if index is not None and not (exists and (data / index.path).exists()):
        have_corpus = ds.corpus is not None and exists and (data / ds.corpus.path).exists()
        missing.append(_missing(key, index, data, cost=_build_cost(index, ds, data, have_corpus)))
        if ds.corpus is not None and not have_corpus:
            missing.append(_missing(key, ds.corpus, data))
    return spec.replace("{data}", str(data))


def _missing(key: str, item: Input, data: Path, *, cost: str | None = None) -> Missing:
    path = data / item.path
    source = item.source.replace("{data}", str(data)) if item.source else None
    needs = None
    if item.command:
        command = item.command.replace("{data}", str(data))
        provide = "run: " + command
        if source:  # the source is of the command's input: `corpus-from DIR/raw` reads it
            words = command.split()
            needs = next((w for w in words[2:] if not w.startswith("-")), None)
    elif source:
        provide = f"download from {source} into {path}"
    else:
        provide = "the table file says nothing of where it comes from"
    links = download_links(source, item.what)
    return Missing(key, item.what, str(path), provide, source, links, needs, cost)


# a corpus's size as its table entry says it: "5,233,329 passages", "~21M passages"
_CORPUS_SIZE = re.compile(r"(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?M)\s+(?:passages|paragraphs|chunks)\b")


def _build_cost(index: Input, ds: Dataset, data: Path, have_corpus: bool) -> str | None:
    """What building ``index`` by its command costs, in one line (``retrievers/estimate.py``,
    from the figures measured at scale): its passages counted from the corpus if it is there,
    else the count the table's corpus entry gives. None: no ``noterag index`` command, or no
    count."""
    command = (index.command or "").split()
    if command[:2] != ["noterag", "index"] or ds.corpus is None:
        return None
    from noterag.retrievers.estimate import count_passages, estimate

    corpus = data / ds.corpus.path
    counted = "the table's count"
    passages: int | None = None
    if have_corpus and corpus.is_file() and corpus.suffix in (".jsonl", ".tsv"):
        try:
            passages, approximate = count_passages(corpus)
            counted = "estimated from the corpus" if approximate else "counted in the corpus"
        except OSError:
            passages = None
    if passages is None:
        match = _CORPUS_SIZE.search(ds.corpus.what)
        if match is None:
            return None
        number = match.group(1).replace(",", "")
        passages = round(float(number[:-1]) * 1e6) if number.endswith("M") else int(number)
    option = {
        w.split("=", 1)[0]: (w.split("=", 1)[1] if "=" in w else nxt)
        for w, nxt in zip(command, [*command[1:], ""], strict=True)
        if w.startswith("--")
    }
    dense = "--dense" in option
    kind = "bm25"
    if dense:
        from noterag.retrievers.faiss_index import AUTO_FLAT_MAX

        kind = option.get("--dense-index", "auto").split(":", 1)[0]
        if kind == "auto":
            kind = "flat" if passages < AUTO_FLAT_MAX else "ivfpq"
    try:
        guess = estimate(passages, kind)
    except NoteragError:
        return None
    model = option.get("--embedding-model") or "the embedding model"
    embedding = (
        f" plus embedding {passages:,} passages with {model} (not estimated: the model's "
        "rate, which dominates on CPU)"
        if dense
        else ""
    )
    minutes = guess.build_s / 60
    took = f"about {minutes:,.0f} min" if minutes >= 1 else "under 1 min"
    basis = f"{guess.basis}; 768-d vectors assumed" if dense else guess.basis
    search = ""
    if dense and kind == "flat":
        # exact search scores every vector per query: the float32 vectors (memory-mapped
        # embeddings.npy) are read whole each time, so they belong in RAM
        vectors = passages * 768 * 4 / 2**30
        search = (
            f"; searching it exactly reads all {passages:,} vectors per query, about "
            f"{vectors:,.1f} GiB to hold in memory (--index-type ivfpq: an approximate index "
            "in far less)"
        )
    return (
        f"building it ({kind} index of {passages:,} passages, {counted}): {took}{embedding}, "
        f"peak memory about {guess.peak_gib:,.1f} GiB, disk about {guess.disk_gib:,.1f} GiB "
        f"({basis}){search}"
    )


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
