"""What the single-step baselines' steps share (graphs/single_step.py): the task check, the one
processing call over the retrieved passages, and its trace entry."""

from __future__ import annotations

from collections.abc import Generator, Mapping
from typing import Any

from noterag.base.errors import ConfigError
from noterag.core.prompt import Prompt
from noterag.core.step import Ask, Env
from noterag.prompts.single_step import TASKS


def check_task(task: str, method: str) -> None:
    """Refuse a task these baselines have no prompts for, in one line naming the ones they have."""
    if task in TASKS:
        return
    why = " (the Adaptive-Note authors ran CRUD with Chinese prompt files noterag does not ship)"
    raise ConfigError(
        f"{method} answers tasks {', '.join(TASKS)}, not {task!r}{why if task == 'crud' else ''}"
    )


def read_passages(
    state: Mapping[str, Any], env: Env, stage: str, prompt: Prompt
) -> Generator[Ask, str, str]:
    """The method's one call over the retrieved passages: its prompt with the question and the
    top-k passages (formatted by the profile), no stop sequence (the files ask for free text).
    The run's task is checked first, so an input's unsupported task costs no call. Returns the
    reply without surrounding whitespace."""
    check_task(state.get("task") or env.ctx.task, env.deps.method)
    refs = env.profile.format_passages(state["passages"])
    reply = yield Ask(stage, prompt.format(query=state["question"], refs=refs))
    return reply.strip()


def trace_entry(state: Mapping[str, Any], **fields: Any) -> dict[str, Any]:
    """The run's one trace entry (step 0): the query, the passages read, what the method's call
    made of them and its one call (the answer's call is not a step's, as in every method)."""
    return {
        "step": 0,
        "queries": [state["question"]],
        "new_passage_ids": [p["id"] for p in state["passages"]],
        **fields,
        "llm_calls": 1,
    }
