"""Dataset loaders and corpus pooling (noterag.datasets).

The real files live beside the project in ``../shared/data`` (see its README); tests that need
them skip, naming the missing path, in a clone that does not have it.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from noterag.base.errors import ConfigError, NoteragError
from noterag.datasets import PoolStats, detect_format, passage_id
from noterag.datasets.formats import generated_id
from noterag.eval import DatasetError, Example, load_dataset, pool_corpus

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def data_file(relative: str) -> Path:
    path = DATA / relative
    if not path.exists():
        pytest.skip(f"real data not available: {path} is absent")
    return path


def write_jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


# --------------------------------------------------------------------------- real files

# (file, format, questions, first id (None: generated from the question), first golds, task,
# dataset)
REAL_FILES = [
    ("hotpotqa_dev500/questions.jsonl", "noterag", 500, "5a8c7595554299585d9e36b6",
     ["Chief of Protocol"], "multihop", "hotpotqa"),
    ("twowiki_dev164/questions.jsonl", "noterag", 164, "b088d3ca08e211ebbda4ac1f6bf848b6",
     ["Free Guy"], "multihop", "2wikimultihopqa"),
    ("musique_dev200/questions.jsonl", "noterag", 200, "2hop__574419_270105",
     ["Stanley"], "multihop", "musique"),
    ("ircot_test500/hotpotqa.test.json", "adaptive-note", 500, None,
     ["American"], "multihop", "hotpotqa"),
    ("ircot_test500/2wikimultihopqa.test.json", "adaptive-note", 500, None,
     ["Crown Prince Hyomyeong"], "multihop", "2wikimultihopqa"),
    ("ircot_test500/musique.test.json", "adaptive-note", 500, None,
     ["International Federation of Association Football"], "multihop", "musique"),
    ("original_formats/hotpotqa_dev200.hotpot.jsonl", "hotpotqa", 200,
     "5a7f6fd75542992e7d278cfa", ["Rush"], "multihop", "hotpotqa"),
    ("original_formats/hotpotqa_dev500.ircot.jsonl", "ircot", 500, "5a8c7595554299585d9e36b6",
     ["Chief of Protocol"], "multihop", "hotpotqa"),
    ("original_formats/twowiki_dev200.2wiki.jsonl", "2wikimultihopqa", 200,
     "b088d3ca08e211ebbda4ac1f6bf848b6", ["Free Guy"], "multihop", "2wikimultihopqa"),
    ("original_formats/musique_dev200.musique.jsonl", "musique", 200, "2hop__574419_270105",
     ["Stanley"], "multihop", "musique"),
    ("original_formats/strategyqa_dev229.migres.jsonl", "strategyqa", 229,
     "e0044a7b4d146d611e73", ["no"], "strategyqa", "strategyqa"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("relative", "fmt", "count", "first_id", "first_golds", "task", "dataset"),
    REAL_FILES,
    ids=[row[0].split("/")[-1] for row in REAL_FILES],
)
def test_real_file_loads(
    relative: str,
    fmt: str,
    count: int,
    first_id: str,
    first_golds: list[str],
    task: str,
    dataset: str,
) -> None:
    path = data_file(relative)
    first_line = path.read_text(encoding="utf-8").lstrip("[").split("\n", 1)[0]
    if not relative.endswith(".json"):  # the JSON arrays are one line; their records differ
        assert detect_format(json.loads(first_line)) == fmt

    examples = load_dataset(path)

    assert len(examples) == count
    assert len({e.id for e in examples}) == count
    first = examples[0]
    assert (first.id, first.golds, first.task, first.dataset) == (
        first_id or generated_id(dataset, first.question),
        first_golds,
        task,
        dataset,
    )
    assert all(e.question and e.question == e.question.strip() for e in examples)
    assert {e.task for e in examples} == {task}


def test_first_hotpotqa_record_in_full() -> None:
    example = load_dataset(data_file("original_formats/hotpotqa_dev200.hotpot.jsonl"))[0]
    assert example == Example(
        id="5a7f6fd75542992e7d278cfa",
        question=(
            'Which Canadian rock band released a song called "Counterparts" and had a drummer '
            "who was inducted into the Modern Drummer Hall of Fame?"
        ),
        golds=["Rush"],
        task="multihop",
        dataset="hotpotqa",
        supporting_titles=("Nobody's Hero", "Neil Peart"),
    )
    assert example.as_dict()["supporting_titles"] == ["Nobody's Hero", "Neil Peart"]
    json.dumps(example.as_dict())  # JSON-ready


def test_a_folder_of_ours_loads_its_questions_file() -> None:
    assert len(load_dataset(data_file("hotpotqa_dev500"))) == 500


@pytest.mark.parametrize(
    ("relative", "yes_no"),
    [("hotpotqa_dev500/questions.jsonl", 80), ("twowiki_dev164/questions.jsonl", 14)],
)
def test_yes_no_questions_stay_multihop(relative: str, yes_no: int) -> None:
    examples = load_dataset(data_file(relative))
    binary = [e for e in examples if e.golds in (["yes"], ["no"])]
    assert len(binary) == yes_no
    assert {e.task for e in binary} == {"multihop"}


def test_strategyqa_booleans_become_yes_no() -> None:
    examples = load_dataset(data_file("original_formats/strategyqa_dev229.migres.jsonl"))
    assert Counter(e.golds[0] for e in examples) == {"no": 122, "yes": 107}


def test_ircot_file_matches_our_questions_file() -> None:
    # The shared hotpotqa_dev500 was made from this IRCoT file: same ids, questions, golds.
    ircot = load_dataset(data_file("original_formats/hotpotqa_dev500.ircot.jsonl"))
    ours = load_dataset(data_file("hotpotqa_dev500/questions.jsonl"))
    assert [(e.id, e.question, e.golds, e.supporting_titles) for e in ircot] == [
        (e.id, e.question, e.golds, e.supporting_titles) for e in ours
    ]


def test_musique_aliases_follow_the_canonical_answer() -> None:
    original = load_dataset(data_file("original_formats/musique_dev200.musique.jsonl"))
    by_id = {e.id: e for e in original}
    assert by_id["2hop__335418_279684"].golds == [
        "Pittsburgh Pirates",
        "Orioles",
        "Pirates",
        "Baltimore Orioles",
        "New York Mets",
        "Mets",
    ]
    assert sum(len(e.golds) > 1 for e in original) == 61
    # Same golds as the shared questions file, which was built from the same 200 records.
    ours = load_dataset(data_file("musique_dev200/questions.jsonl"))
    assert [(e.id, e.golds) for e in original] == [(e.id, e.golds) for e in ours]


def test_limit_keeps_the_first_questions() -> None:
    path = data_file("hotpotqa_dev500/questions.jsonl")
    assert load_dataset(path, limit=3) == load_dataset(path)[:3]
    assert load_dataset(path, limit=0) == []
    with pytest.raises(ConfigError, match="limit"):
        load_dataset(path, limit=-1)


def test_format_override_is_obeyed() -> None:
    path = data_file("original_formats/hotpotqa_dev200.hotpot.jsonl")
    with pytest.raises(DatasetError, match=r'hotpot\.jsonl line 1: missing "golden_answers"'):
        load_dataset(path, format="flashrag")
    with pytest.raises(ConfigError, match="unknown dataset format 'squad'"):
        load_dataset(path, format="squad")


# --------------------------------------------------------------------------- small written files


def test_asqa_json_array_in_alce_shape(tmp_path: Path) -> None:
    records = [
        {
            "question": "Who designed the Velmora bridge?",
            "answer": "The original bridge was designed by Tomas Ilk; its replacement by Ada Reyes.",
            "qa_pairs": [
                {"question": "Who designed the original bridge?", "short_answers": ["Tomas Ilk"],
                 "wikipage": "Velmora bridge", "context": "No context provided"},
                {"question": "Who designed the rebuilt bridge?",
                 "short_answers": ["Ada Reyes", "Adelaide Reyes"], "wikipage": None,
                 "context": "No context provided"},
            ],
            "annotations": [{"knowledge": [], "long_answer": "..."}],
            "sample_id": "-4468742327000000001",
            "docs": [{"id": "9", "title": "Velmora bridge", "text": "Built in 1931.", "score": 1.2}],
        }
    ]  # fmt: skip
    path = tmp_path / "asqa_eval_gtr_top100.json"
    path.write_text(json.dumps(records, indent=2), encoding="utf-8")

    (example,) = load_dataset(path)

    assert example.task == "asqa"
    assert example.id == "-4468742327000000001"
    assert example.golds == [["Tomas Ilk"], ["Ada Reyes", "Adelaide Reyes"]]
    assert example.supporting_titles == ("Velmora bridge",)
    # The same records as JSONL load the same.
    assert load_dataset(write_jsonl(tmp_path / "asqa.jsonl", records)) == [example]


@pytest.mark.parametrize(
    ("record", "fmt", "golds", "task"),
    [
        ({"id": "test_0", "question": "Who wrote it?", "golden_answers": ["Ilk", "T. Ilk"]},
         "flashrag", ["Ilk", "T. Ilk"], "multihop"),
        ({"question": "Is it old?", "golden_answers": [True]}, "flashrag", ["yes"], "strategyqa"),
        ({"qid": "q7", "question": "Is it old?", "answer": False, "facts": []},
         "strategyqa", ["no"], "strategyqa"),
        ({"question": "Who wrote it?", "answer": ["Tomas Ilk"]},
         "adaptive-note", ["Tomas Ilk"], "multihop"),
        ({"id": "a", "question": "Is it old?", "answers": ["yes"], "task": "strategyqa"},
         "noterag", ["yes"], "strategyqa"),
        ({"id": "a", "question": "Who?", "answers": [["Ilk"], ["Reyes"]], "task": "asqa"},
         "noterag", [["Ilk"], ["Reyes"]], "asqa"),
        ({"question_id": "x1", "question_text": "When?", "contexts": [],
          "answers_objects": [{"number": "", "spans": [],
                               "date": {"day": "7", "month": "March", "year": "1606"}}]},
         "ircot", ["7 March 1606"], "multihop"),
    ],
)  # fmt: skip
def test_small_files_in_each_format(
    tmp_path: Path, record: dict[str, Any], fmt: str, golds: list, task: str
) -> None:
    assert detect_format(record) == fmt
    (example,) = load_dataset(write_jsonl(tmp_path / "set.jsonl", [record]))
    assert (example.golds, example.task) == (golds, task)


def test_generated_ids_and_dataset_name_come_from_the_path(tmp_path: Path) -> None:
    folder = tmp_path / "musique"
    folder.mkdir()
    path = folder / "dev.jsonl"
    path.write_text(
        json.dumps({"question": "Q1?", "golden_answers": ["a"]})
        + "\n\n"  # a blank line does not shift the numbering of questions
        + json.dumps({"question": "Q2?", "golden_answers": ["b"]})
        + "\n",
        encoding="utf-8",
    )
    assert [(e.id, e.dataset) for e in load_dataset(path)] == [
        (generated_id("musique", "Q1?"), "musique"),
        (generated_id("musique", "Q2?"), "musique"),
    ]
    # from the question's text: 12 hex digits of its SHA-1
    assert generated_id("musique", "Q1?") == "musique-" + hashlib.sha1(b"Q1?").hexdigest()[:12]
    # limit does not renumber.
    assert load_dataset(path, limit=1)[0].id == generated_id("musique", "Q1?")


# --------------------------------------------------------------------------- malformed files


GOOD = {"id": "q1", "question": "Who?", "answers": ["Ilk"]}


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ([GOOD, {"id": "q2", "question": "Who?", "answers": ["Ilk"]}, '{"id": "q3", "quest'],
         r"bad\.jsonl line 3: not valid JSON \(Unterminated string starting at column 14\)"),
        ([GOOD, {"id": "q2", "answers": ["Ilk"]}], r'bad\.jsonl line 2: missing "question"'),
        ([GOOD, {"id": "q2", "question": "  ", "answers": ["Ilk"]}],
         r'bad\.jsonl line 2: "question" is empty'),
        ([GOOD, {"id": "q2", "question": ["Who?"], "answers": ["Ilk"]}],
         r'bad\.jsonl line 2: "question" must be a string, got array'),
        ([GOOD, {"id": "q2", "question": "Who?", "answers": 42}],
         r'line 2: "answers" must be a string or a list of strings, got int'),
        ([GOOD, {"id": "q2", "question": "Who?", "answers": []}], r'line 2: "answers" is empty'),
        ([GOOD, {"id": "q2", "question": "Who?", "answers": ["Ilk", ""]}],
         r'line 2: "answers" item 2 is empty'),
        ([GOOD, {"id": True, "question": "Who?", "answers": ["Ilk"]}],
         r'line 2: "id" must be a string or integer, got boolean'),
        ([GOOD, "[1, 2]"], r"line 2: expected a JSON object, got array"),
        ([GOOD, "", GOOD], r"line 3: duplicate id 'q1' \(first seen on line 1\)"),
        ([GOOD, {"id": "q2", "question": "Who?", "answers": ["x"], "task": "trivia"}],
         r'line 2: "task" must be one of'),
        ([{"qid": "s", "question": "Old?", "answer": "maybe", "facts": []}],
         r'line 1: "answer" must be true/false or "yes"/"no"'),
        ([{"question": "Q?", "qa_pairs": [{"short_answers": ["a"]}, {"question": "no answers"}]}],
         r'line 1: "qa_pairs" item 2 has no "short_answers"'),
        ([{"question_id": "x", "question_text": "Q?", "answers_objects": [{"spans": []}]}],
         r'line 1: "answers_objects" holds no answer'),
        ([{"title": "Ilk", "text": "A corpus line, not a question."}],
         r"line 1: cannot tell the dataset format from its keys \(text, title\)"),
        # nested fields are named by their path, items by their 1-based number
        ([{"question_id": "x", "question_text": "Q?", "answers_objects": [{"spans": ["a", " "]}]}],
         r'line 1: "answers_objects\[1\]\.spans" item 2 is empty$'),
        ([{"question_id": "x", "question_text": "Q?", "answers_objects": ["a"]}],
         r'line 1: "answers_objects" item 1 must be an object, got string$'),
        ([{"question": "Q?", "qa_pairs": [{"short_answers": ["a"]}]},
          {"question": "Q2?", "qa_pairs": "a"}],
         r'line 2: "qa_pairs" must be a list, got string$'),
        ([{"id": "a", "question": "Who?", "answers": [["Ilk"], []], "task": "asqa"}],
         r'line 1: "answers" item 2 is empty$'),
        ([{"_id": "h", "question": 7, "answer": "x", "supporting_facts": []}],
         r'line 1: "question" must be a string, got int$'),
    ],
)  # fmt: skip
def test_malformed_jsonl_names_the_line(tmp_path: Path, lines: list[Any], message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(
        "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines),
        encoding="utf-8",
    )
    with pytest.raises(DatasetError, match=message):
        load_dataset(path)


def test_null_is_absent_and_stray_titles_are_ignored(tmp_path: Path) -> None:
    records = [
        {"id": None, "question": "Q?", "golden_answers": ["a"], "extra": {"kept": "out"}},
        {"id": "q2", "question": "Who?", "answers": ["Ilk"], "supporting_titles": 5},
        {"id": "q3", "question": "Who?", "answers": "Ilk", "supporting_titles": "Ilk"},
    ]
    first, second, third = (
        load_dataset(write_jsonl(tmp_path / f"set{n}.jsonl", [r])) for n, r in enumerate(records)
    )
    assert first == [Example(generated_id("set0", "Q?"), "Q?", ["a"], "multihop", "set0")]
    assert second[0].supporting_titles == ()
    assert (third[0].golds, third[0].supporting_titles) == (["Ilk"], ("Ilk",))


def test_malformed_json_array_names_the_item_or_line(tmp_path: Path) -> None:
    path = tmp_path / "test.json"
    path.write_text(json.dumps([{"question": "Q?", "answer": ["a"]}, "oops"]), encoding="utf-8")
    with pytest.raises(
        DatasetError, match=r"test\.json item 2: expected a JSON object, got string"
    ):
        load_dataset(path)

    path.write_text('[\n  {"question": "Q?", "answer": ["a"]},\n  {"question": \n]\n')
    with pytest.raises(DatasetError, match=r"test\.json line 4: not valid JSON"):
        load_dataset(path)

    path.write_text(json.dumps([{"question": "Q?", "answer": ["a"]}, {"answer": ["b"]}]))
    with pytest.raises(DatasetError, match=r'test\.json item 2: missing "question"'):
        load_dataset(path)


def test_invalid_utf8_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(json.dumps(GOOD).encode() + b'\n{"question": "caf\xe9"}\n')
    with pytest.raises(DatasetError, match=r"latin1\.jsonl line 2: not valid UTF-8"):
        load_dataset(path)


def test_missing_empty_and_directory_paths(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="dataset file not found: .*nope.jsonl"):
        load_dataset(tmp_path / "nope.jsonl")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(DatasetError, match=r"empty\.jsonl holds no questions"):
        load_dataset(empty)
    with pytest.raises(DatasetError, match="directory without questions.jsonl"):
        load_dataset(tmp_path)


def test_dataset_errors_are_user_errors() -> None:
    assert issubclass(DatasetError, NoteragError)


# --------------------------------------------------------------------------- pool_corpus


def test_pool_real_hotpotqa_dedups_and_keeps_supporting_paragraphs(tmp_path: Path) -> None:
    source = data_file("original_formats/hotpotqa_dev200.hotpot.jsonl")
    out = tmp_path / "corpus.jsonl"
    stats = PoolStats()

    written = pool_corpus(source, out, stats=stats)

    rows = read_jsonl(out)
    assert written == len(rows) == stats.passages == 1971
    # 200 questions × ~10 paragraphs, 21 of them repeats across questions.
    assert (stats.questions, stats.paragraphs, stats.duplicates) == (200, 1992, 21)
    assert len({(r["title"], r["text"]) for r in rows}) == len(rows)
    assert len({r["id"] for r in rows}) == len(rows)
    titles = {r["title"] for r in rows}
    for example in load_dataset(source):
        assert set(example.supporting_titles) <= titles, example.id


def test_pooled_hotpotqa_text_matches_the_shared_corpus(tmp_path: Path) -> None:
    # Sentences are joined with " " like IRCoT's processing, which the shared corpus came from;
    # HotpotQA's sentences carry a leading space, hence the double spaces.
    shared = {r["title"]: r["text"] for r in read_jsonl(data_file("hotpotqa_dev500/corpus.jsonl"))}
    out = tmp_path / "corpus.jsonl"
    pool_corpus(data_file("original_formats/hotpotqa_dev200.hotpot.jsonl"), out)

    common = [r for r in read_jsonl(out) if r["title"] in shared]
    assert len(common) > 100
    assert all(r["text"] == shared[r["title"]] for r in common)
    assert any("  " in r["text"] for r in common)


@pytest.mark.parametrize(
    ("relative", "shared", "without_paragraphs"),
    [
        ("original_formats/hotpotqa_dev500.ircot.jsonl", "hotpotqa_dev500", 0),
        ("original_formats/musique_dev200.musique.jsonl", "musique_dev200", 0),
        ("original_formats/twowiki_dev200.2wiki.jsonl", "twowiki_dev164", 36),
    ],
)
def test_pooling_reproduces_the_shared_corpora(
    tmp_path: Path, relative: str, shared: str, without_paragraphs: int
) -> None:
    """The shared corpora were pooled from these files (dedup by title+text, first seen)."""
    expected = [(r["title"], r["text"]) for r in read_jsonl(data_file(f"{shared}/corpus.jsonl"))]
    out = tmp_path / "corpus.jsonl"
    stats = PoolStats()

    written = pool_corpus(data_file(relative), out, stats=stats)

    assert [(r["title"], r["text"]) for r in read_jsonl(out)] == expected
    assert written == len(expected)
    assert stats.without_paragraphs == without_paragraphs


def test_pool_musique_keeps_paragraphs_sharing_a_title(tmp_path: Path) -> None:
    def para(idx: int, title: str, text: str) -> dict[str, Any]:
        return {"idx": idx, "title": title, "paragraph_text": text, "is_supporting": idx == 0}

    records = [
        {"id": "2hop__1", "question": "Q1?", "answer": "a", "answer_aliases": [],
         "paragraphs": [para(0, "Australia", "Australia is a country."),
                        para(1, "Australia", "Australia is also a continent.")]},
        {"id": "2hop__2", "question": "Q2?", "answer": "b", "answer_aliases": [],
         "paragraphs": [para(0, "Australia", "Australia is a country."),  # a true duplicate
                        para(1, "Union territory", "A union territory is ...")]},
    ]  # fmt: skip
    source = write_jsonl(tmp_path / "musique.jsonl", records)
    out = tmp_path / "corpus.jsonl"

    assert pool_corpus(source, out) == 3

    rows = read_jsonl(out)
    assert [(r["title"], r["text"]) for r in rows] == [
        ("Australia", "Australia is a country."),
        ("Australia", "Australia is also a continent."),
        ("Union territory", "A union territory is ..."),
    ]
    # Ids are a hash of title+text: stable across runs and subsets.
    assert [r["id"] for r in rows] == [passage_id(r["title"], r["text"]) for r in rows]
    assert len({r["id"] for r in rows}) == 3
    pool_corpus(write_jsonl(tmp_path / "second.jsonl", records[1:]), tmp_path / "c2.jsonl")
    assert read_jsonl(tmp_path / "c2.jsonl")[0]["id"] == rows[0]["id"]


def test_pool_alce_docs(tmp_path: Path) -> None:
    record = {
        "question": "Q?",
        "qa_pairs": [{"short_answers": ["a"]}],
        "docs": [{"id": "1", "title": "T", "text": "Doc one."}, {"title": "T", "text": ""}],
    }
    stats = PoolStats()
    assert (
        pool_corpus(write_jsonl(tmp_path / "asqa.jsonl", [record]), tmp_path / "c", stats=stats)
        == 1
    )
    assert stats.empty == 1


@pytest.mark.parametrize(
    "record",
    [
        GOOD,  # our questions files name context titles only
        {"qid": "s", "question": "Old?", "answer": True},
        {"question": "Q?", "golden_answers": ["a"]},
    ],
)
def test_pool_formats_without_paragraphs_fail_clearly(
    tmp_path: Path, record: dict[str, Any]
) -> None:
    source = write_jsonl(tmp_path / "questions.jsonl", [record])
    with pytest.raises(DatasetError, match=r"questions\.jsonl has no paragraphs to pool"):
        pool_corpus(source, tmp_path / "corpus.jsonl")
    assert not (tmp_path / "corpus.jsonl").exists()


def test_pool_failure_leaves_an_existing_corpus_untouched(tmp_path: Path) -> None:
    out = tmp_path / "corpus.jsonl"
    out.write_text("previous corpus\n")
    good = {"_id": "a", "question": "Q?", "answer": "x", "context": [["T", ["S1.", " S2."]]]}
    bad = {"_id": "b", "question": "Q?", "answer": "x", "context": [["T", "not a list"]]}
    source = write_jsonl(tmp_path / "hotpot.jsonl", [good, good, bad])

    with pytest.raises(DatasetError, match=r'hotpot\.jsonl line 3: "context" item 1 must be'):
        pool_corpus(source, out)

    assert out.read_text() == "previous corpus\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.jsonl", "hotpot.jsonl"]


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"id": "m", "question": "Q?", "answer": "a",
          "paragraphs": [{"title": "T", "paragraph_text": "p"}, {"title": "U"}]},
         r'line 1: "paragraphs" item 2 has no "paragraph_text"$'),
        ({"question": "Q?", "qa_pairs": [{"short_answers": ["a"]}], "docs": [{"text": 3}]},
         r'line 1: "docs\[1\]\.text" must be a string, got int$'),
        ({"_id": "h", "question": "Q?", "answer": "x", "context": "T: s"},
         r'line 1: "context" must be a list, got string$'),
    ],
)  # fmt: skip
def test_pool_malformed_paragraphs_name_the_field(
    tmp_path: Path, record: dict[str, Any], message: str
) -> None:
    with pytest.raises(DatasetError, match=message):
        pool_corpus(write_jsonl(tmp_path / "set.jsonl", [record]), tmp_path / "corpus.jsonl")


def test_pool_context_free_records_only_is_an_error(tmp_path: Path) -> None:
    # 2Wiki lines without "context" are skipped; a file of nothing else has nothing to pool.
    record = {"_id": "a", "question": "Q?", "answer": "no", "evidences": [], "qa_pairs": []}
    source = write_jsonl(tmp_path / "wiki.jsonl", [record])
    with pytest.raises(DatasetError, match="has no paragraphs to pool"):
        pool_corpus(source, tmp_path / "corpus.jsonl")


def test_pool_refuses_to_overwrite_its_source(tmp_path: Path) -> None:
    source = write_jsonl(tmp_path / "m.jsonl", [{"id": "1", "question": "Q", "answer": "a",
                                                  "paragraphs": []}])  # fmt: skip
    with pytest.raises(DatasetError, match="refusing to overwrite"):
        pool_corpus(source, source)
