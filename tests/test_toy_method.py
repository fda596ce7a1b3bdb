"""A method declared in this test module alone (docs/methods.md, "a worked toy") runs through
every generic part of noterag — build_graph, `noterag ask`, `noterag eval` (its row fields),
`noterag trace` (its own layout), a chat thread (reset) — with no other file changed.

    q;  guesses = []
    repeat:  guesses += LLM(guess prompt(q, guesses))       guess
    until len(guesses) >= max_steps                          stop_check (enough)
    answer = LLM(answer prompt(q, last guess))               answer
"""

from __future__ import annotations

import json
import operator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain_core.language_models import BaseChatModel
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, StateGraph
from rich.text import Text
from typer.testing import CliRunner

import noterag
from noterag.cli import app
from noterag.core.context import MOST_STEPS, RunContext, setting
from noterag.core.decision import stop_check
from noterag.core.prompt import AnswerPrompts, Prompt
from noterag.core.spec import Deps, MethodSpec
from noterag.core.state import ChatFields, CostFields
from noterag.core.step import Ask, Env, StepGen, node
from noterag.nodes.answer import answer
from noterag.registry.methods import register
from scripted import QUESTION, VELMORA_ROWS, KeywordRetriever, ScriptedModel, passages

# --- the method: everything a method is, in one place ---------------------------------------------


@dataclass(kw_only=True)
class GuessContext(RunContext):
    max_steps: int = setting(2, "Guesses at most.", ge=1, le=MOST_STEPS)


class GuessState(CostFields, ChatFields, total=False):
    question: str
    task: str
    answer: str
    best_note: str  # the last guess: what the shared answer prompt's {note} reads
    guesses: Annotated[list[str], operator.add]
    steps: int
    trace: Annotated[list[dict[str, Any]], operator.add]
    stop_reason: str


@dataclass(frozen=True, kw_only=True)
class GuessPrompts(AnswerPrompts):
    guess: Prompt


PROMPTS = GuessPrompts(
    guess=Prompt(
        "guess", "Guess the answer.\nQuestion: {query}\nEarlier guesses: {guesses}", "ours: a toy"
    ),
    answer={
        "multihop": Prompt(
            "answer", "Answer with the guess.\nGuess: {note}\nQuestion: {query}", "ours"
        )
    },
)


def guess(state: dict[str, Any], env: Env) -> StepGen:
    """One guess from the question and the earlier guesses."""
    step = state.get("steps", 0) + 1
    reply = yield Ask(
        "guess",
        env.prompts.guess.format(
            query=state["question"], guesses="; ".join(state.get("guesses", []))
        ),
    )
    env.emit({"type": "guess", "step": step, "text": reply})
    return {
        "guesses": [reply],
        "best_note": reply,
        "steps": step,
        "trace": [{"step": step, "guess": reply, "llm_calls": 1}],
    }


def enough(state: Any, ctx: Any, profile: Any) -> str | None:
    steps = state.get("steps", 0)
    return f"{steps} guesses (max_steps = {ctx.max_steps})" if steps >= ctx.max_steps else None


def wire(graph: StateGraph, deps: Deps) -> None:
    graph.add_node("guess", node(guess, deps))
    graph.add_node("stop_check", stop_check(enough, deps, go_on="guess"))
    graph.add_node("answer", node(answer, deps))
    graph.add_edge("question", "guess")
    graph.add_edge("guess", "stop_check")
    graph.add_edge("answer", END)


LAYOUT = '{% for entry in run.trace %}<p class="toy-guess">guess {{ entry.step }}: {{ entry.guess }}</p>{% endfor %}'

SPEC = MethodSpec(
    name="toy-guess",
    title="Toy guesser (docs/methods.md)",
    summary="guesses max_steps times, then answers with the last guess",
    context=GuessContext,
    state=GuessState,
    stops=(enough,),
    output=GuessState,
    roles=("guess", "answer"),
    prompts={"paper": PROMPTS},
    wire=wire,
    result_fields=("guesses",),
    trace_view=LAYOUT,
    progress={"guess": lambda event: Text(f"guessed {event['text']}")},
)


@pytest.fixture(autouse=True)
def toy() -> Any:
    register(SPEC)
    yield SPEC
    noterag.METHODS.unregister(SPEC.name)


SCRIPT = {"guess": ["Fenwick", "1871"], "answer": "1871"}
CORPUS = passages(*VELMORA_ROWS)


# --- build_graph ------------------------------------------------------------------------------------


def test_build_graph_runs_it():
    model = ScriptedModel(script=SCRIPT)
    out = noterag.build_graph(
        "toy-guess", model=model, retriever=KeywordRetriever(passages=CORPUS)
    ).invoke({"question": QUESTION})
    assert model.stages == ["guess", "guess", "answer"]
    assert out["guesses"] == ["Fenwick", "1871"] and out["answer"] == "1871"
    assert out["stop_reason"] == "2 guesses (max_steps = 2)"
    assert out["llm_calls"] == 3 and [e["step"] for e in out["trace"]] == [1, 2]
    assert "Earlier guesses: Fenwick" in model.prompts_for("guess")[1]


def test_a_prompt_variant_without_editing_the_method():
    model = ScriptedModel(script=SCRIPT)
    graph = noterag.build_graph(
        "toy-guess",
        model=model,
        retriever=KeywordRetriever(passages=CORPUS),
        prompts={"guess": "GUESS {query}"},
    )
    graph.invoke({"question": QUESTION}, context={"prompts": {"answer.multihop": "A: {note}"}})
    assert model.prompts_for("guess") == [f"GUESS {QUESTION}"] * 2
    assert model.prompts_for("answer") == ["A: 1871"]
    assert PROMPTS.guess.text.startswith("Guess the answer.")  # the method's own text unchanged


# --- the CLI --------------------------------------------------------------------------------------


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> ScriptedModel:
    model = ScriptedModel(script=SCRIPT)

    def load(spec: Any = None, settings: Any = None, **kwargs: Any) -> Any:
        return spec if isinstance(spec, BaseChatModel) else model

    monkeypatch.setattr(noterag.models, "load_chat_model", load)
    return model


@pytest.fixture
def index_dir(tmp_path: Path) -> Path:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(p) + "\n" for p in CORPUS))
    assert (
        CliRunner().invoke(app, ["index", str(corpus), "--out", str(tmp_path / "index")]).exit_code
        == 0
    )
    return tmp_path / "index"


def test_noterag_ask_and_trace(scripted: ScriptedModel, index_dir: Path, tmp_path: Path):
    runner = CliRunner()
    result = runner.invoke(
        app,
        [
            "ask",
            QUESTION,
            "--method",
            "toy-guess",
            "--index",
            str(index_dir),
            "--json",
            "-c",
            "max_steps=3",
        ],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    run = json.loads(result.stdout)
    assert run["answer"] == "1871" and scripted.stages == ["guess"] * 3 + ["answer"]
    assert "guessed Fenwick" in result.stderr and "guessed 1871" in result.stderr  # its progress
    (tmp_path / "run.json").write_text(result.stdout)
    page = tmp_path / "run.html"
    result = runner.invoke(app, ["trace", str(tmp_path / "run.json"), "--html", str(page)])
    assert result.exit_code == 0, result.output
    assert page.read_text().count('<p class="toy-guess">') == 3  # its own layout
    assert "guess 2: 1871" in page.read_text()


def test_noterag_eval_rows(scripted: ScriptedModel, index_dir: Path, tmp_path: Path):
    data = tmp_path / "q.jsonl"
    data.write_text(json.dumps({"id": "q1", "question": QUESTION, "answers": ["1871"]}) + "\n")
    result = CliRunner().invoke(
        app,
        [
            "eval",
            "--method",
            "toy-guess",
            "--dataset",
            str(data),
            "--index",
            str(index_dir),
            "--out",
            str(tmp_path / "run"),
        ],
    )
    assert result.exit_code == 0, result.output
    (row,) = [
        json.loads(line) for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines()
    ]
    assert row["guesses"] == ["Fenwick", "1871"]  # the field it declares
    assert row["metrics"]["em"] == 100.0 and row["stop_reason"].startswith("2 guesses")


def test_noterag_methods_describes_it(scripted: ScriptedModel):
    result = CliRunner().invoke(app, ["methods"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "toy-guess — Toy guesser" in result.stdout and "Guesses at most." in result.stdout


# --- a chat thread ---------------------------------------------------------------------------------


def test_a_chat_thread_starts_the_next_question_afresh():
    model = ScriptedModel(
        script={
            "guess": ["a", "b", "c", "d"],
            "answer": "x",
            "condense_question": "Who painted it?",
        }
    )
    graph = noterag.build_graph(
        "toy-guess", model=model, retriever=KeywordRetriever(passages=CORPUS)
    )
    graph = graph.copy(update={"checkpointer": InMemorySaver()})
    thread = {"configurable": {"thread_id": "t"}}
    graph.invoke({"messages": [{"role": "user", "content": QUESTION}]}, thread)
    second = graph.invoke({"messages": [{"role": "user", "content": "And the painter?"}]}, thread)
    # its own accumulating field and counters start over: two new guesses, not four
    assert second["guesses"] == ["c", "d"] and second["steps"] == 2
    assert [e["step"] for e in second["trace"]] == [1, 2]
    # the follow-up rewritten from the conversation (the generic question step, issue 23)
    assert (second["asked"], second["question"]) == ("And the painter?", "Who painted it?")
    assert "Earlier guesses: c" in model.prompts_for("guess")[-1]  # nothing of the first run
