"""A noterag graph as a tool of LangGraph's prebuilt ReAct agent.

``as_tool`` turns the compiled graph into a structured tool taking ``{"question": str}``; the
agent decides when to research and reads the tool's JSON reply (answer, sources, cost). The
graph's output also carries its chat messages, which are not JSON, so the tool keeps only the
fields an agent needs (``graph.as_tool(...)`` alone works too, but the agent then reads the
output's Python repr).
The agent needs a chat model that can call tools, e.g. an OpenAI-compatible endpoint:

    noterag index noterag/data/sample_corpus.jsonl --out demo-index
    OPENAI_API_KEY=... python examples/react_agent_tool.py gpt-4o-mini
"""

from __future__ import annotations

import sys
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import BaseTool
from langgraph.prebuilt import create_react_agent

import noterag
from noterag.models import load_chat_model


def for_agent(output: dict[str, Any]) -> dict[str, Any]:
    return {key: output[key] for key in ("answer", "passage_ids", "llm_calls")}


def research_tool(model: BaseChatModel, retriever: Any) -> BaseTool:
    graph = noterag.build_graph("adaptive-note", model=model, retriever=retriever)
    research = graph | RunnableLambda(for_agent)
    return research.as_tool(
        name="research",
        description=(
            "Answer a factual, possibly multi-hop question from the document collection. "
            "Ask one self-contained question per call."
        ),
        arg_types={"question": str},
    )


def make_agent(agent_model: BaseChatModel, research_model: BaseChatModel, retriever: Any) -> Any:
    return create_react_agent(agent_model, [research_tool(research_model, retriever)])


if __name__ == "__main__":
    llm = load_chat_model(f"openai:{sys.argv[1] if len(sys.argv) > 1 else 'gpt-4o-mini'}")
    agent = make_agent(llm, llm, "bm25:demo-index")
    question = "Was the Velmora Bridge's architect born before 1880?"
    for message in agent.invoke({"messages": [("user", question)]})["messages"]:
        message.pretty_print()
