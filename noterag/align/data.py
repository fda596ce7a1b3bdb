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
  the journal (atomically, ``noterag._fs``), so a kill between the two writes leaves neither a
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

import asyncio
import atexit
import json
import os
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from noterag._fs import atomic_write_json, atomic_write_lines, fsync_dir
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
from noterag.errors import ConfigError, NoteragError
from noterag.eval.report import RunDirError, scan_results
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
    from noterag.eval.datasets import load_dataset
    from noterag.spec import resolve_retriever

    examples = load_dataset(Path(dataset), format=format, limit=limit)
    other = sorted({ex.task for ex in examples} - {"multihop"})
    if other:
        raise ConfigError(
            f"align data builds DNAlign from multi-hop QA questions (the paper: 2WikiMQA train); "
            f"{dataset} has {', '.join(other)} questions"
        )
    index_spec = _index_spec(index)
    model_name = model_label or _model_label(model)
    judge_name = judge_label or (model_name if judge_model is None else _model_label(judge_model))
    config = {
        "dataset": str(Path(dataset).expanduser().resolve()),
        "format": format,
        "index": _index_label(index_spec),
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
    meter = _Progress(console, progress, total=len({ex.id for ex in examples} | set(done)))
    meter.done.extend(done.values())
    if todo:

        async def main() -> None:
            # BM25 searches and sync-only models run on the loop's default executor, whose
            # default size (CPUs + 4) would cap the concurrency on a small machine.
            executor = ThreadPoolExecutor(
                max(32, concurrency * 4), thread_name_prefix="noterag-align"
            )
            asyncio.get_running_loop().set_default_executor(executor)
            journal = _Appender(run_dir / QUESTIONS_FILE)
            pairs = _Appender(run_dir / PAIRS_FILE)
            try:
                await _run_all(builder, todo, config, concurrency, journal, pairs, meter)
            finally:
                journal.close()
                pairs.close()
                executor.shutdown(wait=False)

        with meter:
            _event_loop().run(main())
    rows, _ = scan_results(run_dir / QUESTIONS_FILE)
    stats = run_statistics(rows)
    atomic_write_json(run_dir / STATS_FILE, stats)
    return stats


_RUNNER: asyncio.Runner | None = None


def _event_loop() -> asyncio.Runner:
    # One loop for every run of the process, as noterag eval: a model's async HTTP client keeps
    # connections bound to the loop that opened them.
    global _RUNNER
    if _RUNNER is None:
        _RUNNER = asyncio.Runner()
        atexit.register(_RUNNER.close)
    return _RUNNER


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
        differences = [
            f"{key} {_show(previous.get(key))} → {_show(config[key])}"
            for key in COMPARED
            if previous.get(key) != config[key]
        ]
        if differences:
            raise RunDirError(
                f"{run_dir} holds a run with another configuration ({'; '.join(differences)}); "
                "resume it with the same settings, choose a new --out, or pass --force to start "
                "it over"
            )
        scan_results(journal)  # a damaged journal is refused now, not after the models start
        return previous
    if journal.exists() or (run_dir / PAIRS_FILE).exists():
        raise RunDirError(
            f"{run_dir} has {QUESTIONS_FILE} or {PAIRS_FILE} but no {RUN_FILE}: not a run this "
            "version wrote; choose a new --out or pass --force to start over"
        )
    return None


def _show(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


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
    rows, valid_end = scan_results(journal)
    if journal.exists() and journal.stat().st_size > valid_end:
        # a half-written last line (killed mid-write): cut away
        with open(journal, "r+b") as f:
            f.truncate(valid_end)
            f.flush()
            os.fsync(f.fileno())
    if retry_errors and any(row.get("error") for row in rows):
        rows = [row for row in rows if not row.get("error")]
        atomic_write_lines(journal, (_encode(row) for row in rows))
    # pairs.jsonl is the journal's pairs, whatever a kill left in it
    atomic_write_lines(run_dir / PAIRS_FILE, (_encode(p) for row in rows for p in pair_rows(row)))
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


def _encode(row: dict[str, Any]) -> bytes:
    return (json.dumps(row, ensure_ascii=False, default=str) + "\n").encode()


class _Appender:
    """Appends lines to one file, each batch in one write, fsynced before the next. Runs on the
    event loop's thread, so writes never interleave (the eval runner's results writer)."""

    def __init__(self, path: Path) -> None:
        existed = path.exists()
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        if not existed:
            fsync_dir(path.parent)

    def append(self, rows: Sequence[dict[str, Any]]) -> None:
        if not rows:
            return
        view = memoryview(b"".join(_encode(row) for row in rows))
        while view:
            view = view[os.write(self._fd, view) :]
        os.fsync(self._fd)

    def close(self) -> None:
        os.close(self._fd)


# --------------------------------------------------------------------------- running


class _Abort(Exception):
    def __init__(self, error: NoteragError) -> None:
        super().__init__(str(error))
        self.error = error


async def _run_all(
    builder: Builder,
    todo: Sequence[Any],
    config: dict[str, Any],
    concurrency: int,
    journal: _Appender,
    pairs: _Appender,
    meter: _Progress,
) -> None:
    semaphore = asyncio.Semaphore(concurrency)

    async def one(example: Any) -> None:
        async with semaphore:
            row = await build_row(builder, example, config)
            journal.append([row])  # the question is done once this line is on disk
            pairs.append(pair_rows(row))
        meter.advance(row)

    try:
        async with asyncio.TaskGroup() as group:
            for example in todo:
                group.create_task(one(example))
    except BaseExceptionGroup as failed:
        aborts = [e for e in failed.exceptions if isinstance(e, _Abort)]
        if not aborts:
            raise failed.exceptions[0] from None
        raise type(aborts[0].error)(
            f"{aborts[0].error} (stopped after {meter.count} of {meter.total} questions; run "
            "the same command again to resume)"
        ) from None


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
                raise _Abort(fatal) from exc
            built, error = {}, one_line_error(exc)
    latency = time.perf_counter() - clock
    return {
        "id": example.id,
        "question": example.question,
        "golds": list(example.golds),
        "task": example.task,
        "dataset": example.dataset,
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


# --------------------------------------------------------------------------- configuration


def _index_spec(index: Any) -> Any:
    from langchain_core.retrievers import BaseRetriever

    from noterag.retrievers.spec import normalize_spec

    if index is None:
        index = os.environ.get("NOTERAG_INDEX") or None
    if index is None or isinstance(index, BaseRetriever):
        return index
    return normalize_spec(index)


def _index_label(spec: Any) -> str:
    if spec is None:
        return "sample"
    return spec if isinstance(spec, str) else type(spec).__name__


def _model_label(model: Any) -> str:
    if model is None:
        model = os.environ.get("NOTERAG_MODEL", "local")
    if isinstance(model, str):
        return model.strip()
    name = getattr(model, "model_name", None) or getattr(model, "model", None)
    return name if isinstance(name, str) and name else type(model).__name__


# --------------------------------------------------------------------------- progress


@dataclass
class _Progress:
    """Done / total, the pairs so far per stage, calls per question: a rich bar on a terminal, a
    line every tenth of the run elsewhere."""

    console: Any
    enabled: bool
    total: int
    done: list[dict[str, Any]] = field(default_factory=list)
    _bar: Any = None
    _task: Any = None

    def __post_init__(self) -> None:
        if self.console is None:
            from rich.console import Console

            self.console = Console(stderr=True, highlight=False, soft_wrap=True)

    @property
    def count(self) -> int:
        return len(self.done)

    def __enter__(self) -> Self:
        if self.enabled and self.console.is_terminal:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._bar = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[stats]}"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=self.console,
            )
            self._bar.start()
            self._task = self._bar.add_task(
                "align data", total=self.total, completed=self.count, stats=self.stats()
            )
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def advance(self, row: dict[str, Any]) -> None:
        self.done.append(row)
        if self._bar is not None:
            self._bar.update(self._task, advance=1, stats=self.stats())
        elif self.enabled and (
            self.count % max(1, self.total // 10) == 0 or self.count == self.total
        ):
            self.console.print(f"{self.count}/{self.total} · {self.stats()}")

    def stats(self) -> str:
        if not self.done:
            return ""
        pairs: Counter[str] = Counter()
        for row in self.done:
            for name, stage in (row.get("stages") or {}).items():
                pairs[name] += stage["outcome"] == "pair"
        parts = ["pairs " + " ".join(f"{PAPER_NAMES[n]} {pairs[n]}" for n in TABLE_ORDER)]
        answered = [row for row in self.done if not row.get("error")]
        if answered:
            calls = sum(r["generator"]["calls"] + r["judge"]["calls"] for r in answered)
            parts.append(f"{calls / len(answered):.0f} calls/q")
        failed = self.count - len(answered)
        if failed:
            parts.append(f"[red]{failed} failed[/]")
        return " · ".join(parts)
