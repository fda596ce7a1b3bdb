"""The published tables (tables/*.yaml) against the papers' text in ../shared/seeds.

Every transcribed cell is checked against the seed text at test time (no second copy here):
the table is found by its caption line, its block of lines taken (the lines up to the caption,
or after it when the caption sits above), and each row matched, in order, to the block's next
line that ends in values: that line's last values must equal the row's, its label must start
with the row's label (and section, when a section opens there or on a line of its own). A data
line no row takes is a missing row. Then every row's method, profile and settings are checked
against the registry, and every column against the paper's header.

The seeds live beside the project (``../shared/seeds``); ``NOTERAG_SEEDS`` points elsewhere (a
git worktree's parent has no ``shared`` folder). Without them, the seed checks skip.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

import pytest
from pydantic import TypeAdapter

from noterag.base.errors import ConfigError
from noterag.core.context import resolve_context
from noterag.eval.metrics import EXTRA_METRICS, PAPER_METRICS
from noterag.registry.methods import METHODS
from noterag.reproduce.tables import (
    UNSCORED_METRICS,
    Table,
    load_table,
    published_number,
    table_names,
)

SEEDS = Path(
    os.environ.get("NOTERAG_SEEDS") or Path(__file__).resolve().parents[2] / "shared" / "seeds"
)

# The tables issue 22 asks for, by the papers' own numbers.
EXPECTED = [
    *(f"deepnote-table{n}" for n in (1, 2, 4, 5, 6, 7, 8)),
    *(f"adaptive-note-table{n}" for n in ("1", "2", "3", "4", "A1", "A2")),
    *(f"amber-table{n}" for n in (1, 2, 3, 4)),
    *(f"resp-table{n}" for n in (2, 3, 4)),
]

# A printed cell: a number with the marks the papers print beside it ("14.6↑", "(13.9↑)",
# "48.8(+1.6pt)", "1.1min"), or "-" for no value.
VALUE = re.compile(r"-|\(?[+-]?\d+(?:\.\d+)?(?:↑|↓|min|\([+-]\d+(?:\.\d+)?pt\))?\)?")


def is_value(token: str) -> bool:
    return VALUE.fullmatch(token) is not None


def norm(text: str) -> str:
    """Letters and digits only, lower case: labels compare across the text extraction's
    spacing, subscripts and punctuation."""
    return re.sub(r"[^0-9a-z]+", "", text.lower())


def seed_lines(table: Table) -> list[str]:
    path = SEEDS / table.seed
    if not path.is_file():
        pytest.skip(
            f"{path} is not present (the papers live in ../shared/seeds; set NOTERAG_SEEDS)"
        )
    # The text extraction writes the papers' ↑ as LaTeX.
    return path.read_text("utf-8").replace("\\uparrow", "↑").splitlines()


def table_block(table: Table, lines: list[str]) -> tuple[str, list[str]]:
    """The caption line and the table's lines: the non-blank lines next to the caption, up to a
    blank line, a figure placeholder or another caption."""
    starts = (f"Table {table.number}:", f"Table {table.number}.")
    found = [i for i, line in enumerate(lines) if line.startswith(starts)]
    assert len(found) == 1, f"{table.id}: {len(found)} caption lines for Table {table.number}"
    at = found[0]
    step = -1 if table.seed_caption == "below" else 1
    block: list[str] = []
    i = at + step
    while 0 <= i < len(lines):
        line = lines[i].strip()
        if not line or line.startswith("Table ") or line == "Refer to caption":
            break
        block.append(line)
        i += step
    if step < 0:
        block.reverse()
    return lines[at], block


def is_data(line: str) -> bool:
    return is_value(line.split()[-1])


def mismatches(table: Table, lines: list[str]) -> list[str]:
    """Where ``table`` disagrees with the seed text (empty: every row and cell as printed)."""
    problems: list[str] = []
    _, block = table_block(table, lines)
    cursor, section = 0, None
    for row in table.rows:
        at = next((k for k in range(cursor, len(block)) if is_data(block[k])), None)
        if at is None:
            problems.append(f"row {row.id}: the seed has no line left for it")
            break
        between, tokens = block[cursor:at], block[at].split()
        n = len(row.values)
        printed = tokens[-n:]
        expected = ["-" if v is None else v for v in row.values]
        if len(tokens) < n or printed != expected:
            problems.append(f"row {row.id}: the seed prints {printed}, the file has {expected}")
        prefix = norm(" ".join(tokens[:-n]))
        if row.section is not None and row.section != section:
            heading = norm(row.section)
            if any(norm(line) == heading for line in between):
                pass
            elif prefix.startswith(heading):
                prefix = prefix[len(heading) :]
            else:
                problems.append(f"row {row.id}: section {row.section!r} is not where it starts")
            section = row.section
        label = norm(row.label if row.seed_label is None else row.seed_label)
        if not (prefix.startswith(label) if label else prefix == ""):
            problems.append(f"row {row.id}: label {row.label!r} does not start {block[at]!r}")
        cursor = at + 1
    problems += [f"a row the file lacks: {line!r}" for line in block[cursor:] if is_data(line)]
    return problems


def header_mismatches(table: Table, lines: list[str]) -> list[str]:
    """The columns against the header: the column labels end a header line in order (per
    dataset for sub-tables), and the datasets' names appear in order in the header lines or the
    caption."""
    caption, block = table_block(table, lines)
    headers = [line for line in block if not is_data(line)]
    groups = (
        [list(table.columns)]
        if all(row.dataset is None for row in table.rows)
        else [[c for c in table.columns if c.dataset == d] for d in table.datasets]
    )
    problems = []
    for group in groups:
        labels = [c.label for c in group]
        if not any(line.split()[-len(labels) :] == labels for line in headers):
            problems.append(f"no header line ends with {' '.join(labels)!r}")
    text, pos = " ".join([*headers, caption]), 0
    for key in dict.fromkeys(c.dataset for c in table.columns):
        name = table.datasets[key].name
        found = text.find(name, pos)
        if found < 0:
            problems.append(f"dataset {name!r} is not in the header after position {pos}")
        else:
            pos = found + len(name)
    return problems


@pytest.fixture(scope="module", params=EXPECTED)
def table(request: pytest.FixtureRequest) -> Table:
    return load_table(request.param)


def test_every_published_table_has_its_file() -> None:
    assert table_names() == sorted(EXPECTED)


def test_every_cell_is_as_the_paper_prints_it(table: Table) -> None:
    assert mismatches(table, seed_lines(table)) == []


def test_the_columns_are_the_papers_header(table: Table) -> None:
    assert header_mismatches(table, seed_lines(table)) == []


def test_the_title_is_the_captions_first_sentence(table: Table) -> None:
    # letter by letter, skipping no more than the extraction's math residue adds to a caption
    # ("Top-𝐤𝐤\\mathbf{k}bold_k" for "Top-k")
    caption, _ = table_block(table, seed_lines(table))
    text, pos, skipped = norm(caption.split(" ", 2)[2]), 0, 0
    for char in norm(table.title):
        found = text.find(char, pos)
        assert found >= 0, (table.title, caption)
        skipped, pos = skipped + found - pos, found + 1
    assert skipped <= 30, (table.title, caption)


def _mutated(table: Table, row: int, values: list[str | None]) -> Table:
    rows = list(table.rows)
    rows[row] = rows[row].model_copy(update={"values": values})
    return table.model_copy(update={"rows": rows})


def test_a_single_wrong_digit_fails() -> None:
    table = load_table("deepnote-table1")
    lines = seed_lines(table)
    assert mismatches(table, lines) == []
    for r, row in enumerate(table.rows):
        for c, value in enumerate(row.values):
            if value is None:
                continue
            digit = next(i for i, ch in enumerate(value) if ch.isdigit())
            wrong = value[:digit] + str((int(value[digit]) + 1) % 10) + value[digit + 1 :]
            values = list(row.values)
            values[c] = wrong
            assert mismatches(_mutated(table, r, values), lines), (row.id, c, wrong)


def test_swapped_values_a_lost_mark_and_a_missing_row_fail() -> None:
    table = load_table("deepnote-table1")
    lines = seed_lines(table)
    first = list(table.rows[0].values)
    first[0], first[1] = first[1], first[0]
    assert mismatches(_mutated(table, 0, first), lines)
    delta = len(table.rows) - 1  # the Δ row prints "14.6↑"
    assert table.rows[delta].values[0] == "14.6↑"
    unmarked = ["14.6", *table.rows[delta].values[1:]]
    assert mismatches(_mutated(table, delta, unmarked), lines)
    assert mismatches(table.model_copy(update={"rows": table.rows[:-1]}), lines)
    assert mismatches(table.model_copy(update={"rows": table.rows[1:]}), lines)
    relabelled = table.rows[0].model_copy(update={"label": "Qwen2-7B"})
    assert mismatches(table.model_copy(update={"rows": [relabelled, *table.rows[1:]]}), lines)


def test_a_printed_dash_is_null_and_a_null_needs_a_dash() -> None:
    table = load_table("adaptive-note-table1")
    lines = seed_lines(table)
    llama = next(r for r, row in enumerate(table.rows) if row.id == "vanilla-llama3-8b")
    row = table.rows[llama]
    assert row.values[-4:] == [None] * 4
    assert mismatches(_mutated(table, llama, [*row.values[:-1], "0.0"]), lines)
    qwen = next(r for r, row in enumerate(table.rows) if row.id == "vanilla-qwen2-7b")
    assert mismatches(_mutated(table, qwen, [*table.rows[qwen].values[:-1], None]), lines)


def test_every_row_names_a_registered_method_profile_and_valid_settings(table: Table) -> None:
    for row in table.rows:
        where = f"{table.id} row {row.id}"
        if row.kind == "derived":
            assert row.method is None and row.note, where  # how it is derived is said
            continue
        if row.method is None:
            assert row.skip, f"{where}: names no method and says no reason"
            continue
        assert row.method in METHODS, where
        spec = METHODS[row.method]
        assert row.profile in spec.profiles, f"{where}: {row.profile!r} not in {spec.profiles}"
        # every key a field of the method's settings, every value of its type and range
        context = resolve_context(spec.context, dict(row.settings))
        TypeAdapter(spec.context).validate_python(dataclasses.asdict(context))
        for role in row.role_backbones:
            assert role in spec.roles, f"{where}: {role!r} is no role of {row.method}"
        assert row.role_backbones == {} or "role-models" in row.requires, where


def test_every_row_ran_on_a_published_backbone(table: Table) -> None:
    assert len(set(table.backbones)) == len(table.backbones)
    for row in table.rows:
        used = {row.backbone, *row.role_backbones.values()} - {None}
        if row.kind == "run":
            assert row.backbone is not None or all(c.backbone for c in table.columns), row.id
        assert used <= set(table.backbones), (table.id, row.id, used)
    for column in table.columns:
        assert column.backbone is None or column.backbone in table.backbones


def test_every_column_is_a_metric_of_its_datasets_task(table: Table) -> None:
    for column in table.columns:
        task = table.datasets[column.dataset].task
        known = {*PAPER_METRICS.get(task, ()), *EXTRA_METRICS.get(task, ()), "avg"}
        assert column.metric in known | UNSCORED_METRICS.keys(), (table.id, column)


def test_every_dataset_says_where_its_inputs_come_from(table: Table) -> None:
    for key, dataset in table.datasets.items():
        assert dataset.questions.source or dataset.questions.command, (table.id, key)
        assert dataset.questions.path.startswith(f"{key}/"), (table.id, key)
        if dataset.corpus is not None:
            assert dataset.corpus.source or dataset.corpus.command, (table.id, key)
        if dataset.index is not None:
            assert dataset.index.command and "{data}" in dataset.index.command, (table.id, key)
        if dataset.retriever_spec is not None:
            assert dataset.retriever_spec.split(":", 1)[0] in {"bm25", "dense", "es"}


def test_published_number_reads_every_cell(table: Table) -> None:
    for row in table.rows:
        for column, value in table.cells(row):
            number = published_number(value)
            assert (number is None) == (value is None), (row.id, column.label, value)


def test_published_number_drops_the_marks() -> None:
    assert published_number("14.6↑") == 14.6
    assert published_number("(13.9↑)") == 13.9
    assert published_number("48.8(+1.6pt)") == 48.8
    assert published_number("1.1min") == 1.1
    assert published_number(None) is None


def test_a_broken_table_file_is_one_clear_error() -> None:
    with pytest.raises(ConfigError, match="unknown table 'deepnote-table99'; choose one of"):
        load_table("deepnote-table99")
    good = load_table("deepnote-table8").model_dump()
    good["rows"][0]["values"] = good["rows"][0]["values"][:-1]
    with pytest.raises(ValueError, match="values for 12 columns"):
        Table.model_validate(good)
    good = load_table("deepnote-table8").model_dump()
    good["rows"][0]["requires"] = ["a-gpu"]
    with pytest.raises(ValueError, match="unknown requirement"):
        Table.model_validate(good)


def test_a_wrong_heading_or_dataset_order_fails() -> None:
    table = load_table("deepnote-table1")
    lines = seed_lines(table)
    assert header_mismatches(table, lines) == []
    columns = list(table.columns)
    columns[12] = columns[12].model_copy(update={"label": "str_em"})
    assert header_mismatches(table.model_copy(update={"columns": columns}), lines)
    datasets = dict(table.datasets)
    datasets["hotpotqa"], datasets["musique"] = datasets["musique"], datasets["hotpotqa"]
    assert header_mismatches(table.model_copy(update={"datasets": datasets}), lines)


def test_a_dataset_written_same_as_is_the_first_tables_entry() -> None:
    first, other = load_table("deepnote-table1"), load_table("deepnote-table6")
    assert other.datasets == first.datasets
    assert load_table("deepnote-table8").datasets["musique"] == first.datasets["musique"]


def test_one_data_dir_serves_every_table() -> None:
    # a path under --data DIR means one file, whichever table names it: the same build command
    # and the same retriever spec everywhere
    commands: dict[str, set[str | None]] = {}
    specs: dict[str, set[str]] = {}
    for name in EXPECTED:
        for dataset in load_table(name).datasets.values():
            for index, spec in (
                (dataset.index, dataset.retriever_spec),
                (dataset.dense_index, dataset.dense_retriever_spec),
            ):
                if index is not None:
                    commands.setdefault(index.path, set()).add(index.command)
                    specs.setdefault(index.path, set()).add(spec or "")
    assert commands and all(len(c) == 1 for c in commands.values()), commands
    assert all(len(s) == 1 and next(iter(s)).endswith(path) for path, s in specs.items()), specs
