"""Run-time configuration: each graph's ``context_schema``.

Fields carry ``metadata={"description": ...}`` so LangGraph Studio shows them. A graph run
without a context (``runtime.context is None``) uses these defaults; a dict context is converted.
"""

from __future__ import annotations

import difflib
import functools
import math
import operator
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Literal

from pydantic import TypeAdapter, ValidationError

from noterag.base.errors import ConfigError

TASKS = ("multihop", "asqa", "strategyqa", "crud")
PROFILES = ("paper", "official", "original", "flashrag")

# A passage longer than this many characters is cut in prompts (``max_passage_chars``): about
# 2,500 tokens, several times a Wikipedia paragraph, so that a whole article (or a 15 MB line)
# indexed as one passage cannot make a prompt of millions of tokens.
MAX_PASSAGE_CHARS = 10_000
# The longest question a run accepts: far beyond any benchmark's, far below a prompt that
# would fail at the endpoint after paid calls.
MAX_QUESTION_CHARS = 8_000
# The upper bounds of the loop caps every method declares (its max_steps, max_failures): the
# papers run 3 (FLARE and IRCoT 10), and a cap bounds the model calls one question may make,
# whoever sets it (a server's client included).
MOST_STEPS = 20
# ... and of passage caps (the papers' T_RP is 15).
MOST_PASSAGES = 1_000


def check_question_size(question: str) -> None:
    """Refuse a question longer than ``MAX_QUESTION_CHARS`` (one line, before any model call)."""
    if len(question) > MAX_QUESTION_CHARS:
        raise ConfigError(
            f"the question is {len(question):,} characters long; at most "
            f"{MAX_QUESTION_CHARS:,} are accepted (put long material in the corpus, not the "
            "question)"
        )


# What a server's client may set only where the operator allows it (noterag.core.policy):
# "sampling", settings that change what one model call costs or does (temperature, reply and
# passage lengths); "prompts", prompt overrides (the client's text sent with the operator's key).
Client = Literal["sampling", "prompts"]


def setting(
    default: Any,
    description: str,
    *,
    ge: float | None = None,
    le: float | None = None,
    client: Client | None = None,
) -> Any:
    """A context field: its default, its description (Studio shows it), and, declared beside
    it, its bounds (``ge`` <= value <= ``le``; every numeric setting has both, so no client can
    ask for 100,000 steps) and which server policy governs it (``client``). ``RunContext``
    checks every field's type and bounds, in-process and on the server alike."""
    metadata: dict[str, Any] = {"description": description}
    if ge is not None:
        metadata["ge"] = ge
    if le is not None:
        metadata["le"] = le
    if client is not None:
        metadata["client"] = client
    return field(default=default, metadata=metadata)


@functools.cache
def _declared(schema: type) -> dict[str, tuple[Any, Mapping[str, Any]]]:
    """Each field of a context dataclass: its type (resolved) and its metadata."""
    hints = typing.get_type_hints(schema)
    return {f.name: (hints[f.name], f.metadata) for f in fields(schema)}


@functools.cache
def _adapter(hint: Any) -> TypeAdapter[Any]:
    return TypeAdapter(hint)


def _plain(hint: Any) -> tuple[Any, bool]:
    """``int | None`` -> (int, True): the field's type without None, and whether None is one."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return functools.reduce(operator.or_, rest), True
    return hint, False


def _number(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def allowed_values(schema: type, name: str) -> str:
    """What ``name`` of ``schema`` accepts, as a phrase: "an integer from 0 to 20", "one of
    paper, official", "true or false or None"."""
    hint, meta = _declared(schema)[name]
    base, optional = _plain(hint)
    ge, le = meta.get("ge"), meta.get("le")
    if typing.get_origin(base) is Literal:
        text = "one of " + ", ".join(map(str, typing.get_args(base)))
    elif base is bool:
        text = "true or false"
    elif base in (int, float):
        text = "an integer" if base is int else "a number"
        if ge is not None and le is not None:
            text += f" from {_number(ge)} to {_number(le)}"
        elif ge is not None:
            text += f" >= {_number(ge)}"
    elif typing.get_origin(base) is dict:
        text = "a mapping of prompt names to template texts"
    else:
        text = getattr(base, "__name__", str(base))
    return text + (" or None" if optional else "")


def check_setting(schema: type, name: str, value: Any, *, choices: bool = True) -> None:
    """Refuse ``value`` for the setting ``name`` of ``schema`` unless it has the declared type
    (strictly: no "3" for 3, no true for 1) and lies within the declared bounds; the one error
    line names the setting and what it accepts. ``choices=False``: a string for a field of
    fixed choices passes here (its class may name the choices better: self-rag's task)."""
    hint, meta = _declared(schema)[name]
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number, not {value}")
    base, _ = _plain(hint)
    # an integer is a number: JSON clients send 1 for 1.0
    number = base is float and isinstance(value, int) and not isinstance(value, bool)
    later = not choices and typing.get_origin(base) is Literal and isinstance(value, str)
    if not (number or later):
        try:
            _adapter(hint).validate_python(value, strict=True)
        except ValidationError:
            raise ConfigError(
                f"{name} must be {allowed_values(schema, name)}, not {_shown(value)}"
            ) from None
    if value is None or isinstance(value, bool) or not isinstance(value, int | float):
        return
    ge, le = meta.get("ge"), meta.get("le")
    if ge is not None and value < ge or le is not None and value > le:
        if base is float and ge is not None and le is not None:
            rule = f"be between {_number(ge)} and {_number(le)}"
        elif ge is not None and value < ge:
            rule = "not be negative" if ge == 0 else f"be at least {_number(ge)}"
        else:
            rule = f"be at most {_number(le or 0)}"  # le is set: the value is above it
        raise ConfigError(f"{name} must {rule}, not {_number(value)}")


def _shown(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def client_settings(schema: type, kind: Client) -> list[str]:
    """The fields of ``schema`` a server's client may set only where the operator allows
    ``kind`` ("sampling" or "prompts")."""
    return [name for name, (_, meta) in _declared(schema).items() if meta.get("client") == kind]


class _Settings(type):
    """The metaclass of the context dataclasses: an unknown keyword is refused by name, not
    with dataclass ``__init__``'s TypeError (LangGraph builds ``schema(**context)`` itself)."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        refuse_unknown(cls, kwargs)
        made = super().__call__(*args, **kwargs)
        # the fixed choices last: a class's own check (in __post_init__) may say more
        for f in fields(made):
            check_setting(cls, f.name, getattr(made, f.name))
        return made


def refuse_unknown(schema: type, values: Mapping[str, Any]) -> None:
    """One error naming the keys of ``values`` that are no setting of ``schema``, and its
    settings."""
    known = [f.name for f in fields(schema)]
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ConfigError(
            f"unknown context field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )


@dataclass(kw_only=True)
class RunContext(metaclass=_Settings):
    """Settings every method shares."""

    top_k: int = setting(5, "Passages retrieved per query (the papers' top-k).", ge=1, le=100)
    task: Literal["multihop", "asqa", "strategyqa", "crud"] = setting(
        "multihop",
        "Answer style: multihop (short answer), asqa (long form), strategyqa (yes/no), "
        "crud (Adaptive-Note only). The input's `task` overrides it.",
    )
    profile: Literal["paper", "official", "original", "flashrag"] = setting(
        "paper",
        "paper: the papers' method as printed, with robust engineering; official: reproduce the "
        "official code, the configuration that produced the published numbers (its prompt files "
        "byte for byte, raw-reply queries, duplicate passages, lenient verdicts, sampling "
        "0.1 / 0.9 / 1280 tokens); original (baselines): the baseline as its own paper and code "
        "ran it, where that differs from the note papers' setup (its own top-k, decoding, reader; "
        "the settings it changes, docs/deviations.md); flashrag (the baselines ReSP Table 2 "
        "reprints from FlashRAG's benchmark): FlashRAG's prompts, passage format and decoding "
        "(temperature 1.0, top_p 1.0, 32 tokens).",
    )
    temperature: float | None = setting(
        None,
        "Sampling temperature for every call (None: the model's own; noterag's are 0.1; "
        "profile=official: 0.1).",
        ge=0,
        le=2,
        client="sampling",
    )
    top_p: float | None = setting(
        None,
        "Nucleus sampling top_p (None: the model's own, 0.9; profile=official: 0.9).",
        ge=0,
        le=1,
        client="sampling",
    )
    max_tokens: int | None = setting(
        None,
        "Cap on tokens per model reply (None: the model's own; profile=official: 1280).",
        ge=1,
        le=32_768,
        client="sampling",
    )
    max_passage_chars: int | None = setting(
        MAX_PASSAGE_CHARS,
        "A retrieved passage longer than this many characters is cut to it (marked with "
        "' [...]') before it reaches a prompt; each cut is counted in the run's fallbacks as "
        "passage_truncated. None: passages go whole.",
        ge=1,
        le=1_000_000,
        client="sampling",
    )
    prompts: dict[str, str] | None = field(
        default=None,
        metadata={
            "description": "Prompt overrides for this run: prompt name (e.g. refine_query, "
            "answer.multihop) -> template text with the same {slots}; the verbatim prompt files "
            "stay as they are.",
            "client": "prompts",
        },
    )

    # The settings profile="original" runs with where the run sets none: the baseline's own
    # paper and code where they differ from this class's defaults (each value's source beside
    # it, in the method's context class). A setting given by name wins, whatever its value.
    ORIGINAL: ClassVar[Mapping[str, Any]] = {}

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        # Which settings were given, for profile="original" to fill in the others: every way a
        # context is made (a dict resolved here, LangGraph's own coercion of a dict context,
        # the Python API) calls the class with the given settings by name.
        self = super().__new__(cls)
        # not a dataclass field: no setting, no part of the context's equality or schema
        object.__setattr__(self, "_given", frozenset(kwargs))
        return self

    @classmethod
    def original(cls, **settings: Any) -> RunContext:
        """This method's context under profile="original": the original's settings, then
        ``settings`` (which win)."""
        return cls(**settings, profile="original")

    human_review: Literal["none", "note", "answer", "both"] = setting(
        "none",
        "Human in the loop: pause (LangGraph interrupt) for a person to review the note before "
        "the answer (note; the note methods), the final answer (answer), or both; resume with "
        "an Agent Chat UI response (accept, edit, response: a query to retrieve more with, "
        "ignore). Needs a checkpointer. docs/embedding.md.",
    )

    def __post_init__(self) -> None:
        if self.profile == "original":
            given: frozenset[str] = getattr(self, "_given", frozenset())
            for name, value in type(self).ORIGINAL.items():
                if name not in given:
                    setattr(self, name, value)
        # The command line's flags and -c pairs, the Python API and the server all end here,
        # so a value is refused alike however it is given: each field's type and bounds, as
        # its declaration states them.
        for f in fields(self):
            check_setting(type(self), f.name, getattr(self, f.name), choices=False)

    def sampling(self) -> dict[str, Any]:
        """Per-call model arguments the user set (unset ones keep the model's own)."""
        values = {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
        }
        return {k: v for k, v in values.items() if v is not None}


@dataclass(kw_only=True)
class NoteContext(RunContext):
    """The note loop's stop thresholds (Adaptive-Note: T_CI, T_IU, T_RP)."""

    max_steps: int = setting(
        3, "Stop after this many note-update steps (T_CI / max_step).", ge=0, le=MOST_STEPS
    )
    max_failures: int = setting(
        2,
        "Stop after this many steps whose note was not better (T_IU / max_failure).",
        ge=0,
        le=MOST_STEPS,
    )
    max_passages: int | None = setting(
        15,
        "Stop once this many distinct passages were retrieved, the initial ones included (T_RP); "
        "None: no cap.",
        ge=0,
        le=MOST_PASSAGES,
    )


@dataclass(kw_only=True)
class AdaptiveNoteContext(NoteContext):
    """Adaptive-Note's defaults: T_CI = 3, T_IU = 1, T_RP = 15 (paper, Section 4)."""

    max_steps: int = setting(
        3, "T_CI: the most information-collection iterations.", ge=0, le=MOST_STEPS
    )
    max_failures: int = setting(
        1, "T_IU: the most invalid updates (note not better) before stopping.", ge=0, le=MOST_STEPS
    )


@dataclass(kw_only=True)
class DeepNoteContext(NoteContext):
    """DeepNote's defaults: max_step 3, max_failure 2 (its case studies and official README).
    The paper (§3.3) stops on max failure and max step only: no passage cap by default. The
    official code also stops once more than ``--max_top_k`` (15) distinct passages were read:
    under ``profile="official"`` an unset cap is that 15."""

    max_passages: int | None = setting(
        None,
        "Passage cap: stop once more than this many distinct passages were retrieved. None: no "
        "cap under profile=paper (the paper has none), the official code's 15 under "
        "profile=official.",
        ge=0,
        le=MOST_PASSAGES,
    )


@dataclass(kw_only=True)
class BaselineContext(RunContext):
    """The baselines' settings: the shared ones, and whose official baseline runs
    ``profile="official"`` reproduces (both official codes have ``--method base`` and
    ``base_wo_retri``, with the same prompt files but different passage formats)."""

    official_code: Literal["adaptive-note", "deepnote"] = setting(
        "adaptive-note",
        "Under profile=official: reproduce the baseline runs of this official code (its passage "
        "format; deepnote also has StrategyQA prompt files).",
    )


@dataclass(kw_only=True)
class ReSPContext(RunContext):
    """ReSP's iteration cap (paper, Section 5.2: top-5 documents, at most 3 iterations)."""

    max_steps: int = setting(
        3,
        "M: the most retrieve-summarize-judge iterations, the first (for the question itself) "
        "included; then the generator answers from the memory queues.",
        ge=1,
        le=MOST_STEPS,
    )


@dataclass(kw_only=True)
class AmberContext(RunContext):
    """Amber's iteration cap (paper, Table 4: max iterations 3) and its ablation switches
    (Table 2: w/o CF, w/o SF, w/o AMU). There is no passage cap and no failure threshold."""

    max_steps: int = setting(
        3,
        "The most iterations of the adaptive information collector, the first (for the "
        "question itself) included; then the answer is written from the best memory.",
        ge=1,
        le=MOST_STEPS,
    )
    chunk_filter: bool = setting(
        True, "Chunk-level filter: an NLI verdict per passage drops the useless ones (off: w/o CF)."
    )
    sentence_filter: bool = setting(
        True,
        "Sentence-level filter: keep only the helpful sentences of each kept passage (off: w/o SF).",
    )
    agent_updater: bool = setting(
        True,
        "Agent-based memory updater: reviewer, challenger and refiner revise each memory draft (off: w/o AMU).",
    )


def resolve_context(schema: type[RunContext], value: Any) -> RunContext:
    """The run's context as ``schema``: defaults for None, a dict converted, unknown keys refused."""
    if value is None:
        return schema()
    if isinstance(value, schema):
        return value
    if isinstance(value, RunContext):
        value = {f.name: getattr(value, f.name) for f in fields(value)}
    if not isinstance(value, dict):
        raise ConfigError(
            f"context must be a dict or {schema.__name__}, not {type(value).__name__}"
        )
    return schema(**value)


def configured(schema: type[RunContext], configurable: Mapping[str, Any] | None) -> dict[str, Any]:
    """The settings of ``schema`` given as ``config["configurable"]`` (other keys left out)."""
    # most runs' configurable holds LangGraph's keys only: one set test, in C, says so
    if not configurable or _name_set(schema).isdisjoint(configurable):
        return {}
    return {name: configurable[name] for name in _names(schema) if name in configurable}


@functools.cache
def _names(schema: type[RunContext]) -> tuple[str, ...]:
    return tuple(f.name for f in fields(schema))


@functools.cache
def _name_set(schema: type[RunContext]) -> frozenset[str]:
    return frozenset(_names(schema))


def with_configurable(
    schema: type[RunContext], context: Any, configurable: Mapping[str, Any] | None
) -> Any:
    """The run's context with the settings given as ``config["configurable"]`` (e.g.
    ``graph.with_config(configurable={"max_steps": 1})``, as the LangGraph server reads them)
    beneath it: a setting the context gives by name keeps the context's value (a context object
    gives the settings it was built with: LangGraph builds one from a dict context). Each
    configurable setting is checked for its type and bounds even where the context's value wins,
    so that an ill-typed one is refused, not silently dropped. Which other keys may stand in
    ``configurable`` is ``check_configurable``'s business."""
    settings = configured(schema, configurable)
    if not settings:
        return context
    for name, value in settings.items():
        check_setting(schema, name, value)
    if context is None:
        return settings
    if isinstance(context, RunContext):
        given: frozenset[str] = getattr(context, "_given", frozenset())
        if settings.keys() <= given:
            return context  # the server's case: its configurable mirrors the context
        return settings | {name: getattr(context, name) for name in given}
    if isinstance(context, Mapping):
        if settings.keys() <= context.keys():
            return context
        return settings | dict(context)
    return context  # resolve_context names what is wrong with it


# configurable keys of the LangGraph server's own (a per-assistant model and index) that are
# close to a setting's name (self-rag's mode) without being one
SERVER_KEYS = frozenset({"model", "index"})
# LangGraph's own configurable keys (and the server's), beside its internal "__"-prefixed ones
LANGGRAPH_KEYS = frozenset(
    {"thread_id", "checkpoint_id", "checkpoint_ns", "checkpoint_map", "user_id", "run_id",
     "graph_id", "assistant_id", "cron_id"}
)  # fmt: skip


def check_configurable(
    schema: type[RunContext],
    configurable: Mapping[str, Any] | None,
    allowed: frozenset[str] = frozenset(),
) -> None:
    """Refuse a ``config["configurable"]`` key that is no setting of ``schema``, as the server
    refuses it (HTTP 422): one line naming it (and the setting it is close to). Passed: the
    settings, LangGraph's keys (``LANGGRAPH_KEYS``, any ``__...`` or ``langgraph_...``), the
    server's ``model`` / ``index``, HTTP headers the server copies in (``x-...``,
    ``user-agent``: a key with a ``-``, which no setting has), and ``allowed`` (the ids of the
    configurable fields of the graph's model and retriever:
    ``llm.configurable_alternatives(ConfigurableField("llm"))`` is chosen with
    ``configurable={"llm": ...}``). Where the keys are not the caller's alone only a key one
    or two letters away from a setting's name is refused: a graph run as a subgraph of an app's
    own graph shares the parent's ``configurable`` (its checkpoint namespace holds a ``|``),
    and on the LangGraph server (``langgraph_request_id`` is set) the run's settings were
    checked before the graph was built (``noterag.core.policy``)."""
    if not configurable:
        return
    passed = _passed(schema, allowed)
    if passed.issuperset(configurable):  # every step of a run repeats the same keys
        return
    lenient = "|" in str(configurable.get("checkpoint_ns") or "") or (
        "langgraph_request_id" in configurable
    )
    _check_keys(schema, frozenset(configurable), allowed, lenient)
    # the keys that pass alone, whatever their company and however lenient the check: the next
    # step's keys are tested by one set test, in C. Bounded: a client may send new "__" keys.
    if len(passed) > _PASSED_KEPT:
        passed.clear()
    passed.update(key for key in configurable if _passes(schema, key, allowed))


_PASSED_KEPT = 512


@functools.cache
def _passed(schema: type[RunContext], allowed: frozenset[str]) -> set[str]:
    return set()


def _passes(schema: type[RunContext], key: str, allowed: frozenset[str]) -> bool:
    """Whether ``key`` passes ``check_configurable`` alone: a setting, LangGraph's or the
    server's key, an ``allowed`` field id (``_check_keys`` weighs every other key)."""
    return (
        key in _name_set(schema)
        or key in LANGGRAPH_KEYS
        or key in SERVER_KEYS
        or key in allowed
        or key.startswith(("__", "langgraph_"))
    )


@functools.lru_cache(maxsize=256)
def _check_keys(
    schema: type[RunContext], keys: frozenset[str], allowed: frozenset[str], lenient: bool
) -> None:
    # cached: a run's nodes (and an eval's questions) repeat the same keys in every step, so the
    # check costs one lookup per step after the first
    names = list(_names(schema))
    unknown = sorted(key for key in keys if not _passes(schema, key, allowed))
    for key in unknown:
        # where the keys are not all ours, refuse only what is surely a misspelt setting
        near = difflib.get_close_matches(key, names, n=1, cutoff=0.9 if lenient else 0.75)
        if near:
            raise ConfigError(
                f"configurable key {key!r} is no setting of this method; did you mean "
                f"{near[0]}? Settings: {', '.join(names)}"
            )
    strict = [key for key in unknown if "-" not in key]
    if strict and not lenient:
        raise ConfigError(
            f"configurable key(s) {', '.join(map(repr, strict))}: no setting of this method "
            f"(settings: {', '.join(names)}), nor a configurable field of its model or retriever"
        )


def context_from_pairs(schema: type[RunContext], pairs: list[str]) -> dict[str, Any]:
    """``["max_steps=2", "chunk_filter=false"]`` as typed context values for ``schema``, for the
    command line; an unknown key or a value of the wrong type is one clear error."""
    hints = typing.get_type_hints(schema)
    values: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise ConfigError(f"--context takes KEY=VALUE, not {pair!r}")
        if key not in hints or key.startswith("_"):
            raise ConfigError(
                f"unknown setting {key!r}; this method has: {', '.join(setting_names(schema))}"
            )
        values[key] = _convert(key, raw.strip(), hints[key])
    return values


def setting_names(schema: type[RunContext]) -> list[str]:
    return [f.name for f in fields(schema)]


def _convert(key: str, raw: str, hint: Any) -> Any:
    if typing.get_origin(hint) is Literal:
        return raw  # the context dataclass names the choices in its own message
    options = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    if type(None) in typing.get_args(hint) and raw.lower() in {"none", "null", ""}:
        return None
    target = options[0]
    if typing.get_origin(target) is dict:
        raise ConfigError(f"{key} is not a KEY=VALUE setting; use --prompt NAME=FILE")
    if typing.get_origin(target) is Literal:
        return raw  # the context dataclass names the choices in its own message
    # pydantic's lax mode reads "2", "0.5", "yes" / "off" as the field's type
    try:
        return TypeAdapter(target).validate_python(raw)
    except ValidationError:
        expected = "true or false" if target is bool else f"a number ({target.__name__})"
        raise ConfigError(f"{key} takes {expected}, not {raw!r}") from None


def refuse_human_review(settings: Any, runner: str) -> None:
    """A run no person watches (``noterag ask``, ``noterag eval``, ``run_eval``) cannot pause
    for a human review: refused once, before any question, rather than failing each one."""
    if getattr(settings, "human_review", "none") != "none":
        raise ConfigError(
            f"{runner} does not pause for a human review: human_review is for apps "
            "(Agent Chat UI, Python with a checkpointer; docs/embedding.md)"
        )
