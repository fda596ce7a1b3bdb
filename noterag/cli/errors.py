"""The command line's error contract: every failure ends the command with one ``error: ...``
line on stderr, never a traceback: exit code 2 for a command line click cannot parse
(``usage_error_line``, printed by ``noterag.cli.OneLineUsageErrors``), 1 (or the error's own
``exit_code``) for everything else; ``NOTERAG_DEBUG=1`` shows the traceback of unexpected
errors. The line is made printable: error text may quote an endpoint's reply or a file's
content."""

from __future__ import annotations

import os
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

import click
import typer
import typer.core

from noterag.base.errors import NoteragError
from noterag.base.redact import redact
from noterag.base.terminal import printable
from noterag.cli.local import LocalModelGuard

# The click that typer parses with: recent typer vendors its own (typer._click), whose exception
# classes are not click's; older typer uses click itself.
typer_click: Any = getattr(typer.core, "_click", click)


def error_line(message: str) -> str:
    """``error: message`` as one printable line (newlines and runs of spaces collapsed), any
    credentials in a URL it quotes redacted."""
    return f"error: {' '.join(printable(redact(str(message))).split())}"


def fail(message: str, code: int = 1) -> NoReturn:
    click.echo(error_line(message), err=True)
    raise typer.Exit(code)


def usage_error_line(exc: Any) -> str:
    """A usage error of click's (unknown option, missing argument, bad value) as the one
    ``error:`` line, naming the help of the command it concerns."""
    ctx = getattr(exc, "ctx", None)
    where = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
    return error_line(exc.format_message() + where)


@contextmanager
def user_errors(guard: LocalModelGuard) -> Iterator[None]:
    """Turn every failure into one ``error:`` line and exit code 1; on Ctrl+C, let ``guard``
    stop the local server this command started and tell ``main`` not to wait for threads."""
    try:
        yield
    except (typer.Exit, click.exceptions.Exit, click.ClickException, typer_click.ClickException):
        raise
    except KeyboardInterrupt:
        guard.interrupt()
        fail("interrupted")
    except NoteragError as exc:
        fail(str(exc) or type(exc).__name__, getattr(exc, "exit_code", 1))
    except Exception as exc:  # noqa: BLE001 - the CLI's last line of defence against tracebacks
        friendly = _friendly(exc)
        if friendly is not None:
            fail(str(friendly))
        if os.environ.get("NOTERAG_DEBUG"):
            traceback.print_exc()
            fail(f"unexpected {type(exc).__name__}: {exc}")
        fail(
            f"unexpected {type(exc).__name__}: {exc} "
            "(run again with NOTERAG_DEBUG=1 to see the traceback)"
        )


def _friendly(exc: BaseException) -> NoteragError | None:
    try:
        from noterag.models import friendly_model_error
    except ImportError:
        return None
    return friendly_model_error(exc)
