"""Self-Refine as the Adaptive-Note authors ran it (a Self-RAG simplification after ActiveRAG,
Xu et al., 2024): their prompt file ``prompts/en/self_refine`` (thunlp/Adaptive-Note @ ab69094,
vendored byte for byte), which asks for the relevant, useful information of the passages with a
summary and analysis, in one call. The answer prompts are Adaptive-Note's generator
(``noterag.prompts.single_step``), reading that summary.
"""

from __future__ import annotations

from dataclasses import dataclass

from noterag.core.prompt import AnswerPrompts, Prompt
from noterag.prompts import adaptive_note
from noterag.prompts.single_step import ADAPTIVE_NOTE, aligned_answers
from noterag.prompts.vendored import official_prompt


@dataclass(frozen=True, kw_only=True)
class SelfRefinePrompts(AnswerPrompts):
    """The refinement prompt (slots ``query``, ``refs``) and one answer prompt per task (slots
    ``query``, ``note``: the refinement)."""

    refine: Prompt


REFINE = official_prompt(ADAPTIVE_NOTE, "self_refine", "refine")

PAPER = SelfRefinePrompts(
    refine=REFINE, answer=aligned_answers(adaptive_note.PAPER.answer, "self-refine")
)
OFFICIAL = SelfRefinePrompts(
    refine=REFINE, answer=aligned_answers(adaptive_note.OFFICIAL.answer, "self-refine")
)
