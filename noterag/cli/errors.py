"""The command line's error contract: every failure a user can cause ends the command with one
``error: ...`` line on stderr and exit code 1 (or the error's own ``exit_code``), never a
traceback; ``NOTERAG_DEBUG=1`` shows the traceback of unexpected errors."""

from __future__ import annotations

import os
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

import click
import typer

from noterag.cli.local import LocalModelGuard
from noterag.errors import NoteragError


def fail(message: str, code: int = 1) -> NoReturn:
    # Collapse newlines: the contract is exactly one line on stderr.
    click.echo(f"error: {' '.join(str(message).split())}", err=True)
    raise typer.Exit(code)


@contextmanager
def user_errors(guard: LocalModelGuard) -> Iterator[None]:
    """Turn every failure into one ``error:`` line and exit code 1; on Ctrl+C, let ``guard``
    stop the local server this command started and tell ``main`` not to wait for threads."""
    try:
        yield
    except (typer.Exit, click.exceptions.Exit, click.ClickException):
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
