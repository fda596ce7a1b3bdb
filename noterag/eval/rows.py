"""One question of an evaluation run: answered by the method's graph, scored, and laid out as
its ``results.jsonl`` row. Every way a run is spread (one process, ``--workers``, Ray actors:
``runner``, ``workers``, ``cluster``) answers its questions through ``answer_one``.
"""

from __future__ import annotations

import time
from typing import Any

from noterag.base.errors import IndexNotFoundError
from noterag.core.spec import MethodSpec
from noterag.datasets.formats import row_fields
from noterag.eval import loop
from noterag.models.errors import fatal_error, one_line_error
from noterag.models.turns import ModelTurns, question_turns


async def answer_one(
    graph: Any,
    spec: MethodSpec,
    example: Any,
    config: dict[str, Any],
    turns: ModelTurns | None = None,
) -> dict[str, Any]:
    """Run one question, its model calls taking ``turns`` (``noterag.models.turns``); its
    result row (with ``error`` set if it failed)."""
    from noterag.eval.cache import count_cache
    from noterag.eval.metrics import score
    from noterag.models import count_retries
    from noterag.models.replies import count_bad_usage

    started_at, clock = time.time(), time.perf_counter()
    # this task's requests only: the questions run as tasks
    with (
        count_retries() as retries,
        count_bad_usage() as bad_usage,
        count_cache() as cached,
        question_turns(turns) as mine,
    ):
        try:
            state = await graph.ainvoke(
                {"question": example.question, "task": example.task}, context=config["context"]
            )
            error = None
        except Exception as exc:  # recorded in the row, unless fatal for all
            fatal = fatal_error(exc)
            if fatal is not None:
                raise loop.Abort(fatal) from exc
            if isinstance(exc, IndexNotFoundError):  # gone or damaged: every question would fail
                raise loop.Abort(exc, resumable=False) from exc
            state, error = {}, one_line_error(exc)
    latency = time.perf_counter() - clock
    state = state | {"retries": retries.value, "waited_s": mine.waited_s if mine else 0.0}
    if bad_usage.ignored:
        state = state | {"usage_ignored": bad_usage.ignored}
    if config.get("cache"):
        state = state | {"cache_calls": cached.calls, "cache_tokens": cached.tokens}
    answer = state.get("answer")
    if error is None:
        metrics = score(answer or "", list(example.golds), example.task)
    else:  # the metric names of the task, all 0: a failure counts as a wrong answer
        metrics = dict.fromkeys(score("", list(example.golds), example.task), 0.0)
    return result_row(spec, example, state, config, metrics, error, latency, started_at)


def result_row(
    spec: MethodSpec,
    example: Any,
    state: dict[str, Any],
    config: dict[str, Any],
    metrics: dict[str, float],
    error: str | None,
    latency: float,
    started_at: float,
) -> dict[str, Any]:
    """One line of results.jsonl: the fields every method has, and the output fields the
    method's declaration keeps (``MethodSpec.result_fields``). A failed question's state is
    lost: its answer, note, trace, costs and fallbacks are null; its retries are known
    (``state["retries"]``). A field the run never wrote has its empty value
    (``MethodSpec.output_defaults``: ``steps`` 0 where the loop never ran, not null)."""
    failed = error is not None
    empty = {} if failed else spec.output_defaults()
    passage_ids = list(state.get("passage_ids") or [])
    waited = state.get("waited_s", 0.0)
    return {
        **row_fields(example),
        "answer": state.get("answer"),
        "metrics": metrics,
        # what the method declares worth keeping: the best note (note methods, Amber's best
        # memory), ReSP's memory (what its generator read), ...
        **{key: state.get(key, empty.get(key)) for key in spec.result_fields},
        "stop_reason": state.get("stop_reason"),
        "steps": state.get("steps", empty.get("steps")),
        "queries": state.get(spec.queries) if spec.queries else None,
        "trace": state.get("trace", []) if not failed else None,
        "llm_calls": None if failed else state.get("llm_calls", 0),
        "prompt_tokens": None if failed else state.get("prompt_tokens", 0),
        "completion_tokens": None if failed else state.get("completion_tokens", 0),
        "passages": None if failed else len(passage_ids),
        "passage_ids": None if failed else passage_ids,
        "retries": state.get("retries", 0),
        # replies whose usage was no token counts, ignored (noterag.models.replies): the
        # question's token counts are short of theirs
        **({"usage_ignored": state["usage_ignored"]} if state.get("usage_ignored") else {}),
        # with --cache: the calls (and their tokens) answered from it, not the endpoint
        **(
            {
                "cache_calls": state.get("cache_calls", 0),
                "cache_tokens": state.get("cache_tokens", 0),
            }
            if config.get("cache")
            else {}
        ),
        "fallbacks": None if failed else dict(state.get("fallbacks") or {}),
        # the question's own time: its waits for a turn at the model are the eval's queue
        "latency_s": round(latency - waited, 3),
        "waited_s": round(waited, 3),
        "started_at": started_at,
        "finished_at": started_at + latency,
        "error": error,
        "method": config["method"],
        "context": config["context"],
        "model": config["model"],
    }
