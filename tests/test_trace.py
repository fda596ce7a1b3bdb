"""The trace viewer: ``render_html`` over real graph runs (scripted models, every method), read
back through an HTML parser; ``noterag trace`` and ``ask --html`` through the CLI; and the page
rendered by a real headless Chromium."""

from __future__ import annotations

import html
import json
import struct
import subprocess
import tomllib
import zlib
from fnmatch import fnmatch
from html.parser import HTMLParser
from importlib import resources
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypedDict

import jinja2
import pytest
import test_cli
import test_resp
from langgraph.graph import END, START, StateGraph
from test_amber import script as amber_script
from test_cli import assert_one_error_line, cli

from noterag.core.context import RunContext
from noterag.core.spec import Deps
from noterag.core.step import Env, Search, StepGen
from noterag.core.step import node as step_node
from noterag.eval.rows import result_row
from noterag.graphs import adaptive_note, amber, deepnote, no_retrieval, vanilla
from noterag.registry.methods import METHODS
from noterag.trace.page import (
    LAYOUTS,
    TraceInputError,
    layout_for,
    layout_template,
    load_run,
    record,
    render_html,
)
from scripted import (
    QUESTION,
    VELMORA_ROWS,
    KeywordRetriever,
    ScriptedModel,
    passages,
    velmora_script,
)

# test_cli's fixtures: a BM25 index of the Velmora corpus, the CLI's model patched to a script.
index_dir, scripted = test_cli.index_dir, test_cli.scripted

SCRIPT_TAG = "<script>alert(1)</script>"
# Hostile passage text: markup, an event handler and a network URL. The keyword retriever ranks
# it first for "When was Aurelio Fenwick born?".
HOSTILE = (
    f"{SCRIPT_TAG} Fenwick",
    'Aurelio Fenwick born <img src="https://evil.example/x.png" onerror="alert(2)"> & "quoted"',
)
CORPUS = passages(*VELMORA_ROWS, HOSTILE)
ACCEPT_THEN_REJECT = ['{"status": "True"}', '{"status": "False"}']


# --------------------------------------------------------------------------- a small DOM


VOID = {"meta", "br", "img", "link", "input", "hr", "wbr", "source"}


class Node:
    def __init__(self, tag: str, attrs: dict[str, str | None], parent: Node | None) -> None:
        self.tag, self.attrs, self.parent = tag, attrs, parent
        self.children: list[Node | str] = []

    @property
    def classes(self) -> set[str]:
        return set((self.attrs.get("class") or "").split())

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def all(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> list[Node]:
        found = []
        for child in self.children:
            if isinstance(child, Node):
                if (
                    (tag is None or child.tag == tag)
                    and (cls is None or cls in child.classes)
                    and all(child.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items())
                ):
                    found.append(child)
                found.extend(child.all(tag, cls, **attrs))
        return found

    def one(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> Node:
        found = self.all(tag, cls, **attrs)
        assert len(found) == 1, (tag, cls, attrs, len(found))
        return found[0]

    def row(self, label: str) -> Node:
        """The <td> of the grid row whose <th> reads ``label``."""
        rows = [tr for tr in self.all("tr") if tr.one("th").text() == label]
        assert len(rows) == 1, (label, len(rows))
        return rows[0].one("td")


class Dom(HTMLParser):
    """Builds a tree and fails on a closing tag that does not match (the page must nest)."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.root = self.current = Node("#root", {}, None)
        self.feed(page)
        self.close()
        assert self.current is self.root, f"unclosed <{self.current.tag}>"

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, dict(attrs), self.current)
        self.current.children.append(node)
        if tag not in VOID:
            self.current = node

    def handle_endtag(self, tag: str) -> None:
        assert tag == self.current.tag, f"</{tag}> closes <{self.current.tag}>"
        self.current = self.current.parent  # type: ignore[assignment]

    def handle_data(self, data: str) -> None:
        self.current.children.append(data)


def dom(page: str) -> Node:
    return Dom(page).root


# --------------------------------------------------------------------------- runs


def note_run(module: Any, method: str, **context: Any) -> dict[str, Any]:
    model = ScriptedModel(script=velmora_script(review=ACCEPT_THEN_REJECT))
    graph = module.build(model=model, retriever=KeywordRetriever(passages=CORPUS))
    return record(graph, QUESTION, {"top_k": 2} | context, method=method)


def amber_run() -> dict[str, Any]:
    # The chunk filter drops the Ostra passages; sufficient after the second iteration.
    model = ScriptedModel(
        script=amber_script(
            filter=lambda p: (
                '{"NLI result":"useless"}' if "Ostra" in p else '{"NLI result":"useful"}'
            ),
            sufficiency=['{"status": "False"}', '{"status": "True"}'],
        )
    )
    graph = amber.build(model=model, retriever=KeywordRetriever(passages=CORPUS))
    return record(graph, QUESTION, {"top_k": 3}, method="amber")


def resp_run() -> dict[str, Any]:
    model = ScriptedModel(script=test_resp.script(judge=["No", "No", "Yes"]))
    return record(test_resp.graph(model), test_resp.QUESTION, method="resp")


def baseline_run(module: Any, method: str) -> dict[str, Any]:
    graph = module.build(
        model=ScriptedModel(script={"answer": "1871"}), retriever=KeywordRetriever(passages=CORPUS)
    )
    return record(graph, QUESTION, method=method)


def sections(page: Node) -> list[Node]:
    return page.all("section", cls="step")


def check_common(run: dict[str, Any], page_html: str) -> Node:
    """What every page must hold: the question, the answer, the cost equal to the state's, no
    script or network reference, escaped passage text."""
    page = dom(page_html)
    assert page.one("h1", cls="question").text() == run["question"]
    assert page.one("div", cls="answer").text() == run["answer"]
    costs = {s.attrs["data-key"]: s.one("span", cls="num").text() for s in page.all(cls="stat")}
    for key in ("llm_calls", "prompt_tokens", "completion_tokens"):
        assert costs[key] == f"{run[key]:,}", key
    assert costs["passages"] == str(len(run.get("passage_ids") or []))
    assert costs["wall_time"] == f"{run['elapsed_s']:.1f} s"
    if run.get("stop_reason"):
        assert page.one(data_key="stop_reason").text() == f"Stopped: {run['stop_reason']}"
    # Self-contained: no script, no linked resource, nothing fetched from a URL; the CSP
    # forbids scripts even if some markup slipped through.
    assert not page.all("script") and not page.all("link") and not page.all("img")
    for node in page.all():
        assert not any(name.startswith("on") for name in node.attrs), node.attrs
        for name in ("src", "href", "srcset", "action", "style"):
            assert name not in node.attrs, (node.tag, name)
    style = page.one("style").text()
    assert "url(" not in style and "@import" not in style and "http" not in style
    csp = page.one("meta", http_equiv="Content-Security-Policy").attrs["content"]
    assert "default-src 'none'" in csp and "script-src" not in csp
    assert SCRIPT_TAG not in page_html
    return page


def check_passages(run: dict[str, Any], section: Node, ids: list[str]) -> None:
    by_id = {p["id"]: p for p in run["retrieved_passages"]}
    details = section.all("details", cls="passage")
    assert [d.attrs["data-id"] for d in details] == ids
    for d in details:
        passage = by_id[d.attrs["data-id"]]
        assert d.one("span", cls="ptitle").text() == passage["title"]
        # The parser reads back the exact text: it reached the page as text, not markup.
        assert d.one("div", cls="text").text() == passage["text"]


# --------------------------------------------------------------------------- render_html


@pytest.mark.parametrize(
    ("module", "method", "verdicts"),
    [
        (deepnote, "deepnote", [None, True, False, False]),
        (adaptive_note, "adaptive-note", [None, True, False]),
    ],
)
def test_note_method_page_shows_every_step(module: Any, method: str, verdicts: list[Any]) -> None:
    run = note_run(module, method)
    assert [e["verdict"] for e in run["trace"]] == verdicts  # an accepted and a rejected step
    page = check_common(run, render_html(run))
    assert page.one(cls="method").text() == method
    steps = sections(page)
    assert [s.attrs["data-step"] for s in steps] == [str(e["step"]) for e in run["trace"]]
    best = None
    for section, entry in zip(steps, run["trace"]):
        assert [li.text() for li in section.row("Queries").all("li")] == entry["queries"]
        check_passages(run, section, entry["new_passage_ids"])
        if entry["step"] == 0:
            assert section.row("Initial note").text() == entry["candidate_note"]
            assert not section.all(cls="verdict")
            best = entry["candidate_note"]
            continue
        verdict = section.one(cls="verdict")
        assert verdict.text() == f"knowledge growth: {entry['verdict']}"
        assert "accepted" in section.classes if entry["verdict"] else "rejected" in section.classes
        note = section.row("Candidate note")
        # Read without the struck words, the diff is the candidate note itself.
        kept = "".join(
            c if isinstance(c, str) else ("" if c.tag == "del" else c.text())
            for c in note.one(cls="note").children
        )
        assert kept == entry["candidate_note"]
        added = " ".join(ins.text() for ins in note.all("ins"))
        if entry["candidate_note"] == best:
            assert not note.all("ins") and not note.all("del")
        else:
            assert "(1871-1938)" in added  # what the accepted note adds to the initial one
        if entry["verdict"]:
            best = entry["candidate_note"]
    hostile = next(p for p in run["retrieved_passages"] if p["title"].startswith("<script>"))
    assert hostile["id"] in run["trace"][1]["new_passage_ids"]  # the escaping was exercised
    assert page.row("Best note").text() == run["best_note"]


def test_amber_page_shows_filters_agents_and_sufficiency() -> None:
    run = amber_run()
    trace = run["trace"]
    assert trace[0]["dropped_passage_ids"] and [e["sufficient"] for e in trace] == [False, True]
    page = check_common(run, render_html(run))
    steps = sections(page)
    assert [s.attrs["data-step"] for s in steps] == ["0", "1"]
    agents = {e["step"]: {} for e in trace}
    for event in run["events"]:
        if event["type"] == "memory_review":
            agents[event["step"]][event["agent"]] = event["text"]
    for section, entry in zip(steps, trace):
        kept = [d for d in section.all("details") if "dropped" not in d.classes]
        dropped = [d for d in section.all("details") if "dropped" in d.classes]
        assert [d.attrs["data-id"] for d in kept] == entry["new_passage_ids"]
        assert [d.attrs["data-id"] for d in dropped] == entry["dropped_passage_ids"]
        assert all(d.one(cls="tag").text() == "filtered out" for d in dropped)
        for agent, text in agents[entry["step"]].items():
            assert section.row(agent.capitalize()).text() == text
        assert (
            section.row("Sufficient?").one(cls="verdict").text()
            == f"memory sufficient: {entry['sufficient']}"
        )
        extracted = [li.one(cls="text").text() for li in section.row("Helpful sentences").all("li")]
        assert extracted and all(t.startswith("Extracted: ") for t in extracted)
    assert steps[0].row("Initial memory").text() == trace[0]["candidate_note"]
    assert steps[1].row("Verdict").one(cls="verdict").text() == "knowledge growth: True"
    assert "1871" in " ".join(i.text() for i in steps[1].row("Candidate memory").all("ins"))


def test_resp_page_shows_sub_questions_summaries_and_judgments() -> None:
    run = resp_run()
    page = check_common(run, render_html(run))
    steps = sections(page)
    assert len(steps) == len(run["trace"]) == 3
    for section, entry in zip(steps, run["trace"]):
        assert section.row("Sub-question").text() == entry["sub_question"]
        assert [d.attrs["data-id"] for d in section.all("details")] == entry["passage_ids"]
        assert section.row("Global evidence").text() == entry["global_summary"]
        assert (
            section.row("Judge").one(cls="verdict").text()
            == f"enough to answer: {entry['sufficient']}"
        )
        local = entry["local_summary"]
        labels = [th.text() for th in section.all("th")]
        assert ("Local pathway" in labels) == (local is not None)
        if local:
            assert (
                section.row("Local pathway").text()
                == f"{local['sub_question']} {local['response']}"
            )
    assert page.row("Memory").text() == run["memory"]


def test_vanilla_page_shows_the_passages_and_no_retrieval_none() -> None:
    run = baseline_run(vanilla, "vanilla")
    page = check_common(run, render_html(run))
    (section,) = sections(page)
    assert section.one("h2").text() == "Retrieval"
    check_passages(run, section, run["passage_ids"])

    closed = baseline_run(no_retrieval, "no-retrieval")
    page = check_common(closed, render_html(closed))
    assert sections(page) == [] and page.one(cls="method").text() == "no-retrieval"


CONFIG = {"method": "deepnote", "context": {}, "model": "scripted"}
DEEPNOTE = METHODS["deepnote"]


def example(qid: str, question: str = QUESTION) -> Any:
    """The eval runner's example, as result_row reads it."""
    return SimpleNamespace(id=qid, question=question, golds=["1871"], task="multihop", dataset="t")


def test_an_eval_row_renders_with_passages_by_id() -> None:
    run = note_run(deepnote, "deepnote")
    row = json.loads(
        json.dumps(result_row(DEEPNOTE, example("q1"), run, CONFIG, {"em": 1.0}, None, 2.5, 0.0))
    )
    page = dom(render_html(row))
    steps = sections(page)
    assert [s.attrs["data-step"] for s in steps] == [str(e["step"]) for e in run["trace"]]
    first = steps[1].all("details")
    assert [d.attrs["data-id"] for d in first] == run["trace"][1]["new_passage_ids"]
    assert all("not recorded" in d.text() for d in first)
    assert page.one(data_key="wall_time").one(cls="num").text() == "2.5 s"
    assert page.one(data_key="passages").one(cls="num").text() == str(len(run["passage_ids"]))
    assert page.row("Gold").text() == "1871"


def test_a_notes_diff_marks_added_words_and_escapes() -> None:
    trace = [
        {"step": 0, "candidate_note": "Fenwick designed <b>it</b>.", "llm_calls": 1},
        {
            "step": 1,
            "candidate_note": "Fenwick (1871) designed <b>it</b> & more.",
            "verdict": True,
            "llm_calls": 2,
        },
    ]
    page = render_html({"method": "deepnote", "question": "q", "answer": "a", "trace": trace})
    assert "<ins>(1871)</ins>" in page and "&lt;b&gt;it&lt;/b&gt;" in page and "&amp;" in page
    assert "<b>it" not in page


def test_render_refuses_what_is_not_a_run() -> None:
    with pytest.raises(TraceInputError):
        render_html({"trace": []})


# --------------------------------------------------------------------------- layouts


class ToyState(TypedDict, total=False):
    question: str
    answer: str
    trace: list[dict[str, Any]]
    passage_ids: list[str]
    llm_calls: int
    prompt_tokens: int
    completion_tokens: int


def toy_run(method: str = "toy") -> dict[str, Any]:
    """A method that exists only in this test: one guess over the retrieved passages. Its
    trace entries carry a "sub_question", the key that once made the viewer draw ReSP. Its
    state has no ``passages`` field: the page gets the text from the engine's search."""
    retriever = KeywordRetriever(passages=CORPUS, k=2)

    def guess(state: dict[str, Any], env: Env) -> StepGen:
        found = yield Search("When was Aurelio Fenwick born?", 2)
        entry = {"step": 0, "sub_question": "born?", "guess": f"{SCRIPT_TAG} 1871",
                 "passage_ids": [p["id"] for p in found], "sure": False, "llm_calls": 1}  # fmt: skip
        return {"answer": "1871", "trace": [entry], "passage_ids": entry["passage_ids"],
                "llm_calls": 1, "prompt_tokens": 1234, "completion_tokens": 5}  # fmt: skip

    deps = Deps(method=method, models={}, retriever=retriever, prompts={"paper": None},
                context_schema=RunContext, state_schema=ToyState)  # fmt: skip
    graph = StateGraph(ToyState)
    graph.add_node("guess", step_node(guess, deps))
    graph.add_edge(START, "guess")
    graph.add_edge("guess", END)
    return record(graph.compile(), QUESTION, method=method)


# The toy method's own step cards: its template text, built from the shared card macros.
TOY_LAYOUT = """\
{% import "trace/_cards.html.j2" as card with context %}
{% for entry in trace %}
{% call card.section(entry.get("step"), entry, "Guess") %}
{{ card.row("Guess", card.text(entry.get("guess"), "note")) }}
{{ card.row("Read", card.passage_list(entry.get("passage_ids"))) }}
{% endcall %}
{% endfor %}
"""


def labels(node: Node) -> list[str]:
    return [th.text() for th in node.all("th")]


def test_a_method_renders_with_its_own_layout() -> None:
    run = toy_run()
    page = check_common(run, render_html(run, layout=TOY_LAYOUT))
    (section,) = sections(page)
    assert section.one("h2").text() == "Guess1 LLM call"
    # Its template's values are escaped too: the script tag in its own field stays text.
    assert section.row("Guess").text() == run["trace"][0]["guess"]
    check_passages(run, section, run["trace"][0]["passage_ids"])
    assert "Sub-question" not in labels(page)  # no ReSP card guessed from the keys
    # Compiled once by the viewer (what a method's declaration may hold), the same page.
    assert render_html(run, layout=layout_template(TOY_LAYOUT)) == render_html(
        run, layout=TOY_LAYOUT
    )


def test_a_method_without_a_layout_shows_its_trace_fields() -> None:
    run = toy_run()
    assert layout_for("toy") == "generic"
    page = check_common(run, render_html(run))
    (section,) = sections(page)
    entry = run["trace"][0]
    assert labels(section) == ["sub_question", "guess", "passage_ids", "sure"]
    assert section.row("guess").text() == entry["guess"]
    check_passages(run, section, entry["passage_ids"])
    assert section.row("sure").one(cls="verdict").text() == "sure: False"


def test_the_layout_follows_the_method_and_a_nameless_run_is_judged_by_its_shape() -> None:
    assert {m: layout_for(m) for m in ("adaptive-note", "deepnote", "amber", "resp", "vanilla",
                                       "no-retrieval")} == {
        "adaptive-note": "note", "deepnote": "note", "amber": "amber", "resp": "resp",
        "vanilla": "single", "no-retrieval": "none",
    }  # fmt: skip
    # every method's layout is its declaration's: a built-in one or its own template text
    assert all(layout_for(m) == METHODS[m].trace_view for m in METHODS)
    assert layout_for("a method noterag does not know") == "generic"
    # A ReSP run named as ReSP and the same run without its method's name: the same cards.
    run = resp_run()
    nameless = {k: v for k, v in run.items() if k != "method"}
    named_page, nameless_page = dom(render_html(run)), dom(render_html(nameless))
    assert nameless_page.one(cls="method").text() == "ReSP"
    assert [s.row("Sub-question").text() for s in sections(nameless_page)] == [
        s.row("Sub-question").text() for s in sections(named_page)
    ]
    # The method decides: its run drawn as the note layout has no sub-question cards.
    assert "Sub-question" not in labels(dom(render_html(run, layout="note")))


def test_a_broken_layout_is_one_error_line() -> None:
    run = toy_run()
    with pytest.raises(TraceInputError, match="trace layout, line 2: "):
        render_html(run, layout="{% for entry in trace %}\n{% endif %}")
    with pytest.raises(TraceInputError, match="cannot render the trace page: .*no_such"):
        render_html(run, layout="{{ no_such.field }}")
    # A template compiled elsewhere may not escape: refused rather than trusted.
    with pytest.raises(TypeError, match="layout_template"):
        render_html(run, layout=jinja2.Template("{{ run }}"))


def test_the_templates_are_package_data() -> None:
    """The page must render from an installed wheel: every template file is matched by the
    package-data globs and read through the package, not the checkout's path."""
    root = Path(__file__).resolve().parents[1]
    setuptools = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    templates = resources.files("noterag.trace") / "templates"
    found = [
        p.relative_to(root / "noterag" / "trace").as_posix()
        for p in (root / "noterag" / "trace" / "templates").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    ]
    assert {"templates/trace.html.j2", "templates/trace.css"} <= set(found)
    assert {f"templates/trace/{name}.html.j2" for name in LAYOUTS} <= set(found)
    for name in found:
        # each folder is a package of its own, its files matched by that package's globs
        folder, _, file = name.rpartition("/")
        package = "noterag.trace." + folder.replace("/", ".")
        assert package in setuptools["packages"], f"{folder} is not a package"
        globs = setuptools["package-data"].get(package, [])
        assert any(fnmatch(file, glob) for glob in globs), f"{name} is not package data"
    assert "ins{" in (templates / "trace.css").read_text(encoding="utf-8")


def test_the_docs_example_is_rendered_from_the_templates() -> None:
    """docs/trace-example.html is the page of docs/trace-example.json (a DeepNote run with the
    local model), not a copy of the CSS: after a template change, regenerate it with
    `noterag trace docs/trace-example.json --html docs/trace-example.html`."""
    docs = Path(__file__).resolve().parents[1] / "docs"
    run = load_run(docs / "trace-example.json")
    assert (docs / "trace-example.html").read_text(encoding="utf-8") == render_html(run)


# --------------------------------------------------------------------------- CLI


def saved(run: dict[str, Any], path: Path) -> Path:
    path.write_text(json.dumps({k: v for k, v in run.items() if k != "messages"}))
    return path


def test_trace_command_writes_the_page(tmp_path: Path) -> None:
    run = note_run(deepnote, "deepnote")
    path = saved(run, tmp_path / "run.json")
    out = tmp_path / "page.html"
    result = cli("trace", str(path), "--html", str(out))
    assert result.exit_code == 0, result.output
    assert out.read_text() == render_html(json.loads(path.read_text()))
    assert f"trace written to {out}" in result.stderr
    # without --html: next to the run file
    assert cli("trace", str(path)).exit_code == 0
    assert (tmp_path / "run.html").read_text() == out.read_text()


def test_trace_command_picks_a_results_row_by_id(tmp_path: Path) -> None:
    run = note_run(deepnote, "deepnote")
    rows = [
        result_row(DEEPNOTE, example(qid, f"{QUESTION} ({qid})"), run, CONFIG, {}, None, 1.0, 0.0)
        for qid in ("a", "b")
    ]
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "b.html"
    result = cli("trace", str(results), "--id", "b", "--html", str(out))
    assert result.exit_code == 0, result.output
    assert dom(out.read_text()).one("h1").text() == f"{QUESTION} (b)"
    assert_one_error_line(cli("trace", str(results), "--html", str(out)), "holds 2 runs", "--id")
    assert_one_error_line(
        cli("trace", str(results), "--id", "zz", "--html", str(out)), "no run with id 'zz'"
    )


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (None, "run file not found"),
        ("{not json", "is not JSON"),
        ('{"question": "q", "answer": "a"}\n\n{"id": 2\n', "is not JSON (line 3:"),
        ("", "is empty"),
        ('{"answer": "1871", "trace": []}', "is not a run"),
        ('["question", "answer"]', "is not a run"),
        ('{"question": "q"}', "is not a run"),
    ],
)
def test_trace_command_bad_input_is_one_error_line(
    tmp_path: Path, content: str | None, fragment: str
) -> None:
    path = tmp_path / "run.json"
    if content is not None:
        path.write_text(content)
    out = tmp_path / "out.html"
    assert_one_error_line(cli("trace", str(path), "--html", str(out)), fragment)
    assert not out.exists()


def test_trace_command_refuses_an_unwritable_destination(tmp_path: Path) -> None:
    path = saved(note_run(deepnote, "deepnote"), tmp_path / "run.json")
    assert_one_error_line(
        cli("trace", str(path), "--html", str(tmp_path / "no" / "x.html")), "does not exist"
    )
    assert_one_error_line(cli("trace", str(path), "--html", str(tmp_path)), "is a directory")
    assert_one_error_line(
        cli("trace", str(path), "--html", str(path)), "would overwrite the run file"
    )


def test_ask_html_writes_the_trace_of_the_run(
    index_dir: Path, scripted: dict, tmp_path: Path
) -> None:
    out = tmp_path / "ask.html"
    result = cli("ask", QUESTION, "--index", str(index_dir), "--json", "--html", str(out))
    assert result.exit_code == 0, result.output
    state = json.loads(result.stdout)
    assert state["method"] == "deepnote" and state["llm_calls"] == len(scripted["model"].calls)
    # --json carries what the viewer needs: every passage read, with its text
    assert {p["id"] for p in state["retrieved_passages"]} == set(state["passage_ids"])
    page = check_common(state, out.read_text())
    assert [s.attrs["data-step"] for s in sections(page)] == [
        str(e["step"]) for e in state["trace"]
    ]
    for section, entry in zip(sections(page), state["trace"]):
        check_passages(state, section, entry["new_passage_ids"])
    # and the saved JSON renders to the same page
    saved_run = tmp_path / "run.json"
    saved_run.write_text(result.stdout)
    assert cli("trace", str(saved_run), "--html", str(tmp_path / "again.html")).exit_code == 0
    assert (tmp_path / "again.html").read_text() == out.read_text()


def test_ask_html_to_a_missing_directory_fails_before_the_model(
    index_dir: Path, scripted: dict, tmp_path: Path
) -> None:
    result = cli(
        "ask", QUESTION, "--index", str(index_dir), "--html", str(tmp_path / "nope" / "x.html")
    )
    assert_one_error_line(result, "does not exist")
    assert scripted["specs"] == []


# --------------------------------------------------------------------------- a real browser


CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip


def png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and the rows of an 8-bit RGB/RGBA non-interlaced PNG (what Chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    assert header is not None
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0, header
    bpp = 3 if colour == 2 else 4
    raw, stride, rows, prev = zlib.decompress(idat), width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        kind, line = (
            raw[y * (stride + 1)],
            bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)]),
        )
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, rows


@pytest.mark.browser
@pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason="chromium not installed (apt-get install chromium)"
)
def test_chromium_renders_the_page(tmp_path: Path) -> None:
    run = note_run(deepnote, "deepnote")
    page = tmp_path / "out.html"
    page.write_text(render_html(run))
    shot = tmp_path / "trace.png"

    def chromium(*args: str) -> subprocess.CompletedProcess:
        profile = tmp_path / f"profile-{len(list(tmp_path.iterdir()))}"
        return subprocess.run(
            [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args, page.as_uri()],
            capture_output=True, text=True, timeout=180, check=False,
        )  # fmt: skip

    shot_run = chromium(f"--screenshot={shot}", "--window-size=1280,2000")
    assert shot_run.returncode == 0 and shot.exists(), shot_run.stderr[-2000:]
    width, height, rows = png_pixels(shot.read_bytes())
    assert (width, height) == (1280, 2000)
    # Not blank: the top of the page (header, cost cards, steps) has many colours (text
    # antialiasing, verdict badges, the diff highlights).
    colours = {row[i : i + 3] for row in rows[:900:3] for i in range(0, len(row), 3 * 5)}
    assert len(colours) > 20, len(colours)

    dumped = chromium("--dump-dom")
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    browser_dom = dom(dumped.stdout.replace("<!DOCTYPE html>", ""))
    assert [s.attrs["data-step"] for s in sections(browser_dom)] == [
        str(e["step"]) for e in run["trace"]
    ]
    assert not browser_dom.all("script")  # the hostile passage stayed text in the browser too
    assert html.escape(SCRIPT_TAG, quote=False) in dumped.stdout
