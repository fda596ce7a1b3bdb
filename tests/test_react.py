"""ReAct driven by scripted models: finishing at once vs. running out of steps (the answer from
the trajectory), the notebook's prompt and stop sequences, what an Observation carries (Search,
Lookup), the counted parse fallbacks, role models, async, streaming, the vendored files, and
one run of the local model."""

from __future__ import annotations

import ast
import asyncio
import hashlib
import json
from typing import Any

import pytest
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatResult
from pydantic import Field, PrivateAttr

from noterag.base.errors import ConfigError
from noterag.core.parsing import count_fallbacks
from noterag.graphs import react
from noterag.nodes.react import lookup_list, parse_action, parse_final_answer, parse_thought_action
from noterag.prompts import react as react_prompts
from noterag.prompts import vendored
from scripted import (
    QUESTION,
    VELMORA_ROWS,
    KeywordRetriever,
    ScriptedModel,
    method_events,
    passages,
    progress_of,
)

CORPUS = passages(*VELMORA_ROWS)
HEAD = react_prompts.INSTRUCTION + react_prompts.EXAMPLES + f"Question: {QUESTION}\n"


class StopRecordingModel(ScriptedModel):
    """A scripted model that also records the stop sequences of each call, by stage."""

    _stops: list[tuple[str, list[str] | None]] = PrivateAttr(default_factory=list)

    @property
    def stops(self) -> list[tuple[str, list[str] | None]]:
        return list(self._stops)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        stage = (run_manager.metadata or {}).get("noterag_stage", "?") if run_manager else "?"
        self._stops.append((stage, stop))
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


class RecordingRetriever(KeywordRetriever):
    queries: list[tuple[str, int | None]] = Field(default_factory=list)

    def _get_relevant_documents(self, query: str, *, run_manager: Any = None, k: int | None = None):
        self.queries.append((query, k))
        return super()._get_relevant_documents(query, run_manager=run_manager, k=k)


def run(model: ScriptedModel, retriever: Any = None, **context: Any) -> dict[str, Any]:
    g = react.build(model=model, retriever=retriever or KeywordRetriever(passages=CORPUS))
    return g.invoke({"question": QUESTION}, context=context or None)


def observation_of(rows: list[dict[str, str]]) -> str:
    return "\n".join(f"{p['title']}: {p['text']}" for p in rows)


def top(query: str, k: int = 5) -> list[dict[str, str]]:
    docs = KeywordRetriever(passages=CORPUS).invoke(query, k=k)
    return [{"id": d.id, "title": d.metadata["title"], "text": d.page_content} for d in docs]


def calls_add_up(out: dict[str, Any], model: ScriptedModel, answer_calls: int) -> None:
    assert (
        out["llm_calls"]
        == len(model.calls)
        == sum(e["llm_calls"] for e in out["trace"]) + answer_calls
    )


SEARCH_THEN_FINISH = [
    " I need to search the Velmora Bridge and find its architect.\nAction 1: Search[Velmora Bridge]",
    " The architect is Aurelio Fenwick. I need his birth year.\nAction 2: Search[Aurelio Fenwick]",
    " Aurelio Fenwick was born in 1871.\nAction 3: Finish[1871]",
]


# --- stop paths --------------------------------------------------------------------------------


def test_finish_at_step_1_answers_without_another_call():
    model, retriever = (
        StopRecordingModel(script={"reason": " I know it.\nAction 1: Finish[1871]"}),
        RecordingRetriever(passages=CORPUS),
    )
    out = run(model, retriever)
    assert model.stages == ["reason"]
    assert model.calls[0][1] == HEAD + "Thought 1:"  # the notebook's prompt, whole
    assert model.stops == [("reason", ["\nObservation 1:"])]
    assert retriever.queries == []
    assert out["answer"] == "1871" and out["finished"] is True and out["steps"] == 1
    assert out["stop_reason"] == "Finish at step 1"
    assert out["trajectory"] == [
        "Thought 1: I know it.\nAction 1: Finish[1871]\nObservation 1: Episode finished\n"
    ]
    assert out["trace"] == [
        {
            "step": 1,
            "thought": "I know it.",
            "action": "Finish[1871]",
            "observation": "Episode finished",
            "passage_ids": [],
            "llm_calls": 1,
        }
    ]
    assert isinstance(out["messages"][-1], AIMessage) and out["messages"][-1].content == "1871"
    assert out.get("fallbacks", {}) == {}
    calls_add_up(out, model, answer_calls=0)


def test_search_search_finish_reads_each_observation_in_the_next_prompt():
    model, retriever = (
        StopRecordingModel(script={"reason": SEARCH_THEN_FINISH}),
        RecordingRetriever(passages=CORPUS),
    )
    out = run(model, retriever)
    assert model.stages == ["reason", "reason", "reason"]
    assert retriever.queries == [("Velmora Bridge", 5), ("Aurelio Fenwick", 5)]
    first, second = observation_of(top("Velmora Bridge")), observation_of(top("Aurelio Fenwick"))
    step1 = (
        "Thought 1: I need to search the Velmora Bridge and find its architect.\n"
        f"Action 1: Search[Velmora Bridge]\nObservation 1: {first}\n"
    )
    step2 = (
        "Thought 2: The architect is Aurelio Fenwick. I need his birth year.\n"
        f"Action 2: Search[Aurelio Fenwick]\nObservation 2: {second}\n"
    )
    assert model.prompts_for("reason") == [
        HEAD + "Thought 1:",
        HEAD + step1 + "Thought 2:",
        HEAD + step1 + step2 + "Thought 3:",
    ]
    assert [stop for _, stop in model.stops] == [[f"\nObservation {i}:"] for i in (1, 2, 3)]
    assert out["trajectory"][:2] == [step1, step2]
    assert out["answer"] == "1871" and out["stop_reason"] == "Finish at step 3"
    # the observations carry the retrieved passages, and their ids reach the output
    assert out["trace"][0]["observation"] == first
    assert out["trace"][0]["passage_ids"] == [p["id"] for p in top("Velmora Bridge")]
    assert out["passage_ids"][:2] == ["p1", "p3"]  # Velmora Bridge, Clara Fenwick (shared words)
    calls_add_up(out, model, answer_calls=0)


def test_running_out_of_steps_answers_from_the_trajectory():
    model = StopRecordingModel(
        script={
            "reason": [
                " Search the bridge.\nAction 1: Search[Velmora Bridge]",
                " Search the architect.\nAction 2: Search[Aurelio Fenwick]",
            ],
            "answer": "1871]",
        }
    )
    out = run(model, max_steps=2)
    assert model.stages == ["reason", "reason", "answer"]
    prompt = model.prompts_for("answer")[0]
    assert prompt == HEAD + "".join(out["trajectory"]) + "Action 3: Finish["
    assert model.stops[-1] == ("answer", ["]"])
    assert out["answer"] == "1871" and out["finished"] is False and out["steps"] == 2
    assert out["stop_reason"] == "2 step(s) without Finish (max_steps = 2)"
    assert [e["step"] for e in out["trace"]] == [1, 2]
    assert out["messages"][-1].content == "1871"
    calls_add_up(out, model, answer_calls=1)


@pytest.mark.parametrize("max_steps", [1, 3, 7])
def test_max_steps_caps_the_steps(max_steps: int):
    model = ScriptedModel(script={"reason": " Look again.\nAction 1: Search[Ostra]", "answer": "x"})
    # the scripted reply names step 1 every time: later steps read it via the lenient action line
    out = run(model, max_steps=max_steps)
    assert model.stages == ["reason"] * max_steps + ["answer"]
    assert out["steps"] == max_steps == len(out["trace"])


def test_the_default_is_the_notebooks_seven_steps():
    notebook = json.loads(vendored.text("ysymyth/ReAct", "hotpotqa.ipynb"))
    cell = next(
        "".join(c["source"]) for c in notebook["cells"] if "def webthink" in "".join(c["source"])
    )
    assert "for i in range(1, 8):" in cell  # steps 1..7
    assert react.ReActContext().max_steps == 7
    model = ScriptedModel(script={"reason": " Hmm.\nAction 1: Think[more]", "answer": "x"})
    out = run(model)
    assert model.stages == ["reason"] * 7 + ["answer"]
    assert out["trace"][0]["observation"] == "Nice thought."


def test_empty_finish_ends_the_episode_and_asks_what_goes_inside():
    model = StopRecordingModel(
        script={
            "reason": [SEARCH_THEN_FINISH[0], " I am done.\nAction 2: Finish[]"],
            "answer": " 1871 ]",
        }
    )
    out = run(model)
    assert model.stages == ["reason", "reason", "answer"]
    assert model.prompts_for("answer")[0] == (
        HEAD + out["trajectory"][0] + "Thought 2: I am done.\nAction 2: Finish["
    )
    assert out["answer"] == "1871" and out["finished"] is True
    assert out["stop_reason"] == "Finish with nothing inside at step 2"
    assert out["fallbacks"] == {"finish_empty": 1}


# --- parse fallbacks -----------------------------------------------------------------------------


def test_a_reply_without_an_action_gets_the_notebooks_second_call():
    model = StopRecordingModel(
        script={
            "reason": [
                " I should look up the bridge.\nMaybe.",
                SEARCH_THEN_FINISH[2].replace("3", "2"),
            ],
            "action": " Search[Velmora Bridge]\nextra",
        }
    )
    out = run(model)
    assert model.stages == ["reason", "action", "reason"]
    assert model.prompts_for("action") == [
        HEAD + "Thought 1: I should look up the bridge.\nAction 1:"
    ]
    assert model.stops[1] == ("action", ["\n"])
    assert (
        out["trace"][0]["action"] == "Search[Velmora Bridge]" and out["trace"][0]["llm_calls"] == 2
    )
    assert out["fallbacks"] == {"action": 1}
    assert out["answer"] == "1871"
    calls_add_up(out, model, answer_calls=0)


@pytest.mark.parametrize(
    ("reply", "kind", "thought", "action"),
    [
        (" Go.\nAction 1: Search[X]\nObservation 1: made up", "observation", "Go.", "Search[X]"),
        ("Thought 1: Go.\nAction 1: Search[X]", "echo", "Go.", "Search[X]"),
        (" Go.\nAction: Search[X]\nThought 2: more", "action_line", "Go.", "Search[X]"),
        (" Go.\n Action 1 :Search[X]", "action_line", "Go.", "Search[X]"),
        (" Go on and on", "action", "Go on and on", None),
    ],
)
def test_thought_action_fallbacks(reply: str, kind: str, thought: str, action: str | None):
    with count_fallbacks() as counts:
        parsed = parse_thought_action(reply, 1)
    assert (parsed.thought, parsed.action) == (thought, action)
    assert dict(counts) == {kind: 1}


def test_the_notebooks_split_takes_no_fallback():
    with count_fallbacks() as counts:
        parsed = parse_thought_action(" I need X.\nAction 3: Lookup[named after]", 3)
    assert (parsed.thought, parsed.action) == ("I need X.", "Lookup[named after]")
    assert not counts


@pytest.mark.parametrize(
    ("action", "kind", "argument", "fallback"),
    [
        ("Search[High Plains (United States)]", "search", "High Plains (United States)", None),
        ("Lookup[eastern sector]", "lookup", "eastern sector", None),
        ("Finish[1,800 to 7,000 ft]", "finish", "1,800 to 7,000 ft", None),
        ("Finish[]", "finish", "", None),
        ("search[x]", "search", "x", None),
        ("SEARCH[x]", "search", "x", "action_syntax"),  # wikienv lower-cases the first letter only
        ("Search [x].", "search", "x", "action_syntax"),
        ("I will Finish[Paris] now", "finish", "Paris", "action_syntax"),
        ("Jump[x]", "invalid", "Jump[x]", "invalid_action"),
        ("", "invalid", "", "invalid_action"),
    ],
)
def test_parse_action(action: str, kind: str, argument: str, fallback: str | None):
    with count_fallbacks() as counts:
        parsed = parse_action(action)
    assert (parsed.kind, parsed.argument) == (kind, argument)
    assert dict(counts) == ({fallback: 1} if fallback else {})


def test_malformed_and_invalid_actions_are_counted_in_the_run():
    model = ScriptedModel(
        script={
            "reason": [
                " Search.\nAction 1: search [Velmora Bridge].",
                " Jump.\nAction 2: Jump[high]",
                " Done.\nAction 3: Finish[1871]",
            ]
        }
    )
    out = run(model)
    assert out["fallbacks"] == {"action_syntax": 1, "invalid_action": 1}
    assert out["trace"][0]["observation"] == observation_of(top("Velmora Bridge"))
    assert out["trace"][1]["observation"] == "Invalid action: Jump[high]"
    assert out["answer"] == "1871"


@pytest.mark.parametrize(
    ("reply", "answer", "fallback"),
    [
        ("1871]", "1871", False),
        ("  Aurelio Fenwick ] more", "Aurelio Fenwick", False),
        ("Finish[1871]", "1871", False),
        ("\n\n1871\nObservation 8: x", "1871", False),
        ("]", "the last thought", True),
        ("", "the last thought", True),
    ],
)
def test_parse_final_answer(reply: str, answer: str, fallback: bool):
    with count_fallbacks() as counts:
        assert parse_final_answer(reply, "the last thought") == answer
    assert dict(counts) == ({"final_answer": 1} if fallback else {})


# --- observations ----------------------------------------------------------------------------------


def test_top_k_sets_the_passages_per_search_and_a_miss_says_so():
    model, retriever = (
        ScriptedModel(
            script={
                "reason": [
                    " a\nAction 1: Search[Velmora Bridge]",
                    " b\nAction 2: Search[zzz qqq]",
                    " c\nAction 3: Finish[x]",
                ]
            }
        ),
        RecordingRetriever(passages=CORPUS),
    )
    out = run(model, retriever, top_k=2)
    assert retriever.queries == [("Velmora Bridge", 2), ("zzz qqq", 2)]
    assert out["trace"][0]["observation"] == observation_of(top("Velmora Bridge", 2))
    assert out["trace"][1]["observation"] == "Could not find zzz qqq. Similar: []."
    assert out["passage_ids"] == ["p1", "p3"]


def test_lookup_walks_the_current_page_as_wikienv_does():
    model = ScriptedModel(
        script={
            "reason": [
                " a\nAction 1: Search[Aurelio Fenwick architect]",
                " b\nAction 2: Lookup[Fenwick]",
                " c\nAction 3: Lookup[Fenwick]",
                " d\nAction 4: Lookup[fenwick]",
                " e\nAction 5: Lookup[fenwick]",
                " f\nAction 6: Search[Ostra River]",
                " g\nAction 7: Lookup[Fenwick]",
            ],
            "answer": "x",
        }
    )
    out = run(model, top_k=2)
    page = top("Aurelio Fenwick architect", 2)
    sentences = [
        p["text"] + "." for p in page if "fenwick" in p["text"].lower()
    ]  # one sentence each
    assert len(sentences) == 2
    assert [e["observation"] for e in out["trace"][1:5]] == [
        f"(Result 1 / 2) {sentences[0]}",
        f"(Result 2 / 2) {sentences[1]}",
        f"(Result 1 / 2) {sentences[0]}",  # another keyword (case counts here) starts over
        f"(Result 2 / 2) {sentences[1]}",
    ]
    # a Search that finds passages makes them the current page; Lookup restarts there
    ostra = top("Ostra River", 2)
    expected = lookup_list("\n".join(p["text"] for p in ostra), "Fenwick")
    assert out["trace"][6]["observation"] == (
        f"(Result 1 / {len(expected)}) {expected[0]}" if expected else "No more results.\n"
    )


def test_lookup_list_is_wikienvs():
    page = "Milhouse is a character. He was named after Nixon. \n\nMilhouse was named after U.S. president Richard Nixon."
    assert lookup_list(page, "named after") == [
        "He was named after Nixon..",  # wikienv adds "." after every split, the last one too
        "Milhouse was named after U.S.",
    ]
    assert lookup_list("", "x") == []


def test_no_more_results_and_the_notebooks_backslash_n_removal():
    rows = passages(("Odd", "The Odd passage says \\n nothing. Odd again."))
    model = ScriptedModel(
        script={
            "reason": [
                " a\nAction 1: Search[Odd]",
                " b\nAction 2: Lookup[zebra]",
                " c\nAction 3: Finish[x]",
            ]
        }
    )
    out = run(model, KeywordRetriever(passages=rows))
    assert out["trace"][0]["observation"] == "Odd: The Odd passage says  nothing. Odd again."
    assert out["trace"][1]["observation"] == "No more results.\n"
    assert "Observation 2: No more results.\n\n" in model.prompts_for("reason")[2]


# --- roles, async, streaming, settings -----------------------------------------------------------


def test_reason_and_answer_models():
    reasoner = ScriptedModel(script={"reason": " a\nAction 1: Search[Ostra]"})
    answerer = ScriptedModel(script={"answer": "212 km]"})
    g = react.build(
        model=ScriptedModel(),
        retriever=KeywordRetriever(passages=CORPUS),
        reason_model=reasoner,
        answer_model=answerer,
    )
    out = g.invoke({"question": QUESTION}, context={"max_steps": 2})
    assert reasoner.stages == ["reason", "reason"] and answerer.stages == ["answer"]
    assert out["answer"] == "212 km"


def test_async_matches_sync():
    sync_model, async_model = (
        ScriptedModel(script={"reason": SEARCH_THEN_FINISH}) for _ in range(2)
    )
    sync_out = run(sync_model)
    g = react.build(model=async_model, retriever=KeywordRetriever(passages=CORPUS))
    async_out = asyncio.run(g.ainvoke({"question": QUESTION}))
    assert async_model.calls == sync_model.calls
    for key in ("answer", "trace", "trajectory", "passage_ids", "stop_reason", "llm_calls"):
        assert async_out[key] == sync_out[key], key


@pytest.mark.parametrize("finish", [True, False])
def test_events_and_only_the_answer_streams(finish: bool):
    replies = SEARCH_THEN_FINISH[:1] + ([SEARCH_THEN_FINISH[2].replace("3", "2")] if finish else [])
    model = ScriptedModel(script={"reason": replies, "answer": "1871]"})
    g = react.build(model=model, retriever=KeywordRetriever(passages=CORPUS))
    custom, messages = [], []
    for mode, chunk in g.stream(
        {"question": QUESTION}, context={"max_steps": 2}, stream_mode=["custom", "messages"]
    ):
        (custom if mode == "custom" else messages).append(chunk)
    custom = method_events(custom)
    kinds = [e["type"] for e in custom]
    assert kinds == ["thought", "observation", "thought", "observation", "answer"]
    assert custom[1]["passages"] == [
        {"id": p["id"], "title": p["title"]} for p in top("Velmora Bridge")
    ]
    assert custom[0] == {
        "type": "thought",
        "step": 1,
        "thought": "I need to search the Velmora Bridge and find its architect.",
        "action": "Search[Velmora Bridge]",
    }
    assert {meta["langgraph_node"] for _, meta in messages} == {"answer"}
    assert "".join(str(m.content) for m, _ in messages) == ("1871" if finish else "1871]")


def test_progress_lines():
    lines = progress_of(react.SPEC)
    assert "Velmora Bridge" in lines["observation"](
        {
            "action": "search",
            "argument": "Velmora Bridge",
            "passages": [{"id": "p1", "title": "Velmora Bridge"}],
        }
    )
    assert lines["thought"]({"thought": "t", "action": "Finish[x]"}) == "thought: t  → Finish[x]"


@pytest.mark.parametrize("bad", [0, -1])
def test_max_steps_must_be_positive(bad: int):
    g = react.build(model=ScriptedModel(), retriever=KeywordRetriever(passages=CORPUS))
    with pytest.raises(ConfigError, match="max_steps must be at least 1"):
        g.invoke({"question": QUESTION}, context={"max_steps": bad})


def test_prompt_override_replaces_the_demonstrations():
    model = ScriptedModel(script={"reason": " a\nAction 1: Finish[x]"})
    g = react.build(
        model=model,
        retriever=KeywordRetriever(passages=CORPUS),
        prompts={"webthink": "Solve it.\nQuestion: {question}\n{scratchpad}"},
    )
    g.invoke({"question": QUESTION})
    assert model.prompts_for("reason") == [f"Solve it.\nQuestion: {QUESTION}\nThought 1:"]


# --- the vendored files -----------------------------------------------------------------------------


def git_blob(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def test_vendored_files_are_the_repositorys_bytes():
    source = vendored.source("ysymyth/ReAct")
    assert source["commit"] == "6bdb3a1fd38b8188fc7ba4102969fe483df8fdc9"
    for name, path in source["files"].items():
        data = vendored.text("ysymyth/ReAct", name).encode("utf-8")
        assert git_blob(data) == source["git_blobs"][path], name


def test_instruction_and_demonstrations_are_the_notebooks():
    notebook = json.loads(vendored.text("ysymyth/ReAct", "hotpotqa.ipynb"))
    cell = next(
        "".join(c["source"]) for c in notebook["cells"] if "instruction = " in "".join(c["source"])
    )
    found = {
        node.targets[0].id: node.value
        for node in ast.parse(cell).body
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
    }
    assert ast.literal_eval(found["instruction"]) == react_prompts.INSTRUCTION
    assert ast.literal_eval(found["prompt_file"]) == "prompts_naive.json"
    assert "prompt_dict['webthink_simple6']" in cell
    assert react_prompts.EXAMPLES.startswith("\nQuestion: What is the elevation range")
    assert react_prompts.EXAMPLES.count("\nQuestion: ") == 6 and react_prompts.EXAMPLES.endswith(
        "Finish[yes]\n"
    )
    # the notebook's protocol strings, which noterag.nodes.react sends
    for text in (
        'f"Thought {i}:", stop=[f"\\nObservation {i}:"]',
        'split(f"\\nAction {i}: ")',
        'f"Thought {i}: {thought}\\nAction {i}:", stop=[f"\\n"]',
    ):
        assert text in cell, text


# --- the local model ---------------------------------------------------------------------------------


@pytest.mark.e2e
def test_local_model_end_to_end(local_model: Any):
    from noterag.retrievers import load_retriever
    from noterag.retrievers.sample import sample_index, sample_questions

    question = sample_questions()[0]["question"]
    g = react.build(model=local_model, retriever=load_retriever(f"bm25:{sample_index()}"))
    out = g.invoke({"question": question}, context={"max_tokens": 64, "max_steps": 3})
    assert isinstance(out["answer"], str) and out["stop_reason"]
    assert 1 <= out["steps"] <= 3 and len(out["trace"]) == out["steps"]
    assert out["finished"] or out["steps"] == 3
    answer_calls = 0 if out["finished"] and not out.get("fallbacks", {}).get("finish_empty") else 1
    assert out["llm_calls"] == sum(e["llm_calls"] for e in out["trace"]) + answer_calls
