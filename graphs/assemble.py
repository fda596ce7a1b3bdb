"""A method's graph, assembled from its declaration (``MethodSpec``, noterag.core.spec).

What every method shares around its own wiring lives here, above the steps and prompts it
uses and below the registry: the ``question`` step (noterag.core.question, a follow-up rewritten
with ``prompts.conversation``), the route of each deciding step, the answer's human review
(``nodes.human``), and the factory a graph module names in langgraph.json. A graph module
says ``build = builder(SPEC)`` and ``make_graph = server_graph(SPEC)``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

from langgraph.graph import END, START, StateGraph
from langgraph.types import Command

from noterag.core.checks import check_method
from noterag.core.policy import ServerPolicy, check_run_settings
from noterag.core.question import question_step
from noterag.core.retry import SEARCH_RETRY, searches
from noterag.core.spec import Deps, MethodError, MethodSpec, check_run_prompts
from noterag.core.state import QuestionInput, declared_keys
from noterag.core.step import StepRunnable, decision_of, node, run_context
from noterag.nodes.human import review_answer, review_routes, reviews
from noterag.prompts.conversation import CONDENSE, ROLE_PREFIX

if TYPE_CHECKING:
    # langgraph-api resolves the factory's annotation by this name to tell a runtime
    # parameter from a config one
    from langgraph_sdk.runtime import ServerRuntime


def build(
    spec: MethodSpec,
    model: Any = None,
    retriever: Any = None,
    *,
    prompts: Mapping[str, Any] | None = None,
    checkpointer: Any = None,
    store: Any = None,
    cache: Any = None,
    **role_models: Any,
) -> Any:
    """The compiled graph of the method ``spec``: the question step (a follow-up rewritten
    with ``prompts.conversation``), then the method's own wiring, then what
    every method shares: each deciding step's route (a conditional edge, see
    ``noterag.core.decision.Decision``) and the answer's human review. ``checkpointer``, ``store``
    and ``cache`` are LangGraph's (``InMemorySaver()``, ``SqliteSaver``, ``PostgresSaver``;
    ``InMemoryStore()``; ``InMemoryCache()``), given to ``compile``; None: none."""
    if spec.queries is not None and spec.queries not in (
        declared_keys(spec.state) or {spec.queries}
    ):
        raise MethodError(
            f"{spec.name}: its queries field {spec.queries!r} is not a field of its state "
            f"{spec.state.__name__}"
        )
    deps = spec.bind(model, retriever, prompts=prompts, **role_models)
    graph: StateGraph[Any, Any, Any, Any] = StateGraph(
        spec.state,
        context_schema=spec.context,
        input_schema=QuestionInput,
        output_schema=spec.output,
    )
    graph.add_node("question", cast(Any, question_step(spec.state, deps, CONDENSE, ROLE_PREFIX)))
    graph.add_edge(START, "question")
    spec.wire(graph, deps)
    check_method(spec, graph)  # a contributor's mistakes, before any call (noterag.core.checks)
    wire_decisions(graph, spec)
    wire_answer_review(graph, deps)
    wire_retries(graph)
    return graph.compile(name=spec.name, checkpointer=checkpointer, store=store, cache=cache)


def builder(spec: MethodSpec) -> Callable[..., Any]:
    """``build`` with the method ``spec`` bound: a graph module's ``build(model, retriever,
    ...)``."""

    def build_method(model: Any = None, retriever: Any = None, **options: Any) -> Any:
        return build(spec, model, retriever, **options)

    build_method.__doc__ = f"The compiled {spec.name} graph (noterag.graphs.assemble.build)."
    return build_method


def wire_retries(graph: StateGraph[Any, Any, Any, Any]) -> None:
    """LangGraph's ``RetryPolicy`` for every node that searches (``noterag.core.retry.SEARCH_RETRY``:
    a search failing for a moment runs its node again) that a method has not given its own."""
    for node_spec in graph.nodes.values():
        if node_spec.retry_policy is None and searches(node_spec.runnable):
            node_spec.retry_policy = SEARCH_RETRY


def wire_decisions(graph: StateGraph[Any, Any, Any, Any], spec: MethodSpec) -> None:
    """The route of every step that decides (``noterag.core.decision.Decision``), as a conditional
    edge from it: LangGraph re-runs a node's edges when ``update_state`` writes as that node. A
    step deciding by a rule the method does not declare (``MethodSpec.stops``) is refused.

    The edge is the step's one route to its destinations, and what Studio draws: a step that
    also declares one of them as a ``Command`` destination (``add_node(destinations=...)``) is
    refused, since LangGraph's drawer (``langgraph.pregel._draw``) then finds two edges to the
    same node, one labelled None, and fails sorting them (``get_graph()`` raised TypeError)."""
    for name, node_spec in list(graph.nodes.items()):
        decision = decision_of(node_spec.runnable)
        if decision is not None:
            if decision.rule not in spec.stops:
                declared = ", ".join(rule.__name__ for rule in spec.stops) or "none"
                raise MethodError(
                    f"{spec.name}: step {name!r} stops by {decision.rule.__name__}, which the "
                    f"method does not declare; add it to its MethodSpec.stops (declared: "
                    f"{declared})"
                )
            if twice := sorted(set(node_spec.ends or ()) & set(decision.destinations)):
                raise MethodError(
                    f"{spec.name}: step {name!r} routes to {', '.join(twice)} by its decision's "
                    f"conditional edge; drop them from its add_node(destinations=...)"
                )
            graph.add_conditional_edges(name, decision.edge(), decision.routes)


def wire_answer_review(graph: StateGraph[Any, Any, Any, Any], deps: Deps) -> None:
    """A method that ends with ``answer`` gets the answer's human review after it
    (``nodes.human.review_answer``): when the run's ``human_review`` asks for it, the answer
    node's update goes on to the review (a ``Command``; a review's reject goes back to
    ``answer`` instead, where the method can retrieve more: ``nodes.human.review_routes``).
    Decided in the node, where the run's context is at hand: an edge's path would need
    LangGraph to hand it the runtime, through a thread hop under ainvoke."""
    if ("answer", END) not in graph.edges:
        return
    answer: Any = graph.nodes["answer"].runnable  # a Runnable: every method's answer is a node()

    def then_review(update: Any, config: Any, runtime: Any) -> Any:
        answered = isinstance(update, dict) and update.get("answer") is not None
        if answered:
            ctx = run_context(deps.context_schema, runtime.context, config.get("configurable"))
            if reviews(ctx, "answer"):
                return Command(goto="review_answer", update=update)
        return update

    def answer_then_review(state: Any, config: Any, runtime: Any) -> Any:
        return then_review(answer.invoke(state, config), config, runtime)

    async def aanswer_then_review(state: Any, config: Any, runtime: Any) -> Any:
        return then_review(await answer.ainvoke(state, config), config, runtime)

    graph.nodes["answer"].runnable = StepRunnable(
        answer_then_review, aanswer_then_review, name=answer.name or "answer"
    )
    # A reject goes back to answer (a Command) only where the reviews can retrieve more
    # (nodes.human.review_routes): declared there and nowhere else, so Studio draws those
    # routes for the methods that take them and no others. END too: LangGraph's drawer sees a
    # static edge to END only from a node with no other route (END is never written), so
    # without it Studio would draw every answer going to the review.
    back = review_routes(deps.prompts)
    graph.nodes["answer"].ends = ("review_answer", *back["answer"], END)
    graph.add_node(
        "review_answer",
        cast(Any, node(review_answer, deps)),
        destinations=(*back["review_answer"], END) if back["review_answer"] else None,
    )
    if not back["review_answer"]:
        graph.add_edge("review_answer", END)  # its one route: drawn as a plain edge


def server_graph(spec: MethodSpec) -> Callable[..., Any]:
    """The async factory a graph module names in langgraph.json (``make_graph = server_graph(SPEC)``).

    langgraph-api calls it for every run (and every schema or state read) with a
    ``ServerRuntime``; for a run, its ``context`` is the run's settings merged with its
    assistant's, before the server drops the keys the context schema lacks. So this is where a
    run's settings are checked against the method and the operator's policy
    (``noterag.core.policy``), before any node runs: an unknown key, a bad value, sampling or
    prompts the operator did not open to clients, a misfit prompt override, a model or index
    outside the operator's lists are each one clear error. The graph for a (model, index) pair
    is built once, in a thread (building may start the local model, and the factory runs on
    the server's event loop); the pairs are the operator's, so the graphs kept are bounded."""
    built: dict[tuple[str | None, str | None], Any] = {}
    lock = threading.Lock()
    policies: list[ServerPolicy] = []

    def build_once(model: str | None, index: str | None) -> Any:
        with lock:
            if (model, index) not in built:
                built[model, index] = build(spec, model, index)
        return built[model, index]

    async def make_graph(runtime: ServerRuntime) -> Any:
        execution = getattr(runtime, "execution_runtime", None)
        key: tuple[str | None, str | None] = (None, None)
        if execution is not None:
            if not policies:
                policies.append(ServerPolicy.from_env())
            settings = check_run_settings(spec.context, execution.context, policies[0])
            check_run_prompts(spec, settings.context)
            key = (settings.model, settings.index)
        if key in built:
            return built[key]
        return await asyncio.to_thread(build_once, *key)

    make_graph.__doc__ = f"The {spec.name} graph for langgraph.json, built from the environment."
    return make_graph
