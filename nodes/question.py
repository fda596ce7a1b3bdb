"""The first step of every graph: the question to answer, from a question or a chat.

A plain node (no model call, no search), so a run without a question fails before any.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import HumanMessage

from noterag.errors import ConfigError
from noterag.nodes.step import reply_text
from noterag.state import QuestionInput

# What a caller sends: all that a fresh run's state holds when this step runs.
_INPUT_KEYS = frozenset(QuestionInput.__annotations__)


def question(state: dict[str, Any]) -> dict[str, str]:
    """The run's question: ``question`` when the caller gave one, else the last human message
    of ``messages`` (a chat UI's input; text parts joined with newlines, surrounding whitespace
    dropped). Earlier turns are ignored: each run answers one self-contained question.
    Raises ConfigError when there is no question or it is blank, and on a thread that already
    ran one (see below)."""
    # Accumulating fields start at 0 or []; any other value was left by an earlier run. A
    # checkpointed thread brings back the last run's state, and the methods cannot start over
    # from it: its note, counters and seen passages would steer this run, and its question
    # would win over a chat's new message. So say so rather than answer wrongly.
    if any(value for key, value in state.items() if key not in _INPUT_KEYS):
        raise ConfigError(
            "this thread already ran a question and every run needs a fresh state: "
            "ask on a new thread, or without one"
        )
    given = state.get("question")
    if given is not None:
        if not isinstance(given, str):
            raise ConfigError(f"the question must be a string, got {type(given).__name__}")
        if not given.strip():
            raise ConfigError("the question is empty")
        return {"question": given}
    messages = state.get("messages") or []
    human = next((m for m in reversed(messages) if isinstance(m, HumanMessage)), None)
    if human is None:
        raise ConfigError(
            'no question: send {"question": "..."} or {"messages": [...]} with a user message'
            if not messages
            else "no user message in messages: the last user message is the question"
        )
    text = reply_text(human, sep="\n").strip()
    if not text:
        raise ConfigError("the last user message is empty")
    return {"question": text}
