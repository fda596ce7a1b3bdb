"""Evaluation across machines: ``--shard I/N`` and ``noterag merge``.

    noterag eval -m deepnote -d q.jsonl --shard 1/3 -o runs/dn-1   # machine 1
    noterag eval -m deepnote -d q.jsonl --shard 2/3 -o runs/dn-2   # machine 2
    noterag eval -m deepnote -d q.jsonl --shard 3/3 -o runs/dn-3   # machine 3
    noterag merge runs/dn-1 runs/dn-2 runs/dn-3 --out runs/dn

A question belongs to shard ``1 + int(sha256(id)) mod N``: a stable hash of its id alone, so
the shards are the same on every machine, whatever the file's order, the Python version or
the hash seed, and a question added to the dataset moves no other. ``--limit`` cuts the
dataset first, then the shard takes its part of those questions.

``merge`` checks that the runs are shards of one evaluation: the same method, settings,
model, index (by its build id where it has one, so a copy of the index on another machine
counts as the same) and question set (by a digest of every question's id, text, golds and
task, taken before sharding, so the dataset file may sit at another path), each shard of the
same N exactly once, each shard complete (a row for every one of its questions) and no
question in two shards; then it writes the merged run directory: run.json, results.jsonl
(the shards' rows), summary.json.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from noterag.base.errors import ConfigError
from noterag.base.files import atomic_write_json, atomic_write_lines
from noterag.eval.lock import run_lock
from noterag.eval.loop import encode_row, show
from noterag.eval.report import Summary
from noterag.eval.runs import RESULTS_FILE, RUN_FILE, SUMMARY_FILE, RunDirError, read_run

# What shards of one evaluation share (the run.json fields; the index by build id below).
AGREED = (
    "method", "format", "model", "endpoint", "context", "fair_topk_from", "limit",
    "dataset_digest",
)  # fmt: skip


class MergeError(RunDirError):
    """The run directories are not the complete, disjoint shards of one evaluation."""


def parse_shard(shard: str | tuple[int, int]) -> tuple[int, int]:
    """``"2/4"`` → (2, 4); I from 1 to N."""
    if isinstance(shard, tuple):
        i, n = shard
    else:
        match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", shard)
        if match is None:
            raise ConfigError(f"--shard takes I/N (e.g. 1/4), not {shard!r}")
        i, n = int(match[1]), int(match[2])
    if n < 1 or not 1 <= i <= n:
        raise ConfigError(f"--shard {i}/{n}: I must be between 1 and N")
    return i, n


def shard_of(question_id: str, n: int) -> int:
    """The shard (1..n) of a question: a stable hash of its id."""
    digest = hashlib.sha256(question_id.encode()).digest()
    return 1 + int.from_bytes(digest[:8], "big") % n


def in_shard(question_id: str, shard: tuple[int, int]) -> bool:
    return shard_of(question_id, shard[1]) == shard[0]


def dataset_digest(examples: Sequence[Any]) -> str:
    """A digest of the question set (ids, questions, golds, tasks, in order)."""
    h = hashlib.sha256()
    for ex in examples:
        record = [ex.id, ex.question, list(ex.golds), ex.task]
        h.update(json.dumps(record, ensure_ascii=False).encode() + b"\n")
    return h.hexdigest()[:16]


def _index_identity(config: dict[str, Any]) -> Any:
    """The index by its build ids when it has any (the same build elsewhere is the same
    index), else by its label (Elasticsearch, a retriever object)."""
    builds = config.get("index_build")
    if isinstance(builds, dict) and builds:
        return sorted(builds.values())
    return config.get("index")


def merge_runs(
    run_dirs: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    *,
    force: bool = False,
) -> Summary:
    """Check that ``run_dirs`` are the complete, disjoint shards of one evaluation and write
    the merged run into ``out``; return its summary. Refuses, with one line, anything else."""
    from noterag.eval.report import summarize

    if not run_dirs:
        raise MergeError("merge needs the run directories of the shards")
    out = Path(out)
    runs = []
    for run_dir in run_dirs:
        config, rows = read_run(run_dir)
        runs.append((Path(run_dir), config, rows))
    if any(path.resolve() == out.resolve() for path, _, _ in runs):
        raise MergeError(f"--out {out} is one of the runs being merged; choose a new --out")

    first_dir, first, _ = runs[0]
    for path, config, _ in runs[1:]:
        for key in AGREED:
            if config.get(key) != first.get(key):
                raise MergeError(
                    f"{path} and {first_dir} are not shards of one evaluation: {key} "
                    f"{show(config.get(key))} ≠ {show(first.get(key))}"
                )
        if _index_identity(config) != _index_identity(first):
            raise MergeError(
                f"{path} and {first_dir} ran on different indexes: "
                f"{show(_index_identity(config))} ≠ {show(_index_identity(first))}"
            )

    shards: dict[int, Path] = {}
    total = None
    for path, config, _ in runs:
        raw = config.get("shard")
        if not raw:
            raise MergeError(f"{path} is not a shard (it ran without --shard)")
        i, n = parse_shard(raw)
        if total is not None and n != total:
            raise MergeError(f"{path} is shard {i}/{n}, the others are shards of {total}")
        total = n
        if i in shards:
            raise MergeError(f"{path} and {shards[i]} are both shard {i}/{n}")
        shards[i] = path
    assert total is not None
    missing = sorted(set(range(1, total + 1)) - set(shards))
    if missing:
        raise MergeError(
            f"shard{'s' if len(missing) > 1 else ''} {', '.join(f'{i}/{total}' for i in missing)}"
            " missing: merge needs every shard"
        )

    merged: list[dict[str, Any]] = []
    owner: dict[str, Path] = {}
    ids: list[str] = []
    for path, config, rows in runs:
        by_id = {row["id"]: row for row in rows}
        scope = config.get("ids") or list(by_id)
        unanswered = [question for question in scope if question not in by_id]
        if unanswered:
            shown = ", ".join(unanswered[:3]) + (
                f" and {len(unanswered) - 3} more" if len(unanswered) > 3 else ""
            )
            raise MergeError(
                f"{path} is not complete: {len(unanswered)} of its {len(scope)} questions have "
                f"no answer ({shown}); resume it with the same command first"
            )
        for question in scope:
            if question in owner:
                raise MergeError(
                    f"question {question} is in both {owner[question]} and {path}: shards must "
                    "not overlap"
                )
            owner[question] = path
            ids.append(question)
            merged.append(by_id[question])
    expected = first.get("dataset_questions")
    if isinstance(expected, int) and len(ids) != expected:
        raise MergeError(
            f"the shards hold {len(ids)} questions, the dataset {expected}: they do not cover it"
        )

    if out.exists() and not out.is_dir():
        raise MergeError(f"--out {out} is a file, not a directory")
    with run_lock(out, "merge"):  # one writer per run directory (noterag.eval.lock)
        if ((out / RUN_FILE).exists() or (out / RESULTS_FILE).exists()) and not force:
            raise MergeError(f"{out} already holds a run; choose a new --out or pass --force")
        configs = [config for _, config, _ in runs]
        config = dict(first) | {
            "shard": None,
            "ids": ids,
            "questions": len(ids),
            "merged_from": [str(path.resolve()) for path, _, _ in runs],
            "latency_includes_queueing": any(c.get("latency_includes_queueing") for c in configs),
            "tasks": _sum_tasks(configs),
        }
        try:
            out.mkdir(parents=True, exist_ok=True)
            (out / SUMMARY_FILE).unlink(missing_ok=True)
            atomic_write_lines(
                out / RESULTS_FILE,
                (encode_row(row) for row in merged),
            )
            atomic_write_json(out / RUN_FILE, config)
        except OSError as exc:
            raise MergeError(f"cannot write {out}: {exc.strerror or exc}") from None
        return summarize(out)


def _sum_tasks(configs: Sequence[dict[str, Any]]) -> dict[str, int]:
    tasks: dict[str, int] = {}
    for config in configs:
        for task, n in (config.get("tasks") or {}).items():
            tasks[task] = tasks.get(task, 0) + int(n)
    return dict(sorted(tasks.items()))
