"""The first step of every graph: the question to answer, from a question or a chat.

A run without a question fails here, before any model call. A question asked on a thread with
earlier turns (a chat's follow-up, "When was she born?") is first rewritten into a standalone
question from the conversation: one model call (stage ``condense_question``, its prompt given
by the graph's builder: ``noterag.prompts.conversation``), skipped on a first turn; the rewrite is sent to
``stream_mode="custom"`` (``{"type": "condensed", ...}``) and kept in the state (``asked``:
the question as the user wrote it; ``question``: the standalone one every step reads).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, get_args, get_origin, get_type_hints

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.runnables import Runnable, RunnableConfig
from langgraph.types import Overwrite

from noterag.context import check_question_size
from noterag.errors import ConfigError
from noterag.prompt import Prompt
from noterag.spec import CONDENSE_ROLE, Deps
from noterag.state import QuestionInput
from noterag.step import Ask, Env, StepGen, StepRunnable, node, reply_text

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
        history = earlier_turns(state)
        if not history:
            return update
        asked = update["question"]
        reply = yield Ask(
            CONDENSE_ROLE,
            condense.format(chat_history=chat_history(history, role_prefix), question=asked),
        )
        standalone = reply.strip() or asked  # an empty rewrite keeps the question as asked
        check_question_size(standalone)
        env.emit({"type": "condensed", "asked": asked, "question": standalone})
        return update | {"question": standalone, "asked": asked}

    question.__doc__ = ask.__doc__
    rewrite = node(question, deps)

    # A first turn (most runs: every eval question) computes only: it skips the step machinery
    # a model call needs and runs on the event loop under ainvoke (see on_loop).
    def first_or_follow_up(state: dict[str, Any], config: RunnableConfig) -> Any:
        return rewrite.invoke(state, config) if earlier_turns(state) else ask(state, fresh)

    async def afirst_or_follow_up(state: dict[str, Any], config: RunnableConfig) -> Any:
        if earlier_turns(state):
            return await rewrite.ainvoke(state, config)
        return ask(state, fresh)

    return StepRunnable(first_or_follow_up, afirst_or_follow_up, name="question")


def earlier_turns(state: Mapping[str, Any]) -> list[BaseMessage]:
    """The conversation before this run's question: the chat messages before the last user
    message, when the question is that message (a run given ``question`` answers it as
    written). Empty on a first turn."""
    messages: list[BaseMessage] = state.get("messages") or []
    if not messages or not isinstance(messages[-1], HumanMessage):
        return []
    if state.get("question") is not None and not _answered_before(state):
        return []
    return [m for m in messages[:-1] if isinstance(m, HumanMessage | AIMessage)]


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
    follow_up = bool(earlier) and bool(messages) and isinstance(messages[-1], HumanMessage)
    given = None if follow_up else state.get("question")
    text = _checked(given) if given is not None else _from_chat(messages)
    check_question_size(text)  # whatever the entry point: the CLI, Python, the server, a chat
    if not earlier:
        return {"question": text}
    return {"question": text} | {key: value for key, value in fresh.items() if key != "question"}


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
