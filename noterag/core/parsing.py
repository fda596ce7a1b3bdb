"""Tolerant parsers for model replies. Each returns a defined outcome for any text, never raises.

When a reply does not have the shape its prompt asks for, the parser takes its documented
fallback and records it, by kind, in the active ``count_fallbacks()`` (every graph node runs in
one; the counts reach the state's ``fallbacks``):

| kind         | a reply without ...                  | fallback                                         |
|--------------|--------------------------------------|--------------------------------------------------|
| questions    | a numbered or bulleted list          | the lines ending in "?", else the whole reply    |
| status       | a {"status": ...} verdict            | False (official profile: "true" in the reply)    |
| yes_no       | a readable Yes / No                  | No                                               |
| nli          | a useful / useless NLI result        | unparsed (Amber keeps the passage)               |
| new_question | a "### New Question" with a question | the last line that is not a bare heading         |
| sub_question | any question text                    | "" (ReSP's plan names nothing: the loop stops)   |
| done_marker  | the "[DONE]" end marker              | the whole reply                                  |
"""

from __future__ import annotations

import json
import re
from collections import Counter
from contextvars import ContextVar
from dataclasses import dataclass

_FALLBACKS: ContextVar[Counter[str] | None] = ContextVar("noterag_parse_fallbacks", default=None)


class count_fallbacks:  # lower case: called as a function, ``with count_fallbacks() as counts``
    """Count, by kind, the fallbacks the parsers take in this context (see the table above).

    A class rather than a ``@contextmanager`` generator: every graph node runs in one, and the
    generator's machinery cost more than the counting."""

    __slots__ = ("_token", "counts")

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def __enter__(self) -> Counter[str]:
        self._token = _FALLBACKS.set(self.counts)
        return self.counts

    def __exit__(self, *exc: object) -> None:
        _FALLBACKS.reset(self._token)


def fell_back(kind: str) -> None:
    """Record that a parser took its fallback for a reply of this kind (a method's own parsers
    call it too; say in the method's docstring what each kind's fallback is)."""
    counts = _FALLBACKS.get()
    if counts is not None:
        counts[kind] += 1


# A list item: "1. ...", "1) ...", "Q1: ...", "- ...", "* ...", "Question 2: ..."
# Whitespace runs are matched possessively (\s*+) in every pattern here: with plain \s* next to
# another \s* the engine tries every split of a long run of spaces (a degenerate model reply),
# and "Question" + 2,000 spaces took 50 s.
_ITEM = re.compile(
    r"^\s*+(?:(?:question|q)\s*+\d+\s*+[:.)-]|\d+\s*+[.):-]|[-*•])\s*+(?P<text>.*\S)",
    re.IGNORECASE,
)
_STATUS = re.compile(
    r"""["'“”‘’]?status["'“”‘’]?\s*+[:=]\s*+["'“”‘’]?\s*+(?P<value>true|false)\b""",
    re.IGNORECASE,
)


def parse_questions(reply: str) -> list[str]:
    """The questions in a reply that lists them ("1. ...\\n2. ..."), in order, without repeats.

    Falls back to the lines that end with "?", then to the whole reply as one question, so a
    model that ignores the list format still yields something to search for.
    """
    lines = [stripped for line in reply.splitlines() if (stripped := line.strip())]
    items = [m.group("text") for line in lines if (m := _ITEM.match(line))]
    if not items:
        fell_back("questions")
        items = [line for line in lines if line.endswith("?")]
    if not items and reply.strip():
        items = [" ".join(lines)]
    return _distinct([text for item in items if (text := _strip_quotes(item))])


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
        fell_back("status")
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
    except Exception:  # noqa: BLE001 -- the official code falls back on every failure, so do we
        fell_back("status")
        return Verdict(accepted="true" in reply.lower(), parsed=False)


_WORD = re.compile(r"[a-z]+")


def parse_yes_no(reply: str) -> Verdict:
    """A "Yes"/"No" judgment ("Yes.", "yes, because ...", "**No**"): the first word decides;
    otherwise the one of yes/no the reply contains ("Answer: Yes"). A reply with neither, or
    with both and neither first, is an unparsed No (``accepted=False, parsed=False``): the
    caller decides what an unreadable judgment means and counts it."""
    words = _WORD.findall(reply.lower())
    if words and words[0] in ("yes", "no"):
        return Verdict(accepted=words[0] == "yes", parsed=True)
    found = {w for w in words if w in ("yes", "no")}
    if len(found) == 1:
        return Verdict(accepted=found == {"yes"}, parsed=True)
    fell_back("yes_no")
    return Verdict(accepted=False, parsed=False)


# Labels a model puts before the one question it was asked for: "Sub-question:", "[You Thought]:",
# "Next question:", "Thought 1:", "Q:" (repeated ones too: "[Your Thought]: Question: ...").
_LABEL = re.compile(
    r"^(?:\s*+\[?\s*+(?:(?:your?|next|new|follow[- ]?up)\s++)*"
    r"(?:sub[- ]?question|question|thought|query|q)\s*+\d*+\s*+\]?\s*+[:：]\s*+)+",
    re.IGNORECASE,
)


def parse_sub_question(reply: str) -> str:
    """The one question a planning reply asks: its first non-empty line without labels
    ("Sub-question: ..."), list markers, markdown emphasis or quotes; "" when there is none."""
    if not (question := _first_question(reply)):
        fell_back("sub_question")
    return question


def _first_question(reply: str) -> str:
    for line in reply.splitlines():
        text = _LABEL.sub("", line.replace("**", "").replace("__", "").strip().lstrip("#"))
        if match := _ITEM.match(text):
            text = match.group("text")
        if text := _strip_quotes(text):
            return text
    return ""


_DONE = re.compile(r"\[\s*done\s*\]", re.IGNORECASE)
_PREFIX = re.compile(r"^\s*(?:passage|response)\s*:\s*", re.IGNORECASE)


def until_done(reply: str) -> str:
    """A written passage up to the "[DONE]" its prompt asks the writer to end with, without the
    "Passage:"/"Response:" prefix the prompt forbids (small models write both anyway)."""
    parts = _DONE.split(reply, maxsplit=1)
    if len(parts) == 1:
        fell_back("done_marker")
    return _PREFIX.sub("", parts[0]).strip()


_NLI = re.compile(
    r"""nli[\s_-]*+result["'“”‘’]?\s*+[:=]\s*+["'“”‘’]?\s*+(?P<value>useful|useless)\b""",
    re.IGNORECASE,
)


def parse_nli(reply: str) -> Verdict:
    """Amber's chunk-level verdict ``{"NLI result": "useful"|"useless"}`` (``accepted`` = useful),
    tolerating code fences, quotes of any kind and case; else the one of useful/useless the
    reply contains ("useless", "The NLI result is useful."). A reply with neither or both is
    unparsed (``parsed=False``): the caller decides what that means and counts it."""
    if match := _NLI.search(reply):
        return Verdict(accepted=match.group("value").lower() == "useful", parsed=True)
    found = {w for w in _WORD.findall(reply.lower()) if w in ("useful", "useless")}
    if len(found) == 1:
        return Verdict(accepted=found == {"useful"}, parsed=True)
    fell_back("nli")
    return Verdict(accepted=False, parsed=False)


# The heading Amber's query prompt asks for, at the start of a line: "### New Question",
# "**New Question:**", "New question:" (the prompt's own words elsewhere in a line do not count).
_NEW_QUESTION = re.compile(
    r"^[ \t#*>]*new[ \t]+question\b[ \t*]*[:：]?[ \t*]*", re.IGNORECASE | re.MULTILINE
)


def parse_new_question(reply: str) -> str:
    """The one question after the last "### New Question" heading (on its line or the next
    non-empty one); without one, the last non-empty line that is not a bare heading; "" when
    the reply has no text. Labels, list markers, emphasis and quotes are removed."""
    headings = list(_NEW_QUESTION.finditer(reply))
    if headings and (question := _first_question(reply[headings[-1].end() :])):
        return question
    fell_back("new_question")
    for line in reversed(reply.splitlines()):
        if question := _first_question(_NEW_QUESTION.sub("", line)):
            return question
    return ""
