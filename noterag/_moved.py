"""The import paths of 0.1, before noterag/ was split into one package per layer: each still
imports, for one release, as the module it became, with a DeprecationWarning naming the new
path. docs/upgrading.md lists them; they go in 0.3."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings

# old path -> new path (both under noterag.)
MOVED = {
    "errors": "base.errors",
    "_fs": "base.files",
    "redact": "base.redact",
    "terminal": "base.terminal",
    "state": "core.state",
    "context": "core.context",
    "step": "core.step",
    "question": "core.question",
    "decision": "core.decision",
    "tasks": "core.tasks",
    "prompt": "core.prompt",
    "parsing": "core.parsing",
    "spec": "core.spec",
    "profiles": "core.profiles",
    "lcel": "core.lcel",
    "retry": "core.retry",
    "server_policy": "core.policy",
    "sample": "retrievers.sample",
    "methods": "registry.methods",
    "server_http": "server.http",
    "server_auth": "server.auth",
    "server_key": "server.key",
    "server_bounds": "server.bounds",
    "persistence": "server.checkpointer",
    "trace": "trace.page",
}


class MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``noterag.<old>`` and hands back the module it moved to (the same object, so
    patches and isinstance checks see one module)."""

    def find_spec(self, fullname: str, path: object = None, target: object = None):
        package, _, name = fullname.partition(".")
        if package != "noterag" or name not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        # A placeholder: exec_module puts the real module in its place in sys.modules, which is
        # what the import returns; the real module's own __spec__ is left as it is.
        return types.ModuleType(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        new = "noterag." + MOVED[module.__name__.partition(".")[2]]
        warnings.warn(
            f"{module.__name__} has moved to {new}; the old path goes in noterag 0.3",
            DeprecationWarning,
            # 2: the importing line. warnings skips importlib's frames by itself; 3 went past
            # the importer ("sys:1"), and Python's default filter, which shows a
            # DeprecationWarning only where __main__ triggers it, then hid it from scripts.
            stacklevel=2,
        )
        sys.modules[module.__name__] = importlib.import_module(new)


def install() -> None:
    if not any(isinstance(finder, MovedFinder) for finder in sys.meta_path):
        sys.meta_path.append(MovedFinder())
