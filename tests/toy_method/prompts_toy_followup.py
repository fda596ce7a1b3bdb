"""The toy follow-up method's prompts (tests/test_toy_method.py copies this file to
prompts/toy_followup.py of a copy of the package tree)."""

from __future__ import annotations

from dataclasses import dataclass

from noterag.core.prompt import AnswerPrompts, Prompt


@dataclass(frozen=True, kw_only=True)
class FollowUpPrompts(AnswerPrompts):
    follow_up: Prompt


PAPER = FollowUpPrompts(
    follow_up=Prompt(
        "follow_up",
        "Ask one follow-up question whose answer helps to answer the question, or write DONE "
        "when what is known answers it.\n\n"
        "Question: Who was born first, Ada Lovelace or Charles Babbage?\n"
        "Known: nothing yet\n"
        "Follow-up: When was Charles Babbage born?\n\n"
        "Question: {question}\n"
        "Known: {known}\n"
        "Follow-up:",
        "ours: a toy",
    ),
    answer={
        "multihop": Prompt(
            "answer",
            "Answer the question from what is known, in a few words.\n"
            "Known: {note}\nQuestion: {query}\nAnswer:",
            "ours: a toy",
        )
    },
)
