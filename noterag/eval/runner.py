"""Run one method over a dataset, durably and concurrently, and summarise the run.

    from noterag.eval import run_eval
    summary = run_eval("deepnote", "questions.jsonl", "runs/deepnote", index="my-index",
                       model="openai:gpt-4o-mini", context={"max_steps": 3}, concurrency=8)

The run directory holds

* ``run.json``: the configuration (method, dataset, format, index, model label, context,
  fair-top-k source, limit), written when the run starts;
* ``results.jsonl``: one JSON line per finished question (see ``rows.result_row`` for the fields),
  appended by a single writer in whole lines, each fsynced before its question counts as done
  (the rows finished while a write is under way share the next write and fsync:
  ``loop.LineWriter.append_async``);
* ``summary.json``: written at the end (``noterag.eval.report.summarize``).

Re-running the same configuration into the same directory resumes: the questions already in
``results.jsonl`` are skipped, a half-written last line (a crash mid-write) is cut away before
anything is appended, and a different configuration is refused with what differs (``limit``
may change: that is how a run grows). ``force=True`` starts the directory over. One process
writes a run directory at a time (``noterag.eval.lock``): a second is refused at once, forced
or not.

A run is bound to what it ran on. An answer is reused only for the very question it answered:
same id, question, golds and task (a question edited in the dataset is refused, naming it, or,
with ``rerun_changed=True``, asked again while the other answers are kept). The index's
identity (its manifest's ``build_id``, ``noterag.retrievers.indexdir.index_identity``) is
recorded in ``run.json``: a resume over a rebuilt or changed index is refused, and a rebuild
*during* the run stops it before the next answer is written. The summary covers the questions
of this invocation (the dataset cut to ``limit``): the answers of a larger earlier ``limit``
stay in ``results.jsonl`` for when it grows again, without counting now.

A question whose model calls keep failing (after the client's own retries: ``settings`` sets
the per-attempt timeout and the number of retries, see ``noterag.models``) is recorded with
its ``error`` and the run goes on; such questions count 0 in the metrics and
``retry_errors=True`` runs them again (``noterag.eval.report.error_budget`` says when too many
failed). An error that would fail every question (endpoint unreachable, key rejected, unknown
model, an index gone or damaged, a results file that cannot be written) aborts the run at once
instead. Settings, and every task of the dataset, are checked against the method before the
first question.

``concurrency`` defaults to what the endpoint serves at once: 1 for the local llama.cpp server
(which answers one request at a time, so more would only queue and the latencies would
measure the queue), 4 elsewhere. It is the number of questions waiting on the model at once
(each with its turn, ``noterag.models.turns``); with a model whose requests take turns (one
from an ``openai:`` spec), as many questions again are in progress (``spare``), ready with their
next request when a turn frees, so that the endpoint's slots stay busy while the client works
between calls. A row's ``waited_s`` is its wait for turns, left out of its ``latency_s``. A run
with more questions at once than its endpoint serves says, in ``run.json`` and its summary,
that its latencies include queueing. Every row counts the model requests that were sent again
(``retries``) and the replies a parser could not read (``fallbacks``, by kind); the summary
adds them up.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self

from langchain_core.retrievers import BaseRetriever

from noterag.base.errors import ConfigError, NoteragError
from noterag.base.files import atomic_write_json, atomic_write_lines, refuse_link
from noterag.core.context import RunContext
from noterag.core.spec import MethodSpec
from noterag.eval import loop
from noterag.eval.lock import run_lock
from noterag.eval.report import Summary, compute_summary, metric_means, summarize
from noterag.eval.rows import answer_one
from noterag.eval.runs import (
    RESULTS_FILE,
    RUN_FILE,
    SUMMARY_FILE,
    RunDirError,
    metric_label,
    read_json_file,
    scan_results,
)
from noterag.eval.workers import WorkerSetup
from noterag.models.turns import ModelTurns, spare_questions, takes_turns
from noterag.registry.methods import METHODS
from noterag.retrievers.indexdir import index_identity

# run.json fields that must match for a run to resume; the others (limit, questions, times)
# describe the current invocation.
COMPARED = (
    "method", "dataset", "format", "index", "model", "endpoint", "context", "fair_topk_from",
    "shard",
)  # fmt: skip
FAIR_TOPK_METHOD = "vanilla"
# Questions at once when the endpoint's capacity is unknown.
DEFAULT_CONCURRENCY = 4


class IndexChangedError(NoteragError):
    """The index a run is bound to was rebuilt or changed under the same path."""


def run_eval(
    method: str | MethodSpec,
    dataset: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    index: Any = None,
    model: Any = None,
    context: dict[str, Any] | None = None,
    limit: int | None = None,
    concurrency: int | None = None,
    fair_topk_from: str | os.PathLike[str] | None = None,
    progress: bool = True,
    format: str | None = None,
    model_label: str | None = None,
    force: bool = False,
    retry_errors: bool = False,
    rerun_changed: bool = False,
    console: Any = None,
    settings: Any = None,
    workers: int | str | None = None,
    shard: str | tuple[int, int] | None = None,
    cache: str | os.PathLike[str] | None = None,
    spare: int | None = None,
    ray: str | None = None,
) -> Summary:
    """Run ``method`` (its name or its ``MethodSpec``) on the questions of ``dataset`` into
    ``out_dir``; return the summary.

    index: an index directory, a retriever spec ("bm25:DIR") or a BaseRetriever; None as
    ``build_graph`` (NOTERAG_INDEX, else the bundled sample). model: a spec or a chat model
    (``model_label`` names an object in the results; a spec names itself). context: the
    method's settings. concurrency: questions waiting on the model at once (None: what the
    endpoint serves, see the module); ``spare`` more questions are in progress (None: as
    many again, ``noterag.models.turns``), so that the endpoint's slots stay busy while the
    client works between calls. fair_topk_from: a finished run directory whose mean distinct
    passages per question becomes ``top_k`` (vanilla only). rerun_changed: on resume, ask
    again the questions that changed in the dataset instead of refusing. settings: the
    ``ModelSettings`` (timeout, retries, ...) of a model built from a spec (default:
    ``ModelSettings.from_env()``).
    workers: processes answering the questions (``noterag.eval.workers``; "auto": the CPUs),
    each with ``concurrency`` turns at the model. shard: "I/N", only the questions whose id
    hashes to shard I of N (``noterag.eval.merge``). cache: a SQLite file keeping every model
    reply (``noterag.eval.cache``). Blocks; call it outside an event loop.
    """
    from noterag.eval.merge import dataset_digest, in_shard, parse_shard
    from noterag.eval.workers import resolve_workers

    n_workers = resolve_workers(workers) if ray is None or workers is not None else 0
    shard_of = parse_shard(shard) if shard is not None else None
    if concurrency is not None and concurrency < 1:
        raise ConfigError(f"concurrency must be at least 1, not {concurrency}")
    if spare is not None and spare < 0:
        raise ConfigError(f"spare questions cannot be negative, not {spare}")
    if limit is not None and limit < 1:
        raise ConfigError(f"limit must be at least 1, not {limit}")
    import noterag
    from noterag import models
    from noterag.core.context import refuse_human_review, resolve_context
    from noterag.core.spec import resolve_retriever
    from noterag.datasets import load_dataset
    from noterag.models.spec import model_endpoint

    spec = method if isinstance(method, MethodSpec) else METHODS[method]  # the one lookup
    context = dict(context or {})
    if fair_topk_from is not None:
        context["top_k"] = fair_top_k(spec.name, fair_topk_from, context)
    run_settings = resolve_context(spec.context, context)  # a bad setting fails now, once
    refuse_human_review(run_settings, "run_eval")
    examples = load_dataset(Path(dataset), format=format, limit=limit)
    # The whole question set the shards split: what `noterag merge` checks they share.
    digest, everything = dataset_digest(examples), len(examples)
    if shard_of is not None:
        if shard_of[1] > everything:
            raise ConfigError(
                f"--shard {shard_of[0]}/{shard_of[1]}: {shard_of[1]} shards of "
                f"{everything} question{'s' if everything != 1 else ''}; use at most one shard "
                "per question"
            )
        examples = [ex for ex in examples if in_shard(ex.id, shard_of)]
    tasks = _check_tasks(spec, run_settings, context, examples, Path(dataset))
    index_spec = loop.index_spec(index)
    label = model_label or loop.model_label(model)
    slots = endpoint_slots(label)
    concurrency = concurrency or slots or DEFAULT_CONCURRENCY
    config = {
        "method": spec.name,
        "dataset": str(Path(dataset).expanduser().resolve()),
        "format": format,
        "index": loop.index_label(index_spec),
        "model": label,
        # where the model's requests go (credentials removed): the same name on another
        # endpoint is another model, so a resume or merge across endpoints is refused
        "endpoint": model_endpoint(model),
        "context": context,
        "fair_topk_from": (
            str(Path(fair_topk_from).expanduser().resolve()) if fair_topk_from else None
        ),
        "limit": limit,
        "shard": f"{shard_of[0]}/{shard_of[1]}" if shard_of else None,
        # Not compared: a resume may add or drop the cache (the answers are the same).
        "cache": str(Path(cache).expanduser().resolve()) if cache is not None else None,
    }
    run_dir = Path(out_dir)
    _check_writable(run_dir)
    # One writer at a time (noterag.eval.lock): taken before anything is read or removed, so
    # that neither a twin command nor a --force races a live run.
    with run_lock(run_dir, "eval"):
        # Opening a retriever reads nothing yet; its directories' identities bind the run.
        retriever = resolve_retriever(index_spec)
        index_build = index_identities(retriever)
        previous, rows = _check_run_dir(run_dir, config, index_build, force=force)
        changed = _changed_questions(rows, examples)
        if changed and not rerun_changed:
            raise RunDirError(_changed_message(run_dir, Path(dataset), changed))

        # Nothing is written until the index opens and the model answers, so that a typo in either
        # does not leave a run directory behind that the corrected command would refuse.
        llm_cache = None
        if cache is not None:  # checked first: a fault in it fails every question (its calls paid)
            from noterag.eval.cache import SQLiteLLMCache, with_cache

            llm_cache = SQLiteLLMCache(cache)
        chat_model = models.load_chat_model(model, settings)
        spare = _spare(spare, concurrency, chat_model)
        # Seconds, with the endpoint's URL, rather than every question failing after its retries.
        models.check_model_reachable(chat_model)
        if llm_cache is not None:
            chat_model = with_cache(chat_model, llm_cache)

        def build() -> Any:
            """The graph; in a worker process, over a model and an index opened there when they
            were given as specs (no connection or index handle shared across processes)."""
            own_model, own_retriever = chat_model, retriever
            if n_workers > 1 and (model is None or isinstance(model, str)):
                own_model = models.load_chat_model(model, settings)
                if llm_cache is not None:
                    own_model = with_cache(own_model, llm_cache)
            if n_workers > 1 and not isinstance(index_spec, BaseRetriever):
                own_retriever = resolve_retriever(index_spec)
            return noterag.build_graph(spec, model=own_model, retriever=own_retriever)

        queued = concurrency > slots if slots is not None else False
        invocation = {
            "tasks": dict(sorted(tasks.items())),
            "index_build": index_build,
            "concurrency": concurrency,
            "spare_questions": spare,
            "endpoint_slots": slots,
            # Once one invocation queued, some latencies of the run measure the queue.
            "latency_includes_queueing": queued
            or bool(previous and previous.get("latency_includes_queueing")),
            "questions": len(examples),
            "workers": n_workers,
            "ray": ray,
            "dataset_digest": digest,
            "dataset_questions": everything,
            # The questions of this invocation: the summary covers them (a smaller --limit keeps
            # the other answers on disk without counting them).
            "ids": [ex.id for ex in examples],
        }
        # A cluster that cannot be reached is one line before the run directory is written; one
        # started here ends with the run (``_run_on_ray``; Ray's own exit hook on an error before).
        ray_started = False
        if ray is not None:
            from noterag.eval.cluster import connect

            ray_started = connect(ray)
        done = _open_run_dir(
            run_dir,
            config | invocation,
            previous,
            drop={question for question, _ in changed},
            retry_errors=retry_errors,
        )
        todo = [ex for ex in examples if ex.id not in done]
        n_workers = min(n_workers, max(1, len(todo)))  # a worker without a question is waste

        scope = {ex.id for ex in examples}
        meter = loop.Progress(
            console,
            progress,
            total=len(examples),
            label="eval",
            stats_of=_stats,
            done=[r for i, r in done.items() if i in scope],
        )
        if todo and ray is not None:
            from noterag.eval.cluster import ClusterSetup

            recipe = ClusterSetup(
                method=spec.name,
                model=model,
                settings=settings,
                index=index_spec,
                cache=str(config["cache"]) if config["cache"] is not None else None,
                config=config,
                concurrency=concurrency,
                spare=spare,
            )
            _run_on_ray(recipe, todo, n_workers, ray_started, run_dir, meter, index_build)
        elif todo and n_workers > 1:
            setup = WorkerSetup(
                build_graph=build, config=config, concurrency=concurrency, spare=spare
            )
            _run_in_workers(setup, todo, n_workers, run_dir, meter, index_build)
        elif todo:
            graph = build()

            async def main() -> None:
                turns = ModelTurns(concurrency)
                with _Keeper(run_dir, index_build) as keep:
                    await loop.run_questions(
                        todo,
                        concurrency + spare,
                        lambda ex: answer_one(graph, spec, ex, config, turns),
                        keep.keep_async,
                        meter,
                    )

            with meter:
                loop.run_on_loop(main, max(32, (concurrency + spare) * 2), "noterag-eval")
        elif ray_started:
            from noterag.eval.cluster import disconnect

            disconnect()
        return summarize(run_dir)


def _run_in_workers(
    setup: WorkerSetup,
    todo: Sequence[Any],
    n_workers: int,
    run_dir: Path,
    meter: loop.Progress,
    index_build: dict[str, str],
) -> None:
    """``todo`` over worker processes (``noterag.eval.workers``); this process keeps the one
    writer, the index check and the progress bar."""
    from noterag.eval.workers import run_workers

    def stopped_after() -> str:
        return f"stopped after {meter.count} of {meter.total} questions"

    with _Keeper(run_dir, index_build) as write:

        def keep(rows: list[dict[str, Any]]) -> None:
            write.extend(rows)
            for row in rows:
                meter.advance(row)

        try:
            with meter:
                # fork copies only this thread: the workers have no bar (they never print).
                run_workers(setup, todo, n_workers, keep, stopped_after)
        except loop.Abort as abort:
            raise abort.stopped(meter) from None


def _run_on_ray(
    recipe: Any,
    todo: Sequence[Any],
    n_workers: int,
    started: bool,
    run_dir: Path,
    meter: loop.Progress,
    index_build: dict[str, str],
) -> None:
    """``todo`` on a Ray cluster (``noterag.eval.cluster``); this process keeps the one writer,
    the index check and the progress bar, as with worker processes."""
    from noterag.eval.cluster import default_workers, run_on_ray

    try:
        actors = min(n_workers or default_workers(), len(todo))

        def stopped_after() -> str:
            return f"stopped after {meter.count} of {meter.total} questions"

        with _Keeper(run_dir, index_build) as write:

            def keep(row: dict[str, Any]) -> None:
                write(row)
                meter.advance(row)

            try:
                with meter:
                    run_on_ray(recipe, todo, actors, keep, stopped_after)
            except loop.Abort as abort:
                raise abort.stopped(meter) from None
    finally:
        if started:
            from noterag.eval.cluster import disconnect

            disconnect()


def _spare(spare: int | None, concurrency: int, chat_model: Any) -> int:
    """The questions in progress beyond ``concurrency``: only for a model whose requests take
    turns (``noterag.models.turns``); any other would send them all to the endpoint at once."""
    if not takes_turns(chat_model):
        if spare:
            raise ConfigError(
                f"{spare} spare question(s) need a model whose requests wait for their turn: one "
                "built from an openai: spec (with this model, the endpoint would serve "
                f"{concurrency + spare} questions at once, not {concurrency})"
            )
        return 0
    return spare_questions(concurrency) if spare is None else spare


def endpoint_slots(model_label: str) -> int | None:
    """How many requests the model's endpoint serves at once, where noterag knows: 1 for the
    local llama.cpp server (it answers one request at a time); None for other endpoints."""
    from noterag.models import LOCAL_MODEL_NAME

    return 1 if model_label in ("local", LOCAL_MODEL_NAME) else None


def _check_tasks(
    spec: MethodSpec,
    settings: RunContext,
    context: dict[str, Any],
    examples: Sequence[Any],
    dataset: Path,
) -> Counter[str]:
    """The questions per task; refuse a ``task`` setting the dataset contradicts (each question
    is asked and scored with its own task) and a task the method cannot answer, before any
    model call."""
    from noterag.core.tasks import check_task

    tasks = Counter(ex.task for ex in examples)
    name = dataset.name
    wanted = context.get("task")
    if wanted is not None and set(tasks) != {wanted}:
        counts = ", ".join(f"{n} {task}" for task, n in sorted(tasks.items()))
        raise ConfigError(
            f"-c task={wanted} contradicts the dataset: eval asks and scores each question with "
            f'its own task ({name} has {counts}); drop the task setting (a record\'s "task" '
            "field sets it)"
        )
    for task, n in sorted(tasks.items()):
        try:
            check_task(spec, task, settings)
        except ConfigError as exc:
            raise ConfigError(
                f"{name} has {n} {task} question{'s' if n != 1 else ''}, but {exc}"
            ) from None
    return tasks


def fair_top_k(method: str, run_dir: str | os.PathLike[str], context: dict[str, Any]) -> int:
    """The papers' fair top-k: the mean number of distinct passages per question that the run in
    ``run_dir`` read, rounded to the nearest integer, at least 1."""
    if method != FAIR_TOPK_METHOD:
        raise ConfigError(
            f"--fair-topk-from sets the top_k of the {FAIR_TOPK_METHOD} baseline; {method} "
            "reads passages its own way"
        )
    if "top_k" in context:
        raise ConfigError("--fair-topk-from sets top_k itself: do not also set top_k")
    summary = compute_summary(run_dir)
    passages = summary["cost"]["passages"]
    if passages is None:
        raise ConfigError(f"{run_dir} has no answered question to take the fair top-k from")
    # round() rounds halves to even; the papers' "rounded" means halves up.
    return max(1, int(passages + 0.5))


# --------------------------------------------------------------------------- run directory


def _check_writable(run_dir: Path) -> None:
    """Refuse an ``--out`` that cannot be written, before anything is loaded: a file, a path
    through a file, a directory without write permission or on a read-only file system."""
    if run_dir.exists():
        if not run_dir.is_dir():
            raise RunDirError(f"--out {run_dir} is a file, not a directory")
        target = run_dir
    else:
        target = run_dir.parent
        while not target.exists() and target != target.parent:
            target = target.parent
        if not target.is_dir():
            raise RunDirError(f"cannot write {run_dir}: {target} is not a directory")
    if not os.access(target, os.W_OK | os.X_OK):
        raise RunDirError(
            f"cannot write {run_dir}: {target} is not writable (no permission, or a read-only "
            "file system)"
        )


@contextmanager
def _writing(path: Path) -> Iterator[None]:
    """An OSError while writing ``path`` (disk full, read-only, no permission) as one line
    naming the file."""
    try:
        yield
    except OSError as exc:
        raise RunDirError(f"cannot write {path}: {exc.strerror or exc}") from None


def _check_run_dir(
    run_dir: Path, config: dict[str, Any], index_build: dict[str, str], *, force: bool
) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """Refuse a run directory this run cannot resume, before anything is loaded or written;
    return the configuration it holds and its finished rows (None and [] for a new run or
    ``force``)."""
    config_path, results_path = run_dir / RUN_FILE, run_dir / RESULTS_FILE
    if run_dir.exists() and not run_dir.is_dir():
        raise RunDirError(f"--out {run_dir} is a file, not a directory")
    refuse_link(results_path)  # written in place: never through a link (noterag.base.files)
    if force:
        return None, []
    if config_path.is_file():
        previous = read_json_file(config_path)
        loop.check_same_config(run_dir, previous, config, COMPARED)
        bound = previous.get("index_build")
        if isinstance(bound, dict):
            for directory, build in bound.items():
                now = index_build.get(directory)
                if now != build:
                    raise RunDirError(
                        f"the index at {directory} was rebuilt or changed since {run_dir} "
                        f"answered on it (build {build} → {now or 'none'}): its answers come "
                        "from another index; pass --force to start the run over on this one, or "
                        "choose a new --out"
                    )
        # a damaged file is refused now, not after the model starts
        rows, _ = scan_results(results_path)
        return previous, rows
    if results_path.exists():
        raise RunDirError(
            f"{run_dir} has a {RESULTS_FILE} but no {RUN_FILE}: not a run this version wrote; "
            "choose a new --out or pass --force to start over"
        )
    return None, []


def _changed_questions(
    rows: Sequence[dict[str, Any]], examples: Sequence[Any]
) -> list[tuple[str, str]]:
    """(id, what changed) of each answered question whose question, golds or task differ from
    the dataset's now: its answer, and its score, belong to another question."""
    by_id = {ex.id: ex for ex in examples}
    changed = []
    for row in rows:
        example = by_id.get(row["id"])
        if example is None:  # not a question of this invocation (a larger --limit's)
            continue
        what = [
            name
            for name, then, now in (
                ("question", row.get("question"), example.question),
                ("gold", row.get("golds"), list(example.golds)),
                ("task", row.get("task"), example.task),
            )
            if then != now
        ]
        if what:
            changed.append((row["id"], " and ".join(what) + " changed"))
    return changed


def _changed_message(run_dir: Path, dataset: Path, changed: Sequence[tuple[str, str]]) -> str:
    shown = ", ".join(f"{question} ({what})" for question, what in changed[:3])
    more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
    return (
        f"{run_dir} holds answers to questions that changed in {dataset.name} since: "
        f"{shown}{more}; pass --rerun-changed to ask those again and keep the other answers, "
        "--force to start the run over, or choose a new --out"
    )


def _open_run_dir(
    run_dir: Path,
    config: dict[str, Any],
    previous: dict[str, Any] | None,
    *,
    drop: set[str],
    retry_errors: bool,
) -> dict[str, dict[str, Any]]:
    """Create or resume the run directory (``previous`` None: start it over); return the
    finished rows to skip, by id. Rows whose id is in ``drop`` (changed questions) and, with
    ``retry_errors``, failed rows are removed to be asked again."""
    results_path = run_dir / RESULTS_FILE
    if previous is None:
        for name in (RUN_FILE, RESULTS_FILE, SUMMARY_FILE):
            with _writing(run_dir / name):
                (run_dir / name).unlink(missing_ok=True)
    with _writing(run_dir):
        run_dir.mkdir(parents=True, exist_ok=True)
    with _writing(results_path):
        rows = loop.repair_lines(results_path) if previous is not None else []
        kept = [
            row for row in rows if row["id"] not in drop and not (retry_errors and row.get("error"))
        ]
        if len(kept) < len(rows):
            atomic_write_lines(results_path, (loop.encode_row(row) for row in kept))
    from noterag import __version__

    with _writing(run_dir / RUN_FILE):
        atomic_write_json(
            run_dir / RUN_FILE,
            config
            | {
                "created": previous.get("created") if previous else time.time(),
                "updated": time.time(),
                "noterag": __version__,
            },
        )
    return {row["id"]: row for row in kept}


class _ResultsWriter(loop.LineWriter):
    """The one writer of results.jsonl (``loop.LineWriter``); a file it cannot open is one line
    naming it."""

    def __init__(self, path: Path) -> None:
        with _writing(path):
            super().__init__(path)


class _Keeper:
    """Keeps an answer (``keep(row)``): only if the index it may have read is still the run's
    (``index_identity``: a rebuild during the run stops it before the next answer is written),
    appended to results.jsonl, a write that fails stopping the run."""

    def __init__(self, run_dir: Path, bound: dict[str, str]) -> None:
        self.bound = bound
        self.writer = _ResultsWriter(run_dir / RESULTS_FILE)

    def __call__(self, row: dict[str, Any]) -> None:
        self.extend([row])

    def extend(self, rows: list[dict[str, Any]]) -> None:
        """Keep ``rows`` in one write (worker processes' rows that came in together)."""
        self._check_index()
        try:
            self.writer.extend(rows)
        except OSError as exc:
            raise self._unwritable(exc) from None

    async def keep_async(self, row: dict[str, Any]) -> None:
        """``keep(row)`` on the run's event loop: the write and its fsync in a worker thread,
        with the rows kept meanwhile (``loop.LineWriter.append_async``)."""
        self._check_index()
        try:
            await self.writer.append_async(row)
        except OSError as exc:
            raise self._unwritable(exc) from None

    def _unwritable(self, exc: OSError) -> loop.Abort:
        return loop.Abort(
            RunDirError(
                f"cannot write {self.writer.path}: {exc.strerror or exc}; the rows written "
                "before are kept"
            )
        )

    def _check_index(self) -> None:
        for directory, build in self.bound.items():
            now = index_identity(directory)
            if now != build:
                raise loop.Abort(
                    IndexChangedError(
                        f"the index at {directory} was rebuilt or changed during the run (build "
                        f"{build} → {now or 'none'}), so the answers from then on could come "
                        "from either index; the answers before it are kept, but the run cannot "
                        "go on with another index: pass --force to start it over, or choose a "
                        "new --out"
                    ),
                    resumable=False,
                )

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.writer.close()


# --------------------------------------------------------------------------- configuration


def index_identities(retriever: Any) -> dict[str, str]:
    """The identity of every index directory behind ``retriever`` (a hybrid's parts too), by
    absolute path: what a run is bound to (``index_identity``). Retrievers without a directory
    (Elasticsearch, a test's own) bind nothing."""
    found: dict[str, str] = {}

    def walk(part: Any) -> None:
        index_dir = getattr(part, "index_dir", None)
        if isinstance(index_dir, str | os.PathLike):
            directory = str(Path(index_dir).expanduser().resolve())
            identity = index_identity(directory)
            if identity is not None:
                found[directory] = identity
        for child in getattr(part, "retrievers", None) or ():
            walk(child)

    walk(retriever)
    return found


# --------------------------------------------------------------------------- progress


def _stats(done: list[dict[str, Any]]) -> str:
    """The progress line's figures: the running metrics, calls and tokens per question."""
    from noterag.base.terminal import safe

    # a row's metric names are read back from results.jsonl: text, not markup
    parts = [f"{safe(metric_label(k))} {v:.1f}" for k, v in metric_means(done).items()]
    answered = [row for row in done if not row.get("error")]
    if answered:
        calls = sum(row["llm_calls"] for row in answered) / len(answered)
        tokens = sum(row["prompt_tokens"] + row["completion_tokens"] for row in answered)
        parts.append(f"{calls:.1f} calls/q · {tokens / len(answered):,.0f} tok/q")
    failed = len(done) - len(answered)
    if failed:
        parts.append(f"[red]{failed} failed[/]")
    return " · ".join(parts)
