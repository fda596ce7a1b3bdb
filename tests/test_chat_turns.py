"""Chat turns and the settings a run refuses (issue 32 points 5 and 6, issue 33 defect 4).

* ``{"question": ...}`` on a thread is a chat turn like ``{"messages": [...]}``: the user's
  message is stored, a follow-up is rewritten from the history (one call, a ``condensed``
  event), and only the answer reaches ``stream_mode="messages"``.
* The rewrite reads a capped history (``HISTORY_MESSAGES``, ``HISTORY_CHARS``); a rewrite that
  comes back empty or off-topic falls back to the user's words; one longer than a question may
  be is an error naming the rewrite.
* Unknown or ill-typed ``configurable`` settings are errors in-process; ``human_review`` without
  a checkpointer, or ``note`` where the answer reads no note, is refused at the first step,
  once per run; ``retriever=42`` is one line.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import ConfigurableField
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from typing_extensions import TypedDict

import noterag
import noterag.core.question as question_module
from noterag.base.errors import ConfigError
from noterag.core.context import MAX_QUESTION_CHARS
from noterag.core.question import HISTORY_CHARS, HISTORY_MESSAGES, on_topic
from noterag.core.spec import reads_note
from noterag.prompts.conversation import CONDENSE, ROLE_PREFIX
from noterag.registry.methods import note_methods
from scripted import (
    QUESTION,
    VELMORA_ROWS,
    KeywordRetriever,
    RecordingRetriever,
    ScriptedModel,
    passages,
    velmora_script,
)

CORPUS = passages(*VELMORA_ROWS)
FOLLOW_UP = "When was he born?"  # 17 characters, as in issue 33's finding
REWRITTEN = "When was Aurelio Fenwick born?"


def graph_of(model: Any, retriever: Any = None, method: str = "adaptive-note", **kw: Any) -> Any:
    return noterag.build_graph(
        method, model=model, retriever=retriever or KeywordRetriever(passages=CORPUS), **kw
    )


def thread(name: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": name}}


def turns(messages: list[Any]) -> list[tuple[type, str]]:
    return [(type(m), m.content) for m in messages]


def condense_prompt(history: str, question: str) -> str:
    """LangChain's CONDENSE_QUESTION_PROMPT, written out so a change in noterag's copy shows."""
    return (
        "Given the following conversation and a follow up question, rephrase the follow up "
        "question to be a standalone question, in its original language.\n\n"
        f"Chat History:\n{history}\nFollow Up Input: {question}\nStandalone question:"
    )


# --------------------------------------------------------------------------- chat turns


def test_question_turns_on_a_thread_are_a_chat() -> None:
    model = ScriptedModel(script=velmora_script(condense_question=REWRITTEN))
    retriever = RecordingRetriever(passages=CORPUS)
    graph = graph_of(model, retriever, checkpointer=InMemorySaver())
    first = graph.invoke({"question": QUESTION}, thread("q"))
    assert turns(first["messages"]) == [(HumanMessage, QUESTION), (AIMessage, "1871")]
    assert "condense_question" not in model.stages  # a first turn is not rewritten
    searched, called = len(retriever.queries), len(model.stages)

    events, tokens = [], []
    for mode, chunk in graph.stream(
        {"question": FOLLOW_UP}, thread("q"), stream_mode=["custom", "messages"]
    ):
        (events if mode == "custom" else tokens).append(chunk)
    # one call rewrites it, from the conversation the thread holds, before any search
    assert model.stages[called] == "condense_question"
    assert model.prompts_for("condense_question") == [
        condense_prompt(f"Human: {QUESTION}\nAssistant: 1871", FOLLOW_UP)
    ]
    assert events[0] == {"type": "condensed", "asked": FOLLOW_UP, "question": REWRITTEN}
    assert retriever.queries[searched] == (REWRITTEN, 5)
    # the user's message is stored, not streamed: the messages stream carries the answer only
    assert {meta["langgraph_node"] for _, meta in tokens} == {"answer"}
    state = graph.get_state(thread("q")).values
    assert turns(state["messages"]) == [
        (HumanMessage, QUESTION),
        (AIMessage, "1871"),
        (HumanMessage, FOLLOW_UP),
        (AIMessage, "1871"),
    ]
    assert (state["question"], state["asked"]) == (REWRITTEN, FOLLOW_UP)
    assert state["llm_calls"] == len(model.stages) - called  # the rewrite counts in the turn


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ({"messages": [HumanMessage(QUESTION)]}, {"question": FOLLOW_UP}),
        ({"question": QUESTION}, {"messages": [{"role": "user", "content": FOLLOW_UP}]}),
    ],
)
def test_question_and_messages_turns_mix_on_one_thread(
    first: dict[str, Any], second: dict[str, Any]
) -> None:
    model = ScriptedModel(script=velmora_script(condense_question=REWRITTEN))
    graph = graph_of(model, checkpointer=InMemorySaver())
    graph.invoke(first, thread("m"))
    out = graph.invoke(second, thread("m"))
    assert turns(out["messages"]) == [
        (HumanMessage, QUESTION),
        (AIMessage, "1871"),
        (HumanMessage, FOLLOW_UP),
        (AIMessage, "1871"),
    ]
    assert model.prompts_for("condense_question") == [
        condense_prompt(f"Human: {QUESTION}\nAssistant: 1871", FOLLOW_UP)
    ]
    assert (out["question"], out["asked"]) == (REWRITTEN, FOLLOW_UP)


def test_the_cli_form_stores_one_user_message_per_turn() -> None:
    """``noterag ask --thread`` sends both the question and its message: stored once."""
    model = ScriptedModel(script=velmora_script(condense_question=REWRITTEN))
    graph = graph_of(model, checkpointer=InMemorySaver())
    for text in (QUESTION, FOLLOW_UP):
        out = graph.invoke({"question": text, "messages": [HumanMessage(text)]}, thread("c"))
    assert [type(m) for m in out["messages"]] == [HumanMessage, AIMessage] * 2
    assert out["question"] == REWRITTEN


def test_after_a_run_that_stopped_before_its_answer_the_next_question_is_asked() -> None:
    """The stopped run's user message is the thread's last; the next ``question`` is its own,
    and not a follow-up of the stopped one (issue 42, defect 13: the history holds finished
    turns only; before, the stopped question was read as the conversation and the next
    question rewritten against it)."""
    failing = [True]

    def answer(prompt: str) -> str:
        if failing.pop() if failing else False:
            raise RuntimeError("the endpoint went away")
        return "1871"

    model = ScriptedModel(script=velmora_script(answer=answer, condense_question=REWRITTEN))
    graph = graph_of(model, checkpointer=InMemorySaver())
    with pytest.raises(RuntimeError):
        graph.invoke({"question": "Who designed the Velmora Bridge?"}, thread("s"))
    stopped = graph.get_state(thread("s")).values["messages"]
    assert turns(stopped) == [(HumanMessage, "Who designed the Velmora Bridge?")]
    out = graph.invoke({"question": QUESTION}, thread("s"))
    assert out["question"] == QUESTION and "condense_question" not in model.stages
    assert turns(out["messages"]) == [
        (HumanMessage, "Who designed the Velmora Bridge?"),
        (HumanMessage, QUESTION),
        (AIMessage, "1871"),
    ]


def test_a_follow_up_after_a_stopped_turn_reads_the_finished_turns_only() -> None:
    """A finished turn, a turn killed before its answer, then a follow-up: the rewrite reads the
    finished turn, never the stopped question."""
    stopped = "Which company manufactured the Corvalle typewriter?"
    answers = iter(["Aurelio Fenwick", RuntimeError("killed"), "1871"])

    def answer(prompt: str) -> str:
        reply = next(answers)
        if isinstance(reply, Exception):
            raise reply
        return reply

    model = ScriptedModel(script=velmora_script(answer=answer, condense_question=REWRITTEN))
    graph = graph_of(model, checkpointer=InMemorySaver())
    graph.invoke({"question": "Who designed the Velmora Bridge?"}, thread("k"))
    with pytest.raises(RuntimeError):
        graph.invoke({"question": stopped}, thread("k"))
    out = graph.invoke({"question": FOLLOW_UP}, thread("k"))
    assert out["question"] == REWRITTEN
    prompt = model.prompts_for("condense_question")[
        -1
    ]  # the follow-up's (the stopped turn had one)
    assert "Who designed the Velmora Bridge?" in prompt and stopped not in prompt


def test_a_stateless_question_with_earlier_turns_is_rewritten() -> None:
    model = ScriptedModel(script=velmora_script(condense_question=REWRITTEN))
    out = graph_of(model).invoke(
        {"question": FOLLOW_UP, "messages": [HumanMessage(QUESTION), AIMessage("1871")]}
    )
    assert model.stages[0] == "condense_question"
    assert out["question"] == REWRITTEN
    assert turns(out["messages"])[2:] == [(HumanMessage, FOLLOW_UP), (AIMessage, "1871")]


# --------------------------------------------------------------------------- fallbacks


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        ("  \n", "empty"),
        ("I'm sorry, I cannot help with that.", "off_topic"),
        ("What is the capital of Peru?", "off_topic"),
    ],
)
def test_an_empty_or_off_topic_rewrite_falls_back_to_the_users_words(reply: str, why: str) -> None:
    model = ScriptedModel(script=velmora_script(condense_question=reply))
    retriever = RecordingRetriever(passages=CORPUS)
    graph = graph_of(model, retriever, checkpointer=InMemorySaver())
    graph.invoke({"question": QUESTION}, thread("f"))
    searched = len(retriever.queries)
    events = [
        chunk
        for mode, chunk in graph.stream(
            {"question": FOLLOW_UP}, thread("f"), stream_mode=["custom"]
        )
        if mode == "custom" and chunk["type"] == "condensed"
    ]
    assert events == [
        {"type": "condensed", "asked": FOLLOW_UP, "question": FOLLOW_UP, "fallback": why}
    ]
    state = graph.get_state(thread("f")).values
    assert state["question"] == FOLLOW_UP == retriever.queries[searched][0]
    assert state["fallbacks"]["condense_question"] == 1


def test_what_counts_as_on_topic() -> None:
    history = [HumanMessage(QUESTION), AIMessage("Aurelio Fenwick, in 1871.")]
    # the names a rewrite adds come from the history; a stem meets its other forms
    assert on_topic(REWRITTEN, FOLLOW_UP, history)
    assert on_topic("Who painted it?", "And the painter?", [])
    assert on_topic("Wann wurde Aurelio Fenwick geboren?", "Wann wurde er geboren?", history)
    assert on_topic("韦尔莫拉桥的建筑师是谁？", "建筑师是谁？", [])
    # function words and single letters are no topic
    assert not on_topic("What is it that she's about?", "When was he born?", history)
    assert not on_topic("I'm sorry, I can't help with that.", FOLLOW_UP, history)
    assert not on_topic("", FOLLOW_UP, history)


# --------------------------------------------------------------------------- the history cap


def test_the_rewrite_reads_a_capped_history() -> None:
    """Issue 33: 110 messages of 7,500 characters made a 207k-token rewrite."""
    model = ScriptedModel(script=velmora_script(condense_question=REWRITTEN))
    history = [
        (HumanMessage if i % 2 == 0 else AIMessage)((f"turn{i:03d} " + "Velmora " * 937)[:7_500])
        for i in range(110)
    ]
    assert {len(m.content) for m in history} == {7_500}
    graph_of(model).invoke({"messages": [*history, HumanMessage(FOLLOW_UP)]})
    [prompt] = model.prompts_for("condense_question")
    template = len(CONDENSE.format(chat_history="", question=FOLLOW_UP))
    prefixes = HISTORY_MESSAGES * (len(ROLE_PREFIX["ai"]) + 1)
    assert len(prompt) <= template + HISTORY_CHARS + prefixes
    assert len(prompt) < 20_000  # was over 800,000 characters
    # the newest turns are read, the oldest are not; the one that did not fit whole is cut
    assert "turn109 " in prompt and "turn108 " in prompt and "turn000 " not in prompt
    lines = prompt.split("Chat History:\n")[1].split("\nFollow Up Input:")[0].splitlines()
    assert len(lines) <= HISTORY_MESSAGES
    assert lines[0].endswith(" [...]") and lines[-1].startswith("Assistant: turn109 ")


def test_a_short_history_is_read_whole() -> None:
    model = ScriptedModel(script=velmora_script(condense_question=REWRITTEN))
    history = [HumanMessage(f"q{i}") if i % 2 == 0 else AIMessage(f"a{i}") for i in range(8)]
    graph_of(model).invoke({"messages": [*history, HumanMessage(FOLLOW_UP)]})
    [prompt] = model.prompts_for("condense_question")
    assert all(f"{m.content}\n" in prompt for m in history)


def test_a_rewrite_over_the_question_limit_names_the_rewrite() -> None:
    model = ScriptedModel(script=velmora_script(condense_question="Velmora " * 1_200))
    graph = graph_of(model, checkpointer=InMemorySaver())
    graph.invoke({"question": QUESTION}, thread("long"))
    with pytest.raises(ConfigError) as raised:
        graph.invoke({"question": FOLLOW_UP}, thread("long"))
    message = str(raised.value)
    assert "rewrite of the follow-up" in message and "condense_question" in message
    assert "9,599 characters" in message and f"{MAX_QUESTION_CHARS:,}" in message
    assert "the question as asked has 17" in message
    assert "\n" not in message


# --------------------------------------------------------------------------- settings


def test_unknown_configurable_keys_are_refused_in_process() -> None:
    model = ScriptedModel(script=velmora_script())
    graph = graph_of(model)
    with pytest.raises(ConfigError, match=r"configurable key\(s\) 'bogus': no setting"):
        graph.invoke({"question": QUESTION}, {"configurable": {"bogus": 1}})
    with pytest.raises(ConfigError, match="'max_stpes' is no setting.*did you mean max_steps"):
        graph.invoke({"question": QUESTION}, {"configurable": {"max_stpes": 1}})
    assert model.calls == []
    # LangGraph's keys, HTTP headers the server copies in, and dunder keys pass
    config = {"thread_id": "t", "x-request-id": "r", "user-agent": "ua", "__mine": 1}
    assert graph.invoke({"question": QUESTION}, {"configurable": config})["answer"] == "1871"


def test_ill_typed_configurable_settings_are_refused_even_under_a_context() -> None:
    model = ScriptedModel(script=velmora_script())
    graph = graph_of(model)
    with pytest.raises(ConfigError, match="max_steps must be an integer from 0 to 20, not 'x'"):
        graph.invoke(
            {"question": QUESTION}, {"configurable": {"max_steps": "x"}}, context={"top_k": 3}
        )
    assert model.calls == []


def test_configurable_settings_lie_beneath_a_context_and_reach_stop_rules() -> None:
    model = ScriptedModel(script=velmora_script())
    out = graph_of(model, method="deepnote").invoke(
        {"question": QUESTION}, {"configurable": {"max_steps": 1}}, context={"top_k": 3}
    )
    assert out["stop_reason"] == "1 step(s) (max_steps = 1)"  # the context's dict set top_k only
    # a stop rule of its own step (stop_check) reads the configurable settings too
    for steps in (1, 3):
        model = ScriptedModel.for_method("iter-retgen")
        graph = graph_of(model, method="iter-retgen")
        out = graph.invoke({"question": QUESTION}, {"configurable": {"max_steps": steps}})
        assert out["stop_reason"] == f"{steps} iteration(s) (max_steps = T = {steps})"
        assert model.stages.count("generate") == steps - 1  # the T-th generation answers


def test_a_models_configurable_keys_are_its_own() -> None:
    model = ScriptedModel(script=velmora_script())
    chooser = model.configurable_alternatives(ConfigurableField(id="llm"), default_key="s")
    graph = graph_of(chooser)
    assert graph.invoke({"question": QUESTION}, {"configurable": {"llm": "s"}})["answer"] == "1871"
    with pytest.raises(ConfigError, match="'llm'"):
        graph_of(ScriptedModel(script=velmora_script())).invoke(
            {"question": QUESTION}, {"configurable": {"llm": "s"}}
        )


class Outer(TypedDict, total=False):
    question: str
    answer: str


def test_as_a_subgraph_only_a_misspelt_setting_is_refused() -> None:
    """An app's own graph shares its configurable with the graphs it calls."""
    model = ScriptedModel(script=velmora_script())
    inner = graph_of(model)

    def ask(state: Outer) -> Outer:
        return {"answer": inner.invoke({"question": state["question"]})["answer"]}

    outer = StateGraph(Outer)
    outer.add_node("ask", ask)
    outer.add_edge(START, "ask")
    app = outer.compile()
    assert app.invoke({"question": QUESTION}, {"configurable": {"app_user": "u"}}) == {
        "question": QUESTION,
        "answer": "1871",
    }
    with pytest.raises(ConfigError, match="did you mean max_steps"):
        app.invoke({"question": QUESTION}, {"configurable": {"max_step": 1}})


def test_human_review_without_a_checkpointer_is_refused_before_any_call() -> None:
    model = ScriptedModel(script=velmora_script())
    with pytest.raises(ConfigError) as raised:
        graph_of(model).invoke({"question": QUESTION}, context={"human_review": "note"})
    assert "needs a checkpointer" in str(raised.value)
    assert "build_graph(..., checkpointer=InMemorySaver())" in str(raised.value)
    assert model.calls == []


@pytest.mark.parametrize("method", noterag.METHODS)
def test_a_note_review_needs_a_note_to_review(method: str) -> None:
    spec = noterag.METHODS[method]
    model = ScriptedModel.for_method(method)
    graph = graph_of(model, method=method, checkpointer=InMemorySaver())
    context = {"human_review": "note"}
    if reads_note(spec.prompts["paper"], "multihop"):
        out = graph.invoke({"question": QUESTION}, thread(method), context=context)
        assert out.get("__interrupt__"), method  # paused at the note
        return
    for setting in ("note", "both"):
        with pytest.raises(ConfigError) as raised:
            graph.invoke({"question": QUESTION}, thread(method), context={"human_review": setting})
        message = str(raised.value)
        assert f"{method}'s answer" in message and "none or answer" in message
        # the engine cannot import the registry (the layers): the message names the registry's
        # list, which holds the methods that have a note, read from their declarations
        assert "noterag.registry.methods.note_methods()" in message
    assert "deepnote" in note_methods()
    assert model.calls == []
    # the answer's review still works there
    out = graph.invoke(
        {"question": QUESTION}, thread(method + "-a"), context={"human_review": "answer"}
    )
    assert out.get("__interrupt__"), method


def test_the_run_checks_are_made_once_per_run(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[str] = []
    check = question_module.check_review

    def counted(method: str, *args: Any, **kwargs: Any) -> None:
        made.append(method)
        check(method, *args, **kwargs)

    monkeypatch.setattr(question_module, "check_review", counted)
    model = ScriptedModel(script=velmora_script())
    graph = graph_of(model, method="deepnote", checkpointer=InMemorySaver())
    graph.invoke({"question": QUESTION}, thread("once"), context={"human_review": "answer"})
    assert made == ["deepnote"] and len(model.calls) > 3


@pytest.mark.parametrize("retriever", [42, 4.2, ["bm25:x"]])
def test_a_retriever_of_the_wrong_type_is_one_line(retriever: Any) -> None:
    with pytest.raises(ConfigError) as raised:
        noterag.build_graph("vanilla", model=ScriptedModel(), retriever=retriever)
    message = str(raised.value)
    assert message.startswith("retriever= takes a BaseRetriever") and "\n" not in message
    assert type(retriever).__name__ in message
    from noterag.retrievers import load_retriever

    with pytest.raises(ConfigError, match="a retriever spec is a string or a path"):
        load_retriever(retriever)


# --------------------------------------------------------------------------- the server


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    from langgraph_sdk import get_sync_client
    from test_threads import WAIT, HoldingModel, start

    from devserver import serve

    class Rewriting(HoldingModel):  # type: ignore[misc]
        """Rewrites a follow-up into REWRITTEN (the simulated endpoint names no such stage)."""

        def reply(self, prompt: str) -> tuple[str, str]:
            if prompt.rstrip().endswith("Standalone question:"):
                return "answer", REWRITTEN
            return super().reply(prompt)

    model = Rewriting(hold="none")
    sim, sim_url = start(model)
    env = {"NOTERAG_MODEL": f"openai:sim@{sim_url}", "NOTERAG_SKIP_MODEL_CHECK": "1"}
    server = serve(tmp_path_factory, env)
    try:
        yield get_sync_client(url=next(server), api_key=None, timeout=WAIT), model
    finally:
        server.close()
        sim.shutdown()


@pytest.mark.server
def test_question_turns_are_a_chat_over_the_sdk(served: tuple[Any, Any]) -> None:
    client, model = served
    thread_id = client.threads.create()["thread_id"]
    context = {"max_steps": 1}
    client.runs.wait(thread_id, "deepnote", input={"question": QUESTION}, context=context)
    parts = list(
        client.runs.stream(
            thread_id,
            "deepnote",
            input={"question": FOLLOW_UP},
            context=context,
            stream_mode=["custom", "messages-tuple"],
        )
    )
    condensed = [p.data for p in parts if p.event == "custom" and p.data["type"] == "condensed"]
    assert condensed == [{"type": "condensed", "asked": FOLLOW_UP, "question": REWRITTEN}]
    # one rewrite, from the thread's first turn (the endpoint's answer to it is its own)
    [rewrite] = [p for _, p in model.prompts if p.rstrip().endswith("Standalone question:")]
    assert rewrite.startswith(condense_prompt(f"Human: {QUESTION}\nAssistant: ", "")[:-60])
    assert rewrite.endswith(f"\nFollow Up Input: {FOLLOW_UP}\nStandalone question:")
    streamed = [p.data for p in parts if p.event == "messages"]
    assert {meta["langgraph_node"] for _, meta in streamed} <= {"answer"}
    assert all(message["type"] != "human" for message, _ in streamed)
    values = client.threads.get_state(thread_id)["values"]
    assert [m["type"] for m in values["messages"]] == ["human", "ai", "human", "ai"]
    assert [values["messages"][i]["content"] for i in (0, 2)] == [QUESTION, FOLLOW_UP]
    assert (values["question"], values["asked"]) == (REWRITTEN, FOLLOW_UP)


@pytest.mark.server
def test_a_note_review_without_a_note_is_refused_by_the_server(served: tuple[Any, Any]) -> None:
    client, model = served
    calls = len(model.prompts)
    run = {
        "assistant_id": "vanilla",
        "input": {"question": QUESTION},
        "context": {"human_review": "note"},
    }
    refused = client.http.client.post("/runs/wait", json=run)
    assert refused.status_code == 422, refused.text
    assert refused.json()["detail"].startswith("human_review=note: vanilla's answer")
    assert len(model.prompts) == calls
