"""A prompt template that fills only its own named slots.

The papers' prompts contain literal JSON (``{"status": "True"}``), so ``str.format`` would need
escaped braces that no longer read like the paper. ``Prompt`` substitutes exactly the slot names
it declares, in one pass, so a passage or a note that happens to contain ``{refs}`` is never
expanded a second time.

The official code's prompt files are ``str.format`` templates (``{{"status":"False"}}``): they are
vendored byte for byte under ``prompts/official/`` and rendered with ``str.format`` exactly as
the official code renders them (``style="format"``; ``noterag.prompts.vendored.official_prompt``
loads them). ``str.format`` also expands each slot once, so a value containing ``{refs}`` stays
as it is there too.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass, field, replace
from typing import Literal

from noterag.base.errors import ConfigError
from noterag.core.context import MAX_QUESTION_CHARS, check_question_size

_SLOT = re.compile(r"\{(\w+)\}")


@dataclass(frozen=True)
class Prompt:
    """One prompt of a method: its text, the slots it fills and where the text comes from."""

    name: str
    text: str
    source: str
    slots: frozenset[str] = field(default=frozenset())
    # "slots": fill the declared {name} slots, every other brace literal (the papers' texts);
    # "format": the text is a str.format template, rendered as the official code renders it
    style: Literal["slots", "format"] = "slots"
    # another method's prompt this one borrows (its source): editing that one changes this one
    borrowed_from: str | None = None
    # the text cut at its slots once ("slots" style): literal, slot name, literal, ... so that
    # filling it is one join, not a regex pass with a Python call per slot
    _pieces: tuple[str, ...] = field(default=(), init=False, repr=False, compare=False)
    # the same cut as a str.format template (literal braces doubled, each slot {name}), filled
    # by format_map in one pass in C, which expands no value either; None where a slot's name
    # is no identifier (str.format would read "{0}" as a position)
    _template: str | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.style == "format":
            found = frozenset(name for _, name, _, _ in string.Formatter().parse(self.text) if name)
        else:
            found = frozenset(m.group(1) for m in _SLOT.finditer(self.text))
        object.__setattr__(self, "slots", self.slots or found)
        if self.style == "slots":
            pieces, start = [], 0
            for m in _SLOT.finditer(self.text):
                if m.group(1) in self.slots:
                    pieces += [self.text[start : m.start()], m.group(1)]
                    start = m.end()
            pieces.append(self.text[start:])
            object.__setattr__(self, "_pieces", tuple(pieces))
            if all(name.isidentifier() for name in pieces[1::2]):
                template = "".join(
                    "{" + piece + "}" if i % 2 else piece.replace("{", "{{").replace("}", "}}")
                    for i, piece in enumerate(pieces)
                )
                object.__setattr__(self, "_template", template)

    def format(self, **values: str) -> str:
        # the question's cap holds where prompts are built too: a question written into a
        # thread's state (update_state) skips the question step that checks it. The papers'
        # prompts name the question's slot {question} or {query}.
        for slot in ("question", "query"):
            question = values.get(slot)
            if isinstance(question, str) and len(question) > MAX_QUESTION_CHARS:
                check_question_size(question)
        if not values.keys() >= self.slots:
            raise KeyError(f"prompt {self.name!r} needs {sorted(self.slots - values.keys())}")
        if self.style == "format":
            return self.text.format(**{k: values[k] for k in self.slots})
        if self._template is not None:
            return self._template.format_map(values)
        pieces = list(self._pieces)
        for i in range(1, len(pieces), 2):  # the odd pieces are slot names
            pieces[i] = values[pieces[i]]
        return "".join(pieces)


def borrow(prompt: Prompt, why: str, *, source: str | None = None) -> Prompt:
    """A method's own copy of another method's prompt, marked as borrowed (``borrowed_from``,
    and ``why`` in its source), so that a shared text is never an accident: every prompt set
    holds its own objects, and the borrowed ones say whose they are."""
    return replace(prompt, source=source or f"{prompt.source} ({why})", borrowed_from=prompt.source)


@dataclass(frozen=True)
class AnswerPrompts:
    """One answer prompt per task: what every method's prompt set has (the baselines' is only
    this). The shared answer step fills the slots the task's prompt declares."""

    answer: dict[str, Prompt]

    def answer_for(self, task: str) -> Prompt:
        try:
            return self.answer[task]
        except KeyError:
            raise ConfigError(
                f"no answer prompt for task {task!r}; this method has {sorted(self.answer)}"
            ) from None


@dataclass(frozen=True, kw_only=True)
class NotePrompts(AnswerPrompts):
    """The prompts of one note-centric method: one per stage, one answer prompt per task."""

    init_note: Prompt
    refine_query: Prompt
    accumulate: Prompt
    review: Prompt
