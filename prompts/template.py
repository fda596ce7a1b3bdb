"""A prompt template that fills only its own named slots.

The papers' prompts contain literal JSON (``{"status": "True"}``), so ``str.format`` would need
escaped braces that no longer read like the paper. ``Prompt`` substitutes exactly the slot names
it declares, in one pass, so a passage or a note that happens to contain ``{refs}`` is never
expanded a second time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from noterag.errors import ConfigError

_SLOT = re.compile(r"\{(\w+)\}")


@dataclass(frozen=True)
class Prompt:
    """One prompt of a method: its text, the slots it fills and where the text comes from."""

    name: str
    text: str
    source: str
    slots: frozenset[str] = field(default=frozenset())

    def __post_init__(self) -> None:
        found = frozenset(m.group(1) for m in _SLOT.finditer(self.text))
        object.__setattr__(self, "slots", self.slots or found)

    def format(self, **values: str) -> str:
        missing = self.slots - values.keys()
        if missing:
            raise KeyError(f"prompt {self.name!r} needs {sorted(missing)}")
        return _SLOT.sub(
            lambda m: values[m.group(1)] if m.group(1) in self.slots else m.group(0), self.text
        )


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
