"""BM25 at the papers' scale: noterag's embedded index (tantivy) and bm25s, 1M to 21M passages.

    python bench/wiki_corpus.py --passages 21015324 --out /work/scale21/wiki21m.jsonl
    # one long build per run; each build's figures are recorded beside its index
    nice -n 5 python bench/scale_bm25.py --corpus /work/scale21/wiki21m.jsonl \\
        --sizes 21015324 --work /work/scale21 --heap-mb 7000 --build-only
    nice -n 5 python bench/scale_bm25.py ... --sizes 1000000,5000000 --heap-mb 7000 --skip-bm25s
    nice -n 15 python bench/scale_bm25.py ... --sizes 1000000,2000000,5000000 --skip-noterag
    # then the table of every size, from the recorded builds plus fresh query figures
    python bench/scale_bm25.py ... --sizes 1000000,2000000,5000000,21015324 --reuse

The corpus is ``bench/wiki_corpus.py``'s DPR-shaped one; a size below its length uses its first
N lines (the generator's prefixes are themselves seeded corpora), written once to ``--work``.
Queries: the shipped real multi-hop questions (HotpotQA's first), top-5.

Per size, for noterag (each build in a fresh subprocess, its figures written to
``WORK/bm25-N.build.json`` so that ``--reuse`` reports them without building again):

* build seconds, peak RSS (``wait4``: includes the index files tantivy memory-maps while it
  merges, which the kernel can drop at any time) and peak anonymous memory (``RssAnon``
  sampled every 0.2 s: the memory the build really holds), index size on disk;
* build CPU seconds (user + system, from ``wait4``): on a shared machine the wall-clock time
  measures the scheduler as much as the code, the CPU time does not;
* single-thread query latency p50/p95, wall clock and CPU (``thread_time``: tantivy searches
  in the calling thread) as noterag searches (``count=False``), the same with the match count
  asked for (``count=True``: tantivy's ``(TopDocs, Count)`` path, which scores every match)
  and the top-5 overlap between the two (1.0: identical). tantivy-py (0.27) collects every
  search through a ``MultiCollector``, which has no pruning path, so both score every matching
  passage: the overlap is 1.0 by construction and the two latencies agree (docs/scale.md);
* queries/s with 2 threads sharing one index.

bm25s (``method="lucene"``, English stopwords, no stemmer, scipy sparse matrix held in memory)
runs on the same corpora and queries up to ``--bm25s-max`` passages, in a subprocess with its
address space capped at ``--bm25s-mem-gib`` (a build that does not fit fails there instead of
pushing the machine into swap); a size it cannot hold is reported as such. Its figures are
recorded in ``WORK/bm25s-N.json``.

JSON rows (bench/results/scale_bm25.json): ``passages``, ``build_s``, ``build_cpu_s``,
``peak_rss_gib``, ``peak_anon_gib``, ``disk_gib``, ``p50_ms``, ``p95_ms``, ``cpu_p50_ms``,
``cpu_p95_ms``, ``exhaustive_p50_ms``, ``top5_overlap``, ``qps_2threads``, and the same with a
``bm25s_`` prefix.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from common import RESULTS, percentile, print_table, publish_estimates, write_results
from wiki_corpus import load_questions

GIB = 1 << 30
K = 5

_BUILD = """
import json, sys
from noterag.retrievers import build_bm25_index
from noterag.retrievers.bm25 import POSTINGS
stats = build_bm25_index(sys.argv[1], sys.argv[2], progress=False, heap_mb=int(sys.argv[3]))
print(json.dumps({"seconds": stats.seconds, "passages": stats.passages, "postings": POSTINGS}))
"""

_BM25S = """
import json, resource, sys, time
limit = int(float(sys.argv[3]) * 2**30)
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
import bm25s
corpus, queries = sys.argv[1], json.loads(sys.argv[2])
started = time.perf_counter()
texts = []
with open(corpus, encoding="utf-8") as lines:
    for line in lines:
        p = json.loads(line)
        texts.append(p["title"] + "\\n" + p["text"])
tokens = bm25s.tokenize(texts, stopwords="en", show_progress=False)
del texts
retriever = bm25s.BM25(method="lucene")
retriever.index(tokens, show_progress=False)
del tokens
build = time.perf_counter() - started
latencies, cpu_latencies = [], []
for q in queries:
    t, c = time.perf_counter(), time.thread_time()
    # n_threads=0: in this thread (1 would run it in a pool thread, out of thread_time's sight)
    retriever.retrieve(bm25s.tokenize([q], stopwords="en", show_progress=False), k={k},
                       show_progress=False, n_threads=0)
    latencies.append(time.perf_counter() - t)
    cpu_latencies.append(time.thread_time() - c)
started = time.perf_counter()
retriever.retrieve(bm25s.tokenize(queries, stopwords="en", show_progress=False), k={k},
                   show_progress=False, n_threads=2)
qps = len(queries) / (time.perf_counter() - started)
print(json.dumps({"seconds": build, "latencies": latencies, "cpu_latencies": cpu_latencies,
                  "qps": qps}))
""".replace("{k}", str(K))


def run_measured(
    args: list[str], label: str = ""
) -> tuple[dict[str, Any] | None, int, int, str, float]:
    """Run a child; its JSON output (None if it failed), peak RSS and peak RssAnon in bytes,
    its stderr's last line and its CPU seconds (user + system). With a ``label``, a line a
    minute says how far it is (a 21M build runs for an hour)."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    peak_anon = 0
    done = threading.Event()
    started = time.perf_counter()

    def sample() -> None:
        nonlocal peak_anon
        status = Path(f"/proc/{proc.pid}/status")
        ticks, anon = 0, 0
        while not done.wait(0.2):
            try:
                for line in status.read_text().splitlines():
                    if line.startswith("RssAnon:"):
                        anon = int(line.split()[1]) * 1024
                        peak_anon = max(peak_anon, anon)
            except OSError:
                return
            ticks += 1
            if label and ticks % 300 == 0:
                elapsed = time.perf_counter() - started
                print(
                    f"    {label}: {elapsed:.0f} s, anon {anon / GIB:.2f} GiB "
                    f"(peak {peak_anon / GIB:.2f})",
                    flush=True,
                )

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    assert proc.stdout is not None and proc.stderr is not None
    output, errors = proc.stdout.read(), proc.stderr.read()
    # wait4, not waitpid: the child's own rusage (RUSAGE_CHILDREN would be the max over all)
    _, status, usage = os.wait4(proc.pid, 0)
    done.set()
    proc.returncode = os.waitstatus_to_exitcode(status)
    last = (errors.decode(errors="replace").strip().splitlines() or [""])[-1]
    result = json.loads(output) if proc.returncode == 0 else None
    return result, usage.ru_maxrss * 1024, peak_anon, last, usage.ru_utime + usage.ru_stime


def dir_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def prefix_corpus(corpus: Path, n: int, work: Path) -> Path:
    """The first ``n`` lines of ``corpus`` as a file of their own (written once)."""
    with corpus.open("rb") as lines:
        total = sum(1 for _ in zip(range(n + 1), lines))
    if total <= n:
        return corpus
    out = work / f"{corpus.stem}-{n}.jsonl"
    if out.is_file():
        return out
    tmp = out.with_name(f".{out.name}.part")
    with corpus.open("rb") as src, tmp.open("wb") as dst:
        for _, line in zip(range(n), src):
            dst.write(line)
    os.replace(tmp, out)
    return out


def measure_noterag(index_dir: Path, queries: list[str]) -> dict[str, Any]:
    from noterag.retrievers import Bm25Index

    index = Bm25Index(index_dir)
    # One untimed pass: the figures are those of a warm index (its postings in the page cache),
    # not of the disk's first reads.
    for q in queries:
        index.search(q, K)
    pruned: list[float] = []
    pruned_cpu: list[float] = []
    exhaustive: list[float] = []
    exhaustive_cpu: list[float] = []
    overlaps: list[float] = []
    searcher = index._index.searcher()
    for q in queries:
        started, cpu = time.perf_counter(), time.thread_time()
        top = index.search(q, K)
        pruned.append(time.perf_counter() - started)
        pruned_cpu.append(time.thread_time() - cpu)
        query = index.build_query(q)
        if query is None:
            continue
        started, cpu = time.perf_counter(), time.thread_time()
        # count=True collects (TopDocs, Count): every matching passage is scored.
        full = searcher.search(query, limit=K, count=True).hits
        exhaustive.append(time.perf_counter() - started)
        exhaustive_cpu.append(time.thread_time() - cpu)
        overlaps.append(_overlap([s for _, s in top], [p["id"] for p, _ in top], full, searcher))
    with ThreadPoolExecutor(2) as pool:
        started = time.perf_counter()
        list(pool.map(lambda q: index.search(q, K), queries))
        qps = len(queries) / (time.perf_counter() - started)
    return {
        "p50_ms": 1000 * statistics.median(pruned),
        "p95_ms": 1000 * percentile(pruned, 95),
        "cpu_p50_ms": 1000 * statistics.median(pruned_cpu),
        "cpu_p95_ms": 1000 * percentile(pruned_cpu, 95),
        "exhaustive_p50_ms": 1000 * statistics.median(exhaustive),
        "exhaustive_cpu_p50_ms": 1000 * statistics.median(exhaustive_cpu),
        "exhaustive_p95_ms": 1000 * percentile(exhaustive, 95),
        "top5_overlap": statistics.mean(overlaps),
        "qps_2threads": qps,
    }


def _overlap(scores: list[float], ids: list[str], full: list[Any], searcher: Any) -> float:
    """Top-5 overlap of the pruned ranking with the exhaustive one; a passage tied (to 1e-5)
    with the exhaustive 5th score counts as agreeing (either order is a correct top 5)."""
    if not full:
        return 1.0 if not ids else 0.0
    exact = {searcher.doc(address).get_first("id") for _, address in full}
    kth = min(score for score, _ in full)
    hits = sum(1 for i, s in zip(ids, scores, strict=True) if i in exact or abs(s - kth) < 1e-5)
    return hits / max(len(full), len(ids))


# The build's figures, written next to the index it measured (beside its directory: a file inside
# would be foreign to the index and stop a rebuild): a later --reuse run reports the build
# columns of every size from the real builds (one long build per session), not from memory.


def bench_size(args: argparse.Namespace, n: int, queries: list[str]) -> dict[str, Any]:
    corpus = prefix_corpus(args.corpus, n, args.work)
    row: dict[str, Any] = {"passages": n, "corpus_gib": corpus.stat().st_size / GIB}
    if not args.skip_noterag:
        row.update(bench_noterag(args, n, corpus, queries))
    if n <= args.bm25s_max and not args.skip_bm25s:
        row.update(bench_bm25s(args, n, corpus, queries))
    return row


def bench_noterag(
    args: argparse.Namespace, n: int, corpus: Path, queries: list[str]
) -> dict[str, Any]:
    index_dir = args.work / f"bm25-{n}"
    record = index_dir.with_name(f"{index_dir.name}.build.json")
    row: dict[str, Any] = {}
    if args.reuse:
        if not index_dir.is_dir():
            print(f"  noterag {n:,}: no index at {index_dir} to reuse", flush=True)
            return row
        if record.is_file():
            row.update(json.loads(record.read_text()))
    else:
        started = time.perf_counter()
        built, rss, anon, err, cpu = run_measured(
            [sys.executable, "-c", _BUILD, str(corpus), str(index_dir), str(args.heap_mb)],
            label=f"noterag build {n:,}",
        )
        if built is None:
            raise SystemExit(f"noterag build failed at {n:,}: {err}")
        row.update(
            passages=built["passages"],
            build_s=built["seconds"],
            build_cpu_s=cpu,
            peak_rss_gib=rss / GIB,
            peak_anon_gib=anon / GIB,
            heap_mb=args.heap_mb,
            postings=built.get("postings"),
            wall_s=time.perf_counter() - started,
            built=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        )
        record.write_text(json.dumps(row, indent=1) + "\n")
    row["disk_gib"] = dir_size(index_dir) / GIB
    row["segments"] = len(list(index_dir.glob("*.idx")))
    print(f"  noterag {n:,} build: {json.dumps(row)}", flush=True)
    if not args.build_only:
        row.update(measure_noterag(index_dir, queries))
        print(f"  noterag {n:,}: {json.dumps(row)}", flush=True)
    return row


def bench_bm25s(
    args: argparse.Namespace, n: int, corpus: Path, queries: list[str]
) -> dict[str, Any]:
    """bm25s's figures at ``n`` passages; recorded beside the corpora, so a --reuse run reports
    them without building bm25s's index again."""
    record = args.work / f"bm25s-{n}.json"
    if args.reuse:
        if record.is_file():
            return dict(json.loads(record.read_text()))
        print(f"  bm25s {n:,}: no recorded run at {record}", flush=True)
        return {}
    out, rss, _, err, cpu = run_measured(
        [
            sys.executable,
            "-c",
            _BM25S,
            str(corpus),
            json.dumps(queries[: args.bm25s_queries]),
            str(args.bm25s_mem_gib),
        ],
        label=f"bm25s {n:,}",
    )
    if out is None:
        row: dict[str, Any] = {
            "bm25s_failed": f"cannot hold {n:,} passages in {args.bm25s_mem_gib:g} GiB ({err})",
            "bm25s_cpu_s": cpu,
            "bm25s_peak_rss_gib": rss / GIB,
        }
    else:
        row = {
            "bm25s_build_s": out["seconds"],
            "bm25s_cpu_s": cpu,
            "bm25s_peak_rss_gib": rss / GIB,
            "bm25s_p50_ms": 1000 * statistics.median(out["latencies"]),
            "bm25s_p95_ms": 1000 * percentile(out["latencies"], 95),
            "bm25s_cpu_p50_ms": 1000 * statistics.median(out["cpu_latencies"]),
            "bm25s_qps_2threads": out["qps"],
            "bm25s_queries": len(out["latencies"]),
        }
    record.write_text(json.dumps(row, indent=1) + "\n")
    print(f"  bm25s {n:,}: {json.dumps(row)}", flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, required=True, help="bench/wiki_corpus.py output")
    parser.add_argument("--sizes", default="1000000,5000000,21015324")
    parser.add_argument("--work", type=Path, required=True, help="big files go here")
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--heap-mb", type=int, default=1024, help="tantivy's indexing budget")
    parser.add_argument("--bm25s-max", type=int, default=5_000_000)
    parser.add_argument("--bm25s-mem-gib", type=float, default=12.0)
    parser.add_argument("--bm25s-queries", type=int, default=200)
    parser.add_argument("--reuse", action="store_true", help="query indexes already in --work")
    parser.add_argument("--build-only", action="store_true", help="build, record, no queries")
    parser.add_argument("--skip-bm25s", action="store_true", help="noterag's index only")
    parser.add_argument("--skip-noterag", action="store_true", help="bm25s only")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if not args.corpus.is_file():
        raise SystemExit(f"error: no corpus at {args.corpus} (make it with bench/wiki_corpus.py)")
    args.work.mkdir(parents=True, exist_ok=True)
    queries = load_questions(args.queries)
    # Sizes measured by earlier runs stay (one run per size is how a 21M build fits a session).
    path = args.json or RESULTS / "scale_bm25.json"
    kept = {r["passages"]: r for r in (json.loads(path.read_text()) if path.is_file() else [])}
    for n in sorted(int(s) for s in args.sizes.split(",")):
        # A --reuse run adds its query figures to the size's build figures.
        old = kept.pop(n, {})
        if not args.skip_bm25s:  # bm25s is measured (or looked up) again: no stale verdict
            old = {key: value for key, value in old.items() if not key.startswith("bm25s_")}
        row = old | bench_size(args, n, queries)
        kept[row["passages"]] = row
        rows = [kept[key] for key in sorted(kept)]
        write_results("scale_bm25", rows, path)  # after each size: a long run keeps them
        if "build_s" in row:
            # CPU seconds: on a shared machine the wall clock measures the other jobs too.
            cpu = row.get("build_cpu_s", row["build_s"])
            publish_estimates("bm25", [row | {"build_s": cpu, "peak_gib": row["peak_rss_gib"]}])

    print(f"\nBM25, top-{K}, {len(queries)} real questions as queries, 2-core shared machine")
    print_table(
        rows,
        [
            ("passages", "passages", ",d"),
            ("build_s", "build s", ".0f"),
            ("build_cpu_s", "build CPU s", ".0f"),
            ("peak_rss_gib", "peak RSS GiB", ".2f"),
            ("peak_anon_gib", "anon GiB", ".2f"),
            ("disk_gib", "disk GiB", ".2f"),
            ("p50_ms", "p50 ms", ".1f"),
            ("p95_ms", "p95 ms", ".1f"),
            ("cpu_p50_ms", "CPU p50", ".1f"),
            ("exhaustive_cpu_p50_ms", "exh. CPU p50", ".1f"),
            ("top5_overlap", "top5 ovl", ".3f"),
            ("qps_2threads", "q/s 2thr", ".0f"),
        ],
    )
    print("\nbm25s (lucene BM25, stopwords, in-memory sparse matrix) on the same corpora")
    print_table(
        rows,
        [
            ("passages", "passages", ",d"),
            ("bm25s_build_s", "build s", ".0f"),
            ("bm25s_peak_rss_gib", "peak RSS GiB", ".2f"),
            ("bm25s_p50_ms", "p50 ms", ".1f"),
            ("bm25s_p95_ms", "p95 ms", ".1f"),
            ("bm25s_qps_2threads", "q/s 2thr", ".0f"),
            ("bm25s_failed", "note", "s"),
        ],
    )
    print("targets at 21M: build peak <= 12 GB; p50 <= 25 ms; top-5 overlap >= 0.99")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
