"""The published tables as data: one YAML file per table in ``tables/`` (installed as
``noterag.tables``), read into the models below.

A table file says which paper and table it is, every row (the method, profile and settings that
ran it, and the backbone model it was run with), every column (a dataset and a metric), for each
dataset the question sample, corpus and retriever the paper used, and every published cell value
as printed in the paper (a string: "44.0", "14.6↑", or null where the paper prints "-").
``tests/test_tables.py`` checks every value against the paper's text in ``../shared/seeds/``.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

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


def table_names() -> list[str]:
    """Every published table's id, in file-name order."""
    files = resources.files("noterag.tables").iterdir()
    return sorted(f.name.removesuffix(".yaml") for f in files if f.name.endswith(".yaml"))


@cache
def load_table(name: str) -> Table:
    """The published table ``name`` (e.g. ``deepnote-table1``); a ConfigError names the choices."""
    names = table_names()
    if name not in names:
        raise ConfigError(f"unknown table {name!r}; choose one of {', '.join(names)}")
    text = resources.files("noterag.tables").joinpath(f"{name}.yaml").read_text("utf-8")
    try:
        return Table.model_validate(yaml.safe_load(text))
    except (yaml.YAMLError, ValueError) as exc:  # a broken shipped file: name it
        raise ConfigError(f"tables/{name}.yaml: {exc}") from None
