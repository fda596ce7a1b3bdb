"""Help texts that follow ``--method``: ``noterag ask --method amber --help`` shows Amber's
defaults for the settings' flags, not DeepNote's.

A setting's flag says ``{default}`` in its help; the command (``MethodCommand``) fills it in
with the default of the method the command line names (else of ``--method``'s default) when
the help is printed. Click handles ``--help`` before it converts ``--method``, so the command
reads the method from the raw arguments.
"""

from __future__ import annotations

from dataclasses import MISSING, fields
from typing import Any, cast

from typer.core import TyperCommand

from noterag.registry.methods import METHODS

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


def setting_default(method: str, name: str) -> str:
    """What a setting's help says about its default for ``method``."""
    defaults = {f.name: f.default for f in fields(METHODS[method].context)}
    if name not in defaults:
        return f"{method} has no such setting"
    value = defaults[name]
    return f"{method}'s default: {'none' if value is None or value is MISSING else value}"


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
