"""A method's graph, assembled from its declaration (``MethodSpec``, noterag.core.spec).

What every method shares around its own wiring lives here, above the steps and prompts it
uses and below the registry, each piece added by one named call of ``build``: the ``question``
step (``add_question``: noterag.core.question, a follow-up rewritten with
``prompts.conversation``), the answer's human review (``add_answer_review``: ``nodes.human``)
and the search retries (``add_search_retries``); and the factory a graph module names in
langgraph.json. A method's own wiring (``MethodSpec.wire``) adds its steps and every route
between them, its stop rules' conditional edges included. A graph module says
``build = builder(SPEC)`` and ``make_graph = server_graph(SPEC)``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import get_runtime

from noterag.core.checks import check_method
from noterag.core.policy import ServerPolicy, check_run_settings
from noterag.core.question import question_step
from noterag.core.retry import SEARCH_RETRY
from noterag.core.spec import Deps, MethodError, MethodSpec, check_run_prompts
from noterag.core.state import QuestionInput, declared_keys
from noterag.core.step import node, run_context
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
    with ``prompts.conversation``), then the method's own wiring (its steps and every route
    between them), then what every method shares: the answer's human review and the search
    retries. ``checkpointer``, ``store``
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
    add_question(graph, deps)
    spec.wire(graph, deps)
    check_method(spec, graph)  # a contributor's mistakes, before any call (noterag.core.checks)
    check_routes(graph, spec)
    add_answer_review(graph, deps)
    add_search_retries(graph)
    return graph.compile(name=spec.name, checkpointer=checkpointer, store=store, cache=cache)


def builder(spec: MethodSpec) -> Callable[..., Any]:
    """``build`` with the method ``spec`` bound: a graph module's ``build(model, retriever,
    ...)``."""

    def build_method(model: Any = None, retriever: Any = None, **options: Any) -> Any:
        return build(spec, model, retriever, **options)

    build_method.__doc__ = f"The compiled {spec.name} graph (noterag.graphs.assemble.build)."
    return build_method


def add_question(graph: StateGraph[Any, Any, Any, Any], deps: Deps) -> None:
    """Every graph starts with the ``question`` step (noterag.core.question): the run's question,
    a chat's follow-up rewritten with ``prompts.conversation``. A method's wiring goes on from
    it (``graph.add_edge("question", ...)``)."""
    graph.add_node(
        "question", cast(Any, question_step(deps.state_schema, deps, CONDENSE, ROLE_PREFIX))
    )
    graph.add_edge(START, "question")


def check_routes(graph: StateGraph[Any, Any, Any, Any], spec: MethodSpec) -> None:
    """A step's conditional edge is its one route to its targets: a step that also declares one
    of them as a ``Command`` destination (``add_node(destinations=...)``) is refused, since
    LangGraph's drawer then finds two edges to the same node, one labelled None, and fails
    sorting them (``get_graph()``, Studio's graph pane, raised TypeError)."""
    for name, branches in graph.branches.items():
        routed = {target for branch in branches.values() for target in (branch.ends or {}).values()}
        if twice := sorted(routed & set(graph.nodes[name].ends or ())):
            raise MethodError(
                f"{spec.name}: step {name!r} routes to {', '.join(twice)} by its conditional "
                f"edge; drop them from its add_node(destinations=...)"
            )


def add_search_retries(graph: StateGraph[Any, Any, Any, Any]) -> None:
    """LangGraph's ``RetryPolicy`` for the searches (``noterag.core.retry.SEARCH_RETRY``: a search
    failing for a moment runs its node again) on every node a method has not given its own
    policy: the policy retries only an exception a search raised, so a node that never searches
    is never run again."""
    for node_spec in graph.nodes.values():
        if node_spec.retry_policy is None:
            node_spec.retry_policy = SEARCH_RETRY


def add_answer_review(graph: StateGraph[Any, Any, Any, Any], deps: Deps) -> None:
    """A method that ends with ``answer`` gets the answer's human review after it
    (``nodes.human.review_answer``): the method's edge from ``answer`` to the end becomes a
    conditional edge, to the review when the run's ``human_review`` asks for it, else to the end.
    A review's reject goes back to ``answer`` (a ``Command``) where the method can retrieve more
    (``nodes.human.review_routes``), as the note's review in ``answer`` does: declared as those
    steps' destinations, so Studio draws those routes for the methods that take them and no
    others."""
    if ("answer", END) not in graph.edges:
        return
    graph.edges.discard(("answer", END))  # replaced by the route below, which includes END

    def review_or_end(state: Any, config: RunnableConfig) -> str:
        # the run's settings; update_state runs a node's routes with no run under way (no
        # runtime): then the defaults, no review
        given = getattr(get_runtime(deps.context_schema), "context", None)
        ctx = run_context(deps.context_schema, given, config.get("configurable"))
        answered = state.get("answer") is not None
        return "review_answer" if answered and reviews(ctx, "answer") else END

    graph.add_conditional_edges("answer", review_or_end, ["review_answer", END])
    back = review_routes(deps.prompts)
    if back["answer"]:  # the note's review (in answer) going back to answer: a Command
        graph.nodes["answer"].ends = back["answer"]
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
