"""Amber prompts (Qin et al., 2025, "Towards Adaptive Memory-Based Optimization for Enhanced
Retrieval-Augmented Generation", Appendix D, Tables 5 and 6), word for word.

We lay the table cells out with the line breaks of Adaptive-Note's Appendix B (the prompts Amber's
are built on), the words unchanged. Deviations and additions:
- the tables' "Instruction:" heading is a label of the table, not prompt text;
- the refiner prompt (Table 6) prints ``suggestions: suggestions``: a slot without braces, so the
  challenger's suggestions would never reach the refiner. We send ``suggestions: {suggestions}``;
- the memory-updating prompt (Table 6) prints mixed curly and straight quotes
  (``{“status": “True"}``); we send straight quotes, as a JSON parser expects;
- Appendix D describes a Note-Updating stage (query q, the new passages, the best memory) but
  prints no prompt for it. Amber's memory-initialization and memory-updating prompts are
  Adaptive-Note's (the latter without its first rule), and Adaptive-Note's note-updating prompt
  takes exactly those inputs, so we send it (Adaptive-Note, Table A3, "Note Updating Stage");
- the paper publishes no prompt for the adaptive information collector's sufficiency decision
  (Section 3.4: "evaluate whether the information currently available in the memory ... is
  sufficient to answer the user query q"). ``sufficiency`` is OURS, written in the style of the
  memory-updating prompt so that the same ``{"status": ...}`` parser reads it;
- the paper publishes no answer prompts: we send Adaptive-Note's task prompts (Table A4; DeepNote's
  Table 16 for StrategyQA), which answer from the note alone as Amber answers from its memory.

The chunk-level filter prompt keeps the paper's slot names ``{External_Knowledge}`` and
``{Question}``. Amber has no official code, so there is no ``official`` prompt set.
"""

from __future__ import annotations

from dataclasses import dataclass

from noterag.core.prompt import NotePrompts, Prompt, borrow
from noterag.prompts import adaptive_note

_PAPER = "Amber paper, Appendix D"
_AN = adaptive_note.PAPER


@dataclass(frozen=True)
class AmberPrompts(NotePrompts):
    """The note prompts (init_note, refine_query, accumulate, review, answer) plus Amber's own:
    the two filters, the three memory agents and the sufficiency decision."""

    chunk_filter: Prompt
    sentence_filter: Prompt
    reviewer: Prompt
    challenger: Prompt
    refiner: Prompt
    sufficiency: Prompt


PAPER = AmberPrompts(
    # The same words as Adaptive-Note's note-initialization prompt.
    init_note=borrow(
        _AN.init_note,
        "the same words",
        source=f"{_PAPER}, Table 5: Prompt of the Memory Initialization Stage",
    ),
    refine_query=Prompt(
        "refine_query",
        "Task: Based on the notes, propose a new question. The new question will be used to "
        "retrieve documents to supplement the notes and help answer the original question. The new "
        "question should be concise and include keywords that facilitate retrieval. The new "
        "question should avoid duplication with the existing question list.\n"
        "\n"
        "Original question: {query}\n"
        "Notes: {note}\n"
        "Existing question list: {query_log}\n"
        "\n"
        "Provide your new question,you MUST reply with the new question on the last line, "
        'starting with "### New Question".',
        f"{_PAPER}, Table 5: Prompt of the Iterative query rewritten Stage",
    ),
    accumulate=borrow(_AN.accumulate, "Amber prints none; see the module docstring"),
    review=Prompt(
        "review",
        "Task: Please help me determine which note is better based on the following evaluation "
        "criteria:\n"
        "1. Contains key information directly related to the question.\n"
        "2. Completeness of Information: Does it cover all relevant aspects and details?\n"
        "3. Level of Detail: Does it provide enough detail to understand the issue in depth?\n"
        "4. Practicality: Does the note offer practical help and solutions?\n"
        "Please make your judgment adhering strictly to the following rules:\n"
        "- If Note 2 has significant improvements over Note 1 based on the above criteria, return "
        '{"status": "True"} directly; otherwise, return {"status": "False"} .\n'
        "\n"
        "Question: {query}\n"
        "Provided Note 1: {best_note}\n"
        "Provided Note 2: {new_note}\n"
        "\n"
        "Based on the above information, make your judgment without explanation and return the "
        "result directly.",
        f"{_PAPER}, Table 6: Prompt of the memory updating (straight quotes)",
    ),
    # Amber prints no answer prompts (see the module docstring)
    answer={
        task: borrow(prompt, "Amber prints none: Adaptive-Note's")
        for task, prompt in _AN.answer.items()
    },
    chunk_filter=Prompt(
        "chunk_filter",
        "You are an advanced AI model specialized in understanding the Natural Language Inference "
        "(NLI) tasks. Your task is to do the NLI problem. The premise is [External Knowledge]. The "
        'hypothesis is "There exist clear and unambiguous answer in the [External Knowledge] that '
        'can convincingly and soundly answer the Question." Your response should be in one of '
        "(useful,useless).\n"
        "\n"
        "External Knowledge: {External_Knowledge}\n"
        "Question: {Question}\n"
        "\n"
        "Now give me the NLI result, which 1. should be one of (useful,useless). 2.Please strictly "
        "following this json format and fill xxx with your answer. 3. Please notice the Escape "
        "Character and keep correct format. 4. Please just give me the concise Json response and "
        "no ther redundant words. 5. The output should not appear Here is the NLI result, Just "
        "strictly follow the format below:\n"
        '{"NLI result":"xxx"}',
        f"{_PAPER}, Table 5: Prompt of the Chunk-Level Filter",
    ),
    sentence_filter=Prompt(
        "sentence_filter",
        "You are an AI model specialized in extracting helpful sentences from a given context. "
        "Your task is to extract helpful sentences while removing irrelevant or unhelpful ones "
        "based on the provided question and context.\n"
        "\n"
        "Question: {query}\n"
        "context: {context}\n"
        "\n"
        "Now provide the extracted helpful sentences, which should include only valid and "
        "relevant sentences from the context.",
        f"{_PAPER}, Table 5: Prompt of the Sentence-Level Filter",
    ),
    reviewer=Prompt(
        "reviewer",
        "Task: Analyze the relationship between the query, retrieved documents, and notes. "
        "Identify the strengths and weaknesses of how well the notes align with the query and "
        "incorporate the information from the retrieved documents. Highlight areas where the notes "
        "effectively cover the query and the references, as well as areas where they could be "
        "improved to better address the query or utilize the information from the references.\n"
        "\n"
        "Question: {query}\n"
        "retrieved documents: {refs}\n"
        "note: {note}\n"
        "\n"
        "Provide an analysis of the notes with a focus on the strengths and weakness:",
        f"{_PAPER}, Table 6: Prompt of the reviewer in Agent-based memory",
    ),
    challenger=Prompt(
        "challenger",
        "Based on the provided reviewer information, provide specific and actionable suggestions "
        "to improve the notes. The goal is to ensure the notes comprehensively and accurately "
        "address the query while fully utilizing relevant information from the retrieved "
        "documents.\n"
        "\n"
        "Question: {query}\n"
        "retrieved documents: {refs}\n"
        "Notes: {note}\n"
        "reviewer information: {review_info}\n"
        "\n"
        "Provide detailed suggestions to revise and enhance the notes:",
        f"{_PAPER}, Table 6: Prompt of the challenger in Agent-based memory",
    ),
    refiner=Prompt(
        "refiner",
        "Refine the provided notes based on the reviewer information and suggestions. The goal is "
        "to ensure the notes are improved to better address the query and fully utilize the "
        "relevant information from the retrieved documents.\n"
        "\n"
        "Question: {query}\n"
        "retrieved documents: {refs}\n"
        "Notes: {note}\n"
        "reviewer information: {review_info}\n"
        # DEVIATION: the paper prints "suggestions: suggestions" (no slot); we fill it in.
        "suggestions: {suggestions}\n"
        "\n"
        "Provide the refined notes that incorporate the feedback from the reviewer information "
        "and suggestions:",
        f"{_PAPER}, Table 6: Prompt of the refiner in Agent-based memory "
        "(suggestions slot filled in)",
    ),
    # OURS: the paper publishes no sufficiency prompt (see the module docstring).
    sufficiency=Prompt(
        "sufficiency",
        "Task: Please help me determine whether the notes contain sufficient information to "
        "answer the question.\n"
        "Please make your judgment adhering strictly to the following rules:\n"
        "- If the notes contain clear and unambiguous information that can fully answer the "
        'question, return {"status": "True"} directly; otherwise, return {"status": "False"} .\n'
        "\n"
        "Question: {query}\n"
        "Notes: {note}\n"
        "\n"
        "Based on the above information, make your judgment without explanation and return the "
        "result directly.",
        "noterag (ours): Amber publishes no prompt for the adaptive information collector's "
        "sufficiency decision (Section 3.4)",
    ),
)
