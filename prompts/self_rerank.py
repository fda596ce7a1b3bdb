"""Self-Rerank as the Adaptive-Note authors ran it (a Self-RAG simplification after ActiveRAG,
Xu et al., 2024): their prompt file ``prompts/en/self_rerank`` (thunlp/Adaptive-Note @ ab69094,
vendored byte for byte), which asks for two tags per passage, useful / useless and relevant /
irrelevant (Self-RAG's IsUse and IsRel critiques), with a reason, in the format
``1. passage:..., label:..., reason:...``, in one call. The answer prompts are Adaptive-Note's
generator (``noterag.prompts.single_step``), reading the labelled passages.
"""

from __future__ import annotations

from dataclasses import dataclass

from noterag.core.prompt import AnswerPrompts, Prompt
from noterag.prompts import adaptive_note
from noterag.prompts.single_step import ADAPTIVE_NOTE, aligned_answers
from noterag.prompts.vendored import official_prompt


@dataclass(frozen=True, kw_only=True)
class SelfRerankPrompts(AnswerPrompts):
    """The labelling prompt (slots ``query``, ``refs``) and one answer prompt per task (slots
    ``query``, ``note``: the labelled passages)."""

    rerank: Prompt


RERANK = official_prompt(ADAPTIVE_NOTE, "self_rerank", "rerank")

PAPER = SelfRerankPrompts(
    rerank=RERANK, answer=aligned_answers(adaptive_note.PAPER.answer, "self-rerank")
)
OFFICIAL = SelfRerankPrompts(
    rerank=RERANK, answer=aligned_answers(adaptive_note.OFFICIAL.answer, "self-rerank")
)
