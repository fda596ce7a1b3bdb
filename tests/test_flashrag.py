"""Profile "flashrag" and FlashRAG's F1: the baselines ReSP Table 2 reprints from FlashRAG's
benchmark (RUC-NLPIR/FlashRAG @ 0e4da8c, vendored under prompts/original/RUC-NLPIR-FlashRAG/).

The vendored files are checked byte for byte (git blob ids); the prompts a run sends are
compared whole with FlashRAG's own ``str.format`` of the strings in those files; ``f1_flashrag``
is compared with FlashRAG's own ``F1_Score.token_level_scores``, run here from the vendored
metrics.py on hand-made cases (and with values worked by hand)."""

from __future__ import annotations

import ast
import hashlib
import json
import re
import string
from collections import Counter
from importlib import resources
from typing import Any

import pytest

import noterag
from noterag.base.errors import ConfigError
from noterag.core.profiles import FLASHRAG_SAMPLING, flashrag_passages
from noterag.eval.metrics import f1_flashrag, score
from noterag.prompts import flashrag as prompts
from noterag.prompts import vendored
from scripted import QUESTION, VELMORA_ROWS, RecordingRetriever, ScriptedModel, passages

FOLDER = resources.files("noterag.prompts") / "original" / "RUC-NLPIR-FlashRAG"
CORPUS = passages(*VELMORA_ROWS)
FLASHRAG_METHODS = ("iter-retgen", "no-retrieval", "vanilla")


def test_the_vendored_files_are_flashrags_bytes() -> None:
    source = json.loads(FOLDER.joinpath("SOURCE.json").read_text("utf-8"))
    assert source["repository"] == "RUC-NLPIR/FlashRAG"
    assert source["commit"] == prompts.COMMIT
    names = sorted(p.name for p in FOLDER.iterdir() if p.name != "SOURCE.json")
    assert names == sorted(source["git_blobs"]) == sorted(source["files"])
    for name in names:
        data = FOLDER.joinpath(name).read_bytes()
        assert (
            hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() == source["git_blobs"][name]
        )


# --------------------------------------------------------------------------- FlashRAG's own code


def _flashrag_function(file: str, name: str, cls: str | None = None) -> Any:
    """A function of a vendored FlashRAG file, compiled from its own source text (a method of
    ``cls`` as a plain function), to compare noterag's with."""
    tree = ast.parse(vendored.text(prompts.REPOSITORY, file))
    body = tree.body
    if cls is not None:
        body = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls).body
    function = next(n for n in body if isinstance(n, ast.FunctionDef) and n.name == name)
    namespace: dict[str, Any] = {"re": re, "string": string, "Counter": Counter}
    # FlashRAG's own function, to compare with: the vendored text, checked byte for byte above
    exec(compile(ast.Module([function], []), file, "exec"), namespace)  # noqa: S102
    return namespace[name]


def flashrag_f1(prediction: str, golds: list[str]) -> float:
    normalize = _flashrag_function("utils.py.txt", "normalize_answer")
    token_level_scores = _flashrag_function("metrics.py.txt", "token_level_scores", "F1_Score")
    globals_ = token_level_scores.__globals__
    globals_["normalize_answer"] = normalize
    return float(token_level_scores(None, prediction, golds)["f1"])


# (prediction, golds, FlashRAG's F1 worked by hand)
CASES = [
    ("The Eiffel Tower", ["Eiffel Tower"], 1.0),
    ("Paris, France", ["paris"], 2 / 3),  # P 1/2, R 1
    ("no", ["no way"], 0.0),  # a "no" prediction scores only against "no" (f1: 2/3)
    ("no way", ["no"], 0.0),  # a "no" gold likewise (f1: 2/3)
    ("Yes.", ["yes"], 1.0),
    ("yes", ["no", "yes"], 1.0),  # the best alias
    ("noanswer", ["no answer"], 0.0),
    ("No answer", ["noanswer"], 0.0),  # "no answer" is not "noanswer": no shared token
    ("", ["the"], 0.0),
    ("Aurelio Fenwick, the architect", ["Fenwick", "Aurelio Fenwick"], 0.8),  # P 2/3, R 1
]


@pytest.mark.parametrize(("prediction", "golds", "by_hand"), CASES)
def test_f1_flashrag_is_flashrags_f1(prediction: str, golds: list[str], by_hand: float) -> None:
    theirs = flashrag_f1(prediction, golds)
    assert theirs == pytest.approx(by_hand)
    assert f1_flashrag(prediction, golds) == pytest.approx(theirs)
    assert score(prediction, golds, "multihop")["f1_flashrag"] == pytest.approx(100 * theirs)


def test_f1_flashrag_differs_from_f1_only_on_yes_no_noanswer() -> None:
    assert score("no", ["no way"], "multihop")["f1"] == pytest.approx(100 * 2 / 3)
    assert score("no", ["no way"], "multihop")["f1_flashrag"] == 0.0


# --------------------------------------------------------------------------- the prompts


def test_the_prompts_are_flashrags_strings() -> None:
    system, user = prompts.base_template()
    assert system == (
        "Answer the question based on the given document.Only give me the answer and do not "
        "output any other words.\nThe following are given documents.\n\n{reference}"
    )
    assert user == "Question: {question}"
    naive = (
        "Answer the question based on your own knowledge. Only give me the answer and do not "
        "output any other words."
    )
    assert prompts.zero_shot_template() == (naive, "Question: {question}")


def wiki18_contents(doc: dict[str, str]) -> str:
    """A passage as FlashRAG's wiki18_100w.jsonl stores it: the quoted title, then the text."""
    return f'"{doc["title"]}"\n{doc["text"]}'


def _flashrag_format_reference(contents: list[str]) -> str:
    """FlashRAG's format_reference, run from the vendored base_prompt.py, on its corpus's
    ``contents`` strings."""
    format_reference = _flashrag_function(
        "base_prompt.py.txt", "format_reference", "PromptTemplate"
    )

    class Template:
        reference_template = None

    return str(format_reference(Template(), [{"contents": c} for c in contents]))


def test_the_passages_are_formatted_as_flashrag_formats_them() -> None:
    """wiki18's contents read by noterag's corpus reader (which drops the title's quotes) and
    formatted by profile flashrag give FlashRAG's own references of the same contents."""
    from noterag.retrievers.corpus import split_contents

    contents = [wiki18_contents(d) for d in CORPUS[:3]]
    read = [split_contents(c) | {"id": str(i)} for i, c in enumerate(contents)]
    assert [p["title"] for p in read] == [d["title"] for d in CORPUS[:3]]
    assert flashrag_passages(read) == _flashrag_format_reference(contents)


def _flashrag_string(parts: tuple[str, str], **values: str) -> str:
    """FlashRAG's get_string for a model without a chat template: both parts str.format-ed
    with the values, the non-empty ones joined by a blank line."""
    filled = [part.format(**values) for part in parts]
    return "\n\n".join(part for part in filled if part != "")


def run(method: str, **context: Any) -> tuple[dict[str, Any], ScriptedModel, RecordingRetriever]:
    model = ScriptedModel.for_method(method)
    retriever = RecordingRetriever(passages=CORPUS)
    graph = noterag.build_graph(method, model=model, retriever=retriever)
    out = graph.invoke({"question": QUESTION}, context={"profile": "flashrag"} | context)
    return out, model, retriever


def test_vanilla_sends_flashrags_standard_rag_prompt_and_decoding() -> None:
    _, model, retriever = run("vanilla")
    [(query, k)] = retriever.queries
    assert (query, k) == (QUESTION, 5)
    found = retriever.invoke(QUESTION)
    docs = [{"title": d.metadata["title"], "text": d.page_content} for d in found[:5]]
    reference = _flashrag_format_reference([wiki18_contents(d) for d in docs])
    [prompt] = model.prompts_for("answer")
    assert prompt == _flashrag_string(
        prompts.base_template(), reference=reference, question=QUESTION
    )
    for args in model.arguments():
        assert {key: args.get(key) for key in FLASHRAG_SAMPLING} == FLASHRAG_SAMPLING


def test_no_retrieval_sends_flashrags_naive_generation_prompt() -> None:
    _, model, retriever = run("no-retrieval")
    assert retriever.queries == []
    [prompt] = model.prompts_for("answer")
    assert prompt == _flashrag_string(prompts.zero_shot_template(), question=QUESTION)


def test_iter_retgen_sends_flashrags_template_each_iteration() -> None:
    _, model, retriever = run("iter-retgen")
    assert len(retriever.queries) == 3  # FlashRAG's iter_num 3
    system, user = prompts.base_template()
    sent = model.prompts_for("generate") + model.prompts_for("answer")
    assert len(sent) == 3
    for prompt in sent:
        head = system.split("{reference}")[0]
        assert prompt.startswith(head) and prompt.endswith("\n\n" + user.format(question=QUESTION))
        assert "Let's think step by step" not in prompt  # no demonstrations


def test_iter_retgen_answers_with_the_last_generation_whole() -> None:
    """FlashRAG's answer is the last generation as it is (its "pred"); the paper profile reads
    the last line of a chain of thought."""
    reply = "Aurelio Fenwick designed it.\nHe was born in 1871."
    answers = {}
    for profile in ("flashrag", "paper"):
        model = ScriptedModel.for_method("iter-retgen", script={"answer": reply})
        graph = noterag.build_graph(
            "iter-retgen", model=model, retriever=RecordingRetriever(passages=CORPUS)
        )
        answers[profile] = graph.invoke({"question": QUESTION}, context={"profile": profile})
    assert answers["flashrag"]["answer"] == reply
    assert answers["paper"]["answer"] == "He was born in 1871"


def test_a_setting_the_run_gives_wins_over_flashrags() -> None:
    _, model, _ = run("vanilla", temperature=0.0, max_tokens=200)
    for args in model.arguments():
        assert (args.get("temperature"), args.get("max_tokens")) == (0.0, 200)


def test_a_method_without_flashrags_prompts_refuses_the_profile() -> None:
    with pytest.raises(ConfigError, match="no flashrag profile"):
        run("sure")
    assert all("flashrag" in noterag.METHODS[m].profiles for m in FLASHRAG_METHODS)
