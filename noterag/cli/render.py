"""How the command line writes to the terminal: the stderr console, and the graph's progress
events (its ``custom`` stream) rendered as one line each.

Each event type of the shared steps (retrieve, the note steps, answer) has a small renderer in
``RENDERERS`` (event -> a line, several lines, or nothing). ``renderers_for(spec)`` adds the
method's own from its declaration (``MethodSpec.progress``); an event type neither renders is
shown by ``generic_line`` (its type and a short summary of its fields), so a new method's events
show without a change here. Only the engine's ``retrieval`` events print nothing: they carry the
passages' text for the trace page, and the step's own event reports the search.

The spinner names the step the graph runs now: the node whose task started last (the stream's
``tasks`` mode, ``Progress.task``), as the method's wiring names it (``deepnote · accumulate…``).

Text from outside noterag (passage titles and text, model replies, endpoint error messages,
file names) reaches the terminal only through ``printable``, which removes what a terminal
would act on rather than show: escape sequences (colours, cursor moves, window titles,
hyperlinks, screen clears), the C1 controls and the C0 controls but newline and tab. Rich's
markup escaping does not: it leaves ESC alone; where such text goes into rich markup (a
summary's cells, a progress line) ``safe`` does both. The progress lines, the answer, the
summary and every ``error:`` line go through them; ``--json`` escapes those characters instead (``\\u001b``),
so the data stays whole.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from rich.console import Console
from rich.status import Status
from rich.text import Text

from noterag.base.terminal import printable_value

# The escaping of untrusted text (noterag.base.terminal: the eval and reproduce layers use it too).
from noterag.core.spec import MethodSpec
from noterag.core.step import RETRIEVAL

Event = dict[str, Any]
# One line, several lines (each gets the step prefix), or None to print nothing; a plain str
# is a line without style.
Renderer = Callable[[Event], Text | str | list[Text] | list[str] | None]


def stderr_console(quiet: bool = False) -> Console:
    # soft_wrap: a long line stays one line when stderr is a file or pipe.
    return Console(stderr=True, quiet=quiet, highlight=False, soft_wrap=True)


def status(console: Console, message: str) -> AbstractContextManager[Any]:
    """A spinner with ``message`` while the block runs, only on a terminal and when not quiet."""
    if console.quiet or not console.is_terminal:
        return nullcontext()
    return console.status(message)


def plural(n: int, word: str) -> str:
    return word if n == 1 else word + "s"


# --------------------------------------------------------------------------- renderers


def passages_line(event: Event) -> Text:
    step, passages = event.get("step"), event.get("passages") or []
    titles = [p.get("title") or p.get("id", "?") for p in passages]
    noun = plural(len(passages), "passage")
    what = f"{noun} for the question" if step == 0 else f"new {noun}"
    text = Text(f"retrieved {len(passages)} {what}", style="cyan")
    if titles:
        text.append(": " + " · ".join(titles))
    return text


def note_line(event: Event) -> Text:
    words = len(str(event.get("note") or "").split())
    return Text(f"initial note written ({words} words)", style="cyan")


def queries_lines(event: Event) -> list[Text]:
    queries = event.get("queries") or []
    if not queries:
        return [Text("no new query", style="yellow")]
    return [Text("new query: ", style="cyan") + Text(str(query)) for query in queries]


def verdict_line(event: Event) -> Text:
    reason = str(event.get("reason") or "")
    if event.get("accepted"):
        text = Text("note accepted", style="green")
    else:
        text = Text("note rejected", style="red")
    if reason:
        text.append(f" ({reason})")
    return text


def answer_line(event: Event) -> Text | None:
    # On a terminal the answer follows on stdout; repeat it here only when stdout goes
    # elsewhere, so the person watching still sees it.
    if sys.stdout.isatty():
        return None
    return Text("answer: ", style="bold") + Text(str(event.get("answer", "")))


def condensed_line(event: Event) -> Text:
    # a follow-up on a thread, rewritten from the conversation (noterag.core.question)
    text = Text("follow-up read as: ", style="cyan") + Text(str(event.get("question", "")))
    if event.get("fallback"):
        text.append(f" (its rewrite was {event['fallback']}: kept as asked)", style="yellow")
    return text


RENDERERS: dict[str, Renderer] = {
    "condensed": condensed_line,
    "passages": passages_line,
    "note": note_line,
    "queries": queries_lines,
    "verdict": verdict_line,
    "answer": answer_line,
}

# Events no line shows: the engine's record of each search (the passages' text, for the trace
# page); the step that searched reports it with an event of its own.
SILENT = frozenset({RETRIEVAL})

# How much of an event a generic line shows: each text value cut to FIELD characters, the whole
# line to LINE.
FIELD, LINE = 60, 160


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


def generic_line(event: Event) -> Text:
    """The line of an event type no renderer knows: its type and its fields, briefly
    (``confidence: score=0.92 · reason=the passage names the architect``)."""
    fields = " · ".join(
        f"{key}={_brief(value)}" for key, value in event.items() if key not in ("type", "step")
    )
    text = Text(str(event["type"]), style="cyan")
    if fields:
        rest = LINE - len(text)
        text.append(": " + (fields if len(fields) <= rest else fields[: rest - 1] + "…"))
    return text


def renderers_for(spec: MethodSpec) -> Mapping[str, Renderer]:
    """The generic renderers and the method's own (its declaration's ``progress``), which win
    over ``RENDERERS`` for its events."""
    return RENDERERS | dict(spec.progress)


class Progress:
    """Renders the graph's custom events as one line each on stderr, and names the running
    step in a spinner (fed the ``tasks`` stream: ``MODES``)."""

    # the stream modes ``event`` and ``task`` read
    MODES = ("custom", "tasks")

    def __init__(self, console: Console, spec: MethodSpec) -> None:
        self.console = console
        self.method = spec.name
        self.renderers = renderers_for(spec)
        self._status: Status | None = None
        self._running: dict[str, str] = {}  # task id -> node, in the order they started
        self.spinner = f"{spec.name}…"  # what the spinner says (also off a terminal)

    @contextmanager
    def live(self) -> Iterator[None]:
        if self.console.quiet or not self.console.is_terminal:
            yield
            return
        with self.console.status(Text(self.spinner)) as spinner:
            self._status = spinner
            try:
                yield
            finally:
                self._status = None

    def feed(self, mode: str, chunk: Any) -> None:
        """One chunk of a stream with (some of) ``MODES``."""
        if mode == "custom":
            self.event(chunk)
        elif mode == "tasks":
            self.task(chunk)

    def event(self, event: Any) -> None:
        if not isinstance(event, dict) or not isinstance(kind := event.get("type"), str):
            return
        if kind in SILENT:
            return
        # Every renderer (the methods' own too) sees the event's text already made printable.
        event = printable_value(event)
        rendered = self.renderers.get(kind, generic_line)(event)
        for text in [rendered] if isinstance(rendered, Text | str) else rendered or []:
            self._say(event.get("step"), text)

    def task(self, chunk: Any) -> None:
        """A task of the ``tasks`` stream started (it has ``input``) or ended (``result``):
        the spinner names the steps running now, else the last one that ran."""
        if not isinstance(chunk, dict) or not isinstance(name := chunk.get("name"), str):
            return
        if name.startswith("__"):  # LangGraph's own (__start__, interrupts)
            return
        if "input" in chunk:
            self._running[str(chunk.get("id"))] = name
        else:
            self._running.pop(str(chunk.get("id")), None)
            return  # the step's name stays until the next one starts
        steps = " + ".join(dict.fromkeys(self._running.values()))
        self.spinner = printable_value(f"{self.method} · {steps}…")
        if self._status is not None:
            self._status.update(Text(self.spinner))  # text, not rich markup

    def _say(self, step: int | None, text: Text | str) -> None:
        line = Text(f"[step {step}] " if step is not None else "", style="dim")
        line.append_text(text if isinstance(text, Text) else Text(text))
        self.console.print(line)
