"""No retrieval, the papers' closed-book baseline ("Direct Prompting" in ReSP):

    answer = LLM(prompt(q))         answer     (the task's prompt, the question alone)

``retriever`` is accepted like every method's, and never searched.
"""

from __future__ import annotations

from typing import Any

from noterag.context import BaselineContext
from noterag.graphs.vanilla import single_pass
from noterag.methods import lazy_graph
from noterag.nodes.answer import answer
from noterag.prompts import baselines

NAME = "no-retrieval"
CONTEXT = BaselineContext


def build(model: Any = None, retriever: Any = None, **role_models: Any) -> Any:
    return single_pass(NAME, baselines.NO_RETRIEVAL, (answer,), model, retriever, role_models)


__getattr__ = lazy_graph(build, globals())
