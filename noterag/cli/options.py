"""What the commands share: option types, choice enums, the run's context and model settings
from the command line, and the retriever spec behind ``--index``."""

from __future__ import annotations

import os
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.text import Text

from noterag.base.errors import ConfigError, IndexNotFoundError
from noterag.cli.render import status
from noterag.core.context import (
    PROFILES,
    TASKS,
    RunContext,
    context_from_pairs,
    refuse_human_review,
    resolve_context,
    setting_names,
)
from noterag.core.spec import MethodSpec, override_prompts
from noterag.registry.methods import METHODS

# Every task and profile, so a new one needs no CLI change. (Built from data, so a type checker
# sees them as enums without members.) A method is checked against the registry when the
# command runs (known_method), so a method registered after import (a user's package, a test)
# is one too.
Task = Enum("Task", {name: name for name in TASKS}, type=str)  # type: ignore[misc]
ProfileName = Enum("ProfileName", {name: name for name in PROFILES}, type=str)  # type: ignore[misc]


def known_method(value: str | None) -> str | None:
    """``--method``: a registered method (as a usage error, like any bad option value)."""
    if value is not None and value not in METHODS:
        raise typer.BadParameter(f"{value!r} is not a method; choose one of {', '.join(METHODS)}")
    return value


def _complete_method(incomplete: str) -> list[str]:
    return [name for name in METHODS if name.startswith(incomplete)]


def method_option(**kwargs: Any) -> Any:
    """The ``--method`` option of ``ask`` and ``eval``."""
    return typer.Option(
        "--method",
        "-m",
        help="The method to run: " + ", ".join(METHODS) + " (`noterag methods` describes each).",
        callback=known_method,
        autocompletion=_complete_method,
        **kwargs,
    )


PromptOption = Annotated[
    list[str] | None,
    typer.Option(
        "--prompt",
        help="Replace one of the method's prompts for this run: NAME=FILE, the file holding the "
        "template text with the same {slots} (repeatable; NAME as `noterag methods` lists them, "
        "e.g. refine_query or answer.multihop). The verbatim prompt files stay as they are.",
        show_default=False,
    ),
]


def prompt_overrides(spec: MethodSpec, pairs: list[str]) -> dict[str, str]:
    """``--prompt NAME=FILE`` pairs as the context's ``prompts``: each file read, each name
    checked against the method's prompts, before any model starts."""
    overrides: dict[str, str] = {}
    for pair in pairs:
        name, sep, file = pair.partition("=")
        if not sep or not name.strip() or not file.strip():
            raise ConfigError(f"--prompt takes NAME=FILE, not {pair!r}")
        path = Path(file.strip()).expanduser()
        try:
            overrides[name.strip()] = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            reason = getattr(err, "strerror", None) or "not UTF-8 text"
            raise ConfigError(f"--prompt {name.strip()}: cannot read {path}: {reason}") from None
    for prompt_set in spec.prompts.values():
        override_prompts(prompt_set, overrides)  # an unknown name: one error line naming them
    return overrides


# The model specs every --model takes (noterag.models.load_chat_model), for help texts.
MODEL_SPECS = (
    "'local' (SmolLM2-135M served on 127.0.0.1, needs the 'local' extra), 'openai:NAME' (an "
    "OpenAI-compatible endpoint from OPENAI_BASE_URL / OPENAI_API_KEY), 'openai:NAME@URL' or "
    "'hf:DIR' (a Hugging Face model run in-process, e.g. one `noterag align train` wrote; needs "
    "the 'align' extra)"
)


def model_option(role: str = "Chat model") -> Any:
    """A ``--model`` option taking a model spec; ``role`` says what the model does."""
    return typer.Option(
        "--model",
        help=f"{role}: {MODEL_SPECS}. Default: $NOTERAG_MODEL, else local.",
        show_default=False,
    )


# Shared by `ask`, `eval` and `align data`.
ModelOption = Annotated[str | None, model_option()]
IndexOption = Annotated[
    str | None,
    typer.Option(
        "--index",
        "-i",
        help="Index directory built by `noterag index` (or a retriever spec such as "
        "bm25:DIR). Default: $NOTERAG_INDEX, else the bundled sample corpus.",
        show_default=False,
    ),
]
TimeoutOption = Annotated[
    float | None,
    typer.Option(
        "--timeout",
        min=0.001,
        help="Seconds each attempt of a model request may take, to the last byte of its reply. "
        "Default: $NOTERAG_TIMEOUT, else 60.",
        show_default=False,
    ),
]
SkipModelCheckOption = Annotated[
    bool,
    typer.Option(
        "--skip-model-check",
        help="Do not ask the endpoint for its model list before the run (for a server that "
        "cannot answer it or answers slowly); also NOTERAG_SKIP_MODEL_CHECK=1. The check only "
        "fails on an endpoint that cannot be reached or rejects the key.",
    ),
]
MaxRetriesOption = Annotated[
    int | None,
    typer.Option(
        "--max-retries",
        min=0,
        help="Times a model request that failed transiently (HTTP 429/5xx, timeout, reset) is "
        "sent again, with exponential backoff from 0.5 s. Default: $NOTERAG_MAX_RETRIES, "
        "else 2.",
        show_default=False,
    ),
]


# Shared by `eval` and `align data` (a resumable run over a dataset's questions).
LimitOption = Annotated[
    int | None,
    typer.Option("--limit", "-n", min=1, help="Only the first N questions.", show_default=False),
]
RetryErrorsOption = Annotated[
    bool, typer.Option("--retry-errors", help="On resume, run the questions that failed again.")
]
QuietOption = Annotated[
    bool, typer.Option("--quiet", "-q", help="No progress on stderr, only errors.")
]

# Shared by `eval` and `reproduce`: how the questions are run, and where the replies are kept.
ConcurrencyOption = Annotated[
    int | None,
    typer.Option(
        "--concurrency",
        "-j",
        min=1,
        help="Questions waiting on the model at the same time (a method's own concurrent "
        "calls come on top). With a model from an openai: spec, as many again are in "
        "progress, ready with their next request, so that the endpoint stays busy while the "
        "client works between calls (their waits are not in their latency). Default: 1 for "
        "--model local (its llama.cpp server answers one request at a time: more would only "
        "queue, and the latencies would measure the queue), else 4.",
        show_default=False,
    ),
]
WorkersOption = Annotated[
    str | None,
    typer.Option(
        "--workers",
        "-w",
        help="Processes answering the questions, each with --concurrency questions waiting "
        "on the model at once (one client process is bound by its own CPU against a fast "
        "endpoint); auto: one per CPU. One results file, written by this process. "
        "Default: 1; with --ray, one per CPU of the cluster.",
        show_default=False,
    ),
]
RayOption = Annotated[
    str | None,
    typer.Option(
        "--ray",
        metavar="ADDRESS",
        help="Answer on a Ray cluster: host:port of its head, auto (the cluster this machine "
        "is part of), or local (a cluster started for this run and shut down with it). The "
        "--workers are Ray actors spread over its nodes; this process alone writes the "
        "results. Each node needs noterag, the index at the same path (or an es: URL) and the "
        "endpoint (docs/cluster.md). Needs the ray extra.",
        show_default=False,
    ),
]
ShardOption = Annotated[
    str | None,
    typer.Option(
        "--shard",
        help="I/N: only the questions whose id hashes to shard I of N (e.g. 2/4), one "
        "machine each; `noterag merge` joins the shards' run directories.",
        show_default=False,
    ),
]
CacheOption = Annotated[
    Path | None,
    typer.Option(
        "--cache",
        help="A SQLite file keeping every model reply (keyed by model, parameters and "
        "prompt): the same eval again makes no model request. With sampling it replays "
        "the first sample.",
        show_default=False,
    ),
]


def _format_help() -> str:
    from noterag.datasets import FORMATS

    return f"The dataset's format, instead of detecting it: {', '.join(FORMATS)}."


# Shared by `eval` and `corpus-from`.
FormatOption = Annotated[
    str | None, typer.Option("--format", help=_format_help(), show_default=False)
]


def model_settings(timeout: float | None, max_retries: int | None) -> Any:
    from noterag.models import ModelSettings

    return ModelSettings.from_env(timeout=timeout, max_retries=max_retries)


# The settings only a search reads (the number of passages, their length cap).
RETRIEVAL_SETTINGS = ("top_k", "max_passage_chars")


def parse_context(
    spec: MethodSpec, options: dict[str, Any], pairs: list[str], command: str
) -> tuple[dict[str, Any], RunContext]:
    """The run's context from the command line's options and ``--context`` pairs, checked
    against the method's settings (e.g. Amber has no max_failures): the values given (what the
    graph and run.json take) and the settings they resolve to (defaults filled in), resolved
    once here. A ``human_review`` is refused: no ``noterag COMMAND`` pauses for a person (every
    question of an eval would fail on it)."""
    schema = spec.context
    unknown = sorted(set(options) - set(setting_names(schema)))
    if unknown:
        flags = ", ".join("--" + name.replace("_", "-") for name in unknown)
        raise ConfigError(
            f"{spec.name} has no {flags} setting; its settings: {', '.join(setting_names(schema))}"
        )
    _refuse_repeated_pairs(pairs)
    from_pairs = context_from_pairs(schema, pairs)
    # A flag and a -c pair for the same setting: neither silently wins. The same value twice
    # is no conflict.
    for name in sorted(set(options) & set(from_pairs)):
        if options[name] != from_pairs[name]:
            flag = "--" + name.replace("_", "-")
            raise ConfigError(
                f"{flag} {options[name]} and -c {name}={from_pairs[name]} set {name} twice; "
                "give one"
            )
    context = options | from_pairs
    # The context dataclass checks every value, the flags' as the -c pairs' (same rules, same
    # messages).
    settings = resolve_context(schema, context)
    # every context has the shared retrieval settings; a closed-book method would ignore them
    ignored = [name for name in RETRIEVAL_SETTINGS if name in context and not spec.retrieves]
    if ignored:
        given = ", ".join(
            "--" + name.replace("_", "-") if name in options else f"-c {name}" for name in ignored
        )
        raise ConfigError(f"{spec.name} retrieves nothing: {given} would do nothing; leave it out")
    refuse_human_review(settings, f"noterag {command}")
    return context, settings


def _refuse_repeated_pairs(pairs: list[str]) -> None:
    """One setting given twice by ``-c`` with different values: neither silently wins."""
    given: dict[str, str] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key, raw = key.strip().replace("-", "_"), raw.strip()
        if sep and key in given and given[key] != raw:
            raise ConfigError(f"-c {key}={given[key]} and -c {key}={raw} set {key} twice; give one")
        given[key] = raw


# --------------------------------------------------------------------------- --index


def retriever_spec(index: str | None, console: Console) -> str:
    """The retriever spec for ``--index``: its value, else ``$NOTERAG_INDEX``, else the bundled
    sample corpus (built on first use). A BM25 directory must exist, so that a wrong path fails
    before a model is started."""
    index = index if index is not None else (os.environ.get("NOTERAG_INDEX") or None)
    if index is None:
        from noterag.retrievers.sample import sample_index

        with status(console, "preparing the sample index…"):
            path = sample_index()
        console.print(
            Text(
                "no --index and no NOTERAG_INDEX: using the bundled sample corpus "
                "(build your own with `noterag index`)",
                style="dim",
            )
        )
        return f"bm25:{path}"
    if not index.strip():
        raise IndexNotFoundError("the --index value is empty")
    spec = _parse_spec(index)
    if spec.startswith("bm25:"):
        path = Path(spec[len("bm25:") :]).expanduser()
        if not path.is_dir():
            from noterag.retrievers.indexdir import not_found

            # names a build of that directory that was interrupted, if one was
            raise not_found(
                f"index directory not found: {path}",
                path,
                f"build one with `noterag index CORPUS --out {path}`",
            )
    return spec


def _parse_spec(index: str) -> str:
    """``SCHEME:LOCATION`` for ``--index``, by the one rule every entry point shares."""
    from noterag.retrievers.spec import parse_spec

    try:
        return str(parse_spec(index))
    except IndexNotFoundError:
        # A bare path that does not exist: the BM25 check above names it with the command
        # that builds it there, as the CLI always has.
        return f"bm25:{index}"
