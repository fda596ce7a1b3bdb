"""Each method's cost per question, measured: what `noterag reproduce --dry-run` estimates from.

Every registered method, under each of its profiles, answers the shipped sample questions
(noterag/data/sample_questions.jsonl, over the sample corpus's BM25 index) through
`run_eval` against bench/sim_endpoint.py (no latency: only the counts matter). The endpoint
answers each prompt stage plausibly, so the graphs take their usual paths; its token counts
are whitespace words (prompt and reply), not a tokenizer's, so read the token figures as an
order of magnitude. The endpoint recognises a method's stages from the prompt templates it
declares (bench/sim_endpoint.py), so a method added later is measured on its own loop; check
the ``steps/q`` column. A method only a specially trained model can run (its ``MethodSpec``
declares a ``stand_in``: Self-RAG reads the reflection tokens only a Self-RAG-trained model
writes) is measured, where the endpoint fails it, with tests/scripted.py's scripted model
instead (every token certain, the reflection tokens from its stand-in, its search script's
replies), which counts tokens the same way; its entry says so (``"model": "scripted"``). Each
entry also keeps the loop's mean ``steps`` per question and a fingerprint of the profile's
prompt texts (``prompts``), which tells a stale entry; an entry whose ``steps`` reach the
method's ``max_steps`` is marked ``"at_cap": true`` (its loop never stopped before the cap on
the simulated replies: its cost is the cap's), with a line saying so.

A measurement that fails is never recorded: a question ending in an error on the simulated
endpoint, or an error in the method's declaration (``MethodError``, refused when its graph is
built), is a broken method. The script then writes the other entries, leaves that one out, and
exits non-zero naming it (so ``make register`` fails). Only a profile the sample cannot run (a
data file it needs) is kept as ``not_measured``.

Writes the per-method means to noterag/data/method_costs.json (read by noterag.reproduce.plan)
and to bench/results/method_costs.json, and prints them. With no option every registered
method is measured and the file rewritten; ``--methods`` measures those and merges them into the
file; ``--missing`` (what ``make register`` runs) measures only the method/profiles the file
lacks or measured with other prompts. Either way a method no longer registered is dropped with a
line saying so, and a profile that cannot run on the sample (a required data file) is kept as
``not_measured`` with the reason, so that ``--missing`` does not try it again.

    python bench/method_costs.py [--methods deepnote,vanilla | --missing]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # scripted.py

from common import print_table, write_results
from sim_endpoint import SimModel, declared_prompts, start

import noterag
from noterag.base.errors import NoteragError
from noterag.core.context import resolve_context
from noterag.core.spec import MethodError
from noterag.eval import run_eval
from noterag.registry.methods import METHODS
from noterag.retrievers.sample import sample_index
from scripted import ScriptedModel

# The data of the noterag imported (noterag.reproduce.plan reads the costs there): this
# checkout's, or a test's copy of the package tree on PYTHONPATH (not resolved: its files are
# links into the checkout).
DATA = Path(noterag.__file__).parent / "data"
QUESTIONS = DATA / "sample_questions.jsonl"
OUT = DATA / "method_costs.json"
COMMAND = "python bench/method_costs.py"


def fingerprint(method: str, profile: str) -> str:
    """The profile's prompt texts, hashed: a changed prompt makes the measured entry stale."""
    texts = [
        [stage, prompt.name, prompt.text]
        for stage, prompt in declared_prompts(METHODS[method].prompts[profile])
    ]
    return hashlib.sha256(json.dumps(texts).encode()).hexdigest()[:16]


def mean_steps(run_dir: Path) -> float | None:
    """The loop's mean iterations per answered question (None: the method counts none)."""
    rows = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    steps = [row["steps"] for row in rows if not row.get("error") and row.get("steps") is not None]
    return round(sum(steps) / len(steps), 2) if steps else None


def max_steps(method: str, profile: str) -> int | None:
    """The method's ``max_steps`` under ``profile``'s settings (None: it has no such setting)."""
    ctx = resolve_context(METHODS[method].context, {"profile": profile})
    value = getattr(ctx, "max_steps", None)
    return value if isinstance(value, int) else None


def models(method: str, url: str) -> list[tuple[str, Any, dict[str, Any]]]:
    """What ``method`` is measured with, in turn: (label, model, settings). The simulated
    endpoint; for a method only a specially trained model runs (``MethodSpec.stand_in``), the
    scripted stand-in after it, taking the method's search path (its ``search_script``). Any
    other method the endpoint fails is broken: a stand-in answering "ok" would measure a run
    that never took its search path (two calls, no step), and hide the failure."""
    spec = METHODS[method]
    tried: list[tuple[str, Any, dict[str, Any]]] = [("sim", f"openai:sim@{url}", {})]
    if spec.stand_in is not None:
        stand_in = ScriptedModel.searching(method)
        tried.append(("scripted", stand_in, dict(spec.search_script.settings)))
    return tried


def measure(
    runs: list[tuple[str, str]], work: Path, url: str
) -> tuple[dict[str, dict], dict[str, dict], list[dict], dict[str, str]]:
    """Each (method, profile)'s means; the runs the sample cannot run, with why; and the runs
    that failed (a broken method), with why."""
    costs: dict[str, dict] = {}
    failed: dict[str, dict] = {}
    broken: dict[str, str] = {}
    rows: list[dict] = []
    index = sample_index(work)
    day = time.strftime("%Y-%m-%d", time.gmtime())
    for method, profile in runs:
        key = f"{method}/{profile}"
        why, unrunnable, summary = "no answer", False, None
        for label, model, settings in models(method, url):
            run_dir = work / f"{key.replace('/', '.')}.{label}"
            try:
                result = run_eval(
                    method,
                    QUESTIONS,
                    run_dir,
                    index=f"bm25:{index}",
                    model=model,
                    context={"profile": profile} | settings,
                    progress=False,
                    concurrency=1,
                )
            except MethodError as exc:  # the method's own bug: no other model will do
                why, unrunnable = str(exc), False
                print(f"{key} ({label}): {exc}", file=sys.stderr)
                break
            except NoteragError as exc:  # a method the sample cannot run: say so, go on
                why, unrunnable = str(exc), True
                print(f"{key} ({label}): not measured: {exc}", file=sys.stderr)
                continue
            if not result["n_errors"]:
                summary = result
                break
            why, unrunnable = str(result["first_error"]), False
            print(
                f"{key} ({label}): {result['n_errors']} of {result['n']} questions failed: "
                f"{result['first_error']}",
                file=sys.stderr,
            )
        if summary is None:
            if unrunnable:
                failed[key] = {"why": why, "prompts": fingerprint(method, profile)}
            else:
                broken[key] = why
            continue
        answered = summary["n"] - summary["n_errors"]
        cost = summary["cost"]
        costs[key] = {
            "model": label,
            "questions": answered,
            "llm_calls": round(cost["llm_calls"], 2),
            "prompt_tokens": round(cost["prompt_tokens"], 1),
            "completion_tokens": round(cost["completion_tokens"], 1),
            "steps": mean_steps(run_dir),
            "prompts": fingerprint(method, profile),
            "measured": day,
        }
        cap = max_steps(method, profile)
        if cap is not None and costs[key]["steps"] is not None and costs[key]["steps"] >= cap:
            costs[key]["at_cap"] = True
            print(
                f"{key}: measured at the cap: {costs[key]['steps']} steps per question = its "
                f"max_steps {cap}; its loop never stopped earlier on the simulated replies, so "
                f"this is the cap's cost (expected only of a method that always runs max_steps; "
                f"else check its stop rule)"
            )
        rows.append({"run": key, **costs[key]})
    return costs, failed, rows, broken


def registered_runs() -> list[tuple[str, str]]:
    return [(method, profile) for method, spec in METHODS.items() for profile in spec.profiles]


def stale_runs(shipped: dict[str, Any]) -> list[tuple[str, str]]:
    """The registered (method, profile)s the shipped file has no current entry for: none, or
    one measured (or found unmeasurable) with other prompts."""
    entries = shipped.get("costs", {}) | shipped.get("not_measured", {})
    return [
        (method, profile)
        for method, profile in registered_runs()
        if entries.get(f"{method}/{profile}", {}).get("prompts") != fingerprint(method, profile)
    ]


def without_unregistered(entries: dict[str, dict]) -> dict[str, dict]:
    """``entries`` less the method/profiles no longer registered, each dropped with a line."""
    registered = {f"{method}/{profile}" for method, profile in registered_runs()}
    for key in sorted(set(entries) - registered):
        print(f"dropped {key}: no longer a registered method and profile")
    return {key: entry for key, entry in entries.items() if key in registered}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--methods", help="comma-separated; merged into the shipped file")
    which.add_argument(
        "--missing",
        action="store_true",
        help="only the method/profiles the shipped file lacks or measured with other prompts",
    )
    args = parser.parse_args()
    shipped = json.loads(OUT.read_text()) if OUT.is_file() else {}
    if args.missing:
        runs = stale_runs(shipped)
    elif args.methods:
        names = args.methods.split(",")
        unknown = [name for name in names if name not in METHODS]
        if unknown:
            sys.exit(
                f"error: unknown method {', '.join(unknown)}; choose from {', '.join(METHODS)}"
            )
        runs = [(method, profile) for method in names for profile in METHODS[method].profiles]
    else:
        runs = registered_runs()
    if runs:
        server, url = start(SimModel(0.0, 0.0, seed=0))
        try:
            with tempfile.TemporaryDirectory() as tmp:
                costs, failed, rows, broken = measure(runs, Path(tmp), url)
        finally:
            server.shutdown()
        print_table(
            rows,
            [
                ("run", "method/profile", ""),
                ("model", "model", ""),
                ("questions", "questions", "d"),
                ("llm_calls", "calls/q", ".2f"),
                ("steps", "steps/q", ".2f"),
                ("prompt_tokens", "prompt tok/q", ".0f"),
                ("completion_tokens", "completion tok/q", ".0f"),
                ("at_cap", "at max_steps", ""),
            ],
        )
        for key, entry in failed.items():
            print(f"{key}: not measured: {entry['why']}")
    else:
        costs, failed, broken = {}, {}, {}
        print(f"every registered method and profile is measured in {OUT}")
    measured = {f"{method}/{profile}" for method, profile in runs}
    keep = args.missing or bool(args.methods)  # else the file is rewritten from this run alone
    old_costs = shipped.get("costs", {}) if keep else {}
    old_failed = shipped.get("not_measured", {}) if keep else {}
    data = {
        "command": COMMAND,
        "how": "the sample questions over the sample corpus's BM25 index, against "
        "bench/sim_endpoint.py; tokens are whitespace words of prompt and reply",
        "costs": without_unregistered(
            {k: v for k, v in old_costs.items() if k not in measured} | costs
        ),
        "not_measured": without_unregistered(
            {k: v for k, v in old_failed.items() if k not in measured} | failed
        ),
    }
    if data != {k: shipped.get(k) for k in data}:
        OUT.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        print(f"written to {OUT}")
    print(f"written to {write_results('method_costs', data)}")
    if broken:  # left out of the file: make register fails, naming each
        sys.exit(
            "\n".join(
                f"error: {key} not measured: {why}; fix the method (`noterag ask -m "
                f"{key.split('/')[0]} ...` shows the same error) and run `make register` again"
                for key, why in broken.items()
            )
        )
    methods = {key.split("/")[0] for key in data["costs"]}
    unmeasured = [method for method in METHODS if method not in methods]
    if unmeasured:  # no profile of theirs runs on the sample: no estimate for their runs
        sys.exit(f"error: no cost measured for {', '.join(unmeasured)} (see the lines above)")


if __name__ == "__main__":
    main()
