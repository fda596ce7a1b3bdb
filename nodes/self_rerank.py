"""Self-Rerank's step (the Adaptive-Note authors' Self-RAG simplification after ActiveRAG,
graphs/self_rerank.py): two tags per passage, useful / useless and relevant / irrelevant
(Self-RAG's IsUse and IsRel critiques, asked of the model in words), each with a reason.

What the papers leave open, and what we decided:

- One call over all the passages (the file puts every passage in one prompt and asks for one
  numbered line per passage).
- The generator reads the labelled reply as its note, not the passages, as for the other
  single-step baselines (graphs/single_step.py gives the evidence: Self-Rerank's ASQA score is
  no retrieval's). The labels do not filter or reorder anything; they are read only to show
  each passage's verdict (the ``labels`` output, the trace, the progress event).
- Reading the labels: each item of the reply ("1. passage:..., label:..., reason:...", also
  "Passage 1:", "[1]") is the passage of that number in the order the prompt listed them; its
  tags are the bracketed ``<useful>`` / ``<useless>`` and ``<relevant>`` / ``<irrelevant>``,
  else the first of those words after "label" ("label: useful, irrelevant"), "not useful" /
  "not relevant" counting as the negative tag. Those words elsewhere in an item are not read:
  in prose ("relevant because ... does not provide any useful information", a small model's
  reply) they are no verdict.

Fallbacks (counted in the run's ``fallbacks``; the answer is unaffected):

| kind         | a passage without ...                        | fallback                          |
|--------------|----------------------------------------------|-----------------------------------|
| rerank_label | a readable useful/useless and relevant/      | the tag that could not be read is |
|              | irrelevant tag in the reply's item for it    | None ("unlabelled" in the trace)  |
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from typing_extensions import TypedDict  # the server's schemas need it (noterag.core.state)

from noterag.core.parsing import fell_back
from noterag.core.state import Passage
from noterag.core.step import Env, StepGen
from noterag.nodes.single_step import read_passages, trace_entry


class PassageLabel(TypedDict):
    """One passage's two tags (None: the reply gave none that could be read)."""

    id: str
    title: str
    useful: bool | None
    relevant: bool | None


# An item of the reply at the start of a line: "1. ...", "1) ...", "Passage 1: ...",
# "Passage #1 ...", "[1] ...", under list or emphasis marks ("- **1.** ...").
_ITEM = re.compile(
    r"^[ \t>*#-]*+(?:passage[ \t]*+#?[ \t]*+(\d++)|\[(\d++)\]|(\d++)[ \t]*+[.):])",
    re.IGNORECASE | re.MULTILINE,
)
_LABEL = re.compile(r"\blabels?\b", re.IGNORECASE)
_USEFUL_TAG = re.compile(r"<[ \t]*+(useful|useless)[ \t]*+>", re.IGNORECASE)
_RELEVANT_TAG = re.compile(r"<[ \t]*+(relevant|irrelevant)[ \t]*+>", re.IGNORECASE)
_USEFUL_WORD = re.compile(r"\b(not[ \t]++useful|useless|useful)\b", re.IGNORECASE)
_RELEVANT_WORD = re.compile(r"\b(not[ \t]++relevant|irrelevant|relevant)\b", re.IGNORECASE)


def _items(reply: str) -> dict[int, str]:
    """The reply's items by number (the first item of a number wins)."""
    starts = list(_ITEM.finditer(reply))
    items: dict[int, str] = {}
    for i, match in enumerate(starts):
        number = int(next(g for g in match.groups() if g is not None))
        end = starts[i + 1].start() if i + 1 < len(starts) else len(reply)
        items.setdefault(number, reply[match.end() : end])
    return items


def _tag(item: str, tag: re.Pattern[str], word: re.Pattern[str], positive: str) -> bool | None:
    match = tag.search(item)
    if match is None and (label := _LABEL.search(item)) is not None:
        match = word.search(item, label.end())
    if match is None:
        return None
    return match.group(1).lower() == positive


def parse_labels(reply: str, passages: Sequence[Passage]) -> list[PassageLabel]:
    """Each passage's tags as the reply gives them (see the module docstring); a passage whose
    item is missing or lacks a tag counts one ``rerank_label`` fallback."""
    items = _items(reply)
    labels: list[PassageLabel] = []
    for number, passage in enumerate(passages, 1):
        item = items.get(number, "")
        useful = _tag(item, _USEFUL_TAG, _USEFUL_WORD, "useful")
        relevant = _tag(item, _RELEVANT_TAG, _RELEVANT_WORD, "relevant")
        if useful is None or relevant is None:
            fell_back("rerank_label")
        labels.append(
            PassageLabel(id=passage["id"], title=passage["title"], useful=useful, relevant=relevant)
        )
    return labels


def rerank(state: dict[str, Any], env: Env) -> StepGen:
    """Label each of the top-k passages useful or useless and relevant or irrelevant, with a
    reason (the ``rerank`` prompt). The labelled reply becomes the generator's note."""
    reply = yield from read_passages(state, env, "rerank", env.prompts.rerank)
    labels = parse_labels(reply, state["passages"])
    env.emit({"type": "labels", "step": 0, "labels": labels})
    entry = trace_entry(
        state,
        useful_passage_ids=[label["id"] for label in labels if label["useful"]],
        relevant_passage_ids=[label["id"] for label in labels if label["relevant"]],
        unlabelled_passage_ids=[
            label["id"] for label in labels if None in (label["useful"], label["relevant"])
        ],
        labelled_passages=reply,
    )
    return {"best_note": reply, "labels": labels, "trace": [entry]}
