"""A method declared in this test module alone (docs/methods.md, "a worked toy") runs through
every generic part of noterag — build_graph, `noterag ask`, `noterag eval` (its row fields),
`noterag trace` (its own layout), a chat thread (reset) — with no other file changed.

    q;  guesses = []
    repeat:  guesses += LLM(guess prompt(q, guesses))       guess
    until len(guesses) >= max_steps                          stop_check (enough)
    answer = LLM(answer prompt(q, last guess))               answer

And a built-in method added as files only (tests/toy_method/: its graph module, prompts and
step, as a contributor adds them) into a copy of the package tree: after the one registration
step (the Makefile's ``register`` recipe, run in a copy of the checkout's generated files) it is
in ``noterag methods``, langgraph.json (and the server's graph loader loads it), docs/cli.md and
the methods table, the cost table (measured on its real loop), and passes the generic contract
tests (tests/test_method_contracts.py, run over that tree).
"""

from __future__ import annotations

import json
import operator
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, StateGraph

import noterag
from noterag.core.context import MOST_STEPS, RunContext, setting
from noterag.core.decision import Decision, stop_check
from noterag.core.progress import Line
from noterag.core.prompt import AnswerPrompts, Prompt
from noterag.core.spec import Deps, MethodSpec
from noterag.core.state import ChatFields, CostFields
from noterag.core.step import Ask, Env, StepGen, node
from noterag.nodes.answer import answer
from noterag.registry.methods import register
from scripted import (
    QUESTION,
    VELMORA_ROWS,
    KeywordRetriever,
    ScriptedModel,
    cli,
    passages,
    use_model,
    velmora_index,
)

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
    check = Decision(enough, go_on="guess")
    graph.add_node("stop_check", stop_check(check, deps))
    graph.add_conditional_edges("stop_check", check.route, check.routes)
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
    progress={"guess": Line("guessed {{ text }}")},
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
    use_model(monkeypatch, model)
    return model


@pytest.fixture
def index_dir(tmp_path: Path) -> Path:
    return velmora_index(tmp_path)


def test_noterag_ask_and_trace(scripted: ScriptedModel, index_dir: Path, tmp_path: Path):
    result = cli(
        "ask", QUESTION, "--method", "toy-guess", "--index", str(index_dir), "--json",
        "-c", "max_steps=3",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    run = json.loads(result.stdout)
    assert run["answer"] == "1871" and scripted.stages == ["guess"] * 3 + ["answer"]
    assert "guessed Fenwick" in result.stderr and "guessed 1871" in result.stderr  # its progress
    (tmp_path / "run.json").write_text(result.stdout)
    page = tmp_path / "run.html"
    result = cli("trace", str(tmp_path / "run.json"), "--html", str(page))
    assert result.exit_code == 0, result.output
    assert page.read_text().count('<p class="toy-guess">') == 3  # its own layout
    assert "guess 2: 1871" in page.read_text()


def test_noterag_eval_rows(scripted: ScriptedModel, index_dir: Path, tmp_path: Path):
    data = tmp_path / "q.jsonl"
    data.write_text(json.dumps({"id": "q1", "question": QUESTION, "answers": ["1871"]}) + "\n")
    result = cli(
        "eval", "--method", "toy-guess", "--dataset", str(data), "--index", str(index_dir),
        "--out", str(tmp_path / "run"),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    (row,) = [
        json.loads(line) for line in (tmp_path / "run" / "results.jsonl").read_text().splitlines()
    ]
    assert row["guesses"] == ["Fenwick", "1871"]  # the field it declares
    assert row["metrics"]["em"] == 100.0 and row["stop_reason"].startswith("2 guesses")


def test_noterag_methods_describes_it(scripted: ScriptedModel):
    result = cli("methods")
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


# --- a built-in method added as files only, then `make register` ----------------------------------

REPO = Path(__file__).resolve().parents[1]
TOY_FILES = Path(__file__).parent / "toy_method"
TOY = "toy-followup"
# the toy's files, where a contributor puts them (graphs/, nodes/, prompts/ install as noterag.*)
ADDED = {
    "graphs/toy_followup.py": "graphs_toy_followup.py",
    "nodes/toy_followup.py": "nodes_toy_followup.py",
    "prompts/toy_followup.py": "prompts_toy_followup.py",
}
LAYERS = ("graphs", "nodes", "prompts", "retrievers", "tables")  # top-level folders of the package
GENERATED = ("docs/cli.md", "docs/methods.md", "langgraph.json")


def package_tree(root: Path) -> Path:
    """The package as it installs (the Makefile's ``installed_tree``: noterag/ with links to each
    of its entries, and the top-level folders as its subpackages), with the toy's files added and
    noterag/data copied (the cost measurement writes its file there). Returns the directory to
    put on PYTHONPATH."""
    package = root / "noterag"
    package.mkdir(parents=True)
    for entry in (REPO / "noterag").iterdir():
        if entry.name == "data":
            shutil.copytree(entry, package / "data")
        elif entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for layer in LAYERS:
        added = {p: f for p, f in ADDED.items() if p.startswith(f"{layer}/")}
        if not added:
            (package / layer).symlink_to(REPO / layer)
            continue
        (package / layer).mkdir()
        for entry in (REPO / layer).iterdir():
            if entry.name != "__pycache__":
                (package / layer / entry.name).symlink_to(entry)
        for path, source in added.items():
            shutil.copy(TOY_FILES / source, package / path)
    return root


def checkout_copy(root: Path, tree: Path) -> Path:
    """The files the registration step writes (docs/cli.md, docs/methods.md, langgraph.json),
    copied, with graphs/ (what langgraph.json points at), the bench scripts it runs (copied:
    their results go beside them) and tests/ (their test doubles)."""
    for name in GENERATED:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, root / name)
    (root / "graphs").symlink_to(tree / "noterag" / "graphs")
    (root / "tests").symlink_to(REPO / "tests")
    (root / "bench").mkdir()
    for script in (REPO / "bench").glob("*.py"):
        shutil.copy(script, root / "bench" / script.name)
    return root


def register_recipe() -> list[list[str]]:
    """The commands of the Makefile's ``register`` target, its $(PY) this interpreter."""
    makefile = (REPO / "Makefile").read_text()
    recipe = makefile.split("\nregister:", 1)[1].split("\n")[1:]
    lines = []
    for line in recipe:
        if not line.startswith("\t"):
            break
        lines.append(line.strip().replace("$(PY)", sys.executable))
    assert lines and not any("$(" in line for line in lines), lines
    return [shlex.split(line) for line in lines]


@dataclass
class Registered:
    tree: Path  # on PYTHONPATH: the package with the toy
    checkout: Path  # the generated files after the registration step
    env: dict[str, str]
    output: str  # what the registration step printed

    def run(
        self, *args: str, timeout: float = 300, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``args`` in the checkout, on the tree (``env``: other variables, added)."""
        return subprocess.run(
            args,
            cwd=self.checkout,
            env=self.env | (env or {}),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


@pytest.fixture(scope="module")
def registered(tmp_path_factory: pytest.TempPathFactory) -> Registered:
    root = tmp_path_factory.mktemp("toy-method")
    tree = package_tree(root / "tree")
    checkout = checkout_copy(root / "checkout", tree)
    env = os.environ | {"PYTHONPATH": str(tree), "PYTHONWARNINGS": "ignore::DeprecationWarning"}
    done = Registered(tree, checkout, env, "")
    found = done.run(sys.executable, "-c", "import noterag; print(noterag.__file__)")
    assert found.stdout.strip() == str(tree / "noterag" / "__init__.py"), found.stderr
    for command in register_recipe():
        step = done.run(*command)
        assert step.returncode == 0, f"{shlex.join(command)}:\n{step.stdout}\n{step.stderr}"
        done.output += step.stdout
    return done


def test_the_files_only_method_is_in_noterag_methods(registered: Registered) -> None:
    listed = registered.run(sys.executable, "-m", "noterag", "methods", TOY)
    assert listed.returncode == 0, listed.stderr
    assert f"{TOY} — Toy follow-up" in listed.stdout and "Follow-up questions at most." in (
        listed.stdout
    )


def test_registration_serves_it_in_langgraph_json(registered: Registered) -> None:
    config = json.loads((registered.checkout / "langgraph.json").read_text())
    shipped = json.loads((REPO / "langgraph.json").read_text())
    assert config["graphs"] == shipped["graphs"] | {TOY: "./graphs/toy_followup.py:make_graph"}
    assert {k: v for k, v in config.items() if k != "graphs"} == {
        k: v for k, v in shipped.items() if k != "graphs"
    }
    # the server's own loader (langgraph-api's, as `langgraph dev` starts) loads every entry of
    # the written file, the toy's included, and the factory it finds builds the toy's graph
    path, variable = config["graphs"][TOY].split(":")
    load = f"""
import asyncio, types
from langgraph_api.graph import GraphSpec, _graph_from_spec, collect_graphs_from_env
asyncio.run(collect_graphs_from_env(register=False))
factory = _graph_from_spec(GraphSpec(id={TOY!r}, path={path!r}, variable={variable!r}))
graph = asyncio.run(factory(types.SimpleNamespace()))
print(sorted(graph.get_graph().nodes))
print(sorted(graph.get_context_jsonschema()["properties"]))
"""
    env = {
        # what `langgraph dev` sets before langgraph-api reads its configuration
        "LANGSERVE_GRAPHS": json.dumps(config["graphs"]),
        "LANGSMITH_LANGGRAPH_API_VARIANT": "local_dev",
        "MIGRATIONS_PATH": "__inmem",
        "DATABASE_URI": ":memory:",
        "REDIS_URI": "fake",
        "NOTERAG_MODEL": "openai:sim@http://127.0.0.1:9/v1",  # built, never called
    }
    loaded = registered.run(sys.executable, "-c", load, env=env)
    assert loaded.returncode == 0, loaded.stderr
    nodes, settings = loaded.stdout.strip().splitlines()[-2:]
    assert "'follow_up'" in nodes and "'stop_check'" in nodes and "'answer'" in nodes
    assert "'max_steps'" in settings


def test_registration_writes_it_into_the_docs(registered: Registered) -> None:
    table = (registered.checkout / "docs" / "methods.md").read_text()
    row = f"| `{TOY}` | asks follow-up questions and reads their passages until it asks none |"
    assert row in table
    shipped = (REPO / "docs" / "methods.md").read_text()
    assert table.replace(row, "").count("| `") == shipped.count("| `")  # nothing else changed
    cli = (registered.checkout / "docs" / "cli.md").read_text()
    assert TOY in cli and TOY not in (REPO / "docs" / "cli.md").read_text()  # --method's list


def test_registration_measures_its_cost_on_its_real_loop(registered: Registered) -> None:
    written = json.loads((registered.tree / "noterag" / "data" / "method_costs.json").read_text())
    shipped = json.loads((REPO / "noterag" / "data" / "method_costs.json").read_text())
    cost = written["costs"][f"{TOY}/paper"]
    # the simulated endpoint recognised its follow-up prompt from the declared template and
    # answered as the template's worked example does (a question): the loop ran to max_steps,
    # where a reply in no format of its own would have stopped it after one step
    assert cost["model"] == "sim" and cost["questions"] == 6
    assert cost["steps"] == 3 and cost["llm_calls"] == 4  # 3 follow-ups, then the answer
    assert re.search(rf"^{TOY}/paper +sim +6 +4\.00 +3\.00 ", registered.output, re.MULTILINE)
    # only what the file lacked was measured: every shipped entry is as it was
    assert {k: written["costs"][k] for k in shipped["costs"]} == shipped["costs"]


def test_the_files_only_method_passes_the_generic_contract_tests(registered: Registered) -> None:
    # the tests every registered method gets (parametrized by method: -k selects the toy's),
    # issue 35's silent traps (test_method_traps.py) included
    contracts = [
        str(REPO / "tests" / name)
        for name in ("test_method_contracts.py", "test_method_traps.py", "test_chat_io.py")
    ]
    result = registered.run(
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *contracts, "-k", TOY,
        timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:]
    passed = re.search(r"(\d+) passed", result.stdout)
    assert passed and int(passed[1]) >= 30, result.stdout[-2000:]  # 39 per method now
    assert "failed" not in result.stdout and "error" not in result.stdout.lower()
