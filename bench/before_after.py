"""The engine before and after a change, measured in one run on one machine: bench/orchestration.py
run in turn in two checkouts (``--before DIR``, an older commit checked out with its own venv,
e.g. ``git worktree add ../before <commit>`` then ``make install`` there; and this checkout), round
by round, so a machine that slows down slows both alike. Each run prints LangGraph's own cost
beside noterag's (the bare loop and the same-graph loop: LangGraph running the method's own
graph with plain nodes), so the comparison is of noterag's own code over its graph, not of the
machine.

Printed per method and side: CPU ms per model call of the method and of its same-graph loop,
their ratio (noterag's own code; issue 41's target: DeepNote <= 1.15x), the ratio to the bare
loop; with ``--http``, per method the overhead at the HTTP request above the same-graph loop's
(points of wall; target for the note methods: <= 1) and wall / critical path (target <= 1.10x).
Medians over ``--rounds``. Rows in bench/results/before_after.json.

    python bench/before_after.py --before ../before [--rounds 3] [--floor-questions 100] [--http]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from common import print_table, write_results

HERE = Path(__file__).resolve().parents[1]


def run_side(checkout: Path, args: list[str]) -> list[dict[str, Any]]:
    """bench/orchestration.py of ``checkout`` with its own venv's Python: its JSON rows."""
    python = checkout / ".venv" / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"error: {python} not found: run `make install` in {checkout} first")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.json"
        done = subprocess.run(
            [str(python), "bench/orchestration.py", *args, "--json", str(out)],
            cwd=checkout,
            check=False,  # its exit is read below, with its last line
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            raise SystemExit(f"error: orchestration.py in {checkout} failed: {tail[0]}")
        rows: list[dict[str, Any]] = json.loads(out.read_text())
        return rows


def median_of(rounds: list[list[dict[str, Any]]], side: str) -> list[dict[str, Any]]:
    """Per method, the median of each figure over the rounds."""
    by_method: dict[str, list[dict[str, Any]]] = {}
    for rows in rounds:
        for row in rows:
            kind = "floor" if "graph_ratio" in row else "http"
            by_method.setdefault(f"{kind}:{row['method']}", []).append(row)
    out = []
    for key, rows in by_method.items():
        kind, method = key.split(":", 1)
        merged: dict[str, Any] = {"side": side, "kind": kind, "method": method}
        for name in rows[0]:
            values = [r[name] for r in rows if isinstance(r.get(name), int | float)]
            if len(values) == len(rows) and not isinstance(rows[0][name], bool):
                merged[name] = statistics.median(values)
        if kind == "http":
            wall_ms = 1000 * merged["wall_s"]
            merged["above_graph_points"] = (
                100 * (merged["overhead_ms"] - merged["same_graph_overhead_ms"]) / wall_ms
            )
        out.append(merged)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="the older checkout")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--floor-questions", type=int, default=100)
    parser.add_argument("--floor-methods", default="deepnote,resp,amber,vanilla")
    parser.add_argument("--http", action="store_true", help="also the HTTP overhead (slow)")
    parser.add_argument("--questions", type=int, default=5, help="questions a method (--http)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    before = args.before.resolve()
    if not (before / "bench" / "orchestration.py").exists():
        raise SystemExit(f"error: {before} is not a noterag checkout (no bench/orchestration.py)")
    floor = [
        "--floor-questions",
        str(args.floor_questions),
        "--floor-rounds",
        "1",
        "--floor-methods",
        args.floor_methods,
    ]
    side_args = (
        [*floor, "--questions", str(args.questions)] if args.http else [*floor, "--floor-only"]
    )
    rounds: dict[str, list[list[dict[str, Any]]]] = {"before": [], "after": []}
    for i in range(args.rounds):
        for side, checkout in (("before", before), ("after", HERE)):
            print(f"round {i + 1}/{args.rounds}: {side} ({checkout})", flush=True)
            rounds[side].append(run_side(checkout, side_args))
    rows = median_of(rounds["before"], "before") + median_of(rounds["after"], "after")
    floors = sorted(
        (r for r in rows if r["kind"] == "floor"), key=lambda r: (r["method"], r["side"])
    )
    print(f"\nCPU floor, no HTTP (median of {args.rounds} rounds, each side in turn)")
    print_table(
        floors,
        [
            ("method", "method", ""),
            ("side", "side", ""),
            ("method_ms_per_call", "noterag ms/call", ".3f"),
            ("graph_loop_ms_per_call", "same-graph loop", ".3f"),
            ("graph_ratio", "own code (target deepnote <= 1.15x)", ".3f"),
            ("runnables_ratio", "inside its nodes", ".3f"),
            ("loop_ms_per_call", "bare loop", ".3f"),
            ("ratio", "over bare loop", ".3f"),
        ],
    )
    https = sorted((r for r in rows if r["kind"] == "http"), key=lambda r: (r["method"], r["side"]))
    if https:
        print(f"\nAt the HTTP request (median of {args.rounds} rounds)")
        print_table(
            https,
            [
                ("method", "method", ""),
                ("side", "side", ""),
                ("wall_s", "wall s/q", ".3f"),
                ("overhead_ms", "overhead ms/q", ".1f"),
                ("same_graph_overhead_ms", "same-graph loop ms/q", ".1f"),
                ("above_graph_points", "above it, points (note methods <= 1)", "+.2f"),
                ("wall_over_critical", "wall / critical path (<= 1.10)", ".3f"),
            ],
        )
    print(f"wrote {write_results('before_after', rows, args.json)}")


if __name__ == "__main__":
    main()
