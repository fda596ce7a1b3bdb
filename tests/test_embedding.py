"""The graphs inside a LangGraph app (issue 23): a checkpointer, store and cache at build time;
the "interrupt before answer, edit the state, continue" flow; human review through interrupt()
(tests/test_hitl_review.py); follow-up questions rewritten from the conversation; any Runnable as
the model or the retriever; an LCEL form that ends in the answer's text."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.documents import Document
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.runnables import ConfigurableField, Runnable, RunnableLambda
from langgraph.cache.memory import InMemoryCache
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

import noterag
from noterag.base.errors import ConfigError
from scripted import (
    QUESTION,
    VELMORA_ROWS,
    KeywordRetriever,
    RecordingRetriever,
    ScriptedModel,
    generator_prompt,
    passages,
    velmora_script,
)

CORPUS = passages(*VELMORA_ROWS)
FIRST_NOTE = velmora_script()["init_note"]
UPDATED_NOTE = velmora_script()["accumulate"]


def graph_with(model: Any, retriever: Any = None, method: str = "adaptive-note", **kw: Any) -> Any:
    return noterag.build_graph(
        method,
        model=model,
        retriever=retriever or KeywordRetriever(passages=CORPUS),
        checkpointer=kw.pop("checkpointer", InMemorySaver()),
        **kw,
    )


def thread(name: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": name}}


# --------------------------------------------------------------------------- build arguments


def test_every_method_takes_a_checkpointer_store_and_cache() -> None:
    saver, store, cache = InMemorySaver(), InMemoryStore(), InMemoryCache()
    for method in noterag.METHODS:
        graph = noterag.build_graph(
            method,
            model=ScriptedModel.for_method(method),
            retriever=KeywordRetriever(passages=CORPUS),
            checkpointer=saver,
            store=store,
            cache=cache,
        )
        assert (graph.checkpointer, graph.store, graph.cache) == (saver, store, cache), method


def test_a_checkpointed_thread_keeps_the_run() -> None:
    graph = graph_with(ScriptedModel(script=velmora_script()))
    out = graph.invoke({"question": QUESTION}, thread("t"))
    assert out["answer"] == "1871"
    assert graph.get_state(thread("t")).values["answer"] == "1871"
    assert graph.get_state(thread("t")).next == ()


def test_without_arguments_the_library_builds_no_checkpointer() -> None:
    graph = noterag.build_graph(
        "deepnote", model=ScriptedModel(), retriever=KeywordRetriever(passages=CORPUS)
    )
    assert (graph.checkpointer, graph.store, graph.cache) == (None, None, None)


# --------------------------------------------------------------------------- edit and continue


@pytest.mark.parametrize("method", ["adaptive-note", "deepnote"])
def test_interrupt_before_answer_then_update_state_answers_from_the_edited_note(
    method: str,
) -> None:
    model = ScriptedModel(script=velmora_script())
    graph = graph_with(model, method=method)
    graph.invoke({"question": QUESTION}, thread("e"), interrupt_before=["answer"])
    assert graph.get_state(thread("e")).next == ("answer",)
    graph.update_state(thread("e"), {"best_note": "EDITED NOTE"})
    assert graph.get_state(thread("e")).next == ("answer",)
    out = graph.invoke(None, thread("e"))
    assert out["answer"] == "1871"
    assert out["best_note"] == "EDITED NOTE"
    assert model.stages.count("answer") == 1
    if method == "adaptive-note":  # its generator prompt, written out in scripted.py
        assert model.prompts_for("answer") == [generator_prompt("EDITED NOTE")]
    else:
        assert "EDITED NOTE" in model.prompts_for("answer")[0]


def test_a_baseline_continues_after_update_state_too() -> None:
    model = ScriptedModel.for_method("vanilla")
    graph = graph_with(model, method="vanilla")
    graph.invoke({"question": QUESTION}, thread("b"), interrupt_before=["answer"])
    graph.update_state(thread("b"), {"question": QUESTION})
    assert graph.invoke(None, thread("b"))["answer"] is not None


# --------------------------------------------------------------------------- human review
# (tests/test_hitl_review.py: the HITL request and every decision)


def test_human_review_is_a_checked_setting() -> None:
    graph = graph_with(ScriptedModel(script=velmora_script()))
    with pytest.raises(ConfigError, match="human_review must be one of none, note, answer, both"):
        graph.invoke({"question": QUESTION}, thread("x"), context={"human_review": "yes"})


# --------------------------------------------------------------------------- follow-ups

CONDENSED = "When was Clara Fenwick born?"


def condense_prompt(history: str, question: str) -> str:
    """LangChain's CONDENSE_QUESTION_PROMPT, written out here so a change in noterag's copy
    shows."""
    return (
        "Given the following conversation and a follow up question, rephrase the follow up "
        "question to be a standalone question, in its original language.\n\n"
        f"Chat History:\n{history}\nFollow Up Input: {question}\nStandalone question:"
    )


def test_a_follow_up_is_rewritten_from_the_conversation_before_retrieval() -> None:
    model = ScriptedModel(script=velmora_script(condense_question=f"  {CONDENSED}\n"))
    retriever = RecordingRetriever(passages=CORPUS)
    graph = graph_with(model, retriever)
    first = "Who painted the Velmora Bridge?"
    graph.invoke({"messages": [HumanMessage(first)]}, thread("c"))
    assert "condense_question" not in model.stages  # a first turn is not rewritten
    searched = len(retriever.queries)
    events = [
        event
        for mode, event in graph.stream(
            {"messages": [HumanMessage("When was she born?")]},
            thread("c"),
            stream_mode=["custom"],
        )
        if mode == "custom"
    ]
    assert model.prompts_for("condense_question") == [
        condense_prompt(f"Human: {first}\nAssistant: 1871", "When was she born?")
    ]
    assert events[0] == {
        "type": "condensed",
        "asked": "When was she born?",
        "question": CONDENSED,
    }
    assert retriever.queries[searched] == (CONDENSED, 5)
    state = graph.get_state(thread("c")).values
    assert (state["question"], state["asked"]) == (CONDENSED, "When was she born?")
    # the turn's cost: the rewrite and the calls after it (the first turn's were reset)
    calls_of_this_turn = len(model.stages) - model.stages.index("condense_question")
    assert state["llm_calls"] == calls_of_this_turn


def test_a_stateless_chat_with_earlier_turns_is_rewritten_too() -> None:
    model = ScriptedModel(script=velmora_script(condense_question=CONDENSED))
    graph = noterag.build_graph(
        "adaptive-note", model=model, retriever=KeywordRetriever(passages=CORPUS)
    )
    out = graph.invoke(
        {
            "messages": [
                HumanMessage("Who painted the Velmora Bridge?"),
                AIMessage("Clara Fenwick"),
                HumanMessage("When was she born?"),
            ]
        }
    )
    assert out["question"] == CONDENSED
    assert model.stages[0] == "condense_question"


# --------------------------------------------------------------------------- any Runnable


def usage_of(out: dict[str, Any]) -> tuple[int, int, int]:
    return out["llm_calls"], out["prompt_tokens"], out["completion_tokens"]


def test_wrapped_models_run_and_keep_cost_accounting() -> None:
    plain = ScriptedModel(script=velmora_script())
    expected = graph_with(plain).invoke({"question": QUESTION}, thread("p"))
    for wrap in (
        lambda m: m.with_retry(stop_after_attempt=2),
        lambda m: m.bind(stop=None).with_config(tags=["app"]),
        lambda m: FailingModel().with_fallbacks([m]),
        lambda m: m.configurable_fields(default=ConfigurableField(id="reply_default")),
        lambda m: GenericFakeChatModel(messages=iter([])).configurable_alternatives(
            ConfigurableField(id="llm"), default_key="fake", scripted=m
        ),
    ):
        model = ScriptedModel(script=velmora_script())
        wrapped = wrap(model)
        # the alternatives' key only where the model declares it: any other key is refused
        chosen = {"llm": "scripted"} if "llm" in {s.id for s in wrapped.config_specs} else {}
        config = {"configurable": {"thread_id": "w"} | chosen}
        out = graph_with(wrapped).invoke({"question": QUESTION}, config)
        assert out["answer"] == "1871"
        assert usage_of(out) == usage_of(expected)
        assert model.stages == plain.stages


def test_a_role_takes_a_wrapped_model() -> None:
    main, answerer = ScriptedModel(script=velmora_script()), ScriptedModel(script={"answer": "X"})
    graph = noterag.build_graph(
        "deepnote",
        model=main,
        answer_model=answerer.with_retry(),
        retriever=KeywordRetriever(passages=CORPUS),
    )
    assert graph.invoke({"question": QUESTION})["answer"] == "X"
    assert answerer.stages == ["answer"] and "answer" not in main.stages


def test_a_runnable_that_returns_text_is_a_model_too() -> None:
    replies = velmora_script()
    model = ScriptedModel(script=replies) | StrOutputParser()
    out = noterag.build_graph(
        "adaptive-note", model=model, retriever=KeywordRetriever(passages=CORPUS)
    ).invoke({"question": QUESTION})
    assert out["answer"] == "1871"


class FailingModel(ScriptedModel):
    def _generate(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("down")


def test_a_provider_string_without_its_package_is_a_one_line_hint() -> None:
    with pytest.raises(ConfigError) as error:
        noterag.build_graph(
            "deepnote",
            model="nosuchprovider:some-model",
            retriever=KeywordRetriever(passages=CORPUS),
        )
    assert "\n" not in str(error.value)
    assert "nosuchprovider:some-model" in str(error.value)


def keyword_docs(query: str) -> list[Document]:
    return KeywordRetriever(passages=CORPUS).invoke(query, k=10)


@pytest.mark.parametrize(
    "retriever",
    [
        RunnableLambda(keyword_docs),
        keyword_docs,
        KeywordRetriever(passages=CORPUS, k=10) | RunnableLambda(lambda docs: docs[::-1]),
    ],
    ids=["RunnableLambda", "function", "retriever | RunnableLambda"],
)
def test_any_runnable_from_a_query_to_documents_is_a_retriever(retriever: Any) -> None:
    model = ScriptedModel(script=velmora_script())
    out = noterag.build_graph("adaptive-note", model=model, retriever=retriever).invoke(
        {"question": QUESTION}, context={"top_k": 2}
    )
    assert out["answer"] == "1871"
    first = out["trace"][0]["new_passage_ids"]
    search = retriever if isinstance(retriever, Runnable) else RunnableLambda(retriever)
    expected = [d.id for d in search.invoke(QUESTION)][:2]
    assert first == expected


def test_a_retriever_runnable_that_returns_no_documents_is_a_clear_error() -> None:
    graph = noterag.build_graph(
        "adaptive-note", model=ScriptedModel(), retriever=RunnableLambda(lambda q: "text")
    )
    with pytest.raises(ConfigError, match="list of Documents"):
        graph.invoke({"question": QUESTION})


# --------------------------------------------------------------------------- LCEL


def test_answer_only_composes_with_str_output_parser() -> None:
    graph = noterag.build_graph(
        "deepnote",
        model=ScriptedModel(script=velmora_script()),
        retriever=KeywordRetriever(passages=CORPUS),
    )
    chain = noterag.answer_only(graph, context={"max_steps": 1}) | StrOutputParser()
    assert chain.invoke(QUESTION) == "1871"
    assert chain.invoke({"question": QUESTION}) == "1871"
    assert chain.batch([QUESTION, QUESTION]) == ["1871", "1871"]
    assert asyncio.run(chain.ainvoke(QUESTION)) == "1871"


# --------------------------------------------------------------------------- retry policy


class FlakySearch:
    """A search that raises ``errors`` in turn (one per call), then finds as KeywordRetriever."""

    def __init__(self, *errors: Exception) -> None:
        self.errors, self.calls = list(errors), 0

    def __call__(self, query: str) -> list[Document]:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return keyword_docs(query)


def test_every_node_has_langgraphs_retry_policy_for_searches_and_it_retries_searches_only() -> None:
    from noterag.core.retry import SEARCH_NOTE, SEARCH_RETRY

    for method in noterag.METHODS:
        nodes = noterag.build_graph(method, model=ScriptedModel()).builder.nodes
        # graphs.assemble.add_search_retries: one named call, no marker on any node
        assert {name for name, spec in nodes.items() if spec.retry_policy is SEARCH_RETRY} == set(
            nodes
        ), method
    retry_on = SEARCH_RETRY.retry_on
    assert callable(retry_on)
    # a node that never searches is never run again: only a search's exception is retried
    assert not retry_on(ConnectionRefusedError("a model endpoint restarting"))
    searched = ConnectionRefusedError("a search server restarting")
    searched.add_note(SEARCH_NOTE)
    assert retry_on(searched)


@pytest.mark.parametrize("run", ["invoke", "ainvoke"])
def test_a_search_that_fails_for_a_moment_runs_its_node_again(run: str) -> None:
    search = FlakySearch(ConnectionRefusedError("search server restarting"), TimeoutError())
    model = ScriptedModel(script=velmora_script())
    graph = noterag.build_graph("deepnote", model=model, retriever=RunnableLambda(search))
    args = ({"question": QUESTION},)
    kwargs = {"context": {"max_steps": 1}}
    out = (
        graph.invoke(*args, **kwargs)
        if run == "invoke"
        else asyncio.run(graph.ainvoke(*args, **kwargs))
    )
    assert out["answer"] == "1871"
    steady, steady_search = ScriptedModel(script=velmora_script()), FlakySearch()
    again = noterag.build_graph(
        "deepnote", model=steady, retriever=RunnableLambda(steady_search)
    ).invoke(*args, **kwargs)
    # the two failed searches came first in init_note, before its model call: no call twice
    assert [stage for stage, _ in model.calls] == [stage for stage, _ in steady.calls]
    assert out["answer"] == again["answer"] and search.calls == steady_search.calls + 2


@pytest.mark.parametrize(
    ("error", "attempts"),
    [
        (ConnectionError("down"), 3),  # SEARCH_RETRY.max_attempts, then the error
        (ValueError("bad query"), 1),  # not transient: at once
        (ConfigError("no such index"), 1),  # noterag's own
    ],
)
def test_a_search_failure_is_retried_only_when_it_may_pass(error: Exception, attempts: int) -> None:
    search = FlakySearch(*[error] * 5)
    graph = noterag.build_graph("vanilla", model=ScriptedModel(), retriever=RunnableLambda(search))
    with pytest.raises(type(error)) as raised:
        graph.invoke({"question": QUESTION})
    assert search.calls == attempts
    assert "noterag: raised by a search (the retriever)" in raised.value.__notes__


def test_a_model_failure_is_not_retried_by_the_node() -> None:
    """The model's client retries each request itself; a node's retry would resend its calls."""

    sent = []

    class Down(ScriptedModel):
        def _generate(self, *args: Any, **kwargs: Any) -> Any:
            sent.append(args)
            raise ConnectionError("model endpoint down")

    graph = noterag.build_graph("vanilla", model=Down(), retriever=keyword_docs)
    with pytest.raises(ConnectionError):
        graph.invoke({"question": QUESTION})
    assert len(sent) == 1
