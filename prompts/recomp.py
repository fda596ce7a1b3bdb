"""RECOMP prompts (Xu et al., ICLR 2024, "RECOMP: Improving Retrieval-Augmented LMs with
Compression and Selective Augmentation"; carriex/recomp at d746d9f).

RECOMP's compressors are trained models and its repository ships no prompt for them:

- ``compressor_input`` is what the trained abstractive compressor (a T5-large, e.g.
  ``fangyuan/hotpotqa_abstractive``) reads, as FlashRAG feeds it ("input processing in recomp
  training format", RUC-NLPIR/FlashRAG ``flashrag/refiner/refiner.py``,
  ``AbstractiveRecompRefiner``): ``Question: {question}\\n Document: {document}\\n Summary: ``
  with the passages' texts (no titles) joined by newlines. A trained compressor plugged in for
  the ``compressor`` role (noterag.models.runnable) gets this.
- ``summarize`` (ours) is the default abstractive compressor: the run's model, with an
  instruction in the spirit of RECOMP's objective (a short summary of what in the documents
  helps answer the question) ending in that same format, the passages numbered with their titles
  as the run's profile formats them. It does not ask for an empty summary when nothing helps
  (RECOMP's selective augmentation): small models answer that with a word such as "None". A
  compressor that does return nothing still gets selective augmentation (``no_context``).

The answer prompts are vanilla RAG's (noterag.prompts.baselines ``VANILLA``, borrowed) with the
compressed text as their passages (``{refs}``), as FlashRAG's refiner pipeline puts the refined
text in its generator's reference slot; ``no_context`` (``NO_RETRIEVAL``, borrowed) answers when
the compression is empty, as RECOMP prepends nothing then.
"""

from __future__ import annotations

from dataclasses import dataclass

from noterag.core.prompt import AnswerPrompts, Prompt, borrow
from noterag.prompts import baselines

REPOSITORY = "carriex/recomp"
COMMIT = "d746d9fe55c5822b3b81ab0c1900695ea7d97bcc"
FLASHRAG = "RUC-NLPIR/FlashRAG"
FLASHRAG_COMMIT = "1ee524901aa3daf009f97b7a31e7a1b58eee8206"

# the trained abstractive compressor's input (FlashRAG's AbstractiveRecompRefiner)
TRAINED_FORMAT = "Question: {question}\n Document: {document}\n Summary: "


@dataclass(frozen=True, kw_only=True)
class RecompPrompts(AnswerPrompts):
    """The abstractive compressor's prompt (ours) and the trained compressor's input; the answer
    prompts per task (slots ``query``, ``refs``: the compressed text) and, for an empty
    compression, the no-retrieval ones (slot ``query``)."""

    summarize: Prompt
    compressor_input: Prompt
    no_context: dict[str, Prompt]


PAPER = RecompPrompts(
    summarize=Prompt(
        "summarize",
        "Compress the documents into a short summary, at most a few sentences, that keeps only "
        "the information useful to answer the question.\n\n" + TRAINED_FORMAT,
        f"ours: a prompted stand-in for RECOMP's trained abstractive compressor, ending in its "
        f"training input format ({FLASHRAG} @ {FLASHRAG_COMMIT[:7]}: flashrag/refiner/"
        "refiner.py, AbstractiveRecompRefiner)",
    ),
    compressor_input=Prompt(
        "compressor_input",
        TRAINED_FORMAT,
        f"{FLASHRAG} @ {FLASHRAG_COMMIT[:7]}: flashrag/refiner/refiner.py, "
        "AbstractiveRecompRefiner (RECOMP's training format; the passages' texts joined by "
        "newlines)",
    ),
    answer={
        task: borrow(prompt, "the compressed text as the passages")
        for task, prompt in baselines.VANILLA.answer.items()
    },
    no_context={
        task: borrow(prompt, "an empty compression: RECOMP prepends nothing")
        for task, prompt in baselines.NO_RETRIEVAL.answer.items()
    },
)
