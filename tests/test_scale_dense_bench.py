"""bench/scale_dense.py: the synthetic vectors regenerate identically batch by batch, and the
streaming ground truth is the exact top 10 over all of them (what every recall figure rests on).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

np = pytest.importorskip("numpy", reason="numpy comes with the dense extra")
faiss = pytest.importorskip("faiss", reason="faiss-cpu comes with the dense extra")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import scale_dense

from noterag.retrievers import faiss_index
from noterag.retrievers.faiss_index import IndexSettings


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scale_dense, "BATCH", 1000)


def test_batches_regenerate_identically_and_queries_are_not_corpus_rows(
    small_batches: None,
) -> None:
    data = scale_dense.SyntheticVectors(3500, 768, seed=4)
    assert [len(data.batch(b)) for b in data.batches()] == [1000, 1000, 1000, 500]
    assert np.array_equal(data.batch(2), scale_dense.SyntheticVectors(3500, 768, 4).batch(2))
    assert not np.array_equal(data.batch(1), data.batch(2))
    assert np.allclose(np.linalg.norm(data.batch(3), axis=1), 1.0, atol=1e-5)
    corpus = np.concatenate([data.batch(b) for b in data.batches()])
    queries = data.queries(20)
    # Fresh draws: no query is a corpus row (its best match is well below 1).
    assert (queries @ corpus.T).max() < 0.99
    # Clustered, as embeddings are: a query's nearest row is much closer than a random one.
    stats = scale_dense.geometry(corpus, queries)
    assert stats["query_top1"] > stats["pair_cosine"] + 0.2


def test_the_streaming_pass_finds_the_exact_top_10_and_fills_the_index(
    small_batches: None, tmp_path: Path
) -> None:
    data = scale_dense.SyntheticVectors(4200, 768, seed=1)
    queries = data.queries(30)
    settings = IndexSettings(kind="ivfpq", nlist=16, pq_m=16, reduce=64).resolved(4200, 768)
    index = faiss_index.new_index(settings, 4200, 768)
    index.train(data.batch(0))
    quantizer = faiss_index.new_refine(settings, 768)
    quantizer.train(data.batch(0))
    writer = faiss_index.RefineWriter(quantizer, 4200, tmp_path / "refine.faiss")
    rows, spent = scale_dense.exact_and_index(data, queries, index, writer)
    writer.close()
    corpus = np.concatenate([data.batch(b) for b in data.batches()])
    exact = np.argsort(-(queries @ corpus.T), axis=1, kind="stable")[:, :10]
    assert np.array_equal(rows, exact)
    assert index.ntotal == 4200 and set(spent) >= {"generate_s", "exact_s", "add_s", "pass_s"}
    # The refined index finds that top 10 (recall is what the benchmark reports).
    refined = faiss_index.with_refine(index, tmp_path / "refine.faiss", k_factor=20)
    faiss_index.set_search_params(refined, 16, None)
    _, found = refined.search(queries, 10)
    assert scale_dense.recall(found, exact, 10) >= 0.95
