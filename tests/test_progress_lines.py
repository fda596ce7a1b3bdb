"""What a method shows while it runs is data in its declaration (noterag.core.progress): the
command line draws it exactly as it drew the methods' own rendering code before, the trace page
draws the same lines, and no graph, node or prompt module imports terminal code.

tests/progress_lines.json holds events recorded from the methods' runs (every method's test
file and the generic contract tests, at e189ef2, passage texts cut to 40 characters), with
events written for the branches no run reached (an unparsed verdict, a tie, control
characters), each with the bytes ``noterag ask`` wrote to a colour terminal for it then, when
each graph module rendered its events with rich itself.
"""

from __future__ import annotations

import ast
import io
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

import noterag
from noterag.cli.render import Progress
from noterag.core.progress import SHARED, Line, Part, check, check_shape, progress_lines
from noterag.core.spec import MethodError
from noterag.registry.methods import register
from noterag.trace.page import progress_for, render_html

ROOT = Path(__file__).resolve().parents[1]
RECORDED = json.loads((Path(__file__).parent / "progress_lines.json").read_text(encoding="utf-8"))


def terminal_output(method: str, event: dict[str, Any]) -> str:
    """What ``noterag ask`` writes to stderr for ``event``, as a colour terminal receives it."""
    out = io.StringIO()
    console = Console(
        file=out,
        width=200,
        highlight=False,
        force_terminal=True,
        color_system="standard",
        soft_wrap=True,
    )
    Progress(console, noterag.METHODS[method]).event(event)
    return out.getvalue()


@pytest.fixture
def stdout_not_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    # the answer's own line shows only when stdout is not a terminal, as when it was recorded
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False)


def test_the_recording_covers_every_methods_declared_events() -> None:
    recorded = {(row["method"], row["event"]["type"]) for row in RECORDED}
    declared = {(name, kind) for name, spec in noterag.METHODS.items() for kind in spec.progress}
    assert declared - recorded == set()
    assert {kind for _, kind in recorded} >= set(SHARED)


@pytest.mark.usefixtures("stdout_not_a_terminal")
@pytest.mark.parametrize("method", sorted({row["method"] for row in RECORDED}))
def test_every_methods_lines_are_the_terminal_output_of_before(method: str) -> None:
    rows = [row for row in RECORDED if row["method"] == method]
    for row in rows:
        assert terminal_output(method, row["event"]) == row["output"], row["event"]


@pytest.mark.parametrize("method", list(noterag.METHODS))
def test_every_template_compiles_and_an_event_without_fields_still_shows(method: str) -> None:
    spec = noterag.METHODS[method]
    check(spec.progress)
    for kind in [*spec.progress, *SHARED]:
        for event in ({"type": kind}, {"type": kind, "step": 3}):
            shown = progress_lines(spec.progress, event)
            assert all(isinstance(line.plain, str) for line in shown), kind


def test_a_typo_in_a_template_is_named_with_its_event_type() -> None:
    with pytest.raises(ValueError, match="'toy'"):
        check({"toy": Line("{{ broken ")})
    with pytest.raises(ValueError, match="unknown progress style 'purple'"):
        Part("x", "purple")  # type: ignore[arg-type]


def test_a_method_whose_lines_are_code_is_refused_at_registration() -> None:
    # what 0.1 declared: a function returning rich Text
    spec = replace(noterag.METHODS["vanilla"], name="toy-code", progress={"toy": lambda e: "x"})
    with pytest.raises(MethodError, match=r"toy-code: progress\['toy'\] must be a .*Line"):
        register(spec)
    assert "toy-code" not in noterag.METHODS
    for bad in ({"toy": "text"}, {"toy": [Line("a"), "b"]}):
        with pytest.raises(TypeError, match="progress\\['toy'\\]"):
            check_shape(bad)


def test_fields_of_another_shape_show_as_the_generic_line() -> None:
    # a run file from elsewhere: Self-RAG's score as text cannot be formatted as a number
    event = {"type": "retrieval_decision", "step": 0, "score": "high", "retrieve": True}
    (line,) = progress_lines(noterag.METHODS["self-rag"].progress, event)
    assert line.plain == "retrieval_decision: score=high · retrieve=True"
    # SuRe's chosen candidate far beyond any letter
    event = {"type": "selection", "candidates": ["a"], "scores": [1], "chosen": 10**9}
    (line,) = progress_lines(noterag.METHODS["sure"].progress, event)
    assert line.plain == "selection: candidates=[a] · scores=[1] · chosen=1000000000"


# Any JSON value, under the field names the methods' events use (and others): an event of another
# shape, as a run file from elsewhere may hold.
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
FIELDS = sorted({key for row in RECORDED for key in row["event"]} - {"type"})
KINDS = sorted({(name, kind) for name, spec in noterag.METHODS.items() for kind in spec.progress})


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(KINDS),
    st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=6), JSON, max_size=6),
)
def test_an_event_of_any_shape_shows_without_an_error(kind: tuple[str, str], fields: dict) -> None:
    method, event_type = kind
    event = {**fields, "type": event_type}
    for line in progress_lines(noterag.METHODS[method].progress, event):
        assert isinstance(line.plain, str)


def test_a_line_may_take_its_style_from_a_field_and_repeat_per_item() -> None:
    declared = {
        "toy": (
            Line(
                "{{ 'kept' if useful else 'dropped' }}", style="{{ 'green' if useful else 'red' }}"
            ),
            Line(Part("  why: ", "bold"), "{{ item }}", each="reasons", follows=True),
        )
    }
    shown = progress_lines(declared, {"type": "toy", "useful": False, "reasons": ["a", "b"]})
    assert [(line.plain, line.style, line.follows) for line in shown] == [
        ("dropped", "red", False),
        ("  why: a", "", True),
        ("  why: b", "", True),
    ]
    assert shown[1].segments == (("  why: ", "bold"), ("a", ""))


def test_the_trace_page_shows_the_lines_the_terminal_showed() -> None:
    events = [
        row["event"]
        for row in RECORDED
        if row["method"] == "amber" and row["event"]["type"] in ("filter", "sufficiency")
    ]
    run = {"method": "amber", "question": "q", "answer": "a", "trace": [], "events": events}
    lines = progress_for(run)
    declared = noterag.METHODS["amber"].progress
    expected = [line.plain for event in events for line in progress_lines(declared, event)]
    assert [("".join(text for text, _ in line["segments"])) for line in lines] == expected
    page = render_html(run)
    assert 'id="progress"' in page
    first = lines[0]
    assert f'class="p-{first["style"]}"' in page
    assert "".join(text for text, _ in first["segments"]) in page


def test_the_trace_page_escapes_an_events_text() -> None:
    hostile = {"type": "filter", "step": 0, "id": "p1", "title": "<script>x</script>", "useful": 1}
    page = render_html({"method": "amber", "question": "q", "answer": "a", "events": [hostile]})
    assert "<script>x" not in page and "&lt;script&gt;x&lt;/script&gt;" in page


# --------------------------------------------------------------------------- no terminal code

# The method layers: the algorithm only. Terminal code (rich, typer, click, the CLI, the
# terminal escaping) belongs to the applications.
METHOD_LAYERS = ("graphs", "nodes", "prompts")
TERMINAL = ("rich", "typer", "click", "noterag.cli", "noterag.base.terminal")


def terminal_imports(path: Path) -> list[str]:
    """The lines of ``path`` that import terminal code, as ``path:line: module``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        else:
            continue
        hits = [n for n in names if any(n == t or n.startswith(t + ".") for t in TERMINAL)]
        if hits:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {hits[0]}")
    return found


def test_no_graph_node_or_prompt_module_imports_terminal_code() -> None:
    modules = [p for layer in METHOD_LAYERS for p in sorted((ROOT / layer).rglob("*.py"))]
    assert len(modules) > 40
    found = [hit for path in modules for hit in terminal_imports(path)]
    assert found == [], "terminal code in the method layers:\n" + "\n".join(found)


def test_the_scan_names_the_module_and_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    module = tmp_path / "graphs" / "toy.py"
    module.parent.mkdir()
    module.write_text("import json\nfrom rich.text import Text\nimport rich\n", encoding="utf-8")
    assert terminal_imports(module) == ["graphs/toy.py:2: rich.text", "graphs/toy.py:3: rich"]
