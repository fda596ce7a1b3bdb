"""CRUD's RAGQuestEval (Lyu et al., 2024), the metric of Adaptive-Note's CRUD columns: a judge
model answers the reference's questions from the generated text, and those answers are
compared with the reference's own.

What is scored, and how, follows the code that produced the published numbers,
thunlp/Adaptive-Note ``src/metrics_questeval_crud.py`` @ ab69094 (after IAAR-Shanghai/CRUD_RAG
``src/metric/quest_eval.py`` @ 1aace38; both vendored under ``prompts/original/``):

* the reference's questions and their answers from the reference itself come with CRUD
  (``src/quest_eval/QuestAnswer{1Doc,2Docs,3Docs}_quest_gt_save.json``: ID -> ``question``,
  ``answers``), so one judge call per generated text suffices: the answering prompt
  (``quest_eval_answer.txt``, a ``str.format`` template) filled with ``context`` = the text and
  ``questions`` = the Python ``str`` of the question list;
* the judge's answers are the matches of ``<response>\\n(.*?)\\n</response>`` (DOTALL), in order;
* questions the reference itself cannot answer ("无法推断") are dropped; ``Q-R`` (question-level
  recall) is 1 − the share of the rest the text cannot answer; those it can answer are compared
  with the reference's answers by token F1 / precision / recall over jieba's tokens
  (``compute_f1``; an empty side scores 1 only when both are empty), averaged;
* the judge's reply holding fewer answers than the question list raises (an IndexError in the
  original) and the question scores 0 and is *not counted* (the original averages over the
  questions whose ``questions_gt`` is non-empty): ``valid`` False here;
* every score is a percentage (the papers print them so).

The judge's decoding is the original's (``gpt_gen`` in thunlp/Adaptive-Note src/utils.py:
temperature 0.1, top_p 0.9, max_tokens 1280); the papers' judge is gpt-3.5-turbo-0125.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from noterag.base.errors import ConfigError, NoteragError
from noterag.core.prompt import Prompt
from noterag.prompts import vendored

METRICS = ("q_r", "t_r", "t_p", "t_f1")
UNANSWERABLE = "无法推断"
_RESPONSE = re.compile(r"<response>\n(.*?)\n</response>", re.DOTALL)
# thunlp/Adaptive-Note src/utils.py gpt_gen (the judge's calls): the official decoding
JUDGE_SAMPLING = {"temperature": 0.1, "top_p": 0.9, "max_tokens": 1280}

_AN = "thunlp/Adaptive-Note"
_CRUD = "IAAR-Shanghai/CRUD_RAG"


def answer_prompt(which: str = "adaptive-note") -> Prompt:
    """RAGQuestEval's answering prompt: Adaptive-Note's copy (its tables' scores; the answers
    required between the tags, "**必须**") or CRUD's own (``which="crud"``)."""
    repository = _AN if which == "adaptive-note" else _CRUD
    return Prompt(
        "quest_eval_answer",
        vendored.text(repository, "quest_eval_answer.txt"),
        vendored.cite(repository, "quest_eval_answer.txt"),
        style="format",
    )


@dataclass(frozen=True)
class QuestScore:
    """One generated text's RAGQuestEval scores (percentages) and whether it counts."""

    q_r: float
    t_r: float
    t_p: float
    t_f1: float
    valid: bool  # False: the judge's reply could not be paired with the questions

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def tokens(text: str) -> list[str]:
    """jieba's tokens (its default, accurate mode), as ``compute_f1`` cuts."""
    try:
        import jieba
    except ImportError:
        raise NoteragError(
            "CRUD's RAGQuestEval needs jieba (Chinese tokens): pip install 'noterag[eval]'"
        ) from None
    return list(jieba.cut(text))


def token_f1(gold: str, pred: str) -> tuple[float, float, float]:
    """(F1, precision, recall) of ``pred`` against ``gold`` over jieba's tokens
    (thunlp/Adaptive-Note ``compute_f1``)."""
    gold_tokens, pred_tokens = tokens(gold), tokens(pred)
    if not gold_tokens or not pred_tokens:
        same = float(gold_tokens == pred_tokens)
        return same, same, same
    common = sum((Counter(gold_tokens) & Counter(pred_tokens)).values())
    if common == 0:
        return 0.0, 0.0, 0.0
    precision, recall = common / len(pred_tokens), common / len(gold_tokens)
    return 2 * precision * recall / (precision + recall), precision, recall


def judge_answers(reply: str) -> list[str]:
    """The judge's answers: each ``<response>`` block's text, in order."""
    return _RESPONSE.findall(reply)


def quest_score(reference_answers: Sequence[str], judge_reply: str) -> QuestScore:
    """The scores of one generated text from the judge's reply to the reference's questions
    (``quest_eval`` of thunlp/Adaptive-Note src/metrics_questeval_crud.py)."""
    generated = judge_answers(judge_reply)
    keep = [i for i, answer in enumerate(reference_answers) if answer != UNANSWERABLE]
    if any(i >= len(generated) for i in keep):  # the original's IndexError: not counted
        return QuestScore(0.0, 0.0, 0.0, 0.0, valid=False)
    pairs = [(reference_answers[i], generated[i]) for i in keep]
    if not pairs:
        return QuestScore(0.0, 0.0, 0.0, 0.0, valid=True)
    recall = 1 - sum(1 for _, g in pairs if g == UNANSWERABLE) / len(pairs)
    answered = [(r, g) for r, g in pairs if g != UNANSWERABLE]
    if not answered:
        return QuestScore(100 * recall, 0.0, 0.0, 0.0, valid=True)
    f1s, precisions, recalls = zip(*(token_f1(r, g) for r, g in answered), strict=True)
    mean = lambda values: 100 * sum(values) / len(values)
    return QuestScore(100 * recall, mean(recalls), mean(precisions), mean(f1s), valid=True)


def load_ground_truth(paths: Sequence[str | Path]) -> dict[str, dict[str, Any]]:
    """CRUD's ``*_quest_gt_save.json`` files merged: ID -> {question: [...], answers: [...]};
    a file that is not such a mapping is one ConfigError naming it."""
    merged: dict[str, dict[str, Any]] = {}
    for path in paths:
        try:
            data = json.loads(Path(path).read_text("utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{path}: not CRUD's quest_gt JSON ({type(exc).__name__})") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: not CRUD's quest_gt JSON (an object of IDs expected)")
        for key, entry in data.items():
            if not (
                isinstance(entry, dict)
                and isinstance(entry.get("question"), list)
                and isinstance(entry.get("answers"), list)
            ):
                raise ConfigError(f"{path}: entry {key!r:.40} has no question and answers lists")
            merged[key] = entry
    return merged


def judge_prompt(output: str, questions: Sequence[str], prompt: Prompt | None = None) -> str:
    """The judge's prompt for one generated text: ``context`` the text, ``questions`` the
    Python ``str`` of the question list (the original formats the list itself)."""
    prompt = prompt or answer_prompt()
    return prompt.text.format(context=output, questions=list(questions))


def score_outputs(
    judge: Any,
    rows: Sequence[Mapping[str, Any]],
    ground_truth: Mapping[str, Mapping[str, Any]],
    cache_file: Path,
    *,
    label: str,
    prompt: Prompt | None = None,
) -> dict[str, QuestScore]:
    """Each row's (``{id, answer}``) scores, by id: the judge's reply from ``cache_file`` (one
    JSON line per (judge, id, output)) where an earlier scoring kept it, else one judge call
    (appended to the file before it is used, so a second scoring sends no request). A row whose
    id has no ground truth is left out."""
    kept: dict[tuple[str, str, str], str] = {}
    if cache_file.is_file():
        for line in cache_file.read_text("utf-8").splitlines():
            try:
                entry = json.loads(line)
                kept[entry["judge"], entry["id"], entry["output"]] = entry["reply"]
            except (ValueError, KeyError, TypeError):
                continue  # a line cut short by a crash: asked again
    scores: dict[str, QuestScore] = {}
    for row in rows:
        truth = ground_truth.get(str(row["id"]))
        if truth is None:
            continue
        output = row.get("answer") or ""
        key = (label, str(row["id"]), output)
        reply = kept.get(key)
        if reply is None:
            try:
                message = judge.bind(**JUDGE_SAMPLING).invoke(
                    judge_prompt(output, truth["question"], prompt)
                )
            except NoteragError:
                raise
            except Exception as exc:  # noqa: BLE001 - the endpoint's own error, as one line
                from noterag.models.errors import friendly_model_error, one_line_error

                friendly = friendly_model_error(exc)
                raise friendly or NoteragError(
                    f"the judge {label} failed on question {key[1]!r:.60}: {one_line_error(exc)}"
                ) from None
            reply = str(getattr(message, "content", message))
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            entry = {"judge": label, "id": key[1], "output": output, "reply": reply}
            with cache_file.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(entry, ensure_ascii=False) + "\n")
            kept[key] = reply
        scores[key[1]] = quest_score(truth["answers"], reply)
    return scores
