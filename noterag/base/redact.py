"""Credentials out of everything noterag writes or prints.

A model or index URL may carry credentials: ``http://user:pass@host/v1`` (userinfo) or
``...?api_key=sk-...`` (a query parameter). ``redact`` replaces them with ``***`` wherever such
a URL appears in a text: the model and index labels of a run (run.json, summary.json, every
result row, the summary's header), the model cache's key, endpoint identities and every error
line. The URL still says which host it is; the secret is gone. Keys passed the usual way
(``OPENAI_API_KEY``, an ``Authorization`` header) never reach these texts at all.

The HTTP libraries log every request's URL, credentials included (httpx: ``HTTP Request: POST
http://user:pass@host/v1/...`` at INFO, which ``langgraph dev`` prints); ``redact_logs`` puts
a filter on their loggers that redacts each record's message (and traceback) before any
handler sees it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

# scheme://userinfo@ : everything between "//" and the first "@" before the host's end.
_USERINFO = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s@?#]+@")
# ?name=value / &name=value where the name says it holds a secret.
_SECRET_PARAM = re.compile(
    r"(?P<name>[?&;][^=&;\s?#]*(?:key|token|secret|pass|pwd|sig|auth|credential|session)"
    r"[^=&;\s?#]*=)[^&;,\s#'\"]+",
    re.IGNORECASE,
)

REDACTED = "***"


def redact(text: str) -> str:
    """``text`` with the credentials of every URL in it replaced by ``***``."""
    if "://" not in text and "=" not in text:
        return text
    text = _USERINFO.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)
    return _SECRET_PARAM.sub(lambda m: f"{m['name']}{REDACTED}", text)


# The loggers that print request URLs, each with the loggers under it (a record of
# "openai.<module>" is the openai SDK's): httpx and its successor httpx2 (INFO, one line per
# request), their httpcore (DEBUG), the openai SDK's (DEBUG), Elasticsearch's transport (INFO)
# and urllib3 under it.
URL_LOGGERS = (
    "httpx", "httpx2", "httpcore", "httpcore2", "openai", "elastic_transport.transport",
    "urllib3.connectionpool",
)  # fmt: skip


def redact_record(record: logging.LogRecord) -> logging.LogRecord:
    """``record`` with its message and traceback redacted, in place."""
    if isinstance(record.msg, str):  # not a structured event (structlog keeps a dict)
        try:
            message = record.getMessage()
        except (TypeError, ValueError):  # a malformed record: the handler reports it
            return record
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, ()
    if record.exc_info and not record.exc_text:
        record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
    return record


class _RedactingFactory:
    """A log record factory (``logging.setLogRecordFactory``) that redacts every record of the
    loggers it names and of the loggers under them, whichever module of a library logs it,
    before any filter or handler sees it."""

    def __init__(self, make: Callable[..., logging.LogRecord], names: tuple[str, ...]) -> None:
        self.make, self.names = make, names
        self.prefixes = tuple(f"{name}." for name in names)

    def __call__(self, *args: Any, **kwargs: Any) -> logging.LogRecord:
        record = self.make(*args, **kwargs)
        if record.name in self.names or record.name.startswith(self.prefixes):
            redact_record(record)
        return record


def redact_logs(names: tuple[str, ...] = URL_LOGGERS) -> None:
    """Redact every log record of the loggers ``names`` and of those under them (once)."""
    current = logging.getLogRecordFactory()
    if not isinstance(current, _RedactingFactory):
        logging.setLogRecordFactory(_RedactingFactory(current, names))
