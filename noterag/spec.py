"""A method, declared once.

Each method's graph module (``graphs/<method>.py``) holds one ``MethodSpec``: its name, its
settings (the context dataclass), its state and output schemas, its model roles, its prompt
sets per profile, its wiring (a function that adds the method's steps to a graph), and how the
generic parts show it: the output fields an eval row keeps, its trace-page layout, its CLI
progress lines. Everything generic reads the declaration from the registry
(``noterag.methods.METHODS``): ``build_graph``, the question / chat-reset step (from the state
schema), the eval rows, the trace page, the CLI, ``noterag methods``, ``langgraph.json``.
docs/methods.md walks through adding one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from langchain_core.language_models import BaseChatModel
from langchain_core.retrievers import BaseRetriever
from langgraph.graph import START, StateGraph

from noterag.context import RunContext
from noterag.errors import ConfigError
from noterag.profiles import PAPER, Profile, get_profile
from noterag.prompts.template import Prompt
from noterag.state import QuestionInput, declared_keys

# An event of stream_mode="custom" -> the line the CLI prints for it (None: print nothing)
ProgressLine = Callable[[Mapping[str, Any]], Any]


class MethodError(ConfigError):
    """A method's declaration and its steps disagree (a stage no model role serves, a step
    writing a key its state does not declare): a bug in the method, named in one line."""


def copy_chat_model(model: Any, **update: Any) -> Any:
    """``model.model_copy(update=update)`` that reads its own fields: pydantic's ``model_copy``
    also copies LangChain's memoized serialization of the original (``BaseChatModel._serialized``,
    a ``cached_property``: what traces and cache keys show), so a copy made after the original's
    first call would still be described, and cached, as the original."""
    copy = model.model_copy(update=update)
    copy.__dict__.pop("_serialized", None)
    return copy


@dataclass(frozen=True)
class Deps:
    """What a method's graph is built with: bound once, when the graph is built."""

    method: str
    models: Mapping[str, BaseChatModel]  # role -> model; "default" for every other role
    retriever: BaseRetriever
    prompts: Mapping[str, Any]  # profile name -> the method's prompt set
    context_schema: type[RunContext]
    # ranks by embeddings: the official profile formats such passages as the official codes do
    dense: bool = False
    # the official code profile="official" reproduces (None: none), and the paper profile
    official_code: str | None = None
    paper_profile: Profile = PAPER
    # stage -> model role where one role serves several stages (ReSP's reasoner: judge, plan);
    # a stage not listed is its own role
    stage_roles: Mapping[str, str] = field(default_factory=dict)
    # the method's state schema: how a step's update merges (noterag.state.after_update), and
    # the keys a step may write (``dict``: any)
    state_schema: type = dict
    # the method's model roles (MethodSpec.roles); empty: any stage takes the default model
    roles: tuple[str, ...] = ()
    _quiet: dict[str, BaseChatModel] = field(default_factory=dict, repr=False, compare=False)

    def profile(self, ctx: Any, state: Mapping[str, Any]) -> Profile:
        """This run's profile strategies: the context's profile for this method, the run's task
        (the input's, else the context's) and official code (a baseline's setting, else the
        method's)."""
        return get_profile(
            ctx.profile,
            self.method,
            official_code=getattr(ctx, "official_code", None) or self.official_code,
            paper=self.paper_profile,
            task=state.get("task") or ctx.task,
            dense=self.dense,
        )

    def model_for(self, stage: str, *, stream: bool = False) -> BaseChatModel:
        """The stage's model. Internal calls get a copy that never streams: under
        ``stream_mode="messages"`` LangGraph would otherwise make every call stream, and the
        streamed replies of many endpoints carry no token usage."""
        role = self.stage_roles.get(stage, stage)
        if self.roles and role not in self.roles:
            # else the stage would quietly take the default model, whatever <role>_model= says
            raise MethodError(
                f"{self.method}: stage {stage!r} has no model role; declare it in the method's "
                f"roles or map it in stage_roles (roles: {', '.join(self.roles)})"
            )
        model = self.models.get(role) or self.models["default"]
        if stream:
            return model
        if role not in self._quiet:
            self._quiet[role] = copy_chat_model(model, disable_streaming=True)
        return self._quiet[role]


@dataclass(frozen=True, kw_only=True)
class MethodSpec:
    """Everything noterag needs to know about one method."""

    name: str  # the registry key, the CLI's --method, the graph id in langgraph.json
    title: str  # "DeepNote (Wang et al., 2025)"
    summary: str  # one line for `noterag methods`
    context: type[RunContext]  # its settings: the graph's context_schema
    state: type  # the full state (a typing_extensions.TypedDict)
    output: type  # what a run returns
    roles: tuple[str, ...]  # the model roles: build_graph(<role>_model=...)
    # profile name -> prompt set; a method without an official code has only "paper"
    prompts: Mapping[str, Any]
    # adds the method's steps to a graph that starts with the "question" step
    wire: Callable[[StateGraph[Any, Any, Any, Any], Deps], None]
    stage_roles: Mapping[str, str] = field(default_factory=dict)
    # output fields an eval row keeps besides the answer, the cost, the trace and stop_reason
    result_fields: tuple[str, ...] = ()
    # the trace page's layout: a built-in one ("note", "amber", "resp", "single", "generic") or
    # Jinja2 template source for the step cards (noterag.trace)
    trace_view: str = "generic"
    # custom event type -> its CLI progress line, beside the generic ones (noterag.cli.render)
    progress: Mapping[str, ProgressLine] = field(default_factory=dict)
    # the tasks it answers, when its answer prompts do not say (noterag.tasks checks a run's
    # tasks before any model call); None: the tasks of its answer prompts
    tasks: tuple[str, ...] | None = None
    # profile="official" reproduces this official code (noterag.profiles); None: no official code
    official_code: str | None = None
    # the strategies of profile="paper" (noterag.profiles.PAPER unless the method reads its
    # replies otherwise)
    paper_profile: Profile = PAPER
    # for a method that runs only with a specially trained model (Self-RAG's reflection tokens):
    # (stage, plain text) -> the reply such a model would give with that text. A stand-in model
    # (the generic contract tests' scripted one) shapes its replies with it; None: any chat
    # model will do
    stand_in: Callable[[str, str], str] | None = None

    @property
    def profiles(self) -> tuple[str, ...]:
        return tuple(self.prompts)

    @property
    def output_keys(self) -> frozenset[str]:
        """The fields of what a run returns (``output``): what ``noterag ask --json`` prints."""
        return declared_keys(self.output) or frozenset()

    def bind(
        self,
        model: Any = None,
        retriever: Any = None,
        *,
        prompts: Mapping[str, Any] | None = None,
        **role_models: Any,
    ) -> Deps:
        """Resolve the models (one per role, defaulting to ``model``), the retriever and the
        prompt sets (with ``prompts`` overrides applied to every profile's set)."""
        from noterag.models import load_chat_model
        from noterag.profiles import is_dense

        if "official" in self.prompts and self.official_code is None:
            raise ConfigError(f"{self.name} has official prompts but names no official_code")
        check_stage_roles(self)

        known = {f"{role}_model": role for role in self.roles}
        unknown = sorted(set(role_models) - known.keys())
        if unknown:
            raise ConfigError(
                f"{self.name} has no model role {', '.join(unknown)}; "
                f"roles: {', '.join(sorted(known))}"
            )
        models = {"default": load_chat_model(model)}
        models |= {known[k]: load_chat_model(v) for k, v in role_models.items() if v is not None}
        resolved = resolve_retriever(retriever)
        return Deps(
            method=self.name,
            models=models,
            retriever=resolved,
            prompts={
                profile: override_prompts(prompt_set, prompts)
                for profile, prompt_set in self.prompts.items()
            },
            context_schema=self.context,
            dense=is_dense(resolved),
            official_code=self.official_code,
            paper_profile=self.paper_profile,
            stage_roles=self.stage_roles,
            state_schema=self.state,
            roles=self.roles,
        )

    def build(
        self,
        model: Any = None,
        retriever: Any = None,
        *,
        prompts: Mapping[str, Any] | None = None,
        **role_models: Any,
    ) -> Any:
        """The compiled graph: the question step, then the method's own wiring."""
        from noterag.nodes.question import question_step

        deps = self.bind(model, retriever, prompts=prompts, **role_models)
        graph: StateGraph[Any, Any, Any, Any] = StateGraph(
            self.state,
            context_schema=self.context,
            input_schema=QuestionInput,
            output_schema=self.output,
        )
        graph.add_node("question", cast(Any, question_step(self.state)))
        graph.add_edge(START, "question")
        self.wire(graph, deps)
        return graph.compile(name=self.name)


def check_stage_roles(spec: MethodSpec) -> None:
    """``stage_roles`` maps stages to declared roles only (a stage that is itself a role needs
    no entry); a stage a step asks for that no role serves fails at its first call
    (``Deps.model_for``): steps name their stages as they run."""
    for stage, role in spec.stage_roles.items():
        if role not in spec.roles:
            raise MethodError(
                f"{spec.name}: stage_roles maps stage {stage!r} to {role!r}, which is not one of "
                f"its roles ({', '.join(spec.roles)})"
            )


def resolve_retriever(retriever: Any) -> BaseRetriever:
    """A BaseRetriever as given, a spec ("bm25:<dir>"), or None: NOTERAG_INDEX, else the bundled
    sample corpus."""
    import os

    if isinstance(retriever, BaseRetriever):
        return retriever
    from noterag.retrievers import load_retriever

    if retriever is None:
        index = os.environ.get("NOTERAG_INDEX")
        if index:
            return load_retriever(index)
        from noterag.sample import sample_index

        return load_retriever(f"bm25:{sample_index()}")
    return load_retriever(retriever)


# --- prompt overrides ----------------------------------------------------------------------------


def prompt_names(prompt_set: Any) -> list[str]:
    """The names a prompt override can use: the set's stage prompts, and ``answer.<task>``."""
    names = [f.name for f in dataclasses.fields(prompt_set) if f.name != "answer"]
    names = [n for n in names if isinstance(getattr(prompt_set, n), Prompt)]
    return names + [f"answer.{task}" for task in getattr(prompt_set, "answer", {})]


def override_prompts(prompt_set: Any, overrides: Mapping[str, Any] | None) -> Any:
    """``prompt_set`` with some prompts replaced: ``{"refine_query": "<text with {slots}>"}`` or
    ``{"answer.multihop": Prompt(...)}``. The verbatim files stay as they are; an override's
    source says it is one. An unknown name is a ConfigError naming the ones there are."""
    if not overrides:
        return prompt_set
    names = prompt_names(prompt_set)
    unknown = sorted(set(overrides) - set(names))
    if unknown:
        raise ConfigError(
            f"no prompt named {', '.join(map(repr, unknown))}; prompts: {', '.join(names)}"
        )
    changes: dict[str, Any] = {}
    answers = dict(getattr(prompt_set, "answer", {}))
    for name, value in overrides.items():
        prompt = value if isinstance(value, Prompt) else Prompt(name, str(value), "override")
        if name.startswith("answer."):
            answers[name.removeprefix("answer.")] = prompt
            changes["answer"] = answers
        else:
            changes[name] = prompt
    return dataclasses.replace(prompt_set, **changes)


# --- the server's factories ------------------------------------------------------------------------


def server_graph(spec: MethodSpec) -> Callable[[], Any]:
    """The async factory a graph module names in langgraph.json (``make_graph = server_graph(SPEC)``).
    langgraph-api calls factories on its event loop, where building (which may start the local
    model) would block: the build runs in a thread, once."""
    built: dict[str, Any] = {}
    lock = threading.Lock()

    def build_once() -> Any:
        with lock:
            if "graph" not in built:
                built["graph"] = spec.build()
        return built["graph"]

    async def make_graph() -> Any:
        if "graph" in built:
            return built["graph"]
        return await asyncio.to_thread(build_once)

    make_graph.__doc__ = f"The {spec.name} graph for langgraph.json, built from the environment."
    return make_graph
