"""Adaptive-Note prompts (Wang et al., 2024, "Retriever-and-Memory: Towards Adaptive Note-Enhanced
Retrieval-Augmented Generation", Appendix B, Tables A3 and A4), word for word.

Deviations, all typographical:
- the tables' "Instruction:" heading is a label of the table, not prompt text (the official code's
  prompt files do not send it either);
- the paper typesets the verdict JSON with curly quotes ({“status”: “False”}); we send straight
  quotes, as any JSON parser (and the official code) expects.

``OFFICIAL`` holds the prompt files of the official code (thunlp/Adaptive-Note ``prompts/en`` at
ab69094, vendored byte for byte in ``prompts/official/thunlp-Adaptive-Note``): the same words
with other capitalisation and line breaks. ``profile="official"`` sends those, rendered with
``str.format`` as the official code renders them, so that its prompt stream matches the official
runs. Adaptive-Note publishes no StrategyQA prompt: the paper set uses DeepNote's Table 16, the
official set DeepNote's official ``gen_answer_strategyqa`` file (same authors).
"""

from noterag.core.prompt import NotePrompts, Prompt, borrow
from noterag.prompts.deepnote import PAPER as _DEEPNOTE
from noterag.prompts.vendored import official_prompt

_PAPER = "Adaptive-Note paper, Appendix B"
_CODE = "thunlp/Adaptive-Note"

PAPER = NotePrompts(
    init_note=Prompt(
        "init_note",
        "Based on the provided document content, write a note. The note should integrate all "
        "relevant information from the original text that can help answer the specified question "
        "and form a coherent paragraph. Please ensure that the note includes all original text "
        "information useful for answering the question.\n"
        "\n"
        "Question to be answered: {query}\n"
        "Document content: {refs}\n"
        "\n"
        "Please provide the note you wrote:",
        f"{_PAPER}, Table A3: Prompt of the Note Initialization Stage",
    ),
    refine_query=Prompt(
        "refine_query",
        "Task: Based on the notes, propose two new questions. These new questions will be used to "
        "retrieve documents to supplement the notes and help answer the original question. The new "
        "questions should be concise and include keywords that facilitate retrieval. The new "
        "questions should avoid duplication with the existing question list.\n"
        "\n"
        "Original question: {query}\n"
        "Notes: {note}\n"
        "Existing question list: {query_log}\n"
        "\n"
        "Provide your two new questions:",
        f"{_PAPER}, Table A3: Prompt of the Iterative Information Collection Stage",
    ),
    accumulate=Prompt(
        "accumulate",
        "Task: Based on the retrieved documents, supplement the notes with content not yet "
        "included but useful for answering the question. The supplement should use the original "
        "text from the retrieved documents. The added content should include as much information "
        "from the retrieved documents as possible.\n"
        "\n"
        "Question: {query}\n"
        "Retrieved documents: {refs}\n"
        "Notes: {note}\n"
        "\n"
        "Provide your supplemented notes:",
        f"{_PAPER}, Table A3: Prompt of the Note Updating Stage",
    ),
    review=Prompt(
        "review",
        "Task: Please help me determine which note is better based on the following evaluation "
        "criteria:\n"
        "1. Contains key information directly related to the question.\n"
        "2. Completeness of Information: Does it cover all relevant aspects and details?\n"
        "3. Level of Detail: Does it provide enough detail to understand the issue in depth?\n"
        "4. Practicality: Does the note offer practical help and solutions?\n"
        "Please make your judgment adhering strictly to the following rules:\n"
        "- If Note 2 does not add new meaningful content on top of Note 1, or only adds redundant "
        'information, return {"status": "False"} directly.\n'
        "- If Note 2 has significant improvements over Note 1 based on the above criteria, return "
        '{"status": "True"} directly; otherwise, return {"status": "False"} .\n'
        "\n"
        "Question: {query}\n"
        "Provided Note 1: {best_note}\n"
        "Provided Note 2: {new_note}\n"
        "\n"
        "Based on the above information, make your judgment without explanation and return the "
        "result directly.",
        f"{_PAPER}, Table A3: Prompt of the Tigger1 [sic] of AMR",
    ),
    answer={
        "multihop": Prompt(
            "answer_multihop",
            "Answer the question based on the given note. Only give me the answer and do not "
            "output any other words.\n"
            "\n"
            "The following are given notes: {note}\n"
            "Question: {query}\n"
            "\n"
            "Answer:",
            f"{_PAPER}, Table A4: Multi-hop QA",
        ),
        "asqa": Prompt(
            "answer_asqa",
            "Write an accurate, engaging, and concise answer for the given question using only the "
            "provided notes. Use an unbiased and journalistic tone.\n"
            "\n"
            "Question: {query}\n"
            "Notes: {note}\n"
            "\n"
            "Answer:",
            f"{_PAPER}, Table A4: ASQA",
        ),
        "crud": Prompt(
            "answer_crud",
            "You are a news editor, and now you have been provided with one question and notes "
            "related to the question. Please answer these questions based on your notes and your "
            "own knowledge.\n"
            "\n"
            "Question: {query}\n"
            "Notes related to the query: {note}\n"
            "\n"
            "Answer:",
            f"{_PAPER}, Table A4: CRUD in English translation version",
        ),
        # Adaptive-Note publishes no StrategyQA prompt; its follow-up DeepNote (same authors) does.
        "strategyqa": borrow(_DEEPNOTE.answer["strategyqa"], "Adaptive-Note prints none"),
    },
)

# The official code's prompt files, vendored byte for byte (prompts/official/thunlp-Adaptive-Note)
# and rendered with str.format as src/main.py renders them.
OFFICIAL = NotePrompts(
    init_note=official_prompt(_CODE, "first_gen_answer", "init_note"),
    refine_query=official_prompt(_CODE, "gen_new_query", "refine_query"),
    accumulate=official_prompt(_CODE, "refine_note", "accumulate"),
    review=official_prompt(_CODE, "compare", "review"),
    answer={
        "multihop": official_prompt(_CODE, "gen_answer", "answer_multihop"),
        "asqa": official_prompt(_CODE, "gen_answer_asqa", "answer_asqa"),
        # The official CRUD runs send the Chinese prompts (prompts/zh); we send the paper's
        # English translation (Table A4) under both profiles.
        "crud": PAPER.answer["crud"],
        # No StrategyQA file in this repository: the same authors' DeepNote code has one.
        "strategyqa": borrow(
            official_prompt("thunlp/DeepNote", "gen_answer_strategyqa", "answer_strategyqa"),
            "thunlp/Adaptive-Note has no StrategyQA file",
        ),
    },
)
