"""An evaluation run's directory read back: ``run.json`` (the configuration) and the finished
rows of ``results.jsonl``, each file refused with one clear error when it is not what the
runner writes; and the metric columns' order and names, which every report of runs shares
(``report``'s summaries and tables, ``significance``'s tests).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from noterag.base.errors import NoteragError

RUN_FILE = "run.json"
RESULTS_FILE = "results.jsonl"
SUMMARY_FILE = "summary.json"

# The order metric columns appear in, whatever the tasks of the compared runs: the papers'
# columns (computed as the official code computes them) first, then our own definitions
# (noterag.eval.metrics says which is which).
METRIC_ORDER = ("em", "f1", "acc", "str_em", "str_hit", "acc_norm", "acc_strict", "f1_flashrag")
METRIC_NAMES = {
    "em": "EM",
    "f1": "F1",
    "acc": "Acc",
    "str_em": "str-em",
    "str_hit": "str-hit",
    "acc_norm": "Acc (norm.)",
    "acc_strict": "Acc (strict)",
    "f1_flashrag": "F1 (FlashRAG)",
}


class RunDirError(NoteragError):
    """A run directory is missing, or its files are not what the runner writes."""


# --------------------------------------------------------------------------- reading


# The most a run's file may hold, read back: one result row (a question with its trace, a few
# KB to a few hundred KB) and run.json (the configuration and the question ids). Past them the
# file is refused, naming it, rather than read into memory whole.
MAX_ROW_BYTES = 64 << 20
MAX_RUN_FILE_BYTES = 256 << 20


def scan_results(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The rows of a results file and the byte offset where its valid part ends.

    Every row is written as one line with its newline in a single write, so a crash can only
    damage the end of the file: the invalid lines after the last valid one are that damage and
    lie past the returned offset. A last row whose newline is missing (lost by a copy or an
    editor) is whole and kept (``noterag.eval.loop.repair_lines`` gives it back its newline).
    An invalid line *before* a valid one is not a crash's trace and is refused, as is an id
    seen twice, a line over ``MAX_ROW_BYTES`` or JSON nested too deeply to read.
    """
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        return [], 0
    except OSError as exc:
        raise RunDirError(f"cannot read {path}: {exc.strerror or exc}") from None
    with handle:
        return _scan_rows(path, handle)


def _scan_rows(path: Path, handle: Any) -> tuple[list[dict[str, Any]], int]:
    rows: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    valid_end = 0
    bad_line: int | None = None
    offset = 0
    number = 0
    while raw := _read_line(path, handle, MAX_ROW_BYTES + 1):
        number += 1
        if len(raw) > MAX_ROW_BYTES:
            raise RunDirError(
                f"{path} line {number} is over the {MAX_ROW_BYTES >> 20} MiB limit for one "
                "result row: not a results file noterag wrote, or damaged"
            )
        offset += len(raw)
        try:
            row = _parse_row(raw)
        except RecursionError:
            raise RunDirError(
                f"{path} line {number} holds JSON nested too deeply to read: not a result row"
            ) from None
        if row is None:
            bad_line = bad_line or number
            continue
        if bad_line is not None:
            raise RunDirError(
                f"{path} line {bad_line} is not a result row although later lines are; the file "
                "was edited or damaged (only a half-written last line is repaired automatically)"
            )
        wrong = _not_numbers(row)
        if wrong is not None:
            raise RunDirError(
                f"{path} line {number}: {wrong}: not a result row noterag wrote (its metrics, "
                "counts and times are numbers)"
            )
        if row["id"] in seen:
            raise RunDirError(
                f"{path} line {number} repeats question id {row['id']!r} (first on line "
                f"{seen[row['id']]})"
            )
        seen[row["id"]] = number
        rows.append(row)
        valid_end = offset
    return rows, valid_end


def _read_line(path: Path, handle: Any, limit: int) -> bytes:
    try:
        line: bytes = handle.readline(limit)
    except OSError as exc:
        raise RunDirError(f"cannot read {path}: {exc.strerror or exc}") from None
    return line


def _parse_row(raw: bytes) -> dict[str, Any] | None:
    # A row torn by a crash is a prefix of "{...}\n": invalid JSON unless all of it but the
    # newline was written, and then it is the whole row.
    try:
        row = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return row if isinstance(row, dict) and isinstance(row.get("id"), str) else None


# The fields of a result row the reports compute with: numbers wherever they are present.
NUMERIC_FIELDS = (
    "llm_calls", "prompt_tokens", "completion_tokens", "passages", "latency_s", "waited_s",
    "started_at", "finished_at", "retries", "cache_calls", "cache_tokens", "requeued",
    "usage_ignored",
)  # fmt: skip


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _not_numbers(row: dict[str, Any]) -> str | None:
    """What in ``row`` should be a number and is not (a metric, a count, a time), or None. A
    report averages them: a string there is named here, not an "unexpected ValueError"
    later."""
    metrics = row.get("metrics")
    if metrics is not None and not isinstance(metrics, dict):
        return "its metrics are not a mapping"
    for name, value in (metrics or {}).items():
        if not _is_number(value):
            return f"metric {_clip(name)} is {_clip(json.dumps(value))}, not a finite number"
    for name in NUMERIC_FIELDS:
        value = row.get(name)
        if value is not None and not _is_number(value):
            return f"{name} is {_clip(json.dumps(value))}, not a finite number"
    return None


def _clip(text: str, limit: int = 40) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def read_json_file(path: Path, what: str = "run configuration") -> dict[str, Any]:
    """A run's JSON file (run.json, summary.json) as an object: a ``RunDirError`` naming it
    when it cannot be read, is over ``MAX_RUN_FILE_BYTES``, is not JSON (or nested too deeply
    to read) or not an object."""
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_RUN_FILE_BYTES + 1)
    except OSError as exc:
        raise RunDirError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_RUN_FILE_BYTES:
        raise RunDirError(f"{path} is over the {MAX_RUN_FILE_BYTES >> 20} MiB limit for a {what}")
    try:
        value = json.loads(data)
    except (ValueError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise RunDirError(f"{path} is not readable JSON: {reason}") from None
    if not isinstance(value, dict):
        raise RunDirError(f"{path} is not a {what}")
    return value


def read_run(run_dir: str | os.PathLike[str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A run's configuration (``run.json``) and its finished rows."""
    run_dir = Path(run_dir)
    config_path = run_dir / RUN_FILE
    if not config_path.is_file():
        what = "does not exist" if not run_dir.exists() else f"holds no {RUN_FILE}"
        raise RunDirError(
            f"{run_dir} is not an evaluation run: it {what} (make one with "
            "`noterag eval ... --out DIR`)"
        )
    config = read_json_file(config_path)
    rows, _ = scan_results(run_dir / RESULTS_FILE)
    return config, rows


def metric_rank(name: str) -> tuple[int, str]:
    return (METRIC_ORDER.index(name) if name in METRIC_ORDER else len(METRIC_ORDER), name)


def metric_label(name: str) -> str:
    return METRIC_NAMES.get(name, name)
