"""LangGraph's ``RetryPolicy`` for the nodes that search: a search that fails for a moment (a
search server refusing connections, timing out, answering 5xx or 429) runs its node again, up to
``SEARCH_RETRY.max_attempts`` times with LangGraph's backoff; any other failure ends the run at
once, as before.

A node's policy sees only the exception, so the searches mark theirs (``noted_search``: a note
added to the exception, which also says in a traceback where it came from). An exception
without the note is never retried, whatever its type: the model's requests are retried by the
model's own client, one request at a time (``noterag.models.retries``; it honours Retry-After
and is counted per question), while a node's retry would send the node's finished calls again.
``graphs.assemble.add_search_retries`` gives the policy to every node a method has not given
its own: a node that never searches never raises a noted exception, so the policy never re-runs
it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from langgraph.types import RetryPolicy, default_retry_on

from noterag.base.errors import NoteragError

SEARCH_NOTE = "noterag: raised by a search (the retriever)"


@contextmanager
def noted_search() -> Iterator[None]:
    """Mark an exception raised inside the block as a search's (``SEARCH_NOTE``)."""
    try:
        yield
    except Exception as exc:
        note_search(exc)
        raise


def note_search(exc: BaseException) -> None:
    """Mark ``exc`` as a search's (``SEARCH_NOTE``), once: what ``noted_search`` does, for a
    step's every search, where a ``try`` costs less than a generator's context manager."""
    if SEARCH_NOTE not in getattr(exc, "__notes__", ()):
        exc.add_note(SEARCH_NOTE)


def _status(exc: BaseException) -> int | None:
    """The HTTP status of a client's error (elasticsearch's ``ApiError``, httpx's
    ``HTTPStatusError``, requests'), if it has one."""
    for status in (
        getattr(exc, "status_code", None),
        getattr(getattr(exc, "response", None), "status_code", None),
    ):
        if isinstance(status, int):
            return status
    return None


def transient_search_failure(exc: Exception) -> bool:
    """Whether a node is run again after ``exc``: a search's failure that may pass (a
    connection error, a timeout, HTTP 429 or 5xx), not noterag's own errors (a missing index, a
    retriever returning no documents) and not a refusal (HTTP 4xx)."""
    if SEARCH_NOTE not in getattr(exc, "__notes__", ()) or isinstance(exc, NoteragError):
        return False
    status = _status(exc)
    if status is not None:
        return status == 429 or status >= 500
    if isinstance(exc, TimeoutError):
        return True
    # ConnectionError yes; ValueError, TypeError, LookupError, OSError... no; a client's own
    # transport error (httpx's, elastic-transport's) yes
    return default_retry_on(exc)


SEARCH_RETRY = RetryPolicy(max_attempts=3, retry_on=transient_search_failure)
