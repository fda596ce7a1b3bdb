"""How the command line writes to the terminal: the stderr console, and the graph's progress
events (its ``custom`` stream) rendered as one line each.

Each event type of the shared steps (retrieve, the note steps, answer) has a small renderer in
``RENDERERS`` (event -> a line, several lines, or nothing). ``renderers_for(spec)`` adds the
method's own from its declaration (``MethodSpec.progress``), so a new method's events show
without a change here; an event type nobody renders prints nothing.

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


RENDERERS: dict[str, Renderer] = {
    "passages": passages_line,
    "note": note_line,
    "queries": queries_lines,
    "verdict": verdict_line,
    "answer": answer_line,
}

# What the spinner says after an event: the step the graph is in now.
SPINNER: dict[str, Callable[[Event], str]] = {
    "passages": lambda e: "writing the note…" if e.get("step") == 0 else "updating the note…",
    "note": lambda e: "thinking…",
    "queries": lambda e: "retrieving…",
    "verdict": lambda e: "thinking…",
}


def renderers_for(spec: MethodSpec) -> Mapping[str, Renderer]:
    """The generic renderers and the method's own (its declaration's ``progress``), which win
    over ``RENDERERS`` for its events."""
    return RENDERERS | dict(spec.progress)


class Progress:
    """Renders the graph's custom events as one line each on stderr."""

    def __init__(self, console: Console, spec: MethodSpec) -> None:
        self.console = console
        self.renderers = renderers_for(spec)
        self._status: Status | None = None

    @contextmanager
    def live(self) -> Iterator[None]:
        if self.console.quiet or not self.console.is_terminal:
            yield
            return
        with self.console.status("retrieving…") as spinner:
            self._status = spinner
            try:
                yield
            finally:
                self._status = None

    def event(self, event: Any) -> None:
        if not isinstance(event, dict) or not isinstance(kind := event.get("type"), str):
            return
        if kind not in self.renderers and kind not in SPINNER:
            return  # e.g. the engine's retrieval events: passage text no line shows
        # Every renderer (the methods' own too) sees the event's text already made printable.
        event = printable_value(event)
        render = self.renderers.get(kind)
        rendered = render(event) if render is not None else None
        for text in [rendered] if isinstance(rendered, Text | str) else rendered or []:
            self._say(event.get("step"), text)
        if kind in SPINNER and self._status is not None:
            self._status.update(SPINNER[kind](event))

    def _say(self, step: int | None, text: Text | str) -> None:
        line = Text(f"[step {step}] " if step is not None else "", style="dim")
        line.append_text(text if isinstance(text, Text) else Text(text))
        self.console.print(line)
