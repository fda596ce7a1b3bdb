"""Issue 16, the eval / index / corpus side: what a careless or hostile user found, one test (or
more) per class of failure, each failing before its fix.

1. a run is bound to what it ran on (dataset, question, gold, index); content ids;
2. eval fails when nothing (or too much) failed; the last line counts the failures;
3. settings (the task) checked against the method before any call; run.json says what ran;
4. concurrency defaults to what the endpoint serves; queueing is said;
5. an empty index is an error; gzip corpora are read;
12. lone surrogates, invalid UTF-8, a BOM;
13. unwritable or full --out, a damaged index found mid-run;
14. --limit scopes the summary; compare labels distinct; a leftover build directory named.
"""

from __future__ import annotations

import bz2
import errno
import gzip
import json
import lzma
from pathlib import Path
from typing import Any

import pytest
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from typer.testing import CliRunner

import noterag.models
from noterag.base.errors import ConfigError, CorpusError, NoteragError
from noterag.cli import app
from noterag.datasets import DatasetError, load_dataset
from noterag.eval import run_eval
from noterag.eval.report import compare, compute_summary
from noterag.eval.runs import RunDirError
from noterag.retrievers import BM25Retriever, CorpusStats, build_bm25_index, iter_corpus
from noterag.retrievers.dense import DenseRetriever, build_dense_index
from scripted import VELMORA_ROWS, KeywordRetriever, ScriptedModel, passages, velmora_script

CORPUS = passages(*VELMORA_ROWS)
GOLD = "Aurelio Fenwick"


# --------------------------------------------------------------------------- helpers


def cli(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def one_error_line(result: Any) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 1, (result.exit_code, result.output, result.exception)
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    return lines[0]


def jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def questions(n: int, *, start: int = 1) -> list[dict[str, Any]]:
    return [
        {"id": f"q{i}", "question": f"Question {i}: who designed the Velmora Bridge?",
         "answers": [GOLD]}
        for i in range(start, start + n)
    ]  # fmt: skip


def read_rows(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]


def evaluate(method: str, dataset: Path, out: Path, model: Any, **kwargs: Any) -> Any:
    kwargs.setdefault("index", KeywordRetriever(passages=CORPUS))
    return run_eval(method, dataset, out, model=model, progress=False, **kwargs)


def answering() -> ScriptedModel:
    return ScriptedModel(script={"answer": GOLD})


@pytest.fixture
def corpus_file(tmp_path: Path) -> Path:
    return jsonl(tmp_path / "corpus.jsonl", CORPUS)


@pytest.fixture
def bm25_dir(tmp_path: Path, corpus_file: Path) -> Path:
    build_bm25_index(corpus_file, tmp_path / "index", progress=False)
    return tmp_path / "index"


@pytest.fixture
def scripted_cli(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Every model spec the CLI loads becomes one scripted model (recorded in "specs")."""
    state: dict[str, Any] = {"model": ScriptedModel(script=velmora_script(answer=GOLD)),
                             "specs": []}  # fmt: skip

    def load(spec: Any = None, settings: Any = None, **kwargs: Any) -> Any:
        if isinstance(spec, BaseChatModel):
            return spec
        state["specs"].append(spec)
        return state["model"]

    monkeypatch.setattr(noterag.models, "load_chat_model", load)
    monkeypatch.setattr(noterag.models, "check_model_reachable", lambda model: None)
    monkeypatch.delenv("NOTERAG_MODEL", raising=False)
    return state


class Hashing(Embeddings):
    """A tiny exact embedder (word hashing): dense indexes without torch."""

    def _vector(self, text: str) -> list[float]:
        vector = [0.0] * 32
        for word in text.lower().split():
            vector[sum(map(ord, word)) % 32] += 1.0
        vector[0] += 0.01  # never all zeros
        return vector

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vector(text)


def build_dense(corpus: Path, out: Path, **kwargs: Any) -> Any:
    pytest.importorskip(
        "faiss", reason="faiss-cpu is not installed (the dense extra: pip install 'noterag[dense]')"
    )
    return build_dense_index(corpus, out, embeddings=Hashing(), progress=False, **kwargs)


# =========================================================================== 5. empty, gzip


@pytest.mark.parametrize("builder", ["bm25", "dense"])
def test_an_empty_corpus_is_an_error_and_keeps_the_old_index(
    builder: str, tmp_path: Path, corpus_file: Path
) -> None:
    build = build_bm25_index if builder == "bm25" else build_dense
    out = tmp_path / "idx"
    build(corpus_file, out, progress=False) if builder == "bm25" else build(corpus_file, out)
    before = sorted(p.name for p in out.iterdir())
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n  \n")
    with pytest.raises(CorpusError, match=r"empty\.jsonl holds no passages"):
        build(empty, out, **({"progress": False} if builder == "bm25" else {}))
    assert sorted(p.name for p in out.iterdir()) == before  # the old index stands
    with pytest.raises(CorpusError, match="holds no passages"):
        build(empty, tmp_path / "new", **({"progress": False} if builder == "bm25" else {}))
    assert not (tmp_path / "new").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_corpus_whose_every_line_was_skipped_is_an_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1}\nnot json\n{"id": 2, "text": ""}\n')
    with pytest.raises(CorpusError) as raised:
        build_bm25_index(bad, tmp_path / "idx", progress=False, skip_bad_lines=True)
    message = str(raised.value)
    assert "bad.jsonl" in message and "all 3 lines were skipped" in message
    assert "line 1" in message  # the first bad line, so the user can look
    assert not (tmp_path / "idx").exists()


def test_index_command_refuses_an_empty_corpus_in_one_line(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    line = one_error_line(cli("index", str(empty), "--out", str(tmp_path / "idx")))
    assert "empty.jsonl holds no passages" in line
    assert not (tmp_path / "idx").exists()


@pytest.mark.parametrize("name", ["corpus.jsonl.gz", "corpus.jsonl"])
def test_a_gzip_corpus_is_read_transparently(tmp_path: Path, name: str) -> None:
    # by its bytes, not its name: a gzip file without .gz is gzip too
    path = tmp_path / name
    path.write_bytes(gzip.compress("".join(json.dumps(p) + "\n" for p in CORPUS).encode()))
    stats = CorpusStats()
    assert list(iter_corpus(path, stats=stats)) == CORPUS
    assert 0 < stats.bytes_read <= path.stat().st_size  # progress in the file's own bytes
    built = build_bm25_index(path, tmp_path / "idx", progress=False)
    assert built.passages == len(CORPUS)
    assert BM25Retriever(index_dir=tmp_path / "idx").search("Velmora Bridge", 1)[0].id == "p1"
    assert build_dense(path, tmp_path / "dense").passages == len(CORPUS)


def test_a_damaged_gzip_corpus_names_the_file_and_line(tmp_path: Path) -> None:
    data = gzip.compress("".join(json.dumps(p) + "\n" for p in CORPUS * 50).encode())
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CorpusError, match=r"cut\.jsonl\.gz line \d+: .*gzip"):
        list(iter_corpus(path))


@pytest.mark.parametrize(
    ("suffix", "compress", "kind"),
    [(".bz2", bz2.compress, "bzip2"), (".xz", lzma.compress, "xz")],
)
def test_other_compressions_are_named_in_the_error(
    tmp_path: Path, suffix: str, compress: Any, kind: str
) -> None:
    path = tmp_path / f"corpus.jsonl{suffix}"
    path.write_bytes(compress(b'{"id": "1", "text": "x"}\n'))
    with pytest.raises(CorpusError, match=f"{kind}-compressed.*decompress it first"):
        list(iter_corpus(path))
    line = one_error_line(cli("index", str(path), "--out", str(tmp_path / "idx")))
    assert f"{kind}-compressed" in line


@pytest.mark.parametrize("start", [b"PK\x03\x04", b"BZh91AY&SY", b"\x1f\x8b\x08 not gzip"])
def test_a_line_that_merely_starts_like_a_compressed_file_is_a_bad_line(
    tmp_path: Path, start: bytes
) -> None:
    path = tmp_path / "c.jsonl"
    path.write_bytes(start + b'\n{"id": "1", "text": "x"}\n')
    stats = CorpusStats()
    assert [p["id"] for p in iter_corpus(path, skip_bad_lines=True, stats=stats)] == ["1"]
    assert stats.skipped_examples[0][0] == 1


def test_a_gzip_dataset_is_read_too(tmp_path: Path) -> None:
    path = tmp_path / "questions.jsonl.gz"
    path.write_bytes(gzip.compress("".join(json.dumps(q) + "\n" for q in questions(2)).encode()))
    assert [e.id for e in load_dataset(path)] == ["q1", "q2"]


# =========================================================================== 12. unicode


SURROGATE_LINES = [
    ('{"id": "2", "title": "b", "text": "bad \\ud800 x"}', '"text"'),
    ('{"id": "2", "title": "b\\udfff", "text": "x"}', '"title"'),
    ('{"id": "\\ud800", "text": "x"}', '"id"'),
    ('{"id": "2", "contents": "T\\nbody \\udc80"}', '"contents"'),
]


@pytest.mark.parametrize(("line", "field"), SURROGATE_LINES)
def test_a_lone_surrogate_is_a_bad_line_with_its_number(
    tmp_path: Path, line: str, field: str
) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text('{"id": "1", "title": "a", "text": "good"}\n' + line + "\n"
                    '{"id": "3", "text": "fine"}\n')  # fmt: skip
    with pytest.raises(CorpusError) as raised:
        list(iter_corpus(path))
    message = str(raised.value)
    assert message.startswith("c.jsonl line 2: ") and field in message
    assert "surrogate" in message and "--skip-bad-lines" in message
    stats = CorpusStats()
    assert [p["id"] for p in iter_corpus(path, skip_bad_lines=True, stats=stats)] == ["1", "3"]
    assert stats.skipped_by_kind == {"invalid Unicode": 1}
    assert stats.skipped_examples[0][0] == 2


@pytest.mark.parametrize("dense", [False, True])
def test_a_lone_surrogate_does_not_crash_the_build(tmp_path: Path, dense: bool) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text('{"id": "1", "title": "a", "text": "good"}\n'
                    '{"id": "2", "title": "b", "text": "bad \\ud800 x"}\n')  # fmt: skip
    out = tmp_path / "idx"
    with pytest.raises(CorpusError, match="c.jsonl line 2"):
        build_dense(path, out) if dense else build_bm25_index(path, out, progress=False)
    stats = (
        build_dense(path, out, skip_bad_lines=True)
        if dense
        else build_bm25_index(path, out, progress=False, skip_bad_lines=True)
    )
    assert (stats.passages, stats.skipped_lines) == (1, 1)
    assert stats.skipped_by_kind == {"invalid Unicode": 1}


def test_index_command_names_the_skipped_lines(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text('{"id": "1", "title": "a", "text": "good"}\n'
                    '{"id": "2", "title": "b", "text": "bad \\ud800 x"}\n')  # fmt: skip
    line = one_error_line(cli("index", str(path), "--out", str(tmp_path / "idx")))
    assert line.startswith("error: c.jsonl line 2: ") and "surrogate" in line
    result = cli("index", str(path), "--out", str(tmp_path / "idx"), "--skip-bad-lines")
    assert result.exit_code == 0, result.output
    assert "1 invalid Unicode" in result.stderr and "line 2" in result.stderr


def test_a_utf8_bom_at_the_start_of_a_corpus_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + "".join(json.dumps(p) + "\n" for p in CORPUS).encode())
    assert [p["id"] for p in iter_corpus(path)] == [p["id"] for p in CORPUS]
    assert build_bm25_index(path, tmp_path / "idx", progress=False).passages == len(CORPUS)
    # only at the start: a BOM inside the file is a bad line like any other
    path.write_bytes(b'{"id": "1", "text": "x"}\n\xef\xbb\xbf{"id": "2", "text": "y"}\n')
    with pytest.raises(CorpusError, match="line 2"):
        list(iter_corpus(path))


@pytest.mark.parametrize(
    ("record", "field"),
    [
        ('{"id": "q\\ud800", "question": "Who?", "answers": ["x"]}', '"id"'),
        ('{"id": "q1", "question": "Who \\udc80?", "answers": ["x"]}', '"question"'),
        ('{"id": "q1", "question": "Who?", "answers": ["x\\ud800"]}', '"answers" item 1'),
    ],
)
def test_a_lone_surrogate_in_a_question_file_names_file_line_and_field(
    tmp_path: Path, record: str, field: str
) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps(questions(1)[0]) + "\n" + record + "\n")
    with pytest.raises(DatasetError) as raised:
        load_dataset(path)
    message = str(raised.value)
    assert message.startswith("q.jsonl line 2: ") and field in message and "surrogate" in message
    array = tmp_path / "q.json"
    array.write_text("[" + json.dumps(questions(1)[0]) + ",\n" + record + "]")
    with pytest.raises(DatasetError, match=r"q\.json item 2: .*surrogate"):
        load_dataset(array)


def test_invalid_utf8_in_a_question_file_is_one_line_naming_file_and_line(
    tmp_path: Path, bm25_dir: Path, scripted_cli: dict[str, Any]
) -> None:
    path = tmp_path / "q.jsonl"
    path.write_bytes(json.dumps(questions(1)[0]).encode() + b'\n{"question": "caf\xe9"}\n')
    line = one_error_line(cli("eval", "-m", "vanilla", "-d", str(path), "-i", str(bm25_dir),
                              "--out", str(tmp_path / "run")))  # fmt: skip
    assert line.startswith("error: q.jsonl line 2: not valid UTF-8 (byte ")
    surrogate = tmp_path / "s.jsonl"
    surrogate.write_text('{"id": "q\\ud800", "question": "Who?", "answers": ["x"]}\n')
    line = one_error_line(cli("eval", "-m", "vanilla", "-d", str(surrogate), "-i", str(bm25_dir),
                              "--out", str(tmp_path / "run")))  # fmt: skip
    assert line.startswith("error: s.jsonl line 1: ") and "surrogate" in line
    assert scripted_cli["specs"] == []


def test_pooling_a_dataset_with_a_lone_surrogate_names_the_line(tmp_path: Path) -> None:
    data = tmp_path / "hotpot.jsonl"
    data.write_text(
        '{"_id": "h1", "question": "Q?", "answer": "A", "supporting_facts": [], '
        '"context": [["T", ["bad \\ud800"]]]}\n'
    )
    line = one_error_line(cli("corpus-from", str(data), "--out", str(tmp_path / "c.jsonl")))
    assert line.startswith("error: hotpot.jsonl line 1: ") and "surrogate" in line


# =========================================================================== 1. bound runs


def adaptive_list(path: Path, texts: list[str]) -> Path:
    """The Adaptive-Note test-list shape: a JSON array of {question, answer} without ids."""
    path.write_text(json.dumps([{"question": t, "answer": [GOLD]} for t in texts]))
    return path


def velmora(i: int) -> str:
    return f"Question {i}: who designed the Velmora Bridge?"


def test_ids_of_records_without_one_come_from_their_content(tmp_path: Path) -> None:
    path = adaptive_list(tmp_path / "test.json", ["A?", "B?"])
    first = [e.id for e in load_dataset(path)]
    adaptive_list(path, ["C?", "A?", "B?"])  # a question put in front
    second = [e.id for e in load_dataset(path)]
    assert second[1:] == first and second[0] not in first
    assert load_dataset(path, limit=1)[0].id == second[0]
    # the same question twice: two questions, two ids
    path.write_text(json.dumps([{"question": "A?", "answer": ["a"]},
                                {"question": "A?", "answer": ["b"]}]))  # fmt: skip
    twice = [e.id for e in load_dataset(path)]
    assert twice[0] == first[0] and twice[1] == f"{first[0]}-2"
    # an id the records give themselves must still be unique
    jsonl(tmp_path / "dup.jsonl", [questions(1)[0], questions(1)[0]])
    with pytest.raises(DatasetError, match="duplicate id 'q1'"):
        load_dataset(tmp_path / "dup.jsonl")


def test_a_question_put_in_front_is_asked_and_none_is_counted_twice(tmp_path: Path) -> None:
    path = adaptive_list(tmp_path / "test.json", [velmora(i) for i in range(1, 5)])
    run, model = tmp_path / "run", answering()
    evaluate("vanilla", path, run, model)
    adaptive_list(path, [velmora(0)] + [velmora(i) for i in range(1, 5)])
    summary = evaluate("vanilla", path, run, model)
    assert len(model.calls) == 5 and velmora(0) in model.calls[-1][1]
    rows = read_rows(run)
    assert sorted(r["question"] for r in rows) == sorted(velmora(i) for i in range(5))
    assert summary["n"] == summary["questions"] == 5 and summary["n_errors"] == 0


def test_an_edited_question_or_gold_under_the_same_id_is_refused(tmp_path: Path) -> None:
    data, run, model = jsonl(tmp_path / "q.jsonl", questions(3)), tmp_path / "run", answering()
    evaluate("vanilla", data, run, model)
    edited = questions(3)
    edited[1]["question"] = "Question 2: who designed the Pellin Bridge?"
    edited[2]["answers"] = ["Lise Ambrath"]
    jsonl(data, edited)
    with pytest.raises(RunDirError) as raised:
        evaluate("vanilla", data, run, model)
    message = str(raised.value)
    assert "q2 (question changed)" in message and "q3 (gold changed)" in message
    assert "--rerun-changed" in message and "--force" in message and "\n" not in message
    assert len(model.calls) == 3  # refused before any question
    # asked for: the unchanged answers are kept, the changed questions asked again
    summary = evaluate("vanilla", data, run, model, rerun_changed=True)
    assert len(model.calls) == 5
    rows = {r["id"]: r for r in read_rows(run)}
    assert len(rows) == 3 and rows["q2"]["question"] == edited[1]["question"]
    assert rows["q3"]["golds"] == ["Lise Ambrath"] and rows["q3"]["metrics"]["em"] == 0.0
    assert summary["n"] == 3 and summary["metrics"]["em"] == pytest.approx(200 / 3)


def test_a_changed_task_is_a_changed_question(tmp_path: Path) -> None:
    data, run = jsonl(tmp_path / "q.jsonl", questions(2)), tmp_path / "run"
    evaluate("vanilla", data, run, answering())
    changed = questions(2)
    changed[0] |= {"task": "strategyqa", "answers": ["yes"]}
    jsonl(data, changed)
    with pytest.raises(RunDirError, match=r"q1 \(gold and task changed\)"):
        evaluate("vanilla", data, run, answering())


def test_a_rebuilt_or_changed_index_is_refused_on_resume(
    tmp_path: Path, bm25_dir: Path, corpus_file: Path
) -> None:
    data, run = jsonl(tmp_path / "q.jsonl", questions(4)), tmp_path / "run"
    evaluate("vanilla", data, run, answering(), index=str(bm25_dir), limit=2)
    manifest = json.loads((bm25_dir / "noterag-index.json").read_text())
    config = json.loads((run / "run.json").read_text())
    assert config["index_build"] == {str(bm25_dir.resolve()): manifest["build_id"]}
    evaluate("vanilla", data, run, answering(), index=str(bm25_dir), limit=3)  # same index: fine
    build_bm25_index(corpus_file, bm25_dir, progress=False)  # the same path, a new index
    model = answering()
    with pytest.raises(RunDirError) as raised:
        evaluate("vanilla", data, run, model, index=str(bm25_dir))
    message = str(raised.value)
    assert f"{bm25_dir.resolve()} was rebuilt or changed" in message and "--force" in message
    assert model.calls == []
    summary = evaluate("vanilla", data, run, model, index=str(bm25_dir), force=True)
    assert summary["n"] == 4 and len(model.calls) == 4
    # a change in place (upsert) is a change too
    from noterag.retrievers import Bm25Index

    Bm25Index(bm25_dir).upsert([{"id": "new", "text": "A new passage."}])
    with pytest.raises(RunDirError, match="rebuilt or changed"):
        evaluate("vanilla", data, run, model, index=str(bm25_dir))


def test_an_index_rebuilt_during_the_run_stops_it(
    tmp_path: Path, bm25_dir: Path, corpus_file: Path
) -> None:
    data, run = jsonl(tmp_path / "q.jsonl", questions(4)), tmp_path / "run"
    rebuilt: list[bool] = []

    def answer(prompt: str) -> str:
        if "Question 2:" in prompt and not rebuilt:
            build_bm25_index(corpus_file, bm25_dir, progress=False)  # `index --force` meanwhile
            rebuilt.append(True)
        return GOLD

    with pytest.raises(NoteragError) as raised:
        evaluate("vanilla", data, run, ScriptedModel(script={"answer": answer}),
                 index=str(bm25_dir), concurrency=1)  # fmt: skip
    message = str(raised.value)
    assert f"{bm25_dir.resolve()} was rebuilt or changed during the run" in message
    assert "stopped after 1 of 4 questions" in message
    # the question that saw the rebuild is not kept: its passages may come from either index
    assert [r["id"] for r in read_rows(run)] == ["q1"]


# =========================================================================== 2. failures


def explode(prompt: str) -> str:
    raise RuntimeError("the model\nexploded")


def eval_cli(data: Path, index: Path, out: Path, *extra: str) -> Any:
    return cli("eval", "-m", "vanilla", "-d", str(data), "-i", str(index), "--out", str(out),
               "--model", "openai:m", *extra)  # fmt: skip


def last_line(result: Any) -> str:
    return [line for line in result.stderr.splitlines() if line.strip()][-1]


def test_eval_fails_when_every_question_failed(
    tmp_path: Path, bm25_dir: Path, scripted_cli: dict[str, Any]
) -> None:
    scripted_cli["model"] = ScriptedModel(script={"answer": explode})
    data, run = jsonl(tmp_path / "q.jsonl", questions(4)), tmp_path / "run"
    result = eval_cli(data, bm25_dir, run)
    assert result.exit_code == 1, result.output
    line = last_line(result)
    assert line.startswith("error: 4 of 4 questions failed (nothing was answered)"), line
    assert "RuntimeError: the model exploded" in line and "--retry-errors" in line
    # the run is on disk and its summary printed
    assert json.loads((run / "summary.json").read_text())["n_errors"] == 4
    assert "failed questions" in result.stdout


def test_a_failure_rate_over_max_error_rate_fails_the_run(
    tmp_path: Path, bm25_dir: Path, scripted_cli: dict[str, Any]
) -> None:
    def answer(prompt: str) -> str:
        return explode(prompt) if "Question 3:" in prompt else GOLD

    scripted_cli["model"] = ScriptedModel(script={"answer": answer})
    data, run = jsonl(tmp_path / "q.jsonl", questions(6)), tmp_path / "run"
    result = eval_cli(data, bm25_dir, run)  # 1 of 6 = 17 %, over the default 10 %
    assert result.exit_code == 1, result.output
    assert last_line(result).startswith(
        "error: 1 of 6 questions failed (17%, over --max-error-rate 0.1)"
    )
    result = eval_cli(data, bm25_dir, run, "--max-error-rate", "0.2")  # resumed: nothing to ask
    assert result.exit_code == 0, result.output
    assert last_line(result) == (
        f"results in {run}: 6 questions, 1 failed (counts 0; --retry-errors asks it again)"
    )
    assert cli("eval", "--max-error-rate", "1.5").exit_code == 2  # a rate is 0 to 1


def test_a_clean_run_says_none_failed_last(
    tmp_path: Path, bm25_dir: Path, scripted_cli: dict[str, Any]
) -> None:
    data, run = jsonl(tmp_path / "q.jsonl", questions(2)), tmp_path / "run"
    result = eval_cli(data, bm25_dir, run)
    assert result.exit_code == 0, result.output
    assert last_line(result) == f"results in {run}: 2 questions, none failed"


# =========================================================================== 3. settings


def test_a_task_setting_the_dataset_contradicts_is_refused_before_any_call(
    tmp_path: Path,
) -> None:
    data, run, model = jsonl(tmp_path / "q.jsonl", questions(2)), tmp_path / "run", answering()
    for method in ("vanilla", "deepnote"):
        with pytest.raises(ConfigError) as raised:
            evaluate(method, data, run, model, context={"task": "crud"})
        message = str(raised.value)
        assert "task=crud" in message and "q.jsonl" in message and "2 multihop" in message
    assert model.calls == [] and not run.exists()


def test_the_cli_refuses_a_task_setting_the_dataset_contradicts(
    tmp_path: Path, bm25_dir: Path, scripted_cli: dict[str, Any]
) -> None:
    data, run = jsonl(tmp_path / "q.jsonl", questions(2)), tmp_path / "run"
    for method in ("vanilla", "deepnote"):
        line = one_error_line(cli("eval", "-m", method, "-d", str(data), "-i", str(bm25_dir),
                                  "-c", "task=crud", "--out", str(run)))  # fmt: skip
        assert "task=crud" in line and "q.jsonl" in line and "2 multihop" in line
    assert scripted_cli["specs"] == [] and not run.exists()
    # the task the dataset has, said again, is no contradiction
    sqa = jsonl(tmp_path / "s.jsonl", [{"id": "s1", "question": "Is the Ostra a river?",
                                       "answers": ["yes"], "task": "strategyqa"}])  # fmt: skip
    result = cli("eval", "-m", "vanilla", "-d", str(sqa), "-i", str(bm25_dir), "-c",
                 "task=strategyqa", "--out", str(run))  # fmt: skip
    assert result.exit_code == 0, result.output
    (row,) = read_rows(run)
    assert row["task"] == row["context"]["task"] == "strategyqa"


@pytest.mark.parametrize(("method", "task"), [("resp", "asqa"), ("ircot", "strategyqa")])
def test_a_dataset_task_the_method_cannot_answer_is_refused_before_any_call(
    tmp_path: Path, bm25_dir: Path, scripted_cli: dict[str, Any], method: str, task: str
) -> None:
    answers = [["Aurelio Fenwick"]] if task == "asqa" else ["yes"]
    data = jsonl(tmp_path / "q.jsonl", [{"id": "x1", "question": "Q?", "answers": answers,
                                         "task": task}])  # fmt: skip
    line = one_error_line(cli("eval", "-m", method, "-d", str(data), "-i", str(bm25_dir),
                              "--out", str(tmp_path / "run")))  # fmt: skip
    assert method in line and repr(task) in line and "q.jsonl" in line
    assert scripted_cli["specs"] == [] and not (tmp_path / "run").exists()


def test_check_task_knows_each_methods_answer_prompts() -> None:
    from noterag.core.tasks import check_task
    from noterag.registry.methods import METHODS

    deepnote = METHODS["deepnote"]
    check_task(METHODS["adaptive-note"], "crud")
    check_task(deepnote, "strategyqa", deepnote.context(profile="official"))
    with pytest.raises(ConfigError, match=r"deepnote .*'crud'.*multihop"):
        check_task(deepnote, "crud")
    with pytest.raises(ConfigError, match="'crud'"):
        check_task(METHODS["vanilla"], "crud")  # no crud answer prompt
    with pytest.raises(ConfigError, match="crud"):
        check_task(METHODS["chain-of-note"], "crud")  # refused by its settings


def test_run_json_and_rows_record_the_tasks_that_ran(tmp_path: Path) -> None:
    data = jsonl(tmp_path / "mixed.jsonl", [
        questions(1)[0],
        {"id": "s1", "question": "Is the Ostra a river?", "answers": ["yes"], "task": "strategyqa"},
    ])  # fmt: skip
    run, model = tmp_path / "run", ScriptedModel(script={"answer": "yes"})
    evaluate("vanilla", data, run, model)
    assert json.loads((run / "run.json").read_text())["tasks"] == {"multihop": 1, "strategyqa": 1}
    assert {r["id"]: r["task"] for r in read_rows(run)} == {"q1": "multihop", "s1": "strategyqa"}
    with pytest.raises(ConfigError, match="task=strategyqa"):
        evaluate("vanilla", data, tmp_path / "other", model, context={"task": "strategyqa"})


# =========================================================================== 4. queueing


def test_the_local_model_answers_one_question_at_a_time_by_default(
    tmp_path: Path, bm25_dir: Path, scripted_cli: dict[str, Any]
) -> None:
    data = jsonl(tmp_path / "q.jsonl", questions(3))
    for model, expected in (("local", 1), ("openai:m", 4)):
        run = tmp_path / model.replace(":", "-")
        result = cli("eval", "-m", "vanilla", "-d", str(data), "-i", str(bm25_dir), "--model",
                     model, "--out", str(run))  # fmt: skip
        assert result.exit_code == 0, result.output
        assert json.loads((run / "run.json").read_text())["concurrency"] == expected
        assert "queueing" not in result.stdout
        assert json.loads((run / "summary.json").read_text())["latency_includes_queueing"] is False


def test_more_questions_at_once_than_the_local_server_serves_is_said(
    tmp_path: Path, bm25_dir: Path, scripted_cli: dict[str, Any]
) -> None:
    data, run = jsonl(tmp_path / "q.jsonl", questions(3)), tmp_path / "run"
    result = cli("eval", "-m", "vanilla", "-d", str(data), "-i", str(bm25_dir), "--model",
                 "local", "-j", "3", "--out", str(run))  # fmt: skip
    assert result.exit_code == 0, result.output
    assert json.loads((run / "summary.json").read_text())["latency_includes_queueing"] is True
    assert "queueing" in " ".join(result.stdout.split())


# =========================================================================== 13. --out, damage


def test_an_out_that_cannot_be_made_is_one_line_before_any_model_call(
    tmp_path: Path, bm25_dir: Path, scripted_cli: dict[str, Any]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("mine\n")
    data = jsonl(tmp_path / "q.jsonl", questions(2))
    line = one_error_line(eval_cli(data, bm25_dir, blocker / "run"))
    assert f"cannot write {blocker / 'run'}" in line and "a-file is not a directory" in line
    assert scripted_cli["specs"] == [] and blocker.read_text() == "mine\n"


def test_a_full_disk_mid_run_stops_it_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from noterag.eval import runner

    data, run, model = jsonl(tmp_path / "q.jsonl", questions(6)), tmp_path / "run", answering()
    real_extend, appended = runner._ResultsWriter.extend, []

    def extend(self: Any, rows: list[dict[str, Any]]) -> None:  # the eval's group writes
        if len(appended) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        appended.extend(row["id"] for row in rows)
        real_extend(self, rows)

    monkeypatch.setattr(runner._ResultsWriter, "extend", extend)
    with pytest.raises(RunDirError) as raised:
        evaluate("vanilla", data, run, model, concurrency=1)
    message = str(raised.value)
    assert f"cannot write {run / 'results.jsonl'}: No space left on device" in message
    assert "stopped after 2 of 6 questions" in message and "run the same command again" in message
    monkeypatch.undo()
    summary = evaluate("vanilla", data, run, model, concurrency=1)  # space again: it resumes
    assert summary["n"] == 6 and len(model.calls) == 7  # q3's answer was lost, asked again


def test_an_unwritable_run_file_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from noterag.eval import runner

    def refuse(path: Any, value: Any) -> None:
        raise PermissionError(errno.EROFS, "Read-only file system", str(path))

    monkeypatch.setattr(runner, "atomic_write_json", refuse)
    data, run = jsonl(tmp_path / "q.jsonl", questions(2)), tmp_path / "run"
    with pytest.raises(
        RunDirError, match=f"cannot write {run / 'run.json'}: Read-only file system"
    ):
        evaluate("vanilla", data, run, answering())


def zero_files(index_dir: Path, suffix: str) -> None:
    """Overwrite the index's files ending in ``suffix`` with zeros, in place (same size: a
    truncated memory-mapped file would kill the process with SIGBUS, which nothing can catch)."""
    for path in index_dir.iterdir():
        if path.name.endswith(suffix):
            with open(path, "r+b") as f:
                f.write(b"\0" * path.stat().st_size)


@pytest.mark.parametrize(
    "suffix", [".store", ".idx"]
)  # the stored passages, the postings (no .pos: freq-only)
def test_a_damaged_bm25_index_is_named(bm25_dir: Path, suffix: str) -> None:
    from noterag.retrievers.indexdir import IndexDamagedError

    retriever = BM25Retriever(index_dir=bm25_dir)
    assert retriever.search("Velmora Bridge", 3)
    zero_files(bm25_dir, suffix)
    with pytest.raises(IndexDamagedError) as raised:
        retriever.search("Velmora Bridge architect", 3)
    message = str(raised.value)
    assert str(bm25_dir) in message and "damaged" in message and "noterag index" in message


def test_a_damaged_index_found_mid_run_stops_the_run(
    tmp_path: Path, bm25_dir: Path, scripted_cli: dict[str, Any]
) -> None:
    def answer(prompt: str) -> str:
        if "Question 1:" in prompt:
            zero_files(bm25_dir, ".idx")
        return GOLD

    scripted_cli["model"] = ScriptedModel(script={"answer": answer})
    data, run = jsonl(tmp_path / "q.jsonl", questions(4)), tmp_path / "run"
    result = eval_cli(data, bm25_dir, run, "-j", "1")
    assert result.exit_code == 1 and "Traceback" not in result.output
    line = last_line(result)
    assert line.startswith("error: ") and str(bm25_dir.resolve()) in line and "damaged" in line
    assert "stopped after 1 of 4 questions" in line
    assert [r["id"] for r in read_rows(run)] == ["q1"]


def test_a_damaged_dense_passages_file_is_named(tmp_path: Path, corpus_file: Path) -> None:
    from noterag.retrievers.indexdir import IndexDamagedError

    out = tmp_path / "dense"
    build_dense(corpus_file, out)
    retriever = DenseRetriever(index_dir=str(out), embeddings=Hashing())
    assert retriever.search("Velmora Bridge", 2)
    zero_files(out, "passages.jsonl")
    with pytest.raises(IndexDamagedError, match=r"passages\.jsonl.*damaged"):
        retriever.search("Velmora Bridge", 2)


# =========================================================================== 14. consistency


def test_a_smaller_limit_reports_what_this_command_ran(
    tmp_path: Path, bm25_dir: Path, scripted_cli: dict[str, Any]
) -> None:
    data, run, model = jsonl(tmp_path / "q.jsonl", questions(5)), tmp_path / "run", answering()
    evaluate("vanilla", data, run, model)
    summary = evaluate("vanilla", data, run, model, limit=3)
    assert len(model.calls) == 5  # nothing asked again
    assert summary["n"] == summary["questions"] == 3
    assert compute_summary(run)["n"] == 3  # compare and --fair-topk-from read the same
    assert len(read_rows(run)) == 5  # the other answers stay for a larger --limit
    result = eval_cli(data, bm25_dir, tmp_path / "cli")
    assert result.exit_code == 0
    result = eval_cli(data, bm25_dir, tmp_path / "cli", "--limit", "3")
    assert result.exit_code == 0 and "3/3 questions" in result.stdout, result.stdout


def test_compare_labels_runs_on_different_datasets_apart(tmp_path: Path) -> None:
    runs = []
    for name in ("hotpotqa", "musique"):
        folder = tmp_path / name
        folder.mkdir()
        data = jsonl(folder / "questions.jsonl", questions(2))
        runs.append(tmp_path / f"run-{name}")
        evaluate("vanilla", data, runs[-1], answering())
    table = compare(runs).splitlines()
    labels = [row.split(" | ")[0].lstrip("| ") for row in table[2:]]
    assert len(set(labels)) == 2 and "hotpotqa" in labels[0] and "musique" in labels[1]
    # the very same configuration twice: told apart by their directories
    twin = tmp_path / "twin"
    evaluate("vanilla", tmp_path / "hotpotqa" / "questions.jsonl", twin, answering())
    labels = [row.split(" | ")[0].lstrip("| ") for row in compare([runs[0], twin]).splitlines()[2:]]
    assert len(set(labels)) == 2 and "twin" in labels[1]


def test_a_leftover_build_directory_is_named_when_the_index_is_missing(
    tmp_path: Path, scripted_cli: dict[str, Any]
) -> None:
    data = jsonl(tmp_path / "q.jsonl", questions(1))
    leftover = tmp_path / ".idx.building-0123456789ab"
    leftover.mkdir()
    with pytest.raises(NoteragError, match=r"\.idx\.building-0123456789ab is an unfinished build"):
        evaluate("vanilla", data, tmp_path / "run", answering(), index=str(tmp_path / "idx"))


def test_the_cli_names_a_leftover_build_directory(
    tmp_path: Path, scripted_cli: dict[str, Any]
) -> None:
    data = jsonl(tmp_path / "q.jsonl", questions(1))
    (tmp_path / ".idx.building-0123456789ab").mkdir()
    line = one_error_line(eval_cli(data, tmp_path / "idx", tmp_path / "run"))
    assert ".idx.building-0123456789ab is an unfinished build" in line


@pytest.mark.parametrize("dense", [False, True])
def test_an_index_out_that_cannot_be_written_is_named(
    tmp_path: Path, corpus_file: Path, dense: bool
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("mine\n")
    out = blocker / "idx"
    with pytest.raises(NoteragError) as raised:
        build_dense(corpus_file, out) if dense else build_bm25_index(corpus_file, out)
    assert str(raised.value) == f"cannot write the index to {out}: {blocker} is not a directory"
    line = one_error_line(cli("index", str(corpus_file), "--out", str(out)))
    assert f"cannot write the index to {out}" in line


def test_a_read_only_or_full_disk_during_a_build_is_named(
    tmp_path: Path, corpus_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from noterag.retrievers import bm25

    real_mkdir = Path.mkdir

    def read_only(self: Path, *args: Any, **kwargs: Any) -> None:
        if ".building-" in self.name:
            raise OSError(errno.EROFS, "Read-only file system", str(self))
        real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", read_only)
    with pytest.raises(
        NoteragError, match=r"cannot write the index to .*idx: Read-only file system"
    ):
        build_bm25_index(corpus_file, tmp_path / "idx", progress=False)
    monkeypatch.undo()

    def full(*args: Any) -> Any:  # what tantivy raises when a segment cannot be written
        raise ValueError("An IO error occurred: 'No space left on device (os error 28)'")

    monkeypatch.setattr(bm25, "_to_document", full)
    with pytest.raises(NoteragError) as raised:
        build_bm25_index(corpus_file, tmp_path / "idx", progress=False)
    message = str(raised.value)
    assert message.startswith(f"cannot write the index to {tmp_path / 'idx'}: ")
    assert "No space left on device" in message
    assert not (tmp_path / "idx").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
