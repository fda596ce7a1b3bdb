"""The ``noterag`` command line: build a BM25 index, ask a question with a note-centric method.

    noterag index corpus.jsonl --out my-index
    noterag ask "In which year was the architect of the Velmora Bridge born?" --index my-index

Progress goes to stderr and the answer (or ``--json``, the final state) to stdout, so
``noterag ask ... > answer.txt`` captures just the answer. Every error a user can cause ends the
command with one ``error: ...`` line on stderr and exit code 1, never a traceback
(``NOTERAG_DEBUG=1`` shows the traceback of unexpected errors; ``cli.errors``).

One module per command group (``index``, ``methods``, ``ask``, ``trace``, ``eval`` with
``compare``, ``corpus``); ``options`` holds what they share, ``render`` the progress lines,
``local`` the local model server's lifecycle and Ctrl+C.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import click
import typer

from noterag.cli.ask import ask_command
from noterag.cli.corpus import corpus_from_command
from noterag.cli.eval import compare_command, eval_command
from noterag.cli.index import index_command
from noterag.cli.local import LocalModelGuard
from noterag.cli.methods import methods_command
from noterag.cli.trace import trace_command

__all__ = ["app", "main"]

app = typer.Typer(
    name="noterag",
    help="Note-centric adaptive RAG (Adaptive-Note, DeepNote) as LangGraph graphs.",
    no_args_is_help=True,
    add_completion=False,
    # Our own handler prints one line per error; typer's pretty tracebacks would bypass it.
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        from noterag import __version__

        click.echo(f"noterag {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Note-centric adaptive RAG (Adaptive-Note, DeepNote) as LangGraph graphs."""


# In this order in `noterag --help`.
app.command("index")(index_command)
app.command("methods")(methods_command)
app.command("ask")(ask_command)
app.command("trace")(trace_command)
app.command("eval")(eval_command)
app.command("compare")(compare_command)
app.command("corpus-from")(corpus_from_command)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point (``noterag``, ``python -m noterag``)."""
    guard = LocalModelGuard()
    try:
        app(args=argv, prog_name="noterag", obj=guard)
    except SystemExit as exc:
        if guard.interrupted:
            # Worker threads may still sit in a model request; don't wait for them.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(exc.code if isinstance(exc.code, int) else 1)
        raise
