"""Orchestration overhead, critical path and call counts per method, against a simulated endpoint.

For each method, N questions of the sample set run one at a time (``ainvoke``, as the eval
runner does) against bench/sim_endpoint.py in its own process (latency = base + per output
token, default 100 ms + 2 ms/token). Printed per method:

- wall time per question;
- model time: the time at least one model request was in flight, measured at the client around
  the HTTP request (openai client's ``_send_request``: connect, send, the endpoint's work,
  reading the reply);
- retrieval time: the time inside retriever calls (LangChain retriever spans);
- overhead = wall - (model + retrieval), as a share of wall (target <= 2 %), and its split:
  "client" = inside the chat model's LangChain span but outside HTTP (message conversion,
  request building, reply parsing in langchain-openai and the openai client), "graph" = the
  rest (LangGraph, noterag's nodes, LangChain callback dispatch);
- CPU: the benchmark process's CPU time per question (all threads: graph, HTTP client,
  retrieval), which a loaded machine does not inflate the way it inflates waiting: the floor of
  the overhead on a quiet machine, when all of it is on the critical path;
- critical path: the sum, over the method's sequential levels, of the slowest call of the level
  (a level = calls that may overlap: Amber's per-passage filters, ReSP's two summaries), from
  the endpoint's service times; wall / critical path (target <= 1.10x);
- LLM calls per question: counted by the endpoint, by the graph's ``llm_calls`` (must agree),
  and duplicates (the same prompt sent twice within one question: a wasted call), by stage.

Then the orchestration's CPU floor, without HTTP: DeepNote through a scripted model and a
keyword retriever (tests/scripted.py) against a bare LangGraph loop that makes the same model
calls (same prompts, same stage metadata) and the same retrievals through the same model and
retriever, one graph step per call, under ``ainvoke`` as the eval runner does. Printed: CPU ms
per model call of both and their ratio (noterag's own orchestration on top of LangGraph's;
target <= 1.15x).

    python bench/orchestration.py [--questions 5] [--base-ms 100] [--per-token-ms 2] [--json out.json]
    python bench/orchestration.py --floor-only [--floor-questions 200]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import openai._base_client as openai_client
from langchain_core.callbacks import BaseCallbackHandler

sys.path.insert(0, str(Path(__file__).parent))
from common import print_table, write_results
from sim_process import SimProcess

import noterag
from noterag.models import load_chat_model
from noterag.retrievers import load_retriever
from noterag.sample import sample_index, sample_questions

# Calls of these stages, when consecutive, may run concurrently.
CONCURRENT = {"chunk_filter", "sentence_filter", "global_summary", "local_summary"}

HTTP_SPANS: list[tuple[float, float]] = []


def _timed(send: Any) -> Any:
    async def timed_send(self: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return await send(self, *args, **kwargs)
        finally:
            HTTP_SPANS.append((start, time.perf_counter()))

    return timed_send


# The HTTP request as the client sees it; non-streaming calls read the whole body inside it.
openai_client.AsyncAPIClient._send_request = _timed(openai_client.AsyncAPIClient._send_request)


class Clock(BaseCallbackHandler):
    """Spans of chat-model and retriever calls as LangChain sees them, and each model call's
    prompt (to find duplicates)."""

    # Inline: a sync handler is otherwise run through the event loop's executor for every
    # event, and those thread hops would be the benchmark's own overhead, counted as noterag's.
    run_inline = True

    def __init__(self) -> None:
        self.spans: dict[str, dict[Any, list[float]]] = {"model": {}, "retriever": {}}
        self.prompts: list[str] = []

    def _start(self, kind: str, run_id: Any) -> None:
        self.spans[kind][run_id] = [time.perf_counter()]

    def _end(self, kind: str, run_id: Any) -> None:
        self.spans[kind][run_id].append(time.perf_counter())

    def on_chat_model_start(
        self, serialized: Any, messages: Any, *, run_id: Any, **kw: Any
    ) -> None:
        self._start("model", run_id)
        self.prompts.append("\n".join(str(m.content) for batch in messages for m in batch))

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
        last = levels[-1][-1] if levels else None
        if (
            last is not None
            and r.stage in CONCURRENT
            and last.stage in CONCURRENT
            and (
                r.stage == last.stage
                or {r.stage, last.stage} == {"global_summary", "local_summary"}
            )
            and r.start < max(x.end for x in levels[-1])
        ):
            levels[-1].append(r)
        else:
            levels.append([r])
    return sum(max(x.end - x.start for x in level) for level in levels)


async def bench_method(method: str, sim: SimProcess, questions: list[str]) -> dict[str, Any]:
    model = load_chat_model(f"openai:sim@{sim.url}")
    graph = noterag.build_graph(
        method, model=model, retriever=load_retriever(f"bm25:{sample_index()}")
    )
    await graph.ainvoke({"question": questions[0]})  # warm-up: imports, connection pool
    rows = []
    for question in questions:
        sim.records()
        HTTP_SPANS.clear()
        clock = Clock()
        t0, cpu0 = time.perf_counter(), time.process_time()
        state = await graph.ainvoke({"question": question}, config={"callbacks": [clock]})
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        records = sim.records()
        http, retrieval = list(HTTP_SPANS), clock.intervals("retriever")
        rows.append(
            {
                "wall": wall,
                "cpu": cpu,
                "model": union(http),
                "retrieval": union(retrieval),
                "overhead": wall - union(http + retrieval),
                "graph": wall - union(clock.intervals("model") + retrieval),
                "critical": critical_path(records),
                "calls": len(records),
                "state_calls": state.get("llm_calls", 0),
                "duplicates": len(clock.prompts) - len(set(clock.prompts)),
                "stages": Counter(r.stage for r in records),
                "max_in_flight": max((r.in_flight for r in records), default=0),
            }
        )
    n = len(rows)
    total = lambda key: sum(r[key] for r in rows)
    stages: Counter = Counter()
    for r in rows:
        stages.update(r["stages"])
    return {
        "method": method,
        "questions": n,
        "wall_s": total("wall") / n,
        "model_s": total("model") / n,
        "retrieval_s": total("retrieval") / n,
        "overhead_ms": 1000 * total("overhead") / n,
        "cpu_ms": 1000 * total("cpu") / n,
        "overhead_pct": 100 * total("overhead") / total("wall"),
        "client_ms": 1000 * (total("overhead") - total("graph")) / n,
        "graph_ms": 1000 * total("graph") / n,
        "critical_s": total("critical") / n,
        "wall_over_critical": total("wall") / total("critical"),
        "calls": total("calls") / n,
        "calls_agree": total("calls") == total("state_calls"),
        "duplicates": total("duplicates"),
        "max_in_flight": max(r["max_in_flight"] for r in rows),
        "calls_by_stage": {k: v / n for k, v in sorted(stages.items())},
    }


# --------------------------------------------------------------------------- CPU floor

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def _floor_parts() -> tuple[Any, Any, list[Any]]:
    """A scripted model and a keyword retriever that log, in order, every model call
    (stage, prompt) and every search (query, k) they serve."""
    from scripted import VELMORA_ROWS, KeywordRetriever, ScriptedModel, passages, velmora_script

    log: list[Any] = []

    class LoggingModel(ScriptedModel):
        def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any) -> Any:
            stage = (run_manager.metadata or {}).get("noterag_stage", "?") if run_manager else "?"
            log.append(("ask", stage, str(messages[-1].content)))
            return super()._generate(messages, stop, run_manager, **kw)

    class LoggingRetriever(KeywordRetriever):
        def _get_relevant_documents(self, query: str, *, run_manager: Any = None, k: int | None = None) -> Any:
            log.append(("search", query, k))
            return super()._get_relevant_documents(query, run_manager=run_manager, k=k)

        # Async as a real index is (no executor thread hop per search, in either graph).
        async def _aget_relevant_documents(self, query: str, *, run_manager: Any = None, k: int | None = None) -> Any:
            return self._get_relevant_documents(query, run_manager=run_manager, k=k)

    # Fixed replies (no list consumed in order), so that every run of a question makes the same
    # calls: the review accepts each note, so DeepNote runs its max_steps.
    script = {k: v[0] if isinstance(v, list) else v for k, v in velmora_script().items()}
    return LoggingModel(script=script), LoggingRetriever(passages=passages(*VELMORA_ROWS)), log


def bare_loop(model: Any, retriever: Any) -> Any:
    """The framework's floor: a StateGraph whose one node makes the next call of ``plan`` (a
    model call with its stage metadata, or a search) and loops until the plan is done."""
    from langgraph.graph import END, START, StateGraph
    from typing_extensions import TypedDict

    class State(TypedDict):
        plan: list[Any]
        i: int
        replies: list[str]

    async def step(state: State) -> dict[str, Any]:
        kind, first, second = state["plan"][state["i"]]
        if kind == "ask":
            config = {"run_name": first, "tags": ["nostream"], "metadata": {"noterag_stage": first}}
            reply = (await model.ainvoke(second, config=config)).content
        else:
            reply = str(len(await retriever.ainvoke(first, k=second)))
        return {"i": state["i"] + 1, "replies": [*state["replies"], reply]}

    graph = StateGraph(State)
    graph.add_node("step", step)
    graph.add_edge(START, "step")
    graph.add_conditional_edges("step", lambda s: "step" if s["i"] < len(s["plan"]) else END)
    return graph.compile()


async def bench_floor(questions: list[str], method: str = "deepnote") -> dict[str, Any]:
    """CPU per model call of ``method`` and of the bare loop replaying its calls."""
    model, retriever, log = _floor_parts()
    graph = noterag.build_graph(method, model=model, retriever=retriever)
    plans = []
    for question in questions[:2]:  # warm-up: imports, caches
        await graph.ainvoke({"question": question})
    log.clear()
    cpu0 = time.process_time()
    for question in questions:
        start = len(log)
        await graph.ainvoke({"question": question})
        plans.append(log[start:])
    method_cpu = time.process_time() - cpu0
    calls = sum(1 for entry in log if entry[0] == "ask")
    searches = len(log) - calls
    loop = bare_loop(model, retriever)
    for plan in plans[:2]:
        await loop.ainvoke({"plan": plan, "i": 0, "replies": []})
    log.clear()
    cpu0 = time.process_time()
    for plan in plans:
        await loop.ainvoke({"plan": plan, "i": 0, "replies": []}, {"recursion_limit": 10_000})
    loop_cpu = time.process_time() - cpu0
    assert log == [e for plan in plans for e in plan], "the bare loop made other calls"
    return {
        "method": method,
        "questions": len(questions),
        "calls": calls / len(questions),
        "searches": searches / len(questions),
        "method_ms_per_call": 1000 * method_cpu / calls,
        "loop_ms_per_call": 1000 * loop_cpu / calls,
        "ratio": method_cpu / loop_cpu,
    }


def print_floor(floor: dict[str, Any]) -> None:
    print(
        f"\nOrchestration CPU floor (no HTTP: scripted model, keyword retriever; "
        f"{floor['questions']} questions, {floor['calls']:.0f} model calls and "
        f"{floor['searches']:.0f} searches each)"
    )
    print_table(
        [floor],
        [
            ("method", "method", "s"),
            ("method_ms_per_call", "noterag CPU ms/call", ".3f"),
            ("loop_ms_per_call", "bare loop CPU ms/call", ".3f"),
            ("ratio", "ratio", ".2f"),
        ],
    )
    print("target: ratio <= 1.15x")


def main() -> None:
    parser = argparse.ArgumentParser(description="orchestration overhead and critical path")
    parser.add_argument("--questions", type=int, default=5)
    parser.add_argument("--base-ms", type=float, default=100)
    parser.add_argument("--per-token-ms", type=float, default=2)
    # The note methods and the two single-call baselines (the README's table). The simulated
    # endpoint knows their prompts' stages; the other baselines need their own stage phrases
    # there (and flare / replug / self-rag log-probabilities it does not return).
    parser.add_argument("--methods", default="adaptive-note,deepnote,amber,resp,no-retrieval,vanilla")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--floor-questions", type=int, default=200)
    parser.add_argument("--floor-only", action="store_true", help="only the no-HTTP CPU floor")
    args = parser.parse_args()
    questions = [q["question"] for q in sample_questions()]
    floor_questions = [questions[i % len(questions)] for i in range(args.floor_questions)]
    floor = asyncio.run(bench_floor(floor_questions))
    if args.floor_only:
        print_floor(floor)
        print(f"wrote {write_results('orchestration_floor', [floor], args.json)}")
        return
    questions = [questions[i % len(questions)] for i in range(args.questions)]
    with SimProcess(args.base_ms, args.per_token_ms) as sim:
        results = [asyncio.run(bench_method(m, sim, questions)) for m in args.methods.split(",")]
    print(
        f"\nOrchestration ({args.questions} questions per method, one at a time; "
        f"{args.base_ms:g} ms + {args.per_token_ms:g} ms/token; provisional)"
    )
    print_table(
        results,
        [
            ("method", "method", "s"),
            ("wall_s", "wall s", ".3f"),
            ("model_s", "model s", ".3f"),
            ("retrieval_s", "retr s", ".4f"),
            ("overhead_pct", "overhead %", ".2f"),
            ("overhead_ms", "overhead ms", ".1f"),
            ("client_ms", "client ms", ".1f"),
            ("graph_ms", "graph ms", ".1f"),
            ("cpu_ms", "CPU ms", ".1f"),
            ("critical_s", "critical s", ".3f"),
            ("wall_over_critical", "wall/crit", ".3f"),
            ("calls", "calls/q", ".1f"),
            ("calls_agree", "= llm_calls", ""),
            ("duplicates", "dup calls", "d"),
            ("max_in_flight", "max in flight", "d"),
        ],
    )
    print("calls per question by stage:")
    for r in results:
        print(
            f"  {r['method']:14} "
            + ", ".join(f"{k} {v:.1f}" for k, v in r["calls_by_stage"].items())
        )
    print("targets: overhead <= 2 % of wall; wall / critical path <= 1.10x; no duplicate calls")
    print_floor(floor)
    print(f"wrote {write_results('orchestration', [*results, floor], args.json)}")


if __name__ == "__main__":
    main()
