"""The reproduced table: per cell the published value, ours, Δ (ours − published) and our 95%
confidence interval, as a terminal table, ``table.md``, ``table.json`` and ``table.png``.

Our value of a cell is the mean over the run's questions of this invocation (after ``--limit``
and ``--shard``) of the column's metric per question, a failed question counting 0 as in every
summary. The ``avg`` column is, per question, the mean of the dataset's other columns in the
table (DeepNote's avg. is the mean of its acc., f1 and em), then averaged. The interval is the
percentile bootstrap over questions (``noterag.eval.significance.mean_interval``: 10,000
resamples, seed 0); a cell whose published value lies outside it is marked ``*``. With few
questions (a smoke run) the interval is wide or, below two questions, absent: read it so.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from noterag.base.errors import NoteragError
from noterag.base.files import atomic_write_bytes, atomic_write_text
from noterag.base.terminal import terminal_safe_json
from noterag.reproduce.plan import Cell, Missing, Plan
from noterag.reproduce.run import Outcome
from noterag.reproduce.tables import JUDGED_METRICS

AVG = "avg"
MARK = "*"
FILES = ("table.md", "table.json", "table.png")


@dataclass(frozen=True)
class CellResult:
    cell: Cell
    row_label: str
    column_label: str
    ours: float | None  # None: skipped row, run not made, metric we do not compute
    ci_low: float | None
    ci_high: float | None
    n: int  # questions scored
    expected: int  # questions of this invocation
    note: str  # why there is no value, or "" when there is

    @property
    def delta(self) -> float | None:
        if self.ours is None or self.cell.published_value is None or self.cell.not_comparable:
            return None
        return self.ours - self.cell.published_value

    @property
    def outside(self) -> bool | None:
        """Whether the published value lies outside our interval (None: not decidable, or the
        cell not comparable)."""
        published = self.cell.published_value
        if published is None or self.ci_low is None or self.ci_high is None:
            return None
        if self.cell.not_comparable:
            return None
        return not self.ci_low <= published <= self.ci_high


def score_cells(plan: Plan, outcomes: Sequence[Outcome], judge: Any = None) -> list[CellResult]:
    """Every cell of the plan with our value and interval from the runs' directories; the
    judged cells (CRUD's RAGQuestEval) with ``judge``, the chat model ``plan.judge`` names
    (its replies kept in each run's ``questeval.jsonl``: scoring again asks nothing)."""
    from noterag.eval.runs import read_run
    from noterag.eval.significance import mean_interval

    by_run = {o.run.name: o for o in outcomes}
    rows_by_run: dict[str, dict[str, dict[str, Any]]] = {}
    skipped = {s.row: s.reason for s in plan.skipped}
    table = plan.table
    results = []
    for cell in plan.cells:
        row_label = table.row_title(cell.row)
        column_label = table.columns[cell.column].label
        outcome = by_run.get(cell.run) if cell.run else None
        ours = low = high = None
        n = expected = 0
        if cell.unscored and cell.row not in skipped:
            note = f"not scored: {cell.unscored}"
        elif outcome is None:
            note = f"skipped: {skipped.get(cell.row, 'not run')}"
        elif outcome.status == "blocked":
            note = "inputs missing (see the plan)"
        else:
            expected, name = len(outcome.ids), outcome.run.name
            if name not in rows_by_run:
                _, rows = read_run(outcome.run_dir)
                wanted = set(outcome.ids)
                rows_by_run[name] = {r["id"]: r for r in rows if r["id"] in wanted}
            if cell.metric in JUDGED_METRICS:
                values = _judged(plan, cell, outcome, list(rows_by_run[name].values()), judge)
            else:
                values = _per_question(plan, cell, list(rows_by_run[name].values()))
            n = len(values) if values is not None else 0
            if values is None:
                note = f"our runs do not compute {cell.metric}"
            elif not values:
                note = "no question answered yet"
            else:
                ours = sum(values) / len(values)
                low, high = mean_interval(values)
                failed = sum(1 for r in rows_by_run[name].values() if r.get("error"))
                notes = [f"{n} of {expected} questions"] if n != expected else []
                if failed:
                    notes.append(f"{failed} {FAILED}")
                note = "; ".join(notes)
        if cell.not_comparable:
            note = "; ".join(filter(None, [f"{NOT_COMPARABLE}: {cell.not_comparable}", note]))
        if cell.approximate and cell.run:
            note = "; ".join(filter(None, [note, f"{APPROXIMATE}: {cell.approximate}"]))
        results.append(
            CellResult(cell, row_label, column_label, ours, low, high, n, expected, note)
        )
    return results


QUESTEVAL_FILE = "questeval.jsonl"


def _judged(
    plan: Plan, cell: Cell, outcome: Outcome, rows: list[dict[str, Any]], judge: Any
) -> list[float] | None:
    """The judged metric per question that counts (RAGQuestEval: a judge reply that cannot be
    paired with the questions is left out, as Adaptive-Note's average leaves it out); None:
    no judge, or no ground truth to judge against."""
    from noterag.eval import questeval

    ds = plan.table.datasets[cell.dataset]
    if judge is None or plan.judge is None or ds.ground_truth is None or plan.data is None:
        return None
    files = sorted((plan.data / ds.ground_truth.path).glob("*_quest_gt_save.json"))
    truth = questeval.load_ground_truth(files)
    scores = questeval.score_outputs(
        judge, rows, truth, outcome.run_dir / QUESTEVAL_FILE, label=plan.judge
    )
    return [getattr(s, cell.metric) for s in scores.values() if s.valid]


def _per_question(plan: Plan, cell: Cell, rows: list[dict[str, Any]]) -> list[float] | None:
    """The cell's metric per question; ``avg``: the mean of the dataset's other columns. None
    when a question lacks one of them (a metric of another task, one we do not compute)."""
    if cell.metric == AVG:
        metrics = [
            c.metric for c in plan.table.columns if c.dataset == cell.dataset and c.metric != AVG
        ]
    else:
        metrics = [cell.metric]
    if not metrics:
        return None
    values = []
    for row in rows:
        scores = row.get("metrics") or {}
        if any(m not in scores for m in metrics):
            return None
        values.append(sum(scores[m] for m in metrics) / len(metrics))
    return values


# --------------------------------------------------------------------------- rendering


def _num(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "–"
    return f"{value:+.1f}" if signed else f"{value:.1f}"


def _ci(result: CellResult) -> str:
    if result.ci_low is None or result.ci_high is None:
        return "–"
    return f"[{result.ci_low:.1f}, {result.ci_high:.1f}]"


def _published(result: CellResult) -> str:
    return result.cell.published if result.cell.published is not None else "–"


HEADINGS = ("row", "column", "published", "ours", "Δ", "95% CI", "n", "")


def _cells_text(result: CellResult) -> list[str]:
    mark = MARK if result.outside else ""
    return [
        result.row_label,
        f"{result.cell.dataset} {result.column_label}",
        _published(result),
        _num(result.ours),
        _num(result.delta, signed=True),
        _ci(result) + mark,
        str(result.n) if result.expected else "–",
        result.note,
    ]


def caption(plan: Plan) -> str:
    table = plan.table
    data = str(plan.data) if plan.data else "the shipped sample (6 questions), not the paper's data"
    limit = f", --limit {plan.limit}" if plan.limit else ""
    return (
        f"{table.id}: {table.title} Published: {plan.backbone}. Ours: {plan.model} on {data}"
        f"{limit}."
    )


LEGEND = f"{MARK} the published value lies outside our 95% bootstrap interval over questions."
FAILED = "failed"
APPROXIMATE = "approximate index"
NOT_COMPARABLE = "not comparable"
NOT_COMPARABLE_LEGEND = (
    "not comparable: the paper's value is shown, ours beside it, with no Δ and never starred."
)
FAILED_LEGEND = "failed questions count 0; `noterag reproduce ... --retry-errors` asks them again."


def legends(results: Sequence[CellResult]) -> list[str]:
    """The lines under the table: the mark, and what to do about failed questions if any."""
    failed = any(FAILED in r.note for r in results)
    apart = any(r.cell.not_comparable for r in results)
    return (
        [LEGEND] + ([FAILED_LEGEND] if failed else []) + ([NOT_COMPARABLE_LEGEND] if apart else [])
    )


def markdown(plan: Plan, results: Sequence[CellResult]) -> str:
    """table.md. Text from the table file (labels, reasons, the title) is written
    ``printable``: a ``cat table.md`` meets no escape sequence."""
    from noterag.base.terminal import printable

    def one_line(text: str) -> str:
        return " ".join(printable(text).split())

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(one_line(c).replace("|", "\\|") for c in cells) + " |"

    lines = [f"# {one_line(caption(plan))}", "", line(HEADINGS), line(["---"] * len(HEADINGS))]
    lines += [line(_cells_text(r)) for r in results]
    lines += ["", *legends(results)]
    if plan.skipped:
        lines += ["", "Skipped rows:", ""]
        lines += [one_line(f"- {s.label} ({s.row}): {s.reason}") for s in plan.skipped]
    return "\n".join(lines) + "\n"


def as_json(plan: Plan, results: Sequence[CellResult], outcomes: Sequence[Outcome]) -> Any:
    return {
        "table": plan.table.id,
        "title": plan.table.title,
        "backbone": plan.backbone,
        "model": plan.model,
        "data": str(plan.data) if plan.data else None,
        "limit": plan.limit,
        "cells": [
            asdict(r.cell)
            | {
                "row_label": r.row_label,
                "column_label": r.column_label,
                "ours": r.ours,
                "delta": r.delta,
                "ci95": [r.ci_low, r.ci_high] if r.ci_low is not None else None,
                "published_outside_ci": r.outside,
                "n": r.n,
                "questions": r.expected,
                "note": r.note,
            }
            for r in results
        ],
        "judge": plan.judge,
        "runs": [
            {
                "name": o.run.name,
                "dir": str(o.run_dir),
                "status": o.status,
                "questions": len(o.ids),
                # what produced the published number, and what ran here
                "profile": o.run.profile,
                "backbone": o.run.backbone,
                "decoding": o.run.decoding,
                "index_type": o.run.index_type,
                "approximate": o.run.approximate,
            }
            for o in outcomes
        ],
        "skipped": [asdict(s) for s in plan.skipped],
    }


def print_table(plan: Plan, results: Sequence[CellResult], console: Any) -> None:
    """The table on the terminal; every text from the table file or the runs goes through
    ``printable`` and into rich as plain Text, never as markup."""
    from rich.table import Table
    from rich.text import Text

    from noterag.base.terminal import printable

    table = Table(title=Text(printable(caption(plan))), title_justify="left", show_edge=False)
    for i, heading in enumerate(HEADINGS):
        table.add_column(heading, justify="right" if 2 <= i <= 6 else "left")
    for result in results:
        cells = [Text(printable(c)) for c in _cells_text(result)]
        if result.outside:
            cells[5].stylize("bold red")
        table.add_row(*cells)
    console.print(table)
    for line in legends(results):
        console.print(Text(line, style="dim"), soft_wrap=True)
    for s in plan.skipped:
        line = printable(f"skipped {s.label} ({s.row}): {s.reason}")
        console.print(Text(line, style="yellow"), soft_wrap=True)


def plot_png(plan: Plan, results: Sequence[CellResult]) -> bytes:
    """Per dataset a panel: for every cell, the published value (a cross) and ours with its
    interval (a dot with bars)."""
    try:
        import matplotlib
    except ImportError:
        raise NoteragError("the plot needs matplotlib: pip install 'noterag[eval]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from noterag.eval.report import plot_text

    datasets = [d for d in plan.datasets if any(r.cell.dataset == d for r in results)]
    fig, axes = plt.subplots(
        1, max(1, len(datasets)), figsize=(max(6, 4.5 * len(datasets)), 5), squeeze=False
    )
    for ax, dataset in zip(axes[0], datasets):
        mine = [r for r in results if r.cell.dataset == dataset]
        ticks = [plot_text(f"{r.row_label}\n{r.column_label}") for r in mine]
        xs = list(range(len(mine)))
        # a cell not comparable: its published value shown grey, apart from the comparable ones
        fair = [(x, r.cell.published_value) for x, r in zip(xs, mine) if not r.cell.not_comparable]
        apart = [(x, r.cell.published_value) for x, r in zip(xs, mine) if r.cell.not_comparable]
        for points, color, name in (
            (fair, "C0", "published"),
            (apart, "0.6", "published, not comparable"),
        ):
            if points:
                ax.scatter(
                    [x for x, _ in points],
                    [y for _, y in points],
                    marker="x",
                    color=color,
                    label=name,
                    zorder=3,
                )
        label: str | None = "ours (95% CI)"  # on the first of ours only: one legend entry
        for x, r in zip(xs, mine):
            if r.ours is None:
                continue
            low = r.ours - r.ci_low if r.ci_low is not None else 0
            high = r.ci_high - r.ours if r.ci_high is not None else 0
            ax.errorbar([x], [r.ours], yerr=[[low], [high]], fmt="o", color="C1", capsize=3,
                        label=label)  # fmt: skip
            label = None
        ax.set_xticks(xs, ticks, rotation=90, fontsize=7)
        ax.set_title(plot_text(plan.table.datasets[dataset].name))
        ax.set_ylabel("%")
        ax.set_ylim(-3, 103)
        ax.grid(True, axis="y", alpha=0.3)
    axes[0][0].legend(loc="upper right", fontsize=8)
    title = f"{plan.table.id}: published ({plan.backbone}) vs ours ({plan.model})"
    fig.suptitle(plot_text(title), fontsize=9)
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=110)
    plt.close(fig)
    return png.getvalue()


def write_outputs(
    plan: Plan,
    results: Sequence[CellResult],
    outcomes: Sequence[Outcome],
    out: str | os.PathLike[str],
) -> list[Path]:
    """table.md, table.json and table.png into ``out``; their paths."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    md, js, png = (folder / name for name in FILES)
    atomic_write_text(md, markdown(plan, results))
    # the data whole, its C1 controls escaped (as --json prints it): nothing raw for a terminal
    text = json.dumps(as_json(plan, results, outcomes), ensure_ascii=False, indent=2)
    atomic_write_text(js, terminal_safe_json(text) + "\n")
    atomic_write_bytes(png, plot_png(plan, results))
    return [md, js, png]


def print_plan(plan: Plan, console: Any) -> None:
    """``--dry-run``: each run (its rows, questions, estimated calls and tokens), the skipped
    rows with their reasons, and every missing input with what provides it."""
    from rich.text import Text

    from noterag.base.redact import redact
    from noterag.base.terminal import printable

    def text(value: str, style: str | None = None) -> Text:
        return Text(printable(value), style=style or "")

    console.print(text(caption(plan), "bold"), soft_wrap=True)
    for line in backbone_lines(plan):
        console.print(text(line, "dim"), soft_wrap=True)
    if plan.data is None:
        where = f"the sample index is built on the first run into {plan.out}"
        console.print(text(where, "dim"), soft_wrap=True)
    # what the paper ran each dataset on: its sample and retriever, as the table file says
    for key in plan.datasets:
        if any(run.dataset == key for run in plan.runs):
            ds = plan.table.datasets[key]
            line = f"{key} ({ds.name}): the paper's sample: {ds.sample}; retriever: {ds.retriever}"
            console.print(text(line, "dim"), soft_wrap=True)
    if plan.table.paper_runs > 1:
        line = (
            f"the paper averages {plan.table.paper_runs} runs per cell; this plan makes one "
            f"per cell: {plan.table.runs_note}"
        )
        console.print(text(line, "yellow"), soft_wrap=True)
    console.print(text(f"{len(plan.runs)} runs", "bold"))
    # a few lines per run, never wrapped: paths and names stay whole, to be copied
    for run in plan.runs:
        n = "missing" if run.n_questions is None else str(run.n_questions)
        if run.n_questions is None and run.n_questions_table is not None:
            n = f"missing; the table's figure: {run.n_questions_table}"
        cost = run.estimate
        measured = f"measured as {cost.measured_as}" if cost.measured_as else "not measured"
        if run.n_questions is None and cost.llm_calls is not None:
            measured += f", × the table's {run.n_questions_table} questions"
        estimate = f"≈ {_count(cost.llm_calls)} model calls, ≈ {_count(cost.tokens)} tokens"
        settings = json.dumps(run.context, sort_keys=True, ensure_ascii=False)
        backbone = run.backbone or plan.backbone
        for line, style in (
            (f"{run.name} (rows: {', '.join(run.rows)})", "bold"),
            (f"  {run.method}, profile {run.profile}, settings: {settings}", None),
            (f"  backbone: {backbone} (the published number's; ours: {plan.model})", None),
            (f"  decoding: {run.decoding}", None),
            (f"  the paper's sample: {run.sample}", None),
            (f"  questions: {n} ({run.questions})", None),
            (f"  index: {run.index_type}: {run.index}", None),
            (f"  metrics: {', '.join(run.metrics)}", None),
            (f"  {estimate} ({measured})", None),
        ):
            console.print(text(line, style), soft_wrap=True)
        if run.approximate:
            console.print(text(f"  {APPROXIMATE}: {run.approximate}", "yellow"), soft_wrap=True)
    calls = [r.estimate.llm_calls for r in plan.runs if r.estimate.llm_calls is not None]
    tokens = [r.estimate.tokens for r in plan.runs if r.estimate.tokens is not None]
    unknown = len(plan.runs) - len(calls)
    total = f"in all ≈ {_count(sum(calls))} model calls, ≈ {_count(sum(tokens))} tokens"
    if unknown:
        total += f" (and {unknown} runs of unknown cost: inputs missing or not measured)"
    # one line each, however long (paths, commands): never wrapped, so they can be copied
    console.print(text(total, "dim"), soft_wrap=True)
    unscored: dict[tuple[str, str, str], list[Cell]] = {}
    for cell in plan.cells:
        if cell.unscored and cell.row not in {s.row for s in plan.skipped}:
            unscored.setdefault((cell.dataset, cell.metric, cell.unscored), []).append(cell)
    for (dataset, metric, why), cells in unscored.items():
        line = f"not run: {len(cells)} {dataset} {metric} cells, not scored: {why}"
        console.print(text(line, "yellow"), soft_wrap=True)
    if plan.judge is not None:
        console.print(text(judge_line(plan), "yellow"), soft_wrap=True)
    # every reason once, with the cells it holds for (table.md notes each cell)
    apart: dict[str, list[str]] = {}
    for cell in plan.cells:
        if cell.not_comparable:
            label = f"{plan.table.row_title(cell.row)} / {cell.dataset} {cell.metric}"
            apart.setdefault(cell.not_comparable, []).append(label)
    for reason, labels in apart.items():
        line = f"not comparable ({len(labels)} cells: {'; '.join(labels)}): {reason}"
        console.print(text(line, "yellow"), soft_wrap=True)
    for s in plan.skipped:
        console.print(text(f"skipped {s.label} ({s.row}): {s.reason}", "yellow"), soft_wrap=True)
    for index in plan.remote_indexes:
        line = f"remote index (searched only with --allow-remote-index): {redact(index)}"
        console.print(text(line, "yellow"), soft_wrap=True)
    for m in plan.missing:
        line = f"missing ({m.dataset}) {m.what}: {m.path}; {m.provide}"
        console.print(text(line, "red"), soft_wrap=True)
        for detail, style in missing_details(m):
            console.print(text(detail, style), soft_wrap=True)
    if plan.data_needs:
        line = (
            "--data DIR (the paper's data; without it every run stands on the shipped sample) "
            "would need to hold:"
        )
        console.print(text(line, "bold"), soft_wrap=True)
        for m in plan.data_needs:
            console.print(text(f"  ({m.dataset}) {m.what}: {m.path}; {m.provide}"), soft_wrap=True)
            for detail, style in missing_details(m):
                console.print(text(f"  {detail}", style), soft_wrap=True)


# What one judge call sends: Adaptive-Note's answering prompt (about 700 tokens with its
# example), the generated text and the questions; the reply is one short answer per question.
JUDGE_PROMPT_TOKENS = 700


def judge_line(plan: Plan) -> str:
    """What --judge costs: a model call per judged question, with its rough size."""
    calls = plan.judge_calls
    count = f"{calls:,} calls" if calls is not None else "one call per question"
    size = f", ≈ {calls * JUDGE_PROMPT_TOKENS:,} prompt tokens" if calls else ""
    return (
        f"judge: {plan.judge} scores the CRUD cells (RAGQuestEval): a model call per answered "
        f"question, {count}{size} plus the answers and replies (temperature 0.1, top_p 0.9, up "
        "to 1,280 tokens each), paid like the runs' calls; the papers' judge: "
        "gpt-3.5-turbo-0125. Its replies are kept beside each run (questeval.jsonl)."
    )


def backbone_lines(plan: Plan) -> list[str]:
    """Which backbone's cells the plan holds, of how many, and the table's other backbones
    with the flag that picks one."""
    mine = len(plan.cells)
    line = f"backbone: {plan.backbone} ({mine} of the table's {plan.cells_in_table} cells)"
    if not plan.other_backbones:
        return [line]
    others = ", ".join(f"{b} ({n} cells)" for b, n in plan.other_backbones.items())
    return [line, f"the table's other backbones: {others}; pick one with --backbone NAME"]


def missing_details(m: Missing) -> list[tuple[str, str | None]]:
    """The lines under a missing input: where the command's input comes from, the download
    links the table gives, and what building it costs."""
    lines: list[tuple[str, str | None]] = []
    if m.needs and m.source:
        lines.append((f"  {m.needs} comes from: {m.source}", None))
    for link in m.links:
        lines.append((f"  download: {link}", None))
    if m.cost:
        lines.append((f"  warning: {m.cost}", "yellow"))
    return lines


def _count(value: float | None) -> str:
    return "–" if value is None else f"{value:,.0f}"
