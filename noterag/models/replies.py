"""Replies that are no completion: an endpoint answering HTTP 2xx with an HTML page (a login or
proxy page: the base URL is not the API's), an empty body, invalid JSON, JSON without choices
or a choice without a message. The openai SDK and LangChain fail on those deep inside their
parsers (``ValueError: Unexpected response type``, ``JSONDecodeError``, ``IndexError``...), with
no word of the endpoint; here the HTTP client looks at each completion reply first and raises
``EndpointReplyError``, one line naming the endpoint and what it answered.

The check is an httpx response hook of the clients noterag builds its models with
(``noterag.models.retries.counting_clients``): it reads the body of a non-streamed reply (the
SDK reads it right after anyway) and leaves streamed ones (``text/event-stream``) and error
statuses (the SDK's own ``APIStatusError``) alone. A completion whose ``usage`` is no token
counts (a string, a negative number) has its usage removed and is counted
(``count_bad_usage``): its tokens are unknown, never summed wrongly.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import openai

from noterag.base.errors import ModelUnavailableError, NoteragError
from noterag.base.redact import redact

__all__ = [
    "EndpointPageError",
    "EndpointReplyError",
    "UsageCount",
    "acheck_reply",
    "check_reply",
    "count_bad_usage",
    "is_completion_reply",
    "reply_problem",
]


class EndpointReplyError(NoteragError, openai.OpenAIError):
    """A completion reply that is not one (the message names the endpoint and the problem).

    An ``OpenAIError``, so that the SDK passes it on as it is (not retried, not wrapped in a
    connection error). One question's failure in an evaluation: a flaky proxy may garble one
    reply and not the next."""


class EndpointPageError(EndpointReplyError, ModelUnavailableError):
    """The endpoint answered a web page: its base URL is not an API's, so every request would
    get the same page (an evaluation stops at once: ``fatal_error``)."""


_COMPLETION_PATHS = ("/chat/completions", "/completions")
_TITLE = re.compile(rb"<title[^>]*>(.*?)</title", re.IGNORECASE | re.DOTALL)


def base_url_of(request: Any) -> str:
    """The base URL a request went to (what users configure): its URL without the API path."""
    url = str(request.url).split("?", 1)[0]
    for path in (*_COMPLETION_PATHS, "/models", "/embeddings", "/responses"):
        if url.endswith(path):
            return url[: -len(path)]
    return url


def page_title(body: bytes) -> str | None:
    """The ``<title>`` of an HTML page, one line, at most 80 characters; None without one."""
    match = _TITLE.search(body[:65536])
    if match is None:
        return None
    title = " ".join(match.group(1).decode("utf-8", "replace").split())
    return title[:80] or None


def looks_like_html(content_type: str, body: bytes) -> bool:
    return "html" in content_type.lower() or body.lstrip()[:1] == b"<"


def html_description(body: bytes) -> str:
    title = page_title(body)
    return f"an HTML page ({title!r})" if title else "an HTML page"


def _problem(path: str, content_type: str, body: bytes) -> tuple[str, bool] | None:
    """What is wrong with a completion reply (and whether it is a web page), or None."""
    return _read(path, content_type, body)[0]


def _read(path: str, content_type: str, body: bytes) -> tuple[tuple[str, bool] | None, Any]:
    """``_problem`` and the reply's parsed JSON (None when it is not JSON), so that a good
    reply is parsed once here (``_drop_bad_usage`` reads the same object)."""
    if not body.strip():
        return ("an empty body", False), None
    if looks_like_html(content_type, body):
        advice = "check that the base URL is the API's (it usually ends in /v1)"
        return (f"{html_description(body)}, not a JSON completion: {advice}", True), None
    try:
        data = json.loads(body)
    except UnicodeDecodeError:
        return ("a body that is not UTF-8 text", False), None
    except json.JSONDecodeError as exc:
        return (f"invalid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})", False), None
    if not isinstance(data, dict):
        return (f"JSON that is not an object (a {type(data).__name__})", False), data
    choices = data.get("choices")
    if not choices and data.get("error"):
        error = data["error"]
        message = error.get("message") if isinstance(error, dict) else error
        return (f"an error instead of a completion: {message}", False), data
    if not isinstance(choices, list) or not choices:
        return ("a completion with no choices", False), data
    first = choices[0]
    field = "message" if path.endswith("/chat/completions") else "text"
    if not isinstance(first, dict) or first.get(field) is None:
        return (f"a choice with no {field}", False), data
    return None, data


def is_completion_reply(request: Any, response: Any) -> bool:
    """Whether ``response`` (to ``request``) is a completion reply this check reads."""
    return bool(
        request.method == "POST"
        and request.url.path.endswith(_COMPLETION_PATHS)
        and 200 <= response.status_code < 300
        and "text/event-stream" not in response.headers.get("content-type", "").lower()
    )


def _checked(response: Any) -> bool:
    return is_completion_reply(response.request, response)


def reply_problem(request: Any, response: Any) -> str | None:
    """What is wrong with the read completion reply ``response`` to ``request`` (None: it is
    one): the replicas of one model (``noterag.models.endpoints``) fail over on it."""
    found = _problem(request.url.path, response.headers.get("content-type", ""), response.content)
    return None if found is None else found[0]


# The replica a reply came from (``noterag.models.endpoints``), its credentials redacted: the
# endpoint an error names, rather than the client's base URL (the first replica).
REPLICA = "noterag_replica"


# The usage fields a completion's ``usage`` object counts tokens in.
_USAGE_FIELDS = ("prompt_tokens", "completion_tokens", "total_tokens")


@dataclass
class UsageCount:
    """Replies whose ``usage`` was ignored (not token counts: a string, a negative number)."""

    ignored: int = 0


_USAGE: ContextVar[UsageCount | None] = ContextVar("noterag_bad_usage", default=None)


@contextmanager
def count_bad_usage() -> Iterator[UsageCount]:
    """Count the replies whose usage was ignored in this context (an asyncio task and the tasks
    and threads it starts), as ``count_retries`` counts retries."""
    counter = UsageCount()
    token = _USAGE.set(counter)
    try:
        yield counter
    finally:
        _USAGE.reset(token)


def _valid_usage(usage: Any) -> bool:
    if not isinstance(usage, dict):
        return False
    return all(
        type(usage[name]) is int and usage[name] >= 0 for name in _USAGE_FIELDS if name in usage
    )


def _drop_bad_usage(response: Any, data: Any) -> None:
    """A completion whose ``usage`` is not token counts (``"10"``, ``-5``, a string for the
    object) would fail the question inside LangChain (TypeError) or add wrong numbers to the
    run's costs: the usage is removed from the reply (``data``, its parsed body; the question
    counts no tokens for it) and the reply counted (``count_bad_usage``)."""
    if not isinstance(data, dict) or data.get("usage") is None or _valid_usage(data["usage"]):
        return
    del data["usage"]
    # httpx has no public way to replace a read body; the SDK parses ``response.content``,
    # which is this attribute.
    response._content = json.dumps(data).encode()
    counter = _USAGE.get()
    if counter is not None:
        counter.ignored += 1


def _raise_for(response: Any) -> None:
    found, data = _read(
        response.request.url.path, response.headers.get("content-type", ""), response.content
    )
    if found is None:
        _drop_bad_usage(response, data)
        return
    problem, page = found
    error = EndpointPageError if page else EndpointReplyError
    where = response.extensions.get(REPLICA) or redact(base_url_of(response.request))
    raise error(f"the model endpoint {where} answered {problem} (HTTP {response.status_code})")


def check_reply(response: Any) -> None:
    """httpx response hook (sync client): raise ``EndpointReplyError`` for a completion reply
    that is not one."""
    if _checked(response):
        response.read()
        _raise_for(response)


async def acheck_reply(response: Any) -> None:
    """httpx response hook (async client): as ``check_reply``."""
    if _checked(response):
        await response.aread()
        _raise_for(response)
