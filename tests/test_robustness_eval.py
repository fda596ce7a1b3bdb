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
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from typer.testing import CliRunner

import noterag.models
from noterag.cli import app
from noterag.errors import ConfigError, CorpusError, NoteragError
from noterag.eval import run_eval
from noterag.eval.datasets import DatasetError, load_dataset
from noterag.eval.report import RunDirError, compare, compute_summary
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
