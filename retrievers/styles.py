"""Retrieval styles: BM25 as a paper's official code ran it, for Elasticsearch and tantivy alike.

A style fixes what an index holds (its fields and their analyzer), the query sent for a
question, how many hits it asks for, and what is done to them before the top ``k`` are kept.
``elastic.py`` turns a style into an Elasticsearch mapping and search body
(``es:<url>/<index>?style=NAME``), ``bm25.py`` into a tantivy schema and query
(``noterag index CORPUS --out DIR --style NAME``). The styles:

* ``noterag`` (the default): fields ``title`` and ``text``, the ``english`` analyzer, a
  ``multi_match`` over ``title^1.25`` and ``text`` (summed per field in tantivy), no re-ranking.

* ``deepnote``: DeepNote's and Adaptive-Note's ``src/es_retrieve.py`` (byte-identical files:
  thunlp/DeepNote@cc2f0132737e04ec2d895e8c21673cee612ca1e7,
  thunlp/Adaptive-Note@ab69094f84558ab3dcda9ac9d530222a91c2d5bc) on the Elasticsearch 7.10.2 their
  READMEs install (client ``elasticsearch==7.9.1``). Their index scripts
  (``src/build_index/es/index_*.py``) send a mapping with a mapping type ``doc`` and the
  removed ``string`` type, and analyzers outside ``analysis.analyzer``; Elasticsearch 7 rejects
  it with HTTP 400, which the scripts ignore (``ignore=400``), so the bulk request creates the
  index with *dynamic mapping*: every string field becomes ``text`` with the ``standard``
  analyzer (Unicode word segmentation, lowercase, no stop words, no stemming) plus a
  ``keyword`` sub-field. Each passage is indexed as ``title``, ``title_unescape``
  (``html.unescape(title)``), ``text``, ``title_bigram`` and ``title_unescape_bigram`` (both
  ``html.unescape(title)``), ``text_bigram`` (the text), ``url``, ``id`` and ``original_json``.
  The query is a ``multi_match`` (``best_fields``: the best field's score, tie breaker 0)
  over ``title^1.25``, ``title_unescape^1.25``, ``text``, ``title_bigram^1.25``,
  ``title_unescape_bigram^1.25``, ``text_bigram``, asking for ``max(k, 50)`` hits; the hits are
  then re-scored by how exactly their title matches the query (``rerank_with_query``, below)
  and the top ``k`` kept. Not reproduced: ``original_json`` (a copy of the input line, never
  queried nor read back) and ``url`` for corpora without one (DeepNote writes ``"empty"``).

* ``ircot``: IRCoT's retriever server (StonyBrookNLP/ircot@3c1820f698eea5eeddb4fba3c56b64c961e063e4,
  ``retriever_server/build_index.py``, ``elasticsearch_retriever.py``,
  ``unified_retriever.py``; Elasticsearch 7.10, client ``elasticsearch==7.9.1``). Its mapping
  is accepted: ``title``, ``paragraph_text`` and ``url`` with the ``english`` analyzer,
  ``paragraph_index`` an integer, ``is_abstract`` a boolean, ``id`` dynamic. IRCoT's configs
  retrieve with ``document_type: title_paragraph_text``: a ``bool`` query with two ``should``
  clauses, ``match`` on ``paragraph_text`` and ``match`` on ``title`` (scores summed, no
  boost), 100 hits (``max_buffer_count``), of which the first per distinct paragraph text
  (stripped, lower-cased) is kept, sorted by score, top ``k``. For the ``hotpotqa`` corpus the
  server also filters ``is_abstract: true``, which every HotpotQA passage is: not reproduced.
  IRCoT's own client removes wh-words from the query first (``commaqa/inference/ircot.py``,
  ``remove_wh_words``): that belongs to the IRCoT method, not to the retriever.

IRCoT's retriever has no title re-ranking; the re-ranking of the top 50 is DeepNote's and
Adaptive-Note's (it descends from the HotpotQA Elasticsearch setup of Qi et al.'s GoldEn
Retriever).
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from noterag.base.errors import ConfigError

DEFAULT_STYLE = "noterag"


@dataclass(frozen=True)
class Style:
    """One retrieval style (see the module docstring)."""

    name: str
    # (field, boost) searched; the index's text fields. Order matters only for messages.
    fields: tuple[tuple[str, float], ...]
    # How per-field scores combine: "sum" (a bool should over fields) or "max" (best_fields).
    combine: str
    # Elasticsearch analyzer of the searched fields (tantivy: the nearest analyzer we have).
    analyzer: str
    text_field: str  # the field holding the passage text in the index's documents
    buffer: int = 0  # hits asked for before post-processing: max(k, buffer)
    rerank_titles: bool = False  # DeepNote's rerank_with_query
    dedup_text: bool = False  # IRCoT: first hit per distinct paragraph text

    def hits_wanted(self, k: int) -> int:
        return max(k, self.buffer)

    def postprocess(self, query: str, hits: list[Hit], k: int) -> list[Hit]:
        """The top ``k`` of ``hits`` (best first) after the style's re-ranking."""
        if self.dedup_text:
            hits = dedup_by_text(hits)
        if self.rerank_titles:
            hits = rerank_with_query(query, hits)
        return hits[:k]

    def source(self, passage: Mapping[str, str]) -> dict[str, Any]:
        """The document indexed for ``passage`` (``{id, title, text}``)."""
        title, text = passage["title"], passage["text"]
        if self.name == "deepnote":
            unescaped = html.unescape(title)
            return {
                "id": passage["id"],
                "url": passage.get("url") or "empty",  # DeepNote writes "empty" without one
                "title": title,
                "title_unescape": unescaped,
                "text": text,
                "title_bigram": unescaped,
                "title_unescape_bigram": unescaped,
                "text_bigram": text,
            }
        if self.name == "ircot":
            return {
                "id": passage["id"],
                "title": title,
                "paragraph_index": 0,  # IRCoT's value for every corpus but IIRC
                "paragraph_text": text,
                "url": passage.get("url") or "",
                "is_abstract": True,
            }
        return {"id": passage["id"], "title": title, "text": text}


@dataclass
class Hit:
    """A scored passage, as the styles' post-processing sees it."""

    id: str
    title: str
    text: str
    score: float


NOTERAG = Style(
    name="noterag",
    fields=(("title", 1.25), ("text", 1.0)),
    combine="max",
    analyzer="english",
    text_field="text",
)
DEEPNOTE = Style(
    name="deepnote",
    fields=(
        ("title", 1.25),
        ("title_unescape", 1.25),
        ("text", 1.0),
        ("title_bigram", 1.25),
        ("title_unescape_bigram", 1.25),
        ("text_bigram", 1.0),
    ),
    combine="max",
    analyzer="standard",
    text_field="text",
    buffer=50,  # es_retrieve.py: size=max(topn, rerank_topn), rerank_topn=50
    rerank_titles=True,
)
IRCOT = Style(
    name="ircot",
    fields=(("paragraph_text", 1.0), ("title", 1.0)),
    combine="sum",
    analyzer="english",
    text_field="paragraph_text",
    buffer=100,  # unified_retriever.py: max_buffer_count=100
    dedup_text=True,
)
STYLES: dict[str, Style] = {style.name: style for style in (NOTERAG, DEEPNOTE, IRCOT)}
# Adaptive-Note's es_retrieve.py is DeepNote's, byte for byte.
ALIASES = {"adaptive-note": "deepnote"}


def get_style(name: str | None) -> Style:
    """The style called ``name`` (None: the default); ``ConfigError`` naming the known ones."""
    key = (name or DEFAULT_STYLE).strip().lower()
    style = STYLES.get(ALIASES.get(key, key))
    if style is None:
        known = ", ".join(sorted([*STYLES, *ALIASES]))
        raise ConfigError(f"unknown retrieval style {name!r} (known: {known})")
    return style


# --------------------------------------------------------------------------------------------
# Post-processing, as the official code does it


def dedup_by_text(hits: Iterable[Hit]) -> list[Hit]:
    """IRCoT's ``retrieve_paragraphs``: one hit per ``text.strip().lower()``, sorted by score.

    Its ``OrderedDict`` keeps the *last* hit of a text at the position of the first; the
    sort that follows is stable, so among equal texts the later (lower-scored) hit survives.
    """
    by_text: dict[str, Hit] = {}
    for hit in hits:
        by_text[hit.text.strip().lower()] = hit
    return sorted(by_text.values(), key=lambda hit: hit.score, reverse=True)


# es_retrieve.py's core_title_matcher: a title without its parenthesised disambiguation.
_CORE_TITLE = re.compile(r"([^()]+[^\s()])(?:\s*\(.+\))?")


def core_title(title: str) -> str:
    found = _CORE_TITLE.match(title)
    return found.group(1) if found else title


def title_boost(query: str, title: str) -> float:
    """The factor ``es_retrieve.py``'s ``rerank_with_query`` multiplies a hit's score by.

    Carried over branch for branch from thunlp/DeepNote src/es_retrieve.py (``score_boost``);
    ``title`` is the raw title, its unescaped form is derived as the index did.
    """
    unescaped = html.unescape(title)
    core = core_title(unescaped)
    query1 = query[4:] if query.startswith(("The ", "the ")) else query
    if query == unescaped or query1 == unescaped:
        return 1.5
    if query.lower() == unescaped.lower() or query1.lower() == unescaped.lower():
        return 1.2
    if title.lower() in query:  # sic: the query is not lower-cased here
        return 1.1
    if query == core or query1 == core:
        return 1.2
    if query.lower() == core.lower() or query1.lower() == core.lower():
        return 1.1
    if core.lower() in query.lower():
        return 1.05
    return 1.0


def rerank_with_query(query: str, hits: Iterable[Hit]) -> list[Hit]:
    """``es_retrieve.py``'s ``rerank_with_query``: scores times ``title_boost``, re-sorted
    (a stable sort, so ties keep the engine's order)."""
    boosted = [
        Hit(hit.id, hit.title, hit.text, hit.score * title_boost(query, hit.title)) for hit in hits
    ]
    return sorted(boosted, key=lambda hit: -hit.score)
