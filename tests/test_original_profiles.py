"""Profile "original": each baseline as its own paper and code ran it. Every method that declares
one runs with the original's settings where the run sets none (the searches' k and every call's
sampling arguments, as recorded), a setting the run gives wins, and a method without one is
refused with one clear error before any call. docs/deviations.md lists what each original
changes, with its source."""

from __future__ import annotations

from importlib import resources
from typing import Any

import pytest

import noterag
from noterag.base.errors import ConfigError
from noterag.core.context import resolve_context
from scripted import QUESTION, VELMORA_ROWS, RecordingRetriever, ScriptedModel, passages

CORPUS = passages(*VELMORA_ROWS)
ORIGINALS = sorted(m for m, spec in noterag.METHODS.items() if "original" in spec.profiles)
SAMPLING = ("temperature", "top_p", "max_tokens")

# replies that make each method search (and end), and settings that keep its prompts short
SCRIPTS: dict[str, dict[str, Any]] = {
    "adaptive-rag": {"classify": "C", "reason": "So the answer is: 1871."},
    "ircot": {"reason": "So the answer is: 1871."},
    "react": {"reason": " Search it.\nAction 1: Search[Velmora Bridge]"},
}
SETTINGS: dict[str, dict[str, Any]] = {
    "adaptive-rag": {"max_demos": 1, "prompt_tokens": None},
    "ircot": {"max_demos": 1, "prompt_tokens": None},
    "flare": {"max_demos": 1},
    "react": {"max_steps": 1},
    "rat": {"max_steps": 1},
    "self-rag": {"mode": "always_retrieve"},
    # REPLUG's original shows the first 16 questions of a QA data file: the shipped sample's
    "replug": {"demos_file": str(resources.files("noterag") / "data" / "sample_questions.jsonl")},
}


def run(method: str, **context: Any) -> tuple[dict[str, Any], ScriptedModel, RecordingRetriever]:
    model = ScriptedModel.for_method(method, script=SCRIPTS.get(method, {}))
    retriever = RecordingRetriever(passages=CORPUS)
    graph = noterag.build_graph(method, model=model, retriever=retriever)
    out = graph.invoke({"question": QUESTION}, context=SETTINGS.get(method, {}) | context)
    return out, model, retriever


def test_the_baselines_with_an_original_profile():
    assert ORIGINALS == [
        "adaptive-rag", "flare", "ircot", "rat", "react", "replug", "self-rag", "sure",
    ]  # fmt: skip
    for method in ORIGINALS:  # each changes something, and only settings the method has
        original = noterag.METHODS[method].context.ORIGINAL
        assert original, method
        context = SETTINGS.get(method, {}) | {"profile": "original"}
        ctx = resolve_context(noterag.METHODS[method].context, context)
        assert {key: getattr(ctx, key) for key in original} == dict(original), method


@pytest.mark.parametrize("method", ORIGINALS)
def test_a_run_under_original_searches_and_samples_as_the_original(method: str):
    original = noterag.METHODS[method].context.ORIGINAL
    out, model, retriever = run(method, profile="original")
    assert out["answer"] is not None and model.calls
    if "top_k" in original:
        searched = {k for _, k in retriever.queries}
        # REPLUG also retrieves the top-1 passage of each demonstration's question
        assert (
            searched - {1} == {original["top_k"]}
            if method == "replug"
            else searched == {original["top_k"]}
        )
    sampling = {key: value for key, value in original.items() if key in SAMPLING}
    for args in model.arguments():
        assert {key: args.get(key) for key in sampling} == sampling


@pytest.mark.parametrize("method", ORIGINALS)
def test_a_setting_the_run_gives_wins_over_the_originals(method: str):
    _, model, retriever = run(method, profile="original", top_k=3, temperature=0.5)
    assert retriever.queries and {k for _, k in retriever.queries} - {1} == {3}
    assert all(args["temperature"] == 0.5 for args in model.arguments())


def test_the_paper_profile_keeps_the_note_papers_setup():
    for method in ("sure", "replug", "self-rag"):
        _, _, retriever = run(method)
        assert {k for _, k in retriever.queries} == {5}, method


@pytest.mark.parametrize("method", ["vanilla", "deepnote", "resp", "iter-retgen", "recomp"])
def test_a_method_without_an_original_profile_refuses_it_before_any_call(method: str):
    model = ScriptedModel.for_method(method)
    graph = noterag.build_graph(method, model=model, retriever=RecordingRetriever(passages=CORPUS))
    with pytest.raises(ConfigError, match=f"^{method} has no original profile"):
        graph.invoke({"question": QUESTION}, context={"profile": "original"})
    assert model.calls == []
