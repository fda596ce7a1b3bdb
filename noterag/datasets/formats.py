"""The dataset formats: one pydantic model per format says what a record must hold and turns it
into an ``Example``; a second model per *pooled* format reads its paragraphs.

A record that breaks its model is one line of error naming the file, the line (or item) and
the field, built from pydantic's first error: ``bad.jsonl line 2: "answers" item 2 is empty``.
A null field counts as absent (exports write null for what a record lacks).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, TypeVar

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    WrapValidator,
    field_validator,
)
from pydantic_core import ErrorDetails, PydanticCustomError

from noterag.base.errors import ConfigError
from noterag.datasets.records import TASKS, DatasetError, Record, field_subject, json_type


@dataclass(frozen=True)
class Example:
    """One evaluation question with its gold answers."""

    id: str
    question: str
    # multihop: [alias, ...] (first canonical); asqa: [[alias, ...] per QA pair];
    # strategyqa: ["yes"] or ["no"]. Left out of the hash so an Example stays hashable.
    golds: list[Any] = field(hash=False)
    task: str
    dataset: str
    supporting_titles: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of the fields (``supporting_titles`` as a list)."""
        data = asdict(self)
        data["supporting_titles"] = list(self.supporting_titles)
        return data


def row_fields(example: Any) -> dict[str, Any]:
    """What a result row (an eval row, a DNAlign journal line) says of its question: id,
    question, gold answers, task, dataset."""
    return {
        "id": example.id,
        "question": example.question,
        "golds": list(example.golds),
        "task": example.task,
        "dataset": example.dataset,
    }


# --------------------------------------------------------------------------- field types
# Each failure is a pydantic error; ``error_line`` words it. The custom ones carry their words.


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _as_text(value: Any) -> Any:
    # Some exports store an answer such as a year as a number: 1994 is "1994".
    return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


def _listed(value: Any) -> Any:
    if isinstance(value, str):
        return [value]  # a bare answer is a list of one
    if not isinstance(value, list):
        raise PydanticCustomError(
            "strings_type",
            "must be a string or a list of strings, got {got}",
            {"got": json_type(value)},
        )
    return value


def _listed_or_none(value: Any) -> Any:
    return _listed(value) if value else []


def _record_id(value: Any) -> str:
    # bool is an int subclass; an id of `true` is a broken export, not an id.
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise PydanticCustomError(
            "id_type", "must be a string or integer, got {got}", {"got": json_type(value)}
        )
    if not str(value).strip():
        raise PydanticCustomError("empty", "is empty")
    return str(value)


def _yes_no(value: Any) -> list[str]:
    """The golds of a yes/no question: from a boolean, "yes"/"no", or a list of one."""
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if isinstance(value, bool):
        return ["yes" if value else "no"]
    if isinstance(value, str) and value.strip().lower() in ("yes", "no"):
        return [value.strip().lower()]
    raise PydanticCustomError(
        "yes_no",
        'must be true/false or "yes"/"no", got {shown}',
        {"shown": json.dumps(value)[:60]},
    )


def _task(value: Any) -> str:
    if value not in TASKS:
        raise PydanticCustomError(
            "task",
            "must be one of {tasks}, got {shown}",
            {"tasks": ", ".join(TASKS), "shown": json.dumps(value)[:40]},
        )
    return str(value)


def _titles(items: Any) -> tuple[str, ...]:
    """The distinct non-empty strings among ``items`` (a bare string is one title); anything
    else is ignored: titles only inform the retrieval metrics."""
    if isinstance(items, str):
        items = [items]
    if not isinstance(items, list | tuple):
        return ()
    return tuple(_unique(t for t in items if isinstance(t, str) and t))


def _shape(message: str) -> WrapValidator:
    """Any error inside the value reads as ``message``: the shape it must have, said once."""

    def validate(value: Any, handler: Any) -> Any:
        try:
            return handler(value)
        except ValidationError:
            raise PydanticCustomError("shape", message) from None

    return WrapValidator(validate)


# A required non-empty string, stripped (the IRCoT lists have stray spaces).
Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
Answer = Annotated[Text, BeforeValidator(_as_text)]
# A non-empty list of distinct answers; a bare string is a list of one.
Strings = Annotated[
    list[Answer], BeforeValidator(_listed), Field(min_length=1), AfterValidator(_unique)
]
# The same, where an absent or empty list means none.
Aliases = Annotated[list[Answer], BeforeValidator(_listed_or_none), AfterValidator(_unique)]
RecordId = Annotated[str | None, PlainValidator(_record_id)]
YesNo = Annotated[list[str], PlainValidator(_yes_no)]
Titles = Annotated[tuple[str, ...], PlainValidator(_titles)]
Task = Annotated[str, PlainValidator(_task)]

_STRINGS = TypeAdapter(Strings)
_YES_NO = TypeAdapter(YesNo)
_ASQA_GOLDS = TypeAdapter(Annotated[list[Strings], Field(min_length=1)])  # one per QA pair


class _Invalid(Exception):
    """A field checked after its record's model (its shape depends on another field)."""


T = TypeVar("T")


def _check(adapter: TypeAdapter[T], key: str, value: Any) -> T:
    try:
        return adapter.validate_python(value)
    except ValidationError as exc:
        raise _Invalid(error_line(exc.errors()[0], prefix=(key,))) from None


def _open_golds(value: Any, key: str) -> tuple[str, list[Any]]:
    """(task, golds) for formats that say nothing else: booleans are StrategyQA-style."""
    if isinstance(value, bool) or (
        isinstance(value, list) and len(value) == 1 and isinstance(value[0], bool)
    ):
        return "strategyqa", _check(_YES_NO, key, value)
    return "multihop", _check(_STRINGS, key, value)


# --------------------------------------------------------------------------- question formats


class Format(BaseModel):
    """A record of one format: the fields a question needs, under the format's own names
    (aliases); any other field is ignored. Each format declares ``id`` (absent: the id is
    ``generated_id``, from the question's text) and ``question`` itself, after the fields that
    tell it from the others: a record of another format is named by what it lacks first."""

    model_config = ConfigDict(frozen=True)
    # The dataset every record of the format comes from; None: named by the file's path.
    DATASET: ClassVar[str | None] = None
    if TYPE_CHECKING:
        id: str | None
        question: str

    def golds(self) -> tuple[str, list[Any]]:
        """(task, golds) of the question."""
        raise NotImplementedError

    def titles(self) -> tuple[str, ...]:
        """The titles of the supporting paragraphs, when the format marks them."""
        return ()

    def dataset_name(self, from_path: str) -> str:
        return self.DATASET or from_path

    def example(self, from_path: str) -> Example:
        """The record as an Example; ``from_path`` (the dataset's name read from the file's
        path) names its dataset when nothing else does."""
        dataset = self.dataset_name(from_path)
        task, golds = self.golds()
        return Example(
            id=self.id or generated_id(dataset, self.question),
            question=self.question,
            golds=golds,
            task=task,
            dataset=dataset,
            supporting_titles=self.titles(),
        )


def generated_id(dataset: str, question: str) -> str:
    """The id of a record without one: ``<dataset>-<12 hex digits of the question's SHA-1>``.
    From the content, not the position, so that a question added, removed or moved elsewhere
    in the file leaves every other question its id (a resumed run stays bound to its
    questions), and an edited gold keeps the id (so the edit is seen, not a new question)."""
    digest = hashlib.sha1(question.encode("utf-8")).hexdigest()[:12]
    return f"{dataset}-{digest}"


class NoteragRecord(Format):
    """Ours: ``{id, dataset, question, answers, supporting_titles}`` and an optional ``task``
    (default multihop) that decides the shape of ``answers``."""

    answers: Any
    task: Task | None = None  # absent: multihop, unless the answers are booleans
    id: RecordId = None
    question: Text
    dataset: Any = None
    supporting_titles: Titles = ()

    def golds(self) -> tuple[str, list[Any]]:
        # Checked here, not by the field's type: their shape depends on the task.
        if self.task is None:
            return _open_golds(self.answers, "answers")
        if self.task == "strategyqa":
            return self.task, _check(_YES_NO, "answers", self.answers)
        if self.task == "asqa":
            return self.task, _check(_ASQA_GOLDS, "answers", self.answers)
        return self.task, _check(_STRINGS, "answers", self.answers)

    def titles(self) -> tuple[str, ...]:
        return self.supporting_titles

    def dataset_name(self, from_path: str) -> str:
        return self.dataset if isinstance(self.dataset, str) else from_path


class HotpotRecord(Format):
    """HotpotQA: ``_id, question, answer, supporting_facts [[title, sentence], ...]``."""

    DATASET: ClassVar[str | None] = "hotpotqa"
    supporting_facts: Annotated[list[Any], BeforeValidator(lambda v: v or [])] = []
    id: RecordId = Field(None, alias="_id")
    question: Text
    answer: Text

    def golds(self) -> tuple[str, list[Any]]:
        return "multihop", [self.answer]

    def titles(self) -> tuple[str, ...]:
        return _titles([f[0] for f in self.supporting_facts if isinstance(f, list) and f])


class TwoWikiRecord(HotpotRecord):
    """2WikiMultihopQA: HotpotQA's fields (plus ``evidences``, ``answer_id``)."""

    DATASET: ClassVar[str | None] = "2wikimultihopqa"


class MusiqueRecord(Format):
    """MuSiQue: ``id, question, answer, answer_aliases, paragraphs [{is_supporting}]``."""

    DATASET: ClassVar[str | None] = "musique"
    answer: Text
    answer_aliases: Aliases = []
    id: RecordId = None
    question: Text
    paragraphs: Any = None

    def golds(self) -> tuple[str, list[Any]]:
        return "multihop", _unique([self.answer, *self.answer_aliases])

    def titles(self) -> tuple[str, ...]:
        return _supporting(self.paragraphs)


def _supporting(paragraphs: Any) -> tuple[str, ...]:
    """The titles of the ``{"title", "is_supporting"}`` objects marked supporting."""
    items = paragraphs if isinstance(paragraphs, list) else []
    return _titles(
        [p.get("title") for p in items if isinstance(p, dict) and p.get("is_supporting")]
    )


class AnswerObject(BaseModel):
    """One of IRCoT's (DROP-style) answers: spans, or a number, or a date (day month year)."""

    spans: Aliases = []
    number: Any = None
    date: Any = None

    def golds(self) -> list[str]:
        golds = list(self.spans)
        if str(self.number or "").strip():
            golds.append(str(self.number).strip())
        date = self.date if isinstance(self.date, dict) else {}
        parts = [str(date.get(k) or "").strip() for k in ("day", "month", "year")]
        if any(parts):
            golds.append(" ".join(p for p in parts if p))
        return golds


class IrcotRecord(Format):
    """IRCoT-processed: ``question_id, question_text, answers_objects, contexts``."""

    id: RecordId = Field(None, alias="question_id")
    question: Text = Field(alias="question_text")
    answers_objects: list[AnswerObject]
    contexts: Any = None

    @field_validator("answers_objects")
    @classmethod
    def _some_answer(cls, objects: list[AnswerObject]) -> list[AnswerObject]:
        if not any(o.golds() for o in objects):
            raise PydanticCustomError("no_answer", "holds no answer")
        return objects

    def golds(self) -> tuple[str, list[Any]]:
        # Every span, number and date, as aliases.
        return "multihop", _unique(g for o in self.answers_objects for g in o.golds())

    def titles(self) -> tuple[str, ...]:
        return _supporting(self.contexts)


class AdaptiveNoteRecord(Format):
    """The test lists of Adaptive-Note/DeepNote: ``{question, answer: [str]}`` without ids."""

    answer: Any
    id: RecordId = None
    question: Text

    def golds(self) -> tuple[str, list[Any]]:
        return _open_golds(self.answer, "answer")


class FlashRAGRecord(Format):
    """FlashRAG: ``{id?, question, golden_answers: [str]}``."""

    golden_answers: Any
    id: RecordId = None
    question: Text

    def golds(self) -> tuple[str, list[Any]]:
        return _open_golds(self.golden_answers, "golden_answers")


class StrategyQARecord(Format):
    """StrategyQA: ``qid, question, answer: bool, facts``."""

    DATASET: ClassVar[str | None] = "strategyqa"
    id: RecordId = Field(None, validation_alias=AliasChoices("qid", "id"))
    question: Text
    answer: YesNo

    def golds(self) -> tuple[str, list[Any]]:
        return "strategyqa", self.answer


class QAPair(BaseModel):
    """One reading of an ambiguous ASQA question."""

    short_answers: Strings
    wikipage: Any = None


class AsqaRecord(Format):
    """ALCE's ASQA: ``question, qa_pairs [{short_answers, wikipage}], sample_id, docs``; the
    Hugging Face ASQA names the question ``ambiguous_question``."""

    DATASET: ClassVar[str | None] = "asqa"
    id: RecordId = Field(None, validation_alias=AliasChoices("sample_id", "id"))
    question: Text = Field(validation_alias=AliasChoices("question", "ambiguous_question"))
    qa_pairs: Annotated[list[QAPair], Field(min_length=1)]

    def golds(self) -> tuple[str, list[Any]]:
        # One list of short answers per reading of the question.
        return "asqa", [p.short_answers for p in self.qa_pairs]

    def titles(self) -> tuple[str, ...]:
        return _titles([p.wikipage for p in self.qa_pairs])


class CrudRecord(Format):
    """CRUD's question-answering records (IAAR-Shanghai/CRUD_RAG data/crud_split/
    split_merged.json's ``questanswer_1doc`` / ``_2docs`` / ``_3docs`` items, as its
    src/tasks/quest_answer.py reads them): ``ID, questions, answers`` (one question, its
    reference answer text) and the news. Task crud: scored by RAGQuestEval with a judge
    (noterag.eval.questeval), its ground truth keyed by ``ID``."""

    DATASET: ClassVar[str | None] = "crud"
    id: RecordId = Field(None, alias="ID")
    question: Text = Field(alias="questions")
    answers: Text

    def golds(self) -> tuple[str, list[Any]]:
        return "crud", [self.answers]


# format name -> its model (FORMATS keeps this order).
QUESTION_FORMATS: dict[str, type[Format]] = {
    "noterag": NoteragRecord,
    "hotpotqa": HotpotRecord,
    "2wikimultihopqa": TwoWikiRecord,
    "musique": MusiqueRecord,
    "ircot": IrcotRecord,
    "adaptive-note": AdaptiveNoteRecord,
    "strategyqa": StrategyQARecord,
    "asqa": AsqaRecord,
    "flashrag": FlashRAGRecord,
    "crud": CrudRecord,
}


# --------------------------------------------------------------------------- paragraphs
# The paragraphs a pooled format carries, read by their own models: a question whose
# paragraphs are malformed can still be asked, and pooling does not judge the questions.

Paragraph = tuple[str, str]
# A title that is not a string is no title.
Title = Annotated[str, BeforeValidator(lambda v: v if isinstance(v, str) else "")]


class Paragraphs(BaseModel):
    def pairs(self) -> list[Paragraph] | None:
        """(title, text) of each paragraph, or None when the record carries none."""
        raise NotImplementedError


class HotpotParagraphs(Paragraphs):
    # [title, [sentence, ...]] per paragraph
    context: (
        list[Annotated[tuple[str, list[str]], _shape("must be [title, [sentence, ...]]")]] | None
    ) = None

    def pairs(self) -> list[Paragraph] | None:
        # Sentences are joined with one space, as IRCoT's processing did.
        return None if self.context is None else [(t, " ".join(s)) for t, s in self.context]


class KeyedParagraph(BaseModel):
    title: Title = ""
    paragraph_text: str


class MusiqueParagraphs(Paragraphs):
    paragraphs: list[KeyedParagraph] | None = None

    def pairs(self) -> list[Paragraph] | None:
        items = self.paragraphs
        return None if items is None else [(p.title, p.paragraph_text) for p in items]


class IrcotParagraphs(Paragraphs):
    contexts: list[KeyedParagraph] | None = None

    def pairs(self) -> list[Paragraph] | None:
        items = self.contexts
        return None if items is None else [(p.title, p.paragraph_text) for p in items]


class AlceDoc(BaseModel):
    title: Title = ""
    text: str


class AlceParagraphs(Paragraphs):
    # ALCE's retrieved documents, when the file has them
    docs: list[AlceDoc] | None = None

    def pairs(self) -> list[Paragraph] | None:
        return None if self.docs is None else [(d.title, d.text) for d in self.docs]


PARAGRAPH_FORMATS: dict[str, type[Paragraphs]] = {
    "hotpotqa": HotpotParagraphs,
    "2wikimultihopqa": HotpotParagraphs,
    "musique": MusiqueParagraphs,
    "ircot": IrcotParagraphs,
    "asqa": AlceParagraphs,
}


# --------------------------------------------------------------------------- reading a record


def parse_example(fmt: str, record: Record, from_path: str) -> Example:
    """The Example of ``record`` in format ``fmt``; a ``DatasetError`` naming the record and
    the field when it breaks the format."""
    try:
        model = QUESTION_FORMATS[fmt].model_validate(_present(record.obj))
        return model.example(from_path)
    except ValidationError as exc:
        raise DatasetError(f"{record.where}: {error_line(exc.errors()[0])}") from None
    except _Invalid as exc:
        raise DatasetError(f"{record.where}: {exc}") from None


def parse_paragraphs(fmt: str, record: Record) -> list[Paragraph] | None:
    """The (title, text) paragraphs of ``record``, or None when it has none."""
    try:
        return PARAGRAPH_FORMATS[fmt].model_validate(_present(record.obj)).pairs()
    except ValidationError as exc:
        raise DatasetError(f"{record.where}: {error_line(exc.errors()[0])}") from None


def _present(obj: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in obj.items() if value is not None}


# pydantic's error type -> how the message goes on after the field's name.
_PHRASES = {
    "string_type": "must be a string, got {got}",
    "string_too_short": "is empty",
    "too_short": "is empty",
    "list_type": "must be a list, got {got}",
    "tuple_type": "must be a list, got {got}",
    "model_type": "must be an object, got {got}",
    "dict_type": "must be an object, got {got}",
    "literal_error": "must be one of {expected}, got {shown}",
}


def error_line(error: ErrorDetails, prefix: tuple[str | int, ...] = ()) -> str:
    """One pydantic error as our one line: ``"answers" item 2 is empty``, ``missing
    "question"``, ``"qa_pairs" item 2 has no "short_answers"``."""
    loc = (*prefix, *error["loc"])
    if error["type"] == "missing":
        *parent, key = loc
        return f'{_subject(parent)} has no "{key}"' if parent else f'missing "{key}"'
    phrase = _PHRASES.get(error["type"])
    if phrase is None:  # a custom error carries its words; pydantic's own, its message
        return f"{_subject(loc)} {error['msg']}"
    value = error.get("input")
    shown = json.dumps(value, default=str)[:40]
    return f"{_subject(loc)} {phrase.format(got=json_type(value), shown=shown, **error.get('ctx', {}))}"


_subject = field_subject  # the field naming the record reader's errors share


# --------------------------------------------------------------------------- format names

FORMATS = tuple(QUESTION_FORMATS)
# Other names users are likely to type for the same formats.
_FORMAT_ALIASES = {"jsonl": "noterag", "2wiki": "2wikimultihopqa", "alce": "asqa"}


def check_format(name: str) -> str:
    """The format ``name`` stands for (one of ``FORMATS``), or a ``ConfigError``."""
    fmt = _FORMAT_ALIASES.get(name.lower(), name.lower())
    if fmt not in FORMATS:
        raise ConfigError(f"unknown dataset format {name!r} (choose from: {', '.join(FORMATS)})")
    return fmt


def detect(record: Record) -> str:
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
    if "ID" in obj and "questions" in obj and "answers" in obj:
        return "crud"
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
