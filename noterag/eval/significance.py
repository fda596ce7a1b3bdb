"""Whether a difference between two evaluation runs is real: paired tests over the questions
both runs answered (``noterag compare``).

Two runs of different methods over the same questions are *paired*: question i is easy or hard
for both, so the test looks at the per-question differences ``d_i = run_i - baseline_i``, not at
two independent means. For each metric and each run against the baseline:

* the mean difference (percentage points, as the table's metrics);
* a paired bootstrap confidence interval (scipy.stats.bootstrap, ``paired=True``: the questions
  are resampled with their two scores together; percentile method, seeded) and the bootstrap's
  two-sided p-value, read off the same bootstrap distribution (twice the share of resampled
  means on the far side of 0), so that ``p < 1 - confidence`` exactly when the interval leaves
  out 0, up to the interpolation of its ends;
* a paired t-test (scipy.stats.ttest_rel), the test ReSP reports.

A difference is marked significant when the bootstrap's p-value is below ``1 - confidence``.
No correction for testing several metrics and runs at once is made: read a table of many
cells with that in mind.

Pairing is by question id, over the questions of each run's last invocation (``run.json``'s
``ids``, as the summary counts them); a failed question counts 0, as in the summary. When the
two runs' question sets differ, the test runs on the questions they share and a warning names
how many each side dropped; an id whose question text differs between the runs is not the same
question and is dropped too. Runs sharing no question are not tested (with a warning), so that
runs of different datasets can still sit in one table.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from noterag.base.errors import NoteragError
from noterag.eval.runs import metric_label, metric_rank, read_run

RESAMPLES = 10_000
CONFIDENCE = 0.95
SEED = 0
# Below this many pairs the percentile bootstrap's interval is known to be too narrow (it
# behaves like a z-interval with the (n-1)/n variance): the result is shown with a warning.
FEW_PAIRS = 20


@dataclass(frozen=True)
class MetricTest:
    """One metric of one run against the baseline, over ``n`` paired questions."""

    metric: str
    n: int
    difference: float  # mean of run - baseline, in points
    ci_low: float | None  # None: fewer than 2 pairs, nothing to resample
    ci_high: float | None
    p_bootstrap: float | None
    t_statistic: float | None  # None: undefined (fewer than 2 pairs)
    p_ttest: float | None

    def significant(self, alpha: float) -> bool:
        return self.p_bootstrap is not None and self.p_bootstrap < alpha


@dataclass
class RunComparison:
    """A run against the baseline: its tests, and what pairing had to drop."""

    run_dir: Path
    shared: int  # questions paired
    only_run: int  # the run's questions the baseline lacks
    only_baseline: int
    question_differs: int  # ids in both whose question text differs (dropped)
    tests: dict[str, MetricTest] = field(default_factory=dict)


@dataclass
class Significance:
    """Every run against one baseline; ``warnings`` are one line each, for stderr."""

    baseline: Path
    resamples: int
    confidence: float
    seed: int
    runs: list[RunComparison]
    warnings: list[str]

    @property
    def alpha(self) -> float:
        return 1 - self.confidence

    def of(self, run_dir: str | os.PathLike[str]) -> RunComparison | None:
        """The comparison of ``run_dir`` (None for the baseline itself)."""
        wanted = Path(run_dir).resolve()
        return next((c for c in self.runs if c.run_dir.resolve() == wanted), None)


def scoped_rows(run_dir: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """The rows of the run's last invocation by question id (what its summary counts)."""
    config, rows = read_run(run_dir)
    scope = config.get("ids")
    if isinstance(scope, list):
        wanted = set(scope)
        rows = [row for row in rows if row["id"] in wanted]
    return {row["id"]: row for row in rows}


def paired_test(
    baseline: Sequence[float],
    run: Sequence[float],
    *,
    metric: str = "",
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = SEED,
) -> MetricTest:
    """The paired tests of ``run`` against ``baseline`` (the same questions, in the same
    order): mean difference, bootstrap interval and p-value, t-test."""
    if len(baseline) != len(run):
        raise ValueError(f"paired samples differ in length: {len(baseline)} and {len(run)}")
    n = len(run)
    if n == 0:
        raise ValueError("no pairs to test")
    import numpy as np
    from scipy import stats

    a = np.asarray(baseline, dtype=float)
    b = np.asarray(run, dtype=float)
    d = b - a
    difference = float(d.mean())
    if n < 2:
        return MetricTest(metric, n, difference, None, None, None, None, None)
    if not d.any():
        # The runs agree on every question: no evidence of a difference. (ttest_rel's t is
        # 0/0 here, and the bootstrap distribution is the single point 0.)
        return MetricTest(metric, n, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0)
    if (d == d[0]).all():
        # The same nonzero difference on every question: every resample has that mean, and
        # t is ±infinite (scipy would compute both, warning of a precision loss).
        return MetricTest(metric, n, difference, difference, difference, 0.0,
                          math.copysign(math.inf, difference), 0.0)  # fmt: skip
    result = stats.bootstrap(
        (a, b),
        _mean_difference,
        n_resamples=resamples,
        paired=True,
        vectorized=True,
        confidence_level=confidence,
        method="percentile",
        # Resampled in batches: 10,000 resamples of a few thousand questions would otherwise
        # hold hundreds of MB at once.
        batch=max(1, 2_000_000 // n),
        rng=np.random.default_rng(seed),
    )
    means = result.bootstrap_distribution
    p_bootstrap = min(1.0, 2 * min(float(np.mean(means <= 0)), float(np.mean(means >= 0))))
    t = stats.ttest_rel(b, a)
    # d is not all zeros, so t is defined (infinite, p = 0, when every d_i is the same).
    t_statistic, p_ttest = float(t.statistic), float(t.pvalue)
    return MetricTest(
        metric,
        n,
        difference,
        float(result.confidence_interval.low),
        float(result.confidence_interval.high),
        p_bootstrap,
        t_statistic,
        p_ttest,
    )


def _mean_difference(a: Any, b: Any, axis: int = -1) -> Any:
    return (b - a).mean(axis=axis)


def mean_interval(
    values: Sequence[float],
    *,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = SEED,
) -> tuple[float | None, float | None]:
    """The bootstrap interval of the mean of ``values`` (one score per question; percentile
    method, seeded, as ``paired_test``): (None, None) below 2 values, the single point when
    they are all equal (every resample has that mean)."""
    if len(values) < 2:
        return None, None
    if all(v == values[0] for v in values):
        return float(values[0]), float(values[0])
    import numpy as np
    from scipy import stats

    result = stats.bootstrap(
        (np.asarray(values, dtype=float),),
        np.mean,
        n_resamples=resamples,
        vectorized=True,
        confidence_level=confidence,
        method="percentile",
        batch=max(1, 2_000_000 // len(values)),
        rng=np.random.default_rng(seed),
    )
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def compare_runs(
    run_dirs: Sequence[str | os.PathLike[str]],
    baseline: str | os.PathLike[str] | None = None,
    *,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = SEED,
) -> Significance:
    """Every run of ``run_dirs`` but the baseline (``baseline``, default the first; it must be
    one of ``run_dirs``) against the baseline, metric by metric, paired by question id."""
    if not run_dirs:
        raise NoteragError("no runs to compare")
    try:
        import scipy  # noqa: F401
    except ImportError:
        raise NoteragError(
            "the significance tests need scipy: pip install 'noterag[eval]' (or --no-significance)"
        ) from None
    if not 0 < confidence < 1:
        raise NoteragError(f"the confidence level must lie between 0 and 1, not {confidence}")
    if resamples < 1:
        raise NoteragError(f"the number of resamples must be positive, not {resamples}")
    paths = [Path(d) for d in run_dirs]
    resolved = [p.resolve() for p in paths]
    base = Path(baseline) if baseline is not None else paths[0]
    if base.resolve() not in resolved:
        raise NoteragError(
            f"--baseline {base} is not one of the compared runs (give it among the RUN_DIRs)"
        )
    base_rows = scoped_rows(base)
    comparisons: list[RunComparison] = []
    warnings: list[str] = []
    done: set[Path] = {base.resolve()}
    for path, key in zip(paths, resolved):
        if key in done:  # the baseline, or a run listed twice
            continue
        done.add(key)
        rows = scoped_rows(path)
        both = [i for i in rows if i in base_rows]
        same = [i for i in both if rows[i].get("question") == base_rows[i].get("question")]
        comparison = RunComparison(
            run_dir=path,
            shared=len(same),
            only_run=len(rows) - len(both),
            only_baseline=len(base_rows) - len(both),
            question_differs=len(both) - len(same),
        )
        comparisons.append(comparison)
        if not same:
            warnings.append(
                f"{path} shares no question with the baseline {base}: not tested against it"
            )
            continue
        if comparison.only_run or comparison.only_baseline or comparison.question_differs:
            warnings.append(_dropped_warning(path, base, comparison))
        metrics = sorted(
            {m for i in same for m in (rows[i].get("metrics") or {})
             if m in (base_rows[i].get("metrics") or {})},
            key=metric_rank,
        )  # fmt: skip
        for metric in metrics:
            pairs = [
                (float(base_rows[i]["metrics"][metric]), float(rows[i]["metrics"][metric]))
                for i in same
                if metric in (rows[i].get("metrics") or {})
                and metric in (base_rows[i].get("metrics") or {})
            ]
            comparison.tests[metric] = paired_test(
                [p[0] for p in pairs], [p[1] for p in pairs], metric=metric,
                resamples=resamples, confidence=confidence, seed=seed,
            )  # fmt: skip
        if len(same) < FEW_PAIRS:
            warnings.append(
                f"{path}: only {len(same)} questions paired with the baseline; the bootstrap's "
                f"interval is too narrow below ~{FEW_PAIRS}, read the t-test"
            )
    return Significance(base, resamples, confidence, seed, comparisons, warnings)


def _dropped_warning(path: Path, base: Path, c: RunComparison) -> str:
    parts = []
    if c.only_baseline:
        parts.append(f"{c.only_baseline} of the baseline's questions it lacks")
    if c.only_run:
        parts.append(f"{c.only_run} of its own the baseline lacks")
    if c.question_differs:
        parts.append(f"{c.question_differs} ids whose question text differs")
    return (
        f"{path} and the baseline {base} differ in questions: tested on the {c.shared} they "
        f"share, dropping {', '.join(parts)}"
    )


# --------------------------------------------------------------------------- markdown


def _signed(value: float) -> str:
    return f"{value:+.1f}"


def _p(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "–"
    return "<0.001" if value < 0.001 else f"{value:.3f}"


def markdown(sig: Significance, labels: dict[Path, str]) -> str:
    """The tests as a markdown table, after a line naming the baseline and the method.
    ``labels`` maps each resolved run directory to its label in the comparison table."""
    level = f"{sig.confidence:.0%}"
    base_label = labels.get(sig.baseline.resolve(), str(sig.baseline))
    intro = (
        f"Against the baseline {base_label}, paired by question: the difference in points, its "
        f"{level} paired bootstrap interval ({sig.resamples:,} resamples, seed {sig.seed}) and "
        f"p-value, and a paired t-test; * = p < {sig.alpha:.2g} (bootstrap)."
    )
    lines = [
        intro,
        "",
        f"| method | metric | n | Δ | {level} CI | p (bootstrap) | t | p (t-test) |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for c in sig.runs:
        label = labels.get(c.run_dir.resolve(), str(c.run_dir)).replace("|", "\\|")
        if not c.tests:
            lines.append(f"| {label} | – | 0 | – | – | – | – | – |")
        for metric, t in c.tests.items():
            mark = "*" if t.significant(sig.alpha) else ""
            ci = (
                "–"
                if t.ci_low is None or t.ci_high is None
                else f"[{_signed(t.ci_low)}, {_signed(t.ci_high)}]"
            )
            stat = "–" if t.t_statistic is None else f"{t.t_statistic:.2f}"
            lines.append(
                f"| {label} | {metric_label(metric)} | {t.n} | {_signed(t.difference)}{mark} | "
                f"{ci} | {_p(t.p_bootstrap)} | {stat} | {_p(t.p_ttest)} |"
            )
    return "\n".join(lines) + "\n"
