"""What a client of noterag's LangGraph server may ask for, as the server's operator sets it.

The server (``langgraph dev``, or a deployment of langgraph.json) spends the operator's model
and reads the operator's index for whoever can reach it. Every setting of every method has
declared bounds (``noterag.context.setting``), checked in-process and on the server alike; on
top of that the operator decides, with environment variables read when the server starts:

- ``NOTERAG_API_KEY``: when set, every request must carry it (``x-api-key`` header, or
  ``Authorization: Bearer <key>``; noterag/server_auth.py, langgraph.json's ``auth``).
- ``NOTERAG_ALLOW_CLIENT_PROMPTS=1``: clients may send prompt overrides (``prompts``), which
  put the client's text in every prompt sent with the operator's key. Off by default.
- ``NOTERAG_ALLOW_CLIENT_SAMPLING=1``: clients may set the sampling and length settings
  (temperature, top_p, max_tokens, max_passage_chars: the fields declared ``client="sampling"``).
  Off by default: the operator's (or the model's) values hold.
- ``NOTERAG_SERVER_MODELS`` / ``NOTERAG_SERVER_INDEXES``: comma-separated model and retriever
  specs an assistant (or a run) may choose with the configurable keys ``model`` and ``index``;
  without them, every run uses ``NOTERAG_MODEL`` and ``NOTERAG_INDEX``.
- ``NOTERAG_CORS_ORIGINS``: comma-separated origins whose pages may use the server besides
  the ones langgraph.json's ``http.cors`` allows (local pages, LangSmith Studio); e.g.
  ``https://agentchat.vercel.app`` for the hosted Agent Chat UI.
- ``NOTERAG_MAX_BODY_BYTES`` (default 1 MiB): the largest request body; a longer one is
  refused with HTTP 413 before it is read into memory or stored.
- ``NOTERAG_CANCEL_ON_DISCONNECT`` (default 1): a streamed or waited-for run is cancelled when
  its client goes away (langgraph-api's ``on_disconnect="cancel"``, imposed on every such
  request), so no model call is paid for a reader who left. 0 leaves it to each client.

docs/security.md is the operator's page.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from noterag.context import (
    RunContext,
    check_question_size,
    client_settings,
    resolve_context,
)
from noterag.errors import ConfigError

__all__ = ["RunSettings", "ServerPolicy", "check_input", "check_run_settings"]

DEFAULT_MAX_BODY_BYTES = 1 << 20

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}

# Keys a run's context may carry that belong to LangGraph, not to the method: a client that
# sends its settings as config["configurable"] may send these beside them.
LANGGRAPH_KEYS = frozenset(
    {"thread_id", "checkpoint_id", "checkpoint_ns", "checkpoint_map", "user_id", "run_id",
     "graph_id", "assistant_id", "cron_id"}
)  # fmt: skip


def _flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(f"{name} must be 1 or 0 (true or false), not {raw!r}")


def _specs(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in env.get(name, "").split(",") if part.strip())


@dataclass(frozen=True)
class ServerPolicy:
    """The operator's settings (module docstring), read from the environment."""

    api_key: str | None = None
    allow_client_prompts: bool = False
    allow_client_sampling: bool = False
    models: tuple[str, ...] = ()
    indexes: tuple[str, ...] = ()
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    cancel_on_disconnect: bool = True
    cors_origins: tuple[str, ...] = ()

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ServerPolicy:
        env = os.environ if env is None else env
        raw_limit = env.get("NOTERAG_MAX_BODY_BYTES", str(DEFAULT_MAX_BODY_BYTES))
        try:
            limit = int(raw_limit)
        except ValueError:
            limit = 0
        if limit < 1024:
            raise ConfigError(
                f"NOTERAG_MAX_BODY_BYTES must be a whole number of bytes, at least 1024, "
                f"not {raw_limit!r}"
            )
        return cls(
            api_key=env.get("NOTERAG_API_KEY") or None,
            allow_client_prompts=_flag(env, "NOTERAG_ALLOW_CLIENT_PROMPTS", False),
            allow_client_sampling=_flag(env, "NOTERAG_ALLOW_CLIENT_SAMPLING", False),
            models=_specs(env, "NOTERAG_SERVER_MODELS"),
            indexes=_specs(env, "NOTERAG_SERVER_INDEXES"),
            max_body_bytes=limit,
            cancel_on_disconnect=_flag(env, "NOTERAG_CANCEL_ON_DISCONNECT", True),
            cors_origins=tuple(_origin(o) for o in _specs(env, "NOTERAG_CORS_ORIGINS")),
        )


_ORIGIN = re.compile(r"^https?://[^/\s?#]+$")


def _origin(value: str) -> str:
    # an origin is scheme://host[:port], exactly as a browser sends it: no path, no slash
    if not _ORIGIN.match(value):
        raise ConfigError(
            f"NOTERAG_CORS_ORIGINS: {value!r} is no origin; write it as a browser sends it, "
            "e.g. https://agentchat.vercel.app (no path, no trailing slash)"
        )
    return value


@dataclass(frozen=True)
class RunSettings:
    """A server run's settings, checked: the method's context and the chosen model and index
    (None: the server's default, ``NOTERAG_MODEL`` / ``NOTERAG_INDEX``)."""

    context: RunContext
    model: str | None = None
    index: str | None = None


def _choice(value: Any, offered: tuple[str, ...], key: str, variable: str) -> str | None:
    if value is None:
        return None
    if not offered:
        raise ConfigError(
            f"{key} cannot be chosen on this server: it runs one {key} (the operator offers "
            f"choices with {variable})"
        )
    if value not in offered:
        raise ConfigError(f"{key} {value!r} is not offered here; {key}s: {', '.join(offered)}")
    return str(value)


def check_run_settings(
    schema: type[RunContext], values: Mapping[str, Any] | None, policy: ServerPolicy
) -> RunSettings:
    """A server run's settings (its assistant's and its own, merged: the run's context) checked
    against the method's declaration and the operator's policy: unknown keys, values of the
    wrong type or out of bounds, client sampling or prompts the operator has not allowed, and
    a model or index outside the operator's lists are each one ConfigError naming the setting
    and what is allowed (langgraph-api passes a ValueError's message to the client)."""
    given = {
        k: v
        for k, v in (values or {}).items()
        if k not in LANGGRAPH_KEYS and not k.startswith(("__", "langgraph_"))
    }
    model = _choice(given.pop("model", None), policy.models, "model", "NOTERAG_SERVER_MODELS")
    index = _choice(given.pop("index", None), policy.indexes, "index", "NOTERAG_SERVER_INDEXES")
    defaults = {f.name: f.default for f in fields(schema)}
    for kind, allowed, variable in (
        ("sampling", policy.allow_client_sampling, "NOTERAG_ALLOW_CLIENT_SAMPLING"),
        ("prompts", policy.allow_client_prompts, "NOTERAG_ALLOW_CLIENT_PROMPTS"),
    ):
        # a client that sends every field (Studio's form) sends the defaults: those pass
        chosen = [
            name
            for name in client_settings(schema, kind)  # type: ignore[arg-type]
            if name in given and given[name] not in (None, {}, defaults.get(name))
        ]
        if chosen and not allowed:
            raise ConfigError(
                f"{', '.join(chosen)}: set by this server's operator, not by its clients (the "
                f"operator allows it with {variable}=1)"
            )
    return RunSettings(context=resolve_context(schema, given), model=model, index=index)


def check_input(value: Any) -> None:
    """Refuse a run input whose question (or a message's text) is longer than a run accepts,
    before the server stores it."""
    if not isinstance(value, Mapping):
        return
    texts: list[Any] = [value.get("question")]
    messages = value.get("messages")
    if isinstance(messages, list):
        for message in messages:
            content = message.get("content") if isinstance(message, Mapping) else message
            if isinstance(content, list):
                texts.extend(p.get("text") for p in content if isinstance(p, Mapping))
            else:
                texts.append(content)
    for text in texts:
        if isinstance(text, str):
            check_question_size(text)
