"""Chain-of-Note (Yu et al., 2023) as the Adaptive-Note authors ran it: their prompt file
``prompts/en/chain-of-note`` (thunlp/Adaptive-Note @ ab69094, vendored byte for byte), which
asks for reading notes on the passages, their relevance to the question and a brief answer, in
one call. The answer prompts are Adaptive-Note's generator (``noterag.prompts.single_step``).

The file is Yu et al.'s instruction for a model with Chain-of-Note ("1. Read the given question
and five Wikipedia passages to gather relevant information. ...") with "five Wikipedia passages"
made "a few passages" (and the Wikipedia wording dropped), then the question and the passages.
Yu et al. fine-tune LLaMa-2 7B on such notes; the papers comparing against it prompt their model
zero-shot with this file. It is rendered with ``str.format`` as the official code renders its
files.
"""

from __future__ import annotations

from dataclasses import dataclass

from noterag.core.prompt import AnswerPrompts, Prompt
from noterag.prompts import adaptive_note
from noterag.prompts.single_step import ADAPTIVE_NOTE, aligned_answers
from noterag.prompts.vendored import official_prompt


@dataclass(frozen=True, kw_only=True)
class ChainOfNotePrompts(AnswerPrompts):
    """The reading-notes prompt (slots ``query``, ``refs``) and one answer prompt per task
    (slots ``query``, ``note``: the notes)."""

    notes: Prompt


NOTES = official_prompt(ADAPTIVE_NOTE, "chain-of-note", "notes")

PAPER = ChainOfNotePrompts(
    notes=NOTES, answer=aligned_answers(adaptive_note.PAPER.answer, "chain-of-note")
)
OFFICIAL = ChainOfNotePrompts(
    notes=NOTES, answer=aligned_answers(adaptive_note.OFFICIAL.answer, "chain-of-note")
)
