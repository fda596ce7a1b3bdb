"""RAT driven by scripted models: the draft split into steps, each step revised once in order
with the previous revision in the next query, the step cap, the notebook's prompts word for
word, the counted fallbacks, the answer per task, roles, async, streaming, and one run of the
local model."""

from __future__ import annotations

import ast
import asyncio
import hashlib
import json
from typing import Any

import pytest
from pydantic import Field

from noterag.base.errors import ConfigError
from noterag.core.profiles import numbered_passages
from noterag.graphs import rat
from noterag.nodes.rat import split_draft
from noterag.prompts import rat as rat_prompts
from noterag.prompts import vendored
from scripted import (
    QUESTION,
    VELMORA_ROWS,
    KeywordRetriever,
    ScriptedModel,
    method_events,
    passages,
    progress_of,
)

CORPUS = passages(*VELMORA_ROWS)
T1 = "The Velmora Bridge was designed by an architect."
T2 = "Aurelio Fenwick designed it."
T3 = "So the answer is 1850."
DRAFT = f"{T1}\n\n{T2}\n\n{T3}"
QUERIES = ["Velmora Bridge architect", "Aurelio Fenwick", "Aurelio Fenwick born"]
REVISIONS = ["R1", "R1\n\nR2", "R1\n\nR2\n\nR3 1871"]


class RecordingRetriever(KeywordRetriever):
    queries: list[tuple[str, int | None]] = Field(default_factory=list)

    def _get_relevant_documents(self, query: str, *, run_manager: Any = None, k: int | None = None):
        self.queries.append((query, k))
        return super()._get_relevant_documents(query, run_manager=run_manager, k=k)


def script(**overrides: Any) -> dict[str, Any]:
    base = {"draft": DRAFT, "query": QUERIES, "revise": REVISIONS, "answer": "1871"}
    return base | overrides


def run(model: ScriptedModel, retriever: Any = None, **context: Any) -> dict[str, Any]:
    g = rat.build(model=model, retriever=retriever or KeywordRetriever(passages=CORPUS))
    return g.invoke({"question": QUESTION}, context=context or None)


def top(query: str, k: int = 5) -> list[dict[str, str]]:
    docs = KeywordRetriever(passages=CORPUS).invoke(query, k=k)
    return [{"id": d.id, "title": d.metadata["title"], "text": d.page_content} for d in docs]


def calls_add_up(out: dict[str, Any], model: ScriptedModel) -> None:
    assert out["llm_calls"] == len(model.calls)
    assert out["llm_calls"] == sum(e["llm_calls"] for e in out["trace"]) + 1  # + the answer


def query_prompt(answer: str) -> str:
    return f"##Question: {QUESTION}\n\n##Content: {answer}\n\n##Instruction: {rat_prompts.QUERY_PROMPT}"


def revise_prompt(found: list[dict[str, str]], answer: str) -> str:
    return (
        f"##Existing Text in Wiki Web: {numbered_passages(found)}\n\n##Question: {QUESTION}\n\n"
        f"##Answer: {answer}\n\n##Instruction: {rat_prompts.REVISE_PROMPT}"
    )


# --- the loop ----------------------------------------------------------------------------------


def test_each_step_is_revised_once_in_order_with_the_previous_revision_in_the_next_query():
    model, retriever = ScriptedModel(script=script()), RecordingRetriever(passages=CORPUS)
    out = run(model, retriever)
    assert model.stages == [
        "draft",
        "query",
        "revise",
        "query",
        "revise",
        "query",
        "revise",
        "answer",
    ]
    assert out["thoughts"] == [T1, T2, T3] and out["draft"] == DRAFT
    # the notebook's answer = answer + "\n\n" + p: the revised steps so far, then the next step
    currents = [f"\n\n{T1}", f"R1\n\n{T2}", f"R1\n\nR2\n\n{T3}"]
    assert model.prompts_for("query") == [query_prompt(c) for c in currents]
    assert retriever.queries == [(q, 5) for q in QUERIES]
    assert model.prompts_for("revise") == [
        revise_prompt(top(q), c) for q, c in zip(QUERIES, currents, strict=True)
    ]
    assert out["revised"] == REVISIONS[-1]
    assert model.prompts_for("answer") == [
        (
            "Answer the question based on the given reasoning. Only give me the answer and do not "
            "output any other words.\n\nThe following is the given reasoning:\n"
            f"R1\n\nR2\n\nR3 1871\n\nQuestion: {QUESTION}\nAnswer:"
        )
    ]
    assert out["answer"] == "1871" and out["messages"][-1].content == "1871"
    assert out["steps"] == 3
    assert out["stop_reason"] == "every step of the draft revised (3 of 3; max_steps = 3)"
    assert [e["step"] for e in out["trace"]] == [0, 1, 2, 3]
    assert out["trace"][0] == {"step": 0, "draft": DRAFT, "thoughts": [T1, T2, T3], "llm_calls": 1}
    assert out["trace"][2] == {
        "step": 2,
        "thought": T2,
        "query": QUERIES[1],
        "passage_ids": [p["id"] for p in top(QUERIES[1])],
        "revised": True,
        "draft": "R1\n\nR2",
        "llm_calls": 2,
    }
    expected_ids: list[str] = []
    for q in QUERIES:
        expected_ids += [p["id"] for p in top(q) if p["id"] not in expected_ids]
    assert out["passage_ids"] == expected_ids
    assert out.get("fallbacks", {}) == {}
    calls_add_up(out, model)


def test_the_draft_prompt_is_the_notebooks():
    model = ScriptedModel(script=script())
    run(model)
    assert model.prompts_for("draft") == [
        (
            f"{QUESTION}\nIMPORTANT:\nTry to answer this question/instruction with step-by-step "
            "thoughts and make the answer more structural.\nUse `\n\n` to split the answer into "
            "several paragraphs.\nJust respond to the instruction directly. DO NOT add additional "
            "explanations or introducement in the answer unless you are asked to.\n"
        )
    ]


@pytest.mark.parametrize(
    ("max_steps", "thoughts"),
    [
        (1, [DRAFT]),
        (2, [T1, f"{T2}\n\n{T3}"]),
        (3, [T1, T2, T3]),
        (5, [T1, T2, T3]),
    ],
)
def test_max_steps_caps_the_steps_the_last_holding_the_rest(max_steps: int, thoughts: list[str]):
    model = ScriptedModel(script=script())
    out = run(model, max_steps=max_steps)
    assert out["thoughts"] == thoughts
    assert model.stages == ["draft"] + ["query", "revise"] * len(thoughts) + ["answer"]
    assert (
        model.prompts_for("query")[-1].startswith(f"##Question: {QUESTION}\n\n##Content: ")
        and model.prompts_for("query")[-1].count(thoughts[-1]) == 1
    )
    calls_add_up(out, model)


def test_split_draft():
    assert split_draft("a\n\n\n\nb\n\n  \n\nc\n\n", 5) == ["a", "b", "c"]  # blank pieces dropped
    assert split_draft("a\nb", 3) == ["a\nb"]  # one paragraph, one step
    assert split_draft("a\n\nb\n\nc\n\nd", 2) == ["a", "b\n\nc\n\nd"]
    assert split_draft("", 3) == [] and split_draft("\n\n", 3) == []


# --- fallbacks ---------------------------------------------------------------------------------


def test_an_empty_query_skips_the_steps_search_and_revision():
    model, retriever = (
        ScriptedModel(script=script(query=["  ", QUERIES[1], QUERIES[2]], revise=["S2", "S3"])),
        RecordingRetriever(passages=CORPUS),
    )
    out = run(model, retriever)
    assert model.stages == ["draft", "query", "query", "revise", "query", "revise", "answer"]
    assert retriever.queries == [(QUERIES[1], 5), (QUERIES[2], 5)]
    # the unrevised step stays in the draft the next query reads
    assert model.prompts_for("query")[1] == query_prompt(f"\n\n{T1}\n\n{T2}")
    assert out["trace"][1] == {
        "step": 1,
        "thought": T1,
        "query": "",
        "passage_ids": [],
        "revised": False,
        "draft": f"\n\n{T1}",
        "llm_calls": 1,
    }
    assert out["fallbacks"] == {"query": 1}
    calls_add_up(out, model)


def test_a_search_that_finds_nothing_keeps_the_step_unrevised():
    model = ScriptedModel(script=script(query=["zzz qqq", QUERIES[1], QUERIES[2]]))
    out = run(model)
    assert model.stages == ["draft", "query", "query", "revise", "query", "revise", "answer"]
    assert [e["revised"] for e in out["trace"][1:]] == [False, True, True]
    assert out.get("fallbacks", {}) == {}


def test_an_empty_revision_keeps_the_draft_so_far():
    model = ScriptedModel(script=script(revise=["R1", "", "R1\n\nT2\n\nR3"]))
    out = run(model)
    assert model.prompts_for("query")[2] == query_prompt(f"R1\n\n{T2}\n\n{T3}")
    assert model.prompts_for("revise")[2].endswith(
        f"##Answer: R1\n\n{T2}\n\n{T3}\n\n##Instruction: {rat_prompts.REVISE_PROMPT}"
    )
    assert [e["revised"] for e in out["trace"][1:]] == [True, False, True]
    assert out["fallbacks"] == {"revision": 1}
    calls_add_up(out, model)


def test_an_empty_draft_goes_straight_to_the_answer():
    model = ScriptedModel(script=script(draft="  \n\n "))
    out = run(model)
    assert model.stages == ["draft", "answer"]
    assert out["thoughts"] == [] and out["fallbacks"] == {"draft": 1}
    assert out["stop_reason"] == "every step of the draft revised (0 of 0; max_steps = 3)"
    assert "The following is the given reasoning:\n\n\nQuestion:" in model.prompts_for("answer")[0]
    calls_add_up(out, model)


# --- answer, roles, async, streaming, settings ---------------------------------------------------


@pytest.mark.parametrize(
    ("task", "marker"),
    [
        ("multihop", "Only give me the answer and do not output any other words."),
        ("asqa", "Instruction: Write an accurate, engaging, and concise answer"),
        ("strategyqa", "Only give me 'yes' or 'no' as your answer"),
    ],
)
def test_the_task_chooses_the_answer_prompt(task: str, marker: str):
    model = ScriptedModel(script=script())
    g = rat.build(model=model, retriever=KeywordRetriever(passages=CORPUS))
    g.invoke({"question": QUESTION, "task": task})
    (prompt,) = model.prompts_for("answer")
    assert marker in prompt and REVISIONS[-1] in prompt


def test_crud_has_no_answer_prompt():
    g = rat.build(model=ScriptedModel(script=script()), retriever=KeywordRetriever(passages=CORPUS))
    with pytest.raises(ConfigError, match="no answer prompt for task 'crud'"):
        g.invoke({"question": QUESTION, "task": "crud"})


def test_role_models():
    models = {role: ScriptedModel(script=script()) for role in rat.ROLES}
    g = rat.build(
        model=ScriptedModel(),
        retriever=KeywordRetriever(passages=CORPUS),
        **{f"{role}_model": m for role, m in models.items()},
    )
    g.invoke({"question": QUESTION})
    assert {role: m.stages for role, m in models.items()} == {
        "draft": ["draft"],
        "query": ["query"] * 3,
        "revise": ["revise"] * 3,
        "answer": ["answer"],
    }


def test_async_matches_sync():
    sync_model, async_model = ScriptedModel(script=script()), ScriptedModel(script=script())
    sync_out = run(sync_model)
    g = rat.build(model=async_model, retriever=KeywordRetriever(passages=CORPUS))
    async_out = asyncio.run(g.ainvoke({"question": QUESTION}))
    assert async_model.calls == sync_model.calls
    for key in ("answer", "trace", "revised", "passage_ids", "stop_reason", "llm_calls"):
        assert async_out[key] == sync_out[key], key


def test_events_and_only_the_answer_streams():
    g = rat.build(model=ScriptedModel(script=script()), retriever=KeywordRetriever(passages=CORPUS))
    custom, messages = [], []
    for mode, chunk in g.stream(
        {"question": QUESTION}, context={"max_steps": 2}, stream_mode=["custom", "messages"]
    ):
        (custom if mode == "custom" else messages).append(chunk)
    custom = method_events(custom)
    assert [e["type"] for e in custom] == [
        "draft",
        "query", "passages", "revision",
        "query", "passages", "revision",
        "answer",
    ]  # fmt: skip
    assert custom[0] == {"type": "draft", "step": 0, "thoughts": 2}
    assert custom[1] == {"type": "query", "step": 1, "query": QUERIES[0]}
    assert custom[3] == {
        "type": "revision",
        "step": 1,
        "revised": True,
        "passages": [{"id": p["id"], "title": p["title"]} for p in top(QUERIES[0])],
    }
    assert {meta["langgraph_node"] for _, meta in messages} == {"answer"}
    assert "".join(str(m.content) for m, _ in messages) == "1871"


def test_progress_lines():
    lines = progress_of(rat.SPEC)
    assert lines["draft"]({"thoughts": 3}) == "drafted a chain of thought: 3 step(s) to revise"
    assert lines["query"]({"query": "q"}) == "query: q"
    assert lines["query"]({"query": ""}) == "query: (none: step skipped)"
    assert lines["revision"]({"revised": True, "passages": [{}, {}]}) == (
        "step revised with 2 passage(s)"
    )
    assert lines["revision"]({"revised": False}) == "step not revised"


@pytest.mark.parametrize("bad", [0, -2])
def test_max_steps_must_be_positive(bad: int):
    g = rat.build(model=ScriptedModel(), retriever=KeywordRetriever(passages=CORPUS))
    with pytest.raises(ConfigError, match="max_steps must be at least 1"):
        g.invoke({"question": QUESTION}, context={"max_steps": bad})


# --- the notebook ----------------------------------------------------------------------------------


def test_vendored_notebook_is_the_repositorys_bytes():
    source = vendored.source("CraftJarvis/RAT")
    assert source["commit"] == "38afdf8c5950893b4f2d25446cc254000e53e11e"
    data = vendored.text("CraftJarvis/RAT", "creative.ipynb").encode("utf-8")
    assert (
        hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        == source["git_blobs"]["creative.ipynb"]
    )


def notebook_functions() -> dict[str, ast.FunctionDef]:
    notebook = json.loads(vendored.text("CraftJarvis/RAT", "creative.ipynb"))
    functions: dict[str, ast.FunctionDef] = {}
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            tree = ast.parse("".join(cell["source"]))
            functions |= {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    return functions


@pytest.mark.parametrize(
    ("function", "instruction", "prompt", "slots"),
    [
        ("get_draft", "draft_prompt", "draft", {"question": "Q?"}),
        ("get_query", "query_prompt", "query", {"question": "Q?", "answer": "A"}),
        (
            "get_revise_answer",
            "revise_prompt",
            "revise",
            {"question": "Q?", "answer": "A", "content": "C"},
        ),
    ],
)
def test_prompts_are_the_notebooks_words(
    function: str, instruction: str, prompt: str, slots: dict[str, str]
):
    """Each prompt renders exactly as the notebook's user message does: its instruction string
    and the f-string around it, evaluated from the vendored notebook's source."""
    fn = notebook_functions()[function]
    values: dict[str, Any] = dict(slots)
    for node in fn.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == instruction:
            values[instruction] = ast.literal_eval(node.value)
    user = next(
        n
        for n in ast.walk(fn)
        if isinstance(n, ast.Dict)
        and any(isinstance(k, ast.Constant) and k.value == "content" for k in n.keys)
        and any(isinstance(v, ast.Constant) and v.value == "user" for v in n.values)
    )
    content = user.values[
        [k.value for k in user.keys if isinstance(k, ast.Constant)].index("content")
    ]
    # the notebook's own f-string, evaluated over the slot values and its instruction only
    expected = eval(compile(ast.Expression(content), "<notebook>", "eval"), {}, values)
    assert getattr(rat_prompts.PAPER, prompt).format(**slots) == expected


def test_the_loop_is_the_notebooks():
    fn = notebook_functions()["rat"]
    source = ast.unparse(fn)
    assert "answer = answer + '\\n\\n' + p" in source  # the draft so far + the next step
    assert "draft_paragraphs = split_draft(draft)" in source
    assert "split_char='\\n\\n'" in ast.unparse(notebook_functions()["split_draft"])


# --- the local model ---------------------------------------------------------------------------------


@pytest.mark.e2e
def test_local_model_end_to_end(local_model: Any):
    from noterag.retrievers import load_retriever
    from noterag.retrievers.sample import sample_index, sample_questions

    question = sample_questions()[0]["question"]
    g = rat.build(model=local_model, retriever=load_retriever(f"bm25:{sample_index()}"))
    out = g.invoke({"question": question}, context={"max_tokens": 96, "max_steps": 2})
    assert out["answer"].strip() and out["stop_reason"]
    assert 0 <= out["steps"] <= 2 and len(out["thoughts"]) == out["steps"]
    assert out["llm_calls"] == sum(e["llm_calls"] for e in out["trace"]) + 1
