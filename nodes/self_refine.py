"""Self-Refine's step (the Adaptive-Note authors' Self-RAG simplification after ActiveRAG,
graphs/self_refine.py): the passages' useful information, summarised and analysed.

Not Madaan et al.'s Self-Refine (iterative self-feedback on the model's own answer): the
papers' Self-Refine refines the retrieved passages, once, before the answer.

What the papers leave open, and what we decided:

- One call over all the passages (the file puts every passage in one prompt), no further
  round: the papers file it under single-time RAG (Adaptive-Note Table 1, STRAG).
- The reply is free text (the file asks for "a summary and analysis"): it is kept whole as the
  generator's note, so there is no parser and no fallback.
"""

from __future__ import annotations

from typing import Any

from noterag.core.step import Env, StepGen
from noterag.nodes.single_step import read_passages, trace_entry


def refine(state: dict[str, Any], env: Env) -> StepGen:
    """Extract the relevant, useful information of the top-k passages and summarise and analyse
    it (the ``refine`` prompt). The refinement becomes the generator's note."""
    refinement = yield from read_passages(state, env, "refine", env.prompts.refine)
    env.emit(
        {
            "type": "refinement",
            "step": 0,
            "passages": len(state["passages"]),
            "refinement": refinement,
        }
    )
    return {"best_note": refinement, "trace": [trace_entry(state, refinement=refinement)]}
