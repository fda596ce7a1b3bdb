"""The papers' corpora in their downloaded forms: DPR's psgs_w100.tsv (ALCE, DeepNote for ASQA and
StrategyQA), HotpotQA's Wikipedia dump (IRCoT, DeepNote, Adaptive-Note), and IRCoT's
raw_data folders of 2WikiMultihopQA and MuSiQue pooled by ``noterag corpus-from``. Small files
of each format are written by the tests; the real downloads are described in docs/corpora.md.
"""

from __future__ import annotations

import bz2
import gzip
import io
import json
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from noterag.base.errors import CorpusError
from noterag.cli import app
from noterag.datasets import pool_corpus
from noterag.retrievers import load_retriever
from noterag.retrievers.bm25 import build_bm25_index
from noterag.retrievers.corpus import CorpusStats, check_corpus, iter_corpus
from noterag.retrievers.corpus_formats import corpus_bytes, corpus_format

ROOT = Path(__file__).resolve().parents[1]
# ../shared/data beside the checkout (or beside the folder of worktrees holding it).
SHARED = next(
    (
        root / "shared" / "data" / "original_formats"
        for root in (ROOT.parent, ROOT.parent.parent)
        if (root / "shared" / "data" / "original_formats").is_dir()
    ),
    ROOT.parent / "shared" / "data" / "original_formats",
)

# DPR's layout, quoting included: a field with a quote is quoted, its quotes doubled.
DPR_TSV = (
    "id\ttext\ttitle\n"
    '1\t"Aaron Aaron ( or ; ""Ahärôn"") is a prophet, high priest."\tAaron\n'
    "2\tSo helpful is Aaron that he speaks for Moses.\tAaron\n"
    "3\tThe Nile is a major north-flowing river in Africa.\tNile\n"
)
DPR_PASSAGES = [
    {
        "id": "1",
        "title": "Aaron",
        "text": 'Aaron Aaron ( or ; "Ahärôn") is a prophet, high priest.',
    },
    {"id": "2", "title": "Aaron", "text": "So helpful is Aaron that he speaks for Moses."},
    {"id": "3", "title": "Nile", "text": "The Nile is a major north-flowing river in Africa."},
]
# HotpotQA's dump: bz2 files of JSON lines, sentences carrying their own spaces.
WIKI = {
    "AA/wiki_00.bz2": [
        {
            "id": "12",
            "url": "https://en.wikipedia.org/wiki?curid=12",
            "title": "Anarchism",
            "text": ["Anarchism is a political philosophy.", " It rejects hierarchy."],
        },
        {"id": "25", "url": "u", "title": "AT&amp;T", "text": ["AT&T is a company."]},
    ],
    "AB/wiki_00.bz2": [{"id": "39", "url": "u", "title": "Albedo", "text": ["Albedo is light."]}],
}
WIKI_PASSAGES = [
    {
        "id": "12",
        "title": "Anarchism",
        "text": "Anarchism is a political philosophy. It rejects hierarchy.",
    },
    {"id": "25", "title": "AT&amp;T", "text": "AT&T is a company."},
    {"id": "39", "title": "Albedo", "text": "Albedo is light."},
]


def wiki_lines(records: list[dict[str, object]]) -> bytes:
    return bz2.compress("".join(json.dumps(r) + "\n" for r in records).encode())


@pytest.fixture
def wiki_dir(tmp_path: Path) -> Path:
    root = tmp_path / "wikpedia-paragraphs"
    for name, records in reversed(WIKI.items()):  # written out of order: read sorted
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(wiki_lines(records))
    return root


@pytest.fixture
def wiki_tar(tmp_path: Path) -> Path:
    path = tmp_path / "enwiki-20171001-pages-meta-current-withlinks-abstracts.tar.bz2"
    with tarfile.open(path, "w:bz2") as archive:
        for name, records in WIKI.items():
            data = wiki_lines(records)
            info = tarfile.TarInfo(f"enwiki-20171001-pages-meta-current-withlinks-abstracts/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


# ------------------------------------------------------------------ DPR's TSV


@pytest.mark.parametrize("compressed", [False, True])
def test_dpr_tsv_is_read_with_its_quoting(tmp_path: Path, compressed: bool) -> None:
    path = tmp_path / ("psgs_w100.tsv.gz" if compressed else "psgs_w100.tsv")
    data = DPR_TSV.encode()
    path.write_bytes(gzip.compress(data) if compressed else data)
    stats = CorpusStats()
    assert corpus_format(path) == "dpr-tsv"
    assert list(iter_corpus(path, stats=stats)) == DPR_PASSAGES
    assert stats.passages == 3
    assert stats.bytes_read == path.stat().st_size  # the progress bar's end


def test_dpr_tsv_bad_header_and_rows(tmp_path: Path) -> None:
    path = tmp_path / "psgs.tsv"
    path.write_text("id\ttitle\ttext\n1\tA\tB\n")
    with pytest.raises(CorpusError) as caught:
        list(iter_corpus(path))
    assert str(caught.value) == (
        "psgs.tsv line 1: expected DPR's header id<TAB>text<TAB>title, got 'id<TAB>title<TAB>text'"
    )

    path.write_text("id\ttext\ttitle\n1\tone\tA\n2\ttwo fields only\n1\tagain\tB\n4\tfour\tD\n")
    with pytest.raises(CorpusError) as caught:
        list(iter_corpus(path))
    assert str(caught.value) == (
        "psgs.tsv line 3: expected 3 tab-separated fields (id, text, title), got 2 "
        "(--skip-bad-lines skips such records)"
    )
    stats = CorpusStats()
    assert [p["id"] for p in iter_corpus(path, skip_bad_lines=True, stats=stats)] == ["1", "4"]
    assert dict(stats.skipped_by_kind) == {"bad row": 1, "duplicate id": 1}
    assert stats.skipped_examples[1] == (4, "line 4: duplicate id '1'")


def test_dpr_tsv_builds_an_index_from_noterag_index(tmp_path: Path) -> None:
    path = tmp_path / "psgs_w100.tsv.gz"
    path.write_bytes(gzip.compress(DPR_TSV.encode()))
    result = CliRunner().invoke(app, ["index", str(path), "--out", str(tmp_path / "idx")])
    assert result.exit_code == 0, result.output
    assert "indexed 3 passages" in result.output
    docs = load_retriever(str(tmp_path / "idx"), k=1).invoke("river in Africa")
    assert [(d.id, d.metadata["title"]) for d in docs] == [("3", "Nile")]


# ------------------------------------------------------------------ HotpotQA's Wikipedia dump


def test_hotpotqa_wiki_folder(wiki_dir: Path) -> None:
    stats = CorpusStats()
    assert corpus_format(wiki_dir) == "hotpotqa-wiki"
    assert list(iter_corpus(wiki_dir, stats=stats)) == WIKI_PASSAGES
    assert stats.bytes_read == corpus_bytes(wiki_dir) > 0


def test_hotpotqa_wiki_archive_is_streamed_as_downloaded(wiki_tar: Path) -> None:
    stats = CorpusStats()
    assert list(iter_corpus(wiki_tar, stats=stats)) == WIKI_PASSAGES
    assert 0 < stats.bytes_read <= wiki_tar.stat().st_size


def test_hotpotqa_wiki_deepnote_index_unescapes_titles(wiki_tar: Path, tmp_path: Path) -> None:
    build_bm25_index(wiki_tar, tmp_path / "idx", progress=False, style="deepnote")
    docs = load_retriever(str(tmp_path / "idx"), k=1).invoke("AT&T")
    assert [(d.id, d.metadata["title"]) for d in docs] == [("25", "AT&amp;T")]


def test_bad_wiki_inputs_are_one_line(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CorpusError, match=r"^corpus path is a directory, not a JSONL file: "):
        check_corpus(empty)
    fake = tmp_path / "wiki.tar.bz2"
    fake.write_text("not an archive")
    with pytest.raises(CorpusError) as caught:
        check_corpus(fake)
    assert str(caught.value) == "wiki.tar.bz2 is not a .tar.bz2 archive (no bzip2 header)"
    folder = tmp_path / "dump" / "AA"
    folder.mkdir(parents=True)
    (folder / "wiki_00.bz2").write_bytes(bz2.compress(b'{"id": "1", "title": "T"}\n'))
    with pytest.raises(CorpusError) as caught:
        list(iter_corpus(tmp_path / "dump"))
    assert str(caught.value) == (
        'dump AA/wiki_00.bz2 line 1: "text" is not a list of sentences '
        "(--skip-bad-lines skips such records)"
    )


# ------------------------------------------------------------------ IRCoT's raw_data folders


def test_corpus_from_pools_ircots_musique_folder(tmp_path: Path) -> None:
    raw = tmp_path / "raw_data" / "musique"
    raw.mkdir(parents=True)
    para = {"idx": 0, "title": "Bilbo", "paragraph_text": "A hobbit.", "is_supporting": True}
    other = {"idx": 1, "title": "Bilbo", "paragraph_text": "Another Bilbo.", "is_supporting": False}
    for name, paragraphs in [
        ("musique_ans_v1.0_dev.jsonl", [para, other]),
        ("musique_full_v1.0_train.jsonl", [other, {**para, "title": "Frodo"}]),
    ]:
        record = {"id": name, "question": "Q?", "answer": "A", "paragraphs": paragraphs}
        (raw / name).write_text(json.dumps(record) + "\n")
    (raw / "dev_test_singlehop_questions_v1.0.json").write_text("[]")  # not pooled by IRCoT
    out = tmp_path / "musique.jsonl"

    result = CliRunner().invoke(app, ["corpus-from", str(raw), "--out", str(out)])

    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["title"], r["text"]) for r in rows] == [
        ("Bilbo", "A hobbit."),
        ("Bilbo", "Another Bilbo."),
        ("Frodo", "A hobbit."),
    ]
    assert "wrote 3 passages" in result.output and "1 duplicate paragraph dropped" in result.output

    seen: list[tuple[str, int, int]] = []
    pool_corpus(
        raw,
        tmp_path / "again.jsonl",
        progress=lambda name, stats: seen.append((name, stats.questions, stats.passages)),
    )
    # Told as each file starts (IRCoT's order: ans before full), with the counts so far.
    assert seen == [("musique_ans_v1.0_dev.jsonl", 0, 0), ("musique_full_v1.0_train.jsonl", 1, 2)]


@pytest.mark.skipif(
    not (SHARED / "twowiki_dev200.2wiki.jsonl").is_file(),
    reason=f"the shared data ({SHARED}) is absent; see ../shared/data/README.md",
)
def test_corpus_from_pools_several_real_files(tmp_path: Path) -> None:
    two_wiki, musique = (
        SHARED / "twowiki_dev200.2wiki.jsonl",
        SHARED / "musique_dev200.musique.jsonl",
    )
    out = tmp_path / "c.jsonl"
    result = CliRunner().invoke(
        app, ["corpus-from", str(two_wiki), str(musique), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    alone = tmp_path / "a.jsonl"
    assert (
        CliRunner().invoke(app, ["corpus-from", str(two_wiki), "--out", str(alone)]).exit_code == 0
    )
    pooled = out.read_text().splitlines()
    first = alone.read_text().splitlines()
    assert pooled[: len(first)] == first  # the first file's passages, then the second's new ones
    assert len(pooled) > len(first)
