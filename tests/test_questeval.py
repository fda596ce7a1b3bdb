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
from langchain_core.runnables import RunnableLambda

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


# --------------------------------------------------------------------------- reproduce --judge

CRUD_TABLE = {
    "id": "crud-table1",
    "paper": "adaptive-note",
    "number": "1",
    "title": "CRUD.",
    "seed": "adaptive-note.txt",
    "backbones": ["GPT-3.5"],
    "datasets": {
        "crud": {
            "name": "CRUD",
            "task": "crud",
            "sample": "2 QA samples",
            "questions": {"path": "crud/questions.json", "what": "CRUD's questions"},
            "index": {"path": "crud/index", "what": "its BM25 index"},
            "retriever": "BM25",
            "retriever_spec": "bm25:{data}/crud/index",
            "ground_truth": {"path": "crud/quest_gt", "what": "CRUD's quest_gt files"},
            "settings": {"top_k": 2},
        }
    },
    "columns": [
        {"dataset": "crud", "metric": m, "label": m} for m in ("q_r", "t_r", "t_p", "t_f1")
    ],
    "rows": [
        {"id": "ours", "label": "Ours", "method": "adaptive-note", "profile": "official",
         "settings": {"max_steps": 1}, "backbone": "GPT-3.5",
         "values": ["80.0", "60.0", "80.0", "66.0"]},
        {"id": "nor", "label": "NoR", "method": "no-retrieval", "profile": "official",
         "backbone": "GPT-3.5", "values": ["70.0", "50.0", "70.0", "55.0"]},
    ],
}  # fmt: skip


def _crud_data(root: Path) -> Path:
    from noterag.retrievers import build_bm25_index

    crud = root / "crud"
    (crud / "quest_gt").mkdir(parents=True)
    records = [
        {"ID": "a1", "questions": "有多少人参观？", "answers": "42人参观。", "news1": "..."},
        {"ID": "a2", "questions": "谁主办的？", "answers": "侨务办公室主办。", "news1": "..."},
    ]
    (crud / "questions.json").write_text(json.dumps(records, ensure_ascii=False), "utf-8")
    truth = {
        "a1": {"question": QUESTIONS, "answers": REFERENCE},
        "a2": {"question": ["谁主办的？"], "answers": ["侨务办公室"]},
    }
    (crud / "quest_gt" / "QuestAnswer1Doc_quest_gt_save.json").write_text(
        json.dumps(truth, ensure_ascii=False), "utf-8"
    )
    corpus = crud / "corpus.jsonl"
    rows = [
        {"id": "c1", "title": "参观", "text": "42人参观"},
        {"id": "c2", "title": "主办", "text": "侨务办公室"},
    ]
    corpus.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
    build_bm25_index(corpus, crud / "index", progress=False)
    return root


def test_reproduce_with_a_judge_scores_the_crud_cells(tmp_path: Path) -> None:
    import yaml

    from noterag.reproduce import report
    from noterag.reproduce.plan import make_plan
    from noterag.reproduce.run import execute
    from noterag.reproduce.tables import load_table
    from scripted import ScriptedModel

    folder = tmp_path / "tables"
    folder.mkdir()
    (folder / "crud-table1.yaml").write_text(yaml.safe_dump(CRUD_TABLE, allow_unicode=True))
    table = load_table("crud-table1", folder)
    data = _crud_data(tmp_path / "data")
    # without a judge: shown, not scored, no run
    assert make_plan(table, out=tmp_path / "o", data=data).runs == []
    model = ScriptedModel.for_method("adaptive-note")
    plan = make_plan(table, out=tmp_path / "o", data=data, model=model, judge="judge-x")
    assert [run.method for run in plan.runs] == ["adaptive-note"]  # NoR has no crud prompt
    assert plan.judge_calls == 2
    nor = [c for c in plan.cells if c.row == "nor"]
    assert all(c.run is None and "no crud answer prompt" in (c.unscored or "") for c in nor)
    outcomes = execute(plan, model=model, progress=False)
    assert [o.status for o in outcomes] == ["ran"]
    # a1: the hand-worked reply (Q-R 75, T-R 11/18, T-P 5/6, T-F1 2/3); a2: the text cannot
    # answer its one question (Q-R 0, nothing compared: 0)
    asked: list[str] = []

    def answer(prompt: str, **sampling: Any) -> str:  # the judge's reply to each reference
        asked.append(prompt)
        assert sampling == questeval.JUDGE_SAMPLING  # Adaptive-Note's gpt_gen decoding
        return reply(JUDGED) if str(QUESTIONS) in prompt else reply(["无法推断"])

    judge = RunnableLambda(answer)
    results = report.score_cells(plan, outcomes, judge)
    ours = {r.cell.metric: r.ours for r in results if r.cell.row == "ours"}
    assert ours["q_r"] == pytest.approx((75 + 0) / 2)
    assert ours["t_r"] == pytest.approx(100 * 11 / 18 / 2)
    assert ours["t_p"] == pytest.approx(100 * 5 / 6 / 2)
    assert ours["t_f1"] == pytest.approx(100 * 2 / 3 / 2)
    assert len(asked) == 2
    # a second reproduce: no run started, no judge call
    again = execute(plan, model=model, progress=False)
    assert [o.status for o in again] == ["finished"]
    silent = FakeListChatModel(responses=[])
    assert report.score_cells(plan, again, silent) == results


def test_crud_records_are_read_as_task_crud(tmp_path: Path) -> None:
    from noterag.datasets import load_dataset
    from noterag.eval.metrics import score

    path = tmp_path / "questions.json"
    record = {"ID": "64fa9b27", "event": "e", "news1": "n", "questions": "谁主办的？",
              "answers": "侨务办公室主办。"}  # fmt: skip
    path.write_text(json.dumps([record], ensure_ascii=False), "utf-8")
    [example] = load_dataset(path)
    assert (example.id, example.question, example.golds, example.task, example.dataset) == (
        "64fa9b27", "谁主办的？", ["侨务办公室主办。"], "crud", "crud",
    )  # fmt: skip
    assert score("任何回答", example.golds, "crud") == {}  # the judge scores it, at reproduce
