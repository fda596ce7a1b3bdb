"""FLARE prompts (Jiang et al., 2023, "Active Retrieval Augmented Generation"), from the authors'
code, jzbjyb/FLARE at ec4b06b (``COMMIT``).

The few-shot exemplars are the original's, read out of ``src/datasets.py`` (vendored byte for
byte as ``prompts/original/jzbjyb-FLARE/datasets.py.txt``, SOURCE.json: its path and git blob
id) as Python literals with the ``ast`` module, never run: per noterag task, the exemplars of the
dataset the original runs that kind of question on (``openai.sh``: how many, ``--fewshot``):

| task       | original dataset class, exemplars               | few-shot | output template (``_format``)          |
|------------|-------------------------------------------------|----------|----------------------------------------|
| multihop   | ``WikiMultiHopQA.cot_examplars``                | 8        | ``{cot} So the answer is {answer}.``   |
| strategyqa | ``StrategyQA.cot_examplars``                    | 6        | ``{cot} So the final answer is {answer}.`` |
| asqa       | ``ASQA.general_hint_in_input_examplars``, as    | 8        | the answer (``ASQA.__init__`` with     |
|            | ``prompt_type="general_hint_in_output"`` uses   |          | ``general_hint_in_output`` rewrites it)|

The texts around them are the original's code (templates per dataset are lambdas in
``src/datasets.py``; the assembly is ``CtxPrompt.format`` in ``src/templates.py``):
- ``answer.<task>``: the test input template the generator continues
  (``cot_test_input_template``; ASQA's ``general_hint_in_output_test_input_template``); each
  exemplar is the same template filled with its question, a space, and its output template.
- ``search_results``: the references above an exemplar or the test input
  (``format_reference_method="searchresultsrank"``, the default of ``openai_api.py``;
  ``ctx_position="before_case"``): each passage as ``[i]: <text>`` on its own line
  (``update_retrieval``: newlines turned into spaces, empty passages dropped), then ``"\\n"``
  and the exemplar or test input. Without passages the block is the input alone.
- ``ask_question``: the explicit-query variant's question generation
  (``CtxPrompt.ask_question_text``), one per low-confidence term.
Blocks are joined by a blank line (``"\\n\\n".join(elements)``), the test input last, followed
by the sentences generated so far.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cache
from typing import Any, NamedTuple

from noterag.base.errors import ConfigError
from noterag.core.prompt import AnswerPrompts, Prompt
from noterag.prompts import vendored

REPOSITORY = "jzbjyb/FLARE"
COMMIT = "ec4b06b502b5ab54f3f9236b0112a5d28482e7bb"
DATASETS_FILE = "datasets.py.txt"

# noterag task -> (class in src/datasets.py, its exemplar list, openai.sh's --fewshot)
EXEMPLARS: dict[str, tuple[str, str, int]] = {
    "multihop": ("WikiMultiHopQA", "cot_examplars", 8),
    "strategyqa": ("StrategyQA", "cot_examplars", 6),
    "asqa": ("ASQA", "general_hint_in_input_examplars", 8),
}
TASKS = tuple(EXEMPLARS)


class Demonstration(NamedTuple):
    """One exemplar: its question (what the original retrieves its passages with) and its
    input-and-output text (``_format(example, use_answer=True)``)."""

    question: str
    text: str


def source() -> dict[str, Any]:
    """SOURCE.json of the vendored file."""
    return vendored.source(REPOSITORY)


@cache
def _exemplar_lists() -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Every class-level ``*_examplars`` list of src/datasets.py that is a literal, by (class,
    attribute)."""
    tree = ast.parse(vendored.text(REPOSITORY, DATASETS_FILE))
    found: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for cls in tree.body:
        if not isinstance(cls, ast.ClassDef):
            continue
        for statement in cls.body:
            target: ast.expr
            if isinstance(statement, ast.AnnAssign):
                target, value = statement.target, statement.value
            elif isinstance(statement, ast.Assign) and len(statement.targets) == 1:
                target, value = statement.targets[0], statement.value
            else:
                continue
            if (
                isinstance(target, ast.Name)
                and target.id.endswith("examplars")
                and value is not None
            ):
                try:
                    found[(cls.name, target.id)] = ast.literal_eval(value)
                except ValueError:  # an alias of another list (cot_ret_examplars = cot_examplars)
                    continue
    return found


def _output(task: str, example: dict[str, Any]) -> str:
    """The exemplar's output as its dataset's output template writes it."""
    if task == "asqa":  # ASQA.__init__, prompt_type == 'general_hint_in_output'
        return (
            f"{example['general_hint']} In order to figure out its interpretations, "
            f"{example['subq_cot']} {example['answer']}"
        )
    cot = example["cot"] if isinstance(example["cot"], str) else "".join(example["cot"])
    if task == "strategyqa":
        return f"{cot} So the final answer is {example['answer']}."
    return f"{cot} So the answer is {example['answer']}."


@cache
def demonstrations(task: str, template: Prompt | None = None) -> tuple[Demonstration, ...]:
    """The exemplars the original shows for ``task`` (its first ``--fewshot`` ones), each
    formatted as ``_format(..., use_answer=True)`` does: the input ``template`` (the test
    input's: the original uses one template for both; default the paper's), a space unless it
    ends in one or a newline, the output."""
    if task not in EXEMPLARS:
        raise ConfigError(f"FLARE has prompts for the tasks {', '.join(TASKS)}, not {task!r}")
    cls, attribute, fewshot = EXEMPLARS[task]
    template = template or PAPER.answer[task]
    shown = []
    for example in _exemplar_lists()[(cls, attribute)][:fewshot]:
        query = template.format(question=example["question"])
        glue = "" if query[-1] in {"\n", " "} else " "
        shown.append(Demonstration(example["question"], query + glue + _output(task, example)))
    return tuple(shown)


@dataclass(frozen=True, kw_only=True)
class FlarePrompts(AnswerPrompts):
    """``answer``: the test input the generator continues, per task; ``search_results``: the
    references above each block; ``ask_question``: the explicit-query variant's question."""

    search_results: Prompt
    ask_question: Prompt


_CODE = f"{REPOSITORY} @ {COMMIT[:7]}"

PAPER = FlarePrompts(
    search_results=Prompt(
        "search_results",
        "Search results ranked based on relevance in descending order:\n{passages}",
        f"{_CODE}: src/templates.py, CtxPrompt.format_reference ('searchresultsrank', the "
        "default format_reference_method of src/openai_api.py); {passages} is "
        "'\\n'.join('[i]: <text>') as CtxPrompt.update_retrieval writes it",
    ),
    ask_question=Prompt(
        "ask_question",
        "{context}{sentence}\n\nGiven the above passage, ask a question to which the answer is "
        'the term/entity/phrase "{term}".',
        f"{_CODE}: src/templates.py, CtxPrompt.ask_question_text (context: the text generated "
        "so far, left-stripped; sentence: the look-ahead sentence as generated, with its "
        "leading space, right-stripped)",
    ),
    answer={
        "multihop": Prompt(
            "answer.multihop",
            "Question: {question}\nAnswer:",
            f"{_CODE}: src/datasets.py, WikiMultiHopQA.cot_test_input_template",
        ),
        "strategyqa": Prompt(
            "answer.strategyqa",
            "Generate a yes or no answer to the following question.\nQuestion: {question}\nAnswer:",
            f"{_CODE}: src/datasets.py, StrategyQA.cot_test_input_template",
        ),
        "asqa": Prompt(
            "answer.asqa",
            "Given an ambiguous question, figure out its interpretations and answer them one by "
            "one.\nQuestion: {question}\nAnswer:",
            f"{_CODE}: src/datasets.py, ASQA.general_hint_in_output_test_input_template",
        ),
    },
)
