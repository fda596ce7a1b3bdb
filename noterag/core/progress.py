"""What a method shows while it runs, as data: the line each of its progress events (its
``stream_mode="custom"`` events) becomes, declared in its ``MethodSpec.progress``.

A line is a few parts, each a Jinja2 template over the event's fields (``"kept {{ title }}"``),
drawn in the line's style (``"cyan"``, or one chosen by a field: ``"{{ 'green' if useful else
'red' }}"``); a part may have a style of its own and, where it shows only sometimes, a condition
(a Jinja2 expression, ``when="fallback"``). A line may show only when its own condition holds,
once per item of a list field (``each="queries"``: the item is ``item``), or continue the line
before it on a line of its own (``follows=True``: no step prefix). The templates read the
event's fields by name (an absent field is empty and false) and the whole event as ``event``;
they have Jinja2's filters, ``repr``, ``titles`` (a list of passages by title, `` · ``-separated)
and ``words`` (a text's word count).

``progress_lines(declared, event)`` turns an event into what to show: lines of (text, style)
segments. Two readers draw them: the command line (noterag.cli.render, in the terminal's
colours) and the trace page (noterag.trace.page, each style a CSS class); neither holds a
method's wording, and no graph, node or prompt module imports terminal code
(tests/test_progress_lines.py scans them). ``SHARED`` holds the lines of the events the shared
steps send (retrieval, the note steps, the answer, a follow-up's rewrite); an event type
neither a method nor ``SHARED`` declares shows as ``generic`` says (its type and its fields,
briefly), so a new method's events show without any declaration. So does an event whose fields
its declared line cannot read (a run file from elsewhere): a line never raises.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, get_args

if TYPE_CHECKING:
    import jinja2

# The styles a part may take: what the terminal and the page both have a colour for.
Style = Literal["", "cyan", "green", "yellow", "red", "bold", "dim"]
STYLES: frozenset[str] = frozenset(get_args(Style))


@dataclass(frozen=True)
class Part:
    """A piece of a line: ``text``, a Jinja2 template over the event's fields, drawn in
    ``style``; shown only when ``when`` (a Jinja2 expression over the same fields) is true."""

    text: str
    style: Style = ""
    when: str | None = None

    def __post_init__(self) -> None:
        if self.style not in STYLES:
            raise ValueError(f"unknown progress style {self.style!r}: one of {sorted(STYLES)}")


@dataclass(frozen=True, init=False)
class Line:
    """One line of an event: its parts in order (a plain string is a part without a style of
    its own), drawn in ``style`` (a style name, or a Jinja2 template that gives one:
    ``"{{ 'green' if accepted else 'red' }}"``), which a part's own style overrides. ``when``:
    the line shows only when this expression is true. ``each``: the line shows once per item of
    this field (the item is ``item``). ``follows``: the line continues the one before it (no
    step prefix)."""

    parts: tuple[Part, ...]
    style: str
    when: str | None
    each: str | None
    follows: bool

    def __init__(
        self,
        *parts: Part | str,
        style: str = "",
        when: str | None = None,
        each: str | None = None,
        follows: bool = False,
    ) -> None:
        if "{" not in style and style not in STYLES:
            raise ValueError(f"unknown progress style {style!r}: one of {sorted(STYLES)}")
        whole = tuple(part if isinstance(part, Part) else Part(part) for part in parts)
        object.__setattr__(self, "parts", whole)
        object.__setattr__(self, "style", style)
        object.__setattr__(self, "when", when)
        object.__setattr__(self, "each", each)
        object.__setattr__(self, "follows", follows)


# An event type's lines: one Line, or several in order (each shows where its condition holds).
Lines = Line | Sequence[Line]
# A method's declaration: event type -> its lines.
Declared = Mapping[str, Lines]


class Shown(NamedTuple):
    """A line to draw: its (text, style) segments over the line's own style (a segment's style,
    where it has one, wins), and whether it continues the line before."""

    segments: tuple[tuple[str, str], ...]
    style: str = ""
    follows: bool = False

    @property
    def plain(self) -> str:
        return "".join(text for text, _style in self.segments)


def _repr(value: Any) -> str:
    return repr(value)


def _words(text: Any) -> int:
    """How many words a text has (split at whitespace; no text: 0)."""
    return len(str(text or "").split())


def _titles(passages: Any) -> str:
    """The passages of an event by title (by id where a passage has none), `` · ``-separated."""
    return " · ".join(
        str(p.get("title") or p.get("id", "?")) for p in _items(passages) if isinstance(p, Mapping)
    )


@functools.cache
def _env() -> jinja2.Environment:
    import jinja2

    # Plain text out (each reader escapes for its own medium); an absent field is empty and
    # false at any depth (``passages[0].title`` of an event without passages); a template's
    # last newline kept (a part may end a line).
    env = jinja2.Environment(
        autoescape=False, undefined=jinja2.ChainableUndefined, keep_trailing_newline=True
    )
    env.filters["repr"] = _repr
    env.filters["titles"] = _titles
    env.filters["words"] = _words
    return env


@functools.cache
def _template(source: str) -> jinja2.Template:
    return _env().from_string(source)


@functools.cache
def _expression(source: str) -> Callable[..., Any]:
    return _env().compile_expression(source)


def _fields(event: Mapping[str, Any]) -> dict[str, Any]:
    return {**event, "event": event}


def _holds(condition: str | None, fields: Mapping[str, Any]) -> bool:
    return condition is None or bool(_expression(condition)(**fields))


def _items(value: Any) -> list[Any]:
    if value is None or isinstance(value, str | bytes | Mapping):
        return []
    try:
        return list(value)
    except TypeError:  # an undefined field, a number: nothing to go through
        return []


def line(declared: Line, fields: Mapping[str, Any]) -> Shown:
    """``declared``'s parts filled from ``fields`` (those whose condition holds)."""
    segments = []
    for part in declared.parts:
        if _holds(part.when, fields):
            # a text without a tag is itself: no template compiled for it
            text = _template(part.text).render(fields) if "{" in part.text else part.text
            if text:
                segments.append((text, part.style))
    style = declared.style
    if "{" in style:
        style = _template(style).render(fields).strip()
        if style not in STYLES:
            raise ValueError(f"unknown progress style {style!r}: one of {sorted(STYLES)}")
    return Shown(tuple(segments), style, declared.follows)


def lines(declared: Lines, event: Mapping[str, Any]) -> list[Shown]:
    """What ``event`` shows as its declared ``lines``: each line whose condition holds, once per
    item of its ``each`` field."""
    fields = _fields(event)
    found: list[Shown] = []
    for each in [declared] if isinstance(declared, Line) else declared:
        if not _holds(each.when, fields):
            continue
        if each.each is None:
            found.append(line(each, fields))
            continue
        for item in _items(fields.get(each.each)):
            found.append(line(each, {**fields, "item": item}))
    return found


def check_shape(declared: Any) -> None:
    """Raise TypeError, naming the event type, unless ``declared`` maps event types to a
    ``Line`` or a sequence of them (a function returning rich ``Text``, what 0.1 declared,
    would otherwise show every event as its generic line)."""
    if not isinstance(declared, Mapping):
        raise TypeError(f"progress must map event types to lines, not {type(declared).__name__}")
    for kind, found in declared.items():
        many = isinstance(found, Sequence) and not isinstance(found, str)
        if not isinstance(found, Line) and not (many and all(isinstance(x, Line) for x in found)):
            raise TypeError(
                f"progress[{kind!r}] must be a noterag.core.progress.Line or a sequence of them, "
                f"not {type(found).__name__}"
            )


def check(declared: Declared) -> None:
    """Compile every template and condition of a declaration, so that a typo fails in the tests
    (tests/test_progress_lines.py) rather than on the event's first appearance in a run."""
    import jinja2

    check_shape(declared)
    for kind, found in declared.items():
        for each in [found] if isinstance(found, Line) else found:
            try:
                for source in [each.when, *(p.when for p in each.parts)]:
                    if source is not None:
                        _expression(source)
                for text in [each.style, *(p.text for p in each.parts)]:
                    _template(text)
            except jinja2.TemplateSyntaxError as exc:  # named with its event type
                raise ValueError(f"progress line of {kind!r}: {exc}") from None


# --------------------------------------------------------------------------- the shared steps

# The events the shared steps send (nodes/retrieve.py, nodes/notes.py, nodes/answer.py, the
# question step's follow-up rewrite in noterag.core.question). A method's own declaration wins
# over these for its events.
SHARED: dict[str, Lines] = {
    "condensed": Line(
        "follow-up read as: {{ question | default('') }}",
        Part(" (its rewrite was {{ fallback }}: kept as asked)", "yellow", when="fallback"),
        style="cyan",
    ),
    "passages": Line(
        "retrieved {{ passages | length }} {{ 'new ' if step != 0 }}"
        "{{ 'passage' if passages | length == 1 else 'passages' }}"
        "{{ ' for the question' if step == 0 }}",
        Part(": {{ passages | titles }}", when="passages"),
        style="cyan",
    ),
    "note": Line("initial note written ({{ note | words }} words)", style="cyan"),
    "queries": (
        Line("no new query", style="yellow", when="not queries"),
        Line("new query: {{ item }}", style="cyan", each="queries"),
    ),
    "verdict": Line(
        "note {{ 'accepted' if accepted else 'rejected' }}",
        Part(" ({{ reason }})", when="reason"),
        style="{{ 'green' if accepted else 'red' }}",
    ),
    "answer": Line("answer: {{ answer | default('') }}", style="bold"),
}


# How much of an event a generic line shows: each text value cut to FIELD characters, the whole
# line to LINE.
FIELD, LINE = 60, 160


def plural(n: int, word: str) -> str:
    return word if n == 1 else word + "s"


def _brief(value: Any) -> str:
    """One field of an event in a few words: a text on one line and cut, a list by its items
    (scalars shown, anything else counted), a dict by its number of fields."""
    if isinstance(value, str):
        text = " ".join(value.split())
    elif isinstance(value, list | tuple):
        if all(isinstance(item, str | int | float | bool) or item is None for item in value):
            text = "[" + ", ".join(_brief(item) for item in value) + "]"
        else:
            text = f"{len(value)} {plural(len(value), 'item')}"
    elif isinstance(value, dict):
        text = f"{{{len(value)} {plural(len(value), 'field')}}}"
    else:
        text = str(value)
    return text if len(text) <= FIELD else text[: FIELD - 1] + "…"


def generic(event: Mapping[str, Any]) -> Shown:
    """The line of an event type nobody declares: its type and its fields, briefly
    (``confidence: score=0.92 · reason=the passage names the architect``)."""
    fields = " · ".join(
        f"{key}={_brief(value)}" for key, value in event.items() if key not in ("type", "step")
    )
    kind = str(event["type"])
    if not fields:
        return Shown(((kind, ""),), "cyan")
    rest = LINE - len(kind)
    return Shown(
        ((kind, ""), (": " + (fields if len(fields) <= rest else fields[: rest - 1] + "…"), "")),
        "cyan",
    )


def progress_lines(declared: Declared, event: Mapping[str, Any]) -> list[Shown]:
    """What an event of a run shows: its method's declared lines for its type, else the shared
    steps' (``SHARED``), else its generic line (also where the declared lines cannot read its
    fields)."""
    import jinja2

    kind = event["type"]
    found = declared.get(kind, SHARED.get(kind))
    if found is None:
        return [generic(event)]
    try:
        return lines(found, event)
    except (TypeError, ValueError, LookupError, ArithmeticError, jinja2.TemplateError):
        # fields of another shape than the method sends (a run file from elsewhere, a number
        # given as text): the event shows as it is
        return [generic(event)]
