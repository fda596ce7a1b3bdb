"""The typed state the note-centric graphs share.

``typing_extensions.TypedDict`` (not ``typing``'s): on Python 3.11 the server's JSON schemas
break with the latter. Reducers only where values accumulate; loop counters are plain fields.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Mapping
from typing import Annotated, Any, get_args, get_origin, get_type_hints

from langchain_core.messages import AnyMessage
from langgraph.graph.message import add_messages
from langgraph.types import Overwrite
from typing_extensions import NotRequired, TypedDict  # noqa: UP035 -- see the docstring


def merge_unique(left: list[str] | None, right: list[str] | None) -> list[str]:
    """Append the new items of ``right``, keeping first-seen order (distinct passages)."""
    merged = list(left or [])
    seen = set(merged)
    for item in right or []:
        if item not in seen:
            seen.add(item)
            merged.append(item)
    return merged


def add_counts(left: dict[str, int] | None, right: dict[str, int] | None) -> dict[str, int]:
    """Add the counts of ``right`` to those of ``left``, key by key."""
    merged = dict(left or {})
    for key, count in (right or {}).items():
        merged[key] = merged.get(key, 0) + count
    return merged


@functools.cache
def reducers(schema: type) -> dict[str, Callable[[Any, Any], Any]]:
    """The fields of a state schema that merge an update (``Annotated[T, reducer]``), and how."""
    found: dict[str, Callable[[Any, Any], Any]] = {}
    for key, hint in get_type_hints(schema, include_extras=True).items():
        if get_origin(hint) is NotRequired:
            hint = get_args(hint)[0]
        if get_origin(hint) is Annotated and callable(reduce := get_args(hint)[-1]):
            found[key] = reduce
    return found


@functools.cache
def declared_keys(schema: type) -> frozenset[str] | None:
    """The keys a state schema declares (None for ``dict``: any key)."""
    if schema is dict:
        return None
    return frozenset(get_type_hints(schema))


def after_update(
    schema: type, state: Mapping[str, Any], update: Mapping[str, Any]
) -> dict[str, Any]:
    """The state that ``update`` leads to, as LangGraph applies it (a field with a reducer
    merges the update in, any other field takes it): what a decision taken in the same step as
    the update reads."""
    merge = reducers(schema)
    after = dict(state)
    for key, value in update.items():
        if isinstance(value, Overwrite):
            after[key] = value.value
        elif key in merge and key in after:
            after[key] = merge[key](after[key], value)
        else:
            after[key] = value
    return after


class Passage(TypedDict):
    id: str
    title: str
    text: str


class QuestionInput(TypedDict):
    """What a caller sends: ``{"question": ...}``, or a chat's ``{"messages": [...]}`` (what
    LangGraph Studio's chat view, Agent Chat UI and assistant-ui send), whose last human message
    is the question. Both are a chat turn: a ``question`` is stored in ``messages`` as the
    user's message, and on a thread with earlier turns either is rewritten from them into a
    standalone question. ``question`` wins when both are given on a fresh thread. One of them is
    needed: the graphs' first step (noterag.core.question) checks that."""

    question: NotRequired[str]
    messages: NotRequired[Annotated[list[AnyMessage], add_messages]]
    task: NotRequired[str]


class CostFields(TypedDict, total=False):
    """Every model call adds to these (the evaluation reports them per question)."""

    llm_calls: Annotated[int, operator.add]
    prompt_tokens: Annotated[int, operator.add]
    completion_tokens: Annotated[int, operator.add]
    # replies a parser could not read, by kind, each answered with its documented fallback
    # (the table in noterag.core.parsing)
    fallbacks: Annotated[dict[str, int], add_counts]


class ChatFields(TypedDict, total=False):
    """The conversation: the user's turns (a chat's messages, or each ``question`` stored as a
    user message) and each answer appended as an AI message."""

    messages: Annotated[list[AnyMessage], add_messages]
    # a follow-up as the user wrote it, when it was rewritten into the standalone ``question``
    # from the conversation (noterag.core.question)
    asked: str


class SharedFields(CostFields, ChatFields, total=False):
    """The state fields the engine and the shared steps write or read, with their types: a
    method's state need not declare them all, but one it declares has this type
    (noterag.core.checks refuses another when the graph is built). The question step writes
    ``question``, ``task``, ``messages`` and ``asked``; every step the cost fields; the shared
    retrieve and answer steps ``passages``, ``best_note`` and ``answer``; eval rows, ``ask --json``
    and the trace page read ``steps``, ``trace`` and ``stop_reason``."""

    question: str
    task: str
    answer: str
    best_note: str
    passages: list[Passage]
    steps: int
    trace: Annotated[list[dict[str, Any]], operator.add]
    stop_reason: str


class NoteOutput(CostFields, ChatFields, total=False):
    """What a note-centric run returns."""

    question: str
    answer: str
    best_note: str
    query_log: Annotated[list[str], operator.add]
    passage_ids: Annotated[list[str], merge_unique]
    steps: int
    failures: int
    trace: Annotated[list[dict[str, Any]], operator.add]
    stop_reason: str


class NoteState(NoteOutput, total=False):
    """The full loop state: the output plus the current step's working values."""

    task: str
    queries: list[str]
    passages: list[Passage]
    seen: Annotated[list[str], merge_unique]
    candidate_note: str | None
    unparsed_verdicts: int


class AmberOutput(NoteOutput, total=False):
    """What an Amber run returns. ``best_note`` is Amber's best memory M_opt (the key all note
    methods share); ``steps`` counts the iterations after the first (trace step 0)."""

    sufficient: bool  # the adaptive information collector's last sufficiency decision
    unparsed_filters: int  # chunk-filter replies that were not an NLI verdict (passage kept)
    unparsed_verdicts: int


class AmberState(NoteState, AmberOutput, total=False):
    """Amber's loop state: the output plus the current iteration's working values."""

    filtered: dict[str, Any]  # this iteration's chunk-filter outcome: kept / dropped ids
    review_info: str  # the reviewer's analysis of the memory draft
    suggestions: str  # the challenger's suggestions
    memory_changed: bool  # whether this iteration changed the best memory
    step_entry: dict[str, Any]  # this iteration's trace entry, completed by the sufficiency check


class LocalPathway(TypedDict):
    """One entry of ReSP's local pathway memory: a retrieved sub-question and its response."""

    sub_question: str
    response: str


class ReSPOutput(CostFields, ChatFields, total=False):
    """What a ReSP run returns: the two memory queues and their concatenation (``memory``, what
    the generator read)."""

    question: str
    answer: str
    memory: str
    global_memory: Annotated[list[str], operator.add]
    local_memory: Annotated[list[LocalPathway], operator.add]
    query_log: Annotated[list[str], operator.add]  # the planned sub-questions, in order
    passage_ids: Annotated[list[str], merge_unique]
    steps: int  # iterations run (Algorithm 1's run_cnt)
    trace: Annotated[list[dict[str, Any]], operator.add]
    stop_reason: str
    unparsed_judgments: int


class ReSPState(ReSPOutput, total=False):
    """ReSP's loop state: the output plus the current iteration's working values."""

    task: str
    sub_question: str  # set by the plan; absent while the sub-question is the question itself
    queries: list[str]
    passages: list[Passage]
    seen: Annotated[list[str], merge_unique]
    summaries: dict[str, Any]  # this iteration's global summary and local pathway entry
    sufficient: bool  # the judge's last verdict
    stalled: str  # why the plan gave nothing new to retrieve ("" when it did)


class BaselineOutput(CostFields, ChatFields, total=False):
    """What a baseline run returns."""

    question: str
    answer: str
    passage_ids: Annotated[list[str], merge_unique]
    trace: Annotated[list[dict[str, Any]], operator.add]
    stop_reason: str


class BaselineState(BaselineOutput, total=False):
    task: str
    passages: list[Passage]
    seen: Annotated[list[str], merge_unique]
