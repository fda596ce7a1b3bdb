"""Quick BM25 benchmark: build time, gold-paragraph recall@k and query latency.

    python bench/retrieval_quick.py                      # HotpotQA dev500 (../shared/data)
    python bench/retrieval_quick.py --synthetic 200000   # scale check on a generated corpus

Recall@k = mean over questions of the fraction of supporting paragraphs (by title) in the
top k. Prints only; nothing here is a test.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from common import gold_recall, recall_text

from noterag.retrievers import BM25Retriever, build_bm25_index

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
KS = (2, 5, 10, 20)


def hotpotqa(dataset: str, analyzer: str) -> None:
    folder = DATA / dataset
    if not (folder / "corpus.jsonl").is_file():
        print(f"skipped: {folder} not found")
        return
    questions = [json.loads(line) for line in (folder / "questions.jsonl").open()]
    with tempfile.TemporaryDirectory() as tmp:
        stats = build_bm25_index(
            folder / "corpus.jsonl", Path(tmp) / "idx", progress=False, analyzer=analyzer
        )
        print(f"{dataset}: built {stats.passages:,} passages in {stats.seconds:.2f} s ({analyzer})")
        retriever = BM25Retriever(index_dir=str(Path(tmp) / "idx"), k=max(KS))
        retriever.load()
        recall, latencies = gold_recall(retriever.search, questions, KS)
        print(f"  {recall_text(recall)}")
        _print_latency(latencies)


def synthetic(n: int) -> None:
    rng = random.Random(0)
    vocab = [f"w{i}" for i in range(50_000)]
    # Zipf-like, as in natural text; cumulative once, or choices() re-sums 50k weights per call.
    cum_weights = list(itertools.accumulate(1 / (i + 1) for i in range(len(vocab))))
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.jsonl"
        with corpus.open("w") as out:
            for i in range(n):
                words = rng.choices(vocab, cum_weights=cum_weights, k=100)
                out.write(
                    json.dumps({"id": i, "title": " ".join(words[:3]), "text": " ".join(words)})
                )
                out.write("\n")
        stats = build_bm25_index(corpus, Path(tmp) / "idx", progress=True)
        print(f"synthetic: built {stats.passages:,} passages in {stats.seconds:.1f} s")
        retriever = BM25Retriever(index_dir=str(Path(tmp) / "idx"), k=10)
        retriever.load()
        latencies = []
        for _ in range(300):
            query = " ".join(rng.choices(vocab, cum_weights=cum_weights, k=12))
            started = time.perf_counter()
            retriever.search(query)
            latencies.append(time.perf_counter() - started)
        _print_latency(latencies)


def _print_latency(latencies: list[float]) -> None:
    ms = sorted(x * 1000 for x in latencies)
    p95 = ms[int(0.95 * (len(ms) - 1))]
    print(f"  query latency: p50 {statistics.median(ms):.2f} ms, p95 {p95:.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="hotpotqa_dev500")
    parser.add_argument("--analyzer", default="english", choices=["english", "standard"])
    parser.add_argument("--synthetic", type=int, default=0, help="passages to generate")
    args = parser.parse_args()
    if args.synthetic:
        synthetic(args.synthetic)
    else:
        hotpotqa(args.dataset, args.analyzer)


if __name__ == "__main__":
    main()
