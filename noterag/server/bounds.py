"""What a server's client may write into a thread, and how long one of its runs may go on.

A run's settings are bounded (``noterag.core.policy``), but a client also reaches a thread's
state: a run's ``command`` (``update``, ``goto``), ``POST /threads/{id}/state``, a new thread's
``supersteps``. Written there, ``steps: -1000`` with a ``goto`` into the loop made a
``max_steps=3`` run call the model a thousand times, and an 80,000-character question skipped
the question step that checks it. So, on the server (``noterag.server.http.RequestGuard``, once
per request, before langgraph-api stores anything):

- a run's ``command`` may carry ``resume`` (what human review needs) and nothing else, unless
  the operator allows state writes (``NOTERAG_ALLOW_STATE_WRITES=1``); then ``update`` and the
  input of a ``goto``'s ``Send`` are checked by ``check_state_values``;
- a state write (``POST /threads/{id}/state``, ``supersteps``) is refused unless the operator
  allows state writes, and checked by ``check_state_values`` when allowed;
- every run's ``config.recursion_limit`` is at most ``recursion_cap(method)`` and set to it
  when the client sends none (LangGraph's default is 10,007 steps).

In the graphs themselves the stop rules are applied by ``noterag.core.decision.Decision``, which also
stops a loop whose counters were written out of bounds (``counters_out_of_bounds`` there), so a
state written in-process with ``update_state`` cannot make a loop run on either.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from noterag.base.errors import ConfigError
from noterag.core.context import MAX_PASSAGE_CHARS, MOST_PASSAGES, MOST_STEPS, check_question_size
from noterag.core.decision import COUNTERS  # the loop counters the stop rules read

__all__ = [
    "check_command",
    "check_recursion_limit",
    "check_state_values",
    "recursion_cap",
]

# the fields holding the question as asked
QUESTION_KEYS = frozenset({"question", "asked", "task"})


def recursion_cap(method: str | None) -> int:
    """The most LangGraph steps (supersteps) one run of ``method`` may take: every node of its
    graph once per loop iteration, for the most iterations its settings allow (the upper bound
    of its ``max_steps``: ``MOST_STEPS``, 20, for most methods; FLARE's sentences go to 10,000),
    plus two rounds for the question and the answer. None (an assistant by UUID, whose method
    the request does not name): the largest over all methods."""
    caps = _caps()
    return caps.get(method or "", max(caps.values()))


@functools.cache
def _caps() -> dict[str, int]:
    # A method's nodes are its wiring's: build each graph once, with a model and a retriever
    # that are never called (not the server's: its index may take minutes to load; the server
    # has imported the graph modules already, so this is milliseconds each).
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from langchain_core.runnables import RunnableLambda

    from noterag.graphs.assemble import build
    from noterag.registry.methods import METHODS

    model = FakeListChatModel(responses=[""])
    nothing: RunnableLambda[str, list[Any]] = RunnableLambda(lambda query: [])
    return {
        name: len(build(spec, model, nothing).nodes) * (loop_bound(spec.context) + 2)
        for name, spec in METHODS.items()
    }


def loop_bound(schema: type) -> int:
    """The most loop iterations a method's settings allow: its ``max_steps``'s upper bound
    (``noterag.core.context.setting(..., le=)``), ``MOST_STEPS`` for a method without one."""
    for item in fields(schema):
        if item.name == "max_steps" and isinstance(item.metadata.get("le"), int):
            return int(item.metadata["le"])
    return MOST_STEPS


def check_recursion_limit(config: dict[str, Any], method: str | None) -> bool:
    """Bound ``config["recursion_limit"]`` by ``recursion_cap(method)`` (ConfigError above it),
    setting it to the cap when absent. True when ``config`` was changed."""
    cap = recursion_cap(method)
    given = config.get("recursion_limit")
    if given is None:
        config["recursion_limit"] = cap
        return True
    if type(given) is not int or not 1 <= given <= cap:
        raise ConfigError(
            f"recursion_limit must be a whole number from 1 to {cap} on this server (the most "
            f"steps a run of {method or 'any method'} needs at the largest settings), not "
            f"{given!r}"
        )
    return False


@functools.cache
def _state_keys() -> frozenset[str]:
    from noterag.core.state import declared_keys
    from noterag.registry.methods import METHODS

    keys: set[str] = set()
    for spec in METHODS.values():
        keys |= declared_keys(spec.state) or set()
    return frozenset(keys)


def check_state_values(values: Any, where: str = "the state", method: str | None = None) -> None:
    """Values a client writes into a thread (``update_state``'s ``values``, a command's
    ``update``), where the operator allows it: only fields some method's state declares;
    counters (the loop's and the cost's) whole numbers >= 0; a question within the question's
    cap, any other text within a passage's (``MAX_PASSAGE_CHARS``); a list a method sizes by a
    setting (SuRe's ``candidates``: ``n_candidates``) within that setting's upper bound
    (``list_bound``), any other within ``MOST_PASSAGES`` items. ``method``: the method the
    write is for (None: not known, the largest bound of any method). A ConfigError names the
    first value refused."""
    if values is None:
        return
    if isinstance(values, list) and all(
        isinstance(t, list | tuple) and len(t) == 2 and isinstance(t[0], str) for t in values
    ):
        # a command's update as (key, value) pairs: LangGraph applies every pair, a key given
        # twice included (a reducer field takes each), so each pair is checked
        pairs = [(key, value) for key, value in values]
    elif isinstance(values, Mapping):
        pairs = list(values.items())
    else:
        raise ConfigError(f"{where} must be an object of state fields")
    unknown = sorted({str(k) for k, _ in pairs if k not in _state_keys()})
    if unknown:
        raise ConfigError(f"{where}: no method's state has {', '.join(unknown)}")
    for key, value in pairs:
        if key in COUNTERS or key in COST_COUNTERS or key.startswith("unparsed_"):
            if type(value) is not int or value < 0:
                raise ConfigError(f"{where}: {key} must be a whole number >= 0, not {value!r}")
        elif key in QUESTION_KEYS and isinstance(value, str):
            check_question_size(value)
        else:
            items = _overwritten(value)
            most = list_bound(key, method)
            if isinstance(items, list) and len(items) > most:
                raise ConfigError(
                    f"{where}: {key} holds {len(items):,} items; at most {most:,} (the most "
                    f"{method or 'any method'}'s settings write there)"
                )
            _check_nested(value, f"{where}: {key}")


# the cost fields every model call adds to (noterag.core.state.CostFields): the call budget
# (noterag.core.budget) counts llm_calls, so a client sets none of them but as a whole number
COST_COUNTERS = frozenset({"llm_calls", "prompt_tokens", "completion_tokens"})


def _overwritten(value: Any) -> Any:
    """A reducer field's written value: LangGraph reads ``{"__overwrite__": v}`` (and
    ``{"type": "__overwrite__", "value": v}``) as ``v`` replacing the field."""
    if isinstance(value, Mapping):
        if len(value) == 1 and "__overwrite__" in value:
            return value["__overwrite__"]
        if value.get("type") == "__overwrite__" and "value" in value:
            return value["value"]
    return value


def list_bound(key: str, method: str | None = None) -> int:
    """The most items a client may write into the state list ``key`` of ``method``: the upper
    bound of the setting its declaration sizes that list by (``MethodSpec.lists``), else
    ``MOST_PASSAGES``; for an unknown method, the largest over the methods whose state has it."""
    bounds = _list_bounds()
    if method is not None and method in bounds:
        return bounds[method].get(key, MOST_PASSAGES)
    found = [b.get(key, MOST_PASSAGES) for m, b in bounds.items() if key in _method_keys(m)]
    return max(found, default=MOST_PASSAGES)


@functools.cache
def _list_bounds() -> dict[str, dict[str, int]]:
    from noterag.registry.methods import METHODS

    bounds: dict[str, dict[str, int]] = {}
    for name, spec in METHODS.items():
        limits = {item.name: item.metadata.get("le") for item in fields(spec.context)}
        bounds[name] = {
            key: int(limits[setting] or MOST_PASSAGES) for key, setting in spec.lists.items()
        }
    return bounds


@functools.cache
def _method_keys(method: str) -> frozenset[str]:
    from noterag.core.state import declared_keys
    from noterag.registry.methods import METHODS

    return declared_keys(METHODS[method].state) or frozenset()


def _check_nested(value: Any, where: str) -> None:
    todo = [value]
    while todo:  # iterative: a client's nesting is as deep as its body
        item = todo.pop()
        if isinstance(item, str):
            if len(item) > MAX_PASSAGE_CHARS:
                raise ConfigError(
                    f"{where} holds a text of {len(item):,} characters; at most "
                    f"{MAX_PASSAGE_CHARS:,} are accepted"
                )
        elif isinstance(item, list):
            if len(item) > MOST_PASSAGES:
                raise ConfigError(f"{where} holds {len(item):,} items; at most {MOST_PASSAGES:,}")
            todo.extend(item)
        elif isinstance(item, dict):
            todo.extend(item.values())


# LangGraph's END: a ``goto`` there ends a paused thread without running a step
END = "__end__"


def ends_only(command: Mapping[str, Any]) -> bool:
    """Whether ``command`` only ends the thread (``{"goto": "__end__"}``, Agent Chat UI's
    "Mark as Resolved"): no state written, no step run, no model called."""
    goto = command.get("goto")
    targets = goto if isinstance(goto, list) else [goto]
    return (
        command.get("update") in (None, [], {}) and bool(targets) and all(t == END for t in targets)
    )


def check_command(command: Any, allow_state_writes: bool, method: str | None = None) -> None:
    """A run's ``command``: ``resume`` passes (a paused run's answer, read by the step that
    paused), and so does a ``goto`` to the end alone (``ends_only``); ``update`` and any other
    ``goto`` write the thread's state and choose its next step, refused unless the operator
    allows state writes, then checked (for ``method`` when known)."""
    if command is None:
        return
    if not isinstance(command, Mapping):
        raise ConfigError("command must be an object (resume, and update / goto where allowed)")
    if ends_only(command):
        return
    writes = sorted(k for k in ("update", "goto") if command.get(k) not in (None, [], {}))
    unknown = sorted(set(command) - {"resume", "update", "goto"})
    if unknown:
        raise ConfigError(f"command: no such part {', '.join(map(str, unknown))}")
    if writes and not allow_state_writes:
        raise ConfigError(
            f"command.{' and command.'.join(writes)}: a client resumes a paused run "
            "(command.resume) and does not write a thread's state on this server (the operator "
            "allows it with NOTERAG_ALLOW_STATE_WRITES=1)"
        )
    check_state_values(command.get("update"), "command.update", method)
    goto = command.get("goto")
    for target in goto if isinstance(goto, list) else [goto]:
        if isinstance(target, Mapping):  # a Send: its input is a state written by the client
            check_state_values(target.get("input"), "command.goto input", method)
        elif target is not None and not isinstance(target, str):
            raise ConfigError("command.goto must name a step (or a Send of one)")
