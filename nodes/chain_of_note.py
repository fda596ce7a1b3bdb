"""Chain-of-Note's step (Yu et al., 2023, as the Adaptive-Note authors ran it, graphs/chain_of_note.py):
reading notes on the retrieved passages.

What the papers leave open, and what we decided:

- One call over all the passages, not one per passage: the file puts every passage in one prompt
  and asks for notes "summarizing the key points from these passages" (Yu et al.'s notes, too,
  are one generation that goes through the documents in turn).
- The reply (the notes, the relevance discussion, and the brief answer the file's step 4 asks
  for) is kept whole, and the generator reads it as its note. No answer is cut out of it: the
  file defines no answer marker, and the papers' short-answer scores (EM 33.6 on HotpotQA,
  Adaptive-Note Table 1) cannot come from a whole notes reply, so the answer came from the
  aligned generator. With no protocol string to read there is no parser and no fallback.
"""

from __future__ import annotations

from typing import Any

from noterag.core.step import Env, StepGen
from noterag.nodes.single_step import read_passages, trace_entry


def write_notes(state: dict[str, Any], env: Env) -> StepGen:
    """Write reading notes on the top-k passages: their key points, their relevance to the
    question and a brief answer (the ``notes`` prompt). The notes become the generator's note."""
    notes = yield from read_passages(state, env, "notes", env.prompts.notes)
    env.emit(
        {"type": "reading_notes", "step": 0, "passages": len(state["passages"]), "notes": notes}
    )
    return {"best_note": notes, "trace": [trace_entry(state, notes=notes)]}
