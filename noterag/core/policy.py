"""What a client of noterag's LangGraph server may ask for, as the server's operator sets it.

The server (``langgraph dev``, or a deployment of langgraph.json) spends the operator's model
and reads the operator's index for whoever can reach it. Every setting of every method has
declared bounds (``noterag.core.context.setting``), checked in-process and on the server alike; on
top of that the operator decides, with environment variables read when the server starts:

- ``NOTERAG_API_KEY``: when set, every request must carry it (``x-api-key`` header, or
  ``Authorization: Bearer <key>``; noterag/server/auth.py, langgraph.json's ``auth``).
- ``NOTERAG_ALLOW_CLIENT_PROMPTS=1``: clients may send prompt overrides (``prompts``), which
  put the client's text in every prompt sent with the operator's key. Off by default.
- ``NOTERAG_ALLOW_CLIENT_SAMPLING=1``: clients may set the sampling and length settings
  (temperature, top_p, max_tokens, max_passage_chars: the fields declared ``client="sampling"``).
  Off by default: the operator's (or the model's) values hold.
- ``NOTERAG_SERVER_MODELS`` / ``NOTERAG_SERVER_INDEXES``: the models and retrievers an
  assistant (or a run) may choose with the configurable keys ``model`` and ``index``, each
  offered under a name the operator gives, ``name=spec,name=spec`` (a spec may hold commas:
  replicas, a hybrid list). Clients send and see the names only, never a spec, whose URL may
  carry the operator's credentials. An entry without ``name=`` (the older form) is named by
  its spec with the credentials redacted (``noterag.base.redact``). Without them, every run uses
  ``NOTERAG_MODEL`` and ``NOTERAG_INDEX``.
- ``NOTERAG_CORS_ORIGINS``: comma-separated origins whose pages may use the server besides
  the ones langgraph.json's ``http.cors`` allows (local pages, LangSmith Studio); e.g.
  ``https://agentchat.vercel.app`` for the hosted Agent Chat UI.
- ``NOTERAG_MAX_BODY_BYTES`` (default 1 MiB): the largest request body; a longer one is
  refused with HTTP 413 before it is read into memory or stored.
- ``NOTERAG_CANCEL_ON_DISCONNECT`` (default 1): a streamed or waited-for run is cancelled when
  its client goes away (langgraph-api's ``on_disconnect="cancel"``, imposed on every such
  request), so no model call is paid for a reader who left. 0 leaves it to each client.
- ``NOTERAG_ALLOW_RESUMABLE`` (default: 1 when ``NOTERAG_API_KEY`` is set, else 0): a client
  that explicitly asks for a resumable stream (``stream_resumable=true`` with
  ``on_disconnect="continue"``, what ``useStream`` sends with ``reconnectOnMount``) keeps its
  run going when it disconnects, and joins it again later.
- ``NOTERAG_ALLOW_STATE_WRITES=1``: clients may write a thread's state (``POST
  /threads/{id}/state``, a new thread's ``supersteps``) and send a run's ``command.update`` /
  ``command.goto``; the values are still checked (``check_state_values``). Off by default:
  a client resumes a paused run (``command.resume``) and nothing else.
- ``NOTERAG_ALLOW_CRONS=1``: clients may create and change crons (scheduled runs, which
  spend the model with nobody connected); their payloads are checked like a run's. Off by
  default.

What a client may write into a thread, and each run's ``recursion_limit``, are checked by
``noterag.server.bounds``.

docs/security.md is the operator's page.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, get_args, get_type_hints

from noterag.base.errors import ConfigError
from noterag.base.redact import redact
from noterag.core.context import (
    RunContext,
    check_question_size,
    client_settings,
    resolve_context,
)

__all__ = ["RunSettings", "ServerPolicy", "check_input", "check_run_settings", "offers"]

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


# An offered model's or index's name: what clients send and see. No ":" or "/": never a spec.
_NAMED = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9_.-]{0,63})=(?P<spec>\S.*)$", re.DOTALL)


def _entries(env: Mapping[str, str], variable: str) -> tuple[str, ...]:
    """The entries of ``NOTERAG_SERVER_MODELS`` / ``_INDEXES`` as written: ``name=spec`` each
    (a part without ``name=`` after a named one continues its spec: the comma was the spec's,
    as in ``openai:m@http://h1/v1,http://h2/v1``), or bare specs; checked by ``offers``."""
    entries: list[str] = []
    for part in _specs(env, variable):
        if entries and _NAMED.match(entries[0]) and not _NAMED.match(part):
            entries[-1] = f"{entries[-1]},{part}"
        else:
            entries.append(part)
    offers(tuple(entries), variable)
    return tuple(entries)


def offers(entries: tuple[str, ...], variable: str) -> dict[str, str]:
    """The operator's offer: each name a client may choose, and the spec it stands for. An
    entry ``name=spec`` is named; a bare spec (the older form) is named by itself with its
    credentials redacted, so no name shows a password or key the redaction knows."""
    found: dict[str, str] = {}
    named = [bool(_NAMED.match(entry)) for entry in entries]
    if any(named) and not all(named):
        raise ConfigError(
            f"{variable}: name every entry (name=spec, as in fast=openai:gpt-4o-mini) or none"
        )
    for entry in entries:
        match = _NAMED.match(entry)
        name, spec = (match["name"], match["spec"].strip()) if match else (redact(entry), entry)
        if name in found:
            raise ConfigError(f"{variable}: the name {name!r} is given twice")
        found[name] = spec
    return found


@dataclass(frozen=True)
class ServerPolicy:
    """The operator's settings (module docstring), read from the environment. Its repr leaves
    out the key and the specs (credentials in their URLs)."""

    api_key: str | None = field(default=None, repr=False)
    allow_client_prompts: bool = False
    allow_client_sampling: bool = False
    models: tuple[str, ...] = field(default=(), repr=False)  # as written: name=spec
    indexes: tuple[str, ...] = field(default=(), repr=False)
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    cancel_on_disconnect: bool = True
    cors_origins: tuple[str, ...] = ()
    allow_resumable: bool = False
    # unless the operator set NOTERAG_ALLOW_RESUMABLE: a client connected over loopback (the
    # default `langgraph dev`, 127.0.0.1) has its resumable stream honoured even without a key
    resumable_on_loopback: bool = True
    allow_state_writes: bool = False
    allow_crons: bool = False

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
        api_key = env.get("NOTERAG_API_KEY") or None
        return cls(
            api_key=api_key,
            allow_client_prompts=_flag(env, "NOTERAG_ALLOW_CLIENT_PROMPTS", False),
            allow_client_sampling=_flag(env, "NOTERAG_ALLOW_CLIENT_SAMPLING", False),
            models=_entries(env, "NOTERAG_SERVER_MODELS"),
            indexes=_entries(env, "NOTERAG_SERVER_INDEXES"),
            max_body_bytes=limit,
            cancel_on_disconnect=_flag(env, "NOTERAG_CANCEL_ON_DISCONNECT", True),
            cors_origins=tuple(_origin(o) for o in _specs(env, "NOTERAG_CORS_ORIGINS")),
            # a client that authenticated is the operator's: its explicit request for a run
            # that outlives its connection is honoured; an anonymous one's is not, by default
            allow_resumable=_flag(env, "NOTERAG_ALLOW_RESUMABLE", api_key is not None),
            resumable_on_loopback=_flag(env, "NOTERAG_ALLOW_RESUMABLE", True),
            allow_state_writes=_flag(env, "NOTERAG_ALLOW_STATE_WRITES", False),
            allow_crons=_flag(env, "NOTERAG_ALLOW_CRONS", False),
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


def _choice(value: Any, entries: tuple[str, ...], key: str, variable: str) -> str | None:
    """The spec of the name ``value`` among the operator's ``entries``; a refusal lists the
    names, never a spec."""
    if value is None:
        return None
    if not entries:
        raise ConfigError(
            f"{key} cannot be chosen on this server: it runs one {key} (the operator offers "
            f"choices with {variable})"
        )
    offered = offers(entries, variable)
    if not isinstance(value, str) or value not in offered:
        shown = redact(repr(value))  # then cut: a cut URL may no longer look like one
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        plural = "indexes" if key == "index" else f"{key}s"
        raise ConfigError(f"{key} {shown} is not offered here; {plural}: {', '.join(offered)}")
    return offered[value]


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
    """Refuse, before the server stores the run, an input the graph's question step would
    refuse: a ``question`` that is no string or is longer than a run accepts, ``messages``
    LangChain cannot read as chat messages (read as LangGraph's ``add_messages`` reads them: a
    string is one user message, ``[role, text]`` a message) or one whose text (its text parts
    joined) is too long, a ``task`` that is none of the tasks."""
    if value is None:
        return
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"a run's input must be an object (question, messages, task), not {type(value).__name__}"
        )
    question = value.get("question")
    if question is not None:
        if not isinstance(question, str):
            raise ConfigError(f"the question must be a string, not {type(question).__name__}")
        check_question_size(question)
    messages = value.get("messages")
    if messages is not None:
        from langchain_core.messages import convert_to_messages

        try:
            read = convert_to_messages(messages if isinstance(messages, list) else [messages])
        except (ValueError, TypeError, NotImplementedError, KeyError):
            raise ConfigError(
                "messages must be chat messages: {role, content} objects, [role, text] pairs "
                "or strings"
            ) from None
        for message in read:
            check_question_size(_text(message.content))
    task = value.get("task")
    if task is not None and task not in TASKS:
        shown = repr(task) if isinstance(task, str) and len(task) <= 40 else type(task).__name__
        raise ConfigError(f"task must be one of {', '.join(TASKS)}, not {shown}")


# the tasks a run's input may name (RunContext.task's choices)
TASKS: tuple[str, ...] = get_args(get_type_hints(RunContext)["task"])


def _text(content: Any) -> str:
    """A message's text as the question step reads it: a string, or its text parts joined."""
    if isinstance(content, str):
        return content
    return "\n".join(
        part if isinstance(part, str) else str(part.get("text", ""))
        for part in content
        if isinstance(part, str) or (isinstance(part, Mapping) and part.get("type") == "text")
    )
