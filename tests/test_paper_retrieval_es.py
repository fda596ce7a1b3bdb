"""Retrieval styles on Elasticsearch (``es:<url>/<index>?style=...``): the index each creates, the
documents and query bodies it sends, and the re-ranking, against ``FakeElasticsearch``.

The expected bodies are spelled out whole, from the official code they reproduce:
thunlp/DeepNote src/es_retrieve.py and src/build_index/es/index_*.py (what Elasticsearch 7's
dynamic mapping made of them), StonyBrookNLP/ircot retriever_server/*.py.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip(
    "langchain_elasticsearch", reason="the es extra (langchain-elasticsearch) is not installed"
)

from fake_elasticsearch import FakeElasticsearch
from noterag.base.errors import ConfigError
from noterag.retrievers import load_retriever
from noterag.retrievers.elastic import build_es_index

INDEX = "wiki"
DYNAMIC = {"type": "text", "fields": {"keyword": {"type": "keyword", "ignore_above": 256}}}
ENGLISH = {"type": "text", "analyzer": "english"}
# Both titles match the one-word query in the title only, so the fake scores them alike and
# returns them by id; only DeepNote's title re-ranking puts the exact title "Tide" first.
PASSAGES = [
    {"id": "a1", "title": "Tide pool", "text": "Rock pools left by the sea."},
    {"id": "z9", "title": "Tide", "text": "The sea rises and falls twice a day."},
    {"id": "m5", "title": "AT&amp;T", "text": "A telephone company."},
]


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in PASSAGES), encoding="utf-8")
    return path


def test_deepnote_index_is_what_dynamic_mapping_made_of_the_official_documents(
    fake: FakeElasticsearch, corpus: Path
) -> None:
    build_es_index(corpus, fake.url, INDEX, progress=False, style="deepnote")

    (create,) = fake.sent("PUT", f"/{INDEX}")
    fields = [
        "id",
        "url",
        "title",
        "title_unescape",
        "text",
        "title_bigram",
        "title_unescape_bigram",
        "text_bigram",
    ]
    assert create.json() == {
        "settings": {"number_of_shards": 1},
        "mappings": {"dynamic": "strict", "properties": dict.fromkeys(fields, DYNAMIC)},
    }
    sources = fake.bulk_actions()[1::2]
    assert sources[2] == {
        "id": "m5",
        "url": "empty",
        "title": "AT&amp;T",
        "title_unescape": "AT&T",
        "text": "A telephone company.",
        "title_bigram": "AT&T",
        "title_unescape_bigram": "AT&T",
        "text_bigram": "A telephone company.",
    }


def test_deepnote_query_body_and_title_reranking(fake: FakeElasticsearch, corpus: Path) -> None:
    build_es_index(corpus, fake.url, INDEX, progress=False, style="deepnote")
    plain = FakeElasticsearch()
    try:
        build_es_index(corpus, plain.url, INDEX, progress=False)
        default_order = [d.id for d in load_retriever(f"es:{plain.url}/{INDEX}").invoke("Tide")]
    finally:
        plain.close()
    fake.requests.clear()

    retriever = load_retriever(f"es:{fake.url}/{INDEX}?style=deepnote", k=2)
    docs = retriever.invoke("Tide")

    (search,) = fake.sent("POST|GET", f"/{INDEX}/_search")
    assert search.json() == {
        "query": {
            "multi_match": {
                "query": "Tide",
                "fields": [
                    "title^1.25",
                    "title_unescape^1.25",
                    "text",
                    "title_bigram^1.25",
                    "title_unescape_bigram^1.25",
                    "text_bigram",
                ],
            }
        },
        "timeout": "100s",
        "size": 50,  # max(k, 50): the top 50 are re-ranked, then k kept
    }
    assert default_order == ["a1", "z9"]  # equal scores: the engine's order
    assert [d.id for d in docs] == ["z9", "a1"]
    assert [d.metadata["score"] for d in docs] == [1.25 * 1.5, 1.25]  # exact title: x1.5
    assert docs[0].page_content == "The sea rises and falls twice a day."
    assert docs[0].metadata["title"] == "Tide"


def test_ircot_index_query_and_dedup(fake: FakeElasticsearch, tmp_path: Path) -> None:
    corpus = tmp_path / "ircot.jsonl"
    passages = [
        {"id": "p1", "title": "Moon", "text": "The Moon pulls the tide."},
        {"id": "p2", "title": "Moon (copy)", "text": " the moon pulls the TIDE. "},
        {"id": "p3", "title": "Tide", "text": "Tides rise."},
    ]
    corpus.write_text("".join(json.dumps(p) + "\n" for p in passages), encoding="utf-8")
    build_es_index(corpus, fake.url, INDEX, progress=False, style="ircot")

    (create,) = fake.sent("PUT", f"/{INDEX}")
    assert create.json() == {
        "settings": {"number_of_shards": 1},
        "mappings": {
            "dynamic": "strict",
            "properties": {
                "id": DYNAMIC,
                "title": ENGLISH,
                "paragraph_index": {"type": "integer"},
                "paragraph_text": ENGLISH,
                "url": ENGLISH,
                "is_abstract": {"type": "boolean"},
            },
        },
    }
    assert fake.bulk_actions()[1] == {
        "id": "p1",
        "title": "Moon",
        "paragraph_index": 0,
        "paragraph_text": "The Moon pulls the tide.",
        "url": "",
        "is_abstract": True,
    }
    fake.requests.clear()

    docs = load_retriever(f"es:{fake.url}/{INDEX}?style=ircot", k=3).invoke("moon tide")

    (search,) = fake.sent("POST|GET", f"/{INDEX}/_search")
    assert search.json() == {
        "size": 100,
        "_source": ["id", "title", "paragraph_text", "url", "is_abstract", "paragraph_index"],
        "query": {
            "bool": {
                "should": [
                    {"match": {"paragraph_text": "moon tide"}},
                    {"match": {"title": "moon tide"}},
                ]
            }
        },
    }
    # p1 and p2 score alike and have one text once stripped and lower-cased: IRCoT keeps the
    # later hit (p2) at the place of the first.
    assert [d.id for d in docs] == ["p2", "p3"]
    assert docs[0].page_content == " the moon pulls the TIDE. "


def test_a_style_needs_an_index_built_for_it(fake: FakeElasticsearch, corpus: Path) -> None:
    build_es_index(corpus, fake.url, INDEX, progress=False)
    with pytest.raises(ConfigError) as caught:
        load_retriever(f"es:{fake.url}/{INDEX}?style=deepnote")
    assert str(caught.value) == (
        f"Elasticsearch index 'wiki' at {fake.url} was not built for style 'deepnote' (field "
        "'id' has type 'keyword', not 'text'); build one with `noterag index CORPUS --es "
        f"{fake.url} --index NAME --style deepnote`"
    )


@pytest.mark.parametrize(
    ("suffix", "message"),
    [
        (
            "?style=bing",
            "unknown retrieval style 'bing' (known: adaptive-note, deepnote, ircot, noterag)",
        ),
        ("?sytle=deepnote", "es: spec option 'sytle' is unknown (known: style)"),
        ("?style=", "es: spec option 'style' has no value"),
    ],
)
def test_bad_style_options_are_one_line(fake: FakeElasticsearch, suffix: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_retriever(f"es:{fake.url}/{INDEX}{suffix}")
    assert str(caught.value) == message
    assert not fake.requests  # refused before any request


# ----------------------------------------------------------------------------- a real server

ES_URL = os.environ.get("NOTERAG_ES_URL")
needs_server = pytest.mark.skipif(not ES_URL, reason="NOTERAG_ES_URL not set")
BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.fixture
def real_index() -> Iterator[str]:
    from noterag.retrievers.elastic import connect

    index = f"noterag-test-{uuid.uuid4().hex[:10]}"
    try:
        yield index
    finally:
        assert ES_URL is not None
        connect(ES_URL).indices.delete(index=index, ignore_unavailable=True)


@needs_server
@pytest.mark.parametrize("style", ["deepnote", "ircot"])
def test_real_server_styles(corpus: Path, real_index: str, style: str) -> None:
    assert ES_URL is not None
    stats = build_es_index(corpus, ES_URL, real_index, progress=False, style=style)
    assert (stats.count, stats.failed, stats.created) == (3, 0, True)
    # The server echoes the style's mapping: a rebuild adds to the index instead of refusing.
    assert not build_es_index(corpus, ES_URL, real_index, progress=False, style=style).created
    docs = load_retriever(f"es:{ES_URL.rstrip('/')}/{real_index}?style={style}", k=3).invoke("Tide")
    assert docs and docs[0].id == "z9"


@needs_server
def test_real_server_scores_match_the_reference_of_bench_ircot_overlap(
    corpus: Path, real_index: str
) -> None:
    """Elasticsearch's own BM25 for the deepnote query against ``bench/es_reference.py``."""
    pytest.importorskip("regex", reason="the regex package (dev extra) is not installed")
    assert ES_URL is not None
    sys.path.insert(0, str(BENCH))
    try:
        from es_reference import DeepNoteIndex
    finally:
        sys.path.remove(str(BENCH))
    build_es_index(corpus, ES_URL, real_index, progress=False, style="deepnote")
    from noterag.retrievers.elastic import connect, deepnote_query_body

    client = connect(ES_URL)
    reference = DeepNoteIndex(PASSAGES)
    for query in ["Tide", "the sea rises", "telephone company AT&T"]:
        hits = client.search(index=real_index, body=deepnote_query_body(query, 3))["hits"]["hits"]
        ours = {hit["_source"]["id"]: hit["_score"] for hit in hits}
        expected = {PASSAGES[doc]["id"]: score for doc, score in reference.search(query, 50)}
        assert ours == pytest.approx(expected, rel=1e-5), query
