"""The README's "Use it from LangChain" examples (examples/*.py), run: a graph inside an LCEL
chain, a graph as a tool of LangGraph's prebuilt ReAct agent, and RemoteGraph against
`langgraph dev`."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import PrivateAttr

from scripted import (
    QUESTION,
    VELMORA_ROWS,
    KeywordRetriever,
    ScriptedModel,
    method_events,
    passages,
    velmora_script,
)

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"examples_{name}", EXAMPLES / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def corpus() -> KeywordRetriever:
    return KeywordRetriever(passages=passages(*VELMORA_ROWS))


def test_a_graph_runs_inside_an_lcel_chain() -> None:
    # The rewrite call carries no noterag stage, so it gets the default reply.
    model = ScriptedModel(script=velmora_script(), default=QUESTION)
    chain = example("lcel_chain").make_chain(model, corpus())

    reply = chain.invoke({"request": "hey, when was the Velmora Bridge's architect born?"})

    assert reply.startswith("1871\n(DeepNote: ")
    # The rewritten question reached the graph, and .bind's context capped the loop at 2 steps.
    assert model.stages[0] == "?"
    assert QUESTION in model.prompts_for("init_note")[0]
    assert "(max_steps = 2)" in reply
    calls = len(model.stages) - 1  # the rewrite is the chain's call, not the graph's
    assert f"{calls} LLM calls" in reply


class ToolCallingScript(BaseChatModel):
    """An agent model that first calls the research tool, then answers from its reply."""

    question: str
    _seen: list[list[BaseMessage]] = PrivateAttr(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "tool-calling-script"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ToolCallingScript:
        assert [tool.name for tool in tools] == ["research"]
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        self._seen.append(list(messages))
        results = [m for m in messages if isinstance(m, ToolMessage)]
        if not results:
            call = {"name": "research", "args": {"question": self.question}, "id": "call_1"}
            message = AIMessage("", tool_calls=[call])
        else:
            answer = json.loads(results[-1].content)["answer"]
            message = AIMessage(f"Yes: the architect was born in {answer}.")
        return ChatResult(generations=[ChatGeneration(message=message)])


def test_a_graph_is_a_tool_of_the_prebuilt_react_agent() -> None:
    research_model = ScriptedModel(script=velmora_script(review='{"status": "False"}'))
    agent_model = ToolCallingScript(question=QUESTION)
    module = example("react_agent_tool")
    tool = module.research_tool(research_model, corpus())
    assert tool.name == "research" and set(tool.args) == {"question"}

    agent = module.make_agent(agent_model, research_model, corpus())
    messages = agent.invoke({"messages": [("user", "Was the architect born before 1880?")]})[
        "messages"
    ]

    result = next(m for m in messages if isinstance(m, ToolMessage))
    output = json.loads(result.content)
    # The tool ran the whole Adaptive-Note graph on the agent's question.
    assert output["answer"] == "1871" and output["llm_calls"] == len(research_model.stages)
    assert research_model.stages[0] == "init_note" and research_model.stages[-1] == "answer"
    assert QUESTION in research_model.prompts_for("init_note")[0]
    assert messages[-1].content == "Yes: the architect was born in 1871."


@pytest.mark.server
def test_remote_graph_streams_and_invokes_against_langgraph_dev(server: str) -> None:
    graph = example("remote_graph").remote(server, "vanilla")
    context = {"max_tokens": 32, "top_k": 2}

    parts = list(
        graph.stream(
            {"question": QUESTION}, context=context, stream_mode=["custom", "values"], version="v2"
        )
    )
    custom = method_events(part["data"] for part in parts if part["type"] == "custom")
    assert [event["type"] for event in custom] == ["passages", "answer"]
    assert len(custom[0]["passages"]) == 2  # the context reached the server
    final = [part["data"] for part in parts if part["type"] == "values"][-1]
    assert final["answer"].strip() and final["answer"] == custom[-1]["answer"]

    # Chat-shaped input through the same client: the answer comes back as the last AI message.
    state = graph.invoke({"messages": [{"role": "user", "content": QUESTION}]}, context=context)
    assert state["question"] == QUESTION
    assert state["messages"][-1]["type"] == "ai"
    assert state["messages"][-1]["content"] == state["answer"]
