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

import os

from langgraph_sdk import Auth

from noterag.server.key import given_key, key_matches

__all__ = ["auth"]

auth = Auth()


@auth.authenticate
async def authenticate(headers: dict[bytes, bytes]) -> Auth.types.MinimalUserDict:
    if not key_matches(given_key(headers), os.environ.get("NOTERAG_API_KEY")):
        raise Auth.exceptions.HTTPException(
            status_code=401,
            detail="this server needs its API key: send it as the x-api-key header",
        )
    return {"identity": "noterag-client", "is_authenticated": True}
