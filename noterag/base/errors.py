"""User-facing errors.

Every error a user can cause (bad input, missing index, unreachable model) is a
``NoteragError``: the CLI prints its message as one line and exits non-zero, never a
traceback.
"""


class NoteragError(Exception):
    """An error whose message is meant for the user, as one line."""

    exit_code = 1


class CorpusError(NoteragError):
    """A corpus file is missing or has a malformed line (the message names the line)."""


class IndexNotFoundError(NoteragError):
    """An index directory is missing or does not hold a noterag index."""


class ModelUnavailableError(NoteragError):
    """A chat model could not be set up or reached."""


class ConfigError(NoteragError, ValueError):
    """A configuration value (method, spec, context field, question) is not valid. Also a
    ValueError: the LangGraph server passes a ValueError's message on to the client and hides
    other exceptions' messages."""


class CallBudgetError(NoteragError, ValueError):
    """A run reached its call budget (``noterag.core.budget``): the most model calls its
    settings allow one turn. A ValueError too, so that the LangGraph server passes the reason
    on to the client as the run's error."""
