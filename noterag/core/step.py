"""How a step talks to the outside world: model calls and searches as values.

A step is a generator function ``step(state, env)`` named after the paper's step. It yields
``Ask`` (one model call) or ``Search`` (one retrieval), or a list of them to run concurrently,
receives the results, and returns the state update. ``node(step, deps)`` turns it into a graph
node, a plain ``RunnableLambda`` with a sync and an async body, that runs the same code under
``invoke`` (threads for concurrent effects) and ``ainvoke`` (``asyncio.gather``), so every step
is written once and the async path is truly async (one event loop, no thread per call); being a
plain Runnable, it serves every entry point (``stream``, ``astream_events``, ``astream_log``,
...) as LangChain's own do. ``env`` is the LangGraph runtime (``langgraph.runtime.get_runtime``)
seen through the method: the run's context (``runtime.context``, defaults when None), its stream
writer (``env.emit`` is ``runtime.stream_writer``), the profile's strategies and the prompt set.
docs/methods.md, "How a step is written", is the one page about this design.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langchain_core.runnables.config import get_executor_for_config
from langgraph.runtime import get_runtime
from langgraph.types import Command, Overwrite

from noterag.core.budget import guarded
from noterag.core.context import (
    RunContext,
    check_configurable,
    configured,
    resolve_context,
    with_configurable,
)
from noterag.core.lcel import VERBATIM_ANSWER
from noterag.core.parsing import count_fallbacks, fell_back
from noterag.core.profiles import Profile
from noterag.core.retry import note_search
from noterag.core.spec import Deps, MethodError, override_prompts
from noterag.core.state import Passage, after_update, declared_keys
from noterag.retrievers.calls import asearch

# Internal calls must not reach `stream_mode="messages"`: only the answer's tokens do.
NOSTREAM = "nostream"

# The custom event the engine sends for every search, with the passages' text (the trace page
# and ``noterag ask --json`` read the text from it: the state keeps ids only, and a method's own
# steps may rewrite or drop what they read).
RETRIEVAL = "retrieval"


def retrieval_event(query: str, k: int, passages: list[Passage]) -> dict[str, Any]:
    """The ``{"type": "retrieval", ...}`` event of one search: its query, k and passages."""
    return {"type": RETRIEVAL, "query": query, "k": k, "passages": [dict(p) for p in passages]}


@dataclass(frozen=True)
class Ask:
    """One model call for the paper step ``stage`` (also the model role it uses). The step
    receives the reply's text; with ``message=True`` the whole reply message (its
    ``response_metadata``, e.g. token log-probabilities), and with ``stream=True`` (its tokens
    reach ``stream_mode="messages"``) the message too, so that a message written to state can
    keep its id: LangGraph's messages stream skips a node's output message whose id it has
    already streamed. ``options`` are extra per-call model arguments (``{"logprobs": True}``,
    ``{"stop": [...]}``), on top of the run's sampling settings (an option the sampling also
    sets wins: the step asked for it). ``verbatim=True`` (with ``stream``): the reply's text,
    stripped, is the run's answer as it is, so ``noterag.answer_only`` streams these tokens as
    the answer's; a step that makes its answer from the reply (extracts it) leaves it False, and
    ``answer_only`` sends that answer whole once the run has it."""

    stage: str
    prompt: str
    stream: bool = False
    message: bool = False
    options: Mapping[str, Any] = field(default_factory=dict)
    verbatim: bool = False

    @property
    def wants_message(self) -> bool:
        return self.stream or self.message


@dataclass(frozen=True)
class Search:
    """One retrieval of the top ``k`` passages for ``query``."""

    query: str
    k: int


Effect = Ask | Search
StepGen = Generator[Effect | list[Effect], Any, dict[str, Any]]
# a step that may also end with a Command (a human review going back to a step)
RoutingStepGen = Generator[Effect | list[Effect], Any, Any]


@dataclass(frozen=True)
class Env:
    """What a step sees besides the state: this run's context and the method's parts."""

    ctx: Any
    deps: Deps
    profile: Profile
    # the runtime's stream writer (stream_mode="custom"); LangGraph's does nothing when nobody
    # listens
    writer: Callable[[Any], None] = lambda event: None

    @functools.cached_property  # built once per node run, and only when a step reads a prompt
    def prompts(self) -> Any:
        """The method's prompt set for this run's profile, with the run's prompt overrides
        (the context field ``prompts``)."""
        return override_prompts(self.deps.prompts[self.profile.name], self.ctx.prompts)

    @property
    def passage_cap(self) -> int | None:
        """The run's ``max_passage_chars`` (None for a context without the field: no cap)."""
        return getattr(self.ctx, "max_passage_chars", None)

    def emit(self, event: dict[str, Any]) -> None:
        """Send one progress event to ``stream_mode="custom"``."""
        self.writer(event)

    def sampling(self) -> dict[str, Any]:
        """Per-call sampling arguments: the profile's (official: the official code's 0.1 / 0.9 /
        1280), then what the run sets. Passed with each call, so they reach model objects a
        caller built too."""
        return dict(self._sampling)

    @functools.cached_property  # built once per node run: read-only
    def _sampling(self) -> dict[str, Any]:
        return {**self.profile.sampling, **self.ctx.sampling()}


def reply_text(message: BaseMessage, sep: str = "") -> str:
    """The message's text: its content, or its text parts joined with ``sep``."""
    content = message.content
    if isinstance(content, str):
        return content
    return sep.join(
        part if isinstance(part, str) else str(part.get("text", ""))
        for part in content
        if isinstance(part, str) or part.get("type") == "text"
    )


def as_message(reply: Any) -> Any:
    """A model call's reply as a message: a chat model (or a wrapper of one) returns one; a
    Runnable ending in an output parser returns its text."""
    if isinstance(reply, BaseMessage):
        return reply
    return AIMessage(reply if isinstance(reply, str) else str(reply))


def to_passage(doc: Any) -> Passage:
    meta = doc.metadata or {}
    return Passage(
        id=str(doc.id or meta.get("id") or meta.get("title", "") + doc.page_content[:64]),
        title=str(meta.get("title", "")),
        text=doc.page_content,
    )


# What a cut passage ends with, so that the model (and the trace's reader) sees it was cut.
TRUNCATION_MARK = " [...]"


def capped(passages: list[Passage], limit: int | None) -> list[Passage]:
    """``passages`` with any title or text longer than ``limit`` characters cut to it (the
    context's ``max_passage_chars``; None: as they are), each cut passage counted once in the
    run's ``fallbacks`` as ``passage_truncated``. Done where a search returns, so that every
    prompt, the state and the trace hold the same text."""
    if limit is None:
        return passages
    out: list[Passage] = []
    for p in passages:
        if len(p["text"]) > limit or len(p["title"]) > limit:
            fell_back("passage_truncated")
            p = Passage(
                id=p["id"],
                title=p["title"][:limit] + TRUNCATION_MARK
                if len(p["title"]) > limit
                else p["title"],
                text=p["text"][:limit] + TRUNCATION_MARK if len(p["text"]) > limit else p["text"],
            )
        out.append(p)
    return out


def searched(env: Env, search: Search, docs: list[Any]) -> list[Passage]:
    """The passages a search found (capped as the run says), announced as a retrieval event."""
    found = capped([to_passage(d) for d in docs[: search.k]], env.passage_cap)
    env.emit(retrieval_event(search.query, search.k, found))
    return found


class _Tally:
    """Cost of one node run, added to the state's cost fields: its model calls and tokens, and
    the replies its parsers could not read (``fallbacks``, bound to ``count_fallbacks`` while
    the step runs)."""

    def __init__(self) -> None:
        self.calls = self.prompt_tokens = self.completion_tokens = 0
        self.fallbacks: Mapping[str, int] = {}

    def add(self, message: AIMessage) -> None:
        self.calls += 1
        usage = getattr(message, "usage_metadata", None) or {}
        self.prompt_tokens += usage.get("input_tokens", 0)
        self.completion_tokens += usage.get("output_tokens", 0)

    def update(self) -> dict[str, Any]:
        update: dict[str, Any] = {}
        if self.calls:
            update |= {
                "llm_calls": self.calls,
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens,
            }
        if self.fallbacks:
            update["fallbacks"] = dict(self.fallbacks)
        return update


def _arguments(env: Env, ask: Ask) -> dict[str, Any]:
    """The per-call model arguments of ``ask``: the run's sampling, then the call's options."""
    sampling = env._sampling  # only unpacked into the call's keywords: never changed
    return sampling | dict(ask.options) if ask.options else sampling


def _ask_config(ask: Ask) -> RunnableConfig:
    """The config of one model call. ``nostream`` keeps an internal call's chat model run out of
    ``stream_mode="messages"``. The run is not named after the stage alone: the outermost run
    of a wrapped model (``with_retry``, ``with_fallbacks``: a chain run, which LangGraph's
    messages stream does not check for ``nostream``) would then carry the node's name, and
    LangGraph takes a chain run named after the node for the node itself and streams the
    message it returns."""
    return {
        "run_name": f"{ask.stage}.model",
        "tags": [] if ask.stream else [NOSTREAM],
        "metadata": {"noterag_stage": ask.stage}
        | ({VERBATIM_ANSWER: True} if ask.stream and ask.verbatim else {}),
    }


def run_context(schema: type[RunContext], given: Any, configurable: Any = None) -> RunContext:
    """The run's settings: ``given`` (the runtime's context: None, a dict or the dataclass)
    resolved against ``schema``, with the settings given as ``config["configurable"]`` beneath
    it (``with_configurable``). An invalid context or setting raises here, naming it."""
    if not configured(schema, configurable):
        if isinstance(given, schema):  # LangGraph turned a dict context into the dataclass
            return given
        if given is None:
            return defaults(schema)
    return resolve_context(schema, with_configurable(schema, given, configurable))


@functools.cache  # one per settings class: a run without a context reads the defaults
def defaults(schema: type[RunContext]) -> RunContext:
    """``schema``'s default settings (steps only read their context, so runs share one)."""
    return schema()


def env_of(deps: Deps, state: Mapping[str, Any], config: RunnableConfig) -> Env:
    """What a step of ``deps``' method sees in this run: its settings (the runtime's context
    and the node's ``configurable``, each key checked), its profile, its stream writer."""
    runtime = get_runtime(deps.context_schema)
    configurable = config.get("configurable")
    check_configurable(deps.context_schema, configurable, deps.config_keys)
    ctx = run_context(deps.context_schema, runtime.context, configurable)
    env = Env(ctx=ctx, deps=deps, profile=deps.profile(ctx, state), writer=runtime.stream_writer)
    if ctx.prompts:
        env.prompts  # noqa: B018 -- a misfit override is refused here, before any model call
    return env


class Then(Protocol):
    """What decides at the end of a step (``noterag.core.decision.Decision``): ``settle`` adds the
    decision to the step's update; its ``route`` is the step's conditional edge, which the
    method's wiring adds beside the node."""

    @property
    def rule(self) -> Any: ...

    def settle(
        self, state: Mapping[str, Any], ctx: Any, profile: Profile, update: Mapping[str, Any]
    ) -> dict[str, Any]: ...


def check_declared_stop(deps: Deps, step: str, rule: Any) -> None:
    """Refuse a step deciding by a rule its method does not declare (``MethodSpec.stops``)."""
    if deps.stops is not None and rule not in deps.stops:
        declared = ", ".join(r.__name__ for r in deps.stops) or "none"
        raise MethodError(
            f"{deps.method}: step {step!r} stops by {rule.__name__}, which the method does not "
            f"declare; add it to its MethodSpec.stops (declared: {declared})"
        )


def node(step: Callable[[Any, Env], StepGen], deps: Deps, *, then: Then | None = None) -> Runnable:
    """A graph node running ``step`` with ``deps`` bound, under invoke and ainvoke alike: a
    ``RunnableLambda`` with a sync and an async body. ``then``: the step also decides where the
    graph goes, from the state its update leads to (one graph step, as the paper's step is one:
    DeepNote's adaptive retrieval decision both reviews the note and decides whether to retrieve
    again); its update records the decision (``stop_reason``), and the method's wiring adds the
    decision's route as the node's conditional edge
    (``graph.add_conditional_edges(name, decide.route, decide.routes)``). A step may also return
    a ``Command`` (a human review going back to a step): the node's cost is added to its update."""

    # every step stops before a model call past the turn's call budget, its replies cut at
    # the run's max_tokens (noterag.core.budget)
    step = guarded(step, deps.method, deps.calls)
    # read once, when the graph is built: every run of the node uses them
    name, state_schema = step.__name__, deps.state_schema
    declared = declared_keys(state_schema)
    if then is not None:
        check_declared_stop(deps, name, then.rule)

    def finish(state: dict[str, Any], env: Env, update: Any, cost: dict[str, Any]) -> Any:
        if isinstance(update, Command):
            check_update(deps, name, dict(update.update or {}))
            return Command(
                graph=update.graph,
                goto=update.goto,
                resume=update.resume,
                update=with_cost(dict(update.update or {}), cost),
            )
        if declared is not None and not update.keys() <= declared:
            check_update(deps, name, update)  # names the keys the state does not declare
        if cost:
            update = with_cost(update, cost)
        if then is None:
            return update
        after = after_update(state_schema, state, update)
        return then.settle(after, env.ctx, env.profile, update)

    def run_sync(state: dict[str, Any], config: RunnableConfig) -> Any:
        env, tally = env_of(deps, state, config), _Tally()

        def perform(effect: Effect) -> Any:
            if isinstance(effect, Search):
                try:
                    docs = deps.retriever.invoke(effect.query, k=effect.k)
                except Exception as exc:
                    note_search(exc)
                    raise
                return searched(env, effect, docs)
            message = as_message(
                deps.model_for(effect.stage, stream=effect.stream).invoke(
                    effect.prompt, config=_ask_config(effect), **_arguments(env, effect)
                )
            )
            tally.add(message)
            return message if effect.wants_message else reply_text(message)

        def perform_all(effects: list[Effect]) -> list[Any]:
            if len(effects) <= 1:
                return [perform(e) for e in effects]
            with get_executor_for_config(config) as pool:
                return list(pool.map(perform, effects))

        with count_fallbacks() as tally.fallbacks:
            update = _drive(step(state, env), perform, perform_all)
        return finish(state, env, update, tally.update())

    async def run_async(state: dict[str, Any], config: RunnableConfig) -> Any:
        env, tally = env_of(deps, state, config), _Tally()
        gen = step(state, env)

        async def perform(effect: Effect) -> Any:
            if isinstance(effect, Search):
                try:
                    docs = await asearch(deps.retriever, effect.query, effect.k)
                except Exception as exc:
                    note_search(exc)
                    raise
                return searched(env, effect, docs)
            message = as_message(
                await deps.model_for(effect.stage, stream=effect.stream).ainvoke(
                    effect.prompt, config=_ask_config(effect), **_arguments(env, effect)
                )
            )
            tally.add(message)
            return message if effect.wants_message else reply_text(message)

        result: Any = None
        with count_fallbacks() as tally.fallbacks:  # the step's parsers run inside gen.send
            try:
                while True:
                    request = gen.send(result)
                    if not isinstance(request, list):
                        result = await perform(request)
                    elif len(request) > 1:
                        result = list(await asyncio.gather(*(perform(e) for e in request)))
                    else:  # no task for one effect (a step searching for one query) or none
                        result = [await perform(e) for e in request]
            except StopIteration as done:
                update = done.value or {}
        return finish(state, env, update, tally.update())

    return both_ways(run_sync, run_async, name=name)


def with_cost(update: dict[str, Any], cost: dict[str, Any]) -> dict[str, Any]:
    """``update`` with a node's cost fields added: a field the update resets (an ``Overwrite``,
    the question step starting a thread's next turn) restarts at this node's cost."""
    merged = update | cost
    if update.keys().isdisjoint(cost):  # most updates: no cost field of their own
        return merged
    for key, value in cost.items():
        if isinstance(update.get(key), Overwrite):
            merged[key] = Overwrite(value)
    return merged


def check_update(deps: Deps, step: str, update: Mapping[str, Any]) -> None:
    """Refuse an update key the method's state does not declare: LangGraph drops such a key
    without a word, and nothing can tell before the step runs."""
    declared = declared_keys(deps.state_schema)
    if declared is None:
        return
    unknown = [key for key in update if key not in declared]
    if unknown:
        raise MethodError(
            f"{deps.method}: step {step!r} wrote {', '.join(map(repr, unknown))}, which its state "
            f"{deps.state_schema.__name__} does not declare; add it to the state schema"
        )


def both_ways(
    func: Callable[[Any, RunnableConfig], Any],
    afunc: Callable[[Any, RunnableConfig], Any],
    *,
    name: str,
) -> Runnable:
    """A graph node with a sync and an async body, each ``(state, config)``: LangChain's
    ``RunnableLambda``, which LangGraph runs as any Runnable under every entry point. A body
    reads the run's ``Runtime`` with ``langgraph.runtime.get_runtime()`` (``env_of``)."""
    return RunnableLambda(func, afunc, name=name)


def _drive(
    gen: StepGen,
    perform: Callable[[Effect], Any],
    perform_all: Callable[[list[Effect]], list[Any]],
) -> dict[str, Any]:
    result: Any = None
    try:
        while True:
            request = gen.send(result)
            result = perform_all(request) if isinstance(request, list) else perform(request)
    except StopIteration as done:
        return done.value or {}
