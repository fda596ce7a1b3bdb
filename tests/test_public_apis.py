"""noterag reads no private module or attribute of LangGraph, LangChain or openai (issue 24,
"Public APIs only"): a private name of a dependency can change in any patch release.

The package's source is searched (comments and docstrings aside) for the forms such a use
takes: a private module imported (``langgraph._internal``, ``langchain_core._api``), a class's
``__mro__`` read, a cached property popped from an object's ``__dict__``, a private method of
a LangChain base class compared by identity.
"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = ("noterag", "graphs", "nodes", "prompts", "retrievers")
DEPENDENCIES = r"(?:langgraph|langchain(?:_[a-z]+)?|openai)"
PRIVATE = {
    "a private module of a dependency": re.compile(
        rf"\b{DEPENDENCIES}(?:\.[A-Za-z0-9]+)*\._[A-Za-z]\w*"
    ),
    "a class's __mro__": re.compile(r"\.__mro__\b"),
    "a cached property popped from __dict__": re.compile(r"__dict__\.pop\s*\("),
    "a private method of a base class compared": re.compile(
        r"\b(?:BaseRetriever|BaseChatModel|BaseLanguageModel|Runnable)\._[a-z]\w*"
    ),
}
# Not fixed yet (issue 24): each names what it still reads.
EXPECTED_TO_BE_FIXED = {
    # BaseRetriever._aget_relevant_documents compared, to tell a sync-only retriever (whose
    # default async path would drop k) from one with an async search of its own
    "noterag/step.py",
    # not yet fixed: copy_chat_model pops LangChain's cached _serialized (no public way found
    # that copies every chat model with its clients)
    "noterag/spec.py",
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
    found = uses()
    unexpected = {path: hits for path, hits in found.items() if path not in EXPECTED_TO_BE_FIXED}
    assert not unexpected


def test_the_search_finds_each_form() -> None:
    # the patterns catch what they are for (else the test above could never fail)
    samples = {
        "from langgraph._internal._runnable import RunnableCallable": 1,
        "from langchain_core._api.beta_decorator import x": 1,
        "openai.DefaultHttpxClient.__mro__[1]": 1,
        'copy.__dict__.pop("_serialized", None)': 1,
        "type(r)._aget_relevant_documents is BaseRetriever._aget_relevant_documents": 1,
        "from langchain_core.runnables import Runnable": 0,
    }
    for text, expected in samples.items():
        assert sum(len(rx.findall(text)) for rx in PRIVATE.values()) == expected, text


def test_the_allow_list_holds_only_files_that_still_need_it() -> None:
    assert set(uses()) >= EXPECTED_TO_BE_FIXED, "a fixed file: take it off EXPECTED_TO_BE_FIXED"
