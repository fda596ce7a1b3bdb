"""What one ``noterag`` command does about the local model server and Ctrl+C.

The server (``noterag.models.local_server``) is one per process and may be shared with the
program that embeds noterag (a test session, a notebook): a command stops only a server it
started itself. Ctrl+C must end a run at once, although worker threads may be blocked in a
model request for as long as the request's timeout.

The state lives in one ``LocalModelGuard`` per command invocation: ``main`` creates it and hands
it to click as the context object (``obj``), where each command finds it (``guard_of(ctx)``).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import typer


def _server_pid() -> int | None:
    # Only if noterag.models was imported: otherwise no local model can be running. Looked up
    # on the package, where tests patch local_server_pid.
    models = sys.modules.get("noterag.models")
    return models.local_server_pid() if models is not None else None


class LocalModelGuard:
    """The local model server this command started (if any) and whether the user pressed
    Ctrl+C (so ``main`` can leave without waiting for worker threads still in a request)."""

    def __init__(self) -> None:
        self.interrupted = False
        # True inside ``owned()`` when no server ran as it began: whatever server runs then
        # was started by this command.
        self._owns_server = False

    def _our_pid(self) -> int | None:
        return _server_pid() if self._owns_server else None

    @contextmanager
    def owned(self) -> Iterator[None]:
        """A local server started inside the block is this command's: stopped when the block
        ends, however it ends. One that already ran (e.g. started by the embedding program)
        is not ours to stop."""
        self._owns_server = _server_pid() is None
        try:
            yield
        finally:
            # The server would also stop at interpreter exit; stopping it here keeps the exit
            # quick and ordered.
            self.stop()

    def stop(self) -> None:
        """Stop the local model server if this command started it (the orderly stop)."""
        if self._our_pid() is not None:
            with suppress(Exception):  # best effort: the server also exits once noterag is gone
                sys.modules["noterag.models"].stop_local_server()
        self._owns_server = False

    def kill(self) -> None:
        # SIGKILL, not the orderly stop: the server would first finish the request in flight.
        pid = self._our_pid()
        if pid is not None:
            with suppress(OSError):
                os.killpg(pid, signal.SIGKILL)

    def interrupt(self) -> None:
        """The user pressed Ctrl+C (a KeyboardInterrupt reached the command)."""
        self.interrupted = True
        self.stop()

    @contextmanager
    def leave_at_once_on_interrupt(self) -> Iterator[None]:
        """Ctrl+C during a run exits now. A KeyboardInterrupt would unwind through LangGraph's
        worker threads and the local server's orderly stop, both of which wait for the model
        request in flight (15 s to minutes measured here with the local model on a busy
        machine)."""
        # Off the main thread no handler can be set; an ignored SIGINT (nohup, `&`) stays ignored.
        if (
            threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        ):
            yield
            return

        def leave(signum: int, frame: Any) -> None:
            self.kill()
            # os.write, not print: the main thread may be inside a write to stderr right now.
            reset = (
                "\r\x1b[2K\x1b[?25h" if sys.stderr.isatty() else ""
            )  # clear spinner, show cursor
            os.write(2, f"{reset}error: interrupted\n".encode())
            os._exit(1)

        previous = signal.signal(signal.SIGINT, leave)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)


def guard_of(ctx: typer.Context) -> LocalModelGuard:
    """The command's guard: the one ``main`` handed to click as ``obj``, else a new one for
    this invocation (typer's CliRunner calls the app without ``main``)."""
    return ctx.ensure_object(LocalModelGuard)
