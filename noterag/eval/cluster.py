"""``run_eval(..., ray=ADDRESS)``: the questions of a run answered on a Ray cluster.

The same model as ``--workers`` (``noterag.eval.workers``), with Ray's processes in place of
forked ones, so that they can be on other machines: ``workers`` actors (default: one per CPU of
the cluster), spread over its nodes, each building its graph once (its model and index opened
from their specs on its own node) and answering ``concurrency`` questions at the model at once
with ``spare`` more in progress (``noterag.models.turns``). The driver, the process that runs
``noterag eval``, hands out the questions, takes each row back as soon as it is answered and is
alone in writing ``results.jsonl`` (fsynced per row, as always): a run directory written on
Ray is the directory a plain eval writes, and either can resume it.

What each node needs: noterag installed (the same version), the index at the same path (or an
``es:`` URL every node reaches), the model endpoint reachable, and ``--cache`` on a filesystem
every node sees (one machine's disk, for a local cluster). ``NOTERAG_*`` and ``OPENAI_*``
variables of the driver are passed to the actors (``runtime_env``), so a key set where
``noterag eval`` runs is the key the actors use.

Faults. An actor (or its node) that dies loses nothing: the questions it held are handed to the
others, a new actor takes its place, and each such row counts its ``requeued`` attempts (summed
in the summary). A question whose workers die ``MAX_ATTEMPTS`` times stops the run (the question
itself kills them). Ctrl-C on the driver kills this run's actors (their requests stop) and
leaves a resumable directory; without an address a local cluster is started for the run and
shut down with it.

Bounds. Ray itself waits for a cluster without end: ``ray.init`` retries an address nobody
answers for over ten minutes (printing C++ warnings every 30 s), and a driver whose cluster lost
its last node, or its head, waits for its answers forever. So the address is tried with a plain
TCP connection first (``PROBE_S``) and ``ray.init`` given ``CONNECT_S``
(``$NOTERAG_RAY_CONNECT_TIMEOUT``); while it waits for answers the driver checks every
``CHECK_S`` that the head still answers and that a node is alive, and else stops with one line:
the rows written so far stay, and the same command resumes once the cluster is back.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import tempfile
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from noterag.base.errors import ConfigError, NoteragError

__all__ = ["MAX_ATTEMPTS", "ClusterSetup", "run_on_ray"]

# Times a question may be held by a worker that died before the run gives up on it.
MAX_ATTEMPTS = 3
# Variables the actors get from the driver: the model's key and endpoint, noterag's settings.
_PASSED_ENV = ("NOTERAG_", "OPENAI_")
# Seconds for the head's port to accept a TCP connection, for ray.init to connect, and between
# two checks that the cluster still has a head and a live node while answers are awaited.
PROBE_S = 5.0
CONNECT_S = 60.0
CHECK_S = 5.0
# Seconds a worker that replaces a dead one may keep dying before its death is the run's error.
REPLACE_S = 60.0


class ClusterGone(NoteragError):
    """The cluster has no head or no live node left: nothing would ever answer."""


@dataclass
class ClusterSetup:
    """What an actor builds its graph from: pickled to it, so specs rather than objects."""

    method: str
    model: Any  # a spec (or a picklable chat model)
    settings: Any  # ModelSettings
    index: Any  # a retriever spec (or a picklable retriever)
    cache: str | None
    config: dict[str, Any]
    concurrency: int
    spare: int


def _build_graph(setup: ClusterSetup, spec: Any) -> Any:
    import noterag
    from noterag import models
    from noterag.core.spec import resolve_retriever

    chat_model = models.load_chat_model(setup.model, setup.settings)
    if setup.cache is not None:
        from noterag.eval.cache import SQLiteLLMCache, with_cache

        chat_model = with_cache(chat_model, SQLiteLLMCache(setup.cache))
    retriever = resolve_retriever(setup.index)
    return noterag.build_graph(spec, model=chat_model, retriever=retriever)


class Answerer:
    """One worker: an actor holding the graph, answering questions on its event loop."""

    def __init__(self, setup: ClusterSetup) -> None:
        from noterag.registry.methods import METHODS

        self.setup = setup
        self.spec = METHODS[setup.method]  # this process's one lookup
        self.graph = _build_graph(setup, self.spec)
        self.turns: Any = None

    def where(self) -> tuple[int, str]:
        """Its process id and host: the actor is up (its graph built)."""
        return os.getpid(), socket.gethostname()

    async def answer(self, example: Any) -> tuple[Any, ...]:
        """``("row", row)``, or ``("abort", error, resumable)`` for an error that would fail
        every question (returned, not raised: the driver tells it from a dead worker)."""
        from noterag.eval.loop import Abort, use_threads
        from noterag.eval.rows import answer_one
        from noterag.eval.workers import portable_error
        from noterag.models.turns import ModelTurns

        if self.turns is None:  # on the actor's own event loop
            in_progress = self.setup.concurrency + self.setup.spare
            use_threads(max(32, in_progress * 2), "noterag-eval")
            self.turns = ModelTurns(self.setup.concurrency)
        try:
            row = await answer_one(self.graph, self.spec, example, self.setup.config, self.turns)
        except Abort as abort:
            return ("abort", portable_error(abort.error), abort.resumable)
        except Exception as exc:  # noqa: BLE001 - a bug: reported by the driver, not lost
            return ("abort", portable_error(exc), True)
        return ("row", row)


@dataclass
class _Slot:
    number: int
    actor: Any
    load: int = 0
    alive: bool = True


def connect(address: str | None) -> bool:
    """Connect to the cluster at ``address`` ("auto": the one this machine runs; None or
    "local": start a local one); True when this call started Ray (the caller shuts it down)."""
    try:
        import ray
    except ImportError:
        raise ConfigError(
            "--ray needs Ray: pip install 'noterag[ray]' (or pip install ray)"
        ) from None
    if ray.is_initialized():
        return False
    local = address in (None, "", "local")
    if not local:
        assert address is not None
        head = _head_of(address)
        if head is not None:
            silent = _silent(*head)
            if silent is not None:
                raise ConfigError(
                    f"cannot connect to the Ray cluster at {address}: nothing answers at "
                    f"{_hostport(*head)} ({silent})"
                )
    outcome: list[BaseException | None] = []

    def init() -> None:
        try:
            ray.init(
                address=None if local else address,
                num_cpus=len(os.sched_getaffinity(0)) if local else None,
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
                logging_level=logging.ERROR,
            )
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            outcome.append(exc)

    if local:
        # In this thread: Ray starts the local cluster's processes to die with the thread that
        # started them (PR_SET_PDEATHSIG), and this process dies with them. Not bounded: it is
        # this machine starting its own processes.
        init()
    else:
        # In a thread of its own, so that a head that accepts connections but never answers
        # as Ray (ray.init would retry it for many minutes) is one line after the bound.
        bound = connect_s()
        waiter = threading.Thread(target=init, name="noterag-ray-init", daemon=True)
        with _ray_stderr_held() as settled:
            waiter.start()
            waiter.join(bound)
            settled(outcome[0] is None if outcome else None)
    if not outcome:
        raise ConfigError(
            f"cannot connect to the Ray cluster at {address}: no answer from Ray within "
            f"{bound:g} s (NOTERAG_RAY_CONNECT_TIMEOUT sets how long to wait)"
        )
    exc = outcome[0]
    if isinstance(exc, ConnectionError | RuntimeError | ValueError):
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"cannot connect to the Ray cluster at {address}: {first}") from None
    if exc is not None:
        raise exc
    return True


@contextmanager
def _ray_stderr_held() -> Iterator[Callable[[bool | None], None]]:
    """File descriptor 2 into a temporary file while ``ray.init`` connects: Ray's C++ client
    prints a warning there for every failed attempt, and Ray in a thread warns that it set no
    SIGTERM handler (noterag handles its signals itself). ``settled(True)`` or ``(False)``
    (connected, or failed: the error line says why) drops it; ``None`` (still trying, in its
    thread, until the process ends) leaves descriptor 2 to it and moves Python's ``sys.stderr``
    to where descriptor 2 went, so the error line is the last line."""
    saved, sink = os.dup(2), tempfile.TemporaryFile()  # noqa: SIM115 - closed below
    outcome: list[bool | None] = []
    os.dup2(sink.fileno(), 2)
    try:
        yield outcome.append
    finally:
        if outcome and outcome[0] is not None:
            os.dup2(saved, 2)
            os.close(saved)
        else:
            sys.stderr.flush()
            sys.stderr = open(  # noqa: SIM115 - the process's stderr from now on
                saved, "w", buffering=1, encoding="utf-8", errors="backslashreplace"
            )
        sink.close()


def connect_s() -> float:
    """How long ``ray.init`` may take to connect: ``$NOTERAG_RAY_CONNECT_TIMEOUT`` or
    ``CONNECT_S``."""
    given = os.environ.get("NOTERAG_RAY_CONNECT_TIMEOUT", "").strip()
    try:
        seconds = float(given) if given else CONNECT_S
    except ValueError:
        raise ConfigError(
            f"NOTERAG_RAY_CONNECT_TIMEOUT must be a number of seconds, not {given!r}"
        ) from None
    if not seconds > 0:
        raise ConfigError(f"NOTERAG_RAY_CONNECT_TIMEOUT must be positive, not {given!r}")
    return seconds


def _head_of(address: str) -> tuple[str, int] | None:
    """The head's host and port ``ray.init(address)`` connects to, as its documentation says: a
    concrete address as given (``ray://host:port`` for the Ray Client); ``auto``: the
    ``RAY_ADDRESS`` environment variable when it is set. None when that is no ``host:port``
    (``auto`` without ``RAY_ADDRESS``: Ray finds the cluster this machine runs itself, and
    raises at once when there is none)."""
    if address == "auto":
        address = os.environ.get("RAY_ADDRESS", "").strip()
    where = address.split("://", 1)[1] if "://" in address else address
    return _parse_hostport(where.split("/", 1)[0])


def _parse_hostport(where: str) -> tuple[str, int] | None:
    host, colon, port = where.rpartition(":")
    if not colon or not port.isdigit() or not host:
        return None
    return host.strip("[]"), int(port)


def _hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _silent(host: str, port: int) -> str | None:
    """Why nothing accepts a TCP connection at ``host:port`` within ``PROBE_S``, or None."""
    try:
        with socket.create_connection((host, port), timeout=PROBE_S):
            return None
    except TimeoutError:
        return f"no answer within {PROBE_S:g} s"
    except OSError as exc:
        return (exc.strerror or str(exc) or type(exc).__name__).lower()


def _gone() -> str | None:
    """Why the connected cluster can answer nothing any more (its head does not accept a
    connection, or no node is alive), or None."""
    import ray

    try:
        gcs = ray.get_runtime_context().gcs_address
    except Exception:  # noqa: BLE001 - without it only the nodes are checked
        gcs = None
    head = _parse_hostport(gcs) if gcs else None
    if head is not None:
        silent = _silent(*head)
        if silent is not None:
            return f"its head at {_hostport(*head)} no longer answers ({silent})"
    if not any(node.get("Alive") for node in ray.nodes()):
        return "it has no live node left"
    return None


def disconnect() -> None:
    """Shut down the cluster ``connect`` started."""
    import ray

    ray.shutdown()


def default_workers() -> int:
    """One actor per CPU of the cluster."""
    import ray

    return max(1, int(ray.cluster_resources().get("CPU", 1)))


def run_on_ray(
    setup: ClusterSetup,
    todo: Sequence[Any],
    workers: int,
    keep: Callable[[dict[str, Any]], None],
    stopped_after: Callable[[], str],
) -> None:
    """Answer ``todo`` with ``workers`` actors of the connected cluster; ``keep(row)`` (the
    driver's writer, index check and progress) takes each answer. Raises the error an actor
    aborted with, as the single-process run would."""
    import ray

    from noterag.eval.loop import Abort

    cpus = float(ray.cluster_resources().get("CPU", 1))
    remote = ray.remote(Answerer).options(
        num_cpus=min(1.0, cpus / workers),
        max_concurrency=setup.concurrency + setup.spare,
        scheduling_strategy="SPREAD",
        max_restarts=0,
        runtime_env={
            "env_vars": {k: v for k, v in os.environ.items() if k.startswith(_PASSED_ENV)}
        },
    )
    capacity = setup.concurrency + setup.spare
    died = (
        ray.exceptions.RayActorError,
        ray.exceptions.WorkerCrashedError,
        ray.exceptions.NodeDiedError,
        ray.exceptions.OwnerDiedError,
        ray.exceptions.ObjectLostError,
        ray.exceptions.LocalRayletDiedError,
    )
    slots: list[_Slot] = []
    numbers = iter(range(1, 1_000_000))
    checked = time.monotonic()
    gone = False

    def check(now: bool = False) -> None:
        """Stop (keeping the rows) once the cluster can answer nothing: Ray would wait."""
        nonlocal checked, gone
        if not now and time.monotonic() - checked < CHECK_S:
            return
        why = _gone()
        checked = time.monotonic()
        if why is not None:
            gone = True
            raise Abort(ClusterGone(f"the Ray cluster stopped answering: {why}"))

    def start_actor(replacing: bool = False) -> _Slot:
        # A replacement may land on the node that just died, before the cluster knows it is
        # dead (its head notices within seconds): it is tried again meanwhile, the cluster
        # checked each time, rather than its death taken for a graph that cannot be built.
        deadline = time.monotonic() + (REPLACE_S if replacing else 0.0)
        while True:
            actor = remote.remote(setup)
            up = actor.where.remote()  # type: ignore[attr-defined]  # Ray's actor method
            while not ray.wait([up], timeout=1.0)[0]:
                check()  # an actor waits for a node without end
            try:
                ray.get(up)
                break
            except ray.exceptions.RayActorError as exc:
                if replacing:
                    check(now=True)
                if exc.actor_init_failed or time.monotonic() >= deadline:
                    raise NoteragError(
                        f"a Ray worker could not build the graph: {_cause(exc)}"
                    ) from None
                time.sleep(1.0)  # before the next try: its head's view of the nodes moves on
        slot = _Slot(next(numbers), actor)
        slots.append(slot)
        return slot

    queue = deque(todo)
    inflight: dict[Any, tuple[_Slot, Any]] = {}
    attempts: Counter[str] = Counter()
    written: set[str] = set()

    def submit() -> None:
        for slot in slots:
            while slot.alive and slot.load < capacity and queue:
                example = queue.popleft()
                inflight[slot.actor.answer.remote(example)] = (slot, example)
                slot.load += 1

    try:
        for _ in range(workers):
            start_actor()
        submit()
        while inflight:
            ready, _ = ray.wait(list(inflight), num_returns=1, timeout=1.0)
            if not ready:
                check()
            for ref in ready:
                slot, example = inflight.pop(ref)
                slot.load -= 1
                try:
                    kind, *payload = ray.get(ref)
                except died as exc:
                    check(now=True)  # every worker's death: the cluster may have no node left
                    attempts[example.id] += 1
                    if attempts[example.id] >= MAX_ATTEMPTS:
                        raise Abort(
                            NoteragError(
                                f"question {example.id}: {MAX_ATTEMPTS} Ray workers died while "
                                f"answering it (last: {_cause(exc)})"
                            )
                        ) from None
                    queue.appendleft(example)
                    if slot.alive:  # its other questions come back the same way
                        slot.alive = False
                        ray.kill(slot.actor, no_restart=True)
                        start_actor(replacing=True)
                    continue
                if kind == "abort":
                    error, resumable = payload
                    raise Abort(error, resumable=resumable)
                row = payload[0]
                if row["id"] not in written:
                    if attempts[row["id"]]:
                        row["requeued"] = attempts[row["id"]]
                    keep(row)
                    written.add(row["id"])
            submit()
    finally:
        for slot in [] if gone else slots:  # stops their requests: Ctrl-C, an abort or the end
            try:
                ray.kill(slot.actor, no_restart=True)
            except Exception:  # noqa: BLE001, S110 - already gone
                pass


def _cause(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
