"""Help texts that follow ``--method``: ``noterag ask --method amber --help`` shows Amber's
defaults for the settings' flags, not DeepNote's.

A setting's flag says ``{default}`` in its help; the command (``MethodCommand``) fills it in
with the default of the method the command line names (else of ``--method``'s default) when
the help is printed. Click handles ``--help`` before it converts ``--method``, so the command
reads the method from the raw arguments.
"""

from __future__ import annotations

from dataclasses import MISSING, Field, fields
from typing import TYPE_CHECKING, Any, cast

from typer.core import TyperCommand

from noterag.registry.methods import METHODS

if TYPE_CHECKING:
    from noterag.core.spec import MethodSpec

_METHOD_FLAGS = ("--method", "-m")


def method_in(args: list[str]) -> str | None:
    """The value of the last ``--method``/``-m`` in ``args`` (``--method X``, ``--method=X``,
    ``-m X``, ``-mX``), None when there is none."""
    found = None
    for i, arg in enumerate(args):
        if arg == "--":
            break
        if arg in _METHOD_FLAGS and i + 1 < len(args):
            found = args[i + 1]
        elif arg.startswith("--method="):
            found = arg.partition("=")[2]
        elif arg.startswith("-m") and not arg.startswith("--") and len(arg) > 2:
            found = arg[2:]
    return found


# The settings a run leaves to the profile unless it sets them: what each does, without the
# shared class's defaults (the method's come from its profiles, ``sampling_defaults``)
SAMPLING = {
    "temperature": "Sampling temperature for every call",
    "top_p": "Nucleus sampling top_p",
    "max_tokens": "Cap on tokens per model reply",
}
PROFILE_NOTES = {
    "paper": "the printed paper's method",
    "official": "reproduces the official code: the configuration that produced the published "
    "numbers",
    "original": "the baseline as its own paper and code ran it (docs/deviations.md)",
    "flashrag": "the baseline as FlashRAG's benchmark ran it, whose numbers ReSP Table 2 "
    "reprints: FlashRAG's prompts, passage format and decoding (docs/deviations.md)",
}
OWN = "the model's own"  # an unset sampling setting
# what each task's answer is, for a method's list of the tasks it answers
TASKS = {
    "multihop": "short answer",
    "asqa": "long form",
    "strategyqa": "yes/no",
    "crud": "CRUD-RAG's Chinese tasks",
}


def sampling_defaults(spec: MethodSpec, name: str) -> dict[str, Any]:
    """Profile -> the value of the sampling setting ``name`` a run of the method ``spec`` uses
    when it sets none: the profile's own (the method's paper profile, the official code's, the
    original's), where the profile's settings do not set it. None: the model's own."""
    from noterag.base.errors import ConfigError
    from noterag.core.context import resolve_context
    from noterag.core.profiles import get_profile, original_profile

    found: dict[str, Any] = {}
    for profile in spec.profiles:
        try:
            ctx = resolve_context(spec.context, {"profile": profile})
            strategies = get_profile(
                profile,
                spec.name,
                official_code=getattr(ctx, "official_code", None) or spec.official_code,
                paper=spec.paper_profile,
                original=original_profile(spec.paper_profile) if profile == "original" else None,
            )
        except ConfigError:  # a profile its settings cannot resolve alone: not shown
            continue
        found[profile] = {**strategies.sampling, **ctx.sampling()}.get(name)
    return found


def setting_meaning(spec: MethodSpec, setting: Field[Any]) -> str:
    """What ``noterag methods`` says a setting of the method ``spec`` means: its description,
    but for the settings whose shared description would speak of other methods: the sampling
    settings (their values under the method's own profiles) and ``task`` (the tasks its answer
    prompts answer)."""
    from noterag.core.tasks import answerable_tasks

    if setting.name in SAMPLING:
        values = sampling_defaults(spec, setting.name)
        unset = "; ".join(f"{profile}: {OWN if v is None else v}" for profile, v in values.items())
        return f"{SAMPLING[setting.name]} (None: {unset})."
    if setting.name == "profile":
        return "; ".join(f"{p}: {PROFILE_NOTES.get(p, p)}" for p in spec.profiles) + "."
    if setting.name == "task":
        tasks = answerable_tasks(spec)
        if tasks:
            listed = ", ".join(f"{t} ({TASKS[t]})" if t in TASKS else t for t in tasks)
            return f"Answer style: {listed}. The input's `task` overrides it."
    return str(setting.metadata.get("description", ""))


def setting_default(method: str, name: str) -> str:
    """What a setting's help says about its default for ``method``."""
    spec = METHODS[method]
    defaults = {f.name: f.default for f in fields(spec.context)}
    if name not in defaults:
        return f"{method} has no such setting"
    value = defaults[name]
    if name in SAMPLING and value is None:  # unset: the method's paper profile decides
        value = sampling_defaults(spec, name).get("paper")
        return f"{method}'s default: {OWN if value is None else value}"
    said = f"{method}'s default: {'none' if value is None or value is MISSING else value}"
    if name == "task":  # the shared list names tasks this method may not answer
        from noterag.core.tasks import answerable_tasks

        tasks = answerable_tasks(spec)
        if tasks:
            return f"{said}; {method} answers {', '.join(tasks)}"
    return said


class MethodCommand(TyperCommand):
    """A command whose settings' help shows the chosen method's defaults."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # the help texts with a {default} to fill in, by parameter
        self.help_templates = {
            p.name: text
            for p in self.params
            if p.name and isinstance(text := getattr(p, "help", None), str) and "{default}" in text
        }

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        ctx.meta["noterag.method"] = method_in(args)
        return super().parse_args(ctx, args)

    # (typer vendors click as typer._click: its Context, not click's, hence Any)
    def format_help(self, ctx: Any, formatter: Any) -> None:
        method = ctx.meta.get("noterag.method")
        if method not in METHODS:
            method = next(p.default for p in self.params if p.name == "method")
        for param in self.params:
            template = self.help_templates.get(param.name or "")
            if template is not None:
                cast(Any, param).help = template.replace(
                    "{default}", setting_default(str(method), param.name or "")
                )
        super().format_help(ctx, formatter)
