"""Untrusted text made safe for a terminal: without the escape sequences and control characters a
terminal would act on (``printable``), and escaped for rich markup (``safe``). Passage text,
model replies, endpoint errors, question ids and file names all reach the terminal through
these; the CLI's renderers, the eval's summary and ``reproduce``'s tables alike.
"""

from __future__ import annotations

import re
from typing import Any

from rich.markup import escape

# Whole sequences, so that no "[2J" or "]0;title" is left behind: CSI (ESC [ or the 8-bit 0x9b,
# parameters, intermediates, a final byte); OSC / DCS / SOS / PM / APC strings up to their
# terminator (BEL or ST, as ESC \\ or 0x9c); any other ESC with its intermediates and final
# byte (charset switches, resets, keypad modes). Of an unterminated string only its introducer
# goes, and a lone control character goes alone: the text after it stays, visible and inert.
# A string's body stops at the next ESC or 8-bit introducer, so hostile text full of
# introducers costs linear time.
_SEQUENCE = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x90\x98\x9b-\x9f]*(?:\x07|\x1b\\|\x9c)"
    r"|\x1b[ -/]*[0-~]"
)
# C0 but tab and newline, DEL, C1.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` without anything a terminal would act on (see the module docstring): newlines
    and tabs stay, every other character is kept as is."""
    return _CONTROL.sub("", _SEQUENCE.sub("", text))


def safe(value: Any) -> str:
    """``value`` as text for a rich *markup* string (a table cell, a title, ``console.print``
    of a str): ``printable``, then its markup escaped, so that an id such as ``oops[/]`` is
    shown as it is rather than read as a tag (a ``MarkupError``, or a style that swallows the
    rest of the line). Text from outside noterag (ids, labels, metric names and error text
    read back from a run's files) goes through this, or into a ``Text``, never raw."""
    return escape(printable(str(value)))


def printable_value(value: Any) -> Any:
    """``value`` with ``printable`` applied to every string in it (dicts, lists, tuples), for
    the progress events a renderer turns into lines."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {key: printable_value(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(printable_value(item) for item in value)
    return value


# JSON keeps the C0 controls escaped already; DEL and C1 it writes raw (ensure_ascii=False).
_JSON_RAW_CONTROL = re.compile(r"[\x7f-\x9f]")


def terminal_safe_json(text: str) -> str:
    """JSON text (from ``json.dumps``) with DEL and the C1 controls written as ``\\u`` escapes:
    the same JSON value, and nothing a terminal would act on."""
    return _JSON_RAW_CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
