"""Run one method over a dataset, durably and concurrently, and summarise the run.

    from noterag.eval import run_eval
    summary = run_eval("deepnote", "questions.jsonl", "runs/deepnote", index="my-index",
                       model="openai:gpt-4o-mini", context={"max_steps": 3}, concurrency=8)

The run directory holds

* ``run.json``: the configuration (method, dataset, format, index, model label, context,
  fair-top-k source, limit), written when the run starts;
* ``results.jsonl``: one JSON line per finished question (see ``result_row`` for the fields),
  appended by a single writer, flushed and fsynced before the next;
* ``summary.json``: written at the end (``noterag.eval.report.summarize``).

Re-running the same configuration into the same directory resumes: the questions already in
``results.jsonl`` are skipped, a half-written last line (a crash mid-write) is cut away before
anything is appended, and a different configuration is refused with what differs (``limit``
may change: that is how a run grows). ``force=True`` starts the directory over.

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
measure the queue), 4 elsewhere. A run with more questions at once than its endpoint serves
says, in ``run.json`` and its summary, that its latencies include queueing. Every row counts the model requests that were sent again
(``retries``) and the replies a parser could not read (``fallbacks``, by kind); the summary
adds them up.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from langchain_core.retrievers import BaseRetriever

from noterag._fs import atomic_write_json, atomic_write_lines, fsync_dir
from noterag.errors import ConfigError, IndexNotFoundError, NoteragError
from noterag.eval.report import (
    RESULTS_FILE,
    RUN_FILE,
    SUMMARY_FILE,
    RunDirError,
    Summary,
    compute_summary,
    metric_label,
    metric_means,
    scan_results,
    summarize,
)
from noterag.methods import METHODS
from noterag.models.errors import fatal_error, one_line_error
from noterag.retrievers.indexdir import index_identity
from noterag.retrievers.spec import normalize_spec

# run.json fields that must match for a run to resume; the others (limit, questions, times)
# describe the current invocation.
COMPARED = (
    "method", "dataset", "format", "index", "model", "context", "fair_topk_from", "shard",
)  # fmt: skip
FAIR_TOPK_METHOD = "vanilla"
# Questions at once when the endpoint's capacity is unknown.
DEFAULT_CONCURRENCY = 4


class IndexChangedError(NoteragError):
    """The index a run is bound to was rebuilt or changed under the same path."""


def run_eval(
    method: str,
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
) -> Summary:
    """Run ``method`` on the questions of ``dataset`` into ``out_dir``; return the summary.

    index: an index directory, a retriever spec ("bm25:DIR") or a BaseRetriever; None as
    ``build_graph`` (NOTERAG_INDEX, else the bundled sample). model: a spec or a chat model
    (``model_label`` names an object in the results; a spec names itself). context: the
    method's settings. concurrency: questions at once (None: what the endpoint serves, see the
    module). fair_topk_from: a finished run directory whose mean distinct passages per question
    becomes ``top_k`` (vanilla only). rerun_changed: on resume, ask again the questions that
    changed in the dataset instead of refusing. settings: the ``ModelSettings`` (timeout,
    retries, ...) of a model built from a spec (default: ``ModelSettings.from_env()``).
    workers: processes answering the questions (``noterag.eval.workers``; "auto": the CPUs),
    each with ``concurrency`` questions at once. shard: "I/N", only the questions whose id
    hashes to shard I of N (``noterag.eval.merge``). cache: a SQLite file keeping every model
    reply (``noterag.eval.cache``). Blocks; call it outside an event loop.
    """
    from noterag.eval.merge import dataset_digest, in_shard, parse_shard
    from noterag.eval.workers import resolve_workers

    n_workers = resolve_workers(workers)
    shard_of = parse_shard(shard) if shard is not None else None
    if concurrency is not None and concurrency < 1:
        raise ConfigError(f"concurrency must be at least 1, not {concurrency}")
    if limit is not None and limit < 1:
        raise ConfigError(f"limit must be at least 1, not {limit}")
    import noterag
    from noterag import models
    from noterag.context import resolve_context
    from noterag.eval.datasets import load_dataset
    from noterag.methods import context_schema
    from noterag.spec import resolve_retriever

    context = dict(context or {})
    if fair_topk_from is not None:
        context["top_k"] = fair_top_k(method, fair_topk_from, context)
    resolve_context(context_schema(method), context)  # unknown method or bad setting: fail now
    examples = load_dataset(Path(dataset), format=format, limit=limit)
    # The whole question set the shards split: what `noterag merge` checks they share.
    digest, everything = dataset_digest(examples), len(examples)
    if shard_of is not None:
        examples = [ex for ex in examples if in_shard(ex.id, shard_of)]
    tasks = _check_tasks(method, context, examples, Path(dataset))
    index_spec = _index_spec(index)
    label = model_label or _model_label(model)
    slots = endpoint_slots(label)
    concurrency = concurrency or slots or DEFAULT_CONCURRENCY
    config = {
        "method": method,
        "dataset": str(Path(dataset).expanduser().resolve()),
        "format": format,
        "index": _index_label(index_spec),
        "model": label,
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
    # Opening a retriever reads nothing yet; its directories' identities bind the run.
    retriever = resolve_retriever(index_spec)
    index_build = index_identities(retriever)
    previous, rows = _check_run_dir(run_dir, config, index_build, force=force)
    changed = _changed_questions(rows, examples)
    if changed and not rerun_changed:
        raise RunDirError(_changed_message(run_dir, Path(dataset), changed))

    # Nothing is written until the index opens and the model answers, so that a typo in either
    # does not leave a run directory behind that the corrected command would refuse.
    chat_model = models.load_chat_model(model, settings)
    # Seconds, with the endpoint's URL, rather than every question failing after its retries.
    models.check_model_reachable(chat_model)
    llm_cache = None
    if cache is not None:
        from noterag.eval.cache import SQLiteLLMCache, with_cache

        llm_cache = SQLiteLLMCache(cache)
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
        return noterag.build_graph(method, model=own_model, retriever=own_retriever)

    queued = concurrency > slots if slots is not None else False
    invocation = {
        "tasks": dict(sorted(tasks.items())),
        "index_build": index_build,
        "concurrency": concurrency,
        "endpoint_slots": slots,
        # Once one invocation queued, some latencies of the run measure the queue.
        "latency_includes_queueing": queued
        or bool(previous and previous.get("latency_includes_queueing")),
        "questions": len(examples),
        "workers": n_workers,
        "dataset_digest": digest,
        "dataset_questions": everything,
        # The questions of this invocation: the summary covers them (a smaller --limit keeps
        # the other answers on disk without counting them).
        "ids": [ex.id for ex in examples],
    }
    done = _open_run_dir(
        run_dir,
        config | invocation,
        previous,
        drop={question for question, _ in changed},
        retry_errors=retry_errors,
    )
    todo = [ex for ex in examples if ex.id not in done]

    scope = {ex.id for ex in examples}
    meter = _Progress(
        console, progress, total=len(examples), done=[r for i, r in done.items() if i in scope]
    )
    if todo and n_workers > 1:
        _run_in_workers(build, todo, config, concurrency, n_workers, run_dir, meter, index_build)
    elif todo:
        watch = _IndexWatch(index_build)
        graph = build()

        async def main() -> None:
            # BM25 searches and sync-only models run on the loop's default executor, whose
            # default size (CPUs + 4) would cap the concurrency on a small machine.
            executor = ThreadPoolExecutor(
                max(32, concurrency * 2), thread_name_prefix="noterag-eval"
            )
            asyncio.get_running_loop().set_default_executor(executor)
            writer = _ResultsWriter(run_dir / RESULTS_FILE)
            try:
                await _run_all(graph, todo, config, concurrency, writer, meter, watch)
            finally:
                writer.close()
                executor.shutdown(wait=False)

        with meter:
            _event_loop().run(main())
    return summarize(run_dir)


def _run_in_workers(
    build: Any,
    todo: Sequence[Any],
    config: dict[str, Any],
    concurrency: int,
    n_workers: int,
    run_dir: Path,
    meter: _Progress,
    index_build: dict[str, str],
) -> None:
    """``todo`` over worker processes (``noterag.eval.workers``); this process keeps the one
    writer, the index check and the progress bar."""
    from noterag.eval.workers import WorkerSetup, run_workers

    watch = _IndexWatch(index_build)
    writer = _ResultsWriter(run_dir / RESULTS_FILE)

    def keep(row: dict[str, Any]) -> None:
        watch.check()  # an answer is kept only if the index it may have read is the run's
        try:
            writer.append(row)
        except OSError as exc:
            raise _Abort(
                RunDirError(
                    f"cannot write {writer.path}: {exc.strerror or exc}; the rows written "
                    "before are kept"
                )
            ) from None
        meter.advance(row)

    def stopped_after() -> str:
        return f"stopped after {meter.count} of {meter.total} questions"

    setup = WorkerSetup(build_graph=build, config=config, concurrency=concurrency)
    try:
        with meter:
            # fork copies only this thread: the workers have no bar (they never print).
            run_workers(setup, todo, n_workers, keep, stopped_after)
    except _Abort as abort:
        resume = "; run the same command again to resume" if abort.resumable else ""
        raise type(abort.error)(f"{abort.error} ({stopped_after()}{resume})") from None
    finally:
        writer.close()


def endpoint_slots(model_label: str) -> int | None:
    """How many requests the model's endpoint serves at once, where noterag knows: 1 for the
    local llama.cpp server (it answers one request at a time); None for other endpoints."""
    from noterag.models import LOCAL_MODEL_NAME

    return 1 if model_label in ("local", LOCAL_MODEL_NAME) else None


def _check_tasks(
    method: str, context: dict[str, Any], examples: Sequence[Any], dataset: Path
) -> Counter[str]:
    """The questions per task; refuse a ``task`` setting the dataset contradicts (each question
    is asked and scored with its own task) and a task the method cannot answer, before any
    model call."""
    from noterag.tasks import check_task

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
            check_task(method, task, context)
        except ConfigError as exc:
            raise ConfigError(
                f"{name} has {n} {task} question{'s' if n != 1 else ''}, but {exc}"
            ) from None
    return tasks


_RUNNER: asyncio.Runner | None = None


def _event_loop() -> asyncio.Runner:
    """One event loop for every run of the process: a model's async HTTP client keeps pooled
    connections bound to the loop that opened them, so a model object passed to a second
    ``run_eval`` would fail on a closed loop if each run had its own."""
    global _RUNNER
    if _RUNNER is None:
        _RUNNER = asyncio.Runner()
        atexit.register(_RUNNER.close)
    return _RUNNER


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
    if force:
        return None, []
    if config_path.is_file():
        previous = _read_config(config_path)
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
        rows = _repair_results(results_path) if previous is not None else []
        kept = [
            row for row in rows if row["id"] not in drop and not (retry_errors and row.get("error"))
        ]
        if len(kept) < len(rows):
            atomic_write_lines(results_path, (_encode(row) for row in kept))
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


def _read_config(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise RunDirError(f"{path} is not readable JSON: {exc}") from None
    if not isinstance(value, dict):
        raise RunDirError(f"{path} is not a run configuration")
    return value


def _show(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _repair_results(path: Path) -> list[dict[str, Any]]:
    """The finished rows; a half-written tail (crash mid-write) is truncated away so that the
    next row starts on a line of its own."""
    rows, valid_end = scan_results(path)
    if path.exists() and path.stat().st_size > valid_end:
        with open(path, "r+b") as f:
            f.truncate(valid_end)
            f.flush()
            os.fsync(f.fileno())
    return rows


def _encode(row: dict[str, Any]) -> bytes:
    # One line: json.dumps escapes newlines inside strings.
    return (json.dumps(row, ensure_ascii=False, default=str) + "\n").encode()


class _ResultsWriter:
    """The one writer of results.jsonl: each row goes out in a single write of its whole line,
    fsynced before the next, so a crash leaves at most one partial last line.

    It writes on the event loop's thread, not in a worker: the loop runs one coroutine at a
    time, so rows cannot interleave, and no write is left running in a thread when an aborted
    run cancels its questions and closes the file. An fsync costs milliseconds; a question
    costs seconds."""

    def __init__(self, path: Path) -> None:
        self.path = path
        existed = path.exists()
        with _writing(path):
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            if not existed:
                fsync_dir(path.parent)

    def append(self, row: dict[str, Any]) -> None:
        view = memoryview(_encode(row))
        while view:  # a regular file takes it in one go; the loop is for the rare short write
            view = view[os.write(self._fd, view) :]
        os.fsync(self._fd)

    def close(self) -> None:
        os.close(self._fd)


# --------------------------------------------------------------------------- running


class _Abort(Exception):
    """An error that would fail every question: stop the run. ``resumable``: the same command
    can go on once the cause is gone (an endpoint back up, disk space freed)."""

    def __init__(self, error: NoteragError, *, resumable: bool = True) -> None:
        super().__init__(str(error))
        self.error = error
        self.resumable = resumable


class _IndexWatch:
    """The index identities the run is bound to, checked again before each answer is kept."""

    def __init__(self, bound: dict[str, str]) -> None:
        self.bound = bound

    def check(self) -> None:
        for directory, build in self.bound.items():
            now = index_identity(directory)
            if now != build:
                raise _Abort(
                    IndexChangedError(
                        f"the index at {directory} was rebuilt or changed during the run (build "
                        f"{build} → {now or 'none'}), so the answers from then on could come "
                        "from either index; the answers before it are kept, but the run cannot "
                        "go on with another index: pass --force to start it over, or choose a "
                        "new --out"
                    ),
                    resumable=False,
                )


async def _run_all(
    graph: Any,
    todo: Sequence[Any],
    config: dict[str, Any],
    concurrency: int,
    writer: _ResultsWriter,
    meter: _Progress,
    watch: _IndexWatch,
) -> None:
    semaphore = asyncio.Semaphore(concurrency)

    async def one(example: Any) -> None:
        async with semaphore:
            row = await answer_one(graph, example, config)
            # An answer is kept only if the index it may have read is still the run's.
            watch.check()
            try:
                writer.append(row)
            except OSError as exc:
                raise _Abort(
                    RunDirError(
                        f"cannot write {writer.path}: {exc.strerror or exc}; the rows written "
                        "before are kept"
                    )
                ) from None
        meter.advance(row)

    try:
        async with asyncio.TaskGroup() as group:
            for example in todo:
                group.create_task(one(example))
    except BaseExceptionGroup as failed:
        # The group cancelled the other questions; report the cause, not the group.
        aborts = [e for e in failed.exceptions if isinstance(e, _Abort)]
        if not aborts:
            raise failed.exceptions[0] from None
        resume = "; run the same command again to resume" if aborts[0].resumable else ""
        raise type(aborts[0].error)(
            f"{aborts[0].error} (stopped after {meter.count} of {meter.total} questions{resume})"
        ) from None


async def answer_one(graph: Any, example: Any, config: dict[str, Any]) -> dict[str, Any]:
    """Run one question; its result row (with ``error`` set if it failed)."""
    from noterag.eval.cache import count_cache
    from noterag.eval.metrics import score
    from noterag.models import count_retries

    started_at, clock = time.time(), time.perf_counter()
    # this task's requests only: the questions run as tasks
    with count_retries() as retries, count_cache() as cached:
        try:
            state = await graph.ainvoke(
                {"question": example.question, "task": example.task}, context=config["context"]
            )
            error = None
        except Exception as exc:  # recorded in the row, unless fatal for all
            fatal = fatal_error(exc)
            if fatal is not None:
                raise _Abort(fatal) from exc
            if isinstance(exc, IndexNotFoundError):  # gone or damaged: every question would fail
                raise _Abort(exc, resumable=False) from exc
            state, error = {}, one_line_error(exc)
    latency = time.perf_counter() - clock
    state = state | {"retries": retries.value}
    if config.get("cache"):
        state = state | {"cache_calls": cached.calls, "cache_tokens": cached.tokens}
    answer = state.get("answer")
    if error is None:
        metrics = score(answer or "", list(example.golds), example.task)
    else:  # the metric names of the task, all 0: a failure counts as a wrong answer
        metrics = dict.fromkeys(score("", list(example.golds), example.task), 0.0)
    return result_row(example, state, config, metrics, error, latency, started_at)


def result_row(
    example: Any,
    state: dict[str, Any],
    config: dict[str, Any],
    metrics: dict[str, float],
    error: str | None,
    latency: float,
    started_at: float,
) -> dict[str, Any]:
    """One line of results.jsonl: the fields every method has, and the output fields the
    method's declaration keeps (``MethodSpec.result_fields``). A failed question's state is
    lost: its answer, note, trace, costs and fallbacks are null; its retries are known
    (``state["retries"]``)."""
    failed = error is not None
    passage_ids = list(state.get("passage_ids") or [])
    return {
        "id": example.id,
        "question": example.question,
        "golds": list(example.golds),
        "task": example.task,
        "dataset": example.dataset,
        "answer": state.get("answer"),
        "metrics": metrics,
        # what the method declares worth keeping: the best note (note methods, Amber's best
        # memory), ReSP's memory (what its generator read), ...
        **{key: state.get(key) for key in METHODS[config["method"]].result_fields},
        "stop_reason": state.get("stop_reason"),
        "steps": state.get("steps"),
        "queries": state.get("query_log"),
        "trace": state.get("trace", []) if not failed else None,
        "llm_calls": None if failed else state.get("llm_calls", 0),
        "prompt_tokens": None if failed else state.get("prompt_tokens", 0),
        "completion_tokens": None if failed else state.get("completion_tokens", 0),
        "passages": None if failed else len(passage_ids),
        "passage_ids": None if failed else passage_ids,
        "retries": state.get("retries", 0),
        # with --cache: the calls (and their tokens) answered from it, not the endpoint
        **(
            {
                "cache_calls": state.get("cache_calls", 0),
                "cache_tokens": state.get("cache_tokens", 0),
            }
            if config.get("cache")
            else {}
        ),
        "fallbacks": None if failed else dict(state.get("fallbacks") or {}),
        "latency_s": round(latency, 3),
        "started_at": started_at,
        "finished_at": started_at + latency,
        "error": error,
        "method": config["method"],
        "context": config["context"],
        "model": config["model"],
    }


# --------------------------------------------------------------------------- configuration


def _index_spec(index: Any) -> Any:
    """The canonical retriever spec for ``index`` (``noterag.retrievers.spec``: a bare directory
    becomes "bm25:/abs/DIR" or "dense:/abs/DIR" by its manifest), the object itself, or None
    (NOTERAG_INDEX, else the sample corpus, as ``build_graph``)."""
    if index is None:
        env = os.environ.get("NOTERAG_INDEX")
        index = env or None
    if index is None or isinstance(index, BaseRetriever):
        return index
    return normalize_spec(index)


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


def _index_label(spec: Any) -> str:
    if spec is None:
        return "sample"
    if isinstance(spec, BaseRetriever):
        return type(spec).__name__
    return str(spec)


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
    """Done / total, the running metrics and costs per question, ETA: a rich bar on a terminal,
    a line every tenth of the run elsewhere (logs)."""

    console: Any
    enabled: bool
    total: int
    done: list[dict[str, Any]] = field(default_factory=list)
    _bar: Any = None
    _task: Any = None
    _every: int = 1

    def __post_init__(self) -> None:
        if self.console is None:
            from rich.console import Console

            self.console = Console(stderr=True, highlight=False, soft_wrap=True)
        self._every = max(1, self.total // 10)

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
                "eval", total=self.total, completed=self.count, stats=self.stats()
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
        elif self.enabled and (self.count % self._every == 0 or self.count == self.total):
            self.console.print(f"{self.count}/{self.total} · {self.stats()}")

    def stats(self) -> str:
        if not self.done:
            return ""
        parts = [f"{metric_label(k)} {v:.1f}" for k, v in metric_means(self.done).items()]
        answered = [row for row in self.done if not row.get("error")]
        if answered:
            calls = sum(row["llm_calls"] for row in answered) / len(answered)
            tokens = sum(row["prompt_tokens"] + row["completion_tokens"] for row in answered)
            parts.append(f"{calls:.1f} calls/q · {tokens / len(answered):,.0f} tok/q")
        failed = self.count - len(answered)
        if failed:
            parts.append(f"[red]{failed} failed[/]")
        return " · ".join(parts)
