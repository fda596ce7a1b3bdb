"""Adaptive-Note and DeepNote driven by scripted models: stop conditions, profiles, parse
fallbacks and the exact sequence of prompts."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import pytest
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever

import noterag
from noterag.base.errors import ConfigError
from noterag.core.context import DeepNoteContext, resolve_context
from scripted import (
    QUESTION,
    VELMORA_ROWS,
    KeywordRetriever,
    ScriptedModel,
    method_events,
    passages,
    velmora_script,
)

CORPUS = passages(*VELMORA_ROWS)
LOOP = ["refine_query", "accumulate", "review"]


def script(**overrides: Any) -> dict[str, Any]:
    return velmora_script(**overrides)


def run(
    method: str, model: ScriptedModel, retriever: BaseRetriever | None = None, **context: Any
) -> dict:
    graph = noterag.build_graph(
        method, model=model, retriever=retriever or KeywordRetriever(passages=CORPUS)
    )
    # top-2 keeps the small corpus from running out of unseen passages in three steps
    return graph.invoke({"question": QUESTION}, context={"top_k": 2} | context)


# --- stop conditions --------------------------------------------------------------------------


def test_deepnote_stops_at_max_steps_when_every_note_improves():
    model = ScriptedModel(script=script())
    out = run("deepnote", model, max_steps=3, max_passages=100)
    assert model.stages == ["init_note", *LOOP * 3, "answer"]
    assert (out["steps"], out["failures"]) == (3, 0)
    assert "max_steps" in out["stop_reason"]
    assert out["answer"] == "1871"
    assert out["llm_calls"] == len(model.calls) == 11
    assert [entry["step"] for entry in out["trace"]] == [0, 1, 2, 3]
    assert sum(entry["llm_calls"] for entry in out["trace"]) + 1 == out["llm_calls"]


@pytest.mark.parametrize("method", ["deepnote", "adaptive-note"])
def test_one_graph_step_per_paper_step_and_the_review_decides(method: str):
    """Note initialization and knowledge accumulation search inside their own step; the
    adaptive retrieval decision (review) routes, with its reason, in its own step."""
    model = ScriptedModel(script=script())
    graph = noterag.build_graph(method, model=model, retriever=KeywordRetriever(passages=CORPUS))
    updates = list(
        graph.stream(
            {"question": QUESTION},
            context={"top_k": 2, "max_steps": 2, "max_passages": 100},
            stream_mode="updates",
        )
    )
    steps = [name for update in updates for name in update]
    assert steps == ["question", "init_note", *LOOP * 2, "answer"]
    by_step = [(name, value or {}) for update in updates for name, value in update.items()]
    # the searches' passages arrive with the note steps that read them
    assert [bool(v.get("passages")) for n, v in by_step if n in ("init_note", "accumulate")] == [
        True
    ] * 3
    # only the last review stops, and says why
    reasons = [(n, v.get("stop_reason")) for n, v in by_step if n == "review"]
    assert reasons[0] == ("review", None) and "max_steps = 2" in (reasons[1][1] or "")


def test_a_decision_reads_the_state_the_update_leads_to():
    from langgraph.types import Overwrite

    from noterag.core.state import NoteState, after_update

    state = {"seen": ["a", "b"], "trace": [{"step": 0}], "steps": 0, "llm_calls": 2}
    update = {"seen": ["b", "c"], "trace": [{"step": 1}], "steps": 1, "llm_calls": 3}
    assert after_update(NoteState, state, update) == {
        "seen": ["a", "b", "c"],  # merge_unique
        "trace": [{"step": 0}, {"step": 1}],  # operator.add
        "steps": 1,  # no reducer: replaced
        "llm_calls": 5,
    }
    assert after_update(NoteState, state, {"seen": Overwrite([])})["seen"] == []
    assert after_update(NoteState, {}, {"seen": ["x"]})["seen"] == ["x"]
    assert state["seen"] == ["a", "b"]  # the state itself is left alone


def test_deepnote_stops_after_max_failures():
    model = ScriptedModel(script=script(review='{"status": "False"}'))
    out = run("deepnote", model, max_steps=5, max_failures=2, max_passages=100)
    assert model.stages == ["init_note", *LOOP * 2, "answer"]
    assert (out["steps"], out["failures"]) == (2, 2)
    assert "max_failures" in out["stop_reason"]
    # a rejected note never becomes the best note
    assert out["best_note"] == script()["init_note"]


def test_adaptive_note_defaults_stop_after_one_invalid_update():
    model = ScriptedModel(script=script(review='{"status": "False"}'))
    out = run("adaptive-note", model)  # T_IU = 1
    assert model.stages == ["init_note", *LOOP, "answer"]
    assert (out["steps"], out["failures"]) == (1, 1)


def test_adaptive_note_defaults_run_three_collection_steps():
    model = ScriptedModel(script=script())
    out = run("adaptive-note", model, max_passages=100)  # T_CI = 3
    assert model.stages == ["init_note", *LOOP * 3, "answer"]
    assert out["steps"] == 3


def test_passage_cap_stops_and_trims_the_last_step():
    model = ScriptedModel(script=script())
    out = run("deepnote", model, top_k=3, max_passages=5, max_steps=5)
    assert len(out["passage_ids"]) == 5  # 3 initial + 2 of the step that reached the cap
    assert model.stages == ["init_note", *LOOP, "answer"]
    assert "distinct passages" in out["stop_reason"]


def test_passage_cap_reached_by_the_initial_retrieval_skips_the_loop():
    model = ScriptedModel(script=script())
    out = run("adaptive-note", model, top_k=5, max_passages=5)
    assert model.stages == ["init_note", "answer"]
    assert out["steps"] == 0


def test_official_deepnote_cap_is_strictly_greater():
    # DeepNote's official loop stops on len(seen) > cap: with exactly cap passages it goes on.
    model = ScriptedModel(script=script())
    out = run("deepnote", model, top_k=5, max_passages=5, max_steps=1, profile="official")
    assert model.stages == ["init_note", *LOOP, "answer"]
    official_an = ScriptedModel(script=script())
    run("adaptive-note", official_an, top_k=5, max_passages=5, profile="official")
    assert official_an.stages == ["init_note", "answer"]
    assert out["steps"] == 1


# --- parse fallbacks ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "accepted", "parsed"),
    [
        ('```json\n{"status": "True"}\n```', True, True),
        ("{“status”: “true”}", True, True),
        ("{'status': 'False'}", False, True),
        ("Note 2 is clearly better, true.", False, False),
        ("", False, False),
    ],
)
def test_paper_verdicts_parse_or_count_as_failed(reply: str, accepted: bool, parsed: bool):
    model = ScriptedModel(script=script(review=reply))
    out = run("deepnote", model, max_steps=1)
    assert out["trace"][-1]["verdict"] is accepted
    assert out["trace"][-1]["verdict_parsed"] is parsed
    assert out["failures"] == (0 if accepted else 1)


@pytest.mark.parametrize(
    ("reply", "accepted"),
    [
        ("Note 2 is clearly better, true.", True),  # substring fallback
        ('Here is the json: {"status": "False"} as asked', False),  # DeepNote cuts the braces
        ("no idea", False),
    ],
)
def test_official_verdicts_fall_back_to_substring(reply: str, accepted: bool):
    model = ScriptedModel(script=script(review=reply))
    out = run("deepnote", model, max_steps=1, profile="official")
    assert out["trace"][-1]["verdict"] is accepted


def test_unparseable_query_reply_falls_back_to_the_whole_reply():
    model = ScriptedModel(script=script(refine_query="Aurelio Fenwick birth year"))
    out = run("deepnote", model, max_steps=1)
    assert out["query_log"] == ["Aurelio Fenwick birth year"]


def test_repeated_questions_are_dropped_and_the_step_fails_without_calls():
    model = ScriptedModel(script=script(refine_query="1. When was Aurelio Fenwick born?"))
    out = run("deepnote", model, max_steps=3, max_failures=2, max_passages=100)
    # step 1 finds Fenwick's passage; step 2 asks the same question again: nothing new to read
    assert model.stages == ["init_note", *LOOP, "refine_query", "refine_query", "answer"]
    assert out["query_log"] == ["When was Aurelio Fenwick born?"]
    assert [e["reason"] for e in out["trace"][1:]] == [
        "reviewed",
        "no new passages",
        "no new passages",
    ]


# --- retrieval edge cases ----------------------------------------------------------------------


class EmptyRetriever(BaseRetriever):
    def _get_relevant_documents(self, query: str, *, run_manager: Any = None) -> list[Document]:
        return []


def test_empty_retrieval_paper_makes_no_note_calls():
    model = ScriptedModel(script=script())
    out = run("deepnote", model, EmptyRetriever())
    assert model.stages == ["refine_query", "refine_query", "answer"]
    assert out["best_note"] == "" and out["passage_ids"] == []
    assert out["answer"] == "1871"


def test_empty_retrieval_official_still_sends_every_prompt():
    model = ScriptedModel(script=script(review='{"status":"False"}'))
    out = run("deepnote", model, EmptyRetriever(), profile="official")
    assert model.stages == ["init_note", *LOOP * 2, "answer"]
    assert out["failures"] == 2


def test_question_without_answer_in_corpus_completes():
    model = ScriptedModel(script=script(answer="unknown", review='{"status": "False"}'))
    graph = noterag.build_graph(
        "deepnote", model=model, retriever=KeywordRetriever(passages=CORPUS)
    )
    out = graph.invoke({"question": "Who won the 1990 Zorblat chess open?"})
    assert out["answer"] == "unknown"
    assert out["trace"] and out["steps"] >= 1


# --- prompt contents per profile ----------------------------------------------------------------


def test_paper_prompts_number_passages_and_never_repeat_one():
    model = ScriptedModel(script=script())
    run("deepnote", model, top_k=2, max_steps=2, max_passages=100)
    init = model.prompts_for("init_note")[0]
    assert "[1] Title: Velmora Bridge\nText: The Velmora Bridge" in init
    first_titles = {p["title"] for p in CORPUS if f"Title: {p['title']}\n" in init}
    for prompt in model.prompts_for("accumulate"):
        assert not any(f"Title: {t}\n" in prompt for t in first_titles)
    # the query log lists one question per line
    second = model.prompts_for("refine_query")[1]
    assert (
        "Existing question list: When was Aurelio Fenwick born?\nMarrowgate Institute\n" in second
    )


def test_official_deepnote_prompt_stream():
    class Recording(KeywordRetriever):
        queries: ClassVar[list[str]] = []

        def _get_relevant_documents(
            self, query: str, *, run_manager: Any = None, k: int | None = None
        ):
            self.queries.append(query)
            return super()._get_relevant_documents(query, run_manager=run_manager, k=k)

    retriever = Recording(passages=CORPUS)
    reply = "1. When was Aurelio Fenwick born?\n2. Marrowgate Institute"
    model = ScriptedModel(script=script(refine_query=reply, accumulate="line one\nline two"))
    out = run("deepnote", model, retriever, profile="official", max_steps=2, max_passages=100)
    assert retriever.queries == [
        QUESTION,
        (reply + "\n" + QUESTION)[:500],
        (reply + "\n" + QUESTION)[:500],
    ]
    init = model.prompts_for("init_note")[0]
    assert (
        init.count(" \n\nTitle: ") >= 1
        and "Title: Velmora Bridge\nText: " in init
        and "[1]" not in init
    )
    assert "existing question list: []\n" in model.prompts_for("refine_query")[0]
    assert f"existing question list: {[reply]!s}\n" in model.prompts_for("refine_query")[1]
    # the official loop lets duplicates back in while the cap is far
    refs = [
        p.split("retrieved documents: ")[1].split("\nnotes: ")[0]
        for p in model.prompts_for("accumulate")
    ]
    assert refs[0] == refs[1]
    # newlines deleted from the updated note, which then feeds the next prompts
    assert out["best_note"] == "line oneline two"
    assert out["query_log"] == [reply, reply]


def test_official_adaptive_note_uses_the_official_prompt_files_and_passage_format():
    model = ScriptedModel(script=script())
    run("adaptive-note", model, profile="official", max_steps=1)
    init = model.prompts_for("init_note")[0]
    assert "Passage #1 Title: Velmora Bridge\nPassage #1 Text: The Velmora Bridge" in init
    assert "\n\n\nQuestion to be answered: " in init
    assert "original question: " in model.prompts_for("refine_query")[0]


def test_official_deduplicates_only_near_the_cap():
    model = ScriptedModel(script=script(refine_query="Aurelio Fenwick Marrowgate"))
    out = run("deepnote", model, profile="official", top_k=3, max_passages=4, max_steps=3)
    # step 1 finds Velmora Bridge, Aurelio Fenwick, Clara Fenwick; 3 seen + 3 > 4, so room = 1:
    # the seen ones are dropped and the one unseen passage is kept
    assert out["trace"][0]["new_passage_ids"] == ["p1", "p7", "p3"]
    assert out["trace"][1]["new_passage_ids"] == ["p2"]


# --- answer tasks, roles, async, streaming ---------------------------------------------------------


@pytest.mark.parametrize(
    ("task", "marker"), [("strategyqa", 'Only give me "yes" or "no"'), ("asqa", "journalistic")]
)
def test_task_selects_the_answer_prompt(task: str, marker: str):
    model = ScriptedModel(script=script())
    graph = noterag.build_graph(
        "deepnote", model=model, retriever=KeywordRetriever(passages=CORPUS)
    )
    graph.invoke({"question": QUESTION, "task": task}, context={"max_steps": 0})
    assert marker in model.prompts_for("answer")[0]


def test_unknown_task_is_a_config_error():
    graph = noterag.build_graph(
        "deepnote",
        model=ScriptedModel(script=script()),
        retriever=KeywordRetriever(passages=CORPUS),
    )
    with pytest.raises(ConfigError, match="no answer prompt for task 'poem'"):
        graph.invoke({"question": QUESTION, "task": "poem"}, context={"max_steps": 0})


def test_role_model_answers_alone():
    model, answerer = (
        ScriptedModel(script=script()),
        ScriptedModel(script={"answer": "eighteen seventy-one"}),
    )
    graph = noterag.build_graph(
        "deepnote", model=model, retriever=KeywordRetriever(passages=CORPUS), answer_model=answerer
    )
    out = graph.invoke({"question": QUESTION}, context={"max_steps": 1})
    assert answerer.stages == ["answer"] and "answer" not in model.stages
    assert out["answer"] == "eighteen seventy-one"


def test_bad_configuration_is_refused():
    model = ScriptedModel()
    with pytest.raises(ConfigError, match="unknown method"):
        noterag.build_graph("self-rga", model=model, retriever=KeywordRetriever(passages=CORPUS))
    with pytest.raises(ConfigError, match="no model role"):
        noterag.build_graph(
            "deepnote", model=model, retriever=KeywordRetriever(passages=CORPUS), judge_model=model
        )
    # LangGraph builds the dataclass itself: still one error naming the key and the settings
    with pytest.raises(ConfigError, match="unknown context field.s. max_step; known: "):
        run("deepnote", model, max_step=3)
    with pytest.raises(ConfigError, match="unknown context field"):
        resolve_context(DeepNoteContext, {"max_step": 3})
    with pytest.raises(ConfigError, match="top_k"):
        run("deepnote", model, top_k=0)
    with pytest.raises(ConfigError, match="profile"):
        run("deepnote", model, profile="fast")


def test_async_run_sends_the_same_prompts():
    sync_model, async_model = ScriptedModel(script=script()), ScriptedModel(script=script())
    sync_out = run("deepnote", sync_model, max_steps=2)
    graph = noterag.build_graph(
        "deepnote", model=async_model, retriever=KeywordRetriever(passages=CORPUS)
    )
    async_out = asyncio.run(
        graph.ainvoke({"question": QUESTION}, context={"max_steps": 2, "top_k": 2})
    )
    assert async_model.calls == sync_model.calls
    assert async_out["passage_ids"] == sync_out["passage_ids"]


def test_stream_reports_progress_and_only_answer_tokens():
    model = ScriptedModel(script=script(review=['{"status": "True"}', '{"status": "False"}']))
    graph = noterag.build_graph(
        "deepnote", model=model, retriever=KeywordRetriever(passages=CORPUS)
    )
    custom, messages = [], []
    for mode, chunk in graph.stream(
        {"question": QUESTION}, context={"max_steps": 2}, stream_mode=["custom", "messages"]
    ):
        (custom if mode == "custom" else messages).append(chunk)
    custom = method_events(custom)
    kinds = [e["type"] for e in custom]
    assert kinds[:2] == ["passages", "note"] and kinds[-1] == "answer"
    assert [e["accepted"] for e in custom if e["type"] == "verdict"] == [True, False]
    assert {meta["langgraph_node"] for _, meta in messages} == {"answer"}
    assert "".join(str(m.content) for m, _ in messages) == "1871"


def test_token_usage_is_summed_from_the_model_replies():
    model = ScriptedModel(script=script())
    out = run("deepnote", model, max_steps=1)
    assert out["prompt_tokens"] == sum(len(p.split()) for _, p in model.calls)
    assert out["completion_tokens"] > 0


def test_studio_schemas_carry_field_descriptions():
    graph = noterag.build_graph(
        "deepnote", model=ScriptedModel(), retriever=KeywordRetriever(passages=CORPUS)
    )
    context = graph.get_context_jsonschema()
    assert context["properties"]["max_failures"]["default"] == 2
    assert "not better" in context["properties"]["max_failures"]["description"]
    assert set(graph.get_input_jsonschema()["properties"]) == {"question", "messages", "task"}
    assert {"answer", "best_note", "trace"} <= set(graph.get_output_jsonschema()["properties"])
    an = noterag.build_graph(
        "adaptive-note", model=ScriptedModel(), retriever=KeywordRetriever(passages=CORPUS)
    )
    assert an.get_context_jsonschema()["properties"]["max_failures"]["default"] == 1


class StreamingScripted(ScriptedModel):
    """Streams like an endpoint whose streamed replies carry no token usage."""

    def _stream(self, messages, stop=None, run_manager=None, **kwargs):
        from langchain_core.messages import AIMessageChunk
        from langchain_core.outputs import ChatGenerationChunk

        result = self._generate(messages, stop=stop, run_manager=run_manager, **kwargs)
        text = result.generations[0].message.content
        self._calls[-1] = (self._calls[-1][0] + ":streamed", self._calls[-1][1])
        yield ChatGenerationChunk(message=AIMessageChunk(content=text))


def test_only_the_answer_streams_so_internal_calls_keep_their_usage():
    model = StreamingScripted(script=script())
    graph = noterag.build_graph(
        "deepnote", model=model, retriever=KeywordRetriever(passages=CORPUS)
    )
    final = None
    for mode, chunk in graph.stream(
        {"question": QUESTION},
        context={"max_steps": 1, "top_k": 2},
        stream_mode=["messages", "values"],
    ):
        if mode == "values":
            final = chunk
    # the answer is the only call that streamed (the last one)
    assert [s.endswith(":streamed") for s in model.stages] == [False] * 4 + [True]
    assert model.stages[:4] == ["init_note", *LOOP]
    internal = [p for s, p in model.calls if not s.endswith(":streamed")]
    assert final["prompt_tokens"] == sum(len(p.split()) for p in internal)
