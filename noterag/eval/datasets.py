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

Ids: the record's own id; formats without one get ``"<dataset>-<n>"`` (n = 1-based position in
the file, so ``limit`` never changes an id). The dataset name of formats that do not say it is
taken from the file or folder name (``hotpotqa.test.json`` → ``hotpotqa``).

Anything malformed raises ``DatasetError`` naming the file, the 1-based line (JSONL) or item
(JSON array), and what is wrong.
"""

from __future__ import annotations

import codecs
import hashlib
import itertools
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO

from noterag._fs import atomic_writer
from noterag.errors import ConfigError, NoteragError
from noterag.eval.metrics import TASKS

FORMATS = (
    "noterag",
    "hotpotqa",
    "2wikimultihopqa",
    "musique",
    "ircot",
    "adaptive-note",
    "strategyqa",
    "asqa",
    "flashrag",
)
# Other names users are likely to type for the same formats.
_FORMAT_ALIASES = {"jsonl": "noterag", "2wiki": "2wikimultihopqa", "alce": "asqa"}

# Folder/file name fragments → dataset name, for formats whose records do not name it.
_DATASET_NAMES = (
    ("2wiki", "2wikimultihopqa"),
    ("twowiki", "2wikimultihopqa"),
    ("hotpot", "hotpotqa"),
    ("musique", "musique"),
    ("strategyqa", "strategyqa"),
    ("asqa", "asqa"),
)


class DatasetError(NoteragError):
    """A dataset file is missing or has a malformed record (the message names the line)."""


@dataclass(frozen=True)
class Example:
    """One evaluation question with its gold answers."""

    id: str
    question: str
    # multihop: [alias, ...] (first canonical); asqa: [[alias, ...] per QA pair];
    # strategyqa: ["yes"] or ["no"]. Left out of the hash so an Example stays hashable.
    golds: list = field(hash=False)
    task: str
    dataset: str
    supporting_titles: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of the fields (``supporting_titles`` as a list)."""
        data = asdict(self)
        data["supporting_titles"] = list(self.supporting_titles)
        return data


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
    parse = _PARSERS[fmt]
    default_dataset = _dataset_from_path(path)

    examples: list[Example] = []
    first_seen: dict[str, str] = {}
    for record in itertools.islice(records, limit):
        example = _parse(record, parse, record, default_dataset)
        if example.id in first_seen:
            raise DatasetError(
                f"{record.where}: duplicate id {example.id!r} (first seen on {first_seen[example.id]})"
            )
        first_seen[example.id] = record.position
        examples.append(example)
    return examples


def pool_corpus(
    dataset_path: str | Path,
    out_path: str | Path,
    *,
    format: str | None = None,
    stats: PoolStats | None = None,
) -> int:
    """Pool the paragraphs of every question into a corpus JSONL; return the passages written.

    Lines are ``{"id", "title", "text"}``, deduplicated on title *and* text (MuSiQue has distinct
    paragraphs sharing a title), in first-seen order. A passage's id is the first 16 hex digits
    of the SHA-1 of ``[title, text]``: the same paragraph gets the same id whatever subset or
    order it was pooled from, so runs over different pools stay comparable.

    HotpotQA/2Wiki sentences are joined with one space, as IRCoT's processing did; HotpotQA's
    sentences carry their own leading space, so its paragraphs keep the double spaces found in
    IRCoT's files and in the shared ``hotpotqa_dev500/corpus.jsonl``. Questions without
    paragraphs are skipped and counted in ``stats.without_paragraphs``.

    The file is written to a temporary name beside ``out_path`` and renamed into place, so a
    failure never leaves a partial corpus. Raises ``DatasetError`` for a malformed dataset or
    a format that carries no paragraphs.
    """
    stats = stats if stats is not None else PoolStats()
    source = _resolve(dataset_path)
    out = Path(out_path)
    if out.resolve() == source.resolve():
        raise DatasetError(f"refusing to overwrite the dataset with its corpus: {out}")
    records, fmt = _open_dataset(source, format)
    extract = _PARAGRAPHS.get(fmt)
    if extract is None:
        raise DatasetError(
            f"{source.name} has no paragraphs to pool ({fmt} format holds questions only)"
        )

    passages = _distinct_passages(records, extract, stats)
    written = _write_atomically(out, passages, f"{source.name} has no paragraphs to pool")
    stats.passages = written
    return written


# --------------------------------------------------------------------------- reading records


@dataclass(frozen=True)
class _Record:
    file: str  # the file's name, for messages
    unit: str  # "line" (JSONL) or "item" (JSON array)
    number: int  # 1-based line or item number
    index: int  # 1-based position among records (blank lines skipped), for generated ids
    obj: dict[str, Any]

    @property
    def position(self) -> str:
        return f"{self.unit} {self.number}"

    @property
    def where(self) -> str:
        return f"{self.file} {self.position}"


class _Bad(Exception):
    """What is wrong with one record, as one line of text."""


def _parse(record: _Record, parse: Callable[..., Any], *args: Any) -> Any:
    """``parse(*args)``, turning its ``_Bad`` into a ``DatasetError`` that names the record."""
    try:
        return parse(*args)
    except _Bad as exc:
        raise DatasetError(f"{record.where}: {exc}") from None


def _resolve(path: str | Path) -> Path:
    path = Path(path)
    # A folder of ours (``hotpotqa_dev500/``) stands for its questions file.
    if path.is_dir():
        questions = path / "questions.jsonl"
        if not questions.is_file():
            raise DatasetError(f"dataset path is a directory without questions.jsonl: {path}")
        return questions
    return path


def _open_dataset(path: Path, format: str | None) -> tuple[Iterator[_Record], str]:
    """The records of ``path`` and their format (``format``, or detected from the first)."""
    records = _iter_records(path)
    first = next(records, None)
    if first is None:
        raise DatasetError(f"{path.name} holds no questions")
    fmt = _check_format(format) if format is not None else _detect(first)
    return itertools.chain([first], records), fmt


def _check_format(name: str) -> str:
    fmt = _FORMAT_ALIASES.get(name.lower(), name.lower())
    if fmt not in FORMATS:
        raise ConfigError(f"unknown dataset format {name!r} (choose from: {', '.join(FORMATS)})")
    return fmt


def _iter_records(path: Path) -> Iterator[_Record]:
    """Yield the JSON objects of a JSONL file or of a file holding one JSON array."""
    with _open(path) as handle:
        # Look at the first non-blank line: "[" starts a JSON array, anything else is JSONL.
        head: list[bytes] = []
        for raw in handle:
            if not head and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8) :]
            head.append(raw)
            if raw.strip():
                break
        if head and head[-1].lstrip().startswith(b"["):
            yield from _array_records(path.name, b"".join(head) + handle.read())
        else:
            yield from _jsonl_records(path.name, itertools.chain(head, handle))


def _open(path: Path) -> BinaryIO:
    try:
        return path.open("rb")
    except FileNotFoundError:
        raise DatasetError(f"dataset file not found: {path}") from None
    except OSError as exc:
        raise DatasetError(f"cannot read dataset {path}: {exc.strerror or exc}") from None


def _jsonl_records(name: str, lines: Iterable[bytes]) -> Iterator[_Record]:
    index = 0
    for line_no, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        index += 1
        try:
            # Without its newline, a cut-off line reads "Unterminated string", not "control
            # character".
            obj = _json_object(_decode(raw).rstrip("\r\n"))
        except _Bad as exc:
            raise DatasetError(f"{name} line {line_no}: {exc}") from None
        yield _Record(name, "line", line_no, index, obj)


def _array_records(name: str, data: bytes) -> Iterator[_Record]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line_no = data[: exc.start].count(b"\n") + 1
        raise DatasetError(f"{name} line {line_no}: not valid UTF-8 (byte {exc.start})") from None
    try:
        items = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetError(
            f"{name} line {exc.lineno}: not valid JSON ({_json_message(exc)})"
        ) from None
    if not isinstance(items, list):  # "[1] [2]" and the like fail above; kept for safety
        raise DatasetError(f"{name}: expected a JSON array of objects")
    for number, obj in enumerate(items, start=1):
        if not isinstance(obj, dict):
            raise DatasetError(f"{name} item {number}: expected a JSON object, got {_type(obj)}")
        yield _Record(name, "item", number, number, obj)


def _json_message(exc: json.JSONDecodeError) -> str:
    # Some messages end in "at" ("Unterminated string starting at"); don't say "at at".
    return f"{exc.msg.removesuffix(' at')} at column {exc.colno}"


def _decode(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Bad(f"not valid UTF-8 (byte {exc.start})") from None


def _json_object(line: str) -> dict[str, Any]:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise _Bad(f"not valid JSON ({_json_message(exc)})") from None
    if not isinstance(obj, dict):
        raise _Bad(f"expected a JSON object, got {_type(obj)}")
    return obj


# --------------------------------------------------------------------------- format detection


def _detect(record: _Record) -> str:
    """The format of a file, judged from its first record's keys."""
    fmt = detect_format(record.obj)
    if fmt is None:
        keys = ", ".join(sorted(record.obj)) or "none"
        raise DatasetError(
            f"{record.where}: cannot tell the dataset format from its keys ({keys}); "
            f"name it (one of: {', '.join(FORMATS)})"
        )
    return fmt


def detect_format(obj: dict[str, Any]) -> str | None:
    """The format a record looks like (one of ``FORMATS``), or None."""
    # Most specific first: 2Wiki records without context carry their own (different)
    # "qa_pairs", so the 2Wiki markers are checked before ASQA's.
    if "question_text" in obj and "answers_objects" in obj:
        return "ircot"
    if "golden_answers" in obj:
        return "flashrag"
    if "answers" in obj and "question" in obj:
        return "noterag"
    if "paragraphs" in obj or "answer_aliases" in obj:
        return "musique"
    if "_id" in obj and ({"evidences", "answer_id", "entity_ids"} & obj.keys()):
        return "2wikimultihopqa"
    if "_id" in obj and ("supporting_facts" in obj or "context" in obj):
        return "hotpotqa"
    if _looks_like_asqa(obj):
        return "asqa"
    if isinstance(obj.get("answer"), bool) or {"facts", "decomposition", "term"} & obj.keys():
        return "strategyqa"
    if "question" in obj and isinstance(obj.get("answer"), list):
        return "adaptive-note"
    return None


def _looks_like_asqa(obj: dict[str, Any]) -> bool:
    pairs = obj.get("qa_pairs")
    return (
        isinstance(pairs, list)
        and bool(pairs)
        and isinstance(pairs[0], dict)
        and ("short_answers" in pairs[0])
    )


def _dataset_from_path(path: Path) -> str:
    """A dataset name from the file name or its two parent folders; else the file's stem."""
    for part in (path.name, path.parent.name, path.parent.parent.name):
        lowered = part.lower()
        for fragment, name in _DATASET_NAMES:
            if fragment in lowered:
                return name
    return path.name.split(".")[0] or "dataset"


# --------------------------------------------------------------------------- fields


def _type(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean"}.get(
        type(value), "null" if value is None else type(value).__name__
    )


def _required(obj: dict[str, Any], key: str) -> Any:
    if key not in obj or obj[key] is None:
        raise _Bad(f'missing "{key}"')
    return obj[key]


def _text(obj: dict[str, Any], key: str) -> str:
    """A required non-empty string field, stripped (the IRCoT lists have stray spaces)."""
    value = _required(obj, key)
    if not isinstance(value, str):
        raise _Bad(f'"{key}" must be a string, got {_type(value)}')
    if not value.strip():
        raise _Bad(f'"{key}" is empty')
    return value.strip()


def _record_id(obj: dict[str, Any], key: str, record: _Record, dataset: str) -> str:
    value = obj.get(key)
    if value is None:
        return f"{dataset}-{record.index}"
    # bool is an int subclass; an id of `true` is a broken export, not an id.
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise _Bad(f'"{key}" must be a string or integer, got {_type(value)}')
    if not str(value).strip():
        raise _Bad(f'"{key}" is empty')
    return str(value)


def _strings(value: Any, key: str) -> list[str]:
    """A non-empty list of non-empty strings; a bare string is a list of one.

    Numbers are accepted as their text: some exports store a year as 1994.
    """
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list):
        raise _Bad(f'"{key}" must be a string or a list of strings, got {_type(value)}')
    if not items:
        raise _Bad(f'"{key}" is empty')
    out: list[str] = []
    for n, item in enumerate(items, start=1):
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            raise _Bad(f'"{key}" item {n} must be a string, got {_type(item)}')
        text = str(item).strip()
        if not text:
            raise _Bad(f'"{key}" item {n} is empty')
        out.append(text)
    return _unique(out)


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _yes_no(value: Any, key: str) -> list[str]:
    """Golds of a yes/no question from a boolean, ``"yes"``/``"no"``, or a list of one."""
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if isinstance(value, bool):
        return ["yes" if value else "no"]
    if isinstance(value, str) and value.strip().lower() in ("yes", "no"):
        return [value.strip().lower()]
    raise _Bad(f'"{key}" must be true/false or "yes"/"no", got {json.dumps(value)[:60]}')


def _open_golds(value: Any, key: str) -> tuple[str, list]:
    """(task, golds) for formats that say nothing else: booleans are StrategyQA-style."""
    if isinstance(value, bool) or (
        isinstance(value, list) and len(value) == 1 and isinstance(value[0], bool)
    ):
        return "strategyqa", _yes_no(value, key)
    return "multihop", _strings(value, key)


def _qa_pair_golds(obj: dict[str, Any]) -> list[list[str]]:
    pairs = _required(obj, "qa_pairs")
    if not isinstance(pairs, list) or not pairs:
        raise _Bad('"qa_pairs" must be a non-empty list')
    golds: list[list[str]] = []
    for n, pair in enumerate(pairs, start=1):
        if not isinstance(pair, dict) or "short_answers" not in pair:
            raise _Bad(f'"qa_pairs" item {n} has no "short_answers"')
        golds.append(_strings(pair["short_answers"], f"qa_pairs[{n}].short_answers"))
    return golds


def _titles(items: Iterable[Any]) -> tuple[str, ...]:
    return tuple(_unique(t for t in items if isinstance(t, str) and t))


# --------------------------------------------------------------------------- question parsers
# Each takes a record and the dataset name guessed from the path, and returns an Example or
# raises _Bad saying what is wrong.


def _parse_noterag(record: _Record, default_dataset: str) -> Example:
    obj = record.obj
    dataset = obj.get("dataset") if isinstance(obj.get("dataset"), str) else default_dataset
    task, golds = _noterag_golds(obj)
    return Example(
        id=_record_id(obj, "id", record, dataset),
        question=_text(obj, "question"),
        golds=golds,
        task=task,
        dataset=dataset,
        supporting_titles=_titles(obj.get("supporting_titles") or ()),
    )


def _noterag_golds(obj: dict[str, Any]) -> tuple[str, list]:
    answers = _required(obj, "answers")
    task = obj.get("task")
    if task is None:
        return _open_golds(answers, "answers")
    if task not in TASKS:
        raise _Bad(f'"task" must be one of {", ".join(TASKS)}, got {json.dumps(task)[:40]}')
    if task == "strategyqa":
        return task, _yes_no(answers, "answers")
    if task == "asqa":
        if not isinstance(answers, list) or not answers:
            raise _Bad('"answers" of an asqa question must be a non-empty list of lists')
        return task, [_strings(pair, f"answers[{n}]") for n, pair in enumerate(answers, 1)]
    return task, _strings(answers, "answers")


def _parse_hotpot(dataset: str) -> Callable[[_Record, str], Example]:
    def parse(record: _Record, _default: str) -> Example:
        obj = record.obj
        facts = obj.get("supporting_facts") or []
        if not isinstance(facts, list):
            raise _Bad(f'"supporting_facts" must be a list, got {_type(facts)}')
        return Example(
            id=_record_id(obj, "_id", record, dataset),
            question=_text(obj, "question"),
            golds=_strings(_text(obj, "answer"), "answer"),
            task="multihop",
            dataset=dataset,
            supporting_titles=_titles(f[0] for f in facts if isinstance(f, list) and f),
        )

    return parse


def _parse_musique(record: _Record, _default: str) -> Example:
    obj = record.obj
    aliases = obj.get("answer_aliases") or []
    golds = [_text(obj, "answer"), *(_strings(aliases, "answer_aliases") if aliases else [])]
    paragraphs = obj.get("paragraphs") or []
    return Example(
        id=_record_id(obj, "id", record, "musique"),
        question=_text(obj, "question"),
        golds=_unique(golds),
        task="multihop",
        dataset="musique",
        supporting_titles=_titles(
            p.get("title") for p in paragraphs if isinstance(p, dict) and p.get("is_supporting")
        ),
    )


def _parse_ircot(record: _Record, default_dataset: str) -> Example:
    obj = record.obj
    contexts = obj.get("contexts") or []
    return Example(
        id=_record_id(obj, "question_id", record, default_dataset),
        question=_text(obj, "question_text"),
        golds=_ircot_golds(_required(obj, "answers_objects")),
        task="multihop",
        dataset=default_dataset,
        supporting_titles=_titles(
            c.get("title") for c in contexts if isinstance(c, dict) and c.get("is_supporting")
        ),
    )


def _ircot_golds(objects: Any) -> list[str]:
    """Every span, number and date of IRCoT's (DROP-style) answer objects, as aliases.

    IRCoT's multi-hop sets hold one span per question; a number or a date (day month year)
    stands in for the span in DROP-derived data.
    """
    if not isinstance(objects, list):
        raise _Bad(f'"answers_objects" must be a list, got {_type(objects)}')
    golds: list[str] = []
    for n, answer in enumerate(objects, start=1):
        if not isinstance(answer, dict):
            raise _Bad(f'"answers_objects" item {n} must be an object, got {_type(answer)}')
        spans = answer.get("spans") or []
        golds += _strings(spans, f"answers_objects[{n}].spans") if spans else []
        if str(answer.get("number") or "").strip():
            golds.append(str(answer["number"]).strip())
        date = answer.get("date") if isinstance(answer.get("date"), dict) else {}
        parts = [str(date.get(k) or "").strip() for k in ("day", "month", "year")]
        if any(parts):
            golds.append(" ".join(p for p in parts if p))
    if not golds:
        raise _Bad('"answers_objects" holds no answer')
    return _unique(golds)


def _parse_open_answers(record: _Record, default_dataset: str, *, answer_key: str) -> Example:
    """{id, question, <answer_key>}: the Adaptive-Note test lists ("answer") and FlashRAG
    ("golden_answers") differ only in the answer's key."""
    obj = record.obj
    task, golds = _open_golds(_required(obj, answer_key), answer_key)
    return Example(
        id=_record_id(obj, "id", record, default_dataset),
        question=_text(obj, "question"),
        golds=golds,
        task=task,
        dataset=default_dataset,
    )


_parse_adaptive_note = partial(_parse_open_answers, answer_key="answer")
_parse_flashrag = partial(_parse_open_answers, answer_key="golden_answers")


def _parse_strategyqa(record: _Record, _default: str) -> Example:
    obj = record.obj
    key = "qid" if "qid" in obj else "id"
    return Example(
        id=_record_id(obj, key, record, "strategyqa"),
        question=_text(obj, "question"),
        golds=_yes_no(_required(obj, "answer"), "answer"),
        task="strategyqa",
        dataset="strategyqa",
    )


def _parse_asqa(record: _Record, _default: str) -> Example:
    obj = record.obj
    # ALCE names the id "sample_id"; the Hugging Face ASQA names the question "ambiguous_question".
    key = "sample_id" if "sample_id" in obj else "id"
    question_key = "question" if "question" in obj else "ambiguous_question"
    pairs = obj.get("qa_pairs") if isinstance(obj.get("qa_pairs"), list) else []
    return Example(
        id=_record_id(obj, key, record, "asqa"),
        question=_text(obj, question_key),
        golds=_qa_pair_golds(obj),
        task="asqa",
        dataset="asqa",
        supporting_titles=_titles(p.get("wikipage") for p in pairs if isinstance(p, dict)),
    )


_PARSERS: dict[str, Callable[[_Record, str], Example]] = {
    "noterag": _parse_noterag,
    "hotpotqa": _parse_hotpot("hotpotqa"),
    "2wikimultihopqa": _parse_hotpot("2wikimultihopqa"),
    "musique": _parse_musique,
    "ircot": _parse_ircot,
    "adaptive-note": _parse_adaptive_note,
    "strategyqa": _parse_strategyqa,
    "asqa": _parse_asqa,
    "flashrag": _parse_flashrag,
}


# --------------------------------------------------------------------------- paragraphs
# Each returns the (title, text) pairs of one record, or None when the record has none.

Paragraph = tuple[str, str]


def _hotpot_paragraphs(obj: dict[str, Any]) -> list[Paragraph] | None:
    context = obj.get("context")
    if context is None:
        return None
    if not isinstance(context, list):
        raise _Bad(f'"context" must be a list of [title, sentences], got {_type(context)}')
    paragraphs = []
    for n, entry in enumerate(context, start=1):
        ok = isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)
        sentences = entry[1] if ok else None
        if not isinstance(sentences, list) or not all(isinstance(s, str) for s in sentences):
            raise _Bad(f'"context" item {n} must be [title, [sentence, ...]]')
        paragraphs.append((entry[0], " ".join(sentences)))
    return paragraphs


def _keyed_paragraphs(
    key: str, text_key: str
) -> Callable[[dict[str, Any]], list[Paragraph] | None]:
    """Paragraphs stored as a list of ``{"title", text_key}`` objects under ``key``."""

    def extract(obj: dict[str, Any]) -> list[Paragraph] | None:
        items = obj.get(key)
        if items is None:
            return None
        if not isinstance(items, list):
            raise _Bad(f'"{key}" must be a list, got {_type(items)}')
        paragraphs = []
        for n, item in enumerate(items, start=1):
            if not isinstance(item, dict) or not isinstance(item.get(text_key), str):
                raise _Bad(f'"{key}" item {n} has no "{text_key}" string')
            title = item.get("title") if isinstance(item.get("title"), str) else ""
            paragraphs.append((title, item[text_key]))
        return paragraphs

    return extract


_PARAGRAPHS: dict[str, Callable[[dict[str, Any]], list[Paragraph] | None]] = {
    "hotpotqa": _hotpot_paragraphs,
    "2wikimultihopqa": _hotpot_paragraphs,
    "musique": _keyed_paragraphs("paragraphs", "paragraph_text"),
    "ircot": _keyed_paragraphs("contexts", "paragraph_text"),
    "asqa": _keyed_paragraphs("docs", "text"),
}


def _distinct_passages(
    records: Iterable[_Record],
    extract: Callable[[dict[str, Any]], list[Paragraph] | None],
    stats: PoolStats,
) -> Iterator[dict[str, str]]:
    seen: set[Paragraph] = set()
    for record in records:
        stats.questions += 1
        paragraphs = _parse(record, extract, record.obj)
        if paragraphs is None:
            stats.without_paragraphs += 1
            continue
        for title, text in paragraphs:
            stats.paragraphs += 1
            if not text.strip():
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
    """Write JSONL lines to ``out`` (``noterag._fs.atomic_writer``); return the line count.

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
