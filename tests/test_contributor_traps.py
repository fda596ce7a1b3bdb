"""The traps a new contributor fell into while adding a method (issue 24, traps 1-5), each now
an immediate error or impossible.

1. The trace page took passage text only from node updates under a key named ``passages``:
   the engine now sends a ``retrieval`` event with the text of every search it runs.
2. A step writing a key its state does not declare lost it without a word: it now fails,
   naming the method, the step and the key.
3. A stage no model role serves quietly took the default model: ``build()`` refuses a
   ``stage_roles`` entry naming an undeclared role, and the stage's first call fails, naming
   the method and the stage.
4. ``ask --json`` printed the whole internal state: it prints the method's output schema (plus
   what the trace page reads from the stream).
5. ``--max-steps``'s help showed DeepNote's default whatever the method: it shows the chosen
   method's.
"""

from __future__ import annotations

import json
import operator
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Annotated, Any

import pytest
from langgraph.graph import END, StateGraph

from noterag.core.context import RunContext
from noterag.core.decision import Decision, stop_check
from noterag.core.prompt import AnswerPrompts, Prompt
from noterag.core.spec import Deps, MethodError, MethodSpec
from noterag.core.state import ChatFields, CostFields, NoteOutput, NoteState
from noterag.core.step import RETRIEVAL, Ask, Env, Search, StepGen, node
from noterag.datasets import Example
from noterag.eval.rows import result_row
from noterag.graphs import assemble
from noterag.registry.methods import METHODS, register
from noterag.trace.page import record, render_html
from scripted import (
    QUESTION,
    VELMORA_ROWS,
    KeywordRetriever,
    ScriptedModel,
    cli,
    passages,
    use_model,
    velmora_index,
)

CORPUS = passages(*VELMORA_ROWS)

# --- a method of this test alone: one search, one "ask" stage, then the answer -------------------


@dataclass(kw_only=True)
class LookContext(RunContext):
    max_steps: int = field(default=7, metadata={"description": "Unused: its own default."})


class LookState(CostFields, ChatFields, total=False):
    question: str
    task: str
    answer: str
    passage_ids: Annotated[list[str], operator.add]
    trace: Annotated[list[dict[str, Any]], operator.add]
    stop_reason: str


@dataclass(frozen=True, kw_only=True)
class LookPrompts(AnswerPrompts):
    look: Prompt


PROMPTS = LookPrompts(
    look=Prompt("look", "Read: {refs}\nQuestion: {query}", "ours: a test"),
    answer={"multihop": Prompt("answer", "{refs}", "ours: a test")},
)


def look(state: dict[str, Any], env: Env) -> StepGen:
    found = yield Search(state["question"], 2)
    refs = " | ".join(p["text"] for p in found)
    reply = yield Ask("asker", env.prompts.look.format(refs=refs, query=state["question"]))
    # no "passages" key anywhere: the state keeps ids only
    return {
        "answer": reply,
        "passage_ids": [p["id"] for p in found],
        "trace": [{"step": 0, "passage_ids": [p["id"] for p in found], "reply": reply}],
        "stop_reason": "done",
    }


def wire(graph: StateGraph, deps: Deps) -> None:
    graph.add_node("look", node(look, deps))
    graph.add_edge("question", "look")
    graph.add_edge("look", END)


SPEC = MethodSpec(
    name="look-once",
    title="Look once (tests/test_contributor_traps.py)",
    summary="one search, one model call",
    context=LookContext,
    state=LookState,
    output=LookState,
    roles=("asker",),
    prompts={"paper": PROMPTS},
    wire=wire,
)


def build(spec: MethodSpec = SPEC, model: Any = None, **role_models: Any) -> Any:
    model = model or ScriptedModel(script={"asker": "1871"})
    return assemble.build(spec, model, KeywordRetriever(passages=CORPUS), **role_models)


# --- trap 1: passage text comes from the engine's retrieval events ----------------------------------


def test_the_engine_sends_each_search_with_its_passages_text() -> None:
    events = [e for _, e in build().stream({"question": QUESTION}, stream_mode=["custom"])]
    expected = KeywordRetriever(passages=CORPUS).invoke(QUESTION, k=2)
    assert events == [
        {
            "type": RETRIEVAL,
            "query": QUESTION,
            "k": 2,
            "passages": [
                {"id": d.id, "title": d.metadata["title"], "text": d.page_content} for d in expected
            ],
        }
    ]


async def test_the_async_path_sends_the_same_events() -> None:
    graph = build()
    sync = [e for _, e in graph.stream({"question": QUESTION}, stream_mode=["custom"])]
    run = graph.astream({"question": QUESTION}, stream_mode=["custom"])
    assert [e async for _, e in run] == sync


def test_the_trace_page_shows_the_text_of_a_state_without_passages() -> None:
    run = record(build(), QUESTION, method=SPEC.name)
    read = {p["id"]: p["text"] for p in CORPUS if p["id"] in run["passage_ids"]}
    assert len(read) == 2
    assert {p["id"]: p["text"] for p in run["retrieved_passages"]} == read
    assert all(e["type"] != RETRIEVAL for e in run["events"])  # the text is kept once
    page = render_html(run)
    assert all(text in page for text in read.values())
    assert "text not recorded" not in page


# --- trap 2: a key the state does not declare -------------------------------------------------------


def writes_an_undeclared_key(state: dict[str, Any], env: Env) -> StepGen:
    reply = yield Ask("asker", "guess")
    return {"answer": reply, "confidence": 0.9}


def undeclared_wire(graph: StateGraph, deps: Deps) -> None:
    graph.add_node("look", node(writes_an_undeclared_key, deps))
    graph.add_edge("question", "look")
    graph.add_edge("look", END)


UNDECLARED = (
    "look-once: step 'writes_an_undeclared_key' wrote 'confidence', which its state LookState "
    "does not declare; add it to the state schema"
)


def test_a_step_writing_an_undeclared_key_fails_naming_it() -> None:
    graph = build(replace(SPEC, wire=undeclared_wire))
    with pytest.raises(MethodError, match=UNDECLARED):
        graph.invoke({"question": QUESTION})


async def test_a_step_writing_an_undeclared_key_fails_under_ainvoke_too() -> None:
    graph = build(replace(SPEC, wire=undeclared_wire))
    with pytest.raises(MethodError, match=UNDECLARED):
        await graph.ainvoke({"question": QUESTION})


# --- trap 3: a stage no role serves -----------------------------------------------------------------


def test_a_stage_no_role_serves_fails_at_its_first_call_naming_it() -> None:
    # the step asks for "asker"; the method declares only "reader": asker_model= would be
    # refused and the stage would have used the default model
    spec = replace(SPEC, roles=("reader",))
    model = ScriptedModel(script={"asker": "1871"})
    with pytest.raises(MethodError, match="look-once: stage 'asker' has no model role"):
        build(spec, model).invoke({"question": QUESTION})
    assert model.calls == []  # refused before any call


def test_stage_roles_naming_an_undeclared_role_is_refused_by_build() -> None:
    spec = replace(SPEC, roles=("reader",), stage_roles={"asker": "reder"})
    with pytest.raises(MethodError, match="look-once: stage_roles maps stage 'asker' to 'reder'"):
        build(spec)


def test_a_mapped_stage_takes_its_roles_model() -> None:
    spec = replace(SPEC, roles=("reader",), stage_roles={"asker": "reader"})
    default, reader = ScriptedModel(script={}), ScriptedModel(script={"asker": "1871"})
    out = build(spec, default, reader_model=reader).invoke({"question": QUESTION})
    assert out["answer"] == "1871"
    assert reader.stages == ["asker"] and default.calls == []


# --- traps 4 and 5: the command line ----------------------------------------------------------------


@pytest.fixture
def look_method() -> Any:
    register(SPEC)
    yield SPEC
    METHODS.unregister(SPEC.name)


@pytest.fixture
def index_dir(tmp_path: Path) -> Path:
    return velmora_index(tmp_path)


# what `ask --json` adds to the output: read from the stream, for `noterag trace`
RECORDED = {"retrieved_passages", "searches", "events", "elapsed_s", "method"}


@pytest.mark.parametrize(
    ("method", "script", "output", "state"),
    [
        ("look-once", {"asker": "1871"}, LookState, LookState),
        (
            "deepnote",
            {
                "init_note": "Aurelio Fenwick designed it.",
                "refine_query": "1. When was Aurelio Fenwick born?",
                "accumulate": "Fenwick (1871-1938) designed it.",
                "review": '{"status": "False"}',
                "answer": "1871",
            },
            NoteOutput,
            NoteState,
        ),
    ],
)
def test_ask_json_prints_the_declared_output(
    look_method: Any,
    index_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    method: str,
    script: dict[str, Any],
    output: type,
    state: type,
) -> None:
    use_model(monkeypatch, ScriptedModel(script=script))
    result = cli("ask", QUESTION, "--method", method, "--index", str(index_dir), "--json")
    assert result.exit_code == 0, (result.output, result.exception)
    printed = json.loads(result.stdout)
    assert printed["answer"] == "1871"
    # the declared output, every field of it (issue 35: also those the run never wrote), and
    # the steps every method reports
    assert set(printed) - RECORDED == _inherited(output) | {"steps"}
    # the loop's working fields stay inside (deepnote: queries, seen, candidate_note, ...)
    internal = (_inherited(state) | set(state.__annotations__)) - (
        _inherited(output) | set(output.__annotations__)
    )
    assert not internal & set(printed)
    if method == "deepnote":
        assert {"queries", "seen", "candidate_note"} <= internal
    assert printed["method"] == method and printed["retrieved_passages"]


def _inherited(schema: type) -> set[str]:
    from typing import get_type_hints

    return set(get_type_hints(schema))


def test_each_setting_help_shows_the_chosen_methods_default(look_method: Any) -> None:
    flags = {"top_k": "--top-k", "max_steps": "--max-steps", "max_failures": "--max-failures"}
    for method in ("deepnote", "adaptive-note", "amber", "vanilla", "look-once"):
        defaults = {f.name: f.default for f in fields(METHODS[method].context)}
        text = " ".join(cli("ask", "--method", method, "--help").stdout.split())
        for name, flag in flags.items():
            said = (
                f"({method}'s default: {defaults[name]})"
                if name in defaults
                else f"({method} has no such setting)"
            )
            assert said in text.split(flag, 1)[1].split(" --", 1)[0], (method, flag)
    # look-once's own default, in every spelling of the option
    for args in (["-m", "look-once"], ["--method=look-once"], ["-mlook-once"]):
        assert "(look-once's default: 7)" in " ".join(cli("ask", *args, "--help").stdout.split())
    # without --method: --method's default, deepnote, says so
    default = {f.name: f.default for f in fields(METHODS["deepnote"].context)}["max_steps"]
    assert f"(deepnote's default: {default})" in " ".join(cli("ask", "--help").stdout.split())


def test_methods_shows_one_method(look_method: Any) -> None:
    one = cli("methods", "look-once")
    assert one.exit_code == 0, one.output
    assert one.stdout.splitlines()[0] == f"look-once — {SPEC.title}"
    assert "max_steps" in one.stdout and "deepnote" not in one.stdout
    every = cli("methods")
    assert one.stdout in every.stdout and len(every.stdout) > len(one.stdout)
    unknown = cli("methods", "nope")
    assert unknown.exit_code == 2 and "'nope' is not a method" in unknown.stderr


# --- a method declares its stop rules and its queries field -------------------------------------


def look_again(state: Any, ctx: Any, profile: Any) -> str | None:
    return "looked" if state.get("passage_ids") else None


def deciding_wire(graph: StateGraph, deps: Deps) -> None:
    graph.add_node("look", node(look, deps))
    check = Decision(look_again, go_on="look", stop=END)
    graph.add_node("stop_check", stop_check(check, deps))
    graph.add_conditional_edges("stop_check", check.route, check.routes)
    graph.add_edge("question", "look")
    graph.add_edge("look", "stop_check")


def test_a_step_stopping_by_an_undeclared_rule_is_refused_by_build() -> None:
    with pytest.raises(MethodError, match=r"look-once: step 'stop_check' stops by look_again"):
        build(replace(SPEC, wire=deciding_wire))
    graph = build(replace(SPEC, wire=deciding_wire, stops=(look_again,)))
    assert graph.invoke({"question": QUESTION})["stop_reason"] == "looked"


def test_a_queries_field_the_state_lacks_is_refused_and_a_declared_one_fills_the_rows() -> None:
    with pytest.raises(MethodError, match=r"look-once: its queries field 'query_log' is not"):
        build(replace(SPEC, queries="query_log"))
    example = Example(id="q1", question=QUESTION, golds=["1871"], task="multihop", dataset="t")
    config = {"method": "look-once", "context": {}, "model": "scripted"}
    declared = replace(SPEC, queries="passage_ids")
    row = result_row(declared, example, {"passage_ids": ["p1"]}, config, {}, None, 0.1, 0.0)
    assert row["queries"] == ["p1"]
    row = result_row(SPEC, example, {"passage_ids": ["p1"]}, config, {}, None, 0.1, 0.0)
    assert row["queries"] is None
