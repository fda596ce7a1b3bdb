"""Issue 41, item 0: every entry point of a Runnable, for every registered method.

A method's graph is a LangChain Runnable, and an application may drive it through any of its
entry points: ``invoke``, ``ainvoke``, ``batch``, ``abatch``, ``stream`` / ``astream`` in each
of LangGraph's stream modes, ``astream_events`` (v1 and v2: what chat frontends built on
LangChain's event stream read), ``astream_log``, and the LangGraph server's runs with every
``stream_mode`` at once (``events`` among them). Each must run to the end and give the answer
``invoke`` gives, after the same model calls.

Three kinds of dependencies:

* the scripted model (tests/scripted.py) over the keyword retriever, and over the retriever of
  LangChain's how-to "How to create a custom Retriever" (``ToyRetriever`` below: a
  ``BaseRetriever`` with only a sync ``_get_relevant_documents``, no ``k`` argument, documents
  without ids or titles), for every method. The model records each call's stage and the graph
  step it was made in, so two runs are compared step by step (the order of calls that run
  concurrently within a step is free);
* a plain ``ChatOpenAI`` against bench/sim_endpoint.py's simulated endpoint, for one method of
  each family (its replies depend on the prompt alone here, so two runs are comparable);
* ``langgraph dev`` (tests/devserver.py) over the same endpoint: one run per method with every
  stream mode, compared with ``invoke`` in this process over the same endpoint and index.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import PrivateAttr

import noterag
from noterag.base.errors import ConfigError
from noterag.graphs.self_rag import self_rag_reply
from scripted import (
    QUESTION,
    VELMORA_ROWS,
    KeywordRetriever,
    ScriptedModel,
    passages,
    stage_of,
    velmora_script,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from sim_endpoint import SimModel, make_server

pytestmark = [
    # deprecated, and still entry points an application may call
    pytest.mark.filterwarnings("ignore:astream_events version='v1' is deprecated"),
    pytest.mark.filterwarnings("ignore:astream_log is deprecated"),
]
METHODS = list(noterag.METHODS)
CORPUS = passages(*VELMORA_ROWS)
# LangGraph's stream modes (langgraph.types.StreamMode); these three read checkpoints, which
# only a graph with a checkpointer writes
STREAM_MODES = ("values", "updates", "messages", "custom", "debug", "tasks", "checkpoints")
CHECKPOINTED = {"debug", "tasks", "checkpoints"}
ENTRY_POINTS = [
    "invoke",
    "ainvoke",
    "batch",
    "abatch",
    *(f"stream:{mode}" for mode in STREAM_MODES),
    *(f"astream:{mode}" for mode in STREAM_MODES),
    "astream_events:v1",
    "astream_events:v2",
    "astream_log",
]
# one method per family: the note loop (graphs/note_loop.py: Adaptive-Note, DeepNote), Amber,
# ReSP, the one-pass baselines (graphs/single_pass.py) and the single-step ones
# (graphs/single_step.py), as bench/orchestration.py groups them
FAMILIES = ["deepnote", "amber", "resp", "vanilla", "chain-of-note"]
# batch and abatch run two copies of the question: one is a shortcut to invoke in LangChain
BATCH = 2


def small(method: str) -> dict[str, Any]:
    """A short run: two iterations where the method has a loop."""
    names = set(noterag.METHODS[method].context.__dataclass_fields__)
    return {"max_steps": 2} if "max_steps" in names else {}


# --------------------------------------------------------------------------- the dependencies


class StepModel(ScriptedModel):
    """The scripted model, also recording the graph step (``langgraph_step``) of each call."""

    # shared with the copies the graph makes of the model (see ScriptedModel)
    _steps: list[tuple[int, str]] = PrivateAttr(default_factory=list)

    def _generate(
        self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> Any:
        step = ((run_manager.metadata or {}) if run_manager else {}).get("langgraph_step", -1)
        with self._lock:
            self._steps.append((step, stage_of(run_manager)))
        return super()._generate(messages, stop, run_manager, **kwargs)

    def by_step(self) -> list[tuple[int, list[str]]]:
        """The stages called in each graph step, in step order (within a step: sorted)."""
        steps: dict[int, list[str]] = {}
        for step, stage in self._steps:
            steps.setdefault(step, []).append(stage)
        return [(step, sorted(stages)) for step, stages in sorted(steps.items())]


class ToyRetriever(BaseRetriever):
    """LangChain's how-to "How to create a custom Retriever"
    (https://python.langchain.com/docs/how_to/custom_retriever/), as written there: the
    documents whose text contains the query, at most ``k`` (the how-to reads its module's
    ``documents`` inside the loop; here its own field)."""

    documents: list[Document]
    """List of documents to retrieve from."""
    k: int
    """Number of top results to return"""

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        """Sync implementations for retriever."""
        matching_documents = []
        for document in self.documents:
            if len(matching_documents) > self.k:
                return matching_documents

            if query.lower() in document.page_content.lower():
                matching_documents.append(document)
        return matching_documents


# The how-to's documents, and one a question-and-answer page would hold: its text holds the
# question, so the first search (the question itself) finds it.
HOWTO_DOCUMENTS = [
    Document(
        page_content="Dogs are great companions, known for their loyalty and friendliness.",
        metadata={"type": "dog", "trait": "loyalty"},
    ),
    Document(
        page_content="Cats are independent pets that often enjoy their own space.",
        metadata={"type": "cat", "trait": "independence"},
    ),
    Document(
        page_content="Goldfish are popular pets for beginners, requiring relatively simple care.",
        metadata={"type": "fish", "trait": "low maintenance"},
    ),
    Document(
        page_content=f"{QUESTION} Aurelio Fenwick, who designed it, was born in 1871.",
        metadata={"type": "faq", "trait": "architecture"},
    ),
]


def retriever_of(kind: str) -> BaseRetriever:
    if kind == "howto":
        return ToyRetriever(documents=HOWTO_DOCUMENTS, k=3)
    return KeywordRetriever(passages=CORPUS)


# --------------------------------------------------------------------------- the entry points


def _answer_of(chunks: list[Any], mode: str) -> str:
    """The final answer as stream mode ``mode`` delivers it."""
    if mode == "values":
        return chunks[-1]["answer"]
    if mode == "updates":
        return [
            update["answer"]
            for chunk in chunks
            for update in chunk.values()
            if isinstance(update, dict) and "answer" in update
        ][-1]
    if mode == "messages":
        for message, meta in chunks:
            # only the answer's tokens reach the messages stream (every other call: nostream)
            assert meta["langgraph_node"] == "answer", meta["langgraph_node"]
        assert chunks, "no token of the answer streamed"
        return "".join(str(message.content) for message, _ in chunks)
    if mode == "custom":
        return [e for e in chunks if isinstance(e, dict) and e.get("type") == "answer"][-1][
            "answer"
        ]
    if mode in ("debug", "checkpoints"):
        states = (
            [c["payload"] for c in chunks if c["type"] == "checkpoint"]
            if mode == "debug"
            else chunks
        )
        return states[-1]["values"]["answer"]
    if mode == "tasks":
        results = [dict(c["result"]) for c in chunks if c.get("result") is not None]
        return [r["answer"] for r in results if "answer" in r][-1]
    raise AssertionError(mode)


def run(entry: str, graph: Any, context: dict[str, Any]) -> str:
    """Runs ``graph`` on QUESTION through ``entry`` to its end; returns its answer (for batch
    and abatch: checks that each copy gave the same answer)."""
    graph_input = {"question": QUESTION}
    name, _, mode = entry.partition(":")
    config: dict[str, Any] = {"configurable": {"thread_id": str(uuid.uuid4())}}
    if name == "invoke":
        return graph.invoke(graph_input, context=context)["answer"]
    if name == "ainvoke":
        return asyncio.run(graph.ainvoke(graph_input, context=context))["answer"]
    if name in ("batch", "abatch"):
        inputs = [graph_input] * BATCH
        if name == "batch":
            outs = graph.batch(inputs, context=context)
        else:
            outs = asyncio.run(graph.abatch(inputs, context=context))
        answers = {out["answer"] for out in outs}
        assert len(answers) == 1, answers
        return answers.pop()
    if name == "stream":
        chunks = list(graph.stream(graph_input, config, context=context, stream_mode=mode))
        return _streamed(graph, config, chunks, mode)
    if name == "astream":

        async def collect() -> list[Any]:
            stream = graph.astream(graph_input, config, context=context, stream_mode=mode)
            return [chunk async for chunk in stream]

        return _streamed(graph, config, asyncio.run(collect()), mode)
    if name == "astream_events":
        return asyncio.run(_events(graph, graph_input, context, mode))
    if name == "astream_log":
        return asyncio.run(_log(graph, graph_input, context))
    raise AssertionError(entry)


def _streamed(graph: Any, config: dict[str, Any], chunks: list[Any], mode: str) -> str:
    answer = _answer_of(chunks, mode)
    if mode in CHECKPOINTED:  # the thread's last state holds the same answer
        assert graph.get_state(config).values["answer"] == answer
    return answer


async def _events(
    graph: Any, graph_input: dict[str, Any], context: dict[str, Any], version: str
) -> str:
    stream = graph.astream_events(graph_input, context=context, version=version)
    events = [event async for event in stream]
    for event in events:
        if event["event"] == "on_chat_model_stream":  # a chat frontend shows these tokens
            assert event["metadata"]["langgraph_node"] == "answer", event["metadata"]
    last = events[-1]
    # the last event is the run's own end, with the graph's output
    assert last["event"] == "on_chain_end" and last["name"] == graph.name, last["event"]
    assert last["run_id"] == events[0]["run_id"]
    output = last["data"]["output"]
    # v2: the run's output (the final state); v1, as astream_log: its last chunk of the graph's
    # own stream mode ("updates")
    return output["answer"] if version == "v2" else _updated_answer(graph, output)


async def _log(graph: Any, graph_input: dict[str, Any], context: dict[str, Any]) -> str:
    log = None
    async for patch in graph.astream_log(graph_input, context=context):
        log = patch if log is None else log + patch
    assert log is not None
    return _updated_answer(graph, log.state["final_output"])


def _updated_answer(graph: Any, chunk: dict[str, Any]) -> str:
    """The answer in the graph's last chunk of its own stream mode: "updates" ({node: its
    update})."""
    assert graph.stream_mode == "updates"
    (answer,) = [update["answer"] for update in chunk.values() if "answer" in (update or {})]
    return answer


def checkpointed(entry: str) -> bool:
    return entry.partition(":")[2] in CHECKPOINTED


# --------------------------------------------------------------------------- the scripted model


def scripted_graph(method: str, retriever: str, entry: str | None) -> tuple[Any, StepModel]:
    model = StepModel(stand_in=noterag.METHODS[method].stand_in, script=SCRIPT)
    graph = noterag.build_graph(
        method,
        model=model,
        retriever=retriever_of(retriever),
        checkpointer=InMemorySaver() if entry and checkpointed(entry) else None,
    )
    return graph, model


# a reply per stage, none of them a list consumed in order: batch's two runs share the model
SCRIPT = velmora_script(refine_query="1. When was Aurelio Fenwick born?\n2. Marrowgate Institute")
_INVOKED: dict[tuple[str, str], tuple[str, list[tuple[int, list[str]]]]] = {}


def invoked(method: str, retriever: str) -> tuple[str, list[tuple[int, list[str]]]]:
    """``invoke``'s answer and its model calls step by step (once per method and retriever)."""
    if (method, retriever) not in _INVOKED:
        graph, model = scripted_graph(method, retriever, None)
        _INVOKED[method, retriever] = (run("invoke", graph, small(method)), model.by_step())
    return _INVOKED[method, retriever]


def test_the_howto_retriever_finds_its_documents() -> None:
    """The how-to's retriever is searched, and what it finds reaches the prompts (else the
    matrix above would only run the methods over empty searches)."""
    graph, model = scripted_graph("vanilla", "howto", None)
    run("invoke", graph, {})
    (prompt,) = model.prompts_for("answer")
    assert HOWTO_DOCUMENTS[-1].page_content in prompt
    assert "Dogs are great companions" not in prompt


# What a method refuses to run on, as one clear error: REPLUG weights each passage by its
# retrieval score, and the how-to's retriever gives none (Document.metadata["score"]).
REFUSED = {("replug", "howto"): "weights each passage by its retrieval score"}


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize("retriever", ["keyword", "howto"])
@pytest.mark.parametrize("method", METHODS)
def test_every_entry_point_gives_invokes_answer_after_the_same_calls(
    method: str, retriever: str, entry: str
) -> None:
    if (method, retriever) in REFUSED:
        graph, model = scripted_graph(method, retriever, entry)
        with pytest.raises(ConfigError, match=REFUSED[method, retriever]):
            run(entry, graph, small(method))
        return
    answer, steps = invoked(method, retriever)
    assert steps and answer, "invoke made no model call or gave no answer"
    graph, model = scripted_graph(method, retriever, entry)
    assert run(entry, graph, small(method)) == answer
    copies = BATCH if entry in ("batch", "abatch") else 1
    assert model.by_step() == [(step, sorted(stages * copies)) for step, stages in steps]


# --------------------------------------------------------------------------- plain ChatOpenAI


# Self-RAG's prompt (prompts/self_rag.py, the authors' PROMPT_DICT; a passage follows it): no
# other method's holds it; the endpoint answers it as a Self-RAG model would (graphs/self_rag.py's
# stand-in)
SELF_RAG_RESPONSE = "\n\n### Response:\n"


class PromptSeeded(SimModel):
    """The simulated endpoint with replies that depend on the prompt alone (its generator seeded
    from the prompt for each reply), so two runs get the same replies whatever the order of the
    requests that run concurrently."""

    def __init__(self) -> None:
        super().__init__(base_s=0.0, per_token_s=0.0)
        self.seeding = threading.Lock()
        self.stages: Counter[str] = Counter()

    def reply(self, prompt: str) -> tuple[str, str]:
        with self.seeding:
            self._rng.seed(prompt)
            stage, text = super().reply(prompt)
            self.stages[stage] += 1
        if SELF_RAG_RESPONSE in prompt:
            text = self_rag_reply("generate", text)
        return stage, text


@pytest.fixture
def endpoint() -> Iterator[tuple[str, PromptSeeded]]:
    """A simulated endpoint of its own for each test: langchain-openai shares one async HTTP
    client per base URL, and a client made under one ``asyncio.run`` fails under the next
    ("Event loop is closed")."""
    model = PromptSeeded()
    server = make_server(model)
    # a short poll: shutdown() waits for the serving loop's next look
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
    ).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", model
    server.shutdown()


def chat_openai(url: str) -> Any:
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model="sim", base_url=url, api_key="sim", max_retries=0, timeout=60)


_SIM_INVOKED: dict[str, tuple[str, Counter[str]]] = {}


def sim_graph(method: str, url: str, entry: str | None) -> Any:
    return noterag.build_graph(
        method,
        model=chat_openai(url),
        retriever=KeywordRetriever(passages=CORPUS),
        checkpointer=InMemorySaver() if entry and checkpointed(entry) else None,
    )


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize("method", FAMILIES)
def test_a_plain_chat_openai_through_every_entry_point(
    method: str, entry: str, endpoint: tuple[str, PromptSeeded]
) -> None:
    url, sim = endpoint
    if method not in _SIM_INVOKED:
        answer = run("invoke", sim_graph(method, url, None), small(method))
        _SIM_INVOKED[method] = (answer, Counter(sim.stages))
        sim.stages.clear()
    answer, stages = _SIM_INVOKED[method]
    assert answer and stages
    assert run(entry, sim_graph(method, url, entry), small(method)) == answer
    copies = BATCH if entry in ("batch", "abatch") else 1
    assert sim.stages == Counter({stage: n * copies for stage, n in stages.items()})


# --------------------------------------------------------------------------- the LangGraph server


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, str, Path, PromptSeeded]]:
    """``langgraph dev`` over langgraph.json with a simulated endpoint as every method's model
    and the bundled sample index: its URL, the endpoint's URL, the index and the endpoint."""
    from devserver import serve
    from noterag.retrievers.sample import sample_index

    model = PromptSeeded()
    server = make_server(model)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sim_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    cache = tmp_path_factory.mktemp("cache")
    dev = serve(
        tmp_path_factory,
        {
            "NOTERAG_MODEL": f"openai:sim@{sim_url}",
            "NOTERAG_SKIP_MODEL_CHECK": "1",
            "NOTERAG_CACHE": str(cache),
        },
    )
    try:
        yield next(dev), sim_url, sample_index(cache), model
    finally:
        dev.close()
        server.shutdown()


# every stream mode a run of the server takes (langgraph-api's RunCreate schema), "events"
# (astream_events v2) among them; its older "messages" (whole messages so far) is left out:
# asked with "messages-tuple" (LangGraph's "messages"), a run streams the tuples only
SERVER_MODES = (
    "values", "updates", "messages-tuple", "custom", "debug", "tasks", "checkpoints", "events"
)  # fmt: skip


def _server_answers(parts: list[Any]) -> dict[str, str]:
    """The answer as each stream mode of one server run delivers it (``parts``: the SDK's
    StreamParts, each tagged with its mode as ``event``)."""
    by_mode: dict[str, list[Any]] = {}
    for part in parts:
        by_mode.setdefault(part.event.split("|")[0], []).append(part.data)
    answers = {
        "values": by_mode["values"][-1]["answer"],
        "updates": [
            update["answer"]
            for chunk in by_mode["updates"]
            for update in (chunk or {}).values()
            if isinstance(update, dict) and "answer" in update
        ][-1],
        "custom": [e for e in by_mode["custom"] if e.get("type") == "answer"][-1]["answer"],
        "checkpoints": by_mode["checkpoints"][-1]["values"]["answer"],
        "debug": [e["payload"] for e in by_mode["debug"] if e["type"] == "checkpoint"][-1][
            "values"
        ]["answer"],
        "tasks": [
            r["answer"]
            for r in (dict(e["result"]) for e in by_mode["tasks"] if e.get("result"))
            if "answer" in r
        ][-1],
    }
    tokens = by_mode["messages"]  # "messages-tuple": (message chunk, metadata)
    assert tokens, "no token of the answer streamed"
    for message, meta in tokens:
        assert meta["langgraph_node"] == "answer", meta["langgraph_node"]
    answers["messages-tuple"] = "".join(message["content"] for message, _ in tokens)
    ends = [e for e in by_mode["events"] if e["event"] == "on_chain_end" and not e["parent_ids"]]
    assert ends, "no end of the run among its events"
    answers["events"] = ends[-1]["data"]["output"]["answer"]
    return answers


@pytest.mark.server
@pytest.mark.parametrize("method", METHODS)
def test_a_server_run_streams_every_mode_to_invokes_answer(
    served: tuple[str, str, Path, PromptSeeded], method: str
) -> None:
    from langgraph_sdk import get_sync_client

    url, sim_url, index, sim = served
    before = Counter(sim.stages)
    expected = noterag.build_graph(
        method, model=f"openai:sim@{sim_url}", retriever=f"bm25:{index}"
    ).invoke({"question": QUESTION}, context=small(method))["answer"]
    calls = Counter(sim.stages) - before
    client = get_sync_client(url=url, api_key=None, timeout=120)
    parts = list(
        client.runs.stream(
            client.threads.create()["thread_id"],  # a thread: checkpoints to stream
            method,
            input={"question": QUESTION},
            context=small(method),
            stream_mode=list(SERVER_MODES),
        )
    )
    errors = [part.data for part in parts if part.event == "error"]
    assert not errors, errors
    answers = _server_answers(parts)
    assert answers == dict.fromkeys(answers, expected)
    assert Counter(sim.stages) - before - calls == calls  # the same model calls
