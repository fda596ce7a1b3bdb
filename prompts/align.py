"""DNAlign prompts (DeepNote §3.4, Appendix B.2 and D): the four stages whose replies become
preference pairs, and the judge prompts that rank them.

Generation (the stage prompts) uses the official DeepNote prompt files, as the official
``src/gen_dpo_data.py`` does (``p_template("base" | "init_note" | "gen_new_query" |
"refine_note", ...)``; vendored byte for byte in ``prompts/official/thunlp-DeepNote``):

* ``rag`` — vanilla RAG's answer (``base``), the task-oriented generation data D_Ans;
* ``init_note`` — note initialization (``init_note``), D_Init;
* ``refine_query`` — query refinement (``gen_new_query``), D_QR;
* ``accumulate`` — knowledge accumulation (``refine_note``), D_KA.

Judging: the note-initialization and query-refinement judges are the ``score:`` prompts of the
official ``config/config.yaml`` (the paper prints them as Tables 17 and 18), word for word as
``yaml.safe_load`` reads them — which matters: the file quotes them with single quotes, where
YAML does not read ``\\n`` as an escape, so the official code sends the two characters backslash
and n wherever the text shows a line break. We send them the same way. They are ``str.format``
templates (``{{"best_id": ...}}``) and the official code fills ``{notes}`` / ``{new_querys}``
with the Python ``str()`` of a list of ``{"_id": i, "content": reply}`` dicts and
``{query_log}`` with ``str([])``. The knowledge-accumulation judge is the inference-time
adaptive retrieval decision prompt (``compare``, Table 13), as Appendix B.2 says and
``utils.LLM_score_compare_note`` does. The answer stage has no judge: it is scored against the
gold answers (``utils.LLM_score_rag``).
"""

from __future__ import annotations

from noterag.core.prompt import Prompt
from noterag.prompts.vendored import official_prompt

_CODE = "thunlp/DeepNote"
# thunlp/DeepNote config/config.yaml at cc2f013 (git blob 14568ca8cc41874ef633af98311cb7c654a1bc03)
CONFIG_SOURCE = {
    "repository": _CODE,
    "path": "config/config.yaml",
    "commit": "cc2f0132737e04ec2d895e8c21673cee612ca1e7",
    "git_blob": "14568ca8cc41874ef633af98311cb7c654a1bc03",
}
_FROM_CONFIG = f"{_CODE} {CONFIG_SOURCE['path']} @ {CONFIG_SOURCE['commit'][:7]}"

# The stage prompts, each the official prompt file the official gen_dpo_data.py renders.
STAGES: dict[str, Prompt] = {
    "rag": official_prompt(_CODE, "base", "rag"),
    "init_note": official_prompt(_CODE, "init_note", "init_note"),
    "refine_query": official_prompt(_CODE, "gen_new_query", "refine_query"),
    "accumulate": official_prompt(_CODE, "refine_note", "accumulate"),
}

# `score: init_note:` (paper Table 17). Raw string: every \n below is backslash + n, as sent.
JUDGE_INIT_NOTE = Prompt(
    "judge_init_note",
    r'Task: You will receive a list of notes generated based on a given document content and question. \nYour task is to evaluate and score these notes based on their quality. Quality refers to: relevance, coherence, completeness in answering the specified question, and accuracy of information. \n\nQuestion to be answered: {query}\nDocument content: {refs}\n\nGenerated notes: {notes}\nNote format: Each note contains "_id" and "content" fields. \n\nEvaluate the generated notes. The highest-scoring note must be factually correct based on the document. If no note is correct, or if there is minimal quality difference between notes, use the same _id for both best and worst. \nOutput in the following JSON format:\n```json {{"best_id": <_id of the highest-scoring note>, "worst_id": <_id of the lowest-scoring note>}}```\n\n Do not include any explanations or additional text.',
    f"{_FROM_CONFIG}, score.init_note (paper Table 17)",
    style="format",
)

# `score: gen_new_query:` (paper Table 18), likewise with literal backslash-n.
JUDGE_REFINE_QUERY = Prompt(
    "judge_refine_query",
    r'Task: You will receive a list of new questions generated based on some notes and an existing question list to supplement a given original question.\nYour task is to evaluate these new questions based on their quality. Quality refers to: relevance, specificity, keyword richness, and non-redundancy. The goal is to identify questions that can retrieve useful information to help answer the original question. \n Notes: {notes}\n\nOriginal question: {query}\n\nExisting question list: {query_log}\n\nNew question list: {new_querys}\nQuestion format: Each question contains "_id" and "content" fields. \n\nEvaluate the new question list. The highest-scoring new question must be able to help retrieve relevant information to answer the original question. If no new question can help get useful information, or if there is minimal quality difference between new questions, use the same _id for both best_id and worst_id. \nOutput in the following format:\n```json {{"best_id": <_id of the highest-scoring question>, "worst_id": <_id of the lowest-scoring question>}}```\n\n Do not include any explanations or additional text.',
    f"{_FROM_CONFIG}, score.gen_new_query (paper Table 18)",
    style="format",
)

# Knowledge accumulation is judged candidate by candidate with the inference-time verdict prompt.
JUDGE_ACCUMULATE = official_prompt(_CODE, "compare", "judge_accumulate")

JUDGES: dict[str, Prompt] = {
    "init_note": JUDGE_INIT_NOTE,
    "refine_query": JUDGE_REFINE_QUERY,
    "accumulate": JUDGE_ACCUMULATE,
}
