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
"""

from __future__ import annotations

import logging
import os
import socket
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from noterag.errors import ConfigError, NoteragError

__all__ = ["MAX_ATTEMPTS", "ClusterSetup", "run_on_ray"]

# Times a question may be held by a worker that died before the run gives up on it.
MAX_ATTEMPTS = 3
# Variables the actors get from the driver: the model's key and endpoint, noterag's settings.
_PASSED_ENV = ("NOTERAG_", "OPENAI_")


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
    from noterag.spec import resolve_retriever

    chat_model = models.load_chat_model(setup.model, setup.settings)
    if setup.cache is not None:
        from noterag.eval.cache import SQLiteLLMCache, with_cache

        chat_model = with_cache(chat_model, SQLiteLLMCache(setup.cache))
    retriever = resolve_retriever(setup.index)
    return noterag.build_graph(spec, model=chat_model, retriever=retriever)


class Answerer:
    """One worker: an actor holding the graph, answering questions on its event loop."""

    def __init__(self, setup: ClusterSetup) -> None:
        from noterag.methods import METHODS

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
    try:
        ray.init(
            address=None if local else address,
            num_cpus=len(os.sched_getaffinity(0)) if local else None,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
            logging_level=logging.ERROR,
        )
    except (ConnectionError, RuntimeError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"cannot connect to the Ray cluster at {address}: {first}") from None
    return True


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

    def start_actor() -> _Slot:
        actor = remote.remote(setup)
        try:
            ray.get(actor.where.remote())  # type: ignore[attr-defined]  # Ray's actor method
        except ray.exceptions.RayActorError as exc:
            raise NoteragError(f"a Ray worker could not build the graph: {_cause(exc)}") from None
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
            for ref in ready:
                slot, example = inflight.pop(ref)
                slot.load -= 1
                try:
                    kind, *payload = ray.get(ref)
                except died as exc:
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
                        start_actor()
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
        for slot in slots:  # stops their requests: Ctrl-C, an abort or the end
            try:
                ray.kill(slot.actor, no_restart=True)
            except Exception:  # noqa: BLE001, S110 - already gone
                pass


def _cause(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
