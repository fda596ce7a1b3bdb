"""``noterag reproduce TABLE``: a published table re-run with the user's model, beside the
published numbers (``noterag.reproduce``; docs/reproduce.md)."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Annotated

import click
import typer
from rich.console import Console
from rich.text import Text

from noterag.base.errors import ConfigError, NoteragError
from noterag.base.redact import redact
from noterag.base.terminal import printable, terminal_safe_json
from noterag.cli.errors import user_errors
from noterag.cli.local import guard_of
from noterag.cli.options import (
    ConcurrencyOption,
    LimitOption,
    MaxRetriesOption,
    ModelOption,
    QuietOption,
    RayOption,
    RetryErrorsOption,
    ShardOption,
    TimeoutOption,
    WorkersOption,
    model_settings,
)
from noterag.cli.render import stderr_console

# --index-type's choices (noterag.reproduce.plan.INDEX_TYPES)
IndexType = Enum("IndexType", {"exact": "exact", "ivfpq": "ivfpq"}, type=str)


def _names(values: list[str] | None) -> list[str] | None:
    """Repeatable and comma-separated: ``--rows a,b --rows c``."""
    if not values:
        return None
    return [name.strip() for value in values for name in value.split(",") if name.strip()]


def reproduce_command(
    ctx: typer.Context,
    table: Annotated[
        str,
        typer.Argument(
            help="The table: <paper>-table<N> with the paper's own number, e.g. deepnote-table1 "
            "(the shipped tables are the *.yaml files of noterag.tables).",
            show_default=False,
        ),
    ],
    model: ModelOption = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            help="Where the runs (one eval run directory each, under a folder per model), the "
            "reply cache and table.md / table.json / table.png go. Default: reproduce/TABLE.",
            show_default=False,
        ),
    ] = None,
    data: Annotated[
        Path | None,
        typer.Option(
            "--data",
            help="The folder holding the datasets, corpora and indexes, at the paths the table "
            "file names (--dry-run lists what is missing and how to get it). Default: every "
            "dataset stands on the shipped sample questions and corpus (a smoke run).",
            show_default=False,
        ),
    ] = None,
    datasets: Annotated[
        list[str] | None,
        typer.Option(
            "--datasets", help="Only these datasets (the table file's keys, comma-separated)."
        ),
    ] = None,
    rows: Annotated[
        list[str] | None,
        typer.Option("--rows", help="Only these rows (their ids, comma-separated)."),
    ] = None,
    backbone: Annotated[
        str | None,
        typer.Option(
            "--backbone",
            help="Which published backbone's cells to compare with (--model stands in for it). "
            "Default: the table's first.",
            show_default=False,
        ),
    ] = None,
    limit: LimitOption = None,
    index_type: Annotated[
        IndexType,
        typer.Option(
            "--index-type",
            help="exact: every dense index searched exactly (FAISS flat, as the papers' "
            "IndexFlatIP; --dry-run prints its memory and build estimate); ivfpq: IVF-PQ "
            "indexes instead (beside the exact ones, <index>-ivfpq; far less memory, recall@5 "
            "0.94-0.97 against exact), their cells marked approximate.",
        ),
    ] = IndexType.exact,
    judge: Annotated[
        str | None,
        typer.Option(
            "--judge",
            help="The model that scores CRUD's RAGQuestEval cells (Q-R, T-R, T-P, T-F1): it "
            "answers CRUD's ground-truth questions from each generated text, one model call per "
            "question (the papers': openai:gpt-3.5-turbo-0125). Same forms as --model. Without "
            "it those cells are shown, not scored, and no run is made for them.",
            show_default=False,
        ),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Print the plan (the backbone and the table's others, each dataset's sample, "
            "each run's settings, questions, estimated calls and tokens, skipped rows, missing "
            "inputs with their download links and build costs) and run nothing.",
        ),
    ] = False,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", help="Print the plan (with --dry-run) or the table as JSON on stdout."
        ),
    ] = False,
    tables: Annotated[
        Path | None,
        typer.Option(
            "--tables",
            help="A folder of table files to read TABLE from instead of the shipped ones.",
            show_default=False,
        ),
    ] = None,
    concurrency: ConcurrencyOption = None,
    workers: WorkersOption = None,
    ray: RayOption = None,
    shard: ShardOption = None,
    cache: Annotated[
        Path | None,
        typer.Option(
            "--cache",
            help="The SQLite file keeping every model reply (a resumed run replays the calls "
            "of a question cut short). Default: OUT/llm-cache.sqlite.",
            show_default=False,
        ),
    ] = None,
    timeout: TimeoutOption = None,
    max_retries: MaxRetriesOption = None,
    retry_errors: RetryErrorsOption = False,
    allow_remote_index: Annotated[
        bool,
        typer.Option(
            "--allow-remote-index",
            help="Search an index on another host that the table file names (an es:http://... "
            "retriever spec; --dry-run lists them). A table file is text from anywhere: "
            "without this flag such a run is refused.",
        ),
    ] = False,
    quiet: QuietOption = False,
) -> None:
    """Reproduce a paper's table: run each of its rows' methods with your model on each of its
    datasets (only what is not done yet), then print published | ours | Δ | 95% CI per cell."""
    console = stderr_console(quiet)
    guard = guard_of(ctx)
    with user_errors(guard):
        from noterag.eval.loop import model_label
        from noterag.reproduce.plan import make_plan
        from noterag.reproduce.tables import load_table

        spec = load_table(table, tables)
        out_dir = out if out is not None else Path("reproduce") / spec.id
        plan = make_plan(
            spec,
            out=out_dir,
            model=model,
            data=data,
            datasets=_names(datasets),
            rows=_names(rows),
            backbone=backbone,
            limit=limit,
            index_type=index_type.value,
            judge=model_label(judge) if judge is not None else None,
        )
        from noterag.reproduce import report

        if dry_run:
            if as_json:
                text = json.dumps(plan.to_json(), indent=1, ensure_ascii=False)
                click.echo(terminal_safe_json(text))  # the data whole, C1 controls escaped
            else:
                report.print_plan(plan, Console(highlight=False))
            return
        if plan.remote_indexes and not allow_remote_index:
            raise ConfigError(
                f"{spec.id} searches an index on another host ("
                f"{', '.join(redact(i) for i in plan.remote_indexes)}): pass "
                "--allow-remote-index to search it (--dry-run shows the plan)"
            )
        _need_eval_extra()
        from noterag.reproduce.run import execute

        with guard.owned(), guard.leave_at_once_on_interrupt():
            outcomes = execute(
                plan,
                model=model,
                shard=shard,
                workers=workers,
                ray=ray,
                concurrency=concurrency,
                cache=cache,
                settings=model_settings(timeout, max_retries),
                retry_errors=retry_errors,
                console=console,
                progress=not quiet,
            )
        judge_model = None
        if judge is not None:
            from noterag.models import load_chat_model

            judge_model = load_chat_model(judge, model_settings(timeout, max_retries))
        results = report.score_cells(plan, outcomes, judge_model)
        written = report.write_outputs(plan, results, outcomes, out_dir)
        if as_json:
            data_out = report.as_json(plan, results, outcomes)
            text = json.dumps(data_out, indent=1, ensure_ascii=False)
            click.echo(terminal_safe_json(text))  # the data whole, C1 controls escaped
        else:
            report.print_table(plan, results, Console(highlight=False))
        for m in plan.missing:
            line = printable(f"not run ({m.dataset}): missing {m.path}; {m.provide}")
            console.print(Text(line, "red"), soft_wrap=True)
        written_line = printable(f"written: {', '.join(map(str, written))}")
        console.print(Text(written_line, style="dim"), soft_wrap=True)


def _need_eval_extra() -> None:
    """Before any model call: the table's intervals need scipy, its plot matplotlib."""
    try:
        import matplotlib  # noqa: F401
        import scipy  # noqa: F401
    except ImportError:
        raise NoteragError(
            "reproduce needs scipy and matplotlib for its intervals and plot: "
            "pip install 'noterag[eval]' (--dry-run works without them)"
        ) from None
