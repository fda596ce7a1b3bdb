"""What building an index will cost, before building it: from the figures measured at scale.

``estimate(passages, kind)`` interpolates (linearly, between the two nearest measured sizes;
beyond the largest, along the line through the two largest) build time, peak memory and disk
from ``noterag/data/scale_measured.json``, which ``bench/scale_bm25.py`` and
``bench/scale_dense.py`` write from their runs (a 2-core, 24 GB machine: other machines scale
the times, not the memory or disk). Dense kinds exclude embedding time (the model's rate,
``bench/dense_build.py``), which dominates on CPU.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from noterag.base.errors import ConfigError

if TYPE_CHECKING:
    from .faiss_index import IndexSettings

MEASURED = Path(__file__).resolve().parents[1] / "noterag" / "data" / "scale_measured.json"
KINDS = ("bm25", "flat", "ivfpq", "hnsw")


@dataclass(frozen=True)
class Estimate:
    kind: str
    passages: int
    build_s: float
    peak_gib: float
    disk_gib: float
    basis: str  # the measured sizes it comes from, and whether it extrapolates


def measured_path() -> Path:
    # Installed, the data file sits in the package; in a checkout, next to retrievers/.
    packaged = Path(__file__).resolve().parent.parent / "data" / "scale_measured.json"
    return packaged if packaged.is_file() else MEASURED


def load_measured(path: str | os.PathLike[str] | None = None) -> dict[str, list[dict[str, Any]]]:
    target = Path(path) if path else measured_path()
    try:
        data = json.loads(target.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"no measured scale figures at {target} ({exc})") from None
    return {kind: sorted(rows, key=lambda r: r["passages"]) for kind, rows in data.items()}


def estimate(
    passages: int,
    kind: str,
    *,
    measured: dict[str, list[dict[str, Any]]] | None = None,
    dim: int = 768,
    settings: IndexSettings | None = None,
) -> Estimate:
    """Expected build seconds, peak memory (GiB) and disk (GiB) for ``passages`` of ``kind``.

    BM25 figures come from the measured rows. For the FAISS kinds the time does too, while
    memory and disk follow from the index layout at ``dim`` (a small measured index is
    dominated by fixed costs, which do not scale): see ``dense_sizes``. For IVF-PQ, whose
    k-means training depends on its settings more than on the corpus, the measured training is
    scaled to ``settings`` (default: the defaults): see ``ivfpq_training``."""
    if kind not in KINDS:
        raise ConfigError(f"unknown index kind {kind!r} (known: {', '.join(KINDS)})")
    if passages < 1:
        raise ConfigError(f"the number of passages must be at least 1, got {passages}")
    rows = (measured if measured is not None else load_measured()).get(kind) or []
    if not rows:
        raise ConfigError(f"no measured figures for {kind!r} indexes yet (run bench/scale_*.py)")
    values = {
        key: interpolate(passages, rows, itemgetter(key))
        for key in ("build_s", "peak_gib", "disk_gib")
    }
    if len(rows) == 1:
        basis = f"proportional to the one measured size ({rows[0]['passages']:,})"
    else:
        lo, hi = segment(passages, rows)
        where = "extrapolated from" if passages > rows[-1]["passages"] else "between"
        basis = f"{where} measured {lo['passages']:,} and {hi['passages']:,}"
    if kind == "ivfpq" and all("train_s" in r and "settings" in r for r in rows):
        # The measured builds without their training, plus the training these settings need.
        training_s, note = ivfpq_training(passages, rows, settings, dim)
        adding = interpolate(passages, rows, lambda row: row["build_s"] - row["train_s"])
        values["build_s"] = adding + training_s
        basis += note
    if kind != "bm25":
        values["peak_gib"], values["disk_gib"] = dense_sizes(passages, kind, dim)
        basis += f"; memory and disk from the {kind} layout at {dim}-d"
    return Estimate(kind=kind, passages=passages, basis=basis, **values)


def segment(passages: int, rows: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The two measured rows around ``passages``; beyond either end, the nearest two."""
    i = min(max(sum(1 for r in rows if r["passages"] <= passages) - 1, 0), len(rows) - 2)
    return rows[i], rows[i + 1]


def interpolate(
    passages: int, rows: list[dict[str, Any]], value: Callable[[dict[str, Any]], float]
) -> float:
    """``value`` of the measured rows at ``passages``: proportional to a single row, else linear
    between the two around it (extended beyond them), never below 0."""
    if len(rows) == 1:
        return float(value(rows[0])) * passages / rows[0]["passages"]
    lo, hi = segment(passages, rows)
    t = (passages - lo["passages"]) / (hi["passages"] - lo["passages"])
    return max(0.0, float(value(lo) + t * (value(hi) - value(lo))))


def training_work(settings: IndexSettings, passages: int, dim: int) -> tuple[IndexSettings, int]:
    """The settings resolved for ``passages``, and their k-means work: training vectors x lists
    x the dimension clustered (after ``reduce``): what FAISS's k-means costs per iteration."""
    resolved = settings.resolved(passages, dim)
    assert resolved.train_size is not None and resolved.nlist is not None
    return resolved, resolved.train_size * resolved.nlist * (resolved.reduce or dim)


def ivfpq_training(
    passages: int, rows: list[dict[str, Any]], settings: IndexSettings | None, dim: int
) -> tuple[float, str]:
    """Seconds of k-means training for ``settings`` at ``passages``, scaled from the largest
    measured build by the k-means work, and a note saying so. Settings the build would refuse
    for this size raise its ``ConfigError``."""
    from .faiss_index import IndexSettings

    wanted = settings if settings is not None else IndexSettings(kind="ivfpq")
    basis_row = rows[-1]
    _, measured_work = training_work(
        IndexSettings.parse(basis_row["settings"]), basis_row["passages"], basis_row.get("dim", dim)
    )
    resolved, work = training_work(wanted, passages, dim)  # settings the build would refuse raise
    seconds = basis_row["train_s"] * work / measured_work
    if work == measured_work:
        return seconds, ""
    return seconds, (
        f"; k-means training {seconds / 60:,.0f} min for nlist={resolved.nlist} over "
        f"{resolved.train_size:,} vectors of {resolved.reduce or dim} dimensions, scaled from "
        f"{basis_row['train_s']:.0f} s measured for {basis_row['settings']} "
        f"(x{work / measured_work:,.0f} the work); adding as measured for those"
    )


def dense_sizes(passages: int, kind: str, dim: int) -> tuple[float, float]:
    """(build memory, disk) in GiB of a FAISS index of ``kind`` with the default settings:
    the embeddings file is on disk for every kind; flat searches it in place (its memory is
    one add batch); IVF-PQ holds its codes and ids (pq_m + 8 bytes a vector) while built and
    writes its 8-bit refine codes (dim bytes a vector) straight to disk;
    HNSW holds every vector plus 2 x M neighbour ids a vector at level 0."""
    from .faiss_index import ADD_BATCH, IndexSettings, default_pq_m

    embeddings = passages * dim * 4
    batch = min(passages, ADD_BATCH) * dim * 4
    if kind == "flat":
        return batch / 2**30, embeddings / 2**30
    if kind == "ivfpq":
        index = passages * (default_pq_m(dim) + 8)
        refine = passages * dim
        return (index + batch) / 2**30, (embeddings + index + refine) / 2**30
    index = passages * (dim * 4 + 2 * IndexSettings().hnsw_m * 4)
    return index / 2**30, (embeddings + index) / 2**30


def count_passages(corpus: Path, sample_lines: int = 10_000) -> tuple[int, bool]:
    """The corpus's passage count: exact when it is small, else from its size and the mean
    length of its first lines (second value: True when estimated)."""
    size = corpus.stat().st_size
    with corpus.open("rb") as lines:
        head = [len(line) for _, line in zip(range(sample_lines), lines)]
    if len(head) < sample_lines:
        return len(head), False
    return round(size / (sum(head) / len(head))), True
