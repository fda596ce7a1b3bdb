"""The statistics of a DNAlign run, in the shape of the paper's Table 3 (Appendix D: pairs per
stage D_Init, D_QR, D_KA, D_Ans and in all), plus what the table leaves out: how many questions
gave each stage a pair and why the others did not (the scoring outcomes of
``noterag.align.scoring``), the lengths of prompts and replies in whitespace-separated words,
and the cost of the generator and the judge (calls and tokens from the models' usage reports).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from noterag.align.scoring import PAIR, PAPER_NAMES, STAGES

# The paper's column order (Table 3).
TABLE_ORDER = ("init_note", "refine_query", "accumulate", "rag")


def _words(text: str) -> int:
    return len(text.split())


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def pair_statistics(pairs: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Per stage: the number of pairs and the mean prompt / chosen / rejected length (words)."""
    by_stage: dict[str, list[dict[str, Any]]] = {name: [] for name in STAGES}
    for pair in pairs:
        by_stage.setdefault(pair["stage"], []).append(pair)
    stages = {}
    for name, rows in by_stage.items():
        stages[name] = {
            "pairs": len(rows),
            "prompt_words": _mean([_words(r["prompt"]) for r in rows]),
            "chosen_words": _mean([_words(r["chosen"]) for r in rows]),
            "rejected_words": _mean([_words(r["rejected"]) for r in rows]),
        }
    return {"stages": stages, "pairs": sum(s["pairs"] for s in stages.values())}


def run_statistics(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The statistics of a run's finished questions (``questions.jsonl`` rows)."""
    from noterag.align.stages import pair_rows

    answered = [row for row in rows if not row.get("error")]
    stats = pair_statistics(pair for row in answered for pair in pair_rows(row))
    for name in STAGES:
        outcomes = Counter(row["stages"][name]["outcome"] for row in answered)
        stats["stages"][name]["outcomes"] = dict(sorted(outcomes.items()))
    costs: dict[str, dict[str, float | int | None]] = {}
    for role in ("generator", "judge"):
        total = {
            key: sum(row[role][key] for row in answered)
            for key in ("calls", "prompt_tokens", "completion_tokens")
        }
        per_question = {
            f"{k}_per_question": _mean([row[role][k] for row in answered]) for k in total
        }
        costs[role] = total | per_question
    fallbacks: Counter[str] = Counter()
    for row in answered:
        fallbacks.update(row.get("fallbacks") or {})
    latencies = [row["latency_s"] for row in answered if row.get("latency_s") is not None]
    return stats | {
        "questions": len(rows),
        "answered": len(answered),
        "failed": len(rows) - len(answered),
        "cost": costs,
        "retries": sum(row.get("retries", 0) for row in rows),
        "fallbacks": dict(sorted(fallbacks.items())),
        "latency_s": _mean(latencies),
    }


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:,.1f}"


def statistics_table(stats: dict[str, Any]) -> str:
    """The statistics as a markdown table (Table 3's rows first), then the costs."""
    stages = stats["stages"]
    header = "| | " + " | ".join(PAPER_NAMES[n] for n in TABLE_ORDER) + " | D |"
    lines = [header, "|---|" + "---:|" * (len(TABLE_ORDER) + 1)]
    lines.append(
        "| # Sample | "
        + " | ".join(f"{stages[n]['pairs']:,}" for n in TABLE_ORDER)
        + f" | {stats['pairs']:,} |"
    )
    answered = stats.get("answered")
    if answered is not None:
        lines.append(
            "| questions with a pair | "
            + " | ".join(
                f"{stages[n]['pairs'] / answered:.0%}" if answered else "–" for n in TABLE_ORDER
            )
            + f" | {answered:,} answered |"
        )
        lines.append(
            "| no pair (why) | "
            + " | ".join(
                ", ".join(
                    f"{outcome} {count}"
                    for outcome, count in stages[n].get("outcomes", {}).items()
                    if outcome != PAIR
                )
                or "–"
                for n in TABLE_ORDER
            )
            + " | |"
        )
    for key, label in (
        ("prompt_words", "prompt words (mean)"),
        ("chosen_words", "chosen words (mean)"),
        ("rejected_words", "rejected words (mean)"),
    ):
        lines.append(
            f"| {label} | " + " | ".join(_fmt(stages[n][key]) for n in TABLE_ORDER) + " | |"
        )
    text = "\n".join(lines) + "\n"
    cost = stats.get("cost")
    if cost:
        parts = []
        for role in ("generator", "judge"):
            c = cost[role]
            parts.append(
                f"{role}: {c['calls']:,} calls, {c['prompt_tokens']:,} prompt + "
                f"{c['completion_tokens']:,} completion tokens "
                f"({_fmt(c['calls_per_question'])} calls/question)"
            )
        text += "\n" + "; ".join(parts) + "\n"
        extra = [f"{stats['failed']} failed question(s)"] if stats.get("failed") else []
        if stats.get("fallbacks"):
            extra.append(
                "unreadable judge replies: "
                + ", ".join(f"{k} {v}" for k, v in stats["fallbacks"].items())
            )
        if stats.get("retries"):
            extra.append(f"{stats['retries']} request(s) retried")
        if stats.get("latency_s") is not None:
            extra.append(f"{stats['latency_s']:.1f} s per question")
        if extra:
            text += "; ".join(extra) + "\n"
    return text
