"""Every prompt against the paper it comes from (../shared/seeds), word for word."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from noterag.core.prompt import Prompt
from noterag.prompts import adaptive_note, deepnote

SEEDS = Path(__file__).resolve().parents[2] / "shared" / "seeds"


def words(text: str) -> str:
    """Compare words, not layout: the papers typeset prompts in tables (curly quotes, doubled
    format braces, line breaks where the cell wraps)."""
    text = text.replace("“", '"').replace("”", '"').replace("{{", "{").replace("}}", "}")
    text = re.sub(r'"\s*:\s*"', '":"', text)  # {"status": "True"} == {"status":"True"}
    return re.sub(r"\s+", " ", text).strip()


def paper(name: str) -> str:
    path = SEEDS / name
    if not path.exists():
        pytest.skip(f"{path} is not present (the papers live in ../shared/seeds)")
    return words(path.read_text())


def all_prompts(prompts) -> list[Prompt]:
    return [
        prompts.init_note,
        prompts.refine_query,
        prompts.accumulate,
        prompts.review,
        *prompts.answer.values(),
    ]


@pytest.mark.parametrize("prompt", all_prompts(adaptive_note.PAPER), ids=lambda p: p.name)
def test_adaptive_note_prompts_are_the_papers(prompt: Prompt):
    source = "deepnote.txt" if "DeepNote" in prompt.source else "adaptive-note.txt"
    assert words(prompt.text) in paper(source)


@pytest.mark.parametrize("prompt", all_prompts(deepnote.PAPER), ids=lambda p: p.name)
def test_deepnote_prompts_are_the_papers(prompt: Prompt):
    assert words(prompt.text) in paper("deepnote.txt")


@pytest.mark.parametrize("stage", ["init_note", "refine_query", "accumulate", "review"])
def test_official_adaptive_note_prompts_say_the_same_words(stage: str):
    def squash(p: Prompt) -> str:
        return re.sub(r"\s+", "", words(p.text)).lower()

    assert squash(getattr(adaptive_note.OFFICIAL, stage)) == squash(
        getattr(adaptive_note.PAPER, stage)
    )


def test_slots_are_filled_once_and_literal_json_survives():
    filled = deepnote.PAPER.review.format(query="q", best_note="note {new_note}", new_note="N2")
    assert 'return json {"status":"True"} directly' in filled
    assert "Provided Note 1: note {new_note}\n" in filled  # a slot name inside a value stays as is
    with pytest.raises(KeyError, match="new_note"):
        deepnote.PAPER.review.format(query="q", best_note="b")


def test_every_method_answers_every_task():
    assert set(adaptive_note.PAPER.answer) == {"multihop", "asqa", "strategyqa", "crud"}
    assert set(deepnote.PAPER.answer) == {"multihop", "asqa", "strategyqa"}


def test_no_method_shares_a_prompt_object_with_another_unmarked():
    """Editing one method's prompt must not silently change another's: a prompt one method takes
    from another is its own copy, marked ``borrowed_from`` (noterag.core.prompt.borrow)."""
    import noterag
    from noterag.core.prompt import AnswerPrompts

    def prompts_of(prompt_set: AnswerPrompts) -> list[Prompt]:
        stages = [getattr(prompt_set, f) for f in vars(prompt_set) if f != "answer"]
        return [p for p in stages if isinstance(p, Prompt)] + list(prompt_set.answer.values())

    owner: dict[int, str] = {}
    for name, spec in noterag.METHODS.items():
        for prompt_set in {id(s): s for s in spec.prompts.values()}.values():
            for prompt in prompts_of(prompt_set):
                assert owner.setdefault(id(prompt), name) == name, (
                    prompt.name,
                    name,
                    owner[id(prompt)],
                )
    # the known borrowings say so
    amber = noterag.METHODS["amber"].prompts["paper"]
    assert all(p.borrowed_from for p in (amber.init_note, amber.accumulate, *amber.answer.values()))
    assert noterag.METHODS["adaptive-note"].prompts["paper"].answer["strategyqa"].borrowed_from
