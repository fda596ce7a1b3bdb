"""RAT prompts (Wang et al., 2024, "RAT: Retrieval Augmented Thoughts Elicit Context-Aware
Reasoning in Long-Horizon Generation"), from the authors' code, CraftJarvis/RAT @ 38afdf8,
creative.ipynb (the notebook its README runs; app/gradio_app.py is the demo), word for word.

The notebook sends each prompt as the user message of a gpt-3.5-turbo chat, built with
f-strings from a triple-quoted instruction; its ``\\n\\n`` inside those (non-raw) strings are
real line breaks, so "Use `" is followed by two line breaks and "` to split ...". Slots are the
notebook's variable names:

- ``draft``:  ``f"{question}" + draft_prompt``
- ``query``:  ``f"##Question: {question}\\n\\n##Content: {answer}\\n\\n##Instruction: {query_prompt}"``
  where ``answer`` is the draft so far (the revised earlier steps and the current step)
- ``revise``: ``f"##Existing Text in Wiki Web: {content}\\n\\n##Question: {question}\\n\\n##Answer:
  {answer}\\n\\n##Instruction: {revise_prompt}"`` where ``content`` is the retrieved text

Not sent: the system message (``chatgpt_system_prompt``: "You are ChatGPT, a large language
model trained by OpenAI, based on the GPT-4 architecture. Knowledge cutoff: 2023-04 Current
date: <today>"): it describes one vendor's model and noterag's steps send one user message.
The demo app's revision prompt differs slightly (it adds "Add more details from retrieved text
to the answer." and writes the \\n\\n without backticks); the notebook's is used.
tests/test_rat.py checks these texts against the vendored notebook
(prompts/original/CraftJarvis-RAT/creative.ipynb).

``answer`` (ours): RAT's output is the revised draft itself (long-form generation). The papers
that compare against RAT score a short answer, and use one aligned answer prompt for every
baseline, so the revised draft goes through an answer prompt written after thunlp/DeepNote's
``prompts/en/base`` files (``base``, ``base_asqa``, ``base_strategyqa``) with the revised draft
("reasoning") in place of the passages.
"""

from __future__ import annotations

from dataclasses import dataclass

from noterag.core.prompt import AnswerPrompts, Prompt
from noterag.prompts.vendored import cite

REPOSITORY = "CraftJarvis/RAT"
_NOTEBOOK = cite(REPOSITORY, "creative.ipynb")

DRAFT_PROMPT = (
    "\nIMPORTANT:\n"
    "Try to answer this question/instruction with step-by-step thoughts and make the answer "
    "more structural.\n"
    "Use `\n\n` to split the answer into several paragraphs.\n"
    "Just respond to the instruction directly. DO NOT add additional explanations or "
    "introducement in the answer unless you are asked to.\n"
)

QUERY_PROMPT = (
    "\nI want to verify the content correctness of the given question, especially the last "
    "sentences.\n"
    "Please summarize the content with the corresponding question.\n"
    "This summarization will be used as a query to search with Bing search engine.\n"
    "The query should be short but need to be specific to promise Bing can find related "
    "knowledge or pages.\n"
    "You can also use search syntax to make the query short and clear enough for the search "
    "engine to find relevant language data.\n"
    "Try to make the query as relevant as possible to the last few sentences in the content.\n"
    "**IMPORTANT**\n"
    "Just output the query directly. DO NOT add additional explanations or introducement in "
    "the answer unless you are asked to.\n"
)

REVISE_PROMPT = (
    "\nI want to revise the answer according to retrieved related text of the question in WIKI "
    "pages.\n"
    "You need to check whether the answer is correct.\n"
    "If you find some errors in the answer, revise the answer to make it better.\n"
    "If you find some necessary details are ignored, add it to make the answer more plausible "
    "according to the related text.\n"
    "If you find the answer is right and do not need to add more details, just output the "
    "original answer directly.\n"
    "**IMPORTANT**\n"
    "Try to keep the structure (multiple paragraphs with its subtitles) in the revised answer "
    "and make it more structual for understanding.\n"
    "Split the paragraphs with `\n\n` characters.\n"
    "Just output the revised answer directly. DO NOT add additional explanations or "
    "annoucement in the revised answer unless you are asked to.\n"
)


@dataclass(frozen=True, kw_only=True)
class RATPrompts(AnswerPrompts):
    """RAT's three prompts (draft, query, revise) and the answer prompt per task (ours)."""

    draft: Prompt
    query: Prompt
    revise: Prompt


_OURS = (
    "ours: after thunlp/DeepNote prompts/en/{file}, the revised draft in place of the passages "
    "(RAT itself returns the revised draft)"
)

PAPER = RATPrompts(
    draft=Prompt("draft", "{question}" + DRAFT_PROMPT, f"{_NOTEBOOK}: get_draft"),
    query=Prompt(
        "query",
        "##Question: {question}\n\n##Content: {answer}\n\n##Instruction: " + QUERY_PROMPT,
        f"{_NOTEBOOK}: get_query",
    ),
    revise=Prompt(
        "revise",
        "##Existing Text in Wiki Web: {content}\n\n##Question: {question}\n\n"
        "##Answer: {answer}\n\n##Instruction: " + REVISE_PROMPT,
        f"{_NOTEBOOK}: get_revise_answer",
    ),
    answer={
        "multihop": Prompt(
            "answer_multihop",
            "Answer the question based on the given reasoning. Only give me the answer and do "
            "not output any other words.\n\nThe following is the given reasoning:\n{draft}\n\n"
            "Question: {question}\nAnswer:",
            _OURS.format(file="base"),
        ),
        "asqa": Prompt(
            "answer_asqa",
            "Instruction: Write an accurate, engaging, and concise answer for the given question "
            "using only the provided reasoning. Use an unbiased and journalistic tone.\n\n\n"
            "Question:\n{question}\n\n\nReasoning:\n{draft}\n\n",
            _OURS.format(file="base_asqa"),
        ),
        "strategyqa": Prompt(
            "answer_strategyqa",
            "Answer the question based on the given reasoning. Only give me 'yes' or 'no' as "
            "your answer and do not output any other words.\n\nThe following is the given "
            "reasoning:\n{draft}\n\nQuestion: {question}\nAnswer:",
            _OURS.format(file="base_strategyqa"),
        ),
    },
)
