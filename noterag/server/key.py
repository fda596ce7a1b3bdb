"""The server's API key (``NOTERAG_API_KEY``) as a request carries it, compared: shared by the
auth handler (noterag/server/auth.py, langgraph-api's routes) and the HTTP guard
(noterag/server/http.py, the pages langgraph-api serves outside its auth)."""

from __future__ import annotations

import hmac

__all__ = ["given_key", "key_matches"]


def key_matches(given: bytes | None, expected: str | None) -> bool:
    """Whether the header bytes ``given`` are the key ``expected`` (None expected: no key is
    required), compared in constant time. A key may hold any character: a client sends it
    UTF-8 encoded (the SDKs), or, where every character fits, as Latin-1 bytes (a browser's
    fetch: header values are byte strings there)."""
    if not expected:
        return True
    if given is None:
        return False
    encodings = [expected.encode("utf-8")]
    try:
        encodings.append(expected.encode("latin-1"))
    except UnicodeEncodeError:
        pass
    # every form compared, whichever matches: no early exit that times the first
    matches = [hmac.compare_digest(given, form) for form in encodings]
    return any(matches)


def given_key(headers: dict[bytes, bytes]) -> bytes | None:
    """The key a request carries (``x-api-key``, else ``Authorization: Bearer``), as bytes."""
    key = headers.get(b"x-api-key")
    if key is not None:
        return key
    scheme, _, token = headers.get(b"authorization", b"").partition(b" ")
    return token.strip() if scheme.lower() == b"bearer" and token.strip() else None
