"""Scoring a stage's sampled replies and keeping the best and the worst as a preference pair, as
the official DeepNote code does (``src/utils.py``: ``LLM_score_rag``, ``LLM_score_init_note``,
``LLM_score_gen_new_query``, ``LLM_score_compare_note``; ``src/gen_dpo_data.py``).

Three ways, one per kind of stage:

* ``score_rag`` (D_Ans, vanilla RAG's answer) — against the gold answers, no judge: chosen are
  the replies equal to a gold (case-insensitive), else the short ones containing it (under twice
  its length); rejected are the replies containing no gold, else the long ones (over twice its
  length); one of each drawn at random. The official code has one gold string; a dataset's
  aliases are each tried (a reply equal to any alias is chosen; a reply is rejected only if it
  contains none, or, in the fallback, is over twice the longest).
* ``rank_by_judge`` (D_Init, D_QR) — one judge call names ``best_id`` and ``worst_id`` among
  all replies (the prompt asks for the same id twice when no reply is correct or they differ
  little: a tie, no pair). The reply is read as ``extract_best_worst`` reads it (JSON, cut to
  its braces when it says "json", else the ``"best_id": <n>`` numbers). A reply naming no valid
  id is a counted fallback; the official code then carries the *last* reply forward as the
  best (``init_notes[-1]``), and so do we. On a tie we carry the judge's best forward (the
  official code's exception path would take the last reply there too — a side effect, not a
  choice, so we keep the judge's answer).
* ``pick_by_verdicts`` (D_KA) — each reply is judged against the best initial note with the
  inference-time verdict prompt (``True``: knowledge grew); chosen is drawn from the True
  ones, rejected from the False ones. All True or all False: no pair. Verdicts are read as
  ``LLM_score_compare_note`` reads them (``noterag.core.parsing.official_status``): a reply
  that is not the JSON verdict falls back to ``"true" in reply`` and is counted.

Beyond the official code: a pair whose chosen and rejected texts are equal is dropped
(``identical``): DPO learns nothing from it.

Each returns a ``StageScore``: every candidate's score (1 chosen side / best / True, 0 rejected
side / worst / False, None unranked), the chosen and rejected indices or None, and the
outcome: ``pair``, ``tie``, ``unreadable``, ``all_true``, ``all_false``, ``no_chosen``,
``no_rejected``, ``no_gold``, ``identical``.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from noterag.core.parsing import official_status

# The order the official pipeline runs them per question, with the names the paper gives their
# data (Appendix D) and the official code's data_type / id prefix (select_dpo_data.py keys on it).
STAGES = ("rag", "init_note", "refine_query", "accumulate")
PAPER_NAMES = {"init_note": "D_Init", "refine_query": "D_QR", "accumulate": "D_KA", "rag": "D_Ans"}
DATA_TYPES = {
    "rag": "rag",
    "init_note": "init_note",
    "refine_query": "gen_new_query",
    "accumulate": "refine_note",
}
ID_PREFIXES = {
    "rag": "rag",
    "init_note": "init_note",
    "refine_query": "new_query",
    "accumulate": "refine_note",
}
PAIR = "pair"


@dataclass
class StageScore:
    """The outcome of scoring one stage's candidates."""

    outcome: str
    scores: list[float | None]
    chosen: int | None = None
    rejected: int | None = None
    # the replies the parsers could not read, by kind (the run's fallbacks)
    fallbacks: dict[str, int] = field(default_factory=dict)

    @property
    def is_pair(self) -> bool:
        return self.outcome == PAIR


def _finish(score: StageScore, replies: Sequence[str]) -> StageScore:
    if (
        score.is_pair
        and score.chosen is not None
        and score.rejected is not None
        and replies[score.chosen].strip() == replies[score.rejected].strip()
    ):
        score.outcome, score.chosen, score.rejected = "identical", None, None
    return score


# --------------------------------------------------------------------------- D_Ans: the golds


def score_rag(replies: Sequence[str], golds: Sequence[str], rng: random.Random) -> StageScore:
    """``LLM_score_rag`` over the gold aliases (see the module docstring)."""
    golds = [g for g in golds if g.strip()]
    if not golds:
        return StageScore("no_gold", [None] * len(replies))
    lowered = [g.lower() for g in golds]
    chosen = [i for i, r in enumerate(replies) if r.strip().lower() in lowered]
    rejected = [i for i, r in enumerate(replies) if not any(g in r.lower() for g in lowered)]
    if not chosen:
        chosen = [
            i
            for i, r in enumerate(replies)
            if any(g.strip().lower() in r.lower() and len(r) < 2 * len(g) for g in golds)
        ]
    if not rejected:
        longest = max(len(g) for g in golds)
        rejected = [i for i, r in enumerate(replies) if len(r.strip()) > 2 * longest]
    scores: list[float | None] = [
        1.0 if i in chosen else 0.0 if i in rejected else None for i in range(len(replies))
    ]
    if not chosen:
        return StageScore("no_chosen", scores)
    if not rejected:
        return StageScore("no_rejected", scores)
    # the official random.sample(chosen, 1)[0], then the same for rejected
    pick = StageScore(PAIR, scores, chosen=rng.choice(chosen), rejected=rng.choice(rejected))
    return _finish(pick, replies)


# --------------------------------------------------------------------------- D_Init, D_QR: one ranking


_BEST = re.compile(r'"best_id"\s*:\s*(\d+)')
_WORST = re.compile(r'"worst_id"\s*:\s*(\d+)')


def parse_best_worst(reply: str) -> tuple[int | None, int | None]:
    """The ``best_id`` and ``worst_id`` a judge reply names, read as the official
    ``extract_best_worst`` reads them (None where it finds none). Unlike it, a tie is returned
    as such (it maps ``best == worst`` to ``(None, None)``), and ids written as digit strings
    count."""
    try:
        text = reply
        if "json" in text:
            text = text[text.index("{") : text.rindex("}") + 1]
        result = json.loads(text)
        best, worst = _as_id(result["best_id"]), _as_id(result["worst_id"])
    except Exception:  # noqa: BLE001 - the official parser falls back on every failure
        best_match, worst_match = _BEST.search(reply), _WORST.search(reply)
        best = int(best_match.group(1)) if best_match else None
        worst = int(worst_match.group(1)) if worst_match else None
    return best, worst


def _as_id(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def rank_by_judge(replies: Sequence[str], judge_reply: str, kind: str) -> tuple[StageScore, int]:
    """The pair the judge's ranking names, and the index of the reply carried forward as the
    stage's best (the next stage's input). ``kind`` names the fallback (``judge_<stage>``)."""
    n = len(replies)
    best, worst = parse_best_worst(judge_reply)
    if best is None or worst is None or not (0 <= best < n and 0 <= worst < n):
        # official: init_notes[best] raises, and the except returns (init_notes[-1], "")
        return StageScore("unreadable", [None] * n, fallbacks={kind: 1}), n - 1
    scores: list[float | None] = [None] * n
    if best == worst:
        scores[best] = 1.0
        return StageScore("tie", scores), best
    scores[best], scores[worst] = 1.0, 0.0
    return _finish(StageScore(PAIR, scores, chosen=best, rejected=worst), replies), best


def candidates_list(replies: Sequence[str]) -> str:
    """What the official judge prompts receive for ``{notes}`` / ``{new_querys}``: the Python
    ``str()`` of ``[{"_id": i, "content": reply}, ...]`` (``str.format`` of a list)."""
    return str([{"_id": i, "content": reply} for i, reply in enumerate(replies)])


# --------------------------------------------------------------------------- D_KA: one verdict each


def read_verdict(reply: str) -> tuple[bool, bool]:
    """``LLM_score_compare_note``'s reading of a verdict reply: (knowledge grew, parsed)."""
    verdict = official_status(reply, cut_braces=True)
    return verdict.accepted, verdict.parsed


def pick_by_verdicts(
    replies: Sequence[str], verdict_replies: Sequence[str], rng: random.Random, kind: str
) -> StageScore:
    """A chosen reply drawn from those judged True, a rejected one from those judged False."""
    read = [read_verdict(v) for v in verdict_replies]
    unparsed = sum(1 for _, parsed in read if not parsed)
    fallbacks = {kind: unparsed} if unparsed else {}
    scores: list[float | None] = [1.0 if grew else 0.0 for grew, _ in read]
    chosen = [i for i, (grew, _) in enumerate(read) if grew]
    rejected = [i for i, (grew, _) in enumerate(read) if not grew]
    if not rejected:
        return StageScore("all_true", scores, fallbacks=fallbacks)
    if not chosen:
        return StageScore("all_false", scores, fallbacks=fallbacks)
    # official: random.choice(chosen_list), random.choice(rejected_list)
    pick = StageScore(
        PAIR, scores, chosen=rng.choice(chosen), rejected=rng.choice(rejected), fallbacks=fallbacks
    )
    return _finish(pick, replies)
