"""Every prompt text of noterag, word for word from the papers (see each module's docstring)."""

from noterag.core.prompt import NotePrompts, Prompt
from noterag.prompts import adaptive_note, deepnote

__all__ = ["NotePrompts", "Prompt", "adaptive_note", "deepnote"]
