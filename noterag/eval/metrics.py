"""Answer metrics as the Adaptive-Note and DeepNote papers define them.

Entry point: ``score(prediction, golds, task)`` → a dict of percentages (0–100) for one
question; ``aggregate(rows)`` averages such dicts over a run.

* **multihop** (HotpotQA, 2WikiMQA, MuSiQue) → ``em``, ``f1``, ``acc``; ``golds`` is a list of
  aliases (the first canonical), each metric the maximum over the aliases.

  - ``em`` and ``f1``: SQuAD's ``normalize_answer`` (lower-case, drop ASCII punctuation, drop the
    articles a/an/the, collapse whitespace), then exact equality or token F1, as in the official
    Adaptive-Note code (``src/eval.py``: ``compute_exact``, ``F1_scorer``).
  - ``acc``: the gold is *contained* in the prediction (a substring test, not whole words).
    **Difference from the papers' code:** the official Adaptive-Note/DeepNote code tests
    ``gold.lower() in prediction.lower()`` on the raw strings and reports a 0–1 fraction; we
    compare SQuAD-normalised strings (so ``5,042`` matches ``5042`` and ``The Picture of Dorian
    Gray`` matches ``Picture of Dorian Gray``) and report a percentage like every other metric.
    Being a substring test, it inherits the papers' quirk that a gold ``no`` is contained in a
    prediction ``not known``.
  - We do not apply HotpotQA's own special case (F1 = 0 when one side is yes/no and the two
    differ); the papers do not either.

* **asqa** (ALCE's ASQA) → ``str_em``, ``str_hit``; ``golds`` is one alias list per QA pair
  (ALCE's ``qa_pairs[i].short_answers``). As in ALCE's ``compute_str_em`` (copied verbatim into
  Adaptive-Note's ``eval.py``): a QA pair is *answered* when any of its normalised short answers
  is a substring of the normalised prediction; ``str_em`` is the percentage of QA pairs answered
  and ``str_hit`` is 100 when every QA pair is answered, else 0.

* **strategyqa** → ``acc``; ``golds`` is ``["yes"]`` or ``["no"]``. The prediction is lower-cased
  and split into words at every non-word character (so ``"Yes."``, ``"yes—it is"`` and ``"No,
  because ..."`` all count); it is right when exactly one of the words ``yes``/``no`` occurs and
  it is the gold. A reply with both (``"yes and no"``) or neither (``"maybe"``, ``"not sure"``)
  is wrong. The papers' prompt asks for a bare yes/no but their scoring code is not published,
  so this is our definition; words, not substrings, so ``"no"`` is not found in ``"not"`` or
  ``"know"``.

One guard on top of the papers: a gold alias that normalises to the empty string (``"The"``)
would be "contained" in every prediction, so containment falls back to equality for it.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

TASKS = ("multihop", "asqa", "strategyqa")

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_WORDS = re.compile(r"\w+")


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lower-case, drop punctuation, drop articles, collapse whitespace."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, golds: str | Sequence[str]) -> float:
    """1.0 when the normalised prediction equals any normalised gold, else 0.0."""
    pred = normalize_answer(prediction)
    return max(float(pred == normalize_answer(g)) for g in _aliases(golds))


def f1(prediction: str, golds: str | Sequence[str]) -> float:
    """Token F1 (0–1) of the normalised prediction against the best normalised gold."""
    pred_tokens = normalize_answer(prediction).split()
    return max(_token_f1(pred_tokens, normalize_answer(g).split()) for g in _aliases(golds))


def acc(prediction: str, golds: str | Sequence[str]) -> float:
    """1.0 when any normalised gold is a substring of the normalised prediction, else 0.0."""
    pred = normalize_answer(prediction)
    return float(any(_contains(pred, normalize_answer(g)) for g in _aliases(golds)))


def str_em(prediction: str, qa_pairs: Sequence[Sequence[str]]) -> float:
    """ALCE STR-EM for one question: the fraction (0–1) of QA pairs answered in the prediction."""
    answered = _answered_pairs(prediction, qa_pairs)
    return sum(answered) / len(answered)


def str_hit(prediction: str, qa_pairs: Sequence[Sequence[str]]) -> float:
    """ALCE STR-HIT for one question: 1.0 when every QA pair is answered, else 0.0."""
    return float(all(_answered_pairs(prediction, qa_pairs)))


def yes_no(prediction: str) -> str | None:
    """The yes/no a reply gives: ``"yes"``, ``"no"``, or None when it says both or neither."""
    words = set(_WORDS.findall(prediction.lower()))
    has_yes, has_no = "yes" in words, "no" in words
    if has_yes == has_no:
        return None
    return "yes" if has_yes else "no"


def strategyqa_acc(prediction: str, golds: str | Sequence[str]) -> float:
    """1.0 when the reply's single yes/no (see ``yes_no``) is the gold, else 0.0."""
    gold = _yes_no_gold(golds)
    return float(yes_no(prediction) == gold)


def score(prediction: str | None, golds: Sequence, task: str) -> dict[str, float]:
    """The metrics of one answer as percentages (0–100), by task (see the module docstring).

    ``prediction`` None (a question that failed) scores like an empty answer. Raises
    ``ValueError`` for an unknown task or golds of the wrong shape for the task.
    """
    prediction = prediction or ""
    if task == "multihop":
        aliases = _aliases(golds)
        return {
            "em": 100.0 * exact_match(prediction, aliases),
            "f1": 100.0 * f1(prediction, aliases),
            "acc": 100.0 * acc(prediction, aliases),
        }
    if task == "asqa":
        pairs = _qa_pairs(golds)
        return {
            "str_em": 100.0 * str_em(prediction, pairs),
            "str_hit": 100.0 * str_hit(prediction, pairs),
        }
    if task == "strategyqa":
        return {"acc": 100.0 * strategyqa_acc(prediction, golds)}
    raise ValueError(f"unknown task {task!r} (expected one of: {', '.join(TASKS)})")


def aggregate(rows: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """The mean of each metric over the rows that have it (``{}`` for no rows).

    Averaging per key, not per row, lets a run that mixes tasks still report each metric over
    the questions it applies to.
    """
    totals: dict[str, float] = {}
    counts: dict[str, int] = {}
    for row in rows:
        for name, value in row.items():
            totals[name] = totals.get(name, 0.0) + float(value)
            counts[name] = counts.get(name, 0) + 1
    return {name: totals[name] / counts[name] for name in totals}


# --------------------------------------------------------------------------- helpers


def _token_f1(pred: list[str], gold: list[str]) -> float:
    # SQuAD v2's convention for empty token lists (both empty → 1, one empty → 0); v1.1, and
    # the papers' copy of it, would give 0 even when both are empty while EM gives 1.
    if not pred or not gold:
        return float(pred == gold)
    common = sum((Counter(pred) & Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(gold)
    return 2 * precision * recall / (precision + recall)


def _contains(normalised_prediction: str, normalised_gold: str) -> bool:
    # An empty gold is a substring of everything; demand equality instead (module docstring).
    if not normalised_gold:
        return normalised_prediction == ""
    return normalised_gold in normalised_prediction


def _answered_pairs(prediction: str, qa_pairs: Sequence[Sequence[str]]) -> list[bool]:
    pred = normalize_answer(prediction)
    return [any(_contains(pred, normalize_answer(a)) for a in pair) for pair in qa_pairs]


def _is_pair(pair: object) -> bool:
    return isinstance(pair, (list, tuple)) and all(isinstance(a, str) for a in pair)


def _aliases(golds: str | Sequence[str]) -> list[str]:
    """A list of gold strings; a bare string is one alias. Raises ValueError otherwise."""
    if isinstance(golds, str):
        return [golds]
    aliases = list(golds)
    if not aliases or not all(isinstance(g, str) for g in aliases):
        raise ValueError(f"golds must be a non-empty list of strings, got {golds!r}")
    return aliases


def _qa_pairs(golds: Sequence) -> list[list[str]]:
    # A QA pair with no short answers is allowed and never counts as answered, as in ALCE.
    pairs = [] if isinstance(golds, str) else list(golds)
    if not pairs or not all(_is_pair(p) for p in pairs):
        raise ValueError(
            f"asqa golds must be a non-empty list of QA pairs (lists of strings), got {golds!r}"
        )
    return [list(p) for p in pairs]


def _yes_no_gold(golds: str | Sequence[str]) -> str:
    answers = {normalize_answer(g) for g in _aliases(golds)}
    if answers not in ({"yes"}, {"no"}):
        raise ValueError(f'strategyqa golds must be ["yes"] or ["no"], got {golds!r}')
    return answers.pop()
