"""How the command line writes to the terminal: the stderr console, and the graph's progress
events (its ``custom`` stream) rendered as one line each.

What an event shows is data, declared beside the method (``MethodSpec.progress``) and for the
shared steps (``noterag.core.progress.SHARED``), with a generic line for an event type nobody
declares (its type and a short summary of its fields), so a new method's events show without a
change here; this module only draws those lines in the terminal's colours (``event_lines``).
Only the engine's ``retrieval`` events print nothing: they carry the passages' text for the
trace page, and the step's own event reports the search.

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
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from rich.console import Console
from rich.status import Status
from rich.text import Text

# the escaping of untrusted text (the eval and reproduce layers use it too)
from noterag.base.terminal import printable_value

# plural: the progress lines' (noterag.core.progress), which the commands' summaries share
from noterag.core.progress import Shown, plural, progress_lines
from noterag.core.spec import MethodSpec
from noterag.core.step import RETRIEVAL

Event = dict[str, Any]

__all__ = ["Progress", "event_lines", "plural", "status", "stderr_console", "styled"]


def stderr_console(quiet: bool = False) -> Console:
    # soft_wrap: a long line stays one line when stderr is a file or pipe.
    return Console(stderr=True, quiet=quiet, highlight=False, soft_wrap=True)


def status(console: Console, message: str) -> AbstractContextManager[Any]:
    """A spinner with ``message`` while the block runs, only on a terminal and when not quiet."""
    if console.quiet or not console.is_terminal:
        return nullcontext()
    return console.status(message)


# --------------------------------------------------------------------------- progress lines

# Events no line shows: the engine's record of each search (the passages' text, for the trace
# page); the step that searched reports it with an event of its own.
SILENT = frozenset({RETRIEVAL})


def styled(shown: Shown) -> Text:
    """A declared line's segments in the terminal's colours (each style a rich style; a
    segment's own style over the line's)."""
    text = Text(style=shown.style)
    for segment, style in shown.segments:
        text.append(segment, style=style or None)
    return text


def event_lines(spec: MethodSpec, event: Event) -> list[Text]:
    """The lines ``event`` shows on the terminal: its method's declared lines (``spec.progress``,
    else the shared steps', else its generic line; noterag.core.progress), a line that
    ``follows`` joined to the one before it. The answer's own line shows only when stdout is
    not a terminal: on a terminal the answer follows on stdout, and the person watching sees
    it there."""
    if event.get("type") == "answer" and "answer" not in spec.progress and sys.stdout.isatty():
        return []
    found: list[Text] = []
    for shown in progress_lines(spec.progress, event):
        if shown.follows and found:
            found[-1].append("\n").append_text(styled(shown))
        else:
            found.append(styled(shown))
    return found


class Progress:
    """Renders the graph's custom events as one line each on stderr, and names the running
    step in a spinner (fed the ``tasks`` stream: ``MODES``)."""

    # the stream modes ``event`` and ``task`` read
    MODES = ("custom", "tasks")

    def __init__(self, console: Console, spec: MethodSpec) -> None:
        self.console = console
        self.method = spec.name
        self.spec = spec
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
        # Every line (the methods' own too) is filled from the event's text made printable.
        event = printable_value(event)
        for text in event_lines(self.spec, event):
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

    def _say(self, step: int | None, text: Text) -> None:
        line = Text(f"[step {step}] " if step is not None else "", style="dim")
        line.append_text(text)
        self.console.print(line)
