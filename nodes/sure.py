"""SuRe's steps (Kim et al., ICLR 2024, Algorithm 1): answer candidates, candidate-conditioned
summaries, instance-wise validation and pair-wise ranking of the summaries, and the prediction.
Retrieval is the shared step; SuRe has no answer prompt (its answer is a candidate).

Model stages (each also a model role, ``<stage>_model=``): ``candidates`` (p_can), ``summary``
(p_sum, one per candidate, concurrently), ``validation`` (p_val, one per summary) and
``ranking`` (p_rank, one per ordered pair of summaries); validations and rankings run
concurrently with each other.

The scores (paper, Eqs. 4-6), for K candidates y_k with summaries s_k:

    v(s_k) = 1 if M(p_val(q, y_k, s_k)) = True, else 0
    r(s_k) = sum_{i != k} r_pair(s_k, s_i)
    r_pair(s_k, s_i) = 1 if the ranking prefers s_k, 0 if it prefers s_i, 0.5 else
    prediction = y_k*,  k* = argmax_k v(s_k) + r(s_k)

What the paper leaves open and we decided, following the official code
(bbuing9/ICLR24_SuRe, functions/verification.py and get_preds.py) where it decides:
- each pair is ranked in both orders "to mitigate order bias" (the official code), and
  r_pair(s_k, s_i) is the mean of the two calls' outcomes, so r_pair(s_k, s_i) +
  r_pair(s_i, s_k) = 1 and the K(K-1) calls are spent as in the official code (K = 2: two);
- a tie goes to the earliest candidate ("If Tie, then select first candidate as answer");
- fewer than two candidates: nothing to compare, the one candidate (if any) is the answer and
  no summary, validation or ranking call is made (the official code still sends two ranking
  calls comparing "N/A" with "N/A" and can then answer "N/A"; FlashRAG summarises and
  validates the lone candidate);
- a summary ends at the "[DONE]" its prompt asks for (the official code passes the whole reply,
  marker included, to the validation and ranking prompts).

Replies without the asked-for shape take a defined fallback, counted by kind in the state's
``fallbacks`` (noterag.core.parsing.fell_back):

| kind        | a reply without ...                        | fallback                                        |
|-------------|--------------------------------------------|-------------------------------------------------|
| candidates  | "(a) ..., (b) ..." markers with text        | its first line, split at commas when it has 2-4 |
|             |                                            | parts (the official ``handle_except``), else    |
|             |                                            | the whole line; a blank reply gives none        |
| validation  | a True / False verdict                     | v = 0, Eq. 4's "else" (not valid)               |
| ranking     | "Passage 1" / "Passage 2"                  | 0.5 to each summary, Eq. 5's "else"             |
| done_marker | the "[DONE]" end marker (summaries)        | the whole reply (parsing.until_done)      |
"""

from __future__ import annotations

import itertools
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import AIMessage

from noterag.base.errors import ConfigError
from noterag.core.parsing import Verdict, fell_back, until_done
from noterag.core.state import Passage
from noterag.core.step import Ask, Env, StepGen

# --- the official code's prompt pieces ----------------------------------------------------------


def sure_passages(passages: Sequence[Passage]) -> str:
    """The passages as the official prompts append them (get_query_candidate, gen_summary_mcq):
    ``"\\n\\nPassage #i Title: ...\\nPassage #i Text: ..."`` each. (The official code cycles
    through the passages it has when it has fewer than --n_retrieval; we list those retrieved.)"""
    return "".join(
        f"\n\nPassage #{i} Title: {p['title']}\nPassage #{i} Text: {p['text']}"
        for i, p in enumerate(passages, 1)
    )


_COUNTS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
# the answer placeholders of p_can's "(a) xx, (b) yy"; ours from (c) on
_PLACEHOLDERS = ("xx", "yy", "zz", "ww", "vv", "uu", "tt", "ss", "rr", "qq")


def letter(k: int) -> str:
    """The k-th candidate's mark, as the prompts write it: 0 -> "a"."""
    return chr(ord("a") + k)


def candidate_request(k: int) -> dict[str, str]:
    """p_can's ``{count}`` and ``{form}`` for K candidates: "two" and "(a) xx, (b) yy" for the
    official K = 2; our extension of the same words for another K."""
    count = _COUNTS[k] if k < len(_COUNTS) else str(k)
    form = ", ".join(
        f"({letter(i)}) {_PLACEHOLDERS[i] if i < len(_PLACEHOLDERS) else letter(i) * 2}"
        for i in range(k)
    )
    return {"count": count, "form": form}


def choices_text(candidates: Sequence[str]) -> str:
    """The official ``convert_choices_to_texts``: "(a) X (b) Y"."""
    return " ".join(f"({letter(i)}) {c}" for i, c in enumerate(candidates))


# --- parsers ------------------------------------------------------------------------------------

_LABEL = re.compile(r"^\s*+(?:answers?|candidates?)\s*+[:：]\s*+", re.IGNORECASE)
# the official normalize_answer strips spaces, commas and periods at both ends; we also strip
# the markdown emphasis and quotes small models add
_TRIM = " \t,.;:*\"'“”‘’`"


def _clean(text: str) -> str:
    return text.strip().split("\n", 1)[0].strip(_TRIM)


def _distinct(items: Sequence[str], k: int) -> list[str]:
    seen: set[str] = set()
    out = []
    for item in items:
        if item and item.casefold() not in seen:
            seen.add(item.casefold())
            out.append(item)
    return out[:k]


def _marked(reply: str) -> list[str]:
    """The texts after "(a)", "(b)", ... in order, each up to the next mark (or its line's end)."""
    found, start = [], 0
    for i in range(26):
        mark = re.compile(rf"\(\s*{letter(i)}\s*\)", re.IGNORECASE)
        match = mark.search(reply, start)
        if match is None:
            break
        found.append(match)
        start = match.end()
    if not found:
        return []
    ends = [m.start() for m in found[1:]] + [len(reply)]
    return [_clean(reply[m.end() : end]) for m, end in zip(found, ends, strict=True)]


def parse_candidates(reply: str, k: int) -> tuple[list[str], bool]:
    """The first ``k`` distinct answer candidates of a p_can reply ("(a) xx, (b) yy"), and
    whether the reply had that shape. Each candidate is the text after its mark up to the next
    mark, cut at a line break and trimmed of spaces, commas, periods (the official
    normalize_answer), emphasis and quotes; repeats (ignoring case) are dropped, as the
    official get_choices_sampling drops exact ones. Without marks (counted "candidates"): the
    first line, split at commas when it has 2 to 4 parts (the official handle_except), else
    the whole line; a blank reply gives no candidate."""
    marked = [c for c in _marked(reply) if c]
    if marked:
        return _distinct(marked, k), True
    fell_back("candidates")
    text = re.sub(r"\(\s*[a-z]\s*\)", " ", reply, flags=re.IGNORECASE)
    lines = [line for line in text.splitlines() if line.strip()]
    first = _LABEL.sub("", lines[0]) if lines else ""
    parts = first.split(",")
    items = parts if 2 <= len(parts) <= 4 else [first]
    return _distinct([_clean(item) for item in items], k), False


_WORD = re.compile(r"[a-z]+")


def parse_validity(reply: str) -> Verdict:
    """p_val's verdict from "Choices: [True, False]": the first word if it is true or false,
    else the one of the two the reply contains. Neither, or both with neither first: unparsed,
    not valid (v = 0, as Eq. 4 gives for any reply that is not True), counted "validation"."""
    words = _WORD.findall(reply.lower())
    if words and words[0] in ("true", "false"):
        return Verdict(accepted=words[0] == "true", parsed=True)
    found = {w for w in words if w in ("true", "false")}
    if len(found) == 1:
        return Verdict(accepted=found == {"true"}, parsed=True)
    fell_back("validation")
    return Verdict(accepted=False, parsed=False)


_PASSAGE = re.compile(r"\b(?:passage|summary)\s*+#?\s*+([12])\b", re.IGNORECASE)
_LEAD = re.compile(r"^[\s\[\]*\"'“”(]*+(?:answer\s*+[:：][\s\[\]*\"'“”(]*+)?", re.IGNORECASE)


def parse_preference(reply: str) -> int | None:
    """Which passage a p_rank reply prefers, 1 or 2: the one it starts with ("Passage 2.",
    "Answer: [Passage 1]"), else the only one it names, else a bare "1" / "2". Anything else
    (both named, neither named) is None, Eq. 5's "else" (0.5 each), counted "ranking"."""
    text = _LEAD.sub("", reply)
    if match := _PASSAGE.match(text):
        return int(match.group(1))
    named = {int(n) for n in _PASSAGE.findall(reply)}
    if len(named) == 1:
        return named.pop()
    if bare := re.fullmatch(r"\W*([12])\W*", reply):
        return int(bare.group(1))
    fell_back("ranking")
    return None


# --- the scores ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Selection:
    """The scores of K summaries and the candidate they select."""

    validity: list[bool]  # v(s_k)
    ranking: list[float]  # r(s_k, S_K)
    scores: list[float]  # v(s_k) + r(s_k, S_K)
    chosen: int  # k*, the earliest of the best on a tie
    tied: list[int]  # every k with the best score (one: no tie)


def first_wins(preference: int | None) -> float:
    """The outcome of one ranking call for the summary shown as Passage 1."""
    return 1.0 if preference == 1 else 0.0 if preference == 2 else 0.5


def r_pair(preferences: Mapping[tuple[int, int], int | None], k: int, i: int) -> float:
    """Eq. 5 for s_k against s_i, averaged over both orders: s_k's outcome as Passage 1 (call
    (k, i)) and as Passage 2 (call (i, k))."""
    return (first_wins(preferences[(k, i)]) + 1.0 - first_wins(preferences[(i, k)])) / 2


def select(
    validity: Sequence[bool], preferences: Mapping[tuple[int, int], int | None]
) -> Selection:
    """Eq. 6: k* = argmax_k v(s_k) + r(s_k, S_K). ``preferences[(k, i)]`` is the reply to the
    ranking call showing s_k as Passage 1 and s_i as Passage 2 (1, 2, or None when unreadable);
    r_pair(s_k, s_i) is the mean of s_k's outcome in that call and in the call (i, k). The
    sums are of halves and quarters, exact in floating point, so ties are exact."""
    n = len(validity)
    ranking = [sum(r_pair(preferences, k, i) for i in range(n) if i != k) for k in range(n)]
    scores = [float(v) + r for v, r in zip(validity, ranking, strict=True)]
    best = max(scores)
    tied = [k for k, score in enumerate(scores) if score == best]
    return Selection(list(validity), ranking, scores, tied[0], tied)


# --- steps --------------------------------------------------------------------------------------


def candidates(state: dict[str, Any], env: Env) -> StepGen:
    """Answer candidate generation: K candidates from the question and the retrieved passages
    (p_can), parsed from "(a) ..., (b) ..."."""
    task = state.get("task") or env.ctx.task
    if task != "multihop":
        raise ConfigError(
            f"sure answers short-answer questions only (task multihop), not {task!r}: its "
            "prompts ask for candidates of at most 3 words"
        )
    passages, k = state["passages"], env.ctx.n_candidates
    prompt = env.prompts.candidates.format(
        n_articles=str(len(passages)),
        passages=env.profile.format_passages(passages),
        question=state["question"],
        **candidate_request(k),
    )
    found, parsed = parse_candidates((yield Ask("candidates", prompt)), k)
    env.emit({"type": "candidates", "step": 0, "candidates": found, "parsed": parsed})
    return {
        "candidates": found,
        "trace": [
            {
                "step": 0,
                "queries": [state["question"]],
                "passage_ids": [p["id"] for p in passages],
                "candidates": found,
                "candidates_parsed": parsed,
                "llm_calls": 1,
            }
        ],
    }


def summarize(state: dict[str, Any], env: Env) -> StepGen:
    """Conditional summarization: for each candidate, a summary of the passages that supports
    it (p_sum), all K concurrently; each summary ends at its "[DONE]"."""
    question, found = state["question"], state["candidates"]
    passages = env.profile.format_passages(state["passages"])
    replies = yield [
        Ask(
            "summary",
            env.prompts.summary.format(
                passages=passages,
                question=question,
                choices=choices_text(found),
                letter=letter(k),
                candidate=candidate,
            ),
        )
        for k, candidate in enumerate(found)
    ]
    summaries = [until_done(reply) for reply in replies]
    env.emit(
        {"type": "candidate_summaries", "step": 0, "candidates": found, "summaries": summaries}
    )
    return {"summaries": summaries}


def verify(state: dict[str, Any], env: Env) -> StepGen:
    """Instance-wise validation of each summary (p_val) and pair-wise ranking of every ordered
    pair of summaries (p_rank), all concurrently; then the scores and the selected candidate
    (Eq. 6). Writes one trace entry per candidate (step k + 1), with its calls: its summary,
    its validation and the rankings that show its summary as Passage 1."""
    question, found, summaries = state["question"], state["candidates"], state["summaries"]
    n = len(found)
    pairs = list(itertools.permutations(range(n), 2))
    replies = yield [
        *(
            Ask(
                "validation",
                env.prompts.validation.format(question=question, candidate=c, summary=s),
            )
            for c, s in zip(found, summaries, strict=True)
        ),
        *(
            Ask(
                "ranking",
                env.prompts.ranking.format(
                    question=question, summary1=summaries[k], summary2=summaries[i]
                ),
            )
            for k, i in pairs
        ),
    ]
    verdicts = [parse_validity(reply) for reply in replies[:n]]
    preferences = {
        pair: parse_preference(reply) for pair, reply in zip(pairs, replies[n:], strict=True)
    }
    chosen = select([v.accepted for v in verdicts], preferences)
    env.emit(
        {
            "type": "selection",
            "step": 0,
            "candidates": found,
            "validity": chosen.validity,
            "ranking": chosen.ranking,
            "scores": chosen.scores,
            "chosen": chosen.chosen,
            "tied": chosen.tied,
        }
    )
    return {
        "validity": chosen.validity,
        "ranking": chosen.ranking,
        "scores": chosen.scores,
        "chosen": chosen.chosen,
        "trace": [
            {
                "step": k + 1,
                "candidate": f"({letter(k)}) {candidate}",
                "summary": summaries[k],
                "valid": verdicts[k].accepted,
                "validation_parsed": verdicts[k].parsed,
                # the candidates whose summary this one's beat (r_pair > 0.5)
                "preferred_over": [
                    f"({letter(i)})" for i in range(n) if i != k and r_pair(preferences, k, i) > 0.5
                ],
                "ranking": chosen.ranking[k],
                "score": chosen.scores[k],
                "chosen": k == chosen.chosen,
                "llm_calls": 2 + (n - 1),
            }
            for k, candidate in enumerate(found)
        ],
    }


def predict(state: dict[str, Any], env: Env) -> StepGen:
    """The prediction: the selected candidate (the only one when there was one; "" when the
    candidate reply named none). No model call: the answer reaches ``messages`` (and the
    messages stream, once) as an AI message written by this step."""
    found = state.get("candidates") or []
    text = found[state.get("chosen") or 0] if found else ""
    env.emit({"type": "answer", "answer": text})
    return {
        "answer": text,
        "question": state["question"],
        "messages": [AIMessage(text, id=f"sure-{uuid.uuid4()}")],
    }
    yield  # a step is a generator; this one makes no call
