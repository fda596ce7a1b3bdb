"""``noterag corpus-from``: pool a dataset's paragraphs into a corpus for ``noterag index``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.text import Text

from noterag.base.errors import ConfigError
from noterag.cli.errors import user_errors
from noterag.cli.local import guard_of
from noterag.cli.options import FormatOption
from noterag.cli.render import plural, status, stderr_console


def corpus_from_command(
    ctx: typer.Context,
    dataset: Annotated[
        list[Path],
        typer.Argument(
            help="Dataset files whose questions carry their paragraphs (HotpotQA, 2Wiki, "
            "MuSiQue, IRCoT), pooled together; or IRCoT's raw_data/2wikimultihopqa or "
            "raw_data/musique folder (see docs/corpora.md).",
            show_default=False,
        ),
    ],
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            "-o",
            help="Corpus JSONL to write ({id, title, text} lines).",
            show_default=False,
        ),
    ],
    dataset_format: FormatOption = None,
    style: Annotated[
        str,
        typer.Option(
            "--style",
            help="noterag: one passage per title and text, blank ones dropped; deepnote: as "
            "DeepNote's/Adaptive-Note's index scripts (2Wiki: one per text, the last title "
            "seen; blank ones kept); see docs/deviations.md.",
        ),
    ] = "noterag",
    force: Annotated[bool, typer.Option("--force", help="Replace an existing --out file.")] = False,
) -> None:
    """Pool a dataset's paragraphs into a corpus for `noterag index` (dedup by title + text)."""
    console = stderr_console()
    with user_errors(guard_of(ctx)):
        if out.exists() and not force:
            raise ConfigError(f"{out} already exists; pass --force to replace it")
        from noterag.datasets import PoolStats, pool_corpus

        stats = PoolStats()
        with status(console, "pooling") as spinner:

            def progress(name: str, seen: PoolStats) -> None:
                if spinner is not None:  # a terminal: how far, for corpora of 100k+ questions
                    spinner.update(
                        f"pooling {escape(name)}: {seen.questions:,} questions, "
                        f"{seen.passages:,} passages"
                    )

            count = pool_corpus(
                dataset, out, format=dataset_format, stats=stats, progress=progress, style=style
            )
        line = Text(f"wrote {count:,} {plural(count, 'passage')} to {out}")
        line.append(
            f" ({stats.questions:,} {plural(stats.questions, 'question')}, "
            f"{stats.duplicates:,} duplicate {plural(stats.duplicates, 'paragraph')} dropped"
            + (
                f", {stats.without_paragraphs:,} without paragraphs"
                if stats.without_paragraphs
                else ""
            )
            + ")",
            style="dim",
        )
        console.print(line)
