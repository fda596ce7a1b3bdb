"""Orchestration overhead, critical path and call counts per method, against a simulated endpoint.

For each method, N questions of the sample set run one at a time (``ainvoke``, as the eval
runner does) against bench/sim_endpoint.py in its own process (latency = base + per output
token, default 100 ms + 2 ms/token). Printed per method:

- wall time per question;
- model time: the time at least one model request was in flight, measured at the client around
  the HTTP request (openai client's ``_send_request``: connect, send, the endpoint's work,
  reading the reply);
- retrieval time: the time inside retriever calls (LangChain retriever spans);
- overhead = wall - (model + retrieval), as a share of wall, and its split:
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
  and duplicates (the same prompt sent twice within one question: a wasted call), by stage;
- the bound under the overhead: right after each question's run, the same requests (each
  graph step's, as the run sent them) made again by a plain ``ChatOpenAI`` loop (LangChain's
  and the openai client's own overhead) and by LangGraph running the method's own graph with
  plain nodes over it (``http_loops``), under the same callback: their overhead beside the
  method's (target: a note method's overhead at most 1 point of wall above that same-graph
  loop's).

Then the orchestration's CPU floor, without HTTP, for one method of each family (the note
loop: DeepNote; ReSP; Amber; a one-call baseline: vanilla RAG; ``--floor-methods``): the
method through a scripted model and a keyword retriever (tests/scripted.py; the retriever a
``SearchMixin``, as noterag's own indexes are, searched on the event loop) against three
LangGraph loops that make the same model calls (same prompts, same stage metadata) and the same
searches through the same model and retriever, under ``ainvoke`` as the eval runner does:

- the bare loop: one graph step per call or search, a three-field state (the framework's floor);
- the same-steps loop: the graph steps the method's nodes took (the question step and any step
  that made no call included), each making that node's calls: what the number of steps costs;
- the same-graph loop: the method's own graph (its state schema, nodes, edges, conditional-edge
  routes, retry policies), each node a plain async function that makes its node's calls and
  returns the update the node wrote: LangGraph's cost of the method's graph, so that the method
  over it is noterag's own code (target: DeepNote <= 1.15x).

Printed: CPU ms per model call of the four and the method's ratio to each (and to the bare loop
in every round), then where the method's CPU goes: the top entries by own time under noterag,
under langchain-core (the Runnables a node and a model call run through) and under langgraph of
one profiled pass (cProfile on CPU time). The sides are timed in turn
question by question (a busy machine slows them alike), the median of ``--floor-rounds``
rounds.

    python bench/orchestration.py [--questions 5] [--base-ms 100] [--per-token-ms 2] [--json out.json]
    python bench/orchestration.py --floor-only [--floor-questions 200] [--floor-rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import statistics
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import openai
import openai._base_client as openai_client
from langchain_core.callbacks import BaseCallbackHandler

sys.path.insert(0, str(Path(__file__).parent))
from common import print_table, write_results
from loops import (
    bare_loop,
    graph_step,
    in_flight_sets,
    record_requests,
    replay_sets,
    request_graph,
    same_graph,
    send_sets,
    task_steps,
)
from sim_process import SimProcess, latency_arguments, latency_text

import noterag
from noterag.models import ModelSettings, load_chat_model
from noterag.retrievers import load_retriever
from noterag.retrievers.base import SearchMixin
from noterag.retrievers.sample import sample_index, sample_questions

# Issue 41's targets: noterag's own code over LangGraph running the same graph with plain nodes
# (DeepNote, no HTTP); at the HTTP request, a note method's overhead above that same-graph loop's
# (points of wall); wall over the critical path
TARGET_OWN_CODE = 1.15
TARGET_ABOVE_GRAPH = 1.0
TARGET_CRITICAL = 1.10
NOTE_METHODS = ("adaptive-note", "deepnote", "amber", "resp")

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
    """Spans of chat-model and retriever calls as LangChain sees them, each model call's prompt
    (to find duplicates), and the graph's steps: each node run's step, node and the update it
    returned (the runs directly under the graph's own), which the loops beside replay."""

    # Inline: a sync handler is otherwise run through the event loop's executor for every
    # event, and those thread hops would be the benchmark's own overhead, counted as noterag's.
    run_inline = True

    def __init__(self) -> None:
        self.spans: dict[str, dict[Any, list[float]]] = {"model": {}, "retriever": {}}
        self.prompts: list[str] = []
        self.root: Any = None
        self.tasks: dict[Any, list[Any]] = {}

    def on_chain_start(
        self,
        serialized: Any,
        inputs: Any,
        *,
        run_id: Any,
        parent_run_id: Any = None,
        metadata: Any = None,
        **kw: Any,
    ) -> None:
        if parent_run_id is None:
            self.root = run_id
        elif parent_run_id == self.root and "langgraph_step" in (metadata or {}):
            self.tasks[run_id] = [metadata["langgraph_step"], metadata["langgraph_node"], None]

    def on_chain_end(self, outputs: Any, *, run_id: Any, **kw: Any) -> None:
        if run_id in self.tasks:
            self.tasks[run_id][2] = outputs

    def steps(self) -> list[tuple[int, str, Any]]:
        """The run's graph steps in order, as ``loops.task_steps`` gives them."""
        found = sorted(tuple(task) for task in self.tasks.values())
        if len({step for step, _, _ in found}) != len(found):
            raise SystemExit("orchestration: a graph step ran several nodes")
        return found  # type: ignore[return-value]

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
    sent = record_requests(model, graph_step)  # a list append a request
    beside = await http_loops(method, graph, sim.url, questions[0])
    loops: dict[str, list[float]] = {"same_graph": [], "chat_loop": []}
    rows = []
    for question in questions:
        sim.records()
        HTTP_SPANS.clear()
        sent.clear()
        clock = Clock()
        t0, cpu0 = time.perf_counter(), time.process_time()
        state = await graph.ainvoke({"question": question}, config={"callbacks": [clock]})
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        records = sim.records()
        http, retrieval = list(HTTP_SPANS), clock.intervals("retriever")
        # the run's own steps and requests, replayed in turn by the loops beside (which time
        # their own requests in HTTP_SPANS: this run's were read above)
        plan = replay_sets(clock.steps(), in_flight_sets(sent), f"orchestration: {method}")
        for name, overheads in loops.items():
            overheads.append(await beside(name, question, plan))
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
    } | {f"{name}_overhead_ms": 1000 * statistics.fmean(v) for name, v in loops.items()}


async def http_loops(
    method: str, graph: Any, url: str, warm_up: str
) -> Callable[[str, str, list[Any]], Awaitable[float]]:
    """The bound under the method's overhead at the HTTP request: the requests of the method's
    run of a question (its graph steps, from the ``Clock``, and the requests each sent, recorded
    on its model's HTTP client: ``replay_sets``) made again by two loops without noterag, under
    the same ``Clock``, right after it (so that the sides share the machine's load):
    - the ChatOpenAI loop (``"chat_loop"``) sends them through a plain ``ChatOpenAI`` (each
      step's sets in turn, a set's calls at once): LangChain's and the openai client's own
      overhead;
    - the same-graph loop (``"same_graph"``, bench/loops.py's ``same_graph``) runs the
      method's own graph (state, nodes, edges, routes, retry policies) with plain nodes sending
      them through that ``ChatOpenAI`` and returning the updates the method's nodes returned:
      LangGraph's over it.
    Returns ``overhead(loop, question, plan)``: the seconds of the loop's run of ``plan``
    outside its HTTP requests (its wall - the time a request was in flight)."""
    from langchain_openai import ChatOpenAI

    # the method's sampling (noterag's model sends these); its own HTTP client: langchain-openai's
    # shared default is bound to the first event loop that used it, and each method runs on its own
    settings = ModelSettings.from_env()
    chat = ChatOpenAI(
        model="sim",
        base_url=url,
        api_key="EMPTY",
        http_async_client=openai.DefaultAsyncHttpxClient(),
        temperature=settings.temperature,
        top_p=settings.top_p,
    )
    pending: list[Any] = []
    replay = request_graph(graph.builder, chat, pending.pop, f"orchestration: {method}")

    async def same_graph_loop(question: str, plan: list[Any], clock: Clock) -> None:
        pending[:] = plan[::-1]
        config = {"callbacks": [clock], "recursion_limit": 10_000}
        await replay.ainvoke({"question": question}, config)
        assert not pending, "the replay stopped before the method's last step"

    async def chat_loop(question: str, plan: list[Any], clock: Clock) -> None:
        timed = chat.with_config(callbacks=[clock])
        for _, sets, _ in plan:
            await send_sets(timed, sets)

    loops = {"same_graph": same_graph_loop, "chat_loop": chat_loop}

    async def overhead(name: str, question: str, plan: list[Any]) -> float:
        HTTP_SPANS.clear()
        t0 = time.perf_counter()
        await loops[name](question, plan, Clock())
        return time.perf_counter() - t0 - union(list(HTTP_SPANS))

    # warm-up: the client's connection, lazy imports
    await chat.ainvoke(warm_up)
    return overhead


# --------------------------------------------------------------------------- CPU floor

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def _floor_parts() -> tuple[Any, Any, list[Any], list[Any]]:
    """A scripted model and a keyword retriever that log, in order, every model call
    (stage, prompt) and every search (query, k) they serve, and beside each the graph step
    (``langgraph_step``) it was made in."""
    from scripted import VELMORA_ROWS, KeywordRetriever, ScriptedModel, passages, velmora_script

    log: list[Any] = []
    steps: list[Any] = []

    def step_of(run_manager: Any) -> Any:
        return (run_manager.metadata or {}).get("langgraph_step") if run_manager else None

    class LoggingModel(ScriptedModel):
        def _generate(
            self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any
        ) -> Any:
            stage = (run_manager.metadata or {}).get("noterag_stage", "?") if run_manager else "?"
            log.append(("ask", stage, str(messages[-1].content)))
            steps.append(step_of(run_manager))
            return super()._generate(messages, stop, run_manager, **kw)

    # A SearchMixin, as noterag's own indexes are: their async path takes k, so both sides
    # await it on the event loop (noterag.retrievers.calls; another retriever kind would be
    # searched in a worker thread by noterag and not by the bare loop, a hop per search counted
    # as noterag's).
    class LoggingRetriever(SearchMixin, KeywordRetriever):
        def _get_relevant_documents(
            self, query: str, *, run_manager: Any = None, k: int | None = None
        ) -> Any:
            log.append(("search", query, k))
            steps.append(step_of(run_manager))
            return KeywordRetriever._get_relevant_documents(
                self, query, run_manager=run_manager, k=k
            )

        # On the event loop, as a quick in-process index is searched (SearchMixin._quick).
        async def _aget_relevant_documents(
            self, query: str, *, run_manager: Any = None, k: int | None = None
        ) -> Any:
            return self._get_relevant_documents(query, run_manager=run_manager, k=k)

    # Fixed replies (no list consumed in order), so that every run of a question makes the same
    # calls: the review accepts each note, so DeepNote runs its max_steps.
    script = {k: v[0] if isinstance(v, list) else v for k, v in velmora_script().items()}
    model = LoggingModel(script=script)
    return model, LoggingRetriever(passages=passages(*VELMORA_ROWS)), log, steps


def _performer(model: Any, retriever: Any) -> Any:
    """``perform(effects)``: the model calls and searches of one recorded step, made as the
    method made them (the step's searches, and the calls of stages that overlap, concurrently;
    other calls in turn), with the same stage metadata; returns their replies."""

    async def effect(kind: str, first: Any, second: Any) -> str:
        if kind == "ask":
            config = {"run_name": first, "tags": ["nostream"], "metadata": {"noterag_stage": first}}
            return (await model.ainvoke(second, config=config)).content
        return str(len(await retriever.ainvoke(first, k=second)))

    async def perform(effects: list[Any]) -> list[str]:
        together = all(kind == "search" for kind, _, _ in effects) or all(
            kind == "ask" and stage in CONCURRENT for kind, stage, _ in effects
        )
        if len(effects) > 1 and together:
            return list(await asyncio.gather(*(effect(*e) for e in effects)))
        return [await effect(*e) for e in effects]

    return perform


def graph_loop(
    method_graph: Any, model: Any, retriever: Any, *, runnable_nodes: bool = False
) -> Any:
    """LangGraph's own cost of the method's graph (bench/loops.py's ``same_graph``): each node a
    plain async function that makes the effects its node made and returns the update it wrote
    (recorded from a run). What the method costs beyond this is noterag's code in its nodes.
    Returns ``replay(question, plan)``, which runs it over one recorded run's
    ``[(node, effects, update), ...]``."""
    pending: list[Any] = []
    compiled = same_graph(
        method_graph.builder,
        pending.pop,
        _performer(model, retriever),
        "orchestration",
        runnable_nodes=runnable_nodes,
    )

    async def replay(question: str, plan: list[Any]) -> None:
        pending[:] = plan[::-1]
        await compiled.ainvoke({"question": question}, {"recursion_limit": 10_000})
        assert not pending, "the replay stopped before the method's last step"

    return replay


async def _cpu(run: Any, inputs: list[Any]) -> float:
    """CPU seconds of ``run`` over ``inputs``, one after the other."""
    cpu0 = time.process_time()
    for value in inputs:
        await run(value)
    return time.process_time() - cpu0


async def bench_floor(
    questions: list[str], method: str = "deepnote", rounds: int = 3, top: int = 6
) -> dict[str, Any]:
    """CPU per model call of ``method`` and of three LangGraph loops replaying its calls and
    searches: one graph step per call or search ("bare loop", the framework's floor); the same
    graph steps as the method's nodes ran them, a step with no call included, on the bare
    loop's three-field state ("same-steps loop": the cost of the method's number of steps);
    the method's own graph (its state, nodes, edges, routes) with each node a plain function
    returning the update the method's node wrote ("same-graph loop": LangGraph's cost of the
    method's graph, so that method / same-graph is noterag's own code). The four are timed in
    turn, question by question, ``rounds`` times over the questions; each figure is the median
    of its rounds (a busy machine slows some rounds). Then one profiled pass of the method
    (cProfile on CPU time) gives the ``top`` functions by own time under noterag and the
    ``top`` under langgraph: where the time goes."""
    model, retriever, log, where = _floor_parts()
    graph = noterag.build_graph(method, model=model, retriever=retriever)
    for question in questions[:2]:  # warm-up: imports, caches
        await graph.ainvoke({"question": question})
    log.clear()
    where.clear()
    starts: list[int] = []
    for question in questions:  # the calls each run makes, and in which graph step
        starts.append(len(log))
        await graph.ainvoke({"question": question})
    entries = list(zip(log, where, strict=True))
    runs = [entries[a:b] for a, b in zip(starts, [*starts[1:], len(entries)], strict=True)]
    # one untimed run per distinct question: the steps it takes, their nodes and updates (each
    # run of a question takes the same ones, the replies being fixed; the replays check the calls)
    ran = {
        q: await task_steps(graph, {"question": q}, "orchestration")
        for q in dict.fromkeys(questions)
    }
    per_call = [[[entry] for entry, _ in run] for run in runs]
    same_steps = [
        [[entry for entry, step in run if step == s] for s, _, _ in ran[question]]
        for question, run in zip(questions, runs, strict=True)
    ]
    same_graph = [
        [
            (name, effects, update)
            for (_, name, update), effects in zip(ran[question], plan, strict=True)
        ]
        for question, plan in zip(questions, same_steps, strict=True)
    ]
    expected = [entry for entry, _ in entries]
    assert [e for plan in same_steps for step in plan for e in step] == expected, (
        "a call was made outside the steps the run took"
    )
    calls = sum(1 for entry in expected if entry[0] == "ask")
    loop = bare_loop(_performer(model, retriever))
    replay_graph = graph_loop(graph, model, retriever)
    replay_runnables = graph_loop(graph, model, retriever, runnable_nodes=True)

    async def ask(question: str) -> None:
        await graph.ainvoke({"question": question})

    async def replay(plan: list[Any]) -> None:
        await loop.ainvoke({"plan": plan, "i": 0, "replies": []}, {"recursion_limit": 10_000})

    for plan in [*per_call[:2], *same_steps[:2]]:  # warm-up
        await replay(plan)
    for question, plan in list(zip(questions, same_graph, strict=True))[:2]:
        await replay_graph(question, plan)
        await replay_runnables(question, plan)
    # Timed in turn question by question, so that the sides share the machine's load.
    sides = ("method", "loop", "steps", "graph", "runnables")
    cpu: dict[str, list[float]] = {side: [] for side in sides}
    for r in range(rounds):
        spent = dict.fromkeys(cpu, 0.0)
        log.clear()
        for i, question in enumerate(questions):
            spent["method"] += await _cpu(ask, [question])
            spent["loop"] += await _cpu(replay, [per_call[i]])
            spent["steps"] += await _cpu(replay, [same_steps[i]])
            cpu0 = time.process_time()
            await replay_graph(question, same_graph[i])
            spent["graph"] += time.process_time() - cpu0
            cpu0 = time.process_time()
            await replay_runnables(question, same_graph[i])
            spent["runnables"] += time.process_time() - cpu0
        for key, value in spent.items():
            cpu[key].append(value)
        assert log == [e for run in runs for _ in sides for e, _ in run], (
            f"round {r + 1}: a side made other calls"
        )
    method_cpu, loop_cpu, steps_cpu, graph_cpu, runnables_cpu = (
        statistics.median(cpu[k]) for k in sides
    )
    return {
        "method": method,
        "questions": len(questions),
        "rounds": rounds,
        "calls": calls / len(questions),
        "searches": (len(expected) - calls) / len(questions),
        "graph_steps": sum(len(p) for p in same_steps) / len(questions),
        "method_ms_per_call": 1000 * method_cpu / calls,
        "loop_ms_per_call": 1000 * loop_cpu / calls,
        "ratio": method_cpu / loop_cpu,
        "ratio_rounds": [m / b for m, b in zip(cpu["method"], cpu["loop"], strict=True)],
        "steps_loop_ms_per_call": 1000 * steps_cpu / calls,
        "steps_ratio": method_cpu / steps_cpu,
        "graph_loop_ms_per_call": 1000 * graph_cpu / calls,
        "graph_ratio": method_cpu / graph_cpu,
        # the same graph with each node a RunnableLambda (LangChain's run per node, as noterag's)
        "runnables_loop_ms_per_call": 1000 * runnables_cpu / calls,
        "runnables_ratio": method_cpu / runnables_cpu,
        # LangGraph's cost of the method's steps, and of its graph, before noterag's code runs
        "steps_over_loop": steps_cpu / loop_cpu,
        "graph_over_loop": graph_cpu / loop_cpu,
        "top": await _profile(ask, questions[:50], 1000 * method_cpu / calls, top),
    }


# Where the profile's entries are read: noterag's own code (the package's folders, not the
# benchmarks' or the tests'), langchain-core's and LangGraph's.
_REPO = Path(__file__).resolve().parents[1]
_OURS = tuple(str(_REPO / d) + "/" for d in ("noterag", "graphs", "nodes", "prompts", "retrievers"))


def _short(path: str) -> str | None:
    """A profiled file as noterag/..., langchain_core/... or langgraph/..., None for any other."""
    if path.startswith(_OURS):
        return str(Path(path).relative_to(_REPO))
    for package in _THEIRS:
        if f"/site-packages/{package}" in path:
            return package + path.split(f"/site-packages/{package}", 1)[1]
    return None


_THEIRS = ("langchain_core/", "langgraph/")


async def _profile(
    ask: Any, questions: list[str], ms_per_call: float, top: int
) -> list[dict[str, Any]]:
    """The ``top`` functions of noterag and the ``top`` of langgraph by own CPU time over runs of
    ``questions`` (cProfile timed by process_time), each as its share of the profiled CPU and
    that share of the measured ``ms_per_call`` (the profiler's own cost inflates small
    functions more than large ones: an order, not a measurement)."""
    profiler = cProfile.Profile(time.process_time)
    profiler.enable()
    for question in questions:
        await ask(question)
    profiler.disable()
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    total = sum(own for _, _, own, _, _ in stats.values()) or 1.0
    rows = []
    for (path, line, function), (_, calls, own, _, _) in stats.items():
        short = _short(path)
        if short is not None:
            rows.append(
                {
                    "function": f"{short}:{line}({function})",
                    "share": own / total,
                    "us_per_call": 1000 * ms_per_call * own / total,
                    "calls": calls,
                }
            )
    rows.sort(key=lambda row: -row["share"])
    # the top of each, so that a regression in noterag's own code shows beside LangChain's and
    # LangGraph's
    ours = [row for row in rows if not row["function"].startswith(_THEIRS)]
    theirs = [[row for row in rows if row["function"].startswith(p)][:top] for p in _THEIRS]
    return ours[:top] + [row for rows_of in theirs for row in rows_of]


def print_floor(floors: list[dict[str, Any]]) -> None:
    first = floors[0]
    print(
        f"\nOrchestration CPU floor (no HTTP: scripted model, keyword retriever; "
        f"{first['questions']} questions a method; median of {first['rounds']} rounds)"
    )
    print_table(
        floors,
        [
            ("method", "method", "s"),
            ("calls", "calls/q", ".1f"),
            ("searches", "searches/q", ".1f"),
            ("graph_steps", "steps/q", ".0f"),
            ("method_ms_per_call", "noterag CPU ms/call", ".3f"),
            ("loop_ms_per_call", "bare loop", ".3f"),
            ("ratio", "ratio", ".3f"),
            ("steps_loop_ms_per_call", "same-steps loop", ".3f"),
            ("steps_ratio", "ratio", ".3f"),
            ("graph_loop_ms_per_call", "same-graph loop", ".3f"),
            ("graph_ratio", "ratio", ".3f"),
            ("runnables_loop_ms_per_call", "its nodes Runnables", ".3f"),
            ("runnables_ratio", "ratio", ".3f"),
        ],
    )
    print(
        "bare loop: one graph step per call or search, a three-field state; same-steps loop: "
        "the graph steps the method's nodes ran, each making that node's calls; same-graph "
        "loop: the method's own graph (state, nodes, edges, routes) with nodes that only make "
        "the calls and return the recorded update (plain async functions; then each a "
        "RunnableLambda, as noterag's nodes are: LangChain opens a run for each). ratio = "
        "noterag / that loop: to the bare loop, everything; to the same-graph loop, noterag's "
        "own code (with the Runnables, the code inside its nodes alone)"
    )
    for floor in floors:
        spread = ", ".join(f"{r:.3f}" for r in sorted(floor["ratio_rounds"]))
        print(f"  {floor['method']}: ratio to the bare loop over the rounds: {spread}")
    print(
        f"target: DeepNote's own code (the ratio to its same-graph loop) <= {TARGET_OWN_CODE:.2f}x"
    )
    # the ratio as a product: what LangGraph costs for the method's steps and graph before any of
    # noterag's code runs (the floor the target must leave room above), then noterag's own code
    for floor in floors:
        print(
            f"  {floor['method']}: LangGraph alone, the method's steps "
            f"{floor['steps_over_loop']:.3f}x and its graph {floor['graph_over_loop']:.3f}x the "
            f"bare loop; noterag's own code {floor['graph_ratio']:.3f}x over its graph "
            f"({floor['runnables_ratio']:.3f}x over it with Runnable nodes)"
        )
    for floor in floors:
        if floor["method"] == "deepnote":
            met = "met" if floor["graph_ratio"] <= TARGET_OWN_CODE else "missed"
            inside = "met" if floor["runnables_ratio"] <= TARGET_OWN_CODE else "missed"
            print(
                f"deepnote: noterag's own code {floor['graph_ratio']:.3f}x over its graph with "
                f"plain nodes: the {TARGET_OWN_CODE:.2f}x target {met}; the code inside its "
                f"nodes {floor['runnables_ratio']:.3f}x over the graph with Runnable nodes: {inside}"
            )
    for floor in floors:
        print(
            f"where {floor['method']}'s CPU goes (cProfile, own time, the top entries under "
            "noterag, then under langchain-core, then under langgraph; us/call = share x the "
            "measured ms/call):"
        )
        for row in floor["top"]:
            print(
                f"  {row['us_per_call']:7.1f} us/call {100 * row['share']:5.1f}%  {row['function']}"
            )


def print_http_bound(results: list[dict[str, Any]]) -> None:
    """The overhead of the loops making the method's requests without it (``http_loops``), in
    ms a question and as a share of the method's wall, and the method's own above its graph's
    against the target (note methods: at most ``TARGET_ABOVE_GRAPH`` points of wall)."""
    print(
        "bound: the same requests one question at a time, without noterag (ms of overhead a "
        "question; % of the method's wall): a plain ChatOpenAI loop, then LangGraph running "
        "the method's own graph with plain nodes over it"
    )
    for r in results:
        wall_ms = 1000 * r["wall_s"]
        above = 100 * (r["overhead_ms"] - r["same_graph_overhead_ms"]) / wall_ms
        verdict = ""
        if r["method"] in NOTE_METHODS:
            met = "met" if above <= TARGET_ABOVE_GRAPH else "missed"
            verdict = f" (target <= {TARGET_ABOVE_GRAPH:g} point: {met})"
        print(
            f"  {r['method']:14} ChatOpenAI {r['chat_loop_overhead_ms']:5.1f} ms "
            f"({100 * r['chat_loop_overhead_ms'] / wall_ms:.2f}%), its graph "
            f"{r['same_graph_overhead_ms']:5.1f} ms ({100 * r['same_graph_overhead_ms'] / wall_ms:.2f}%); "
            f"noterag {above:+.2f} points of wall above its graph{verdict}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description="orchestration overhead and critical path")
    parser.add_argument("--questions", type=int, default=5)
    latency_arguments(parser)
    # The note methods and the two single-call baselines (the README's table). The simulated
    # endpoint knows their prompts' stages; the other baselines need their own stage phrases
    # there (and flare / replug / self-rag log-probabilities it does not return).
    parser.add_argument(
        "--methods", default="adaptive-note,deepnote,amber,resp,no-retrieval,vanilla"
    )
    parser.add_argument("--json", type=Path)
    parser.add_argument("--floor-questions", type=int, default=200)
    parser.add_argument("--floor-rounds", type=int, default=3, help="timings of each side (median)")
    parser.add_argument("--floor-only", action="store_true", help="only the no-HTTP CPU floor")
    # one method of each family: the note loop, ReSP, Amber, a one-call baseline
    parser.add_argument("--floor-methods", default="deepnote,resp,amber,vanilla")
    parser.add_argument(
        "--floor-top", type=int, default=6, help="profile entries printed, of each package"
    )
    args = parser.parse_args()
    questions = [q["question"] for q in sample_questions()]
    floor_questions = [questions[i % len(questions)] for i in range(args.floor_questions)]
    floors = [
        asyncio.run(bench_floor(floor_questions, m, args.floor_rounds, args.floor_top))
        for m in args.floor_methods.split(",")
    ]
    if args.floor_only:
        print_floor(floors)
        print(f"wrote {write_results('orchestration_floor', floors, args.json)}")
        return
    questions = [questions[i % len(questions)] for i in range(args.questions)]
    with SimProcess(args.base_ms, args.per_token_ms) as sim:
        results = [asyncio.run(bench_method(m, sim, questions)) for m in args.methods.split(",")]
    print(
        f"\nOrchestration ({args.questions} questions per method, one at a time; "
        f"{latency_text(args)}; provisional)"
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
    print(
        f"targets: a note method's overhead <= {TARGET_ABOVE_GRAPH:g} point of wall above its "
        f"same-graph loop's; wall / critical path <= {TARGET_CRITICAL:.2f}x; no duplicate calls"
    )
    print_http_bound(results)
    print_floor(floors)
    print(f"wrote {write_results('orchestration', [*results, *floors], args.json)}")


if __name__ == "__main__":
    main()
