"""Each method's cost per question, measured: what `noterag reproduce --dry-run` estimates from.

Every registered method, under each of its profiles, answers the shipped sample questions
(noterag/data/sample_questions.jsonl, over the sample corpus's BM25 index) through
`run_eval` against bench/sim_endpoint.py (no latency: only the counts matter). The endpoint
answers each prompt stage plausibly, so the graphs take their usual paths; its token counts
are whitespace words (prompt and reply), not a tokenizer's, so read the token figures as an
order of magnitude. A method the endpoint cannot serve (FLARE, REPLUG and Self-RAG read token
log-probabilities, which it does not return) is measured with tests/scripted.py's scripted
model instead (every token certain, Self-RAG's reflection tokens from its stand-in), which
counts tokens the same way; its entry says so (``"model": "scripted"``). Writes the per-method means to noterag/data/method_costs.json (read by
noterag.reproduce.plan) and to bench/results/method_costs.json, and prints them.

    python bench/method_costs.py [--methods deepnote,vanilla]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # scripted.py

from common import print_table, write_results
from sim_endpoint import SimModel, start

from noterag.base.errors import NoteragError
from noterag.eval import run_eval
from noterag.registry.methods import METHODS
from noterag.retrievers.sample import sample_index
from scripted import ScriptedModel

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = ROOT / "noterag" / "data" / "sample_questions.jsonl"
OUT = ROOT / "noterag" / "data" / "method_costs.json"
COMMAND = "python bench/method_costs.py"


def measure(methods: list[str], work: Path, url: str) -> tuple[dict[str, dict], list[dict]]:
    costs: dict[str, dict] = {}
    rows: list[dict] = []
    index = sample_index(work)
    for method in methods:
        for profile in METHODS[method].profiles:
            key = f"{method}/{profile}"
            for label, model in (
                ("sim", f"openai:sim@{url}"),
                ("scripted", ScriptedModel.for_method(method)),
            ):
                try:
                    summary = run_eval(
                        method,
                        QUESTIONS,
                        work / f"{key.replace('/', '.')}.{label}",
                        index=f"bm25:{index}",
                        model=model,
                        context={"profile": profile},
                        progress=False,
                        concurrency=1,
                    )
                except NoteragError as exc:  # a method the sample cannot run: say so, go on
                    print(f"{key} ({label}): not measured: {exc}", file=sys.stderr)
                    continue
                if summary["n"] > summary["n_errors"]:
                    break
                print(f"{key} ({label}): {summary['first_error']}", file=sys.stderr)
            else:
                continue
            answered = summary["n"] - summary["n_errors"]
            cost = summary["cost"]
            costs[key] = {
                "model": label,
                "questions": answered,
                "llm_calls": round(cost["llm_calls"], 2),
                "prompt_tokens": round(cost["prompt_tokens"], 1),
                "completion_tokens": round(cost["completion_tokens"], 1),
            }
            rows.append({"run": key, **costs[key]})
    return costs, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", help="comma-separated (default: every registered method)")
    args = parser.parse_args()
    methods = args.methods.split(",") if args.methods else list(METHODS)
    server, url = start(SimModel(0.0, 0.0, seed=0))
    try:
        with tempfile.TemporaryDirectory() as tmp:
            costs, rows = measure(methods, Path(tmp), url)
    finally:
        server.shutdown()
    print_table(
        rows,
        [
            ("run", "method/profile", ""),
            ("model", "model", ""),
            ("questions", "questions", "d"),
            ("llm_calls", "calls/q", ".2f"),
            ("prompt_tokens", "prompt tok/q", ".0f"),
            ("completion_tokens", "completion tok/q", ".0f"),
        ],
    )
    data = {
        "command": COMMAND,
        "measured": time.strftime("%Y-%m-%d", time.gmtime()),
        "how": "the sample questions over the sample corpus's BM25 index, against "
        "bench/sim_endpoint.py; tokens are whitespace words of prompt and reply",
        "costs": costs,
    }
    if not args.methods:  # the shipped file holds every method's figures
        OUT.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        print(f"written to {OUT.relative_to(ROOT)}")
    print(f"written to {write_results('method_costs', data)}")


if __name__ == "__main__":
    main()
