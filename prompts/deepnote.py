"""DeepNote prompts (Wang et al., 2025, "DeepNote: Note-Centric Deep Retrieval-Augmented
Generation", Appendix B.1, Tables 10-16), word for word.

The paper's text flows the prompts into table cells; we lay them out with the line breaks the
same authors use in Adaptive-Note (Appendix B there), the words unchanged. Other notes:
- the tables' "Instructions" heading is a label, not prompt text;
- Table 13 prints the verdict JSON as ``{{"status":"False"}}``: the doubled braces are Python
  ``str.format`` escapes showing through, so the text sent is ``{"status":"False"}``;
- Table 11 (query refinement) ends with "Please provide the note you wrote:", as printed. It reads
  like a slip carried over from Table 10, but it is the published specification, so we send it;
- Table 15 (ASQA) has no "Answer:" line, as printed.
``PAPER`` keeps these printed slips on purpose: ``profile="paper"`` follows the printed text.

``OFFICIAL`` holds the official code's prompt files (thunlp/DeepNote ``prompts/en`` at cc2f013,
vendored byte for byte in ``prompts/official/thunlp-DeepNote``), rendered with ``str.format`` as
its ``src/main.py`` renders them. They differ from the paper's tables: query refinement ends "Do
not print any other words. Do not explain. Output only the two new questions you asked.";
accumulation ends "Provide your supplemented notes:" and says "retrieved documents"; the verdict
prompt wraps its JSON in ```` ```json ...``` ```` fences; field labels are lower-case; blank
lines differ. ``profile="official"`` sends these: it is the configuration that produced the
published numbers.
"""

from noterag.core.prompt import NotePrompts, Prompt
from noterag.prompts.vendored import official_prompt

_PAPER = "DeepNote paper, Appendix B.1"

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
        f"{_PAPER}, Table 10: Prompt of the Note Initialization Process",
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
        "Please provide the note you wrote:",
        f"{_PAPER}, Table 11: Prompt of the Query Refinement Stage",
    ),
    accumulate=Prompt(
        "accumulate",
        "Task: Based on the retrieved documents, supplement the notes with content not yet "
        "included but useful for answering the question. The supplement should use the original "
        "text from the retrieved documents. The added content should include as much information "
        "from the retrieved documents as possible.\n"
        "\n"
        "Question: {query}\n"
        "Retrieved document: {refs}\n"
        "Notes: {note}\n"
        "\n"
        "Please provide the note you wrote:",
        f"{_PAPER}, Table 12: Prompt of the Knowledge Accumulation Stage",
    ),
    review=Prompt(
        "review",
        "Task: Please help me determine which note is better based on the following evaluation "
        "criteria:\n"
        "1. Contains key information directly related to the question.\n"
        "2. Completeness of Information: Does it cover all relevant aspects and details?\n"
        "3. Level of Detail: Does it provide enough detail to understand the issue in depth?\n"
        "4. Practicality: Does the note offer practical help and solutions?\n"
        "\n"
        "Please make your judgment adhering strictly to the following rules:\n"
        "- If Note 2 does not add new meaningful content on top of Note 1, or only adds redundant "
        'information, return json {"status":"False"} directly.\n'
        "- If Note 2 has significant improvements over Note 1 based on the above criteria, return "
        'json {"status":"True"} directly; otherwise, return json {"status":"False"}.\n'
        "\n"
        "Question: {query}\n"
        "Provided Note 1: {best_note}\n"
        "Provided Note 2: {new_note}\n"
        "\n"
        "Based on the above information, make your judgment without explanation and return the "
        "result directly.",
        f"{_PAPER}, Table 13: Prompt of the Adaptive Retrieval Decision Stage",
    ),
    answer={
        "multihop": Prompt(
            "answer_multihop",
            "Answer the question based on the given notes. Only give me the answer and do not "
            "output any other words.\n"
            "\n"
            "The following are given notes: {note}\n"
            "Question: {query}\n"
            "\n"
            "Answer:",
            f"{_PAPER}, Table 14: Note-Informed Answer Generation (Multi-hop QA)",
        ),
        "asqa": Prompt(
            "answer_asqa",
            "Write an accurate, engaging, and concise answer for the given question using only the "
            "provided notes. Use an unbiased and journalistic tone.\n"
            "\n"
            "Question: {query}\n"
            "Notes: {note}",
            f"{_PAPER}, Table 15: Note-Informed Answer Generation (ASQA)",
        ),
        "strategyqa": Prompt(
            "answer_strategyqa",
            'Answer the question based on the given notes. Only give me "yes" or "no" as your '
            "answer and do not output any other words.\n"
            "\n"
            "The following are given notes: {note}\n"
            "Question: {query}\n"
            "\n"
            "Answer:",
            f"{_PAPER}, Table 16: Note-Informed Answer Generation (StrategyQA)",
        ),
    },
)

_CODE = "thunlp/DeepNote"

OFFICIAL = NotePrompts(
    init_note=official_prompt(_CODE, "init_note", "init_note"),
    refine_query=official_prompt(_CODE, "gen_new_query", "refine_query"),
    accumulate=official_prompt(_CODE, "refine_note", "accumulate"),
    review=official_prompt(_CODE, "compare", "review"),
    answer={
        "multihop": official_prompt(_CODE, "gen_answer", "answer_multihop"),
        "asqa": official_prompt(_CODE, "gen_answer_asqa", "answer_asqa"),
        "strategyqa": official_prompt(_CODE, "gen_answer_strategyqa", "answer_strategyqa"),
    },
)
