"""A seeded, streaming generator of a corpus shaped like DPR's Wikipedia (``psgs_w100.tsv``).

    python bench/wiki_corpus.py --passages 21015324 --seed 0 --out /data/wiki21m.jsonl
    python bench/wiki_corpus.py --passages 1000000 --out wiki1m.tsv --format tsv

Real Wikipedia dumps cannot be downloaded here, so the retrieval benchmarks at the papers' scale
(``bench/scale_bm25.py``) measure on this. What it matches, and where the figures come from:

* **Passages**: DPR split each article of the 2018-12-20 English Wikipedia into disjoint blocks
  of 100 words, giving 21,015,324 passages, each with its article's title (Karpukhin et al.,
  2020, "Dense Passage Retrieval", section 4.1; the file ALCE and FlashRAG reuse). So every
  passage has exactly 100 words except an article's last one, which holds the remainder
  (here uniform in 1..100).
* **Title repetition**: that dump had about 5.8 million articles (Wikipedia's own article
  count, December 2018), so an article gives 21.0 / 5.8 = 3.6 passages on average. The
  distribution of passages per article is not published; it is drawn here from a geometric
  distribution with that mean (many one-passage stubs, a long tail of long articles). The
  passages of one article are consecutive, as in the real file.
* **Vocabulary**: Zipf's law with exponent 1 over ``VOCABULARY`` = 4 million word types
  (Heaps' law, V = 30 N^0.55, gives about 4 million types for DPR's 2.1 billion tokens). The
  most frequent ranks are real English words, ordered by their frequency in the shipped
  HotpotQA/MuSiQue/2Wiki paragraphs (real Wikipedia text), which also hold every word of the
  shipped questions; the rest are pronounceable pseudo-words. So real questions, used as
  queries, hit posting lists of realistic lengths.
* **Burstiness**: an article repeats its own words: a fifth of each passage's words come from
  the article's 30 topic words (drawn from the vocabulary by the same Zipf law) and its title
  words, so terms recur within a document as in real text (BM25's tf saturation matters).

Output: JSONL ``{"id", "title", "text"}`` (what ``noterag index`` reads) or DPR's TSV
(``id\\ttext\\ttitle`` with a header line). Ids are "1".."N", as in DPR. Written in batches,
never held in memory (peak about 0.6 GiB, the vocabulary's tables), through a temporary file
renamed into place when complete. Deterministic: the same ``--seed`` and ``--passages`` give the
same bytes, and a shorter corpus is a prefix of a longer one with the same seed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from common import pseudo_syllables

ROOT = Path(__file__).resolve().parents[1]
# The shared data folder next to the checkout (main: /work/main -> /work/shared/data) or next
# to a parent of it (a worktree: /work/wt/g -> /work/shared/data).
DATA = next(
    (p / "shared" / "data" for p in ROOT.parents if (p / "shared" / "data").is_dir()),
    ROOT.parent / "shared" / "data",
)
# Real paragraphs and questions, in this order of preference; the first dataset folder holding
# them sets the real words' ranks. noterag/data is the sample shipped in the package.
SOURCES = ("hotpotqa_dev500", "musique_dev200", "twowiki_dev164", "ircot_test500")
DPR_PASSAGES = 21_015_324
ARTICLES_2018 = 5_800_000
PASSAGE_WORDS = 100
VOCABULARY = 4_000_000
TOPIC_WORDS = 30
TOPIC_SHARE = 0.2
BATCH = 20_000
TITLE_FROM = 500
_EXACT_RANKS = 4096
WORD = re.compile(r"[a-z0-9]+")


def question_files() -> list[Path]:
    """The shipped question files (real multi-hop questions: the benchmarks' queries)."""
    found = [DATA / name / "questions.jsonl" for name in SOURCES]
    return [p for p in found if p.is_file()] or [
        ROOT / "noterag" / "data" / "sample_questions.jsonl"
    ]


def load_questions(limit: int | None = None) -> list[str]:
    """Real questions, HotpotQA's first, as the queries of the scale benchmarks."""
    questions: list[str] = []
    for path in question_files():
        with path.open(encoding="utf-8") as lines:
            questions.extend(json.loads(line)["question"] for line in lines if line.strip())
    return questions[:limit] if limit else questions


def _real_words() -> list[str]:
    """Real words, most frequent first: counted over the shipped paragraphs and questions."""
    counts: Counter[str] = Counter()
    corpora = [DATA / name / "corpus.jsonl" for name in SOURCES]
    corpora = [p for p in corpora if p.is_file()] or [
        ROOT / "noterag" / "data" / "sample_corpus.jsonl"
    ]
    for path in corpora:
        with path.open(encoding="utf-8") as lines:
            for line in lines:
                passage = json.loads(line)
                text = (
                    f"{passage.get('title', '')} {passage.get('text', passage.get('contents', ''))}"
                )
                counts.update(WORD.findall(text.lower()))
    for question in load_questions():
        counts.update(WORD.findall(question.lower()))
    # Ties broken by the word, so the order never depends on the files' order.
    return [w for w, _ in sorted(counts.items(), key=lambda item: (-item[1], item[0]))]


def vocabulary(size: int = VOCABULARY) -> list[str]:
    """``size`` distinct words, most frequent first: real words, then pseudo-words whose length
    grows with their rank (frequent words are short, as in natural text)."""
    words = _real_words()[:size]
    seen = set(words)
    syllables = pseudo_syllables()
    base = len(syllables)
    rank, length, first_of_length = 0, 2, 0
    while len(words) < size:
        # rank -> a fixed-length word in base-`base` over syllables (2 syllables, then 3, ...)
        n = rank - first_of_length
        if n >= base**length:
            first_of_length += base**length
            length += 1
            continue
        parts = []
        for _ in range(length):
            n, digit = divmod(n, base)
            parts.append(syllables[digit])
        word = "".join(parts)
        rank += 1
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


class WikiCorpus:
    """The generator: ``passages()`` yields ``(id, title, text)`` in order."""

    def __init__(self, n: int, seed: int = 0, vocab_size: int = VOCABULARY) -> None:
        self.n = n
        self.rng = np.random.default_rng(seed)
        self.words = np.array(vocabulary(vocab_size), dtype=object)
        weights = 1.0 / np.arange(1, vocab_size + 1, dtype=np.float64)  # Zipf, exponent 1
        self.cdf = np.cumsum(weights)
        self.harmonic = float(self.cdf[-1])
        self.cdf /= self.harmonic
        # Titles are names, not function words: drawn by the same law from rank TITLE_FROM on.
        self.title_cdf = np.cumsum(weights[TITLE_FROM:])
        self.title_cdf /= self.title_cdf[-1]
        self.mean_passages = DPR_PASSAGES / ARTICLES_2018

    def _zipf(self, count: int) -> np.ndarray:
        return self._ranks(self.rng.random(count), self.cdf, self.harmonic)

    @staticmethod
    def _ranks(u: np.ndarray, cdf: np.ndarray, harmonic: float) -> np.ndarray:
        """Zipf ranks (0-based) for uniform ``u``: the exact table for the first ranks, the
        inverse of H_r = ln r + 0.5772 (the harmonic number, exact within 1/2r) beyond; a
        binary search over the whole 4M-entry table misses the cache for every word."""
        head = cdf[:_EXACT_RANKS]
        ranks = np.searchsorted(head, u)
        tail = ranks >= _EXACT_RANKS
        approx = np.exp(u[tail] * harmonic - 0.5772156649) - 0.5
        ranks[tail] = np.clip(approx.astype(np.int64), _EXACT_RANKS, len(cdf) - 1)
        return ranks

    def passages(self) -> Iterator[tuple[int, str, str]]:
        produced = 0
        article = 0
        while produced < self.n:
            # A batch of whole articles (the last one cut at n).
            sizes = self.rng.geometric(1.0 / self.mean_passages, BATCH // 4)
            tails = self.rng.integers(1, PASSAGE_WORDS + 1, len(sizes))
            title_lengths = self.rng.integers(1, 5, len(sizes))
            title_u = self.rng.random(int(title_lengths.sum()))
            titles = self.words[TITLE_FROM + np.searchsorted(self.title_cdf, title_u)].tolist()
            topics = self._zipf(len(sizes) * TOPIC_WORDS).reshape(len(sizes), TOPIC_WORDS)
            lengths = []
            owner = []
            for a, size in enumerate(sizes.tolist()):
                lengths.extend([PASSAGE_WORDS] * (size - 1) + [int(tails[a])])
                owner.extend([a] * size)
            lengths_arr = np.array(lengths)
            owner_arr = np.array(owner)
            total = int(lengths_arr.sum())
            ids = self._zipf(total)
            # A fifth of the words from the article's own topic words (burstiness).
            topical = self.rng.random(total) < TOPIC_SHARE
            token_owner = np.repeat(owner_arr, lengths_arr)
            picks = self.rng.integers(0, TOPIC_WORDS, total)
            ids[topical] = topics[token_owner[topical], picks[topical]]
            tokens = self.words[ids].tolist()
            title_ends = np.cumsum(title_lengths).tolist()
            title_text = [
                " ".join(titles[end - length : end]).title()
                for end, length in zip(title_ends, title_lengths.tolist(), strict=True)
            ]
            start = 0
            for length, a in zip(lengths, owner, strict=True):
                if produced >= self.n:
                    return
                produced += 1
                yield produced, title_text[a], " ".join(tokens[start : start + length])
                start += length
            article += len(sizes)


def write(path: Path, n: int, seed: int, fmt: str, progress: bool = True) -> float:
    """Write the corpus to ``path`` (atomically); returns the seconds taken."""
    started = time.perf_counter()
    corpus = WikiCorpus(n, seed)
    tmp = path.with_name(f".{path.name}.part")
    # Words and titles are [a-z0-9] and spaces only, so no JSON or TSV escaping is needed.
    line = (
        '{{"id": "{0}", "title": "{1}", "text": "{2}"}}\n' if fmt == "jsonl" else "{0}\t{2}\t{1}\n"
    )
    with tmp.open("w", encoding="utf-8", buffering=1 << 22) as out:
        if fmt == "tsv":
            out.write("id\ttext\ttitle\n")
        batch: list[str] = []
        for pid, title, text in corpus.passages():
            batch.append(line.format(pid, title, text))
            if len(batch) == BATCH:
                out.write("".join(batch))
                batch.clear()
                if progress and pid % 1_000_000 == 0:
                    elapsed = time.perf_counter() - started
                    eta = elapsed * (n - pid) / pid
                    print(f"{pid:,} / {n:,} passages, {elapsed:.0f} s, ETA {eta:.0f} s", flush=True)
        out.write("".join(batch))
    os.replace(tmp, path)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=DPR_PASSAGES)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--format", choices=("jsonl", "tsv"), help="default: from --out's suffix")
    args = parser.parse_args()
    if args.passages < 1:
        sys.exit("error: --passages must be at least 1")
    fmt = args.format or ("tsv" if args.out.suffix == ".tsv" else "jsonl")
    seconds = write(args.out, args.passages, args.seed, fmt)
    size = args.out.stat().st_size
    print(
        f"wrote {args.passages:,} passages ({size / 2**30:.2f} GiB) to {args.out} in {seconds:.0f} s"
    )


if __name__ == "__main__":
    main()
