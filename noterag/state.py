"""The typed state the note-centric graphs share.

``typing_extensions.TypedDict`` (not ``typing``'s): on Python 3.11 the server's JSON schemas
break with the latter. Reducers only where values accumulate; loop counters are plain fields.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any

from typing_extensions import NotRequired, TypedDict


def merge_unique(left: list[str] | None, right: list[str] | None) -> list[str]:
    """Append the new items of ``right``, keeping first-seen order (distinct passages)."""
    merged = list(left or [])
    seen = set(merged)
    for item in right or []:
        if item not in seen:
            seen.add(item)
            merged.append(item)
    return merged


class Passage(TypedDict):
    id: str
    title: str
    text: str


class QuestionInput(TypedDict):
    """What a caller sends."""

    question: str
    task: NotRequired[str]


class CostFields(TypedDict, total=False):
    """Every model call adds to these (the evaluation reports them per question)."""

    llm_calls: Annotated[int, operator.add]
    prompt_tokens: Annotated[int, operator.add]
    completion_tokens: Annotated[int, operator.add]


class NoteOutput(CostFields, total=False):
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
