"""Carry out a plan: each run an ordinary eval run directory (``noterag.eval.run_eval``), only
what is missing or unfinished run.

A run whose directory already answered every question of this invocation (same method, model,
settings and questions) is not started again, so a finished table re-prints without a model.
Any other goes through ``run_eval``, which resumes it: the questions in its results.jsonl (each
appended and fsynced as it finished) are not asked again, whatever stopped the last attempt
(Ctrl-C, kill -9, a dead endpoint). The model's replies are kept in a SQLite cache
(``OUT/llm-cache.sqlite`` unless ``--cache`` says otherwise), so even a question cut short
replays the calls it had made. A run whose inputs are missing is not started (the plan lists
them with what provides them); the others run.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from noterag.eval.report import Summary
from noterag.eval.runs import RUN_FILE, RunDirError, read_run
from noterag.reproduce.plan import Plan, PlannedRun, sample_index_spec

CACHE_FILE = "llm-cache.sqlite"


@dataclass
class Outcome:
    run: PlannedRun
    run_dir: Path
    ids: list[str]  # the questions of this invocation (after --limit and --shard)
    status: str  # "ran", "finished" (nothing left to run), "blocked" (inputs missing)
    summary: Summary | None = None


def run_dir_of(run: PlannedRun, shard: str | None) -> Path:
    """The run's directory: a shard has its own, which ``noterag merge`` joins."""
    if shard is None:
        return Path(run.run_dir)
    from noterag.eval.merge import parse_shard

    i, n = parse_shard(shard)
    return Path(f"{run.run_dir}.shard-{i}-of-{n}")


def question_ids(run: PlannedRun, limit: int | None, shard: str | None) -> list[str]:
    """The ids of the run's questions in this invocation, in the dataset's order."""
    from noterag.datasets import load_dataset
    from noterag.eval.merge import in_shard, parse_shard

    examples = load_dataset(Path(run.questions), limit=limit)
    if shard is not None:
        which = parse_shard(shard)
        examples = [ex for ex in examples if in_shard(ex.id, which)]
    return [ex.id for ex in examples]


def is_finished(run: PlannedRun, run_dir: Path, ids: list[str], model: str) -> bool:
    """Whether ``run_dir`` holds an answer (not a failure) to every question of ``ids``, from
    this very run (method, model, settings, questions file)."""
    if not (run_dir / RUN_FILE).is_file():
        return False
    try:
        config, rows = read_run(run_dir)
    except RunDirError:  # damaged: run_eval says what is wrong with it
        return False
    same = (
        config.get("method") == run.method
        and config.get("model") == model
        and config.get("context") == json.loads(json.dumps(run.context))
        and config.get("dataset") == str(Path(run.questions).expanduser().resolve())
    )
    answered = {row["id"] for row in rows if not row.get("error")}
    return same and answered.issuperset(ids)


def execute(
    plan: Plan,
    *,
    model: Any = None,
    shard: str | None = None,
    workers: int | str | None = None,
    ray: str | None = None,
    concurrency: int | None = None,
    cache: str | os.PathLike[str] | None = None,
    settings: Any = None,
    retry_errors: bool = False,
    console: Any = None,
    progress: bool = True,
) -> list[Outcome]:
    """Run what the plan's runs still miss; one Outcome per run, in the plan's order. A fatal
    error (the endpoint gone, the key refused) stops here: what finished is kept. ``ray``: the
    runs' questions answered on a Ray cluster (``noterag.eval.cluster``), connected once for
    all of them (a local one started here ends with the last run)."""
    started = False
    if ray is not None and any(not run.missing for run in plan.runs):
        from noterag.eval.cluster import connect

        started = connect(ray)
    try:
        return _execute(plan, model, shard, workers, ray, concurrency, cache, settings,
                        retry_errors, console, progress)  # fmt: skip
    finally:
        if started:
            from noterag.eval.cluster import disconnect

            disconnect()


def _execute(
    plan: Plan,
    model: Any,
    shard: str | None,
    workers: int | str | None,
    ray: str | None,
    concurrency: int | None,
    cache: str | os.PathLike[str] | None,
    settings: Any,
    retry_errors: bool,
    console: Any,
    progress: bool,
) -> list[Outcome]:
    from noterag.eval.runner import run_eval

    outcomes = []
    for run in plan.runs:
        run_dir = run_dir_of(run, shard)
        if run.missing:
            outcomes.append(Outcome(run, run_dir, [], "blocked"))
            continue
        ids = question_ids(run, plan.limit, shard)
        if not retry_errors and is_finished(run, run_dir, ids, plan.model):
            outcomes.append(Outcome(run, run_dir, ids, "finished"))
            continue
        if run.index == sample_index_spec(plan.out):  # the smoke run's, or a closed-book run's
            from noterag.retrievers.sample import sample_index

            sample_index(plan.out)  # built once, beside the runs
        if console is not None:
            from rich.text import Text

            from noterag.base.terminal import printable

            console.print(Text(printable(f"run {run.name} → {run_dir}"), style="dim"))
        summary = run_eval(
            run.method,
            run.questions,
            run_dir,
            index=run.index,
            model=model,
            context=run.context,
            limit=plan.limit,
            concurrency=concurrency,
            progress=progress,
            console=console,
            settings=settings,
            workers=workers,
            ray=ray,
            shard=shard,
            cache=cache if cache is not None else plan.out / CACHE_FILE,
            retry_errors=retry_errors,
        )
        outcomes.append(Outcome(run, run_dir, ids, "ran", summary))
    return outcomes
