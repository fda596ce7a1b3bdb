"""``noterag align select``: the DNAlign training file from preference pairs, as the official
``src/select_dpo_data.py`` selects it.

All pairs are shuffled (seeded here; the official script's ``random.shuffle`` is unseeded),
then taken in that order into per-stage buckets until each holds its quota — 1,900 note
initializations, 1,900 query refinements, 1,900 knowledge accumulations and 300 answers by
default, the paper's Table 3 — and the buckets, concatenated, are shuffled again. A stage with
fewer pairs than its quota gives all it has. Pairs with an empty chosen or rejected reply are
skipped, as there.

Sources are run directories of ``noterag align data`` (their ``pairs.jsonl``) or pairs files;
lines of the official generator's files (no ``stage``, an ``id`` such as ``init_note-12``) are
read by the official script's rule: the first of "init", "refine", "query", "rag" the id
contains names the stage. The training file keeps ``prompt``, ``chosen``, ``rejected`` (TRL's
preference format), ``stage`` and ``question_id``.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from noterag.align.data import PAIRS_FILE
from noterag.base.errors import ConfigError
from noterag.base.files import atomic_write_lines

# The paper's Table 3, in the official script's concatenation order (init, refine, query, rag).
DEFAULT_QUOTAS: dict[str, int] = {
    "init_note": 1900,
    "accumulate": 1900,
    "refine_query": 1900,
    "rag": 300,
}
DEFAULT_SEED = 66
_OFFICIAL_ID_RULE = (
    ("init", "init_note"),
    ("refine", "accumulate"),
    ("query", "refine_query"),
    ("rag", "rag"),
)
KEPT = ("prompt", "chosen", "rejected", "stage", "question_id")


def stage_of(row: Mapping[str, Any]) -> str | None:
    """A pair's stage: its ``stage``, else the official script's rule on its ``id``."""
    stage = row.get("stage")
    if isinstance(stage, str) and stage in DEFAULT_QUOTAS:
        return stage
    pair_id = str(row.get("id", ""))
    for needle, name in _OFFICIAL_ID_RULE:
        if needle in pair_id:
            return name
    return None


def load_pairs(sources: Iterable[str | os.PathLike[str]]) -> list[dict[str, Any]]:
    """Every pair of the sources, in order (a directory means its pairs.jsonl)."""
    pairs: list[dict[str, Any]] = []
    for source in sources:
        path = Path(source)
        if path.is_dir():
            path = path / PAIRS_FILE
        if not path.is_file():
            raise ConfigError(f"no pairs file at {path} (make one with `noterag align data`)")
        with open(path, "rb") as f:
            for number, raw in enumerate(f, 1):
                if not raw.strip():
                    continue
                try:
                    row = json.loads(raw)
                except (json.JSONDecodeError, UnicodeDecodeError) as err:
                    raise ConfigError(f"{path} line {number}: not valid JSON ({err})") from None
                if not isinstance(row, dict) or not all(
                    isinstance(row.get(key), str) for key in ("prompt", "chosen", "rejected")
                ):
                    raise ConfigError(
                        f"{path} line {number}: not a preference pair (prompt, chosen and "
                        "rejected strings)"
                    )
                if stage_of(row) is None:
                    raise ConfigError(f"{path} line {number}: no stage (and no official id)")
                pairs.append(row)
    return pairs


def select_pairs(
    pairs: Iterable[Mapping[str, Any]],
    quotas: Mapping[str, int] | None = None,
    seed: int = DEFAULT_SEED,
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The training rows and how many each stage gave (see the module docstring)."""
    quotas = dict(DEFAULT_QUOTAS if quotas is None else quotas)
    unknown = sorted(set(quotas) - set(DEFAULT_QUOTAS))
    if unknown:
        raise ConfigError(f"no stage {', '.join(unknown)}; the stages: {', '.join(DEFAULT_QUOTAS)}")
    for name, quota in quotas.items():
        if quota < 0:
            raise ConfigError(f"the {name} quota must be 0 or more, not {quota}")
    rng = random.Random(seed)
    shuffled = list(pairs)
    rng.shuffle(shuffled)
    buckets: dict[str, list[dict[str, Any]]] = {name: [] for name in DEFAULT_QUOTAS}
    for row in shuffled:
        if not (row.get("chosen") and row.get("rejected")):
            continue
        stage = stage_of(row)
        if stage is not None and len(buckets[stage]) < quotas.get(stage, 0):
            buckets[stage].append(
                {
                    "prompt": row["prompt"],
                    "chosen": row["chosen"],
                    "rejected": row["rejected"],
                    "stage": stage,
                    "question_id": row.get("question_id"),
                }
            )
    selected = [row for name in DEFAULT_QUOTAS for row in buckets[name]]
    rng.shuffle(selected)
    return selected, {name: len(rows) for name, rows in buckets.items()}


def write_training_file(rows: Iterable[Mapping[str, Any]], out: str | os.PathLike[str]) -> int:
    """Write the training rows as JSONL, atomically; return how many."""
    out = Path(out)
    if out.is_dir():
        raise ConfigError(f"--out {out} is a directory; give the training file's path")
    out.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write_lines(
        out,
        (
            (json.dumps({k: row.get(k) for k in KEPT}, ensure_ascii=False) + "\n").encode()
            for row in rows
        ),
    )
