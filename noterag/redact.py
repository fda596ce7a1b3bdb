"""Credentials out of everything noterag writes or prints.

A model or index URL may carry credentials: ``http://user:pass@host/v1`` (userinfo) or
``...?api_key=sk-...`` (a query parameter). ``redact`` replaces them with ``***`` wherever such
a URL appears in a text: the model and index labels of a run (run.json, summary.json, every
result row, the summary's header), the model cache's key, endpoint identities and every error
line. The URL still says which host it is; the secret is gone. Keys passed the usual way
(``OPENAI_API_KEY``, an ``Authorization`` header) never reach these texts at all.
"""

from __future__ import annotations

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
