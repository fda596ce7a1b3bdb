"""The eval on a Ray cluster beside worker processes and one process, over two model replicas.

    python bench/cluster.py                      # deepnote, 200 questions, total concurrency 32
    python bench/cluster.py --questions 100 --methods vanilla,deepnote

Two simulated endpoints (bench/sim_process.py, each in its own process: two replicas of one
model, 100 ms + 2 ms per output token) serve ``openai:sim@<url1>,<url2>`` (requests spread over
the replicas, fewest outstanding first: noterag.models.endpoints). Each method answers the same
questions at the same total concurrency three ways, interleaved ``--rounds`` times:

- one process (``concurrency`` = the total);
- ``--workers 2`` (forked worker processes, total / 2 turns each);
- ``--ray local --workers 2`` (two Ray actors, total / 2 turns each, on a local cluster started
  once for the benchmark, so its start-up is not in the figures; ``noterag eval --ray local``
  starts one per run).

Each mode runs once on 4 questions first (not recorded): the imports, the first graph build
and Ray's worker processes are then not in round 1's figures. ``--rounds``: medians with the
spread (min-max) of wall / ideal.

Printed per run: wall (the run_eval call), model (the sum of both replicas' service times),
ideal = model / total concurrency, wall / ideal, and each replica's share of the requests;
start-up (from the call to the first question's start: workers forked, or Ray actors placed
and each building its graph) and answering / ideal (from the first question's start to the
last one's end).
Writes JSON (default bench/results/cluster.json).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from common import print_table, sim_eval, write_dataset, write_results
from sim_process import SimProcess, latency_arguments

from noterag.retrievers.sample import sample_index

MODES = ("one process", "workers 2", "ray 2 actors")


def one_run(
    mode: str,
    method: str,
    total: int,
    dataset: Path,
    index: Path,
    sims: list[SimProcess],
    out: Path,
    address: str | None,
) -> dict[str, Any]:
    model = "openai:sim@" + ",".join(sim.url for sim in sims)
    workers = 1 if mode == "one process" else 2
    for sim in sims:
        sim.records()
    started = time.perf_counter()
    summary = sim_eval(
        method, dataset, out, index, model, concurrency=max(1, total // workers),
        workers=workers, ray=address if mode.startswith("ray") else None,
    )  # fmt: skip
    wall = time.perf_counter() - started
    rows = [json.loads(line) for line in (out / "results.jsonl").open()]
    # From the first question's start to the last one's end: the run without its start-up
    # (worker processes forked, Ray actors placed, each building its graph).
    answering = max(r["finished_at"] for r in rows) - min(r["started_at"] for r in rows)
    served = [sim.records() for sim in sims]
    model_s = sum(r.end - r.start for records in served for r in records) or 1e-9
    requests = sum(len(records) for records in served)
    return {
        "method": method,
        "mode": mode,
        "total_concurrency": total,
        "questions": summary["n"],
        "errors": summary["n_errors"],
        "requests": requests,
        "replica_share": [round(len(records) / max(1, requests), 3) for records in served],
        "wall_s": wall,
        "model_s": model_s,
        "ideal_s": model_s / total,
        "wall_over_ideal": wall / (model_s / total),
        "startup_s": wall - answering,
        "answering_over_ideal": answering / (model_s / total),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default="deepnote")
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--total-concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    latency_arguments(parser)
    parser.add_argument("--json", type=Path, help="default: bench/results/cluster.json")
    args = parser.parse_args()

    import ray

    ray.init(include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    address = ray.get_runtime_context().gcs_address
    rows: list[dict[str, Any]] = []
    try:
        with (
            tempfile.TemporaryDirectory() as tmp,
            SimProcess(args.base_ms, args.per_token_ms) as first,
            SimProcess(args.base_ms, args.per_token_ms) as second,
        ):
            root = Path(tmp)
            dataset = write_dataset(root / "questions.jsonl", args.questions)
            index = sample_index(root / "cache")
            warm = write_dataset(root / "warm.jsonl", 4)
            for method in args.methods.split(","):
                # warm-up, not recorded: imports, the first graph build, Ray's worker processes
                for mode in MODES:
                    one_run(
                        mode, method, args.total_concurrency, warm, index, [first, second],
                        root / "warm", address,
                    )  # fmt: skip
                for round_ in range(args.rounds):
                    for mode in MODES:
                        row = one_run(
                            mode, method, args.total_concurrency, dataset, index,
                            [first, second], root / "run", address,
                        )  # fmt: skip
                        row["round"] = round_ + 1
                        rows.append(row)
                        print(
                            f"  {method} {mode} round {round_ + 1}: {row['wall_s']:.1f} s, "
                            f"{row['wall_over_ideal']:.3f}x ideal",
                            flush=True,
                        )
    finally:
        ray.shutdown()
    medians = []
    for method in args.methods.split(","):
        for mode in MODES:
            mine = [r for r in rows if r["method"] == method and r["mode"] == mode]
            medians.append(
                {
                    "method": method,
                    "mode": mode,
                    "runs": len(mine),
                    "wall_s": statistics.median(r["wall_s"] for r in mine),
                    "wall_over_ideal": statistics.median(r["wall_over_ideal"] for r in mine),
                    "min": min(r["wall_over_ideal"] for r in mine),
                    "max": max(r["wall_over_ideal"] for r in mine),
                    "startup_s": statistics.median(r["startup_s"] for r in mine),
                    "answering_over_ideal": statistics.median(
                        r["answering_over_ideal"] for r in mine
                    ),
                    "replica_share": mine[-1]["replica_share"],
                }
            )
    print(
        f"\n{args.questions} questions, total concurrency {args.total_concurrency}, "
        "2 simulated replicas (median over rounds)"
    )
    print_table(
        medians,
        [
            ("method", "method", ""),
            ("mode", "mode", ""),
            ("runs", "runs", "d"),
            ("wall_s", "wall s", ".1f"),
            ("wall_over_ideal", "wall/ideal", ".3f"),
            ("min", "min", ".3f"),
            ("max", "max", ".3f"),
            ("startup_s", "start-up s", ".1f"),
            ("answering_over_ideal", "answering/ideal", ".3f"),
        ],
    )
    print(f"wrote {write_results('cluster', {'runs': rows, 'medians': medians}, args.json)}")


if __name__ == "__main__":
    main()
