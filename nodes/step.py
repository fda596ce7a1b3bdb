"""How a step talks to the outside world: model calls and searches as values.

A step is a generator function ``step(state, env)`` named after the paper's step. It yields
``Ask`` (one model call) or ``Search`` (one retrieval), or a list of them to run concurrently,
receives the results, and returns the state update. ``node(step, deps)`` turns it into a graph
node that runs the same code under ``invoke`` (threads for concurrent effects) and ``ainvoke``
(``asyncio.gather``), so every step is written once and the async path is truly async.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.runnables.config import get_executor_for_config, run_in_executor
from langgraph.config import get_stream_writer
from langgraph.runtime import get_runtime

from noterag.context import RunContext, resolve_context
from noterag.nodes.parsing import count_fallbacks
from noterag.profiles import Profile, get_profile
from noterag.state import Passage

# Internal calls must not reach `stream_mode="messages"`: only the answer's tokens do.
NOSTREAM = "nostream"


@dataclass(frozen=True)
class Ask:
    """One model call for the paper step ``stage`` (also the model role it uses). The step
    receives the reply's text; with ``stream=True`` (its tokens reach ``stream_mode="messages"``)
    it receives the reply message itself, so that a message written to state can keep its id:
    LangGraph's messages stream skips a node's output message whose id it has already streamed."""

    stage: str
    prompt: str
    stream: bool = False


@dataclass(frozen=True)
class Search:
    """One retrieval of the top ``k`` passages for ``query``."""

    query: str
    k: int


Effect = Ask | Search
StepGen = Generator[Effect | list[Effect], Any, dict[str, Any]]


@dataclass
class Deps:
    """What a method's graph is built with: bound once, when the graph is built."""

    method: str
    models: Mapping[str, BaseChatModel]  # role -> model; "default" for every other role
    retriever: BaseRetriever
    prompts: Mapping[str, Any]  # profile name -> the method's prompt set
    context_schema: type[RunContext]
    # ranks by embeddings: the official profile formats such passages as the official codes do
    dense: bool = False
    stop_rule: Callable[[Mapping[str, Any], Any, Profile], str | None] | None = None
    extras: dict[str, Any] = field(default_factory=dict)
    # stage -> model role where one role serves several stages (ReSP's reasoner: judge, plan);
    # a stage not listed is its own role
    stage_roles: Mapping[str, str] = field(default_factory=dict)

    _quiet: dict[str, BaseChatModel] = field(default_factory=dict, repr=False)

    def model_for(self, stage: str, *, stream: bool = False) -> BaseChatModel:
        """The stage's model. Internal calls get a copy that never streams: under
        ``stream_mode="messages"`` LangGraph would otherwise make every call stream, and the
        streamed replies of many endpoints carry no token usage."""
        role = self.stage_roles.get(stage, stage)
        model = self.models.get(role) or self.models["default"]
        if stream:
            return model
        if role not in self._quiet:
            self._quiet[role] = model.model_copy(update={"disable_streaming": True})
        return self._quiet[role]


@dataclass(frozen=True)
class Env:
    """What a step sees besides the state: this run's context and the method's parts."""

    ctx: Any
    deps: Deps
    profile: Profile

    @property
    def prompts(self) -> Any:
        """The method's prompt set for this run's profile."""
        return self.deps.prompts[self.profile.name]

    def sampling(self) -> dict[str, Any]:
        """Per-call sampling arguments: the profile's (official: the official code's 0.1 / 0.9 /
        1280), then what the run sets. Passed with each call, so they reach model objects a
        caller built too."""
        return {**self.profile.sampling, **self.ctx.sampling()}


def emit(event: dict[str, Any]) -> None:
    """Send one progress event to ``stream_mode="custom"`` (a no-op outside a graph run)."""
    try:
        writer = get_stream_writer()
    except RuntimeError:
        return
    writer(event)


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


def to_passage(doc: Any) -> Passage:
    meta = doc.metadata or {}
    return Passage(
        id=str(doc.id or meta.get("id") or meta.get("title", "") + doc.page_content[:64]),
        title=str(meta.get("title", "")),
        text=doc.page_content,
    )


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


def _ask_config(ask: Ask) -> RunnableConfig:
    return {
        "run_name": ask.stage,
        "tags": [] if ask.stream else [NOSTREAM],
        "metadata": {"noterag_stage": ask.stage},
    }


def node(step: Callable[[Any, Env], StepGen], deps: Deps) -> RunnableLambda:
    """A graph node running ``step`` with ``deps`` bound, under invoke and ainvoke alike."""

    def env_now(state: Mapping[str, Any]) -> Env:
        ctx = resolve_context(deps.context_schema, get_runtime().context)
        profile = get_profile(
            ctx.profile,
            deps.method,
            task=state.get("task") or ctx.task,
            dense=deps.dense,
            official_code=getattr(ctx, "official_code", None),
        )
        return Env(ctx=ctx, deps=deps, profile=profile)

    def run_sync(state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        env, tally = env_now(state), _Tally()

        def perform(effect: Effect) -> Any:
            if isinstance(effect, Search):
                docs = deps.retriever.invoke(effect.query, k=effect.k)
                return [to_passage(d) for d in docs[: effect.k]]
            message = deps.model_for(effect.stage, stream=effect.stream).invoke(
                effect.prompt, config=_ask_config(effect), **env.sampling()
            )
            tally.add(message)
            return message if effect.stream else reply_text(message)

        def perform_all(effects: list[Effect]) -> list[Any]:
            if len(effects) <= 1:
                return [perform(e) for e in effects]
            with get_executor_for_config(config) as pool:
                return list(pool.map(perform, effects))

        with count_fallbacks() as tally.fallbacks:
            update = _drive(step(state, env), perform, perform_all)
        return update | tally.update()

    async def run_async(state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        env, tally = env_now(state), _Tally()
        gen = step(state, env)

        async def perform(effect: Effect) -> Any:
            if isinstance(effect, Search):
                docs = await _asearch(deps.retriever, effect)
                return [to_passage(d) for d in docs[: effect.k]]
            message = await deps.model_for(effect.stage, stream=effect.stream).ainvoke(
                effect.prompt, config=_ask_config(effect), **env.sampling()
            )
            tally.add(message)
            return message if effect.stream else reply_text(message)

        result: Any = None
        with count_fallbacks() as tally.fallbacks:  # the step's parsers run inside gen.send
            try:
                while True:
                    request = gen.send(result)
                    if isinstance(request, list):
                        result = list(await asyncio.gather(*(perform(e) for e in request)))
                    else:
                        result = await perform(request)
            except StopIteration as done:
                update = done.value or {}
        return update | tally.update()

    return RunnableLambda(run_sync, afunc=run_async, name=step.__name__)


async def _asearch(retriever: BaseRetriever, search: Search) -> list[Any]:
    # BaseRetriever's default async path drops extra kwargs such as k on the floor only when
    # the sync method takes none; a retriever that is sync-only but takes k would raise.
    if type(retriever)._aget_relevant_documents is BaseRetriever._aget_relevant_documents:
        return await run_in_executor(None, retriever.invoke, search.query, k=search.k)
    return await retriever.ainvoke(search.query, k=search.k)


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
