"""``noterag eval`` (a method over a dataset, resumable) and ``noterag compare`` (runs side by
side: a table and a quality-versus-cost plot)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import click
import typer
from rich.console import Console
from rich.text import Text

from noterag.base.terminal import printable
from noterag.cli.errors import user_errors
from noterag.cli.local import guard_of
from noterag.cli.options import (
    CacheOption,
    ConcurrencyOption,
    FormatOption,
    IndexOption,
    LimitOption,
    MaxRetriesOption,
    ModelOption,
    PromptOption,
    QuietOption,
    RayOption,
    RetryErrorsOption,
    ShardOption,
    TimeoutOption,
    WorkersOption,
    method_option,
    model_settings,
    parse_context,
    prompt_overrides,
    retriever_spec,
)
from noterag.cli.render import stderr_console
from noterag.eval.report import MAX_ERROR_RATE, RunFailedError, Summary, error_budget
from noterag.registry.methods import METHODS


class PlotX(str, Enum):
    calls = "calls"
    tokens = "tokens"


def eval_command(
    ctx: typer.Context,
    method: Annotated[str, method_option(show_default=False)],
    dataset: Annotated[
        Path,
        typer.Option(
            "--dataset",
            "-d",
            help="Questions with gold answers: our JSONL, HotpotQA, 2WikiMultihopQA, MuSiQue, "
            "IRCoT, StrategyQA, ASQA or FlashRAG files (the format is detected).",
            show_default=False,
        ),
    ],
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            "-o",
            help="Run directory: run.json, results.jsonl (one line per question), summary.json. "
            "Running the same command again resumes it.",
            show_default=False,
        ),
    ],
    index: IndexOption = None,
    limit: LimitOption = None,
    concurrency: ConcurrencyOption = None,
    model: ModelOption = None,
    timeout: TimeoutOption = None,
    max_retries: MaxRetriesOption = None,
    extra: Annotated[
        list[str] | None,
        typer.Option(
            "--context",
            "-c",
            help="A setting of the method as KEY=VALUE (repeatable), e.g. -c max_steps=2 "
            "-c max_tokens=64. `noterag methods` lists each method's settings.",
            show_default=False,
        ),
    ] = None,
    fair_topk_from: Annotated[
        Path | None,
        typer.Option(
            "--fair-topk-from",
            help="vanilla only: set top_k to the mean number of distinct passages per question "
            "of that run directory (the papers' fair top-k baseline).",
            show_default=False,
        ),
    ] = None,
    prompts: PromptOption = None,
    dataset_format: FormatOption = None,
    retry_errors: RetryErrorsOption = False,
    rerun_changed: Annotated[
        bool,
        typer.Option(
            "--rerun-changed",
            help="On resume, ask again the questions whose text, gold answers or task changed "
            "in the dataset and keep the other answers (without it, such a resume is refused).",
        ),
    ] = False,
    max_error_rate: Annotated[
        float,
        typer.Option(
            "--max-error-rate",
            min=0.0,
            max=1.0,
            help="Fail (exit 1, after the summary) when more than this share of the questions "
            "failed; failing every question always fails.",
        ),
    ] = MAX_ERROR_RATE,
    force: Annotated[
        bool,
        typer.Option("--force", help="Start the run directory over, discarding its results."),
    ] = False,
    quiet: QuietOption = False,
    workers: WorkersOption = None,
    ray: RayOption = None,
    shard: ShardOption = None,
    cache: CacheOption = None,
) -> None:
    """Evaluate a method on a dataset: answers, metrics and costs per question, then a summary."""
    console = stderr_console(quiet)
    guard = guard_of(ctx)
    with user_errors(guard):
        method_spec = METHODS[method]  # the one lookup: run_eval takes the spec
        context, _ = parse_context(method_spec, {}, extra or [], "eval")
        if prompts:
            context["prompts"] = prompt_overrides(method_spec, prompts)
        spec = retriever_spec(index, console)
        from noterag.eval.report import print_summary
        from noterag.eval.runner import run_eval

        with guard.owned(), guard.leave_at_once_on_interrupt():
            summary = run_eval(
                method_spec,
                dataset,
                out,
                index=spec,
                model=model,
                context=context,
                limit=limit,
                concurrency=concurrency,
                fair_topk_from=fair_topk_from,
                progress=not quiet,
                format=dataset_format,
                force=force,
                retry_errors=retry_errors,
                rerun_changed=rerun_changed,
                console=console,
                settings=model_settings(timeout, max_retries),
                workers=workers,
                shard=shard,
                cache=cache,
                ray=ray,
            )
        print_summary(summary, Console(highlight=False))
        # The last line says how many failed; too many fail the command.
        failure = error_budget(summary, max_error_rate)
        if failure is not None:
            raise RunFailedError(
                f"{failure}; the first: {summary['first_error']}; results in {out}; fix the "
                "cause, then run the same command with --retry-errors"
            )
        console.print(Text(printable(f"results in {out}: {_failures(summary)}"), style="dim"))


def merge_command(
    ctx: typer.Context,
    run_dirs: Annotated[
        list[Path],
        typer.Argument(
            help="The run directories of the shards (`noterag eval --shard I/N`).",
            show_default=False,
        ),
    ],
    out: Annotated[
        Path,
        typer.Option("--out", "-o", help="The merged run directory.", show_default=False),
    ],
    force: Annotated[bool, typer.Option("--force", help="Replace a run already in --out.")] = False,
) -> None:
    """Merge the shards of one evaluation into one run directory, after checking they agree
    (method, settings, model, index, questions) and are disjoint and complete."""
    console = stderr_console()
    with user_errors(guard_of(ctx)):
        from noterag.eval.merge import merge_runs
        from noterag.eval.report import print_summary

        summary = merge_runs(run_dirs, out, force=force)
        print_summary(summary, Console(highlight=False))
        console.print(Text(printable(f"merged run in {out}: {_failures(summary)}"), style="dim"))


def _failures(summary: Summary) -> str:
    """``6 questions, none failed`` / ``6 questions, 1 failed (...)``: how many failed."""
    n, failed = summary["n"], summary["n_errors"]
    counted = f"{n} question{'s' if n != 1 else ''}"
    if not failed:
        return f"{counted}, none failed"
    them = "it" if failed == 1 else "them"
    return f"{counted}, {failed} failed (counts 0; --retry-errors asks {them} again)"


def compare_command(
    ctx: typer.Context,
    run_dirs: Annotated[
        list[Path],
        typer.Argument(help="Run directories written by `noterag eval`.", show_default=False),
    ],
    plot_path: Annotated[
        Path | None,
        typer.Option(
            "--plot",
            help="Where to write the quality-versus-cost PNG. Default: compare.png in the first "
            "run directory (never the current directory: a checkout stays clean).",
            show_default=False,
        ),
    ] = None,
    no_plot: Annotated[bool, typer.Option("--no-plot", help="Only print the table.")] = False,
    x: Annotated[
        PlotX,
        typer.Option("--x", help="The plot's x axis: LLM calls or tokens per question."),
    ] = PlotX.calls,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Overwrite the --plot file even if it is not a plot noterag wrote (by default "
            "only an empty file or an earlier plot is replaced).",
        ),
    ] = False,
    baseline: Annotated[
        Path | None,
        typer.Option(
            "--baseline",
            help="The run the others are tested against (one of the RUN_DIRs). Default: the first.",
            show_default=False,
        ),
    ] = None,
    tests: Annotated[
        bool,
        typer.Option(
            "--significance/--no-significance",
            help="Test each run against the baseline, paired by question: the difference of "
            "each metric with a bootstrap 95% interval and p-value, and a paired t-test; "
            "significant differences are marked *. Runs over different questions are tested "
            "on the questions they share (with a warning).",
        ),
    ] = True,
    resamples: Annotated[
        int, typer.Option("--resamples", min=1, help="Bootstrap resamples.")
    ] = 10_000,
    seed: Annotated[int, typer.Option("--seed", help="The bootstrap's random seed.")] = 0,
) -> None:
    """Compare runs: a markdown table (metrics, LLM calls, tokens, passages, latency), paired
    significance tests against a baseline run, and a plot.

    One row per run directory; the PNG plots EM and F1 against LLM calls (or tokens) per
    question."""
    console = stderr_console()
    with user_errors(guard_of(ctx)):
        from noterag.eval.report import compare, plot

        significance = None
        if tests and len(run_dirs) > 1:
            from noterag.eval.significance import compare_runs

            significance = compare_runs(run_dirs, baseline, resamples=resamples, seed=seed)
            for warning in significance.warnings:
                console.print(Text(printable(f"warning: {warning}"), style="yellow"))
        # the table quotes the runs' own labels (model, settings, paths): printable only
        click.echo(printable(compare(run_dirs, significance)), nl=False)
        if not no_plot:
            written = plot(
                run_dirs,
                plot_path if plot_path is not None else run_dirs[0] / "compare.png",
                x="llm_calls" if x is PlotX.calls else "tokens",
                force=force,
            )
            console.print(Text(printable(f"plot written to {written}"), style="dim"))
