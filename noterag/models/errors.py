"""Model-call failures as one-line errors: the endpoint problems a user can fix, and which of
them would fail every other question of an evaluation run too.

Model calls fail with openai exceptions, often wrapped by LangChain or LangGraph; every
function here looks along the whole cause chain (``cause_chain``).
"""

from __future__ import annotations

import json
import os
import socket
from typing import Any

from langchain_core.language_models import BaseChatModel

from noterag.base.errors import ModelUnavailableError, NoteragError
from noterag.base.redact import redact

__all__ = [
    "SKIP_CHECK_ENV",
    "cause_chain",
    "check_model_reachable",
    "fatal_error",
    "friendly_model_error",
    "model_check_skipped",
    "one_line_error",
]


# Set (1, true, yes, on) to skip the pre-check: for a server that cannot list its models, or
# to save the request. The CLI's --skip-model-check does the same for one command.
SKIP_CHECK_ENV = "NOTERAG_SKIP_MODEL_CHECK"


def model_check_skipped() -> bool:
    return os.environ.get(SKIP_CHECK_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


def check_model_reachable(model: BaseChatModel, timeout: float | None = None) -> None:
    """Raise ModelUnavailableError if an OpenAI-compatible model's endpoint cannot be reached
    or rejects the key, so that a run fails in seconds with the endpoint's URL rather than
    after the first paid steps and the client's retries.

    Asks for the endpoint's model list (cheap, no generation), once, within the model's own
    request timeout (``--timeout``; ``timeout`` overrides it). Only a connection that fails or
    times out and a rejected key (HTTP 401 / 403) are errors: any other answer (a 404 from a
    server without ``GET /v1/models``, a 405, a 5xx, a body that is no list) shows the endpoint
    is there, and the run's own requests say what else is wrong. Skipped when
    ``NOTERAG_SKIP_MODEL_CHECK`` is set, and for models that are not ChatOpenAI."""
    import openai

    if model_check_skipped():
        return
    client = getattr(model, "root_client", None)
    if client is None or not hasattr(client, "models"):
        return
    options: dict[str, Any] = {"max_retries": 0}
    if timeout is not None:
        options["timeout"] = timeout
    try:
        client.with_options(**options).models.list()
    except (
        openai.APIConnectionError,  # refused, unknown host, timed out
        openai.AuthenticationError,
        openai.PermissionDeniedError,
    ) as exc:
        friendly = friendly_model_error(exc)
        if friendly is None:
            raise
        raise friendly from exc
    except Exception:  # noqa: BLE001 - it answered: reachable (see the docstring)
        return


def friendly_model_error(exc: BaseException) -> NoteragError | None:
    """Map a model-call failure (anywhere in ``exc``'s cause chain) to a one-line error.

    Returns None when the failure is not a known endpoint problem, so the caller re-raises.
    """
    import openai

    for err in cause_chain(exc):
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
                f"the model endpoint {url} failed (HTTP {err.status_code}): {_status_detail(err)}"
            )
    return None


def fatal_error(exc: BaseException) -> NoteragError | None:
    """The error as a one-line NoteragError if it would fail every other question too: the
    endpoint refuses connections or cannot be found (after the client's retries), rejects the
    key, does not know the model, or the model could not be set up. None for a question's own
    failure (a timeout, a 5xx, a connection reset, a prompt too long for the model, an input
    the graph refuses, a bug on one input); the settings were checked before the run started."""
    import openai

    for err in cause_chain(exc):
        if isinstance(err, ModelUnavailableError):
            return err
        if isinstance(
            err, (openai.AuthenticationError, openai.PermissionDeniedError, openai.NotFoundError)
        ) or (
            isinstance(err, openai.APIConnectionError)
            and not isinstance(err, openai.APITimeoutError)
            and not _dropped_mid_request(err)
        ):
            return friendly_model_error(err)
    return None


def one_line_error(exc: BaseException) -> str:
    """``exc`` as one line: the friendly message of an endpoint problem, else its type and text."""
    friendly = friendly_model_error(exc)
    message = str(friendly) if friendly is not None else f"{type(exc).__name__}: {exc}"
    # a result row's error: the endpoint's URL in it without its credentials
    return " ".join(redact(message).split())


def cause_chain(exc: BaseException) -> list[BaseException]:
    """``exc``, then its cause (or the exception it was raised while handling), and so on."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


# The transport errors of a connection the endpoint accepted and then dropped (by class name:
# the openai SDK runs on httpx or httpx2, whose classes differ but whose names do not).
_DROPPED = frozenset({"RemoteProtocolError", "ReadError", "WriteError"})


def _dropped_mid_request(err: BaseException) -> bool:
    """Whether a connection error hit one request of a live endpoint (reset, disconnected
    without a reply) rather than an endpoint no request reaches (refused, unknown host)."""
    return any(
        isinstance(cause, ConnectionResetError) or type(cause).__name__ in _DROPPED
        for cause in cause_chain(err)
    )


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
    causes = cause_chain(err)[1:]
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


def _status_detail(err: Any) -> str:
    """What an error status came with: an HTML page by its title (a proxy's or a login page,
    whose first line says nothing), else the SDK's message's first line."""
    from noterag.models.replies import html_description, looks_like_html

    response = getattr(err, "response", None)
    try:
        content_type, body = response.headers.get("content-type", ""), response.content  # type: ignore[union-attr]
    except Exception:  # noqa: BLE001 - no response, or a stream not read: the message only
        return _first_line(err)
    if isinstance(body, bytes) and body.strip() and looks_like_html(content_type, body):
        return f"it answered {html_description(body)}"
    return _first_line(err)


def _first_line(err: BaseException) -> str:
    message = getattr(err, "message", None) or str(err)
    return message.strip().splitlines()[0] if message.strip() else ""
