"""The HTTP library under the openai SDK, found once: the lowest module of noterag.models (it
imports none of them), so that retries, turns and endpoints can all use it without an import
circle."""

from __future__ import annotations

import importlib
from typing import Any


def http_library() -> Any:
    """The package the openai SDK's HTTP clients are built on (httpx, or its successor httpx2)."""
    import openai

    # asked through public names only: which library's Client the SDK's client is
    for name in ("httpx2", "httpx"):
        try:
            library = importlib.import_module(name)
        except ImportError:
            continue
        if issubclass(openai.DefaultHttpxClient, library.Client):
            return library
    raise ImportError("the openai SDK's HTTP client is neither httpx2's nor httpx's")
