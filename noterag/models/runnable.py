"""A Runnable that is not a chat model, plugged in for a model role: a method's trained component
(Adaptive-RAG's query-complexity classifier, RECOMP's abstractive compressor) as its authors
ran it, e.g. their T5 through langchain-huggingface's ``HuggingFacePipeline``, or any function.

``pluggable(component)`` is what a method that accepts such components passes a role's model
through before ``MethodSpec.bind`` (which takes chat models and model specs only): a chat model,
a spec string or None stay as they are; any other Runnable, or a plain function, becomes a
``RunnableModel``, a chat model whose reply is the component's output. The steps then call it as
every model: through ``Ask``, so that its calls are counted in ``llm_calls`` (no token counts:
the component reports none), traced and scripted like any other.

A trained component reads the input it was trained on, not noterag's instruction prompt:
``reads="original"`` (the default) tells the step to send the original's input (Adaptive-RAG:
the question alone; RECOMP: its "Question: ... Document: ... Summary:" format);
``RunnableModel(runnable=..., reads="prompt")`` sends it the prompted model's prompt instead
(a non-chat LLM that follows instructions).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.runnables.base import coerce_to_runnable
from pydantic import ConfigDict

# Keys of a Hugging Face pipeline's output dicts that hold the text, in the order tried.
_TEXT_KEYS = ("generated_text", "summary_text", "label", "text", "answer")


class RunnableModel(BaseChatModel):
    """A Runnable (input: the prompt's text) as a chat model: its output, as text, is the reply."""

    runnable: Runnable[Any, Any]
    # "original": the step sends the input the component was trained on; "prompt": the prompt
    reads: Literal["original", "prompt"] = "original"

    model_config = ConfigDict(arbitrary_types_allowed=True)

    @property
    def _llm_type(self) -> str:
        return "runnable"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        # stop sequences and sampling arguments mean nothing to a classifier or a seq2seq
        # pipeline: they are dropped (the call itself is traced as this model's)
        return _result(self.runnable.invoke(_prompt(messages)))

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return _result(await self.runnable.ainvoke(_prompt(messages)))


def _prompt(messages: Sequence[BaseMessage]) -> str:
    content = messages[-1].content if messages else ""
    if isinstance(content, str):
        return content
    return "".join(
        part if isinstance(part, str) else str(part.get("text", ""))
        for part in content
        if isinstance(part, str) or part.get("type") == "text"
    )


def output_text(output: Any) -> str:
    """A component's output as text: a string as it is; a message's text; a Hugging Face
    pipeline's ``[{"generated_text": ...}]`` / ``[{"label": ..., "score": ...}]`` (the first
    item's text); anything else as ``str()`` (the step's parser then reads what it can)."""
    if isinstance(output, str):
        return output
    if isinstance(output, BaseMessage):
        return _prompt([output])
    if isinstance(output, Sequence) and output:
        return output_text(output[0])
    if isinstance(output, Mapping):
        for key in _TEXT_KEYS:
            if key in output:
                return output_text(output[key])
    return "" if output is None else str(output)


def _result(output: Any) -> ChatResult:
    return ChatResult(generations=[ChatGeneration(message=AIMessage(output_text(output)))])


def pluggable(component: Any) -> Any:
    """``component`` as a model role takes it: a chat model, a model spec or None as they are;
    any other Runnable, or a function of the input text, as a ``RunnableModel`` reading the
    original's input."""
    if component is None or isinstance(component, str | BaseChatModel):
        return component
    if isinstance(component, Runnable) or callable(component):
        return RunnableModel(runnable=coerce_to_runnable(component))
    return component  # load_chat_model names what it accepts


def reads_original(model: Any) -> bool:
    """Whether ``model`` is a plugged-in trained component that reads the original's input."""
    return isinstance(model, RunnableModel) and model.reads == "original"
