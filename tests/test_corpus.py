"""Corpus JSONL reading: both line formats, and every bad line reported by its number."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from noterag.base.errors import CorpusError
from noterag.retrievers import CorpusStats, iter_corpus
from noterag.retrievers.corpus_files import _COMPRESSED, _compressed


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


# --------------------------------------------------------------------------- hostile corpora


def test_a_passage_without_title_and_text_is_a_bad_line(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "corpus.jsonl",
        [
            jl({"id": "t", "title": "Title only", "text": ""}),  # still searchable by its title
            jl({"id": "e", "title": " ", "text": " \n\t"}),
        ],
    )
    with pytest.raises(CorpusError, match=r"line 2: empty passage \(no title and no text\)"):
        list(iter_corpus(path))
    stats = CorpusStats()
    assert [p["id"] for p in iter_corpus(path, skip_bad_lines=True, stats=stats)] == ["t"]
    assert stats.skipped_by_kind == {"empty passage": 1}


def test_every_kind_of_bad_line_is_counted_by_kind(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "corpus.jsonl",
        [
            jl({"id": "a", "text": "good"}),
            "{not json",
            "{also not json",
            b'{"id": "u", "text": "\xff"}',
            "[1, 2]",
            jl({"text": "no id"}),
            jl({"id": "x", "title": 3, "text": "t"}),
            jl({"id": "y", "text": ""}),
            jl({"id": "a", "text": "again"}),
            jl({"id": "b", "text": "good too"}),
        ],
    )
    stats = CorpusStats()
    assert [p["id"] for p in iter_corpus(path, skip_bad_lines=True, stats=stats)] == ["a", "b"]
    assert stats.skipped_by_kind == {
        "invalid JSON": 2,
        "invalid UTF-8": 1,
        "not an object": 1,
        "bad id": 1,
        "bad field": 1,
        "empty passage": 1,
        "duplicate id": 1,
    }
    assert stats.skipped == 8 and stats.passages == 2
    assert stats.bytes_read == path.stat().st_size


def test_a_10_mb_line_is_a_passage_and_indexes(tmp_path: Path) -> None:
    # Decision: one long passage (a whole article) is data, not an error, up to MAX_LINE_BYTES.
    from noterag.retrievers import BM25Retriever, build_bm25_index

    long_text = "filler " * 1_500_000 + "zanzibarite"  # ~10.5 MB
    path = write_lines(
        tmp_path / "corpus.jsonl",
        [jl({"id": "long", "title": "Long", "text": long_text}), jl({"id": "s", "text": "short"})],
    )
    assert path.stat().st_size > 10_000_000
    assert [len(p["text"]) for p in iter_corpus(path)] == [len(long_text), 5]
    build_bm25_index(path, tmp_path / "index", progress=False)
    hits = BM25Retriever(index_dir=str(tmp_path / "index")).invoke("zanzibarite")
    assert [d.metadata["id"] for d in hits] == ["long"]


def test_a_line_over_the_limit_is_rejected_without_reading_it_whole(tmp_path: Path) -> None:
    from noterag.retrievers import corpus as corpus_module

    limit_mib = corpus_module.MAX_LINE_BYTES // 2**20
    huge = b"x" * (corpus_module.MAX_LINE_BYTES + 5)  # no JSON at all: a file that is not JSONL
    path = write_lines(
        tmp_path / "c.jsonl", [jl({"id": "a", "text": "ok"}), huge, jl({"id": "b", "text": "ok"})]
    )
    with pytest.raises(
        CorpusError, match=rf"line 2: line is [\d,]+ bytes, over the {limit_mib} MiB limit"
    ):
        list(iter_corpus(path))
    stats = CorpusStats()
    assert [p["id"] for p in iter_corpus(path, skip_bad_lines=True, stats=stats)] == ["a", "b"]
    assert stats.skipped_by_kind == {"line too long": 1}
    assert stats.skipped_examples[0][0] == 2
    assert stats.bytes_read == path.stat().st_size


@pytest.mark.parametrize("limit", [8, 9, 10, 11, 64])
def test_line_limit_boundaries_keep_line_numbers(
    tmp_path: Path, limit: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Small limits and pieces exercise the piecewise skip at every offset of the newline.
    from noterag.retrievers import corpus as corpus_module

    monkeypatch.setattr(corpus_module, "MAX_LINE_BYTES", 40)
    monkeypatch.setattr(corpus_module, "READ_CHUNK", limit)
    short = jl({"id": "a", "text": "ok"})  # 26 bytes + newline: under the limit
    exact = jl({"id": "b", "text": "x" * 15})  # 39 bytes + newline: exactly the limit
    path = write_lines(
        tmp_path / "c.jsonl",
        [short, "y" * 41, exact, "z" * 100, short.replace('"a"', '"c"'), "w" * 45],
    )
    stats = CorpusStats()
    assert [p["id"] for p in iter_corpus(path, skip_bad_lines=True, stats=stats)] == ["a", "b", "c"]
    assert [line for line, _ in stats.skipped_examples] == [2, 4, 6]
    assert stats.bytes_read == path.stat().st_size


_FUZZ_LINES = st.lists(
    st.one_of(
        st.binary(max_size=60),
        st.text(max_size=40).map(lambda t: t.encode("utf-8", "surrogatepass")),
        st.fixed_dictionaries(
            {
                "id": st.one_of(
                    st.none(),
                    st.booleans(),
                    st.integers(0, 3),
                    st.sampled_from(["a", "b", "", " "]),
                    st.floats(),
                ),
                "text": st.one_of(st.text(max_size=10), st.integers(), st.none()),
            },
            optional={"title": st.one_of(st.text(max_size=5), st.none(), st.integers())},
        ).map(lambda d: json.dumps(d).encode()),
    ).map(lambda line: line.replace(b"\n", b" ").replace(b"\r", b" ")),
    max_size=12,
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(lines=_FUZZ_LINES)
def test_fuzzed_corpora_yield_passages_or_name_the_bad_line(
    tmp_path: Path, lines: list[bytes]
) -> None:
    path = tmp_path / "fuzz.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    head = path.read_bytes()
    # Not text, and it starts as an xz / zstd / zip / bzip2 file does (hypothesis found
    # b"\xfd7zXZ\x00"): named as compressed, not read line by line.
    if _compressed(head) and any(
        head.startswith(magic) and block in head[:16] for magic, block, _, _ in _COMPRESSED
    ):
        with pytest.raises(CorpusError, match=r"^fuzz\.jsonl is \w+-compressed: "):
            list(iter_corpus(path, skip_bad_lines=True))
        return
    # It starts as gzip does (hypothesis found b"\x1f\x8b\x08"): read as gzip, which it is not
    # whole: one error naming the file (a gzip corpus is read as it is).
    if head.startswith(b"\x1f\x8b"):
        try:
            list(iter_corpus(path, skip_bad_lines=True))
        except CorpusError as error:
            assert str(error).startswith("fuzz.jsonl") and "gzip" in str(error), error
        return
    nonblank = [i for i, line in enumerate(lines, 1) if line.strip()]
    stats = CorpusStats()
    passages = list(iter_corpus(path, skip_bad_lines=True, stats=stats))
    assert stats.passages + stats.skipped == len(nonblank)
    assert len({p["id"] for p in passages}) == len(passages)  # ids stay unique
    for p in passages:
        assert set(p) == {"id", "title", "text"} and all(isinstance(v, str) for v in p.values())
        assert p["id"].strip() and (p["title"].strip() or p["text"].strip())
    if stats.skipped:
        first_bad = stats.skipped_examples[0][0]
        with pytest.raises(CorpusError, match=rf"^fuzz\.jsonl line {first_bad}: ") as info:
            list(iter_corpus(path))
        assert "\n" not in str(info.value)
    else:
        assert list(iter_corpus(path)) == passages
