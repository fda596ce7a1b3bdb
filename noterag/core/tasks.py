"""Which tasks a method answers, checked before any model call.

A method answers a task when its settings accept it (a baseline without CRUD prompts refuses
``task=crud`` in its context) and, for a method whose prompt set has answer prompts per task,
when the set of the run's profile has one for it (DeepNote has none for ``crud``: without this
check a DeepNote run on CRUD would fail at its answer step, after every note step was paid
for). A method declaring ``tasks`` on its ``MethodSpec`` is held to that declaration instead of
its answer prompts; a method with neither (SuRe: no answer prompt, its own candidates step)
checks the task in its first step, which also comes before its first call.

``noterag eval`` checks every task of its dataset with ``check_task``; ``noterag ask`` and any
other caller can check the one task of its question the same way, with the method's spec and
the run's profile (its settings resolved once, by the caller).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, cast

from noterag.base.errors import ConfigError
from noterag.core.context import RunContext
from noterag.core.spec import MethodSpec


def answerable_tasks(spec: MethodSpec, profile: str = "paper") -> tuple[str, ...] | None:
    """The tasks the method ``spec`` has an answer for under ``profile``; None when its
    declaration does not say (no ``tasks`` and no answer prompts)."""
    declared = spec.tasks
    if declared is not None:
        return tuple(declared)
    prompt_set = spec.prompts.get(profile) or spec.prompts.get("paper")
    answers = getattr(prompt_set, "answer", None)
    return tuple(sorted(answers)) if answers else None


def check_task(spec: MethodSpec, task: str, settings: RunContext | None = None) -> None:
    """Raise ``ConfigError`` (one line) when the method ``spec`` with the run's resolved
    ``settings`` (None: its defaults) cannot answer ``task``: its settings refuse the task (the
    context class checks a changed copy), or its profile's prompt set has no answer for it."""
    base = settings if settings is not None else spec.context()
    settings = replace(base, task=cast(Any, task))  # the context class checks the value
    tasks = answerable_tasks(spec, settings.profile)
    if tasks is not None and task not in tasks:
        raise ConfigError(
            f"{spec.name} cannot answer task {task!r}: it answers {', '.join(tasks)} (it has no "
            f"answer prompt for {task!r})"
        )
