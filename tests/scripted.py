"""Test doubles: a chat model that answers each paper stage from a script and records every
prompt and every call's arguments, one that holds calls at a barrier until they run together,
a small keyword retriever over passages the test writes (and one that records its queries),
and what the method tests compare prompts and runs with."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.documents import Document
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.retrievers import BaseRetriever
from pydantic import Field, PrivateAttr

if TYPE_CHECKING:
    import pytest

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
    # (stage, {"stop": ..., **the call's other model arguments}) per call
    _arguments: list[tuple[str, dict[str, Any]]] = PrivateAttr(default_factory=list)
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

    @classmethod
    def searching(cls, method: str, **fields: Any) -> ScriptedModel:
        """``for_method`` replying with the method's declared search script
        (``MethodSpec.search_script``: what makes it search after a reply) where ``script`` does
        not say otherwise; its settings are ``search_settings(method)``."""
        import noterag

        declared = noterag.METHODS[method].search_script.replies
        return cls.for_method(method, **(fields | {"script": declared | fields.get("script", {})}))

    def prompts_for(self, stage: str) -> list[str]:
        return [prompt for s, prompt in self._calls if s == stage]

    @property
    def stops(self) -> list[tuple[str, Any]]:
        """Each call's stage and the stop sequences it was given."""
        return [(stage, args["stop"]) for stage, args in self._arguments]

    def arguments(self, stage: str | None = None) -> list[dict[str, Any]]:
        """The model arguments of each call of ``stage`` (None: of every call), its stop
        sequences as ``"stop"``."""
        return [args for s, args in self._arguments if stage in (None, s)]

    def kwargs_for(self, stage: str | None = None) -> list[dict[str, Any]]:
        """The model arguments of each call of ``stage`` (None: of every call) besides the stop
        sequences."""
        return [{k: v for k, v in args.items() if k != "stop"} for args in self.arguments(stage)]

    def _record(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None,
        run_manager: CallbackManagerForLLMRun | None,
        kwargs: Mapping[str, Any],
    ) -> tuple[str, str]:
        """Records a call (its stage, prompt and arguments); returns its stage and prompt."""
        stage, prompt = stage_of(run_manager), str(messages[-1].content)
        with self._lock:
            self._calls.append((stage, prompt))
            self._arguments.append((stage, {"stop": stop, **kwargs}))
        return stage, prompt

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
        stage, prompt = self._record(messages, stop, run_manager, kwargs)
        text = self._reply(stage, prompt)
        if self.stand_in is not None:
            text = self.stand_in(stage, text)
        message = AIMessage(text, usage_metadata=usage(prompt, text))
        if kwargs.get("logprobs") and self.logprobs:
            message.response_metadata["logprobs"] = {
                "content": [
                    {"token": t, "logprob": 0.0, "top_logprobs": [{"token": t, "logprob": 0.0}]}
                    for t in _TOKENS.findall(text)
                ]
            }
        return ChatResult(generations=[ChatGeneration(message=message)])


def stage_of(run_manager: CallbackManagerForLLMRun | None) -> str:
    """The paper stage a model call is made for: its ``noterag_stage`` metadata ("?": none)."""
    return (run_manager.metadata or {}).get("noterag_stage", "?") if run_manager else "?"


def usage(prompt: str, text: str, least: int = 0) -> Any:
    """The token usage a scripted reply reports: words, at least ``least`` for the reply."""
    prompt_tokens, reply_tokens = len(prompt.split()), max(len(text.split()), least)
    return {
        "input_tokens": prompt_tokens,
        "output_tokens": reply_tokens,
        "total_tokens": prompt_tokens + reply_tokens,
    }


class RendezvousModel(ScriptedModel):
    """Holds each call of a stage given a barrier (``meet``) until all the barrier's parties are
    in flight, so the calls only return if the graph runs them concurrently; sent one after the
    other, the first waits alone and the barrier breaks after its timeout instead of hanging the
    test. A subclass decides otherwise which call waits by overriding ``barrier_for``."""

    # mutable, so that the non-streaming copies the graph makes of a model share it
    _barriers: dict[str, threading.Barrier] = PrivateAttr(default_factory=dict)

    def meet(self, parties: int, *stages: str, timeout: float = 120) -> threading.Barrier:
        """One barrier of ``parties`` for the calls of ``stages``. The timeout only ends a test
        that is failing (calls sent one after the other); generous, so that a busy machine's
        slow thread start never breaks a barrier the graph would have met."""
        barrier = threading.Barrier(parties, timeout=timeout)
        self._barriers.update(dict.fromkeys(stages, barrier))
        return barrier

    def barrier_for(self, stage: str) -> threading.Barrier | None:
        return self._barriers.get(stage)

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        barrier = self.barrier_for(stage_of(run_manager))
        if barrier is not None:
            barrier.wait()  # BrokenBarrierError after the timeout unless all parties arrive
        return super()._generate(messages, stop, run_manager, **kwargs)


def invoke_by(mode: str, graph: Any, graph_input: dict[str, Any], **kwargs: Any) -> Any:
    """``graph.invoke`` (mode "invoke"), or ``graph.ainvoke`` run to its end (mode "ainvoke"),
    for the tests that check both ways."""
    if mode == "invoke":
        return graph.invoke(graph_input, **kwargs)
    return asyncio.run(graph.ainvoke(graph_input, **kwargs))


# a bracketed reflection token ("[Fully supported]") is one token; otherwise a word with the
# whitespace before it
_TOKENS = re.compile(r"\s*\[[^\[\]]*\]|\s*[^\s\[]+|\s*\[|\s+")


def _tokens(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower())) - {
        "the",
        "a",
        "of",
        "in",
        "is",
        "was",
        "what",
        "which",
        "who",
    }


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
            Document(
                p["text"], id=p["id"], metadata={"id": p["id"], "title": p["title"], "score": s}
            )
            for s, _, p in ranked[: k or self.k]
        ]


class FreshRetriever(BaseRetriever):
    """Finds passages for any query: the next ``k`` of ``passages`` it has not returned yet (then
    from the first again), each search logged with how many calls ``model`` had made by then.
    A method's search after a model's reply always reads something new, whatever words the
    stand-in's reply has."""

    passages: list[dict[str, str]]
    model: Any = None
    k: int = 5
    # (query, the model's calls so far, passages found) per search
    log: list[tuple[str, int, int]] = Field(default_factory=list)
    _next: int = PrivateAttr(default=0)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    def _get_relevant_documents(
        self, query: str, *, run_manager: Any = None, k: int | None = None
    ) -> list[Document]:
        with self._lock:
            start, count = self._next, min(k or self.k, len(self.passages))
            self._next = (start + count) % len(self.passages)
            calls = len(self.model.calls) if self.model is not None else 0
            self.log.append((query, calls, count))
        rows = [self.passages[(start + i) % len(self.passages)] for i in range(count)]
        return [Document(p["text"], id=p["id"], metadata={"title": p["title"]}) for p in rows]

    def searched_after_a_reply(self) -> bool:
        """Whether a search after the model's first reply found passages."""
        return any(calls > 0 and found > 0 for _, calls, found in self.log)


def loops(spec: Any) -> bool:
    """Whether the method may search again after a model's reply: it retrieves and has a loop."""
    names = {f.name for f in fields(spec.context)}
    return spec.retrieves and ("max_steps" in names or "steps" in spec.output_keys)


def search_path_taken(spec: Any, corpus: list[dict[str, str]]) -> FreshRetriever:
    """A run of the method ``spec`` (a ``MethodSpec``) with a stand-in answering "ok" but for its
    declared search script, over a retriever that finds new passages of ``corpus`` for any
    query: its searches, logged (``FreshRetriever.searched_after_a_reply``)."""
    import noterag

    model = ScriptedModel(stand_in=spec.stand_in, script=dict(spec.search_script.replies))
    retriever = FreshRetriever(passages=corpus, model=model)
    graph = noterag.build_graph(spec, model=model, retriever=retriever)
    names = {f.name for f in fields(spec.context)}
    context = ({"max_steps": 2} if "max_steps" in names else {}) | dict(spec.search_script.settings)
    graph.invoke({"question": QUESTION}, context=context)
    return retriever


def no_search_path(spec: Any) -> str:
    """What the generic tests say of a looping method whose stand-in run never searched after a
    reply: every step that reads a later search's passages went untested."""
    return (
        f"{spec.name}: with its search script its run never searched after a model's reply, so "
        f"the generic tests never ran its search path; declare MethodSpec.search_script with the "
        f'reply that makes it search (docs/methods.md, "Adding a method")'
    )


class RecordingRetriever(KeywordRetriever):
    """Also records each search: (query, k)."""

    queries: list[tuple[str, int | None]] = Field(default_factory=list)

    def _get_relevant_documents(
        self, query: str, *, run_manager: Any = None, k: int | None = None
    ) -> list[Document]:
        self.queries.append((query, k))
        return super()._get_relevant_documents(query, run_manager=run_manager, k=k)


def passages(*rows: Iterable[str]) -> list[dict[str, str]]:
    return [
        {"id": f"p{i}", "title": title, "text": text} for i, (title, text) in enumerate(rows, 1)
    ]


QUESTION = "In which year was the architect of the Velmora Bridge born?"
# A two-hop question with distractors: the architect's birth year is in a passage the
# question's words barely reach.
VELMORA_ROWS = [
    (
        "Velmora Bridge",
        "The Velmora Bridge over the Ostra was designed by the architect Aurelio Fenwick.",
    ),
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


# --------------------------------------------------------------------------- comparing runs


def ranked(corpus: list[dict[str, str]], query: str, k: int) -> list[dict[str, Any]]:
    """The passages the keyword retriever ranks first for ``query``, in order."""
    docs = KeywordRetriever(passages=corpus).invoke(query, k=k)
    return [{"id": d.id, "title": d.metadata["title"], "text": d.page_content} for d in docs]


def numbered(found: list[dict[str, Any]]) -> str:
    """profile="paper"'s passage format, written out here so a change there shows."""
    return "\n\n".join(
        f"[{i}] Title: {p['title']}\nText: {p['text']}" for i, p in enumerate(found, 1)
    )


def official_refs(found: list[dict[str, Any]]) -> str:
    """The Adaptive-Note code's passage format (profile="official"), written out likewise."""
    return "".join(
        f"Passage #{i} Title: {p['title']}\nPassage #{i} Text: {p['text']} \n\n"
        for i, p in enumerate(found, 1)
    )


def vendored(file: str, **values: str) -> str:
    """The Adaptive-Note authors' prompt file (as noterag vendors it) rendered as their code
    renders it: ``read().format(**values)``."""
    import noterag.prompts

    folder = Path(noterag.prompts.__file__).parent / "official" / "thunlp-Adaptive-Note"
    with (folder / file).open(encoding="utf-8", newline="") as handle:
        return handle.read().format(**values)


def invoke_graph(
    build: Callable[..., Any],
    model: BaseChatModel,
    retriever: BaseRetriever,
    graph_input: dict[str, Any] | None = None,
    **context: Any,
) -> dict[str, Any]:
    """A method's graph (its module's ``build``) run once on ``graph_input`` (default: QUESTION),
    with ``context`` as the run's settings."""
    graph = build(model=model, retriever=retriever)
    return graph.invoke(graph_input or {"question": QUESTION}, context=context or None)


def run_over(
    build: Callable[..., Any],
    corpus: list[dict[str, str]],
    settings: Mapping[str, Any],
    model: BaseChatModel,
    retriever: BaseRetriever | None = None,
    **context: Any,
) -> dict[str, Any]:
    """``invoke_graph`` over ``retriever`` (default: the keyword retriever of ``corpus``), with
    the test module's ``settings`` under the run's ``context``. A test module binds its method,
    corpus and settings: ``run = partial(run_over, ...)``."""
    retriever = retriever or KeywordRetriever(passages=corpus)
    return invoke_graph(build, model, retriever, **(dict(settings) | context))


def run_recorded(
    build: Callable[..., Any],
    corpus: list[dict[str, str]],
    script: dict[str, Any],
    model: ScriptedModel | None = None,
    graph_input: dict[str, Any] | None = None,
    **context: Any,
) -> tuple[dict[str, Any], ScriptedModel, RecordingRetriever]:
    """``invoke_graph`` with ``model`` (default: a ScriptedModel of ``script``) over a recording
    retriever of ``corpus``: the output, the model and the retriever (for the searches it made).
    A test module binds its method, corpus and script: ``run = partial(run_recorded, ...)``."""
    model = model or ScriptedModel(script=script)
    retriever = RecordingRetriever(passages=corpus)
    return invoke_graph(build, model, retriever, graph_input, **context), model, retriever


def generator_prompt(note: str, question: str = QUESTION) -> str:
    """Adaptive-Note's multihop generator prompt (paper, Table A4: Multi-hop QA) with ``note``:
    written out here so a change in noterag's copy shows."""
    return (
        "Answer the question based on the given note. Only give me the answer and do not output "
        f"any other words.\n\nThe following are given notes: {note}\nQuestion: {question}\n\nAnswer:"
    )


def progress_of(spec: Any) -> dict[str, Callable[[Mapping[str, Any]], str]]:
    """Each event type the method declares a line for -> the text its lines show of such an
    event (one line each), as the CLI and the trace page show it (noterag.core.progress)."""
    from noterag.core.progress import progress_lines

    def text(kind: str) -> Callable[[Mapping[str, Any]], str]:
        def show(event: Mapping[str, Any]) -> str:
            found = progress_lines(spec.progress, {**event, "type": kind})
            return "\n".join(line.plain for line in found)

        return show

    return {kind: text(kind) for kind in spec.progress}


def method_events(events: Iterable[Any]) -> list[Any]:
    """The custom events a method's steps send: without the engine's own ``retrieval`` event of
    each search (tests/test_contributor_traps.py checks those)."""
    return [e for e in events if not (isinstance(e, dict) and e.get("type") == "retrieval")]


def custom_events(graph: Any, graph_input: dict[str, Any]) -> list[dict[str, Any]]:
    """The events a method's steps send to stream_mode="custom", in order (``method_events``)."""
    stream = graph.stream(graph_input, stream_mode=["custom"])
    return method_events(e for mode, e in stream if mode == "custom")


# --------------------------------------------------------------------------- the command line


def cli(*args: str) -> Any:
    """``noterag ARGS`` in this process (typer's runner), 200 columns wide: rich wraps no line
    a test reads whole."""
    from typer.testing import CliRunner

    from noterag.cli import app

    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def velmora_index(folder: Path) -> Path:
    """VELMORA_ROWS' passages written to ``folder``/corpus.jsonl and indexed by ``noterag
    index`` (BM25) into ``folder``/index, which it returns."""
    corpus = folder / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(p) + "\n" for p in passages(*VELMORA_ROWS)))
    result = cli("index", str(corpus), "--out", str(folder / "index"))
    assert result.exit_code == 0, result.output
    return folder / "index"


def use_model(monkeypatch: pytest.MonkeyPatch, model: BaseChatModel) -> None:
    """Every model spec the command line loads becomes ``model``; a model object passes
    through, as it does the real factory."""
    import noterag.models

    def load(spec: Any = None, settings: Any = None, **kwargs: Any) -> Any:
        return spec if isinstance(spec, BaseChatModel) else model

    monkeypatch.setattr(noterag.models, "load_chat_model", load)


async def request_body(receive: Any) -> bytes:
    """The whole body of an ASGI request, read from ``receive`` (the test doubles standing in
    for langgraph-api behind the request guard)."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body
