"""Retrievers and corpus loading.

``load_retriever(spec)`` turns a spec string into a LangChain retriever. Schemes live in
``RETRIEVER_SCHEMES`` (scheme -> factory(argument, k)); a new backend registers itself there
and, if its index directory carries a ``noterag-index.json`` of its own kind, in
``INDEX_KINDS`` so a bare directory path finds it too.

Schemes: ``bm25:<dir>`` (embedded tantivy), ``dense:<dir>`` (the ``dense`` extra),
``hybrid:<spec>,<spec>`` (reciprocal rank fusion) and ``es:<url>/<index>`` (the ``es``
extra). Optional backends are imported only when used.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from langchain_core.retrievers import BaseRetriever

from noterag.errors import ConfigError, IndexNotFoundError

from .bm25 import MANIFEST_NAME, Bm25Index, BM25Retriever, BuildStats, build_bm25_index
from .corpus import CorpusStats, iter_corpus

__all__ = [
    "INDEX_KINDS",
    "RETRIEVER_SCHEMES",
    "BM25Retriever",
    "Bm25Index",
    "BuildStats",
    "CorpusStats",
    "build_bm25_index",
    "iter_corpus",
    "load_retriever",
]

RetrieverFactory = Callable[[str, int], BaseRetriever]


def _bm25(index_dir: str, k: int) -> BaseRetriever:
    retriever = BM25Retriever(index_dir=index_dir, k=k)
    retriever.load()  # fail now, with the path in the message, not at the first query
    return retriever


def _dense(index_dir: str, k: int) -> BaseRetriever:
    from .dense import DenseRetriever

    retriever = DenseRetriever(index_dir=index_dir, k=k)
    retriever.load()  # the index and the model: a missing one fails now, not mid-run
    return retriever


def _hybrid(specs: str, k: int) -> BaseRetriever:
    from .hybrid import HybridRetriever

    parts = [part.strip() for part in specs.split(",")]
    if len(parts) < 2 or not all(parts):
        raise ConfigError(
            f"hybrid retriever spec {'hybrid:' + specs!r} needs two or more comma-separated "
            "retriever specs, e.g. hybrid:bm25-index,dense-index"
        )
    return HybridRetriever(retrievers=[load_retriever(part, k) for part in parts], k=k)


def _es(argument: str, k: int) -> BaseRetriever:
    from .elastic import load_es_retriever

    return load_es_retriever(argument, k)


RETRIEVER_SCHEMES: dict[str, RetrieverFactory] = {
    "bm25": _bm25,
    "dense": _dense,
    "hybrid": _hybrid,
    "es": _es,
}
# manifest "kind" -> scheme, for specs that are a bare index directory.
INDEX_KINDS: dict[str, str] = {"bm25": "bm25", "dense": "dense"}

# Importable from here, but loaded on first use: they pull numpy, torch or elasticsearch.
_LAZY = {
    "DenseRetriever": "dense",
    "build_dense_index": "dense",
    "HybridRetriever": "hybrid",
    "ElasticsearchBM25Retriever": "elastic",
    "build_es_index": "elastic",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f".{module}", __name__), name)


def load_retriever(spec: str | os.PathLike[str] | BaseRetriever, k: int = 5) -> BaseRetriever:
    """A retriever from ``"bm25:<index dir>"``, a bare index directory, or a retriever object.

    Raises ``ConfigError`` for an unknown scheme and ``IndexNotFoundError`` when the index is
    missing.
    """
    if isinstance(spec, BaseRetriever):
        return spec
    text = os.fspath(spec)
    scheme, sep, argument = text.partition(":")
    if sep and scheme in RETRIEVER_SCHEMES:
        if not argument:
            raise ConfigError(f"retriever spec {text!r} names no location after '{scheme}:'")
        return RETRIEVER_SCHEMES[scheme](argument, k)
    path = Path(text)
    if path.exists():
        return RETRIEVER_SCHEMES[_scheme_for_directory(path)](text, k)
    if sep and _looks_like_scheme(scheme):
        raise ConfigError(f"unknown retriever scheme {scheme + ':'!r} in {text!r} ({_known()})")
    raise IndexNotFoundError(
        f"no index at {text} (a retriever spec is an index directory or one of: {_known()})"
    )


def _scheme_for_directory(path: Path) -> str:
    manifest = path / MANIFEST_NAME
    if manifest.is_file():
        try:
            kind = json.loads(manifest.read_text(encoding="utf-8")).get("kind")
        except (OSError, ValueError, AttributeError):
            kind = None
        if kind in INDEX_KINDS:
            return INDEX_KINDS[kind]
    # Not recognisably another kind: the BM25 loader explains what is wrong with it.
    return "bm25"


def _looks_like_scheme(scheme: str) -> bool:
    # One letter is a Windows drive ("C:\\idx"), not a scheme.
    return len(scheme) > 1 and scheme.replace("-", "").replace("_", "").isalnum()


def _known() -> str:
    return "known: " + ", ".join(f"{name}:" for name in sorted(RETRIEVER_SCHEMES))
