"""Paired significance tests between runs (noterag.eval.significance), with expected numbers
worked by hand rather than taken from scipy."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from noterag.base.errors import NoteragError
from noterag.eval.report import compare
from noterag.eval.significance import compare_runs, paired_test
from tests.test_report import row, write_run

# A hand-worked pair: differences d = run - baseline = 10, 0, 20, 10, 30, -10.
BASELINE = [50.0, 60.0, 70.0, 80.0, 90.0, 40.0]
D = [10.0, 0.0, 20.0, 10.0, 30.0, -10.0]
RUN = [b + d for b, d in zip(BASELINE, D)]


def t5_two_sided_p(t: float) -> float:
    """P(|T| >= t) for Student's t with 5 degrees of freedom, by its closed form for odd
    degrees: P(|T| < t) = 2/π (θ + sinθ cosθ (1 + 2/3 cos²θ)), θ = atan(t / √5)."""
    theta = math.atan(t / math.sqrt(5))
    c = math.cos(theta)
    inside = 2 / math.pi * (theta + math.sin(theta) * c * (1 + 2 / 3 * c * c))
    return 1 - inside


def test_a_hand_worked_paired_example() -> None:
    result = paired_test(BASELINE, RUN, metric="f1")
    # mean d = 60 / 6 = 10; deviations 0, -10, 10, 0, 20, -20: sum of squares 1000, variance
    # 1000 / 5 = 200, standard error sqrt(200 / 6) = 10 / sqrt(3), so t = sqrt(3).
    assert result.n == 6 and result.difference == pytest.approx(10.0)
    assert result.t_statistic == pytest.approx(math.sqrt(3))
    assert result.p_ttest == pytest.approx(t5_two_sided_p(math.sqrt(3)), abs=1e-9)
    assert result.p_ttest == pytest.approx(0.1438, abs=1e-3)
    # the interval holds the mean difference and lies within the extreme differences
    assert result.ci_low is not None and result.ci_high is not None
    assert -10 <= result.ci_low < 10 < result.ci_high <= 30
    assert result.p_bootstrap is not None and 0 < result.p_bootstrap < 1


def test_the_bootstrap_p_value_of_two_pairs_by_hand() -> None:
    # d = -100, 0: a resample of two questions has mean -100 (1/4), -50 (1/2) or 0 (1/4), so
    # P(mean >= 0) = 1/4 and the two-sided p is 2 × 1/4 = 0.5; the 95 % percentile interval
    # runs from -100 to 0.
    result = paired_test([100.0, 0.0], [0.0, 0.0])
    assert result.difference == -50
    assert result.p_bootstrap == pytest.approx(0.5, abs=0.03)
    assert (result.ci_low, result.ci_high) == (-100.0, 0.0)
    assert not result.significant(0.05)


def test_a_real_shift_is_found_and_its_interval_holds_the_true_difference() -> None:
    rng = random.Random(7)
    baseline = [rng.gauss(50, 20) for _ in range(300)]
    run = [b + 5 + rng.gauss(0, 10) for b in baseline]  # true mean difference 5
    result = paired_test(baseline, run)
    assert result.ci_low is not None and result.ci_high is not None
    assert result.ci_low < 5 < result.ci_high and result.ci_low > 0
    assert result.significant(0.05) and result.p_ttest is not None and result.p_ttest < 0.001


def test_the_bootstrap_is_seeded() -> None:
    first, again = paired_test(BASELINE, RUN, seed=3), paired_test(BASELINE, RUN, seed=3)
    assert first == again
    other = paired_test(BASELINE, RUN, seed=4)
    assert (other.ci_low, other.ci_high, other.p_bootstrap) != (
        first.ci_low, first.ci_high, first.p_bootstrap,
    )  # fmt: skip


def test_identical_scores_are_not_significant() -> None:
    result = paired_test(BASELINE, BASELINE)
    assert result.difference == 0 and (result.ci_low, result.ci_high) == (0, 0)
    assert result.p_bootstrap == 1 and result.p_ttest == 1 and not result.significant(0.05)


def test_one_pair_gives_a_difference_but_no_test() -> None:
    result = paired_test([0.0], [100.0])
    assert result.difference == 100 and result.p_bootstrap is None and result.p_ttest is None
    assert not result.significant(0.05)


# --------------------------------------------------------------------------- runs


def scored_rows(f1s: list[float], ids: list[str] | None = None) -> list[dict[str, object]]:
    ids = ids or [f"q{i}" for i in range(len(f1s))]
    return [row(i, em=100.0 if f1 == 100 else 0.0, f1=f1) for i, f1 in zip(ids, f1s)]


def test_identical_runs_are_not_significant(tmp_path: Path) -> None:
    rows = scored_rows([float(x % 7) * 15 for x in range(40)])
    runs = [write_run(tmp_path / "a", rows), write_run(tmp_path / "b", rows, method="vanilla")]
    sig = compare_runs(runs)
    (tested,) = sig.runs
    assert tested.shared == 40 and set(tested.tests) == {"em", "f1", "acc"}
    assert all(not t.significant(sig.alpha) and t.p_bootstrap == 1 for t in tested.tests.values())
    assert sig.warnings == []
    cells = [line for line in compare(runs, sig).splitlines() if line.startswith("| ")]
    assert cells and not any("*" in line for line in cells)


def test_a_better_run_is_marked_in_both_tables(tmp_path: Path) -> None:
    base = [float(x % 5) * 10 for x in range(40)]
    runs = [
        write_run(tmp_path / "base", scored_rows(base)),
        write_run(tmp_path / "better", scored_rows([b + 20 for b in base]), method="vanilla"),
    ]
    text = compare(runs, compare_runs(runs, resamples=2000)).splitlines()
    # the F1 cell (+20 on every question) carries the mark; EM (0 everywhere) does not
    assert text[3].startswith("| vanilla · openai:m | 40 | 0.0 | 40.0* | 0.0 |")
    assert text[4] == ""
    assert "Against the baseline deepnote · openai:m" in text[5]
    tests = [line for line in text[7:] if line.startswith("| vanilla")]
    f1 = next(line for line in tests if "| F1 |" in line)
    assert "| 40 | +20.0* | [+20.0, +20.0] | <0.001 |" in f1
    em = next(line for line in tests if "| EM |" in line)
    assert "| +0.0 | [+0.0, +0.0] | 1.000 |" in em


def test_the_baseline_can_be_chosen_and_must_be_one_of_the_runs(tmp_path: Path) -> None:
    rows = scored_rows([10.0, 20.0, 30.0])
    a, b = write_run(tmp_path / "a", rows), write_run(tmp_path / "b", rows, method="vanilla")
    sig = compare_runs([a, b], baseline=b)
    assert sig.baseline == b and [c.run_dir for c in sig.runs] == [a]
    with pytest.raises(NoteragError, match="--baseline .*elsewhere is not one of the compared"):
        compare_runs([a, b], baseline=tmp_path / "elsewhere")


def test_mismatched_question_sets_are_tested_on_the_shared_ones_with_a_warning(
    tmp_path: Path,
) -> None:
    base = write_run(tmp_path / "base", scored_rows([0.0] * 30, [f"q{i}" for i in range(30)]))
    # q5..q34: 25 shared, 5 of the baseline's missing, 5 new ones
    other = write_run(tmp_path / "other", scored_rows([50.0] * 30, [f"q{i}" for i in range(5, 35)]),
                      method="vanilla")  # fmt: skip
    sig = compare_runs([base, other])
    (tested,) = sig.runs
    assert (tested.shared, tested.only_baseline, tested.only_run) == (25, 5, 5)
    assert tested.tests["f1"].n == 25
    (warning,) = sig.warnings
    assert "tested on the 25 they share" in warning and "5 of the baseline's" in warning
    assert "5 of its own" in warning


def test_an_id_whose_question_differs_is_not_paired(tmp_path: Path) -> None:
    rows = scored_rows([10.0] * 25)
    changed = [dict(r) for r in rows]
    changed[0]["question"] = "another question?"
    sig = compare_runs([write_run(tmp_path / "a", rows), write_run(tmp_path / "b", changed)])
    assert sig.runs[0].shared == 24 and sig.runs[0].question_differs == 1
    assert "1 ids whose question text differs" in sig.warnings[0]


def test_runs_sharing_no_question_are_not_tested(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", scored_rows([10.0, 20.0], ["x1", "x2"]))
    b = write_run(tmp_path / "b", scored_rows([10.0, 20.0], ["y1", "y2"]), method="vanilla")
    sig = compare_runs([a, b])
    assert sig.runs[0].tests == {} and "shares no question" in sig.warnings[0]
    assert "| vanilla · openai:m | – | 0 |" in compare([a, b], sig)


def test_bad_settings_are_one_line_errors(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", scored_rows([10.0]))
    with pytest.raises(NoteragError, match="confidence"):
        compare_runs([a], confidence=1.5)
    with pytest.raises(NoteragError, match="resamples"):
        compare_runs([a], resamples=0)
