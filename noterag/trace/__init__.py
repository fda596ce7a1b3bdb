"""The trace page: a run's steps as one HTML file (``page``), rendered from the Jinja2 templates
under ``templates/``."""

from __future__ import annotations

import importlib
import warnings
from typing import Any


def __getattr__(name: str) -> Any:
    # In 0.1 ``noterag.trace`` was the page module; its name is now this package, so the
    # deprecation finder (noterag/_moved.py) never sees it. Its functions still resolve here,
    # with the same warning, until 0.3 (docs/upgrading.md).
    page = importlib.import_module("noterag.trace.page")
    if name.startswith("_") or not hasattr(page, name):
        raise AttributeError(f"module 'noterag.trace' has no attribute {name!r}")
    warnings.warn(
        f"noterag.trace.{name} has moved to noterag.trace.page.{name}; the old path goes in "
        "noterag 0.3",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(page, name)
