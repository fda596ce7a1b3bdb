"""CRUD's RAGQuestEval (noterag.eval.questeval): a scripted judge's replies scored against
Q-R and token F1 / precision / recall worked by hand, and against Adaptive-Note's own
``quest_eval`` (its vendored scoring script, run here on the same replies); the judge's replies
are kept, so scoring again sends no request."""

from __future__ import annotations

import ast
import hashlib
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel

from noterag.base.errors import ConfigError
from noterag.eval import questeval
from noterag.prompts import vendored

jieba = pytest.importorskip("jieba", reason="CRUD's RAGQuestEval needs jieba (noterag[eval])")
np = pytest.importorskip("numpy")

REFERENCE = ["42人", "9个", "无法推断", "云南省人民政府侨务办公室", "悠久的种茶历史和丰富的茶文化"]
QUESTIONS = ["多少人？", "几个国家？", "领队是谁？", "谁主办的？", "特点是什么？"]
JUDGED = ["42人", "无法推断", "随便", "云南省侨务办公室", "丰富的茶文化"]


def reply(answers: list[str]) -> str:
    return "".join(f"问题{i}\n<response>\n{a}\n</response>\n\n" for i, a in enumerate(answers))


def test_jieba_cuts_the_hand_worked_answers_so() -> None:
    # the token lists the hand computation below starts from
    assert questeval.tokens("云南省人民政府侨务办公室") == ["云南省人民政府", "侨务办公室"]
    assert questeval.tokens("云南省侨务办公室") == ["云南省", "侨务办公室"]
    assert questeval.tokens("悠久的种茶历史和丰富的茶文化") == [
        "悠久", "的", "种", "茶", "历史", "和", "丰富", "的", "茶文化",
    ]  # fmt: skip
    assert questeval.tokens("丰富的茶文化") == ["丰富", "的", "茶文化"]


def test_scores_worked_by_hand() -> None:
    """The reference cannot answer question 3: dropped. Of the other four, the text cannot
    answer question 2: Q-R = 1 - 1/4 = 75. The three answered, (F1, P, R):
    42人 / 42人 (1, 1, 1); 云南省人民政府|侨务办公室 / 云南省|侨务办公室: 1 shared of 2 and 2
    (1/2, 1/2, 1/2); 悠久|的|种|茶|历史|和|丰富|的|茶文化 / 丰富|的|茶文化: 3 shared, of 3
    predicted and 9 gold (1/2, 1, 1/3). Means: F1 2/3, P 5/6, R 11/18."""
    score = questeval.quest_score(REFERENCE, reply(JUDGED))
    assert score.valid
    assert score.q_r == pytest.approx(75.0)
    assert score.t_f1 == pytest.approx(100 * 2 / 3)
    assert score.t_p == pytest.approx(100 * 5 / 6)
    assert score.t_r == pytest.approx(100 * 11 / 18)


def test_a_reply_with_too_few_answers_is_not_counted() -> None:
    score = questeval.quest_score(REFERENCE, reply(JUDGED[:3]))
    assert (score.valid, score.q_r, score.t_f1) == (False, 0.0, 0.0)


def test_nothing_answerable_scores_zero_and_counts() -> None:
    assert questeval.quest_score(["无法推断"], reply(["42人"])) == questeval.QuestScore(
        0.0, 0.0, 0.0, 0.0, valid=True
    )
    # every answerable question unanswered by the text: recall 0, nothing to compare
    assert questeval.quest_score(["42人"], reply(["无法推断"])).q_r == 0.0


def _adaptive_note_quest_eval() -> Any:
    """thunlp/Adaptive-Note's quest_eval, compute_f1 and word_based_f1_score, compiled from the
    vendored script, with its get_QA_pair (which calls GPT) replaced by the judge's reply."""
    source = vendored.text("thunlp/Adaptive-Note", "metrics_questeval_crud.py.txt")
    tree = ast.parse(source)
    wanted = {"compute_f1", "word_based_f1_score", "quest_eval"}
    functions = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in wanted]

    class Logger:
        def warning(self, _: str) -> None:
            pass

    namespace: dict[str, Any] = {"jieba": jieba, "np": np, "Counter": Counter, "logger": Logger()}
    # Adaptive-Note's own code, to compare with: the vendored text, checked byte for byte below
    exec(compile(ast.Module(functions, []), "metrics_questeval_crud.py", "exec"), namespace)  # noqa: S102
    return namespace


@pytest.mark.parametrize(
    "judged",
    [JUDGED, JUDGED[:3], ["无法推断"] * 5, ["42人", "9个", "", "云南省人民政府侨务办公室", "茶"]],
)
def test_scores_equal_adaptive_notes_own_function(judged: list[str]) -> None:
    namespace = _adaptive_note_quest_eval()
    answers = re.findall(r"<response>\n(.*?)\n</response>", reply(judged), re.DOTALL)
    namespace["get_QA_pair"] = lambda data_point, gt: (QUESTIONS, REFERENCE, answers)
    f1, precision, recall, q_r, saved = namespace["quest_eval"]({"output": "x"}, {})
    ours = questeval.quest_score(REFERENCE, reply(judged))
    assert ours.valid == bool(saved["questions_gt"])
    assert (ours.t_f1, ours.t_p, ours.t_r, ours.q_r) == pytest.approx(
        (100 * f1, 100 * precision, 100 * recall, 100 * q_r)
    )


@pytest.mark.parametrize("repository", ["thunlp/Adaptive-Note", "IAAR-Shanghai/CRUD_RAG"])
def test_the_vendored_files_are_the_originals_bytes(repository: str) -> None:
    source = vendored.source(repository)
    folder = vendored.folder(repository)
    names = sorted(p.name for p in folder.iterdir() if p.name != "SOURCE.json")
    assert names == sorted(source["git_blobs"]) == sorted(source["files"])
    for name in names:
        data = folder.joinpath(name).read_bytes()
        assert (
            hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() == source["git_blobs"][name]
        )


def test_the_judge_prompt_is_the_originals_format() -> None:
    text = vendored.text("thunlp/Adaptive-Note", "quest_eval_answer.txt")
    sent = questeval.judge_prompt("生成的文本", QUESTIONS)
    assert sent == text.format(context="生成的文本", questions=QUESTIONS)
    assert str(QUESTIONS) in sent and "**必须**" in sent
    crud = questeval.answer_prompt("crud")
    assert "**必须**" not in crud.text and crud.source.startswith("IAAR-Shanghai/CRUD_RAG")


def test_scoring_asks_the_judge_once_per_text_and_keeps_its_replies(tmp_path: Path) -> None:
    truth = tmp_path / "QuestAnswer1Doc_quest_gt_save.json"
    truth.write_text(
        json.dumps({"a1": {"question": QUESTIONS, "answers": REFERENCE, "key_info": []}}),
        "utf-8",
    )
    gt = questeval.load_ground_truth([truth])
    rows = [{"id": "a1", "answer": "生成的文本"}, {"id": "unknown", "answer": "x"}]
    judge = FakeListChatModel(responses=[reply(JUDGED), "a second call would get this"])
    cache = tmp_path / "run" / "questeval.jsonl"
    first = questeval.score_outputs(judge, rows, gt, cache, label="judge-a")
    assert set(first) == {"a1"} and first["a1"].q_r == pytest.approx(75.0)
    assert judge.i == 1  # one call: the row without ground truth is left out
    silent = FakeListChatModel(responses=[])  # any call would fail
    again = questeval.score_outputs(silent, rows, gt, cache, label="judge-a")
    assert again == first
    # another judge, or another output, is asked anew
    other = FakeListChatModel(responses=[reply(["无法推断"] * 5)])
    assert questeval.score_outputs(other, rows, gt, cache, label="judge-b")["a1"].q_r == 0.0


def test_a_broken_ground_truth_file_is_one_error(tmp_path: Path) -> None:
    bad = tmp_path / "gt.json"
    bad.write_text("[1, 2]", "utf-8")
    with pytest.raises(ConfigError, match="not CRUD's quest_gt JSON"):
        questeval.load_ground_truth([bad])
