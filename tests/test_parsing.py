"""Reply parsers: the formats models actually produce, and no exception for any text."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from noterag.nodes.parsing import Verdict, official_status, parse_questions, parse_status


def test_numbered_and_bulleted_questions():
    reply = "Here are two new questions:\n1. Who designed the Velmora Bridge?\n2) Aurelio Fenwick birth year\n"
    assert parse_questions(reply) == ["Who designed the Velmora Bridge?", "Aurelio Fenwick birth year"]
    assert parse_questions("- first one?\n* second one?") == ["first one?", "second one?"]
    assert parse_questions("Question 1: alpha\nQuestion 2: beta") == ["alpha", "beta"]
    assert parse_questions('1. "Quoted question?"\n2. **Bold question?**') == ["Quoted question?", "Bold question?"]


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
    assert official_status('json: {"status":"False"} - true', cut_braces=False) == Verdict(True, False)
    # DeepNote cuts from the first { to the last } when the reply mentions json
    assert official_status('json: {"status":"False"} - true', cut_braces=True) == Verdict(False, True)
    assert official_status("TRUE!", cut_braces=True) == Verdict(True, False)


@given(st.text())
def test_parsers_never_raise(text: str):
    assert isinstance(parse_questions(text), list)
    assert isinstance(parse_status(text), Verdict)
    assert isinstance(official_status(text, cut_braces=True), Verdict)
    assert isinstance(official_status(text, cut_braces=False), Verdict)


@given(st.lists(st.text(min_size=1).filter(lambda s: s.strip() and len(s.splitlines()) == 1), min_size=1, max_size=4))
def test_numbered_lists_round_trip(items: list[str]):
    reply = "\n".join(f"{i}. {item}" for i, item in enumerate(items, 1))
    parsed = parse_questions(reply)
    assert len(parsed) <= len(items)
    assert all(isinstance(q, str) and q for q in parsed)
