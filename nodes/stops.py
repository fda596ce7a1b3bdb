"""When each method stops: its stop rule, and where the rule is applied.

A stop rule reads the loop's counters and says why the loop stops now, or None. A ``Decision``
applies a rule and routes on it (the step's update records the reason, a conditional edge
routes on it): on to the method's next step, or to ``answer`` with ``stop_reason`` set. It runs once,
where the algorithm box puts the test: at the end of the paper step that decides (DeepNote's
adaptive retrieval decision, Adaptive-Note's memory reviewer: ``node(review, deps,
then=decision)``), or as a ``stop_check`` step of its own where the box tests apart from any
step. ``answer`` knows nothing about stopping.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import Runnable
from langgraph.runtime import Runtime
from typing_extensions import TypedDict

from noterag.profiles import Profile
from noterag.spec import Deps
from noterag.step import deciding, on_loop, run_context

StopRule = Callable[[Mapping[str, Any], Any, Profile], str | None]


class Stopped(TypedDict, total=False):
    """What a decision's route reads of the state."""

    stop_reason: str


def threshold_stop(state: Mapping[str, Any], ctx: Any, profile: Profile) -> str | None:
    """Adaptive-Note's Eq. 8, Stop = 1{IU >= T_IU or CI >= T_CI or RP >= T_RP}, and DeepNote's
    rule (max failure, max step; §3.3) are the same test: failed steps, steps, distinct passages
    (the cap: the profile decides >= or >, as the official DeepNote code uses >; DeepNote's paper
    profile has none unless set). The official loop tests failures after a step only: there,
    max_failures=0 still runs one step."""
    failures, steps, seen = (
        state.get("failures", 0),
        state.get("steps", 0),
        len(state.get("seen", [])),
    )
    if failures >= ctx.max_failures and (steps > 0 or profile.failures_checked_at_init):
        return f"{failures} failed step(s) (max_failures = {ctx.max_failures})"
    if steps >= ctx.max_steps:
        return f"{steps} step(s) (max_steps = {ctx.max_steps})"
    cap = profile.cap(ctx.max_passages)
    if cap is not None and profile.cap_reached(seen, cap):
        return f"{seen} distinct passages (max_passages = {cap})"
    return None


def iterations_spent(state: Mapping[str, Any], ctx: Any) -> bool:
    """Amber: whether the iteration that just ended was the last one allowed (t + 1 >= max_steps)."""
    return state.get("steps", 0) + 1 >= ctx.max_steps


def amber_stop(state: Mapping[str, Any], ctx: Any, profile: Profile | None = None) -> str | None:
    """Amber's adaptive information collector: the memory is sufficient, or max_steps
    iterations ran."""
    iterations = state.get("steps", 0) + 1
    if state.get("sufficient"):
        return f"the memory was judged sufficient after {iterations} iteration(s)"
    if iterations_spent(state, ctx):
        return f"{iterations} iteration(s) (max_steps = {ctx.max_steps})"
    return None


def resp_stop(state: Mapping[str, Any], ctx: Any, profile: Profile | None = None) -> str | None:
    """ReSP, after the reasoner's judge (Algorithm 1): the memory suffices, or M iterations ran."""
    if state.get("sufficient"):
        return "the reasoner judged the memory sufficient"
    if state.get("steps", 0) >= ctx.max_steps:
        return f"{state['steps']} iteration(s) (max_steps = {ctx.max_steps})"
    return None


def resp_stalled(state: Mapping[str, Any], ctx: Any, profile: Profile | None = None) -> str | None:
    """ReSP, after the plan: a plan that names nothing new to retrieve ends the loop (ours: the
    paper leaves it open; re-asking the same prompt would mostly repeat the same reply)."""
    return state.get("stalled") or None


def single_pass(state: Mapping[str, Any], ctx: Any, profile: Profile | None = None) -> str:
    """The baselines answer after one pass, always."""
    return "single pass (the baseline has no loop)"


@dataclass(frozen=True)
class Decision:
    """Apply ``rule``: on to ``go_on``, or to ``stop`` with the reason recorded in
    ``stop_reason`` (and ``record(state)``'s update, e.g. a baseline's one trace entry).

    The step that decides writes its update with ``stop_reason`` (``settle``); the route is a
    conditional edge on the state that update leads to (``next_step``: ``stop`` once a
    ``stop_reason`` is set), which ``graphs.assemble.build`` adds for every deciding node
    (``decision_of``). An edge rather than a ``Command``: LangGraph re-runs a node's edges when
    ``update_state`` writes as that node, so "interrupt before answer, edit the state, continue"
    still reaches the answer; a ``Command``'s goto is lost there."""

    rule: StopRule
    go_on: str
    stop: str = "answer"
    record: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None

    @property
    def destinations(self) -> tuple[str, str]:
        return (self.go_on, self.stop)

    def settle(
        self,
        state: Mapping[str, Any],
        ctx: Any,
        profile: Profile,
        update: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The step's ``update`` with ``stop_reason`` (and the record) when ``rule`` stops in
        ``state`` (the state after ``update``)."""
        why = self.rule(state, ctx, profile)
        if why:
            record = self.record(state) if self.record else {}
            return {**(update or {}), "stop_reason": why, **record}
        return dict(update or {})

    def next_step(self, state: Mapping[str, Any]) -> str:
        """Where the graph goes after the deciding step (its conditional edge)."""
        return self.stop if state.get("stop_reason") else self.go_on

    def edge(self) -> Runnable:
        """``next_step`` as a conditional edge's path (computes only: runs on the loop). Its
        parameter's type tells LangGraph to read only ``stop_reason`` for it, not a copy of
        the whole state."""

        def route(state: Stopped) -> str:
            return self.next_step(state)

        return on_loop(route, name=f"route_{self.go_on}_or_{self.stop}")


def stop_check(
    rule: StopRule,
    deps: Deps,
    *,
    go_on: str,
    stop: str = "answer",
    record: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None,
) -> Runnable:
    """The graph step that applies ``rule`` (a ``Decision``) where the algorithm box tests
    it apart from any step. Wire it with ``destinations=(go_on, stop)``."""
    decision = Decision(rule, go_on, stop, record)

    def decide(state: Mapping[str, Any], runtime: Runtime) -> dict[str, Any]:
        ctx = run_context(deps.context_schema, runtime.context)
        return decision.settle(state, ctx, deps.profile(ctx, state))

    decide.__name__ = decide.__qualname__ = "stop_check"
    return deciding(on_loop(decide), decision)


def sure_stop(state: Mapping[str, Any], ctx: Any, profile: Profile | None = None) -> str | None:
    """SuRe has no loop: it stops once the candidates' summaries are scored, or at once when
    the candidate reply gave fewer than two candidates (nothing to compare; see nodes/sure.py)."""
    found = state.get("candidates") or []
    if scores := state.get("scores"):
        best = max(scores)
        tied = [chr(ord("a") + k) for k, score in enumerate(scores) if score == best]
        why = f"single pass: candidate ({tied[0]}) of {len(found)} scored best (validity + ranking)"
        return why + (f", tied with ({'), ('.join(tied[1:])}): the first" if len(tied) > 1 else "")
    if not found:
        return "the candidate reply named no answer candidate: no answer"
    if len(found) == 1:
        return "one answer candidate: nothing to compare, answered with it"
    return None


def react_stop(state: Mapping[str, Any], ctx: Any, profile: Profile | None = None) -> str | None:
    """ReAct (hotpotqa.ipynb's webthink loop): the model took Finish, or max_steps steps ran."""
    steps = state.get("steps", 0)
    if state.get("finished"):
        empty = "" if state.get("finish") else " with nothing inside"
        return f"Finish{empty} at step {steps}"
    if steps >= ctx.max_steps:
        return f"{steps} step(s) without Finish (max_steps = {ctx.max_steps})"
    return None


def rat_stop(state: Mapping[str, Any], ctx: Any, profile: Profile | None = None) -> str | None:
    """RAT: every step of the draft was revised (the draft holds at most max_steps steps)."""
    total, steps = len(state.get("thoughts") or []), state.get("steps", 0)
    if steps >= total:
        return f"every step of the draft revised ({steps} of {total}; max_steps = {ctx.max_steps})"
    return None


def ircot_stop(state: Mapping[str, Any], ctx: Any, profile: Profile | None = None) -> str | None:
    """IRCoT, after each reasoning step (the original's exit controller): the sentence says
    "answer is", the reasoner wrote no sentence, or max_steps sentences were written."""
    steps, cot = state.get("steps", 0), state.get("cot") or []
    if state.get("concluded") is not None:
        return f'the reasoner concluded ("answer is") at step {steps - 1}'
    if cot and not cot[-1]:
        return f"the reasoner wrote no sentence at step {steps - 1}"
    if steps >= ctx.max_steps:
        return f"{steps} reasoning step(s) without an answer (max_steps = {ctx.max_steps})"
    return None


def iter_retgen_stop(
    state: Mapping[str, Any], ctx: Any, profile: Profile | None = None
) -> str | None:
    """Iter-RetGen, after each retrieval: the iteration that retrieved is the T-th (T =
    max_steps), so its generation is the answer."""
    if state.get("steps", 0) + 1 >= ctx.max_steps:
        return f"{ctx.max_steps} iteration(s) (max_steps = T = {ctx.max_steps})"
    return None


def self_rag_stop(state: Mapping[str, Any], ctx: Any, profile: Profile | None = None) -> str:
    """Self-RAG (short form) makes one pass: after the generations, say how the answer was
    chosen (the retrieval decision, and the best-scored segment when it retrieved)."""
    segments, score = state.get("segments") or [], state.get("retrieve_score")
    if ctx.mode != "adaptive_retrieval":
        decision = f"mode {ctx.mode}"
    else:
        sign = ">" if state.get("retrieved") else "<="
        decision = f"[Retrieval] {score:.3g} {sign} threshold {ctx.threshold:g}"
    if not state.get("retrieved"):
        return f"single pass without retrieval ({decision}): the [No Retrieval] generation answers"
    if not any(s.get("passage_id") for s in segments):
        return (
            f"single pass: retrieval ({decision}) found no passage: the [No Retrieval] "
            "generation answers"
        )
    chosen = state.get("chosen") or 0
    scores = [s["score"] for s in segments]
    tied = sum(1 for s in scores if s == scores[chosen]) > 1
    why = (
        f"single pass with retrieval ({decision}): the generation for passage {chosen + 1} of "
        f"{len(segments)} scored best ({scores[chosen]:.3f})"
    )
    return why + ("; a tie: the first" if tied else "")


def adaptive_rag_stop(
    state: Mapping[str, Any], ctx: Any, profile: Profile | None = None
) -> str | None:
    """Adaptive-RAG: routes A (no retrieval) and B (single-step) answer after their one pass;
    route C (multi-step) stops where IRCoT stops."""
    route = f"class {state.get('complexity')} ({state.get('strategy')})"
    if state.get("strategy") == "ircot":
        why = ircot_stop(state, ctx, profile)
        return f"{route}: {why}" if why else None
    return f"{route}: {single_pass(state, ctx, profile)}"


def flare_stop(state: Mapping[str, Any], ctx: Any, profile: Profile | None = None) -> str | None:
    """FLARE, after each accepted sentence: the generator ended its answer (it stopped by
    itself after the sentence, or wrote none), max_length tokens were generated (the
    original's max_generation_len), or max_steps sentences."""
    steps, tokens = state.get("steps", 0), state.get("tokens", 0)
    if why := state.get("finished"):
        return f"{why} at step {steps - 1}"
    if tokens >= ctx.max_length:
        return f"{tokens} tokens generated (max_length = {ctx.max_length})"
    if steps >= ctx.max_steps:
        return f"{steps} sentence(s) (max_steps = {ctx.max_steps})"
    return None


def recomp_stop(state: Mapping[str, Any], ctx: Any, profile: Profile | None = None) -> str:
    """RECOMP has no loop: it answers once the retrieved passages are compressed, without them
    when the compression kept nothing (its selective augmentation)."""
    mode, passages = state.get("compression"), len(state.get("passage_ids") or [])
    if not (state.get("compressed") or "").strip():
        return (
            f"single pass: the {mode} compression of {passages} passage(s) kept nothing, "
            "answered without them (selective augmentation)"
        )
    return f"single pass: {passages} passage(s) compressed ({mode})"
