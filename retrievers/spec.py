"""What a retriever spec means: the one parser behind ``load_retriever``, ``noterag ask/eval
--index`` and ``run_eval(index=...)``.

A spec is ``SCHEME:LOCATION`` or a bare path. The rule, in order:

1. Surrounding whitespace is dropped; an empty spec is an error.
2. If the text before the first ``:`` is a registered scheme (``RETRIEVER_SCHEMES``: ``bm25``,
   ``dense``, ``hybrid``, ``es``; compared case-insensitively, like URI schemes), the rest is
   its location, which must not be empty. A registered scheme wins over a file that happens to
   be called ``bm25:x``; write ``./bm25:x`` for that file.
3. Otherwise, if the whole text names an existing path, it is a bare index directory: its
   scheme is the one registered in ``INDEX_KINDS`` for the ``kind`` in its manifest, and
   ``bm25`` when it has no readable manifest (the BM25 loader then says what is wrong with
   it).
4. Otherwise, if the text before the first ``:`` has the shape of a scheme (a letter, then
   letters, digits, ``+``, ``-``, ``.`` or ``_``: RFC 3986's scheme plus ``_``), it is an
   unknown scheme: ``ConfigError`` listing the known ones. So ``solr:http://...`` is refused,
   while ``./a:b`` or ``/data/a:b`` (the prefix starts with ``.`` or ``/``) stays a path.
5. Otherwise it is a bare path that does not exist: ``IndexNotFoundError``, naming what an
   interrupted build left there, if anything.

``normalize_spec`` also makes the spec independent of the working directory: a directory
scheme's location (a scheme in ``INDEX_KINDS``, today ``bm25`` and ``dense``) becomes an
absolute path with ``~`` expanded, and each part of a ``hybrid:`` list is normalized in turn.
Other locations (``es:`` URLs) are kept as written.

A location may end in options, ``?key=value&key=value`` (``es:<url>/<index>?style=deepnote``,
``dense:<dir>?model=bge-base-en-v1.5``): each scheme names the keys it takes
(``split_options``); they are kept as written by ``normalize_spec``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl

from langchain_core.retrievers import BaseRetriever

from noterag.base.errors import ConfigError, IndexNotFoundError

from .indexdir import manifest_kind, not_found

SCHEME_SHAPE = re.compile(r"[A-Za-z][A-Za-z0-9+.\-_]*")
# Schemes whose location is a comma-separated list of specs, each parsed by this same rule.
LIST_SCHEMES = frozenset({"hybrid"})
BARE_PATH_HINT = "build one with `noterag index CORPUS --out DIR`"


@dataclass(frozen=True)
class RetrieverSpec:
    """A parsed spec: ``scheme`` (registered, lower case) and its ``location``."""

    scheme: str
    location: str

    def __str__(self) -> str:
        return f"{self.scheme}:{self.location}"


# The registries: scheme -> factory(location, k) (the package's ``__init__`` registers the
# built-in ones, as any other backend would) and manifest "kind" -> scheme, for specs that are a
# bare index directory. Held here, where a spec is read, so that this module needs nothing of
# the package's.
RetrieverFactory = Callable[[str, int], BaseRetriever]
RETRIEVER_SCHEMES: dict[str, RetrieverFactory] = {}
INDEX_KINDS: dict[str, str] = {"bm25": "bm25", "dense": "dense"}


def _registry() -> tuple[Mapping[str, object], Mapping[str, str]]:
    return RETRIEVER_SCHEMES, INDEX_KINDS


def known_schemes() -> str:
    schemes, _ = _registry()
    return "known: " + ", ".join(f"{name}:" for name in sorted(schemes))


def parse_spec(spec: str | os.PathLike[str]) -> RetrieverSpec:
    """The scheme and location of ``spec`` by the module's rule (locations as written)."""
    if not isinstance(spec, str | os.PathLike):
        # load_retriever(42): one line, not os.fspath's TypeError
        raise ConfigError(
            f"a retriever spec is a string or a path (bm25:<dir>, ...), not {type(spec).__name__}"
        )
    text = os.fspath(spec).strip()
    if not text:
        raise IndexNotFoundError("the index value is empty")
    schemes, index_kinds = _registry()
    prefix, sep, rest = text.partition(":")
    if sep and prefix.lower() in schemes:
        scheme = prefix.lower()
        if not rest.strip():
            raise ConfigError(f"retriever spec {text!r} names no location after '{prefix}:'")
        return RetrieverSpec(scheme, rest.strip())
    path = Path(text).expanduser()
    if path.exists():
        kind = manifest_kind(path) if path.is_dir() else None
        return RetrieverSpec(index_kinds.get(kind or "", "bm25"), str(path))
    if sep and SCHEME_SHAPE.fullmatch(prefix):
        raise ConfigError(
            f"unknown retriever scheme {prefix + ':'!r} in {text!r} ({known_schemes()})"
        )
    what = f"a retriever spec is an index directory or one of: {known_schemes()}"
    raise not_found(f"no index at {text} ({what})", path, BARE_PATH_HINT)


def list_parts(spec: RetrieverSpec) -> list[str]:
    """The specs inside a list scheme's location (``hybrid:a,b``): two or more, none empty."""
    parts = [part.strip() for part in spec.location.split(",")]
    if len(parts) < 2 or not all(parts):
        raise ConfigError(
            f"{spec.scheme} retriever spec {str(spec)!r} needs two or more comma-separated "
            f"retriever specs, e.g. {spec.scheme}:bm25-index,dense-index"
        )
    return parts


_OPTIONS = re.compile(r"[a-z_]+=[^&=?]*(?:&[a-z_]+=[^&=?]*)*")


def split_options(location: str, known: tuple[str, ...], scheme: str) -> tuple[str, dict[str, str]]:
    """``"dir?model=x"`` -> ``("dir", {"model": "x"})``: a location's trailing options.

    Only a last ``?`` followed by ``key=value`` pairs starts options (so a path holding a ``?``
    elsewhere stays a path); a key not in ``known``, or one given twice, is a ``ConfigError``.
    """
    head, sep, tail = location.rpartition("?")
    if not sep or not _OPTIONS.fullmatch(tail):
        return location, {}
    options: dict[str, str] = {}
    for key, value in parse_qsl(tail, keep_blank_values=True):
        if key not in known:
            allowed = ", ".join(known) or "none"
            raise ConfigError(f"{scheme}: spec option {key!r} is unknown (known: {allowed})")
        if key in options:
            raise ConfigError(f"{scheme}: spec option {key!r} is given twice")
        if not value.strip():
            raise ConfigError(f"{scheme}: spec option {key!r} has no value")
        options[key] = value.strip()
    return head, options


def normalize(spec: RetrieverSpec) -> RetrieverSpec:
    """``spec`` with absolute directory locations (see the module's docstring)."""
    _, index_kinds = _registry()
    if spec.scheme in LIST_SCHEMES:
        parts = [str(normalize(parse_spec(part))) for part in list_parts(spec)]
        return RetrieverSpec(spec.scheme, ",".join(parts))
    if spec.scheme in index_kinds.values():
        location, sep, options = spec.location.rpartition("?")
        if not sep or not _OPTIONS.fullmatch(options):
            location, sep, options = spec.location, "", ""
        absolute = str(Path(location).expanduser().resolve())
        return RetrieverSpec(spec.scheme, absolute + sep + options)
    return spec


def normalize_spec(spec: str | os.PathLike[str]) -> str:
    """The canonical form of a spec: ``"idx"`` -> ``"bm25:/abs/idx"`` (or ``dense:`` when the
    directory holds a dense index), ``"dense:~/d"`` -> ``"dense:/home/me/d"``,
    ``"hybrid:a,b"`` -> ``"hybrid:bm25:/abs/a,dense:/abs/b"``, ``"es:URL"`` unchanged.

    Raises ``ConfigError`` for an unknown scheme or a malformed list and
    ``IndexNotFoundError`` for a bare path that does not exist; whether a scheme's location
    holds an index is the loader's business."""
    return str(normalize(parse_spec(spec)))
