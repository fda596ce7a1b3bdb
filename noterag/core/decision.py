"""How a method stops: a ``Decision`` applies the method's stop rule where its algorithm box
tests it, and routes on it.

A stop rule ``rule(state, ctx, profile)`` reads the loop's counters and says why the loop stops
now, or None; each method keeps its rules in its own module (``graphs/<method>.py``) and
declares them in its ``MethodSpec.stops``. A ``Decision`` applies a rule and routes on it (the
step's update records the reason, a conditional edge routes on it): on to the method's next
step, or to ``answer`` with ``stop_reason`` set. It runs once, where the algorithm box puts the
test: at the end of the paper step that decides (DeepNote's adaptive retrieval decision,
Adaptive-Note's memory reviewer: ``node(review, deps, then=decide)``), or as a ``stop_check``
step of its own where the box tests apart from any step. Either way the method's wiring draws
the route itself, beside the node::

    decide = Decision(threshold_stop, go_on="refine_query")
    graph.add_node("review", node(review, deps, then=decide))
    graph.add_conditional_edges("review", decide.route, decide.routes)

``answer`` knows nothing about stopping.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import Runnable, RunnableConfig
from langgraph.runtime import get_runtime
from typing_extensions import TypedDict

from noterag.core.profiles import Profile
from noterag.core.spec import Deps, MethodError, StopRule
from noterag.core.step import both_ways, check_declared_stop, run_context


class Stopped(TypedDict, total=False):
    """What a decision's route reads of the state."""

    stop_reason: str


# the loop counters the stop rules read (noterag.core.state: plain int fields, written by the steps)
COUNTERS = ("steps", "failures", "tokens")


def counters_out_of_bounds(state: Mapping[str, Any]) -> str | None:
    """Why a loop must stop whatever its rule says: a counter no step would write (negative, or
    not a whole number) was written into the state from outside (``update_state``, a server
    client's command). None when they hold."""
    for key in COUNTERS:
        value = state.get(key, 0)
        if type(value) is not int or value < 0:
            return f"{key} = {value!r} was written into the state (counters are whole, >= 0)"
    return None


def single_pass(state: Mapping[str, Any], ctx: Any, profile: Profile | None = None) -> str:
    """The baselines answer after one pass, always."""
    return "single pass (the baseline has no loop)"


@dataclass(frozen=True)
class Decision:
    """Apply ``rule``: on to ``go_on``, or to ``stop`` with the reason recorded in
    ``stop_reason`` (and ``record(state)``'s update, e.g. a baseline's one trace entry).

    The step that decides writes its update with ``stop_reason`` (``settle``); the route is a
    conditional edge on the state that update leads to (``route``: ``stop`` once a
    ``stop_reason`` is set), which the method's wiring adds beside the deciding node:
    ``graph.add_conditional_edges(step, decide.route, decide.routes)``, the node's one route
    (what Studio draws, the stop labelled with the rule's name). An edge rather than a
    ``Command``: LangGraph re-runs a node's edges when ``update_state`` writes as that node, so
    "interrupt before answer, edit the state, continue" still reaches the answer; a
    ``Command``'s goto is lost there."""

    rule: StopRule
    go_on: str
    stop: str = "answer"
    record: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None

    def __post_init__(self) -> None:
        if self.rule.__name__ == self.go_on:  # the two routes' names would be one
            raise MethodError(
                f"a stop rule may not be named as the step it goes on to: {self.go_on!r}"
            )

    @property
    def destinations(self) -> tuple[str, str]:
        return (self.go_on, self.stop)

    @property
    def routes(self) -> dict[Hashable, str]:
        """The conditional edge's path map, what ``next_step`` says -> the node it leads to.
        Stopping is named by the rule (``threshold_stop``): LangGraph draws a route named
        otherwise than its node with the name on the edge, so Studio shows which stop
        condition leads to ``stop``; going on is named by its node (an edge with no label)."""
        return {self.go_on: self.go_on, self.rule.__name__: self.stop}

    def settle(
        self,
        state: Mapping[str, Any],
        ctx: Any,
        profile: Profile,
        update: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The step's ``update`` with ``stop_reason`` (and the record) when ``rule`` stops in
        ``state`` (the state after ``update``)."""
        # a counter written into the state from outside (update_state, a server client's
        # command) stops the loop before the rule reads it: steps = -1000 would run on
        why = counters_out_of_bounds(state) or self.rule(state, ctx, profile)
        if why:
            record = self.record(state) if self.record else {}
            return {**(update or {}), "stop_reason": why, **record}
        return dict(update or {})

    def route(self, state: Stopped) -> str:
        """Where the graph goes after the deciding step (its conditional edge's path): the
        route to ``stop`` once a ``stop_reason`` is set, else ``go_on`` (a key of ``routes``).
        Its parameter's type tells LangGraph to read only ``stop_reason`` for it, not a copy of
        the whole state."""
        return self.rule.__name__ if state.get("stop_reason") else self.go_on


def stop_check(decision: Decision, deps: Deps) -> Runnable:
    """The graph step that applies ``decision`` where the algorithm box tests it apart from any
    step; the wiring adds it as the node ``stop_check`` and draws its route::

        check = Decision(ircot_stop, go_on="retrieve")
        graph.add_node("stop_check", stop_check(check, deps))
        graph.add_conditional_edges("stop_check", check.route, check.routes)
    """
    check_declared_stop(deps, "stop_check", decision.rule)

    def stop_check(state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        ctx = run_context(deps.context_schema, get_runtime().context, config.get("configurable"))
        return decision.settle(state, ctx, deps.profile(ctx, state))

    async def astop_check(state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        return stop_check(state, config)

    # a Runnable with an async body: it only computes, so under ainvoke it runs on the event
    # loop (LangGraph runs a plain sync function node in a worker thread there)
    return both_ways(stop_check, astop_check, name="stop_check")
