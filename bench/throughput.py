"""Eval throughput: N questions through the eval runner at several concurrencies.

    python bench/throughput.py                                   # vanilla and deepnote
    python bench/throughput.py --methods deepnote --concurrency 1,8,32 --questions 200
    python bench/throughput.py --rounds 5 --schedule-floor      # the quiet re-measurement

``--rounds R`` runs every configuration R times, interleaved (all of them once, then again), and
prints each figure's median with the spread (min-max) of wall / ideal.

Each (method, concurrency) runs ``noterag.eval.run_eval`` (the whole runner: durable results
file, fsync per row, scoring) on N questions (the bundled sample's six, cycled under distinct
ids) against bench/sim_endpoint.py in its own process (latency = base + per output token,
default 100 ms + 2 ms/token). Printed per run:

- wall: the run_eval call, start to end (graph build and summary included);
- model: the sum of the endpoint's service times (its own records, so HTTP and client time
  are not in it);
- ideal = model / concurrency, the bound the issue sets; wall / ideal (target <= 1.10x).
  ``concurrency`` is the eval's turns at the endpoint (``noterag.models.turns``: as many
  questions again are in progress, each holding a turn while its request is in flight). For
  methods whose calls are sequential within a question (vanilla, deepnote) it is a true lower
  bound: the endpoint never has more than ``concurrency`` requests to serve;
- CPU: the benchmark process's CPU time during the run (the endpoint runs in another process).
  The client is one Python process: its CPU time is a floor for the wall time at any
  concurrency (GIL), so wall / max(ideal, CPU) shows how much is left once that floor is met;
- drain: the time from the last question's start to the run's end, when no question is left
  to start and the turns empty as the last ones finish (questions differ in length, so no
  runner can keep the endpoint full there; part of the gap to the ideal bound at high
  concurrency);
- start-up: from the call to the first question's start (dataset, index, graph build, the
  model's reachability check; workers started), in the wall time, not in the ideal;
- the endpoint's peak and time-averaged number of requests in flight.

Concurrency 1 of a slow method runs ``--serial-questions`` questions (default 40) rather than
N: at 100 ms a call, deepnote's 200 questions one at a time take minutes, and the ratio is per
question anyway.

Workers (``--workers 1,2``; issue 15): each method also runs at ``--total-concurrency`` (8 and
32) spread over 1 and 2 worker processes (each worker has total / workers turns),
with the model given as a spec so each worker opens its own client. CPU there is the sum over
the parent and its workers (the workers' time is counted when they are reaped), and the floor
is max(ideal, CPU / workers): the client's CPU shared by the processes.

Schedule floor (``--schedule-floor``, about 5 minutes for deepnote): what wall / ideal would be
with a client that costs nothing. The method runs its N questions one at a time (each
question's endpoint service times are then its own, in order); those questions are scheduled
in the dataset's order as the eval runs them (``zero_overhead_schedule``): ``total
concurrency`` turns, as many questions again in progress, each request served as a turn frees
(the table also gives the schedule with one slot per question, a question starting when a slot
frees and making its calls back to back: the eval before it had turns). Questions differ in
length (1 to max_steps iterations), so the last ones run with turns empty: floor / ideal > 1
at high concurrency whatever the client. The table also gives the client's own overhead one
question at a time (wall / model at concurrency 1) and their product, the bound for this
client when it never waits for its CPU.
(The simulated endpoint draws its verdicts at random in arrival order, so the serial run's
questions have the same length distribution as a concurrent run's, not the same lengths.)

Cache: the deepnote run at the highest total concurrency is run twice with ``cache=``; the
table gives the second run's model requests (0 expected) and wall time.

Writes JSON (default bench/results/throughput.json).
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import resource
import statistics
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from common import print_table, sim_eval, write_dataset, write_results
from sim_process import SimProcess, latency_arguments, latency_text

from noterag.models import load_chat_model
from noterag.models.turns import spare_questions
from noterag.retrievers.sample import sample_index

# Methods cheap enough to run all N questions one at a time.
FAST = {"vanilla"}


def busy_time(records: list[Any]) -> tuple[float, float]:
    """(union of the service intervals, integral of in-flight requests over time)."""
    events = sorted([(r.start, 1) for r in records] + [(r.end, -1) for r in records])
    busy = area = 0.0
    level, last = 0, None
    for t, step in events:
        if last is not None and level:
            busy += t - last
            area += level * (t - last)
        level += step
        last = t
    return busy, area


def _cpu() -> float:
    """This process's CPU time and that of its reaped children (the eval workers)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def eval_run(
    method: str,
    concurrency: int,
    n: int,
    dataset: Path,
    sim: SimProcess,
    index: Path,
    out: Path,
    workers: int = 1,
    cache: Path | None = None,
) -> tuple[float, float, list[Any], list[dict[str, Any]], float]:
    """One ``run_eval`` against the simulated endpoint: its wall and CPU seconds, the
    endpoint's records of its requests, its result rows and its start-up seconds."""
    # Workers open their own client from the spec; one process keeps the object, as before.
    model: Any = (
        f"openai:sim@{sim.url}" if workers > 1 else load_chat_model(f"openai:sim@{sim.url}")
    )
    sim.records()
    started, cpu, called_at = time.perf_counter(), _cpu(), time.time()
    sim_eval(
        method, dataset, out, index, model, limit=n,
        concurrency=max(1, concurrency // workers), model_label="sim", workers=workers,
        cache=cache,
    )  # fmt: skip
    wall, cpu = time.perf_counter() - started, _cpu() - cpu
    rows = [json.loads(line) for line in (out / "results.jsonl").open()]
    # the rows' times are wall-clock: from the call to the first question's start (the run's
    # set-up: dataset, index, graph build, the model's reachability check, workers started)
    startup = min(r["started_at"] for r in rows) - called_at
    return wall, cpu, sim.records(), rows, startup


def bench_run(
    method: str,
    concurrency: int,
    n: int,
    dataset: Path,
    sim: SimProcess,
    index: Path,
    out: Path,
    workers: int = 1,
    cache: Path | None = None,
) -> dict[str, Any]:
    wall, cpu, records, rows, startup = eval_run(
        method, concurrency, n, dataset, sim, index, out, workers, cache
    )
    model_time = sum(r.end - r.start for r in records) or 1e-9  # a cached run: no requests
    busy, area = busy_time(records)
    errors = sum(1 for row in rows if row["error"])
    # After the last question starts, fewer than `concurrency` run: the bound cannot hold there.
    drain = max(r["finished_at"] for r in rows) - max(r["started_at"] for r in rows)
    return {
        "method": method,
        "concurrency": concurrency,
        "workers": workers,
        "requests": len(records),
        "questions": n,
        "errors": errors,
        "calls_per_q": len(records) / n,
        "wall_s": wall,
        "model_s": model_time,
        "ideal_s": model_time / concurrency,
        "wall_over_ideal": wall / (model_time / concurrency),
        "per_q_ms": 1000 * wall / n,
        "cpu_s": cpu,
        "cpu_ms_per_q": 1000 * cpu / n,
        "wall_over_floor": wall / max(model_time / concurrency, cpu / workers),
        "drain_s": drain,
        "startup_s": startup,
        "max_in_flight": max((r.in_flight for r in records), default=0),
        "mean_in_flight": area / busy if busy else 0.0,
    }


def medians(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (method, concurrency, workers): each figure's median over the rounds, and
    ``min`` / ``max`` of wall / ideal (the spread)."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for run in runs:
        groups.setdefault((run["method"], run["concurrency"], run["workers"]), []).append(run)
    found = []
    for mine in groups.values():
        row = {
            key: statistics.median(r[key] for r in mine)
            if isinstance(value, float)
            else mine[-1][key]
            for key, value in mine[0].items()
        }
        spread = [r["wall_over_ideal"] for r in mine]
        found.append(row | {"rounds": len(mine), "min": min(spread), "max": max(spread)})
    return found


def zero_overhead_schedule(questions: list[list[float]], turns: int, in_progress: int) -> float:
    """The end of the run if the client cost nothing: ``in_progress`` questions at once (the
    next one, in order, starting as one ends), their requests served ``turns`` at a time in the
    order they became ready (each question's next request ready the moment its reply is in).
    ``in_progress == turns``: each question keeps a slot of its own."""
    pending = iter(range(len(questions)))
    ready: deque[tuple[int, int]] = deque()  # (question, call)
    running: list[tuple[float, int, int]] = []  # (finish, question, call)
    for q in itertools.islice(pending, in_progress):
        ready.append((q, 0))
    now = end = 0.0
    free = turns
    while ready or running:
        while ready and free:
            q, call = ready.popleft()
            heapq.heappush(running, (now + questions[q][call], q, call))
            free -= 1
        now, q, call = heapq.heappop(running)
        free += 1
        end = max(end, now)
        if call + 1 < len(questions[q]):
            ready.append((q, call + 1))
        elif (following := next(pending, None)) is not None:
            ready.append((following, 0))
    return end


def schedule_floor(
    method: str, n: int, dataset: Path, sim: SimProcess, index: Path, out: Path, totals: list[int]
) -> list[dict[str, Any]]:
    """The zero-overhead schedule of ``n`` questions at each total concurrency (see the module
    docstring), from one serial run's service times: with one slot per question, and with the
    eval's turns (as many questions again in progress)."""
    wall, _, records, rows, _ = eval_run(method, 1, n, dataset, sim, index, out)
    records.sort(key=lambda r: r.start)
    # One at a time, the rows are in the order asked and each made llm_calls requests.
    questions, i = [], 0
    for row in rows:
        questions.append([r.end - r.start for r in records[i : i + row["llm_calls"]]])
        i += row["llm_calls"]
    assert i == len(records), "the serial run's requests do not add up to its rows' calls"
    model = sum(map(sum, questions))
    found = []
    for total in totals:
        slots = zero_overhead_schedule(questions, total, total)
        turns = zero_overhead_schedule(questions, total, total + spare_questions(total))
        ideal = model / total
        found.append(
            {
                "method": method,
                "concurrency": total,
                "ideal_s": ideal,
                "slots_floor_over_ideal": slots / ideal,
                "floor_s": turns,
                "floor_over_ideal": turns / ideal,
                "serial_overhead": wall / model,
                "bound_over_ideal": turns / ideal * wall / model,
            }
        )
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default="vanilla,deepnote")
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--serial-questions", type=int, default=40)
    parser.add_argument(
        "--rounds", type=int, default=1, help="runs of each configuration (median, min-max)"
    )
    latency_arguments(parser)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--workers", default="1,2", help="worker processes ('' : none)")
    parser.add_argument("--total-concurrency", default="8,32")
    parser.add_argument("--no-cache", action="store_true", help="skip the cache figures")
    parser.add_argument(
        "--schedule-floor", action="store_true", help="also the zero-overhead schedule (slow)"
    )
    args = parser.parse_args()

    index = sample_index()
    rows: list[dict[str, Any]] = []
    worker_rows: list[dict[str, Any]] = []
    cache_rows: list[dict[str, Any]] = []
    floor_rows: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory(prefix="noterag-throughput-") as tmp,
        SimProcess(args.base_ms, args.per_token_ms) as sim,
    ):
        dataset = write_dataset(Path(tmp) / "questions.jsonl", args.questions)
        for method in args.methods.split(","):
            # warm-up: imports, first graph build, connection pool
            bench_run(method, 2, 2, dataset, sim, index, Path(tmp) / "warm")
        # Rounds interleaved (every configuration once, then again): a burst of load from
        # elsewhere on the machine spreads over the configurations instead of hitting one.
        for round_ in range(1, args.rounds + 1):
            for method in args.methods.split(","):
                for c in (int(x) for x in args.concurrency.split(",") if x):  # "": workers only
                    n = (
                        args.questions
                        if c > 1 or method in FAST
                        else min(args.questions, args.serial_questions)
                    )
                    out = Path(tmp) / f"{method}-{c}"
                    row = bench_run(method, c, n, dataset, sim, index, out) | {"round": round_}
                    rows.append(row)
                    print(f"  {method} x{c} round {round_}: {row['wall_s']:.1f} s", flush=True)
            for method in args.methods.split(","):
                for c in (int(x) for x in args.total_concurrency.split(",") if x):
                    for w in (int(x) for x in args.workers.split(",") if x):
                        out = Path(tmp) / f"{method}-{c}-w{w}"
                        row = bench_run(method, c, args.questions, dataset, sim, index, out, w)
                        worker_rows.append(row | {"round": round_})
                        print(
                            f"  {method} x{c} workers {w} round {round_}: {row['wall_s']:.1f} s",
                            flush=True,
                        )
        if args.schedule_floor:
            totals = [int(x) for x in args.total_concurrency.split(",") if x]
            for method in args.methods.split(","):
                out = Path(tmp) / f"{method}-floor"
                floor_rows += schedule_floor(
                    method, args.questions, dataset, sim, index, out, totals
                )
                print(f"  {method} schedule floor: serial run done", flush=True)
        if not args.no_cache:
            c = max(int(x) for x in args.total_concurrency.split(",") if x)
            w = max((int(x) for x in args.workers.split(",") if x), default=1)
            cache = Path(tmp) / "cache.sqlite"
            for attempt in ("first", "second"):
                out = Path(tmp) / f"cache-{attempt}"
                row = bench_run("deepnote", c, args.questions, dataset, sim, index, out, w, cache)
                cache_rows.append(row | {"run": attempt})
                print(f"  cache, {attempt} run: {row['requests']} requests", flush=True)

    runs, worker_runs = rows, worker_rows
    rows, worker_rows = medians(runs), medians(worker_runs)
    if rows:
        print(
            f"\nEval throughput (run_eval against the simulated endpoint, {latency_text(args)}; "
            f"median of {args.rounds} round(s))"
        )
        print_table(
            rows,
            [
                ("method", "method", "s"),
                ("concurrency", "conc", "d"),
                ("questions", "N", "d"),
                ("calls_per_q", "calls/q", ".1f"),
                ("wall_s", "wall s", ".2f"),
                ("model_s", "model s", ".2f"),
                ("ideal_s", "ideal s", ".2f"),
                ("wall_over_ideal", "wall/ideal", ".3f"),
                ("min", "min", ".3f"),
                ("max", "max", ".3f"),
                ("per_q_ms", "ms/q", ".1f"),
                ("cpu_s", "CPU s", ".2f"),
                ("cpu_ms_per_q", "CPU ms/q", ".1f"),
                ("wall_over_floor", "wall/max(ideal,CPU)", ".3f"),
                ("startup_s", "start-up s", ".2f"),
                ("drain_s", "drain s", ".2f"),
                ("max_in_flight", "max in flight", "d"),
                ("mean_in_flight", "mean in flight", ".1f"),
                ("errors", "errors", "d"),
            ],
        )
        print("target: wall <= 1.10x ideal (ideal = sum of model-call time / concurrency)")
        print("CPU = the client process's CPU time: a floor for the wall time at any concurrency")
    if worker_rows:
        print(f"\nWorkers ({args.questions} questions; total concurrency over the workers)")
        print_table(
            worker_rows,
            [
                ("method", "method", "s"),
                ("concurrency", "total conc", "d"),
                ("workers", "workers", "d"),
                ("wall_s", "wall s", ".2f"),
                ("ideal_s", "ideal s", ".2f"),
                ("wall_over_ideal", "wall/ideal", ".3f"),
                ("min", "min", ".3f"),
                ("max", "max", ".3f"),
                ("cpu_s", "CPU s (all)", ".2f"),
                ("wall_over_floor", "wall/max(ideal,CPU/workers)", ".3f"),
                ("startup_s", "start-up s", ".2f"),
                ("drain_s", "drain s", ".2f"),
                ("mean_in_flight", "mean in flight", ".1f"),
                ("errors", "errors", "d"),
            ],
        )
        print("target (issue 15): deepnote, total concurrency 32, 2 workers <= 1.15x ideal")
    if floor_rows:
        print(f"\nSchedule floor ({args.questions} questions, one serial run each; see --help)")
        print_table(
            floor_rows,
            [
                ("method", "method", "s"),
                ("concurrency", "total conc", "d"),
                ("ideal_s", "ideal s", ".2f"),
                ("slots_floor_over_ideal", "one slot a question: floor/ideal", ".3f"),
                ("floor_s", "with turns: zero-overhead s", ".2f"),
                ("floor_over_ideal", "floor/ideal", ".3f"),
                ("serial_overhead", "client overhead (serial)", ".3f"),
                ("bound_over_ideal", "floor x overhead / ideal", ".3f"),
            ],
        )
    if cache_rows:
        print("\nCache (deepnote, the same run twice with --cache)")
        print_table(
            cache_rows,
            [
                ("run", "run", "s"),
                ("concurrency", "total conc", "d"),
                ("workers", "workers", "d"),
                ("requests", "model requests", "d"),
                ("wall_s", "wall s", ".2f"),
                ("cpu_s", "CPU s (all)", ".2f"),
            ],
        )
    data = {
        "runs": runs,
        "workers": worker_runs,
        "medians": rows,
        "worker_medians": worker_rows,
        "cache": cache_rows,
        "floor": floor_rows,
    }
    print(f"wrote {write_results('throughput', data, args.json)}")


if __name__ == "__main__":
    main()
