"""Token log-probabilities of a reply, for the methods that decide with them (FLARE, REPLUG).

A step asks for them per call, ``Ask(stage, prompt, message=True, options=logprob_options(env,
...))``, and reads them from the reply with ``token_logprobs``. langchain-openai puts what an
OpenAI-compatible endpoint returns in ``reply.response_metadata["logprobs"]["content"]``: one
``{"token", "logprob", "top_logprobs": [...]}`` per generated token (OpenAI, vLLM and
llama-cpp-python's server alike).

``top_logprobs`` is sent with every request although these methods read only the chosen
token's log-probability: llama-cpp-python's server returns no log-probabilities at all when it
is missing (its chat handler passes ``logprobs=top_logprobs if logprobs else None`` on), and
OpenAI accepts 0..20.

A model that returns none stops the run with one clear error naming the method and the model
(``LogprobsUnavailableError``, a ``ConfigError``): neither method has a variant without them
that would still be the method.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from langchain_core.messages import BaseMessage

from noterag.base.errors import ConfigError
from noterag.core.step import Env

TOP_LOGPROBS = 1  # the fewest llama-cpp-python's server returns log-probabilities with


class LogprobsUnavailableError(ConfigError):
    """The model returned no token log-probabilities, which the method needs."""


class Token(NamedTuple):
    """One generated token and its log-probability."""

    text: str
    logprob: float


def logprob_options(env: Env, **options: Any) -> dict[str, Any]:
    """Per-call model arguments asking for token log-probabilities, with the step's own
    ``options`` (``stop``, ``max_tokens``). An option the run's sampling already sets (e.g. the
    context's ``max_tokens``) is left to the run: passed twice it would be a TypeError, and a
    setting the user made wins over a method's default."""
    wanted = {"logprobs": True, "top_logprobs": TOP_LOGPROBS, **options}
    taken = env.sampling()
    return {key: value for key, value in wanted.items() if key not in taken}


def model_name(message: BaseMessage, model: Any) -> str:
    """The name of the model that wrote ``message``: what the endpoint reported, else the
    model object's ``model_name`` / ``model``, else its class."""
    reported = (message.response_metadata or {}).get("model_name")
    for name in (reported, getattr(model, "model_name", None), getattr(model, "model", None)):
        if isinstance(name, str) and name:
            return name
    return type(model).__name__


def token_logprobs(message: BaseMessage, *, method: str, model: Any) -> list[Token]:
    """The reply's tokens with their log-probabilities, in order. A reply without them is a
    ``LogprobsUnavailableError`` naming ``method`` and the model (an empty reply may carry
    none: it has no tokens)."""
    data = (message.response_metadata or {}).get("logprobs")
    content = data.get("content") if isinstance(data, Mapping) else None
    if content is None and not str(message.content).strip():
        return []
    try:
        if not isinstance(content, list):
            raise TypeError
        return [Token(str(entry["token"]), float(entry["logprob"])) for entry in content]
    except (KeyError, TypeError, ValueError):
        raise LogprobsUnavailableError(
            f"{method} needs the token log-probabilities of its model's replies, and the model "
            f"{model_name(message, model)} returned none: use a model served through an "
            "OpenAI-compatible endpoint that returns them (OpenAI, vLLM, llama.cpp's server)"
        ) from None
