"""Every registered method draws, as Studio asks for it: ``get_graph()`` (with and without
``xray``), its Mermaid text, and the server's ``GET /assistants/{id}/graph`` (with ``?xray``).

A contract over the registry (``noterag.METHODS``) and langgraph.json, so a new method is
covered without a test of its own. The drawing must show the graph's real routes, read from
the graph's builder independently of LangGraph's drawer: its static edges, each deciding step's
conditional edge to both destinations (going on, and stopping, labelled with the stop rule's
name), and the answer's two ways out (to its human review, or to the end), and nothing more.
The human reviews' routes back to ``answer`` (a reject retrieves more, then answers again) are
drawn exactly for the methods that take them: each method's reviews are driven to a reject
wherever one is offered, and the routes the run took out of the reviewing steps must be the
ones drawn. Before the routes
of deciding steps had one mechanism (their conditional edge; they also declared the same
targets as ``destinations``), the drawer failed sorting ``None`` against a label for every
method, and the server answered 500.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, replace
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START
from langgraph.types import Command
from test_embedding import CORPUS, thread

import noterag
from noterag.core.spec import MethodError
from noterag.graphs.assemble import build
from noterag.registry.methods import METHODS, note_methods
from scripted import KeywordRetriever, ScriptedModel

REPO = Path(__file__).resolve().parent.parent
SERVED = list(json.loads((REPO / "langgraph.json").read_text())["graphs"])


def declared_routes(graph: Any) -> set[tuple[str, str]]:
    """Every (source, target) the compiled ``graph`` may take, from its builder: static
    edges, conditional edges' destinations, and ``Command`` destinations (a node's ``ends``)."""
    builder = graph.builder
    routes = set(builder.edges)
    for source, branches in builder.branches.items():
        for branch in branches.values():
            assert branch.ends, f"{source}: a conditional edge with no declared destinations"
            routes |= {(source, target) for target in branch.ends.values()}
    for name, spec in builder.nodes.items():
        routes |= {(name, target) for target in spec.ends or ()}
    return routes


@dataclass(frozen=True)
class Deciding:
    """A step's conditional edge that applies one of its method's stop rules: the route named
    after the rule leads to ``stop``, the other to ``go_on``."""

    rule: str
    go_on: str
    stop: str

    @property
    def destinations(self) -> tuple[str, str]:
        return (self.go_on, self.stop)


def deciding_steps(graph: Any) -> dict[str, Deciding]:
    """The graph's steps that decide (``noterag.core.decision.Decision``), by name: those whose
    conditional edge has a route named after one of the method's stop rules (``SPEC.stops``)."""
    rules = {rule.__name__ for rule in METHODS[graph.name].stops}
    found: dict[str, Deciding] = {}
    for source, branches in graph.builder.branches.items():
        for branch in branches.values():
            ends = dict(branch.ends or {})
            for rule in rules & set(ends):
                [go_on] = [target for label, target in ends.items() if label != rule] or [
                    ends[rule]
                ]
                found[source] = Deciding(rule, go_on, ends[rule])
    return found


def edges_of(drawn: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """A drawn graph's edges (``Graph.to_json()``, as the server sends it) by (source, target)."""
    return {(edge["source"], edge["target"]): edge for edge in drawn["edges"]}


def check_drawing(method: str, graph: Any, drawn: dict[str, Any]) -> None:
    """``drawn`` (a ``to_json()`` graph) shows ``graph``'s nodes and all its routes, each
    deciding step's two as conditional edges, the stop one labelled with its rule."""
    nodes = {node["id"] for node in drawn["nodes"]}
    assert nodes == set(graph.builder.nodes) | {START, END}, method
    edges = edges_of(drawn)
    declared = declared_routes(graph)
    missing = declared - set(edges)
    assert not missing, f"{method}: routes not drawn: {sorted(missing)}"
    extra = set(edges) - declared
    assert not extra, f"{method}: routes drawn that the graph does not have: {sorted(extra)}"
    decisions = deciding_steps(graph)
    assert decisions, f"{method}: no step decides when to stop"
    for name, decision in decisions.items():
        for target in decision.destinations:
            assert edges[name, target].get("conditional"), f"{method}: {name} -> {target}"
        if decision.go_on != decision.stop:
            assert edges[name, decision.stop].get("data") == decision.rule, method
            assert "data" not in edges[name, decision.go_on], method
    if "review_answer" in graph.builder.nodes:  # the answer's review (graphs.assemble)
        assert edges["answer", "review_answer"].get("conditional"), method
        assert edges["answer", END].get("conditional"), method
        assert ("review_answer", END) in edges, method
        back = ("review_answer", "answer") in edges
        # one way out is a plain edge; a review that may also go back draws both as conditional
        assert bool(edges["review_answer", END].get("conditional")) == back, method
        if back:
            assert edges["review_answer", "answer"].get("conditional"), method
    # every node is reached from the start and reaches the end, along drawn edges
    for start, forward in ((START, True), (END, False)):
        seen, todo = {start}, [start]
        while todo:
            here = todo.pop()
            for source, target in edges:
                step = target if forward and source == here else None
                step = source if not forward and target == here else step
                if step is not None and step not in seen:
                    seen.add(step)
                    todo.append(step)
        assert seen == nodes, f"{method}: not connected to {start}: {sorted(nodes - seen)}"


def drawable(method: str) -> Any:
    """The method's graph, for drawing: built on a scripted model, so that no model (the local
    one, an extra) is needed to read its structure, which the model does not change."""
    return noterag.build_graph(method, model=ScriptedModel.for_method(method))


@pytest.mark.parametrize("method", noterag.METHODS)
def test_every_method_draws_its_real_routes(method: str) -> None:
    graph = drawable(method)
    for xray in (False, True):
        drawn = graph.get_graph(xray=xray)
        check_drawing(method, graph, drawn.to_json())
        assert asyncio.run(graph.aget_graph(xray=xray)).to_json() == drawn.to_json()
        mermaid = drawn.draw_mermaid()
        for name, decision in deciding_steps(graph).items():
            if decision.go_on != decision.stop:
                rule = decision.rule
                assert f"\t{name} -. &nbsp;{rule}&nbsp; .-> {decision.stop};" in mermaid
                assert f"\t{name} -.-> {decision.go_on};" in mermaid


def test_a_deciding_step_declaring_its_destinations_again_is_refused() -> None:
    """Its conditional edge is its one route: declaring the same targets as ``destinations``
    (what broke every drawing) is a clear error when the graph is built."""
    spec = METHODS["ircot"]

    def wire_twice(graph: Any, deps: Any) -> None:
        spec.wire(graph, deps)
        graph.nodes["stop_check"].ends = ("retrieve", "answer")

    with pytest.raises(MethodError, match=r"ircot: step 'stop_check' routes to answer, retrieve"):
        build(replace(spec, wire=wire_twice), ScriptedModel.for_method(spec.name))


# --------------------------------------------------------------------------- the reviews' routes

# The steps the human reviews run in (nodes.human): the note's review inside answer, the answer's
# in review_answer. Their routes out are what a reviewer's decisions make them take.
REVIEWING = ("answer", "review_answer")


def review_run(method: str) -> tuple[set[tuple[str, str]], set[str]]:
    """Run ``method`` with every review it has (the note's where its answer reads a note), a
    scripted model and a checkpointer: at each pause, reject once per action where the review
    offers it (its ``allowed_decisions``), else approve; then once without review. Returns the
    routes taken out of the reviewing steps, read from the order of the steps' updates (these
    steps run alone: nothing else runs beside the answer), and the actions that offered a
    reject."""
    graph = noterag.build_graph(
        method,
        model=ScriptedModel.for_method(method),
        retriever=KeywordRetriever(passages=CORPUS),
        checkpointer=InMemorySaver(),
    )
    reviews = "both" if method in note_methods() else "answer"
    taken: set[tuple[str, str]] = set()
    rejected: set[str] = set()
    for name, context in ((f"{method}-review", reviews), (f"{method}-none", "none")):
        config, settings = thread(name), {"human_review": context}
        steps: list[str] = []
        value: Any = {"question": "When was the designer of the Velmora Bridge born?"}
        for _ in range(20):  # a bound: each action is rejected at most once, then approved
            for update in graph.stream(value, config, context=settings, stream_mode="updates"):
                steps += [step for step in update if step != "__interrupt__"]
            interrupts = graph.get_state(config).interrupts
            if not interrupts:
                break
            [paused] = interrupts
            [action] = paused.value["action_requests"]
            [review] = paused.value["review_configs"]
            if "reject" in review["allowed_decisions"] and action["name"] not in rejected:
                rejected.add(action["name"])
                decision = {"type": "reject", "message": "Aurelio Fenwick born"}
            else:
                decision = {"type": "approve"}
            value = Command(resume={"decisions": [decision]})
        else:
            pytest.fail(f"{method}: the reviews did not end")
        assert graph.get_state(config).values["answer"], method
        steps.append(END)
        taken |= {(a, b) for a, b in pairwise(steps) if a in REVIEWING}
    return taken, rejected


@pytest.mark.parametrize("method", noterag.METHODS)
def test_the_drawing_shows_exactly_the_routes_the_reviews_take(method: str) -> None:
    """Each route a review takes is drawn, and no route out of a reviewing step is drawn that
    no decision takes: ``review_answer -> answer`` and ``answer -> answer`` (the note review's
    reject, answering again) for the methods whose reviews offer a reject (those with a
    note-update prompt, ``accumulate``: deepnote, adaptive-note, amber), neither for the rest."""
    graph = drawable(method)
    drawn = set(edges_of(graph.get_graph().to_json()))
    taken, rejected = review_run(method)
    assert taken <= drawn, f"{method}: routes taken but not drawn: {sorted(taken - drawn)}"
    out_of_reviews = {(a, b) for a, b in drawn if a in REVIEWING}
    assert out_of_reviews == taken, f"{method}: drawn, never taken: {out_of_reviews - taken}"
    # the routes back are there exactly where a reject is offered (and both of them, where the
    # answer reads a note and so is reviewed twice)
    assert (("review_answer", "answer") in taken) == ("review_answer" in rejected), method
    assert (("answer", "answer") in taken) == ("review_note" in rejected), method
    accumulates = any(hasattr(s, "accumulate") for s in METHODS[method].prompts.values())
    assert ("review_answer" in rejected) == accumulates, method


# --------------------------------------------------------------------------- through the server


def test_langgraph_json_serves_every_registered_method() -> None:
    assert sorted(SERVED) == sorted(noterag.METHODS)


@pytest.mark.server
@pytest.mark.parametrize("graph_id", SERVED)
def test_the_server_draws_every_method(server: str, graph_id: str) -> None:
    """What Studio's graph pane asks for: ``GET /assistants/{id}/graph``, and with ``xray``."""
    import httpx

    found = httpx.post(
        f"{server}/assistants/search", json={"graph_id": graph_id}, timeout=60
    ).json()
    assert found, f"no assistant for graph {graph_id!r}"
    assistant = found[0]["assistant_id"]
    graph = drawable(graph_id)
    for query in ("", "?xray=true"):
        response = httpx.get(f"{server}/assistants/{assistant}/graph{query}", timeout=120)
        assert response.status_code == 200, f"{graph_id}{query}: {response.text[:500]}"
        drawn = response.json()
        check_drawing(graph_id, graph, drawn)
        assert edges_of(drawn) == edges_of(graph.get_graph().to_json()), graph_id
