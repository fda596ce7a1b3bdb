"""REPLUG prompts (Shi et al., 2024, "REPLUG: Retrieval-Augmented Black-Box Language Models"),
from the authors' code, swj0419/REPLUG at 6cbe797 (``COMMIT``), ``downstream_eval/qa_final.py``
(the open-domain QA evaluation, ``--prompt_method open-book``).

The original builds one prompt per retrieved document: its few-shot demonstrations (the first 16
of the QA data file's ``demos``, each with the top-1 document retrieved for its question, as
``Knowledge: <doc>\\nQuestion: <q>\\nAnswer: <a>\\n\\n``), then ``Knowledge: <doc>\\nQuestion:
<question>\\nAnswer:``. The demonstrations come from the NQ / TriviaQA data files the README
points to, which the repository does not hold: noterag shows them when the run names a dataset
file to take them from (``demos_file``, its first ``max_demos`` questions: ``demonstration``,
each with its top-1 passage), and none by default (the test part alone, word for word).
``<doc>`` is the passage's text alone (``doc["text"]``, no title).

``closed_book`` is the same code's ``--prompt_method closed-book`` test part, which noterag uses
only when the retriever found no passage (noterag's choice: the original always has 10).
REPLUG answers short questions only: ``answer`` has ``multihop`` only (answer-level ensembling
groups identical answers, which long answers never are).
"""

from __future__ import annotations

from dataclasses import dataclass

from noterag.core.prompt import AnswerPrompts, Prompt

REPOSITORY = "swj0419/REPLUG"
COMMIT = "6cbe7971a9b761c63aa65f7fe70db3ee82158612"
_CODE = f"{REPOSITORY} @ {COMMIT[:7]}"


@dataclass(frozen=True, kw_only=True)
class REPLUGPrompts(AnswerPrompts):
    """``answer``: one pass's prompt, a passage prepended to the question; ``closed_book``: the
    question alone, when there is no passage."""

    closed_book: Prompt
    demonstration: Prompt


PAPER = REPLUGPrompts(
    answer={
        "multihop": Prompt(
            "answer.multihop",
            "Knowledge: {passage}\nQuestion: {question}\nAnswer:",
            f"{_CODE}: downstream_eval/qa_final.py, main() (open-book; the 16 demonstrations "
            "before it are the QA data file's, not in the repository: left out)",
        )
    },
    closed_book=Prompt(
        "closed_book",
        "Question: {question}\nAnswer:",
        f"{_CODE}: downstream_eval/qa_final.py, main() (closed-book; used when no passage was "
        "retrieved, noterag's choice)",
    ),
    demonstration=Prompt(
        "demonstration",
        "Knowledge: {passage}\nQuestion: {question}\nAnswer: {answer}\n\n",
        f"{_CODE}: downstream_eval/qa_final.py, main() (open-book: one per demonstration, its "
        "top-1 document's text, the question, its first answer stripped; shown before every "
        "pass's prompt when the run gives demos_file)",
    ),
)
