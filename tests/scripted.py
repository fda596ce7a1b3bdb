"""Test doubles: a chat model that answers each paper stage from a script and records every
prompt, and a small keyword retriever over passages the test writes."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.documents import Document
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.retrievers import BaseRetriever
from pydantic import Field, PrivateAttr

Reply = str | Callable[[str], str]


class ScriptedModel(BaseChatModel):
    """Replies per stage (the ``noterag_stage`` metadata of the call): a string, a callable of the
    prompt, or a list consumed in order (its last item repeats). Records (stage, prompt).

    Like an endpoint that offers them, it returns token log-probabilities when a call asks
    (``logprobs=True``): every token certain (log-probability 0), a bracketed reflection token
    such as ``[Relevant]`` one token; ``logprobs=False`` makes it an endpoint without them. ``stand_in`` reshapes each reply as a specially trained
    model would give it (``MethodSpec.stand_in``; ``for_method`` sets it)."""

    script: dict[str, Any] = Field(default_factory=dict)
    default: str = "ok"
    stand_in: Any = None
    logprobs: bool = True
    _calls: list[tuple[str, str]] = PrivateAttr(default_factory=list)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _used: dict[str, int] = PrivateAttr(default_factory=dict)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    @property
    def calls(self) -> list[tuple[str, str]]:
        return list(self._calls)

    @property
    def stages(self) -> list[str]:
        return [stage for stage, _ in self._calls]

    @classmethod
    def for_method(cls, method: str, **fields: Any) -> ScriptedModel:
        """A scripted model that ``method`` can run with: shaped by its declaration's stand_in."""
        import noterag

        return cls(stand_in=noterag.METHODS[method].stand_in, **fields)

    def prompts_for(self, stage: str) -> list[str]:
        return [prompt for s, prompt in self._calls if s == stage]

    def _reply(self, stage: str, prompt: str) -> str:
        entry = self.script.get(stage, self.default)
        if isinstance(entry, list):
            with self._lock:
                i = self._used.get(stage, 0)
                self._used[stage] = i + 1
            entry = entry[min(i, len(entry) - 1)]
        return entry(prompt) if callable(entry) else entry

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        stage = (run_manager.metadata or {}).get("noterag_stage", "?") if run_manager else "?"
        prompt = str(messages[-1].content)
        with self._lock:
            self._calls.append((stage, prompt))
        text = self._reply(stage, prompt)
        if self.stand_in is not None:
            text = self.stand_in(stage, text)
        usage = {
            "input_tokens": len(prompt.split()),
            "output_tokens": len(text.split()),
            "total_tokens": len(prompt.split()) + len(text.split()),
        }
        message = AIMessage(text, usage_metadata=usage)
        if kwargs.get("logprobs") and self.logprobs:
            message.response_metadata["logprobs"] = {
                "content": [
                    {"token": t, "logprob": 0.0, "top_logprobs": [{"token": t, "logprob": 0.0}]}
                    for t in _TOKENS.findall(text)
                ]
            }
        return ChatResult(generations=[ChatGeneration(message=message)])


# a bracketed reflection token ("[Fully supported]") is one token; otherwise a word with the
# whitespace before it
_TOKENS = re.compile(r"\s*\[[^\[\]]*\]|\s*[^\s\[]+|\s*\[|\s+")


def _tokens(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower())) - {"the", "a", "of", "in", "is", "was", "what", "which", "who"}


class KeywordRetriever(BaseRetriever):
    """Ranks passages by shared words with the query (title and text); honours ``k``."""

    passages: list[dict[str, str]]
    k: int = 5

    def _get_relevant_documents(
        self, query: str, *, run_manager: Any = None, k: int | None = None
    ) -> list[Document]:
        q = _tokens(query)
        scored = [
            (len(q & _tokens(p["title"] + " " + p["text"])), i, p)
            for i, p in enumerate(self.passages)
        ]
        ranked = [(s, i, p) for s, i, p in sorted(scored, key=lambda t: (-t[0], t[1])) if s > 0]
        return [
            Document(p["text"], id=p["id"], metadata={"id": p["id"], "title": p["title"], "score": s})
            for s, _, p in ranked[: k or self.k]
        ]


def passages(*rows: Iterable[str]) -> list[dict[str, str]]:
    return [{"id": f"p{i}", "title": title, "text": text} for i, (title, text) in enumerate(rows, 1)]


QUESTION = "In which year was the architect of the Velmora Bridge born?"
# A two-hop question with distractors: the architect's birth year is in a passage the
# question's words barely reach.
VELMORA_ROWS = [
    ("Velmora Bridge", "The Velmora Bridge over the Ostra was designed by the architect Aurelio Fenwick."),
    ("Aurelio Fenwick", "Aurelio Fenwick (1871-1938) studied at the Marrowgate Institute."),
    ("Clara Fenwick", "Clara Fenwick painted the Velmora Bridge in 1931."),
    ("Ostra River", "The Ostra River is 212 km long and crosses Velmora."),
    ("Marrowgate Institute", "The Marrowgate Institute trained architects and engineers."),
    ("Tobias Wren", "Tobias Wren, architect, was born in 1848 in Quenby."),
    ("Lise Ambrath", "Lise Ambrath, architect of the Pellin Bridge, was born in 1866."),
    ("Pellin Bridge", "The Pellin Bridge was designed by Lise Ambrath and opened in 1899."),
]


def velmora_script(**overrides: Any) -> dict[str, Any]:
    """Note-method replies for QUESTION over VELMORA_ROWS that keep finding new passages: each
    refine_query asks about other entities."""
    base = {
        "init_note": "The Velmora Bridge was designed by the architect Aurelio Fenwick.",
        "refine_query": [
            "1. When was Aurelio Fenwick born?\n2. Marrowgate Institute",
            "1. Ostra River length\n2. Clara Fenwick painter",
            "1. Pellin Bridge\n2. Tobias Wren Quenby",
            "1. Lise Ambrath\n2. anything else",
        ],
        "accumulate": "Aurelio Fenwick (1871-1938) designed the Velmora Bridge.",
        "review": '{"status": "True"}',
        "answer": "1871",
    }
    return base | overrides
