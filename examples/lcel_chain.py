"""A noterag graph inside an LCEL chain: a compiled graph is a Runnable like any other.

The chain rewrites a chatty request into one standalone question, runs DeepNote on it, and
formats the answer with its cost. Run it with the offline local model over the sample index:

    noterag index noterag/data/sample_corpus.jsonl --out demo-index
    python examples/lcel_chain.py "hey, do you know when the Velmora Bridge's architect was born?"
"""

from __future__ import annotations

import sys
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import Runnable, RunnableLambda

import noterag
from noterag.models import load_chat_model

REWRITE = ChatPromptTemplate.from_template(
    "Rewrite this request as one standalone question. Reply with the question only.\n\n{request}"
)


def with_cost(state: dict[str, Any]) -> str:
    return (
        f"{state['answer']}\n(DeepNote: {state['llm_calls']} LLM calls, "
        f"{len(state['passage_ids'])} passages, stopped by {state['stop_reason']})"
    )


def make_chain(model: BaseChatModel, retriever: Any) -> Runnable[dict[str, str], str]:
    graph = noterag.build_graph("deepnote", model=model, retriever=retriever)
    rewrite = REWRITE | model | StrOutputParser()
    return (
        {"question": rewrite}
        # .bind passes the run's settings to graph.invoke(..., context=...)
        | graph.bind(context={"max_steps": 2, "max_tokens": 96})
        | RunnableLambda(with_cost)
    )


if __name__ == "__main__":
    request = " ".join(sys.argv[1:]) or "when was the guy who designed the Velmora Bridge born?"
    chain = make_chain(load_chat_model("local"), "bm25:demo-index")
    print(chain.invoke({"request": request}))
