"""``noterag align data``: DNAlign's preference pairs over a dataset, durably and concurrently.

    from noterag.align import run_align_data
    stats = run_align_data("train.jsonl", "runs/dnalign", index="wiki-index",
                           model="openai:Llama-3.1-8B-Instruct", judge_model="openai:gpt-4o-mini")

Each question goes through the four stages of ``noterag.align.stages``. The run directory holds

* ``run.json``: the configuration (dataset, index, generator and judge, samples, seed, k range,
  token caps, the sampling grid), written when the run starts;
* ``questions.jsonl``: one JSON line per finished question — its k and passages, every
  stage's prompt, scored candidates and outcome, the judge's replies, its costs (generator and
  judge calls and tokens), fallbacks, retries, latency, error. This is the run's journal:
  each line is written whole in one ``write`` and fsynced before the next, by one writer on
  the event loop (as ``noterag eval`` writes results.jsonl);
* ``pairs.jsonl``: the preference pairs (``noterag.align.stages.pair_rows``), appended after
  each question's journal line. It is derived: when a run starts or resumes it is rebuilt from
  the journal (atomically, ``noterag.base.files``), so a kill between the two writes leaves neither a
  missing nor a duplicated pair after the next run;
* ``stats.json``: the statistics (``noterag.align.stats``), written at the end.

Resume, refusal and failures work as in ``noterag eval``: the same command again skips the
finished questions and cuts away a half-written last line; a different configuration into the
same directory is refused (``force=True`` starts over; a larger ``limit`` extends the run); a
question whose model calls keep failing is journalled with its ``error`` and no pairs
(``retry_errors=True`` runs it again); an error that would fail every question (endpoint
unreachable, key rejected) stops the run at once.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from noterag.align.scoring import PAPER_NAMES
from noterag.align.stages import (
    GENERATOR_MAX_TOKENS,
    JUDGE_MAX_TOKENS,
    JUDGE_SAMPLING,
    K_RANGE,
    Builder,
    pair_rows,
    sampling_grid,
)
from noterag.align.stats import TABLE_ORDER, run_statistics
from noterag.base.errors import ConfigError
from noterag.base.files import atomic_write_json, atomic_write_lines
from noterag.datasets.formats import row_fields
from noterag.eval import loop
from noterag.eval.runs import RunDirError, scan_results
from noterag.models.errors import fatal_error, one_line_error

RUN_FILE = "run.json"
QUESTIONS_FILE = "questions.jsonl"
PAIRS_FILE = "pairs.jsonl"
STATS_FILE = "stats.json"
# run.json fields that must match for a run to resume (limit may grow; the grid follows from
# samples and seed).
COMPARED = (
    "dataset",
    "format",
    "index",
    "model",
    "judge_model",
    "samples",
    "seed",
    "k_range",
    "max_tokens",
    "judge_max_tokens",
    "judge_sampling",
)
DEFAULT_SEED = 66  # the official gen_dpo_data.py: seed_everything(66)


def run_align_data(
    dataset: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    index: Any = None,
    model: Any = None,
    judge_model: Any = None,
    limit: int | None = None,
    concurrency: int = 1,
    samples: int = 9,
    seed: int = DEFAULT_SEED,
    k_range: tuple[int, int] = K_RANGE,
    max_tokens: int = GENERATOR_MAX_TOKENS,
    judge_max_tokens: int = JUDGE_MAX_TOKENS,
    format: str | None = None,
    force: bool = False,
    retry_errors: bool = False,
    progress: bool = True,
    console: Any = None,
    settings: Any = None,
    model_label: str | None = None,
    judge_label: str | None = None,
) -> dict[str, Any]:
    """Build DNAlign pairs from the questions of ``dataset`` into ``out_dir``; return the run's
    statistics (``noterag.align.stats.run_statistics``).

    index: an index directory, a retriever spec or a BaseRetriever (None: NOTERAG_INDEX, else
    the bundled sample). model: the generator, a spec or a chat model; judge_model: the judge
    (None: the generator). ``model_label`` / ``judge_label`` name model objects in run.json.
    Blocks; call it outside an event loop."""
    if concurrency < 1:
        raise ConfigError(f"concurrency must be at least 1, not {concurrency}")
    if limit is not None and limit < 1:
        raise ConfigError(f"limit must be at least 1, not {limit}")
    for name, value in (("max_tokens", max_tokens), ("judge_max_tokens", judge_max_tokens)):
        if value < 1:
            raise ConfigError(f"{name} must be at least 1, not {value}")
    low, high = k_range
    if not 1 <= low <= high:
        raise ConfigError(f"the top-k range must be 1 <= low <= high, not {low}..{high}")
    import random

    grid = sampling_grid(samples, random.Random(seed))
    from noterag import models
    from noterag.core.spec import resolve_retriever
    from noterag.datasets import load_dataset

    examples = load_dataset(Path(dataset), format=format, limit=limit)
    other = sorted({ex.task for ex in examples} - {"multihop"})
    if other:
        raise ConfigError(
            f"align data builds DNAlign from multi-hop QA questions (the paper: 2WikiMQA train); "
            f"{dataset} has {', '.join(other)} questions"
        )
    index_spec = loop.index_spec(index)
    model_name = model_label or loop.model_label(model)
    judge_name = judge_label or (
        model_name if judge_model is None else loop.model_label(judge_model)
    )
    config = {
        "dataset": str(Path(dataset).expanduser().resolve()),
        "format": format,
        "index": loop.index_label(index_spec),
        "model": model_name,
        "judge_model": judge_name,
        "samples": samples,
        "seed": seed,
        "k_range": [low, high],
        "max_tokens": max_tokens,
        "judge_max_tokens": judge_max_tokens,
        "judge_sampling": dict(JUDGE_SAMPLING),
        "grid": [list(pair) for pair in grid],
        "limit": limit,
    }
    run_dir = Path(out_dir)
    _check_run_dir(run_dir, config, force=force)

    # Nothing is written until the index opens and the models answer (a typo in either must not
    # leave a directory behind that the corrected command would refuse).
    retriever = resolve_retriever(index_spec)
    generator = models.load_chat_model(model, settings)
    models.check_model_reachable(generator)
    if judge_model is None or (isinstance(judge_model, str) and judge_model.strip() == model_name):
        judge = generator
    else:
        judge = models.load_chat_model(judge_model, settings)
        models.check_model_reachable(judge)
    builder = Builder(
        generator=generator,
        judge=judge,
        retriever=retriever,
        grid=grid,
        seed=seed,
        k_range=(low, high),
        max_tokens=max_tokens,
        judge_max_tokens=judge_max_tokens,
    )

    done = _open_run_dir(
        run_dir, config, [ex.id for ex in examples], force=force, retry_errors=retry_errors
    )
    todo = [ex for ex in examples if ex.id not in done]
    meter = loop.Progress(
        console,
        progress,
        total=len({ex.id for ex in examples} | set(done)),
        label="align data",
        stats_of=_stats,
        done=list(done.values()),
    )
    if todo:

        async def main() -> None:
            with (
                loop.LineWriter(run_dir / QUESTIONS_FILE) as journal,
                loop.LineWriter(run_dir / PAIRS_FILE) as pairs,
            ):

                def keep(row: dict[str, Any]) -> None:
                    journal.append(row)  # the question is done once this line is on disk
                    pairs.extend(pair_rows(row))

                await loop.run_questions(
                    todo, concurrency, lambda ex: build_row(builder, ex, config), keep, meter
                )

        with meter:
            loop.run_on_loop(main, max(32, concurrency * 4), "noterag-align")
    rows, _ = scan_results(run_dir / QUESTIONS_FILE)
    stats = run_statistics(rows)
    atomic_write_json(run_dir / STATS_FILE, stats)
    return stats


# --------------------------------------------------------------------------- run directory


def _check_run_dir(run_dir: Path, config: dict[str, Any], *, force: bool) -> dict[str, Any] | None:
    """Refuse a directory this run cannot resume, before anything is loaded or written; return
    the configuration it holds (None for a new run or ``force``)."""
    config_path, journal = run_dir / RUN_FILE, run_dir / QUESTIONS_FILE
    if run_dir.exists() and not run_dir.is_dir():
        raise RunDirError(f"--out {run_dir} is a file, not a directory")
    if force:
        return None
    if config_path.is_file():
        try:
            previous = json.loads(config_path.read_text())
        except (OSError, ValueError) as exc:
            raise RunDirError(f"{config_path} is not readable JSON: {exc}") from None
        if not isinstance(previous, dict) or "judge_model" not in previous:
            raise RunDirError(
                f"{run_dir} holds no align data run ({RUN_FILE} is not one); choose a new --out"
            )
        loop.check_same_config(run_dir, previous, config, COMPARED)
        scan_results(journal)  # a damaged journal is refused now, not after the models start
        return previous
    if journal.exists() or (run_dir / PAIRS_FILE).exists():
        raise RunDirError(
            f"{run_dir} has {QUESTIONS_FILE} or {PAIRS_FILE} but no {RUN_FILE}: not a run this "
            "version wrote; choose a new --out or pass --force to start over"
        )
    return None


def _open_run_dir(
    run_dir: Path, config: dict[str, Any], ids: Sequence[str], *, force: bool, retry_errors: bool
) -> dict[str, dict[str, Any]]:
    """Create or resume the run directory; return the finished questions to skip, by id."""
    previous = _check_run_dir(run_dir, config, force=force)
    if force:
        for name in (RUN_FILE, QUESTIONS_FILE, PAIRS_FILE, STATS_FILE):
            (run_dir / name).unlink(missing_ok=True)
    run_dir.mkdir(parents=True, exist_ok=True)
    journal = run_dir / QUESTIONS_FILE
    rows = loop.repair_lines(journal)  # a half-written last line (killed mid-write): cut away
    if retry_errors and any(row.get("error") for row in rows):
        rows = [row for row in rows if not row.get("error")]
        atomic_write_lines(journal, (loop.encode_row(row) for row in rows))
    # pairs.jsonl is the journal's pairs, whatever a kill left in it
    atomic_write_lines(
        run_dir / PAIRS_FILE, (loop.encode_row(p) for row in rows for p in pair_rows(row))
    )
    from noterag import __version__

    atomic_write_json(
        run_dir / RUN_FILE,
        config
        | {
            "created": previous.get("created") if previous else time.time(),
            "questions": len(set(ids) | {row["id"] for row in rows}),
            "updated": time.time(),
            "noterag": __version__,
        },
    )
    return {row["id"]: row for row in rows}


# --------------------------------------------------------------------------- running


async def build_row(builder: Builder, example: Any, config: dict[str, Any]) -> dict[str, Any]:
    """One question's journal line (with ``error`` set if its model calls failed)."""
    from noterag.models import count_retries

    started_at, clock = time.time(), time.perf_counter()
    with count_retries() as retries:
        try:
            built = await builder.build(example)
            error = None
        except Exception as exc:  # journalled, unless it would fail every question
            fatal = fatal_error(exc)
            if fatal is not None:
                raise loop.Abort(fatal) from exc
            built, error = {}, one_line_error(exc)
    latency = time.perf_counter() - clock
    return {
        **row_fields(example),
        # an errored question has no stages, pairs or costs
        "k": built.get("k"),
        "passage_ids": built.get("passage_ids"),
        "search": built.get("search"),
        "search_passage_ids": built.get("search_passage_ids"),
        "stages": built.get("stages"),
        "pairs": built.get("pairs", 0),
        "generator": built.get("generator"),
        "judge": built.get("judge"),
        "fallbacks": built.get("fallbacks"),
        "retries": retries.value,
        "latency_s": round(latency, 3),
        "started_at": started_at,
        "error": error,
        "model": config["model"],
        "judge_model": config["judge_model"],
    }


# --------------------------------------------------------------------------- progress


def _stats(done: list[dict[str, Any]]) -> str:
    """The progress line's figures: the pairs so far per stage, calls per question."""
    pairs: Counter[str] = Counter()
    for row in done:
        for name, stage in (row.get("stages") or {}).items():
            pairs[name] += stage["outcome"] == "pair"
    parts = ["pairs " + " ".join(f"{PAPER_NAMES[n]} {pairs[n]}" for n in TABLE_ORDER)]
    answered = [row for row in done if not row.get("error")]
    if answered:
        calls = sum(r["generator"]["calls"] + r["judge"]["calls"] for r in answered)
        parts.append(f"{calls / len(answered):.0f} calls/q")
    failed = len(done) - len(answered)
    if failed:
        parts.append(f"[red]{failed} failed[/]")
    return " · ".join(parts)
