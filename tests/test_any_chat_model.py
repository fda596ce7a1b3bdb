"""Every registered method with a real ``langchain_openai.ChatOpenAI`` as an app developer hands it
over: streaming on (``streaming=True``) and off, ``stream_usage=True``, wrapped in
``.with_retry()``, ``.with_fallbacks()`` (its primary down) and ``configurable_alternatives``,
or built by ``init_chat_model``. Each runs the method to the same outcome as the bare model (the
same answer after the same calls, or the same clear error: Self-RAG needs a Self-RAG-trained
model), and ``stream_mode="messages"`` carries the answer step's tokens only. And
``answer_only(graph) | StrOutputParser()`` streams the answer: its chunks, under ``stream`` and
``astream``, add up to what ``invoke`` (and ``batch``) return.

The model is served by the simulated OpenAI-compatible endpoint (bench/sim_endpoint.py: JSON
or server-sent chunks, token log-probabilities when asked), replying the same to the same
prompt, so that two runs of a method can be compared.
"""

from __future__ import annotations

import socket
import sys
import zlib
from collections.abc import Callable, Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, AIMessageChunk
from langchain_core.output_parsers import StrOutputParser
from langchain_core.runnables import ConfigurableField
from langchain_openai import ChatOpenAI

import noterag
from noterag.base.errors import ConfigError
from scripted import QUESTION, VELMORA_ROWS, KeywordRetriever, passages

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from sim_endpoint import SimModel, start

METHODS = list(noterag.METHODS)
CORPUS = passages(*VELMORA_ROWS)


class SamePromptSameReply(SimModel):
    """The simulated endpoint, replying to a prompt always alike (its own generator is shared
    by every request, so concurrent calls would draw in any order)."""

    def reply(self, prompt: str) -> tuple[str, str]:
        return SimModel.reply(SimModel(seed=zlib.crc32(prompt.encode())), prompt)


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    server, base_url = start(SamePromptSameReply(base_s=0, per_token_s=0))
    yield base_url
    server.shutdown()


def closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def chat(url: str, **fields: Any) -> ChatOpenAI:
    return ChatOpenAI(model="sim", base_url=url, api_key="sim", max_retries=0, **fields)


def init_chat(url: str) -> Any:
    chat_models = pytest.importorskip(
        "langchain.chat_models", reason="init_chat_model is in the langchain package"
    )
    # configurable: a model chosen per run (its class is langchain's own wrapper)
    return chat_models.init_chat_model(
        "openai:sim", base_url=url, api_key="sim", max_retries=0, configurable_fields=("model",)
    )


# name -> the model as an app developer builds it, given the endpoint's URL
MODELS: dict[str, Callable[[str], Any]] = {
    "streaming": lambda url: chat(url, streaming=True),
    "stream_usage": lambda url: chat(url, stream_usage=True),
    "with_retry": lambda url: chat(url).with_retry(stop_after_attempt=2),
    "with_fallbacks": lambda url: chat(f"http://127.0.0.1:{closed_port()}/v1").with_fallbacks(
        [chat(url, streaming=True)]
    ),
    "configurable_alternatives": lambda url: chat(url).configurable_alternatives(
        ConfigurableField(id="llm"), default_key="sim", streaming=chat(url, streaming=True)
    ),
    "init_chat_model": init_chat,
}


def context(method: str) -> dict[str, Any]:
    names = {f.name for f in fields(noterag.METHODS[method].context)}
    return {"max_steps": 2} if "max_steps" in names else {}


def graph_of(method: str, model: Any) -> Any:
    return noterag.build_graph(method, model=model, retriever=KeywordRetriever(passages=CORPUS))


def outcome(run: Callable[[], dict[str, Any]]) -> tuple[str, Any]:
    """("answer", (the answer, the model calls)) of a run, or ("error", its one line) for a
    ConfigError (a method the model cannot serve)."""
    try:
        out = run()
    except ConfigError as error:
        return "error", str(error)
    return "answer", (out["answer"], out["llm_calls"])


_REFERENCE: dict[str, tuple[str, Any]] = {}


def reference(method: str, url: str) -> tuple[str, Any]:
    """The method's outcome with the bare model, streaming off, under invoke."""
    if method not in _REFERENCE:
        graph = graph_of(method, chat(url))
        _REFERENCE[method] = outcome(
            lambda: graph.invoke({"question": QUESTION}, context=context(method))
        )
        kind, value = _REFERENCE[method]
        if kind == "answer":
            assert isinstance(value[0], str) and value[0], method
        else:
            assert "\n" not in value, value  # a clear error is one line
    return _REFERENCE[method]


def streamed(graph: Any, method: str) -> tuple[list[tuple[Any, dict[str, Any]]], dict[str, Any]]:
    """What ``stream_mode=["messages", "values"]`` sends: the messages with their metadata, and
    the final state."""
    messages: list[tuple[Any, dict[str, Any]]] = []
    state: dict[str, Any] = {}
    for mode, chunk in graph.stream(
        {"question": QUESTION}, context=context(method), stream_mode=["messages", "values"]
    ):
        if mode == "messages":
            messages.append(chunk)
        else:
            state = chunk
    return messages, state


def check_messages(method: str, messages: list[tuple[Any, dict[str, Any]]], answer: str) -> None:
    """The model's messages on the stream are the answer step's (the user's own message, which
    the question step stores, may come too: a chat UI shows it as the user's)."""
    nodes = [meta["langgraph_node"] for m, meta in messages if isinstance(m, AIMessage)]
    assert nodes and set(nodes) == {"answer"}, f"{method}: messages from {sorted(set(nodes))}"
    tokens = [m for m, meta in messages if isinstance(m, AIMessageChunk)]
    if tokens and noterag.METHODS[method].stand_in is None:
        # tokens come from the answer's model call alone: the answer is made from them
        text = "".join(str(t.content) for t in tokens)
        assert answer and answer.split()[0] in text, (method, answer, text)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("name", list(MODELS))
def test_any_chat_model_runs_every_method_and_only_the_answer_streams(
    method: str, name: str, url: str
):
    expected = reference(method, url)
    graph = graph_of(method, MODELS[name](url))
    got: dict[str, Any] = {}

    def run() -> dict[str, Any]:
        got["messages"], state = streamed(graph, method)
        return state

    assert outcome(run) == expected, name
    if expected[0] == "answer":
        check_messages(method, got["messages"], expected[1][0])
    # and under invoke, where nothing listens to the messages
    assert outcome(lambda: graph.invoke({"question": QUESTION}, context=context(method))) == (
        expected
    )


# langchain-openai shares one async HTTP client per endpoint among its models: its connections
# belong to the event loop that opened them, so the async tests share the module's loop
ONE_LOOP = pytest.mark.asyncio(loop_scope="module")


@ONE_LOOP
@pytest.mark.parametrize("method", METHODS)
async def test_a_streaming_model_under_astream(method: str, url: str):
    expected = reference(method, url)
    graph = graph_of(method, chat(url, streaming=True))  # the async client: this test's loop
    messages: list[Any] = []
    state: dict[str, Any] = {}

    async def run() -> dict[str, Any]:
        async for mode, chunk in graph.astream(
            {"question": QUESTION}, context=context(method), stream_mode=["messages", "values"]
        ):
            (messages.append(chunk) if mode == "messages" else state.update(chunk))
        return state

    try:
        out = await run()
        got: tuple[str, Any] = ("answer", (out["answer"], out["llm_calls"]))
    except ConfigError as error:
        got = ("error", str(error))
    assert got == expected
    if expected[0] == "answer":
        check_messages(method, messages, expected[1][0])


def test_internal_calls_are_not_streamed_and_report_their_usage(url: str):
    """A ``streaming=True`` model is asked without streaming for every internal call (its reply
    then carries the token usage this endpoint sends only unstreamed), and streams the answer."""
    state = graph_of("deepnote", chat(url, streaming=True)).invoke(
        {"question": QUESTION}, context={"max_steps": 2}
    )
    bare = graph_of("deepnote", chat(url)).invoke({"question": QUESTION}, context={"max_steps": 2})
    assert state["answer"] == bare["answer"] and state["llm_calls"] == bare["llm_calls"] > 2
    # every call but the streamed answer's reports its usage
    assert 0 < state["completion_tokens"] < bare["completion_tokens"]
    assert state["prompt_tokens"] > 0


# --- answer_only in LCEL chains ------------------------------------------------------------------


@ONE_LOOP
@pytest.mark.parametrize("method", METHODS)
async def test_answer_only_streams_chunks_that_add_up_to_invoke(method: str, url: str):
    if reference(method, url)[0] == "error":
        pytest.skip(f"{method} cannot run with this model: {reference(method, url)[1]}")
    graph = graph_of(method, chat(url, streaming=True))
    chain = noterag.answer_only(graph, context=context(method)) | StrOutputParser()
    answer = chain.invoke(QUESTION)
    assert answer == reference(method, url)[1][0]
    chunks = list(chain.stream(QUESTION))
    assert all(isinstance(c, str) and c for c in chunks)
    assert "".join(chunks) == answer
    achunks = [c async for c in chain.astream(QUESTION)]
    assert "".join(achunks) == answer and achunks == chunks
    assert chain.batch([QUESTION, {"question": QUESTION}]) == [answer, answer]
    assert await chain.ainvoke(QUESTION) == answer


def test_answer_only_streams_the_answer_token_by_token(url: str):
    """Where the answer is the model's reply (vanilla RAG), the chain streams its tokens as they
    come; where a method extracts its answer from a longer reply (IRCoT's reader), the answer
    comes whole, not the reply's other words."""
    vanilla = noterag.answer_only(graph_of("vanilla", chat(url, streaming=True)))
    chunks = list(vanilla.stream(QUESTION))
    assert len(chunks) == len(vanilla.invoke(QUESTION).split()) > 1

    extracts = "In 1871, so the answer is: 1871."

    def ircot_reader(prompt: str) -> tuple[str, str]:
        return "answer", extracts

    model = SamePromptSameReply(base_s=0, per_token_s=0)
    model.reply = ircot_reader  # type: ignore[method-assign]
    server, own_url = start(model)
    try:
        chain = noterag.answer_only(
            graph_of("ircot", chat(own_url, streaming=True)), context={"max_steps": 1}
        )
        assert list(chain.stream(QUESTION)) == [chain.invoke(QUESTION)] == ["1871"]
    finally:
        server.shutdown()


@pytest.mark.parametrize("method", METHODS)
def test_answer_only_with_a_model_that_does_not_stream(method: str):
    """A chat model without streaming (here the scripted one, shaped as the method needs: Self-RAG
    runs too) gives its answer in one chunk, the same as ``invoke``'s."""
    from scripted import ScriptedModel

    graph = graph_of(method, ScriptedModel.for_method(method, default="The answer is 1871."))
    chain = noterag.answer_only(graph, context=context(method)) | StrOutputParser()
    answer = chain.invoke(QUESTION)
    assert answer
    assert list(chain.stream(QUESTION)) == [answer]
