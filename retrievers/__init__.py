"""Retrievers and corpus loading.

``load_retriever(spec)`` turns a spec string into a LangChain retriever. Schemes live in
``RETRIEVER_SCHEMES`` (scheme -> factory(argument, k)); a new backend registers itself there
and, if its index directory carries a ``noterag-index.json`` of its own kind, in
``INDEX_KINDS`` so a bare directory path finds it too.

Schemes: ``bm25:<dir>`` (embedded tantivy), ``dense:<dir>`` (the ``dense`` extra; options
``?model=bge-base-en-v1.5`` or ``gtr-t5-xxl``, the papers' models, and ``&instruction=``),
``hybrid:<spec>,<spec>`` (reciprocal rank fusion) and ``es:<url>/<index>`` (the ``es``
extra; ``?style=deepnote`` or ``ircot``, the papers' Elasticsearch setups, see ``styles.py``). Optional backends are imported only when used. What a spec string means (scheme or
path, bare directories, absolute paths) is decided in one place, ``spec.py``.
"""

from __future__ import annotations

import os

from langchain_core.retrievers import BaseRetriever

from .bm25 import Bm25Index, BM25Retriever, BuildStats, build_bm25_index
from .corpus import CorpusStats, iter_corpus
from .spec import (
    INDEX_KINDS,
    RETRIEVER_SCHEMES,
    RetrieverFactory,
    RetrieverSpec,
    list_parts,
    normalize,
    normalize_spec,
    parse_spec,
    split_options,
)

__all__ = [
    "INDEX_KINDS",
    "RETRIEVER_SCHEMES",
    "BM25Retriever",
    "Bm25Index",
    "BuildStats",
    "CorpusStats",
    "RetrieverFactory",
    "build_bm25_index",
    "iter_corpus",
    "load_retriever",
    "normalize_spec",
    "parse_spec",
]


def _bm25(location: str, k: int) -> BaseRetriever:
    # No options: a style is the index's (its manifest), chosen when it is built.
    index_dir, _ = split_options(location, (), "bm25")
    retriever = BM25Retriever(index_dir=index_dir, k=k)
    retriever.load()  # fail now, with the path in the message, not at the first query
    return retriever


DENSE_OPTIONS = ("model", "instruction")


def _dense(location: str, k: int) -> BaseRetriever:
    """``dense:<dir>[?model=PRESET|FOLDER][&instruction=none|bge]`` (``embedding_presets``)."""
    from .dense import DenseIndex, DenseRetriever, load_embeddings

    index_dir, options = split_options(location, DENSE_OPTIONS, "dense")
    embeddings = None
    if options:
        from .embedding_presets import (
            InstructedEmbeddings,
            check_index_model,
            query_instruction,
            resolve_model,
        )

        index = DenseIndex(index_dir)
        try:
            folder, preset = index.model_name, None
            if "model" in options:
                folder, preset = resolve_model(options["model"])
                check_index_model(index.model_name, preset, folder)
            instruction = query_instruction(options.get("instruction"), preset)
        finally:
            index.close()
        embeddings = InstructedEmbeddings(load_embeddings(folder), instruction)
    retriever = DenseRetriever(index_dir=index_dir, k=k, embeddings=embeddings)
    retriever.load()  # the index and the model: a missing one fails now, not mid-run
    return retriever


def _hybrid(specs: str, k: int) -> BaseRetriever:
    from .hybrid import HybridRetriever

    parts = list_parts(RetrieverSpec("hybrid", specs))
    return HybridRetriever(retrievers=[load_retriever(part, k) for part in parts], k=k)


def _es(argument: str, k: int) -> BaseRetriever:
    from .elastic import load_es_retriever

    return load_es_retriever(argument, k)


# the built-in schemes (spec.py holds the registries; INDEX_KINDS: manifest kind -> scheme)
RETRIEVER_SCHEMES.update({"bm25": _bm25, "dense": _dense, "hybrid": _hybrid, "es": _es})

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
    """A retriever from ``"bm25:<index dir>"``, a bare index directory, or a retriever object
    (``spec.py`` has the rule).

    Raises ``ConfigError`` for an unknown scheme and ``IndexNotFoundError`` when the index is
    missing.
    """
    if isinstance(spec, BaseRetriever):
        return spec
    parsed = normalize(parse_spec(spec))
    return RETRIEVER_SCHEMES[parsed.scheme](parsed.location, k)
