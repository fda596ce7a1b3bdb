"""The official note loop, transcribed line for line from thunlp/DeepNote and thunlp/Adaptive-Note
``src/main.py`` (``retrieve_note``, ``get_context``, ``compare_note``, ``call_llm``), to compare
noterag's ``profile="official"`` prompt stream with: it renders the vendored prompt files with
``str.format`` itself, reading them from disk without noterag's loader. Used by
tests/test_fidelity.py and bench/fidelity.py."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

OFFICIAL = Path(__file__).resolve().parents[1] / "prompts" / "official"


def official_file(repo: str, name: str) -> str:
    with open(OFFICIAL / repo / name, encoding="utf-8", newline="") as f:
        return f.read()


def official_stream(
    code: str,
    question: str,
    search: Any,
    reply: Callable[[str, str], str],
    top_k: int,
    max_step: int,
    max_fail: int,
    max_top_k: int = 15,
) -> list[tuple[str, str]]:
    """The (stage, prompt) pairs thunlp/<code>'s retrieve_node sends for ``question`` over the
    LangChain retriever ``search``, the model answering ``reply(stage, prompt)``."""
    repo = "thunlp-DeepNote" if code == "deepnote" else "thunlp-Adaptive-Note"
    sent: list[tuple[str, str]] = []

    def retrieve(query: str, topk: int) -> list[dict[str, str]]:
        return [
            {"title": d.metadata["title"], "paragraph_text": d.page_content}
            for d in search.invoke(query, k=topk)
        ]

    def call(stage: str, file: str, variables: dict[str, str]) -> str:
        prompt = official_file(repo, file).format(**variables)
        sent.append((stage, prompt))
        return reply(stage, prompt)

    def get_context(data: list[dict[str, str]]) -> str:
        text = ""
        for i in range(len(data)):
            if code == "deepnote":
                text += f"Title: {data[i]['title']}\nText: {data[i]['paragraph_text']} \n\n"
            else:
                text += f"Passage #{i + 1} Title: {data[i]['title']}\nPassage #{i + 1} Text: {data[i]['paragraph_text']} \n\n"
        return text

    query = question
    ref_log: list[dict[str, Any]] = []
    query_list: list[str] = []
    refs = retrieve(query, top_k)
    init_file = "init_note" if code == "deepnote" else "first_gen_answer"
    note = best_note = call("init_note", init_file, {"query": query, "refs": get_context(refs)})
    ref_log.append({"refs": refs})
    step, notes_status = 0, []
    while step < max_step:
        all_refs = {d["title"] + d["paragraph_text"] for r in ref_log for d in r["refs"]}
        if (len(all_refs) > max_top_k) if code == "deepnote" else (len(all_refs) >= max_top_k):
            break
        max_ref = max_top_k - len(all_refs) if (len(all_refs) + top_k) > max_top_k else 0
        new_query = call(
            "refine_query",
            "gen_new_query",
            {"query": query, "note": best_note, "query_log": str(query_list)},
        )
        query_list.append(new_query)
        refs = retrieve((new_query + "\n" + query)[:500], top_k)
        if max_ref > 0:
            refs = [d for d in refs if d["title"] + d["paragraph_text"] not in all_refs][:max_ref]
        note = call(
            "accumulate",
            "refine_note",
            {"note": best_note, "query": query, "refs": get_context(refs)},
        ).replace("\n", "")
        response = call(
            "review", "compare", {"query": query, "best_note": best_note, "new_note": note}
        )
        try:
            if code == "deepnote" and "json" in response:
                response = response[response.index("{") : response.rindex("}") + 1]
            status = json.loads(response)["status"].lower() == "true"
        except Exception:  # noqa: BLE001 -- the official code's bare `except:`
            status = "true" in response.lower()
        ref_log.append({"refs": refs})
        if status:
            best_note = note
        notes_status.append(status)
        if notes_status.count(False) >= max_fail:
            break
        step += 1
    call("answer", "gen_answer", {"query": query, "note": best_note})
    return sent
