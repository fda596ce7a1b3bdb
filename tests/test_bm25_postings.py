"""BM25 postings without positions: the same answers as an index with them, and old indexes
(built with positions, before ``postings`` was recorded) still open, answer and take changes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from noterag.retrievers import Bm25Index, build_bm25_index
from noterag.retrievers import bm25 as bm25_module

DATA = Path(bm25_module.__file__).resolve().parents[1] / "noterag" / "data"
CORPUS = DATA / "sample_corpus.jsonl"


def _queries() -> list[str]:
    """The sample questions, and each passage's title and first sentence: queries that hit
    titles, texts and both, with repeated words (boosted clauses) among them."""
    questions = [
        json.loads(line)["question"]
        for line in (DATA / "sample_questions.jsonl").read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    passages = [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines()]
    return questions + [p["title"] for p in passages] + [p["text"].split(".")[0] for p in passages]


def _build(tmp_path: Path, postings: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(bm25_module, "POSTINGS", postings)
    out = tmp_path / postings
    build_bm25_index(CORPUS, out, progress=False)
    return out


def _positions_bytes(index_dir: Path) -> int:
    return sum(f.stat().st_size for f in index_dir.glob("*.pos"))


def _ranking(index: Bm25Index, query: str) -> list[tuple[str, float]]:
    return [(p["id"], round(score, 5)) for p, score in index.search(query, 10)]


@pytest.fixture
def indexes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    positions = _build(tmp_path, "position", monkeypatch)
    # What an index built before this change looks like: no ``postings`` in its manifest.
    manifest_path = positions / bm25_module.MANIFEST_NAME
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    del manifest["postings"]
    manifest_path.write_text(json.dumps(manifest), encoding="utf-8")
    monkeypatch.undo()
    return positions, _build(tmp_path, bm25_module.POSTINGS, monkeypatch)


def test_new_indexes_hold_frequencies_without_positions(indexes: tuple[Path, Path]) -> None:
    positions, freq = indexes
    assert bm25_module.POSTINGS == "freq"
    assert Bm25Index(freq).manifest["postings"] == "freq"
    # tantivy writes a .pos file per segment either way; without positions it is a bare header.
    assert _positions_bytes(positions) > 5 * _positions_bytes(freq)


def test_freq_only_index_answers_as_the_positions_index(indexes: tuple[Path, Path]) -> None:
    positions, freq = (Bm25Index(path) for path in indexes)
    queries = _queries()
    assert len(queries) > 100
    for query in queries:
        got, expected = _ranking(freq, query), _ranking(positions, query)
        # the same scores in the same order; passages tied on a score may come in either order
        # (the index is written by two threads), and at the cut-off either of them may be in
        assert [s for _, s in got] == [s for _, s in expected], query
        last = expected[-1][1] if expected else None
        for score in {s for _, s in expected} - {last}:
            tied = {i for i, s in got if s == score}
            assert tied == {i for i, s in expected if s == score}, query
    assert sum(bool(_ranking(freq, q)) for q in queries) == len(queries)


def test_old_positions_index_opens_and_takes_changes(indexes: tuple[Path, Path]) -> None:
    old = Bm25Index(indexes[0])
    assert "postings" not in old.manifest
    assert old.num_passages == 50
    old.upsert([{"id": "new", "title": "Quillfeather Lighthouse", "text": "A lamp on a reef."}])
    reopened = Bm25Index(indexes[0])
    assert reopened.num_passages == 51
    assert reopened.search("Quillfeather lighthouse", 1)[0][0]["id"] == "new"
