"""A run over questions, durably and concurrently: what ``noterag eval`` (``noterag.eval.runner``)
and ``noterag align data`` (``noterag.align.data``) share.

* ``run_questions``: ``concurrency`` questions at once on one event loop; each answer is
  kept (written) as it comes, then the progress advances; an ``Abort`` (an error that would
  fail every question) stops the run, saying how far it got.
* ``LineWriter``: the one writer of a JSON-lines file: each row (or batch) in a single write of
  whole lines, fsynced before the next, so a crash leaves at most one partial last line, which
  ``repair_lines`` cuts away on resume.
* ``Progress``: done / total and the run's running figures, a rich bar on a terminal, a line
  every tenth of the run elsewhere (logs).
* ``run_on_loop``: one event loop for every run of the process, with a default executor large
  enough for the concurrency; ``frozen_heap``: the objects alive when a run starts kept out of
  the garbage collector's full collections while it runs.
* ``index_spec``, ``index_label``, ``model_label``: how a run names its index and its model in
  its ``run.json``; ``check_same_config``: a resume refused when they (or the settings) differ.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import errno
import gc
import json
import os
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from noterag.base.errors import NoteragError
from noterag.base.files import fsync_dir, open_no_follow, refuse_link
from noterag.base.redact import redact
from noterag.eval.runs import MAX_ROW_BYTES, RunDirError, scan_results

# --------------------------------------------------------------------------- files


def encode_row(row: dict[str, Any], limit: int = MAX_ROW_BYTES) -> bytes:
    """``row`` as one line (json.dumps escapes newlines inside strings), within ``limit``
    bytes, the most the reader (``noterag.eval.runs.scan_results``) takes: a row over it would
    make its own run directory unreadable (resume, compare, the summary). A row over it keeps
    its fields but the largest ones (the trace, a method's kept output, a long answer), each
    cut or emptied until it fits, and names them in ``trimmed``."""
    line = (json.dumps(row, ensure_ascii=False, default=str) + "\n").encode()
    if len(line) <= limit:
        return line
    row, trimmed = dict(row), []
    sizes = {
        key: len(json.dumps(value, ensure_ascii=False, default=str)) for key, value in row.items()
    }
    for key in sorted(sizes, key=sizes.__getitem__, reverse=True):
        value = row[key]
        # a text keeps its start (an answer's metrics were computed on the whole of it)
        row[key] = value[: limit // 16] + " [...]" if isinstance(value, str) else None
        trimmed.append(key)
        line = (
            json.dumps(row | {"trimmed": trimmed}, ensure_ascii=False, default=str) + "\n"
        ).encode()
        if len(line) <= limit:
            return line
    raise NoteragError("a result row cannot be cut to the size the reader takes")  # never


class LineWriter:
    """Appends JSON lines to one file, each ``append`` / ``extend`` in one write, fsynced before
    the next; ``append_async`` (a run's questions) gathers the rows kept while a write is under
    way into the next one.

    ``append`` and ``extend`` write on the calling thread. A run on an event loop keeps its rows
    with ``append_async``, whose write and fsync run in a worker thread: an fsync takes 2-4 ms
    of waiting on the disk here, and vanilla at concurrency 32 keeps about 290 rows a second,
    so fsyncs on the loop's thread held it (every question) for most of the run
    (bench/client_cpu.py, bench/throughput.py). The rows kept while a write is under way go
    together in the next write, one fsync for all (a group commit); each is on disk when its
    ``append_async`` returns. Writes never overlap (one at a time, under a lock), so lines
    cannot interleave, and ``close`` waits for the write under way. A symbolic link at
    ``path`` is refused, never appended through (``noterag.base.files.open_no_follow``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        existed = path.exists()
        self._fd = open_no_follow(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        if not existed:
            fsync_dir(path.parent)
        self._lock = threading.Lock()  # one write at a time; close waits for it
        self._pending: list[dict[str, Any]] = []  # rows for the next group write
        self._batch: asyncio.Future[None] | None = None  # done when they are on disk
        self._flusher: asyncio.Task[None] | None = None

    def append(self, row: dict[str, Any]) -> None:
        self._write(encode_row(row))

    def extend(self, rows: Iterable[dict[str, Any]]) -> None:
        data = b"".join(encode_row(row) for row in rows)
        if data:
            self._write(data)

    async def append_async(self, row: dict[str, Any]) -> None:
        """``append`` from a coroutine: on disk when it returns, the event loop free meanwhile;
        the rows kept while a write is under way are written together after it (``extend``,
        in a worker thread). A failed write raises its error in every row's caller."""
        if self._batch is None:
            self._batch = asyncio.get_running_loop().create_future()
        batch = self._batch
        self._pending.append(row)
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush())
        # shielded: a caller cancelled (an aborted run) leaves the others' write alone
        await asyncio.shield(batch)

    async def _flush(self) -> None:
        try:
            while self._pending:
                rows, batch = self._pending, self._batch
                self._pending, self._batch = [], None
                assert batch is not None
                try:
                    await asyncio.to_thread(self.extend, rows)
                except Exception as exc:  # noqa: BLE001 - each caller raises it, none waits on
                    batch.set_exception(exc)
                    batch.exception()  # retrieved: its callers may all be cancelled by now
                else:
                    batch.set_result(None)
        finally:
            self._flusher = None

    def _write(self, data: bytes) -> None:
        with self._lock:
            if self._fd < 0:  # closed while this write waited (an aborted run's last rows)
                raise OSError(errno.EBADF, f"{self.path} was closed before the write")
            view = memoryview(data)
            while view:  # a regular file takes it in one go; the loop is for a rare short write
                view = view[os.write(self._fd, view) :]
            os.fsync(self._fd)

    def close(self) -> None:
        with self._lock:
            fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def repair_lines(path: Path) -> list[dict[str, Any]]:
    """The finished rows of a JSON-lines file; a half-written tail (crash mid-write) is
    truncated away, and a last row missing its newline gets it back, so that the next row
    starts on a line of its own. A symbolic link at ``path`` is refused before it is read
    (``noterag.base.files.open_no_follow``): the repair must not cut the file it points at."""
    refuse_link(path)
    rows, valid_end = scan_results(path)
    if not path.exists():
        return rows
    with os.fdopen(open_no_follow(path, os.O_RDWR), "r+b") as f:
        size = f.seek(0, os.SEEK_END)
        if size > valid_end:
            f.truncate(valid_end)
        if valid_end:
            f.seek(valid_end - 1)
            if f.read(1) != b"\n":
                f.write(b"\n")
        f.flush()
        os.fsync(f.fileno())
    return rows


# --------------------------------------------------------------------------- running


class Abort(Exception):
    """An error that would fail every question: stop the run. ``resumable``: the same command
    can go on once the cause is gone (an endpoint back up, disk space freed)."""

    def __init__(self, error: NoteragError, *, resumable: bool = True) -> None:
        super().__init__(str(error))
        self.error = error
        self.resumable = resumable

    def stopped(self, meter: Progress) -> NoteragError:
        """The error as the user reads it: with how far the run got and whether to resume."""
        resume = "; run the same command again to resume" if self.resumable else ""
        return type(self.error)(
            f"{self.error} (stopped after {meter.count} of {meter.total} questions{resume})"
        )


async def run_questions(
    todo: Sequence[Any],
    concurrency: int,
    answer: Callable[[Any], Awaitable[dict[str, Any]]],
    keep: Callable[[dict[str, Any]], Awaitable[None] | None],
    meter: Progress,
) -> None:
    """``answer`` every question of ``todo``, ``concurrency`` at once; ``keep`` each row as it
    comes (within the question's slot: a question is done once its row is written; ``keep`` may
    be a coroutine function, ``LineWriter.append_async``), then advance ``meter``. Raises the error of the first ``Abort``, saying how far the run got."""
    semaphore = asyncio.Semaphore(concurrency)

    async def one(example: Any) -> None:
        async with semaphore:
            row = await answer(example)
            kept = keep(row)
            if kept is not None:
                await kept
        meter.advance(row)

    try:
        async with asyncio.TaskGroup() as group:
            for example in todo:
                group.create_task(one(example))
    except BaseExceptionGroup as failed:
        # The group cancelled the other questions; report the cause, not the group.
        aborts = [e for e in failed.exceptions if isinstance(e, Abort)]
        if not aborts:
            raise failed.exceptions[0] from None
        raise aborts[0].stopped(meter) from None


_RUNNER: asyncio.Runner | None = None


def event_loop() -> asyncio.Runner:
    """One event loop for every run of the process: a model's async HTTP client keeps pooled
    connections bound to the loop that opened them, so a model object passed to a second run
    would fail on a closed loop if each run had its own."""
    global _RUNNER
    if _RUNNER is None:
        _RUNNER = asyncio.Runner()
        atexit.register(_RUNNER.close)
    return _RUNNER


def use_threads(threads: int, prefix: str) -> ThreadPoolExecutor:
    """Give the running loop a default executor of ``threads``: BM25 searches and sync-only
    models run on it, and its default size (CPUs + 4) would cap the concurrency on a small
    machine."""
    executor = ThreadPoolExecutor(threads, thread_name_prefix=prefix)
    asyncio.get_running_loop().set_default_executor(executor)
    return executor


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """The objects alive now (modules, the graph, the model clients) left out of the garbage
    collector's collections while the run answers its questions (``gc.freeze``). A full
    collection walks every object the process holds (180,000 in a DeepNote eval) and stalls
    every question in flight while it does: 125 ms measured, twice in a run of 200 questions at
    concurrency 32; with the long-lived objects frozen it walks the run's own, in under 10 ms.
    Unfrozen when the run ends, so that a caller's later garbage is collected as before (unless
    the caller had frozen objects itself: unfreezing is all or nothing, so they stay frozen)."""
    frozen_before = gc.get_freeze_count()
    gc.freeze()
    try:
        yield
    finally:
        if not frozen_before:
            gc.unfreeze()


def run_on_loop(main: Callable[[], Coroutine[Any, Any, None]], threads: int, prefix: str) -> None:
    """Run ``main()`` on the process's event loop with ``use_threads(threads)``, the heap as it
    is frozen (``frozen_heap``)."""

    async def with_threads() -> None:
        executor = use_threads(threads, prefix)
        try:
            await main()
        finally:
            executor.shutdown(wait=False)

    with frozen_heap():
        event_loop().run(with_threads())


# --------------------------------------------------------------------------- progress


@dataclass
class Progress:
    """Done / total and ``stats(done rows)``: a rich bar titled ``label`` on a terminal, a line
    every tenth of the run elsewhere (logs)."""

    console: Any
    enabled: bool
    total: int
    label: str
    stats_of: Callable[[list[dict[str, Any]]], str]
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
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            from rich.progress import Progress as Bar

            self._bar = Bar(
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
                self.label, total=self.total, completed=self.count, stats=self.stats()
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
        return self.stats_of(self.done) if self.done else ""


# --------------------------------------------------------------------------- labels


def index_spec(index: Any) -> Any:
    """The canonical retriever spec for ``index`` (``noterag.retrievers.spec``: a bare directory
    becomes "bm25:/abs/DIR" or "dense:/abs/DIR" by its manifest), the object itself, or None
    (NOTERAG_INDEX, else the sample corpus, as ``build_graph``)."""
    from langchain_core.retrievers import BaseRetriever

    from noterag.retrievers.spec import normalize_spec

    if index is None:
        index = os.environ.get("NOTERAG_INDEX") or None
    if index is None or isinstance(index, BaseRetriever):
        return index
    return normalize_spec(index)


def index_label(spec: Any) -> str:
    """How run.json names the index: its spec, "sample", or a retriever object's class."""
    if spec is None:
        return "sample"
    return redact(spec) if isinstance(spec, str) else type(spec).__name__


def model_label(model: Any) -> str:
    """How run.json names a model: its spec (None: NOTERAG_MODEL, else "local"), else a model
    object's name or class; credentials in a spec's URL redacted (``noterag.base.redact``)."""
    if model is None:
        model = os.environ.get("NOTERAG_MODEL", "local")
    if isinstance(model, str):
        return redact(model.strip())
    name = getattr(model, "model_name", None) or getattr(model, "model", None)
    return name if isinstance(name, str) and name else type(model).__name__


def show(value: Any) -> str:
    """A configuration value as a message shows it (JSON, keys sorted)."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def check_same_config(
    run_dir: Path, previous: dict[str, Any], config: dict[str, Any], compared: Iterable[str]
) -> None:
    """Refuse to resume the run in ``run_dir`` (``previous``, its run.json) with ``config``
    when a ``compared`` field differs, naming each difference."""
    differences = [
        f"{key} {show(previous.get(key))} → {show(config[key])}"
        for key in compared
        if previous.get(key) != config[key]
    ]
    if differences:
        raise RunDirError(
            f"{run_dir} holds a run with another configuration ({'; '.join(differences)}); "
            "resume it with the same settings, choose a new --out, or pass --force to start "
            "it over"
        )
