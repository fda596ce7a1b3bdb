"""Optional dependencies of the retrievers, and the one-line error when one is missing."""

from __future__ import annotations

from noterag.base.errors import NoteragError

ES_HINT = "Elasticsearch retrieval needs the es extra: pip install 'noterag[es]'"
DENSE_HINT = (
    "dense retrieval needs the dense extra: pip install torch==2.13.0 (a CPU build, first, so "
    "pip does not pull CUDA packages) then pip install 'noterag[dense]'"
)


class MissingExtraError(NoteragError, ImportError):
    """An optional extra is not installed.

    Both a ``NoteragError`` (the CLI prints its message as one line) and an ``ImportError``
    (code that probes for an optional backend with ``except ImportError`` keeps working).
    """
