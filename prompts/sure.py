"""SuRe prompts (Kim et al., ICLR 2024, "SuRe: Summarizing Retrievals using Answer Candidates for
Open-domain QA of LLMs"), word for word from the official code, bbuing9/ICLR24_SuRe at commit
6320590871bdfb88166c953baed27dc532f89dd8 (``functions/``, the OpenAI-API code that
``query_gpt.py --infer_type sure`` runs; ``functions_openllm/`` has the same texts).

The official code builds each prompt with f-strings; here each is one template whose slots are
the f-strings' values, and rendering one gives the official string byte for byte
(tests/test_sure.py renders both):

- ``{passages}``: the retrieved passages as the official code appends them, each
  ``"\\n\\nPassage #i Title: ...\\nPassage #i Text: ..."`` (``sure_passages`` in nodes/sure.py);
  ``{n_articles}`` is how many there are.
- candidates: "two" and "(a) xx, (b) yy" are the slots ``{count}`` and ``{form}``; with the
  default K = 2 (``n_candidates``) they are filled with exactly those words. For another K they
  become e.g. "three" and "(a) xx, (b) yy, (c) zz" (ours: the official code asks for two only).
- summary: ``{choices}`` is ``convert_choices_to_texts`` ("(a) X (b) Y", no space after
  "Choices:" in the original either), the prediction is ``({letter}) {candidate}``.
- ranking: the original fills "Target Question:" with ``f"Question: {question}"``, so the
  words "Question: " stay in the text before ``{question}``.

The official code sends each prompt as a system message; noterag sends it as the user message,
as for every method.
"""

from dataclasses import dataclass

from noterag.core.prompt import AnswerPrompts, Prompt

_REPO = "bbuing9/ICLR24_SuRe"
COMMIT = "6320590871bdfb88166c953baed27dc532f89dd8"


def _source(path: str, function: str) -> str:
    return f"{_REPO} {path} @ {COMMIT[:7]}: {function}"


@dataclass(frozen=True, kw_only=True)
class SuRePrompts(AnswerPrompts):
    """SuRe's four prompts: p_can, p_sum, p_val, p_rank (paper, Section 3). SuRe has no answer
    prompt: its answer is the best-scored candidate, so ``answer`` is empty."""

    candidates: Prompt
    summary: Prompt
    validation: Prompt
    ranking: Prompt


PAPER = SuRePrompts(
    # functions/gen_candidates.py, get_query_candidate
    candidates=Prompt(
        "candidates",
        "Below are {n_articles} passages related to the question at the end. After reading the "
        "passages, provide {count} correct candidates for the answer to the question at the end. "
        "Each answer should be in the form: {form}, and should not exceed 3 words for each "
        "candidate."
        "{passages}"
        "\n\nQuestion:\n{question}"
        "\n\nAnswer: ",
        _source("functions/gen_candidates.py", "get_query_candidate (p_can)"),
    ),
    # functions/gen_summary.py, gen_summary_mcq
    summary=Prompt(
        "summary",
        "{passages}"
        "\n\nYour job is to act as a professional writer. You will write a good-quality passage "
        "that can support the given prediction about the question only based on the information "
        "in the provided supporting passages.\n\nNow, let's start. After you write, please write "
        '[DONE] to indicate you are done. Do not write a prefix (e.g., "Response:") while writing '
        "a passage."
        "\n\nQuestion: {question}\nChoices:{choices}\nPrediction:({letter}) {candidate}"
        "\nPassage: ",
        _source("functions/gen_summary.py", "gen_summary_mcq (p_sum)"),
    ),
    # functions/verification.py, verification
    validation=Prompt(
        "validation",
        "Question:\n{question}"
        "\n\nPrediction:\n{candidate}"
        "\n\nPassage:\n{summary}"
        "\n\nDoes the passage correctly support the prediction? Choices: [True, False]. Answer:",
        _source("functions/verification.py", "verification (p_val)"),
    ),
    # functions/verification.py, ranking_summary
    ranking=Prompt(
        "ranking",
        "Question: Given the following passages, determine which one provides a more informative "
        "answer to the subsequent question."
        "\n\nPassage 1:\n{summary1}"
        "\n\nPassage 2:\n{summary2}"
        "\n\nTarget Question:\nQuestion: {question}"
        "\n\nYour Task:\nIdentify which passage (Passage 1 or Passage 2) is more relevant and "
        "informative to answer the question at hand. Choices: [Passage 1, Passage 2].\n\nAnswer:",
        _source("functions/verification.py", "ranking_summary (p_rank)"),
    ),
    answer={},
)
