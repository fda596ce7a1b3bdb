"""Dense search through FAISS: each index kind, prebuilt indexes (FlashRAG, Pyserini-style
corpora), old index directories, the build-cost estimate, and bad inputs (one clear error).

Embeddings come from a hashing bag-of-words model (exact, instant, no torch), over a corpus of
seeded random word passages large enough to train IVF-PQ.
"""

from __future__ import annotations

import json
import random
import re
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

np = pytest.importorskip("numpy", reason="numpy comes with the dense extra")
faiss = pytest.importorskip("faiss", reason="faiss-cpu comes with the dense extra")

from langchain_core.embeddings import Embeddings
from typer.testing import CliRunner

from noterag.base.errors import ConfigError, IndexNotFoundError, NoteragError
from noterag.cli import app
from noterag.retrievers import dense, faiss_index, load_retriever
from noterag.retrievers.dense import (
    DenseIndex,
    DenseRetriever,
    attach_faiss_index,
    build_dense_index,
    reindex_dense,
)
from noterag.retrievers.estimate import count_passages, estimate, load_measured
from noterag.retrievers.faiss_index import (
    IndexSettings,
    RefineWriter,
    default_nlist,
    default_pq_m,
)

MODEL = "hashing-test-model"
DIM = 64
WORDS = [f"w{i}" for i in range(300)]


class Hashing(Embeddings):
    """Hashing bag-of-words vectors of ``dim`` dimensions."""

    def __init__(self, dim: int = DIM) -> None:
        self.dim = dim

    def _vector(self, text: str) -> list[float]:
        vector = [0.0] * self.dim
        for word in text.split():
            vector[zlib.crc32(word.encode()) % self.dim] += 1.0
        return vector

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vector(text)


def passages(n: int, seed: int = 0) -> list[dict[str, str]]:
    rng = random.Random(seed)
    return [
        {"id": f"p{i}", "title": f"T{i}", "text": " ".join(rng.choices(WORDS, k=12))}
        for i in range(n)
    ]


def write_jsonl(path: Path, rows: list[dict[str, str]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture(autouse=True, scope="module")
def one_faiss_thread() -> Iterator[None]:
    """FAISS's OpenMP threads spin while they wait: on a loaded machine, training on a
    thousand vectors took minutes with two threads, a second with one."""
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(before)


@pytest.fixture(autouse=True)
def hashing_model(monkeypatch: pytest.MonkeyPatch) -> Hashing:
    model = Hashing()
    monkeypatch.setitem(dense._EMBEDDERS, MODEL, model)
    return model


@pytest.fixture(scope="module")
def corpus_rows() -> list[dict[str, str]]:
    return passages(1200)


def build(tmp_path: Path, rows: list[dict[str, str]], index: IndexSettings | str) -> Path:
    corpus = write_jsonl(tmp_path / "corpus.jsonl", rows)
    out = tmp_path / "idx"
    build_dense_index(corpus, out, model_name=MODEL, progress=False, index=index)
    return out


def exact_scores(rows: list[dict[str, str]], query: str) -> np.ndarray:
    model = Hashing()
    matrix = np.array(
        [model.embed_query(f"{r['title']}\n{r['text']}") for r in rows], dtype=np.float64
    )
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    q = np.array(model.embed_query(query), dtype=np.float64)
    return matrix @ (q / np.linalg.norm(q))


def exact_top(rows: list[dict[str, str]], query: str, k: int) -> list[str]:
    scores = exact_scores(rows, query)
    order = sorted(range(len(rows)), key=lambda i: (-scores[i], i))
    return [rows[i]["id"] for i in order[:k]]


def assert_exact(docs: list, rows: list[dict[str, str]], query: str) -> None:
    """The documents are an exact top-k: the k best scores (rows tied to float precision may
    come in either order), each document carrying its own true score."""
    scores = exact_scores(rows, query)
    by_id = {r["id"]: i for i, r in enumerate(rows)}
    best = sorted(scores, reverse=True)[: len(docs)]
    assert [d.metadata["score"] for d in docs] == pytest.approx(best, abs=1e-5)
    assert [scores[by_id[d.id]] for d in docs] == pytest.approx(best, abs=1e-5)


# ----------------------------------------------------------------------------- each kind


def test_flat_is_exact_and_keeps_no_second_copy(tmp_path: Path, corpus_rows: list) -> None:
    out = build(tmp_path, corpus_rows, "flat")
    assert not (out / "index.faiss").exists()
    retriever = DenseRetriever(index_dir=str(out), k=5)
    for row in corpus_rows[:20]:
        assert_exact(retriever.invoke(row["text"]), corpus_rows, row["text"])


def test_ivfpq_is_written_memory_mapped_and_finds_the_passage(
    tmp_path: Path, corpus_rows: list
) -> None:
    settings = IndexSettings(kind="ivfpq", nlist=8, pq_m=16, nprobe=8)
    out = build(tmp_path, corpus_rows, settings)
    manifest = json.loads((out / "noterag-index.json").read_text())
    assert manifest["faiss"] == {
        "kind": "ivfpq",
        "nlist": 8,
        "pq_m": 16,
        "nprobe": 8,
        "hnsw_m": 32,
        "ef_construction": 200,
        "ef_search": 128,
        "train_size": 1200,
        "refine": "SQ8",
        "k_factor": 10,
    }
    index = DenseIndex(out)
    ivf = faiss.extract_index_ivf(index._faiss)
    assert (ivf.nlist, ivf.nprobe, index._faiss.ntotal) == (8, 8, 1200)
    # Candidates re-ranked by the 8-bit codes of refine.faiss (memory-mapped).
    assert isinstance(index._faiss, faiss.IndexRefine) and index._faiss.k_factor == 10
    # The index is used in place from its file, not read into RAM.
    assert index.mapped
    retriever = DenseRetriever(index_dir=str(out), k=10)
    found = 0
    for row in corpus_rows[:50]:
        # Compressed vectors: the passage itself is among the top 10 for its own text.
        found += row["id"] in [d.id for d in retriever.invoke(f"{row['title']}\n{row['text']}")]
    assert found >= 48
    # nprobe overrides the manifest per retriever.
    narrow = DenseRetriever(index_dir=str(out), nprobe=1)
    narrow.load()
    assert faiss.extract_index_ivf(narrow._index._faiss).nprobe == 1


def test_hnsw_agrees_with_exact_search(tmp_path: Path, corpus_rows: list) -> None:
    out = build(tmp_path, corpus_rows, IndexSettings(kind="hnsw", hnsw_m=16, ef_search=256))
    assert (out / "index.faiss").is_file()
    retriever = DenseRetriever(index_dir=str(out), k=5)
    agree = sum(
        [d.id for d in retriever.invoke(row["text"])][:1] == exact_top(corpus_rows, row["text"], 1)
        for row in corpus_rows[:40]
    )
    assert agree >= 39


def test_reindex_builds_another_kind_from_the_kept_embeddings(
    tmp_path: Path, corpus_rows: list, hashing_model: Hashing, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = build(tmp_path, corpus_rows, "flat")
    before = json.loads((out / "noterag-index.json").read_text())["build_id"]
    # Re-indexing embeds nothing: a model that fails on use proves it.
    monkeypatch.setattr(hashing_model, "embed_documents", None)
    settings = reindex_dense(out, IndexSettings(kind="hnsw", hnsw_m=16), progress=False)
    manifest = json.loads((out / "noterag-index.json").read_text())
    assert settings.kind == "hnsw" and manifest["faiss"]["kind"] == "hnsw"
    assert manifest["build_id"] != before and (out / "index.faiss").is_file()
    assert not list(out.glob(".*part"))
    docs = DenseRetriever(index_dir=str(out), k=1).invoke(corpus_rows[3]["text"])
    assert docs[0].id == exact_top(corpus_rows, corpus_rows[3]["text"], 1)[0]
    reindex_dense(out, "flat", progress=False)
    assert not (out / "index.faiss").exists() and DenseIndex(out).kind == "flat"


def test_refine_codes_bring_ivfpq_to_the_exact_ranking(tmp_path: Path, corpus_rows: list) -> None:
    # Coarse PQ codes (4 bytes for 64 dimensions) rank badly on their own; re-ranked by the
    # 8-bit codes on disk, the top 5 is the exact one and each score the true score to 1e-2.
    coarse = IndexSettings(kind="ivfpq", nlist=8, pq_m=4, nprobe=8, refine="none")
    refined = IndexSettings(kind="ivfpq", nlist=8, pq_m=4, nprobe=8, refine="SQ8", k_factor=20)
    agree = {}
    by_id = {r["id"]: i for i, r in enumerate(corpus_rows)}
    for name, settings in (("coarse", coarse), ("refined", refined)):
        (tmp_path / name).mkdir()
        out = build(tmp_path / name, corpus_rows, settings)
        assert (out / "refine.faiss").is_file() == (name == "refined")
        retriever = DenseRetriever(index_dir=str(out), k=5)
        agree[name] = 0
        for row in corpus_rows[:30]:
            docs = retriever.invoke(row["text"])
            scores = exact_scores(corpus_rows, row["text"])
            true = [scores[by_id[d.id]] for d in docs]
            # An exact top 5 up to ties (bag-of-words scores tie often): the 5 best scores.
            agree[name] += sorted(true, reverse=True) == pytest.approx(
                sorted(scores, reverse=True)[:5], abs=1e-6
            )
            if name == "refined":
                assert [d.metadata["score"] for d in docs] == pytest.approx(true, abs=1e-2)
    assert agree["refined"] >= 25 and agree["coarse"] <= 10, agree


def test_reduce_rotates_to_fewer_dimensions_before_ivf_and_pq(
    tmp_path: Path, corpus_rows: list
) -> None:
    settings = IndexSettings(kind="ivfpq", nlist=8, reduce=32, pq_m=8, nprobe=8)
    out = build(tmp_path, corpus_rows, settings)
    index = DenseIndex(out)
    base = faiss.downcast_index(index._faiss.base_index)
    assert isinstance(base, faiss.IndexPreTransform) and base.d == DIM
    assert faiss.extract_index_ivf(index._faiss).d == 32
    retriever = DenseRetriever(index_dir=str(out), k=5)
    agree = sum(
        [d.id for d in retriever.invoke(r["text"])][:1] == exact_top(corpus_rows, r["text"], 1)
        for r in corpus_rows[:30]
    )
    assert agree >= 29


def test_refine_writer_writes_what_faiss_writes_batch_by_batch(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((1000, 48), dtype=np.float32)
    quantizer = faiss_index.new_refine(IndexSettings(refine="SQ8"), 48)
    quantizer.train(vectors)
    whole = faiss.clone_index(quantizer)
    whole.add(vectors)
    writer = RefineWriter(quantizer, 1000, tmp_path / "refine.faiss")
    for start in range(0, 1000, 300):
        writer.add(vectors[start : start + 300])
    writer.close()
    assert (tmp_path / "refine.faiss").read_bytes() == bytes(faiss.serialize_index(whole))
    assert not list(tmp_path.glob("*.part"))
    mapped, is_mapped = faiss_index.read(tmp_path / "refine.faiss")
    assert is_mapped and mapped.ntotal == 1000
    # A writer that does not get every vector leaves no file behind.
    short = RefineWriter(quantizer, 1000, tmp_path / "short.faiss")
    short.add(vectors[:10])
    with pytest.raises(ValueError, match="10 of 1,000 vectors were added"):
        short.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["refine.faiss"]


def test_dense_index_settings_parse_from_the_command_line_form() -> None:
    parsed = IndexSettings.parse("ivfpq:nlist=1024,reduce=128,refine=SQ4,k-factor=20")
    assert (parsed.kind, parsed.nlist, parsed.reduce, parsed.refine, parsed.k_factor) == (
        "ivfpq", 1024, 128, "SQ4", 20
    )  # fmt: skip
    assert IndexSettings.parse("hnsw") == IndexSettings(kind="hnsw")
    with pytest.raises(ConfigError, match="bad dense index setting 'lists=4'"):
        IndexSettings.parse("ivfpq:lists=4")
    with pytest.raises(ConfigError, match="nlist must be a number, got 'many'"):
        IndexSettings.parse("ivfpq:nlist=many")
    with pytest.raises(ConfigError, match="unknown refine codes 'SQ3'"):
        IndexSettings.parse("ivfpq:refine=SQ3")
    with pytest.raises(ConfigError, match="reduce=64 must be below the vector dimension 64"):
        IndexSettings(kind="ivfpq", reduce=64).resolved(100_000, 64)
    with pytest.raises(ConfigError, match="pq_m=7 must divide the coded dimension 32"):
        IndexSettings(kind="ivfpq", reduce=32, pq_m=7).resolved(100_000, 64)


def test_auto_picks_flat_for_a_small_corpus_and_defaults_scale_with_it() -> None:
    assert IndexSettings().resolved(999_999, 768).kind == "flat"
    big = IndexSettings().resolved(21_015_324, 768)
    assert (big.kind, big.nlist, big.pq_m, big.nprobe) == ("ivfpq", 16384, 96, 64)
    assert default_nlist(1_000_000) == 4096 and default_pq_m(384) == 48 and default_pq_m(100) == 10


def test_a_format_1_numpy_index_still_opens_as_flat(tmp_path: Path, corpus_rows: list) -> None:
    out = build(tmp_path, corpus_rows[:50], "flat")
    manifest_path = out / "noterag-index.json"
    manifest = json.loads(manifest_path.read_text())
    del manifest["faiss"]
    manifest["format_version"] = 1
    manifest_path.write_text(json.dumps(manifest))
    retriever = load_retriever(f"dense:{out}", k=3)
    assert_exact(retriever.invoke(corpus_rows[7]["text"]), corpus_rows[:50], corpus_rows[7]["text"])


def test_an_ivfpq_index_from_before_refine_codes_opens_without_them(
    tmp_path: Path, corpus_rows: list
) -> None:
    out = build(tmp_path, corpus_rows, IndexSettings(kind="ivfpq", nlist=8, pq_m=16))
    manifest_path = out / "noterag-index.json"
    manifest = json.loads(manifest_path.read_text())
    for key in ("refine", "k_factor"):
        del manifest["faiss"][key]
    manifest["marks"].pop("refine.faiss", None)
    manifest_path.write_text(json.dumps(manifest))
    (out / "refine.faiss").unlink()
    index = DenseIndex(out)
    assert not isinstance(index._faiss, faiss.IndexRefine)
    docs = DenseRetriever(index_dir=str(out), k=10).invoke(corpus_rows[4]["text"])
    assert corpus_rows[4]["id"] in [d.id for d in docs]


# ----------------------------------------------------------------------------- bad inputs


def test_settings_are_checked_before_anything_loads(tmp_path: Path) -> None:
    corpus = write_jsonl(tmp_path / "c.jsonl", passages(10))
    with pytest.raises(ConfigError, match="unknown dense index kind 'ivf'"):
        build_dense_index(corpus, tmp_path / "x", model_name="no/such-model", index="ivf")
    with pytest.raises(ConfigError, match="nprobe must be at least 1"):
        build_dense_index(corpus, tmp_path / "x", index=IndexSettings(nprobe=0))
    with pytest.raises(
        ConfigError,
        match="ivfpq with nlist=16 needs at least 624 vectors to train; the corpus has 10",
    ):
        build_dense_index(corpus, tmp_path / "x", model_name=MODEL, progress=False, index="ivfpq")
    assert not (tmp_path / "x").exists()


def test_a_truncated_faiss_file_is_one_clear_error(tmp_path: Path, corpus_rows: list) -> None:
    out = build(tmp_path, corpus_rows, IndexSettings(kind="hnsw", hnsw_m=8))
    path = out / "index.faiss"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(IndexNotFoundError) as caught:
        load_retriever(f"dense:{out}")
    message = str(caught.value)
    assert "index.faiss" in message and "rebuild" in message and "\n" not in message


def test_a_truncated_or_foreign_refine_file_is_one_clear_error(
    tmp_path: Path, corpus_rows: list
) -> None:
    out = build(tmp_path, corpus_rows, IndexSettings(kind="ivfpq", nlist=8, pq_m=8))
    path = out / "refine.faiss"
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(IndexNotFoundError) as caught:
        DenseIndex(out)
    message = str(caught.value)
    assert "refine.faiss" in message and "rebuild" in message and "\n" not in message
    # Codes of another corpus (fewer vectors): refused, not searched with the wrong rows.
    other = faiss_index.new_refine(IndexSettings(), DIM)
    other.train(np.eye(DIM, dtype=np.float32))
    other.add(np.eye(DIM, dtype=np.float32))
    faiss.write_index(other, str(path))
    with pytest.raises(
        IndexNotFoundError,
        match="not the file this index was built with|holds 64 vectors .* do not belong together",
    ):
        DenseIndex(out)


def test_reindexing_to_flat_removes_the_refine_codes(tmp_path: Path, corpus_rows: list) -> None:
    out = build(tmp_path, corpus_rows, IndexSettings(kind="ivfpq", nlist=8, pq_m=8))
    assert (out / "refine.faiss").is_file()
    reindex_dense(out, "flat", progress=False)
    assert not (out / "refine.faiss").exists() and not (out / "index.faiss").exists()
    reindex_dense(out, "ivfpq:nlist=8,pq_m=8,refine=SQ4", progress=False)
    assert (out / "refine.faiss").is_file() and DenseIndex(out)._faiss.k_factor == 10


def test_an_index_that_does_not_match_its_manifest_is_refused(
    tmp_path: Path, corpus_rows: list
) -> None:
    out = build(tmp_path, corpus_rows, IndexSettings(kind="hnsw", hnsw_m=8))
    other = faiss.IndexHNSWFlat(DIM, 8, faiss.METRIC_INNER_PRODUCT)
    other.add(np.eye(DIM, dtype=np.float32))
    faiss.write_index(other, str(out / "index.faiss"))
    # the manifest's mark of each file (size, CRC) sees the swap first; an index written without
    # the marks is checked by the vector count
    with pytest.raises(
        IndexNotFoundError,
        match="not the file this index was built with|holds 64 vectors .* do not belong together",
    ):
        DenseIndex(out)


# ----------------------------------------------------------------------------- prebuilt


def flashrag_files(tmp_path: Path, rows: list[dict[str, str]], dim: int = DIM) -> tuple[Path, Path]:
    """An ``e5_Flat.index``-style FAISS file and a FlashRAG ``{id, contents}`` corpus whose
    contents are ``"\\"Title\\"\\ntext"``, as FlashRAG's wiki dumps are."""
    corpus = tmp_path / "wiki18_100w.jsonl"
    corpus.write_text(
        "".join(
            json.dumps({"id": str(i), "contents": f'"{r["title"]}"\n{r["text"]}'}) + "\n"
            for i, r in enumerate(rows)
        ),
        encoding="utf-8",
    )
    model = Hashing(dim)
    vectors = np.array([model.embed_query("passage: " + r["text"]) for r in rows], dtype=np.float32)
    faiss.normalize_L2(vectors)
    index = faiss.IndexFlatIP(dim)
    index.add(vectors)
    path = tmp_path / "e5_Flat.index"
    faiss.write_index(index, str(path))
    return path, corpus


def test_flashrag_prebuilt_index_opens_without_rebuilding(tmp_path: Path) -> None:
    rows = passages(30, seed=3)
    index_file, corpus = flashrag_files(tmp_path, rows)
    out = tmp_path / "attached"
    assert attach_faiss_index(index_file, corpus, out, model_name=MODEL, query_prefix="q: ") == 30
    # Nothing copied: the directory points at the files where they are.
    assert sorted(p.name for p in out.iterdir()) == ["noterag-index.json", "offsets.npy"]
    retriever = load_retriever(str(out), k=3)
    top = retriever.invoke(rows[12]["text"])[0]
    assert (top.id, top.metadata["title"], top.page_content) == (
        "12",
        rows[12]["title"],
        rows[12]["text"],
    )
    assert retriever._index.query_prefix == "q: "


def test_a_pyserini_style_corpus_with_title_newline_text(tmp_path: Path) -> None:
    rows = passages(20, seed=4)
    index_file, _ = flashrag_files(tmp_path, rows)
    corpus = tmp_path / "pyserini.jsonl"
    corpus.write_text(
        "".join(
            json.dumps({"id": f"doc{i}", "contents": f"{r['title']}\n{r['text']}"}) + "\n"
            for i, r in enumerate(rows)
        )
    )
    out = tmp_path / "attached"
    attach_faiss_index(index_file, corpus, out, model_name=MODEL)
    doc = DenseRetriever(index_dir=str(out), k=1).invoke(rows[5]["text"])[0]
    assert (doc.id, doc.metadata["title"], doc.page_content) == (
        "doc5",
        rows[5]["title"],
        rows[5]["text"],
    )


def test_a_corpus_that_does_not_match_its_index_is_refused(tmp_path: Path) -> None:
    rows = passages(20, seed=5)
    index_file, corpus = flashrag_files(tmp_path, rows)
    short = tmp_path / "short.jsonl"
    short.write_text("".join(corpus.read_text().splitlines(keepends=True)[:19]))
    with pytest.raises(NoteragError, match="has 19 passages but e5_Flat.index holds 20 vectors"):
        attach_faiss_index(index_file, short, tmp_path / "a", model_name=MODEL)
    blank = tmp_path / "blank.jsonl"
    blank.write_text(corpus.read_text().replace("\n", "\n\n", 1))
    with pytest.raises(NoteragError, match="line 2 is blank"):
        attach_faiss_index(index_file, blank, tmp_path / "a", model_name=MODEL)
    not_faiss = tmp_path / "x.index"
    not_faiss.write_bytes(b"IxFI" + b"\0" * 40)
    with pytest.raises(NoteragError, match="not a readable FAISS index"):
        attach_faiss_index(not_faiss, corpus, tmp_path / "a", model_name=MODEL)
    assert not (tmp_path / "a").exists()


def test_a_query_model_of_another_dimension_is_one_error(tmp_path: Path) -> None:
    rows = passages(10, seed=6)
    index_file, corpus = flashrag_files(tmp_path, rows, dim=32)
    out = tmp_path / "attached"
    attach_faiss_index(index_file, corpus, out, model_name=MODEL)
    with pytest.raises(NoteragError, match="gives 64-dim vectors but .* holds 32-dim ones"):
        DenseRetriever(index_dir=str(out)).invoke("w1 w2")


def test_cli_attaches_a_prebuilt_index(tmp_path: Path) -> None:
    rows = passages(10, seed=7)
    index_file, corpus = flashrag_files(tmp_path, rows)
    out = tmp_path / "attached"
    runner = CliRunner()
    result = runner.invoke(
        app, ["index", str(corpus), "--faiss", str(index_file), "--out", str(out)]
    )
    assert result.exit_code == 1 and "--faiss needs --embedding-model" in result.stderr
    result = runner.invoke(
        app,
        ["index", str(corpus), "--faiss", str(index_file), "--out", str(out),
         "--embedding-model", MODEL],
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert DenseIndex(out).num_passages == 10


# ----------------------------------------------------------------------------- estimate

MEASURED = {
    "bm25": [
        {"passages": 1_000_000, "build_s": 100.0, "peak_gib": 1.0, "disk_gib": 0.5},
        {"passages": 5_000_000, "build_s": 500.0, "peak_gib": 3.0, "disk_gib": 2.5},
    ]
}


def test_estimate_interpolates_and_extrapolates_the_measured_figures() -> None:
    middle = estimate(3_000_000, "bm25", measured=MEASURED)
    assert (middle.build_s, middle.peak_gib, middle.disk_gib) == (300.0, 2.0, 1.5)
    assert middle.basis == "between measured 1,000,000 and 5,000,000"
    far = estimate(21_000_000, "bm25", measured=MEASURED)
    assert (far.build_s, far.peak_gib, far.disk_gib) == (2100.0, 11.0, 10.5)
    assert far.basis.startswith("extrapolated")
    # FAISS kinds: memory and disk from the layout, 96 + 8 bytes a 768-d vector for IVF-PQ
    # (21M: 2.0 GiB of codes and ids, plus one 192 MB add batch); disk adds the embeddings.
    ivfpq = {"ivfpq": [{"passages": 50_000, "build_s": 10.0, "peak_gib": 0.6, "disk_gib": 0.01}]}
    big = estimate(21_015_324, "ivfpq", measured=ivfpq)
    assert big.build_s == pytest.approx(10.0 * 21_015_324 / 50_000)
    assert big.peak_gib == pytest.approx((21_015_324 * 104 + 65_536 * 3072) / 2**30)
    # disk: the embeddings, the codes and ids, and the 8-bit refine codes (one byte a dim)
    assert big.disk_gib == pytest.approx(21_015_324 * (3072 + 104 + 768) / 2**30)
    with pytest.raises(ConfigError, match="no measured figures for 'hnsw'"):
        estimate(10, "hnsw", measured=MEASURED)
    with pytest.raises(ConfigError, match="unknown index kind"):
        estimate(10, "lucene", measured=MEASURED)


def test_the_shipped_figures_give_an_estimate_for_each_measured_kind() -> None:
    measured = load_measured()
    assert {"bm25", "flat", "ivfpq"} <= set(measured)
    for kind, rows in measured.items():
        guess = estimate(21_015_324, kind)
        largest = rows[-1]
        # Beyond the largest measured size, no figure shrinks.
        assert guess.build_s >= largest["build_s"] * 0.99 and guess.disk_gib >= largest["disk_gib"]
        assert guess.peak_gib > 0


def test_dry_run_states_the_cost_and_builds_nothing(tmp_path: Path) -> None:
    corpus = write_jsonl(tmp_path / "c.jsonl", passages(50))
    assert count_passages(corpus) == (50, False)
    result = CliRunner().invoke(
        app, ["index", str(corpus), "--dry-run", "--out", str(tmp_path / "o")]
    )
    assert result.exit_code == 0, result.stderr
    assert re.match(
        r"bm25 index of 50 passages: build about \d+ min, peak memory about", result.stderr
    )
    assert not (tmp_path / "o").exists()


MEASURED_IVFPQ = {
    "ivfpq": [
        {
            "passages": 1_000_000,
            "build_s": 30.0,
            "train_s": 10.0,
            "settings": "ivfpq:nlist=1024,reduce=128,pq_m=32,refine=SQ8",
            "dim": 768,
            "peak_gib": 1.0,
            "disk_gib": 1.0,
        }
    ]
}


def test_settings_read_back_from_their_spec() -> None:
    for spec in ("auto", "hnsw:hnsw_m=16", "ivfpq:nlist=1024,pq_m=32,train_size=65536,reduce=128"):
        assert IndexSettings.parse(spec).as_spec() == spec
    resolved = IndexSettings(kind="ivfpq", reduce=128).resolved(1_000_000, 768)
    assert IndexSettings.parse(resolved.as_spec()) == resolved


def test_ivfpq_estimate_scales_the_training_to_the_settings_asked_for() -> None:
    measured = IndexSettings.parse("ivfpq:nlist=1024,reduce=128,pq_m=32,refine=SQ8")
    # The measured settings at 21M: the same training (65,536 vectors), adding scaled up.
    same = estimate(21_015_324, "ivfpq", measured=MEASURED_IVFPQ, settings=measured)
    assert same.build_s == pytest.approx(20.0 * 21.015324 + 10.0)
    assert "k-means" not in same.basis
    # The defaults at 21M: 16,384 lists trained on 1,048,576 vectors of all 768 dimensions,
    # 1,536 times the measured work (65,536 x 1,024 lists x 128 dimensions).
    default = estimate(21_015_324, "ivfpq", measured=MEASURED_IVFPQ)
    assert default.build_s == pytest.approx(20.0 * 21.015324 + 10.0 * 1536)
    assert (
        "; k-means training 256 min for nlist=16384 over 1,048,576 vectors of 768 dimensions, "
        "scaled from 10 s measured for ivfpq:nlist=1024,reduce=128,pq_m=32,refine=SQ8 "
        "(x1,536 the work); adding as measured for those" in default.basis
    )
    # Rows without their training time (older measurements): the build time as measured.
    plain = {"ivfpq": [{k: v for k, v in MEASURED_IVFPQ["ivfpq"][0].items() if k != "train_s"}]}
    assert estimate(21_015_324, "ivfpq", measured=plain).build_s == pytest.approx(30 * 21.015324)
    # Settings the build would refuse at this size: its error, not a figure.
    with pytest.raises(ConfigError, match="needs at least 39,936 vectors to train"):
        estimate(5_000, "ivfpq", measured=MEASURED_IVFPQ, settings=measured)


def test_dry_run_takes_the_dense_index_settings(tmp_path: Path) -> None:
    corpus = write_jsonl(tmp_path / "c.jsonl", passages(50))
    runner = CliRunner()
    result = runner.invoke(
        app, ["index", str(corpus), "--dry-run", "--dense", "--dense-index", "hnsw:hnsw_m=16"]
    )
    assert result.exit_code == 0, result.stderr
    assert result.stderr.startswith("hnsw index of 50 passages: build about ")
    result = runner.invoke(
        app, ["index", str(corpus), "--dry-run", "--dense", "--dense-index", "ivfpq:nlist=x"]
    )
    assert result.exit_code == 1
    assert result.stderr.strip() == "error: dense index setting nlist must be a number, got 'x'"
    # auto picks flat for 50 passages; for ivfpq, nlist=4096 is refused as the build would.
    result = runner.invoke(
        app, ["index", str(corpus), "--dry-run", "--dense", "--dense-index", "auto:nlist=4096"]
    )
    assert result.exit_code == 0 and result.stderr.startswith("flat index of 50 passages")
    result = runner.invoke(
        app, ["index", str(corpus), "--dry-run", "--dense", "--dense-index", "ivfpq:nlist=4096"]
    )
    assert result.exit_code == 1
    assert "ivfpq with nlist=4096 needs at least 159,744 vectors to train" in result.stderr
