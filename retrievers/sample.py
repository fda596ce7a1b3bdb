"""The sample corpus and questions shipped with noterag, and an index of them built on demand."""

from __future__ import annotations

import json
import os
from importlib import resources
from pathlib import Path
from typing import Any


def sample_corpus() -> Path:
    return Path(str(resources.files("noterag") / "data" / "sample_corpus.jsonl"))


def sample_questions_path() -> Path:
    return Path(str(resources.files("noterag") / "data" / "sample_questions.jsonl"))


def sample_questions() -> list[dict[str, Any]]:
    path = sample_questions_path()
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def sample_index(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The sample corpus's BM25 index, built once into the cache (NOTERAG_CACHE or
    ~/.cache/noterag) so Studio and `build_graph` work with no index of one's own."""
    from noterag.retrievers import build_bm25_index

    root = Path(cache_dir or os.environ.get("NOTERAG_CACHE") or Path.home() / ".cache" / "noterag")
    index = root / "sample-index"
    if not (index / "noterag-index.json").exists():
        root.mkdir(parents=True, exist_ok=True)
        build_bm25_index(sample_corpus(), index, progress=False)
    return index
