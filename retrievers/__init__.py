"""Retrievers and corpus loading.

``load_retriever(spec)`` turns a spec string into a LangChain retriever. Schemes live in
``RETRIEVER_SCHEMES`` (scheme -> factory(argument, k)); a new backend registers itself there
and, if its index directory carries a ``noterag-index.json`` of its own kind, in
``INDEX_KINDS`` so a bare directory path finds it too.
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


RETRIEVER_SCHEMES: dict[str, RetrieverFactory] = {"bm25": _bm25}
# manifest "kind" -> scheme, for specs that are a bare index directory.
INDEX_KINDS: dict[str, str] = {"bm25": "bm25"}


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
