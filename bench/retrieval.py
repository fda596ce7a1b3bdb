"""BM25 at scale: noterag's embedded index (tantivy) against bm25s on the same corpora.

    python bench/retrieval.py                          # synthetic 100k and 1M, plus HotpotQA
    python bench/retrieval.py --sizes 100000 --queries 200 --json /tmp/r.json

Corpora: synthetic ones, generated deterministically (seed) and streamed to a JSONL file, never
held in memory: a Zipfian vocabulary (exponent 1; the most frequent ranks are real English
stopwords, the rest pronounceable pseudo-words), passage lengths log-normal around 100 words,
titles of 1-4 words; and the HotpotQA dev500 corpus from ../shared/data when it is there.

Measured per corpus, each build in a fresh subprocess (its peak RSS from wait4, minus the RSS
of a subprocess that only imports the same modules, is the build's own memory):
index time, peak RSS, disk size, load time (open the index; warm page cache: the build just
wrote it), first-query time, query latency p50/p95 (queries of 3-8 distinct words taken from a
corpus passage, so each has a relevant passage; HotpotQA: its real questions), and batch
throughput (``search_many``, and 4 threads sharing one retriever).

bm25s (``BM25(method="lucene")``, English stopwords, no stemmer: a scipy sparse matrix in
memory) is run on the same corpora up to ``--bm25s-max`` passages; beyond that its figures are
extrapolated linearly from the largest measured size (marked "~"). ``bench/scale_bm25.py``
measures both up to 21M passages. The 5M row (HotpotQA's full Wikipedia corpus size) projects index
time, disk and memory with a linear fit through the two largest synthetic sizes.

Targets (issue 6): 1M passages query p50 <= 10 ms; 5M indexable within
24 GiB. Prints a table and writes JSON (default bench/results/retrieval.json).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import percentile, print_table, pseudo_syllables, write_results

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
K = 10
MIB = 1 << 20
STOPWORDS = [
    "the",
    "of",
    "and",
    "in",
    "to",
    "a",
    "was",
    "is",
    "for",
    "on",
    "as",
    "by",
    "with",
    "he",
    "that",
    "at",
    "from",
    "his",
    "it",
    "an",
    "were",
    "are",
    "which",
    "this",
    "be",
    "or",
    "has",
    "had",
    "their",
    "its",
    "they",
    "have",
    "her",
    "she",
    "been",
    "not",
    "but",
    "all",
    "there",
    "when",
    "into",
]


# --------------------------------------------------------------------------- synthetic corpus


def vocabulary(size: int) -> list[str]:
    """``size`` distinct words, most frequent first: stopwords, then pseudo-words whose length
    grows with their rank (frequent words are short, as in natural text)."""
    words = list(STOPWORDS)
    seen = set(words)
    syllables = pseudo_syllables()
    rank = 0
    while len(words) < size:
        # rank in mixed radix over syllables: 1 syllable, then 2, then 3...
        n, digits = rank, []
        count = len(syllables)
        length = 1
        while n >= count**length:
            n -= count**length
            length += 1
        for _ in range(length):
            n, d = divmod(n, count)
            digits.append(syllables[d])
        word = "".join(digits)
        rank += 1
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


def write_corpus(
    path: Path, n: int, *, seed: int = 0, vocab_size: int = 500_000, keep_every: int = 0
) -> list[list[str]]:
    """Write ``n`` passages to ``path`` (JSONL, in chunks); return the words of every
    ``keep_every``-th passage (the query sources)."""
    rng = np.random.default_rng(seed)
    vocab = np.array(vocabulary(vocab_size), dtype=object)
    cdf = np.cumsum(1.0 / np.arange(1, vocab_size + 1))
    cdf /= cdf[-1]
    kept: list[list[str]] = []
    keep_every = keep_every or max(1, n // 1000)
    with path.open("w") as out:
        for start in range(0, n, 10_000):
            m = min(10_000, n - start)
            lengths = np.clip(rng.lognormal(math.log(90), 0.45, m).astype(int), 20, 400)
            title_lengths = rng.integers(1, 5, m)
            words = vocab[np.searchsorted(cdf, rng.random(int(lengths.sum())))]
            titles = vocab[np.searchsorted(cdf, rng.random(int(title_lengths.sum())))]
            w_end, t_end = np.cumsum(lengths), np.cumsum(title_lengths)
            lines = []
            for i in range(m):
                text = words[w_end[i] - lengths[i] : w_end[i]]
                title = " ".join(titles[t_end[i] - title_lengths[i] : t_end[i]]).title()
                lines.append(
                    json.dumps({"id": str(start + i), "title": title, "text": " ".join(text)})
                )
                if (start + i) % keep_every == 0:
                    kept.append(list(text))
            out.write("\n".join(lines) + "\n")
    return kept


def make_queries(sources: list[list[str]], count: int, seed: int = 1) -> list[str]:
    """``count`` queries of 3-8 distinct non-stopword words, each from one source passage."""
    rng = np.random.default_rng(seed)
    stop = set(STOPWORDS)
    queries = []
    for i in range(count):
        words = sorted({w for w in sources[i % len(sources)] if w not in stop})
        size = min(len(words), int(rng.integers(3, 9)))
        queries.append(" ".join(rng.choice(words, size=size, replace=False)))
    return queries


# --------------------------------------------------------------------------- subprocesses

_BASELINE = "import json, noterag.retrievers, numpy; print(json.dumps({}))"

_BUILD = """
import json, sys
from noterag.retrievers import build_bm25_index
stats = build_bm25_index(sys.argv[1], sys.argv[2], progress=False)
print(json.dumps({"seconds": stats.seconds, "passages": stats.passages}))
"""

# bm25s: BM25 (Lucene's variant) as a scipy sparse matrix, what people pick at this scale in
# Python; English stopwords, no stemmer, single-threaded retrieval.
_BM25S = """
import json, sys, time
import bm25s
corpus, queries = sys.argv[1], json.loads(sys.argv[2])
started = time.perf_counter()
docs = []
for line in open(corpus):
    p = json.loads(line)
    docs.append(p["title"] + "\\n" + p["text"])
retriever = bm25s.BM25(method="lucene")
retriever.index(bm25s.tokenize(docs, stopwords="en", show_progress=False), show_progress=False)
build = time.perf_counter() - started
latencies = []
for q in queries:
    t = time.perf_counter()
    retriever.retrieve(bm25s.tokenize([q], stopwords="en", show_progress=False), k={k},
                       show_progress=False, n_threads=1)
    latencies.append(time.perf_counter() - t)
print(json.dumps({"seconds": build, "latencies": latencies}))
""".replace("{k}", str(K))


def run_child(code: str, *args: str) -> tuple[dict[str, Any], int]:
    """Run ``code`` in a fresh interpreter; its JSON output and its peak RSS in bytes."""
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    output = proc.stdout.read()
    # wait4, not waitpid: the child's own rusage (RUSAGE_CHILDREN would be the max over all)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise RuntimeError(f"benchmark subprocess failed ({proc.returncode})")
    return json.loads(output), usage.ru_maxrss * 1024  # Linux reports KiB


def dir_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


# --------------------------------------------------------------------------- one corpus


def bench_corpus(
    name: str, corpus: Path, queries: list[str], work: Path, bm25s_queries: int, baseline: int
) -> dict[str, Any]:
    from noterag.retrievers import BM25Retriever

    index_dir = work / f"{name}-index"
    built, rss = run_child(_BUILD, str(corpus), str(index_dir))
    row: dict[str, Any] = {
        "corpus": name,
        "passages": built["passages"],
        "corpus_mib": corpus.stat().st_size / MIB,
        "index_s": built["seconds"],
        "peak_rss_mib": rss / MIB,
        "build_rss_mib": (rss - baseline) / MIB,
        "disk_mib": dir_size(index_dir) / MIB,
    }
    started = time.perf_counter()
    retriever = BM25Retriever(index_dir=str(index_dir), k=K)
    retriever.load()
    row["load_ms"] = 1000 * (time.perf_counter() - started)
    started = time.perf_counter()
    retriever.search(queries[0])
    row["first_query_ms"] = 1000 * (time.perf_counter() - started)
    latencies = []
    for q in queries:
        started = time.perf_counter()
        retriever.search(q)
        latencies.append(time.perf_counter() - started)
    row["p50_ms"] = 1000 * statistics.median(latencies)
    row["p95_ms"] = 1000 * percentile(latencies, 95)
    started = time.perf_counter()
    retriever.search_many(queries)
    row["batch_qps"] = len(queries) / (time.perf_counter() - started)
    with ThreadPoolExecutor(4) as pool:
        started = time.perf_counter()
        list(pool.map(retriever.search, queries))
        row["threads4_qps"] = len(queries) / (time.perf_counter() - started)
    if bm25s_queries:
        out, rss = run_child(_BM25S, str(corpus), json.dumps(queries[:bm25s_queries]))
        row["bm25s_index_s"] = out["seconds"]
        row["bm25s_rss_mib"] = rss / MIB
        row["bm25s_p50_ms"] = 1000 * statistics.median(out["latencies"])
        row["bm25s_measured"] = True
    return row


def extrapolate_bm25s(row: dict[str, Any], measured: dict[str, Any]) -> None:
    """Beyond the largest measured size, bm25s's figures grow in proportion to the corpus (its
    matrix holds every posting; a query reads the columns of its terms)."""
    scale = row["passages"] / measured["passages"]
    row["bm25s_index_s"] = measured["bm25s_index_s"] * scale
    row["bm25s_rss_mib"] = measured["bm25s_rss_mib"] * scale
    row["bm25s_p50_ms"] = measured["bm25s_p50_ms"] * scale
    row["bm25s_measured"] = False


def project(rows: list[dict[str, Any]], n: int) -> dict[str, Any]:
    """Index time, disk and build memory at ``n`` passages: a line through the two largest
    synthetic corpora."""
    a, b = sorted(rows, key=lambda r: r["passages"])[-2:]
    line = lambda key: (
        a[key] + (b[key] - a[key]) * (n - a["passages"]) / (b["passages"] - a["passages"])
    )
    return {
        "corpus": f"projected {n // 1_000_000}M",
        "passages": n,
        "index_s": line("index_s"),
        "peak_rss_mib": line("peak_rss_mib"),
        "build_rss_mib": line("build_rss_mib"),
        "disk_mib": line("disk_mib"),
        "projected": True,
    }


# --------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000,1000000", help="synthetic corpus sizes")
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument(
        "--bm25s-max",
        type=int,
        default=1_000_000,
        help="largest corpus bm25s really runs on (extrapolated beyond)",
    )
    parser.add_argument("--bm25s-queries", type=int, default=20)
    parser.add_argument("--no-hotpotqa", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    rows: list[dict[str, Any]] = []
    _, baseline = run_child(_BASELINE)
    with tempfile.TemporaryDirectory(prefix="noterag-bench-") as tmp:
        work = Path(tmp)
        hotpot = DATA / "hotpotqa_dev500"
        if args.no_hotpotqa:
            pass
        elif (hotpot / "corpus.jsonl").is_file():
            questions = [
                json.loads(line)["question"] for line in (hotpot / "questions.jsonl").open()
            ]
            rows.append(
                bench_corpus(
                    "hotpotqa_dev500",
                    hotpot / "corpus.jsonl",
                    questions,
                    work,
                    args.bm25s_queries,
                    baseline,
                )
            )
        else:
            print(f"skipped HotpotQA: {hotpot} not found")
        measured_bm25s: dict[str, Any] | None = None
        for n in sorted(int(s) for s in args.sizes.split(",")):
            corpus = work / f"synthetic-{n}.jsonl"
            started = time.perf_counter()
            sources = write_corpus(corpus, n)
            generated = time.perf_counter() - started
            queries = make_queries(sources, args.queries)
            run_bm25s = n <= args.bm25s_max
            row = bench_corpus(
                f"synthetic {n // 1000}k",
                corpus,
                queries,
                work,
                args.bm25s_queries if run_bm25s else 0,
                baseline,
            )
            row["generate_s"] = generated
            if run_bm25s:
                measured_bm25s = row
            elif measured_bm25s is not None:
                extrapolate_bm25s(row, measured_bm25s)
            rows.append(row)
            corpus.unlink()
            shutil.rmtree(work / f"{row['corpus']}-index")
            print(f"  done {row['corpus']} (generated in {generated:.0f} s)", flush=True)
    synthetic = [r for r in rows if r["corpus"].startswith("synthetic")]
    if len(synthetic) >= 2:
        rows.append(project(synthetic, 5_000_000))
    for r in rows:
        if r.get("bm25s_p50_ms") and r.get("p50_ms"):
            r["speedup"] = r["bm25s_p50_ms"] / r["p50_ms"]
        if r.get("bm25s_measured") is False:
            for key in ("bm25s_p50_ms", "speedup"):
                r[key + "_est"] = r.pop(key)

    print(
        f"\nBM25 retrieval (k={K}; baseline interpreter RSS {baseline / MIB:.0f} MiB; "
        "times provisional on a shared machine)"
    )
    print_table(
        rows,
        [
            ("corpus", "corpus", "s"),
            ("passages", "passages", ",d"),
            ("index_s", "index s", ".1f"),
            ("build_rss_mib", "build MiB", ".0f"),
            ("peak_rss_mib", "peak RSS MiB", ".0f"),
            ("disk_mib", "disk MiB", ".0f"),
            ("load_ms", "load ms", ".1f"),
            ("first_query_ms", "1st q ms", ".1f"),
            ("p50_ms", "p50 ms", ".2f"),
            ("p95_ms", "p95 ms", ".2f"),
            ("batch_qps", "batch q/s", ".0f"),
            ("threads4_qps", "4 thr q/s", ".0f"),
        ],
    )
    print("\nbm25s (lucene BM25, sparse matrix in memory) on the same corpora; ~ = extrapolated")
    print_table(
        [r for r in rows if "bm25s_index_s" in r],
        [
            ("corpus", "corpus", "s"),
            ("bm25s_index_s", "index s", ".1f"),
            ("bm25s_rss_mib", "peak RSS MiB", ".0f"),
            ("bm25s_p50_ms", "p50 ms", ".1f"),
            ("bm25s_p50_ms_est", "~p50 ms", ".0f"),
            ("speedup", "speedup", ".0f"),
            ("speedup_est", "~speedup", ".0f"),
        ],
    )
    print("targets: 1M query p50 <= 10 ms; 5M build within 24 GiB")
    print(f"wrote {write_results('retrieval', rows, args.json)}")


if __name__ == "__main__":
    main()
