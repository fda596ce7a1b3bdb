"""Tolerant parsers for model replies. Each returns a defined outcome for any text, never raises."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

# A list item: "1. ...", "1) ...", "Q1: ...", "- ...", "* ...", "Question 2: ..."
_ITEM = re.compile(
    r"^\s*(?:(?:question|q)\s*\d+\s*[:.)-]|\d+\s*[.):-]|[-*•])\s*(?P<text>.+?)\s*$",
    re.IGNORECASE,
)
_STATUS = re.compile(
    r"""["'“”‘’]?status["'“”‘’]?\s*[:=]\s*["'“”‘’]?\s*(?P<value>true|false)\b""",
    re.IGNORECASE,
)


def parse_questions(reply: str) -> list[str]:
    """The questions in a reply that lists them ("1. ...\\n2. ..."), in order, without repeats.

    Falls back to the lines that end with "?", then to the whole reply as one question, so a
    model that ignores the list format still yields something to search for.
    """
    lines = [line.strip() for line in reply.splitlines() if line.strip()]
    items = [m.group("text") for line in lines if (m := _ITEM.match(line))]
    if not items:
        items = [line for line in lines if line.endswith("?")]
    if not items and reply.strip():
        items = [" ".join(lines)]
    return _distinct([_strip_quotes(item) for item in items if _strip_quotes(item)])


def _strip_quotes(text: str) -> str:
    return text.strip().strip("\"'“”*").strip()


def _distinct(items: list[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for item in items:
        key = item.casefold()
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out


@dataclass(frozen=True)
class Verdict:
    """A review outcome: whether the new note replaces the best one, and whether the reply parsed."""

    accepted: bool
    parsed: bool


def parse_status(reply: str) -> Verdict:
    """The ``{"status": "True"|"False"}`` verdict, tolerating code fences, quotes of any kind and
    a bare true/false; a reply without a status is an unparsed False."""
    match = _STATUS.search(reply)
    if match is None:
        return Verdict(accepted=False, parsed=False)
    return Verdict(accepted=match.group("value").lower() == "true", parsed=True)


def official_status(reply: str, *, cut_braces: bool) -> Verdict:
    """The official code's verdict: ``json.loads(reply)["status"].lower() == "true"``, and on any
    failure the substring test ``"true" in reply.lower()``.

    DeepNote first cuts the reply from the first ``{`` to the last ``}`` when it mentions "json"
    (``cut_braces=True``); Adaptive-Note parses the whole reply.
    """
    text = reply
    if cut_braces and "json" in reply and "{" in reply and "}" in reply:
        text = reply[reply.index("{") : reply.rindex("}") + 1]
    try:
        status = json.loads(text)["status"]
        return Verdict(accepted=str(status).lower() == "true", parsed=True)
    except Exception:  # the official code falls back on every failure, so do we
        return Verdict(accepted="true" in reply.lower(), parsed=False)
