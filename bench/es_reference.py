"""Elasticsearch 7.10's BM25 for the ``deepnote`` style's query, re-implemented in Python.

No Elasticsearch server can run here; this is what the one DeepNote and Adaptive-Note used
computes for their query, written from Lucene 8.7 (the Lucene of Elasticsearch 7.10.2) so that
``bench/ircot_overlap.py`` can measure how far the embedded tantivy index is from it:

* analysis: the ``standard`` analyzer (the index was dynamically mapped, see
  ``noterag.retrievers.styles``): Unicode default word boundaries (UAX #29, here the ``regex``
  module's ``WORD`` mode), the segments holding a letter or digit, cut at 255 characters,
  lower-cased; no stop words;
* per field: ``docCount`` (documents with a token in the field), ``sumTotalTermFreq``, document
  frequencies; a document's length stored in one byte (``SmallFloat.intToByte4``) and read
  back (``byte4ToInt``), as Lucene's norms are;
* Lucene 8's ``BM25Similarity`` (k1=1.2, b=0.75, no ``(k1 + 1)`` factor):
  ``idf = ln(1 + (docCount - df + 0.5) / (df + 0.5))``,
  ``score = boost * idf * tf / (tf + k1 * (1 - b + b * length / avgLength))``;
* a ``match`` query is a sum of one clause per query token (a repeated token counts again);
  ``multi_match`` ``best_fields`` (tie breaker 0) the maximum over its boosted fields;
* ties: Lucene keeps the lower document number first (index order).
"""

from __future__ import annotations

import html
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence

import regex

K1, B = 1.2, 0.75
MAX_TOKEN_LENGTH = 255  # StandardAnalyzer's default: longer words are cut into pieces
_SEGMENTS = regex.compile(r"(?wV1)\b")
_WORDLIKE = regex.compile(r"[\p{L}\p{N}]")


def standard_tokens(text: str) -> list[str]:
    """Elasticsearch's ``standard`` analyzer: UAX #29 words, lower-cased."""
    tokens = []
    for segment in _SEGMENTS.split(text):
        if not _WORDLIKE.search(segment):
            continue  # spaces and punctuation between words
        for start in range(0, len(segment), MAX_TOKEN_LENGTH):
            tokens.append(segment[start : start + MAX_TOKEN_LENGTH].lower())
    return tokens


# ------------------------------------------------------------------------ Lucene's SmallFloat


def _long_to_int4(i: int) -> int:
    bits = i.bit_length()
    if bits < 4:
        return i
    shift = bits - 4
    encoded = (i >> shift) & 0x07  # the highest bit is implicit
    return encoded | ((shift + 1) << 3)


def _int4_to_long(i: int) -> int:
    bits = i & 0x07
    shift = (i >> 3) - 1
    return bits if shift == -1 else (bits | 0x08) << shift


_NUM_FREE_VALUES = 255 - _long_to_int4(2**31 - 1)


def int_to_byte4(i: int) -> int:
    """``SmallFloat.intToByte4``: a length as one (unsigned) byte."""
    if i < _NUM_FREE_VALUES:
        return i
    return _NUM_FREE_VALUES + _long_to_int4(i - _NUM_FREE_VALUES)


def byte4_to_int(b: int) -> int:
    """``SmallFloat.byte4ToInt``: the length a norm byte stands for."""
    if b < _NUM_FREE_VALUES:
        return b
    return min(_NUM_FREE_VALUES + _int4_to_long(b - _NUM_FREE_VALUES), 2**31 - 1)


# ------------------------------------------------------------------------ the index


class FieldIndex:
    """One analyzed field of every document: postings, norms and the field's statistics."""

    def __init__(self, values: Iterable[str]) -> None:
        self.postings: dict[str, list[tuple[int, int]]] = defaultdict(list)
        self.lengths: list[int] = []  # decoded norms
        doc_count = total = 0
        for doc, value in enumerate(values):
            tokens = standard_tokens(value)
            self.lengths.append(byte4_to_int(int_to_byte4(len(tokens))))
            if tokens:
                doc_count += 1
                total += len(tokens)
            for term, tf in Counter(tokens).items():
                self.postings[term].append((doc, tf))
        self.doc_count = doc_count
        self.avg_length = total / doc_count if doc_count else 0.0

    def match(self, tokens: Sequence[str], boost: float) -> dict[int, float]:
        """Document -> score of a ``match`` query of these tokens on this field."""
        scores: dict[int, float] = defaultdict(float)
        for term, repeats in Counter(tokens).items():
            postings = self.postings.get(term)
            if not postings:
                continue
            df = len(postings)
            idf = math.log(1 + (self.doc_count - df + 0.5) / (df + 0.5))
            weight = boost * idf * repeats
            for doc, tf in postings:
                norm = K1 * (1 - B + B * self.lengths[doc] / self.avg_length)
                scores[doc] += weight * tf / (tf + norm)
        return scores


class DeepNoteIndex:
    """The ``deepnote`` style's Elasticsearch index of ``passages`` ({id, title, text})."""

    # (source field, boost); the *_bigram fields hold the same values under the same analyzer,
    # so their scores equal these and never change a best_fields maximum.
    FIELDS = (("title", 1.25), ("title_unescape", 1.25), ("text", 1.0))

    def __init__(self, passages: Sequence[Mapping[str, str]]) -> None:
        self.passages = list(passages)
        values = {
            "title": [p["title"] for p in self.passages],
            "title_unescape": [html.unescape(p["title"]) for p in self.passages],
            "text": [p["text"] for p in self.passages],
        }
        self.fields = {name: FieldIndex(values[name]) for name, _ in self.FIELDS}

    def search(self, query: str, size: int) -> list[tuple[int, float]]:
        """(document, score) of the top ``size``: the best boosted field of each document."""
        tokens = standard_tokens(query)
        best: dict[int, float] = {}
        for name, boost in self.FIELDS:
            for doc, score in self.fields[name].match(tokens, boost).items():
                if score > best.get(doc, 0.0):
                    best[doc] = score
        ranked = sorted(best.items(), key=lambda item: (-item[1], item[0]))
        return ranked[:size]
