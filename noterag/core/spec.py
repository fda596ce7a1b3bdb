"""A method, declared once.

Each method's graph module (``graphs/<method>.py``) holds one ``MethodSpec``: its name, its
settings (the context dataclass), its state and output schemas, its model roles, its prompt
sets per profile, its wiring (a function that adds the method's steps to a graph), and how the
generic parts show it: the output fields an eval row keeps, its trace-page layout, its progress
lines (data: noterag.core.progress). Everything generic reads the declaration from the registry
(``noterag.registry.methods.METHODS``): ``build_graph``, the question / chat-reset step (from the state
schema), the eval rows, the trace page, the CLI, ``noterag methods``, ``langgraph.json``.
docs/methods.md walks through adding one.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, get_origin, get_type_hints

from langchain_core.language_models import BaseChatModel
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import Runnable
from langgraph.graph import StateGraph

from noterag.base.errors import ConfigError
from noterag.core.budget import generic_calls
from noterag.core.context import RunContext
from noterag.core.profiles import PAPER, Profile, get_profile, original_profile
from noterag.core.progress import Declared
from noterag.core.prompt import Prompt
from noterag.core.state import declared_keys

# the model role of the follow-up rewrite every method's question step makes (noterag.core.question)
CONDENSE_ROLE = "condense_question"

# A stop rule: (state, the run's settings, the profile's strategies) -> why the loop stops now,
# or None. Each method keeps its own in its module; noterag.core.decision applies them.
StopRule = Callable[[Mapping[str, Any], Any, Profile], "str | None"]


class MethodError(ConfigError):
    """A method's declaration and its steps disagree (a stage no model role serves, a step
    writing a key its state does not declare): a bug in the method, named in one line."""


def copy_chat_model(model: Any, **update: Any) -> Any:
    """``model`` with the fields ``update`` changes, built from its field values (pydantic's
    ``model_construct``: the same objects, clients included, none rebuilt or validated again)
    rather than by ``model_copy``, which also copies what the instance has memoized: LangChain
    memoizes a chat model's serialization (what traces and cache keys show), so a copy made
    after the original's first call would be described, and cached, as the original. Private
    attributes (a lock around a local pipeline) are shared with the original, as ``model_copy``
    shares them."""
    cls = type(model)
    values = {name: getattr(model, name) for name in cls.model_fields} | (model.model_extra or {})
    copy = cls.model_construct(
        _fields_set=model.model_fields_set | set(update), **(values | update)
    )
    if model.__pydantic_private__:
        object.__setattr__(copy, "__pydantic_private__", dict(model.__pydantic_private__))
    return copy


def quiet_model(model: Any) -> Any:
    """``model`` with every chat model inside it set to ``disable_streaming=True`` (and
    ``streaming=False`` where it has that field): the chat model itself, or through the
    wrappers LangChain builds around one (``with_retry``, ``bind``, ``with_config``: a
    ``RunnableBinding``; ``with_fallbacks``; ``configurable_fields`` /
    ``configurable_alternatives``). Any other Runnable is kept (its calls are still tagged
    ``nostream``, so they stay out of the messages stream; under it they may stream, and then
    report the token usage only where the endpoint sends it with a stream)."""
    from langchain_core.runnables import RunnableBinding, RunnableWithFallbacks
    from langchain_core.runnables.configurable import (
        RunnableConfigurableAlternatives,
        RunnableConfigurableFields,
    )

    if isinstance(model, BaseChatModel):
        # disable_streaming only stops LangChain choosing to stream; a model whose own
        # ``streaming=True`` (ChatOpenAI, ChatAnthropic, ...) makes every request a streamed one
        # would still send it, and ChatOpenAI then fails reading the stream as one reply
        off = {"streaming": False} if "streaming" in type(model).model_fields else {}
        return copy_chat_model(model, disable_streaming=True, **off)
    if isinstance(model, RunnableBinding):
        return model.model_copy(update={"bound": quiet_model(model.bound)})
    if isinstance(model, RunnableWithFallbacks):
        return model.model_copy(
            update={
                "runnable": quiet_model(model.runnable),
                "fallbacks": [quiet_model(f) for f in model.fallbacks],
            }
        )
    if isinstance(model, RunnableConfigurableAlternatives):
        return model.model_copy(
            update={
                "default": quiet_model(model.default),
                "alternatives": {
                    key: quiet_model(alt) if isinstance(alt, Runnable) else alt
                    for key, alt in model.alternatives.items()
                },
            }
        )
    if isinstance(model, RunnableConfigurableFields):
        return model.model_copy(update={"default": quiet_model(model.default)})
    return model


@dataclass(frozen=True)
class Deps:
    """What a method's graph is built with: bound once, when the graph is built."""

    method: str
    # role -> chat model (or a Runnable wrapping one); "default" for every other role
    models: Mapping[str, Any]
    retriever: BaseRetriever
    prompts: Mapping[str, Any]  # profile name -> the method's prompt set
    context_schema: type[RunContext]
    # ranks by embeddings: the official profile formats such passages as the official codes do
    dense: bool = False
    # the official code profile="official" reproduces (None: none), and the paper profile
    official_code: str | None = None
    paper_profile: Profile = PAPER
    # the strategies of profile="original" (None: the method has no original profile)
    original_profile: Profile | None = None
    # stage -> model role where one role serves several stages (ReSP's reasoner: judge, plan);
    # a stage not listed is its own role
    stage_roles: Mapping[str, str] = field(default_factory=dict)
    # the method's state schema: how a step's update merges (noterag.core.state.after_update), and
    # the keys a step may write (``dict``: any)
    state_schema: type = dict
    # the method's model roles (MethodSpec.roles); empty: any stage takes the default model
    roles: tuple[str, ...] = ()
    # the ids of the configurable fields of its models and retriever (``Runnable.config_specs``):
    # the keys of ``config["configurable"]`` that are theirs, not a misspelt setting
    config_keys: frozenset[str] = frozenset()
    # the most model calls one turn makes at the run's settings (MethodSpec.calls; None: not
    # counted), which noterag.core.budget.guarded holds every step to
    calls: Callable[[Any], int] | None = None
    _quiet: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    # the method's stop rules (MethodSpec.stops): a step deciding by another is refused when
    # the graph is built (noterag.core.step.node); None: not checked (Deps built by hand)
    stops: tuple[StopRule, ...] | None = None
    # (stage, stream) -> the model model_for gave (a stage without a role raises every time)
    _for: dict[tuple[str, bool], Any] = field(default_factory=dict, repr=False, compare=False)

    def profile(self, ctx: Any, state: Mapping[str, Any]) -> Profile:
        """This run's profile strategies: the context's profile for this method, the run's task
        (the input's, else the context's) and official code (a baseline's setting, else the
        method's)."""
        if ctx.profile == "paper":  # the paper's strategies whatever the task (every step asks)
            return self.paper_profile
        return get_profile(
            ctx.profile,
            self.method,
            official_code=getattr(ctx, "official_code", None) or self.official_code,
            paper=self.paper_profile,
            task=state.get("task") or ctx.task,
            dense=self.dense,
            original=self.original_profile,
            flashrag="flashrag" in self.prompts,
        )

    def model_for(self, stage: str, *, stream: bool = False) -> Any:
        """The stage's model. Internal calls get a copy that never streams: under
        ``stream_mode="messages"`` LangGraph would otherwise make every call stream, and the
        streamed replies of many endpoints carry no token usage."""
        found = self._for.get((stage, stream))
        if found is not None:  # every call of a run asks again: looked up once per stage
            return found
        found = self._model_for(stage, stream)
        self._for[stage, stream] = found
        return found

    def _model_for(self, stage: str, stream: bool) -> Any:
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
            self._quiet[role] = quiet_model(model)
        return self._quiet[role]


@dataclass(frozen=True)
class SearchScript:
    """What makes a stand-in model's run of a method take its search path: search again after a
    model's reply, and read what that search found. The generic tests (tests/test_method_traps.py)
    run every method with its script and fail when a looping method never searches after a
    reply; bench/method_costs.py's scripted stand-in replies with it too. The stages it does not
    name get the stand-in's default reply ("ok"), which asks no follow-up question."""

    # stage -> its reply (a string, or a list given in turn, the last one repeated): the shape
    # that makes the method search ("Follow up: ...", "1. <a question>", "Search[...]"), whatever
    # the corpus
    replies: Mapping[str, Any] = field(default_factory=dict)
    # run settings it also needs (FLARE searches on an uncertain token: threshold=1.0 makes every
    # token of a stand-in's certain reply one)
    settings: Mapping[str, Any] = field(default_factory=dict)


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
    # profile name -> prompt set; a method without an official code has no "official", a
    # baseline with an original profile has "original" (its settings: the context's ORIGINAL)
    prompts: Mapping[str, Any]
    # adds the method's steps to a graph that starts with the "question" step
    wire: Callable[[StateGraph[Any, Any, Any, Any], Deps], None]
    stage_roles: Mapping[str, str] = field(default_factory=dict)
    # its stop rules, each applied by a Decision its wiring sets up (noterag.core.decision): building
    # the graph refuses a deciding step whose rule is not one of these (noterag.core.step.node)
    stops: tuple[StopRule, ...] = ()
    # the state field of the queries it searched with (an eval row's "queries"); None: it keeps
    # no query log
    queries: str | None = None
    # output fields an eval row keeps besides the answer, the cost, the trace and stop_reason
    result_fields: tuple[str, ...] = ()
    # the trace page's layout: a built-in one ("note", "amber", "resp", "single", "generic") or
    # Jinja2 template source for the step cards (noterag.trace.page)
    trace_view: str = "generic"
    # whether it searches a retriever: False for a closed-book method (no-retrieval), whose
    # reproduce runs need no index or corpus
    retrieves: bool = True
    # what it shows while it runs: custom event type -> its line(s), as data (format strings over
    # the event's fields, noterag.core.progress), beside the shared steps' lines; drawn by the
    # CLI (noterag.cli.render) and the trace page (noterag.trace)
    progress: Declared = field(default_factory=dict)
    # the tasks it answers, when its answer prompts do not say (noterag.core.tasks checks a run's
    # tasks before any model call); None: the tasks of its answer prompts
    tasks: tuple[str, ...] | None = None
    # profile="official" reproduces this official code (noterag.core.profiles); None: no official code
    official_code: str | None = None
    # the strategies of profile="paper" (noterag.core.profiles.PAPER unless the method reads its
    # replies otherwise)
    paper_profile: Profile = PAPER
    # for a method that runs only with a specially trained model (Self-RAG's reflection tokens):
    # (stage, plain text) -> the reply such a model would give with that text. A stand-in model
    # (the generic contract tests' scripted one) shapes its replies with it; None: any chat
    # model will do
    stand_in: Callable[[str, str], str] | None = None
    # the replies (and settings) that make a stand-in model's run search after a reply: what the
    # generic tests run the method with (SearchScript). Empty: the default reply already does,
    # or the method searches only before its first call
    search_script: SearchScript = field(default_factory=SearchScript)
    # the most model calls one turn of the method makes at the settings ``ctx`` (its algorithm
    # at those settings; a human reviewer's rejects and a follow-up's rewrite are added by
    # noterag.core.budget): the run's call budget, which no input can raise. None:
    # noterag.core.budget.generic_calls over its roles
    calls: Callable[[Any], int] | None = None
    # state list -> the setting whose upper bound is the most items a run writes there (SuRe's
    # candidates: n_candidates): a server refuses a longer list written by a client
    # (noterag.server.bounds.check_state_values)
    lists: Mapping[str, str] = field(default_factory=dict)

    @property
    def profiles(self) -> tuple[str, ...]:
        return tuple(self.prompts)

    @property
    def output_keys(self) -> frozenset[str]:
        """The fields of what a run returns (``output``): what ``noterag ask --json`` prints."""
        return declared_keys(self.output) or frozenset()

    def output_defaults(self) -> dict[str, Any]:
        """What a run that never wrote a field reports for it (``noterag ask --json``, an eval
        row): 0 for a count, an empty list or dict for a collection, None for anything else;
        and ``steps`` 0 for every method (a method without a loop runs none). A new dict
        each call: its lists are the caller's."""
        return {"steps": 0} | {key: make() for key, make in _empty_values(self.output).items()}

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
        from noterag.core.profiles import is_dense
        from noterag.models import load_chat_model

        if "official" in self.prompts and self.official_code is None:
            raise ConfigError(f"{self.name} has official prompts but names no official_code")
        check_stage_roles(self)

        # every method's question step may rewrite a follow-up (noterag.core.question): its own role
        known = {f"{role}_model": role for role in (*self.roles, CONDENSE_ROLE)}
        unknown = sorted(set(role_models) - known.keys())
        if unknown:
            raise ConfigError(
                f"{self.name} has no model role {', '.join(unknown)}; "
                f"roles: {', '.join(sorted(known))}"
            )
        models = {"default": load_chat_model(model)}
        models |= {known[k]: load_chat_model(v) for k, v in role_models.items() if v is not None}
        resolved = resolve_retriever(retriever)
        config_keys = frozenset(
            spec.id
            for runnable in (*models.values(), resolved, retriever)
            if isinstance(runnable, Runnable)
            for spec in runnable.config_specs
        )
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
            original_profile=(
                original_profile(self.paper_profile) if "original" in self.prompts else None
            ),
            stage_roles=self.stage_roles,
            state_schema=self.state,
            # every method's question step rewrites follow-ups with its own role (noterag.core.question)
            roles=(*self.roles, CONDENSE_ROLE) if self.roles else (),
            config_keys=config_keys,
            stops=self.stops,
            calls=self.calls or generic_calls(len(self.roles)),
        )


@functools.cache
def _empty_values(schema: type) -> dict[str, Callable[[], Any]]:
    """Each field of ``schema`` -> a function making its value when no step wrote it."""
    made: dict[str, Callable[[], Any]] = {}
    for key, hint in get_type_hints(schema).items():  # Annotated and NotRequired stripped
        base = get_origin(hint) or hint
        if base in (list, dict):
            made[key] = base
        elif hint is int:
            made[key] = int
        else:  # text, a float, a flag, an optional value: not produced
            made[key] = type(None)
    return made


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
    """A BaseRetriever as given, any other Runnable from a query to documents (a
    ``RunnableLambda``, ``retriever | RunnableLambda(...)``) as a retriever
    (``noterag.retrievers.RunnableRetriever``), a spec ("bm25:<dir>"), or None: NOTERAG_INDEX,
    else the bundled sample corpus; any other value is one ConfigError line."""
    if isinstance(retriever, BaseRetriever):
        return retriever
    if isinstance(retriever, Runnable) or callable(retriever):
        from noterag.retrievers.runnable import RunnableRetriever

        return RunnableRetriever.of(retriever)
    from noterag.retrievers import load_retriever

    if retriever is not None and not isinstance(retriever, str | os.PathLike):
        raise ConfigError(
            f"retriever= takes a BaseRetriever, a Runnable or function from a query to "
            f"documents, or a spec string (bm25:<dir>, ...), not {type(retriever).__name__}"
        )
    if retriever is None:
        index = os.environ.get("NOTERAG_INDEX")
        if index:
            return load_retriever(index)
        from noterag.retrievers.sample import sample_index

        return load_retriever(f"bm25:{sample_index()}")
    return load_retriever(retriever)


# --- prompt overrides ----------------------------------------------------------------------------


def prompt_names(prompt_set: Any) -> list[str]:
    """The names a prompt override can use: the set's stage prompts, and ``answer.<task>``."""
    names = [f.name for f in dataclasses.fields(prompt_set) if f.name != "answer"]
    names = [n for n in names if isinstance(getattr(prompt_set, n), Prompt)]
    return names + [f"answer.{task}" for task in getattr(prompt_set, "answer", {})]


def _prompt_named(prompt_set: Any, name: str) -> Prompt:
    if name.startswith("answer."):
        found: Prompt = prompt_set.answer[name.removeprefix("answer.")]
        return found
    found = getattr(prompt_set, name)
    return found


def check_slots(name: str, override: Prompt, original: Prompt) -> None:
    """Refuse an override with a slot its step does not fill (``{qeury}``): the step fills the
    original's slots only, so the run would fail at that step, after paid calls. One error line
    naming the slot(s) and the slots there are; an override may leave slots out."""
    extra = sorted(override.slots - original.slots)
    if extra:
        slots = ", ".join(f"{{{slot}}}" for slot in sorted(original.slots)) or "none"
        raise ConfigError(
            f"prompt override {name}: no slot {', '.join(f'{{{s}}}' for s in extra)}; "
            f"{name} fills {slots}"
        )


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
        check_slots(name, prompt, _prompt_named(prompt_set, name))
        if name.startswith("answer."):
            answers[name.removeprefix("answer.")] = prompt
            changes["answer"] = answers
        else:
            changes[name] = prompt
    return dataclasses.replace(prompt_set, **changes)


# --- the server's factories ------------------------------------------------------------------------


def check_run_prompts(spec: MethodSpec, ctx: RunContext) -> None:
    """The run's prompt overrides checked against the prompts of its profile (names and
    slots), and its ``human_review`` against what the method has to review, before any node
    runs (the server has a checkpointer)."""
    prompt_set = spec.prompts.get(ctx.profile)
    if ctx.prompts and prompt_set is not None:
        override_prompts(prompt_set, ctx.prompts)
    check_review(spec.name, spec.prompts, ctx, ctx.task, checkpointer=True)


# --- human review --------------------------------------------------------------------------------

# The answer's review follows every method's ``answer`` step (graphs.assemble); the note's review
# happens where the answer prompt reads a note (nodes.answer): both read from the declaration.
REVIEWS = {"note": ("note",), "answer": ("answer",), "both": ("note", "answer")}


def reads_note(prompt_set: Any, task: str) -> bool:
    """Whether ``prompt_set``'s answer prompt for ``task`` reads a note (its ``{note}`` slot):
    what the note's review shows and edits."""
    prompt = getattr(prompt_set, "answer", {}).get(task)
    return isinstance(prompt, Prompt) and "note" in prompt.slots


def check_review(
    method: str, prompts: Mapping[str, Any], ctx: Any, task: str, *, checkpointer: bool
) -> None:
    """Refuse a ``human_review`` the run cannot honour, once, before the first step: without a
    checkpointer the pause could never be resumed (LangGraph would return ``__interrupt__``
    with no answer), and a note review on a method (or a profile, task or prompt override) whose
    answer reads no note would do nothing."""
    setting = getattr(ctx, "human_review", "none")
    if setting == "none":
        return
    if not checkpointer:
        raise ConfigError(
            f"human_review={setting} needs a checkpointer to pause and resume: "
            "build_graph(..., checkpointer=InMemorySaver()) (langgraph.checkpoint.memory), and a "
            'thread: config={"configurable": {"thread_id": ...}}'
        )
    if "note" not in REVIEWS[setting]:
        return
    prompt_set = prompts.get(ctx.profile)
    answers = getattr(prompt_set, "answer", None) or {}
    if prompt_set is None or answers and task not in answers:
        return  # an unknown profile or task is refused by its own check, naming what there is
    if getattr(ctx, "prompts", None):
        prompt_set = override_prompts(prompt_set, ctx.prompts)
    if not reads_note(prompt_set, task):
        raise ConfigError(
            f"human_review={setting}: {method}'s answer ({ctx.profile} profile, task {task}) "
            f"reads no note, so there is no note to review; here human_review takes none or "
            f"answer (noterag.registry.methods.note_methods() lists the methods with a note to review)"
        )
