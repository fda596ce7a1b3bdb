"""Every prompt text of noterag, word for word from the papers (see each module's docstring)."""

from noterag.prompts import adaptive_note, deepnote
from noterag.prompts.template import NotePrompts, Prompt

__all__ = ["NotePrompts", "Prompt", "adaptive_note", "deepnote"]
