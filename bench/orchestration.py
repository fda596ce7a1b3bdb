"""Orchestration overhead and critical path per method, against a simulated endpoint.

For each method, N questions of the sample set run one at a time against bench/sim_endpoint.py
(latency = base + per-token, default 100 ms + 2 ms/token). Printed per method:

- wall time per question;
- model time: the time at least one model call was in flight, measured by the client (the union
  of the calls' intervals, HTTP client included);
- retrieval time: the time inside retriever calls;
- overhead = wall - (model + retrieval), as a share of wall (target <= 2 %);
- critical path: the sum, over the method's sequential levels, of the slowest call of the level
  (a level = calls that may overlap: Amber's per-passage filters, ReSP's two summaries);
  wall / critical path (target <= 1.10x: the overlapping calls really overlap);
- LLM calls per question, by stage.

    python bench/orchestration.py [--questions 5] [--base-ms 100] [--per-token-ms 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler

sys.path.insert(0, str(Path(__file__).parent))
from sim_endpoint import SimModel, start  # noqa: E402

import noterag  # noqa: E402
from noterag.models import load_chat_model  # noqa: E402
from noterag.retrievers import load_retriever  # noqa: E402
from noterag.sample import sample_index, sample_questions  # noqa: E402

# Calls of these stages, when consecutive, may run concurrently.
CONCURRENT = {"chunk_filter", "sentence_filter", "global_summary", "local_summary"}


class Clock(BaseCallbackHandler):
    """Client-side spans of model and retriever calls: the time noterag waits on them, HTTP
    client included (what is left of the wall time is the graph's own work)."""

    def __init__(self) -> None:
        self.spans: dict[str, dict[Any, list[float]]] = {"model": {}, "retriever": {}}

    def _start(self, kind: str, run_id: Any) -> None:
        self.spans[kind][run_id] = [time.perf_counter()]

    def _end(self, kind: str, run_id: Any) -> None:
        self.spans[kind][run_id].append(time.perf_counter())

    def on_chat_model_start(self, serialized: Any, messages: Any, *, run_id: Any, **kw: Any) -> None:
        self._start("model", run_id)

    def on_llm_end(self, response: Any, *, run_id: Any, **kw: Any) -> None:
        self._end("model", run_id)

    def on_retriever_start(self, serialized: Any, query: str, *, run_id: Any, **kw: Any) -> None:
        self._start("retriever", run_id)

    def on_retriever_end(self, documents: Any, *, run_id: Any, **kw: Any) -> None:
        self._end("retriever", run_id)

    def intervals(self, kind: str) -> list[tuple[float, float]]:
        return [tuple(s) for s in self.spans[kind].values() if len(s) == 2]  # type: ignore[misc]


def union(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def critical_path(records: list[Any]) -> float:
    """Sum over levels of the slowest call; consecutive calls of overlappable stages form a level
    (ReSP's global and local summary of one iteration are one level)."""
    levels: list[list[Any]] = []
    for r in sorted(records, key=lambda r: r.start):
        if levels and r.stage in CONCURRENT and levels[-1][-1].stage in CONCURRENT and (
            r.stage == levels[-1][-1].stage or {r.stage, levels[-1][-1].stage} == {"global_summary", "local_summary"}
        ) and r.start < max(x.end for x in levels[-1]):
            levels[-1].append(r)
        else:
            levels.append([r])
    return sum(max(x.end - x.start for x in level) for level in levels)


async def bench_method(method: str, url: str, sim: SimModel, questions: list[str]) -> dict[str, Any]:
    model = load_chat_model(f"openai:sim@{url}")
    graph = noterag.build_graph(method, model=model, retriever=load_retriever(f"bm25:{sample_index()}"))
    await graph.ainvoke({"question": questions[0]})  # warm-up: imports, connection pool
    rows = []
    for question in questions:
        sim.records.clear()
        clock = Clock()
        t0 = time.perf_counter()
        await graph.ainvoke({"question": question}, config={"callbacks": [clock]})
        wall = time.perf_counter() - t0
        records = list(sim.records)
        both = union(clock.intervals("model") + clock.intervals("retriever"))
        rows.append(
            {
                "wall": wall,
                "model": union(clock.intervals("model")),
                "retrieval": union(clock.intervals("retriever")),
                "overhead": wall - both,
                "critical": critical_path(records),
                "calls": len(records),
                "stages": Counter(r.stage for r in records),
                "max_in_flight": max((r.in_flight for r in records), default=0),
            }
        )
    n = len(rows)
    mean = lambda key: sum(r[key] for r in rows) / n  # noqa: E731
    stages: Counter = Counter()
    for r in rows:
        stages.update(r["stages"])
    return {
        "method": method,
        "questions": n,
        "wall_s": mean("wall"),
        "model_s": mean("model"),
        "retrieval_s": mean("retrieval"),
        "overhead_s": mean("overhead"),
        "overhead_pct": 100 * sum(r["overhead"] for r in rows) / sum(r["wall"] for r in rows),
        "critical_s": mean("critical"),
        "wall_over_critical": sum(r["wall"] for r in rows) / sum(r["critical"] for r in rows),
        "calls": mean("calls"),
        "max_in_flight": max(r["max_in_flight"] for r in rows),
        "calls_by_stage": {k: v / n for k, v in sorted(stages.items())},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="orchestration overhead and critical path")
    parser.add_argument("--questions", type=int, default=5)
    parser.add_argument("--base-ms", type=float, default=100)
    parser.add_argument("--per-token-ms", type=float, default=2)
    parser.add_argument("--methods", default=",".join(noterag.METHODS))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    sim = SimModel(args.base_ms / 1000, args.per_token_ms / 1000)
    server, url = start(sim)
    questions = [q["question"] for q in sample_questions()][: args.questions]
    results = [asyncio.run(bench_method(m, url, sim, questions)) for m in args.methods.split(",")]
    server.shutdown()
    print(f"{'method':14} {'wall s':>7} {'model s':>8} {'retr s':>7} {'overhead':>9} {'wall/crit':>9} {'calls':>6} {'max in flight':>13}")
    for r in results:
        print(
            f"{r['method']:14} {r['wall_s']:7.3f} {r['model_s']:8.3f} {r['retrieval_s']:7.4f} "
            f"{r['overhead_pct']:8.2f}% {r['wall_over_critical']:8.3f}x {r['calls']:6.1f} {r['max_in_flight']:13d}"
        )
    print("targets: overhead <= 2 % of wall; wall / critical path <= 1.10x")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=dict))


if __name__ == "__main__":
    main()
