"""Retrieval styles in the embedded BM25 index (``noterag index --style``), DeepNote's title
re-ranking, and the Elasticsearch BM25 re-implementation ``bench/ircot_overlap.py`` compares with.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from noterag.base.errors import ConfigError
from noterag.retrievers import load_retriever
from noterag.retrievers.bm25 import Bm25Index, build_bm25_index, make_analyzer
from noterag.retrievers.styles import Hit, get_style, rerank_with_query, title_boost

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _es_reference():  # type: ignore[no-untyped-def]
    pytest.importorskip("regex", reason="the regex package (dev extra) is not installed")
    spec = importlib.util.spec_from_file_location("es_reference", BENCH / "es_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["es_reference"] = module
    spec.loader.exec_module(module)
    return module


PASSAGES = [
    {"id": "a1", "title": "Tide pool", "text": "A tide pool is a rocky pool left by the tide."},
    {"id": "z9", "title": "Tide", "text": "The tide is the rise and fall of the sea."},
    {"id": "m5", "title": "AT&amp;T", "text": "AT&T is a telephone company; it's American."},
    {"id": "k2", "title": "Moon", "text": "The Moon's pull raises the tides of the sea."},
    {"id": "q7", "title": "Paris (film)", "text": "Paris is a 2008 film set in the city."},
    {"id": "r3", "title": "Paris", "text": "Paris is the capital of France; 2,140,526 live there."},
    {"id": "l4", "title": "Lunar month", "text": "Moon, moon, moon: the moon and the moon."},
]


def write_corpus(path: Path, passages: list[dict[str, str]]) -> Path:
    path.write_text("".join(json.dumps(p) + "\n" for p in passages), encoding="utf-8")
    return path


@pytest.fixture
def deepnote_index(tmp_path: Path) -> Path:
    corpus = write_corpus(tmp_path / "corpus.jsonl", PASSAGES)
    build_bm25_index(corpus, tmp_path / "idx", progress=False, style="deepnote")
    return tmp_path / "idx"


# ------------------------------------------------------------------ DeepNote's re-ranking


@pytest.mark.parametrize(
    ("query", "title", "boost"),
    [
        ("Beatles", "Beatles", 1.5),  # the query is the title
        ("The Beatles", "Beatles", 1.5),  # ... after a leading "The "
        ("beatles", "Beatles", 1.2),  # ... ignoring case
        ("AT&T", "AT&amp;T", 1.5),  # titles are compared unescaped
        ("who lived in paris", "Paris", 1.1),  # the lower-cased title is in the query
        ("Who lived in Paris", "Paris", 1.05),  # not there (sic: case kept), but in the core check
        ("Paris", "Paris (film)", 1.2),  # the title without its disambiguation
        ("paris", "Paris (film)", 1.1),  # ... ignoring case
        ("Who directed Paris?", "Paris (film)", 1.05),  # ... inside the query
        ("Who directed Paris?", "London", 1.0),
        ("anything", "", 1.1),  # an empty title is "in" every query (as the original)
    ],
)
def test_title_boost_follows_es_retrieve_branch_for_branch(
    query: str, title: str, boost: float
) -> None:
    assert title_boost(query, title) == boost


def test_rerank_multiplies_and_keeps_the_engines_order_on_ties() -> None:
    hits = [
        Hit("1", "London", "", 2.0),
        Hit("2", "Paris (film)", "", 1.9),
        Hit("3", "Rome", "", 1.9),
        Hit("4", "Paris", "", 1.0),
    ]
    ranked = rerank_with_query("Paris", hits)
    assert [(h.id, h.score) for h in ranked] == [
        ("2", pytest.approx(1.9 * 1.2)),
        ("1", 2.0),
        ("3", 1.9),
        ("4", 1.5),
    ]


# ------------------------------------------------------------------ the embedded index


def test_es_standard_analyzer_cuts_words_as_unicode_does() -> None:
    tokens = make_analyzer("es-standard").analyze(
        "Don't stop: U.S.A. had 3,000 people's votes, 1.5% of 東京 (AT&T) e-mail_x"
    )
    assert tokens == [
        "don't",
        "stop",
        "u.s.a",
        "had",
        "3,000",
        "people's",
        "votes",
        "1.5",
        "of",
        "東",
        "京",
        "at",
        "t",
        "e",
        "mail_x",
    ]


def test_deepnote_style_index_records_its_layout(deepnote_index: Path) -> None:
    manifest = json.loads((deepnote_index / "noterag-index.json").read_text())
    assert manifest["style"] == "deepnote"
    assert manifest["analyzer"] == "es-standard"
    assert manifest["fields"] == ["title", "text", "title_unescape"]
    assert Bm25Index(deepnote_index).style == get_style("deepnote")


def test_deepnote_style_reranks_the_top_50_by_title(deepnote_index: Path) -> None:
    retriever = load_retriever(str(deepnote_index), k=3)
    index = retriever.load()
    raw = index._guarded_search(index.build_query("Moon"), 50)
    docs = retriever.invoke("Moon")
    # BM25 puts the text saying "moon" five times first; the title "Moon" wins after (x1.5).
    assert [p["id"] for p, _ in raw] == ["l4", "k2"]
    assert [d.id for d in docs] == ["k2", "l4"]
    assert docs[0].metadata["score"] == pytest.approx(raw[1][1] * 1.5)


def test_deepnote_style_scores_are_elasticsearchs_times_k1_plus_1(deepnote_index: Path) -> None:
    """tantivy's BM25 is Lucene's with the constant factor k1 + 1 that Lucene 8 dropped, the
    same one-byte length norms, and best_fields as a disjunction-max: on a corpus whose words
    both tokenizers cut alike, every score is the reference's times 2.2."""
    reference = _es_reference().DeepNoteIndex(PASSAGES)
    index = Bm25Index(deepnote_index)
    for query in ["tide pool", "the sea", "Paris film capital", "AT&T American company"]:
        ours = {p["id"]: score for p, score in index._guarded_search(index.build_query(query), 10)}
        expected = {PASSAGES[doc]["id"]: 2.2 * score for doc, score in reference.search(query, 10)}
        assert ours == pytest.approx(expected, rel=1e-5), query


def test_ircot_style_sums_title_and_text_and_keeps_one_hit_per_text(tmp_path: Path) -> None:
    passages = [
        {"id": "p1", "title": "Moon", "text": "The Moon pulls the tide."},
        {"id": "p2", "title": "Moon copy", "text": " the moon pulls the TIDE. "},
        {"id": "p3", "title": "Sea", "text": "The sea is salty."},
    ]
    corpus = write_corpus(tmp_path / "c.jsonl", passages)
    build_bm25_index(corpus, tmp_path / "idx", progress=False, style="ircot")
    index = Bm25Index(tmp_path / "idx")
    assert index.manifest["analyzer"] == "english"
    hits = index.search("moon tide", 5)
    # One of p1/p2 (same text once stripped and lower-cased), never both.
    ids = [p["id"] for p, _ in hits]
    assert len(ids) == 1 and ids[0] in {"p1", "p2"}


def test_upsert_into_a_styled_index_fills_its_fields(deepnote_index: Path) -> None:
    index = Bm25Index(deepnote_index)
    index.upsert([{"id": "n1", "title": "B&amp;Q", "text": "A shop."}])
    hits = index.search("B&Q", 1)
    assert [p["id"] for p, _ in hits] == ["n1"]


def test_unknown_style_is_one_line(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "c.jsonl", PASSAGES)
    with pytest.raises(ConfigError, match=r"^unknown retrieval style 'golden' \(known: "):
        build_bm25_index(corpus, tmp_path / "idx", progress=False, style="golden")
    assert not (tmp_path / "idx").exists()


# ------------------------------------------------------------------ the ES reference


def test_reference_norms_are_lucenes_smallfloat() -> None:
    ref = _es_reference()
    decoded = [ref.byte4_to_int(ref.int_to_byte4(n)) for n in range(5000)]
    # Exact while the byte has room (24 free values, then 4 significant bits), then rounded
    # down to 4 significant bits: never more than an eighth off, never increasing the length.
    assert decoded[:40] == list(range(40))
    assert all(0 <= n - d < max(1, n / 8) for n, d in enumerate(decoded))
    assert decoded == sorted(decoded)
    assert (decoded[40], decoded[41], decoded[100], decoded[1000 % 5000]) == (40, 40, 96, 984)
    assert ref.int_to_byte4(2**31 - 1) == 255


def test_reference_standard_tokens() -> None:
    ref = _es_reference()
    assert ref.standard_tokens("Don't stop: U.S.A. had 3,000 people's votes, 東京") == [
        "don't",
        "stop",
        "u.s.a",
        "had",
        "3,000",
        "people's",
        "votes",
        "東",
        "京",
    ]


# ------------------------------------------------------------------ the command line


def test_index_command_builds_a_styled_index(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from noterag.cli import app

    corpus = write_corpus(tmp_path / "c.jsonl", PASSAGES)
    result = CliRunner().invoke(
        app, ["index", str(corpus), "--out", str(tmp_path / "idx"), "--style", "adaptive-note"]
    )
    assert result.exit_code == 0, result.output
    assert Bm25Index(tmp_path / "idx").manifest["style"] == "deepnote"
    docs = load_retriever(str(tmp_path / "idx"), k=1).invoke("Moon")
    assert [d.id for d in docs] == ["k2"]  # re-ranked: the title "Moon" first

    refused = CliRunner().invoke(
        app, ["index", str(corpus), "--out", str(tmp_path / "d"), "--dense", "--style", "ircot"]
    )
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert refused.exit_code == 1
    assert lines == ["error: --style lays out a BM25 or Elasticsearch index, not a --dense one"]
