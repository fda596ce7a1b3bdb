"""RAT's steps (Wang et al., 2024), as CraftJarvis/RAT's creative.ipynb (``rat(question)``) runs
them, over noterag's retriever instead of Google search and web pages.

The notebook::

    draft = get_draft(question)                       # zero-shot CoT, paragraphs split by \\n\\n
    answer = ""
    for p in draft.split("\\n\\n"):
        answer = answer + "\\n\\n" + p                  # the revised steps so far + this step
        query = get_query(question, answer)           # skip the step if no query
        content = get_content(query)                  # the top-1 Google hit's page, in chunks
        for c in content[:3]:                         # of <= 1500 tokens, newlines as spaces
            answer = get_revise_answer(question, answer, c)   # keep answer if no reply
    return draft, answer

What noterag decides where the notebook depends on the web:

- ``draft``: the draft is split at blank lines ("\\n\\n"), as the notebook does; blank pieces
  are dropped (the demo app drops pieces of 5 characters or less). A draft with more than
  ``max_steps`` paragraphs keeps its first ``max_steps - 1`` as steps and joins the rest into the
  last step (the demo app likewise asks its splitter for fewer than 4 paragraphs), so every part
  of the draft is revised once and no step is left out.
- ``query`` -> ``retrieve``: the query reply, as written (stripped), is one search for the
  top-k passages (context ``top_k``, 5 as in DeepNote, which compares against RAT). An empty
  reply skips the step's search and revision, as the notebook skips a step whose query failed.
- ``revise``: one revision per step, with all k passages as ``content`` (formatted as the
  profile formats passages). The notebook revises once per chunk of the one page it fetched
  (up to 3 chunks of 1,500 tokens); k passages of ~100 words fit one such chunk, and a page
  that short gets one revision there too. A step whose search found nothing keeps its
  unrevised text (the notebook's ``continue``).
- ``answer`` (ours): RAT returns the revised draft; the papers score a short answer, so one
  last call reads it with the task's answer prompt (noterag.prompts.rat). Its tokens stream.

Sampling is the run's (noterag's models: temperature 0.1), not the notebook's 1.0; the
notebook's ChatGPT system message is not sent (noterag.prompts.rat). FlashRAG
(RUC-NLPIR/FlashRAG) has no RAT pipeline to compare with.

Parse fallbacks (counted in ``fallbacks`` by kind):

| kind     | a reply without ...            | fallback                                                |
|----------|--------------------------------|---------------------------------------------------------|
| draft    | any paragraph                  | no step to revise: the answer reads the (empty) draft   |
| query    | any query text                 | the step is not searched or revised (the notebook's skip) |
| revision | any revised text               | the draft so far stays as it was                        |
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage

from noterag.core.parsing import fell_back
from noterag.core.step import Ask, Env, StepGen, reply_text


def split_draft(draft: str, max_steps: int) -> list[str]:
    """The draft's steps: its paragraphs (split at "\\n\\n", blank ones dropped), at most
    ``max_steps`` of them, the last holding the rest of the draft."""
    paragraphs = [p for p in draft.split("\n\n") if p.strip()]
    if len(paragraphs) > max_steps:
        paragraphs = paragraphs[: max_steps - 1] + ["\n\n".join(paragraphs[max_steps - 1 :])]
    return paragraphs


def draft(state: dict[str, Any], env: Env) -> StepGen:
    """The zero-shot chain-of-thought draft, split into the steps to revise."""
    text = yield Ask("draft", env.prompts.draft.format(question=state["question"]))
    thoughts = split_draft(text, env.ctx.max_steps)
    if not thoughts:
        fell_back("draft")
    env.emit({"type": "draft", "step": 0, "thoughts": len(thoughts)})
    return {
        "draft": text,
        "thoughts": thoughts,
        "revised": "",
        "steps": 0,
        "trace": [{"step": 0, "draft": text, "thoughts": thoughts, "llm_calls": 1}],
    }


def query(state: dict[str, Any], env: Env) -> StepGen:
    """Step i's query, from the question and the draft so far: the revised steps before i and
    step i as drafted (the notebook's ``answer = answer + "\\n\\n" + p``)."""
    i = state.get("steps", 0) + 1
    current = (state.get("revised") or "") + "\n\n" + state["thoughts"][i - 1]
    reply = yield Ask("query", env.prompts.query.format(question=state["question"], answer=current))
    text = reply.strip()
    if not text:
        fell_back("query")
    env.emit({"type": "query", "step": i, "query": text})
    return {"steps": i, "current": current, "query": text, "queries": [text] if text else []}


def revise(state: dict[str, Any], env: Env) -> StepGen:
    """Step i revised with the retrieved passages: the reply is the revised draft so far, which
    the next step's query reads."""
    i, current = state["steps"], state["current"]
    passages = state.get("passages") or []
    revised, calls, was_revised = current, 1, False
    if passages:
        reply = yield Ask(
            "revise",
            env.prompts.revise.format(
                content=env.profile.format_passages(passages),
                question=state["question"],
                answer=current,
            ),
        )
        calls += 1
        if reply.strip():
            revised, was_revised = reply, True
        else:
            fell_back("revision")
    ids = [p["id"] for p in passages]
    env.emit(
        {
            "type": "revision",
            "step": i,
            "revised": was_revised,
            "passages": [{"id": p["id"], "title": p["title"]} for p in passages],
        }
    )
    return {
        "revised": revised,
        "trace": [
            {
                "step": i,
                "thought": state["thoughts"][i - 1],
                "query": state.get("query") or "",
                "passage_ids": ids,
                "revised": was_revised,
                "draft": revised,
                "llm_calls": calls,
            }
        ],
    }


def answer(state: dict[str, Any], env: Env) -> StepGen:
    """The answer from the revised draft (the draft itself when no step was revised), with the
    task's answer prompt; the one call whose tokens stream, appended to ``messages``."""
    task = state.get("task") or env.ctx.task
    text = (state.get("revised") or state.get("draft") or "").strip()
    prompt = env.prompts.answer_for(task).format(question=state["question"], draft=text)
    reply = yield Ask("answer", prompt, stream=True, verbatim=True)
    result = reply_text(reply).strip()
    env.emit({"type": "answer", "answer": result})
    return {
        "answer": result,
        "question": state["question"],
        "messages": [AIMessage(result, id=reply.id)],
    }
