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


# The loggers that print request URLs: httpx and its successor httpx2 (INFO, one line per
# request), their httpcore (DEBUG), the openai SDK's (DEBUG), Elasticsearch's transport (INFO)
# and urllib3 under it.
URL_LOGGERS = (
    "httpx", "httpx2", "httpcore", "httpcore2", "openai", "openai._base_client",
    "elastic_transport.transport", "urllib3.connectionpool",
)  # fmt: skip


class RedactingFilter(logging.Filter):
    """A filter that leaves every record in, its message and traceback redacted. A filter of a
    logger sees only the records made by that logger (not its children's): ``redact_logs``
    puts one on each logger that names URLs."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):  # not a structured event (structlog keeps a dict)
            try:
                message = record.getMessage()
            except (TypeError, ValueError):  # a malformed record: the handler reports it
                return True
            clean = redact(message)
            if clean != message:
                record.msg, record.args = clean, ()
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        return True


def redact_logs(names: tuple[str, ...] = URL_LOGGERS) -> None:
    """Put a ``RedactingFilter`` on each of the loggers ``names`` (once)."""
    for name in names:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactingFilter) for f in logger.filters):
            logger.addFilter(RedactingFilter())
