"""What the single-step baselines' prompt sets share (Chain-of-Note, Self-Refine, Self-Rerank).

Each of these baselines makes one call of its own over the retrieved passages (the Adaptive-Note
authors' prompt file for it, thunlp/Adaptive-Note ``prompts/en/<method>`` at ab69094, vendored
byte for byte in ``prompts/official/thunlp-Adaptive-Note`` and rendered with ``str.format``), and
then answers with the generator prompt every method of the paper shares: "to ensure a fair
comparison across all methods, we align the prompts for generation within the same dataset"
(Adaptive-Note, Experimental Setup, Settings of prompts). So the answer prompts are
Adaptive-Note's own, per profile (the paper's Table A4 under ``profile="paper"``, the official
``gen_answer`` files under ``profile="official"``), each method holding its own marked copies.

The tasks are the ones these baselines were run on: multi-hop QA and ASQA (Adaptive-Note
Table 1), StrategyQA (DeepNote Table 1 runs Chain-of-Note there; the answer prompt is the one
Adaptive-Note borrows from DeepNote). Not CRUD: the authors ran it with their Chinese prompt
files (``prompts/zh``), which noterag does not ship (``noterag.graphs.single_step``).
"""

from __future__ import annotations

from collections.abc import Mapping

from noterag.core.prompt import Prompt, borrow

# The tasks the single-step baselines answer (see the module docstring for CRUD).
TASKS = ("multihop", "asqa", "strategyqa")

# The repository whose prompt files these baselines send.
ADAPTIVE_NOTE = "thunlp/Adaptive-Note"


def aligned_answers(answers: Mapping[str, Prompt], method: str) -> dict[str, Prompt]:
    """``method``'s own copies of Adaptive-Note's answer prompts for ``TASKS`` (one profile's
    set), marked as borrowed: the paper aligns every method's generator prompt."""
    why = f"{method} answers with Adaptive-Note's generator prompt, aligned as in the paper"
    return {task: borrow(answers[task], why) for task in TASKS}
