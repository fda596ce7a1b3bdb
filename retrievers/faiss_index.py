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
  lists (default 64). Above ``HNSW_QUANTIZER_ABOVE`` lists the coarse quantizer is itself an
  HNSW graph over the centroids (``IVF{nlist}_HNSW32``), or adding 21M vectors would compare
  each with every centroid. Written to ``index.faiss`` and memory-mapped on load: only the
  lists a query scans are read. Two options for corpora of many millions:
  ``reduce`` (a PCA rotation to that many dimensions before the IVF and PQ, ``PCAR{reduce}``:
  coarse assignment and PQ encoding cost in proportion to the dimension, and sentence
  embeddings keep most of their variance in a few hundred) and ``refine`` (``SQ8`` etc.: every
  vector also scalar-quantized in ``refine.faiss``, memory-mapped; a query takes
  ``k_factor`` x k candidates from the PQ codes and re-ranks them by these finer codes, FAISS's
  ``IndexRefine``). PQ codes alone place the right passages in the top 100 but rank them
  coarsely; the re-ranking is what brings recall@10 near exact (bench/scale_dense.py). The
  refine codes are written batch by batch straight into FAISS's file format
  (``RefineWriter``): 21M x 768 at 8 bits is 16 GB on disk, never in memory.
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

from noterag.base.errors import ConfigError, NoteragError

from .extras import MissingExtraError

KINDS = ("auto", "flat", "ivfpq", "hnsw")
AUTO_FLAT_MAX = 1_000_000
ADD_BATCH = 65_536  # vectors per FAISS add: 192 MB at 768-d, whatever the corpus size
# Lists; up to here a flat coarse quantizer (one matrix product per batch, BLAS) assigns
# faster than an HNSW graph's pointer chasing (measured on 2 cores: 50k x 768 vectors to
# 4096 HNSW centroids took 16 s).
HNSW_QUANTIZER_ABOVE = 4096
REFINE_CODES = {"SQ8": "QT_8bit", "SQ6": "QT_6bit", "SQ4": "QT_4bit", "SQfp16": "QT_fp16"}
REFINE_FILE = "refine.faiss"
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
    reduce: int | None = None  # ivfpq: PCA to this many dimensions first (None: keep all)
    refine: str = "SQ8"  # ivfpq: re-rank by these codes on disk (REFINE_CODES, or "none")
    k_factor: int = 10  # ivfpq with refine: candidates re-ranked per result wanted

    def check(self) -> IndexSettings:
        """These settings, if their names and numbers are valid; else ``ConfigError``."""
        if self.kind not in KINDS:
            raise ConfigError(f"unknown dense index kind {self.kind!r} (known: {', '.join(KINDS)})")
        if self.refine != "none" and self.refine not in REFINE_CODES:
            raise ConfigError(
                f"unknown refine codes {self.refine!r} (known: {', '.join(REFINE_CODES)}, none)"
            )
        names = ("nlist", "pq_m", "nprobe", "hnsw_m", "ef_construction", "ef_search", "reduce")
        for name in names + ("k_factor",):
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
            return replace(self, kind=kind, refine="none", reduce=None)
        nlist = self.nlist or default_nlist(count)
        if self.reduce is not None and self.reduce >= dim:
            raise ConfigError(f"reduce={self.reduce} must be below the vector dimension {dim}")
        coded = self.reduce or dim  # the dimension the PQ codes
        pq_m = self.pq_m or default_pq_m(coded)
        if coded % pq_m:
            raise ConfigError(f"pq_m={pq_m} must divide the coded dimension {coded}")
        # FAISS needs at least 39 training points per centroid (and 256 per PQ code).
        minimum = max(39 * nlist, 256)
        if count < minimum:
            raise ConfigError(
                f"ivfpq with nlist={nlist} needs at least {minimum:,} vectors to train; the "
                f"corpus has {count:,}: use kind='flat' (exact) or a smaller nlist"
            )
        train = min(count, self.train_size or max(64 * nlist, 65_536))
        return replace(self, kind=kind, nlist=nlist, pq_m=pq_m, train_size=max(train, minimum))

    @property
    def refines(self) -> bool:
        return self.kind == "ivfpq" and self.refine != "none"

    def as_manifest(self) -> dict[str, Any]:
        return {key: value for key, value in asdict(self).items() if value is not None}

    def as_spec(self) -> str:
        """These settings as ``parse`` reads them (``kind:name=value,...``), defaults left out."""
        default = IndexSettings(kind=self.kind)
        items = [
            f"{name}={value}"
            for name, value in asdict(self).items()
            if name != "kind" and value is not None and value != getattr(default, name)
        ]
        return self.kind + (":" + ",".join(items) if items else "")

    @classmethod
    def parse(cls, text: str) -> IndexSettings:
        """``kind`` or ``kind:name=value,...`` (the CLI's ``--dense-index``), checked."""
        kind, _, rest = text.partition(":")
        fields = {f for f in cls.__dataclass_fields__ if f != "kind"}
        values: dict[str, Any] = {}
        for item in filter(None, rest.split(",")):
            name, _, value = item.partition("=")
            name = name.strip().replace("-", "_")
            if name not in fields or not value:
                raise ConfigError(
                    f"bad dense index setting {item!r} (kind:name=value,...; names: "
                    f"{', '.join(sorted(fields))})"
                )
            if name == "refine":
                values[name] = value.strip()
                continue
            try:
                values[name] = int(value)
            except ValueError:
                raise ConfigError(
                    f"dense index setting {name} must be a number, got {value!r}"
                ) from None
        return cls(kind=kind.strip(), **values).check()


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
    quantizer = "_HNSW32" if (settings.nlist or 0) > HNSW_QUANTIZER_ABOVE else ""
    pca = f"PCAR{settings.reduce}," if settings.reduce else ""
    # "np": no polysemous training, which only serves Hamming pre-filtering (unused here) and
    # took minutes of simulated annealing for 16 sub-quantizers even on a thousand vectors.
    return f"{pca}IVF{settings.nlist}{quantizer},PQ{settings.pq_m}np"


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
    refine_path: Path | None = None,
) -> Any:
    """Train (on ``sample(n)``, n vectors spread over the corpus) and fill an index from
    ``batches`` of vectors, in order. ``report(rows added so far)`` after each batch. With
    ``settings.refine``, the refine codes are written to ``refine_path`` on the way."""
    index = new_index(settings, count, dim)
    refine = None
    if not index.is_trained:
        train = np.ascontiguousarray(sample(settings.train_size or count), dtype=np.float32)
        index.train(train)
        if settings.refines:
            if refine_path is None:
                raise ValueError("refine codes need a refine_path")
            quantizer = new_refine(settings, dim)
            quantizer.train(train)
            refine = RefineWriter(quantizer, count, refine_path)
        del train
    added = 0
    try:
        for batch in batches:
            batch = np.ascontiguousarray(batch, dtype=np.float32)
            index.add(batch)
            if refine is not None:
                refine.add(batch)
            added += len(batch)
            if report is not None:
                report(added)
    except BaseException:
        if refine is not None:
            refine.abort()
        raise
    if refine is not None:
        refine.close()
    return index


def new_refine(settings: IndexSettings, dim: int) -> Any:
    """An empty scalar-quantizer index of ``settings.refine`` codes (train it on a sample)."""
    faiss = faiss_module()
    qtype = getattr(faiss.ScalarQuantizer, REFINE_CODES[settings.refine])
    return faiss.IndexScalarQuantizer(dim, qtype, faiss.METRIC_INNER_PRODUCT)


class RefineWriter:
    """Writes a trained ``IndexScalarQuantizer`` holding ``count`` vectors to ``path`` batch by
    batch: the codes go straight to disk, so 21M vectors never sit in memory. The file is the
    one ``faiss.write_index`` writes for the filled index (its header with ``ntotal`` = count,
    the codes' byte count, the codes); ``check_layout`` proves that against FAISS's own writer
    before anything is written, so a FAISS release with another layout fails here, not later.
    Written to ``path`` + ``.part`` and renamed once complete."""

    def __init__(self, quantizer: Any, count: int, path: Path) -> None:
        self.quantizer, self.count, self.path = quantizer, count, path
        self.head = self.check_layout(quantizer)
        self.part = path.with_name(path.name + ".part")
        self.written = 0
        self._out = self.part.open("wb")
        code_bytes = count * quantizer.code_size
        self._out.write(
            self.head[:8] + count.to_bytes(8, "little") + self.head[16:-8]
            + code_bytes.to_bytes(8, "little")
        )  # fmt: skip

    @staticmethod
    def check_layout(quantizer: Any) -> bytes:
        """The empty index's serialization, once FAISS's own file for a 3-vector copy is shown
        to be that header with ``ntotal`` at bytes 8-16 and the codes' length before them."""
        faiss = faiss_module()
        head = bytes(faiss.serialize_index(quantizer))
        probe = faiss.clone_index(quantizer)
        rows = np.random.default_rng(0).standard_normal((3, quantizer.d), dtype=np.float32)
        probe.add(rows)
        codes = bytes(quantizer.sa_encode(rows))
        expected = (
            head[:8] + (3).to_bytes(8, "little") + head[16:-8]
            + len(codes).to_bytes(8, "little") + codes
        )  # fmt: skip
        if quantizer.ntotal or bytes(faiss.serialize_index(probe)) != expected:
            raise NoteragError(
                "this faiss-cpu writes scalar-quantizer indexes in a layout noterag does not "
                "know; build without refine codes (refine=None) or use faiss-cpu 1.9-1.15"
            )
        return head

    def add(self, vectors: np.ndarray) -> None:
        if self.written + len(vectors) > self.count:
            raise ValueError(f"more than the {self.count:,} vectors announced")
        codes = self.quantizer.sa_encode(np.ascontiguousarray(vectors, dtype=np.float32))
        self._out.write(codes.tobytes())
        self.written += len(vectors)

    def close(self) -> None:
        """Finish the file (renamed into place) if every vector was added; else remove it."""
        self._out.close()
        if self.written != self.count:
            self.part.unlink(missing_ok=True)
            raise ValueError(f"{self.written:,} of {self.count:,} vectors were added")
        os.replace(self.part, self.path)

    def abort(self) -> None:
        self._out.close()
        self.part.unlink(missing_ok=True)


def with_refine(index: Any, refine_path: Path, k_factor: int) -> Any:
    """``index`` whose candidates are re-ranked by the codes in ``refine_path``
    (memory-mapped): FAISS's ``IndexRefine``."""
    faiss = faiss_module()
    codes, _ = read(refine_path)
    if codes.ntotal != index.ntotal or codes.d != index.d:
        raise FaissFileError(
            f"{refine_path} holds {codes.ntotal:,} vectors of dim {codes.d}, the index "
            f"{index.ntotal:,} of dim {index.d}: they do not belong together"
        )
    refined = faiss.IndexRefine(index, codes)
    refined.k_factor = k_factor
    return refined


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
