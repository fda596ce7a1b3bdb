"""The first step of every graph: the question to answer, from a question or a chat.

A run without a question fails here, before any model call. ``{"question": ...}`` and
``{"messages": [...]}`` are the same chat turn: a question given as ``question`` is stored in
``messages`` as the user's message (unless the caller's messages end with it), before the
answer's AI message. A question asked on a thread with earlier turns (a chat's follow-up, "When
was she born?") is first rewritten into a standalone question from the conversation: one model
call (stage ``condense_question``, its prompt given by the graph's builder:
``noterag.prompts.conversation``), skipped on a first turn; the rewrite is sent to
``stream_mode="custom"`` (``{"type": "condensed", ...}``) and kept in the state (``asked``:
the question as the user wrote it; ``question``: the standalone one every step reads).

The rewrite reads the last ``HISTORY_MESSAGES`` messages of the conversation, at most
``HISTORY_CHARS`` characters of them (the newest first; one that does not fit whole is cut,
marked ``[...]``, and older ones are left out), so a long thread costs the same as a short one.
A rewrite that comes back empty, or off-topic (it shares no content word with the question and
the history it read: ``on_topic``), is not used: the question stays as the user wrote it, the
``condensed`` event says why (``"fallback": "empty"`` or ``"off_topic"``) and the run's
``fallbacks`` count it as ``condense_question``. A rewrite longer than a question may be is an
error naming the rewrite.

This step also refuses, once per run, a ``human_review`` the run cannot honour
(``noterag.core.spec.check_review``: no checkpointer, or no note to review) and a ``configurable``
key that is no setting (``noterag.core.context.check_configurable``).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from typing import Annotated, Any, get_args, get_origin, get_type_hints

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.runnables import Runnable, RunnableConfig
from langgraph.runtime import get_runtime
from langgraph.types import Overwrite

from noterag.base.errors import ConfigError
from noterag.core.context import MAX_QUESTION_CHARS, check_configurable, check_question_size
from noterag.core.parsing import fell_back
from noterag.core.prompt import Prompt
from noterag.core.spec import CONDENSE_ROLE, Deps, check_review
from noterag.core.state import QuestionInput
from noterag.core.step import (
    TRUNCATION_MARK,
    Ask,
    Env,
    StepGen,
    both_ways,
    node,
    reply_text,
    run_context,
)

# How much of the conversation the follow-up rewrite reads: the last 20 messages (ten
# exchanges), at most 12,000 characters (about 3,000 tokens) of them. A pronoun or an ellipsis
# refers to the last turns; without a cap a thread of 110 long answers made a 207k-token call,
# and every further turn a longer one.
HISTORY_MESSAGES = 20
HISTORY_CHARS = 12_000
# a message cut to fit the budget keeps at least this much, else it is left out
_SHORTEST_CUT = 200

# What on_topic compares. A word: a run of letters or digits, or one character of a script
# written without spaces (Chinese, Japanese; Korean's syllables too): each counts alone.
_IDEOGRAPH = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
_WORD = re.compile(f"[{_IDEOGRAPH}]|[^\\W{_IDEOGRAPH}]+")
_WORD_ALONE = re.compile(f"[{_IDEOGRAPH}]")  # a letter alone is no word (the s of "she's")
_STEM = 5
# Words that say nothing of a topic: a rewrite sharing only these with the conversation is
# off-topic. English, as the prompt is; in other languages every word counts (a rewrite still
# shares the names the conversation gives).
_FUNCTION_WORDS = frozenset(
    {"a", "about", "an", "and", "any", "are", "as", "at", "be", "been", "being", "but", "by",
     "can", "could", "did", "do", "does", "for", "from", "had", "has", "have", "he", "her",
     "here", "him", "his", "how", "i", "if", "in", "into", "is", "it", "its", "me", "my", "no",
     "not", "of", "on", "or", "our", "please", "she", "so", "some", "than", "that", "the",
     "their", "them", "then", "there", "these", "they", "this", "those", "to", "us", "was", "we",
     "were", "what", "when", "where", "which", "who", "whom", "whose", "why", "will", "with",
     "would", "you", "your", "standalone", "question", "rephrase", "follow", "up", "input"}
)  # fmt: skip

# What a caller sends: all that a fresh run's state holds when this step runs.
_INPUT_KEYS = frozenset(QuestionInput.__annotations__)


def fresh_values(state_schema: type) -> dict[str, Any]:
    """What each field of a method's state starts over as on a chat thread's next question,
    read from the schema itself (so a new method's fields are covered without a list here):
    a field with a reducer is overwritten with its type's empty value (an ``Overwrite``, which
    reducers do not merge); a number or a flag restarts at 0 / False; every other field (a note,
    the queries, a sub-question: values whose mere presence means "the loop has begun") is
    cleared to None."""
    fresh: dict[str, Any] = {}
    for key, hint in get_type_hints(state_schema, include_extras=True).items():
        if key in _INPUT_KEYS:
            continue
        if get_origin(hint) is Annotated:
            base = get_origin(get_args(hint)[0]) or get_args(hint)[0]
            fresh[key] = Overwrite(base() if base in (list, dict, int, float) else None)
        elif hint in (int, float, bool):
            fresh[key] = hint()
        else:
            fresh[key] = None
    return fresh


def question_step(
    state_schema: type, deps: Deps, condense: Prompt, role_prefix: Mapping[str, str]
) -> Runnable:
    """The ``question`` step of a graph whose state is ``state_schema``; a follow-up is
    rewritten with the ``condense`` prompt, the history laid out with ``role_prefix`` (each
    speaker's line start: ``{"human": ..., "ai": ...}``)."""
    fresh = fresh_values(state_schema)

    def question(state: dict[str, Any], env: Env) -> StepGen:
        update = ask(state, fresh)
        history = recent(earlier_turns(state))
        if not history:
            return update
        asked = update["question"]
        reply = yield Ask(
            CONDENSE_ROLE,
            condense.format(chat_history=chat_history(history, role_prefix), question=asked),
        )
        standalone = reply.strip()
        event = {"type": "condensed", "asked": asked, "question": standalone}
        if not standalone or not on_topic(standalone, asked, history):
            # the user's own words rather than a rewrite that lost the question
            fell_back(CONDENSE_ROLE)
            event |= {"question": asked, "fallback": "off_topic" if standalone else "empty"}
            standalone = asked
        elif len(standalone) > MAX_QUESTION_CHARS:
            raise ConfigError(
                f"the model's rewrite of the follow-up (stage {CONDENSE_ROLE}) is "
                f"{len(standalone):,} characters long, over the {MAX_QUESTION_CHARS:,} a question "
                f"may have (the question as asked has {len(asked):,}); give the rewrite another "
                f"model with {CONDENSE_ROLE}_model="
            )
        env.emit(event)
        return update | {"question": standalone, "asked": asked}

    question.__doc__ = ask.__doc__
    rewrite = node(question, deps)

    def checked(state: dict[str, Any], config: RunnableConfig) -> None:
        # once per run, before any step's work: the settings only a whole run can judge
        runtime = get_runtime(deps.context_schema)
        configurable = config.get("configurable") or {}
        check_configurable(deps.context_schema, configurable, deps.config_keys)
        ctx = run_context(deps.context_schema, runtime.context, configurable)
        if getattr(ctx, "human_review", "none") != "none":
            check_review(
                deps.method,
                deps.prompts,
                ctx,
                state.get("task") or ctx.task,
                # a run's thread: what a checkpointer keeps it under (LangGraph's ExecutionInfo)
                checkpointer=runtime.execution_info is not None
                and runtime.execution_info.thread_id is not None,
            )

    # A first turn (most runs: every eval question) makes no model call: the rewrite's step
    # runs only on a follow-up.
    def first_or_follow_up(state: dict[str, Any], config: RunnableConfig) -> Any:
        checked(state, config)
        return rewrite.invoke(state, config) if earlier_turns(state) else ask(state, fresh)

    async def afirst_or_follow_up(state: dict[str, Any], config: RunnableConfig) -> Any:
        checked(state, config)
        if earlier_turns(state):
            return await rewrite.ainvoke(state, config)
        return ask(state, fresh)

    return both_ways(first_or_follow_up, afirst_or_follow_up, name="question")


def earlier_turns(state: Mapping[str, Any]) -> list[BaseMessage]:
    """The conversation before this run's question: the chat messages before the last user
    message when the question is that message; every chat message when the question is given
    as ``question`` (a turn of ``{"question": ...}`` on a thread; its user message is not
    stored yet). A run given both ``question`` and messages that end with a user message, on a
    fresh thread, answers the question as written. Empty on a first turn. Finished turns only
    (``finished_turns``): a question whose run stopped before its answer (killed, failed) is
    not part of the conversation a follow-up is read against."""
    messages: list[BaseMessage] = state.get("messages") or []
    if not messages:
        return []
    if users_turn(messages):
        if state.get("question") is not None and not _answered_before(state):
            return []
        messages = messages[:-1]
    elif state.get("question") is None:
        return []
    return finished_turns(messages)


def finished_turns(messages: list[BaseMessage]) -> list[BaseMessage]:
    """The user's and the assistant's messages of the turns that were answered: a user message
    with no answer after it (before the next user message) was a turn whose run stopped (a
    SIGKILL, an error, a review never resumed), and is left out."""
    kept: list[BaseMessage] = []
    answered = False
    for message in reversed(messages):  # newest first: an answer covers the questions before it
        if isinstance(message, AIMessage):
            kept.append(message)
            answered = True
        elif isinstance(message, HumanMessage):
            if answered:
                kept.append(message)
            answered = False
    return kept[::-1]


def recent(messages: list[BaseMessage]) -> list[BaseMessage]:
    """The part of the conversation the rewrite reads: the last ``HISTORY_MESSAGES`` messages
    within ``HISTORY_CHARS`` characters of text, newest first; the one that does not fit whole
    is cut to what is left of the budget (if at least ``_SHORTEST_CUT``) and older ones are left
    out."""
    kept: list[BaseMessage] = []
    budget = HISTORY_CHARS
    for message in reversed(messages[-HISTORY_MESSAGES:]):
        text = reply_text(message, sep="\n")
        if len(text) > budget:
            if budget >= _SHORTEST_CUT:
                cut = text[: budget - len(TRUNCATION_MARK)] + TRUNCATION_MARK
                kept.append(message.model_copy(update={"content": cut}))
            break
        kept.append(message)
        budget -= len(text)
    return kept[::-1]


def content_words(text: str) -> set[str]:
    """The words of ``text`` that can carry a topic, case-folded, single letters and function
    words left out, each cut to its first ``_STEM`` characters (a crude stem: "painter" and
    "painted" are one word)."""
    return {
        word[:_STEM]
        for word in _WORD.findall(text.casefold())
        if (len(word) > 1 or _WORD_ALONE.match(word)) and word not in _FUNCTION_WORDS
    }


def on_topic(rewrite: str, asked: str, history: list[BaseMessage]) -> bool:
    """Whether a follow-up's rewrite is about the conversation: it shares at least one content
    word (``content_words``) with the question as asked or the history the rewrite read. A
    standalone question takes its words from these two (the question's, and the names the
    history gives its pronouns); a reply that shares none (a refusal, an answer to something
    else, a question about another topic) is not a rewrite of this one."""
    words = content_words(rewrite)
    if words & content_words(asked):
        return True
    return any(words & content_words(reply_text(m, sep="\n")) for m in history)


# The id prefix of a user message this step stored from ``question``: on a thread whose last run
# stopped before its answer (an error, a review left waiting) the message is the last one, and
# the next run's question is its own input, not that message.
STORED = "noterag-question-"


def users_turn(messages: list[BaseMessage]) -> bool:
    """Whether the last message is a user message the caller sent (a chat's turn), not one an
    earlier run stored from its ``question``."""
    if not messages or not isinstance(messages[-1], HumanMessage):
        return False
    return not (messages[-1].id or "").startswith(STORED)


def _answered_before(state: Mapping[str, Any]) -> bool:
    # the same test as ask's: a value left by an earlier run means the thread has answered
    return any(value for key, value in state.items() if key not in _INPUT_KEYS)


def chat_history(messages: list[BaseMessage], role_prefix: Mapping[str, str]) -> str:
    """The conversation as LangChain's ConversationalRetrievalChain lays it out for its
    condense prompt: one ``Human: ...`` or ``Assistant: ...`` line per turn (``role_prefix``)."""
    return "\n".join(
        role_prefix["human" if isinstance(m, HumanMessage) else "ai"] + reply_text(m, sep="\n")
        for m in messages
    )


def ask(state: dict[str, Any], fresh: Mapping[str, Any]) -> dict[str, Any]:
    """The run's question: ``question`` when the caller gave one, else the last human message
    of ``messages`` (a chat UI's input; text parts joined with newlines, surrounding whitespace
    dropped). Earlier turns are ignored: each run answers one self-contained question.

    On a thread that already answered (a checkpointer brings back the last run's state, as in
    a chat UI), the next user message is the next question, and the run starts over: the last
    run's note, counters, trace and seen passages are cleared so they cannot steer it; only
    the conversation is kept. Raises ConfigError when there is no question or it is blank."""
    # Accumulating fields start at 0 or []; any other value was left by an earlier run.
    earlier = [key for key, value in state.items() if key not in _INPUT_KEYS and value]
    messages: list[BaseMessage] = state.get("messages") or []
    follow_up = bool(earlier) and users_turn(messages)
    given = None if follow_up else state.get("question")
    text = _checked(given) if given is not None else _from_chat(messages)
    check_question_size(text)  # whatever the entry point: the CLI, Python, the server, a chat
    update: dict[str, Any] = {"question": text}
    if given is not None and not users_turn(messages):
        # A question given as such is the user's turn of the chat, as a chat's message is. Written
        # as the whole list (an Overwrite: the state's messages all have ids already) because
        # LangGraph's messages stream sends every new message of a node's update, and that
        # stream carries the answer only; it does not look into an Overwrite.
        turn = HumanMessage(text, id=STORED + uuid.uuid4().hex)
        update["messages"] = Overwrite([*messages, turn])
    if not earlier:
        return update
    return update | {key: value for key, value in fresh.items() if key != "question"}


def _checked(given: Any) -> str:
    if not isinstance(given, str):
        raise ConfigError(f"the question must be a string, got {type(given).__name__}")
    if not given.strip():
        raise ConfigError("the question is empty")
    return given


def _from_chat(messages: list[BaseMessage]) -> str:
    human = next((m for m in reversed(messages) if isinstance(m, HumanMessage)), None)
    if human is None:
        raise ConfigError(
            'no question: send {"question": "..."} or {"messages": [...]} with a user message'
            if not messages
            else "no user message in messages: the last user message is the question"
        )
    text = reply_text(human, sep="\n").strip()
    if not text:
        raise ConfigError("the last user message is empty")
    return text
