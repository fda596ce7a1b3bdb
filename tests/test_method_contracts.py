"""What every registered method guarantees, checked for each one (a new method gets these tests
without writing them): its Studio schemas, its output (answer, cost, trace, stop_reason) under
invoke and ainvoke, its progress events and streamed answer, langgraph.json, its eval row.

Each method runs with a model that answers "ok" to every stage it does not know: whatever the
method parses from that, it must still end with an answer and say why it stopped. The traps a
new method could fall into silently (a trace page without its retrievals, ``steps`` or an
output field missing, a setting accepted and not honoured, an event with no line) are checked
for every method in tests/test_method_traps.py.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

import pytest

import noterag
from noterag.eval.runner import run_eval
from scripted import QUESTION, VELMORA_ROWS, KeywordRetriever, ScriptedModel, passages

ROOT = Path(__file__).resolve().parents[1]
CORPUS = passages(*VELMORA_ROWS)
METHODS = list(noterag.METHODS)


def small(method: str) -> dict[str, Any]:
    """A short run: two iterations where the method has a loop."""
    names = {f.name for f in fields(noterag.METHODS[method].context)}
    return {"max_steps": 2} if "max_steps" in names else {}


def scripted(method: str, **fields: Any) -> ScriptedModel:
    """A scripted model the method can run with (shaped as its declaration's stand_in says)."""
    return ScriptedModel.for_method(method, **fields)


def graph_of(method: str, model: ScriptedModel) -> Any:
    return noterag.build_graph(method, model=model, retriever=KeywordRetriever(passages=CORPUS))


@pytest.mark.parametrize("method", METHODS)
def test_studio_schemas(method: str):
    graph = graph_of(method, scripted(method))
    assert set(graph.get_input_jsonschema()["properties"]) == {"question", "messages", "task"}
    output = set(graph.get_output_jsonschema()["properties"])
    assert {"answer", "trace", "stop_reason", "llm_calls", "prompt_tokens"} <= output
    assert set(noterag.METHODS[method].result_fields) <= output
    context = graph.get_context_jsonschema()["properties"]
    spec_fields = fields(noterag.METHODS[method].context)
    assert {f.name for f in spec_fields} == set(context)
    for f in spec_fields:  # Studio shows a description and the default of every setting
        assert context[f.name].get("description"), f.name
        if f.default is not MISSING and f.default is not None:
            assert context[f.name]["default"] == f.default, f.name


@pytest.mark.parametrize("call", ["invoke", "ainvoke"])
@pytest.mark.parametrize("method", METHODS)
def test_every_method_returns_an_answer_its_cost_a_trace_and_why_it_stopped(method: str, call: str):
    model = scripted(method, default="ok")
    graph = graph_of(method, model)
    if call == "invoke":
        out = graph.invoke({"question": QUESTION}, context=small(method))
    else:
        out = asyncio.run(graph.ainvoke({"question": QUESTION}, context=small(method)))
    assert isinstance(out["answer"], str)
    assert out["llm_calls"] == len(model.calls) >= 1
    assert out["prompt_tokens"] > 0 and out["completion_tokens"] > 0
    assert isinstance(out["trace"], list) and out["trace"]
    assert all("step" in entry and "llm_calls" in entry for entry in out["trace"])
    assert isinstance(out["stop_reason"], str) and out["stop_reason"]
    assert model.stages[-1] == "answer" or "answer" not in noterag.METHODS[method].roles


@pytest.mark.parametrize("method", METHODS)
def test_progress_events_are_typed_and_come_before_the_answer_tokens(method: str):
    model = scripted(method, default="ok")
    order: list[str] = []
    for mode, chunk in graph_of(method, model).stream(
        {"question": QUESTION}, context=small(method), stream_mode=["custom", "messages"]
    ):
        if mode == "custom":
            assert isinstance(chunk, dict) and isinstance(chunk.get("type"), str)
            json.dumps(chunk)  # a chat frontend receives it as JSON
            order.append("event:" + chunk["type"])
        else:
            _message, meta = chunk
            assert meta["langgraph_node"] == "answer"  # only the answer's tokens stream
            order.append("token")
    assert "token" in order
    before = [
        kind for kind in order[order.index("token") :] if kind not in ("token", "event:answer")
    ]
    assert before == [], "a progress event came after the answer began to stream"


def test_langgraph_json_serves_every_builtin_method_by_a_name_in_its_file():
    import importlib

    from noterag.registry.methods import builtin_modules

    config = json.loads((ROOT / "langgraph.json").read_text())
    expected = {
        importlib.import_module(f"noterag.graphs.{m}").SPEC.name: f"./graphs/{m}.py:make_graph"
        for m in builtin_modules()
    }
    assert config["graphs"] == expected
    for target in config["graphs"].values():
        path, attribute = target.split(":")
        assert f"\n{attribute} = " in (ROOT / path).read_text(), target  # grep finds it


@pytest.mark.parametrize("method", METHODS)
def test_eval_rows_keep_what_the_method_declares(method: str, tmp_path: Path):
    data = tmp_path / "q.jsonl"
    data.write_text(json.dumps({"id": "q1", "question": QUESTION, "answers": ["1871"]}) + "\n")
    model = scripted(method, default="ok")
    run_eval(
        method,
        data,
        tmp_path / "run",
        index=KeywordRetriever(passages=CORPUS),
        model=model,
        context=small(method),
        progress=False,
    )
    (row,) = [
        json.loads(line) for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines()
    ]
    assert row["error"] is None
    for key in noterag.METHODS[method].result_fields:
        assert key in row, key
    assert row["stop_reason"] and row["trace"] and row["llm_calls"] == len(model.calls)


@pytest.mark.parametrize("method", METHODS)
def test_trace_page_renders_the_run_in_the_methods_layout(method: str):
    import html
    from html.parser import HTMLParser

    from noterag.trace.page import record, render_html

    hostile = "<script>alert(1)</script>"
    model = scripted(method, default=hostile)
    run = record(graph_of(method, model), QUESTION, small(method), method=method)
    page = render_html(run)
    assert "<script>" not in page and "&lt;script&gt;" in page  # model text escaped
    assert QUESTION in page
    assert html.escape(run["stop_reason"], quote=False) in page  # why it stopped is shown
    HTMLParser().feed(page)  # parses


@pytest.mark.parametrize("method", METHODS)
def test_an_oversized_question_is_refused_before_any_call(method: str):
    from noterag.base.errors import ConfigError
    from noterag.core.context import MAX_QUESTION_CHARS

    model = scripted(method)
    with pytest.raises(ConfigError, match="characters long"):
        graph_of(method, model).invoke(
            {"messages": [{"role": "user", "content": "x" * (MAX_QUESTION_CHARS + 1)}]}
        )
    assert model.calls == []
