"""How the command line writes to the terminal: the stderr console, and the graph's progress
events (its ``custom`` stream) rendered as one line each.

Each event type has a small renderer in ``RENDERERS`` (event -> a line, several lines, or
nothing). ``renderers_for(method)`` adds a method's own renderers on top, so a new method's
events show without an ``elif`` here; an event type nobody renders prints nothing.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from rich.console import Console
from rich.status import Status
from rich.text import Text

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


def filter_line(event: Event) -> Text:
    useful = event.get("useful")
    text = Text("kept " if useful else "filtered out ", style="green" if useful else "red")
    text.append(str(event.get("title") or event.get("id", "?")))
    if not event.get("parsed", True):
        text.append(" (verdict did not parse: kept)", style="yellow")
    return text


def sentences_line(event: Event) -> Text:
    count = len(event.get("passages") or [])
    return Text(f"extracted helpful sentences of {count} {plural(count, 'passage')}", style="cyan")


def memory_review_line(event: Event) -> Text:
    return Text(f"{event.get('agent', 'agent')} revised the memory draft", style="cyan")


def sufficiency_line(event: Event) -> Text:
    sufficient, reason = event.get("sufficient"), str(event.get("reason") or "")
    if sufficient:
        text = Text("memory sufficient to answer", style="green")
    else:
        text = Text("memory not sufficient yet", style="yellow")
    return text.append(f" ({reason})" if reason else "")


def summaries_line(event: Event) -> Text:
    text = Text("summarised the evidence", style="cyan")
    if event.get("local_summary"):
        text.append(" (global and local pathway)")
    return text


def judgment_line(event: Event) -> Text:
    if event.get("sufficient"):
        return Text("reasoner: enough to answer", style="green")
    extra = "" if event.get("parsed", True) else " (reply did not parse)"
    return Text("reasoner: not enough yet" + extra, style="yellow")


def sub_question_line(event: Event) -> Text:
    if event.get("accepted"):
        return Text("sub-question: ", style="cyan") + Text(str(event.get("sub_question")))
    return Text(f"plan refused: {event.get('reason')}", style="red")


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
    "filter": filter_line,
    "sentences": sentences_line,
    "memory_review": memory_review_line,
    "sufficiency": sufficiency_line,
    "summaries": summaries_line,
    "judgment": judgment_line,
    "sub_question": sub_question_line,
    "answer": answer_line,
}

# What the spinner says after an event: the step the graph is in now.
SPINNER: dict[str, Callable[[Event], str]] = {
    "passages": lambda e: "writing the note…" if e.get("step") == 0 else "updating the note…",
    "note": lambda e: "thinking…",
    "queries": lambda e: "retrieving…",
    "verdict": lambda e: "thinking…",
}


def method_renderers(method: str) -> Mapping[str, Renderer]:
    """The method's own renderers, which win over ``RENDERERS`` for its events."""
    # Wired to MethodSpec.progress by the registry.
    return {}


def renderers_for(method: str) -> Mapping[str, Renderer]:
    return RENDERERS | dict(method_renderers(method))


class Progress:
    """Renders the graph's custom events as one line each on stderr."""

    def __init__(self, console: Console, method: str) -> None:
        self.console = console
        self.renderers = renderers_for(method)
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
