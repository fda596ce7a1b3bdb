"""A run's call budget: the most model calls one turn of a method may make, derived from its
settings, which no input can raise.

A method's steps size their calls by what they read: SuRe's ``verify`` makes n + n(n-1) calls
over the ``candidates`` and ``summaries`` in the state, REPLUG answers once per passage. A
normal run wrote those lists itself, within its settings (K candidates, top-k passages); a
state written from outside (``update_state``, a server's ``command.update`` where the operator
allows state writes) need not be: 40 written candidates made 1,600 calls in one request. So
every step runs under ``guarded`` (``noterag.core.step.node``), which counts the model calls
the turn has made (the state's ``llm_calls``, reset by each turn's question step) and those
the step asks for, and stops the run before a call past the budget, with a
``CallBudgetError`` naming the budget and the settings it comes from. The server also bounds
written lists by the settings (``noterag.server.bounds``); the budget holds whatever a list
holds.

The budget of a method is its declaration's ``calls(ctx)`` (``MethodSpec.calls``: the most
calls its algorithm makes at the settings ``ctx``), else ``generic_calls``: each model role
(and the answer) called at most once per passage per loop iteration, for the iterations its
``max_steps`` allows and one more; plus the question step's rewrite of a follow-up, and the
calls a human reviewer's rejects may start (``REVIEW_REJECTS`` of them per turn).

The same wrapper bounds each reply a step receives (``bounded``): an endpoint that ignores
``max_tokens`` sent 60 MB replies, which went into the state, the prompts after them and an
eval row over the size its reader takes. A reply's text past ``max_tokens`` tokens of
``CHARS_PER_TOKEN`` characters each (the run's ``max_tokens``, else the setting's upper bound)
is cut there, with its token log-probabilities, and counted in the run's ``fallbacks`` as
``reply_truncated``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Generator
from typing import Any

from langchain_core.messages import BaseMessage

from noterag.base.errors import CallBudgetError
from noterag.core.parsing import fell_back

__all__ = ["REVIEW_REJECTS", "bounded", "budget", "generic_calls", "guarded", "reply_limit"]

# the question step's one rewrite of a follow-up (noterag.core.question)
QUESTION_CALLS = 1
# the step that starts a turn: the state it reads holds the previous turn's llm_calls
QUESTION_STEP = "question"
# A reviewer's reject (human_review) searches with their words and updates the note (one
# call), and at the answer's review writes the answer again (one more): each turn allows this
# many rejects beyond the method's own calls.
REVIEW_REJECTS = 20
REJECT_CALLS = 2
# A token's most characters: the longest tokens of the common vocabularies (runs of spaces or
# of one character, long words) are 16 or fewer; a reply within max_tokens is never cut.
CHARS_PER_TOKEN = 16
# the upper bound of the setting max_tokens (noterag.core.context.RunContext): the reply bound
# of a run that sets none
MOST_REPLY_TOKENS = 32_768
# what a reply's cut text ends with, so that a reader of the state or the trace sees it
REPLY_CUT_MARK = " [...]"


def reply_limit(env: Any) -> tuple[int, int]:
    """(tokens, characters): the most a reply of this run may hold, from its ``max_tokens``
    (the profile's or the run's, as the calls are sent), else ``MOST_REPLY_TOKENS``."""
    sampling = env.sampling() if hasattr(env, "sampling") else {}
    tokens = sampling.get("max_tokens") or MOST_REPLY_TOKENS
    return tokens, tokens * CHARS_PER_TOKEN


def bounded(result: Any, tokens: int, chars: int) -> Any:
    """``result`` (a reply's text or message, a list of them, a search's passages) with every
    reply longer than ``chars`` characters cut to them (and its token log-probabilities to
    ``tokens``), each cut counted as ``reply_truncated``."""
    if isinstance(result, list):
        return [bounded(item, tokens, chars) for item in result]
    if isinstance(result, str) and len(result) > chars:
        fell_back("reply_truncated")
        return result[:chars] + REPLY_CUT_MARK
    if isinstance(result, BaseMessage) and isinstance(result.content, str):
        meta = result.response_metadata or {}
        logprobs = meta.get("logprobs")
        entries = logprobs.get("content") if isinstance(logprobs, dict) else None
        logprobs = logprobs if isinstance(logprobs, dict) else {}
        long_text = len(result.content) > chars
        if long_text or (isinstance(entries, list) and len(entries) > tokens):
            fell_back("reply_truncated")
            update: dict[str, Any] = {}
            if long_text:
                update["content"] = result.content[:chars] + REPLY_CUT_MARK
            if isinstance(entries, list) and len(entries) > tokens:
                update["response_metadata"] = meta | {
                    "logprobs": logprobs | {"content": entries[:tokens]}
                }
            return result.model_copy(update=update)
    return result


def generic_calls(roles: int) -> Callable[[Any], int]:
    """The budget of a method that declares none, with ``roles`` model roles: each role and
    the answer called at most ``top_k`` times in each loop iteration (``max_steps`` of them
    where the method has the setting, else one), and one iteration more (the first retrieval,
    the answer). Generous for every built-in method, whose calls per iteration are at most
    one per passage per role; finite for any settings."""

    def calls(ctx: Any) -> int:
        iterations = max(int(getattr(ctx, "max_steps", 1) or 1), 1)
        return (iterations + 1) * (roles + 1) * max(int(getattr(ctx, "top_k", 1) or 1), 1)

    return calls


def budget(calls: Callable[[Any], int], ctx: Any) -> int:
    """The most model calls one turn may make at the settings ``ctx``: the method's own
    (``calls``), the question step's rewrite, and a reviewer's rejects where ``ctx`` asks for
    human review."""
    reviews = getattr(ctx, "human_review", "none") != "none"
    return calls(ctx) + QUESTION_CALLS + (REVIEW_REJECTS * REJECT_CALLS if reviews else 0)


def _spent(state: Any) -> int:
    """The model calls the turn has made so far (the state's ``llm_calls``); a value no step
    writes (written from outside) counts as none: the budget of the turn still holds."""
    spent = state.get("llm_calls", 0) if hasattr(state, "get") else 0
    return spent if type(spent) is int and spent > 0 else 0


def _asks(request: Any) -> int:
    """The model calls in what a step yields (one effect or a list): every effect with a
    ``prompt`` (``noterag.core.step.Ask``; a ``Search`` has a query)."""
    effects = request if isinstance(request, list) else [request]
    return sum(1 for effect in effects if hasattr(effect, "prompt"))


def guarded(
    step: Callable[[Any, Any], Generator[Any, Any, Any]],
    method: str,
    calls: Callable[[Any], int] | None,
) -> Callable[[Any, Any], Generator[Any, Any, Any]]:
    """``step`` stopped with a ``CallBudgetError`` before it asks for a model call past the
    turn's budget (``budget``), its replies cut at the run's bound (``bounded``); ``calls``
    None: the step as it is."""
    if calls is None:
        return step
    first = step.__name__ == QUESTION_STEP

    @functools.wraps(step)
    def run(state: Any, env: Any) -> Generator[Any, Any, Any]:
        most = budget(calls, env.ctx)
        tokens, chars = reply_limit(env)
        spent = 0 if first else _spent(state)
        gen = step(state, env)
        result: Any = None
        while True:
            try:
                request = gen.send(result)
            except StopIteration as done:
                return done.value
            asked = _asks(request)
            if spent + asked > most:
                gen.close()
                raise CallBudgetError(
                    f"{method}: the run stopped at its call budget of {most:,} model calls "
                    f"(derived from its settings); step {step.__name__!r} asked for {asked:,} "
                    f"more after {spent:,}. The state the step read holds more than its "
                    "settings produce (written from outside the run?)"
                )
            spent += asked
            result = bounded((yield request), tokens, chars) if asked else (yield request)

    return run
