"""Chat models: build one from a spec, run the offline model, explain connection failures.

* ``spec``: ``load_chat_model`` and the spec forms it accepts (``"openai:<model>"``,
  ``"openai:<model>@<base_url>"``, ``"local"``, ``"hf:<dir>"``, a LangChain chat model,
  ``None`` for ``$NOTERAG_MODEL``), ``ModelSettings``, ``OpenAICompatibleChat``;
* ``retries``: ``count_retries`` and the HTTP hooks that count the client's own retries;
* ``local_server``: the llama.cpp server process behind ``"local"``;
* ``errors``: ``friendly_model_error`` turns the endpoint problems among the openai exceptions
  into one-line ``ModelUnavailableError`` messages; ``fatal_error`` says which of them would
  fail every question of an evaluation run.

Transient failures are retried by the openai client itself, per request (never a whole graph
node): HTTP 408, 409, 429 and 5xx replies, timeouts and connection errors (refused, reset) are
sent again up to ``ModelSettings.max_retries`` times (default 2, so at most 3 attempts), after
an exponential backoff of 0.5 s, 1 s, 2 s, ... capped at 8 s, each shortened by a random 0-25 %,
or after the server's ``Retry-After`` when it gives one of at most 120 s (the SDK's constants,
``RETRY_BACKOFF``). ``ModelSettings.timeout`` (default 60 s) bounds each attempt as a whole, to
its reply's last byte (``noterag.models.deadline``).
``NOTERAG_TIMEOUT`` and ``NOTERAG_MAX_RETRIES`` set both for models built from a spec.
``count_retries()`` counts the requests re-sent while it is active (per question in an
evaluation run).

Callers use the names of this package (``noterag.models.load_chat_model``), which is also where
tests patch them; the ``spec`` names load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from noterag.models.errors import (
    cause_chain,
    check_model_reachable,
    fatal_error,
    friendly_model_error,
    one_line_error,
)
from noterag.models.local_server import (
    LOCAL_INSTALL_HINT,
    LOCAL_MAX_TOKENS,
    LOCAL_MODEL_NAME,
    LOCAL_N_CTX,
    LOCAL_START_TIMEOUT,
    find_local_gguf,
    local_extra_installed,
    local_server_log,
    local_server_pid,
    local_server_url,
    start_local_server,
    stop_local_server,
)
from noterag.models.retries import RETRY_BACKOFF, RetryCount, count_retries

if TYPE_CHECKING:
    from noterag.models.spec import (
        ModelSettings,
        OpenAICompatibleChat,
        aload_chat_model,
        load_chat_model,
    )

# Loaded on first use: langchain-openai takes about half a second to import, and the eval
# runner (so every `noterag` command) imports the model errors above at start-up.
_SPEC_NAMES = frozenset(
    {"ModelSettings", "OpenAICompatibleChat", "aload_chat_model", "load_chat_model"}
)


def __getattr__(name: str) -> Any:
    if name in _SPEC_NAMES:
        from noterag.models import spec

        return getattr(spec, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "LOCAL_INSTALL_HINT",
    "LOCAL_MAX_TOKENS",
    "LOCAL_MODEL_NAME",
    "LOCAL_N_CTX",
    "LOCAL_START_TIMEOUT",
    "RETRY_BACKOFF",
    "ModelSettings",
    "OpenAICompatibleChat",
    "RetryCount",
    "aload_chat_model",
    "cause_chain",
    "check_model_reachable",
    "count_retries",
    "fatal_error",
    "find_local_gguf",
    "friendly_model_error",
    "load_chat_model",
    "local_extra_installed",
    "local_server_log",
    "local_server_pid",
    "local_server_url",
    "one_line_error",
    "start_local_server",
    "stop_local_server",
]
