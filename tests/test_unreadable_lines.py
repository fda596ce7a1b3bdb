"""Issue 42, defect 8: lines that escaped the bad-line handling. JSON nested 100,000 deep
(the parser's RecursionError: "unexpected RecursionError" from `noterag index`) and an integer
of 5,000 digits (over Python's conversion limit: "unexpected ValueError" from `eval`, a
"tantivy" error from `index`) are bad lines: one error naming the file and line, and
``--skip-bad-lines`` skips them in a corpus."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from noterag.base.errors import CorpusError
from noterag.datasets import DatasetError, load_dataset
from noterag.retrievers.corpus import CorpusStats, iter_corpus
from scripted import cli

DEEP = "[" * 100_000 + "]" * 100_000
LONG_ID = "9" * 5000


def _lines(path: Path, *lines: str) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


@pytest.mark.parametrize(
    ("bad", "reason"),
    [(DEEP, "JSON nested too deeply"),
     (f'{{"id": {LONG_ID}, "title": "t", "text": "x"}}', "a number of more digits")],
    ids=["deep", "long-integer"],
)  # fmt: skip
def test_a_corpus_line_the_parser_cannot_read_is_a_bad_line(
    tmp_path: Path, bad: str, reason: str
) -> None:
    good = json.dumps({"id": "a", "title": "Velmora", "text": "The Velmora Bridge."})
    corpus = _lines(tmp_path / "corpus.jsonl", good, bad)
    with pytest.raises(CorpusError, match=f"corpus.jsonl line 2: {reason}"):
        list(iter_corpus(corpus))
    stats = CorpusStats()
    assert [p["id"] for p in iter_corpus(corpus, skip_bad_lines=True, stats=stats)] == ["a"]
    assert stats.skipped == 1
    # the command line: one error line naming the file and line, then skipped on request
    result = cli("index", str(corpus), "--out", str(tmp_path / "index"))
    assert result.exit_code != 0 and f"line 2: {reason}" in result.output
    assert "unexpected" not in result.output and "tantivy" not in result.output
    result = cli("index", str(corpus), "--out", str(tmp_path / "index"), "--skip-bad-lines")
    assert result.exit_code == 0 and "1 bad line skipped" in result.output


@pytest.mark.parametrize(
    ("bad", "reason"),
    [(f'{{"id": "q2", "question": "q", "answers": {DEEP}}}', "JSON nested too deeply"),
     (f'{{"id": {LONG_ID}, "question": "q", "answers": ["x"]}}', "a number of more digits")],
    ids=["deep", "long-integer"],
)  # fmt: skip
def test_a_dataset_line_the_parser_cannot_read_names_its_line(
    tmp_path: Path, bad: str, reason: str
) -> None:
    good = json.dumps({"id": "q1", "question": "Who?", "answers": ["x"]})
    dataset = _lines(tmp_path / "questions.jsonl", good, bad)
    with pytest.raises(DatasetError, match=f"questions.jsonl line 2: {reason}"):
        load_dataset(dataset, format="noterag")
