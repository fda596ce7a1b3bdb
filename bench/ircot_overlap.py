"""How close the embedded BM25 index comes to the papers' Elasticsearch retrieval: top-5 overlap.

DeepNote and Adaptive-Note retrieved for HotpotQA, 2WikiMQA and MuSiQue (the IRCoT question
subsets) with ``es_retrieve.py`` on Elasticsearch 7.10: the ``deepnote`` style of
``noterag.retrievers.styles``. No Elasticsearch server can run here, so the reference is
``bench/es_reference.py``, Lucene 8.7's BM25 and Elasticsearch's standard analyzer
re-implemented in Python for that style's index and ``multi_match`` query; both rankings then
go through the same re-ranking of the top 50 by title (``styles.rerank_with_query``).

Compared on the shared HotpotQA sample (``../shared/data/hotpotqa_dev500``: 4,858 passages, 500
questions as queries), for each question's top 5:

* ``deepnote``: the embedded index built with ``--style deepnote`` (``es-standard`` analyzer,
  disjunction-max of the boosted fields, the same re-ranking) against the reference;
* ``deepnote_before_rerank``: the same two without the re-ranking (the engines alone);
* ``noterag_default``: the default embedded index (``english`` analyzer, fields summed, no
  re-ranking) against the reference, for scale.

Figures: mean overlap@5 (|ours ∩ reference| / 5), the share of questions with the same five
passages in the same order, and with the same first passage; gold-paragraph recall@5 of each.

    .venv/bin/python bench/ircot_overlap.py [--data DIR] [--limit N]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from common import print_table, write_results
from es_reference import DeepNoteIndex

from noterag.retrievers.bm25 import Bm25Index, build_bm25_index
from noterag.retrievers.styles import DEEPNOTE, Hit

ROOT = Path(__file__).resolve().parents[1]
# ../shared/data beside the checkout (or beside the folder of worktrees holding it).
DATA = next(
    (
        root / "shared" / "data" / "hotpotqa_dev500"
        for root in (ROOT.parent, ROOT.parent.parent)
        if (root / "shared" / "data" / "hotpotqa_dev500").is_dir()
    ),
    ROOT.parent / "shared" / "data" / "hotpotqa_dev500",
)
K = 5


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DATA, help="folder with corpus/questions")
    parser.add_argument("--limit", type=int, default=None, help="first N questions only")
    args = parser.parse_args()
    corpus, questions_path = args.data / "corpus.jsonl", args.data / "questions.jsonl"
    if not corpus.is_file() or not questions_path.is_file():
        print(f"skipped: no {corpus} (the shared HotpotQA sample; see ../shared/data/README.md)")
        return 0
    passages = [json.loads(line) for line in corpus.open(encoding="utf-8")]
    questions = [json.loads(line) for line in questions_path.open(encoding="utf-8")]
    questions = questions[: args.limit] if args.limit else questions

    started = time.perf_counter()
    reference = DeepNoteIndex(passages)
    reference_seconds = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as tmp:
        build_bm25_index(
            corpus, Path(tmp) / "deepnote", progress=False, style="deepnote", num_threads=1
        )
        build_bm25_index(corpus, Path(tmp) / "default", progress=False, num_threads=1)
        styled, default = Bm25Index(Path(tmp) / "deepnote"), Bm25Index(Path(tmp) / "default")
        rows = compare(passages, questions, reference, styled, default)
    rows_by_name = {row["comparison"]: row for row in rows}
    print_table(
        rows,
        [
            ("comparison", "comparison", ""),
            ("overlap_at_5", "overlap@5", ".3f"),
            ("same_top5_in_order", "same 5, same order", ".3f"),
            ("same_top1", "same top 1", ".3f"),
            ("recall_at_5_ours", "recall@5 ours", ".3f"),
            ("recall_at_5_reference", "recall@5 ES ref", ".3f"),
        ],
    )
    path = write_results(
        "ircot_overlap",
        {
            "what": "top-5 overlap of the embedded BM25 index with a Python re-implementation "
            "of Elasticsearch 7.10's BM25 for DeepNote's/Adaptive-Note's es_retrieve.py query "
            "(bench/es_reference.py); hotpotqa_dev500 corpus, its questions as queries",
            "corpus": str(corpus),
            "passages": len(passages),
            "questions": len(questions),
            "k": K,
            "reference_build_seconds": round(reference_seconds, 2),
            "rows": rows_by_name,
        },
    )
    print(f"wrote {path}")
    return 0


def compare(
    passages: list[dict[str, str]],
    questions: list[dict[str, Any]],
    reference: DeepNoteIndex,
    styled: Bm25Index,
    default: Bm25Index,
) -> list[dict[str, Any]]:
    def ref_hits(query: str) -> list[Hit]:
        return [
            Hit(passages[doc]["id"], passages[doc]["title"], passages[doc]["text"], score)
            for doc, score in reference.search(query, DEEPNOTE.hits_wanted(K))
        ]

    rankings: dict[str, list[tuple[list[str], list[str]]]] = {
        "deepnote": [],
        "deepnote_before_rerank": [],
        "noterag_default": [],
    }
    titles = {p["id"]: p["title"] for p in passages}
    recall = {name: [0.0, 0.0] for name in rankings}
    for question in questions:
        query = question["question"]
        hits = ref_hits(query)
        ref_raw = [h.id for h in hits[:K]]
        ref_final = [h.id for h in DEEPNOTE.postprocess(query, hits, K)]
        ours_final = [p["id"] for p, _ in styled.search(query, K)]
        ours_raw = [p["id"] for p, _ in styled._guarded_search(styled.build_query(query), K)]
        ours_default = [p["id"] for p, _ in default.search(query, K)]
        pairs = {
            "deepnote": (ours_final, ref_final),
            "deepnote_before_rerank": (ours_raw, ref_raw),
            "noterag_default": (ours_default, ref_final),
        }
        gold = set(question.get("supporting_titles") or [])
        for name, (ours, ref) in pairs.items():
            rankings[name].append((ours, ref))
            if gold:
                recall[name][0] += len(gold & {titles[i] for i in ours}) / len(gold)
                recall[name][1] += len(gold & {titles[i] for i in ref}) / len(gold)
    rows = []
    n = len(questions)
    for name, pairs_list in rankings.items():
        rows.append(
            {
                "comparison": name,
                "overlap_at_5": sum(len(set(a) & set(b)) / K for a, b in pairs_list) / n,
                "same_top5_in_order": sum(a == b for a, b in pairs_list) / n,
                "same_top1": sum(a[:1] == b[:1] for a, b in pairs_list) / n,
                "recall_at_5_ours": recall[name][0] / n,
                "recall_at_5_reference": recall[name][1] / n,
            }
        )
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
