"""Embedded, persistent BM25 over a passage corpus, backed by tantivy.

Index layout: a directory holding a tantivy index plus ``noterag-index.json`` (the manifest:
kind, count, analyzer, format version). Fields: ``id`` (raw, stored; the delete key),
``title`` and ``text`` (analyzed, stored). Scoring is tantivy's BM25 (k1=1.2, b=0.75), computed
per field and summed, so a query word found in the title counts in addition to the text.

Analysis (the same for indexing and querying, chosen from the manifest at load time):

* ``english`` (default): split on every non-alphanumeric character, drop tokens over 40
  chars, lowercase, remove Lucene's 33 English stop words, Snowball English stemmer. This is
  Elasticsearch's ``english`` analyzer in spirit (ES stems with Porter, splits with UAX#29,
  strips possessives). On HotpotQA dev500 it gives gold recall@5 0.83 against 0.82 for
  ``standard``, and stop words keep OR queries over millions of passages cheap.
* ``standard``: the same without stop words and stemming (Lucene's ``standard`` in spirit).

* ``es-standard``: Elasticsearch's ``standard`` analyzer as near as tantivy gets: words by a
  regular expression after Unicode's word-boundary rules (UAX #29: ``don't``, ``U.S.``,
  ``3,000`` stay one token, each CJK ideograph is one), lowercase, no stop words, no stemming.
  The ``deepnote`` style's analyzer (below).

``style`` (``styles.py``, recorded in the manifest) builds an index and query as a paper's
official Elasticsearch setup did: ``deepnote`` indexes ``title``, ``title_unescape`` and
``text`` with ``es-standard`` and takes, like Elasticsearch's ``best_fields``, the best field's
score (a disjunction-max of ``title^1.25``, ``title_unescape^1.25``, ``text``; the original's
``*_bigram`` fields are copies of these, so their scores are the same), asks for the top 50
and re-ranks them by title match; ``ircot`` sums the scores of ``title`` and ``text`` under the
``english`` analyzer, asks for 100 and keeps the first per distinct text.
``bench/ircot_overlap.py`` measures how close the ``deepnote`` ranking comes to Elasticsearch's.

Queries never go through tantivy's query parser, which raises on LLM-style text (``AND``,
``C++``, ``foo~2``, quotes, colons): the query is analyzed into tokens and turned into a
boolean OR of term queries on title and text, each token boosted by its count in the query
(Lucene/Pyserini's bag-of-words query).
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from pathlib import Path
from typing import Any

import tantivy
from langchain_core.documents import Document
from pydantic import PrivateAttr

from noterag.base.errors import ConfigError, IndexNotFoundError, NoteragError

from .base import IndexDirRetriever, to_document
from .corpus import CorpusStats, Passage, check_corpus, iter_corpus
from .indexdir import (
    MANIFEST_NAME,
    IndexBuild,
    IndexDamagedError,
    ProgressReporter,
    new_build_id,
    new_manifest,
    now,
    read_manifest,
    require_passages,
    write_manifest,
)
from .styles import DEFAULT_STYLE, Hit, Style, get_style

__all__ = [
    "DEFAULT_ANALYZER",
    "MANIFEST_NAME",  # its home is indexdir; still importable from here
    "BM25Retriever",
    "Bm25Index",
    "BuildStats",
    "build_bm25_index",
    "make_analyzer",
]
FORMAT_VERSION = 1
KIND = "bm25"
SEARCHED_FIELDS = ("title", "text")
DEFAULT_ANALYZER = "english"
_TOKENIZER_NAME = "noterag"  # the name the analyzer is registered under in the schema
BUILD_HINT = "build one with `noterag index CORPUS --out DIR`"

_ANALYZER_DESCRIPTIONS = {
    "english": "simple tokenizer, remove_long(40), lowercase, stopwords(english), stemmer(english)",
    "standard": "simple tokenizer, remove_long(40), lowercase",
    "es-standard": "UAX#29-like regex tokenizer, remove_long(256), lowercase",
}
# Words as Unicode's default word boundaries (UAX #29, which Elasticsearch's standard tokenizer
# follows) cut them, in a regular expression: each Han ideograph or hiragana alone; numbers
# joined by , ; . ' (3,000 1.5); letters and digits joined by . ' ’ : · (don't U.S.A).
_WORD = r"[[\p{L}\p{M}\p{N}_]--[\p{Han}\p{Hiragana}]]"
ES_STANDARD_PATTERN = (
    r"[\p{Han}\p{Hiragana}]"
    r"|\p{N}+(?:[,;.'’‘]\p{N}+)+"
    rf"|{_WORD}+(?:[.'’‘:·]{_WORD}+)*"
)
# Where the analyzer of a style's index differs from the style's Elasticsearch analyzer name.
_STYLE_ANALYZERS = {"standard": "es-standard"}


def make_analyzer(name: str) -> tantivy.TextAnalyzer:
    """The tantivy analyzer called ``name``; used for both the index and the queries."""
    if name not in _ANALYZER_DESCRIPTIONS:
        known = ", ".join(sorted(_ANALYZER_DESCRIPTIONS))
        raise ConfigError(f"unknown BM25 analyzer {name!r} (known: {known})")
    if name == "es-standard":
        return (
            tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.regex(ES_STANDARD_PATTERN))
            .filter(tantivy.Filter.remove_long(256))
            .filter(tantivy.Filter.lowercase())
            .build()
        )
    builder = (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(40))
        .filter(tantivy.Filter.lowercase())
    )
    if name == "english":
        builder = builder.filter(tantivy.Filter.stopword("english")).filter(
            tantivy.Filter.stemmer("english")
        )
    return builder.build()


# What the postings of the searched fields hold: document ids and term frequencies, which is
# all BM25 over an OR of terms needs. Positions (tantivy's default) would serve phrase queries,
# which noterag never runs; leaving them out makes a smaller index, a smaller indexing arena per
# passage (fewer segments for the same memory budget) and a faster build. Indexes built with
# positions (before this) open and answer the same: the schema is read from the index.
POSTINGS = "freq"


def _schema(style: Style) -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("id", stored=True, tokenizer_name="raw", index_option="basic")
    for field in SEARCHED_FIELDS:
        builder.add_text_field(
            field, stored=True, tokenizer_name=_TOKENIZER_NAME, index_option=POSTINGS
        )
    for field in _extra_fields(style):  # searched, never shown: not stored
        builder.add_text_field(
            field, stored=False, tokenizer_name=_TOKENIZER_NAME, index_option=POSTINGS
        )
    return builder.build()


def _extra_fields(style: Style) -> list[str]:
    """The style's searched fields beyond ``title`` and ``text``."""
    if style.name == DEFAULT_STYLE:
        return []
    names = [name for name, _ in _style_query(style).fields]
    return [name for name in dict.fromkeys(names) if name not in SEARCHED_FIELDS]


def style_analyzer(style: Style) -> str:
    """The analyzer a style's index is built with."""
    if style.name == DEFAULT_STYLE:
        return DEFAULT_ANALYZER
    return _STYLE_ANALYZERS.get(style.analyzer, style.analyzer)


# --------------------------------------------------------------------------------------------
# Building


@dataclass
class BuildStats:
    """What ``build_bm25_index`` did."""

    index_dir: str
    passages: int
    skipped_lines: int
    seconds: float
    # kind of bad line -> lines skipped (see noterag.retrievers.corpus)
    skipped_by_kind: dict[str, int] = dataclass_field(default_factory=dict)
    # (line number, reason) of the first skipped lines
    skipped_examples: list[tuple[int, str]] = dataclass_field(default_factory=list)


def build_bm25_index(
    corpus_path: str | os.PathLike[str],
    index_dir: str | os.PathLike[str],
    *,
    progress: bool = True,
    skip_bad_lines: bool = False,
    heap_mb: int = 512,
    num_threads: int | None = None,
    analyzer: str | None = None,
    style: str | None = None,
) -> BuildStats:
    """Index a corpus into ``index_dir``, replacing any noterag index already there.

    ``style`` (``styles.py``) lays the index out as a paper's retrieval did; ``analyzer``
    defaults to the style's (``english`` for the default style).

    The index is built in a temporary sibling directory and renamed into place only when
    complete, so an interrupted or failed build leaves a previous index untouched. The corpus
    is streamed (constant memory apart from tantivy's ``heap_mb`` indexing budget).
    """
    corpus_path = Path(corpus_path)
    build = IndexBuild(index_dir)
    chosen = get_style(style)
    analyzer = analyzer or style_analyzer(chosen)
    make_analyzer(analyzer)  # an unknown name fails before anything is written
    # Checked before creating anything, so a typo leaves no temporary directory behind.
    check_corpus(corpus_path)
    started = time.perf_counter()
    with build:
        try:
            stats = _write_index(
                corpus_path,
                build.path,
                progress,
                skip_bad_lines,
                heap_mb,
                num_threads,
                analyzer,
                chosen,
            )
        except ValueError as exc:
            if isinstance(exc, NoteragError):
                raise
            # tantivy reports its own I/O failures (a full disk) as ValueError.
            raise build.write_error(f"tantivy: {_engine_message(exc)}") from None
        require_passages(corpus_path, stats)  # before the swap: an old index stays
        build.finish(_new_manifest(corpus_path, stats, analyzer, chosen))
    return BuildStats(
        index_dir=str(build.index_dir),
        passages=stats.passages,
        skipped_lines=stats.skipped,
        skipped_by_kind=dict(stats.skipped_by_kind),
        skipped_examples=list(stats.skipped_examples),
        seconds=time.perf_counter() - started,
    )


def _writer_threads(heap_mb: int, num_threads: int | None) -> int:
    if num_threads is not None:
        return max(1, num_threads)
    # tantivy needs at least ~15 MB of heap per indexing thread and gains little past 8.
    return max(1, min(os.cpu_count() or 1, 8, heap_mb // 32))


def _write_index(
    corpus_path: Path,
    target: Path,
    progress: bool,
    skip_bad_lines: bool,
    heap_mb: int,
    num_threads: int | None,
    analyzer: str,
    style: Style,
) -> CorpusStats:
    index = tantivy.Index(_schema(style), path=str(target), reuse=False)
    index.register_tokenizer(_TOKENIZER_NAME, make_analyzer(analyzer))
    threads = _writer_threads(heap_mb, num_threads)
    try:
        writer = index.writer(heap_size=heap_mb * 1_000_000, num_threads=threads)
    except ValueError as exc:
        raise ConfigError(
            f"cannot start the indexer with heap_mb={heap_mb} and {threads} threads ({exc})"
        ) from None
    stats = CorpusStats()
    passages = iter_corpus(corpus_path, skip_bad_lines=skip_bad_lines, stats=stats)
    try:
        with ProgressReporter(progress, corpus_path, stats) as report:
            for n, passage in enumerate(passages, start=1):
                writer.add_document(_to_document(passage, style))
                if n % 2000 == 0:
                    report()
            report()
        writer.commit()
    except BaseException:
        writer.rollback()
        raise
    finally:
        writer.wait_merging_threads()
    return stats


def _to_document(passage: Passage, style: Style | None = None) -> tantivy.Document:
    document = tantivy.Document(id=passage["id"], title=passage["title"], text=passage["text"])
    if style is not None and style.name != DEFAULT_STYLE:
        source = style.source(passage)
        for field in _extra_fields(style):
            document.add_text(field, source[field])
    return document


def _new_manifest(
    corpus_path: Path, stats: CorpusStats, analyzer: str, style: Style
) -> dict[str, Any]:
    scoring = "BM25 k1=1.2 b=0.75, summed over title and text"
    if style.name != DEFAULT_STYLE:
        scoring = _style_query(style).description
    return new_manifest(
        KIND,
        FORMAT_VERSION,
        corpus_path,
        stats,
        engine="tantivy",
        analyzer=analyzer,
        tokenizer=_ANALYZER_DESCRIPTIONS[analyzer],
        fields=[*SEARCHED_FIELDS, *_extra_fields(style)],
        postings=POSTINGS,
        scoring=scoring,
        **({} if style.name == DEFAULT_STYLE else {"style": style.name}),
    )


@dataclass(frozen=True)
class _StyleQuery:
    """How a style's query is put together in tantivy, derived from its Elasticsearch fields."""

    fields: tuple[tuple[str, float], ...]  # (tantivy field, boost)
    best_field: bool  # a disjunction-max over fields (Elasticsearch's best_fields), else a sum
    description: str


# Elasticsearch field -> the tantivy field holding the same value. The deepnote index's
# *_bigram fields are copies (same value, same analyzer) of the others, so they score alike
# and a best_fields maximum never needs them.
_TANTIVY_FIELD = {
    "paragraph_text": "text",
    "title_bigram": "title_unescape",
    "title_unescape_bigram": "title_unescape",
    "text_bigram": "text",
}


def _style_query(style: Style) -> _StyleQuery:
    fields: list[tuple[str, float]] = []
    for name, boost in style.fields:
        field = (_TANTIVY_FIELD.get(name, name), boost)
        if field not in fields:
            fields.append(field)
    best = style.combine == "max"
    shown = ", ".join(f"{name}^{boost:g}" if boost != 1 else name for name, boost in fields)
    description = f"BM25 k1=1.2 b=0.75, the {'best' if best else 'sum'} of {shown}"
    if style.buffer:
        description += f"; the top {style.buffer}"
        if style.dedup_text:
            description += ", first hit per text"
        if style.rerank_titles:
            description += ", re-ranked by title match"
    return _StyleQuery(tuple(fields), best, description)


# --------------------------------------------------------------------------------------------
# Loading and searching


class Bm25Index:
    """An opened BM25 index: searching, plus adding and deleting passages in place."""

    def __init__(self, index_dir: str | os.PathLike[str]) -> None:
        self.index_dir = Path(index_dir)
        self.manifest = read_manifest(self.index_dir, kind=KIND, label="BM25", hint=BUILD_HINT)
        self._check_format()
        self.style = get_style(self.manifest.get("style"))
        self.analyzer = make_analyzer(self.manifest.get("analyzer", DEFAULT_ANALYZER))
        try:
            self._index = tantivy.Index.open(str(self.index_dir))
        except (OSError, ValueError) as exc:
            raise IndexDamagedError(
                f"{self.index_dir}: the tantivy index cannot be opened ({_engine_message(exc)}); "
                f"rebuild it: noterag index CORPUS --out {self.index_dir} --force"
            ) from None
        # Writers need the analyzer under the name stored in the schema; searches do not.
        self._index.register_tokenizer(_TOKENIZER_NAME, self.analyzer)
        self._schema = self._index.schema
        self._write_lock = threading.Lock()

    def _check_format(self) -> None:
        version = self.manifest.get("format_version")
        analyzer = self.manifest.get("analyzer", DEFAULT_ANALYZER)
        if (
            not isinstance(version, int)
            or version > FORMAT_VERSION
            or not isinstance(analyzer, str)
            or analyzer not in _ANALYZER_DESCRIPTIONS
        ):
            raise IndexNotFoundError(
                f"{self.index_dir} has index format {version!r} with analyzer {analyzer!r}; "
                f"this noterag reads format {FORMAT_VERSION} with analyzers "
                f"{', '.join(sorted(_ANALYZER_DESCRIPTIONS))}: upgrade noterag or rebuild the index"
            )

    @property
    def num_passages(self) -> int:
        return self._index.searcher().num_docs

    def _damaged(self, exc: BaseException) -> IndexDamagedError:
        return IndexDamagedError(
            f"the BM25 index at {self.index_dir} is damaged ({_engine_message(exc)}); rebuild "
            f"it: noterag index CORPUS --out {self.index_dir} --force"
        )

    def query_tokens(self, query: str) -> list[str]:
        """The query's terms, analyzed exactly as the indexed text was."""
        return self.analyzer.analyze(query)

    def build_query(self, query: str) -> tantivy.Query | None:
        """Bag-of-words OR query over title and text; ``None`` if no token survives analysis."""
        counts = Counter(self.query_tokens(query))
        if self.style.name != DEFAULT_STYLE:
            return self._style_query(counts)
        clauses = []
        for token, count in counts.items():
            for field in SEARCHED_FIELDS:
                term = tantivy.Query.term_query(self._schema, field, token)
                if count > 1:
                    term = tantivy.Query.boost_query(term, float(count))
                clauses.append((tantivy.Occur.Should, term))
        return tantivy.Query.boolean_query(clauses) if clauses else None

    def _style_query(self, counts: Counter[str]) -> tantivy.Query | None:
        """The style's query: per field a bag-of-words OR (Elasticsearch's ``match``), boosted,
        then the best field (``best_fields``) or their sum (a ``bool`` of ``should``s)."""
        if not counts:
            return None
        shape = _style_query(self.style)
        per_field = []
        for field, boost in shape.fields:
            terms = []
            for token, count in counts.items():
                term = tantivy.Query.term_query(self._schema, field, token)
                if count > 1:
                    term = tantivy.Query.boost_query(term, float(count))
                terms.append((tantivy.Occur.Should, term))
            field_query = tantivy.Query.boolean_query(terms)
            if boost != 1.0:
                field_query = tantivy.Query.boost_query(field_query, boost)
            per_field.append(field_query)
        if shape.best_field:
            return tantivy.Query.disjunction_max_query(per_field)
        return tantivy.Query.boolean_query([(tantivy.Occur.Should, q) for q in per_field])

    def search(self, query: str, k: int) -> list[tuple[Passage, float]]:
        """The top ``k`` passages for ``query`` with their BM25 scores, best first."""
        if k <= 0:
            return []
        tantivy_query = self.build_query(query)
        if tantivy_query is None:
            return []
        if self.style.name != DEFAULT_STYLE:
            wanted = self.style.hits_wanted(k)
            hits = [
                Hit(p["id"], p["title"], p["text"], score)
                for p, score in self._guarded_search(tantivy_query, wanted)
            ]
            return [
                ({"id": h.id, "title": h.title, "text": h.text}, h.score)
                for h in self.style.postprocess(query, hits, k)
            ]
        return self._guarded_search(tantivy_query, k)

    def _guarded_search(self, tantivy_query: tantivy.Query, k: int) -> list[tuple[Passage, float]]:
        # A file damaged after the index opened (its files are memory-mapped) shows up here:
        # as an error of tantivy's, or as a Rust panic, which pyo3 raises as a BaseException
        # that no `except Exception` would catch.
        try:
            return self._search(tantivy_query, k)
        except (OSError, ValueError) as exc:
            raise self._damaged(exc) from None
        except BaseException as exc:
            if type(exc).__name__ != "PanicException":
                raise
            raise self._damaged(exc) from None

    def _search(self, tantivy_query: tantivy.Query, k: int) -> list[tuple[Passage, float]]:
        searcher = self._index.searcher()
        # tantivy sizes its top-k heap by the limit: never ask for more than exist.
        limit = min(k, searcher.num_docs)
        if limit == 0:
            return []
        # count=False spares the Count collector. It does not make tantivy prune: tantivy-py
        # (0.27) wraps TopDocs in a MultiCollector, which scores every matching passage, so
        # block-max WAND never runs (docs/scale.md, "Query cost").
        result = searcher.search(tantivy_query, limit=limit, count=False)
        hits = []
        for score, address in result.hits:
            doc = searcher.doc(address)
            passage = {field: (doc.get_first(field) or "") for field in ("id", "title", "text")}
            hits.append((passage, float(score)))
        return hits

    def upsert(self, passages: Iterable[dict[str, Any]]) -> int:
        """Add ``{id, title?, text}`` passages; an already indexed id is replaced. Returns the count."""
        with self._write_lock, self._writer() as writer:
            n = 0
            for raw in passages:
                passage = {
                    "id": str(raw["id"]),
                    "title": raw.get("title") or "",
                    "text": raw["text"],
                }
                # Deletes apply only to documents added before them, so the new one survives.
                writer.delete_documents_by_term("id", passage["id"])
                writer.add_document(_to_document(passage, self.style))
                n += 1
        self._refresh_manifest()
        return n

    def delete(self, ids: Iterable[str]) -> None:
        """Remove the passages with these ids (unknown ids are ignored)."""
        with self._write_lock, self._writer() as writer:
            for passage_id in ids:
                writer.delete_documents_by_term("id", str(passage_id))
        self._refresh_manifest()

    def _writer(self) -> _CommittingWriter:
        try:
            writer = self._index.writer(heap_size=64_000_000, num_threads=1)
        except ValueError as exc:
            # tantivy allows one writer per index; another process may be writing.
            raise NoteragError(f"{self.index_dir}: cannot open the index for writing ({exc})")
        return _CommittingWriter(writer, self._index)

    def _refresh_manifest(self) -> None:
        self.manifest["count"] = self.num_passages
        self.manifest["updated"] = now()
        # Other content under the same path: a new identity (see indexdir.index_identity).
        self.manifest["build_id"] = new_build_id()
        write_manifest(self.index_dir, self.manifest)


def _engine_message(exc: BaseException) -> str:
    """tantivy's words for a failure, short: the file it names (its messages are Rust debug
    dumps, ``filepath: "x.idx"``) and the first line of the rest."""
    text = " ".join(str(exc).split())
    found = re.search(r'filepath: "([^"]+)"', text)
    if found is None:
        return text[:200] or type(exc).__name__
    kind = re.search(r"kind: (\w+)", text)
    head = re.split(r"[:{']", text, maxsplit=1)[0].strip()
    return f"{found.group(1)}: {head}" + (f" ({kind.group(1)})" if kind else "")


class _CommittingWriter:
    """Commit on success, roll back on error, and always release tantivy's writer lock."""

    def __init__(self, writer: tantivy.IndexWriter, index: tantivy.Index) -> None:
        self._writer, self._index = writer, index

    def __enter__(self) -> tantivy.IndexWriter:
        return self._writer

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        try:
            if exc_type is None:
                self._writer.commit()
            else:
                self._writer.rollback()
        finally:
            self._writer.wait_merging_threads()
        self._index.reload()


# --------------------------------------------------------------------------------------------
# LangChain retriever


class BM25Retriever(IndexDirRetriever):
    """BM25 over a noterag index directory (see ``build_bm25_index``).

    ``k`` is the default number of passages; ``retriever.invoke(query, k=3)`` overrides it per
    call. The index is opened on first use and shared by concurrent calls.
    """

    _index: Bm25Index | None = PrivateAttr(default=None)
    _open_lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    def load(self) -> Bm25Index:
        """Open the index (once) and return it; raises ``IndexNotFoundError`` if it is not there."""
        if self._index is None:
            with self._open_lock:
                if self._index is None:
                    self._index = Bm25Index(self.index_dir)
        return self._index

    def search(self, query: str, k: int | None = None) -> list[Document]:
        """The top ``k`` passages as Documents, without LangChain callbacks."""
        hits = self.load().search(query, self._resolve_k(k))
        return [to_document(passage, score) for passage, score in hits]
