"""The server's trust boundary and the settings every method declares (issues 23 and 26):
bounds on every numeric setting, checked alike in-process and on the server; settings given as
``configurable``; prompt overrides checked at load; the operator's policy for clients (prompts,
sampling, model and index choices, API key, body size, cancellation on disconnect); extra CORS
origins. In-process wherever possible; the tests marked ``server`` start ``langgraph dev``
against a simulated OpenAI-compatible endpoint."""

from __future__ import annotations

import asyncio
import json
import re
import typing
from collections.abc import Iterator
from dataclasses import fields
from typing import Any, Literal

import pytest

from noterag.base.errors import ConfigError
from noterag.core.context import MOST_STEPS, RunContext, allowed_values, check_setting
from noterag.core.policy import ServerPolicy, check_input, check_run_settings
from noterag.registry.methods import METHODS, build_graph, context_schema
from noterag.server.bounds import recursion_cap
from scripted import (
    QUESTION,
    VELMORA_ROWS,
    KeywordRetriever,
    ScriptedModel,
    passages,
    request_body,
    velmora_script,
)

CORPUS = passages(*VELMORA_ROWS)


def _numeric(schema: type[RunContext]) -> list[str]:
    hints = typing.get_type_hints(schema)
    out = []
    for f in fields(schema):
        args = typing.get_args(hints[f.name]) or (hints[f.name],)
        if any(a in (int, float) for a in args):
            out.append(f.name)
    return out


# --------------------------------------------------------------------------- declared bounds

# Settings that a rule between settings ties to another: REPLUG's demonstrations need their file.
COMPANIONS = {("REPLUGContext", "max_demos"): {"demos_file": "demos.jsonl"}}

SCHEMAS = sorted({context_schema(m) for m in METHODS}, key=lambda s: s.__name__)


@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda s: s.__name__)
def test_every_numeric_setting_declares_both_bounds_and_they_hold(schema: type) -> None:
    numeric = _numeric(schema)
    assert "top_k" in numeric
    for name in numeric:
        meta = next(f.metadata for f in fields(schema) if f.name == name)
        assert "ge" in meta and "le" in meta, f"{schema.__name__}.{name} declares no bounds"
        default = next(f.default for f in fields(schema) if f.name == name)
        assert default is None or meta["ge"] <= default <= meta["le"], name
        is_int = "integer" in allowed_values(schema, name)
        above = meta["le"] + 1 if is_int else meta["le"] + 0.5
        below = meta["ge"] - 1 if is_int else meta["ge"] - 0.5
        for bad in (above, below):
            shown = str(bad) if is_int else f"{bad:g}"
            with pytest.raises(ConfigError, match=rf"^{name} must .*, not {re.escape(shown)}$"):
                schema(**{name: bad})
        # the bounds themselves are allowed (with what a rule between settings asks beside them)
        schema(**{name: meta["le"]}, **COMPANIONS.get((schema.__name__, name), {}))
        schema(**{name: meta["ge"]}, **COMPANIONS.get((schema.__name__, name), {}))


@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda s: s.__name__)
def test_a_value_of_the_wrong_type_names_the_setting_and_what_it_takes(schema: type) -> None:
    hints = typing.get_type_hints(schema)
    for f in fields(schema):
        allowed = allowed_values(schema, f.name)
        for bad in ("abc", [1]):
            if isinstance(bad, str) and str in (typing.get_args(hints[f.name]) or (hints[f.name],)):
                continue  # a text setting (REPLUG's demos_file): any string is of its type
            with pytest.raises(ConfigError) as raised:
                schema(**{f.name: bad})
            choices = typing.get_args(hints[f.name])
            if isinstance(bad, str) and typing.get_origin(hints[f.name]) is Literal:
                # a class may say it better (self-rag's task), naming the same choices
                assert all(c in str(raised.value) for c in choices) and "'abc'" in str(
                    raised.value
                ), str(raised.value)
            else:
                assert str(raised.value) == f"{f.name} must be {allowed}, not {bad!r}"


def test_the_allowed_values_read_as_the_declaration_says() -> None:
    ctx = context_schema("deepnote")
    assert allowed_values(ctx, "max_steps") == f"an integer from 0 to {MOST_STEPS}"
    assert allowed_values(ctx, "max_passages") == "an integer from 0 to 1000 or None"
    assert allowed_values(ctx, "top_p") == "a number from 0 to 1 or None"
    assert allowed_values(ctx, "profile") == "one of paper, official, original, flashrag"
    assert allowed_values(context_schema("amber"), "chunk_filter") == "true or false"
    # strict: a string is no number and true is no integer, whatever pydantic's lax mode says
    for bad in ("3", True, 2.5):
        with pytest.raises(ConfigError, match="max_steps must be an integer"):
            check_setting(ctx, "max_steps", bad)
    check_setting(ctx, "temperature", 1)  # an integer is a number (JSON sends 1 for 1.0)


# --------------------------------------------------------------------------- in-process settings


def _deepnote(model: ScriptedModel) -> Any:
    return build_graph("deepnote", model=model, retriever=KeywordRetriever(passages=CORPUS))


def test_configurable_settings_are_honoured_in_process() -> None:
    model = ScriptedModel(script=velmora_script())
    graph = _deepnote(model).with_config(configurable={"max_steps": 1})
    out = graph.invoke({"question": QUESTION})
    assert out["stop_reason"] == "1 step(s) (max_steps = 1)"
    # an explicit context wins over configurable for the keys it sets
    model = ScriptedModel(script=velmora_script())
    graph = _deepnote(model).with_config(configurable={"max_steps": 1})
    out = graph.invoke({"question": QUESTION}, context={"max_steps": 2})
    assert out["stop_reason"] == "2 step(s) (max_steps = 2)"


@pytest.mark.parametrize(
    ("configurable", "message"),
    [
        ({"max_steps": "abc"}, "max_steps must be an integer from 0 to 20, not 'abc'"),
        ({"max_steps": 100_000}, "max_steps must be at most 20, not 100000"),
        ({"max_step": 1},
         "configurable key 'max_step' is no setting of this method; did you mean max_steps?"),
    ],
)  # fmt: skip
def test_a_bad_configurable_setting_is_one_clear_error_before_any_call(
    configurable: dict[str, Any], message: str
) -> None:
    model = ScriptedModel(script=velmora_script())
    with pytest.raises(ConfigError) as raised:
        _deepnote(model).with_config(configurable=configurable).invoke({"question": QUESTION})
    assert str(raised.value).startswith(message)
    assert model.calls == []


def test_configurable_keys_of_langgraph_and_other_runnables_are_left_alone() -> None:
    from langchain_core.runnables import ConfigurableField

    model = ScriptedModel(script=velmora_script())
    # a key the model declares (its configurable alternatives) is the model's; any other key
    # is refused, as on the server (tests/test_chat_turns.py)
    chooser = model.configurable_alternatives(ConfigurableField(id="llm"), default_key="s")
    graph = build_graph("deepnote", model=chooser, retriever=KeywordRetriever(passages=CORPUS))
    graph = graph.with_config(configurable={"thread_id": "t", "llm": "s"})
    assert graph.invoke({"question": QUESTION})["answer"] == "1871"


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({"bogus": 1}, "unknown context field(s) bogus; known: "),
        ({"max_steps": "abc"}, "max_steps must be an integer from 0 to 20, not 'abc'"),
    ],
)
def test_a_bad_context_is_one_clear_error_before_any_call(
    context: dict[str, Any], message: str
) -> None:
    model = ScriptedModel(script=velmora_script())
    with pytest.raises(ConfigError) as raised:
        _deepnote(model).invoke({"question": QUESTION}, context=context)
    assert str(raised.value).startswith(message)
    assert model.calls == []


# --------------------------------------------------------------------------- prompt overrides


MISSPELT = {"answer.multihop": "Notes: {note}\nQuestion: {qeury}\nAnswer:"}


def test_a_misspelt_slot_in_build_graph_prompts_is_refused_at_load() -> None:
    with pytest.raises(ConfigError) as raised:
        build_graph("deepnote", model=ScriptedModel(), prompts=MISSPELT)
    text = str(raised.value)
    assert text.startswith("prompt override answer.multihop: no slot {qeury}; answer.multihop "
                           "fills {")  # fmt: skip
    assert "{question}" in text or "{query}" in text


def test_a_misspelt_slot_in_a_run_context_is_refused_before_any_call() -> None:
    model = ScriptedModel(script=velmora_script())
    with pytest.raises(ConfigError, match=r"no slot \{qeury\}"):
        _deepnote(model).invoke({"question": QUESTION}, context={"prompts": MISSPELT})
    assert model.calls == []


def test_a_misspelt_slot_on_the_command_line_is_refused(tmp_path: Any) -> None:
    from noterag.cli.options import prompt_overrides

    file = tmp_path / "answer.txt"
    file.write_text(MISSPELT["answer.multihop"], encoding="utf-8")
    with pytest.raises(ConfigError, match=r"no slot \{qeury\}"):
        prompt_overrides(METHODS["deepnote"], [f"answer.multihop={file}"])


def test_each_runs_prompt_override_reaches_its_own_call() -> None:
    model = ScriptedModel(script=velmora_script())
    graph = build_graph("vanilla", model=model, retriever=KeywordRetriever(passages=CORPUS))
    slots = sorted(METHODS["vanilla"].prompts["paper"].answer["multihop"].slots)
    body = " ".join(f"{{{slot}}}" for slot in slots)
    for i in range(3):  # nothing of one run's override is kept for the next
        override = {"prompts": {"answer.multihop": f"variant {i}: {body}"}}
        graph.invoke({"question": QUESTION}, context=override)
        assert model.calls[-1][1].startswith(f"variant {i}: ")
    graph.invoke({"question": QUESTION})
    assert not model.calls[-1][1].startswith("variant")


# --------------------------------------------------------------------------- the server's policy

DEEPNOTE = context_schema("deepnote")


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"max_steps": 100_000, "max_failures": 100_000}, "max_steps must be at most 20"),
        ({"max_failures": 100_000}, "max_failures must be at most 20"),
        ({"bogus": 1}, "unknown context field(s) bogus"),
        ({"prompts": {"answer.multihop": "{query}"}},
         ("prompts: set by this server's operator, not by its clients (the operator allows it "
          "with NOTERAG_ALLOW_CLIENT_PROMPTS=1)")),
        ({"max_tokens": 4096, "temperature": 1.5},
         ("temperature, max_tokens: set by this server's operator, not by its clients (the "
          "operator allows it with NOTERAG_ALLOW_CLIENT_SAMPLING=1)")),
        ({"model": "openai:gpt-5"}, "model cannot be chosen on this server"),
    ],
)  # fmt: skip
def test_the_default_policy_refuses_what_a_client_should_not_set(
    values: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        check_run_settings(DEEPNOTE, values, ServerPolicy())
    assert str(raised.value).startswith(message)


def test_what_the_operator_allows_passes() -> None:
    policy = ServerPolicy(
        allow_client_prompts=True,
        allow_client_sampling=True,
        models=("openai:a@http://127.0.0.1:9/v1", "openai:b@http://127.0.0.1:9/v1"),
    )
    settings = check_run_settings(
        DEEPNOTE,
        {"max_steps": 1, "max_tokens": 64, "prompts": {"answer.multihop": "{question}"},
         "model": "openai:b@http://127.0.0.1:9/v1", "thread_id": "t"},
        policy,
    )  # fmt: skip
    assert settings.model == "openai:b@http://127.0.0.1:9/v1" and settings.index is None
    assert settings.context.max_steps == 1 and settings.context.max_tokens == 64
    with pytest.raises(ConfigError, match="model 'openai:c' is not offered here; models: "):
        check_run_settings(DEEPNOTE, {"model": "openai:c"}, policy)
    # Studio's form sends every field, the defaults included: those are no client's choice
    every = {f.name: f.default for f in fields(DEEPNOTE)}
    assert check_run_settings(DEEPNOTE, every, ServerPolicy()).context == DEEPNOTE()


def test_the_policy_is_read_from_the_environment_and_checked() -> None:
    policy = ServerPolicy.from_env(
        {"NOTERAG_API_KEY": "k", "NOTERAG_ALLOW_CLIENT_PROMPTS": "true",
         "NOTERAG_SERVER_MODELS": " openai:a@http://h/v1 , local ",
         "NOTERAG_CORS_ORIGINS": "https://agentchat.vercel.app",
         "NOTERAG_CANCEL_ON_DISCONNECT": "0", "NOTERAG_MAX_BODY_BYTES": "4096"}
    )  # fmt: skip
    assert policy == ServerPolicy(
        api_key="k", allow_client_prompts=True, models=("openai:a@http://h/v1", "local"),
        cors_origins=("https://agentchat.vercel.app",), cancel_on_disconnect=False,
        max_body_bytes=4096, allow_resumable=True,  # with a key, by default
    )  # fmt: skip
    assert ServerPolicy.from_env({}) == ServerPolicy()
    for env, message in [
        ({"NOTERAG_ALLOW_CLIENT_SAMPLING": "maybe"}, "NOTERAG_ALLOW_CLIENT_SAMPLING must be 1"),
        ({"NOTERAG_MAX_BODY_BYTES": "1MB"}, "NOTERAG_MAX_BODY_BYTES must be a whole number"),
        ({"NOTERAG_CORS_ORIGINS": "https://agentchat.vercel.app/"}, "NOTERAG_CORS_ORIGINS: "),
    ]:
        with pytest.raises(ConfigError, match=message):
            ServerPolicy.from_env(env)


def test_a_long_question_or_message_is_refused() -> None:
    check_input({"question": "q" * 8000})
    for value in (
        {"question": "q" * 8001},
        {"messages": [{"role": "user", "content": "q" * 8001}]},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "q" * 8001}]}]},
    ):
        with pytest.raises(ConfigError, match="the question is 8,001 characters long"):
            check_input(value)


# --------------------------------------------------------------------------- the graph factory


class _Execution:
    """What langgraph-api passes a factory for a run: a runtime whose ``execution_runtime``
    holds the run's merged context."""

    def __init__(self, context: Any) -> None:
        self.context = context
        self.execution_runtime = self


class _Read:
    execution_runtime = None


class _Spec:
    """A method declaration's parts the factory reads, recording what it builds."""

    def __init__(self) -> None:
        spec = METHODS["deepnote"]
        self.name, self.context, self.prompts = spec.name, spec.context, spec.prompts
        self.built: list[tuple[Any, Any]] = []

    def build(self, model: Any = None, retriever: Any = None) -> Any:
        self.built.append((model, retriever))
        return object()


def test_the_factory_checks_a_runs_settings_and_builds_per_model_and_index(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from noterag.graphs import assemble
    from noterag.graphs.assemble import server_graph

    # the fake spec builds its own stand-in graph
    monkeypatch.setattr(assemble, "build", lambda spec, model, index: spec.build(model, index))
    monkeypatch.setenv("NOTERAG_SERVER_MODELS", "openai:a@http://h/v1,openai:b@http://h/v1")
    monkeypatch.setenv("NOTERAG_SERVER_INDEXES", "bm25:/srv/wiki")
    spec = _Spec()
    make_graph = server_graph(spec)  # type: ignore[arg-type]
    run = asyncio.run
    default = run(make_graph(_Read()))
    assert run(make_graph(_Execution({"max_steps": 1}))) is default
    chosen = run(
        make_graph(_Execution({"model": "openai:b@http://h/v1", "index": "bm25:/srv/wiki"}))
    )
    assert chosen is not default
    assert (
        run(make_graph(_Execution({"model": "openai:b@http://h/v1", "index": "bm25:/srv/wiki"})))
        is chosen
    )
    assert spec.built == [(None, None), ("openai:b@http://h/v1", "bm25:/srv/wiki")]
    for context, message in [
        ({"max_steps": 100_000}, "max_steps must be at most 20"),
        ({"bogus": 1}, "unknown context field(s) bogus"),
        ({"index": "bm25:/etc"}, "index 'bm25:/etc' is not offered here"),
        ({"max_tokens": 4096}, "max_tokens: set by this server's operator"),
    ]:
        with pytest.raises(ConfigError) as raised:
            run(make_graph(_Execution(context)))
        assert str(raised.value).startswith(message)
    monkeypatch.setenv("NOTERAG_ALLOW_CLIENT_PROMPTS", "1")
    make_graph = server_graph(spec)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"no slot \{qeury\}"):
        run(make_graph(_Execution({"prompts": MISSPELT})))


def test_langgraph_api_passes_the_factory_its_runtime() -> None:
    factory_utils = pytest.importorskip(
        "langgraph_api._factory_utils", reason="langgraph-api (the server extra) is not installed"
    )
    from noterag.graphs.deepnote import make_graph

    hook = factory_utils._classify_factory(make_graph)
    assert hook is not None and hook("CONFIG", "RUNTIME") == {"runtime": "RUNTIME"}


# --------------------------------------------------------------------------- the HTTP guard


class _Inner:
    """The app behind the guard (langgraph-api): records each request's body as it read it."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        body = await request_body(receive)
        self.bodies.append(body)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})


def _request(
    app: Any,
    path: str,
    chunks: Iterator[bytes],
    *,
    length: int | None = None,
    method: str = "POST",
) -> tuple[int, bytes, int]:
    """Drive ``app`` with a body sent in ``chunks``: (status, response body, chunks read)."""
    read = 0
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        nonlocal read
        chunk = next(chunks, None)
        if chunk is None:
            return {"type": "http.request", "body": b"", "more_body": False}
        read += 1
        return {"type": "http.request", "body": chunk, "more_body": True}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    headers = [(b"content-type", b"application/json")]
    if length is not None:
        headers.append((b"content-length", str(length).encode()))
    scope = {"type": "http", "method": method, "path": path, "headers": headers,
             "query_string": b""}  # fmt: skip
    asyncio.run(app(scope, receive, send))
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, body, read


def _guard(**policy: Any) -> tuple[Any, _Inner]:
    from noterag.server.http import RequestGuard

    inner = _Inner()
    return RequestGuard(inner, ServerPolicy(**policy)), inner


def _json(value: Any) -> Iterator[bytes]:
    return iter([json.dumps(value).encode()])


MIB = 1 << 20


def test_a_huge_body_is_refused_before_it_is_read_or_reaches_the_server() -> None:
    guard, inner = _guard()

    def endless() -> Iterator[bytes]:  # 300 MB, 64 KiB at a time, never all in memory
        for _ in range(300 * 16):
            yield b" " * 65536

    # announced: refused at its Content-Length, nothing read
    status, body, read = _request(guard, "/runs/stream", endless(), length=300 * MIB)
    assert (status, read) == (413, 0) and b"NOTERAG_MAX_BODY_BYTES" in body
    # chunked: refused once the limit is passed, the rest never read
    status, body, read = _request(guard, "/threads/t/runs", endless())
    assert status == 413 and read == MIB // 65536 + 1
    # any path: the store, a thread's state
    status, _, _ = _request(guard, "/store/items", endless(), method="PUT")
    assert status == 413
    assert inner.bodies == []


def test_a_long_question_is_refused_before_the_server_stores_the_run() -> None:
    guard, inner = _guard()
    status, body, _ = _request(
        guard, "/runs/wait", _json({"assistant_id": "deepnote", "input": {"question": "q" * 9000}})
    )
    assert status == 422 and inner.bodies == []
    assert json.loads(body)["detail"].startswith("the question is 9,000 characters long")


@pytest.mark.parametrize(
    ("path", "payload", "message"),
    [
        ("/runs/stream", {"assistant_id": "deepnote", "context": {"max_steps": 100000}},
         "max_steps must be at most 20, not 100000"),
        ("/threads/t/runs", {"assistant_id": "amber", "context": {"bogus": 1}},
         "unknown context field(s) bogus"),
        ("/runs/wait", {"assistant_id": "deepnote", "config": {"configurable": {"max_steps": "abc"}}},
         "max_steps must be an integer from 0 to 20, not 'abc'"),
        ("/runs/batch", [{"assistant_id": "vanilla", "context": {"top_k": 10_000}}],
         "top_k must be at most 100, not 10000"),
        ("/assistants", {"graph_id": "deepnote", "context": {"prompts": {"answer.multihop": "x"}}},
         "prompts: set by this server's operator"),
        ("/assistants/a1", {"graph_id": "resp", "context": {"max_steps": 0}},
         "max_steps must be at least 1, not 0"),
    ],
)  # fmt: skip
def test_bad_settings_are_refused_before_the_server_stores_them(
    path: str, payload: Any, message: str
) -> None:
    guard, inner = _guard()
    method = "PATCH" if path.startswith("/assistants/") else "POST"
    status, body, _ = _request(guard, path, _json(payload), method=method)
    assert status == 422 and inner.bodies == []
    assert json.loads(body)["detail"].startswith(message)


def test_a_misspelt_prompt_slot_is_refused_where_the_operator_allows_prompts() -> None:
    guard, inner = _guard(allow_client_prompts=True)
    run = {"assistant_id": "deepnote", "input": {"question": QUESTION},
           "context": {"prompts": MISSPELT}}  # fmt: skip
    status, body, _ = _request(guard, "/runs/stream", _json(run))
    assert status == 422 and inner.bodies == []
    assert json.loads(body)["detail"].startswith("prompt override answer.multihop: no slot {qeury}")
    run["context"] = {"prompts": {"answer.multihop": "Notes: {note}\nAnswer:"}}
    assert _request(guard, "/runs/stream", _json(run))[0] == 200


def test_a_run_the_client_waits_on_is_cancelled_when_it_leaves() -> None:
    guard, inner = _guard()
    run = {"assistant_id": "deepnote", "input": {"question": QUESTION}, "on_disconnect": "continue"}
    for path in ("/runs/stream", "/threads/t/runs/stream", "/runs/wait", "/threads/t/runs/wait"):
        assert _request(guard, path, _json(run))[0] == 200
        assert json.loads(inner.bodies[-1])["on_disconnect"] == "cancel"
    # a background run has no client to leave: its body passes as sent (with the method's
    # recursion limit, noterag.server.bounds)
    _request(guard, "/threads/t/runs", _json(run))
    assert json.loads(inner.bodies[-1]) == run | {
        "config": {"recursion_limit": recursion_cap("deepnote")}
    }
    # the operator may leave it to each client
    guard, inner = _guard(cancel_on_disconnect=False)
    _request(guard, "/runs/stream", _json(run))
    assert json.loads(inner.bodies[-1])["on_disconnect"] == "continue"


def test_the_guard_passes_what_it_does_not_judge() -> None:
    guard, inner = _guard()
    # an assistant by UUID: its graph is unknown here, the factory checks its settings at the run
    run = {"assistant_id": "5f1e0c1e-0000-0000-0000-000000000000", "context": {"bogus": 1}}
    assert _request(guard, "/threads/t/runs", _json(run))[0] == 200
    assert _request(guard, "/threads/search", _json({"metadata": {"a": 1}}))[0] == 200
    assert inner.bodies[-1] == b'{"metadata": {"a": 1}}'


# --------------------------------------------------------------------------- API key and CORS


def test_the_api_key_is_checked_when_the_operator_sets_one(monkeypatch: pytest.MonkeyPatch) -> None:
    from langgraph_sdk import Auth

    from noterag.server.auth import authenticate

    monkeypatch.delenv("NOTERAG_API_KEY", raising=False)
    assert asyncio.run(authenticate({}))["identity"] == "noterag-client"
    monkeypatch.setenv("NOTERAG_API_KEY", "s3cret")
    for headers in ({}, {b"x-api-key": b"wrong"}, {b"authorization": b"Bearer s3cre"},
                    {b"authorization": b"Basic s3cret"}):  # fmt: skip
        with pytest.raises(Auth.exceptions.HTTPException) as raised:
            asyncio.run(authenticate(headers))
        assert raised.value.status_code == 401
    for headers in ({b"x-api-key": b"s3cret"}, {b"authorization": b"Bearer s3cret"}):
        assert asyncio.run(authenticate(headers))["is_authenticated"] is True


def test_langgraph_json_wires_the_auth_and_the_guards() -> None:
    from pathlib import Path

    config = json.loads((Path(__file__).parent.parent / "langgraph.json").read_text())
    assert config["auth"] == {"path": "./noterag/server/auth.py:auth", "disable_studio_auth": True}
    assert config["http"]["app"] == "./noterag/server/http.py:app"
    assert "https://agentchat.vercel.app" not in config["http"]["cors"]["allow_origins"]


AGENT_CHAT = "https://agentchat.vercel.app"


def test_an_extra_origin_admits_agent_chat_ui_and_no_other() -> None:
    from pathlib import Path

    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route
    from starlette.testclient import TestClient

    from noterag.server.http import OriginGuard

    config = json.loads((Path(__file__).parent.parent / "langgraph.json").read_text())
    config = config["http"]["cors"]

    async def search(request: Any) -> Any:
        return JSONResponse([])

    inner = Starlette(routes=[Route("/assistants/search", search, methods=["POST"])])
    preflight = {"Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "content-type,x-api-key"}  # fmt: skip
    closed = TestClient(OriginGuard(inner, config, server_settings=False, extra_origins=()))
    refused = closed.options("/assistants/search", headers={"Origin": AGENT_CHAT, **preflight})
    assert refused.status_code == 403 and "NOTERAG_CORS_ORIGINS" in refused.json()["detail"]

    opened = TestClient(
        OriginGuard(inner, config, server_settings=False, extra_origins=(AGENT_CHAT,))
    )
    allowed = opened.options("/assistants/search", headers={"Origin": AGENT_CHAT, **preflight})
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == AGENT_CHAT
    sent = opened.post("/assistants/search", headers={"Origin": AGENT_CHAT}, json={})
    assert sent.status_code == 200 and sent.headers["access-control-allow-origin"] == AGENT_CHAT
    other = opened.post("/assistants/search", headers={"Origin": "https://evil.example"}, json={})
    assert other.status_code == 403


# --------------------------------------------------------------------------- against langgraph dev


class _Endpoint:
    """A simulated OpenAI-compatible endpoint: each completion takes ``delay`` seconds; every
    request is recorded (when it arrived, the model it named)."""

    def __init__(self, delay: float) -> None:
        import threading
        import time
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.calls: list[tuple[float, str]] = []
        calls, lock = self.calls, threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self.send_error(404)

            def do_POST(self) -> None:
                request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    calls.append((time.monotonic(), request.get("model", "")))
                time.sleep(delay)
                body = json.dumps({
                    "id": "c", "object": "chat.completion", "created": 0, "model": "m",
                    "choices": [{"index": 0, "finish_reason": "stop", "message": {
                        "role": "assistant",
                        "content": '{"status": "True"}\\n1. Velmora Bridge architect'}}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                }).encode()  # fmt: skip
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the caller gave up: a cancelled run

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


KEY = "test-key-7f3a"


@pytest.fixture(scope="module")
def endpoint() -> Iterator[_Endpoint]:
    sim = _Endpoint(delay=1.0)
    yield sim
    sim.close()


@pytest.fixture(scope="module")
def policed(tmp_path_factory: pytest.TempPathFactory, endpoint: _Endpoint) -> Iterator[str]:
    """A `langgraph dev` whose operator set a key and offers two models (both the simulated
    endpoint, told apart by the model name each request carries); nothing else opened."""
    from devserver import serve

    yield from serve(tmp_path_factory, {
        "NOTERAG_MODEL": f"openai:alpha@{endpoint.url}",
        "NOTERAG_SERVER_MODELS": f"openai:alpha@{endpoint.url},openai:beta@{endpoint.url}",
        "NOTERAG_API_KEY": KEY,
        "NOTERAG_ALLOW_CLIENT_SAMPLING": "0",
        "NOTERAG_MAX_RETRIES": "0",
    })  # fmt: skip


def _http(url: str, method: str, path: str, key: str | None = KEY, **kwargs: Any) -> Any:
    import httpx

    headers = {"x-api-key": key} if key else {}
    return httpx.request(method, f"{url}{path}", headers=headers, timeout=60, **kwargs)


@pytest.mark.server
def test_the_server_wants_its_key(policed: str) -> None:
    assert _http(policed, "POST", "/assistants/search", key=None, json={}).status_code == 401
    assert _http(policed, "POST", "/assistants/search", key="wrong", json={}).status_code == 401
    found = _http(policed, "POST", "/assistants/search", json={"graph_id": "vanilla"})
    assert found.status_code == 200 and found.json()[0]["graph_id"] == "vanilla"


@pytest.mark.server
@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({"max_steps": 100000, "max_failures": 100000}, "max_steps must be at most 20"),
        ({"bogus": 1}, "unknown context field(s) bogus"),
        ({"max_steps": "abc"}, "max_steps must be an integer from 0 to 20, not 'abc'"),
        ({"prompts": {"answer.multihop": "{query}"}}, "prompts: set by this server's operator"),
        ({"max_tokens": 4096}, "max_tokens: set by this server's operator"),
    ],
)
def test_the_server_refuses_bad_settings_before_a_run(
    policed: str, endpoint: _Endpoint, context: dict[str, Any], message: str
) -> None:
    before = len(endpoint.calls)
    run = {"assistant_id": "deepnote", "input": {"question": QUESTION}, "context": context}
    refused = _http(policed, "POST", "/runs/wait", json=run)
    assert refused.status_code == 422 and refused.json()["detail"].startswith(message)
    assert len(endpoint.calls) == before


@pytest.mark.server
def test_an_assistant_chooses_among_the_operators_models(policed: str, endpoint: _Endpoint) -> None:
    from langgraph_sdk import get_sync_client

    client = get_sync_client(url=policed, api_key=KEY, timeout=120)
    beta = client.assistants.create("vanilla", context={"model": f"openai:beta@{endpoint.url}"})
    before = len(endpoint.calls)
    out = client.runs.wait(None, beta["assistant_id"], input={"question": QUESTION})
    assert out["answer"] and [m for _, m in endpoint.calls[before:]] == ["beta"]
    before = len(endpoint.calls)
    client.runs.wait(None, "vanilla", input={"question": QUESTION})
    assert [m for _, m in endpoint.calls[before:]] == ["alpha"]
    # a model outside the operator's list: refused when the assistant is made
    with pytest.raises(Exception, match="is not offered here"):
        client.assistants.create("vanilla", context={"model": "openai:gpt-5"})
    # an assistant named by its id: the guard looks up its graph and checks the settings
    # before the run is stored (issue 42, defect 7; before, the run failed inside the graph)
    ok = client.assistants.create("deepnote", context={"max_steps": 1})
    with pytest.raises(Exception, match=r"unknown context field\(s\) bogus"):
        list(client.runs.stream(None, ok["assistant_id"], input={"question": QUESTION},
                                context={"bogus": 1}))  # fmt: skip


def _rss(pid: int) -> int:
    """Resident memory of ``pid`` and its descendants, in bytes (Linux)."""
    from pathlib import Path

    from devserver import _descendants

    total = 0
    for p in [pid, *_descendants(pid)]:
        try:
            fields_ = Path(f"/proc/{p}/statm").read_text().split()
        except OSError:
            continue
        total += int(fields_[1]) * 4096
    return total


@pytest.mark.server
def test_a_huge_input_is_refused_before_the_server_holds_or_stores_it(policed: str) -> None:
    from devserver import PIDS

    pid = PIDS[policed]
    before = _rss(pid)

    def body() -> Iterator[bytes]:
        yield b'{"assistant_id": "vanilla", "input": {"question": "'
        for _ in range(300 * 16):  # 300 MB, never whole in the test's memory either
            yield b"q" * 65536
        yield b'"}}'

    import httpx

    for _ in range(2):
        try:
            refused = _http(policed, "POST", "/runs/wait", content=body())
            assert refused.status_code == 413
        except httpx.TransportError:
            pass  # the server answered 413 and closed while the body was still being sent
    assert _rss(pid) - before < 100 * MIB
    threads = _http(policed, "POST", "/threads/search", json={"limit": 100})
    assert all("qqqq" not in json.dumps(t) for t in threads.json())


@pytest.mark.server
def test_a_run_stops_calling_the_model_when_its_client_disconnects(
    policed: str, endpoint: _Endpoint
) -> None:
    import time

    import httpx

    run = {"assistant_id": "deepnote", "input": {"question": QUESTION},
           "context": {"max_steps": 20, "max_failures": 20}, "stream_mode": ["updates"]}  # fmt: skip
    before = len(endpoint.calls)
    with httpx.stream("POST", f"{policed}/runs/stream", json=run, timeout=60,
                      headers={"x-api-key": KEY}) as response:  # fmt: skip
        assert response.status_code == 200
        deadline = time.monotonic() + 60
        while len(endpoint.calls) < before + 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(endpoint.calls) >= before + 2, "the run made no model call"
    left = time.monotonic()  # the connection is closed here
    time.sleep(6)  # uncancelled, the run would make a call a second (init, queries, reviews...)
    after = [t for t, _ in endpoint.calls[before:] if t > left + 1.5]
    assert after == [], f"{len(after)} model calls after the client left"
