"""``noterag methods``: every registered method as its declaration describes it: what it is, its
profiles, model roles and prompts, and its settings (for ``--context KEY=VALUE``) with defaults."""

from __future__ import annotations

from dataclasses import MISSING, fields
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

from noterag.cli.method_help import PROFILE_NOTES, setting_meaning
from noterag.cli.options import known_method
from noterag.registry.methods import METHODS


def methods_command(
    name: Annotated[
        str | None,
        typer.Argument(
            help="Show this method only (e.g. deepnote).", show_default=False, callback=known_method
        ),
    ] = None,
) -> None:
    """List the methods (or one): what each is, its profiles, roles, prompts and settings (for
    --context KEY=VALUE), with defaults."""
    from rich.table import Table

    from noterag.core.spec import prompt_names

    console = Console(highlight=False)
    for spec in [METHODS[name]] if name is not None else list(METHODS.values()):
        console.print(Text(spec.name, style="bold") + Text(f" — {spec.title}"))
        console.print(Text(f"  {spec.summary}"))
        profiles = "; ".join(f"{p} ({PROFILE_NOTES.get(p, p)})" for p in spec.profiles)
        console.print(Text(f"  profiles: {profiles}"))
        if "original" in spec.profiles:
            changes = ", ".join(f"{k}={v}" for k, v in spec.context.ORIGINAL.items())
            console.print(Text(f"  profile original sets (unless given): {changes}"))
        console.print(Text(f"  model roles (--<role>_model in Python): {', '.join(spec.roles)}"))
        console.print(
            Text(
                f"  prompts (--prompt NAME=FILE): {', '.join(prompt_names(spec.prompts['paper']))}"
            )
        )
        table = Table(show_edge=False, pad_edge=False, box=None, padding=(0, 2))
        table.add_column("  setting", style="bold")
        table.add_column("default")
        table.add_column("meaning")
        for f in fields(spec.context):
            if f.name == "prompts":  # set with --prompt
                continue
            default = "" if f.default is MISSING else repr(f.default)
            table.add_row(f"  {f.name}", default, setting_meaning(spec, f))
        console.print(table)
        console.print()
