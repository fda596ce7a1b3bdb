"""The one retriever-spec rule (noterag.retrievers.spec): scheme or path, bare directories,
absolute locations; shared by load_retriever, run_eval and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from noterag.base.errors import ConfigError, IndexNotFoundError
from noterag.retrievers import INDEX_KINDS, RETRIEVER_SCHEMES, load_retriever
from noterag.retrievers.spec import RetrieverSpec, normalize_spec, parse_spec


@pytest.fixture
def cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh working directory, for specs written relative to it."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def fake_index(directory: Path, kind: str) -> Path:
    """A directory whose manifest declares ``kind`` (the parser reads nothing else)."""
    directory.mkdir(parents=True)
    (directory / "noterag-index.json").write_text(json.dumps({"kind": kind}))
    return directory


def test_a_scheme_spec_gets_an_absolute_directory(cwd: Path) -> None:
    assert parse_spec("bm25:idx") == RetrieverSpec("bm25", "idx")
    assert normalize_spec("bm25:idx") == f"bm25:{cwd / 'idx'}"
    assert normalize_spec("dense:sub/../d") == f"dense:{cwd / 'd'}"
    assert normalize_spec(f"bm25:{cwd}/x:y") == f"bm25:{cwd}/x:y"  # colons after the first


def test_schemes_are_case_insensitive_and_whitespace_is_dropped(tmp_path: Path) -> None:
    assert normalize_spec(f"  BM25:{tmp_path}  ") == f"bm25:{tmp_path}"
    assert parse_spec(" Dense: d ") == RetrieverSpec("dense", "d")


def test_a_tilde_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert normalize_spec("dense:~/d") == f"dense:{tmp_path / 'd'}"
    fake_index(tmp_path / "idx", "bm25")
    assert normalize_spec("~/idx") == f"bm25:{tmp_path / 'idx'}"


def test_a_bare_directory_takes_the_scheme_of_its_manifest(cwd: Path) -> None:
    fake_index(cwd / "b", "bm25")
    fake_index(cwd / "d", "dense")
    assert normalize_spec("b") == f"bm25:{cwd / 'b'}"
    assert normalize_spec("./d/") == f"dense:{cwd / 'd'}"
    # No manifest, an unknown kind or a file: the BM25 loader is the one to explain.
    (cwd / "photos").mkdir()
    fake_index(cwd / "odd", "faiss")
    (cwd / "notes.txt").write_text("hello")
    for name in ("photos", "odd", "notes.txt"):
        assert parse_spec(name) == RetrieverSpec("bm25", name)


def test_a_path_with_a_colon_stays_a_path(cwd: Path) -> None:
    # Not there: the prefix ("./a", "/…/a") is not a scheme's shape, so it is a missing index.
    for missing in ("./a:b", f"{cwd}/a:b", "1st:idx", "_x:idx"):
        with pytest.raises(IndexNotFoundError, match="no index at"):
            parse_spec(missing)
    # There: an existing path wins over an unknown scheme of the right shape.
    fake_index(cwd / "idx:v2", "bm25")
    assert normalize_spec("idx:v2") == f"bm25:{cwd / 'idx:v2'}"
    assert normalize_spec("./idx:v2") == f"bm25:{cwd / 'idx:v2'}"


def test_a_registered_scheme_wins_over_a_file_of_that_name(cwd: Path) -> None:
    fake_index(cwd / "bm25:x", "dense")
    assert parse_spec("bm25:x") == RetrieverSpec("bm25", "x")
    assert normalize_spec("./bm25:x") == f"dense:{cwd / 'bm25:x'}"  # the way to name it


def test_unknown_schemes_and_empty_specs_are_one_clear_error() -> None:
    with pytest.raises(
        ConfigError, match=r"unknown retriever scheme 'solr:'.*known: bm25:, dense:"
    ):
        parse_spec("solr:http://localhost:8983")
    with pytest.raises(ConfigError, match=r"unknown retriever scheme 'my-idx\+v2:'"):
        parse_spec("my-idx+v2:x")
    with pytest.raises(ConfigError, match="names no location after 'bm25:'"):
        parse_spec("bm25:  ")
    for empty in ("", "   "):
        with pytest.raises(IndexNotFoundError, match="the index value is empty"):
            parse_spec(empty)


def test_a_missing_bare_path_names_an_unfinished_build(tmp_path: Path) -> None:
    (tmp_path / ".idx.building-0123456789ab").mkdir()
    with pytest.raises(IndexNotFoundError, match="no index at .*unfinished build.*noterag index"):
        parse_spec(str(tmp_path / "idx"))


def test_hybrid_parts_are_normalized_one_by_one(cwd: Path) -> None:
    fake_index(cwd / "d", "dense")
    assert normalize_spec("hybrid: bm25:b , d") == f"hybrid:bm25:{cwd / 'b'},dense:{cwd / 'd'}"
    url = "es:http://localhost:9200/hotpotqa"
    assert normalize_spec(f"hybrid:{url},d") == f"hybrid:{url},dense:{cwd / 'd'}"
    for bad in ("hybrid:d", "hybrid:d,,d", "hybrid:d,"):
        with pytest.raises(ConfigError, match="two or more"):
            normalize_spec(bad)
    with pytest.raises(ConfigError, match="unknown retriever scheme 'solr:'"):
        normalize_spec("hybrid:d,solr:x")


def test_other_locations_are_kept_as_written() -> None:
    assert (
        normalize_spec("es:http://localhost:9200/hotpotqa") == "es:http://localhost:9200/hotpotqa"
    )
    assert normalize_spec("ES:localhost:9200/x") == "es:localhost:9200/x"


def test_a_newly_registered_backend_is_parsed_like_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[tuple[str, int]] = []
    sentinel = object()

    def factory(location: str, k: int) -> object:
        opened.append((location, k))
        return sentinel

    monkeypatch.setitem(RETRIEVER_SCHEMES, "faiss", factory)
    monkeypatch.setitem(INDEX_KINDS, "faiss", "faiss")
    fake_index(tmp_path / "f", "faiss")
    assert normalize_spec(tmp_path / "f") == f"faiss:{tmp_path / 'f'}"  # a Path works too
    assert load_retriever(str(tmp_path / "f"), k=3) is sentinel
    assert load_retriever(f"faiss:{tmp_path}/f/../f", k=2) is sentinel
    assert opened == [(str(tmp_path / "f"), 3), (str(tmp_path / "f"), 2)]
