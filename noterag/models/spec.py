"""Chat models from a spec, with noterag's sampling and transport settings.

A spec is one of

* a LangChain ``BaseChatModel`` (used as is);
* ``"openai:<model>"``: any OpenAI-compatible endpoint through langchain-openai. The base URL
  comes from the ``base_url`` argument, else ``NOTERAG_BASE_URL``, else ``OPENAI_BASE_URL``
  (unset means api.openai.com); the key from ``api_key``, else ``OPENAI_API_KEY``, else
  ``"EMPTY"`` when a base URL is set (vLLM, Ollama and llama.cpp want none);
* ``"openai:<model>@<base_url>"``: the same with the base URL inline, e.g.
  ``openai:qwen2.5:7b@http://localhost:11434/v1``;
* ``"openai:<model>@<url1>,<url2>,..."``: one model served by several replicas (vLLM, say),
  each request sent to the one with the fewest outstanding, a failing one left out until it
  recovers (``noterag.models.endpoints``);
* ``"local"``: SmolLM2-135M-Instruct served on 127.0.0.1 (``noterag.models.local_server``);
* ``"hf:<dir>"``: a Hugging Face causal LM run in-process, e.g. one ``noterag align train``
  wrote (``noterag.models.hf``; needs the ``align`` extra);
* ``"<provider>:<model>"`` for any other provider LangChain's ``init_chat_model`` knows
  (``anthropic:claude-sonnet-4-5``, ``ollama:qwen2.5``, ...), when ``langchain`` and the
  provider's package (``langchain-anthropic``, ...) are installed; a one-line hint otherwise;
* any other Runnable that takes a prompt and returns a message (a chat model wrapped by
  ``with_retry``, ``with_fallbacks``, ``configurable_fields`` / ``configurable_alternatives``,
  ``bind``), used as is: noterag's roles and cost accounting read the messages it returns;
* ``None``: ``$NOTERAG_MODEL``, default ``"local"``.
"""

from __future__ import annotations

import asyncio
import os
import re
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import Runnable
from langchain_openai import ChatOpenAI
from pydantic import SecretStr

from noterag.base.errors import ConfigError
from noterag.base.redact import redact, redact_logs
from noterag.models.endpoints import bare_url, url_query
from noterag.models.local_server import LOCAL_MAX_TOKENS, LOCAL_MODEL_NAME, start_local_server
from noterag.models.retries import counting_clients
from noterag.models.settings import ModelSettings

__all__ = [
    "ModelSettings",
    "OpenAICompatibleChat",
    "aload_chat_model",
    "load_chat_model",
    "model_endpoint",
]

_ACCEPTED_SPECS = (
    "a LangChain chat model (or a Runnable wrapping one), 'openai:<model>', "
    "'openai:<model>@<base_url>', '<provider>:<model>' (LangChain's init_chat_model), "
    "'hf:<dir>' or 'local'"
)
_PROVIDER = re.compile(r"^(?P<provider>[a-z][a-z0-9_-]*):(?P<model>\S.*)$")
_INLINE_URL = re.compile(r"^(?P<model>.+?)@(?P<url>https?://\S+)$")
# What after a model name's last "@" is a base URL whose scheme was forgotten rather than part
# of the name (Vertex-style names such as claude-3-5-sonnet@20240620 keep their "@"): a host
# with a port, localhost or an IP address, or anything with a path.
_SCHEMELESS_URL = re.compile(
    r"(?:localhost|\d{1,3}(?:\.\d{1,3}){3}|\[[0-9a-f:.]+\]|[\w.-]+:\d+)(?::\d+)?(?:/\S*)?"
    r"|[\w.-]+(?::\d+)?/\S*",
    re.IGNORECASE,
)
_HTTP_URL = re.compile(r"^https?://\S+$", re.IGNORECASE)

# The HTTP libraries under every model log each request's URL (httpx at INFO, which
# `langgraph dev` prints): its credentials redacted (noterag.base.redact).
redact_logs()


class OpenAICompatibleChat(ChatOpenAI):
    """ChatOpenAI for servers that speak the OpenAI API but are not OpenAI.

    langchain-openai sends the token limit as ``max_completion_tokens`` (OpenAI's newer name);
    llama-cpp-python's server ignores that field and generates until the context is full, and
    other servers lag behind too. Every one of them understands ``max_tokens``.
    """

    def _get_request_payload(
        self, input_: Any, *, stop: list[str] | None = None, **kwargs: Any
    ) -> dict:
        payload = super()._get_request_payload(input_, stop=stop, **kwargs)
        if "max_completion_tokens" in payload:
            payload["max_tokens"] = payload.pop("max_completion_tokens")
        return payload


def load_chat_model(
    spec: Runnable | str | None = None,
    settings: ModelSettings | None = None,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
) -> Any:
    """Return a chat model for ``spec`` (see the module docstring for the accepted forms)."""
    if isinstance(spec, Runnable):
        return spec
    settings = settings or ModelSettings.from_env()
    if spec is None:
        spec = os.environ.get("NOTERAG_MODEL", "local")
    if not isinstance(spec, str):
        raise ConfigError(f"model spec must be {_ACCEPTED_SPECS}; got {type(spec).__name__}")
    spec = spec.strip()
    if spec == "local":
        return _local_chat_model(settings)
    if spec.startswith("hf:"):  # a Hugging Face model in-process (noterag.models.hf)
        from noterag.models.hf import hf_chat_model

        return hf_chat_model(spec[len("hf:") :], settings)
    if spec.startswith("openai:") and spec[len("openai:") :].strip():
        model, inline_url = _split_inline_url(spec[len("openai:") :].strip())
        urls = inline_url.split(",") if inline_url and not base_url else None
        if urls and len(urls) > 1:
            for url in urls:
                _checked_base_url(url, f"a base URL of {spec!r}")
            # the client's base URL carries no replica's credentials: the transport gives
            # each replica its own (noterag.models.endpoints)
            return _openai_chat_model(
                model, settings, base_url=bare_url(urls[0]), api_key=api_key, replicas=urls
            )
        return _openai_chat_model(model, settings, base_url=base_url or inline_url, api_key=api_key)
    if match := _PROVIDER.match(spec):
        return _provider_chat_model(match["provider"], match["model"].strip(), settings)
    raise ConfigError(f"unknown model spec {spec!r}: use {_ACCEPTED_SPECS}")


def _provider_chat_model(provider: str, model: str, settings: ModelSettings) -> Any:
    """``init_chat_model(model, model_provider=provider)`` with noterag's sampling and transport
    settings; a one-line ConfigError when langchain or the provider's package is missing."""
    try:
        from langchain.chat_models import init_chat_model
    except ImportError:
        raise ConfigError(
            f"model '{provider}:{model}' needs LangChain's init_chat_model: "
            f"pip install langchain langchain-{provider}"
        ) from None
    try:
        return init_chat_model(
            model,
            model_provider=provider,
            temperature=settings.temperature,
            top_p=settings.top_p,
            max_tokens=settings.max_tokens,
            timeout=settings.timeout,
            max_retries=settings.max_retries,
        )
    except ImportError as error:
        raise ConfigError(
            f"model '{provider}:{model}' needs its provider package: {one_line(error)}"
        ) from None
    except ValueError as error:  # a provider init_chat_model does not know
        raise ConfigError(f"model '{provider}:{model}': {one_line(error)}") from None


def one_line(error: BaseException) -> str:
    return " ".join(str(error).split())[:300]


async def aload_chat_model(
    spec: Runnable | str | None = None,
    settings: ModelSettings | None = None,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
) -> BaseChatModel:
    """``load_chat_model`` for async code: starting the local server blocks for a second or two,
    which ``langgraph dev`` forbids inside async nodes (BlockingError)."""
    return await asyncio.to_thread(
        load_chat_model, spec, settings, base_url=base_url, api_key=api_key
    )


def _split_inline_url(rest: str) -> tuple[str, str | None]:
    match = _INLINE_URL.match(rest)
    if match is not None:
        return match["model"], match["url"]
    model, at, tail = rest.rpartition("@")
    if at and model and tail:
        # Not silently a model name (whose requests would go to OPENAI_BASE_URL or OpenAI).
        if "://" in tail:
            raise ConfigError(
                f"the base URL {tail!r} in 'openai:{rest}' is not an http:// or https:// URL"
            )
        if _SCHEMELESS_URL.fullmatch(tail):
            raise ConfigError(
                f"the base URL {tail!r} in 'openai:{rest}' has no scheme: write "
                f"'openai:{model}@http://{tail}' (or https://)"
            )
    return rest, None


def _checked_base_url(base_url: str | None, source: str) -> str | None:
    """``base_url`` if it is an http(s) URL; a ConfigError naming ``source`` (where it came
    from) otherwise: without a scheme the client would fail on every request with a
    connection error that names no cause."""
    if base_url is None or _HTTP_URL.match(base_url.strip()):
        return base_url.strip() if base_url else base_url
    hint = f" (write http://{base_url.strip()} or https://...)" if "://" not in base_url else ""
    raise ConfigError(f"{source}={base_url!r} is not an http:// or https:// URL{hint}")


def openai_base_url(base_url: str | None = None) -> str | None:
    """The base URL of an ``openai:`` model: ``base_url`` (the spec's inline URL or the
    caller's), else ``NOTERAG_BASE_URL``, else ``OPENAI_BASE_URL``; None for OpenAI's own."""
    for value, source in (
        (base_url, "base_url"),
        (os.environ.get("NOTERAG_BASE_URL"), "NOTERAG_BASE_URL"),
        (os.environ.get("OPENAI_BASE_URL"), "OPENAI_BASE_URL"),
    ):
        if value:
            return _checked_base_url(value, source)
    return None


OPENAI_API_BASE = "https://api.openai.com/v1"


def model_endpoint(spec: Any = None) -> str | None:
    """Where a model's requests go, its credentials redacted (``noterag.base.redact``): part of a
    run's identity, since the same model name on two endpoints may be two models. A spec's
    URL comes from it or the environment, as ``load_chat_model`` takes it; ``local`` for the
    local server (on a new port each run); None for a model with no endpoint (``hf:``, a
    test's own model)."""
    from noterag.models.local_server import local_server_url

    if spec is None:
        spec = os.environ.get("NOTERAG_MODEL", "local")
    if isinstance(spec, str):
        spec = spec.strip()
        if spec == "local":
            return "local"
        if not spec.startswith("openai:"):
            return None
        _, inline_url = _split_inline_url(spec[len("openai:") :].strip())
        url = openai_base_url(inline_url) or OPENAI_API_BASE
    elif isinstance(spec, ChatOpenAI):
        url = spec.openai_api_base or OPENAI_API_BASE
        if url == local_server_url():
            return "local"
    else:
        return None
    return redact(url.rstrip("/"))


def _openai_chat_model(
    model: str,
    settings: ModelSettings,
    *,
    base_url: str | None,
    api_key: str | None,
    replicas: list[str] | None = None,
) -> BaseChatModel:
    base_url = openai_base_url(base_url)
    api_key = api_key or os.environ.get("OPENAI_API_KEY") or ("EMPTY" if base_url else None)
    if api_key is None:
        raise ConfigError(
            f"model 'openai:{model}' needs OPENAI_API_KEY, or OPENAI_BASE_URL pointing at an "
            "OpenAI-compatible server (vLLM, Ollama, llama.cpp)"
        )
    cls = ChatOpenAI if _is_openai(base_url) else OpenAICompatibleChat
    query = None
    if base_url is not None and replicas is None and "?" in base_url:
        # the SDK appends its paths to the base URL as a string: a query there (?api_key=...)
        # would swallow them; it goes with every request instead
        base_url, query = bare_url(base_url, keep_userinfo=True), dict(url_query(base_url))
    return cls(
        model=model,
        base_url=base_url,
        default_query=query,
        api_key=SecretStr(api_key),
        temperature=settings.temperature,
        top_p=settings.top_p,
        # The field's constructor name; OpenAICompatibleChat sends it as max_tokens.
        max_completion_tokens=settings.max_tokens,
        timeout=settings.timeout,
        max_retries=settings.max_retries,
        **counting_clients(replicas),
    )


def _is_openai(base_url: str | None) -> bool:
    return base_url is None or "api.openai.com" in base_url


def _local_chat_model(settings: ModelSettings) -> BaseChatModel:
    base_url = start_local_server()
    return OpenAICompatibleChat(
        model=LOCAL_MODEL_NAME,
        base_url=base_url,
        api_key=SecretStr("local"),
        temperature=settings.temperature,
        top_p=settings.top_p,
        max_completion_tokens=settings.max_tokens or LOCAL_MAX_TOKENS,
        timeout=settings.timeout,
        max_retries=settings.max_retries,
        **counting_clients(),
    )
