"""Run-time configuration: each graph's ``context_schema``.

Fields carry ``metadata={"description": ...}`` so LangGraph Studio shows them. A graph run
without a context (``runtime.context is None``) uses these defaults; a dict context is converted.
"""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from pydantic import TypeAdapter, ValidationError

from noterag.errors import ConfigError

TASKS = ("multihop", "asqa", "strategyqa", "crud")
PROFILES = ("paper", "official")
HUMAN_REVIEWS = ("none", "note", "answer", "both")

# A passage longer than this many characters is cut in prompts (``max_passage_chars``): about
# 2,500 tokens, several times a Wikipedia paragraph, so that a whole article (or a 15 MB line)
# indexed as one passage cannot make a prompt of millions of tokens.
MAX_PASSAGE_CHARS = 10_000
# The longest question a run accepts: far beyond any benchmark's, far below a prompt that
# would fail at the endpoint after paid calls.
MAX_QUESTION_CHARS = 8_000


def check_question_size(question: str) -> None:
    """Refuse a question longer than ``MAX_QUESTION_CHARS`` (one line, before any model call)."""
    if len(question) > MAX_QUESTION_CHARS:
        raise ConfigError(
            f"the question is {len(question):,} characters long; at most "
            f"{MAX_QUESTION_CHARS:,} are accepted (put long material in the corpus, not the "
            "question)"
        )


def _field(default: Any, description: str) -> Any:
    return field(default=default, metadata={"description": description})


@dataclass(kw_only=True)
class RunContext:
    """Settings every method shares."""

    top_k: int = _field(5, "Passages retrieved per query (the papers' top-k).")
    task: Literal["multihop", "asqa", "strategyqa", "crud"] = _field(
        "multihop",
        "Answer style: multihop (short answer), asqa (long form), strategyqa (yes/no), "
        "crud (Adaptive-Note only). The input's `task` overrides it.",
    )
    profile: Literal["paper", "official"] = _field(
        "paper",
        "paper: the papers' method as printed, with robust engineering; official: reproduce the "
        "official code, the configuration that produced the published numbers (its prompt files "
        "byte for byte, raw-reply queries, duplicate passages, lenient verdicts, sampling "
        "0.1 / 0.9 / 1280 tokens).",
    )
    temperature: float | None = _field(
        None,
        "Sampling temperature for every call (None: the model's own; noterag's are 0.1; "
        "profile=official: 0.1).",
    )
    top_p: float | None = _field(
        None, "Nucleus sampling top_p (None: the model's own, 0.9; profile=official: 0.9)."
    )
    max_tokens: int | None = _field(
        None, "Cap on tokens per model reply (None: the model's own; profile=official: 1280)."
    )
    max_passage_chars: int | None = _field(
        MAX_PASSAGE_CHARS,
        "A retrieved passage longer than this many characters is cut to it (marked with "
        "' [...]') before it reaches a prompt; each cut is counted in the run's fallbacks as "
        "passage_truncated. None: passages go whole.",
    )
    prompts: dict[str, str] | None = field(
        default=None,
        metadata={
            "description": "Prompt overrides for this run: prompt name (e.g. refine_query, "
            "answer.multihop) -> template text with the same {slots}; the verbatim prompt files "
            "stay as they are."
        },
    )

    human_review: Literal["none", "note", "answer", "both"] = _field(
        "none",
        "Human in the loop: pause (LangGraph interrupt) for a person to review the note before "
        "the answer (note; the note methods), the final answer (answer), or both; resume with "
        "an Agent Chat UI response (accept, edit, response: a query to retrieve more with, "
        "ignore). Needs a checkpointer. docs/embedding.md.",
    )

    def __post_init__(self) -> None:
        # The command line's flags and -c pairs, the Python API and the server all end here,
        # so a value is refused alike however it is given.
        for f in fields(self):  # nan and infinity are no setting of any method
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(f"{f.name} must be a finite number, not {value}")
        if self.temperature is not None and not self.temperature >= 0:
            raise ConfigError(f"temperature must be a finite number >= 0, not {self.temperature}")
        if self.top_p is not None and not 0 <= self.top_p <= 1:
            raise ConfigError(f"top_p must be between 0 and 1, not {self.top_p}")
        for name in ("max_tokens", "max_passage_chars"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"{name} must be at least 1, not {value}")
        if self.top_k < 1:
            raise ConfigError(f"top_k must be at least 1, not {self.top_k}")
        if self.task not in TASKS:
            raise ConfigError(f"task must be one of {', '.join(TASKS)}, not {self.task!r}")
        if self.profile not in PROFILES:
            raise ConfigError(f"profile must be one of {', '.join(PROFILES)}, not {self.profile!r}")
        if self.human_review not in HUMAN_REVIEWS:
            raise ConfigError(
                f"human_review must be one of {', '.join(HUMAN_REVIEWS)}, not {self.human_review!r}"
            )
        if self.prompts is not None and not (
            isinstance(self.prompts, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in self.prompts.items())
        ):
            raise ConfigError("prompts must map prompt names to template texts (strings)")

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

    max_steps: int = _field(3, "Stop after this many note-update steps (T_CI / max_step).")
    max_failures: int = _field(
        2, "Stop after this many steps whose note was not better (T_IU / max_failure)."
    )
    max_passages: int | None = _field(
        15,
        "Stop once this many distinct passages were retrieved, the initial ones included (T_RP); "
        "None: no cap.",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("max_steps", "max_failures", "max_passages"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ConfigError(f"{name} must not be negative, not {value}")


@dataclass(kw_only=True)
class AdaptiveNoteContext(NoteContext):
    """Adaptive-Note's defaults: T_CI = 3, T_IU = 1, T_RP = 15 (paper, Section 4)."""

    max_steps: int = _field(3, "T_CI: the most information-collection iterations.")
    max_failures: int = _field(
        1, "T_IU: the most invalid updates (note not better) before stopping."
    )


@dataclass(kw_only=True)
class DeepNoteContext(NoteContext):
    """DeepNote's defaults: max_step 3, max_failure 2 (its case studies and official README).
    The paper (§3.3) stops on max failure and max step only: no passage cap by default. The
    official code also stops once more than ``--max_top_k`` (15) distinct passages were read:
    under ``profile="official"`` an unset cap is that 15."""

    max_passages: int | None = _field(
        None,
        "Passage cap: stop once more than this many distinct passages were retrieved. None: no "
        "cap under profile=paper (the paper has none), the official code's 15 under "
        "profile=official.",
    )


OFFICIAL_CODES = ("adaptive-note", "deepnote")


@dataclass(kw_only=True)
class BaselineContext(RunContext):
    """The baselines' settings: the shared ones, and whose official baseline runs
    ``profile="official"`` reproduces (both official codes have ``--method base`` and
    ``base_wo_retri``, with the same prompt files but different passage formats)."""

    official_code: Literal["adaptive-note", "deepnote"] = _field(
        "adaptive-note",
        "Under profile=official: reproduce the baseline runs of this official code (its passage "
        "format; deepnote also has StrategyQA prompt files).",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.official_code not in OFFICIAL_CODES:
            raise ConfigError(
                f"official_code must be one of {', '.join(OFFICIAL_CODES)}, not {self.official_code!r}"
            )


@dataclass(kw_only=True)
class ReSPContext(RunContext):
    """ReSP's iteration cap (paper, Section 5.2: top-5 documents, at most 3 iterations)."""

    max_steps: int = _field(
        3,
        "M: the most retrieve-summarize-judge iterations, the first (for the question itself) "
        "included; then the generator answers from the memory queues.",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_steps < 1:
            raise ConfigError(f"max_steps must be at least 1, not {self.max_steps}")


@dataclass(kw_only=True)
class AmberContext(RunContext):
    """Amber's iteration cap (paper, Table 4: max iterations 3) and its ablation switches
    (Table 2: w/o CF, w/o SF, w/o AMU). There is no passage cap and no failure threshold."""

    max_steps: int = _field(
        3,
        "The most iterations of the adaptive information collector, the first (for the "
        "question itself) included; then the answer is written from the best memory.",
    )
    chunk_filter: bool = _field(
        True, "Chunk-level filter: an NLI verdict per passage drops the useless ones (off: w/o CF)."
    )
    sentence_filter: bool = _field(
        True,
        "Sentence-level filter: keep only the helpful sentences of each kept passage (off: w/o SF).",
    )
    agent_updater: bool = _field(
        True,
        "Agent-based memory updater: reviewer, challenger and refiner revise each memory draft (off: w/o AMU).",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_steps < 1:
            raise ConfigError(f"max_steps must be at least 1, not {self.max_steps}")


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
    known = {f.name for f in fields(schema)}
    unknown = sorted(set(value) - known)
    if unknown:
        raise ConfigError(
            f"unknown context field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
    return schema(**value)


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
