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
        "from langgraph._internal._runnable import RunnableCallable": 1,
        "from langchain_core._api.beta_decorator import x": 1,
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
