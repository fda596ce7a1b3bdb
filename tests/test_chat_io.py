"""Chat-shaped input and output, for every method: ``{"messages": [...]}`` as LangGraph Studio's
chat view, Agent Chat UI and assistant-ui send it gives the same run as ``{"question": ...}``,
the answer comes back appended to ``messages``, and the messages stream carries it once."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import pytest
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGenerationChunk
from langgraph.checkpoint.memory import InMemorySaver
from test_resp import RecordingRetriever

import noterag
from noterag.base.errors import ConfigError
from noterag.registry.methods import context_schema
from scripted import QUESTION, VELMORA_ROWS, ScriptedModel, passages, velmora_script

CORPUS = passages(*VELMORA_ROWS)
ANSWER = "Aurelio Fenwick was born in 1871"


def context(method: str) -> dict[str, Any]:
    """A short run: one loop iteration where the method has a loop."""
    short = {"top_k": 2}
    if "max_steps" in {f.name for f in fields(context_schema(method))}:
        short["max_steps"] = 1
    return short


def build(method: str, model: ScriptedModel, retriever: RecordingRetriever | None = None) -> Any:
    return noterag.build_graph(
        method, model=model, retriever=retriever or RecordingRetriever(passages=CORPUS)
    )


def script() -> dict[str, Any]:
    return velmora_script(answer=ANSWER)


def scripted(method: str, kind: type[ScriptedModel] = ScriptedModel) -> ScriptedModel:
    """Answers ANSWER at every stage it has no script for, so that a method whose answer is not
    the "answer" stage's reply (SuRe's winning candidate, ...) answers ANSWER too; shaped as
    the method's declaration says a model must reply (MethodSpec.stand_in)."""
    return kind.for_method(method, script=script(), default=ANSWER)


def answers_by_a_model_call(method: str) -> bool:
    return "answer" in noterag.METHODS[method].roles


def run(method: str, graph_input: dict[str, Any]) -> tuple[dict[str, Any], ScriptedModel]:
    model = scripted(method)
    return build(method, model).invoke(graph_input, context=context(method)), model


CHAT_FORMS = {
    "openai-dict": {"messages": [{"role": "user", "content": QUESTION}]},
    "langchain-dict": {"messages": [{"type": "human", "content": QUESTION}]},
    "message-object": {"messages": [HumanMessage(QUESTION)]},
    "content-parts": {
        "messages": [{"role": "user", "content": [{"type": "text", "text": QUESTION}]}]
    },
    "question-wins": {
        "question": QUESTION,
        "messages": [{"role": "user", "content": "Who painted the bridge?"}],
    },
}


@pytest.mark.parametrize("form", CHAT_FORMS)
@pytest.mark.parametrize("method", noterag.METHODS)
def test_chat_input_runs_as_the_question(method: str, form: str):
    expected, by_question = run(method, {"question": QUESTION})
    out, by_chat = run(method, CHAT_FORMS[form])
    # the same calls; in any order where the method sends several at once (REPLUG's passes)
    assert sorted(by_chat.calls) == sorted(by_question.calls) and by_chat.calls
    assert out["question"] == QUESTION
    assert out["answer"] == expected["answer"] == ANSWER
    assert out["passage_ids"] == expected.get("passage_ids", [])
    last = out["messages"][-1]
    assert isinstance(last, AIMessage) and last.content == ANSWER
    assert [type(m) for m in out["messages"]] == [HumanMessage] * len(
        CHAT_FORMS[form]["messages"]
    ) + [AIMessage]


@pytest.mark.parametrize("method", noterag.METHODS)
def test_question_input_gets_the_answer_as_a_message_too(method: str):
    out, _ = run(method, {"question": QUESTION})
    # the question is the user's turn of the chat, as a chat's message is (issue 32)
    assert [(type(m), m.content) for m in out["messages"]] == [
        (HumanMessage, QUESTION),
        (AIMessage, ANSWER),
    ]


def without_calls(trace: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in entry.items() if k != "llm_calls"} for entry in trace]


def condense_prompt(history: str, question: str) -> str:
    """LangChain's CONDENSE_QUESTION_PROMPT (noterag.prompts.conversation), written out."""
    return (
        "Given the following conversation and a follow up question, rephrase the follow up "
        "question to be a standalone question, in its original language.\n\n"
        f"Chat History:\n{history}\nFollow Up Input: {question}\nStandalone question:"
    )


@pytest.mark.parametrize("method", noterag.METHODS)
def test_earlier_turns_are_read_once_to_rewrite_the_question(method: str):
    """Earlier turns reach one call only, the rewrite into a standalone question (issue 23);
    a rewrite that keeps the question gives the run a question alone gives."""
    _, alone = run(method, {"question": QUESTION})
    history = [
        SystemMessage("You are a helpful assistant."),
        {"role": "user", "content": "Who designed the Pellin Bridge?"},
        {"role": "assistant", "content": "Lise Ambrath."},
        {"role": "user", "content": QUESTION},
    ]
    chat = scripted(method)
    chat.script["condense_question"] = QUESTION  # already standalone
    out = build(method, chat).invoke({"messages": history}, context=context(method))
    assert chat.calls[0] == (
        "condense_question",
        condense_prompt(
            "Human: Who designed the Pellin Bridge?\nAssistant: Lise Ambrath.", QUESTION
        ),
    )
    # the same calls (concurrent ones, such as Self-RAG's generations, in any order)
    assert sorted(chat.calls[1:]) == sorted(alone.calls)
    assert [m.content for m in out["messages"]] == [
        "You are a helpful assistant.",
        "Who designed the Pellin Bridge?",
        "Lise Ambrath.",
        QUESTION,
        ANSWER,
    ]


def test_text_parts_are_joined_and_other_parts_skipped():
    content = [
        {"type": "text", "text": "  In which year was the architect"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        {"type": "text", "text": "of the Velmora Bridge born?\n"},
    ]
    out, model = run("no-retrieval", {"messages": [{"role": "user", "content": content}]})
    assert out["question"] == "In which year was the architect\nof the Velmora Bridge born?"
    (prompt,) = model.prompts_for("answer")
    assert out["question"] in prompt


BAD_INPUTS = {
    "nothing": ({}, "no question"),
    "empty-question": ({"question": ""}, "the question is empty"),
    "blank-question": ({"question": "  \n "}, "the question is empty"),
    "blank-question-wins": (
        {"question": " ", "messages": [{"role": "user", "content": QUESTION}]},
        "the question is empty",
    ),
    "no-messages": ({"messages": []}, "no question"),
    "no-human-message": (
        {
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "assistant", "content": "Hi!"},
            ]
        },
        "no user message",
    ),
    "blank-human-message": (
        {"messages": [{"role": "user", "content": "   "}]},
        "the last user message is empty",
    ),
    "no-text-part": (
        {
            "messages": [
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}
            ]
        },
        "the last user message is empty",
    ),
}


@pytest.mark.parametrize("bad", BAD_INPUTS)
@pytest.mark.parametrize("method", noterag.METHODS)
async def test_no_question_fails_before_any_search_or_call(method: str, bad: str):
    graph_input, message = BAD_INPUTS[bad]
    for call in ("invoke", "ainvoke"):
        model, retriever = (
            ScriptedModel.for_method(method, script=velmora_script()),
            RecordingRetriever(passages=CORPUS),
        )
        graph = build(method, model, retriever)
        with pytest.raises(ConfigError, match=message) as raised:
            if call == "invoke":
                graph.invoke(graph_input, context=context(method))
            else:
                await graph.ainvoke(graph_input, context=context(method))
        assert "\n" not in str(raised.value)
        assert model.calls == [] and retriever.queries == []


@pytest.mark.parametrize("method", noterag.METHODS)
async def test_the_next_user_message_on_a_thread_starts_a_fresh_run(method: str):
    """A checkpointed thread (the LangGraph server's, a chat UI's) brings back the last run's
    note and counters; the next user message is rewritten from the conversation (one call),
    then answered from scratch, exactly as on a new thread, and the conversation keeps both
    turns."""
    follow_up = "Where did Aurelio Fenwick study?"

    # Without a thread: the first question, then the follow-up on its own. (The scripted
    # model's reply lists go on where the first run left them, so it answers the same.)
    expected_model, expected_retriever = (
        scripted(method),
        RecordingRetriever(passages=CORPUS),
    )
    alone = build(method, expected_model, expected_retriever)
    alone.invoke({"question": QUESTION}, context=context(method))
    before = len(expected_model.calls), len(expected_retriever.queries)
    expected = alone.invoke({"question": follow_up}, context=context(method))

    for call in ("invoke", "ainvoke"):
        model, retriever = (
            scripted(method),
            RecordingRetriever(passages=CORPUS),
        )
        model.script["condense_question"] = follow_up  # already standalone
        graph = build(method, model, retriever).copy(update={"checkpointer": InMemorySaver()})
        thread = {"configurable": {"thread_id": "chat"}}
        turn = {"messages": [{"role": "user", "content": QUESTION}]}
        first = graph.invoke(turn, thread, context=context(method))
        assert first["answer"] == ANSWER
        calls, searches = len(model.calls), len(retriever.queries)

        turn = {"messages": [{"role": "user", "content": follow_up}]}
        if call == "invoke":
            second = graph.invoke(turn, thread, context=context(method))
        else:
            second = await graph.ainvoke(turn, thread, context=context(method))

        assert second["question"] == second["asked"] == follow_up
        # the rewrite, then the same calls, prompts and searches as a fresh run of the follow-up
        assert model.calls[calls] == (
            "condense_question",
            condense_prompt(f"Human: {QUESTION}\nAssistant: {ANSWER}", follow_up),
        )
        assert model.calls[calls + 1 :] == expected_model.calls[before[0] :]
        assert retriever.queries[searches:] == expected_retriever.queries[before[1] :]
        for key, value in expected.items():
            if key in ("llm_calls", "prompt_tokens", "completion_tokens"):
                assert second[key] > value, (method, key)  # the rewrite's cost on top
            elif key == "trace":  # Amber's first entry counts the rewrite among its calls
                assert without_calls(second[key]) == without_calls(value), method
            elif key != "messages":
                assert second[key] == value, (method, key)
        assert second["llm_calls"] == expected["llm_calls"] + 1
        roles = [message.type for message in second["messages"]]
        assert roles == ["human", "ai", "human", "ai"]
        assert second["messages"][-1].content == ANSWER


class StreamingScripted(ScriptedModel):
    """Streams its reply word by word, as a real endpoint streams tokens."""

    def _stream(self, messages, stop=None, run_manager=None, **kwargs):
        # langchain-core calls _stream without the run manager that carries the stage; only
        # the answer streams.
        prompt = str(messages[-1].content)
        with self._lock:
            self._calls.append(("answer", prompt))
        text = self._reply("answer", prompt)
        for i, word in enumerate(text.split(" ")):
            yield ChatGenerationChunk(
                message=AIMessageChunk(content=word if i == 0 else " " + word)
            )


def _check_answer_streamed_once(method: str, events: list[tuple[str, Any]]) -> None:
    messages = [chunk for mode, chunk in events if mode == "messages"]
    final = [chunk for mode, chunk in events if mode == "values"][-1]
    assert {meta["langgraph_node"] for _, meta in messages} == {"answer"}, method
    assert "".join(str(message.content) for message, _ in messages) == final["answer"] == ANSWER
    # the message in state is the streamed one (same id), which is why it is not sent again
    assert {message.id for message, _ in messages} == {final["messages"][-1].id}


CHAT = {"messages": [{"role": "user", "content": QUESTION}]}


@pytest.mark.parametrize("streams", [False, True], ids=["whole-reply", "token-stream"])
@pytest.mark.parametrize("method", noterag.METHODS)
def test_messages_stream_carries_the_answer_once(method: str, streams: bool):
    model = scripted(method, StreamingScripted if streams else ScriptedModel)
    graph = build(method, model)
    events = list(graph.stream(CHAT, context=context(method), stream_mode=["messages", "values"]))
    _check_answer_streamed_once(method, events)
    if streams and answers_by_a_model_call(method):  # else it arrives whole, as chosen
        tokens = [
            chunk[0].content for mode, chunk in events if mode == "messages" and chunk[0].content
        ]
        assert tokens == ["Aurelio", " Fenwick", " was", " born", " in", " 1871"]


@pytest.mark.parametrize("method", noterag.METHODS)
async def test_async_messages_stream_carries_the_answer_once(method: str):
    graph = build(method, scripted(method, StreamingScripted))
    events = [
        event
        async for event in graph.astream(
            CHAT, context=context(method), stream_mode=["messages", "values"]
        )
    ]
    _check_answer_streamed_once(method, events)


@pytest.mark.parametrize("method", noterag.METHODS)
def test_schemas_offer_the_chat_keys(method: str):
    """Studio's chat view needs a ``messages`` list in the input schema; neither key is
    required, since either one will do."""
    graph = build(method, ScriptedModel.for_method(method))
    schema = graph.get_input_jsonschema()
    assert set(schema["properties"]) == {"question", "messages", "task"}
    assert "required" not in schema
    assert schema["properties"]["messages"]["type"] == "array"
    assert {"answer", "messages"} <= set(graph.get_output_jsonschema()["properties"])
