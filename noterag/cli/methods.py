"""``noterag methods``: each method's settings (for ``--context KEY=VALUE``) with defaults."""

from __future__ import annotations

from dataclasses import fields

from rich.console import Console

from noterag.methods import METHODS, context_schema


def methods_command() -> None:
    """List the methods and each one's settings (for --context KEY=VALUE), with defaults."""
    from rich.table import Table

    console = Console(highlight=False)
    for method in METHODS:
        schema = context_schema(method)
        table = Table(title=method, title_justify="left", show_edge=False)
        table.add_column("setting", style="bold")
        table.add_column("default")
        table.add_column("meaning")
        for f in fields(schema):
            table.add_row(f.name, repr(f.default), f.metadata.get("description", ""))
        console.print(table)
        console.print()
