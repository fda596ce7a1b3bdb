"""Fidelity figures on real HotpotQA questions (../shared/data/hotpotqa_dev500), with a simulated
model (no endpoint):

1. ``profile="official"``: one DeepNote and one Adaptive-Note question's whole prompt stream,
   compared prompt by prompt with the official loop transcribed in tests/official_loop.py,
   which renders the vendored official prompt files itself.
2. ``profile="paper"`` at default settings: steps and passages read per step for 20 questions.

    python bench/fidelity.py [--questions 20]

The simulated model answers every stage plausibly: new questions name two of the question's
supporting titles (so retrieval finds new passages), a note update appends one new sentence,
and the reviewer accepts every other update (alternating True / False per question) or, in the
second table, every update.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from common import print_table, write_results

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import noterag
from noterag.retrievers import load_retriever
from noterag.retrievers.bm25 import build_bm25_index
from official_loop import official_stream
from scripted import ScriptedModel

DATA = ROOT.parent / "shared" / "data" / "hotpotqa_dev500"


ALTERNATE = ['{"status": "True"}', '{"status": "False"}']
ACCEPT_ALL = ['{"status": "True"}']


def simulated(question: dict[str, Any], reviews: list[str] = ALTERNATE) -> dict[str, Any]:
    titles = question["supporting_titles"] + question["context_titles"]
    queries = [f"1. What is {a}?\n2. Who is {b}?" for a, b in zip(titles[::2], titles[1::2])]
    updates = [f"The note, with a sentence about {t}." for t in titles]
    return {
        "init_note": f"A note about {question['question']}",
        "refine_query": queries or ["1. nothing\n2. nothing"],
        "accumulate": updates,
        "review": reviews,
        "answer": question["answers"][0],
    }


def official_streams(questions: list[dict[str, Any]], retriever: Any) -> dict[str, Any]:
    out = {}
    for method, q in (("deepnote", questions[0]), ("adaptive-note", questions[1])):
        model = ScriptedModel(script=simulated(q))
        graph = noterag.build_graph(method, model=model, retriever=retriever)
        settings = {"max_steps": 3, "max_failures": 2 if method == "deepnote" else 1}
        graph.invoke({"question": q["question"]}, context={"profile": "official"} | settings)
        expected = official_stream(
            method,
            q["question"],
            retriever,
            ScriptedModel(script=simulated(q))._reply,
            top_k=5,
            max_step=settings["max_steps"],
            max_fail=settings["max_failures"],
        )
        diff = list(
            difflib.unified_diff(
                [f"{s}: {p!r}" for s, p in expected],
                [f"{s}: {p!r}" for s, p in model.calls],
                lineterm="",
            )
        )
        out[method] = {
            "question": q["question"],
            "prompts": len(model.calls),
            "stages": [s for s, _ in model.calls],
            "identical": model.calls == expected,
            "diff_lines": len(diff),
            "bytes": sum(len(p.encode()) for _, p in model.calls),
        }
        print(
            f"{method} official, {q['id']}: {len(model.calls)} prompts "
            f"({out[method]['bytes']:,} bytes) vs the official loop's {len(expected)}: "
            f"{'identical' if out[method]['identical'] else f'{len(diff)} diff lines'}"
        )
        print("  stages: " + " ".join(out[method]["stages"]))
    return out


def paper_steps(
    questions: list[dict[str, Any]], retriever: Any, reviews: list[str]
) -> list[dict[str, Any]]:
    rows = []
    for method in ("adaptive-note", "deepnote"):
        steps, reads, reasons, passages = [], [], Counter(), []
        for q in questions:
            model = ScriptedModel(script=simulated(q, reviews))
            out = noterag.build_graph(method, model=model, retriever=retriever).invoke(
                {"question": q["question"]}
            )
            steps.append(out["steps"])
            reads += [len(t["new_passage_ids"]) for t in out["trace"][1:]]
            passages.append(len(out["passage_ids"]))
            reasons[out["stop_reason"].split(" (")[-1].split(" =")[0]] += 1
        rows.append(
            {
                "method": method,
                "questions": len(questions),
                "mean_steps": sum(steps) / len(steps),
                "steps": dict(sorted(Counter(steps).items())),
                "passages_per_step": dict(sorted(Counter(reads).items())),
                "mean_passages": sum(passages) / len(passages),
                "stop_reasons": dict(reasons),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=20)
    args = parser.parse_args()
    if not DATA.exists():
        # a skip is no failure: `make bench` and CI go on (the reason is on stderr)
        print(f"skipped: {DATA} is not present (the shared HotpotQA data)", file=sys.stderr)
        return
    questions = [json.loads(line) for line in (DATA / "questions.jsonl").open()][: args.questions]
    with tempfile.TemporaryDirectory() as tmp:
        build_bm25_index(DATA / "corpus.jsonl", Path(tmp) / "index")
        retriever = load_retriever(f"bm25:{Path(tmp) / 'index'}")
        streams = official_streams(questions, retriever)
        tables = {
            name: paper_steps(questions, retriever, reviews)
            for name, reviews in (("alternate", ALTERNATE), ("accept_all", ACCEPT_ALL))
        }
    for name, rows in tables.items():
        print(
            f"\nprofile=paper at default settings (k = 5; Adaptive-Note T_CI 3, T_IU 1, T_RP 15; "
            f"DeepNote max_steps 3, max_failures 2, no cap), {args.questions} HotpotQA questions, "
            f"reviewer: {name.replace('_', ' ')}:"
        )
        print_table(
            [
                r | {k: json.dumps(r[k]) for k in ("steps", "passages_per_step", "stop_reasons")}
                for r in rows
            ],
            [
                ("method", "method", ""),
                ("mean_steps", "mean steps", ".2f"),
                ("steps", "steps: questions", ""),
                ("passages_per_step", "passages per step: steps", ""),
                ("mean_passages", "passages/q", ".1f"),
                ("stop_reasons", "stopped by", ""),
            ],
        )
    path = write_results("fidelity", {"official_streams": streams, "paper_steps": tables})
    print(f"(figures in {path.relative_to(ROOT)})")


if __name__ == "__main__":
    main()
