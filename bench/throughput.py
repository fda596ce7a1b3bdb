"""Eval throughput: N questions through the eval runner at several concurrencies.

    python bench/throughput.py                                   # vanilla and deepnote
    python bench/throughput.py --methods deepnote --concurrency 1,8,32 --questions 200

Each (method, concurrency) runs ``noterag.eval.run_eval`` (the whole runner: durable results
file, fsync per row, scoring) on N questions (the bundled sample's six, cycled under distinct
ids) against bench/sim_endpoint.py in its own process (latency = base + per output token,
default 100 ms + 2 ms/token). Printed per run:

- wall: the run_eval call, start to end (graph build and summary included);
- model: the sum of the endpoint's service times (its own records, so HTTP and client time
  are not in it);
- ideal = model / concurrency, the bound the issue sets; wall / ideal (target <= 1.10x).
  For methods whose calls are sequential within a question (vanilla, deepnote) it is a true
  lower bound: the endpoint never has more than ``concurrency`` requests to serve;
- CPU: the benchmark process's CPU time during the run (the endpoint runs in another process).
  The client is one Python process: its CPU time is a floor for the wall time at any
  concurrency (GIL), so wall / max(ideal, CPU) shows how much is left once that floor is met;
- drain: the time from the last question's start to the run's end, when fewer than
  ``concurrency`` questions are left to run (questions differ in length, so no runner can keep
  the endpoint full there; part of the gap to the ideal bound at high concurrency);
- the endpoint's peak and time-averaged number of requests in flight.

Concurrency 1 of a slow method runs ``--serial-questions`` questions (default 40) rather than
N: at 100 ms a call, deepnote's 200 questions one at a time take minutes, and the ratio is per
question anyway. Writes JSON (default bench/results/throughput.json).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from common import print_table, write_results
from sim_process import SimProcess

from noterag.eval import run_eval
from noterag.models import load_chat_model
from noterag.sample import sample_index, sample_questions

# Methods cheap enough to run all N questions one at a time.
FAST = {"vanilla"}


def write_dataset(path: Path, n: int) -> Path:
    base = sample_questions()
    with path.open("w") as out:
        for i in range(n):
            q = base[i % len(base)]
            out.write(json.dumps(q | {"id": f"{q['id']}-{i}"}) + "\n")
    return path


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


def bench_run(
    method: str, concurrency: int, n: int, dataset: Path, sim: SimProcess, index: Path, out: Path
) -> dict[str, Any]:
    model = load_chat_model(f"openai:sim@{sim.url}")
    sim.records()
    started, cpu = time.perf_counter(), time.process_time()
    run_eval(
        method,
        dataset,
        out,
        index=f"bm25:{index}",
        model=model,
        limit=n,
        concurrency=concurrency,
        progress=False,
        force=True,
        model_label="sim",
    )
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    records = sim.records()
    model_time = sum(r.end - r.start for r in records)
    busy, area = busy_time(records)
    rows = [json.loads(line) for line in (out / "results.jsonl").open()]
    errors = sum(1 for row in rows if row["error"])
    # After the last question starts, fewer than `concurrency` run: the bound cannot hold there.
    drain = max(r["finished_at"] for r in rows) - max(r["started_at"] for r in rows)
    return {
        "method": method,
        "concurrency": concurrency,
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
        "wall_over_floor": wall / max(model_time / concurrency, cpu),
        "drain_s": drain,
        "max_in_flight": max(r.in_flight for r in records),
        "mean_in_flight": area / busy if busy else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default="vanilla,deepnote")
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--serial-questions", type=int, default=40)
    parser.add_argument("--base-ms", type=float, default=100)
    parser.add_argument("--per-token-ms", type=float, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    index = sample_index()
    rows = []
    with (
        tempfile.TemporaryDirectory(prefix="noterag-throughput-") as tmp,
        SimProcess(args.base_ms, args.per_token_ms) as sim,
    ):
        dataset = write_dataset(Path(tmp) / "questions.jsonl", args.questions)
        for method in args.methods.split(","):
            # warm-up: imports, first graph build, connection pool
            bench_run(method, 2, 2, dataset, sim, index, Path(tmp) / "warm")
            for c in (int(x) for x in args.concurrency.split(",")):
                n = (
                    args.questions
                    if c > 1 or method in FAST
                    else min(args.questions, args.serial_questions)
                )
                row = bench_run(method, c, n, dataset, sim, index, Path(tmp) / f"{method}-{c}")
                rows.append(row)
                print(f"  {method} x{c}: {row['wall_s']:.1f} s", flush=True)

    print(
        f"\nEval throughput (run_eval against the simulated endpoint, {args.base_ms:g} ms + "
        f"{args.per_token_ms:g} ms/token; provisional)"
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
            ("per_q_ms", "ms/q", ".1f"),
            ("cpu_s", "CPU s", ".2f"),
            ("cpu_ms_per_q", "CPU ms/q", ".1f"),
            ("wall_over_floor", "wall/max(ideal,CPU)", ".3f"),
            ("drain_s", "drain s", ".2f"),
            ("max_in_flight", "max in flight", "d"),
            ("mean_in_flight", "mean in flight", ".1f"),
            ("errors", "errors", "d"),
        ],
    )
    print("target: wall <= 1.10x ideal (ideal = sum of model-call time / concurrency)")
    print("CPU = the client process's CPU time: a floor for the wall time whatever the concurrency")
    print(f"wrote {write_results('throughput', rows, args.json)}")


if __name__ == "__main__":
    main()
