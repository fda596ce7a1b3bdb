"""The Elasticsearch retriever and index builder.

Unit tests run the real ``elasticsearch`` client against ``FakeElasticsearch`` (a recording
HTTP server on 127.0.0.1) and check what is sent: the index mapping, the bulk actions, the
query bodies, the credentials. Integration tests need a real server and run only when
``NOTERAG_ES_URL`` is set (e.g. ``http://localhost:9200``).
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip(
    "langchain_elasticsearch", reason="the es extra (langchain-elasticsearch) is not installed"
)

from langchain_elasticsearch import ElasticsearchRetriever

from fake_elasticsearch import FakeElasticsearch
from noterag.base.errors import ConfigError, IndexNotFoundError, NoteragError
from noterag.retrievers import load_retriever
from noterag.retrievers.elastic import (
    INDEX_MAPPINGS,
    INDEX_SETTINGS,
    ElasticsearchBM25Retriever,
    ElasticsearchUnavailableError,
    EsBulkError,
    bm25_query_body,
    build_es_index,
    parse_es_spec,
)

PASSAGES = [
    {"id": "p1", "title": "Volcano", "text": "A volcano erupts lava and ash from a magma chamber."},
    {"id": "p2", "title": "Glacier", "text": "Glaciers are rivers of ice that carve valleys."},
    {"id": "p3", "title": "Tide", "text": "Ocean tides rise and fall with the pull of the moon."},
    {"id": "p4", "title": "Desert", "text": "Deserts receive little rain; dunes shift in wind."},
    {"id": "p5", "title": "Lava lamp", "text": "A decorative lamp with wax blobs, not real lava."},
]
INDEX = "passages"


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in PASSAGES), encoding="utf-8")
    return path


@pytest.fixture
def loaded(fake: FakeElasticsearch, corpus: Path) -> FakeElasticsearch:
    build_es_index(corpus, fake.url, INDEX, progress=False)
    fake.requests.clear()
    return fake


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # nothing listens once the socket is closed


# ----------------------------------------------------------------------------- building


def test_build_creates_the_index_with_the_explicit_mapping(
    fake: FakeElasticsearch, corpus: Path
) -> None:
    stats = build_es_index(corpus, fake.url, INDEX, progress=False)

    (create,) = fake.sent("PUT", f"/{INDEX}")
    body = create.json()
    assert body == {"settings": INDEX_SETTINGS, "mappings": INDEX_MAPPINGS}
    # Spelled out, so a change to the constants has to be a deliberate change here too.
    assert body["settings"]["similarity"]["noterag_bm25"] == {"type": "BM25", "k1": 1.2, "b": 0.75}
    assert body["mappings"]["dynamic"] == "strict"
    properties = body["mappings"]["properties"]
    assert properties["id"] == {"type": "keyword"}
    for name in ("title", "text"):
        assert properties[name] == {
            "type": "text",
            "analyzer": "english",
            "similarity": "noterag_bm25",
        }
    # No mapping types (rejected since ES 7) anywhere, unlike the official script's "doc".
    assert set(body["mappings"]) == {"dynamic", "properties"}

    actions = fake.bulk_actions()
    headers, sources = actions[::2], actions[1::2]
    assert [h["index"]["_id"] for h in headers] == [p["id"] for p in PASSAGES]
    assert all(h["index"]["_index"] == INDEX for h in headers)
    assert sources == PASSAGES
    assert fake.sent("POST", f"/{INDEX}/_refresh")

    assert (stats.passages, stats.failed, stats.count, stats.created) == (5, 0, 5, True)
    assert stats.index == INDEX and stats.url == fake.url


def test_per_document_failures_are_counted_and_named(fake: FakeElasticsearch, corpus: Path) -> None:
    fake.reject_ids = {"p2", "p4"}
    with pytest.raises(EsBulkError) as caught:
        build_es_index(corpus, fake.url, INDEX, progress=False)

    stats = caught.value.stats
    assert (stats.passages, stats.failed, stats.count) == (5, 2, 3)
    assert [pid for pid, _ in stats.failures] == ["p2", "p4"]
    assert "document_parsing_exception" in stats.failures[0][1]
    message = str(caught.value)
    assert "\n" not in message
    assert "2 of 5 passages failed" in message and "p2 (" in message and "p4 (" in message
    assert "the other 3 were indexed" in message
    # The failures did not stop the rest from loading.
    assert sorted(fake.docs[INDEX]) == ["p1", "p3", "p5"]


def test_a_rejected_mapping_is_an_error_not_a_silent_default(
    fake: FakeElasticsearch, corpus: Path
) -> None:
    fake.reject_create = True
    with pytest.raises(NoteragError, match="refused to set up index 'passages'.*mapper_parsing"):
        build_es_index(corpus, fake.url, INDEX, progress=False)
    # Nothing was loaded into an index Elasticsearch would have created with dynamic mapping.
    assert not fake.bulk_actions()


def test_an_index_with_another_mapping_is_refused_unless_forced(
    fake: FakeElasticsearch, corpus: Path
) -> None:
    fake.indices[INDEX] = {
        "settings": {},
        "mappings": {"properties": {"title": {"type": "text"}, "text": {"type": "text"}}},
    }
    fake.docs[INDEX] = {"old": {"title": "Old", "text": "kept"}}
    with pytest.raises(ConfigError, match="exists with another layout.*--force"):
        build_es_index(corpus, fake.url, INDEX, progress=False)
    assert not fake.sent("DELETE", f"/{INDEX}") and not fake.bulk_actions()
    assert fake.docs[INDEX] == {"old": {"title": "Old", "text": "kept"}}

    stats = build_es_index(corpus, fake.url, INDEX, progress=False, force=True)
    assert fake.sent("DELETE", f"/{INDEX}") and fake.sent("PUT", f"/{INDEX}")
    assert stats.created and stats.count == 5 and "old" not in fake.docs[INDEX]


def test_an_index_with_our_mapping_is_added_to(loaded: FakeElasticsearch, tmp_path: Path) -> None:
    more = tmp_path / "more.jsonl"
    more.write_text(json.dumps({"id": "p9", "title": "Fjord", "text": "A drowned valley."}) + "\n")
    stats = build_es_index(more, loaded.url, INDEX, progress=False)
    assert not stats.created and stats.count == 6
    assert not loaded.sent("DELETE", f"/{INDEX}") and not loaded.sent("PUT", f"/{INDEX}")


def test_a_bad_index_name_fails_before_any_request(fake: FakeElasticsearch, corpus: Path) -> None:
    with pytest.raises(ConfigError, match="not a valid Elasticsearch index name"):
        build_es_index(corpus, fake.url, "My Index", progress=False)
    assert fake.requests == []


# ----------------------------------------------------------------------------- retrieval


def test_query_body_and_documents(loaded: FakeElasticsearch) -> None:
    retriever = load_retriever(f"es:{loaded.url}/{INDEX}", k=2)
    assert isinstance(retriever, ElasticsearchBM25Retriever)
    assert isinstance(retriever, ElasticsearchRetriever)  # langchain-elasticsearch's own

    docs = retriever.invoke("volcano lava")

    (search,) = loaded.sent("POST", f"/{INDEX}/_search")
    assert search.json() == {
        "query": {
            "multi_match": {
                "query": "volcano lava",
                "fields": ["title^1.25", "text"],
                "type": "best_fields",
            }
        },
        "size": 2,
        "_source": ["id", "title", "text"],
        "track_total_hits": False,
    }
    assert [d.id for d in docs] == ["p1", "p5"]
    top = docs[0]
    assert top.page_content == PASSAGES[0]["text"]
    # best_fields: the better field, text (2 words), over title (1.25 x 1 word); not their sum.
    assert top.metadata == {"id": "p1", "title": "Volcano", "score": 2.0}


def test_k_per_invoke_and_zero(loaded: FakeElasticsearch) -> None:
    retriever = ElasticsearchBM25Retriever(INDEX, es_url=loaded.url, k=3)
    loaded.requests.clear()
    assert len(retriever.invoke("lava", k=1)) == 1
    assert loaded.sent("POST", f"/{INDEX}/_search")[-1].json()["size"] == 1
    assert retriever.invoke("lava", k=0) == []
    assert len(loaded.sent("POST", f"/{INDEX}/_search")) == 1  # k=0 sends nothing


async def test_async_retrieval_sends_the_same_body(loaded: FakeElasticsearch) -> None:
    retriever = ElasticsearchBM25Retriever(INDEX, es_url=loaded.url, k=5)
    docs = await retriever.ainvoke("ice valleys", k=4)
    assert [d.id for d in docs] == ["p2"]
    assert loaded.sent("POST", f"/{INDEX}/_search")[-1].json() == bm25_query_body("ice valleys", 4)


def test_a_custom_body_func_still_gets_k(loaded: FakeElasticsearch) -> None:
    def title_only(query: str) -> dict:
        return {"query": {"multi_match": {"query": query, "fields": ["title"]}}}

    retriever = ElasticsearchBM25Retriever(INDEX, title_only, es_url=loaded.url)
    retriever.invoke("lamp", k=2)
    sent = loaded.sent("POST", f"/{INDEX}/_search")[-1].json()
    assert sent == {"query": {"multi_match": {"query": "lamp", "fields": ["title"]}}, "size": 2}


def test_missing_index(fake: FakeElasticsearch) -> None:
    with pytest.raises(IndexNotFoundError) as caught:
        load_retriever(f"es:{fake.url}/nope")
    assert f"no Elasticsearch index 'nope' at {fake.url}" in str(caught.value)
    assert f"noterag index CORPUS --es {fake.url} --index nope" in str(caught.value)


# ----------------------------------------------------------------------------- connecting


def test_an_unreachable_server_is_one_line_naming_the_url(corpus: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    for attempt in (
        lambda: load_retriever(f"es:{url}/{INDEX}"),
        lambda: build_es_index(corpus, url, INDEX, progress=False),
        lambda: ElasticsearchBM25Retriever(INDEX, es_url=url),
    ):
        with pytest.raises(ElasticsearchUnavailableError) as caught:
            attempt()
        message = str(caught.value)
        assert "\n" not in message
        assert message.startswith(
            f"cannot reach Elasticsearch at {url}; start one with: docker run"
        )
        assert "elasticsearch:8" in message


def test_credentials_come_from_the_environment(
    fake: FakeElasticsearch, corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake.require_api_key = "secret-key"
    with pytest.raises(ElasticsearchUnavailableError, match=f"{fake.url} rejected the credentials"):
        build_es_index(corpus, fake.url, INDEX, progress=False)

    fake.requests.clear()
    monkeypatch.setenv("NOTERAG_ES_API_KEY", "secret-key")
    build_es_index(corpus, fake.url, INDEX, progress=False)
    assert load_retriever(f"es:{fake.url}/{INDEX}").invoke("tides")[0].id == "p3"
    assert fake.sent("POST", f"/{INDEX}/_search")
    assert all(r.headers.get("authorization") == "ApiKey secret-key" for r in fake.requests)


def test_basic_auth_from_the_environment(
    fake: FakeElasticsearch, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NOTERAG_ES_USER", "elastic")
    with pytest.raises(ConfigError, match="set both NOTERAG_ES_USER and NOTERAG_ES_PASSWORD"):
        ElasticsearchBM25Retriever(INDEX, es_url=fake.url)
    monkeypatch.setenv("NOTERAG_ES_PASSWORD", "pw")
    ElasticsearchBM25Retriever(INDEX, es_url=fake.url)
    # base64("elastic:pw")
    assert fake.requests[-1].headers["authorization"] == "Basic ZWxhc3RpYzpwdw=="


@pytest.mark.parametrize(
    ("argument", "expected"),
    [
        ("http://localhost:9200/hotpotqa", ("http://localhost:9200", "hotpotqa")),
        ("localhost:9200/hotpotqa", ("http://localhost:9200", "hotpotqa")),
        ("https://es.example/proxy/wiki-2024/", ("https://es.example/proxy", "wiki-2024")),
    ],
)
def test_spec_parsing(argument: str, expected: tuple[str, str]) -> None:
    assert parse_es_spec(argument) == expected


@pytest.mark.parametrize("argument", ["http://localhost:9200", "http://h:9200/Bad", "h:9200/_x"])
def test_bad_specs(argument: str) -> None:
    with pytest.raises(ConfigError):
        parse_es_spec(argument)


# ----------------------------------------------------------------------------- a real server

ES_URL = os.environ.get("NOTERAG_ES_URL")
needs_server = pytest.mark.skipif(not ES_URL, reason="NOTERAG_ES_URL not set")


@pytest.fixture
def real_index(corpus: Path) -> Iterator[str]:
    from noterag.retrievers.elastic import connect

    index = f"noterag-test-{uuid.uuid4().hex[:10]}"
    try:
        yield index
    finally:
        connect(ES_URL).indices.delete(index=index, ignore_unavailable=True)


@needs_server
async def test_real_server_round_trip(corpus: Path, real_index: str) -> None:
    stats = build_es_index(corpus, ES_URL, real_index, progress=False)
    assert (stats.count, stats.failed, stats.created) == (5, 0, True)
    # Rebuilding into it leaves the mapping check satisfied: the server echoes our mapping.
    again = build_es_index(corpus, ES_URL, real_index, progress=False)
    assert not again.created and again.count == 5

    retriever = load_retriever(f"es:{ES_URL.rstrip('/')}/{real_index}", k=2)
    docs = retriever.invoke("Which glaciers carve valleys?")
    assert docs[0].id == "p2" and docs[0].metadata["title"] == "Glacier"
    assert docs[0].metadata["score"] > 0
    # The english analyzer stems: "erupting" finds "erupts".
    assert (await retriever.ainvoke("erupting", k=1))[0].id == "p1"
