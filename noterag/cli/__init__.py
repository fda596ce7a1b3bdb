"""The ``noterag`` command line: build a BM25 index, ask a question with a note-centric method.

    noterag index corpus.jsonl --out my-index
    noterag ask "In which year was the architect of the Velmora Bridge born?" --index my-index

Progress goes to stderr and the answer (or ``--json``, the method's output) to stdout, so
``noterag ask ... > answer.txt`` captures just the answer. Every error ends the command with
exactly one ``error: ...`` line on stderr and nothing on stdout, never a traceback or a boxed
panel: exit code 2 when the command line cannot be parsed (an unknown option or command, a
missing argument, a value of the wrong type or not among the choices: ``OneLineUsageErrors``),
exit code 1 for everything else, a setting's value out of range included, whether given as a
flag or as ``-c KEY=VALUE`` (the context dataclass checks both alike). ``NOTERAG_DEBUG=1`` shows
the traceback of unexpected errors (``cli.errors``).

One module per command group (``index``, ``methods``, ``ask``, ``trace``, ``eval`` with
``compare``, ``corpus``, ``reproduce``); ``options`` holds what they share, ``render`` the
progress lines, ``local`` the local model server's lifecycle and Ctrl+C.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Sequence
from typing import Annotated, Any

import click
import typer
from typer.core import TyperGroup

from noterag.cli.align import app as align_app
from noterag.cli.ask import ask_command
from noterag.cli.corpus import corpus_from_command
from noterag.cli.errors import typer_click, usage_error_line
from noterag.cli.eval import compare_command, eval_command, merge_command
from noterag.cli.index import index_command
from noterag.cli.local import LocalModelGuard
from noterag.cli.method_help import MethodCommand
from noterag.cli.methods import methods_command
from noterag.cli.reproduce import reproduce_command
from noterag.cli.trace import trace_command

__all__ = ["app", "main"]


class OneLineUsageErrors(TyperGroup):
    """The command group with click's usage errors as one ``error:`` line and exit code 2,
    instead of typer's boxed panel under a usage block (the CLI's contract: one line per
    error). Here rather than in ``main`` so that every way of calling ``app`` (``main``,
    ``python -m noterag``, typer's CliRunner) prints the same."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        run = functools.partial(
            super().main, args, prog_name, complete_var, windows_expand_args=windows_expand_args
        )
        if not standalone_mode:
            return run(standalone_mode=False, **extra)
        try:
            # Not standalone: click raises the usage error to us rather than formatting it,
            # and returns the exit code of a typer.Exit (e.g. --help, --version: 0).
            code = run(standalone_mode=False, **extra)
        except typer_click.exceptions.NoArgsIsHelpError:
            sys.exit(2)  # `noterag` alone: typer has printed the help, as before
        except typer_click.exceptions.ClickException as exc:  # usage errors: exit code 2
            click.echo(usage_error_line(exc), err=True)
            sys.exit(exc.exit_code)
        except typer.Abort:  # EOF on a prompt
            click.echo("error: aborted", err=True)
            sys.exit(1)
        except BrokenPipeError:  # `noterag ask --help | head`: the reader left
            # What Python's documentation advises: no second error when the interpreter
            # flushes stdout at exit.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(
    name="noterag",
    cls=OneLineUsageErrors,
    help="Note-centric adaptive RAG (Adaptive-Note, DeepNote, Amber, ReSP and their baselines) as LangGraph graphs; `noterag methods` lists them.",
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
    """Note-centric adaptive RAG (Adaptive-Note, DeepNote, Amber, ReSP and their baselines) as LangGraph graphs; `noterag methods` lists them."""


# In this order in `noterag --help`.
app.command("index")(index_command)
app.command("methods")(methods_command)
app.command("ask", cls=MethodCommand)(ask_command)
app.command("trace")(trace_command)
app.command("eval")(eval_command)
app.command("compare")(compare_command)
app.command("merge")(merge_command)
app.command("corpus-from")(corpus_from_command)
app.command("reproduce")(reproduce_command)
app.add_typer(align_app, name="align")


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
