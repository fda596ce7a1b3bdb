"""Adaptive-RAG's steps (Jeong et al., 2024): the query-complexity classifier, and the steps of
the method its class routes to, each seeing that method's prompt set.

Model stages: ``classify`` (role ``classifier``), then the route's: A ``answer`` (no retrieval),
B ``answer`` (vanilla RAG), C ``reason`` (role ``reasoner``) and, unless a sentence concluded,
``answer`` (IRCoT's QA reader). Every route's answer call has the role ``answer``.

Parse fallbacks (counted in the state's ``fallbacks``, noterag.core.parsing.fell_back):

| kind       | a classifier reply without ...  | fallback                                          |
|------------|---------------------------------|---------------------------------------------------|
| complexity | one readable class A, B or C    | the context's ``fallback_class`` (default B)      |

A reply reads as class X when its first line is X alone or starts with it ("C", "(B)", "**A**",
"C: complex", "B."), but not when X is a word of a sentence ("A single retrieval ..."); else when
the reply tags exactly one class ("(C)", "Answer: B", "complexity is C"). A reply naming several
classes that way (a model repeating the options), or none, is unreadable. The authors' trained
classifier always answers one of the three (the argmax of its first token's scores over "A",
"B", "C"); a prompted model need not. B is the default fallback: the paper's middle strategy,
retrieving once, so an unreadable reply neither drops retrieval nor pays for the multi-step loop.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from noterag.base.errors import ConfigError
from noterag.core.parsing import fell_back
from noterag.core.step import Ask, Env, StepGen
from noterag.models.runnable import reads_original
from noterag.nodes import ircot
from noterag.nodes.answer import answer as shared_answer
from noterag.prompts.adaptive_rag import STRATEGIES

# The class alone, or leading the first line: not followed by a letter or digit, nor by a
# lower-case word (the article "A" starting a sentence)
_LEADING = re.compile(r"^[\s\"'`*(\[]*+([ABC])(?![A-Za-z0-9])(?!\s++[a-z])")
# A class tagged as one: "(C)", or after a word such as "answer", "class", "complexity"
_TAGGED = re.compile(
    r"\(([ABC])\)"
    r"|(?i:answer|label|class|classification|complexity|level|option|choice|category)"
    r"(?:\s++is)?\s*+[:=-]?[\s\"'`*(\[]*+([ABC])(?![A-Za-z0-9])"
)
_STANDALONE = re.compile(r"(?<![A-Za-z0-9])([ABC])(?![A-Za-z0-9])")


def parse_complexity(reply: str) -> str | None:
    """The class a classifier reply names, or None when it names no single one (see the module
    docstring). Never raises."""
    text = reply.strip()
    first = text.splitlines()[0] if text else ""
    leading = _LEADING.match(first)
    # "A, B or C": a first line naming several classes names none
    if leading and len(set(_STANDALONE.findall(first))) == 1:
        return leading.group(1)
    tagged = {a or b for a, b in _TAGGED.findall(text)}
    return tagged.pop() if len(tagged) == 1 else None


def check_task(task: str) -> None:
    """Adaptive-RAG answers multi-hop style questions only: its route C, IRCoT, has no other
    answer prompt."""
    if task != "multihop":
        raise ConfigError(
            f"adaptive-rag answers task multihop only (its route C, IRCoT, has no answer prompt "
            f"for {task!r})"
        )


def classify(state: dict[str, Any], env: Env) -> StepGen:
    """The query-complexity classifier: class A (no retrieval), B (single-step) or C
    (multi-step) for the question. The run's task is checked first, so an unsupported task costs
    no call. A trained classifier plugged in for the role (noterag.models.runnable) reads the
    question alone, as the authors' does; the default, the run's model, reads ``classify``."""
    check_task(state.get("task") or env.ctx.task)
    question = state["question"].strip()
    model = env.deps.models.get("classifier")
    prompt = env.prompts.classifier_input if reads_original(model) else env.prompts.classify
    reply = yield Ask("classify", prompt.format(question=question))
    label = parse_complexity(reply)
    fallback = label is None
    if label is None:
        fell_back("complexity")
        label = env.ctx.fallback_class
    strategy = STRATEGIES[label]
    env.emit(
        {"type": "complexity", "complexity": label, "strategy": strategy, "fallback": fallback}
    )
    return {
        "complexity": label,
        "strategy": strategy,
        "trace": [
            {
                "step": "classify",
                "complexity": label,
                "strategy": strategy,
                "reply": reply,
                "fallback": fallback,
                "llm_calls": 1,
            }
        ],
    }


@dataclass(frozen=True)
class RouteEnv(Env):
    """The step's environment on a route: the same run, the route's method's prompt set (this
    run's prompt overrides applied to Adaptive-RAG's set first, then the route's part taken)."""

    strategy: str = "vanilla"

    @property
    def prompts(self) -> Any:
        return super().prompts.for_strategy(self.strategy)


Step = Callable[[dict[str, Any], Env], StepGen]


def on_route(step: Step, strategy: str) -> Step:
    """``step``, a step of the method ``strategy`` routes to, run as that method runs it."""

    def routed(state: dict[str, Any], env: Env) -> StepGen:
        ctx = env.ctx
        if strategy == "vanilla" and ctx.single_step_top_k is not None:
            # route B's own k (the authors' single-step runs retrieved 15, route C 6)
            ctx = replace(ctx, top_k=ctx.single_step_top_k)
        route = RouteEnv(
            ctx=ctx, deps=env.deps, profile=env.profile, writer=env.writer, strategy=strategy
        )
        update: dict[str, Any] = yield from step(state, route)
        return update

    routed.__name__ = routed.__qualname__ = step.__name__
    routed.__doc__ = step.__doc__
    return routed


# each route's answer step: the baselines' shared one, or IRCoT's
_ANSWERS: dict[str, Step] = {
    "no-retrieval": shared_answer,
    "vanilla": shared_answer,
    "ircot": ircot.answer,
}


def answer(state: dict[str, Any], env: Env) -> StepGen:
    """The answer of the method the question was routed to: no retrieval's or vanilla RAG's
    answer prompt (the shared answer step), or IRCoT's (its concluding sentence, else its QA
    reader). One step for every route, so that the answer's tokens stream from ``answer``."""
    strategy = state["strategy"]
    update: dict[str, Any] = yield from on_route(_ANSWERS[strategy], strategy)(state, env)
    return update
