"""FAISS indexes for dense retrieval: which kind, built how, searched how.

One place decides the FAISS side of every dense index (``dense.py`` builds and opens them;
``bench/scale_dense.py`` measures them): cosine similarity is the inner product of
L2-normalised float32 vectors, so every index uses ``METRIC_INNER_PRODUCT``.

Kinds (``IndexSettings.kind``; ``auto``, the default, picks ``flat`` below ``AUTO_FLAT_MAX``
passages and ``ivfpq`` from there on):

* ``flat``: exact search over all vectors (``IndexFlatIP``), what the numpy path did. Memory
  is the vectors themselves (count x dim x 4 bytes: 3 GB for 1M x 768), query time linear in
  the count. Our flat indexes keep no second copy: the vectors are ``embeddings.npy``.
* ``ivfpq``: the vectors clustered into ``nlist`` inverted lists (default about 4 sqrt(count),
  a power of two: FAISS's guideline) and compressed by product quantization to ``pq_m`` bytes
  (default dim / 8, so 96 bytes for 768-d: 21M vectors in 2 GB); a query scans ``nprobe``
  lists (default 64). From 1M vectors the coarse quantizer is itself an HNSW graph over the
  centroids (``IVF{nlist}_HNSW32``), or adding 21M vectors would compare each with every
  centroid. Written to ``index.faiss`` and memory-mapped on load: only the lists a query
  scans are read.
* ``hnsw``: a graph over the full vectors (``HNSW{hnsw_m}``): the fastest queries and high
  recall, but it holds every vector in memory plus the graph (about 3.3 GB for 1M x 768), so it
  suits corpora up to a few million. Search breadth ``ef_search`` (default 128).

Search parameters (``nprobe``, ``ef_search``) are recorded in the manifest and can be
overridden per retriever.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from noterag.errors import ConfigError, NoteragError

from .extras import MissingExtraError

KINDS = ("auto", "flat", "ivfpq", "hnsw")
AUTO_FLAT_MAX = 1_000_000
ADD_BATCH = 65_536  # vectors per FAISS add: 192 MB at 768-d, whatever the corpus size
HNSW_QUANTIZER_FROM = 1_000_000  # vectors; below, a flat coarse quantizer is as fast
FAISS_HINT = "dense retrieval needs faiss: pip install 'noterag[dense]' (it brings faiss-cpu)"


def faiss_module() -> Any:
    try:
        import faiss
    except ImportError:
        raise MissingExtraError(FAISS_HINT) from None
    return faiss


@dataclass(frozen=True)
class IndexSettings:
    """How to index the vectors; ``None`` fields get their documented default for the
    corpus size (``resolved``)."""

    kind: str = "auto"
    nlist: int | None = None
    pq_m: int | None = None
    nprobe: int = 64
    hnsw_m: int = 32
    ef_construction: int = 200
    ef_search: int = 128
    train_size: int | None = None  # vectors used to train IVF-PQ; default 64 per list

    def check(self) -> IndexSettings:
        """These settings, if their names and numbers are valid; else ``ConfigError``."""
        if self.kind not in KINDS:
            raise ConfigError(f"unknown dense index kind {self.kind!r} (known: {', '.join(KINDS)})")
        for name in ("nlist", "pq_m", "nprobe", "hnsw_m", "ef_construction", "ef_search"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"dense index setting {name} must be at least 1, got {value}")
        return self

    def resolved(self, count: int, dim: int) -> IndexSettings:
        """These settings with every default filled in for ``count`` vectors of ``dim``."""
        self.check()
        kind = self.kind
        if kind == "auto":
            kind = "flat" if count < AUTO_FLAT_MAX else "ivfpq"
        if kind != "ivfpq":
            return replace(self, kind=kind)
        nlist = self.nlist or default_nlist(count)
        pq_m = self.pq_m or default_pq_m(dim)
        if dim % pq_m:
            raise ConfigError(f"pq_m={pq_m} must divide the vector dimension {dim}")
        # FAISS needs at least 39 training points per centroid (and 256 per PQ code).
        minimum = max(39 * nlist, 256)
        if count < minimum:
            raise ConfigError(
                f"ivfpq with nlist={nlist} needs at least {minimum:,} vectors to train; the "
                f"corpus has {count:,}: use kind='flat' (exact) or a smaller nlist"
            )
        train = min(count, self.train_size or max(64 * nlist, 65_536))
        return replace(self, kind=kind, nlist=nlist, pq_m=pq_m, train_size=max(train, minimum))

    def as_manifest(self) -> dict[str, Any]:
        return {key: value for key, value in asdict(self).items() if value is not None}


def default_nlist(count: int) -> int:
    """About 4 sqrt(count) inverted lists, a power of two (FAISS's guideline, 4..16 sqrt n)."""
    return max(1, 1 << round(math.log2(max(1.0, 4 * math.sqrt(count)))))


def default_pq_m(dim: int) -> int:
    """dim / 8 bytes per vector (96 for 768-d), lowered to a divisor of dim."""
    m = max(1, dim // 8)
    while dim % m:
        m -= 1
    return m


def factory_string(settings: IndexSettings, count: int, dim: int) -> str:
    if settings.kind == "flat":
        return "Flat"
    if settings.kind == "hnsw":
        return f"HNSW{settings.hnsw_m}"
    quantizer = "_HNSW32" if count >= HNSW_QUANTIZER_FROM else ""
    # "np": no polysemous training, which only serves Hamming pre-filtering (unused here) and
    # took minutes of simulated annealing for 16 sub-quantizers even on a thousand vectors.
    return f"IVF{settings.nlist}{quantizer},PQ{settings.pq_m}np"


def new_index(settings: IndexSettings, count: int, dim: int) -> Any:
    """An empty FAISS index of ``settings`` (resolved) for ``count`` vectors of ``dim``."""
    faiss = faiss_module()
    index = faiss.index_factory(
        dim, factory_string(settings, count, dim), faiss.METRIC_INNER_PRODUCT
    )
    if settings.kind == "hnsw":
        index.hnsw.efConstruction = settings.ef_construction
    if settings.kind == "ivfpq":
        ivf = faiss.extract_index_ivf(index)
        ivf.cp.niter = 10  # k-means iterations: FAISS's IVF default; 25 gains little recall
    return index


def build(
    settings: IndexSettings,
    count: int,
    dim: int,
    sample: Callable[[int], np.ndarray],
    batches: Iterable[np.ndarray],
    report: Callable[[int], None] | None = None,
) -> Any:
    """Train (on ``sample(n)``, n vectors spread over the corpus) and fill an index from
    ``batches`` of vectors, in order. ``report(rows added so far)`` after each batch."""
    index = new_index(settings, count, dim)
    if not index.is_trained:
        index.train(np.ascontiguousarray(sample(settings.train_size or count), dtype=np.float32))
    added = 0
    for batch in batches:
        index.add(np.ascontiguousarray(batch, dtype=np.float32))
        added += len(batch)
        if report is not None:
            report(added)
    return index


def set_search_params(index: Any, nprobe: int | None, ef_search: int | None) -> None:
    """Apply the search breadth the kind understands (others ignore it)."""
    faiss = faiss_module()
    try:
        ivf = faiss.extract_index_ivf(index)
    except RuntimeError:
        ivf = None
    if ivf is not None and nprobe is not None:
        ivf.nprobe = min(nprobe, ivf.nlist)
    hnsw = getattr(faiss.downcast_index(index), "hnsw", None)
    if hnsw is not None and ef_search is not None:
        hnsw.efSearch = ef_search


def write(index: Any, path: Path) -> None:
    faiss_module().write_index(index, str(path))


class FaissFileError(NoteragError):
    """A FAISS index file cannot be read (missing, truncated, not FAISS)."""


def read(path: Path) -> tuple[Any, bool]:
    """Open a FAISS index file memory-mapped: flat and HNSW vector storage and IVF lists are
    used in place from the file (``IO_FLAG_MMAP_IFC``; IVF lists of older files through
    ``IO_FLAG_MMAP``), so opening a 21M-vector index reads only its header, centroids and
    graph, and pages come in as queries touch them (measured: a 600 MB flat index opens in
    20 MB of RAM instead of 620 MB). Returns the index and whether it is mapped."""
    faiss = faiss_module()
    if not path.is_file():
        raise FaissFileError(f"{path}: no such FAISS index file")
    errors = []
    attempts = [
        (getattr(faiss, "IO_FLAG_MMAP_IFC", 0) | faiss.IO_FLAG_READ_ONLY, True),
        (faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY, True),
        (0, False),  # a kind FAISS cannot map: read into memory
    ]
    for flags, mapped in attempts:
        try:
            index = faiss.read_index(os.fspath(path), flags)
        except RuntimeError as exc:  # FAISS reports bad files as RuntimeError
            errors.append(" ".join(str(exc).split()))
            continue
        return index, mapped
    raise FaissFileError(
        f"{path} is not a readable FAISS index (truncated or another format): {_short(errors[-1])}"
    )


def _short(message: str) -> str:
    # FAISS's messages carry "Error in <C++ signature> at /path/file.cpp:123:"; keep the reason.
    reason = message.rsplit(": ", 1)[-1] if "Error in" in message else message
    return reason[:200]
