"""The trace viewer: one run rendered as a self-contained HTML page, laid out like the papers'
case-study tables (the question; per step the queries, the new passages, the note and what it
added, the verdict; the answer and its cost).

    noterag ask "..." --html run.html          # render the run just made
    noterag ask "..." --json > run.json
    noterag trace run.json --html run.html     # render a saved run (or one results.jsonl row)

A run is the final state of a graph plus what only the stream shows, recorded by ``Recorder``:
``retrieved`` (every passage read, with its text: the output state keeps only ids), ``events``
(the custom progress events, e.g. Amber's reviewer/challenger/refiner replies), ``method`` and
``elapsed_s``. An eval results.jsonl row carries the trace and costs but no passage text; its
passages show by id.

The page is one file with inline CSS, no script, no external resource, and a Content Security
Policy that forbids both; every value from the run is escaped (passage text is hostile input).
"""

from __future__ import annotations

import difflib
import html
import json
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from noterag.errors import NoteragError


class TraceInputError(NoteragError):
    """A run file the viewer cannot read (missing, not JSON, not a run)."""


# --------------------------------------------------------------------------- recording


class Recorder:
    """Collects what the trace viewer needs while a graph streams with ``MODES``: the final
    state (``values``), the passages' text (the nodes' ``updates``: the output state keeps only
    ids) and the custom events."""

    MODES = ("custom", "updates", "values")

    def __init__(self) -> None:
        self.final: dict[str, Any] | None = None
        self.passages: dict[str, dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        self._started = time.perf_counter()

    def feed(self, mode: str, chunk: Any) -> None:
        if mode == "values":
            self.final = dict(chunk)
        elif mode == "custom" and isinstance(chunk, dict):
            self.events.append(chunk)
        elif mode == "updates" and isinstance(chunk, dict):
            for update in chunk.values():
                if not isinstance(update, dict):
                    continue
                # First text wins: retrieval comes before Amber's sentence filter rewrites it
                # (the extracted sentences are in the events).
                for passage in update.get("passages") or []:
                    if isinstance(passage, dict) and "id" in passage:
                        self.passages.setdefault(str(passage["id"]), dict(passage))

    def run(self, **meta: Any) -> dict[str, Any]:
        """The final state with ``retrieved``, ``events`` and ``elapsed_s`` (and ``meta``)."""
        return (
            (self.final or {})
            | {
                "retrieved": list(self.passages.values()),
                "events": self.events,
                "elapsed_s": round(time.perf_counter() - self._started, 3),
            }
            | meta
        )


def record(graph: Any, question: str, context: Any = None, **meta: Any) -> dict[str, Any]:
    """Run ``graph`` on ``question`` and return the recorded run (for ``render_html``)."""
    recorder = Recorder()
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
    run = runs[0]
    check_run(run, str(path))
    return run


def check_run(run: Any, where: str = "the run") -> None:
    if not isinstance(run, dict) or not isinstance(run.get("question"), str) or "answer" not in run:
        raise TraceInputError(
            f"{where} is not a run: expected a JSON object with 'question' and 'answer' (the "
            "output of `noterag ask --json` or a row of an eval results.jsonl)"
        )


def check_writable(path: str | Path) -> None:
    """Refuse an HTML destination that cannot be written, before a run is spent on it."""
    path = Path(path)
    if path.is_dir():
        raise TraceInputError(f"--html {path} is a directory; give a file name")
    if not path.parent.is_dir():
        raise TraceInputError(f"--html {path}: directory {path.parent} does not exist")


def write_html(run: Mapping[str, Any], path: str | Path) -> Path:
    path = Path(path)
    check_writable(path)
    page = render_html(run)
    try:
        path.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise TraceInputError(f"cannot write {path}: {exc.strerror or exc}") from None
    return path


# --------------------------------------------------------------------------- rendering


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def word_diff(old: str, new: str) -> str:
    """``new`` as HTML with what it adds to ``old`` in <ins> and what it drops in <del>, word by
    word (whitespace kept)."""
    a, b = re.split(r"(\s+)", old or ""), re.split(r"(\s+)", new or "")
    out = []
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            out.append(esc("".join(b[j1:j2])))
            continue
        if op in ("delete", "replace") and "".join(a[i1:i2]).strip():
            out.append(f"<del>{esc(''.join(a[i1:i2]).strip())}</del>")
        if op in ("insert", "replace"):
            # The spaces around the added words stay outside the highlight.
            lead, core, trail = re.fullmatch(
                r"(\s*)(.*?)(\s*)", "".join(b[j1:j2]), re.DOTALL
            ).groups()
            out.append(esc(lead) + (f"<ins>{esc(core)}</ins>" if core else "") + esc(trail))
    return "".join(out)


def _bool_text(value: Any) -> str:
    return "—" if value is None else str(bool(value))


def _verdict(label: str, value: Any, detail: str = "") -> str:
    kind = "none" if value is None else ("true" if value else "false")
    extra = f' <span class="why">({esc(detail)})</span>' if detail else ""
    return (
        f'<span class="verdict v-{kind}" data-verdict="{kind}">{esc(label)}: '
        f"<b>{_bool_text(value)}</b></span>{extra}"
    )


def _row(label: str, body: str, cls: str = "") -> str:
    attr = f' class="{cls}"' if cls else ""
    return f"<tr{attr}><th>{esc(label)}</th><td>{body}</td></tr>"


def _table(rows: Iterable[str]) -> str:
    return f'<table class="grid">{"".join(rows)}</table>'


def _number(value: Any) -> Any:
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else value


def _queries(queries: Iterable[Any]) -> str:
    items = [f"<li>{esc(q)}</li>" for q in queries]
    if not items:
        return '<span class="muted">none</span>'
    # A lone query needs no number.
    return f'<ol class="queries{" one" if len(items) == 1 else ""}">{"".join(items)}</ol>'


def _pre(text: Any, cls: str = "text") -> str:
    return f'<div class="{cls}">{esc(text)}</div>'


class _Page:
    def __init__(self, run: Mapping[str, Any]) -> None:
        self.run = run
        self.passages = {
            str(p.get("id")): p for p in run.get("retrieved") or [] if isinstance(p, Mapping)
        }
        self.events = [e for e in run.get("events") or [] if isinstance(e, Mapping)]

    def passage_list(self, ids: Sequence[Any], dropped: Sequence[Any] = ()) -> str:
        if not ids and not dropped:
            return '<span class="muted">no new passages</span>'
        items = []
        for pid, gone in [(i, False) for i in ids] + [(i, True) for i in dropped]:
            p = self.passages.get(str(pid))
            title = (p or {}).get("title") or pid
            tag = '<span class="tag dropped">filtered out</span> ' if gone else ""
            head = (
                f'{tag}<span class="ptitle">{esc(title)}</span> <span class="pid">{esc(pid)}</span>'
            )
            body = (
                _pre(p.get("text"))
                if p
                else '<div class="muted">text not recorded in this run file</div>'
            )
            cls = "passage dropped" if gone else "passage"
            summary = f"<summary>{head}</summary>"
            items.append(
                f'<li><details class="{cls}" data-id="{esc(pid)}">{summary}{body}</details></li>'
            )
        return f'<ul class="passages">{"".join(items)}</ul>'

    def step_events(self, step: Any, kind: str) -> list[Mapping[str, Any]]:
        return [e for e in self.events if e.get("type") == kind and e.get("step") == step]

    # ---- one section per trace entry

    def note_steps(self, trace: list[Mapping[str, Any]]) -> list[str]:
        sections, best = [], None
        amber = any("sufficient" in e or "dropped_passage_ids" in e for e in trace)
        for entry in trace:
            step, cand = entry.get("step"), entry.get("candidate_note")
            rows = [
                _row("Queries", _queries(entry.get("queries") or [])),
                _row(
                    "New passages",
                    self.passage_list(
                        entry.get("new_passage_ids") or [], entry.get("dropped_passage_ids") or []
                    ),
                ),
            ]
            if amber:
                sentences = self.step_events(step, "sentences")
                if sentences:
                    rows.append(_row("Helpful sentences", self.sentences(sentences[-1])))
                for agent_event in self.step_events(step, "memory_review"):
                    agent = str(agent_event.get("agent") or "agent")
                    rows.append(
                        _row(agent.capitalize(), _pre(agent_event.get("text"), "text agent"))
                    )
            initial = best is None and entry.get("verdict") is None
            label = (
                ("Initial memory" if amber else "Initial note")
                if initial
                else ("Candidate memory" if amber else "Candidate note")
            )
            if cand is None:
                note_html = '<span class="muted">no candidate (nothing new to read)</span>'
            elif initial:
                note_html = f'<div class="note">{esc(cand)}</div>'
            else:
                note_html = f'<div class="note diff">{word_diff(best or "", cand)}</div>'
            rows.append(_row(label, note_html))
            if not initial:
                reason = str(entry.get("reason") or "")
                rows.append(
                    _row(
                        "Verdict",
                        _verdict(
                            "knowledge growth",
                            entry.get("verdict"),
                            "" if reason == "reviewed" else reason,
                        ),
                    )
                )
            if amber and "sufficient" in entry:
                rows.append(
                    _row(
                        "Sufficient?",
                        _verdict(
                            "memory sufficient",
                            entry.get("sufficient"),
                            str(entry.get("sufficiency_reason") or ""),
                        ),
                    )
                )
            if initial:
                best = cand or ""
            elif entry.get("verdict"):
                best = cand
            sections.append(self.section(step, rows, entry))
        return sections

    def sentences(self, event: Mapping[str, Any]) -> str:
        items = "".join(
            f'<li><span class="ptitle">{esc(p.get("title"))}</span>{_pre(p.get("text"))}</li>'
            for p in event.get("passages") or []
            if isinstance(p, Mapping)
        )
        return f'<ul class="plain">{items}</ul>'

    def resp_steps(self, trace: list[Mapping[str, Any]]) -> list[str]:
        sections = []
        for entry in trace:
            rows = [_row("Sub-question", _queries([entry.get("sub_question") or ""]))]
            if entry.get("refused"):
                rows.append(
                    _row("Plan", f'<span class="v-false">refused: {esc(entry["refused"])}</span>')
                )
            else:
                # ReSP reads every passage its sub-question finds, seen before or not.
                rows.append(_row("Passages", self.passage_list(entry.get("passage_ids") or [])))
                rows.append(_row("Global evidence", _pre(entry.get("global_summary"), "note")))
                local = entry.get("local_summary")
                if isinstance(local, Mapping):
                    rows.append(
                        _row(
                            "Local pathway",
                            _pre(
                                f"{local.get('sub_question', '')} {local.get('response', '')}",
                                "note",
                            ),
                        )
                    )
                rows.append(
                    _row(
                        "Judge",
                        _verdict(
                            "enough to answer",
                            entry.get("sufficient"),
                            "" if entry.get("judge_parsed", True) else "reply did not parse",
                        ),
                    )
                )
            sections.append(self.section(entry.get("step"), rows, entry))
        return sections

    def baseline_step(self) -> list[str]:
        ids = self.run.get("passage_ids")
        if ids is None or self.run.get("method") == "no-retrieval":
            return []
        return [
            self.section(
                0,
                [
                    _row("Query", _queries([self.run.get("question")])),
                    _row("Passages", self.passage_list(ids)),
                ],
                {},
                "Retrieval",
            )
        ]

    def section(
        self, step: Any, rows: list[str], entry: Mapping[str, Any], title: str | None = None
    ) -> str:
        calls = entry.get("llm_calls")
        meta = (
            f'<span class="calls">{esc(calls)} LLM {"call" if calls == 1 else "calls"}</span>'
            if calls is not None
            else ""
        )
        # A note method's review colours the step (ReSP's judge is no verdict on a note).
        verdict = entry.get("verdict")
        state = "" if verdict is None else (" accepted" if verdict else " rejected")
        return (
            f'<section class="step{state}" id="step-{esc(step)}" data-step="{esc(step)}">'
            f"<h2>{esc(title or f'Step {step}')}{meta}</h2>{_table(rows)}</section>"
        )

    # ---- the page

    def cost(self) -> str:
        run = self.run
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
        body = "".join(
            f'<div class="stat" data-key="{key}"><span class="num">'
            f"{esc(_number(value))}"
            f'</span><span class="lbl">{esc(label)}</span></div>'
            for key, label, value in cells
            if value is not None
        )
        stop = run.get("stop_reason")
        stop_html = (
            f'<p class="stop" data-key="stop_reason">Stopped: {esc(stop)}</p>' if stop else ""
        )
        return f'<div class="cost">{body}</div>{stop_html}'

    def render(self) -> str:
        run = self.run
        trace = [e for e in run.get("trace") or [] if isinstance(e, Mapping)]
        if any("sub_question" in e for e in trace):
            kind, sections = "ReSP", self.resp_steps(trace)
        elif trace:
            kind, sections = "note", self.note_steps(trace)
        else:
            kind, sections = "single pass", self.baseline_step()
        method = run.get("method") or kind
        final_rows = []
        if run.get("best_note") is not None and trace and kind == "note":
            final_rows.append(_row("Best note", f'<div class="note">{esc(run["best_note"])}</div>'))
        if run.get("memory") is not None:
            final_rows.append(_row("Memory", _pre(run["memory"], "note")))
        if run.get("error"):
            final_rows.append(_row("Error", f'<span class="v-false">{esc(run["error"])}</span>'))
        final_rows.append(
            _row("Answer", f'<div class="answer">{esc(run.get("answer"))}</div>', "answer-row")
        )
        golds = run.get("golds")
        if golds:
            final_rows.append(_row("Gold", esc(" | ".join(map(str, golds)))))
        title = f"noterag trace · {method}"
        return (
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
            "style-src 'unsafe-inline'\">"
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{esc(title)}</title><style>{CSS}</style></head><body><main>"
            f'<header><div class="method">{esc(method)}</div>'
            f'<h1 class="question">{esc(run.get("question"))}</h1></header>'
            f"{self.cost()}{''.join(sections)}"
            f'<section class="final" id="final"><h2>Answer</h2>{_table(final_rows)}</section>'
            "<footer>Rendered by noterag trace. <ins>Green</ins>: what a note adds to the best "
            "note before it; <del>struck</del>: what it drops.</footer></main></body></html>\n"
        )


def render_html(run: Mapping[str, Any]) -> str:
    """One self-contained HTML page for ``run`` (see the module docstring)."""
    check_run(run)
    return _Page(run).render()


CSS = """
:root{--ink:#1d2330;--muted:#6b7384;--line:#d9dde5;--bg:#f5f6f8;--card:#fff;--accent:#2f5da8}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--ink);
font:15px/1.5 -apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
main{max-width:1100px;margin:0 auto;padding:28px 24px 40px}
header{margin-bottom:14px}
.method{display:inline-block;font-size:12px;letter-spacing:.06em;text-transform:uppercase;
color:#fff;background:var(--accent);border-radius:4px;padding:2px 8px}
h1{font-size:22px;margin:8px 0 0;font-weight:600}
h2{font-size:15px;margin:0;padding:8px 14px;background:#eef1f6;border-bottom:1px solid var(--line);
display:flex;justify-content:space-between;align-items:baseline}
.calls{font-weight:400;font-size:12px;color:var(--muted)}
.cost{display:flex;flex-wrap:wrap;gap:10px;margin:14px 0 6px}
.stat{background:var(--card);border:1px solid var(--line);border-radius:6px;padding:8px 14px;
min-width:110px}
.stat .num{display:block;font-size:19px;font-weight:600}
.stat .lbl{font-size:12px;color:var(--muted)}
.stop{margin:4px 0 18px;color:var(--muted);font-size:13px}
section{background:var(--card);border:1px solid var(--line);border-radius:6px;margin:14px 0;
overflow:hidden}
table.grid{width:100%;border-collapse:collapse}
table.grid th{width:150px;text-align:left;vertical-align:top;font-weight:600;font-size:13px;
color:var(--muted);padding:9px 14px;border-top:1px solid var(--line);background:#fafbfc}
table.grid td{padding:9px 14px;border-top:1px solid var(--line);vertical-align:top}
table.grid tr:first-child th,table.grid tr:first-child td{border-top:0}
ol.queries{margin:0;padding-left:20px}
ol.queries.one{list-style:none;padding-left:0}
section.accepted{border-left:4px solid #3f9b57}
section.rejected{border-left:4px solid #c24a4a}
ul.passages,ul.plain{list-style:none;margin:0;padding:0}
ul.passages li,ul.plain li{margin:2px 0}
details summary{cursor:pointer}
.ptitle{font-weight:600}
.pid{color:var(--muted);font-size:12px;font-family:ui-monospace,Menlo,Consolas,monospace}
.text{white-space:pre-wrap;font-size:13.5px;color:#333a48;background:#f7f8fa;
border-left:3px solid var(--line);padding:6px 10px;margin:4px 0 6px}
.agent{background:#fbfaf4}
.note{white-space:pre-wrap}
.dropped .ptitle{text-decoration:line-through;color:var(--muted)}
.tag{font-size:11px;border-radius:3px;padding:0 5px;background:#f3e1e1;color:#8a2a2a}
ins{background:#d5f2d9;color:#14532d;text-decoration:none;border-radius:2px;padding:0 1px}
del{background:#f8dcdc;color:#7f1d1d;border-radius:2px;padding:0 1px;margin:0 3px}
.verdict{display:inline-block;border-radius:4px;padding:1px 8px;font-size:13.5px}
.v-true{background:#d5f2d9;color:#14532d}
.v-false{background:#f8dcdc;color:#7f1d1d}
.v-none{background:#eceef2;color:#4b5263}
.why{color:var(--muted);font-size:13px}
.muted{color:var(--muted)}
.answer{font-size:17px;font-weight:600;white-space:pre-wrap}
footer{color:var(--muted);font-size:12px;margin-top:18px}
"""
