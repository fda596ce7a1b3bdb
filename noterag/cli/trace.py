"""``noterag trace``: a run as one self-contained HTML page (also ``noterag ask --html``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.text import Text

from noterag.cli.errors import user_errors
from noterag.cli.local import guard_of
from noterag.cli.render import stderr_console
from noterag.errors import ConfigError


def write_trace(run: dict[str, Any], path: Path, console: Console) -> None:
    from noterag.trace import write_html

    write_html(run, path)
    console.print(Text(f"trace written to {path}", style="dim"))


def trace_command(
    ctx: typer.Context,
    run_file: Annotated[
        Path,
        typer.Argument(
            help="A run: the JSON of `noterag ask --json`, or an eval results.jsonl (one row of "
            "it; pick it with --id). Rows of results.jsonl carry no passage text: passages show "
            "by id.",
            show_default=False,
        ),
    ],
    html_out: Annotated[
        Path | None,
        typer.Option(
            "--html",
            help="The HTML file to write (default: the run file's name with .html).",
            show_default=False,
        ),
    ] = None,
    row_id: Annotated[
        str | None,
        typer.Option(
            "--id",
            help="With a results.jsonl: the question id of the row to render.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Render a run as one self-contained HTML page, like the papers' case-study tables:
    each step's queries, new passages, note changes and verdicts, the answer and its cost."""
    console = stderr_console()
    with user_errors(guard_of(ctx)):
        from noterag.trace import load_run

        out = html_out or run_file.with_suffix(".html")
        if out.resolve() == run_file.resolve():
            raise ConfigError(f"--html {out} would overwrite the run file")
        write_trace(load_run(run_file, row_id), out, console)
