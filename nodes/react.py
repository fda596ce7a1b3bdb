"""ReAct's steps (Yao et al., 2023), as ysymyth/ReAct's hotpotqa.ipynb (``webthink``) and
wikienv.py run them, over noterag's retriever instead of Wikipedia.

Step i (1-based, the prompt's numbering):

- ``reason``: one call, ``prompt + "Thought {i}:"`` with the stop sequence
  ``["\\nObservation {i}:"]``; the reply is ``<thought>\\nAction {i}: <action>``. A reply without
  that action line gets the notebook's repair: the thought is the reply's first line and a
  second call, ``prompt + "Thought {i}: <thought>\\nAction {i}:"`` with stop ``["\\n"]``, writes
  the action (stage ``action``; the notebook counts these as ``n_badcalls``).
- ``act``: runs the action as wikienv.py does (the first letter lower-cased, then
  ``search[...]`` / ``lookup[...]`` / ``finish[...]`` / ``think[...]``, anything else is
  "Invalid action: <action>"), and appends ``Thought {i}: ...\\nAction {i}: ...\\nObservation
  {i}: ...\\n`` to the prompt.
- the loop ends on Finish or after ``max_steps`` steps (the notebook: ``for i in range(1, 8)``,
  7 steps; the paper, Section 3.3: 7 steps for HotpotQA).
- ``answer``: Finish[answer] gives the answer without another call. When the steps run out,
  the notebook sends ``finish[]``, an empty answer; noterag must answer, so it makes one final
  call continuing the trajectory with ``Action {max_steps + 1}: Finish[`` (stop ``["]"]``) and
  takes what the model writes. A ``Finish[]`` with nothing inside ends the episode too (as in
  wikienv.py) and is answered the same way, continuing ``Thought {i}: <thought>\\nAction {i}:
  Finish[``. This is the only call whose tokens stream. (The paper's ReAct -> CoT-SC back-off,
  which answers with 21 chain-of-thought samples instead, is not reproduced.)

What an Observation is here (the original's is the first five sentences of the Wikipedia page
of the exact entity, or "Could not find <entity>. Similar: [<titles>]."):

- ``Search[query]``: the top-k passages for the query (context ``top_k``, 5 as in the papers
  that compare against ReAct, which align the retriever and top-k across baselines), one line
  per passage, ``<title>: <text>`` with the text's line breaks as spaces (the original's page
  text is one paragraph of sentences; a demonstration's observation spans two lines). No
  passage: ``Could not find <query>. Similar: [].``. With ``top_k=1`` the Observation is the
  best passage alone, the nearest to "the first paragraph".
- ``Lookup[keyword]``: as wikienv.py, over the "current page": the texts of the last Search
  that found passages, one paragraph each, cut into sentences at ". " (each given a final
  "."); the next sentence containing the keyword (case-insensitive), as ``(Result j / n)
  <sentence>``, then "No more results.\\n". A new keyword starts over; a Search that finds
  passages resets the lookup.
- ``Think[...]``: "Nice thought." (wikienv.py).
- the notebook removes the two characters backslash + n from every observation; so do we.

Sampling is the run's (noterag's models: temperature 0.1), not the notebook's text-davinci-002
completion settings (temperature 0, 100 tokens); the growing prompt is sent as one user
message to a chat model. FlashRAG (RUC-NLPIR/FlashRAG) has no ReAct pipeline to compare with.

Parse fallbacks (counted in ``fallbacks`` by kind):

| kind          | a reply without ...                                  | fallback                                           |
|---------------|------------------------------------------------------|----------------------------------------------------|
| observation   | stopping before "\\nObservation i:" (stop ignored)    | the reply is cut there                             |
| echo          | starting with its thought (it echoes "Thought i:")   | the echoed label is removed                        |
| action_line   | exactly one "\\nAction i: " line                      | the first "Action:" line in any spelling           |
| action        | any action line                                      | the notebook's: first line as thought, one more call for the action |
| action_syntax | an action of the exact form Search[...] / ...        | the first Search/Lookup/Finish/Think[...] in it, any case |
| invalid_action| any action                                           | Observation "Invalid action: <action>" (wikienv.py) |
| finish_empty  | an answer inside Finish[]                             | the episode ends; the answer call writes one      |
| final_answer  | text before "]" in the out-of-steps Finish[          | the last thought                                   |
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

from langchain_core.messages import AIMessage

from noterag.core.parsing import fell_back
from noterag.core.state import Passage
from noterag.core.step import Ask, Env, Search, StepGen, reply_text

ActionKind = Literal["search", "lookup", "finish", "think", "invalid"]
KINDS: tuple[ActionKind, ...] = ("search", "lookup", "finish", "think")


# --- parsing ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ThoughtAction:
    """A ``reason`` reply: the thought, and the action (None: the reply wrote none)."""

    thought: str
    action: str | None


@dataclass(frozen=True)
class Action:
    """An action as the environment reads it: its kind and what is inside the brackets."""

    kind: ActionKind
    argument: str


# "Thought 2:" echoed at the start of a reply that should begin with the thought itself
_THOUGHT_LABEL = re.compile(r"^\s*+thought\s*+\d*+\s*+:\s*+", re.IGNORECASE)
# an action line in any spelling: "\nAction: ...", "\n Action 2 :..."
_ACTION_LINE = re.compile(r"\n[ \t]*+action[ \t]*+\d*+[ \t]*+:[ \t]*+", re.IGNORECASE)
_ACTION = re.compile(r"\b(search|lookup|finish|think)[ \t]*+\[([^\]\n]*)\]", re.IGNORECASE)


def parse_thought_action(reply: str, i: int) -> ThoughtAction:
    """Step ``i``'s reply as the notebook splits it, ``reply.strip().split("\\nAction {i}: ")``
    into exactly a thought and an action, with the fallbacks of the table above."""
    cut = reply.find(f"\nObservation {i}:")
    if cut >= 0:
        fell_back("observation")
        reply = reply[:cut]
    text = reply.strip()
    if _THOUGHT_LABEL.match(text):
        fell_back("echo")
        text = _THOUGHT_LABEL.sub("", text, count=1)
    parts = text.split(f"\nAction {i}: ")
    if len(parts) == 2:
        return ThoughtAction(parts[0].strip(), parts[1].strip())
    if match := _ACTION_LINE.search(text):
        fell_back("action_line")
        rest = text[match.end() :].strip()
        return ThoughtAction(text[: match.start()].strip(), rest.split("\n")[0].strip())
    fell_back("action")
    return ThoughtAction(text.split("\n")[0].strip(), None)


def parse_action(action: str) -> Action:
    """wikienv.py's reading (``action[0].lower() + action[1:]``, then ``<kind>[`` ... ``]``),
    else the first bracketed action in any case (``action_syntax``), else invalid."""
    text = action.strip()
    lowered = text[:1].lower() + text[1:]
    for kind in KINDS:
        if lowered.startswith(f"{kind}[") and lowered.endswith("]"):
            return Action(kind, lowered[len(kind) + 1 : -1])
    if match := _ACTION.search(text):
        fell_back("action_syntax")
        return Action(cast(ActionKind, match.group(1).lower()), match.group(2))
    fell_back("invalid_action")
    return Action("invalid", text)


def parse_final_answer(reply: str, last_thought: str) -> str:
    """What the model wrote inside the ``Finish[`` it was given: up to "]" (the stop sequence,
    which a model may ignore) on its first non-empty line, without an echoed "Finish[". Nothing
    there: the last thought (``final_answer``)."""
    text = reply.strip()
    text = re.sub(
        r"^(?:action[ \t]*+\d*+[ \t]*+:[ \t]*+)?finish[ \t]*+\[", "", text, flags=re.IGNORECASE
    )
    line = next((ln.strip() for ln in text.split("]")[0].splitlines() if ln.strip()), "")
    if not line:
        fell_back("final_answer")
        return last_thought
    return line


# --- observations ----------------------------------------------------------------------------


def search_observation(query: str, passages: Sequence[Passage]) -> str:
    """The Observation of Search[query]: one line per passage, or the original's not-found line."""
    if not passages:
        return f"Could not find {query}. Similar: []."
    lines = []
    for p in passages:
        text = " ".join(p["text"].split())
        lines.append(f"{p['title']}: {text}" if p["title"] else text)
    return "\n".join(lines)


def page_of(passages: Sequence[Passage]) -> str:
    """The "current page" Lookup reads: the passages' texts, one paragraph each."""
    return "\n".join(p["text"] for p in passages)


def lookup_list(page: str, keyword: str) -> list[str]:
    """wikienv.py's ``construct_lookup_list``: the page's sentences (paragraphs split at ". ",
    each stripped and given a final ".") that contain ``keyword``, case-insensitively."""
    paragraphs = [p.strip() for p in page.split("\n") if p.strip()]
    sentences = [s for p in paragraphs for s in p.split(". ")]
    sentences = [s.strip() + "." for s in sentences if s.strip()]
    return [s for s in sentences if keyword.lower() in s.lower()]


# --- the steps -------------------------------------------------------------------------------


def trajectory_prompt(state: dict[str, Any], env: Env, steps: Sequence[str] | None = None) -> str:
    """The notebook's ``prompt``: instruction, demonstrations, the question, the steps so far."""
    scratchpad = "".join((state.get("trajectory") or []) if steps is None else steps)
    return env.prompts.webthink.format(question=state["question"], scratchpad=scratchpad)


def reason(state: dict[str, Any], env: Env) -> StepGen:
    """Thought i and Action i: one call stopped before "Observation i:"; a reply without an
    action line gets the notebook's second call for the action alone."""
    i = state.get("steps", 0) + 1
    prompt = trajectory_prompt(state, env)
    reply = yield Ask("reason", prompt + f"Thought {i}:", options={"stop": [f"\nObservation {i}:"]})
    parsed = parse_thought_action(reply, i)
    action, calls = parsed.action, 1
    if action is None:
        written = yield Ask(
            "action",
            prompt + f"Thought {i}: {parsed.thought}\nAction {i}:",
            options={"stop": ["\n"]},
        )
        action, calls = written.strip().split("\n")[0].strip(), 2
    env.emit({"type": "thought", "step": i, "thought": parsed.thought, "action": action})
    return {"thought": parsed.thought, "action": action, "reason_calls": calls}


def act(state: dict[str, Any], env: Env) -> StepGen:
    """Action i in the environment, Observation i, and the step appended to the trajectory."""
    i = state.get("steps", 0) + 1
    thought, written = state.get("thought") or "", state.get("action") or ""
    action = parse_action(written)
    update: dict[str, Any] = {"steps": i, "finished": action.kind == "finish"}
    found: list[Passage] = []
    if action.kind == "search":
        query = action.argument.strip()
        found = (yield Search(query, env.ctx.top_k)) if query else []
        observation = search_observation(query, found)
        if found:  # wikienv.py: a page was found, so it is the current page and lookup restarts
            update |= {"page": page_of(found), "lookup_keyword": None, "lookup_next": 0}
    elif action.kind == "lookup":
        keyword, count = action.argument, state.get("lookup_next") or 0
        if keyword != state.get("lookup_keyword"):
            count = 0
        results = lookup_list(state.get("page") or "", keyword)
        if count >= len(results):
            observation = "No more results.\n"
        else:
            observation = f"(Result {count + 1} / {len(results)}) " + results[count]
            count += 1
        update |= {"lookup_keyword": keyword, "lookup_next": count}
    elif action.kind == "finish":
        answer = action.argument.strip()
        if not answer:
            fell_back("finish_empty")
        observation = "Episode finished"
        update["finish"] = answer
    elif action.kind == "think":
        observation = "Nice thought."
    else:
        observation = f"Invalid action: {written}"
    observation = observation.replace("\\n", "")  # the notebook's obs.replace('\\n', '')
    step = f"Thought {i}: {thought}\nAction {i}: {written}\nObservation {i}: {observation}\n"
    ids = [p["id"] for p in found]
    env.emit(
        {
            "type": "observation",
            "step": i,
            "action": action.kind,
            "argument": action.argument,
            "observation": observation,
            "passages": [{"id": p["id"], "title": p["title"]} for p in found],
        }
    )
    return update | {
        "trajectory": [step],
        "passage_ids": ids,
        "trace": [
            {
                "step": i,
                "thought": thought,
                "action": written,
                "observation": observation,
                "passage_ids": ids,
                "llm_calls": state.get("reason_calls") or 1,
            }
        ],
    }


def answer(state: dict[str, Any], env: Env) -> StepGen:
    """The answer: Finish[answer]'s, or, when the steps ran out or Finish was empty, one call
    continuing the trajectory with ``Finish[`` (stop "]"), whose tokens stream. Either way the
    answer is appended to ``messages`` as an AI message."""
    finished = state.get("finish")
    if finished:
        text, message_id = finished, None
    else:
        steps = list(state.get("trajectory") or [])
        i = state.get("steps", 0)
        thought = state.get("thought") or ""
        if state.get("finished"):  # Finish[] was empty: ask again for what goes inside
            trajectory = trajectory_prompt(state, env, steps[:-1]) + f"Thought {i}: {thought}\n"
            step = i
        else:
            trajectory, step = trajectory_prompt(state, env, steps), i + 1
        task = state.get("task") or env.ctx.task
        prompt = env.prompts.answer_for(task).format(trajectory=trajectory, step=str(step))
        reply = yield Ask("answer", prompt, stream=True, options={"stop": ["]"]})
        text, message_id = parse_final_answer(reply_text(reply), thought), reply.id
    env.emit({"type": "answer", "answer": text})
    return {
        "answer": text,
        "question": state["question"],
        "messages": [AIMessage(text, id=message_id)],
    }
