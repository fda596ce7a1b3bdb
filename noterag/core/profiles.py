"""Fidelity profiles: every behaviour where the official code differs from the papers, in one place.

``paper`` (default) follows the papers with robust engineering; ``official`` reproduces the
official Adaptive-Note / DeepNote code (thunlp), so results compare with published numbers;
``original`` runs a baseline as its own paper and code did (its settings and prompts: the
method's context ``ORIGINAL`` and prompt set "original"; docs/deviations.md); ``flashrag`` runs
a baseline as FlashRAG's benchmark ran it (ReSP Table 2 reprints it): the paper strategies with
FlashRAG's passage format and decoding, and the method's prompt set "flashrag".
Nodes never test the profile name: they call these strategies.

| behaviour        | paper                                   | official                              |
|------------------|-----------------------------------------|---------------------------------------|
| new questions    | parsed list, each searched (top-k),     | raw reply + "\\n" + question, [:500], |
|                  | rankings fused round-robin, the first k | one retrieval of top-k                |
|                  | unseen passages read (k per step)       |                                       |
| duplicates       | seen passages never re-enter a prompt;  | dropped only when the cap is near     |
|                  | no new passage = failed step, no call   |                                       |
| verdict          | {"status": ...} found anywhere, else    | json.loads, else "true" in reply      |
|                  | False (counted as unparsed)             |                                       |
| passage cap      | stop when distinct >= cap (AN's T_RP);  | Adaptive-Note >=, DeepNote > (15 when |
|                  | DeepNote: none unless set               | max_passages is None)                 |
| max_failures     | checked after init too (0: no step)     | checked after a step only (0: 1 step) |
| updated note     | as generated                            | newlines deleted                      |
| query log        | one question per line                   | str(list of raw replies)              |
| passages         | [i] Title: ...\\nText: ...               | AN "Passage #i Title: ..."; DN plain; |
|                  |                                         | dense runs, ASQA, StrategyQA (DN),    |
|                  |                                         | CRUD (AN): "\\n".join(title\\ntext)    |
| sampling         | the model's own unless set              | temperature 0.1, top_p 0.9,           |
|                  |                                         | max_tokens 1280 unless set            |
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache, partial
from typing import Any

from noterag.base.errors import ConfigError
from noterag.core.parsing import (
    Verdict,
    official_status,
    parse_new_question,
    parse_questions,
    parse_status,
)
from noterag.core.state import Passage


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
    # (distinct passages so far, the cap) -> stop?; the cap None: no cap
    cap_reached: Callable[[int, int | None], bool]
    parse_verdict: Callable[[str], Verdict]
    clean_note: Callable[[str], str]
    # paper: a step with nothing new to read is a failed step that makes no model call
    skip_empty_steps: bool
    # official: the failure count is tested after a step only, so max_failures=0 still runs one
    failures_checked_at_init: bool = True
    # per-call sampling arguments the profile sets unless the run sets them
    sampling: Mapping[str, Any] = field(default_factory=dict)
    # the passage cap when the run sets none (max_passages None); None: no cap
    default_cap: int | None = None

    def cap(self, max_passages: int | None) -> int | None:
        """The passage cap in force: the run's, else the profile's default (None: no cap)."""
        return self.default_cap if max_passages is None else max_passages


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
    """The first k passages not seen before (the papers read k per step: Adaptive-Note App. B
    "new retrieved k passages according to the new set of queries", DeepNote §3.2 "top-k
    passages P_k,t"), and no more than the room left under the cap (None: no cap)."""
    room = top_k if cap is None else min(top_k, max(cap - len(seen), 0))
    return [p for p in found if p["id"] not in seen][:room]


def at_least(seen: int, cap: int | None) -> bool:
    return cap is not None and seen >= cap


def above(seen: int, cap: int | None) -> bool:
    return cap is not None and seen > cap


PAPER = Profile(
    name="paper",
    format_passages=numbered_passages,
    format_query_log="\n".join,
    new_queries=paper_new_queries,
    passage_key=lambda p: p["id"],
    select_passages=paper_select,
    cap_reached=at_least,
    parse_verdict=parse_status,
    clean_note=str.strip,
    skip_empty_steps=True,
)


# --- official ----------------------------------------------------------------------------------


def adaptive_note_passages(passages: Sequence[Passage]) -> str:
    """thunlp/Adaptive-Note src/main.py get_context (Elasticsearch runs)."""
    return "".join(
        f"Passage #{i} Title: {p['title']}\nPassage #{i} Text: {p['text']} \n\n"
        for i, p in enumerate(passages, 1)
    )


def deepnote_passages(passages: Sequence[Passage]) -> str:
    """thunlp/DeepNote src/main.py get_context (Elasticsearch runs)."""
    return "".join(f"Title: {p['title']}\nText: {p['text']} \n\n" for p in passages)


def dense_passages(passages: Sequence[Passage]) -> str:
    """Both official codes' get_context for their dense retrievers, whose passages are
    ``title + "\\n" + text`` strings: ``"\\n".join(data)``."""
    return "\n".join(f"{p['title']}\n{p['text']}" for p in passages)


def official_new_queries(
    reply: str, question: str, query_log: Sequence[str]
) -> tuple[list[str], list[str]]:
    return [reply], [(reply + "\n" + question)[:500]]


def official_select(
    found: Sequence[Passage], seen: set[str], cap: int | None, top_k: int
) -> list[Passage]:
    # The official loop deduplicates only when this step's top-k could overshoot the cap.
    if cap is None:
        return list(found)
    room = cap - len(seen) if len(seen) + top_k > cap else 0
    if room <= 0:
        return list(found)
    return [p for p in found if official_key(p) not in seen][:room]


def official_key(passage: Passage) -> str:
    return passage["title"] + passage["text"]


# thunlp/DeepNote src/main.py:129 SamplingParams(max_tokens=1280, temperature=0.1, top_p=0.9);
# thunlp/Adaptive-Note src/utils.py gpt_gen / llama_gen / qwen_gen: the same three values.
OFFICIAL_SAMPLING = {"temperature": 0.1, "top_p": 0.9, "max_tokens": 1280}

# The official codes' --max_top_k default (thunlp/DeepNote src/main.py, thunlp/Adaptive-Note
# src/main.py): DeepNote's cap when max_passages is None under profile="official".
OFFICIAL_CAP = 15

# Which official code's passage format a method's official runs use; the baselines follow the
# code named by their ``official_code`` setting (both codes have --method base / base_wo_retri).
_DEEPNOTE_CODE = "deepnote"


def official_passage_format(
    code: str, task: str, dense: bool
) -> Callable[[Sequence[Passage]], str]:
    """The official get_context: the joined ``title\\ntext`` strings for dense retrieval (DeepNote
    --retrieve_method emb, and every ASQA / StrategyQA run, which the code always sends to its
    dense index; Adaptive-Note's ASQA and CRUD runs), else the code's Elasticsearch format.
    Adaptive-Note's code has no dense multi-hop runs: a dense retriever gets the dense format."""
    dense_tasks = {"asqa", "strategyqa"} if code == _DEEPNOTE_CODE else {"asqa", "crud"}
    if dense or task in dense_tasks:
        return dense_passages
    return deepnote_passages if code == _DEEPNOTE_CODE else adaptive_note_passages


@cache
def _official(code: str, task: str, dense: bool) -> Profile:
    deepnote = code == _DEEPNOTE_CODE
    return Profile(
        name="official",
        format_passages=official_passage_format(code, task, dense),
        format_query_log=lambda log: str(list(log)),
        new_queries=official_new_queries,
        passage_key=official_key,
        select_passages=official_select,
        cap_reached=above if deepnote else at_least,
        parse_verdict=partial(official_status, cut_braces=deepnote),
        clean_note=lambda note: note.replace("\n", ""),
        skip_empty_steps=False,
        failures_checked_at_init=False,
        sampling=OFFICIAL_SAMPLING,
        default_cap=OFFICIAL_CAP,
    )


# --- flashrag ----------------------------------------------------------------------------------


def flashrag_passages(passages: Sequence[Passage]) -> str:
    """RUC-NLPIR/FlashRAG flashrag/prompt/base_prompt.py ``format_reference`` @ 0e4da8c (no
    reference_template): ``Doc {idx+1}(Title: {title}) {text}\n`` per passage, the title being
    the first line of the corpus's ``contents`` as it stands. FlashRAG's wiki18 corpus quotes
    every title there (``"Aaron"``); noterag's reader drops those quotes (retrievers/corpus.py),
    so they are put back: the dense runs' prompts read ``(Title: "Aaron")`` as FlashRAG's did."""
    return "".join(
        f'Doc {i}(Title: "{p["title"]}") {p["text"]}\n' for i, p in enumerate(passages, 1)
    )


# FlashRAG's benchmark decoding (RUC-NLPIR/FlashRAG @ 0e4da8c examples/methods/my_config.yaml:
# generation_params {do_sample: False, max_tokens: 32}). Its VLLMGenerator.generate
# (flashrag/generator/generator.py @ 0e4da8c) pops do_sample and sets no temperature, so vLLM's
# SamplingParams defaults applied: temperature 1.0, top_p 1.0 (the greedy fix, temperature 0
# when do_sample is False, came with 1985658 on 2024-10-25, after the table). docs/deviations.md.
FLASHRAG_SAMPLING = {"temperature": 1.0, "top_p": 1.0, "max_tokens": 32}

# profile="flashrag": a baseline as FlashRAG's benchmark ran it (ReSP Table 2 reprints those
# numbers): the paper strategies, FlashRAG's passage format and decoding; its prompts are the
# method's prompt set "flashrag" (noterag.prompts.flashrag).
FLASHRAG = replace(
    PAPER, name="flashrag", format_passages=flashrag_passages, sampling=FLASHRAG_SAMPLING
)


# Amber's paper profile differs only in how its one new question is read from the reply.
AMBER_PAPER = replace(PAPER, name="paper", new_queries=amber_new_queries)


def is_dense(retriever: Any) -> bool:
    """Whether ``retriever`` ranks by embeddings: noterag's dense index or a LangChain vector
    store (the official codes format dense passages differently). The dense module is looked up
    only if already imported: a retriever cannot be one of its classes otherwise."""
    from langchain_core.vectorstores import VectorStoreRetriever

    dense = sys.modules.get("noterag.retrievers.dense")
    return isinstance(retriever, VectorStoreRetriever) or (
        dense is not None and isinstance(retriever, dense.DenseRetriever)
    )


def original_profile(paper: Profile) -> Profile:
    """Profile ``original`` of a baseline: its paper profile's strategies under its own name
    (the prompt set it selects). What the original changes are settings (the context class's
    ``ORIGINAL``: top-k, decoding, reader) and prompts (``MethodSpec.prompts["original"]``)."""
    return replace(paper, name="original")


def get_profile(
    name: str,
    method: str,
    *,
    official_code: str | None = None,
    paper: Profile = PAPER,
    task: str = "multihop",
    dense: bool = False,
    original: Profile | None = None,
    flashrag: bool = False,
) -> Profile:
    """The strategies of profile ``name`` for ``method``: ``paper`` (the method's own paper
    profile, ``PAPER`` unless it declares another), ``official``, which reproduces the
    official code ``official_code`` ("adaptive-note" or "deepnote"; None: the method has none),
    or ``original`` (None: the method has none), a baseline as its own paper and code ran it,
    or ``flashrag`` (``flashrag``: the method has FlashRAG's prompts), as FlashRAG's benchmark ran it.
    Under ``official`` the passage format also depends on the run's task and whether the
    retriever is dense."""
    if name == "paper":
        return paper
    if name == "original":
        if original is None:
            raise ConfigError(
                f"{method} has no original profile: profile 'original' is for the baselines whose "
                "own paper and code ran otherwise than the note papers' setup (`noterag methods` "
                "lists each method's profiles)"
            )
        return original
    if name == "official":
        if official_code is None:
            raise ConfigError(
                f"{method} has no official code to reproduce: profile 'official' is for the "
                "methods whose authors published one (`noterag methods` lists each method's profiles)"
            )
        return _official(official_code, task, dense)
    if name == "flashrag":
        if not flashrag:
            raise ConfigError(
                f"{method} has no flashrag profile: profile 'flashrag' is for the baselines run "
                "with FlashRAG's prompts and decoding (`noterag methods` lists each method's profiles)"
            )
        return FLASHRAG
    raise ConfigError(
        f"profile must be 'paper', 'official', 'original' or 'flashrag', not {name!r}"
    )
