"""ReAct (Yao et al., 2023): interleaved Thought / Action / Observation, as the authors' HotpotQA
notebook (ysymyth/ReAct, hotpotqa.ipynb) runs it, with noterag's retriever behind Search:

    prompt <- instruction + webthink_simple6 + "Question: " + q + "\\n"
    for i = 1 .. max_steps:
        thought_i, action_i <- LLM(prompt + "Thought i:", stop="\\nObservation i:")   reason
            (no "\\nAction i: " in the reply: thought_i <- its first line;
             action_i <- LLM(prompt + "Thought i: thought_i\\nAction i:", stop="\\n"))
        obs_i <- env.step(action_i)       Search[q]: top-k passages                 act
                                          Lookup[k]: next sentence with k in the current page
                                          Finish[a]: done
        prompt += "Thought i: ...\\nAction i: ...\\nObservation i: obs_i\\n"
        if done: break                                                               stop_check (react_stop)
    answer <- a;  not done: LLM(prompt + "Action i+1: Finish[", stop="]")            answer

max_steps is 7 (the notebook's ``range(1, 8)``; the paper, Section 3.3, uses 7 steps for
HotpotQA). top_k (5) is the passages per Search, the retrieval the papers that compare against
ReAct (Adaptive-Note, DeepNote, Amber) align across baselines. The notebook's own ending, an
empty ``finish[]`` when the steps run out, is replaced by one answer call from the trajectory;
noterag.nodes.react says what an Observation is and how each reply is read. The prompt is the
same for every task (the repository's HotpotQA prompt). Model roles (``<role>_model=``):
``reason`` (thoughts and actions, the re-asked action included) and ``answer`` (the
out-of-steps Finish). FlashRAG has no ReAct pipeline.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar

from langgraph.graph import END, StateGraph

from noterag.core.context import MOST_STEPS, RunContext
from noterag.core.decision import Decision, stop_check
from noterag.core.profiles import Profile
from noterag.core.progress import Declared, Line, Part
from noterag.core.spec import Deps, MethodSpec, SearchScript
from noterag.core.state import ChatFields, CostFields, merge_unique
from noterag.core.step import node
from noterag.graphs.assemble import builder, server_graph
from noterag.nodes.react import act, answer, reason
from noterag.prompts import react as prompts


@dataclass(kw_only=True)
class ReActContext(RunContext):
    """ReAct's step cap (hotpotqa.ipynb: 7 steps); top_k is the passages per Search."""

    # profile="original": the notebook's sampling (ysymyth/ReAct @ 6bdb3a1, hotpotqa.ipynb,
    # llm(): text-davinci-002, temperature 0, max_tokens 100, top_p 1) and one passage per
    # Search, the nearest noterag has to its Observation, the first five sentences of one
    # Wikipedia page (wikienv.py).
    ORIGINAL: ClassVar[Mapping[str, Any]] = {
        "top_k": 1,
        "temperature": 0.0,
        "top_p": 1.0,
        "max_tokens": 100,
    }

    max_steps: int = field(
        default=7,
        metadata={
            "description": "The most Thought/Action/Observation steps (the notebook's 7); a run "
            "that has not taken Finish by then answers with one call from its trajectory.",
            "ge": 1,
            "le": MOST_STEPS,
        },
    )


class ReActOutput(CostFields, ChatFields, total=False):
    """What a ReAct run returns."""

    question: str
    answer: str
    passage_ids: Annotated[list[str], merge_unique]
    trace: Annotated[list[dict[str, Any]], operator.add]
    stop_reason: str
    steps: int  # Thought/Action/Observation steps taken
    finished: bool  # the model took Finish (within max_steps)
    # "Thought i: ...\nAction i: ...\nObservation i: ...\n", one per step (the notebook's traj)
    trajectory: Annotated[list[str], operator.add]


class ReActState(ReActOutput, total=False):
    """The loop state: the output plus the current step's values and the environment's."""

    task: str
    thought: str  # Thought i
    action: str  # Action i, as written
    reason_calls: int  # calls step i's reason made (2: the action was asked for again)
    finish: str | None  # what Finish[...] held
    page: str  # the current page Lookup reads: the last Search's passages
    lookup_keyword: str | None
    lookup_next: int  # the next result of the current Lookup keyword


ROLES = ("reason", "answer")


def wire(graph: StateGraph, deps: Deps) -> None:
    for step in (reason, act, answer):
        graph.add_node(step.__name__, node(step, deps))
    check = Decision(react_stop, go_on="reason")
    graph.add_node("stop_check", stop_check(check, deps))
    graph.add_conditional_edges("stop_check", check.route, check.routes)
    graph.add_edge("question", "reason")
    graph.add_edge("reason", "act")
    graph.add_edge("act", "stop_check")
    graph.add_edge("answer", END)


# How the CLI and the trace page show ReAct's own events (MethodSpec.progress).
PROGRESS: Declared = {
    "thought": Line(
        "thought: {{ thought | default('') }}",
        Part("  → {{ action | default('') }}", "bold"),
        style="cyan",
    ),
    "observation": (
        Line(
            "searched {{ argument | default('') | string | repr }}: "
            "{{ passages | length }} passage(s)",
            Part(": {{ passages | titles }}", when="passages"),
            style="cyan",
            when="action == 'search'",
        ),
        Line(
            "finished: {{ argument | default('') | string or '(empty)' }}",
            style="green",
            when="action == 'finish'",
        ),
        Line(
            "{{ action }}: {{ observation | default('') | string | trim }}",
            style="{{ 'red' if action == 'invalid' else 'cyan' }}",
            when="action not in ('search', 'finish')",
        ),
    ),
}


def react_stop(state: Mapping[str, Any], ctx: Any, profile: Profile | None = None) -> str | None:
    """ReAct (hotpotqa.ipynb's webthink loop): the model took Finish, or max_steps steps ran."""
    steps = state.get("steps", 0)
    if state.get("finished"):
        empty = "" if state.get("finish") else " with nothing inside"
        return f"Finish{empty} at step {steps}"
    if steps >= ctx.max_steps:
        return f"{steps} step(s) without Finish (max_steps = {ctx.max_steps})"
    return None


SPEC = MethodSpec(
    name="react",
    title="ReAct (Yao et al., 2023)",
    summary="interleaved Thought / Action (Search, Lookup, Finish) / Observation over the index, "
    "with the authors' HotpotQA few-shot prompt",
    context=ReActContext,
    state=ReActState,
    stops=(react_stop,),
    output=ReActOutput,
    roles=ROLES,
    stage_roles={"action": "reason"},
    prompts={"paper": prompts.PAPER, "original": prompts.PAPER},
    wire=wire,
    result_fields=("finished", "steps"),
    trace_view="generic",
    progress=PROGRESS,
    # a stand-in's thoughts that search twice (its default reply takes no action)
    search_script=SearchScript(
        {
            "reason": [
                " Search it.\nAction 1: Search[Velmora Bridge]",
                " Then him.\nAction 2: Search[Aurelio Fenwick]",
            ]
        }
    ),
)

build = builder(SPEC)
make_graph = server_graph(SPEC)  # langgraph.json
