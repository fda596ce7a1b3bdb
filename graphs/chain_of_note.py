"""Chain-of-Note (Yu et al., 2023), as the Adaptive-Note authors ran it against their method
(Adaptive-Note Table 1; DeepNote and Amber report it too): one retrieval, reading notes on the
passages in one call, then the answer from the notes.

    P = retrieve(q)                           retrieve     (top_k = 5 passages for the question)
    N = LLM(chain-of-note(q, P))              write_notes  (notes, relevance, a brief answer)
    (single pass)                             stop_check   (nodes.stops.single_pass)
    answer = LLM(prompt_g(q, N))              answer       (Adaptive-Note's generator, N as the note)

Prompts: the authors' file thunlp/Adaptive-Note ``prompts/en/chain-of-note`` (byte for byte,
rendered with ``str.format``) and Adaptive-Note's own answer prompts, which the paper aligns
across every method (noterag.prompts.chain_of_note). The official code does not run this
baseline (its ``--method`` is note, base or base_wo_retri), so how it runs is read from the
file and the papers; graphs/single_step.py gives the reasons for the two calls and for the
generator reading the notes only, nodes/chain_of_note.py for the rest. Yu et al. fine-tune
LLaMa-2 7B to write such notes; the papers prompt their models zero-shot, as here. FlashRAG has
no Chain-of-Note.

Defaults are the papers': top-k 5, BM25 (the default index). Tasks: multihop, asqa, strategyqa
(DeepNote runs Chain-of-Note on StrategyQA, answering with its own StrategyQA prompt, the one
Adaptive-Note borrows); crud is refused (the authors used Chinese prompt files).
``profile="official"``: the Adaptive-Note code's conventions around the same file (passages as
"Passage #i Title: ...", sampling 0.1 / 0.9 / 1280 tokens, the official ``gen_answer`` files).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.text import Text

from noterag.graphs.single_step import SingleStepContext, SingleStepOutput, SingleStepState, wiring
from noterag.nodes.chain_of_note import write_notes
from noterag.prompts import chain_of_note as prompts
from noterag.spec import MethodSpec, server_graph


def notes_line(event: Mapping[str, Any]) -> Text:
    """The CLI's progress line for the reading notes."""
    words = len(str(event.get("notes") or "").split())
    return Text(
        f"wrote reading notes on {event.get('passages', 0)} passages ({words} words)", style="cyan"
    )


SPEC = MethodSpec(
    name="chain-of-note",
    title="Chain-of-Note (Yu et al., 2023)",
    summary="reading notes on the top-k passages in one call, then the answer from the notes "
    "(the papers' single-step baseline)",
    context=SingleStepContext,
    state=SingleStepState,
    output=SingleStepOutput,
    roles=("notes", "answer"),
    prompts={"paper": prompts.PAPER, "official": prompts.OFFICIAL},
    wire=wiring(write_notes),
    result_fields=("best_note",),
    trace_view="generic",
    progress={"reading_notes": notes_line},
    official_code="adaptive-note",
)

build = SPEC.build
make_graph = server_graph(SPEC)  # langgraph.json
