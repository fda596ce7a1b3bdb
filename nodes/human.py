"""Human in the loop (the setting ``human_review``): a person reviews the note before the answer
and the final answer, through LangGraph's ``interrupt()``.

Each pause sends LangChain v1's HITL request (``langchain.agents.middleware.human_in_the_loop``'s
``HITLRequest``, what Agent Chat UI's ``isAgentInboxInterruptSchema`` recognises and renders as a
review card), one action per reviewed item::

    {"action_requests": [{"name": "review_note", "args": {"note"}, "description": "..."}],
     "review_configs": [{"action_name": "review_note",
                         "allowed_decisions": ["approve", "edit", "reject"]}]}

(``review_answer``, args ``answer``, at the answer's review). The edited text is the request's
one argument, so it is the one text box Agent Chat UI offers to edit; what the reviewer reads
besides (what each decision does, the passages numbered with their titles, each step's queries
and verdict; the question, at the answer's review) is the description's Markdown, which Agent
Chat UI renders as text. The run resumes
with ``Command(resume={"decisions": [decision]})``, one decision for the one action:

* ``{"type": "approve"}``: go on as is;
* ``{"type": "edit", "edited_action": {"name": "review_note", "args": {"note": "..."}}}``
  (``"answer"`` at the answer's review; other args are ignored): the edited text is what the
  next step reads (the answer prompt reads the edited note) and what the state keeps;
* ``{"type": "reject", "message": "..."}``: the message is the reviewer's feedback, used as a
  query: retrieve with it, update the note from what it found (the method's knowledge-
  accumulation prompt), then review again (the answer's review: answer again from the new
  note, then review again). Offered only where the method has that prompt.

Older payloads are still understood, as Agent Inbox and earlier clients send them:
LangGraph's ``HumanResponse`` (``accept`` and ``ignore`` as approve, ``{"type": "edit",
"args": {"action", "args": {...}}}``, ``{"type": "response", "args": "<query>"}`` as reject),
LangChain's ``{"type": "respond", "message": ...}`` (as reject), a bare decision, or a list of
one of these.

An edit is at most ``MAX_EDIT_CHARS`` characters and a query at most the question's
``MAX_QUESTION_CHARS``: what a reviewer sends goes into prompts and retrieval. A malformed
decision is not an error of the run: the review pauses again, its description saying what was
not understood, and (LangGraph's ``interrupt(response_schema=...)``) the malformed value is not
kept as the task's resume value; the next decision replaces it. A server refuses it before the
run (``check_resume``, HTTP 422), so it is never stored there.

A review resumes without repeating a model call: the pause comes before the step's calls
(LangGraph re-runs a resumed node from its start), and a reject goes back through the graph (a
``Command``), so the next pause is a new step.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Annotated, Any

from langchain_core.messages import AIMessage
from langgraph.types import Command, interrupt
from pydantic import PlainValidator, ValidationError, WithJsonSchema

from noterag.base.errors import ConfigError
from noterag.core.context import MAX_QUESTION_CHARS
from noterag.core.spec import reads_note
from noterag.core.step import Env, RoutingStepGen, Search
from noterag.nodes.notes import updated_note

# The decision types a request offers (LangChain v1's DecisionType, as Agent Chat UI renders them).
DECISIONS = ("approve", "edit", "reject")
# Every type a decision may be sent as: LangChain v1's, its "respond", and LangGraph's older
# HumanResponse's; mapped to the three above.
AS_DECISION = {
    "approve": "approve",
    "accept": "approve",
    "ignore": "approve",
    "edit": "edit",
    "reject": "reject",
    "respond": "reject",
    "response": "reject",
}
# The text each action's edit replaces.
EDITED = {"review_note": "note", "review_answer": "answer"}
# The longest edited note or answer: several times any note or answer a model writes at the
# reply lengths the methods use (a note is about a paragraph), far below a prompt that would
# cost much; an 880,000-character edit once became a 221k-token answer prompt.
MAX_EDIT_CHARS = 20_000
# interrupt()'s response_schema (newer LangGraph than the lowest pinned): a resume value that
# fails it is not kept as the task's resume value.
_VALIDATED_RESUME = "response_schema" in inspect.signature(interrupt).parameters
_RESUME_MAP_KEY = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True)
class Decision:
    """A reviewer's decision: ``type`` one of DECISIONS; ``text`` the edited note or answer
    (edit) or the feedback query (reject); ``sent_as`` the type the client sent."""

    type: str
    text: str | None = None
    sent_as: str = ""


def reviews(ctx: Any, what: str) -> bool:
    """Whether a run with context ``ctx`` pauses for a person to review ``what`` ("note" or
    "answer")."""
    setting = getattr(ctx, "human_review", "none")
    return setting in (what, "both")


# The step a review's reject goes back to: the answer, written again from the updated note
# (the note's review runs inside ``answer``, nodes.answer, so its reject goes back there too).
ANSWER = "answer"


def retrieves_more(prompt_set: Any) -> bool:
    """A reject (feedback used as a query) needs the method's note-update prompt."""
    return hasattr(prompt_set, "accumulate")


def can_retrieve_more(env: Env) -> bool:
    """Whether this run's reviews offer a reject (``retrieves_more`` of its prompt set)."""
    return retrieves_more(env.prompts)


def review_routes(prompts: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    """The steps each review's reject may go back to (its ``Command``), for a graph whose
    prompt sets (profile -> set) are ``prompts``, by the tests the reviews make at run time:
    the note's review (in ``answer``, where the answer prompt reads a note) and the answer's
    review go back to ``answer`` where the set ``retrieves_more``. What the graph declares as
    those steps' destinations, so Studio draws exactly the routes a run can take
    (graphs.assemble.add_answer_review). A run's prompt overrides replace prompts and may only
    drop slots, so they add no route."""
    sets = [prompt_set for prompt_set in prompts.values() if retrieves_more(prompt_set)]
    reads = any(
        reads_note(prompt_set, task)
        for prompt_set in sets
        for task in getattr(prompt_set, "answer", {})
    )
    return {"answer": (ANSWER,) if reads else (), "review_answer": (ANSWER,) if sets else ()}


def hitl_request(
    action: str, args: dict[str, Any], description: str, allowed: tuple[str, ...]
) -> dict[str, Any]:
    """The HITL request of one action (LangChain v1's ``HITLRequest``)."""
    return {
        "action_requests": [{"name": action, "args": args, "description": description}],
        "review_configs": [{"action_name": action, "allowed_decisions": list(allowed)}],
    }


def _shown(value: Any) -> str:
    """What was sent, by its shape only: the reply never echoes a client's text (it is stored
    with the paused review, and may be long)."""
    if value is None:
        return "null"
    if isinstance(value, Mapping):
        keys = ", ".join(f"{k!r:.30}" for k in list(value)[:6])
        kind = value.get("type")
        return f"an object with keys {keys}" + (f" and type {kind!r:.30}" if kind else "")
    if isinstance(value, list):
        return f"a list of {len(value)}"
    return f"a {type(value).__name__}"


def parse_decision(
    resume: Any, action: str | None = None, allowed: tuple[str, ...] = DECISIONS
) -> Decision:
    """The decision a review was resumed with, in any accepted shape (the module's docstring).
    ``action`` None (a server checking a resume before it knows the paused action): any
    review's edit. A ConfigError names the shape expected."""
    expected = (
        "resume a review with {'decisions': [{'type': 'approve'}]}, "
        "{'decisions': [{'type': 'edit', 'edited_action': {'name': ..., 'args': {...}}}]} or "
        "{'decisions': [{'type': 'reject', 'message': '<what to look for>'}]}"
    )
    decision = resume
    if isinstance(resume, Mapping) and "decisions" in resume:
        decision = resume["decisions"]
        if not isinstance(decision, list) or len(decision) != 1:
            raise ConfigError(
                f"a review asks about one action: send one decision, not {_shown(decision)}"
            )
    if isinstance(decision, list) and len(decision) == 1:
        decision = decision[0]  # a list of one, as Agent Inbox sends its HumanResponse
    sent_as = decision.get("type") if isinstance(decision, Mapping) else None
    if sent_as not in AS_DECISION:
        raise ConfigError(f"{expected}; got {_shown(resume)}")
    kind = AS_DECISION[sent_as]
    if kind not in allowed:
        raise ConfigError(f"this review allows {', '.join(allowed)}, not {sent_as}")
    if kind == "edit":
        return Decision(kind, _edited_text(decision, action), sent_as)
    if kind == "reject":
        message = decision.get("args" if sent_as == "response" else "message")
        if not isinstance(message, str) or not message.strip():
            raise ConfigError(
                f"a {sent_as} needs a message: what to look for (the query that retrieves "
                f"more); got {_shown(decision)}"
            )
        if len(message) > MAX_QUESTION_CHARS:
            raise ConfigError(
                f"a {sent_as}'s message is {len(message):,} characters long; at most "
                f"{MAX_QUESTION_CHARS:,} are accepted (it is a query)"
            )
        return Decision(kind, message.strip(), sent_as)
    return Decision(kind, None, sent_as)


def _edited_text(decision: Mapping[str, Any], action: str | None) -> str:
    """An edit's text: ``edited_action`` (LangChain v1) or ``args`` (HumanResponse)."""
    if "edited_action" in decision:
        edited, name_key = decision["edited_action"], "name"
    else:
        edited, name_key = decision.get("args"), "action"
    name = edited.get(name_key) if isinstance(edited, Mapping) else None
    args = edited.get("args") if isinstance(edited, Mapping) else None
    names = [action] if action else list(EDITED)
    field = EDITED.get(name) if name in names else None
    text = args.get(field) if field and isinstance(args, Mapping) else None
    if not isinstance(text, str) or not text.strip():
        want = " or ".join(f"{{'name': '{n}', 'args': {{'{EDITED[n]}': '<text>'}}}}" for n in names)
        raise ConfigError(f"an edit's edited_action is {want}; got {_shown(edited)}")
    if len(text) > MAX_EDIT_CHARS:
        raise ConfigError(
            f"the edited {field} is {len(text):,} characters long; at most "
            f"{MAX_EDIT_CHARS:,} are accepted"
        )
    return text


def check_resume(resume: Any) -> None:
    """Refuse a resume value no review would understand (a server, before it stores the run):
    a resume map ({interrupt id: value}) has each value checked."""
    if (
        isinstance(resume, Mapping)
        and resume
        and all(isinstance(k, str) and _RESUME_MAP_KEY.fullmatch(k) for k in resume)
    ):
        for value in resume.values():
            parse_decision(value)
        return
    parse_decision(resume)


def response_schema(action: str, allowed: tuple[str, ...]) -> dict[str, Any]:
    """The JSON schema of the resume a request takes (LangChain v1's ``HITLResponse``)."""
    branches: dict[str, dict[str, Any]] = {
        "approve": {"properties": {"type": {"const": "approve"}}, "required": ["type"]},
        "edit": {
            "properties": {
                "type": {"const": "edit"},
                "edited_action": {
                    "type": "object",
                    "properties": {
                        "name": {"const": action},
                        "args": {
                            "type": "object",
                            "properties": {
                                EDITED[action]: {"type": "string", "maxLength": MAX_EDIT_CHARS}
                            },
                            "required": [EDITED[action]],
                        },
                    },
                    "required": ["name", "args"],
                },
            },
            "required": ["type", "edited_action"],
        },
        "reject": {
            "properties": {
                "type": {"const": "reject"},
                "message": {"type": "string", "minLength": 1, "maxLength": MAX_QUESTION_CHARS},
            },
            "required": ["type", "message"],
        },
    }
    return {
        "type": "object",
        "properties": {
            "decisions": {
                "type": "array",
                "minItems": 1,
                "maxItems": 1,
                "items": {"oneOf": [{"type": "object", **branches[d]} for d in allowed]},
            }
        },
        "required": ["decisions"],
    }


def ask_human(
    action: str, args: dict[str, Any], description: str, allowed: tuple[str, ...]
) -> Decision:
    """Pause with the request until a decision of the right shape comes back. A malformed one
    is not an error of the run: the review is asked again, its description saying what was
    not understood."""
    parse: Callable[[Any], Decision] = partial(parse_decision, action=action, allowed=allowed)
    schema = Annotated[
        Decision, PlainValidator(parse), WithJsonSchema(response_schema(action, allowed))
    ]
    problem = ""
    while True:
        request = hitl_request(action, args, problem + description, allowed)
        try:
            if _VALIDATED_RESUME:
                # a value the schema refuses is not kept as the task's resume value
                return interrupt(request, response_schema=schema)
            return parse(interrupt(request))
        except ValidationError as error:
            cause = (error.errors()[0].get("ctx") or {}).get("error")
            problem = f"The last decision was not understood: {cause or error}. "
        except ConfigError as error:
            problem = f"The last decision was not understood: {error}. "


def _emit(env: Env, action: str, decision: Decision, **more: Any) -> None:
    env.emit(
        {
            "type": "human_review",
            "action": action,
            "decision": decision.type,
            "sent_as": decision.sent_as,
        }
        | more
    )


# A passage's text in a review's description is cut here: the card is read, not searched.
SHOWN_PASSAGE_CHARS = 1_000


def passages_text(passages: list[Any]) -> str:
    """The passages as a reviewer reads them (Markdown, what Agent Chat UI renders a request's
    description as): numbered, each with its title."""
    lines = []
    for i, p in enumerate(passages, 1):
        text = " ".join(str(p.get("text", "")).split())
        if len(text) > SHOWN_PASSAGE_CHARS:
            text = text[:SHOWN_PASSAGE_CHARS] + " [...]"
        lines.append(
            f"{i}. **{' '.join(str(p.get('title', '')).split()) or '(no title)'}**: {text}"
        )
    return "\n".join(lines) or "(none)"


def steps_text(trace: list[Any]) -> str:
    """Each step of the loop as a reviewer reads it: its queries and its verdict on the note."""
    lines = []
    for entry in trace:
        queries = "; ".join(f'"{" ".join(str(q).split())}"' for q in entry.get("queries") or [])
        verdict = entry.get("verdict")
        said = (
            "the first note"
            if verdict is None
            else ("the note was improved and kept" if verdict else "the note was not improved")
        )
        reason = " ".join(str(entry.get("reason") or "").split())
        lines.append(
            f"- Step {entry.get('step')}: searched {queries or '(nothing)'}; {said}"
            + (f" ({reason})" if reason and verdict is not None else "")
        )
    return "\n".join(lines) or "(none)"


def review_note(state: dict[str, Any], env: Env, goto: str) -> RoutingStepGen:
    """The note review before the answer: pause with the note (the request's one argument,
    the one text the reviewer edits) and, in its description, what each decision does, the
    passages and each step's queries and verdict as text; returns the state the answer reads
    (the note as reviewed) and the update to keep, or a ``Command`` back to ``goto`` after a
    reject's retrieval."""
    more = can_retrieve_more(env)
    description = (
        "Review the note the answer will be written from: approve it, edit it"
        + (", or reject it with what to look for (that text is searched for)." if more else ".")
        + " Approve: the answer is written from this note. Edit: the answer reads your note"
        + (
            ". Reject: your words are searched for, the note is updated from what they find, "
            "and you review it again."
            if more
            else "."
        )
        + f"\n\n**Passages the note was written from**\n\n{passages_text(state.get('passages') or [])}"
        + f"\n\n**Steps**\n\n{steps_text(state.get('trace') or [])}"
    )
    decision = ask_human(
        "review_note",
        {"note": state.get("best_note") or ""},
        description,
        DECISIONS if more else ("approve", "edit"),
    )
    if decision.type == "reject":
        return (yield from retrieve_more(state, env, "review_note", decision, goto))
    _emit(env, "review_note", decision)
    return {"best_note": decision.text} if decision.type == "edit" else {}


def retrieve_more(
    state: dict[str, Any], env: Env, action: str, decision: Decision, goto: str
) -> RoutingStepGen:
    """A reviewer's feedback as a query: its passages, the note updated from them (taken as the
    best note: the person asked for them), then back to ``goto`` for the next review."""
    query = decision.text or ""
    if not can_retrieve_more(env):
        raise ConfigError(f"{env.deps.method} cannot retrieve more for a review: no note update")
    passages = yield Search(query, env.ctx.top_k)
    update = yield from updated_note(state, env, passages)
    note = update.get("candidate_note") or state.get("best_note") or ""
    _emit(env, action, decision, query=query, note=note)
    return Command(
        goto=goto,
        update={
            "answer": None,  # the answer is written again (graphs.assemble.build's edge after answer)
            "best_note": note,
            "passages": passages,
            "query_log": [query],
            "passage_ids": [p["id"] for p in passages],
            "seen": [env.profile.passage_key(p) for p in passages],
        },
    )


def review_answer(state: dict[str, Any], env: Env) -> RoutingStepGen:
    """The final answer's review (a step after ``answer`` when ``human_review`` is answer or
    both; a no-op otherwise)."""
    if not reviews(env.ctx, "answer") or state.get("answer") is None:
        return {}
    more = can_retrieve_more(env) and state.get("best_note") is not None
    decision = ask_human(
        "review_answer",
        {"answer": state["answer"]},
        "Review the answer: approve it, edit it"
        + (
            ", or reject it with what to look for (that text is searched for, the note updated "
            "and the answer written again)."
            if more
            else "."
        )
        + f"\n\n**The question**: {' '.join(str(state.get('question') or '').split())}",
        DECISIONS if more else ("approve", "edit"),
    )
    if decision.type == "reject":
        return (yield from retrieve_more(state, env, "review_answer", decision, ANSWER))
    _emit(env, "review_answer", decision)
    if decision.type == "edit":
        messages = state.get("messages") or []
        last = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
        # the same id: add_messages replaces the streamed answer instead of adding a second one
        return {
            "answer": decision.text,
            "messages": [AIMessage(decision.text, id=last.id if last else None)],
        }
    return {}
