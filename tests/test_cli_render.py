"""The CLI's progress lines (noterag.cli.render): the shared steps' lines, a method's declared
lines on top, a generic line for an event type nobody declares, and what is no event passes
silently."""

from __future__ import annotations

import io
from dataclasses import replace
from typing import Any

from rich.console import Console

from noterag.cli.render import Progress
from noterag.core.progress import Line
from noterag.core.spec import MethodSpec
from noterag.registry.methods import METHODS


def progress_lines(method: str | MethodSpec, *events: Any) -> list[str]:
    out = io.StringIO()
    spec = method if isinstance(method, MethodSpec) else METHODS[method]
    progress = Progress(Console(file=out, width=200, highlight=False), spec)
    with progress.live():
        for event in events:
            progress.event(event)
    return out.getvalue().splitlines()


def test_what_is_no_event_prints_nothing() -> None:
    assert (
        progress_lines(
            "deepnote",
            {"type": ["unhashable"], "step": 1},
            {"step": 1},
            "not a dict",
            None,
        )
        == []
    )


def test_each_line_carries_its_step() -> None:
    lines = progress_lines(
        "deepnote",
        {"type": "passages", "step": 0, "passages": [{"id": "p1", "title": "Velmora Bridge"}]},
        {"type": "queries", "step": 1, "queries": ["who built it", "when"]},
        {"type": "queries", "step": 2, "queries": []},
        {"type": "verdict", "step": 2, "accepted": False, "reason": "no new facts"},
    )
    assert lines == [
        "[step 0] retrieved 1 passage for the question: Velmora Bridge",
        "[step 1] new query: who built it",
        "[step 1] new query: when",
        "[step 2] no new query",
        "[step 2] note rejected (no new facts)",
    ]


def test_a_methods_own_lines_win_and_add_event_types() -> None:
    own = {
        "verdict": Line("toy verdict {{ accepted }}"),
        "toy_event": Line("toy saw {{ n }}"),
    }
    toy = replace(METHODS["deepnote"], name="toy", progress=own)
    events = (
        {"type": "verdict", "step": 1, "accepted": True},
        {"type": "toy_event", "step": 2, "n": 3},
    )
    assert progress_lines(toy, *events) == ["[step 1] toy verdict True", "[step 2] toy saw 3"]
    # Other methods keep the shared steps' lines, which have none for the toy's event: its
    # generic line (tests/test_method_traps.py tests that line)
    assert progress_lines("deepnote", *events) == [
        "[step 1] note accepted",
        "[step 2] toy_event: n=3",
    ]
    assert METHODS["deepnote"].progress == {}
