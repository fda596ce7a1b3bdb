"""The graphs in LCEL chains: a Runnable from a question to the answer's text.

A compiled graph takes ``{"question": ...}`` and returns the run's state (a dict), so
``graph | StrOutputParser()`` has nothing to parse. ``answer_only(graph)`` is the graph between
two steps: a question string (or the graph's own input dict) in, the answer string out::

    chain = noterag.answer_only(graph) | StrOutputParser()
    chain.invoke("In which year was the architect of the Velmora Bridge born?")
    for chunk in chain.stream("In which year ..."):
        print(chunk, end="")

``invoke`` / ``batch`` run the graph and return its answer. ``stream`` / ``astream`` yield the
answer as text chunks whose concatenation is what ``invoke`` returns: the answer step's tokens
as the model streams them, where the method's answer is that reply as it is (the reply's
leading and trailing whitespace, which the answer drops, held back); a method that extracts its
answer from a longer reply (IRCoT's reader, ReAct's ``Finish[...]``, ITER-RETGEN's "the answer
is") sends it whole when the run has it. Which call is which is the step's to say
(``noterag.core.step.Ask.verbatim``).

The config (a thread's ``{"configurable": {"thread_id": ...}}``, callbacks) passes through to
the graph as through any chain; a run's settings (LangGraph's ``context=``, which a chain does not
pass on) are bound with ``answer_only(graph, context={"max_steps": 2})``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForChainRun,
    CallbackManagerForChainRun,
)
from langchain_core.messages import BaseMessage
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.runnables.config import ensure_config

# The metadata key of a model call whose reply is the run's answer as it is (a step's
# ``Ask(..., verbatim=True)``, noterag.core.step): answer_only streams the tokens that carry it.
VERBATIM_ANSWER = "noterag_verbatim_answer"

# what the graph streams for answer_only: the answer's tokens, and the state (its final answer)
_MODES = ["messages", "values"]


def _as_input(question: Any) -> Any:
    # a string is the question; a dict is the graph's own input ({"question"} or {"messages"})
    return {"question": question} if isinstance(question, str) else question


def _answer(state: Any) -> str:
    return (state or {}).get("answer") or ""


def _whole(chunks: Iterable[Any]) -> Any:
    """The input, from the chunks a chain's previous step streamed: added up where they add
    (text, a dict streamed in parts), else the last, as LangChain's own steps take theirs."""
    whole: Any = None
    for chunk in chunks:
        try:
            whole = chunk if whole is None else whole + chunk
        except TypeError:
            whole = chunk
    return whole


class _Answer:
    """The text chunks of one run's answer, from what the graph streams (``_MODES``)."""

    def __init__(self) -> None:
        self.reply = ""  # the answer call's reply so far, as streamed
        self.sent = ""  # what was yielded of it
        self.state: Any = None

    def chunk(self, mode: str, item: Any) -> str:
        """The text to send now for one streamed item ("" for none)."""
        if mode == "values":
            self.state = item
            return ""
        message, meta = item
        if not (isinstance(message, BaseMessage) and (meta or {}).get(VERBATIM_ANSWER)):
            return ""
        self.reply += message.text  # its text parts, as the step reads the reply
        # the answer is the reply stripped: leading spaces never go out, trailing ones wait
        # until a word follows them
        ready = self.reply.lstrip().rstrip()
        new, self.sent = ready[len(self.sent) :], ready
        return new

    def rest(self) -> str:
        """What remains to send once the run is over: the answer past what was streamed (all of
        it for a method that extracts its answer, or a model that did not stream)."""
        answer = _answer(self.state)
        return answer[len(self.sent) :] if answer.startswith(self.sent) else ""


class AnswerOnly(Runnable[Any, str]):
    """``graph`` from a question to its answer's text (``answer_only``). Extra keyword
    arguments of ``invoke`` / ``stream`` are not passed on (a run's settings are its context,
    bound with ``answer_only(graph, context=...)``)."""

    def __init__(self, bound: Runnable, name: str) -> None:
        self.bound, self.name = bound, name  # bound: the graph, with the run's context if given

    @property
    def InputType(self) -> Any:
        return Any

    @property
    def OutputType(self) -> type[str]:
        return str

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> str:
        return self._call_with_config(self._invoke, input, ensure_config(config))

    def _invoke(
        self, input: Any, run_manager: CallbackManagerForChainRun, config: RunnableConfig
    ) -> str:
        return _answer(self.bound.invoke(_as_input(input), config))

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> str:
        return await self._acall_with_config(self._ainvoke, input, ensure_config(config))

    async def _ainvoke(
        self, input: Any, run_manager: AsyncCallbackManagerForChainRun, config: RunnableConfig
    ) -> str:
        return _answer(await self.bound.ainvoke(_as_input(input), config))

    def _transform(
        self,
        inputs: Iterator[Any],
        run_manager: CallbackManagerForChainRun,
        config: RunnableConfig,
    ) -> Iterator[str]:
        question = _whole(inputs)
        answer = _Answer()
        for mode, item in self.bound.stream(_as_input(question), config, stream_mode=_MODES):
            if text := answer.chunk(mode, item):
                yield text
        if text := answer.rest():
            yield text

    async def _atransform(
        self,
        inputs: AsyncIterator[Any],
        run_manager: AsyncCallbackManagerForChainRun,
        config: RunnableConfig,
    ) -> AsyncIterator[str]:
        question = _whole([chunk async for chunk in inputs])
        answer = _Answer()
        stream = self.bound.astream(_as_input(question), config, stream_mode=_MODES)
        async for mode, item in stream:
            if text := answer.chunk(mode, item):
                yield text
        if text := answer.rest():
            yield text

    def transform(
        self, input: Iterator[Any], config: RunnableConfig | None = None, **kwargs: Any
    ) -> Iterator[str]:
        yield from self._transform_stream_with_config(input, self._transform, config)

    async def atransform(
        self, input: AsyncIterator[Any], config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[str]:
        async for chunk in self._atransform_stream_with_config(input, self._atransform, config):
            yield chunk

    def stream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Iterator[str]:
        yield from self.transform(iter([input]), config, **kwargs)

    async def astream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> AsyncIterator[str]:
        async def one() -> AsyncIterator[Any]:
            yield input

        async for chunk in self.atransform(one(), config, **kwargs):
            yield chunk


def answer_only(graph: Runnable, *, context: Any = None) -> Runnable:
    """``graph`` as a Runnable from a question (a string or the graph's input dict) to the
    answer's text (empty when the run wrote none, e.g. a run paused for a human review); its
    ``stream`` / ``astream`` yield the answer in chunks (see the module's docstring).
    ``context``: the run's settings, bound to every call."""
    name = getattr(graph, "name", None) or "graph"
    bound = graph if context is None else graph.bind(context=context)
    return AnswerOnly(bound, name=f"{name}.answer_only")
