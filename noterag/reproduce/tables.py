"""The published tables as data: one YAML file per table in ``tables/`` (installed as
``noterag.tables``), read into the models below.

A table file says which paper and table it is, every row (the method, profile and settings that
ran it, and the backbone model it was run with), every column (a dataset and a metric), for each
dataset the question sample, corpus and retriever the paper used, and every published cell value
as printed in the paper (a string: "44.0", "14.6↑", or null where the paper prints "-").
``tests/test_tables.py`` checks every value against the paper's text in ``../shared/seeds/``.
"""

from __future__ import annotations

import os
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from noterag.errors import ConfigError


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Input(_Strict):
    """A file or directory a run needs, kept by the user under ``--data DIR``."""

    path: str = Field(description="where it lives, relative to --data DIR")
    what: str = Field(description="one line: what it is")
    source: str | None = Field(None, description="where it is downloaded from (URL, repository)")
    command: str | None = Field(
        None, description="the command that makes it from other inputs, e.g. `noterag index ...`"
    )


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


class Column(_Strict):
    dataset: str = Field(description="a key of the table's datasets")
    metric: str = Field(description="our metric name: acc, f1, em, str_em, str_hit, avg, ...")
    label: str = Field(description="the column's heading as printed")


class Row(_Strict):
    id: str = Field(description="unique in the table; what --rows selects")
    label: str = Field(description="the row's label as printed")
    section: str | None = Field(None, description="the heading the row sits under, as printed")
    method: str | None = Field(None, description="our registered method; None: not a run")
    profile: str | None = None
    settings: dict[str, Any] = Field(default_factory=dict, description="the method's settings")
    backbone: str | None = Field(None, description="the model the row was run with")
    requires: list[str] = Field(
        default_factory=list, description="inputs the user must give (e.g. a DPO-trained model)"
    )
    skip: str | None = Field(None, description="why noterag cannot run this row, if it cannot")
    values: list[str | None] = Field(description="one per column, exactly as printed")


class Table(_Strict):
    id: str = Field(description="<paper>-table<N>, the paper's own table number")
    paper: Literal["deepnote", "adaptive-note", "amber", "resp"]
    number: str = Field(description="the table's number as the paper prints it: '1', 'A2'")
    title: str = Field(description="the caption's first sentence")
    seed: str = Field(description="the paper's text file in ../shared/seeds/")
    backbones: list[str] = Field(description="the published backbones; the first is the default")
    datasets: dict[str, Dataset]
    columns: list[Column]
    rows: list[Row]
    notes: str = ""

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
            if len(row.values) != len(self.columns):
                raise ValueError(
                    f"row {row.id!r}: {len(row.values)} values for {len(self.columns)} columns"
                )
        return self


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
        text = _folder(directory).joinpath(f"{name}.yaml").read_text("utf-8")
        return Table.model_validate(yaml.safe_load(text))
    except (OSError, UnicodeDecodeError, yaml.YAMLError, ValidationError) as exc:
        # a broken file: name it (pydantic's message lists the fields)
        raise ConfigError(f"{where}: {_one_line(exc)}") from None


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())
