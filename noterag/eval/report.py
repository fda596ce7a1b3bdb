"""Read an evaluation run back: its summary (``summary.json``), a method × metric table of
several runs (the papers' Table 1 shape, plus cost) and a quality-versus-cost plot.

A run directory (written by ``noterag.eval.runner``) holds ``run.json`` (the configuration),
``results.jsonl`` (one line per finished question) and, once summarised, ``summary.json``.

How the numbers are made:

* the summary covers the questions of the run's last invocation (``run.json``'s ``ids``: the
  dataset cut to its ``--limit``); answers of an earlier, larger ``--limit`` stay in
  ``results.jsonl`` without counting;
* metrics (EM, F1, acc, str-em, str-hit as the papers' official code computes them, then our
  own acc_norm / acc_strict) are means over **every** question of the run; a question that
  failed counts 0 and the failures are reported (``n_errors``, ``error_ids``);
  ``error_budget`` says when too many failed for the numbers to stand;
* costs (LLM calls, prompt / completion tokens, distinct passages, latency) are means over the
  questions that were **answered**: a failed question's state, and so its cost, is lost;
* ``passages`` is the mean number of distinct passages a question read: the papers' "fair top-k"
  for the vanilla baseline (``noterag eval --method vanilla --fair-topk-from RUN_DIR``);
* ``wall_s`` is the time during which at least one question was running (the union of the
  questions' [start, end] intervals), so a run resumed a day later is not charged for the gap;
* ``retries`` is the number of model requests the client sent again after a transient failure
  (HTTP 429/5xx, timeout, reset), over every question, failed ones included; ``fallbacks``
  counts, by kind, the replies a parser could not read and answered with its documented
  fallback (``noterag.core.parsing``), over the answered questions;
* ``latency_includes_queueing``: the run sent more questions at once than its endpoint serves
  (the local server answers one at a time), so its latencies include the time spent queued.
"""

from __future__ import annotations

import io
import math
import os
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired

from typing_extensions import TypedDict

from noterag.base.errors import NoteragError
from noterag.base.files import (
    atomic_write_bytes,
    atomic_write_json,
    check_output_file,
    file_starts_with,
)
from noterag.eval.runs import (
    METRIC_ORDER,
    SUMMARY_FILE,
    RunDirError,
    metric_label,
    metric_rank,
    read_run,
)

if TYPE_CHECKING:
    from noterag.eval.significance import Significance

COSTS = ("llm_calls", "prompt_tokens", "completion_tokens", "tokens", "passages")


class Latency(TypedDict):
    mean: float | None
    p50: float | None
    p95: float | None


class CacheCounts(TypedDict):
    """A run with ``--cache``: its model calls (and their tokens) answered from the cache
    against those sent to the endpoint, over the answered questions."""

    calls_from_cache: int
    calls_from_endpoint: int
    tokens_from_cache: int
    tokens_from_endpoint: int


class WeakGolds(TypedDict):
    """The questions whose gold answer is a stop word or a single character."""

    count: int
    ids: list[str]


class Summary(TypedDict):
    """What ``summary.json`` holds (``summarize`` writes it; ``noterag eval`` returns it)."""

    method: str
    model: str
    context: dict[str, Any]
    dataset: str
    index: str
    fair_topk_from: str | None  # the run whose mean passages set top_k (vanilla baseline)
    questions: int  # the run's questions (the dataset, cut to --limit)
    n: int  # questions finished (answered or failed)
    n_errors: int
    error_ids: list[str]
    first_error: str | None  # the error of the first failed question, for the user's line
    metrics: dict[str, float]  # means over the n questions, failures as 0, in percent
    cost: dict[str, float | None]  # means per answered question: COSTS
    latency_s: Latency  # per answered question
    latency_includes_queueing: bool  # more questions at once than the endpoint serves
    wall_s: float
    retries: int  # model requests sent again, all questions
    fallbacks: dict[str, int]  # unreadable replies by parser kind, answered questions
    cache: NotRequired[CacheCounts]  # only when some row was asked with --cache
    requeued: NotRequired[int]  # questions asked again after their Ray worker died (--ray)
    # only when some question's gold is one the official acc finds in nearly any reply ("a",
    # "the"): its acc says little (noterag.eval.metrics.weak_gold)
    weak_golds: NotRequired[WeakGolds]
    # only when some reply's usage was no token counts and was ignored: tokens short of theirs
    usage_ignored: NotRequired[int]


class RunFailedError(NoteragError):
    """A finished run failed too many of its questions for its numbers to stand."""


# The share of failed questions above which `noterag eval` fails (exit 1). A failure counts as
# a wrong answer, so 10 % failures can move a metric by up to 10 points: more than most gaps
# between the methods the papers compare.
MAX_ERROR_RATE = 0.1


# --------------------------------------------------------------------------- summary


def compute_summary(run_dir: str | os.PathLike[str]) -> Summary:
    """The run's summary from its files, without writing anything."""
    config, rows = read_run(run_dir)
    scope = config.get("ids")
    if isinstance(scope, list):  # the questions of the last invocation (older runs: all rows)
        wanted = set(scope)
        rows = [row for row in rows if row["id"] in wanted]
    answered = [row for row in rows if not row.get("error")]
    latencies = sorted(float(row["latency_s"]) for row in answered)
    summary = Summary(
        method=config.get("method", "?"),
        model=config.get("model", "?"),
        context=config.get("context") or {},
        dataset=config.get("dataset", "?"),
        index=config.get("index", "?"),
        fair_topk_from=config.get("fair_topk_from"),
        questions=int(config.get("questions") or len(rows)),
        n=len(rows),
        n_errors=len(rows) - len(answered),
        error_ids=[row["id"] for row in rows if row.get("error")],
        first_error=next((str(row["error"]) for row in rows if row.get("error")), None),
        metrics=metric_means(rows),
        cost={name: _mean(_cost(row, name) for row in answered) for name in COSTS},
        latency_s=Latency(
            mean=_mean(latencies),
            p50=percentile(latencies, 50),
            p95=percentile(latencies, 95),
        ),
        latency_includes_queueing=bool(config.get("latency_includes_queueing")),
        wall_s=busy_seconds((row["started_at"], row["finished_at"]) for row in rows),
        retries=sum(row.get("retries") or 0 for row in rows),
        fallbacks=_sum_counts(row.get("fallbacks") for row in answered),
    )
    usage_ignored = sum(int(row.get("usage_ignored") or 0) for row in rows)
    if usage_ignored:
        summary["usage_ignored"] = usage_ignored
    if any("cache_calls" in row for row in answered):
        summary["cache"] = cache_counts(answered)
    requeued = sum(row.get("requeued") or 0 for row in rows)
    if requeued:
        summary["requeued"] = requeued
    weak = [row["id"] for row in rows if _weak_gold(row)]
    if weak:
        summary["weak_golds"] = WeakGolds(count=len(weak), ids=weak)
    return summary


def _weak_gold(row: dict[str, Any]) -> bool:
    from noterag.eval.metrics import weak_gold

    try:
        return weak_gold(row.get("golds") or [], str(row.get("task") or "multihop"))
    except ValueError:  # golds of another shape: not ours to judge
        return False


def cache_counts(answered: Sequence[dict[str, Any]]) -> CacheCounts:
    """The cache's share of the rows' model calls and tokens. A row asked without the cache
    (a resume may add or drop ``--cache``) had all its calls from the endpoint."""
    cached_calls = sum(row.get("cache_calls") or 0 for row in answered)
    cached_tokens = sum(row.get("cache_tokens") or 0 for row in answered)
    calls = sum(row.get("llm_calls") or 0 for row in answered)
    tokens = sum(_cost(row, "tokens") for row in answered)
    return CacheCounts(
        calls_from_cache=cached_calls,
        calls_from_endpoint=calls - cached_calls,
        tokens_from_cache=cached_tokens,
        tokens_from_endpoint=int(tokens) - cached_tokens,
    )


def summarize(run_dir: str | os.PathLike[str]) -> Summary:
    """Compute the run's summary and write it to ``RUN_DIR/summary.json``."""
    summary = compute_summary(run_dir)
    path = Path(run_dir) / SUMMARY_FILE
    try:
        atomic_write_json(path, summary)
    except OSError as exc:  # disk full, read-only: one line naming the file
        raise RunDirError(f"cannot write {path}: {exc.strerror or exc}") from None
    return summary


def error_budget(summary: Summary, max_error_rate: float = MAX_ERROR_RATE) -> str | None:
    """Why the run failed, as one line, when nothing was answered or more than
    ``max_error_rate`` of its questions failed; None when its numbers stand."""
    n, failed = summary["n"], summary["n_errors"]
    if not failed:
        return None
    if failed == n:
        why = "nothing was answered"
    elif failed / n > max_error_rate:
        why = f"{failed / n:.0%}, over --max-error-rate {max_error_rate:g}"
    else:
        return None
    return f"{failed} of {n} questions failed ({why})"


def metric_means(rows: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Mean of each metric over the rows that carry it (a failed row carries zeros)."""
    from noterag.eval.metrics import aggregate

    means = aggregate(row.get("metrics") or {} for row in rows)
    return {name: means[name] for name in sorted(means, key=metric_rank)}


def _cost(row: dict[str, Any], name: str) -> float:
    if name == "tokens":
        return float(row["prompt_tokens"] + row["completion_tokens"])
    return float(row[name])


def _sum_counts(counts: Iterable[dict[str, int] | None]) -> dict[str, int]:
    total: Counter[str] = Counter()
    for row_counts in counts:
        total.update(row_counts or {})
    return dict(sorted(total.items()))


def _mean(values: Iterable[float]) -> float | None:
    values = list(values)
    return sum(values) / len(values) if values else None


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default) on sorted values."""
    if not sorted_values:
        return None
    position = (len(sorted_values) - 1) * q / 100
    low, high = math.floor(position), math.ceil(position)
    fraction = position - low
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * fraction


def busy_seconds(intervals: Iterable[tuple[float, float]]) -> float:
    """Length of the union of [start, end] intervals."""
    total = 0.0
    current: tuple[float, float] | None = None
    for start, end in sorted(intervals):
        if current is None or start > current[1]:
            if current is not None:
                total += current[1] - current[0]
            current = (start, end)
        else:
            current = (current[0], max(current[1], end))
    if current is not None:
        total += current[1] - current[0]
    return total


def print_summary(summary: Summary, console: Any) -> None:
    """The summary as a rich table (``noterag eval`` prints it when the run is complete)."""
    from rich.table import Table

    from noterag.base.terminal import safe

    table = Table(
        title=f"{safe(summary['method'])} · {safe(summary['model'])} · "
        f"{summary['n']}/{summary['questions']} questions",
        title_justify="left",
        show_header=False,
        show_edge=False,
    )
    table.add_column(style="bold")
    table.add_column(justify="right")
    for name, value in summary["metrics"].items():
        table.add_row(safe(metric_label(name)), f"{value:.1f}")
    cost = summary["cost"]
    table.add_row("LLM calls / question", _fmt(cost["llm_calls"], 2))
    table.add_row("prompt tokens / question", _fmt(cost["prompt_tokens"], 0))
    table.add_row("completion tokens / question", _fmt(cost["completion_tokens"], 0))
    table.add_row("distinct passages / question", _fmt(cost["passages"], 1))
    latency = summary["latency_s"]
    queued = summary.get("latency_includes_queueing")
    table.add_row(
        "latency s (mean · p50 · p95)" + (", queueing included" if queued else ""),
        " · ".join(_fmt(latency[k], 1) for k in ("mean", "p50", "p95")),
        style="yellow" if queued else None,
    )
    table.add_row("wall time s", f"{summary['wall_s']:.1f}")
    table.add_row("model requests retried", str(summary.get("retries", 0)))
    if summary.get("usage_ignored"):
        table.add_row(
            "replies with invalid usage (tokens not counted)",
            str(summary["usage_ignored"]),
            style="yellow",
        )
    cache = summary.get("cache")
    if cache:
        table.add_row(
            "model calls from cache · endpoint",
            f"{cache['calls_from_cache']} · {cache['calls_from_endpoint']}",
        )
        table.add_row(
            "tokens from cache · endpoint",
            f"{cache['tokens_from_cache']:,} · {cache['tokens_from_endpoint']:,}",
        )
    table.add_row(
        "unreadable replies (fallbacks)", safe(format_fallbacks(summary.get("fallbacks") or {}))
    )
    if summary.get("requeued"):
        table.add_row("questions asked again after a worker died", str(summary["requeued"]))
    weak = summary.get("weak_golds")
    if weak:
        shown = ", ".join(map(safe, weak["ids"][:5])) + (" …" if weak["count"] > 5 else "")
        table.add_row(
            "gold is a stop word or 1 char (acc ~ always right)",
            f"{weak['count']}: {shown}",
            style="yellow",
        )
    if summary["n_errors"]:
        shown = ", ".join(map(safe, summary["error_ids"][:5]))
        shown += " …" if summary["n_errors"] > 5 else ""
        table.add_row("failed questions (count 0)", f"{summary['n_errors']}: {shown}", style="red")
    console.print(table)
    if queued:
        console.print(
            "latencies include queueing: the run sent more questions at once than its endpoint "
            "serves (the local server answers one at a time: --concurrency 1 measures the "
            "model alone)",
            style="yellow",
        )


def format_fallbacks(fallbacks: dict[str, int]) -> str:
    """``7 (status 4, questions 3)``: the total, then each kind, most frequent first."""
    if not fallbacks:
        return "0"
    kinds = sorted(fallbacks.items(), key=lambda item: (-item[1], item[0]))
    return f"{sum(fallbacks.values())} ({', '.join(f'{k} {n}' for k, n in kinds)})"


def _fmt(value: float | None, digits: int) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


# --------------------------------------------------------------------------- comparison


def compare(
    run_dirs: Sequence[str | os.PathLike[str]], significance: Significance | None = None
) -> str:
    """A markdown table, one row per run: method (with the model and the settings that differ
    between the runs), the metrics, then mean LLM calls, tokens, distinct passages and latency
    per question, and the run's wall time. Metrics are percentages; a run missing a metric
    shows "–"; a run not finished shows n as done/total.

    With ``significance`` (``noterag.eval.significance.compare_runs`` of the same runs), a
    metric that differs significantly from the baseline's is marked ``*`` and the tests follow
    the table, after a blank line."""
    summaries = [compute_summary(d) for d in run_dirs]
    labels = run_labels(summaries, run_dirs)
    metrics = sorted({m for s in summaries for m in s["metrics"]}, key=metric_rank)
    header = ["method", "n", *(metric_label(m) for m in metrics),
              "LLM calls", "prompt tok", "compl. tok", "passages", "latency s", "wall s"]  # fmt: skip
    show_errors = any(s["n_errors"] for s in summaries)
    if show_errors:
        header.append("failed")
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]  # fmt: skip
    alpha = significance.alpha if significance is not None else 0.0
    for label, s, run_dir in zip(labels, summaries, run_dirs):
        n = f"{s['n']}" if s["n"] == s["questions"] else f"{s['n']}/{s['questions']}"
        cells = [label.replace("|", "\\|"), n]
        tested = significance.of(run_dir) if significance is not None else None
        cells += [
            _fmt(s["metrics"].get(m), 1)
            + ("*" if tested and m in tested.tests and tested.tests[m].significant(alpha) else "")
            for m in metrics
        ]
        cells += [
            _fmt(s["cost"]["llm_calls"], 2),
            _fmt(s["cost"]["prompt_tokens"], 0),
            _fmt(s["cost"]["completion_tokens"], 0),
            _fmt(s["cost"]["passages"], 1),
            _fmt(s["latency_s"]["mean"], 1),
            _fmt(s["wall_s"], 0),
        ]
        if show_errors:
            cells.append(str(s["n_errors"]))
        lines.append("| " + " | ".join(cells) + " |")
    table = "\n".join(lines) + "\n"
    if significance is None or not significance.runs:
        return table
    from noterag.eval.significance import markdown

    named = {Path(d).resolve(): label for d, label in zip(run_dirs, labels)}
    return table + "\n" + markdown(significance, named)


def run_labels(
    summaries: Sequence[Summary], run_dirs: Sequence[str | os.PathLike[str]] | None = None
) -> list[str]:
    """``method (k=v, ...) · model``, naming only the settings whose values differ between the
    runs; a fair-top-k vanilla run always shows its ``fair top_k``. Then, so that no two runs
    share a label, the dataset and the index where they differ (by the shortest end of their
    paths that tells them apart), and the run directory of runs still alike."""
    keys = sorted({k for s in summaries for k in s["context"]})
    varying = [k for k in keys if len({repr(s["context"].get(k)) for s in summaries}) > 1]
    labels = []
    for s in summaries:
        fair = bool(s.get("fair_topk_from"))
        settings = [
            f"{'fair ' if fair and k == 'top_k' else ''}{k}={s['context'][k]}"
            for k in keys
            if k in s["context"] and (k in varying or (fair and k == "top_k"))
        ]
        shown = f" ({', '.join(settings)})" if settings else ""
        labels.append(f"{s['method']}{shown} · {s['model']}")
    for key in ("dataset", "index"):
        values = [str(s.get(key, "?")) for s in summaries]
        if len(set(values)) > 1:
            names = distinct_names(values)
            labels = [f"{label} · {name}" for label, name in zip(labels, names)]
    if run_dirs is not None and len(set(labels)) < len(labels):
        repeated = {label for label in labels if labels.count(label) > 1}
        names = distinct_names([str(Path(d).resolve()) for d in run_dirs])
        labels = [
            f"{label} ({name})" if label in repeated else label
            for label, name in zip(labels, names)
        ]
    return labels


def distinct_names(paths: Sequence[str]) -> list[str]:
    """The shortest ends of ``paths`` (last part, last two, ...) that tell different paths
    apart: ``hotpotqa/questions.jsonl`` and ``musique/questions.jsonl``, not twice
    ``questions.jsonl``."""
    parts = [Path(p).parts or (p,) for p in paths]
    for depth in range(1, max(len(p) for p in parts) + 1):
        names = ["/".join(p[-depth:]) for p in parts]
        if len(set(names)) == len(set(paths)):
            return names
    return list(paths)


_MARKERS = "os^DvP*X<>p"
PLOT_X = {"llm_calls": "LLM calls per question", "tokens": "tokens per question"}


# How a plot noterag wrote is told from a user's PNG that --plot must not overwrite: the PNG's
# Software text chunk, which matplotlib writes before the image data.
_PLOT_SOFTWARE = "noterag compare"
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def plot_text(text: str) -> str:
    """Text from a run or a table file (labels, names) as matplotlib draws it literally: without
    control characters (a font has no glyph for ESC, and matplotlib's "Glyph 27 missing"
    warning would print it raw on stderr) and with ``$`` escaped (not read as mathtext, whose
    parse error would end the command)."""
    from noterag.base.terminal import printable

    return printable(text).replace("$", r"\$")


def is_noterag_plot(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` holds a plot ``plot`` wrote (a PNG whose Software chunk names us)."""
    return file_starts_with(Path(path), _PNG_MAGIC, b"Software\x00" + _PLOT_SOFTWARE.encode())


def plot(
    run_dirs: Sequence[str | os.PathLike[str]],
    out_png: str | os.PathLike[str],
    x: str = "llm_calls",
    force: bool = False,
) -> Path:
    """A PNG scatter of quality against cost: one panel per metric (EM and F1 for multi-hop
    runs; the first two metrics the runs share otherwise, the papers' before ours: Acc and
    Acc (strict) for StrategyQA), one labelled point per run, x the
    mean LLM calls (``x="llm_calls"``) or tokens (``x="tokens"``) per question.

    ``out_png`` is written atomically, and only if it is new, empty or a plot noterag wrote
    (``force``: whatever it is), checked before anything is computed."""
    if x not in PLOT_X:
        raise NoteragError(f"plot x must be one of {', '.join(PLOT_X)}, not {x!r}")
    out = check_output_file(
        out_png, option="--plot", ours=is_noterag_plot, what="a plot", force=force,
        make_parent=True,
    )  # fmt: skip
    try:
        import matplotlib
    except ImportError:
        raise NoteragError("the plot needs matplotlib: pip install 'noterag[eval]'") from None
    matplotlib.use("Agg")  # no display needed, and no GUI backend probing
    import matplotlib.pyplot as plt

    summaries = [compute_summary(d) for d in run_dirs]
    labels = [plot_text(label) for label in run_labels(summaries, run_dirs)]
    shared = [m for m in METRIC_ORDER if all(m in s["metrics"] for s in summaries)]
    metrics = (
        shared[:2] or sorted({m for s in summaries for m in s["metrics"]}, key=metric_rank)[:2]
    )
    if not metrics:
        raise NoteragError("nothing to plot: the runs have no finished question")
    fig, axes = plt.subplots(1, len(metrics), figsize=(6 * len(metrics), 4.5), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        for i, (label, s) in enumerate(zip(labels, summaries)):
            cost, value = s["cost"][x], s["metrics"].get(metric)
            if cost is None or value is None:
                continue
            # A marker shape per run as well as a colour: runs that land on the same point
            # stay visible.
            ax.scatter([cost], [value], label=label, color=f"C{i % 10}",
                       marker=_MARKERS[i % len(_MARKERS)], s=60, alpha=0.8)  # fmt: skip
        ax.set_xlabel(PLOT_X[x])
        name = plot_text(metric_label(metric))
        ax.set_ylabel(f"{name} (%)")
        ax.set_title(f"{name} vs {PLOT_X[x].split(' per')[0]}")
        ax.grid(True, alpha=0.3)
        ax.margins(x=0.2)
        # Percentages from 0, so that a run of zeros sits on the floor rather than mid-plot
        # (a little below it, so its marker shows whole).
        top = max((s["metrics"].get(metric) or 0.0 for s in summaries), default=0.0)
        upper = min(105.0, max(10.0, top * 1.15))
        ax.set_ylim(-0.04 * upper, upper)
    handles, names = axes[0][0].get_legend_handles_labels()
    rows = math.ceil(len(names) / 2)
    fig.legend(handles, names, loc="lower center", ncol=2, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, min(0.5, 0.05 * rows + 0.03), 1, 1))
    png = io.BytesIO()
    fig.savefig(
        png, format="png", dpi=120,
        metadata={"Software": f"{_PLOT_SOFTWARE} (Matplotlib {matplotlib.__version__})"},
    )  # fmt: skip
    plt.close(fig)
    atomic_write_bytes(out, png.getvalue())
    return out
