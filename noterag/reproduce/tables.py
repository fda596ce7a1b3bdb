"""The published tables as data: one YAML file per table in ``tables/`` (installed as
``noterag.tables``), read into the models below.

A table file says which paper and table it is, every row (the method, profile and settings that
ran it, and the backbone model it was run with), every column (a dataset and a metric), for each
dataset the question sample, corpus and retriever the paper used, and every published cell value
as printed in the paper: a string, marks kept ("44.0", "14.6↑", "(13.9↑)", "48.8(+1.6pt)",
"1.1min"; the seed text's LaTeX ``\\uparrow`` is written ↑), or null where the paper prints "-".
``published_number`` reads the number out of such a string. ``tests/test_tables.py`` checks
every value against the paper's text in ``../shared/seeds/``; tables/README.md describes the
format and the ``--data DIR`` layout.
"""

from __future__ import annotations

import os
import re
from functools import cache
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Any, Literal
from urllib.parse import parse_qsl

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from noterag.base.errors import ConfigError

# What a row can require that a plain chat model endpoint does not give (Row.requires): the
# reproduce command lists such rows as skipped, with this reason, unless the user provides it.
REQUIREMENTS: dict[str, str] = {
    "dpo-model": "the backbone DPO-trained on DNAlign (DeepNote §3.5; thunlp/DeepNote src/train.sh)",
    "amber-filter-model": "Amber's fine-tuned multi-granular content filter (Llama3-8b by default; "
    "Amber §3.5, Appendix A), as the filter model",
    "selfrag-model": "a Self-RAG model trained to emit reflection tokens (e.g. selfrag_llama2_7b)",
    "adaptive-rag-classifier": "Adaptive-RAG's trained query-complexity classifier (T5-large)",
    "recomp-compressor": "RECOMP's trained abstractive compressor (FlashRAG: recomp_abstractive)",
    "role-models": "a second model for the roles the row runs on another backbone "
    "(Row.role_backbones)",
}

# Published metrics noterag does not compute: their cells are shown, never scored, and no run
# is made for them (a run whose every cell is one of these would spend model calls for nothing).
# CRUD's four are RAGQuestEval's (thunlp/Adaptive-Note src/metrics_questeval_crud.py, after
# IAAR-Shanghai/CRUD_RAG): gpt-3.5-turbo-0125 answers the reference's questions from the output,
# and the token F1/P/R compare those model answers (jieba tokens) with the reference's own, so
# none of them is computable without that scoring model.
_RAGQUESTEVAL = (
    "scored by a GPT model answering the reference's questions from the output (Adaptive-Note §4, "
    "Appendix C; thunlp/Adaptive-Note src/metrics_questeval_crud.py)"
)
# With --judge MODEL these four are scored (noterag.eval.questeval): the judge's answers are
# model calls, one per generated text.
JUDGED_METRICS = ("q_r", "t_r", "t_p", "t_f1")
UNSCORED_METRICS: dict[str, str] = {
    "q_r": f"CRUD's RAGQuestEval question-level recall, {_RAGQUESTEVAL}; --judge MODEL scores it",
    "t_r": f"CRUD's RAGQuestEval token-level recall of the answers, {_RAGQUESTEVAL}; --judge MODEL scores it",
    "t_p": f"CRUD's RAGQuestEval token-level precision of the answers, {_RAGQUESTEVAL}; --judge MODEL scores it",
    "t_f1": f"CRUD's RAGQuestEval token-level F1 of the answers, {_RAGQUESTEVAL}; --judge MODEL scores it",
    "minutes": "wall-clock minutes for the paper's run (hardware-bound)",
}

_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")


def published_number(value: str | None) -> float | None:
    """The number a published cell prints, its marks dropped: "14.6↑" -> 14.6, "(13.9↑)" ->
    13.9, "48.8(+1.6pt)" -> 48.8, "1.1min" -> 1.1; None for a cell printed "-"."""
    if value is None:
        return None
    match = _NUMBER.search(value)
    if match is None:
        raise ValueError(f"no number in the published value {value!r}")
    return float(match.group())


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _inside_data(path: str) -> str:
    """``path`` if it stays inside --data DIR: relative, without a ``..`` part. A table file is
    text from anywhere (``--tables``); it names files under the user's --data, never
    ``/etc/...`` or ``../../elsewhere``."""
    parts = PurePosixPath(path.replace("\\", "/")).parts
    if not path.strip() or path.startswith(("/", "~")) or re.match(r"^[A-Za-z]:", path):
        raise ValueError("a path must be relative to --data DIR (not absolute, not empty)")
    if ".." in parts:
        raise ValueError("a path must stay inside --data DIR (no '..' part)")
    return path


def _spec_inside_data(spec: str | None) -> str | None:
    """A retriever spec whose local paths all start with ``{data}/`` and have no ``..`` part,
    its options' values (``?model=...``) included: an option is a name, or a path inside
    ``{data}/`` (``dense:{data}/x?model=/etc/passwd`` is refused). A URL (an Elasticsearch
    index) is not a path and is left as it is: the plan shows it, and a run needs
    ``--allow-remote-index`` to search it (``noterag.reproduce.plan.Plan.remote_indexes``)."""
    if spec is None:
        return None
    for part in spec.split(","):
        target = part.split(":", 1)[1] if ":" in part else part
        target, _, options = target.rpartition("?") if "?" in target else (target, "", "")
        for value in (v for _, v in parse_qsl(options, keep_blank_values=True)):
            if value.startswith("{data}/"):
                _inside_data(value.removeprefix("{data}/"))
            elif (
                value.startswith(("/", "~", "\\"))
                or re.match(r"^[A-Za-z]:", value)
                or (".." in PurePosixPath(value.replace("\\", "/")).parts)
            ):
                raise ValueError(
                    "a retriever spec's option is a name, or a path inside --data DIR "
                    "({data}/...): not absolute, no '..' part"
                )
        if "://" in target:
            continue
        if not target.startswith("{data}/"):
            raise ValueError("a retriever spec's path must start with {data}/ (inside --data DIR)")
        _inside_data(target.removeprefix("{data}/"))
    return spec


class Input(_Strict):
    """A file or directory a run needs, kept by the user under ``--data DIR``."""

    path: str = Field(description="where it lives, relative to --data DIR (no '..' part)")
    what: str = Field(description="one line: what it is")
    source: str | None = Field(None, description="where it is downloaded from (URL, repository)")
    command: str | None = Field(
        None, description="the command that makes it from other inputs, e.g. `noterag index ...`"
    )

    _path = field_validator("path")(_inside_data)


class Dataset(_Strict):
    """One dataset of a table, as the paper (and its appendix) ran it."""

    name: str = Field(description="the dataset's name as the table prints it")
    task: Literal["multihop", "asqa", "strategyqa", "crud"]
    sample: str = Field(description="the question sample, as the paper says it")
    questions: Input
    corpus: Input | None = None
    index: Input | None = Field(None, description="the retrieval index built from the corpus")
    retriever: str = Field(description="the retriever as the paper says it, e.g. BM25 (ES)")
    retriever_spec: str | None = Field(
        None, description="our retriever spec, {data} standing for --data DIR"
    )
    dense_index: Input | None = Field(
        None, description="the dense index of the paper's dense-retriever rows, if it has any"
    )
    dense_retriever_spec: str | None = Field(
        None, description="our spec of that dense retriever (rows with retrieval: dense)"
    )
    ground_truth: Input | None = Field(
        None,
        description="what a judge model scores the outputs against (CRUD: the ground-truth "
        "questions and answers RAGQuestEval asks, src/quest_eval/*_quest_gt_save.json)",
    )
    settings: dict[str, Any] = Field(
        default_factory=dict,
        description="settings every run on this dataset takes where its row sets none of its "
        "own (Adaptive-Note's CRUD runs: top_k 2; ReSP's runs: max_tokens 200)",
    )

    _specs = field_validator("retriever_spec", "dense_retriever_spec")(_spec_inside_data)


class Column(_Strict):
    dataset: str = Field(description="a key of the table's datasets")
    metric: str = Field(description="our metric name: acc, f1, em, str_em, str_hit, avg, ...")
    label: str = Field(description="the column's heading as printed")
    backbone: str | None = Field(
        None,
        description="where a table's columns differ by backbone (Amber Table 2): this column's, "
        "which overrides the row's",
    )
    not_comparable: str | None = Field(
        None,
        description="why our value cannot be compared with the printed one (e.g. the paper "
        "does not say what it averaged): the cell is shown, never starred, never given a Δ",
    )


class Row(_Strict):
    id: str = Field(description="unique in the table; what --rows selects")
    label: str = Field(description="the row's label as printed")
    seed_label: str | None = Field(
        None,
        description="the label as the seed text's line starts with, where it differs from "
        "label (e.g. '' for an unlabelled Δ line)",
    )
    section: str | None = Field(None, description="the heading the row sits under, as printed")
    kind: Literal["run", "derived"] = Field(
        "run",
        description="run: the cells of one configuration; derived: cells computed from other "
        "rows (a Δ row), never run (note says how)",
    )
    dataset: str | None = Field(
        None,
        description="a row of a sub-table that prints one dataset only: its values are that "
        "dataset's columns, in order (Table.cells pairs them)",
    )
    method: str | None = Field(None, description="our registered method; None: not a run")
    profile: str | None = None
    settings: dict[str, Any] = Field(default_factory=dict, description="the method's settings")
    backbone: str | None = Field(None, description="the model the row was run with")
    retrieval: Literal["default", "dense"] = Field(
        "default",
        description="default: each dataset's retriever; dense: its dense_retriever_spec",
    )
    role_backbones: dict[str, str] = Field(
        default_factory=dict,
        description="model role -> the backbone that role ran with, where it differs from backbone",
    )
    requires: list[str] = Field(
        default_factory=list, description="inputs the user must give (e.g. a DPO-trained model)"
    )
    skip: str | None = Field(None, description="why noterag cannot run this row, if it cannot")
    not_comparable: dict[str, str] = Field(
        default_factory=dict,
        description="cells of this row whose printed value no run here reproduces, with why: "
        "'<dataset>.<metric>' (or '*' for every cell of the row) -> the reason; shown like a "
        "column's not_comparable (never starred, no Δ)",
    )
    values: list[str | None] = Field(description="one per column, exactly as printed")
    note: str = Field("", description="what a reader of the row should know")

    @model_validator(mode="after")
    def _kind(self) -> Row:
        if self.kind == "derived" and self.method is not None:
            raise ValueError(f"row {self.id!r}: a derived row names no method")
        for key in self.not_comparable:
            if key != "*" and not re.fullmatch(r"[\w-]+\.\w+", key):
                raise ValueError(
                    f"row {self.id!r}: not_comparable key {key!r} is not '<dataset>.<metric>' or '*'"
                )
        unknown = sorted(set(self.requires) - REQUIREMENTS.keys())
        if unknown:
            raise ValueError(
                f"row {self.id!r}: unknown requirement(s) {', '.join(unknown)}; "
                f"known: {', '.join(REQUIREMENTS)}"
            )
        return self


class Table(_Strict):
    id: str = Field(description="<paper>-table<N>, the paper's own table number")
    paper: Literal["deepnote", "adaptive-note", "amber", "resp"]
    number: str = Field(description="the table's number as the paper prints it: '1', 'A2'")
    title: str = Field(description="the caption's first sentence")
    seed: str = Field(description="the paper's text file in ../shared/seeds/")
    seed_caption: Literal["below", "above"] = Field(
        "below", description="where the caption sits in the seed text: below or above the table"
    )
    backbones: list[str] = Field(description="the published backbones; the first is the default")
    datasets: dict[str, Dataset]
    columns: list[Column]
    rows: list[Row]
    notes: str = ""
    paper_runs: int = Field(
        1, ge=1, description="how many runs the paper averages per cell (ReSP Table 2: five)"
    )
    runs_note: str = Field(
        "", description="where paper_runs > 1: why the plan makes the runs it makes"
    )

    @model_validator(mode="after")
    def _consistent(self) -> Table:
        for column in self.columns:
            if column.dataset not in self.datasets:
                raise ValueError(f"column {column.label!r}: unknown dataset {column.dataset!r}")
        seen: set[str] = set()
        for row in self.rows:
            if row.id in seen:
                raise ValueError(f"two rows named {row.id!r}")
            seen.add(row.id)
            if row.dataset is not None and row.dataset not in self.datasets:
                raise ValueError(f"row {row.id!r}: unknown dataset {row.dataset!r}")
            columns = self.row_columns(row)
            keys = {f"{c.dataset}.{c.metric}" for c in columns} | {"*"}
            stray = sorted(set(row.not_comparable) - keys)
            if stray:
                raise ValueError(f"row {row.id!r}: not_comparable names no cell of it: {stray}")
            if len(row.values) != len(columns):
                raise ValueError(
                    f"row {row.id!r}: {len(row.values)} values for {len(columns)} columns"
                )
        return self

    def row_columns(self, row: Row) -> list[Column]:
        """The columns ``row`` prints values for: all, or its sub-table's dataset's."""
        if row.dataset is None:
            return list(self.columns)
        return [c for c in self.columns if c.dataset == row.dataset]

    def row_title(self, row_id: str) -> str:
        """The row's label, with its section where another row prints the same label (a
        backbone's name under "LLMs without Retrieval" and again under "Vanilla RAG")."""
        row = next(r for r in self.rows if r.id == row_id)
        twins = sum(1 for r in self.rows if r.label == row.label)
        return f"{row.section}: {row.label}" if twins > 1 and row.section else row.label

    def not_comparable(self, row: Row, column: Column) -> str | None:
        """Why ``row``'s cell in ``column`` cannot be compared with ours: the column's reason
        and the row's for that cell (or for every cell), joined; None: comparable."""
        reasons = [
            column.not_comparable,
            row.not_comparable.get("*"),
            row.not_comparable.get(f"{column.dataset}.{column.metric}"),
        ]
        found = [r for r in reasons if r]
        return "; ".join(found) if found else None

    def cells(self, row: Row) -> list[tuple[Column, str | None]]:
        """``row``'s published cells, each with its column."""
        return list(zip(self.row_columns(row), row.values, strict=True))


def _folder(directory: str | os.PathLike[str] | None) -> Any:
    """The folder of table files: ``directory`` (a user's or a test's), else the shipped one."""
    return Path(directory) if directory is not None else resources.files("noterag.tables")


def table_names(directory: str | os.PathLike[str] | None = None) -> list[str]:
    """Every table's id in ``directory`` (default: the shipped tables), in file-name order."""
    folder = _folder(directory)
    if directory is not None and not Path(directory).is_dir():
        raise ConfigError(f"--tables {directory}: not a directory")
    files = folder.iterdir()
    return sorted(f.name.removesuffix(".yaml") for f in files if f.name.endswith(".yaml"))


def load_table(name: str, directory: str | os.PathLike[str] | None = None) -> Table:
    """The published table ``name`` (e.g. ``deepnote-table1``) from ``directory`` (default: the
    shipped tables); a ConfigError names the choices, or the file and what is wrong in it."""
    if directory is None:
        return _shipped_table(name)
    return _read_table(name, directory)


@cache
def _shipped_table(name: str) -> Table:
    return _read_table(name, None)


def _read_table(name: str, directory: str | os.PathLike[str] | None) -> Table:
    names = table_names(directory)
    if name not in names:
        choices = ", ".join(names) or "none: the folder has no *.yaml file"
        raise ConfigError(f"unknown table {name!r}; choose one of {choices}")
    where = f"{directory}/{name}.yaml" if directory is not None else f"tables/{name}.yaml"
    try:
        data = _read(name, directory)
        # a dataset written {same_as: <table>} is that table's entry (one paper's datasets are
        # written once, in its first table)
        datasets = data.get("datasets")
        for key, dataset in list(datasets.items() if isinstance(datasets, dict) else []):
            if isinstance(dataset, dict) and set(dataset) == {"same_as"}:
                other = dataset["same_as"]
                if not isinstance(other, str) or other not in names:
                    raise ValueError(f"dataset {_short(key)}: same_as names no table of the folder")
                data["datasets"][key] = _read(other, directory)["datasets"][key]
        return Table.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{where}: {_validation_line(exc)}") from None
    except (OSError, UnicodeDecodeError, KeyError, TypeError, ValueError, yaml.YAMLError) as exc:
        # a broken file: name it, and what is wrong, never its content (see _error_line)
        raise ConfigError(f"{where}: {_error_line(exc)}") from None


# The most a table file may hold: the shipped ones are under 20 kB.
MAX_TABLE_BYTES = 1 << 20


# The most values (scalars, lists, mappings) a table file may expand to, aliases counted at
# every place they stand: the shipped tables hold a few thousand. YAML aliases themselves are
# fine (``yaml.safe_dump`` writes them for a value used twice), but ten anchors of ten aliases
# each are 10^10 values (an "alias bomb") to validate, and to print in an error.
MAX_TABLE_VALUES = 200_000


def _read(name: str, directory: str | os.PathLike[str] | None) -> dict[str, Any]:
    with _folder(directory).joinpath(f"{name}.yaml").open("rb") as handle:
        raw = handle.read(MAX_TABLE_BYTES + 1)
    if len(raw) > MAX_TABLE_BYTES:
        raise ValueError(f"over the {MAX_TABLE_BYTES >> 20} MiB limit for a table file")
    # yaml.safe_load, in its two steps: the node graph (aliases are shared nodes, so its size
    # is the file's), then its values, built only once the graph's expanded size is known
    loader = yaml.SafeLoader(raw.decode("utf-8"))
    try:
        node = loader.get_single_node()
        if node is not None:
            _check_expanded_size(node)
        data = loader.construct_document(node) if node is not None else None
    except RecursionError:
        raise ValueError("nested too deeply for a table file") from None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise TypeError("a table file is a mapping")
    return data


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _check_expanded_size(root: yaml.Node) -> None:
    """Refuse a node graph that expands to over ``MAX_TABLE_VALUES`` values, or refers to
    itself: counted once per node (a depth-first walk, each shared node's size kept), so the
    count costs the file's size, not the expansion's."""
    size: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, closing = stack.pop()
        key = id(node)
        if closing:
            open_nodes.discard(key)
            size[key] = 1 + sum(size[id(child)] for child in _children(node))
            if size[key] > MAX_TABLE_VALUES:
                raise ValueError(
                    f"it expands to over {MAX_TABLE_VALUES:,} values through YAML aliases "
                    "(*name); a table file holds a few thousand"
                )
            continue
        if key in size:
            continue
        if key in open_nodes:
            mark = node.start_mark
            raise ValueError(f"line {mark.line + 1}: a YAML alias refers to a value holding it")
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in size)


def _clip(text: str, limit: int) -> str:
    """``text`` on one line and at most ``limit`` characters: text from the file (a key, a
    row id) is quoted in a message, never whole."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _short(value: Any) -> str:
    return repr(_clip(str(value), 60))


def _validation_line(exc: ValidationError) -> str:
    """Pydantic's errors as one line of "where: what" (without the offending input, which may
    be huge or hostile: pydantic's own message quotes it)."""
    errors = exc.errors(include_input=False, include_url=False, include_context=False)
    shown = [
        f"{'.'.join(_clip(str(part), 40) for part in e['loc']) or 'the table'}: "
        f"{_clip(e['msg'], 200)}"
        for e in errors[:5]
    ]
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    return "; ".join(shown) + more


def _error_line(exc: BaseException) -> str:
    """What is wrong, in one bounded line. A YAML error says where (line, column) and what,
    without the snippet of the file PyYAML's message quotes."""
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        return where + _clip(exc.problem or exc.context or "not valid YAML", 200)
    if isinstance(exc, KeyError):
        return f"no {_short(exc.args[0] if exc.args else '?')} where one is needed"
    if isinstance(exc, OSError):
        return exc.strerror or type(exc).__name__
    return _clip(str(exc), 300)
