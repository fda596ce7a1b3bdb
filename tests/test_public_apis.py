"""noterag reads no private module or attribute of LangGraph, LangChain or openai (issue 24,
"Public APIs only"), nor of any other dependency (issue 41: Ray, LangGraph's ``__pregel_``
config keys): a private name of a dependency can change in any patch release.

Two searches of the package's source (comments and docstrings aside). Read as Python
(``ast``, below): a dependency's private module imported or named in a string
(``langgraph._internal``, ``langchain_core._api``, ``ray._private``), a private name imported
from one or read through its imported name, LangGraph's ``__pregel_`` config keys. Read as
tokens: the forms on objects, whose type the source does not say: a class's ``__mro__`` read, a
cached property popped from an object's ``__dict__``, a private method of a LangChain base
class compared by identity, LangChain's internals read.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import io
import re
import sys
import tokenize
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = ("noterag", "graphs", "nodes", "prompts", "retrievers")
PRIVATE = {
    "a class's __mro__": re.compile(r"\.__mro__\b"),
    "a cached property popped from __dict__": re.compile(r"__dict__\.pop\s*\("),
    "a private method of a base class compared": re.compile(
        r"\b(?:BaseRetriever|BaseChatModel|BaseLanguageModel|Runnable)\._[a-z]\w*"
    ),
    # LangChain's internals that the forms above once reached: its memoized serialization, the
    # retriever's async hook (which a subclass may define, not read) and its dispatch flags
    "a LangChain internal read": re.compile(
        r"(?<!def )\b(?:_serialized|_aget_relevant_documents|_expects_other_args|"
        r"_new_arg_supported|_get_llm_string)\b"
    ),
}


def code_of(path: Path) -> str:
    """The file's code without comments and string literals (docstrings mention names)."""
    kept = []
    tokens = tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline)
    for token in tokens:
        if token.type not in (tokenize.COMMENT, tokenize.STRING):
            kept.append(token.string)
    return " ".join(kept)


def uses() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for folder in PACKAGE:
        for path in sorted((REPO / folder).rglob("*.py")):
            if "official" in path.parts or "original" in path.parts:
                continue
            code = re.sub(r"\s*\.\s*", ".", code_of(path))  # tokens re-joined: a . b -> a.b
            hits = [
                f"{kind}: {m.group(0)}" for kind, rx in PRIVATE.items() for m in rx.finditer(code)
            ]
            if hits:
                found[str(path.relative_to(REPO))] = hits
    return found


def test_no_private_module_or_attribute_of_a_dependency_is_used() -> None:
    assert uses() == {}


def test_the_search_finds_each_form() -> None:
    # the patterns catch what they are for (else the test above could never fail)
    samples = {
        "openai.DefaultHttpxClient.__mro__[1]": 1,
        'copy.__dict__.pop("_serialized", None)': 2,  # the pop, and the name
        "type(r)._aget_relevant_documents is BaseRetriever._aget_relevant_documents": 3,
        "model._get_llm_string()": 1,
        "async def _aget_relevant_documents(self, query)": 0,
        "from langchain_core.runnables import Runnable": 0,
    }
    for text, expected in samples.items():
        assert sum(len(rx.findall(text)) for rx in PRIVATE.values()) == expected, text


def test_a_chat_model_copy_is_described_as_itself_and_shares_its_clients() -> None:
    """``copy_chat_model`` (the public replacement of popping LangChain's memoized
    serialization): a copy made after the original described itself is described with its
    own fields, on the original's clients and private attributes."""
    from langchain_openai import ChatOpenAI
    from pydantic import PrivateAttr

    from noterag.core.spec import copy_chat_model

    model = ChatOpenAI(model="m", api_key="k", base_url="http://127.0.0.1:9/v1")
    before = model._get_llm_string()  # LangChain memoizes the model's serialization here
    copy = copy_chat_model(model, disable_streaming=True)
    assert '"disable_streaming": true' in copy._get_llm_string()
    assert '"disable_streaming"' not in before and model._get_llm_string() == before
    assert copy.root_client is model.root_client and copy.model_name == "m"
    assert copy.disable_streaming is True and model.disable_streaming is False

    class Locked(ChatOpenAI):
        _lock: object = PrivateAttr(default_factory=object)

    locked = Locked(model="m", api_key="k", base_url="http://127.0.0.1:9/v1")
    assert copy_chat_model(locked, temperature=0.5)._lock is locked._lock


# --------------------------------------------------------------------------- issue 41, item 1
# The installed package's source read as Python (``ast``), so that no form of writing escapes
# the search (``import a._b``, ``from a._b import c``, ``from a import _b``, a module path or a
# config key in a string): a module path with a private component (``_private``, ``_internal``,
# ``_api``: a leading underscore, dunders such as ``__future__`` aside) of any package that is
# neither noterag's nor the standard library's, a private name imported from one, and any
# string holding ``__pregel_`` (LangGraph's private config keys). Docstrings are prose and
# left out; comments are not in the tree.

INSTALLED = ("noterag", "noterag.graphs", "noterag.nodes", "noterag.prompts", "noterag.retrievers")
PREGEL_KEY = "__pregel_"
# a dotted module path inside a string (a logger's name, ``importlib.import_module``'s argument)
DOTTED = re.compile(r"\b[A-Za-z_]\w*(?:\.\w+)+")


def _private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def _dependency(module: str) -> bool:
    top = module.split(".")[0]
    return top != "noterag" and top not in sys.stdlib_module_names


def _private_path(module: str) -> bool:
    return _dependency(module) and any(map(_private, module.split(".")))


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _imported(tree: ast.AST) -> dict[str, str]:
    """The names a module binds by importing: name -> the dotted path it stands for."""
    bound = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                bound[alias.asname or top] = alias.name if alias.asname else top
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return bound


def _read_through(node: ast.Attribute, bound: dict[str, str]) -> str | None:
    """The dotted path an attribute chain on an imported name reads (``algo._x`` after
    ``import langgraph.pregel as algo``: ``langgraph.pregel._x``), else None."""
    parts: list[str] = []
    value: ast.expr = node
    while isinstance(value, ast.Attribute):
        parts.append(value.attr)
        value = value.value
    if isinstance(value, ast.Name) and value.id in bound:
        return ".".join([bound[value.id], *reversed(parts)])
    return None


def private_uses(source: str, where: str) -> list[str]:
    """Each use of a dependency's private module or attribute, private name or LangGraph's
    private config keys in ``source``, as ``where:line: what``."""
    tree = ast.parse(source, where)
    docstrings, bound = _docstrings(tree), _imported(tree)
    inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            found += [(line, f"import {a.name}") for a in node.names if _private_path(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if _private_path(node.module):
                found.append((line, f"from {node.module} import ..."))
            elif _dependency(node.module):
                names = [a.name for a in node.names if _private(a.name)]
                found += [(line, f"from {node.module} import {name}") for name in names]
        elif isinstance(node, ast.Attribute) and id(node) not in inner:  # a chain's end
            path = _read_through(node, bound)
            if path is not None and _private_path(path):
                found.append((line, f"{path} (read through its imported name)"))
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
        ):
            if PREGEL_KEY in node.value:
                found.append((line, repr(node.value)))
            found += [
                (line, f"{path!r} (a private module's path)")
                for path in DOTTED.findall(node.value)
                if _private_path(path) and importlib.util.find_spec(path.split(".")[0])
            ]
    return [f"{where}:{line}: {what}" for line, what in sorted(found)]


def installed_sources() -> dict[str, Path]:
    """The .py files of the installed package, each under the name it has beside its package
    (``noterag/core/step.py``, ``graphs/amber.py`` in a checkout's editable install)."""
    files: dict[str, Path] = {}
    for package in INSTALLED:
        folder = Path(importlib.import_module(package).__file__ or "").parent
        for path in sorted(folder.rglob("*.py")):
            files.setdefault(str(path.relative_to(folder.parent)), path)
    return files


def test_no_private_module_or_pregel_key_of_a_dependency_in_the_installed_package() -> None:
    found = [
        use
        for name, path in installed_sources().items()
        for use in private_uses(path.read_text(encoding="utf-8"), name)
    ]
    assert not found, "private APIs of dependencies used:\n" + "\n".join(found)


def test_the_scan_reads_each_form_and_names_its_line() -> None:
    # the forms are found (else the test above could never fail), at their lines
    lines = [
        '"""A docstring may name __pregel_runtime and langgraph._internal."""',  # 1
        "from __future__ import annotations",
        "import _thread, importlib._bootstrap",  # the standard library's own
        "from noterag._moved import x",  # noterag's own
        "from ._private import y",  # 5: relative: the package's own
        "import langgraph._internal._runnable",
        "from ray._private.services import get_ray_address_from_environment",
        "from langchain_core._api import deprecated",
        "from langgraph.pregel import _read",
        '_RUNTIME_KEY = "__pregel_runtime"',  # 10
        'logging.getLogger("openai._base_client")',
        'name = f"__pregel_{kind}"',
        "from langgraph.runtime import get_runtime",
        'text = "e.g. the _private folder"',
        "import langgraph.pregel as pregel",  # 15
        "import langgraph",
        "from langchain_core.retrievers import BaseRetriever",
        "ok = pregel.main.Pregel, self._cache, BaseRetriever.invoke",
        "private = pregel._algo",  # 19
        "runtime = langgraph._internal._runnable.RunnableCallable",
        "same = BaseRetriever._aget_relevant_documents",
    ]
    assert private_uses("\n".join(lines), "m.py") == [
        "m.py:6: import langgraph._internal._runnable",
        "m.py:7: from ray._private.services import ...",
        "m.py:8: from langchain_core._api import ...",
        "m.py:9: from langgraph.pregel import _read",
        "m.py:10: '__pregel_runtime'",
        "m.py:11: 'openai._base_client' (a private module's path)",
        "m.py:12: '__pregel_'",
        "m.py:19: langgraph.pregel._algo (read through its imported name)",
        "m.py:20: langgraph._internal._runnable.RunnableCallable (read through its imported name)",
        (
            "m.py:21: langchain_core.retrievers.BaseRetriever._aget_relevant_documents "
            "(read through its imported name)"
        ),
    ]


def test_the_installed_package_is_what_the_scan_reads() -> None:
    names = installed_sources()
    for name in ("noterag/core/step.py", "noterag/eval/cluster.py", "graphs/amber.py"):
        assert any(found.endswith(name) for found in names), name
