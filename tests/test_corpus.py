"""Corpus JSONL reading: both line formats, and every bad line reported by its number."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from noterag.retrievers import CorpusStats, iter_corpus

from noterag.errors import CorpusError


def write_lines(path: Path, lines: list[str | bytes]) -> Path:
    data = b"".join((x if isinstance(x, bytes) else x.encode("utf-8")) + b"\n" for x in lines)
    path.write_bytes(data)
    return path


def jl(obj: object) -> str:
    return json.dumps(obj)


def test_title_text_lines_with_int_ids_become_strings(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "corpus.jsonl",
        [
            jl({"id": 7, "title": "Seven", "text": "the seventh passage"}),
            jl({"id": "b", "text": "no title here", "extra": 1}),
        ],
    )
    assert list(iter_corpus(path)) == [
        {"id": "7", "title": "Seven", "text": "the seventh passage"},
        {"id": "b", "title": "", "text": "no title here"},
    ]


def test_flashrag_contents_first_line_is_the_quoted_title(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "wiki.jsonl",
        [
            jl({"id": "1", "contents": '"Aaron"\nAaron is a prophet.\nSecond line.'}),
            jl({"id": "2", "contents": "Plain Title\nBody text."}),
            jl({"id": "3", "contents": "no newline, so all of this is text"}),
        ],
    )
    passages = list(iter_corpus(path))
    assert passages[0] == {"id": "1", "title": "Aaron", "text": "Aaron is a prophet.\nSecond line."}
    assert passages[1] == {"id": "2", "title": "Plain Title", "text": "Body text."}
    assert passages[2] == {"id": "3", "title": "", "text": "no newline, so all of this is text"}


def test_blank_lines_are_skipped_silently(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "c.jsonl",
        ["", jl({"id": "a", "text": "x"}), "   ", jl({"id": "b", "text": "y"})],
    )
    stats = CorpusStats()
    assert [p["id"] for p in iter_corpus(path, stats=stats)] == ["a", "b"]
    assert stats.skipped == 0 and stats.passages == 2


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(CorpusError, match="not found") as info:
        list(iter_corpus(missing))
    assert str(missing) in str(info.value)


@pytest.mark.parametrize(
    ("bad_line", "reason"),
    [
        ('{"id": "x", "text": "unterminated', "not valid JSON"),
        ('["a", "list"]', "expected a JSON object, got list"),
        (jl({"title": "t", "text": "no id"}), 'missing "id"'),
        (jl({"id": "x", "title": "no text"}), 'missing "text"'),
        (jl({"id": "x", "text": 42}), '"text" must be a string'),
        (jl({"id": None, "text": "null id"}), 'missing "id"'),
        (jl({"id": 1.5, "text": "float id"}), '"id" must be a string or integer'),
    ],
)
def test_bad_line_error_names_file_and_line(tmp_path: Path, bad_line: str, reason: str) -> None:
    path = write_lines(
        tmp_path / "corpus.jsonl",
        [jl({"id": "a", "text": "ok"}), "", bad_line, jl({"id": "b", "text": "ok"})],
    )
    with pytest.raises(CorpusError) as info:
        list(iter_corpus(path))
    message = str(info.value)
    assert message.startswith("corpus.jsonl line 3: ")
    assert reason in message
    assert "\n" not in message


def test_non_utf8_line_reports_its_line_number(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "corpus.jsonl",
        [jl({"id": "a", "text": "ok"}), b'{"id": "b", "text": "caf\xe9"}'],
    )
    with pytest.raises(CorpusError, match=r"corpus.jsonl line 2: not valid UTF-8"):
        list(iter_corpus(path))


def test_duplicate_id_names_both_lines(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "corpus.jsonl",
        [
            jl({"id": 5, "text": "first"}),
            jl({"id": "x", "text": "y"}),
            jl({"id": "5", "text": "dup"}),
        ],
    )
    with pytest.raises(CorpusError, match=r"line 3: duplicate id '5' \(first seen on line 1\)"):
        list(iter_corpus(path))


def test_skip_bad_lines_skips_and_counts(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "corpus.jsonl",
        [
            jl({"id": "a", "text": "good"}),
            "not json",
            b"\xff\xfe",
            jl({"id": "a", "text": "duplicate"}),
            jl({"id": "b", "text": "good too"}),
        ],
    )
    stats = CorpusStats()
    passages = list(iter_corpus(path, skip_bad_lines=True, stats=stats))
    assert [p["text"] for p in passages] == ["good", "good too"]
    assert stats.passages == 2
    assert stats.skipped == 3
    assert [line for line, _ in stats.skipped_examples] == [2, 3, 4]
    assert "duplicate id" in stats.skipped_examples[2][1]


def test_reading_is_lazy_so_huge_files_stream(tmp_path: Path) -> None:
    # The first passage arrives before the reader has looked at the broken last line.
    path = write_lines(tmp_path / "corpus.jsonl", [jl({"id": "a", "text": "first"}), "{broken"])
    passages = iter_corpus(path)
    assert next(passages)["id"] == "a"
    with pytest.raises(CorpusError, match="line 2"):
        next(passages)
