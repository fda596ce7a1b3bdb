"""The trace viewer: one run rendered as a self-contained HTML page, laid out like the papers'
case-study tables (the question; per step the queries, the new passages, the note and what it
added, the verdict; the answer and its cost).

    noterag ask "..." --html run.html          # render the run just made
    noterag ask "..." --json > run.json
    noterag trace run.json --html run.html     # render a saved run (or one results.jsonl row)

A run is the final state of a graph plus what only the stream shows, recorded by ``Recorder``
(``RECORDED``: names no method's output may take): ``retrieved_passages`` (every passage read,
with its text: the output state keeps only ids), ``searches`` (each search's query, k and
passage ids), ``events`` (the custom progress events, e.g. Amber's reviewer/challenger/refiner
replies), ``method`` and ``elapsed_s``. An eval results.jsonl row carries the trace and costs
but no passage text; its passages show by id.

The page is one file with inline CSS, no script, no external resource, and a Content Security
Policy that forbids both; every value from the run is escaped (passage text is hostile input).
It is rendered by Jinja2 with autoescaping from templates shipped in the package
(noterag/trace/templates/trace.html.j2, trace.css and the step-card layouts under trace/); each
method's step cards have a layout of their own (``layout_for``, ``render_html``). Whatever the
layout draws, every passage the run read is on the page: those its step cards do not show are
listed after them, under the search that found them ("Also retrieved": e.g. DeepNote's
searches find more than the k new passages a step keeps).
"""

from __future__ import annotations

import difflib
import functools
import json
import re
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from noterag.base.errors import NoteragError
from noterag.base.files import atomic_write_text, check_output_file, file_starts_with
from noterag.core.progress import progress_lines
from noterag.core.step import RETRIEVAL


class TraceInputError(NoteragError):
    """A run file the viewer cannot read (missing, not JSON, not a run)."""


# What a recorded run adds to the method's output (``Recorder.run``, ``noterag ask --json``): no
# method's output field may have one of these names (tests/test_method_contracts.py checks it),
# or the recording would overwrite it.
RECORDED = ("retrieved_passages", "searches", "events", "elapsed_s", "method")


# --------------------------------------------------------------------------- recording


class Recorder:
    """Collects what the trace viewer needs while a graph streams with ``MODES``: the final
    state (``values``), the passages' text (the engine's ``retrieval`` events: the output state
    keeps only ids) and the method's own custom events."""

    MODES = ("custom", "values")

    def __init__(self, keys: Collection[str] | None = None) -> None:
        # the fields of the final state kept (a method's output schema), None: all
        self.keys = keys
        self.final: dict[str, Any] | None = None
        self.passages: dict[str, dict[str, Any]] = {}
        self.searches: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self._started = time.perf_counter()

    def feed(self, mode: str, chunk: Any) -> None:
        if mode == "values":
            # the values stream carries the whole state, the loop's working fields too
            keys = self.keys
            self.final = dict(chunk) if keys is None else {k: chunk[k] for k in chunk if k in keys}
        elif mode == "custom" and isinstance(chunk, dict):
            if chunk.get("type") != RETRIEVAL:
                self.events.append(chunk)
                return
            # First text wins: the text as retrieved (Amber's sentence filter rewrites it later;
            # the extracted sentences are in its events).
            found = [p for p in chunk.get("passages") or [] if isinstance(p, dict) and "id" in p]
            for passage in found:
                self.passages.setdefault(str(passage["id"]), dict(passage))
            self.searches.append(
                {
                    "query": chunk.get("query"),
                    "k": chunk.get("k"),
                    "passage_ids": [str(p["id"]) for p in found],
                }
            )

    def run(self, **meta: Any) -> dict[str, Any]:
        """The final state with ``retrieved_passages``, ``searches``, ``events`` and
        ``elapsed_s`` (and ``meta``)."""
        return (
            (self.final or {})
            | {
                "retrieved_passages": list(self.passages.values()),
                "searches": self.searches,
                "events": self.events,
                "elapsed_s": round(time.perf_counter() - self._started, 3),
            }
            | meta
        )


def record(
    graph: Any,
    question: str,
    context: Any = None,
    keys: Collection[str] | None = None,
    **meta: Any,
) -> dict[str, Any]:
    """Run ``graph`` on ``question`` and return the recorded run (for ``render_html``), with
    only the ``keys`` of its final state when given (a method's ``output_keys``)."""
    recorder = Recorder(keys)
    for mode, chunk in graph.stream(
        {"question": question}, context=context, stream_mode=list(Recorder.MODES)
    ):
        recorder.feed(mode, chunk)
    return recorder.run(**meta)


# --------------------------------------------------------------------------- loading


def load_run(path: str | Path, row_id: str | None = None) -> dict[str, Any]:
    """The run in ``path``: the JSON of ``noterag ask --json``, or one row of an eval run's
    results.jsonl (``row_id`` picks it when the file has several)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TraceInputError(f"run file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceInputError(f"cannot read {path}: {exc}") from None
    try:
        runs = [json.loads(text)]
    except json.JSONDecodeError:
        runs = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                runs.append(json.loads(line))
            except json.JSONDecodeError as exc:  # exc.lineno counts within the line: 1
                raise TraceInputError(
                    f"{path} is not JSON (line {number}: {exc.msg}); expected the output of "
                    "`noterag ask --json` or an eval results.jsonl"
                ) from None
    if row_id is not None:
        runs = [r for r in runs if isinstance(r, dict) and str(r.get("id")) == row_id]
        if not runs:
            raise TraceInputError(f"{path} has no run with id {row_id!r}")
    if not runs:
        raise TraceInputError(f"{path} is empty")
    if len(runs) > 1:
        raise TraceInputError(
            f"{path} holds {len(runs)} runs; pick one with --id (e.g. --id {runs[0].get('id')!r})"
            if isinstance(runs[0], dict)
            else f"{path} holds {len(runs)} JSON values, not one run"
        )
    run: dict[str, Any] = runs[0]  # checked just below
    check_run(run, str(path))
    return run


def check_run(run: Any, where: str = "the run") -> None:
    if not isinstance(run, dict) or not isinstance(run.get("question"), str) or "answer" not in run:
        raise TraceInputError(
            f"{where} is not a run: expected a JSON object with 'question' and 'answer' (the "
            "output of `noterag ask --json` or a row of an eval results.jsonl)"
        )


# What every page starts with (templates/trace.html.j2): how a page noterag wrote is told from
# a user's file that ``--html`` must not overwrite.
_PAGE_MARKERS = (b"<!DOCTYPE html>", b"<title>noterag trace")


def is_trace_page(path: str | Path) -> bool:
    """Whether ``path`` holds a trace page noterag wrote (its head has the page's markers)."""
    return file_starts_with(Path(path), *_PAGE_MARKERS)


def check_writable(path: str | Path, force: bool = False) -> None:
    """Refuse an HTML destination before a run is spent on it: a directory, a missing or
    unwritable directory, or an existing file that is not a trace page (unless ``force``)."""
    try:
        check_output_file(path, option="--html", ours=is_trace_page, what="a page", force=force)
    except NoteragError as exc:
        raise TraceInputError(str(exc)) from None


def write_html(run: Mapping[str, Any], path: str | Path, force: bool = False) -> Path:
    """Render ``run`` and write the page to ``path``, atomically (a reader, or a crash, never
    sees half a page); an existing file that is not a trace page is refused unless ``force``."""
    path = Path(path)
    check_writable(path, force)
    page = render_html(run)
    try:
        atomic_write_text(path, page)
    except OSError as exc:
        raise TraceInputError(f"cannot write {path}: {exc.strerror or exc}") from None
    return path


# --------------------------------------------------------------------------- rendering
# The page is noterag/trace/templates/trace.html.j2 (with trace.css); the step cards between the cost
# and the answer come from a layout, a template of its own: a built-in one under
# templates/trace/ (LAYOUTS), or a method's own template text.

# Which built-in layout each method's page uses (replaced by MethodSpec.trace_view in the
# registry).
# templates/trace/<name>.html.j2. "generic" lists each trace entry's fields: the layout of a
# method that names none (so a new method's page shows what it recorded, not a broken note run).
LAYOUTS = ("note", "amber", "resp", "single", "none", "generic")

Layout = str | jinja2.Template


def progress_for(run: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The run's progress lines, as ``noterag ask`` printed them (the method's declared lines,
    noterag.core.progress): per line its ``step``, ``style``, (text, style) ``segments`` and
    whether it ``follows`` the line before. A method noterag does not know: the shared steps'
    lines and generic ones."""
    from noterag.registry.methods import METHODS

    method = run.get("method")
    declared = METHODS[method].progress if isinstance(method, str) and method in METHODS else {}
    found: list[dict[str, Any]] = []
    for event in run.get("events") or []:
        if not isinstance(event, Mapping) or not isinstance(event.get("type"), str):
            continue
        if event["type"] == RETRIEVAL:
            continue
        for shown in progress_lines(declared, event):
            step = event.get("step")
            found.append(
                {
                    "step": step if isinstance(step, int) else None,
                    "style": shown.style,
                    "segments": shown.segments,
                    "follows": shown.follows,
                }
            )
    return found


def layout_for(method: str) -> Layout:
    """The layout of ``method``'s trace page, as its declaration says (``MethodSpec.trace_view``):
    a name from ``LAYOUTS``, template source text, or a template compiled by
    ``layout_template``. A method noterag does not know (a trace from elsewhere): generic."""
    from noterag.registry.methods import METHODS

    return METHODS[method].trace_view if method in METHODS else "generic"


def diff_words(old: str, new: str) -> list[tuple[str, str]]:
    """``new`` compared with ``old`` word by word (whitespace kept), as ``(kind, text)``
    segments: ``"ins"`` for what ``new`` adds, ``"del"`` for what it drops, ``""`` for the rest.
    The page shows them as <ins> and <del>."""
    a, b = re.split(r"(\s+)", old or ""), re.split(r"(\s+)", new or "")
    segments: list[tuple[str, str]] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op == "equal":
            segments.append(("", "".join(b[j1:j2])))
            continue
        dropped = "".join(a[i1:i2]).strip()
        if op in ("delete", "replace") and dropped:
            segments.append(("del", dropped))
        if op in ("insert", "replace"):
            added = "".join(b[j1:j2])
            core = added.strip()
            if not core:
                segments.append(("", added))
                continue
            # The spaces around the added words stay outside the highlight.
            lead, trail = added[: len(added) - len(added.lstrip())], added[len(added.rstrip()) :]
            segments += [("", lead), ("ins", core), ("", trail)]
    return [(kind, text) for kind, text in segments if text]


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


_ENV = jinja2.Environment(
    # Package data, so an installed wheel finds the templates as the checkout does.
    loader=jinja2.PackageLoader("noterag.trace", "templates"),
    # Every template here is HTML, a method's own layout included: escaping is the default.
    autoescape=True,
    # A misspelt name fails the page instead of printing nothing; templates read the run's
    # fields with .get(), so a field a run lacks is None.
    undefined=jinja2.StrictUndefined,
    # None prints as nothing (a field a row does not have).
    finalize=lambda value: "" if value is None else value,
    trim_blocks=True,
    lstrip_blocks=True,
)
_ENV.filters["json"] = _json
_ENV.globals["diff_words"] = diff_words


def layout_template(source: str) -> jinja2.Template:
    """Compile a method's own layout (step cards) from template text, with the page's
    autoescaping. It sees what the built-in layouts see (``render_html``)."""
    try:
        return _compile(source)
    except jinja2.TemplateSyntaxError as exc:
        raise TraceInputError(f"trace layout, line {exc.lineno}: {exc.message}") from None


@functools.lru_cache(maxsize=64)
def _compile(source: str) -> jinja2.Template:
    return _ENV.from_string(source)


def _template(layout: Layout) -> jinja2.Template:
    if isinstance(layout, jinja2.Template):
        # A template compiled elsewhere has that environment's escaping (often none).
        if layout.environment is not _ENV:
            raise TypeError("compile a trace layout with noterag.trace.page.layout_template")
        return layout
    if layout in LAYOUTS:
        return _ENV.get_template(f"trace/{layout}.html.j2")
    return layout_template(layout)


def _guess_layout(trace: Sequence[Mapping[str, Any]]) -> str:
    """The layout of a run that does not name its method (``record`` without ``method=``):
    judged from the trace's shape, as the viewer did before layouts followed the method. Every
    run ``noterag ask --json`` or an eval writes names it."""
    if any("sub_question" in e for e in trace):
        return "resp"
    if any("sufficient" in e or "dropped_passage_ids" in e for e in trace):
        return "amber"
    return "note" if trace else "single"


# What the page header says for a run without a method's name.
_GUESSED_KIND = {"resp": "ReSP", "amber": "note", "note": "note", "single": "single pass"}


def _number(value: Any) -> Any:
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else value


def _cost(run: Mapping[str, Any]) -> list[tuple[str, str, Any]]:
    """The cost cards: (key, label, value) for each figure the run has."""
    passages = run.get("passages")
    if not isinstance(passages, int):
        passages = len(run.get("passage_ids") or [])
    wall = run.get("elapsed_s", run.get("latency_s"))
    cells = [
        ("llm_calls", "LLM calls", run.get("llm_calls")),
        ("prompt_tokens", "Prompt tokens", run.get("prompt_tokens")),
        ("completion_tokens", "Completion tokens", run.get("completion_tokens")),
        ("passages", "Passages", passages),
        ("steps", "Steps", run.get("steps")),
        ("failures", "Failed steps", run.get("failures")),
        ("wall_time", "Wall time", None if wall is None else f"{float(wall):.1f} s"),
    ]
    return [(key, label, _number(value)) for key, label, value in cells if value is not None]


def render_html(run: Mapping[str, Any], layout: Layout | None = None) -> str:
    """One self-contained HTML page for ``run`` (see the module docstring).

    ``layout`` draws the step cards: a name from ``LAYOUTS``, a method's own template text, or
    a template from ``layout_template``; by default the layout of the run's method
    (``layout_for``). A layout sees ``run``; ``trace`` (its entries that are objects);
    ``passages`` (id -> passage, the text recorded by ``Recorder``); ``events(type, step)`` (the
    custom events of that type at that step); ``diff_words(old, new)``; and the card macros of
    ``trace/_cards.html.j2`` once it imports them. A passage it draws with the ``passage`` macro
    (``passage_list``) counts as shown; every other passage the run read is listed after the
    step cards, under the search that found it (``unshown``).
    """
    check_run(run)
    trace = [e for e in run.get("trace") or [] if isinstance(e, Mapping)]
    method = run.get("method")
    if layout is None:
        layout = layout_for(str(method)) if method else _guess_layout(trace)
    events = [e for e in run.get("events") or [] if isinstance(e, Mapping)]

    def step_events(kind: str, step: Any) -> list[Mapping[str, Any]]:
        return [e for e in events if e.get("type") == kind and e.get("step") == step]

    shown: set[str] = set()

    def drawn(pid: Any) -> str:  # called by the passage macro (trace/_cards.html.j2)
        shown.add(str(pid))
        return ""

    passages = {str(p.get("id")): p for p in recorded_passages(run) if isinstance(p, Mapping)}
    context = {
        "run": run,
        "trace": trace,
        "passages": passages,
        "events": step_events,
        "drawn": drawn,
    }
    try:
        # the step cards first, so that what they drew is known when the page lists the rest
        cards = _template(layout).render(context)
        return _ENV.get_template("trace.html.j2").render(
            context,
            method=method or _GUESSED_KIND[_guess_layout(trace)],
            cost=_cost(run),
            cards=Markup(cards),  # rendered with autoescaping
            unshown=unshown(run, passages, shown),
            progress=progress_for(run),
        )
    except jinja2.TemplateError as exc:  # a method's own layout that reads what is not there
        raise TraceInputError(f"cannot render the trace page: {exc}") from None


def recorded_passages(run: Mapping[str, Any]) -> list[Any]:
    """The passages a run recorded with their text (``retrieved_passages``)."""
    found = run.get("retrieved_passages")
    return found if isinstance(found, list) else []


def unshown(
    run: Mapping[str, Any], passages: Mapping[str, Any], shown: Collection[str]
) -> list[dict[str, Any]]:
    """The passages the run read that the step cards did not draw, as the searches that found
    them (``{"query", "passage_ids"}``, in the run's order), then the ids no recorded search
    holds (an eval row records none: its ``passage_ids``) under the query None."""
    seen = set(shown)
    found: list[dict[str, Any]] = []
    for search in run.get("searches") or []:
        if not isinstance(search, Mapping) or not isinstance(search.get("passage_ids"), list):
            continue
        ids = list(dict.fromkeys(str(i) for i in search["passage_ids"] if str(i) not in seen))
        if ids:
            found.append({"query": search.get("query"), "passage_ids": ids})
            seen.update(ids)
    kept = run.get("passage_ids")
    rest = [str(i) for i in (kept if isinstance(kept, list) else []) if str(i) not in seen]
    rest = list(dict.fromkeys([*rest, *(pid for pid in passages if pid not in seen)]))
    if rest:
        found.append({"query": None, "passage_ids": rest})
    return found
