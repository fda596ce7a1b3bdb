"""Evaluation questions and their gold answers, read from the formats QA datasets ship in.

``load_dataset(path)`` returns ``Example``s; ``pool_corpus(path, out)`` writes the paragraphs a
dataset carries as a corpus JSONL for ``noterag index``.

Formats, by their ``format=`` name (detected from the first record; a file whose first
non-blank character is ``[`` is read as one JSON array, anything else as JSONL). Those marked
*pooled* carry paragraphs that ``pool_corpus`` can write:

* ``noterag`` — ours: ``{id, dataset, question, answers: [str], supporting_titles}``; an
  optional ``task`` field marks asqa/strategyqa records (default multihop).
* ``hotpotqa`` — HotpotQA: ``_id, question, answer, supporting_facts, context``. *Pooled.*
* ``2wikimultihopqa`` — 2WikiMultihopQA: as HotpotQA plus ``evidences``/``answer_id``; some
  lines lack ``context`` (skipped and counted when pooling). *Pooled.*
* ``musique`` — MuSiQue: ``id, question, answer, answer_aliases, paragraphs``. *Pooled.*
* ``ircot`` — IRCoT-processed: ``question_id, question_text, answers_objects, contexts``.
  *Pooled.*
* ``adaptive-note`` — the test lists of Adaptive-Note/DeepNote (``data/eval/*/test.json``): a
  JSON array of ``{question, answer: [str]}`` without ids.
* ``strategyqa`` — StrategyQA: ``qid, question, answer: bool, facts``.
* ``asqa`` — ALCE's ASQA: ``question, qa_pairs[{short_answers}], sample_id`` (JSON array or
  JSONL). ALCE's retrieved ``docs`` are *pooled* when present.
* ``flashrag`` — FlashRAG: ``{id?, question, golden_answers: [str]}``.

Task: ``strategyqa`` for boolean answers (golds ``["yes"]``/``["no"]``), ``asqa`` for
``qa_pairs`` (golds: one short-answer list per QA pair), ``multihop`` otherwise (golds: aliases,
the first canonical). HotpotQA/2Wiki yes/no questions stay multihop with golds ``["yes"]``.

Ids: the record's own id; a record without one gets ``"<dataset>-<digest>"``, 12 hex digits of
the SHA-1 of its question (``formats.generated_id``): its content, not its position, so a
question added or removed elsewhere changes no other id, and ``limit`` never does. The same
question asked twice in such a file gets ``-2``, ``-3``, ... on its later occurrences. The
dataset name of formats that do not say it is taken from the file or folder name
(``hotpotqa.test.json`` → ``hotpotqa``).

Anything malformed raises ``DatasetError`` naming the file, the 1-based line (JSONL) or item
(JSON array), and what is wrong.

Reading the records is ``noterag.datasets.records``; the formats, one pydantic model each, are
``noterag.datasets.formats``; this module finds the file, its format and its dataset name, and pools.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from noterag.base.errors import ConfigError
from noterag.base.files import atomic_writer
from noterag.datasets.formats import (
    FORMATS,
    PARAGRAPH_FORMATS,
    Example,
    Paragraph,
    check_format,
    detect,
    detect_format,
    generated_id,
    parse_example,
    parse_paragraphs,
)
from noterag.datasets.records import DatasetError, Record, iter_records

__all__ = [
    "FORMATS",
    "DatasetError",
    "Example",
    "PoolStats",
    "detect_format",
    "load_dataset",
    "passage_id",
    "pool_corpus",
]

# Folder/file name fragments → dataset name, for formats whose records do not name it.
_DATASET_NAMES = (
    ("2wiki", "2wikimultihopqa"),
    ("twowiki", "2wikimultihopqa"),
    ("hotpot", "hotpotqa"),
    ("musique", "musique"),
    ("strategyqa", "strategyqa"),
    ("asqa", "asqa"),
)


@dataclass
class PoolStats:
    """What ``pool_corpus`` saw; pass one in to read the counts."""

    questions: int = 0
    # Questions whose record carries no paragraphs (2WikiMultihopQA has 36 such lines in dev).
    without_paragraphs: int = 0
    paragraphs: int = 0  # paragraph slots seen, duplicates included
    empty: int = 0  # paragraphs with no text, not written
    passages: int = 0  # distinct passages written

    @property
    def duplicates(self) -> int:
        return self.paragraphs - self.empty - self.passages


# --------------------------------------------------------------------------- public API


def load_dataset(
    path: str | Path, *, format: str | None = None, limit: int | None = None
) -> list[Example]:
    """Read the questions of a dataset file (or of ``DIR/questions.jsonl``).

    ``format`` overrides detection (one of ``FORMATS``); ``limit`` keeps the first N questions
    and stops reading there. Raises ``DatasetError`` for a missing, empty or malformed file.
    """
    if limit is not None and limit < 0:
        raise ConfigError(f"limit must be 0 or more, got {limit}")
    path = _resolve(path)
    records, fmt = _open_dataset(path, format)
    default_dataset = _dataset_from_path(path)

    examples: list[Example] = []
    first_seen: dict[str, str] = {}
    repeats: dict[str, int] = {}
    # A limit past any file's length is no limit (islice takes at most sys.maxsize).
    for record in itertools.islice(records, None if limit is None else min(limit, sys.maxsize)):
        example = parse_example(fmt, record, default_dataset)
        if example.id in first_seen:
            if example.id != generated_id(example.dataset, example.question):
                raise DatasetError(
                    f"{record.where}: duplicate id {example.id!r} (first seen on "
                    f"{first_seen[example.id]})"
                )
            # The same question again in a file without ids: its n-th occurrence, so that it
            # keeps its id whatever comes before it.
            repeats[example.id] = repeats.get(example.id, 1) + 1
            example = dataclasses.replace(example, id=f"{example.id}-{repeats[example.id]}")
        first_seen[example.id] = record.position
        examples.append(example)
    return examples


def pool_corpus(
    dataset_path: str | Path | Sequence[str | Path],
    out_path: str | Path,
    *,
    format: str | None = None,
    stats: PoolStats | None = None,
    progress: Callable[[str, PoolStats], None] | None = None,
    style: str = "noterag",
) -> int:
    """Pool the paragraphs of every question into a corpus JSONL; return the passages written.

    ``progress(file name, stats)`` is called as each file starts and every 1,000 passages.

    ``dataset_path`` is a dataset file, several (pooled together, as IRCoT pooled each
    dataset's train, dev and test files into its corpus), or a folder: one of ours (its
    ``questions.jsonl``) or an IRCoT ``raw_data/<dataset>/`` folder (``IRCOT_RAW_FILES``: the
    files IRCoT's ``retriever_server/build_index.py`` indexes, in its order).

    Lines are ``{"id", "title", "text"}``, deduplicated on title *and* text (MuSiQue has distinct
    paragraphs sharing a title; IRCoT's build_index.py and DeepNote's index_musique.py dedup on
    the same pair, DeepNote's index_2wiki.py on the text alone: docs/deviations.md), in
    first-seen order; a paragraph with blank text is dropped (the official scripts index it).

    ``style="deepnote"`` pools as DeepNote's and Adaptive-Note's ``src/build_index/es/``
    scripts do (identical in both repositories): ``index_2wiki.py`` keeps one paragraph per
    *text* (``data[para] = title``: at the text's first place, with the last title seen for
    it), ``index_musique.py`` one per title and text; both keep blank paragraphs. Other
    formats pool as by default, blanks kept. A passage's id is the first 16 hex digits of the SHA-1 of
    ``[title, text]``: the same paragraph gets the same id whatever subset or order it was
    pooled from, so runs over different pools stay comparable.

    HotpotQA/2Wiki sentences are joined with one space, as IRCoT's processing did; HotpotQA's
    sentences carry their own leading space, so its paragraphs keep the double spaces found in
    IRCoT's files and in the shared ``hotpotqa_dev500/corpus.jsonl``. Questions without
    paragraphs are skipped and counted in ``stats.without_paragraphs``.

    The file is written to a temporary name beside ``out_path`` and renamed into place, so a
    failure never leaves a partial corpus. Raises ``DatasetError`` for a malformed dataset or
    a format that carries no paragraphs.
    """
    stats = stats if stats is not None else PoolStats()
    paths = [dataset_path] if isinstance(dataset_path, (str, Path)) else list(dataset_path)
    sources = [source for path in paths for source in _resolve_all(path)]
    out = Path(out_path)
    for source in sources:
        if out.resolve() == source.resolve():
            raise DatasetError(f"refusing to overwrite the dataset with its corpus: {out}")

    if style not in POOL_STYLES:
        raise DatasetError(
            f"unknown corpus style {style!r}; choose one of {', '.join(POOL_STYLES)}"
        )
    official = style == "deepnote"

    def passages() -> Iterator[dict[str, str]]:
        seen: set[Paragraph] = set()
        by_text: dict[str, str] = {}  # official 2Wiki: text -> the last title seen
        for source in sources:
            records, fmt = _open_dataset(source, format)
            if fmt not in PARAGRAPH_FORMATS:
                raise DatasetError(
                    f"{source.name} has no paragraphs to pool ({fmt} format holds questions only)"
                )
            if progress is not None:
                progress(source.name, stats)
            if official and fmt == "2wikimultihopqa":
                _texts_with_last_title(records, fmt, stats, by_text)
                continue
            for passage in _distinct_passages(records, fmt, stats, seen, keep_blank=official):
                stats.passages += 1  # so far; the count written replaces it at the end
                if progress is not None and stats.passages % 1000 == 0:
                    progress(source.name, stats)
                yield passage
        for text, title in by_text.items():  # known only once every file was read
            stats.passages += 1
            yield {"id": passage_id(title, text), "title": title, "text": text}

    names = ", ".join(source.name for source in sources)
    written = _write_atomically(out, passages(), f"{names} has no paragraphs to pool")
    stats.passages = written
    return written


# How pool_corpus deduplicates: noterag's (title and text, blanks dropped) or the official
# DeepNote / Adaptive-Note index scripts' (see pool_corpus).
POOL_STYLES = ("noterag", "deepnote")


# IRCoT's raw_data/<dataset>/ files that build_index.py pools into each corpus, in its order
# (StonyBrookNLP/ircot retriever_server/build_index.py, make_*_documents).
IRCOT_RAW_FILES = {
    "2wikimultihopqa": ("train.json", "dev.json", "test.json"),
    "musique": tuple(
        f"musique_{kind}_v1.0_{split}.jsonl"
        for kind in ("ans", "full")
        for split in ("dev", "test", "train")
    ),
}


def _resolve_all(path: str | Path) -> list[Path]:
    """The dataset files ``path`` stands for (see ``pool_corpus``)."""
    path = Path(path)
    if path.is_dir() and not (path / "questions.jsonl").is_file():
        for names in IRCOT_RAW_FILES.values():
            present = [path / name for name in names if (path / name).is_file()]
            if present:
                return present
        expected = "; ".join(", ".join(names) for names in IRCOT_RAW_FILES.values())
        raise DatasetError(
            f"dataset path is a directory without questions.jsonl nor IRCoT's raw files "
            f"({expected}): {path}"
        )
    return [_resolve(path)]


# --------------------------------------------------------------------------- reading


def _resolve(path: str | Path) -> Path:
    path = Path(path)
    # A folder of ours (``hotpotqa_dev500/``) stands for its questions file.
    if path.is_dir():
        questions = path / "questions.jsonl"
        if not questions.is_file():
            raise DatasetError(f"dataset path is a directory without questions.jsonl: {path}")
        return questions
    return path


def _open_dataset(path: Path, format: str | None) -> tuple[Iterator[Record], str]:
    """The records of ``path`` and their format (``format``, or detected from the first)."""
    records = iter_records(path)
    first = next(records, None)
    if first is None:
        raise DatasetError(f"{path.name} holds no questions")
    fmt = check_format(format) if format is not None else detect(first)
    return itertools.chain([first], records), fmt


def _dataset_from_path(path: Path) -> str:
    """A dataset name from the file name or its two parent folders; else the file's stem."""
    for part in (path.name, path.parent.name, path.parent.parent.name):
        lowered = part.lower()
        for fragment, name in _DATASET_NAMES:
            if fragment in lowered:
                return name
    return path.name.split(".")[0] or "dataset"


# --------------------------------------------------------------------------- pooling


def _paragraphs(records: Iterable[Record], fmt: str, stats: PoolStats) -> Iterator[Paragraph]:
    """Every (title, text) paragraph of ``records``, in order, counted in ``stats``."""
    for record in records:
        stats.questions += 1
        paragraphs = parse_paragraphs(fmt, record)
        if paragraphs is None:
            stats.without_paragraphs += 1
            continue
        for paragraph in paragraphs:
            stats.paragraphs += 1
            yield paragraph


def _texts_with_last_title(
    records: Iterable[Record], fmt: str, stats: PoolStats, by_text: dict[str, str]
) -> None:
    """DeepNote's index_2wiki.py: ``data[para] = title`` over every paragraph, in order."""
    for title, text in _paragraphs(records, fmt, stats):
        by_text[text] = title


def _distinct_passages(
    records: Iterable[Record],
    fmt: str,
    stats: PoolStats,
    seen: set[Paragraph],
    *,
    keep_blank: bool = False,
) -> Iterator[dict[str, str]]:
    for title, text in _paragraphs(records, fmt, stats):
        if not text.strip() and not keep_blank:
            stats.empty += 1
            continue
        if (title, text) in seen:
            continue
        seen.add((title, text))
        yield {"id": passage_id(title, text), "title": title, "text": text}


def passage_id(title: str, text: str) -> str:
    """The stable id ``pool_corpus`` gives a paragraph: 16 hex digits of SHA-1 of [title, text]."""
    key = json.dumps([title, text], ensure_ascii=False).encode("utf-8")
    return hashlib.sha1(key).hexdigest()[:16]


def _write_atomically(out: Path, passages: Iterable[dict[str, str]], if_none: str) -> int:
    """Write JSONL lines to ``out`` (``noterag.base.files.atomic_writer``); return the line count.

    Writing none raises ``DatasetError(if_none)`` and leaves an existing ``out`` untouched.
    """
    count = 0
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with atomic_writer(out) as handle:
            for passage in passages:
                handle.write(json.dumps(passage, ensure_ascii=False) + "\n")
                count += 1
            if count == 0:
                raise DatasetError(if_none)
    except OSError as exc:
        raise DatasetError(f"cannot write {out}: {exc.strerror or exc}") from None
    return count
