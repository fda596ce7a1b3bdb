"""Chain-of-Note (Yu et al., 2023), as the Adaptive-Note authors ran it against their method
(Adaptive-Note Table 1; DeepNote and Amber report it too): one retrieval, reading notes on the
passages in one call, then the answer from the notes.

    P = retrieve(q)                           retrieve     (top_k = 5 passages for the question)
    N = LLM(chain-of-note(q, P))              write_notes  (notes, relevance, a brief answer)
    (single pass)                             stop_check   (decision.single_pass)
    answer = LLM(prompt_g(q, N))              answer       (Adaptive-Note's generator, N as the note)

Its prompt is the authors' file ``prompts/en/chain-of-note``. Prompts, defaults and
``profile="official"`` are the single-step baselines' (graphs/single_step.py: also why the
generator reads the notes only); nodes/chain_of_note.py says the rest. Tasks: multihop, asqa,
strategyqa (DeepNote runs Chain-of-Note on StrategyQA). Yu et al. fine-tune LLaMa-2 7B to write
such notes; the papers prompt their models zero-shot, as here. FlashRAG has no Chain-of-Note.
"""

from __future__ import annotations

from noterag.core.progress import Line
from noterag.graphs.assemble import builder, server_graph
from noterag.graphs.single_step import declare
from noterag.nodes.chain_of_note import write_notes
from noterag.prompts import chain_of_note as prompts

SPEC = declare(
    name="chain-of-note",
    title="Chain-of-Note (Yu et al., 2023)",
    summary="reading notes on the top-k passages in one call, then the answer from the notes "
    "(the papers' single-step baseline)",
    step=write_notes,
    role="notes",
    prompts=prompts,
    progress={
        "reading_notes": Line(
            "wrote reading notes on {{ passages | default(0) }} passages "
            "({{ notes | words }} words)",
            style="cyan",
        )
    },
)

build = builder(SPEC)
make_graph = server_graph(SPEC)  # langgraph.json
