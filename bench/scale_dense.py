"""Dense retrieval at scale through FAISS: flat, IVF-PQ and HNSW on seeded synthetic vectors.

    nice -n 19 python bench/scale_dense.py --n 1000000 --kinds flat,ivfpq,hnsw
    nice -n 19 python bench/scale_dense.py --n 21015324 --kinds ivfpq --nlist 4096

Embedding 21M passages is not feasible here (the offline MiniLM embeds 30 passages/s on these
2 CPU cores, README: 21M would take 8 days, a 768-d model several times more), so the 21M
measurement uses synthetic 768-d vectors with the structure of text embeddings rather than
isotropic noise (on which no approximate index has meaningful neighbours): each vector is a
topic centre (``TOPICS`` of them) plus a low-dimensional within-topic variation (``LATENT``
of ``DIRECTIONS`` shared directions) plus small full-rank noise, L2-normalised. Queries are fresh draws from the same
process. Vectors are generated per batch from ``(seed, batch number)``, so the same vectors can
be produced again without ever being stored: 21M x 768 float32 is 64 GB, neither held in RAM
nor written to disk.

One streaming pass computes the exact top-10 of every query (the ground truth: flat search) and
feeds the IVF-PQ index's ``add`` in batches; the index is written to disk, then a fresh
subprocess opens it memory-mapped (``IO_FLAG_MMAP``) and answers the queries on one thread: its
peak RSS is the search's memory, its latencies the p50/p95 (wall clock, and CPU time of the
searching thread: on a shared machine the first measures the scheduler too). Recall@k = |approx top-k & exact
top-k| / k, averaged over queries. Flat is measured as an index (in RAM) up to ``--flat-max``
vectors; HNSW up to ``--hnsw-max`` (it holds every vector plus its graph in RAM).

JSON rows (bench/results/scale_dense.json): ``kind``, ``vectors``, ``dim``, ``build_s``,
``index_gib``, ``search_peak_rss_gib``, ``p50_ms``, ``p95_ms``, ``recall_at_5``,
``recall_at_10``, and the kind's parameters.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import RESULTS, percentile, print_table, publish_estimates, write_results

from noterag.retrievers import faiss_index
from noterag.retrievers.faiss_index import IndexSettings

GIB = 1 << 30
TOPICS = 4096
LATENT = 16
DIRECTIONS = 64
BATCH = 50_000
KS = (5, 10)


class SyntheticVectors:
    """Seeded embedding-like vectors, generated batch by batch (never all in memory)."""

    def __init__(self, n: int, dim: int, seed: int = 0) -> None:
        self.n, self.dim, self.seed = n, dim, seed
        rng = np.random.default_rng([seed, 1 << 30])
        self.centres = rng.standard_normal((TOPICS, dim), dtype=np.float32)
        # Each topic varies along its own LATENT of DIRECTIONS shared directions: a cheap
        # matrix product instead of a basis per topic.
        self.directions = rng.standard_normal((DIRECTIONS, dim), dtype=np.float32) * 0.15
        self.subsets = np.argsort(rng.random((TOPICS, DIRECTIONS)), axis=1)[:, :LATENT]

    def _draw(self, rng: np.random.Generator, m: int) -> np.ndarray:
        topics = rng.integers(0, TOPICS, m)
        latent = np.zeros((m, DIRECTIONS), dtype=np.float32)
        latent[np.arange(m)[:, None], self.subsets[topics]] = rng.standard_normal(
            (m, LATENT), dtype=np.float32
        )
        x = self.centres[topics] + latent @ self.directions
        x += rng.standard_normal((m, self.dim), dtype=np.float32) * 0.1
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        return x

    def batch(self, b: int) -> np.ndarray:
        m = min(BATCH, self.n - b * BATCH)
        return self._draw(np.random.default_rng([self.seed, b]), m)

    def batches(self) -> range:
        return range((self.n + BATCH - 1) // BATCH)

    def queries(self, count: int) -> np.ndarray:
        return self._draw(np.random.default_rng([self.seed, 1 << 31]), count)


def exact_and_index(
    data: SyntheticVectors, queries: np.ndarray, index: Any | None
) -> tuple[np.ndarray, float, float]:
    """One pass: the exact top-10 rows of every query, and ``index.add`` of every batch.
    Returns (top rows, seconds adding, seconds generating + exact scoring)."""
    k = max(KS)
    best_scores = np.full((len(queries), k), -np.inf, dtype=np.float32)
    best_rows = np.zeros((len(queries), k), dtype=np.int64)
    add_s = other_s = 0.0
    started = time.perf_counter()
    for b in data.batches():
        tick = time.perf_counter()
        x = data.batch(b)
        scores = queries @ x.T
        top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        cand_scores = np.concatenate([best_scores, np.take_along_axis(scores, top, 1)], axis=1)
        cand_rows = np.concatenate([best_rows, top + b * BATCH], axis=1)
        keep = np.argsort(-cand_scores, axis=1, kind="stable")[:, :k]
        best_scores = np.take_along_axis(cand_scores, keep, 1)
        best_rows = np.take_along_axis(cand_rows, keep, 1)
        other_s += time.perf_counter() - tick
        if index is not None:
            tick = time.perf_counter()
            index.add(x)
            add_s += time.perf_counter() - tick
        if b % 20 == 0:
            done = (b + 1) * BATCH
            elapsed = time.perf_counter() - started
            print(
                f"    {min(done, data.n):,} / {data.n:,} vectors, {elapsed:.0f} s, "
                f"ETA {elapsed * (data.n - done) / done:.0f} s",
                flush=True,
            )
    return best_rows, add_s, other_s


_SEARCH = """
import json, sys, time
import numpy as np
import faiss
from noterag.retrievers import faiss_index
faiss.omp_set_num_threads(1)
path, queries_path, k = sys.argv[1], sys.argv[2], int(sys.argv[3])
nprobe, ef = json.loads(sys.argv[4]), json.loads(sys.argv[5])
index, _ = faiss_index.read(__import__("pathlib").Path(path))
faiss_index.set_search_params(index, nprobe, ef)
queries = np.load(queries_path)
rows, latencies, cpu = [], [], []
for q in queries:
    t, c = time.perf_counter(), time.thread_time()
    _, found = index.search(q[None, :], k)
    latencies.append(time.perf_counter() - t)
    cpu.append(time.thread_time() - c)
    rows.append(found[0].tolist())
# VmHWM: this process's own peak (wait4's ru_maxrss starts from the parent's at fork).
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1]
print(json.dumps({"rows": rows, "latencies": latencies, "cpu": cpu, "hwm": int(hwm) * 1024}))
"""


def search_child(
    path: Path, queries: np.ndarray, work: Path, nprobe: int | None, ef: int | None
) -> tuple[np.ndarray, list[float], list[float], int]:
    qpath = work / "queries.npy"
    np.save(qpath, queries)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _SEARCH,
            str(path),
            str(qpath),
            str(max(KS)),
            json.dumps(nprobe),
            json.dumps(ef),
        ],
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None
    output = proc.stdout.read()
    _, status, _ = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status):
        raise SystemExit("the search subprocess failed")
    out = json.loads(output)
    return np.array(out["rows"]), out["latencies"], out["cpu"], out["hwm"]


def recall(found: np.ndarray, exact: np.ndarray, k: int) -> float:
    return float(
        np.mean([len(set(f[:k]) & set(e[:k])) / k for f, e in zip(found, exact, strict=True)])
    )


def bench(args: argparse.Namespace) -> list[dict[str, Any]]:
    data = SyntheticVectors(args.n, args.dim, args.seed)
    queries = data.queries(args.queries)
    rows: list[dict[str, Any]] = []
    kinds = args.kinds.split(",")
    work = Path(tempfile.mkdtemp(prefix="scale-dense-", dir=args.work))
    index = None
    settings = None
    if "ivfpq" in kinds:
        settings = IndexSettings(
            kind="ivfpq", nlist=args.nlist, pq_m=args.pq_m, train_size=args.train
        ).resolved(args.n, args.dim)
        print(f"  ivfpq {faiss_index.factory_string(settings, args.n, args.dim)}", flush=True)
        index = faiss_index.new_index(settings, args.n, args.dim)
        tick = time.perf_counter()
        train_batches = (settings.train_size + BATCH - 1) // BATCH
        sample = np.concatenate([data.batch(b) for b in range(train_batches)])
        index.train(sample[: settings.train_size])
        del sample
        train_s = time.perf_counter() - tick
    print(f"  pass over {args.n:,} vectors (exact top-10, index add)", flush=True)
    exact, add_s, scan_s = exact_and_index(data, queries, index)
    print(f"  exact pass: scoring {scan_s:.0f} s, adding {add_s:.0f} s", flush=True)
    # This process's peak so far: the IVF-PQ index being filled plus a batch and the exact
    # pass's buffers (an upper bound of the build's own memory).
    build_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if index is not None and settings is not None:
        path = work / "ivfpq.faiss"
        faiss_index.write(index, path)
        del index
        for nprobe in sorted({int(p) for p in args.nprobe.split(",")}):
            found, lat, cpu, rss = search_child(path, queries, work, nprobe, None)
            rows.append(
                {
                    "kind": "ivfpq",
                    "vectors": args.n,
                    "dim": args.dim,
                    "factory": faiss_index.factory_string(settings, args.n, args.dim),
                    "nprobe": nprobe,
                    "build_s": train_s + add_s,
                    "train_s": train_s,
                    "build_peak_rss_gib": build_peak / GIB,
                    "index_gib": path.stat().st_size / GIB,
                    "search_peak_rss_gib": rss / GIB,
                    "p50_ms": 1000 * statistics.median(lat),
                    "p95_ms": 1000 * percentile(lat, 95),
                    "cpu_p50_ms": 1000 * statistics.median(cpu),
                    **{f"recall_at_{k}": recall(found, exact, k) for k in KS},
                }
            )
            print(f"  {json.dumps(rows[-1])}", flush=True)
        path.unlink()
    for kind, limit in (("flat", args.flat_max), ("hnsw", args.hnsw_max)):
        if kind not in kinds:
            continue
        if args.n > limit:
            rows.append(
                {
                    "kind": kind,
                    "vectors": args.n,
                    "dim": args.dim,
                    "skipped": f"{kind} holds every vector in RAM "
                    f"({args.n * args.dim * 4 / GIB:.0f} GiB)",
                }
            )
            continue
        settings = IndexSettings(kind=kind).resolved(args.n, args.dim)
        index = faiss_index.new_index(settings, args.n, args.dim)
        tick = time.perf_counter()
        for b in data.batches():
            index.add(data.batch(b))
        build_s = time.perf_counter() - tick
        build_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        path = work / f"{kind}.faiss"
        faiss_index.write(index, path)
        del index
        found, lat, cpu, rss = search_child(path, queries, work, None, settings.ef_search)
        rows.append(
            {
                "kind": kind,
                "vectors": args.n,
                "dim": args.dim,
                "factory": faiss_index.factory_string(settings, args.n, args.dim),
                "ef_search": settings.ef_search if kind == "hnsw" else None,
                "build_s": build_s,
                "build_peak_rss_gib": build_peak / GIB,
                "index_gib": path.stat().st_size / GIB,
                "search_peak_rss_gib": rss / GIB,
                "p50_ms": 1000 * statistics.median(lat),
                "p95_ms": 1000 * percentile(lat, 95),
                "cpu_p50_ms": 1000 * statistics.median(cpu),
                **{f"recall_at_{k}": recall(found, exact, k) for k in KS},
            }
        )
        print(f"  {json.dumps(rows[-1])}", flush=True)
        path.unlink()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--kinds", default="flat,ivfpq,hnsw")
    parser.add_argument("--nlist", type=int, help="IVF lists (default: ~4 sqrt(n))")
    parser.add_argument("--pq-m", type=int, help="PQ bytes per vector (default: dim / 8)")
    parser.add_argument("--train", type=int, help="IVF-PQ training vectors")
    parser.add_argument("--nprobe", default="32,64,128")
    parser.add_argument("--flat-max", type=int, default=2_000_000)
    parser.add_argument("--hnsw-max", type=int, default=1_000_000)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--threads", type=int, default=2, help="FAISS threads while building")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    faiss = faiss_index.faiss_module()
    faiss.omp_set_num_threads(args.threads)
    rows = bench(args)
    path = args.json or RESULTS / "scale_dense.json"
    old = json.loads(path.read_text()) if path.is_file() else []
    keys = {(r["kind"], r["vectors"], r.get("nprobe")) for r in rows}
    merged = [r for r in old if (r["kind"], r["vectors"], r.get("nprobe")) not in keys] + rows
    write_results("scale_dense", merged, path)
    for kind in ("flat", "ivfpq", "hnsw"):
        built = [r for r in rows if r["kind"] == kind and "build_s" in r][:1]
        if built:
            row = built[0]
            disk = row["vectors"] * row["dim"] * 4 / GIB if kind == "flat" else row["index_gib"]
            publish_estimates(
                kind,
                [{"passages": row["vectors"], "build_s": row["build_s"],
                  "peak_gib": row["build_peak_rss_gib"], "disk_gib": disk}],
            )  # fmt: skip
    print(f"\nFAISS, {args.dim}-d synthetic vectors, {args.queries} queries, one search thread")
    print_table(
        merged,
        [
            ("kind", "kind", "s"),
            ("vectors", "vectors", ",d"),
            ("nprobe", "nprobe", "d"),
            ("build_s", "build s", ".0f"),
            ("index_gib", "index GiB", ".2f"),
            ("search_peak_rss_gib", "search RSS GiB", ".2f"),
            ("p50_ms", "p50 ms", ".2f"),
            ("p95_ms", "p95 ms", ".2f"),
            ("cpu_p50_ms", "CPU p50", ".2f"),
            ("recall_at_5", "R@5", ".3f"),
            ("recall_at_10", "R@10", ".3f"),
            ("skipped", "note", "s"),
        ],
    )
    print("target: IVF-PQ recall@10 >= 0.9 of exact at 21M within 4 GB")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
