"""Reply parsers: the formats models actually produce, and no exception for any text."""

from __future__ import annotations

import json
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from noterag.core.parsing import (
    _DONE,
    Verdict,
    official_status,
    parse_new_question,
    parse_nli,
    parse_questions,
    parse_status,
    parse_sub_question,
    parse_yes_no,
    until_done,
)
from noterag.core.profiles import (
    PROMPTED_QUESTIONS,
    amber_new_queries,
    official_new_queries,
    paper_new_queries,
)


def test_numbered_and_bulleted_questions():
    reply = "Here are two new questions:\n1. Who designed the Velmora Bridge?\n2) Aurelio Fenwick birth year\n"
    assert parse_questions(reply) == [
        "Who designed the Velmora Bridge?",
        "Aurelio Fenwick birth year",
    ]
    assert parse_questions("- first one?\n* second one?") == ["first one?", "second one?"]
    assert parse_questions("Question 1: alpha\nQuestion 2: beta") == ["alpha", "beta"]
    assert parse_questions('1. "Quoted question?"\n2. **Bold question?**') == [
        "Quoted question?",
        "Bold question?",
    ]


def test_question_fallbacks():
    assert parse_questions("I would ask: Where is Quenby?\nAnd: how long is the Ostra?") == [
        "I would ask: Where is Quenby?",
        "And: how long is the Ostra?",
    ]
    assert parse_questions("Fenwick birth year") == ["Fenwick birth year"]
    assert parse_questions("   \n ") == []
    assert parse_questions("1. Same?\n2. same?") == ["Same?"]


def test_status_formats():
    assert parse_status('{"status": "True"}') == Verdict(True, True)
    assert parse_status('```json\n{"status":"False"}\n```') == Verdict(False, True)
    assert parse_status("{“status”: “True”}") == Verdict(True, True)
    assert parse_status("status: true") == Verdict(True, True)
    assert parse_status('{"status": true}') == Verdict(True, True)
    assert parse_status("True") == Verdict(False, False)
    assert parse_status("the status is unclear") == Verdict(False, False)


def test_official_status_follows_the_official_code():
    assert official_status('{"status":"True"}', cut_braces=False) == Verdict(True, True)
    # Adaptive-Note parses the whole reply: prose around the JSON falls to the substring test
    assert official_status('json: {"status":"False"} - true', cut_braces=False) == Verdict(
        True, False
    )
    # DeepNote cuts from the first { to the last } when the reply mentions json
    assert official_status('json: {"status":"False"} - true', cut_braces=True) == Verdict(
        False, True
    )
    assert official_status("TRUE!", cut_braces=True) == Verdict(True, False)


@given(
    st.lists(
        st.text(min_size=1).filter(lambda s: s.strip() and len(s.splitlines()) == 1),
        min_size=1,
        max_size=4,
    )
)
def test_numbered_lists_round_trip(items: list[str]):
    reply = "\n".join(f"{i}. {item}" for i, item in enumerate(items, 1))
    parsed = parse_questions(reply)
    assert len(parsed) <= len(items)
    assert all(isinstance(q, str) and q for q in parsed)


# --------------------------------------------------------------------------- fuzzing every parser
# Each reply parser's outcome set, checked for arbitrary text: what it returns is always of the
# defined shape, and a verdict can only say "accepted" when the reply holds the word that means it.

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# The characters and words the parsers' patterns react to, so that random text hits their edges
# (markers, labels, quotes, every kind of line break) far more often than st.text() alone does.
_TOKENS = [
    " ",
    "  ",
    "\t",
    "\n",
    "\r\n",
    "\r",
    "\x0b",
    "\x0c",
    "\x1c",
    "\x85",
    "\u2028",
    "\x00",
    "#",
    "###",
    "*",
    "**",
    "__",
    ">",
    "-",
    "•",
    "[",
    "]",
    ":",
    "：",
    "=",
    ".",
    ")",
    "?",
    '"',
    "'",
    "“",
    "”",
    "‘",
    "’",
    "{",
    "}",
    "```",
    "```json",
    "json",
    "status",
    "Status",
    "STATUS",
    "true",
    "True",
    "false",
    "FALSE",
    "yes",
    "Yes",
    "no",
    "NO",
    "nli",
    "NLI result",
    "nli_result",
    "useful",
    "useless",
    "Useful",
    "New Question",
    "### New Question:",
    "new  question",
    "Question",
    "Question 2:",
    "Q1:",
    "q",
    "Sub-question:",
    "[Your Thought]:",
    "Next question:",
    "follow-up",
    "Thought 3:",
    "1.",
    "2)",
    "10-",
    "[DONE]",
    "[ done ]",
    "Passage:",
    "Response:",
    "Velmora",
    "Fenwick",
]
keyword_soup = st.lists(st.sampled_from(_TOKENS), max_size=40).map("".join)
json_scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


@st.composite
def near_json(draw: st.DrawFn) -> str:
    """A verdict-shaped JSON object (status / NLI result), dumped in some style, then maybe
    damaged: cut short, a character dropped or doubled, wrapped in a fence or prose."""
    key = draw(st.sampled_from(["status", "Status", "NLI result", "nli_result", "statu", "result"]))
    value = draw(
        st.sampled_from(["True", "False", "true", "useful", "useless", "maybe", ""]) | json_values
    )
    obj = {key: value} | draw(st.dictionaries(st.text(max_size=6), json_values, max_size=2))
    text = json.dumps(
        obj, indent=draw(st.sampled_from([None, 2])), ensure_ascii=draw(st.booleans())
    )
    damage = draw(st.sampled_from(["none", "cut", "drop", "double", "quotes"]))
    if text and damage != "none":
        i = draw(st.integers(0, len(text) - 1))
        text = {
            "cut": text[:i],
            "drop": text[:i] + text[i + 1 :],
            "double": text[:i] + text[i] + text[i:],
            "quotes": text.replace('"', draw(st.sampled_from(["'", "“", "”", ""]))),
        }[damage]
    if draw(st.booleans()):
        text = f"```json\n{text}\n```"
    return draw(keyword_soup) + text + draw(keyword_soup)


replies = st.one_of(st.text(), st.text(min_size=200, max_size=3000), keyword_soup, near_json())


def _is_one_clean_line(text: str) -> bool:
    return text == text.strip() and len(text.splitlines()) <= 1


def _check_verdict(verdict: Verdict, reply: str, yes_word: str) -> None:
    assert type(verdict.accepted) is bool and type(verdict.parsed) is bool
    if verdict.accepted:
        assert yes_word in reply.lower()


@FUZZ
@given(replies)
def test_fuzz_questions_are_distinct_clean_lines(reply: str) -> None:
    questions = parse_questions(reply)
    assert isinstance(questions, list)
    assert all(isinstance(q, str) and q and _is_one_clean_line(q) for q in questions)
    assert len({q.casefold() for q in questions}) == len(questions)
    # never more questions than the reply has lines: a reply cannot multiply its queries
    assert len(questions) <= max(1, len(reply.splitlines()))
    if not reply.strip():
        assert questions == []


@FUZZ
@given(replies)
def test_fuzz_status_verdicts(reply: str) -> None:
    verdict = parse_status(reply)
    _check_verdict(verdict, reply, "true")
    assert verdict.parsed or not verdict.accepted  # unparsed is always a rejection
    if verdict.parsed:
        assert "status" in reply.lower()
    for cut in (True, False):
        official = official_status(reply, cut_braces=cut)
        _check_verdict(official, reply, "true")
        if not official.parsed:  # the official fallback: the substring test, nothing else
            assert official.accepted == ("true" in reply.lower())


@FUZZ
@given(
    st.sampled_from([True, False]),
    keyword_soup.filter(lambda s: "status" not in s.lower()),
    st.booleans(),
)
def test_fuzz_a_well_formed_status_is_always_read(status: bool, prose: str, fenced: bool) -> None:
    body = json.dumps({"status": str(status)})
    reply = f"{prose}\n```json\n{body}\n```" if fenced else f"{prose} {body}"
    assert parse_status(reply) == Verdict(status, True)


@FUZZ
@given(replies)
def test_fuzz_yes_no_and_nli_verdicts(reply: str) -> None:
    yes_no = parse_yes_no(reply)
    _check_verdict(yes_no, reply, "yes")
    assert yes_no.parsed or not yes_no.accepted
    nli = parse_nli(reply)
    _check_verdict(nli, reply, "useful")
    assert nli.parsed or not nli.accepted
    if nli.parsed:
        assert "useful" in reply.lower() or "useless" in reply.lower()


@FUZZ
@given(replies)
def test_fuzz_one_question_parsers_return_one_clean_line(reply: str) -> None:
    for parse in (parse_sub_question, parse_new_question):
        question = parse(reply)
        assert isinstance(question, str) and _is_one_clean_line(question)
        if reply.strip() == "":
            assert question == ""


@FUZZ
@given(replies)
def test_fuzz_until_done_is_a_stripped_part_of_the_reply(reply: str) -> None:
    passage = until_done(reply)
    assert passage == passage.strip()
    assert passage in reply
    assert _DONE.search(passage) is None


@FUZZ
@given(replies, st.text(max_size=40), st.lists(st.text(max_size=20), max_size=4))
def test_fuzz_profile_query_parsers_stay_within_their_limits(
    reply: str, question: str, query_log: list[str]
) -> None:
    asked = {q.casefold() for q in query_log} | {question.casefold()}
    logged, queries = paper_new_queries(reply, question, query_log)
    assert logged == queries == parse_questions_unasked(reply, asked)[:PROMPTED_QUESTIONS]
    logged, queries = amber_new_queries(reply, question, query_log)
    assert logged == queries and len(queries) <= 1
    assert all(q and q.casefold() not in asked for q in queries)
    logged, queries = official_new_queries(reply, question, query_log)
    assert logged == [reply] and len(queries) == 1 and len(queries[0]) <= 500


def parse_questions_unasked(reply: str, asked: set[str]) -> list[str]:
    return [q for q in parse_questions(reply) if q.casefold() not in asked]


# Degenerate replies (a small model looping on whitespace, markers or one word) that made
# nested whitespace patterns backtrack for minutes: "Question" + 2,000 spaces took ~50 s and
# grew with the cube of the run. Each case runs on a watchdog thread so that a regression
# fails with a message instead of hanging the suite; the bound is minutes above the expected
# milliseconds, so it is no timing assertion.
_RUN = " " * 200_000
HUGE_REPLIES = {
    "question label then spaces": "Question" + _RUN + "x",
    "heading then spaces": "#" + _RUN + "x",
    "label colon then spaces": "Q:" + _RUN + "x",
    "list item with inner spaces": "1." + _RUN + "x?" + _RUN + "y",
    "status then spaces": '"status"' + _RUN + ":" + _RUN + "'" + _RUN + "x",
    "nli then spaces": "nli" + _RUN + "result" + _RUN + ":" + _RUN + "x",
    "new question then spaces": "### new" + _RUN + "question" + _RUN + "x",
    "tabs and markers": ("\t*#> " * 50_000) + "new question",
    "repeated status": "status: maybe " * 50_000,
    "many short lines": "1. a?\n" * 100_000,
    "one huge word": "y" * 2_000_000,
    "control characters": "\x00\x0b\x1c\x85" * 100_000,
}
ALL_PARSERS = {
    "parse_questions": parse_questions,
    "parse_status": parse_status,
    "official_status(DN)": lambda r: official_status(r, cut_braces=True),
    "official_status(AN)": lambda r: official_status(r, cut_braces=False),
    "parse_yes_no": parse_yes_no,
    "parse_sub_question": parse_sub_question,
    "parse_new_question": parse_new_question,
    "until_done": until_done,
    "parse_nli": parse_nli,
}


@pytest.mark.parametrize("case", sorted(HUGE_REPLIES))
def test_huge_degenerate_replies_parse_without_backtracking(case: str) -> None:
    reply = HUGE_REPLIES[case]
    pending = dict(ALL_PARSERS)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            while pending:
                name = next(iter(pending))
                pending[name](reply)
                del pending[name]
        except BaseException as exc:  # noqa: BLE001 - reported below with the parser's name
            errors.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(120)
    assert not errors, f"{next(iter(pending))} raised {errors[0]!r}"
    assert not worker.is_alive(), f"{next(iter(pending))} is still parsing {case!r} after 2 min"
