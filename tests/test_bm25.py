"""The embedded BM25 index: building, loading, querying, updating, and its failure messages."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever

from noterag.base.errors import ConfigError, CorpusError, IndexNotFoundError
from noterag.retrievers import Bm25Index, BM25Retriever, build_bm25_index, load_retriever
from noterag.retrievers import base as retriever_base
from noterag.retrievers.base import QUICK_SEARCH_S

PASSAGES = [
    {"id": "p1", "title": "Volcano", "text": "A volcano erupts lava and ash from a magma chamber."},
    {
        "id": "p2",
        "title": "Glacier",
        "text": "Glaciers are rivers of ice that slowly carve valleys.",
    },
    {"id": "p3", "title": "Tide", "text": "Ocean tides rise and fall with the pull of the moon."},
    {
        "id": "p4",
        "title": "Desert",
        "text": "Deserts receive little rain; dunes shift in the wind.",
    },
    {"id": "p5", "title": "Zeppelin", "text": "An airship filled with hydrogen, flown in 1900."},
    {
        "id": "p6",
        "title": "Compiler",
        "text": "A compiler translates C++ source into machine code.",
    },
    {
        "id": "p7",
        "title": "Marathon",
        "text": "A runner runs 42 km; the runners ran through the city.",
    },
    {
        "id": "p8",
        "title": "Lava lamp",
        "text": "A decorative lamp with wax blobs, not real lava foo.",
    },
]


def write_corpus(path: Path, passages: list[dict], extra_lines: list[str] = ()) -> Path:
    lines = [json.dumps(p) for p in passages] + list(extra_lines)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def index_dir(tmp_path: Path) -> Path:
    out = tmp_path / "index"
    build_bm25_index(write_corpus(tmp_path / "corpus.jsonl", PASSAGES), out, progress=False)
    return out


def ids(docs: list[Document]) -> list[str]:
    return [d.id for d in docs]


def test_index_round_trips_through_disk(tmp_path: Path) -> None:
    out = tmp_path / "idx"
    stats = build_bm25_index(write_corpus(tmp_path / "c.jsonl", PASSAGES), out, progress=False)
    assert stats.passages == len(PASSAGES)
    assert stats.skipped_lines == 0

    manifest = json.loads((out / "noterag-index.json").read_text())
    assert manifest["kind"] == "bm25" and manifest["count"] == len(PASSAGES)
    assert manifest["analyzer"] == "english" and manifest["format_version"] == 1

    docs = BM25Retriever(index_dir=str(out)).invoke("what carves valleys of ice?")
    top = docs[0]
    assert top.id == "p2"
    assert top.page_content == PASSAGES[1]["text"]
    assert top.metadata["id"] == "p2" and top.metadata["title"] == "Glacier"
    assert isinstance(top.metadata["score"], float) and top.metadata["score"] > 0
    scores = [d.metadata["score"] for d in docs]
    assert scores == sorted(scores, reverse=True)


def test_k_at_construction_and_as_invoke_kwarg(index_dir: Path) -> None:
    # "lava" matches two passages, "the" is a stop word, "a" too: an OR over several terms.
    query = "lava moon ice rain airship"
    assert len(BM25Retriever(index_dir=str(index_dir), k=2).invoke(query)) == 2
    retriever = BM25Retriever(index_dir=index_dir, k=5)  # a Path is accepted too
    assert len(retriever.invoke(query)) == 5
    assert len(retriever.invoke(query, k=1)) == 1
    assert len(retriever.invoke(query, k=3)) == 3
    assert ids(retriever.invoke(query, k=3)) == ids(retriever.invoke(query))[:3]


def test_k_must_be_positive_at_construction(index_dir: Path) -> None:
    with pytest.raises(ValueError):
        BM25Retriever(index_dir=str(index_dir), k=0)


def test_title_words_are_searched(index_dir: Path) -> None:
    # "zeppelin" appears only in p5's title.
    assert ids(BM25Retriever(index_dir=str(index_dir), k=1).invoke("Zeppelin")) == ["p5"]


def test_title_and_text_matches_add_up(index_dir: Path) -> None:
    # Both p1 and p8 mention lava in the text; only p8 also has it in the title.
    docs = BM25Retriever(index_dir=str(index_dir), k=2).invoke("lava lamp")
    assert ids(docs) == ["p8", "p1"]


def test_query_is_analyzed_like_the_index(index_dir: Path) -> None:
    # Stemming on both sides: "RUNNING" finds "runs"/"runners"; case is folded.
    assert ids(BM25Retriever(index_dir=str(index_dir), k=1).invoke("RUNNING")) == ["p7"]


@pytest.mark.parametrize(
    "query",
    [
        'AND OR C++ foo~2 "quote" title:x ( )',
        "volcano AND",
        "NOT (lava) OR",
        'glacier:"unclosed',
        "c++ compiler^2 [1 TO 5] {x} \\ /regex/ *",
    ],
)
def test_hostile_query_text_returns_results(index_dir: Path, query: str) -> None:
    docs = BM25Retriever(index_dir=str(index_dir)).invoke(query)
    assert docs, f"no results for {query!r}"


def test_hostile_query_still_ranks_by_its_words(index_dir: Path) -> None:
    assert ids(BM25Retriever(index_dir=str(index_dir), k=1).invoke("C++ AND compiler~2")) == ["p6"]


@pytest.mark.parametrize("query", ["", "   ", "?!... --- ()", "the and of a"])
def test_query_without_usable_tokens_returns_nothing(index_dir: Path, query: str) -> None:
    assert BM25Retriever(index_dir=str(index_dir)).invoke(query) == []


async def test_ainvoke_matches_invoke(index_dir: Path) -> None:
    retriever = BM25Retriever(index_dir=str(index_dir), k=3)
    docs = await retriever.ainvoke("ocean tides and the moon", k=2)
    assert ids(docs) == ids(retriever.invoke("ocean tides and the moon", k=2))
    assert docs[0].id == "p3"


class _Clock:
    """perf_counter for noterag.retrievers.base: each search takes ``step`` seconds."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def perf_counter(self) -> float:
        self.now += self.step / 2  # read twice per search
        return self.now


def _threads_of(index_dir: Path) -> tuple[BM25Retriever, list[int]]:
    """A BM25 retriever whose searches note the thread they run in."""
    retriever = BM25Retriever(index_dir=str(index_dir), k=2)
    seen: list[int] = []
    search = retriever.search

    def noting(query: str, k: int | None = None) -> list[Document]:
        seen.append(threading.get_ident())
        return search(query, k)

    object.__setattr__(retriever, "search", noting)
    return retriever, seen


@pytest.mark.parametrize(
    ("search_s", "on_loop"),
    [(QUICK_SEARCH_S / 4, [False, True, True, True]), (QUICK_SEARCH_S * 4, [False] * 4)],
)
async def test_quick_searches_run_on_the_event_loop_slow_ones_in_a_thread(
    index_dir: Path, monkeypatch: pytest.MonkeyPatch, search_s: float, on_loop: list[bool]
) -> None:
    monkeypatch.setattr(retriever_base, "time", _Clock(search_s))
    retriever, seen = _threads_of(index_dir)
    for _ in on_loop:
        docs = await retriever.ainvoke("ocean tides and the moon")
        assert ids(docs) == ids(retriever.invoke("ocean tides and the moon"))
        seen.pop()  # the sync invoke's
    loop_thread = threading.get_ident()
    assert [thread == loop_thread for thread in seen] == on_loop


async def test_a_search_that_turns_slow_goes_back_to_a_thread(
    index_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = _Clock(QUICK_SEARCH_S / 10)
    monkeypatch.setattr(retriever_base, "time", clock)
    retriever, seen = _threads_of(index_dir)
    await retriever.ainvoke("volcano")  # unknown pace: a thread
    await retriever.ainvoke("volcano")  # quick: the loop
    clock.step = QUICK_SEARCH_S * 20  # this one, on the loop, takes long
    await retriever.ainvoke("volcano")
    await retriever.ainvoke("volcano")  # the average is no longer quick: a thread
    loop_thread = threading.get_ident()
    assert [thread == loop_thread for thread in seen] == [False, True, True, False]


def test_concurrent_first_use_is_safe(index_dir: Path) -> None:
    retriever = BM25Retriever(index_dir=str(index_dir), k=3)
    queries = ["volcano", "glacier ice", "desert rain", "airship hydrogen"] * 8
    results: dict[int, list[str]] = {}

    def run(i: int) -> None:
        results[i] = ids(retriever.invoke(queries[i]))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(queries))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    fresh = BM25Retriever(index_dir=str(index_dir), k=3)
    assert [results[i] for i in range(len(queries))] == [ids(fresh.invoke(q)) for q in queries]


def test_search_many_keeps_query_order(index_dir: Path) -> None:
    retriever = BM25Retriever(index_dir=str(index_dir))
    batches = retriever.search_many(["volcano", "", "zeppelin"], k=1)
    assert [ids(b) for b in batches] == [["p1"], [], ["p5"]]


def test_missing_index_dir_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-index"
    with pytest.raises(IndexNotFoundError) as info:
        BM25Retriever(index_dir=str(missing)).invoke("anything")
    assert str(missing) in str(info.value)
    with pytest.raises(IndexNotFoundError, match="no-such-index"):
        load_retriever(f"bm25:{missing}")


def test_directory_without_manifest_is_explained(tmp_path: Path) -> None:
    (tmp_path / "random").mkdir()
    (tmp_path / "random" / "notes.txt").write_text("hello")
    with pytest.raises(IndexNotFoundError) as info:
        load_retriever(f"bm25:{tmp_path / 'random'}")
    message = str(info.value)
    assert "not a noterag BM25 index" in message
    assert "noterag-index.json" in message
    assert "noterag index" in message  # says how to build one


def test_manifest_of_another_kind_is_rejected(index_dir: Path) -> None:
    manifest_path = index_dir / "noterag-index.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["kind"] = "dense"
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(IndexNotFoundError, match="'dense' index, not a BM25 index"):
        Bm25Index(index_dir)


def test_load_retriever_specs(index_dir: Path) -> None:
    by_scheme = load_retriever(f"bm25:{index_dir}", k=2)
    assert isinstance(by_scheme, BM25Retriever) and by_scheme.k == 2
    assert len(by_scheme.invoke("lava moon ice")) == 2

    bare = load_retriever(str(index_dir))
    assert isinstance(bare, BM25Retriever) and bare.k == 5
    assert isinstance(load_retriever(index_dir), BM25Retriever)  # a Path works as well

    mine = BM25Retriever(index_dir=str(index_dir), k=4)
    assert load_retriever(mine, k=1) is mine


def test_unknown_scheme_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown retriever scheme 'solr:'.*known: bm25:"):
        load_retriever("solr:http://localhost:8983")


def test_bare_path_without_index_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(IndexNotFoundError, match="no index at"):
        load_retriever(str(tmp_path / "nothing-here"))


def test_contents_format_corpus_is_indexed_with_its_titles(tmp_path: Path) -> None:
    corpus = tmp_path / "flashrag.jsonl"
    corpus.write_text(
        json.dumps({"id": 0, "contents": '"Kiwi"\nA flightless bird of New Zealand.'})
        + "\n"
        + json.dumps({"id": 1, "contents": '"Emu"\nA large bird of Australia.'})
        + "\n"
    )
    build_bm25_index(corpus, tmp_path / "idx", progress=False)
    [doc] = BM25Retriever(index_dir=str(tmp_path / "idx"), k=1).invoke("kiwi")
    assert doc.id == "0"
    assert doc.metadata["title"] == "Kiwi"
    assert doc.page_content == "A flightless bird of New Zealand."


def test_bad_corpus_line_fails_the_build_with_its_number(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "corpus.jsonl", PASSAGES[:2], ['{"id": "z", "text": '])
    with pytest.raises(CorpusError, match=r"corpus.jsonl line 3: not valid JSON"):
        build_bm25_index(corpus, tmp_path / "idx", progress=False)
    assert not (tmp_path / "idx").exists()


def test_skip_bad_lines_build_counts_them(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "c.jsonl", PASSAGES[:3], ["oops", '{"id": "p1", "text": "d"}'])
    stats = build_bm25_index(corpus, tmp_path / "idx", progress=False, skip_bad_lines=True)
    assert (stats.passages, stats.skipped_lines) == (3, 2)
    manifest = json.loads((tmp_path / "idx" / "noterag-index.json").read_text())
    assert (manifest["count"], manifest["skipped_lines"]) == (3, 2)
    assert Bm25Index(tmp_path / "idx").num_passages == 3


def test_failed_rebuild_leaves_the_previous_index_intact(index_dir: Path, tmp_path: Path) -> None:
    before = ids(BM25Retriever(index_dir=str(index_dir)).invoke("volcano lava"))
    new_passages = [{"id": "n1", "title": "Volcano", "text": "a replacement passage"}]
    broken = write_corpus(tmp_path / "broken.jsonl", new_passages, ["{not json"])
    with pytest.raises(CorpusError, match="line 2"):
        build_bm25_index(broken, index_dir, progress=False)

    assert ids(BM25Retriever(index_dir=str(index_dir)).invoke("volcano lava")) == before
    leftovers = [p.name for p in index_dir.parent.iterdir() if p.name.startswith(".")]
    assert leftovers == []


def test_rebuild_replaces_the_index(index_dir: Path, tmp_path: Path) -> None:
    new = [{"id": "n1", "title": "Comet", "text": "An icy body with a glowing tail."}]
    build_bm25_index(write_corpus(tmp_path / "new.jsonl", new), index_dir, progress=False)
    retriever = BM25Retriever(index_dir=str(index_dir))
    assert ids(retriever.invoke("comet tail")) == ["n1"]
    assert retriever.invoke("volcano") == []


def test_build_refuses_to_overwrite_a_foreign_directory(tmp_path: Path) -> None:
    precious = tmp_path / "thesis"
    precious.mkdir()
    (precious / "chapter1.tex").write_text("irreplaceable")
    corpus = write_corpus(tmp_path / "c.jsonl", PASSAGES)
    with pytest.raises(ConfigError, match="not a noterag index"):
        build_bm25_index(corpus, precious, progress=False)
    assert (precious / "chapter1.tex").read_text() == "irreplaceable"


def test_missing_corpus_leaves_nothing_behind(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match="not found"):
        build_bm25_index(tmp_path / "absent.jsonl", tmp_path / "idx", progress=False)
    assert list(tmp_path.iterdir()) == []


def test_upsert_and_delete_without_rebuild(index_dir: Path) -> None:
    index = Bm25Index(index_dir)
    index.upsert([{"id": 9, "title": "Aurora", "text": "Northern lights glow green."}])
    index.upsert([{"id": "p1", "title": "Volcano", "text": "Rewritten: a mountain of basalt."}])
    assert index.num_passages == len(PASSAGES) + 1

    # A retriever opened afterwards sees the changes, persisted on disk.
    retriever = BM25Retriever(index_dir=str(index_dir), k=1)
    assert ids(retriever.invoke("aurora lights")) == ["9"]
    assert retriever.invoke("basalt")[0].page_content == "Rewritten: a mountain of basalt."
    assert "p1" not in ids(retriever.invoke("magma chamber erupts", k=10))

    index.delete(["9", "unknown-id"])
    assert BM25Retriever(index_dir=str(index_dir)).invoke("aurora") == []
    manifest = json.loads((index_dir / "noterag-index.json").read_text())
    assert manifest["count"] == len(PASSAGES)


def test_retriever_is_a_langchain_retriever(index_dir: Path) -> None:
    retriever = BM25Retriever(index_dir=str(index_dir))
    assert isinstance(retriever, BaseRetriever)
    # Works in LCEL composition, where kwargs cannot be passed.
    chain = retriever | (lambda docs: [d.metadata["title"] for d in docs])
    assert chain.invoke("glacier")[0] == "Glacier"


def test_huge_k_returns_every_match(index_dir: Path) -> None:
    docs = BM25Retriever(index_dir=str(index_dir)).invoke("lava", k=10**9)
    assert sorted(ids(docs)) == ["p1", "p8"]


def test_standard_analyzer_is_recorded_and_used_for_queries(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "c.jsonl", PASSAGES)
    build_bm25_index(corpus, tmp_path / "std", progress=False, analyzer="standard")
    assert json.loads((tmp_path / "std" / "noterag-index.json").read_text())["analyzer"] == (
        "standard"
    )
    retriever = BM25Retriever(index_dir=str(tmp_path / "std"), k=10)
    # No stop words and no stemming: "the" now matches, "running" no longer finds "runs".
    assert "p3" in ids(retriever.invoke("the"))
    assert retriever.invoke("running") == []


def test_unknown_analyzer_is_a_config_error(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "c.jsonl", PASSAGES)
    with pytest.raises(ConfigError, match="unknown BM25 analyzer 'klingon'"):
        build_bm25_index(corpus, tmp_path / "idx", progress=False, analyzer="klingon")
    assert list(tmp_path.iterdir()) == [corpus]
