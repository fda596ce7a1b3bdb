"""``run_eval(..., workers=N)``: the questions of a run spread over N worker processes.

One client process is bound by its own CPU (LangChain, LangGraph, the OpenAI client and httpx
cost milliseconds per model call), so against an endpoint that serves many requests at once
the eval, not the endpoint, is the limit. Each worker has its own event loop, model clients
and ``concurrency`` turns at the model (``noterag.models.turns``) for ``concurrency + spare``
questions in progress; the parent stays the one writer of ``results.jsonl``.

The parent hands out questions one at a time: a worker asks for ``concurrency + spare``
questions when it starts and one more with every answer it sends back, so every worker stays
busy to the end (no batch waits for its slowest question). The parent checks the index
identity, appends the rows (fsynced, as the single-process run: the rows that came in together
in one write) and advances the one progress bar.

Crashes: a worker killed at any moment loses only the questions it held (not written, so a
resume asks them again); the parent goes on with the other workers and, at the end, reports
the dead worker and what it held. A parent killed at any moment takes its workers with it
(``PR_SET_PDEATHSIG``, and the end of their pipe), and at most its last row is half written:
the resume cuts it away, as for a single process. Each question is written once, by the
parent, which writes only the ids it handed out and had not written.

Workers are forked (not spawned): a model or retriever object handed to ``run_eval`` (a test's
scripted model, a custom retriever) reaches them without pickling. A model given as a spec and
an index given as a spec are opened again in each worker, so no HTTP connection or index
handle is shared across processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import multiprocessing
import os
import pickle
import signal
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from noterag.base.errors import NoteragError

# Linux's prctl option: a signal for this process when its parent dies.
_PR_SET_PDEATHSIG = 1


class WorkerCrashedError(NoteragError):
    """A worker process died during the run: its questions were not answered."""


@dataclass
class WorkerSetup:
    """What a worker builds its graph from (inherited through fork, never pickled)."""

    build_graph: Callable[[], Any]
    config: dict[str, Any]
    concurrency: int  # turns at the model
    spare: int = 0  # questions in progress beyond them


def max_workers() -> int:
    """The most worker processes a run starts: 8 per CPU. A worker spends most of its time
    waiting on the endpoint, so a few per CPU pay; hundreds only cost memory and start-up (200
    asked for 20 questions started 167 processes)."""
    return 8 * max(1, len(os.sched_getaffinity(0)))


def resolve_workers(workers: int | str | None) -> int:
    """``auto`` (or 0): the CPUs this process may run on; else the number, from 1 to
    ``max_workers()``. (A run also starts no more than it has questions to answer.)"""
    if workers is None:
        return 1
    if isinstance(workers, str):
        text = workers.strip().lower()
        if text == "auto":
            return max(1, len(os.sched_getaffinity(0)))
        try:
            workers = int(text)
        except ValueError:
            raise NoteragError(f"--workers must be a number or auto, not {workers!r}") from None
    if workers == 0:
        return max(1, len(os.sched_getaffinity(0)))
    if workers < 1:
        raise NoteragError(f"--workers must be at least 1 (or auto), not {workers}")
    if workers > max_workers():
        raise NoteragError(
            f"--workers {workers} is more than {max_workers()} (8 per CPU of this machine): "
            "raise --concurrency instead, each worker's questions waiting on the model at once"
        )
    return workers


# --------------------------------------------------------------------------- worker side


def _die_with_parent(parent: int) -> None:
    """SIGKILL this process when the parent dies (Linux), so no orphan keeps calling the model
    for answers nobody will write."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # it died before prctl took effect
        os._exit(1)


def portable_error(error: BaseException) -> NoteragError:
    """The error as the parent can receive it: itself if it pickles, else its message."""
    if not isinstance(error, NoteragError):  # a bug: name it, as a traceback would
        return NoteragError(f"{type(error).__name__}: {error}")
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:  # noqa: BLE001 - any pickling failure: the message still reaches it
        return NoteragError(str(error))
    return error


def _worker_main(
    conn: Connection, inherited: Sequence[Connection], setup: WorkerSetup, parent: int
) -> None:
    _die_with_parent(parent)
    # The other workers' pipe ends, inherited through fork: held here, they would hide a dead
    # worker's end of pipe from the parent.
    for other in inherited:
        other.close()
    # Ctrl-C goes to the whole process group; the parent decides, and the workers follow the
    # end of their pipe.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        graph = setup.build_graph()
    except Exception as exc:  # noqa: BLE001 - whatever stops the graph stops the run
        conn.send(("abort", portable_error(exc), False))
        return
    gc.freeze()  # its graph and clients too (loop.frozen_heap); the process ends with the run
    asyncio.run(_serve(conn, graph, setup))


async def _serve(conn: Connection, graph: Any, setup: WorkerSetup) -> None:
    from noterag.eval.loop import Abort, use_threads
    from noterag.eval.rows import answer_one
    from noterag.models.turns import ModelTurns
    from noterag.registry.methods import METHODS

    loop = asyncio.get_running_loop()
    in_progress = setup.concurrency + setup.spare
    use_threads(max(32, in_progress * 2), "noterag-eval")  # as the single-process run
    spec = METHODS[setup.config["method"]]  # this process's one lookup
    turns = ModelTurns(setup.concurrency)
    inbox: asyncio.Queue[Any] = asyncio.Queue()

    def read() -> None:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                os._exit(1)  # the parent is gone: nobody would write the answers
            loop.call_soon_threadsafe(inbox.put_nowait, message)
            if message is None:
                return

    def send(message: Any) -> None:
        try:
            conn.send(message)
        except (BrokenPipeError, OSError):
            os._exit(1)

    async def one(example: Any) -> None:
        try:
            row = await answer_one(graph, spec, example, setup.config, turns)
        except Abort as abort:
            send(("abort", portable_error(abort.error), abort.resumable))
            return
        except Exception as exc:  # noqa: BLE001 - a bug: reported by the parent, not lost
            send(("abort", portable_error(exc), True))
            return
        send(("row", row))

    threading.Thread(target=read, daemon=True).start()
    send(("want", in_progress))
    async with asyncio.TaskGroup() as group:
        while (example := await inbox.get()) is not None:
            group.create_task(one(example))


# --------------------------------------------------------------------------- parent side


@dataclass
class _Worker:
    number: int
    process: Any
    conn: Connection
    held: dict[str, Any]
    stopped: bool = False
    alive: bool = True


def run_workers(
    setup: WorkerSetup,
    todo: Sequence[Any],
    workers: int,
    keep: Callable[[list[dict[str, Any]]], None],
    stopped_after: Callable[[], str],
) -> None:
    """Answer ``todo`` over ``workers`` processes; ``keep(rows)`` (the parent's writer, index
    check and progress) takes the answers, those that came in together at once. Raises the error a worker aborted with (as the
    single-process run would) or, when a worker died, ``WorkerCrashedError``."""
    from noterag.eval.loop import frozen_heap

    context = multiprocessing.get_context("fork")
    queue = list(reversed(todo))  # pop() hands them out in the dataset's order
    written: set[str] = set()
    crew: list[_Worker] = []
    parent_ends: list[Connection] = []
    # Frozen before the forks, the heap the workers inherit stays out of their collections too
    # (no page of it is written by a collection, so none is copied).
    with frozen_heap():
        try:
            for number in range(1, workers + 1):
                mine, theirs = context.Pipe(duplex=True)
                process = context.Process(
                    target=_worker_main,
                    args=(theirs, list(parent_ends), setup, os.getpid()),
                    name=f"noterag-eval-{number}",
                    daemon=True,
                )
                process.start()
                theirs.close()  # the parent keeps only its end: the worker's death is its EOF
                parent_ends.append(mine)
                crew.append(_Worker(number, process, mine, {}))
            _serve_crew(crew, queue, written, keep)
        finally:
            for worker in crew:
                if worker.process.is_alive():
                    worker.process.kill()
                worker.process.join(5)
                worker.conn.close()
    dead = [w for w in crew if not w.stopped or w.held]
    if dead:
        raise WorkerCrashedError(_crash_message(dead, len(queue), stopped_after()))


def _serve_crew(
    crew: list[_Worker],
    queue: list[Any],
    written: set[str],
    keep: Callable[[list[dict[str, Any]]], None],
) -> None:
    def give(worker: _Worker, n: int) -> None:
        for _ in range(n):
            if worker.stopped:
                return
            if queue:
                example = queue.pop()
                worker.held[example.id] = example
                worker.conn.send(example)
            else:
                worker.stopped = True
                worker.conn.send(None)

    by_conn = {w.conn: w for w in crew}
    while any(w.alive for w in crew):
        # The rows that came in together are kept together (one write and fsync: at 2-4 ms an
        # fsync, one per row capped this process at a few hundred rows a second, fewer than
        # vanilla's workers answer at concurrency 32), after their workers have their next
        # questions.
        finished: list[dict[str, Any]] = []
        for ready in wait([w.conn for w in crew if w.alive]):
            worker = by_conn[ready]  # type: ignore[index]
            try:
                kind, *payload = worker.conn.recv()
            except (EOFError, OSError):
                worker.alive = False
                worker.process.join(5)
                continue
            if kind == "want":
                give(worker, payload[0])
            elif kind == "row":
                row = payload[0]
                if worker.held.pop(row["id"], None) is not None and row["id"] not in written:
                    finished.append(row)
                    written.add(row["id"])
                with contextlib.suppress(OSError):  # a worker that died meanwhile: EOF next
                    give(worker, 1)
            elif kind == "abort":
                from noterag.eval.loop import Abort

                if finished:  # answered before the abort: kept, as they came first
                    keep(finished)
                error, resumable = payload
                raise Abort(error, resumable=resumable)
        if finished:
            keep(finished)


def _crash_message(dead: Sequence[_Worker], left: int, stopped_after: str) -> str:
    parts = []
    for worker in dead:
        code = worker.process.exitcode
        how = (
            f"killed by {signal.Signals(-code).name}"
            if isinstance(code, int) and code < 0
            else f"exit code {code}"
        )
        held = list(worker.held)
        shown = ", ".join(held[:3]) + (f" and {len(held) - 3} more" if len(held) > 3 else "")
        parts.append(
            f"worker {worker.number} died ({how})"
            + (f" holding {len(held)} unanswered question(s): {shown}" if held else "")
        )
    unasked = f"; {left} question(s) were not handed out" if left else ""
    return f"{'; '.join(parts)}{unasked} ({stopped_after}; run the same command again to ask them)"
