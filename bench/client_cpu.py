"""The eval client's CPU per model call, beside bare loops making the same calls (issue 36).

    python bench/client_cpu.py                          # vanilla and deepnote, concurrency 32
    python bench/client_cpu.py --rounds 3 --questions 200 --profile deepnote

Each method runs ``noterag.eval.run_eval`` (the whole runner: graph, retrieval, parsing, durable
rows, scoring) against bench/sim_endpoint.py in its own process (bench/sim_process.py, so the
endpoint's CPU is not counted), at ``--concurrency`` questions waiting on the model. The requests
it sends are recorded (their JSON bodies, the question each was of and whether it overlapped
the question's previous ones, kept by httpx request and response hooks: a list append) and the
same requests are then sent, ``--concurrency`` at a time, by loops that leave out a layer each:

- ``noterag graph``: the method's graph alone (``build_graph`` over the same model spec and
  index), ``ainvoke`` on the same questions in their turns, ``--concurrency`` at a time: what
  the eval adds on top (rows, scores, counters, the durable results file) is the difference;
- ``same-graph loop``: LangGraph's cost of the method's own graph (its state, nodes, edges,
  routes, retry policies) over ChatOpenAI, each node a plain function sending the requests its
  node sent and returning the update it wrote (recorded in an untimed run of the graph):
  ``noterag graph`` over it is noterag's own code in the nodes (searches included);
- ``LangGraph loop``: LangGraph's floor, a bare ``StateGraph`` (three fields, one node that
  loops) with ``ChatOpenAI``: one graph step per call, or per set of calls the question had in
  flight at once (sent concurrently, as the method sent them), each question's calls in the
  eval's order, ``ainvoke`` per question: what a graph of LangGraph alone costs above the
  ChatOpenAI loop, the bound under noterag's graph (orchestration.py's bare loop over HTTP);
- ``noterag model``: the eval's chat model alone (``load_chat_model("openai:sim@...")``: its
  request hooks, turns, deadline and reply check), ``ainvoke`` on the same messages;
- ``ChatOpenAI``: a plain ``langchain_openai.ChatOpenAI`` (LangChain's floor), ``ainvoke``;
- ``AsyncOpenAI``: the openai SDK's ``chat.completions.create`` with the same bodies;
- ``httpx``: a bare ``httpx.AsyncClient`` posting the same bodies and decoding the JSON reply
  (the transport's floor).

Printed per method: CPU per call (the process's user + system time over the run / the requests
the endpoint served), the ratio to the ChatOpenAI loop (target for the eval: <= 1.25x), and
what each layer adds; a line ``bound:`` per method: what LangGraph alone costs above the
ChatOpenAI loop (the LangGraph loop's and the same-graph loop's ratios) beside the eval's, and
what the target leaves noterag above each; and each run's wall / ideal (ideal = the endpoint's
service time of its requests / concurrency): the bare loops show how close a client that
costs less gets to the ideal on this machine (vanilla's one call a question is the hard case).
``--rounds``: each figure is the median over rounds, with its min-max.
``--profile METHOD``: cProfile over one more eval run of METHOD, its top entries by own time.
Writes JSON (default bench/results/client_cpu.json).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import functools
import io
import json
import pstats
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from common import print_table, sim_eval, write_dataset, write_results
from loops import (
    bare_loop,
    graph_step,
    in_flight_sets,
    record_requests,
    replay_sets,
    request_graph,
    send_set,
    task_steps,
)
from sim_process import SimProcess, latency_arguments, latency_text

from noterag.eval.loop import run_on_loop
from noterag.models import load_chat_model
from noterag.models.http import http_library
from noterag.models.turns import _QUESTION, ModelTurns, question_turns
from noterag.retrievers.sample import sample_index

TARGET = 1.25  # the eval's CPU per call over the ChatOpenAI loop's (issue 36)
LOOPS = (
    "noterag graph",
    "same-graph loop",
    "LangGraph loop",
    "noterag model",
    "ChatOpenAI",
    "AsyncOpenAI",
    "httpx",
)


def cpu_s() -> float:
    """This process's CPU time (all its threads): the endpoint runs in another process."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


def eval_run(
    method: str,
    n: int,
    concurrency: int,
    dataset: Path,
    index: Path,
    sim: SimProcess,
    out: Path,
    profile: cProfile.Profile | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]], list[list[list[dict[str, Any]]]]]:
    """One run_eval at ``concurrency``: its row (CPU per call), the request bodies it sent, and
    the same bodies per question, in sets sent at once (``in_flight_sets``)."""
    model = load_chat_model(f"openai:sim@{sim.url}")
    # the question of a request: its turns record, the one object per question that the eval's
    # tasks share (the context of its question_turns), wherever in the graph it was sent
    sent = record_requests(model, _QUESTION.get)
    sim.records()
    started, cpu = time.perf_counter(), cpu_s()
    if profile is not None:
        profile.enable()
    sim_eval(
        method, dataset, out, index, model, limit=n, concurrency=concurrency, model_label="sim"
    )
    if profile is not None:
        profile.disable()
    wall, cpu = time.perf_counter() - started, cpu_s() - cpu
    served = sim.records()
    requests = len(served)
    errors = sum(1 for line in (out / "results.jsonl").open() if json.loads(line)["error"])
    row = {
        "method": method,
        "client": "noterag eval",
        "calls": requests,
        "questions": n,
        "errors": errors,
        "wall_s": wall,
        "cpu_s": cpu,
        "cpu_ms_per_call": 1000 * cpu / max(1, requests),
    } | ideal(served, wall, concurrency)
    if any(question is None for _, question, _, _ in sent):
        raise SystemExit("client_cpu: a request was sent outside a question's turns")
    plans = list(in_flight_sets(sent).values())
    return row, [json.loads(request.content) for request, _, _, _ in sent], plans


async def _pump(
    payloads: list[dict[str, Any]],
    concurrency: int,
    call: Callable[[dict[str, Any]], Awaitable[Any]],
    turns: bool = False,
) -> None:
    """Send every payload through ``call``, ``concurrency`` at a time (each of the workers in
    its own question's turns when ``turns``, as an eval's questions are)."""
    queue = iter(payloads)
    shared = ModelTurns(concurrency) if turns else None

    async def worker() -> None:
        with question_turns(shared):
            for payload in queue:
                await call(payload)

    await asyncio.gather(*(worker() for _ in range(concurrency)))


def graph_run(
    method: str, n: int, concurrency: int, dataset: Path, index: Path, url: str
) -> dict[str, Any]:
    """The method's graph alone on the eval's first ``n`` questions, ``concurrency`` at once in
    their turns: its row (CPU per call; the calls counted in the graph's own ``llm_calls``)."""
    import noterag
    from noterag.datasets import load_dataset

    graph = noterag.build_graph(
        method, model=load_chat_model(f"openai:sim@{url}"), retriever=f"bm25:{index}"
    )
    examples = load_dataset(dataset, limit=n)
    inputs = [{"question": ex.question, "task": ex.task} for ex in examples]
    calls: list[int] = []

    async def answer(job: dict[str, Any]) -> None:
        calls.append((await graph.ainvoke(job))["llm_calls"])

    measured: list[float] = []

    async def main() -> None:
        await answer(inputs[0])  # warm-up, as the eval's own
        calls.clear()
        started, cpu = time.perf_counter(), cpu_s()
        await _pump(inputs, concurrency, answer, turns=True)
        measured.extend([time.perf_counter() - started, cpu_s() - cpu, started])

    run_on_loop(main, 2 * concurrency, "bench-graph")
    wall, cpu, since = measured
    return {
        "method": method,
        "client": "noterag graph",
        "calls": sum(calls),
        "questions": n,
        "wall_s": wall,
        "cpu_s": cpu,
        "cpu_ms_per_call": 1000 * cpu / max(1, sum(calls)),
        "since": since,
    }


def langgraph_loop(model: Any) -> Any:
    """LangGraph's floor (bench/loops.py's ``bare_loop``): one graph step per set of a
    question's ``plan`` (its messages lists; a set of several concurrently) through ``model``:
    the calls of one question."""
    return bare_loop(functools.partial(send_set, model))


def timed_pump(
    jobs: list[Any], concurrency: int, call: Callable[[Any], Awaitable[Any]], turns: bool = False
) -> tuple[float, float, float]:
    """``_pump`` of ``jobs`` after one warm-up call (connections opened, lazy imports done), on
    the eval's own event loop, executor and frozen heap (noterag.eval.loop): its wall time, CPU
    time and start (perf_counter)."""
    measured: list[float] = []

    async def main() -> None:
        await call(jobs[0])
        started, cpu = time.perf_counter(), cpu_s()
        await _pump(jobs, concurrency, call, turns)
        measured.extend([time.perf_counter() - started, cpu_s() - cpu, started])

    run_on_loop(main, 2 * concurrency, "bench-loop")
    wall, cpu, since = measured
    return wall, cpu, since


_ASKED: ContextVar[int | None] = ContextVar("client_cpu_question", default=None)
_REPLAY: ContextVar[list[Any]] = ContextVar("client_cpu_replay")


def _question_step() -> tuple[int | None, int | None]:
    """The question (``_ASKED``) and the graph step (LangGraph's ``langgraph_step``, in the
    config of the node that runs) a request is sent in."""
    return _ASKED.get(), graph_step()


def graph_steps(
    method: str, n: int, concurrency: int, dataset: Path, index: Path, url: str
) -> tuple[Any, list[dict[str, Any]], list[list[tuple[str, list[Any], Any]]]]:
    """One untimed run of the method's graph over the eval's first ``n`` questions,
    ``concurrency`` at once: per question, the graph steps it took (``stream_mode="debug"``: one
    node a step), each as (node, the sets of calls it sent, each call its messages, the update it
    returned: ``replay_sets``). Returns the graph's builder, the questions' inputs and their
    steps."""
    import noterag
    from noterag.datasets import load_dataset

    model = load_chat_model(f"openai:sim@{url}")
    graph = noterag.build_graph(method, model=model, retriever=f"bm25:{index}")
    sent = record_requests(model, _question_step)
    inputs = [{"question": ex.question, "task": ex.task} for ex in load_dataset(dataset, limit=n)]
    found: dict[int, list[tuple[int, str, Any]]] = {}

    async def run(job: tuple[int, dict[str, Any]]) -> None:
        i, values = job
        _ASKED.set(i)  # in this worker's context, which the graph's tasks copy
        found[i] = await task_steps(graph, values, f"client_cpu: {method}")

    async def main() -> None:
        await _pump(list(enumerate(inputs)), concurrency, run)

    run_on_loop(main, 2 * concurrency, "bench-record")
    by_question: dict[int, dict[Any, list[list[dict[str, Any]]]]] = {}
    for (i, step), sets in in_flight_sets(sent).items():
        by_question.setdefault(i, {})[step] = sets
    label = f"client_cpu: {method}"
    plans = [replay_sets(found[i], by_question.pop(i, {}), label) for i in range(len(inputs))]
    if by_question:
        raise SystemExit(f"{label} sent requests outside its questions")
    return graph.builder, inputs, plans


def same_graph_run(
    method: str,
    payloads: list[dict[str, Any]],
    n: int,
    concurrency: int,
    dataset: Path,
    index: Path,
    url: str,
) -> dict[str, Any]:
    """The method's own graph with plain nodes (``loops.request_graph``) over ChatOpenAI, on the
    eval's first ``n`` questions, ``concurrency`` at once: its row (CPU per call). Its requests
    are the graph's own (``graph_steps``), as those of ``noterag graph``."""
    from langchain_openai import ChatOpenAI

    builder, inputs, steps = graph_steps(method, n, concurrency, dataset, index, url)
    settings = {k: payloads[0][k] for k in ("temperature", "top_p") if k in payloads[0]}
    # each node takes the question's next recorded step from _REPLAY, set per question below
    graph = request_graph(
        builder,
        ChatOpenAI(model="sim", base_url=url, api_key="EMPTY", **settings),
        lambda: _REPLAY.get().pop(),
        "client_cpu",
    )
    jobs = list(zip(inputs, steps, strict=True))
    calls = sum(len(c) for plan in steps for _, sets, _ in plan for c in sets)

    async def call(job: tuple[dict[str, Any], list[Any]]) -> None:
        values, plan = job
        pending = plan[::-1]
        _REPLAY.set(pending)
        await graph.ainvoke(values, {"recursion_limit": 10_000})
        if pending:
            raise SystemExit(f"client_cpu: the replay of {method} stopped before its last step")

    wall, cpu, since = timed_pump(jobs, concurrency, call)
    return {
        "method": method,
        "client": "same-graph loop",
        "calls": calls,
        "questions": n,
        "wall_s": wall,
        "cpu_s": cpu,
        "cpu_ms_per_call": 1000 * cpu / max(1, calls),
        "since": since,
        "graph_steps": sum(map(len, steps)) / len(steps),
    }


def loop_run(
    client: str,
    payloads: list[dict[str, Any]],
    plans: list[list[list[dict[str, Any]]]],
    concurrency: int,
    url: str,
    method: str,
) -> dict[str, Any]:
    """The same requests through one bare client (or, ``LangGraph loop``, each question's
    ``plans`` through a bare LangGraph loop over ChatOpenAI): its row (CPU per call)."""
    import openai
    from langchain_core.messages import convert_to_messages
    from langchain_openai import ChatOpenAI

    body = payloads[0]
    settings = {k: body[k] for k in ("temperature", "top_p") if k in body}
    # built before the clock starts: the eval's prompts are rendered in its graph, not here
    messages = [convert_to_messages(p["messages"]) for p in payloads]
    jobs: list[Any]
    turns = False
    if client == "noterag model":
        model = load_chat_model(f"openai:sim@{url}")
        jobs, turns = messages, True

        async def call(job: Any) -> Any:
            return await model.ainvoke(job)
    elif client == "ChatOpenAI":
        model = ChatOpenAI(model="sim", base_url=url, api_key="EMPTY", **settings)
        jobs = messages

        async def call(job: Any) -> Any:
            return await model.ainvoke(job)
    elif client == "LangGraph loop":
        graph = langgraph_loop(ChatOpenAI(model="sim", base_url=url, api_key="EMPTY", **settings))
        jobs = [
            [[convert_to_messages(p["messages"]) for p in calls] for calls in plan]
            for plan in plans
        ]
        sent = sum(len(calls) for plan in plans for calls in plan)
        if sent != len(payloads):
            raise SystemExit(f"client_cpu: {sent} requests in the plans, {len(payloads)} sent")

        async def call(job: Any) -> Any:
            return await graph.ainvoke({"plan": job, "i": 0, "replies": []})
    elif client == "AsyncOpenAI":
        sdk = openai.AsyncOpenAI(base_url=url, api_key="EMPTY")
        jobs = payloads

        async def call(job: Any) -> Any:
            return await sdk.chat.completions.create(**job)
    else:  # the library the SDK is built on (httpx, or its successor httpx2)
        http = http_library().AsyncClient(limits=openai.DEFAULT_CONNECTION_LIMITS, timeout=60)
        jobs = payloads
        endpoint = url + "/chat/completions"

        async def call(job: Any) -> Any:
            response = await http.post(endpoint, json=job)
            response.raise_for_status()
            return response.json()

    extra = {"graph_steps": sum(map(len, plans)) / len(plans)} if client == "LangGraph loop" else {}
    wall, cpu, since = timed_pump(jobs, concurrency, call, turns)
    return {
        "method": method,
        "client": client,
        "calls": len(payloads),
        "wall_s": wall,
        "cpu_s": cpu,
        "cpu_ms_per_call": 1000 * cpu / len(payloads),
        "since": since,
    } | extra


def ideal(served: list[Any], wall: float, concurrency: int, since: float = 0) -> dict[str, Any]:
    """The endpoint's service time of ``served`` (its records; those before ``since`` were the
    loop's warm-up; its perf_counter is this process's clock) / ``concurrency``, and wall /
    that ideal."""
    model_s = sum(r.end - r.start for r in served if r.start >= since)
    bound = model_s / concurrency or 1e-9
    return {"model_s": model_s, "ideal_s": bound, "wall_over_ideal": wall / bound}


def langgraph_bound(
    method: str, summary: list[dict[str, Any]], rows: list[dict[str, Any]]
) -> dict[str, Any]:
    """The bound under ``method``'s eval: what LangGraph alone costs above the ChatOpenAI loop
    (the LangGraph loop's ratio), beside the eval's ratio, and the eval's CPU per call above
    the LangGraph loop's (noterag's: its graph's code, the eval's rows and scores)."""
    mine = {r["client"]: r for r in summary if r["method"] == method}
    floor, graph, ours = mine["ChatOpenAI"], mine["LangGraph loop"], mine["noterag eval"]
    same = mine["same-graph loop"]
    steps, same_steps = (
        statistics.median(
            r["graph_steps"] for r in rows if r["method"] == method and r["client"] == client
        )
        for client in ("LangGraph loop", "same-graph loop")
    )
    found = {
        "method": method,
        "chatopenai_ms": floor["cpu_ms_per_call"],
        "langgraph_ms": graph["cpu_ms_per_call"],
        "langgraph_over_chatopenai": graph["over_chatopenai"],
        "langgraph_steps_per_question": steps,
        "same_graph_ms": same["cpu_ms_per_call"],
        "same_graph_over_chatopenai": same["over_chatopenai"],
        "same_graph_steps_per_question": same_steps,
        "eval_ms": ours["cpu_ms_per_call"],
        "eval_over_chatopenai": ours["over_chatopenai"],
        "eval_over_langgraph": ours["cpu_ms_per_call"] / graph["cpu_ms_per_call"],
    }
    # what the eval's target (TARGET x the ChatOpenAI loop) leaves for noterag above each
    room = TARGET * floor["cpu_ms_per_call"]
    found["text"] = (
        f"bound: {method}: LangGraph alone, a bare loop ({steps:.1f} steps a question): "
        f"{graph['cpu_ms_per_call']:.3f} ms/call = {graph['over_chatopenai']:.2f}x the "
        f"ChatOpenAI loop's {floor['cpu_ms_per_call']:.3f}; the method's own graph with plain "
        f"nodes ({same_steps:.1f} steps): {same['cpu_ms_per_call']:.3f} = "
        f"{same['over_chatopenai']:.2f}x; the eval: {ours['cpu_ms_per_call']:.3f} = "
        f"{ours['over_chatopenai']:.2f}x, +{ours['cpu_ms_per_call'] - graph['cpu_ms_per_call']:.3f}"
        f" ms/call above the bare loop, +{ours['cpu_ms_per_call'] - same['cpu_ms_per_call']:.3f}"
        f" above its own graph's; the {TARGET:.2f}x target leaves noterag "
        f"{room - graph['cpu_ms_per_call']:+.3f} ms/call above the bare loop, "
        f"{room - same['cpu_ms_per_call']:+.3f} above its own graph's"
    )
    return found


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default="vanilla,deepnote")
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=1)
    latency_arguments(parser)
    parser.add_argument(
        "--profile", default="", help="methods to profile (cProfile), e.g. deepnote"
    )
    parser.add_argument("--top", type=int, default=25, help="profile entries printed")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    index = sample_index()
    methods = [m for m in args.methods.split(",") if m]
    rows: list[dict[str, Any]] = []
    profiles: dict[str, str] = {}
    with (
        tempfile.TemporaryDirectory(prefix="noterag-client-cpu-") as tmp,
        SimProcess(args.base_ms, args.per_token_ms) as sim,
    ):
        dataset = write_dataset(Path(tmp) / "questions.jsonl", args.questions)
        for method in methods:
            # warm-up: imports, first graph build, connection pool
            eval_run(method, 4, 2, dataset, index, sim, Path(tmp) / "warm")
            for round_ in range(args.rounds):
                out = Path(tmp) / f"{method}-{round_}"
                row, payloads, plans = eval_run(
                    method, args.questions, args.concurrency, dataset, index, sim, out
                )
                rows.append(row | {"round": round_ + 1})
                for client in LOOPS:
                    sim.records()
                    if client == "noterag graph":
                        loop_row = graph_run(
                            method, args.questions, args.concurrency, dataset, index, sim.url
                        )
                    elif client == "same-graph loop":
                        loop_row = same_graph_run(
                            method,
                            payloads,
                            args.questions,
                            args.concurrency,
                            dataset,
                            index,
                            sim.url,
                        )
                    else:
                        loop_row = loop_run(
                            client, payloads, plans, args.concurrency, sim.url, method
                        )
                    served = sim.records()
                    bound = ideal(served, loop_row["wall_s"], args.concurrency, loop_row["since"])
                    rows.append(loop_row | bound | {"round": round_ + 1})
                print(f"  {method} round {round_ + 1}: {row['calls']} calls", flush=True)
            if method in args.profile.split(","):
                profile = cProfile.Profile()
                out = Path(tmp) / f"{method}-profile"
                eval_run(
                    method, args.questions, args.concurrency, dataset, index, sim, out, profile
                )
                text = io.StringIO()
                pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(args.top)
                profiles[method] = text.getvalue()

    summary = []
    for method in methods:
        mine = [r for r in rows if r["method"] == method]
        floor = spread([r["cpu_ms_per_call"] for r in mine if r["client"] == "ChatOpenAI"])[
            "median"
        ]
        for client in ("noterag eval", *LOOPS):
            found = spread([r["cpu_ms_per_call"] for r in mine if r["client"] == client])
            summary.append(
                {
                    "method": method,
                    "client": client,
                    "rounds": sum(1 for r in mine if r["client"] == client),
                    "calls": next(r["calls"] for r in mine if r["client"] == client),
                    "cpu_ms_per_call": found["median"],
                    "min": found["min"],
                    "max": found["max"],
                    "over_chatopenai": found["median"] / floor,
                    "wall_over_ideal": statistics.median(
                        r["wall_over_ideal"] for r in mine if r["client"] == client
                    ),
                }
            )
    print(
        f"\nClient CPU per model call (concurrency {args.concurrency}, simulated endpoint "
        f"{latency_text(args)} in its own process; median over {args.rounds} round(s))"
    )
    print_table(
        summary,
        [
            ("method", "method", "s"),
            ("client", "client", "s"),
            ("calls", "calls", "d"),
            ("cpu_ms_per_call", "CPU ms/call", ".3f"),
            ("min", "min", ".3f"),
            ("max", "max", ".3f"),
            ("over_chatopenai", "x ChatOpenAI", ".2f"),
            ("wall_over_ideal", "wall/ideal", ".3f"),
        ],
    )
    print(f"target: noterag eval <= {TARGET:.2f}x the ChatOpenAI loop's CPU per call")
    bounds = [langgraph_bound(method, summary, rows) for method in methods]
    for line in bounds:
        print(line["text"])
    print(
        "wall/ideal: the run's wall time / (the endpoint's service time / concurrency); the "
        "eval's includes its set-up and summary, the loops' their requests only"
    )
    for method, text in profiles.items():
        print(f"\ncProfile of one {method} eval run (top {args.top} by own time):")
        print(text)
    path = write_results(
        "client_cpu",
        {"runs": rows, "summary": summary, "bounds": bounds, "profiles": profiles},
        args.json,
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
