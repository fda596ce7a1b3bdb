"""The LangGraph loops the CPU benchmarks measure noterag against (bench/orchestration.py's floor
without HTTP, bench/client_cpu.py's over HTTP): the bare loop, the method's own graph replayed
with plain nodes, the recording of a run's graph steps (and of the requests each step sent)
they replay.

Imported by both, so it does nothing at import time (orchestration.py patches the openai client
when imported; client_cpu.py must not get that patch): each loop is built around a ``perform``
the caller passes, which makes one step's calls (and searches) its own way.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

Perform = Callable[[Any], Awaitable[Any]]


def bare_loop(perform: Perform) -> Any:
    """LangGraph's floor: a StateGraph of three fields whose one node makes the next step of a
    question's ``plan`` through ``perform`` (which returns the step's replies) and loops until
    the plan is done: one graph step per step of the plan.

    Its router is async: LangGraph runs a sync router in a worker thread under ``ainvoke``, a
    thread hop per step that noterag's own routers do not make either."""
    from langgraph.graph import END, START, StateGraph
    from typing_extensions import TypedDict

    class State(TypedDict):
        plan: list[Any]
        i: int
        replies: list[str]

    async def step(state: State) -> dict[str, Any]:
        replies = await perform(state["plan"][state["i"]])
        return {"i": state["i"] + 1, "replies": [*state["replies"], *replies]}

    # Any, not State: LangGraph reads a router's type hints, and State is local to this function
    async def route(state: Any) -> str:
        return "step" if state["i"] < len(state["plan"]) else END

    graph = StateGraph(State)
    graph.add_node("step", step)
    graph.add_edge(START, "step")
    graph.add_conditional_edges("step", route)
    return graph.compile()


def same_graph(
    builder: Any,
    take: Callable[[], tuple[str, Any, Any]],
    perform: Perform,
    label: str,
    *,
    runnable_nodes: bool = False,
) -> Any:
    """LangGraph's own cost of a method's graph: its ``builder``'s state schema, nodes, edges,
    routes (the method's own conditional-edge paths) and retry policies, each node a plain async
    function that takes the next recorded step (``take()``: its node, its effects, the update
    the node wrote; see ``task_steps``), makes the effects through ``perform`` and returns the
    update. What the method costs beyond this is noterag's code in its nodes. ``runnable_nodes``:
    each node a ``RunnableLambda`` over that function, as noterag's nodes are (the public way to
    give a node a sync and an async body; LangChain opens a run for it): what the method costs
    beyond that is the code inside noterag's nodes alone."""
    from langchain_core.runnables import RunnableLambda
    from langgraph.graph import StateGraph

    def replaying(name: str) -> Any:
        async def node(state: dict[str, Any]) -> Any:
            ran, effects, update = take()
            if ran != name:
                raise SystemExit(f"{label}: the replay ran {name} where the method ran {ran}")
            await perform(effects)
            return update

        node.__name__ = name
        return RunnableLambda(node, name=name) if runnable_nodes else node

    graph = StateGraph(
        builder.state_schema,
        input_schema=builder.input_schema,
        output_schema=builder.output_schema,
    )
    for name, spec in builder.nodes.items():
        graph.add_node(
            name,
            replaying(name),
            destinations=tuple(spec.ends) or None,
            retry_policy=spec.retry_policy,
        )
    for start, end in builder.edges:
        graph.add_edge(start, end)
    for start, branches in builder.branches.items():
        for branch in branches.values():
            graph.add_conditional_edges(start, branch.path, branch.ends)
    return graph.compile()


async def task_steps(graph: Any, values: dict[str, Any], label: str) -> list[tuple[int, str, Any]]:
    """The graph steps of one run of ``graph`` on ``values``, one per node run
    (``stream_mode="debug"``): each step's number, its node and the update the node returned.
    A step that ran several nodes ends the benchmark: its replay would merge them."""
    tasks: dict[str, tuple[int, str]] = {}
    found = []
    async for event in graph.astream(values, stream_mode="debug"):
        payload = event["payload"]
        if event["type"] == "task":
            tasks[payload["id"]] = (event["step"], payload["name"])
        elif event["type"] == "task_result":
            found.append((*tasks[payload["id"]], payload["result"]))
    if len({step for step, _, _ in found}) != len(found):
        raise SystemExit(f"{label}: a graph step ran several nodes (its replay would merge them)")
    return found


def record_requests(model: Any, key: Callable[[], Any]) -> list[list[Any]]:
    """Hooks on ``model``'s HTTP client recording each chat request as [request, ``key()`` in
    the sender's context, sent at, its reply's headers at] (a list append; the reply's time
    set when it comes), in the order sent."""
    sent: list[list[Any]] = []
    pending: dict[int, list[Any]] = {}

    async def keep(request: Any) -> None:
        if request.url.path.endswith("/chat/completions"):
            entry = [request, key(), time.perf_counter(), math.inf]
            sent.append(entry)
            pending[id(request)] = entry

    async def came(response: Any) -> None:
        entry = pending.pop(id(response.request), None)
        if entry is not None:
            entry[3] = time.perf_counter()

    model.http_async_client.event_hooks["request"].append(keep)
    model.http_async_client.event_hooks["response"].append(came)
    return sent


def in_flight_sets(sent: list[list[Any]]) -> dict[Any, list[list[dict[str, Any]]]]:
    """``record_requests``'s entries by key (in the order the keys first sent): each key's bodies
    in order of sending, grouped into the sets it had in flight at once (a request sent before
    the replies of its set came joins it: Amber's chunk filters, ReSP's two summaries)."""
    by_key: dict[Any, list[list[Any]]] = {}
    for entry in sorted(sent, key=lambda entry: entry[2]):
        by_key.setdefault(entry[1], []).append(entry)
    plans = {}
    for key, entries in by_key.items():
        plan: list[list[dict[str, Any]]] = []
        until = -math.inf
        for request, _, start, end in entries:
            if plan and start < until:
                plan[-1].append(json.loads(request.content))
                until = max(until, end)
            else:
                plan.append([json.loads(request.content)])
                until = end
        plans[key] = plan
    return plans


async def send_set(model: Any, calls: list[Any]) -> list[Any]:
    """One set of calls (messages lists) through ``model``, several concurrently: the replies'
    contents."""
    if len(calls) == 1:
        return [(await model.ainvoke(calls[0])).content]
    return [reply.content for reply in await asyncio.gather(*map(model.ainvoke, calls))]


async def send_sets(model: Any, sets: list[list[Any]]) -> None:
    """A recorded step's sets of calls through ``model``, one set after the other."""
    for calls in sets:
        await send_set(model, calls)


def request_graph(builder: Any, model: Any, take: Callable[[], Any], label: str) -> Any:
    """``same_graph`` whose nodes send the sets of calls their step sent (``replay_sets``'s
    plans, taken in turn by ``take``) through ``model``: LangGraph's cost of the method's own
    graph over a chat model, the requests being the method's own."""
    return same_graph(builder, take, functools.partial(send_sets, model), label)


def graph_step() -> int | None:
    """The graph step (LangGraph's ``langgraph_step``, in the config of the node that runs) the
    caller runs in: what ``record_requests`` keys a request by, to replay it in its step."""
    from langchain_core.runnables.config import var_child_runnable_config

    config = var_child_runnable_config.get() or {}
    return config.get("metadata", {}).get("langgraph_step")


def replay_sets(
    steps: list[tuple[int, str, Any]], sets: dict[Any, list[list[dict[str, Any]]]], label: str
) -> list[tuple[str, list[list[Any]], Any]]:
    """One run's graph steps (``task_steps``) with the requests each sent (``in_flight_sets``
    keyed by ``graph_step``, ``sets`` emptied): per step, its node, its sets of calls (each call
    its messages) and its update, as ``same_graph``'s ``take`` returns them."""
    from langchain_core.messages import convert_to_messages

    plan = [
        (
            name,
            [[convert_to_messages(p["messages"]) for p in calls] for calls in sets.pop(step, [])],
            update,
        )
        for step, name, update in steps
    ]
    if sets:
        raise SystemExit(f"{label}: requests were sent outside the graph's steps")
    return plan
