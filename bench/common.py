"""What the benchmark scripts share: percentiles, gold recall, the results folder, plain-text
tables, the eval benchmarks' question file."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100), nearest rank: a value that was actually measured."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def gold_recall(
    search: Callable[[str], Sequence[Any]], questions: Sequence[dict[str, Any]], ks: Sequence[int]
) -> tuple[dict[int, float], list[float]]:
    """Mean gold-paragraph recall@k of ``search`` (a query -> ranked Documents) over questions
    with ``supporting_titles`` (HotpotQA), and each query's latency in seconds."""
    recall = dict.fromkeys(ks, 0.0)
    latencies = []
    for q in questions:
        started = time.perf_counter()
        titles = [d.metadata["title"] for d in search(q["question"])]
        latencies.append(time.perf_counter() - started)
        gold = set(q["supporting_titles"])
        for k in ks:
            recall[k] += len(gold & set(titles[:k])) / len(gold)
    return {k: total / len(questions) for k, total in recall.items()}, latencies


def write_dataset(path: Path, n: int) -> Path:
    """``n`` questions as a JSONL dataset at ``path``: the bundled sample's, cycled under
    distinct ids (the eval keys its rows by id)."""
    from noterag.retrievers.sample import sample_questions  # here: the module imports no noterag

    base = sample_questions()
    with path.open("w") as out:
        for i in range(n):
            q = base[i % len(base)]
            out.write(json.dumps(q | {"id": f"{q['id']}-{i}"}) + "\n")
    return path


def sim_eval(
    method: str, dataset: Path, out: Path, index: Path, model: Any, **options: Any
) -> dict[str, Any]:
    """``noterag.eval.run_eval`` as the eval benchmarks run it: on the BM25 index at ``index``,
    every question answered again (``force``: ``out`` may hold an earlier round), no progress
    bar; ``options`` the run's own (limit, concurrency, workers, ...). Returns its summary."""
    from noterag.eval import run_eval

    return run_eval(
        method, dataset, out, index=f"bm25:{index}", model=model, progress=False, force=True,
        **options,
    )  # fmt: skip


def recall_text(recall: dict[int, float]) -> str:
    return "recall@k: " + "  ".join(f"@{k} {value:.3f}" for k, value in recall.items())


def write_results(name: str, data: Any, path: Path | None = None) -> Path:
    """Write ``data`` as JSON to ``path`` (default bench/results/<name>.json); return the path."""
    path = path or RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")
    return path


def print_table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str, str]]) -> None:
    """Print ``rows`` as a table; ``columns`` = (key, heading, format spec), e.g. ("p50", "p50 ms",
    ".2f"). A missing or None value prints as "-"."""
    cells = [
        ["-" if row.get(key) is None else format(row[key], spec) for key, _, spec in columns]
        for row in rows
    ]
    widths = [
        max([len(heading)] + [len(r[i]) for r in cells])
        for i, (_, heading, _) in enumerate(columns)
    ]
    print(
        "  ".join(
            h.rjust(w) if i else h.ljust(w) for i, ((_, h, _), w) in enumerate(zip(columns, widths))
        )
    )
    for r in cells:
        print("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))))


MEASURED = Path(__file__).resolve().parents[1] / "noterag" / "data" / "scale_measured.json"


def publish_estimates(kind: str, rows: Sequence[dict[str, Any]]) -> Path:
    """Record measured build costs (``passages``, ``build_s``, ``peak_gib``, ``disk_gib``) for
    ``noterag index --dry-run`` (noterag/data/scale_measured.json, shipped in the package);
    a size measured again replaces its old row."""
    data = json.loads(MEASURED.read_text()) if MEASURED.is_file() else {}
    merged = {r["passages"]: r for r in data.get(kind, [])}
    for row in rows:
        # IVF-PQ adds its training time and settings, from which other settings' are scaled.
        keys = ("passages", "build_s", "peak_gib", "disk_gib", "train_s", "dim", "settings")
        merged[row["passages"]] = {key: row[key] for key in keys if key in row}
    data[kind] = [merged[n] for n in sorted(merged)]
    MEASURED.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return MEASURED


# The pieces of the benchmarks' pseudo-words (bench/retrieval.py, bench/wiki_corpus.py): a
# syllable is an onset, a vowel and a coda, so the synthetic corpora's words look like words to
# a tokenizer and a stemmer.
ONSETS = [
    "b",
    "c",
    "d",
    "f",
    "g",
    "h",
    "k",
    "l",
    "m",
    "n",
    "p",
    "r",
    "s",
    "t",
    "v",
    "z",
    "br",
    "dr",
    "gr",
    "pl",
    "st",
    "tr",
    "ch",
    "sh",
    "th",
]
VOWELS = ["a", "e", "i", "o", "u", "ai", "ea", "ou", "ie"]
CODAS = ["", "", "n", "r", "l", "s", "m", "x"]


def pseudo_syllables() -> list[str]:
    """Every onset + vowel + coda, in that order: the digits of the pseudo-words."""
    return [o + v + c for o in ONSETS for v in VOWELS for c in CODAS]
