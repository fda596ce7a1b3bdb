"""Dense retrieval with the papers' models (``dense:<dir>?model=bge-base-en-v1.5``): presets found
in the Hugging Face cache only, a one-line error otherwise, the query instruction, and the check
that queries are embedded with the index's model. No model is downloaded or loaded: the cache
is a folder made by the test and the embedder a hashing bag of words."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import pytest

pytest.importorskip("numpy", reason="numpy is not installed (it comes with the dense extra)")
pytest.importorskip("huggingface_hub", reason="huggingface_hub (the dense extra) is not installed")

import huggingface_hub.constants
from langchain_core.embeddings import Embeddings
from typer.testing import CliRunner

from noterag.base.errors import ConfigError
from noterag.cli import app
from noterag.retrievers import dense as dense_module
from noterag.retrievers import load_retriever
from noterag.retrievers.dense import build_dense_index
from noterag.retrievers.embedding_presets import BGE_INSTRUCTION, resolve_model


class Recording(Embeddings):
    """Hashing bag-of-words vectors that remember the queries they embedded."""

    def __init__(self) -> None:
        self.queries: list[str] = []

    def _vector(self, text: str) -> list[float]:
        vector = [0.0] * 64
        for word in text.lower().split():
            vector[zlib.crc32(word.encode()) % 64] += 1.0
        return vector

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        self.queries.append(text)
        return self._vector(text)


@pytest.fixture
def hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    return cache


def cache_model(cache: Path, repo: str) -> Path:
    """The layout `huggingface-cli download REPO` leaves in the cache."""
    folder = cache / f"models--{repo.replace('/', '--')}"
    snapshot = folder / "snapshots" / "0123abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text("0123abc")
    return snapshot


def test_a_preset_missing_from_the_cache_is_one_line(hub_cache: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve_model("bge-base-en-v1.5")
    assert str(caught.value) == (
        "the embedding model BAAI/bge-base-en-v1.5 (preset bge-base-en-v1.5) is not on this "
        "machine and noterag downloads nothing while it runs: get it once with "
        "`huggingface-cli download BAAI/bge-base-en-v1.5`, or give its folder (model=/path)"
    )


def test_a_cached_preset_resolves_to_its_snapshot(hub_cache: Path) -> None:
    snapshot = cache_model(hub_cache, "sentence-transformers/gtr-t5-xxl")
    folder, preset = resolve_model("gtr-t5-xxl")
    assert Path(folder) == snapshot
    assert preset is not None and preset.repo == "sentence-transformers/gtr-t5-xxl"
    assert resolve_model("sentence-transformers/gtr-t5-xxl")[0] == folder  # the hub name too


def test_index_command_refuses_a_missing_preset_in_one_line(
    hub_cache: Path, tmp_path: Path
) -> None:
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": "1", "title": "T", "text": "x"}) + "\n")
    result = CliRunner().invoke(
        app,
        [
            "index",
            str(corpus),
            "--dense",
            "--embedding-model",
            "gtr-t5-xxl",
            "--out",
            str(tmp_path / "idx"),
        ],
    )
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 1 and len(lines) == 1
    assert lines[0].startswith("error: the embedding model sentence-transformers/gtr-t5-xxl")
    assert not (tmp_path / "idx").exists()


@pytest.fixture
def bge_index(tmp_path: Path, hub_cache: Path) -> tuple[Path, Path]:
    snapshot = cache_model(hub_cache, "BAAI/bge-base-en-v1.5")
    corpus = tmp_path / "c.jsonl"
    passages = [
        {"id": "1", "title": "Nile", "text": "a river in africa"},
        {"id": "2", "title": "Alps", "text": "mountains in europe"},
    ]
    corpus.write_text("".join(json.dumps(p) + "\n" for p in passages))
    build_dense_index(
        corpus, tmp_path / "idx", model_name=str(snapshot), embeddings=Recording(), progress=False
    )
    return tmp_path / "idx", snapshot


def test_preset_with_bge_instruction_embeds_queries_with_it(
    bge_index: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    index_dir, snapshot = bge_index
    embedder = Recording()
    loaded: list[str] = []
    monkeypatch.setattr(
        dense_module, "load_embeddings", lambda name: loaded.append(name) or embedder
    )

    plain = load_retriever(f"dense:{index_dir}?model=bge-base-en-v1.5", k=1)
    assert [d.id for d in plain.invoke("river in africa")] == ["1"]
    instructed = load_retriever(f"dense:{index_dir}?model=bge-base-en-v1.5&instruction=bge", k=1)
    assert [d.id for d in instructed.invoke("mountains in europe")] == ["2"]

    assert loaded == [str(snapshot), str(snapshot)]
    # As DeepNote's code: the query as it is; with instruction=bge, BGE's instruction first.
    assert embedder.queries == ["river in africa", BGE_INSTRUCTION + "mountains in europe"]


def test_a_preset_other_than_the_index_model_is_refused(
    bge_index: tuple[Path, Path], hub_cache: Path
) -> None:
    index_dir, snapshot = bge_index
    cache_model(hub_cache, "sentence-transformers/gtr-t5-xxl")
    with pytest.raises(ConfigError) as caught:
        load_retriever(f"dense:{index_dir}?model=gtr-t5-xxl")
    assert str(caught.value) == (
        f"the dense index was embedded with {str(snapshot)!r}, not "
        "sentence-transformers/gtr-t5-xxl: queries embedded with another model would not match "
        "it; build it with `noterag index CORPUS --dense --embedding-model gtr-t5-xxl --out DIR`"
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ("?instruction=e5", "unknown query instruction 'e5' (known: bge, none)"),
        ("?modle=x", "dense: spec option 'modle' is unknown (known: model, instruction)"),
        (
            "?model=nope",
            (
                "embedding model 'nope' is neither a preset (bge-base-en-v1.5, gtr-t5-xxl) "
                "nor a model folder"
            ),
        ),
    ],
)
def test_bad_dense_options_are_one_line(
    bge_index: tuple[Path, Path], options: str, message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_retriever(f"dense:{bge_index[0]}{options}")
    assert str(caught.value) == message
