"""Answer metrics: the columns named as in the papers compute what the papers' official code
computes; our own definitions (normalised, or stricter) sit beside them under other names.

Entry point: ``score(prediction, golds, task)`` → a dict of percentages (0–100) for one
question, the papers' columns first; ``aggregate(rows)`` averages such dicts over a run.

The papers' tables were computed by ``src/eval.py`` of the official repositories:
thunlp/DeepNote at commit ``cc2f0132737e04ec2d895e8c21673cee612ca1e7`` and
thunlp/Adaptive-Note at commit ``ab69094f84558ab3dcda9ac9d530222a91c2d5bc`` (the two files agree
on every function below except where said). Both score the model's raw ``output`` string as it
came back.

**Scale.** Every column here is a percentage, per question 0–100 and averaged over a run. The
official DeepNote ``eval.py`` reports percentages too, rounded to two decimals; Adaptive-Note's
reports ``em``/``f1`` as rounded percentages but its ``acc_score`` returns a 0–1 fraction (its
tables print percentages). We keep full precision; the printed tables round to one decimal.

* **multihop** (HotpotQA, 2WikiMQA, MuSiQue); ``golds`` is a list of aliases (the first
  canonical), each metric the best over the aliases.

  - ``em`` — official (``compute_exact``): SQuAD's ``normalize_answer`` (lower-case, drop ASCII
    punctuation, drop the articles a/an/the, collapse whitespace) on both sides, then equality.
  - ``f1`` — official (``F1_scorer`` → ``qa_f1_score`` → ``f1_score``): token F1 of the
    normalised strings. As in the official code (SQuAD v1.1's), no shared token gives 0 even
    when both sides normalise to nothing (prediction ``""``, gold ``"The"``: ``em`` 100,
    ``f1`` 0).
  - ``acc`` — official (``acc_score``): some alias, lower-cased, is a substring of the
    lower-cased prediction — raw strings, no other normalisation: ``"Paris, France"`` has
    ``paris``, but ``"The U.S. Navy"`` does not have ``US Navy`` and ``"5042"`` does not have
    ``5,042``. Being a substring test, a gold ``no`` is inside ``"not known"``; an empty gold is
    inside everything (the official code has no guard, so neither has this column).
  - ``acc_norm`` — ours: the same containment on SQuAD-normalised strings (so ``5,042`` matches
    ``5042`` and ``The Picture of Dorian Gray`` matches ``Picture of Dorian Gray``). A gold that
    normalises to nothing (``"The"``) would be inside every prediction, so for it containment
    falls back to equality. This was noterag's ``acc`` before the columns followed the official
    code.
  - Neither code applies HotpotQA's own special case (F1 = 0 when one side is yes/no and the
    two differ).
  - ``f1_flashrag`` — FlashRAG's token F1 (RUC-NLPIR/FlashRAG flashrag/evaluator/metrics.py
    ``F1_Score.token_level_scores`` with flashrag/evaluator/utils.py ``normalize_answer``, at
    commit ``0e4da8cd1b4ec96d31cd9c71a9a7bb14c639f9aa``, the code of its June 2024 benchmark
    table), which ReSP reports ("token-level F1 score ... following FlashRAG", ReSP §5.2): the
    same normalisation and token F1, except that a gold compared with a prediction that
    normalises to ``yes``, ``no`` or ``noanswer``, or a gold that normalises to one of them,
    scores 0 unless the two are equal (``"no"`` against gold ``"no way"`` is 0, where ``f1``
    gives 67). The best over the aliases, as FlashRAG takes.

* **asqa** (ALCE's ASQA) → ``str_em``, ``str_hit``, both official (``compute_str_em`` /
  ``exact_presence``, copied from ALCE); ``golds`` is one alias list per QA pair (ALCE's
  ``qa_pairs[i].short_answers``). A QA pair is *answered* when any of its normalised short
  answers is a substring of the normalised prediction; ``str_em`` is the percentage of QA pairs
  answered, ``str_hit`` 100 when every pair is answered, else 0. A pair with no short answers is
  never answered; a short answer that normalises to nothing answers its pair whatever the
  prediction (the official code has no guard, so neither have these columns). Before scoring,
  the literal ``<|im_end|>`` (Qwen's end-of-turn token) is removed from the prediction, as both
  official ``eval_asqa`` functions do.

* **strategyqa**; ``golds`` is ``["yes"]`` or ``["no"]``.

  - ``acc`` — official (DeepNote's ``acc_choice``; Adaptive-Note does not evaluate StrategyQA):
    the lower-cased gold occurs in the lower-cased prediction as a whole word (``\\bgold\\b``),
    whatever else the reply says: ``"Yes."``, ``"No, because ..."`` and ``"yes or no"`` (gold
    ``yes``, and also gold ``no``) are right; ``"not sure"`` is not ``no``.
  - ``acc_strict`` — ours: the prediction is split into words at every non-word character;
    it is right when exactly one of the words ``yes``/``no`` occurs and it is the gold. A reply
    with both (``"yes or no"``) or neither (``"maybe"``) is wrong. This was noterag's ``acc``
    for StrategyQA before the columns followed the official code.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from noterag.datasets.records import TASKS

# The columns each task yields, the papers' (the official code's) first, then ours.
PAPER_METRICS: dict[str, tuple[str, ...]] = {
    "multihop": ("em", "f1", "acc"),
    "asqa": ("str_em", "str_hit"),
    "strategyqa": ("acc",),
    # CRUD's q_r / t_r / t_p / t_f1 need a judge model (noterag.eval.questeval)
    "crud": (),
}
EXTRA_METRICS: dict[str, tuple[str, ...]] = {
    "multihop": ("acc_norm", "f1_flashrag"),
    "asqa": (),
    "strategyqa": ("acc_strict",),
    "crud": (),
}

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_WORDS = re.compile(r"\w+")
# Qwen's end-of-turn token, which both official eval_asqa functions strip from the output.
_IM_END = "<|im_end|>"


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lower-case, drop punctuation, drop articles, collapse whitespace."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, golds: str | Sequence[str]) -> float:
    """1.0 when the normalised prediction equals any normalised gold, else 0.0 (official
    ``compute_exact`` for one question)."""
    pred = normalize_answer(prediction)
    return max(float(pred == normalize_answer(g)) for g in _aliases(golds))


def f1(prediction: str, golds: str | Sequence[str]) -> float:
    """Token F1 (0–1) of the normalised prediction against the best normalised gold (official
    ``F1_scorer`` for one question)."""
    pred_tokens = normalize_answer(prediction).split()
    return max(_token_f1(pred_tokens, normalize_answer(g).split()) for g in _aliases(golds))


# FlashRAG's F1_Score.token_level_scores: these answers score only against themselves.
_FLASHRAG_SPECIAL = frozenset(("yes", "no", "noanswer"))


def f1_flashrag(prediction: str, golds: str | Sequence[str]) -> float:
    """FlashRAG's token F1 (0–1, see the module docstring): ``f1`` except that a yes / no /
    noanswer prediction or gold counts only when the other side normalises to the same."""
    pred = normalize_answer(prediction)
    best = 0.0
    for gold in map(normalize_answer, _aliases(golds)):
        if (pred in _FLASHRAG_SPECIAL or gold in _FLASHRAG_SPECIAL) and pred != gold:
            continue
        best = max(best, _token_f1(pred.split(), gold.split()))
    return best


def acc_score(prediction: str, golds: str | Sequence[str]) -> float:
    """The papers' multi-hop acc (official ``acc_score`` for one question): 1.0 when any gold,
    lower-cased, is a substring of the lower-cased prediction, else 0.0. Raw strings otherwise:
    no punctuation or article removal, no guard for an empty gold."""
    pred = prediction.lower()
    return float(any(g.lower() in pred for g in _aliases(golds)))


def acc_norm(prediction: str, golds: str | Sequence[str]) -> float:
    """Our ``acc_norm``: 1.0 when any normalised gold is a substring of the normalised
    prediction, else 0.0; a gold that normalises to nothing must equal the prediction."""
    pred = normalize_answer(prediction)
    return float(any(_contains(pred, normalize_answer(g)) for g in _aliases(golds)))


def str_em(prediction: str, qa_pairs: Sequence[Sequence[str]]) -> float:
    """ALCE STR-EM for one question: the fraction (0–1) of QA pairs answered in the prediction."""
    answered = _answered_pairs(prediction, qa_pairs)
    return sum(answered) / len(answered)


def str_hit(prediction: str, qa_pairs: Sequence[Sequence[str]]) -> float:
    """ALCE STR-HIT for one question: 1.0 when every QA pair is answered, else 0.0."""
    return float(all(_answered_pairs(prediction, qa_pairs)))


def acc_choice(prediction: str, golds: str | Sequence[str]) -> float:
    """The papers' StrategyQA acc (DeepNote's ``acc_choice`` for one question): 1.0 when some
    lower-cased gold occurs as a whole word in the lower-cased prediction, else 0.0.

    The official pattern is ``rf"\\b{ans}\\b"`` with the gold unescaped; we ``re.escape`` it.
    For the golds StrategyQA has (``yes``/``no``, which ``score`` insists on) the two are the
    same pattern; they would differ only for a gold holding a regex metacharacter, where the
    official code would read it as regex syntax (or fail) and we match it literally.
    """
    pred = prediction.lower()
    return float(any(re.search(rf"\b{re.escape(g.lower())}\b", pred) for g in _aliases(golds)))


def yes_no(prediction: str) -> str | None:
    """The yes/no a reply gives: ``"yes"``, ``"no"``, or None when it says both or neither."""
    words = set(_WORDS.findall(prediction.lower()))
    has_yes, has_no = "yes" in words, "no" in words
    if has_yes == has_no:
        return None
    return "yes" if has_yes else "no"


def acc_strict(prediction: str, golds: str | Sequence[str]) -> float:
    """Our StrategyQA ``acc_strict``: 1.0 when the reply's single yes/no (see ``yes_no``) is
    the gold, else 0.0."""
    return float(yes_no(prediction) == _yes_no_gold(golds))


def score(prediction: str | None, golds: Sequence, task: str) -> dict[str, float]:
    """The metrics of one answer as percentages (0–100), by task (see the module docstring):
    the papers' columns (``PAPER_METRICS``) first, then ours (``EXTRA_METRICS``).

    ``prediction`` None (a question that failed) scores like an empty answer. Raises
    ``ValueError`` for an unknown task or golds of the wrong shape for the task.
    """
    prediction = prediction or ""
    if task == "multihop":
        aliases = _aliases(golds)
        return {
            "em": 100.0 * exact_match(prediction, aliases),
            "f1": 100.0 * f1(prediction, aliases),
            "acc": 100.0 * acc_score(prediction, aliases),
            "acc_norm": 100.0 * acc_norm(prediction, aliases),
            "f1_flashrag": 100.0 * f1_flashrag(prediction, aliases),
        }
    if task == "asqa":
        pairs = _qa_pairs(golds)
        prediction = prediction.replace(_IM_END, "")
        return {
            "str_em": 100.0 * str_em(prediction, pairs),
            "str_hit": 100.0 * str_hit(prediction, pairs),
        }
    if task == "strategyqa":
        # Both columns read the gold as its bare yes/no, so a gold spelled "Yes." is searched
        # as "yes" (the official code, given such a gold, would search for "yes." with "." any
        # character); the datasets' loaders only ever produce bare "yes"/"no".
        gold = [_yes_no_gold(golds)]
        return {
            "acc": 100.0 * acc_choice(prediction, gold),
            "acc_strict": 100.0 * acc_strict(prediction, gold),
        }
    if task == "crud":
        # RAGQuestEval: a judge model's answers, scored when a table is reproduced with
        # --judge (noterag.eval.questeval); nothing is computable without one
        return {}
    raise ValueError(f"unknown task {task!r} (expected one of: {', '.join(TASKS)})")


# Words that, as a whole gold answer, the official substring tests find in nearly any reply:
# Lucene's English stop words (the BM25 analyzer's), but "no", which is the answer of the
# datasets' yes/no comparison questions rather than a slip.
_STOPWORDS = frozenset(
    ("a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is",
     "it", "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these",
     "they", "this", "to", "was", "will", "with")
)  # fmt: skip


def weak_gold(golds: Sequence, task: str) -> bool:
    """Whether the official containment metrics would count nearly any reply right for these
    golds: a multi-hop alias (``acc``) or an ASQA short answer (``str_em``) of at most one
    character, or of stop words only (``"a"``, ``"the"``, ``"in the"``). The metric stays as
    the official code computes it; the run's summary names such questions."""
    if task == "multihop":
        answers = _aliases(golds)
    elif task == "asqa":
        answers = [a for pair in _qa_pairs(golds) for a in pair]
    else:
        return False
    for answer in answers:
        words = _WORDS.findall(answer.lower())
        if len(answer.strip()) <= 1 or all(word in _STOPWORDS for word in words):
            return True
    return False


def aggregate(rows: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """The mean of each metric over the rows that have it (``{}`` for no rows).

    Averaging per key, not per row, lets a run that mixes tasks still report each metric over
    the questions it applies to. (A run mixing multi-hop and StrategyQA questions averages both
    tasks' ``acc`` together, as the column means the same thing, "the papers' acc", in each.)
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
    # The official f1_score: no shared token → 0, so two empty token lists give 0 as well
    # (SQuAD v1.1's convention; v2 would give 1). An empty side always has no shared token,
    # which also keeps the divisions below away from zero.
    common = sum((Counter(pred) & Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(gold)
    return 2 * precision * recall / (precision + recall)


def _contains(normalised_prediction: str, normalised_gold: str) -> bool:
    # acc_norm only: an empty gold is a substring of everything; demand equality instead.
    if not normalised_gold:
        return normalised_prediction == ""
    return normalised_gold in normalised_prediction


def _answered_pairs(prediction: str, qa_pairs: Sequence[Sequence[str]]) -> list[bool]:
    # The official exact_presence: plain substring of normalised strings, no empty-gold guard.
    pred = normalize_answer(prediction)
    return [any(normalize_answer(a) in pred for a in pair) for pair in qa_pairs]


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
