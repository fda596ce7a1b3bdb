"""The server's optional API key, as LangGraph's custom auth (langgraph.json ``"auth"``).

With ``NOTERAG_API_KEY`` set in the server's environment, every request must carry that key,
as the ``x-api-key`` header (what the LangGraph SDKs send for ``api_key=``, and what Agent
Chat UI sends for its API key field) or as ``Authorization: Bearer <key>``; any other request
gets HTTP 401. Unset, every client is let in, as before. langgraph.json sets
``"disable_studio_auth": true``: `langgraph dev` would otherwise let any request that says it
comes from LangSmith Studio (an ``x-auth-scheme: langsmith`` header) pass without the key; give
Studio the key as a header in its connection settings instead.
"""

from __future__ import annotations

import hmac
import os

from langgraph_sdk import Auth

__all__ = ["auth", "key_matches"]

auth = Auth()


def key_matches(given: str | None, expected: str | None) -> bool:
    """Whether ``given`` is ``expected`` (None expected: no key is required), compared in
    constant time."""
    if not expected:
        return True
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


def _given_key(headers: dict[bytes, bytes]) -> str | None:
    key = headers.get(b"x-api-key")
    if key is not None:
        return key.decode("latin-1")
    scheme, _, token = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


@auth.authenticate
async def authenticate(headers: dict[bytes, bytes]) -> Auth.types.MinimalUserDict:
    if not key_matches(_given_key(headers), os.environ.get("NOTERAG_API_KEY")):
        raise Auth.exceptions.HTTPException(
            status_code=401,
            detail="this server needs its API key: send it as the x-api-key header",
        )
    return {"identity": "noterag-client", "is_authenticated": True}
