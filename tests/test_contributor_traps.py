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

And issue 44's, met by a trial adding Self-Ask (Press et al., 2022) from the docs alone, with
that method written here as the trial wrote it:

1. Its state's ``asked: bool`` shadowed the chat's ``asked: str`` without a word: building the
   graph refuses a shared field redeclared with another type, naming both.
2. A ``{passage}`` slot its step fills as ``passages`` failed after a paid call: building the
   graph refuses it, naming the prompt, the slot, the step and what it fills.
3. ``make register`` measured the broken method with the scripted model and exited 0: a failed
   measurement is never recorded and fails it, naming the method; a row at ``max_steps`` is
   flagged.
4. The generic tests' "ok" never made it search: a method declares its search script, and a
   looping method that never searches after a reply with it fails them.
5. ``noterag methods`` showed the shared class's sampling defaults and every task: it shows the
   method's own profiles' and the tasks of its answer prompts.
"""

from __future__ import annotations

import json
import operator
import re
import sys
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Annotated, Any

import pytest
from langgraph.graph import END, StateGraph

from noterag.core.context import MOST_STEPS, RunContext, setting
from noterag.core.decision import Decision, stop_check
from noterag.core.profiles import PAPER
from noterag.core.prompt import AnswerPrompts, Prompt
from noterag.core.spec import Deps, MethodError, MethodSpec, SearchScript
from noterag.core.state import ChatFields, CostFields, NoteOutput, NoteState, merge_unique
from noterag.core.step import RETRIEVAL, Ask, Env, Search, StepGen, node
from noterag.datasets import Example
from noterag.eval.rows import result_row
from noterag.graphs import assemble
from noterag.nodes.answer import answer
from noterag.registry.methods import METHODS, register
from noterag.trace.page import record, render_html
from scripted import (
    QUESTION,
    VELMORA_ROWS,
    KeywordRetriever,
    ScriptedModel,
    cli,
    loops,
    no_search_path,
    passages,
    search_path_taken,
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


# === issue 44: Self-Ask (Press et al., 2022) as the contributor trial wrote it ===================
#
#     repeat:  reply = LLM(self_ask prompt(q, scratchpad))             self_ask
#              if the reply asks no "Follow up:": stop                  stop_check (no_follow_up)
#              passages = search(follow-up)
#              scratchpad += follow-up, LLM(intermediate prompt(passages, follow-up))
#     until max_steps follow-ups
#     answer = LLM(answer prompt(q, scratchpad))                        answer


@dataclass(kw_only=True)
class SelfAskContext(RunContext):
    max_steps: int = setting(3, "Follow-up questions at most.", ge=1, le=MOST_STEPS)


class SelfAskState(CostFields, ChatFields, total=False):
    question: str
    task: str
    answer: str
    best_note: str  # the scratchpad: the answer prompt's {note}
    follow_ups: Annotated[list[str], operator.add]
    passage_ids: Annotated[list[str], merge_unique]
    steps: int
    done: bool
    trace: Annotated[list[dict[str, Any]], operator.add]
    stop_reason: str


@dataclass(frozen=True, kw_only=True)
class SelfAskPrompts(AnswerPrompts):
    self_ask: Prompt
    intermediate: Prompt


SELF_ASK = SelfAskPrompts(
    self_ask=Prompt(
        "self_ask",
        "Question: Who lived longer, Ada or Bob?\nAre follow up questions needed here: Yes.\n"
        "Follow up: How old was Ada?\nIntermediate answer: 36.\nSo the final answer is: Bob.\n\n"
        "Question: {question}\n{scratchpad}Are follow up questions needed here:",
        "ours: a test",
    ),
    intermediate=Prompt(
        "intermediate",
        "Answer the question from the passages in a few words.\n{passages}\nQuestion: {question}",
        "ours: a test",
    ),
    answer={"multihop": Prompt("answer", "Known: {note}\nQuestion: {query}\nAnswer:", "ours")},
)


def self_ask(state: dict[str, Any], env: Env) -> StepGen:
    step, pad = state.get("steps", 0) + 1, state.get("best_note", "")
    reply = yield Ask(
        "self_ask", env.prompts.self_ask.format(question=state["question"], scratchpad=pad)
    )
    asked = [line.split(":", 1)[1].strip() for line in reply.splitlines() if "Follow up:" in line]
    entry = {"step": step, "reply": reply, "llm_calls": 1}
    if not asked or not asked[0]:
        return {"done": True, "best_note": pad, "trace": [entry]}
    found = yield Search(asked[0], env.ctx.top_k)
    text = "\n".join(p["text"] for p in found)
    answer = yield Ask(
        "intermediate", env.prompts.intermediate.format(passages=text, question=asked[0])
    )
    ids = [p["id"] for p in found]
    return {
        "steps": step,
        "done": False,
        "follow_ups": [asked[0]],
        "best_note": f"{pad}Follow up: {asked[0]}\nIntermediate answer: {answer.strip()}\n",
        "passage_ids": ids,
        "trace": [entry | {"question": asked[0], "passage_ids": ids, "llm_calls": 2}],
    }


def no_follow_up(state: Any, ctx: Any, profile: Any) -> str | None:
    steps = state.get("steps", 0)
    if state.get("done"):
        return f"no follow-up question after {steps} step(s)"
    return f"{steps} follow-ups (max_steps = {ctx.max_steps})" if steps >= ctx.max_steps else None


def self_ask_wiring(step: Any) -> Any:
    """Self-Ask's wiring with ``step`` as its self_ask node."""

    def wire(graph: StateGraph, deps: Deps) -> None:
        graph.add_node("self_ask", node(step, deps))
        check = Decision(no_follow_up, go_on="self_ask")
        graph.add_node("stop_check", stop_check(check, deps))
        graph.add_conditional_edges("stop_check", check.route, check.routes)
        graph.add_node("answer", node(answer, deps))
        graph.add_edge("question", "self_ask")
        graph.add_edge("self_ask", "stop_check")
        graph.add_edge("answer", END)

    return wire


self_ask_wire = self_ask_wiring(self_ask)


SELF_ASK_SPEC = MethodSpec(
    name="self-ask",
    title="Self-Ask (tests/test_contributor_traps.py)",
    summary="asks follow-up questions, searches each, answers them, then the question",
    context=SelfAskContext,
    state=SelfAskState,
    output=SelfAskState,
    stops=(no_follow_up,),
    roles=("self_ask", "intermediate", "answer"),
    prompts={"paper": SELF_ASK},
    wire=self_ask_wire,
    result_fields=("follow_ups",),
    queries="follow_ups",
    # the paper's decoding: greedy
    paper_profile=replace(PAPER, sampling={"temperature": 0.0}),
    search_script=SearchScript({"self_ask": "Yes.\nFollow up: Who designed the Velmora Bridge?"}),
)

# the trial's two mistakes: the chat's `asked` shadowed, and {passages} misspelt
SHADOWING = SelfAskState.__annotations__ | {"asked": bool}
MISSPELT = replace(
    SELF_ASK,
    intermediate=Prompt("intermediate", "Passages:\n{passage}\nQuestion: {question}", "ours"),
)


def self_ask_build(spec: MethodSpec = SELF_ASK_SPEC, model: Any = None) -> Any:
    model = model or ScriptedModel(script=dict(spec.search_script.replies))
    return assemble.build(spec, model, KeywordRetriever(passages=CORPUS))


def test_the_trial_method_as_written_runs_its_search_path() -> None:
    model = ScriptedModel(script={"self_ask": ["Yes.\nFollow up: Who designed the Velmora Bridge?",
                                               "No."], "intermediate": "Aurelio Fenwick",
                                  "answer": "1871"})  # fmt: skip
    out = self_ask_build(model=model).invoke({"question": QUESTION})
    assert out["answer"] == "1871" and out["follow_ups"] == ["Who designed the Velmora Bridge?"]
    assert model.stages == ["self_ask", "intermediate", "self_ask", "answer"]


# --- trap 1: a shared state field redeclared with another type -----------------------------------


class ShadowingState(CostFields, ChatFields, total=False):
    question: str
    task: str
    answer: str
    best_note: str
    follow_ups: Annotated[list[str], operator.add]
    passage_ids: Annotated[list[str], merge_unique]
    steps: int
    asked: bool  # the trial's "did it ask a follow-up": ChatFields' asked is the user's text
    trace: Annotated[list[dict[str, Any]], operator.add]
    stop_reason: str


def test_a_state_redeclaring_a_shared_field_is_refused_at_build_naming_both_types() -> None:
    model = ScriptedModel(script={})
    spec = replace(SELF_ASK_SPEC, state=ShadowingState, output=ShadowingState)
    with pytest.raises(MethodError) as refused:
        self_ask_build(spec, model)
    assert str(refused.value) == (
        "self-ask: its state ShadowingState declares 'asked' as bool, but 'asked' is a shared "
        "field the engine writes as str (noterag.core.state.SharedFields); rename the method's "
        "field, or declare it as the shared one"
    )
    assert model.calls == []
    # a shared field declared with its own type is fine (SelfAskState: question, steps, ...)
    self_ask_build()


def test_a_cost_field_without_its_reducer_is_refused() -> None:
    class NoReducer(SelfAskState, total=False):
        llm_calls: int  # each step's calls would replace the last step's, not add to them

    with pytest.raises(MethodError, match=r"declares 'llm_calls' as int, but .* as Annotated"):
        self_ask_build(replace(SELF_ASK_SPEC, state=NoReducer, output=NoReducer))


# --- trap 2: a prompt slot its step does not fill -----------------------------------------------

SLOT = (
    r"^self-ask: prompt 'intermediate' \(paper profile\) has the slot \{passage\}, which its step "
    r"self_ask \(tests/test_contributor_traps\.py:\d+\) does not fill \(it fills \{passages\}, "
    r"\{question\}\); rename the slot in the prompt to one the step fills, or fill it in the step$"
)


def test_a_misspelt_slot_is_refused_at_build_before_any_call() -> None:
    model = ScriptedModel(script=dict(SELF_ASK_SPEC.search_script.replies))
    with pytest.raises(MethodError, match=SLOT):
        self_ask_build(replace(SELF_ASK_SPEC, prompts={"paper": MISSPELT}), model)
    assert model.calls == []


def test_a_misspelt_answer_slot_is_refused_naming_the_shared_answer_step() -> None:
    answers = {"multihop": Prompt("answer", "Known: {notes}\nQuestion: {query}", "ours")}
    with pytest.raises(MethodError) as refused:
        self_ask_build(replace(SELF_ASK_SPEC, prompts={"paper": replace(SELF_ASK, answer=answers)}))
    message = str(refused.value)
    assert message.startswith("self-ask: prompt 'answer.multihop' (paper profile) has the slot ")
    assert "{notes}, which its step answer (nodes/answer.py:" in message
    assert "(it fills {memory}, {note}, {query}, {refs})" in message


def test_the_command_line_says_it_in_one_line_before_any_call(
    self_ask_method: Any, index_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(replace(SELF_ASK_SPEC, prompts={"paper": MISSPELT}), replace=True)
    model = ScriptedModel(script=dict(SELF_ASK_SPEC.search_script.replies))
    use_model(monkeypatch, model)
    result = cli("ask", QUESTION, "-m", "self-ask", "-i", str(index_dir))
    assert result.exit_code == 1 and model.calls == []
    (line,) = result.stderr.splitlines()
    assert re.match(SLOT.replace("^", "^error: "), line), line


def test_every_registered_methods_prompts_match_what_its_steps_fill() -> None:
    # the check reads each method's steps: every built-in prompt it reaches is filled
    from noterag.core.checks import prompt_renders

    for name, spec in METHODS.items():
        assemble.build(spec, ScriptedModel(script={}), KeywordRetriever(passages=CORPUS))
        # each method's renders are found, but IRCoT's (it fills its prompts from values built
        # at run time: left to the run, where Prompt.format still refuses a missing slot)
        assert bool(prompt_renders(spec.wire)) == (name != "ircot"), name


# --- trap 3: make register never records a broken method ----------------------------------------


@pytest.fixture
def self_ask_method() -> Any:
    register(SELF_ASK_SPEC)
    yield SELF_ASK_SPEC
    METHODS.unregister(SELF_ASK_SPEC.name)


@pytest.fixture
def method_costs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """bench/method_costs.py writing to a copy of the shipped file."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import method_costs

    path = tmp_path / "method_costs.json"
    path.write_text(method_costs.OUT.read_text())
    monkeypatch.setattr(method_costs, "OUT", path)
    monkeypatch.setattr(method_costs, "write_results", lambda name, data: tmp_path / "r.json")
    return method_costs


def measure_self_ask(method_costs: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setattr(sys, "argv", ["method_costs.py", "--methods", "self-ask"])
    method_costs.main()
    return dict(json.loads(method_costs.OUT.read_text()))


def intermediate_fails(state: dict[str, Any], env: Env) -> StepGen:
    """self_ask, but its reader fails whenever it runs (on the search path only)."""
    update = yield from self_ask(state, env)
    if not update.get("done"):
        raise ValueError("the intermediate answer could not be read")
    return update


failing_wire = self_ask_wiring(intermediate_fails)


@pytest.mark.parametrize(
    ("broken", "why"),
    [
        ({"prompts": {"paper": MISSPELT}}, "self-ask: prompt 'intermediate' (paper profile)"),
        ({"wire": failing_wire}, "6 of 6 questions failed: ValueError"),
    ],
)
def test_a_failed_measurement_fails_make_register_and_is_not_recorded(
    self_ask_method: Any,
    method_costs: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    broken: dict[str, Any],
    why: str,
) -> None:
    register(replace(SELF_ASK_SPEC, **broken), replace=True)
    before = json.loads(method_costs.OUT.read_text())
    with pytest.raises(SystemExit) as failed:
        measure_self_ask(method_costs, monkeypatch)
    message = str(failed.value.code)
    assert message.startswith("error: self-ask/paper not measured: ") and "make register" in message
    assert why in message + capsys.readouterr().err
    after = json.loads(method_costs.OUT.read_text())
    # no row: neither a cost measured with another model nor a "cannot run on the sample"
    assert "self-ask/paper" not in after["costs"] and "self-ask/paper" not in after["not_measured"]
    assert after["costs"] == before["costs"]


def test_a_row_measured_at_max_steps_is_flagged(
    self_ask_method: Any,
    method_costs: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # the simulated endpoint answers self_ask as its example does (a follow-up, every time)
    row = measure_self_ask(method_costs, monkeypatch)["costs"]["self-ask/paper"]
    assert row["model"] == "sim" and row["steps"] == 3.0 and row["at_cap"] is True
    assert row["llm_calls"] == 7.0  # 3 x (self_ask, intermediate), then the answer
    out = capsys.readouterr().out
    assert "self-ask/paper: measured at the cap: 3.0 steps per question = its max_steps 3" in out
    # a method whose loop stops before its cap is not flagged
    shipped = json.loads(method_costs.OUT.read_text())["costs"]
    assert shipped["deepnote/paper"].get("at_cap") is None and shipped["ircot/paper"]["at_cap"]


def test_only_a_method_with_a_stand_in_falls_back_to_the_scripted_model() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import method_costs

    assert [label for label, _, _ in method_costs.models("self-rag", "u")] == ["sim", "scripted"]
    assert [label for label, _, _ in method_costs.models("deepnote", "u")] == ["sim"]


# --- trap 4: the generic tests take a new method's search path ----------------------------------


def test_a_looping_method_without_a_search_script_fails_the_generic_test() -> None:
    # its default reply ("ok") asks no follow-up: the search and the reader never ran
    bare = replace(SELF_ASK_SPEC, search_script=SearchScript())
    assert loops(bare)
    retriever = search_path_taken(bare, CORPUS)
    assert not retriever.searched_after_a_reply()
    assert no_search_path(bare) == (
        "self-ask: with its search script its run never searched after a model's reply, so the "
        "generic tests never ran its search path; declare MethodSpec.search_script with the reply "
        'that makes it search (docs/methods.md, "Adding a method")'
    )
    # declared in its own files: the generic tests run its search path
    assert search_path_taken(SELF_ASK_SPEC, CORPUS).searched_after_a_reply()


def test_the_generic_tests_script_comes_from_the_methods_own_declaration() -> None:
    traps = (Path(__file__).parent / "test_method_traps.py").read_text()
    assert "SCRIPTS" not in traps  # no hand entry per method
    model = ScriptedModel.searching("react")
    assert model.script == dict(METHODS["react"].search_script.replies)


# --- trap 5: `noterag methods` speaks of the method's own defaults and tasks --------------------


def test_methods_shows_the_methods_own_sampling_and_tasks(self_ask_method: Any) -> None:
    shown = cli("methods", "self-ask").stdout
    flat = " ".join(shown.split())
    assert "temperature None Sampling temperature for every call (None: paper: 0.0)." in flat
    assert "top_p None Nucleus sampling top_p (None: paper: the model's own)." in flat
    assert (
        "task 'multihop' Answer style: multihop (short answer). The input's `task` overrides it."
    ) in flat
    assert "profile 'paper' paper: the printed paper's method. " in flat
    # nothing of the shared class's text about other methods' defaults and tasks
    assert "0.1" not in shown and "crud" not in shown and "Adaptive-Note" not in shown
    # the note methods' official profile samples as the official code does
    deepnote = " ".join(cli("methods", "deepnote").stdout.split())
    assert "(None: paper: the model's own; official: 0.1)" in deepnote
    helped = " ".join(cli("ask", "-m", "self-ask", "--help").stdout.replace("│", " ").split())
    assert "Sampling temperature (self-ask's default: 0.0)" in helped
    assert "(self-ask's default: multihop; self-ask answers multihop)" in helped
