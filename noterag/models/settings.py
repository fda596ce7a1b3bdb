"""``ModelSettings``: a module of its own below every model factory (noterag.models.spec, .hf),
so that they can all name it without importing one another."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Any

from noterag.base.errors import ConfigError


@dataclass
class ModelSettings:
    """Sampling and transport settings shared by every model noterag builds.

    ``max_tokens=None`` means 512 for the local model (it rambles otherwise) and the
    endpoint's own default for remote models. ``timeout`` bounds each attempt of a request (s),
    to its reply's last byte (``noterag.models.deadline``);
    ``max_retries`` is how many times a failed request is sent again (see ``noterag.models``
    for what is retried and the backoff).
    """

    temperature: float = 0.1
    top_p: float = 0.9
    max_tokens: int | None = None
    timeout: float = 60.0
    max_retries: int = 2

    def __post_init__(self) -> None:
        if not self.timeout > 0:
            raise ConfigError(f"the model timeout must be positive, not {self.timeout}")
        if self.max_retries < 0:
            raise ConfigError(f"max_retries must be 0 or more, not {self.max_retries}")

    @classmethod
    def from_env(cls, **overrides: Any) -> ModelSettings:
        """The defaults, with ``NOTERAG_TIMEOUT`` / ``NOTERAG_MAX_RETRIES`` when set, then the
        ``overrides`` that are not None (the CLI's options)."""
        values: dict[str, Any] = {}
        for name, env, kind in (
            ("timeout", "NOTERAG_TIMEOUT", float),
            ("max_retries", "NOTERAG_MAX_RETRIES", int),
        ):
            raw = os.environ.get(env, "").strip()
            if raw:
                try:
                    values[name] = kind(raw)
                except ValueError:
                    raise ConfigError(f"{env}={raw!r} is not a number") from None
        known = {f.name for f in fields(cls)}
        values |= {k: v for k, v in overrides.items() if v is not None and k in known}
        return cls(**values)
