"""FlashRAG's prompts (RUC-NLPIR/FlashRAG at ``COMMIT``, 2024-06-19: the code of the benchmark
table in its README that ReSP Table 2 reprints), for profile ``flashrag``.

The strings are read out of the vendored files (``prompts/original/RUC-NLPIR-FlashRAG/``,
SOURCE.json: each file's path and git blob id) as Python literals with the ``ast`` module,
never run:

| prompt                       | FlashRAG source                                                      |
|------------------------------|----------------------------------------------------------------------|
| ``rag`` (Standard RAG,       | ``flashrag/prompt/base_prompt.py``: ``PromptTemplate.base_system_prompt`` |
| Iter-RetGen's every step)    | and ``base_user_prompt``, the template every pipeline uses by default |
| ``naive`` (Naive Generation, | ``examples/methods/run_exp.py`` ``zero_shot``: the ``PromptTemplate`` |
| ReSP's "Direct Prompting")   | it builds (``system_prompt``, ``user_prompt``) for ``naive_run``       |

The passages: ``PromptTemplate.format_reference`` with no ``reference_template``: each passage
``Doc {idx+1}(Title: {title}) {text}\\n`` (``flashrag_passages``: ``noterag.core.profiles``).

How the two parts are sent: FlashRAG gives a chat model (Llama3-8B-Instruct) the system part as
a system message and the user part as a user message (``get_string``, through the tokenizer's
chat template). noterag's steps send one user message, so the ``flashrag`` prompts are
FlashRAG's own rendering for a model without a chat template: the non-empty parts joined by a
blank line (``"\\n\\n".join(...)`` in ``get_string``). docs/deviations.md lists this.

The slots are renamed to the ones noterag's steps fill (``{reference}`` is ``{refs}`` in the
answer step, ``{knowledge}`` in Iter-RetGen's; ``{question}`` is ``{query}`` in the answer
step); ``tests/test_flashrag.py`` renders both and compares them byte for byte with FlashRAG's
``str.format`` of the vendored strings.
"""

from __future__ import annotations

import ast
from functools import cache
from typing import Any

from noterag.core.prompt import AnswerPrompts, Prompt
from noterag.prompts import vendored

REPOSITORY = "RUC-NLPIR/FlashRAG"
COMMIT = "0e4da8cd1b4ec96d31cd9c71a9a7bb14c639f9aa"
BASE_PROMPT_FILE = "base_prompt.py.txt"
RUN_EXP_FILE = "run_exp.py.txt"
# FlashRAG's get_string for a model without a chat template: "\n\n".join of the non-empty parts
JOIN = "\n\n"


def source() -> dict[str, Any]:
    """SOURCE.json of the vendored files."""
    return vendored.source(REPOSITORY)


@cache
def base_template() -> tuple[str, str]:
    """``PromptTemplate.base_system_prompt`` and ``base_user_prompt`` as FlashRAG defines them
    (the implicit concatenation of its string literals done by ``ast.literal_eval``)."""
    tree = ast.parse(vendored.text(REPOSITORY, BASE_PROMPT_FILE))
    values: dict[str, str] = {}
    for cls in tree.body:
        if isinstance(cls, ast.ClassDef) and cls.name == "PromptTemplate":
            for statement in cls.body:
                if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1):
                    continue
                target = statement.targets[0]
                if isinstance(target, ast.Name) and target.id.startswith("base_"):
                    values[target.id] = ast.literal_eval(statement.value)
    return values["base_system_prompt"], values["base_user_prompt"]


@cache
def zero_shot_template() -> tuple[str, str]:
    """The ``system_prompt`` and ``user_prompt`` of the ``PromptTemplate`` that
    ``examples/methods/run_exp.py``'s ``zero_shot`` builds (its Naive Generation row)."""
    tree = ast.parse(vendored.text(REPOSITORY, RUN_EXP_FILE))
    for function in tree.body:
        if isinstance(function, ast.FunctionDef) and function.name == "zero_shot":
            for call in ast.walk(function):
                if isinstance(call, ast.Call) and getattr(call.func, "id", "") == "PromptTemplate":
                    keywords = {k.arg: k.value for k in call.keywords}
                    return (
                        ast.literal_eval(keywords["system_prompt"]),
                        ast.literal_eval(keywords["user_prompt"]),
                    )
    raise LookupError(f"{RUN_EXP_FILE}: no PromptTemplate(...) in zero_shot")


def _prompt(name: str, parts: tuple[str, str], slots: dict[str, str], where: str) -> Prompt:
    """FlashRAG's system and user parts joined as its get_string joins them, its slots renamed
    to ``slots``' values, rendered with ``str.format`` as FlashRAG renders them."""
    text = JOIN.join(part for part in parts if part)
    for theirs, ours in slots.items():
        text = text.replace("{" + theirs + "}", "{" + ours + "}")
    cite = f"{REPOSITORY} {where} @ {COMMIT[:7]} (system and user parts joined by a blank line)"
    return Prompt(name, text, cite, style="format")


def rag_prompt(name: str, *, reference: str, question: str) -> Prompt:
    """FlashRAG's default template (every retrieval pipeline's), slots named as the step
    filling it names them."""
    where = "flashrag/prompt/base_prompt.py PromptTemplate.base_system_prompt/base_user_prompt"
    return _prompt(name, base_template(), {"reference": reference, "question": question}, where)


def naive_prompt(name: str) -> Prompt:
    """FlashRAG's Naive Generation template (run_exp.py ``zero_shot``)."""
    where = "examples/methods/run_exp.py zero_shot"
    return _prompt(name, zero_shot_template(), {"question": "query"}, where)


# FlashRAG's benchmark is multi-hop / open-domain QA only: one answer prompt, task multihop.
VANILLA = AnswerPrompts(answer={"multihop": rag_prompt("flashrag_rag", reference="refs",
                                                       question="query")})  # fmt: skip
NO_RETRIEVAL = AnswerPrompts(answer={"multihop": naive_prompt("flashrag_naive")})


def _iter_retgen() -> Any:
    from noterag.prompts.iter_retgen import PAPER, IterRetGenPrompts

    # FlashRAG's IterativePipeline prompts every iteration with the default template, no
    # demonstrations (flashrag/pipeline/active_pipeline.py @ 0e4da8c); the paper's stay in the
    # set, unread, as the step's prompt set has them
    rag = rag_prompt("flashrag_iter_retgen", reference="knowledge", question="question")
    # its answer is the last generation as it is (pipeline.run's "pred", scored whole)
    return IterRetGenPrompts(
        answer={"multihop": rag}, demonstrations=PAPER.demonstrations, answer_line=False
    )


ITER_RETGEN = _iter_retgen()
