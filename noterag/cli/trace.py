"""``noterag trace``: a run as one self-contained HTML page (also ``noterag ask --html``)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.text import Text

from noterag.base.errors import ConfigError
from noterag.base.terminal import printable
from noterag.cli.errors import user_errors
from noterag.cli.local import guard_of
from noterag.cli.render import stderr_console

ForceOption = Annotated[
    bool,
    typer.Option(
        "--force",
        help="Overwrite the --html file even if it is not a page noterag wrote (by default only "
        "an empty file or an earlier trace page is replaced).",
    ),
]


def write_trace(run: dict[str, Any], path: Path, console: Console, force: bool = False) -> None:
    from noterag.trace.page import write_html

    write_html(run, path, force)
    console.print(Text(printable(f"trace written to {path}"), style="dim"))


def default_page(run_file: Path, row_id: str | None) -> Path:
    """The page's name when ``--html`` is not given: the run file's with ``.html``, and for one
    row of a results file (``--id``) the row's id in it, so each row gets its own page. The id
    is data: only letters, digits, ``_`` and ``-`` of it reach the name (never a path
    separator or ``..``), plus a short hash of the whole id when anything was dropped, so two
    ids never share a page."""
    if row_id is None:
        return run_file.with_suffix(".html")
    safe = re.sub(r"[^A-Za-z0-9_-]+", "_", row_id).strip("_")[:60]
    if safe != row_id:
        digest = hashlib.sha256(row_id.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        safe = f"{safe}-{digest}" if safe else digest
    return run_file.with_name(f"{run_file.stem}.{safe}.html")


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
            help="The HTML file to write (default: the run file's name with .html; with --id, "
            "RUN_FILE_NAME.ID.html).",
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
    force: ForceOption = False,
) -> None:
    """Render a run as one self-contained HTML page, like the papers' case-study tables:
    each step's queries, new passages, note changes and verdicts, the answer and its cost."""
    console = stderr_console()
    with user_errors(guard_of(ctx)):
        from noterag.trace.page import load_run

        out = html_out or default_page(run_file, row_id)
        if out.resolve() == run_file.resolve():  # even with --force: it is the input
            raise ConfigError(f"--html {out} would overwrite the run file")
        write_trace(load_run(run_file, row_id), out, console, force)
