"""Fidelity profiles: every behaviour where the official code differs from the papers, in one place.

``paper`` (default) follows the papers with robust engineering; ``official`` reproduces the
official Adaptive-Note / DeepNote code (thunlp), so results compare with published numbers.
Nodes never test the profile name: they call these strategies.

| behaviour        | paper                                   | official                              |
|------------------|-----------------------------------------|---------------------------------------|
| new questions    | parsed list, one retrieval per question | raw reply + "\\n" + question, [:500]   |
| duplicates       | seen passages never re-enter a prompt;  | dropped only when the cap is near     |
|                  | no new passage = failed step, no call   |                                       |
| verdict          | {"status": ...} found anywhere, else    | json.loads, else "true" in reply      |
|                  | False (counted as unparsed)             |                                       |
| passage cap      | stop when distinct >= cap               | Adaptive-Note >=, DeepNote >          |
| updated note     | as generated                            | newlines deleted                      |
| query log        | one question per line                   | str(list of raw replies)              |
| passages         | [i] Title: ...\\nText: ...               | AN "Passage #i Title: ..."; DN plain  |
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial

from noterag.errors import ConfigError
from noterag.nodes.parsing import (
    Verdict,
    official_status,
    parse_new_question,
    parse_questions,
    parse_status,
)
from noterag.state import Passage


@dataclass(frozen=True)
class Profile:
    name: str
    format_passages: Callable[[Sequence[Passage]], str]
    format_query_log: Callable[[Sequence[str]], str]
    # (reply, question, query_log) -> (entries for the query log, queries to search)
    new_queries: Callable[[str, str, Sequence[str]], tuple[list[str], list[str]]]
    passage_key: Callable[[Passage], str]
    # (retrieved, keys seen so far, passage cap or None, top_k) -> passages the step keeps
    select_passages: Callable[[Sequence[Passage], set[str], int | None, int], list[Passage]]
    cap_reached: Callable[[int, int], bool]
    parse_verdict: Callable[[str], Verdict]
    clean_note: Callable[[str], str]
    # paper: a step with nothing new to read is a failed step that makes no model call
    skip_empty_steps: bool


# --- paper -------------------------------------------------------------------------------------


def numbered_passages(passages: Sequence[Passage]) -> str:
    return "\n\n".join(
        f"[{i}] Title: {p['title']}\nText: {p['text']}" for i, p in enumerate(passages, 1)
    )


# Both papers' query-refinement prompts ask for "two new questions".
PROMPTED_QUESTIONS = 2


def paper_new_queries(
    reply: str, question: str, query_log: Sequence[str]
) -> tuple[list[str], list[str]]:
    """The first two questions of the reply not asked before: a reply listing more (a verbose
    model, or instructions injected through a passage) cannot multiply a step's searches."""
    fresh = _unasked(parse_questions(reply), question, query_log)[:PROMPTED_QUESTIONS]
    return fresh, fresh


def amber_new_queries(
    reply: str, question: str, query_log: Sequence[str]
) -> tuple[list[str], list[str]]:
    """Amber asks for one question, on the line starting with "### New Question"."""
    fresh = _unasked([parse_new_question(reply)], question, query_log)
    return fresh, fresh


def _unasked(queries: Sequence[str], question: str, query_log: Sequence[str]) -> list[str]:
    asked = {q.casefold() for q in query_log} | {question.casefold()}
    return [q for q in queries if q and q.casefold() not in asked]


def paper_select(
    found: Sequence[Passage], seen: set[str], cap: int | None, top_k: int
) -> list[Passage]:
    # cap None: the method has no passage cap (Amber)
    room = len(found) if cap is None else max(cap - len(seen), 0)
    return [p for p in found if p["id"] not in seen][:room]


PAPER = Profile(
    name="paper",
    format_passages=numbered_passages,
    format_query_log="\n".join,
    new_queries=paper_new_queries,
    passage_key=lambda p: p["id"],
    select_passages=paper_select,
    cap_reached=lambda seen, cap: seen >= cap,
    parse_verdict=parse_status,
    clean_note=str.strip,
    skip_empty_steps=True,
)


# --- official ----------------------------------------------------------------------------------


def adaptive_note_passages(passages: Sequence[Passage]) -> str:
    return "".join(
        f"Passage #{i} Title: {p['title']}\nPassage #{i} Text: {p['text']} \n\n"
        for i, p in enumerate(passages, 1)
    )


def deepnote_passages(passages: Sequence[Passage]) -> str:
    return "".join(f"Title: {p['title']}\nText: {p['text']} \n\n" for p in passages)


def official_new_queries(
    reply: str, question: str, query_log: Sequence[str]
) -> tuple[list[str], list[str]]:
    return [reply], [(reply + "\n" + question)[:500]]


def official_select(
    found: Sequence[Passage], seen: set[str], cap: int, top_k: int
) -> list[Passage]:
    # The official loop deduplicates only when this step's top-k could overshoot the cap.
    room = cap - len(seen) if len(seen) + top_k > cap else 0
    if room <= 0:
        return list(found)
    return [p for p in found if official_key(p) not in seen][:room]


def official_key(passage: Passage) -> str:
    return passage["title"] + passage["text"]


def _official(method: str) -> Profile:
    deepnote = method == "deepnote"
    return Profile(
        name="official",
        format_passages=deepnote_passages if deepnote else adaptive_note_passages,
        format_query_log=lambda log: str(list(log)),
        new_queries=official_new_queries,
        passage_key=official_key,
        select_passages=official_select,
        cap_reached=(lambda seen, cap: seen > cap) if deepnote else (lambda seen, cap: seen >= cap),
        parse_verdict=partial(official_status, cut_braces=deepnote),
        clean_note=lambda note: note.replace("\n", ""),
        skip_empty_steps=False,
    )


_OFFICIAL = {method: _official(method) for method in ("adaptive-note", "deepnote")}
# The official baselines are runs of the Adaptive-Note code (--method base / base_wo_retri):
# its passage format.
_OFFICIAL["vanilla"] = _OFFICIAL["no-retrieval"] = _OFFICIAL["adaptive-note"]


# Amber's paper profile differs only in how its one new question is read from the reply.
_PAPER_FOR = {"amber": replace(PAPER, new_queries=amber_new_queries)}


def get_profile(name: str, method: str) -> Profile:
    """The strategies of profile ``name`` for ``method``."""
    if name == "paper":
        return _PAPER_FOR.get(method, PAPER)
    if name == "official":
        try:
            return _OFFICIAL[method]
        except KeyError:
            raise ConfigError(
                f"profile 'official' exists for {', '.join(_OFFICIAL)} only, not {method}"
            ) from None
    raise ConfigError(f"profile must be 'paper' or 'official', not {name!r}")
