"""Adaptive-RAG prompts (Jeong et al., 2024, "Adaptive-RAG: Learning to Adapt Retrieval-Augmented
Large Language Models through Question Complexity"; starsuzi/Adaptive-RAG at 0c88670).

The authors route with a trained classifier and print no classification prompt:

- ``classifier_input`` is what their classifier reads: the question alone, stripped
  (``classifier/utils.py``, ``preprocess_features_function``); a T5-large that scores its first
  generated token over "A", "B" and "C" (``classifier/run_classifier.py``). A trained classifier
  plugged in for the ``classifier`` role (noterag.models.runnable) gets this.
- ``classify`` (ours) is the default: the run's model, prompted with the three classes as the
  paper defines them (§3.2): A, a straightforward question the LLM answers itself; B, moderate,
  needing a single-step (one retrieval) approach; C, complex, needing the multi-step approach.

Each route runs another noterag method with that method's prompts, borrowed (their sources say
whose): A ``no-retrieval`` (noterag.prompts.baselines ``NO_RETRIEVAL``), B ``vanilla``
(``VANILLA``), C ``ircot`` (noterag.prompts.ircot: the CoT reasoner and the IRCoT QA reader;
by default they read the demonstrations Adaptive-RAG's runs read, its own repository's
``gold_with_1_distractors`` files, vendored under ``prompts/original/starsuzi-Adaptive-RAG/``:
the setting ``demo_files``, "adaptive-rag"; IRCoT alone reads StonyBrookNLP/ircot's
``gold_with_2_distractors`` files).
IRCoT answers multi-hop questions only, so Adaptive-RAG has the multihop answer prompts alone.
The authors' own A and B were IRCoT's reader prompt without and with one retrieval
(``base_configs/nor_qa_*`` and ``oner_qa_*``); noterag routes to its baselines instead, as the
issue that added the method asks (the papers that compare against Adaptive-RAG name no prompts).
"""

from __future__ import annotations

from dataclasses import dataclass

from noterag.base.errors import ConfigError
from noterag.core.prompt import AnswerPrompts, Prompt, borrow
from noterag.prompts import baselines, ircot

REPOSITORY = "starsuzi/Adaptive-RAG"
COMMIT = "0c88670af8707667eb5c1163151bb5ce61b14acb"

# Adaptive-RAG's classes and the noterag method each routes to (the paper's no retrieval,
# single-step and multi-step approaches)
STRATEGIES = {"A": "no-retrieval", "B": "vanilla", "C": "ircot"}


@dataclass(frozen=True, kw_only=True)
class AdaptiveRAGPrompts(AnswerPrompts):
    """The classifier's prompts, and each route's prompts (``for_strategy`` gives the prompt set
    of the method that runs). ``answer`` is empty: which answer prompt a run uses depends on its
    route (``no_retrieval``, ``vanilla``, or IRCoT's ``reader``), each a prompt of its own name."""

    classify: Prompt
    classifier_input: Prompt
    no_retrieval: Prompt
    vanilla: Prompt
    reason: Prompt
    reader: Prompt

    def for_strategy(self, strategy: str) -> AnswerPrompts:
        """The prompt set the route's method reads, in that method's shape."""
        if strategy == "no-retrieval":
            return AnswerPrompts(answer={"multihop": self.no_retrieval})
        if strategy == "vanilla":
            return AnswerPrompts(answer={"multihop": self.vanilla})
        if strategy == "ircot":
            return ircot.IRCoTPrompts(reason=self.reason, answer={"multihop": self.reader})
        raise ConfigError(
            f"no Adaptive-RAG route {strategy!r}; routes: {', '.join(STRATEGIES.values())}"
        )


_PAPER = "Jeong et al., 2024, §3.2"

PAPER = AdaptiveRAGPrompts(
    classify=Prompt(
        "classify",
        "Classify the complexity of the following question, to decide how to answer it.\n"
        "A: straightforward: you can answer it from your own knowledge, without retrieving "
        "any document.\n"
        "B: moderate: answering it needs one retrieval of documents (a single-hop question).\n"
        "C: complex: answering it needs several retrieval and reasoning steps (a multi-hop "
        "question).\n"
        "Reply with the letter only.\n\n"
        "Question: {question}\n"
        "Complexity:",
        "ours: a prompted stand-in for Adaptive-RAG's trained T5-large query-complexity "
        f"classifier, its classes as {_PAPER} defines them (A no retrieval, B single-step, "
        "C multi-step)",
    ),
    classifier_input=Prompt(
        "classifier_input",
        "{question}",
        f"{REPOSITORY} @ {COMMIT[:7]}: classifier/utils.py, preprocess_features_function (the "
        "trained classifier reads the question alone, stripped)",
    ),
    no_retrieval=borrow(baselines.NO_RETRIEVAL.answer["multihop"], "route A: no retrieval"),
    vanilla=borrow(baselines.VANILLA.answer["multihop"], "route B: single-step, vanilla RAG"),
    reason=borrow(ircot.PAPER.reason, "route C: multi-step, IRCoT's reasoner"),
    reader=borrow(ircot.PAPER.answer["multihop"], "route C: multi-step, IRCoT's QA reader"),
    answer={},
)
