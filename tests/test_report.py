"""Run summaries, the comparison table and the plot, from run directories written by hand (so
every expected number is computed here, independently of the runner)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from noterag.eval.report import busy_seconds, compare, compute_summary, percentile, plot, summarize
from noterag.eval.runs import RunDirError, scan_results

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def row(id: str, *, em: float, f1: float, calls: int | None = 1, prompt: int | None = 100,
        completion: int | None = 10, passages: int | None = 5, latency: float = 1.0,
        start: float = 0.0, error: str | None = None) -> dict[str, Any]:  # fmt: skip
    failed = error is not None
    return {
        "id": id,
        "question": f"question {id}?",
        "golds": ["x"],
        "task": "multihop",
        "answer": None if failed else "x",
        "metrics": {"em": em, "f1": f1, "acc": em},
        "llm_calls": None if failed else calls,
        "prompt_tokens": None if failed else prompt,
        "completion_tokens": None if failed else completion,
        "passages": None if failed else passages,
        "passage_ids": None if failed else [f"p{i}" for i in range(passages or 0)],
        "latency_s": latency,
        "started_at": start,
        "finished_at": start + latency,
        "error": error,
    }


def write_run(run_dir: Path, rows: list[dict[str, Any]], **config: Any) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    base = {"method": "deepnote", "model": "openai:m", "context": {}, "dataset": "d.jsonl",
            "index": "bm25:/i", "questions": len(rows)}  # fmt: skip
    (run_dir / "run.json").write_text(json.dumps(base | config))
    (run_dir / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run_dir


# --------------------------------------------------------------------------- summary


def test_summary_numbers_are_the_means_of_the_rows(tmp_path: Path) -> None:
    rows = [
        row(
            "a",
            em=100,
            f1=100,
            calls=2,
            prompt=300,
            completion=30,
            passages=4,
            latency=2.0,
            start=0,
        ),
        row("b", em=0, f1=50, calls=4, prompt=500, completion=50, passages=8, latency=4.0, start=1),
        row(
            "c",
            em=100,
            f1=80,
            calls=6,
            prompt=700,
            completion=70,
            passages=9,
            latency=9.0,
            start=20,
        ),
        row("d", em=0, f1=0, latency=1.5, start=30, error="ModelUnavailableError: timeout"),
    ]
    summary = summarize(write_run(tmp_path / "run", rows, questions=5))
    # metrics over all 4 rows, the failed one counting 0
    assert summary["metrics"] == {"em": 50.0, "f1": 57.5, "acc": 50.0}
    assert summary["n"] == 4 and summary["questions"] == 5
    assert summary["n_errors"] == 1 and summary["error_ids"] == ["d"]
    # costs over the 3 answered rows
    assert summary["cost"] == {
        "llm_calls": 4.0,
        "prompt_tokens": 500.0,
        "completion_tokens": 50.0,
        "tokens": 550.0,
        "passages": 7.0,
    }
    # latencies 2, 4, 9: p50 = 4, p95 = 4 + (9 - 4) * 0.9 = 8.5
    assert summary["latency_s"] == {"mean": 5.0, "p50": 4.0, "p95": pytest.approx(8.5)}
    # busy intervals [0, 2] ∪ [1, 5] ∪ [20, 29] ∪ [30, 31.5] = 5 + 9 + 1.5
    assert summary["wall_s"] == pytest.approx(15.5)
    assert summary["method"] == "deepnote" and summary["model"] == "openai:m"
    written = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert written == json.loads(json.dumps(summary))


def test_a_run_of_failures_only_has_zero_metrics_and_no_costs(tmp_path: Path) -> None:
    summary = compute_summary(write_run(tmp_path / "r", [row("a", em=0, f1=0, error="boom")]))
    assert summary["metrics"] == {"em": 0.0, "f1": 0.0, "acc": 0.0}
    assert summary["cost"]["llm_calls"] is None and summary["latency_s"]["p50"] is None


def test_percentile_and_busy_time_by_hand() -> None:
    assert percentile([], 50) is None
    assert percentile([7.0], 95) == 7.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 95) == pytest.approx(4.8)
    assert busy_seconds([]) == 0
    assert busy_seconds([(0, 1), (0.5, 2), (2, 3), (10, 11)]) == 4


def test_summary_of_a_directory_that_is_no_run_names_it(tmp_path: Path) -> None:
    with pytest.raises(RunDirError, match="does not exist"):
        compute_summary(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(RunDirError, match="holds no run.json"):
        compute_summary(tmp_path / "empty")


# --------------------------------------------------------------------------- reading results


def test_reading_ignores_a_half_written_tail(tmp_path: Path) -> None:
    path = write_run(tmp_path / "r", [row("a", em=1, f1=1), row("b", em=0, f1=0)]) / "results.jsonl"
    whole = path.stat().st_size
    with open(path, "ab") as f:
        f.write(b'{"id": "c", "question": "que')
    rows, valid_end = scan_results(path)
    assert [r["id"] for r in rows] == ["a", "b"] and valid_end == whole
    assert compute_summary(tmp_path / "r")["n"] == 2


def test_a_complete_row_without_its_newline_is_kept(tmp_path: Path) -> None:
    # Issue 26: a row is written with its newline in one write, so a torn write is invalid
    # JSON; a whole row without it lost only the newline (a copy, an editor) and is kept.
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(row("a", em=1, f1=1)) + "\n" + json.dumps(row("b", em=1, f1=1)))
    rows, valid_end = scan_results(path)
    assert [r["id"] for r in rows] == ["a", "b"]
    assert valid_end == path.stat().st_size


def test_a_damaged_line_before_good_ones_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text(
        json.dumps(row("a", em=1, f1=1)) + "\n{oops\n" + json.dumps(row("b", em=1, f1=1)) + "\n"
    )
    with pytest.raises(RunDirError, match="line 2"):
        scan_results(path)


def test_a_repeated_id_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text((json.dumps(row("a", em=1, f1=1)) + "\n") * 2)
    with pytest.raises(RunDirError, match="line 2 repeats question id 'a'.*line 1"):
        scan_results(path)


# --------------------------------------------------------------------------- comparison


@pytest.fixture
def three_runs(tmp_path: Path) -> list[Path]:
    return [
        write_run(tmp_path / "dn", [row("a", em=100, f1=100, calls=5), row("b", em=0, f1=40, calls=7)],
                  method="deepnote", context={"max_steps": 3}),
        write_run(tmp_path / "van", [row("a", em=0, f1=20, passages=6), row("b", em=0, f1=0, passages=6)],
                  method="vanilla", context={"top_k": 6}, fair_topk_from=str(tmp_path / "dn")),
        write_run(tmp_path / "an", [row("a", em=100, f1=100, calls=3)], method="adaptive-note",
                  model="local", context={"max_steps": 3}, questions=2),
    ]  # fmt: skip


def test_compare_has_one_row_per_run(three_runs: list[Path]) -> None:
    table = compare(three_runs).splitlines()
    assert table[0] == (
        "| method | n | EM | F1 | Acc | LLM calls | prompt tok | compl. tok | passages "
        "| latency s | wall s |"
    )
    assert table[1].startswith("|---|---:|")
    body = table[2:]
    assert len(body) == 3
    # every label names the model; settings appear only where the runs differ (top_k), and the
    # fair-top-k run says so
    assert body[0].startswith(
        "| deepnote (max_steps=3) · openai:m | 2 | 50.0 | 70.0 | 50.0 | 6.00 |"
    )
    assert body[1].startswith("| vanilla (fair top_k=6) · openai:m | 2 | 0.0 | 10.0 | 0.0 | 1.00 |")
    assert "| 6.0 |" in body[1]  # distinct passages
    assert body[2].startswith("| adaptive-note (max_steps=3) · local | 1/2 | 100.0 |")
    assert "failed" not in table[0]


def test_compare_shows_failures_when_a_run_has_some(tmp_path: Path) -> None:
    runs = [write_run(tmp_path / "a", [row("a", em=0, f1=0, error="boom"), row("b", em=1, f1=1)]),
            write_run(tmp_path / "b", [row("a", em=1, f1=1)], method="vanilla")]  # fmt: skip
    lines = compare(runs).splitlines()
    assert lines[0].endswith("| failed |")
    assert lines[2].endswith("| 1 |") and lines[3].endswith("| 0 |")


@pytest.mark.parametrize("x", ["llm_calls", "tokens"])
def test_plot_writes_a_png(three_runs: list[Path], tmp_path: Path, x: str) -> None:
    out = plot(three_runs, tmp_path / "plots" / "quality.png", x=x)
    data = out.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 10_000


def test_plot_refuses_an_unknown_axis(three_runs: list[Path], tmp_path: Path) -> None:
    with pytest.raises(Exception, match="llm_calls, tokens"):
        plot(three_runs, tmp_path / "p.png", x="latency")
