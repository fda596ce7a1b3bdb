"""Dense retrieval at scale through FAISS: flat, IVF-PQ and HNSW on seeded synthetic vectors.

    nice -n 5 python bench/scale_dense.py --n 1000000 --kinds flat,ivfpq,hnsw
    nice -n 5 python bench/scale_dense.py --n 21015324 --kinds ivfpq --reduce 128 \
        --nlist 2048 --refine SQ8 --work /work/scale21/dense
    python bench/scale_dense.py --calibrate   # the synthetic geometry next to real embeddings'

Embedding 21M passages is not feasible here (the offline MiniLM embeds about 30 passages/s on
these 2 shared CPU cores: 21M would take 8 days, a 768-d model several times more), so the 21M
measurement uses seeded synthetic 768-d vectors with the structure of sentence embeddings
rather than isotropic noise (on which no approximate index has meaningful neighbours):

* clustered: each vector belongs to one of ``TOPICS`` topics; topic centres lie in a
  ``RANK``-dimensional subspace with a power-law spectrum (variance of the i-th direction
  proportional to i^-2 ``BETA``), as the PCA spectra of sentence embeddings decay;
* anisotropic: every vector shares a common ``MEAN`` direction (the "narrow cone" of
  contrastive embeddings: random pairs have a positive mean cosine);
* low intrinsic dimension within a topic: ``LATENT`` of ``DIRECTIONS`` shared directions;
* full rank: small isotropic noise over all dimensions; rows L2-normalised.

The constants were set so that these statistics match those of real embeddings (``--calibrate``
prints both: the offline all-MiniLM-L6-v2 over 2,000 HotpotQA paragraphs and 300 HotpotQA
questions): mean cosine of random passage pairs, the number of principal components holding 50%
and 90% of the variance, and the mean cosine between a question and its 1st and 10th nearest
passage. What they cannot match is the neighbourhood structure of a real 21M corpus (no real
21M embeddings exist here); the recall figures are for this model of embeddings.

Queries are fresh draws from the same process, not corpus rows. Vectors are generated per
batch from ``(seed, batch number)``: 21M x 768 float32 is 64 GB, neither held in RAM nor
written to disk.

One streaming pass computes the exact top-10 of every query (the ground truth: exhaustive
inner product over every regenerated batch) and feeds the index's ``add`` (and the refine
codes' writer) in batches; the index is written to disk, then a fresh subprocess opens it
memory-mapped (``IO_FLAG_MMAP_IFC``/``IO_FLAG_MMAP``) and answers the queries on one thread.
Its memory is its peak resident set (VmHWM: Python, numpy, FAISS, the index's in-memory parts
and every page of the mapped files it touched), with the anonymous and file-backed parts at the
end (RssAnon, RssFile). With ``--search-mem-gib G`` the IVF-PQ searches also run in a memory
cgroup of G GiB (page cache counted; cgroup v1 or v2, made under this process's own), after
the index files are evicted from the page cache so that every page they read is charged to it:
a search that completes fits in G, and the cgroup's peak (``search_cgroup_peak_gib``) is the
memory it needed. The RSS alone cannot say: a mapped file's pages stay resident while the
machine has memory to spare (on a quiet 24 GiB machine, 12.5 GiB of the 16 GB refine file).
Its latencies are the p50/p95 (wall clock, and CPU time of the searching thread: on a shared
machine the first measures the scheduler too). Recall@k = |approx top-k &
exact top-k| / k, averaged over queries. Flat is measured as an index up to ``--flat-max``
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import RESULTS, percentile, print_table, publish_estimates, write_results

from noterag.retrievers import faiss_index
from noterag.retrievers.faiss_index import IndexSettings

GIB = 1 << 30
BATCH = 50_000
KS = (5, 10)
NOT_EMBEDDED = (
    "synthetic embedding-like vectors: embedding 21M passages on 2 CPU cores is not feasible "
    "here (about 30 passages/s: 8 days)"
)
# The generator's constants (see the module docstring; set with --calibrate).
TOPICS = 4096
RANK = 256
BETA = 0.45
MEAN = 0.18
LATENT = 16
DIRECTIONS = 64
WITHIN = 0.15
NOISE = 0.1
PRODUCERS = 2  # threads generating and exactly scoring batches ahead of the index's add


class SyntheticVectors:
    """Seeded embedding-like vectors, generated batch by batch (never all in memory)."""

    def __init__(self, n: int, dim: int, seed: int = 0) -> None:
        self.n, self.dim, self.seed = n, dim, seed
        rng = np.random.default_rng([seed, 1 << 30])
        mean = rng.standard_normal(dim)
        mean *= MEAN * np.sqrt(dim) / np.linalg.norm(mean)
        basis, _ = np.linalg.qr(rng.standard_normal((dim, RANK)))
        scales = np.arange(1, RANK + 1) ** -BETA
        scales *= np.sqrt(dim / (scales**2).sum())  # centres of norm about sqrt(dim)
        spread = rng.standard_normal((TOPICS, RANK)) * scales
        self.centres = (spread @ basis.T + mean).astype(np.float32)
        # Each topic varies along its own LATENT of DIRECTIONS shared directions: a cheap
        # matrix product instead of a basis per topic.
        self.directions = rng.standard_normal((DIRECTIONS, dim), dtype=np.float32) * WITHIN
        self.subsets = np.argsort(rng.random((TOPICS, DIRECTIONS)), axis=1)[:, :LATENT]

    def _draw(self, rng: np.random.Generator, m: int) -> np.ndarray:
        topics = rng.integers(0, TOPICS, m)
        latent = np.zeros((m, DIRECTIONS), dtype=np.float32)
        latent[np.arange(m)[:, None], self.subsets[topics]] = rng.standard_normal(
            (m, LATENT), dtype=np.float32
        )
        x = self.centres[topics]
        x += latent @ self.directions
        # Uniform noise of the same variance as N(0, NOISE^2): a third of the cost of normal
        # draws, and over 768 dimensions distances cannot tell them apart (central limit).
        noise = rng.random((m, self.dim), dtype=np.float32)
        noise -= 0.5
        noise *= NOISE * np.sqrt(12)
        x += noise
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        return x

    def batch(self, b: int) -> np.ndarray:
        m = min(BATCH, self.n - b * BATCH)
        return self._draw(np.random.default_rng([self.seed, b]), m)

    def batches(self) -> range:
        return range((self.n + BATCH - 1) // BATCH)

    def queries(self, count: int) -> np.ndarray:
        return self._draw(np.random.default_rng([self.seed, 1 << 31]), count)


def geometry(passages: np.ndarray, queries: np.ndarray) -> dict[str, float]:
    """The statistics the generator is calibrated on (rows L2-normalised)."""
    rng = np.random.default_rng(1)
    i, j = rng.integers(0, len(passages), (2, 5000))
    centred = passages - passages.mean(0)
    variance = np.linalg.svd(centred, compute_uv=False) ** 2
    cumulative = np.cumsum(variance) / variance.sum()
    scores = np.sort(queries @ passages.T, axis=1)
    return {
        "pair_cosine": float(np.mean(np.sum(passages[i] * passages[j], axis=1))),
        "pcs_50pct": int(np.searchsorted(cumulative, 0.5) + 1),
        "pcs_90pct": int(np.searchsorted(cumulative, 0.9) + 1),
        "query_top1": float(scores[:, -1].mean()),
        "query_top10": float(scores[:, -10].mean()),
    }


def calibrate(args: argparse.Namespace) -> None:
    """Print the generator's geometry next to that of real embeddings (the offline MiniLM over
    HotpotQA paragraphs and questions, cached in ``--work``)."""
    cache = args.work / "calibration-minilm.npz"
    if not cache.is_file():
        data = Path(__file__).resolve().parents[2] / "shared" / "data" / "hotpotqa_dev500"
        data = Path(os.environ.get("NOTERAG_SHARED_DATA", data))
        if not (data / "corpus.jsonl").is_file():
            raise SystemExit(f"--calibrate needs HotpotQA paragraphs at {data} (shared data)")
        from noterag.retrievers.dense import load_embeddings

        lines = (data / "corpus.jsonl").read_text().splitlines()[:2000]
        rows = [json.loads(line) for line in lines]
        questions = (data / "questions.jsonl").read_text().splitlines()[:300]
        embedder = load_embeddings()
        real_p = embedder.embed_documents([f"{r['title']}\n{r['text']}" for r in rows])
        real_q = embedder.embed_documents([json.loads(q)["question"] for q in questions])
        np.savez(cache, passages=np.array(real_p), queries=np.array(real_q))
    real = np.load(cache)
    data = SyntheticVectors(2000, args.dim, args.seed)
    rows = {
        "MiniLM, HotpotQA (384-d)": geometry(real["passages"], real["queries"]),
        f"synthetic ({args.dim}-d)": geometry(data.batch(0), data.queries(300)),
    }
    names = list(next(iter(rows.values())))
    print(f"{'':25}" + "".join(f"{name:>13}" for name in names))
    for label, values in rows.items():
        print(f"{label:25}" + "".join(f"{values[name]:13.3f}" for name in names))


def exact_and_index(
    data: SyntheticVectors, queries: np.ndarray, index: Any | None, refine: Any | None
) -> tuple[np.ndarray, dict[str, float]]:
    """One pass: the exact top-10 rows of every query, ``index.add`` and ``refine.add`` of
    every batch. ``PRODUCERS`` threads generate and score the next batches while this one adds
    (numpy and FAISS release the GIL); their seconds add up across threads. Returns the top rows and the seconds spent generating and scoring (the
    second thread), adding to the index and writing refine codes."""
    k = max(KS)
    spent = dict.fromkeys(("generate_s", "exact_s", "add_s", "refine_s"), 0.0)

    def produce(b: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        tick = time.perf_counter()
        x = data.batch(b)
        spent["generate_s"] += time.perf_counter() - tick
        tick = time.perf_counter()
        scores = queries @ x.T
        top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        spent["exact_s"] += time.perf_counter() - tick
        return x, np.take_along_axis(scores, top, 1), top + b * BATCH

    best_scores = np.full((len(queries), k), -np.inf, dtype=np.float32)
    best_rows = np.zeros((len(queries), k), dtype=np.int64)
    started = time.perf_counter()
    batches = data.batches()
    with ThreadPoolExecutor(PRODUCERS) as pool:
        pending = [pool.submit(produce, b) for b in batches[:PRODUCERS]]
        for b in batches:
            x, top_scores, top_rows = pending.pop(0).result()
            if b + PRODUCERS < len(batches):
                pending.append(pool.submit(produce, b + PRODUCERS))
            cand_scores = np.concatenate([best_scores, top_scores], axis=1)
            cand_rows = np.concatenate([best_rows, top_rows], axis=1)
            keep = np.argsort(-cand_scores, axis=1, kind="stable")[:, :k]
            best_scores = np.take_along_axis(cand_scores, keep, 1)
            best_rows = np.take_along_axis(cand_rows, keep, 1)
            if index is not None:
                tick = time.perf_counter()
                index.add(x)
                spent["add_s"] += time.perf_counter() - tick
            if refine is not None:
                tick = time.perf_counter()
                refine.add(x)
                spent["refine_s"] += time.perf_counter() - tick
            if b % 20 == 0 or b == len(batches) - 1:
                done = min((b + 1) * BATCH, data.n)
                elapsed = time.perf_counter() - started
                parts = ", ".join(f"{key[:-2]} {value:.0f}" for key, value in spent.items())
                print(
                    f"    {done:,} / {data.n:,} vectors, {elapsed:.0f} s ({parts}), "
                    f"ETA {elapsed * (data.n - done) / done:.0f} s",
                    flush=True,
                )
    spent["pass_s"] = time.perf_counter() - started
    return best_rows, spent


_SEARCH = """
import json, os, sys, time
from pathlib import Path
cgroup = os.environ.get("SCALE_DENSE_CGROUP")
if cgroup:  # join the memory cgroup first: everything this process maps is charged to it
    Path(cgroup, "cgroup.procs").write_text(str(os.getpid()))
import numpy as np
import faiss
from noterag.retrievers import faiss_index
faiss.omp_set_num_threads(1)
path, refine, queries_path, k = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
nprobe, ef, k_factor = (json.loads(a) for a in sys.argv[5:8])
index, _ = faiss_index.read(Path(path))
if refine and k_factor:  # k_factor 0: the PQ codes' own ranking, for comparison
    index = faiss_index.with_refine(index, Path(refine), k_factor)
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
status = {l.split(":")[0]: int(l.split()[1]) * 1024 for l in open("/proc/self/status")
          if l.startswith(("VmHWM:", "RssAnon:", "RssFile:"))}
if cgroup:  # the cgroup's peak charge: anonymous memory plus the page cache it read in
    peak = next(Path(cgroup, n) for n in ("memory.max_usage_in_bytes", "memory.peak")
                if Path(cgroup, n).is_file())
    status["cgroup_peak"] = int(peak.read_text())
print(json.dumps({"rows": rows, "latencies": latencies, "cpu": cpu, **status}))
"""


def memory_cgroup(limit_bytes: int) -> Path | None:
    """A fresh memory cgroup under this process's own, limited to ``limit_bytes`` (page cache
    included), or None where the machine offers none this user may create (v1's memory
    hierarchy, else v2's)."""
    candidates = []  # (parent cgroup, the limit file its children get)
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, where = line.split(":", 2)
        if "memory" in controllers.split(","):
            candidates.append(
                (Path("/sys/fs/cgroup/memory", where.lstrip("/")), "memory.limit_in_bytes")
            )
        elif controllers == "":
            # v2 mounted alone, or beside v1 (a hybrid mount puts it in unified/)
            for root in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
                candidates.append((root / where.lstrip("/"), "memory.max"))
    for parent, limit_file in candidates:
        group = parent / f"scale-dense-{os.getpid()}-{time.monotonic_ns()}"
        try:
            group.mkdir()
        except OSError:
            continue
        try:
            # The kernel fills a new cgroup with its control files; a plain directory (the tmpfs
            # under a hybrid mount, a v2 parent not delegating memory) has none, and limits nothing.
            if (group / limit_file).is_file():
                (group / limit_file).write_text(str(limit_bytes))
                return group
        except OSError:
            pass
        group.rmdir()
    return None


def drop_cached(*paths: Path | None) -> None:
    """Evict the files' pages from the page cache (written back first): a search child then
    reads them itself, so its memory cgroup is charged for every page it needs."""
    for path in filter(None, paths):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def search_child(
    path: Path,
    refine: Path | None,
    queries: np.ndarray,
    work: Path,
    nprobe: int | None,
    ef: int | None,
    k_factor: int | None,
    mem_limit_gib: float | None = None,
) -> dict[str, Any]:
    """Search ``queries`` in a fresh process; its results, latencies and memory. With
    ``mem_limit_gib``, the process runs in a memory cgroup of that size (page cache counted)
    on files evicted from the page cache: if it completes, the search fits in that memory."""
    qpath = work / "queries.npy"
    np.save(qpath, queries)
    command = [sys.executable, "-c", _SEARCH, str(path), str(refine or ""), str(qpath)]
    command += [str(max(KS)), json.dumps(nprobe), json.dumps(ef), json.dumps(k_factor)]
    env, group = dict(os.environ), None
    limit = int((mem_limit_gib or 0) * GIB)
    if limit:
        group = memory_cgroup(limit)
        if group is None:
            print("  no memory cgroup can be made here: memory is the RSS alone", flush=True)
        else:
            drop_cached(path, refine)
            env["SCALE_DENSE_CGROUP"] = str(group)
    try:
        proc = subprocess.run(command, stdout=subprocess.PIPE, check=False, env=env)
    finally:
        if group is not None:
            group.rmdir()
    if proc.returncode:
        where = f" (in a {mem_limit_gib:g} GiB memory cgroup)" if group is not None else ""
        raise SystemExit(f"the search subprocess failed with exit {proc.returncode}{where}")
    out = json.loads(proc.stdout)
    if group is not None:
        out["cgroup_limit"] = limit
    return out


def recall(found: np.ndarray, exact: np.ndarray, k: int) -> float:
    return float(
        np.mean([len(set(f[:k]) & set(e[:k])) / k for f, e in zip(found, exact, strict=True)])
    )


def search_row(out: dict[str, Any], exact: np.ndarray) -> dict[str, Any]:
    found = np.array(out["rows"])
    return {
        "search_peak_rss_gib": out["VmHWM"] / GIB,
        "search_rss_anon_gib": out["RssAnon"] / GIB,
        "search_rss_file_gib": out["RssFile"] / GIB,
        **(
            {
                "search_cgroup_limit_gib": out["cgroup_limit"] / GIB,
                "search_cgroup_peak_gib": out["cgroup_peak"] / GIB,
            }
            if "cgroup_limit" in out
            else {}
        ),
        "p50_ms": 1000 * statistics.median(out["latencies"]),
        "p95_ms": 1000 * percentile(out["latencies"], 95),
        "cpu_p50_ms": 1000 * statistics.median(out["cpu"]),
        **{f"recall_at_{k}": recall(found, exact, k) for k in KS},
    }


def ivfpq_settings(args: argparse.Namespace) -> IndexSettings:
    return IndexSettings(
        kind="ivfpq",
        nlist=args.nlist,
        pq_m=args.pq_m,
        train_size=args.train,
        reduce=args.reduce,
        refine=args.refine,
    ).resolved(args.n, args.dim)


def bench(args: argparse.Namespace) -> list[dict[str, Any]]:
    data = SyntheticVectors(args.n, args.dim, args.seed)
    queries = data.queries(args.queries)
    rows: list[dict[str, Any]] = []
    kinds = args.kinds.split(",")
    args.work.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="scale-dense-", dir=args.work))
    index = refine = settings = None
    train_s = 0.0
    if "ivfpq" in kinds:
        settings = ivfpq_settings(args)
        factory = faiss_index.factory_string(settings, args.n, args.dim)
        print(f"  ivfpq {factory}, refine {settings.refine}", flush=True)
        index = faiss_index.new_index(settings, args.n, args.dim)
        tick = time.perf_counter()
        train_batches = (settings.train_size or 0) // BATCH + 1
        # Training rows from batches spread over the corpus (the same rows are added later).
        step = max(1, len(data.batches()) // train_batches)
        sample = np.concatenate([data.batch(b) for b in data.batches()[::step][:train_batches]])
        sample = sample[: settings.train_size]
        index.train(sample)
        if settings.refines:
            quantizer = faiss_index.new_refine(settings, args.dim)
            quantizer.train(sample)
            refine = faiss_index.RefineWriter(quantizer, args.n, work / "refine.faiss")
        del sample
        train_s = time.perf_counter() - tick
        print(f"  trained on {settings.train_size:,} vectors in {train_s:.0f} s", flush=True)
    print(f"  pass over {args.n:,} vectors (exact top-10, index add)", flush=True)
    exact, spent = exact_and_index(data, queries, index, refine)
    print(f"  pass: {json.dumps({k: round(v) for k, v in spent.items()})}", flush=True)
    # This process's peak so far: the IVF-PQ index being filled plus a batch and the exact
    # pass's buffers (an upper bound of the build's own memory).
    build_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if index is not None and settings is not None:
        path = work / "ivfpq.faiss"
        faiss_index.write(index, path)
        del index
        refine_path = None
        if refine is not None:
            refine.close()
            refine_path = refine.path
        index_bytes = path.stat().st_size + (refine_path.stat().st_size if refine_path else 0)
        factors = [None] if refine_path is None else [int(f) for f in args.k_factor.split(",")]
        for nprobe in sorted({int(p) for p in args.nprobe.split(",")}):
            for k_factor in factors:
                out = search_child(
                    path, refine_path, queries, work, nprobe, None, k_factor, args.search_mem_gib
                )
                rows.append(
                    {
                        "kind": "ivfpq",
                        "vectors": args.n,
                        "dim": args.dim,
                        "factory": faiss_index.factory_string(settings, args.n, args.dim),
                        "refine": settings.refine if k_factor else "none",
                        "k_factor": k_factor,
                        "nprobe": nprobe,
                        "build_s": train_s + spent["add_s"] + spent["refine_s"],
                        "train_s": train_s,
                        "build_peak_rss_gib": build_peak / GIB,
                        "index_gib": index_bytes / GIB,
                        **search_row(out, exact),
                        "vectors_are": NOT_EMBEDDED,
                    }
                )
                print(f"  {json.dumps(rows[-1])}", flush=True)
        if not args.keep:
            path.unlink()
            if refine_path is not None:
                refine_path.unlink()
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
        settings = IndexSettings(kind=kind, ef_construction=args.ef_construction)
        settings = settings.resolved(args.n, args.dim)
        index = faiss_index.new_index(settings, args.n, args.dim)
        print(f"  {kind}: adding {args.n:,} vectors", flush=True)
        tick = time.perf_counter()
        for b in data.batches():
            index.add(data.batch(b))
        build_s = time.perf_counter() - tick
        build_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        path = work / f"{kind}.faiss"
        faiss_index.write(index, path)
        del index
        out = search_child(path, None, queries, work, None, settings.ef_search, None)
        rows.append(
            {
                "kind": kind,
                "vectors": args.n,
                "dim": args.dim,
                "factory": faiss_index.factory_string(settings, args.n, args.dim),
                "ef_search": settings.ef_search if kind == "hnsw" else None,
                "ef_construction": settings.ef_construction if kind == "hnsw" else None,
                # Flat and HNSW are filled by regenerating the vectors: generation included.
                "build_s": build_s,
                "build_peak_rss_gib": build_peak / GIB,
                "index_gib": path.stat().st_size / GIB,
                **search_row(out, exact),
                "vectors_are": NOT_EMBEDDED,
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
    parser.add_argument("--reduce", type=int, help="IVF-PQ: PCA to this many dimensions first")
    parser.add_argument("--refine", default="SQ8", help="IVF-PQ: re-rank by these codes (none)")
    parser.add_argument(
        "--k-factor", default="10", help="IVF-PQ refine: candidates per result (0: no re-ranking)"
    )
    parser.add_argument("--ef-construction", type=int, default=IndexSettings().ef_construction)
    parser.add_argument("--keep", action="store_true", help="keep the IVF-PQ files in --work")
    parser.add_argument("--calibrate", action="store_true", help=calibrate.__doc__)
    parser.add_argument("--nprobe", default="32,64,128")
    parser.add_argument("--flat-max", type=int, default=2_000_000)
    parser.add_argument("--hnsw-max", type=int, default=1_000_000)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--results", type=Path, help="JSON rows (default bench/results/)")
    parser.add_argument("--threads", type=int, default=2, help="FAISS threads while building")
    parser.add_argument(
        "--search-mem-gib",
        type=float,
        help="IVF-PQ: search in a memory cgroup of this size, its files out of the page cache",
    )
    args = parser.parse_args()
    if args.calibrate:
        calibrate(args)
        return
    print(f"FAISS {faiss_index.faiss_module().__version__}; {NOT_EMBEDDED}", flush=True)
    faiss = faiss_index.faiss_module()
    faiss.omp_set_num_threads(args.threads)
    rows = bench(args)
    path = args.results or RESULTS / "scale_dense.json"
    old = json.loads(path.read_text()) if path.is_file() else []

    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        return (r["kind"], r["vectors"], r.get("factory"), r.get("nprobe"), r.get("k_factor"))

    keys = {key(r) for r in rows}
    merged = [r for r in old if key(r) not in keys] + rows
    write_results("scale_dense", merged, path)
    for kind in ("flat", "ivfpq", "hnsw"):
        built = [r for r in rows if r["kind"] == kind and "build_s" in r][:1]
        if built:
            row = built[0]
            disk = row["vectors"] * row["dim"] * 4 / GIB if kind == "flat" else row["index_gib"]
            published = {"passages": row["vectors"], "build_s": row["build_s"],
                         "peak_gib": row["build_peak_rss_gib"], "disk_gib": disk}  # fmt: skip
            if kind == "ivfpq":  # what the estimate scales other settings' training from
                published |= {"train_s": row["train_s"], "dim": row["dim"],
                              "settings": ivfpq_settings(args).as_spec()}  # fmt: skip
            publish_estimates(kind, [published])
    print(f"\nFAISS, {args.dim}-d {NOT_EMBEDDED}; {args.queries} queries, one search thread")
    print_table(
        merged,
        [
            ("kind", "kind", "s"),
            ("vectors", "vectors", ",d"),
            ("factory", "index", "s"),
            ("refine", "refine", "s"),
            ("nprobe", "nprobe", "d"),
            ("k_factor", "k_f", "d"),
            ("build_s", "build s", ".0f"),
            ("index_gib", "index GiB", ".2f"),
            ("search_peak_rss_gib", "search RSS GiB", ".2f"),
            ("search_rss_anon_gib", "anon", ".2f"),
            ("search_cgroup_peak_gib", "cgroup peak", ".2f"),
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
