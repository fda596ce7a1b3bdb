"""ReAct prompts (Yao et al., 2023, "ReAct: Synergizing Reasoning and Acting in Language
Models"), from the authors' code, ysymyth/ReAct @ 6bdb3a1, hotpotqa.ipynb.

The notebook builds one prompt and grows it step by step::

    webthink_prompt = instruction + webthink_examples        # prompts_naive.json["webthink_simple6"]
    prompt = webthink_prompt + "Question: <question>" + "\\n"
    step i: llm(prompt + f"Thought {i}:", stop=[f"\\nObservation {i}:"])
            prompt += f"Thought {i}: {thought}\\nAction {i}: {action}\\nObservation {i}: {obs}\\n"

- ``instruction`` is the notebook's text, word for word (its "three types: " keeps the space
  before the line break); tests/test_react.py checks it against the vendored notebook.
- ``webthink_simple6`` (the six HotpotQA demonstrations the notebook uses) is read from the
  vendored ``prompts/original/ysymyth-ReAct/prompts_naive.json``, byte for byte (SOURCE.json
  gives the commit and git blob ids), with ``json.load`` as the notebook reads it.
- ``webthink`` is the whole prompt up to the current step: instruction, demonstrations,
  ``Question: {question}\\n`` and ``{scratchpad}``, the steps so far (each
  ``Thought i: ...\\nAction i: ...\\nObservation i: ...\\n``). The suffixes the loop appends
  ("Thought {i}:", the re-asked "Thought {i}: <thought>\\nAction {i}:") are the notebook's and
  live in nodes/react.py.
- The instruction says Search "searches the exact entity on Wikipedia and returns the first
  paragraph"; noterag's Search returns the top-k passages of the index instead (see
  nodes/react.py). The text stays the original's: the demonstrations show that
  behaviour too, and a prompt override (``webthink``) can change both.
- ``answer`` (ours): when max_steps run out without Finish, the notebook sends
  ``finish[]`` (an empty answer). noterag must answer, so it continues the trajectory with the
  protocol's own words, ``Action {step}: Finish[``, and reads what the model writes up to "]".
  The same continuation serves every task: ReAct's HotpotQA prompt knows no other answer
  style (the repository's other QA prompt is FEVER's).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from noterag.core.prompt import AnswerPrompts, Prompt
from noterag.prompts.vendored import cite, text

REPOSITORY = "ysymyth/ReAct"

# hotpotqa.ipynb, the ReAct cell: `instruction = """..."""`
INSTRUCTION = (
    "Solve a question answering task with interleaving Thought, Action, Observation steps. "
    "Thought can reason about the current situation, and Action can be three types: \n"
    "(1) Search[entity], which searches the exact entity on Wikipedia and returns the first "
    "paragraph if it exists. If not, it will return some similar entities to search.\n"
    "(2) Lookup[keyword], which returns the next sentence containing keyword in the current "
    "passage.\n"
    "(3) Finish[answer], which returns the answer and finishes the task.\n"
    "Here are some examples.\n"
)

# The notebook: prompt_dict['webthink_simple6'] of prompts/prompts_naive.json
EXAMPLES = json.loads(text(REPOSITORY, "prompts_naive.json"))["webthink_simple6"]


@dataclass(frozen=True, kw_only=True)
class ReActPrompts(AnswerPrompts):
    """ReAct's one growing prompt, and the out-of-steps continuation (``answer``)."""

    webthink: Prompt


_FINISH = Prompt(
    "answer_finish",
    "{trajectory}Action {step}: Finish[",
    "ours: the trajectory continued with the protocol's Finish action when max_steps run out "
    "(hotpotqa.ipynb sends finish[], an empty answer)",
)

PAPER = ReActPrompts(
    webthink=Prompt(
        "webthink",
        INSTRUCTION + EXAMPLES + "Question: {question}\n{scratchpad}",
        f"{cite(REPOSITORY, 'hotpotqa.ipynb')} (instruction, Question line) + "
        f"{cite(REPOSITORY, 'prompts_naive.json')} (webthink_simple6)",
    ),
    answer={task: _FINISH for task in ("multihop", "asqa", "strategyqa", "crud")},
)
