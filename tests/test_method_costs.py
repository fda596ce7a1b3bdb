"""The measured cost table (noterag/data/method_costs.json, bench/method_costs.py) stays current
with the registry, and the simulated endpoint it measures against (bench/sim_endpoint.py)
recognises a method's stages from the prompts the method declares.

The end to end case, a method added as files and registered with `make register`, is
tests/test_toy_method.py's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

import noterag
from noterag.core.prompt import AnswerPrompts, Prompt
from noterag.registry.methods import register

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import method_costs
import sim_endpoint

FIX = "run `make register` (bench/method_costs.py --missing) and commit the file"


def shipped() -> dict[str, Any]:
    return json.loads(method_costs.OUT.read_text())


def test_every_registered_method_and_profile_has_a_current_entry() -> None:
    stale = [f"{m}/{p}" for m, p in method_costs.stale_runs(shipped())]
    assert stale == [], f"no current cost for {', '.join(stale)}: {FIX}"


def test_no_entry_for_a_method_that_is_not_registered() -> None:
    data = shipped()
    registered = {f"{m}/{p}" for m, p in method_costs.registered_runs()}
    extra = sorted((set(data["costs"]) | set(data["not_measured"])) - registered)
    assert extra == [], f"entries for no registered method: {', '.join(extra)}: {FIX}"


def test_every_entry_measured_at_max_steps_says_so() -> None:
    costs = shipped()["costs"]
    for key, entry in costs.items():
        cap = method_costs.max_steps(*key.split("/"))
        at_cap = cap is not None and entry["steps"] is not None and entry["steps"] >= cap
        assert entry.get("at_cap", False) == at_cap, f"{key}: {FIX}"
    assert costs["iter-retgen/paper"]["at_cap"]  # its loop always runs T iterations


# --- bench/method_costs.py: what each mode writes ----------------------------------------------------


@pytest.fixture
def costs_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The shipped file copied, with an entry of a method since removed; the script writes there."""
    data = shipped()
    data["costs"]["gone/paper"] = dict(data["costs"]["vanilla/paper"])
    path = tmp_path / "method_costs.json"
    path.write_text(json.dumps(data))
    monkeypatch.setattr(method_costs, "OUT", path)
    monkeypatch.setattr(
        method_costs, "write_results", lambda name, data: tmp_path / f"{name}.results.json"
    )
    return path


def run_script(monkeypatch: pytest.MonkeyPatch, *args: str) -> None:
    monkeypatch.setattr(sys, "argv", ["method_costs.py", *args])
    method_costs.main()


def test_methods_are_measured_into_the_shipped_file_and_the_unregistered_dropped(
    costs_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    before = json.loads(costs_file.read_text())
    before["costs"]["vanilla/paper"]["llm_calls"] = 99.0  # a figure only a new measure replaces
    costs_file.write_text(json.dumps(before))
    run_script(monkeypatch, "--methods", "vanilla")
    out = capsys.readouterr().out
    after = json.loads(costs_file.read_text())
    assert after["costs"]["vanilla/paper"]["llm_calls"] == 1.0  # measured again
    assert after["costs"]["vanilla/official"]["prompts"] == method_costs.fingerprint(
        "vanilla", "official"
    )
    # every other method's entry kept as it was; the removed method's dropped, with a line
    assert {k: v for k, v in after["costs"].items() if not k.startswith("vanilla/")} == {
        k: v for k, v in before["costs"].items() if not k.startswith(("vanilla/", "gone/"))
    }
    assert "dropped gone/paper: no longer a registered method and profile" in out


def test_missing_measures_only_what_the_file_lacks_or_measured_with_other_prompts(
    costs_file: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = json.loads(costs_file.read_text())
    del data["costs"]["sure/paper"]  # missing
    data["costs"]["rat/paper"]["prompts"] = "another prompt"  # stale
    costs_file.write_text(json.dumps(data))
    assert method_costs.stale_runs(data) == [("rat", "paper"), ("sure", "paper")]
    run_script(monkeypatch, "--missing")
    out = capsys.readouterr().out
    measured = [line.split()[0] for line in out.splitlines() if line.startswith(("rat/", "sure/"))]
    assert measured == ["rat/paper", "sure/paper"]  # nothing else run
    after = json.loads(costs_file.read_text())
    assert after["costs"]["sure/paper"]["prompts"] == method_costs.fingerprint("sure", "paper")
    assert "gone/paper" not in after["costs"]
    # then nothing is left to measure, and the file is not written again
    run_script(monkeypatch, "--missing")
    assert "every registered method and profile is measured" in capsys.readouterr().out
    assert json.loads(costs_file.read_text()) == after


def test_an_unknown_method_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SystemExit, match=r"^error: unknown method nope; choose from adaptive-note"):
        run_script(monkeypatch, "--methods", "vanilla,nope")


# --- bench/sim_endpoint.py: stages learned from the declared prompts ------------------------------


@pytest.fixture
def asker() -> Any:
    """A method registered in this process whose prompt shows a worked example."""
    from dataclasses import dataclass, replace

    @dataclass(frozen=True, kw_only=True)
    class AskerPrompts(AnswerPrompts):
        follow_up: Prompt
        plain: Prompt
        self_ask: Prompt

    prompts = AskerPrompts(
        follow_up=Prompt(
            "follow_up",
            "Ask a follow-up question, or say DONE.\nQuestion: Who was older?\n"
            "Follow-up: When was Ada born?\n\nQuestion: {question}\nFollow-up:",
            "ours",
        ),
        plain=Prompt("plain", "Summarise the passages for the question.\n{refs}\nSummary:", "o"),
        self_ask=Prompt(
            "self_ask",
            "Question: Who lived longer, Ada or Bob?\nAre follow up questions needed here: Yes.\n"
            "Follow up: How old was Ada?\nIntermediate answer: 36.\nSo the answer: Ada.\n\n"
            "Question: {question}\nAre follow up questions needed here:",
            "o",
        ),
        answer={},
    )
    spec = register(replace(noterag.METHODS["vanilla"], name="asker", prompts={"paper": prompts}))
    yield prompts
    noterag.METHODS.unregister(spec.name)


def test_a_registered_methods_prompt_is_its_stage_answered_as_its_example(asker: Any) -> None:
    prompt = asker.follow_up.format(question="Who designed the Velmora Bridge?")
    assert sim_endpoint.identify(prompt) == ("follow_up", "When was Ada born?")
    stage, reply = sim_endpoint.SimModel(seed=0).reply(prompt)
    assert (stage, reply) == ("follow_up", "When was Ada born?")
    # a template without a worked example: its stage, and the reply `answer` gets (three of the
    # prompt's capitalised words)
    plain = asker.plain.format(refs="Velmora Bridge")
    stage, reply = sim_endpoint.SimModel(seed=0).reply(plain)
    assert stage == "plain" and len(reply.split()) == 3
    assert set(reply.split()) <= {"Summarise", "Velmora", "Bridge", "Summary"}


def test_an_example_is_answered_whole_and_cut_at_the_requests_stop(asker: Any) -> None:
    """A Self-Ask-like template: the example's answer runs over several lines; the endpoint
    stops where the request's stop sequence says, as a model's generation would."""
    import urllib.request

    prompt = asker.self_ask.format(question="Who designed the Velmora Bridge?")
    whole = "Yes.\nFollow up: How old was Ada?\nIntermediate answer: 36.\nSo the answer: Ada."
    assert sim_endpoint.identify(prompt) == ("self_ask", whole)
    server, url = sim_endpoint.start(sim_endpoint.SimModel(0.0, 0.0, seed=0))
    try:
        body = {"messages": [{"role": "user", "content": prompt}], "stop": ["\nIntermediate"]}
        request = urllib.request.Request(
            f"{url}/chat/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            reply = json.loads(response.read())
    finally:
        server.shutdown()
    assert reply["choices"][0]["message"]["content"] == "Yes.\nFollow up: How old was Ada?"
    assert reply["usage"]["completion_tokens"] == 7


def test_learned_only_after_registration() -> None:
    prompt = "Ask a follow-up question, or say DONE.\nQuestion: x\nFollow-up:"
    assert sim_endpoint.identify(prompt) == ("answer", None)


def test_the_hand_written_stages_come_first() -> None:
    from noterag.prompts import deepnote

    refine_query = deepnote.PAPER.refine_query
    prompt = refine_query.format(**dict.fromkeys(refine_query.slots, "x"))
    assert sim_endpoint.identify(prompt) == ("refine_query", None)


def test_an_example_line_holding_a_slot_is_no_reply() -> None:
    template = sim_endpoint.template_of(
        "s", Prompt("s", "Example:\nFollow-up: {example}\n\nQuestion: {question}\nFollow-up:", "o")
    )
    assert template.example is None and template.stage == "s"
