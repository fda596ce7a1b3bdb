"""Which tasks a method answers, checked before any model call.

A method answers a task when its settings accept it (a baseline without CRUD prompts refuses
``task=crud`` in its context) and, for a method whose prompt set has answer prompts per task,
when the set of the run's profile has one for it (DeepNote has none for ``crud``: without this
check a DeepNote run on CRUD would fail at its answer step, after every note step was paid
for). A method declaring ``tasks`` on its ``MethodSpec`` is held to that declaration instead of
its answer prompts; a method with neither (SuRe: no answer prompt, its own candidates step)
checks the task in its first step, which also comes before its first call.

``noterag eval`` checks every task of its dataset with ``check_task``; ``noterag ask`` and any
other caller can check the one task of its question the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from noterag.context import resolve_context
from noterag.errors import ConfigError
from noterag.methods import METHODS


def answerable_tasks(method: str, profile: str = "paper") -> tuple[str, ...] | None:
    """The tasks ``method`` has an answer for under ``profile``; None when its declaration does
    not say (no ``tasks`` and no answer prompts)."""
    spec = METHODS[method]
    declared = spec.tasks
    if declared is not None:
        return tuple(declared)
    prompt_set = spec.prompts.get(profile) or spec.prompts.get("paper")
    answers = getattr(prompt_set, "answer", None)
    return tuple(sorted(answers)) if answers else None


def check_task(method: str, task: str, context: Mapping[str, Any] | None = None) -> None:
    """Raise ``ConfigError`` (one line) when ``method`` with ``context`` cannot answer ``task``."""
    settings = resolve_context(METHODS[method].context, {**(context or {}), "task": task})
    tasks = answerable_tasks(method, settings.profile)
    if tasks is not None and task not in tasks:
        raise ConfigError(
            f"{method} cannot answer task {task!r}: it answers {', '.join(tasks)} (it has no "
            f"answer prompt for {task!r})"
        )
