"""Dense index benchmark: build rate (passages/s) and gold-paragraph recall@k on HotpotQA.

    python bench/dense_build.py                      # HotpotQA dev500 (../shared/data)
    python bench/dense_build.py --limit 1000         # a quick look at the build rate only
    python bench/dense_build.py --out /tmp/dense     # keep the index (a later run can --reuse it)

Needs the ``dense`` extra. Recall@k = mean over questions of the fraction of supporting
paragraphs (by title) in the top k, for dense, BM25 and their hybrid (reciprocal rank fusion).
Prints only; nothing here is a test.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import tempfile
from pathlib import Path

from common import gold_recall, recall_text

from noterag.retrievers import BM25Retriever, build_bm25_index
from noterag.retrievers.dense import DEFAULT_MODEL, DenseRetriever, build_dense_index
from noterag.retrievers.hybrid import HybridRetriever

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
KS = (2, 5, 10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default="hotpotqa_dev500")
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--limit", type=int, help="embed only the first N passages (rate only)")
    parser.add_argument("--out", type=Path, help="keep the dense index here")
    parser.add_argument("--reuse", action="store_true", help="query the index at --out as is")
    args = parser.parse_args()

    folder = DATA / args.dataset
    corpus = folder / "corpus.jsonl"
    if not corpus.is_file():
        print(f"skipped: {corpus} not found")
        return
    with tempfile.TemporaryDirectory() as tmp:
        if args.limit:
            limited = Path(tmp) / "corpus.jsonl"
            with corpus.open() as src:
                limited.write_text("".join(itertools.islice(src, args.limit)))
            corpus = limited
        dense_dir = args.out or Path(tmp) / "dense"
        if not args.reuse:
            stats = build_dense_index(
                corpus, dense_dir, model_name=args.model, batch_size=args.batch_size
            )
            print(
                f"{args.dataset}: embedded {stats.passages:,} passages with {stats.model} "
                f"(dim {stats.dim}, batch {args.batch_size}) in {stats.embed_seconds:.1f} s: "
                f"{stats.passages / stats.embed_seconds:.1f} passages/s "
                f"({stats.seconds:.1f} s in all, with model loading)"
            )
        if args.limit:
            return
        questions = [json.loads(line) for line in (folder / "questions.jsonl").open()]
        build_bm25_index(corpus, Path(tmp) / "bm25", progress=False)
        dense = DenseRetriever(index_dir=str(dense_dir), k=max(KS))
        bm25 = BM25Retriever(index_dir=str(Path(tmp) / "bm25"), k=max(KS))
        retrievers = {
            "dense": dense,
            "bm25": bm25,
            "hybrid": HybridRetriever(retrievers=[bm25, dense], k=max(KS)),
        }
        dense.load()
        for name, retriever in retrievers.items():
            recall, latencies = gold_recall(retriever.invoke, questions, KS)
            print(
                f"  {name:7s} {recall_text(recall)}"
                f"   query p50 {statistics.median(latencies) * 1000:.1f} ms"
            )


if __name__ == "__main__":
    main()
