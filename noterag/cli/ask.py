"""``noterag ask``: answer one question, streaming the method's progress to stderr.

Progress goes to stderr and the answer (or ``--json``, the method's output) to stdout, so
``noterag ask ... > answer.txt`` captures just the answer.
"""

from __future__ import annotations

import json
import os
import time
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

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
    IndexOption,
    MaxRetriesOption,
    ModelOption,
    ProfileName,
    PromptOption,
    SkipModelCheckOption,
    Task,
    TimeoutOption,
    method_option,
    model_settings,
    parse_context,
    prompt_overrides,
    retriever_spec,
)
from noterag.cli.render import Progress, plural, status, stderr_console
from noterag.cli.trace import ForceOption, write_trace
from noterag.core.context import check_question_size
from noterag.core.spec import MethodSpec
from noterag.registry.methods import METHODS


def ask_command(
    ctx: typer.Context,
    question: Annotated[str, typer.Argument(help="The question to answer.", show_default=False)],
    method: Annotated[str, method_option()] = "deepnote",
    index: IndexOption = None,
    model: ModelOption = None,
    top_k: Annotated[
        int | None,
        typer.Option(
            "--top-k",
            help="Passages retrieved per query ({default}).",
            show_default=False,
        ),
    ] = None,
    max_steps: Annotated[
        int | None,
        typer.Option(
            "--max-steps",
            help="Stop after this many steps of the method's loop ({default}).",
            show_default=False,
        ),
    ] = None,
    max_failures: Annotated[
        int | None,
        typer.Option(
            "--max-failures",
            help="Stop after this many steps whose new note was rejected ({default}).",
            show_default=False,
        ),
    ] = None,
    max_passages: Annotated[
        int | None,
        typer.Option(
            "--max-passages",
            help="Stop once this many distinct passages were retrieved, the first ones included "
            "({default}).",
            show_default=False,
        ),
    ] = None,
    task: Annotated[
        Task | None,
        typer.Option(
            "--task",
            help="Answer style: multihop (short answer), asqa (long form), strategyqa (yes/no), "
            "crud (Adaptive-Note only) ({default}).",
            show_default=False,
        ),
    ] = None,
    profile: Annotated[
        ProfileName | None,
        typer.Option(
            "--profile",
            help="paper: the papers' method; official: reproduce the official code's behaviour "
            "({default}).",
            show_default=False,
        ),
    ] = None,
    temperature: Annotated[
        float | None,
        typer.Option(
            "--temperature",
            help="Sampling temperature ({default}).",
            show_default=False,
        ),
    ] = None,
    top_p: Annotated[
        float | None,
        typer.Option(
            "--top-p",
            help="Nucleus sampling top_p ({default}).",
            show_default=False,
        ),
    ] = None,
    max_tokens: Annotated[
        int | None,
        typer.Option(
            "--max-tokens",
            help="Cap on tokens per model reply (default: the endpoint's; 512 for local).",
            show_default=False,
        ),
    ] = None,
    timeout: TimeoutOption = None,
    max_retries: MaxRetriesOption = None,
    skip_model_check: SkipModelCheckOption = False,
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
    prompts: PromptOption = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print the run as JSON on stdout: the method's output (answer, note, trace, "
            "costs), the passages read and the progress events (what `noterag trace` renders).",
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
    force: ForceOption = False,
    thread: Annotated[
        str | None,
        typer.Option(
            "--thread",
            help="The conversation thread (default: a new one, printed). A question on a thread "
            "with earlier turns is read with them; the same question on a thread whose run "
            "was cut off resumes it from its last finished step.",
            show_default=False,
        ),
    ] = None,
    checkpoint: Annotated[
        str | None,
        typer.Option(
            "--checkpoint",
            help="Where threads are kept: a SQLite file or sqlite:///PATH (default: "
            "$NOTERAG_CHECKPOINT, else ~/.local/state/noterag/threads.sqlite), a postgresql:// "
            "URL or libpq 'host=... dbname=...' string, or none.",
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
    console = stderr_console(quiet)
    guard = guard_of(ctx)
    with user_errors(guard):
        if not question.strip():
            raise ConfigError("the question is empty")
        _check_utf8(question, "the question")
        _check_utf8(thread or "", "the --thread value")
        check_question_size(question.strip())
        spec = METHODS[method]  # the one lookup: everything below takes the spec
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
        # (a human_review is refused: nothing here would answer the pause)
        context, settings = parse_context(spec, context, extra or [], "ask")
        if prompts:
            context["prompts"] = prompt_overrides(spec, prompts)
        from noterag.core.tasks import check_task

        # a task the method has no answer for fails now, not after its paid steps
        check_task(spec, settings.task, settings)
        if html_out is not None:
            from noterag.trace.page import check_writable

            check_writable(html_out, force)

        from noterag.retrievers import load_retriever

        # Open the index before starting a model, so a bad index fails in a blink.
        retriever = load_retriever(retriever_spec(index, console))
        import uuid

        from noterag.server.checkpointer import hold_thread

        thread = thread or uuid.uuid4().hex
        # one run a thread at a time (two would each write a turn over the other's), held
        # before a model starts: a busy thread is refused in a blink, naming its holder
        with hold_thread(checkpoint, thread), guard.owned():
            import noterag

            chat_model = load_model(
                model, console, model_settings(timeout, max_retries), check=not skip_model_check
            )
            from noterag.models import count_retries
            from noterag.server.checkpointer import open_checkpointer

            with open_checkpointer(checkpoint) as saver:
                graph = noterag.build_graph(
                    spec, model=chat_model, retriever=retriever, checkpointer=saver
                )
                with guard.leave_at_once_on_interrupt(), count_retries() as retries:
                    final = run(graph, spec, question.strip(), context, console, thread)
        print_result(final, as_json)
        if html_out is not None:
            write_trace(final, html_out, console, force)
        summary(
            final, console, time.perf_counter() - started, retries.value, settings.max_passage_chars
        )


def _check_utf8(text: str, what: str) -> None:
    """Refuse undecodable bytes of the command line (Python keeps them as lone surrogates,
    which no file, database or model request can take)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigError(f"{what} is not valid UTF-8 (undecodable bytes)") from None


def load_model(spec: str | None, console: Console, settings: Any = None, check: bool = True) -> Any:
    """The chat model for ``--model`` (else ``$NOTERAG_MODEL``, else local), its endpoint
    checked unless ``check`` is False (``--skip-model-check``), with a spinner while the local
    server starts."""
    from noterag import models

    spec = (spec if spec is not None else os.environ.get("NOTERAG_MODEL", "local")).strip()
    if not spec:
        raise ConfigError("the --model value is empty")
    # a spec's URL may carry credentials: the spinner shows it redacted, as every line does
    label = "starting the local model…" if spec == "local" else f"connecting to {redact(spec)}…"
    with status(console, printable(label)):
        chat_model = models.load_chat_model(spec, settings)
        if check:
            # Fail in seconds with the endpoint's URL rather than after the client's retries.
            models.check_model_reachable(chat_model)
    return chat_model


def run(
    graph: Any,
    spec: MethodSpec,
    question: str,
    context: dict[str, Any],
    console: Console,
    thread: str | None = None,
) -> dict[str, Any]:
    """The method's output, with what the trace viewer needs from the stream (noterag.trace.page).
    With a checkpointer, the run is a turn of ``thread`` (a new one when None), checkpointed
    after every step; a thread whose run of this same question was cut off resumes instead."""
    from noterag.trace.page import Recorder

    progress = Progress(console, spec)
    # what the method declares it returns, not the loop's working fields
    recorder = Recorder(spec.output_keys)
    run_input, config = thread_input(graph, question, thread, console)
    # No "messages" mode: it makes every ChatOpenAI call stream (not only the answer's), and
    # streamed replies from llama.cpp and most OpenAI-compatible servers carry no token usage,
    # which would zero the cost report.
    with progress.live():
        for mode, chunk in graph.stream(
            run_input,
            config,
            context=context,
            stream_mode=list(dict.fromkeys(Recorder.MODES + Progress.MODES)),
            durability="sync" if config else None,
        ):
            recorder.feed(mode, chunk)
            progress.feed(mode, chunk)
    if not recorder.final or "answer" not in recorder.final:
        raise NoteragError("the run ended without an answer")
    if config is not None and run_input is not None:  # a new turn: how to continue the thread
        thread_id = config["configurable"]["thread_id"]
        console.print(
            Text(
                printable(f"thread {thread_id} (continue it with --thread {thread_id})"),
                style="dim",
            )
        )
    # every declared output field and ``steps``, also those the run never wrote (steps 0 where
    # the loop never ran), so that a reader of --json finds the same keys on every run
    return spec.output_defaults() | recorder.run() | {"method": spec.name}


def thread_input(
    graph: Any, question: str, thread: str | None, console: Console
) -> tuple[Any, dict[str, Any] | None]:
    """What ``run`` streams and its config: without a checkpointer, the question; with one, the
    question as the thread's next user turn, or None (resume) when the thread's last run was
    asked this question and did not finish."""
    if graph.checkpointer is None:
        return {"question": question}, None
    import uuid

    from langchain_core.messages import HumanMessage

    from noterag.core.step import reply_text

    config: dict[str, Any] = {"configurable": {"thread_id": thread or uuid.uuid4().hex}}
    snapshot = graph.get_state(config)
    values = snapshot.values or {}
    asked = {values.get("asked"), values.get("question")}
    messages = values.get("messages") or []
    if messages and isinstance(messages[-1], HumanMessage):
        asked.add(reply_text(messages[-1], sep="\n").strip())
    if snapshot.next and question in asked:
        console.print(
            Text(printable(f"resuming thread {config['configurable']['thread_id']}"), style="dim")
        )
        return None, config
    return {"question": question, "messages": [HumanMessage(question)]}, config


def print_result(final: dict[str, Any], as_json: bool) -> None:
    if as_json:
        from langchain_core.messages import messages_to_dict

        # Chat messages as their JSON form ({"type": "ai", "data": {...}}), not Python reprs.
        state = final | {"messages": messages_to_dict(final.get("messages") or [])}
        text = json.dumps(state, ensure_ascii=False, indent=2, default=str)
        click.echo(terminal_safe_json(text))  # the data whole, its control characters escaped
    else:
        click.echo(printable(str(final.get("answer", ""))))


def summary(
    final: dict[str, Any],
    console: Console,
    elapsed: float,
    retries: int = 0,
    passage_cap: int | None = None,
) -> None:
    steps, calls = final.get("steps", 0), final.get("llm_calls", 0)
    passages = len(final.get("passage_ids") or [])
    tokens = final.get("prompt_tokens", 0), final.get("completion_tokens", 0)
    parts = [
        f"stopped: {final.get('stop_reason') or 'done'}",
        f"{steps} {plural(steps, 'step')}",
        f"{calls} LLM {plural(calls, 'call')}",
        f"{tokens[0]:,} prompt + {tokens[1]:,} completion tokens",
        f"{passages} {plural(passages, 'passage')}",
        f"{elapsed:.1f} s",
    ]
    fallbacks = dict(final.get("fallbacks") or {})
    cut = fallbacks.pop("passage_truncated", 0)  # not a reply: passages over max_passage_chars
    long = fallbacks.pop("reply_truncated", 0)  # read, but over the run's bound (core.budget)
    unreadable = sum(fallbacks.values())
    if (
        unreadable
    ):  # the replies no parser could read took their fallbacks (noterag/core/parsing.py)
        parts.insert(-1, f"{unreadable} unreadable {'reply' if unreadable == 1 else 'replies'}")
    if cut:
        limit = f" to {passage_cap:,} characters" if passage_cap else ""
        parts.insert(-1, f"{cut} {plural(cut, 'passage')} cut{limit}")
    if long:
        parts.insert(-1, f"{long} {'reply' if long == 1 else 'replies'} cut at max_tokens")
    if retries:
        parts.insert(-1, f"{retries} {plural(retries, 'request')} retried")
    console.print(Text(printable(" · ".join(parts)), style="dim"))
