"""Issue 35's silent traps, each now correct behaviour or a loud error, checked for every
registered method (a new method gets these tests without writing them):

1. The trace page drew only the passages its layout's entries name: a method whose steps
   carry other ids (FLARE's first search) or none (a new method) lost its retrievals. Every
   passage a run retrieved is now on the page, from a recorded run and from an eval row.
2. ``steps`` was missing from ``ask --json`` and null in eval rows where the loop never ran,
   and a declared output field a run did not write was missing: both are always there.
3. A setting the run cannot honour: ``human_review`` on the command line (nothing answers the
   pause: ``ask`` and ``eval`` refuse it), a note review on a method without a note, a loop
   setting on a method without that setting, a retrieval setting (``--top-k``) on a method
   that never searches (no-retrieval: the command line refuses it; the Python API keeps it, as
   reproduce gives a dataset's top_k to every row of a table).
4. An event type without a declared line printed nothing (it prints a generic line), and the spinner
   said "writing the note…" after every method's retrieval (it names the running step).
"""

from __future__ import annotations

import html
import io
import json
import re
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, get_type_hints

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from rich.console import Console

import noterag
from noterag.base.errors import ConfigError
from noterag.cli.options import parse_context
from noterag.cli.render import SILENT, Progress
from noterag.core.spec import MethodSpec
from noterag.eval.rows import result_row
from noterag.eval.runner import run_eval
from noterag.trace.page import RECORDED, load_run, record, render_html
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
METHODS = list(noterag.METHODS)
# a question (a method may search only a reply that asks one) naming what the passages do
SEARCHING = "Who was Aurelio Fenwick of the Velmora Bridge?"


def settings(method: str) -> dict[str, Any]:
    """Two iterations where the method has a loop, and the settings its search script needs."""
    spec = noterag.METHODS[method]
    names = {f.name for f in fields(spec.context)}
    return ({"max_steps": 2} if "max_steps" in names else {}) | dict(spec.search_script.settings)


def scripted(method: str) -> ScriptedModel:
    """The method's declared search script (MethodSpec.search_script), a question elsewhere."""
    return ScriptedModel.searching(method, default=SEARCHING)


def graph_of(method: str, model: ScriptedModel, **kwargs: Any) -> Any:
    return noterag.build_graph(
        method, model=model, retriever=KeywordRetriever(passages=CORPUS), **kwargs
    )


def drawn_ids(page: str) -> set[str]:
    return {html.unescape(i) for i in re.findall(r'data-id="([^"]*)"', page)}


# --- 0. every method's search path runs in these tests -----------------------------------------


@pytest.mark.parametrize("method", [m for m in METHODS if loops(noterag.METHODS[m])])
def test_every_looping_method_searches_after_a_reply_with_its_search_script(method: str) -> None:
    spec = noterag.METHODS[method]
    assert search_path_taken(spec, CORPUS).searched_after_a_reply(), no_search_path(spec)


# --- 1. the trace page shows every retrieved passage ----------------------------------------


@pytest.mark.parametrize("method", METHODS)
def test_the_trace_page_shows_every_passage_the_run_retrieved(method: str) -> None:
    spec = noterag.METHODS[method]
    run = record(graph_of(method, scripted(method)), QUESTION, settings(method), method=method)
    retrieved = run["retrieved_passages"]
    assert bool(retrieved) == spec.retrieves, "the script must make the method search"
    assert {i for s in run["searches"] for i in s["passage_ids"]} == {p["id"] for p in retrieved}
    page = render_html(run)
    assert {p["id"] for p in retrieved} <= drawn_ids(page)
    for passage in retrieved:
        assert html.escape(passage["title"], quote=False) in page, passage["id"]
    # text recorded for every passage drawn
    assert "text not recorded" not in page


@pytest.mark.parametrize("method", METHODS)
def test_an_eval_rows_trace_page_shows_every_passage_by_id(method: str, tmp_path: Path) -> None:
    row = _eval_row(method, tmp_path)
    page = render_html(load_run(tmp_path / "run" / "results.jsonl"))
    assert set(row["passage_ids"]) <= drawn_ids(page)
    spec = noterag.METHODS[method]
    # (a row has the ids a method's output keeps: none where it keeps no passage_ids)
    assert bool(row["passage_ids"]) == (spec.retrieves and "passage_ids" in spec.output_keys)


def test_a_passage_no_layout_draws_is_listed_under_its_search() -> None:
    # FLARE's layout draws each step's new passages: its first search, for the question, was
    # drawn nowhere before
    run = record(graph_of("flare", scripted("flare")), QUESTION, {"max_steps": 1}, method="flare")
    first = run["searches"][0]
    assert first["query"] == QUESTION and first["passage_ids"]
    in_steps = {i for e in run["trace"] for i in e.get("new_passage_ids") or []}
    assert not set(first["passage_ids"]) <= in_steps  # what the layout alone would miss
    page = render_html(run)
    listed = page.split('id="other-retrievals"', 1)[1].split("</section>", 1)[0]
    assert html.escape(QUESTION, quote=False) in listed
    assert set(first["passage_ids"]) - in_steps <= drawn_ids(listed)
    # and nothing twice: a passage the step cards draw is not listed again
    assert not in_steps & drawn_ids(listed)


def test_a_run_whose_layout_draws_every_passage_lists_none_again() -> None:
    run = record(graph_of("vanilla", scripted("vanilla")), QUESTION, method="vanilla")
    assert run["passage_ids"] and 'id="other-retrievals"' not in render_html(run)


def test_self_rags_retrieved_is_its_decision_and_its_rows_render() -> None:
    # Self-RAG's ``retrieved`` output is its retrieval decision, not passages
    row = {"question": QUESTION, "answer": "x", "method": "self-rag", "retrieved": True}
    assert drawn_ids(render_html(row | {"passage_ids": ["p1"]})) == {"p1"}


@pytest.mark.parametrize("method", METHODS)
def test_no_output_field_takes_a_name_the_recording_adds(method: str) -> None:
    # ask --json adds these to the method's output: a field of that name would be overwritten
    assert not noterag.METHODS[method].output_keys & set(RECORDED)


# --- 2. steps and the declared output are always there ----------------------------------------


def _eval_row(method: str, tmp_path: Path, **context: Any) -> dict[str, Any]:
    data = tmp_path / "q.jsonl"
    data.write_text(json.dumps({"id": "q1", "question": QUESTION, "answers": ["1871"]}) + "\n")
    run_eval(
        method,
        data,
        tmp_path / "run",
        index=KeywordRetriever(passages=CORPUS),
        model=scripted(method),
        context=settings(method) | context,
        progress=False,
    )
    (row,) = map(json.loads, (tmp_path / "run" / "results.jsonl").read_text().splitlines())
    assert row["error"] is None
    return dict(row)


def _empty_kind(schema: type, key: str) -> Any:
    """What a field of ``schema`` holds when nobody wrote it, read from its type here: a count
    is 0, a list or dict empty."""
    hint = get_type_hints(schema)[key]
    origin = getattr(hint, "__origin__", hint)
    return {list: [], dict: {}, int: 0}.get(origin) if hint is not bool else None


@pytest.mark.parametrize("method", METHODS)
def test_an_eval_row_has_steps_and_every_declared_field(method: str, tmp_path: Path) -> None:
    spec = noterag.METHODS[method]
    row = _eval_row(method, tmp_path)
    assert isinstance(row["steps"], int) and row["steps"] >= 0
    if "steps" not in spec.output_keys:  # no loop: it ran none
        assert row["steps"] == 0
    for key in spec.result_fields:
        assert key in row, key


@pytest.mark.parametrize("method", METHODS)
def test_a_row_of_a_run_that_wrote_nothing_else_has_empty_values_not_null(method: str) -> None:
    # what a run that never entered its loop leaves: an answer and why it stopped
    spec = noterag.METHODS[method]
    example = noterag.datasets.Example(
        id="q1", question=QUESTION, golds=["1871"], task="multihop", dataset="t"
    )
    config = {"method": method, "context": {}, "model": "scripted"}
    state = {"answer": "1871", "stop_reason": "done"}
    row = result_row(spec, example, state, config, {}, None, 0.1, 0.0)
    assert row["steps"] == 0
    for key in spec.result_fields:
        assert row[key] == _empty_kind(spec.output, key), key
    failed = result_row(spec, example, {}, config, {}, "boom", 0.1, 0.0)
    assert failed["steps"] is None  # a failed question's state is lost, as its costs are


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return velmora_index(tmp_path_factory.mktemp("index"))


@pytest.mark.parametrize("method", METHODS)
def test_ask_json_has_steps_and_every_declared_output_field(
    method: str, index_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = noterag.METHODS[method]
    use_model(monkeypatch, scripted(method))
    loop = [
        f"--max-steps={value}" if key == "max_steps" else f"--context={key}={value}"
        for key, value in settings(method).items()
    ]
    result = cli("ask", QUESTION, "-m", method, "-i", str(index_dir), "--json", *loop)
    assert result.exit_code == 0, (result.output, result.exception)
    printed = json.loads(result.stdout)
    assert spec.output_keys <= set(printed)
    assert isinstance(printed["steps"], int)
    if "steps" not in spec.output_keys:
        assert printed["steps"] == 0
    for key in spec.output_keys:  # a field the run did not write: its empty value, not absent
        if key in ("asked", "question", "answer") or printed[key] is not None:
            continue
        assert _empty_kind(spec.output, key) is None, key


def test_steps_is_0_in_ask_json_and_the_row_when_the_loop_never_runs(
    index_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Adaptive-RAG's class A answers without retrieval: IRCoT's loop (its steps) never runs
    model = ScriptedModel.for_method("adaptive-rag", script={"classify": "A"}, default="1871")
    use_model(monkeypatch, model)
    result = cli("ask", QUESTION, "-m", "adaptive-rag", "-i", str(index_dir), "--json")
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert printed["strategy"] != "ircot" and printed["steps"] == 0 and printed["cot"] == []
    data = tmp_path / "q.jsonl"
    data.write_text(json.dumps({"id": "q1", "question": QUESTION, "answers": ["1871"]}) + "\n")
    run_eval(
        "adaptive-rag",
        data,
        tmp_path / "run",
        index=KeywordRetriever(passages=CORPUS),
        model=ScriptedModel.for_method("adaptive-rag", script={"classify": "A"}, default="1871"),
        progress=False,
    )
    (row,) = map(json.loads, (tmp_path / "run" / "results.jsonl").read_text().splitlines())
    assert row["error"] is None and row["steps"] == 0


# --- 3. settings a run cannot honour are refused -------------------------------------------------


@pytest.mark.parametrize("method", METHODS)
def test_the_command_line_refuses_a_human_review(method: str, index_dir: Path) -> None:
    data = index_dir.parent / "q.jsonl"
    data.write_text(json.dumps({"id": "q1", "question": QUESTION, "answers": ["1871"]}) + "\n")
    for setting in ("note", "answer", "both"):
        review = f"human_review={setting}"
        ask = cli("ask", QUESTION, "-m", method, "-i", str(index_dir), "-c", review)
        out = index_dir.parent / f"run-{method}"
        evaluate = cli("eval", "-m", method, "-d", str(data), "-i", str(index_dir), "-c", review,
                       "--out", str(out))  # fmt: skip
        for command, result in (("ask", ask), ("eval", evaluate)):
            assert result.exit_code == 1, (command, result.output)
            assert result.stderr.strip() == (
                f"error: noterag {command} does not pause for a human review: human_review is "
                "for apps (Agent Chat UI, Python with a checkpointer; docs/embedding.md)"
            )
        assert not out.exists()  # refused before the run directory


def test_run_eval_refuses_a_human_review_once(index_dir: Path) -> None:
    """Python's run_eval is refused as the command is, before its run directory: before, every
    question of the run failed on the review, each with an error row."""
    from noterag.eval import run_eval

    data = index_dir.parent / "q-run-eval.jsonl"
    data.write_text(json.dumps({"id": "q1", "question": QUESTION, "answers": ["1871"]}) + "\n")
    out = index_dir.parent / "run-eval-review"
    with pytest.raises(noterag.NoteragError) as refused:
        run_eval("deepnote", data, out, index=f"bm25:{index_dir}", model=scripted("deepnote"),
                 context={"human_review": "note"})  # fmt: skip
    assert str(refused.value) == (
        "run_eval does not pause for a human review: human_review is for apps (Agent Chat UI, "
        "Python with a checkpointer; docs/embedding.md)"
    )
    assert not out.exists()


@pytest.mark.parametrize("method", METHODS)
def test_a_note_review_is_refused_or_pauses_at_the_note(method: str) -> None:
    # accepted means honoured: the pause shows the note (tests/test_chat_turns.py checks the
    # refusal's message)
    model = scripted(method)
    graph = graph_of(method, model, checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": method}}
    try:
        graph.invoke({"question": QUESTION}, config, context={"human_review": "note"})
    except ConfigError as refused:
        assert "reads no note" in str(refused) and model.calls == []
        return
    (pause,) = graph.get_state(config).interrupts
    assert [a["name"] for a in pause.value["action_requests"]] == ["review_note"]
    assert "answer" not in model.stages  # paused before the answer


FLAGS = {
    "max_steps": "--max-steps",
    "max_failures": "--max-failures",
    "max_passages": "--max-passages",
}


@pytest.mark.parametrize("method", METHODS)
def test_a_loop_setting_the_method_lacks_is_refused(method: str, index_dir: Path) -> None:
    names = {f.name for f in fields(noterag.METHODS[method].context)}
    lacking = [name for name in FLAGS if name not in names]
    model = scripted(method)
    for name in lacking:
        with pytest.raises(ConfigError, match=f"unknown context field.*{name}"):
            graph_of(method, model).invoke({"question": QUESTION}, context={name: 1})
        result = cli("ask", QUESTION, "-m", method, "-i", str(index_dir), FLAGS[name], "1")
        assert result.exit_code == 1, result.output
        assert result.stderr.startswith(f"error: {method} has no {FLAGS[name]} setting")
    assert model.calls == []


@pytest.mark.parametrize("method", METHODS)
def test_a_retrieval_setting_on_a_closed_book_method_is_refused(method: str) -> None:
    # every context carries top_k and max_passage_chars; a method that never searches ignored them
    spec = noterag.METHODS[method]
    for options, pairs, said in (
        ({"top_k": 2}, [], "--top-k"),
        ({}, ["max_passage_chars=100"], "-c max_passage_chars"),
    ):
        if spec.retrieves:
            context, _ = parse_context(spec, options, pairs, "ask")
            assert context
            continue
        with pytest.raises(ConfigError) as refused:
            parse_context(spec, options, pairs, "ask")
        assert (
            str(refused.value)
            == f"{method} retrieves nothing: {said} would do nothing; leave it out"
        )
    if not spec.retrieves:  # through the command line: one line, before any model
        result = cli("ask", QUESTION, "-m", method, "--top-k", "3")
        assert result.exit_code == 1 and result.stderr.startswith(
            f"error: {method} retrieves nothing"
        )


# --- 4. every event shows; the spinner names the running step -------------------------------------


def progress_of(spec: MethodSpec) -> tuple[Progress, io.StringIO]:
    out = io.StringIO()
    return Progress(Console(file=out, width=300, highlight=False), spec), out


@pytest.mark.parametrize("method", METHODS)
def test_every_event_shows_a_line_without_the_methods_declared_lines(method: str) -> None:
    # the method's own lines taken away: every event type it sends still shows
    spec = replace(noterag.METHODS[method], progress={})
    model = scripted(method)
    events = [
        e
        for _, e in graph_of(method, model).stream(
            {"question": QUESTION}, context=settings(method), stream_mode=["custom"]
        )
    ]
    assert events
    for event in events:
        progress, out = progress_of(spec)
        progress.event(event)
        shown = out.getvalue()
        if event["type"] in SILENT:
            assert shown == ""
        elif event["type"] == "answer":  # the answer follows on stdout (a tty) or this line
            assert shown == "" or shown.endswith(f"answer: {event['answer']}\n")
        else:
            assert shown.strip(), event["type"]
            step = event.get("step")
            assert shown.startswith(f"[step {step}] " if step is not None else ""), shown


def test_an_event_type_nobody_renders_prints_its_type_and_fields_escaped() -> None:
    progress, out = progress_of(noterag.METHODS["vanilla"])
    progress.event(
        {
            "type": "confidence",
            "step": 2,
            "score": 0.92,
            "reason": "the passage\nnames \x1b[31mthe architect",
            "ids": ["p1", "p2"],
            "detail": {"a": 1, "b": 2},
            "long": "x" * 500,
        }
    )
    line = out.getvalue()
    assert line.count("\n") == 1 and "\x1b" not in line
    assert line.startswith(
        "[step 2] confidence: score=0.92 · reason=the passage names the architect · "
        "ids=[p1, p2] · detail={2 fields} · long=xxx"
    )
    assert len(line) < 200 and line.rstrip().endswith("…")


@pytest.mark.parametrize("method", METHODS)
def test_the_spinner_names_each_step_as_it_runs(method: str) -> None:
    spec = noterag.METHODS[method]
    progress, _ = progress_of(spec)
    said = [progress.spinner]
    for mode, chunk in graph_of(method, scripted(method)).stream(
        {"question": QUESTION}, context=settings(method), stream_mode=list(Progress.MODES)
    ):
        progress.feed(mode, chunk)
        if said[-1] != progress.spinner:
            said.append(progress.spinner)
    # the steps in the order they ran, read from another run's updates
    ran: list[str] = []
    for update in graph_of(method, scripted(method)).stream(
        {"question": QUESTION}, context=settings(method), stream_mode="updates"
    ):
        for node in update:
            if not ran or ran[-1] != node:
                ran.append(node)
    assert said == [f"{method}…"] + [f"{method} · {node}…" for node in ran]
    # no note wording where the method has no note step
    if not any("note" in node or "memory" in node for node in ran):
        assert not any("note" in text for text in said)


def test_a_follow_up_says_how_it_was_read() -> None:
    # the question step's event on a thread's follow-up, for every method
    progress, out = progress_of(noterag.METHODS["vanilla"])
    progress.event(
        {"type": "condensed", "asked": "When was he born?", "question": "When was X born?"}
    )
    progress.event(
        {"type": "condensed", "asked": "And he?", "question": "And he?", "fallback": "empty"}
    )
    assert out.getvalue().splitlines() == [
        "follow-up read as: When was X born?",
        "follow-up read as: And he? (its rewrite was empty: kept as asked)",
    ]
