"""The operator's credentials stay the operator's (issue 33, defects 2, 3 and 13, and the
endpoint findings): each replica of a model gets its own user, password and query, and no
other's; a base URL's query is sent as a query; two spellings of one replica are one; a replica
answering a reply that is none fails over and is named itself; the `ask` spinner shows a spec
redacted; the HTTP libraries' log lines are redacted; and a server client chooses a model or
index by the operator's name, never seeing a spec (the 422, the assistant's stored context,
the server's log). The endpoints are HTTP servers on 127.0.0.1 that record what each request
carried."""

from __future__ import annotations

import base64
import io
import json
import logging
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest

from noterag.base.errors import ConfigError
from noterag.core.policy import ServerPolicy, check_run_settings
from noterag.models import ModelSettings, load_chat_model
from noterag.models.endpoints import COOL_OFF, EndpointPool, replicas_of
from noterag.models.replies import EndpointReplyError
from scripted import QUESTION

SETTINGS = ModelSettings(timeout=20, max_retries=0)

COMPLETION = {
    "id": "c",
    "object": "chat.completion",
    "created": 0,
    "model": "m",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "Saint Piran."},
         "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
}  # fmt: skip


class Recorder:
    """An OpenAI-compatible endpoint that records each request's path, query and
    ``Authorization``; ``reply`` is the body of each completion (the default: a completion)."""

    def __init__(self, reply: bytes | None = None, content_type: str = "application/json"):
        self.requests: list[dict[str, Any]] = []
        self.reply = reply if reply is not None else json.dumps(COMPLETION).encode()
        self.content_type = content_type
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, status: int, body: bytes, kind: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _record(self) -> dict[str, Any]:
                split = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                seen = {
                    "path": split.path,
                    "query": dict(parse_qsl(split.query)),
                    "authorization": self.headers.get("Authorization"),
                    "model": body.get("model"),
                }
                recorder.requests.append(seen)
                return seen

            def do_GET(self) -> None:  # /v1/models
                self._record()
                self._answer(200, json.dumps({"object": "list", "data": []}).encode(),
                             "application/json")  # fmt: skip

            def do_POST(self) -> None:
                seen = self._record()
                reply = recorder.reply
                if reply == json.dumps(COMPLETION).encode() and seen["model"]:
                    reply = json.dumps(COMPLETION | {"model": seen["model"]}).encode()
                self._answer(200, reply, recorder.content_type)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.port = self.server.server_address[1]
        self.host = f"127.0.0.1:{self.port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    @property
    def authorizations(self) -> set[str | None]:
        return {r["authorization"] for r in self.requests}


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.fixture
def endpoints() -> Iterator[list[Recorder]]:
    made: list[Recorder] = []

    def make(*args: Any, **kwargs: Any) -> Recorder:
        made.append(Recorder(*args, **kwargs))
        return made[-1]

    yield make  # type: ignore[misc]
    for recorder in made:
        recorder.close()


# --------------------------------------------------------------------------- replicas (defect 3)


async def test_each_replica_gets_its_own_credentials_and_no_others(endpoints) -> None:
    h1, h2, h3 = endpoints(), endpoints(), endpoints()
    spec = (
        f"openai:m@http://alice:A1ice@{h1.host}/v1,http://bob:B0b@{h2.host}/v1?api_key=QB0b,"
        f"http://{h3.host}/v1"
    )
    llm = load_chat_model(spec, SETTINGS, api_key="sk-client")
    for _ in range(3):  # one at a time: round-robin, so each replica gets one of every three
        assert llm.invoke("hello").content == "Saint Piran."
    for _ in range(3):
        assert (await llm.ainvoke("hello")).content == "Saint Piran."
    assert [len(h.requests) for h in (h1, h2, h3)] == [2, 2, 2]
    assert h1.authorizations == {_basic("alice", "A1ice")}
    assert h2.authorizations == {_basic("bob", "B0b")}
    assert h3.authorizations == {"Bearer sk-client"}  # no userinfo: the client's own key
    assert {json.dumps(r["query"]) for r in h1.requests + h3.requests} == {"{}"}
    assert all(r["query"] == {"api_key": "QB0b"} for r in h2.requests)
    assert all(r["path"] == "/v1/chat/completions" for h in (h1, h2, h3) for r in h.requests)


def test_one_replica_spelt_twice_is_refused_without_its_credentials() -> None:
    for urls in (
        ["http://h/v1", "http://h/v1/"],
        ["http://H:80/v1", "http://h/v1"],
        ["http://u:Secr3t@h/v1", "http://v:0ther@h/v1/"],
    ):
        with pytest.raises(ConfigError, match="a base URL is named twice") as refused:
            EndpointPool.from_urls(urls)
        assert "Secr3t" not in str(refused.value) and "0ther" not in str(refused.value)
    assert (
        len(EndpointPool.from_urls(["http://h/v1", "http://h/v2", "https://h/v1"]).endpoints) == 3
    )
    pool = EndpointPool.from_urls(["http://u:Secr3t@h/v1?api_key=K3y", "http://h2/v1"])
    assert "Secr3t" not in json.dumps(pool.stats()) and "K3y" not in json.dumps(pool.stats())


def test_a_base_url_with_a_query_sends_it_as_a_query(endpoints) -> None:
    h = endpoints()
    llm = load_chat_model(f"openai:m@http://{h.host}/v1?api_key=QK3y", SETTINGS)
    assert llm.invoke("hello").content == "Saint Piran."
    assert h.requests == [
        {"path": "/v1/chat/completions", "query": {"api_key": "QK3y"},
         "authorization": "Bearer EMPTY", "model": "m"}
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("reply", "kind", "said"),
    [
        (b"<html><title>Sign in</title></html>", "text/html", "an HTML page"),
        (b'{"error": {"message": "overloaded on this replica"}}', "application/json",
         "an error instead of a completion: overloaded on this replica"),
        (b"\x00garbage", "application/json", "invalid JSON"),
    ],
)  # fmt: skip
async def test_a_replica_answering_no_completion_fails_over(
    endpoints, monkeypatch: pytest.MonkeyPatch, reply: bytes, kind: str, said: str
) -> None:
    monkeypatch.setitem(COOL_OFF, "initial_s", 120.0)  # once failed, it stays out here
    bad, good = endpoints(reply, kind), endpoints()
    llm = load_chat_model(f"openai:m@http://{bad.host}/v1,http://{good.host}/v1", SETTINGS)
    for _ in range(3):
        assert llm.invoke("hello").content == "Saint Piran."
    assert (await llm.ainvoke("hello")).content == "Saint Piran."
    assert len(bad.requests) == 1 and len(good.requests) == 4  # tried once, then left out
    pool = replicas_of(llm)
    assert pool is not None and [s["failed"] for s in pool.stats()] == [1, 0]
    assert [s["outstanding"] for s in pool.stats()] == [0, 0]
    # when every replica answers so, the error names the one that answered last (a new pool
    # tries its first replica first, then the second), not the client's base URL (the first)
    other = endpoints(reply, kind)
    llm = load_chat_model(f"openai:m@http://{other.host}/v1,http://{bad.host}/v1", SETTINGS)
    with pytest.raises(EndpointReplyError) as failed:
        llm.invoke("hello")
    assert len(other.requests) == 1 and len(bad.requests) == 2
    assert f"the model endpoint http://{bad.host}/v1 answered {said}" in str(failed.value)
    assert other.host not in str(failed.value)


# --------------------------------------------------------------------------- the spinner (13)


def test_the_ask_spinner_shows_the_spec_redacted(monkeypatch: pytest.MonkeyPatch) -> None:
    from rich.console import Console

    import noterag.models
    from noterag.cli.ask import load_model

    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=200)

    def loaded(spec: str, settings: Any = None) -> object:
        # wait (with a deadline) until the spinner has drawn its line
        deadline = time.monotonic() + 60
        while "connecting to" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.05)
        return object()

    monkeypatch.setattr(noterag.models, "load_chat_model", loaded)
    load_model("openai:m@http://u:Sp1nPW@127.0.0.1:9/v1?api_key=Sp1nKey", console, check=False)
    shown = out.getvalue()
    assert "connecting to openai:m@http://***@127.0.0.1:9/v1?api_key=***" in shown
    assert "Sp1nPW" not in shown and "Sp1nKey" not in shown


# --------------------------------------------------------------------------- log lines


def test_the_http_libraries_log_lines_are_redacted(endpoints, caplog) -> None:
    h1, h2 = endpoints(), endpoints()
    caplog.set_level(logging.DEBUG)
    load_chat_model(f"openai:m@http://u:L0gPW@{h1.host}/v1?api_key=L0gKey", SETTINGS).invoke("x")
    load_chat_model(
        f"openai:m@http://u:L0gPW@{h1.host}/v1?api_key=L0gKey,http://v:L0gPW2@{h2.host}/v1",
        SETTINGS,
    ).invoke("x")
    text = caplog.text
    single = f"HTTP Request: POST http://***@{h1.host}/v1/chat/completions?api_key=*** "
    assert single in text
    assert f"HTTP Request: POST http://{h1.host}/v1/chat/completions " in text  # the replicas'
    for secret in ("L0gPW", "L0gKey"):
        assert secret not in text


# --------------------------------------------------------------------------- the server (2)


def test_clients_choose_by_the_operators_names() -> None:
    from noterag.registry.methods import METHODS

    deepnote = METHODS["deepnote"].context
    policy = ServerPolicy.from_env({
        "NOTERAG_SERVER_MODELS":
            "fast=openai:a@http://u:PW1@h1/v1,http://v:PW2@h2/v1?api_key=K1, strong=local",
        "NOTERAG_SERVER_INDEXES": "wiki=bm25:/srv/wiki,web=es:http://e:PW3@es:9200/web",
    })  # fmt: skip
    chosen = check_run_settings(deepnote, {"model": "fast", "index": "web"}, policy)
    assert chosen.model == "openai:a@http://u:PW1@h1/v1,http://v:PW2@h2/v1?api_key=K1"
    assert chosen.index == "es:http://e:PW3@es:9200/web"
    for values, message in [
        ({"model": "openai:a@http://u:PW1@h1/v1"},
         "model 'openai:a@http://***@h1/v1' is not offered here; models: fast, strong"),
        ({"index": "es:http://e:PW3@es:9200/web"},
         "index 'es:http://***@es:9200/web' is not offered here; indexes: wiki, web"),
        ({"model": ["fast"]}, "model ['fast'] is not offered here; models: fast, strong"),
    ]:  # fmt: skip
        with pytest.raises(ConfigError) as refused:
            check_run_settings(deepnote, values, policy)
        assert str(refused.value) == message
    assert "PW" not in repr(policy) and "K1" not in repr(policy)
    # the older form, bare specs: each is named by itself with its credentials redacted
    bare = ServerPolicy.from_env({"NOTERAG_SERVER_MODELS": "openai:a@http://u:PW1@h1/v1,local"})
    with pytest.raises(ConfigError, match=r"models: openai:a@http://\*\*\*@h1/v1, local$"):
        check_run_settings(deepnote, {"model": "openai:gpt-5"}, bare)
    chosen = check_run_settings(deepnote, {"model": "openai:a@http://***@h1/v1"}, bare)
    assert chosen.model == "openai:a@http://u:PW1@h1/v1"
    for env, message in [
        ({"NOTERAG_SERVER_MODELS": "local,fast=openai:a"}, "name every entry"),
        ({"NOTERAG_SERVER_MODELS": "a=local,a=openai:b"}, "the name 'a' is given twice"),
        ({"NOTERAG_SERVER_MODELS": "openai:a@http://u:X@h/v1,openai:a@http://u:Y@h/v1"},
         r"the name 'openai:a@http://\*\*\*@h/v1' is given twice"),
    ]:  # fmt: skip
        with pytest.raises(ConfigError, match=message):
            ServerPolicy.from_env(env)


SECRETS = ("Op3rPW", "Op3rKey", "Idx3PW")
SERVER_KEY = "cred-test-key"


@pytest.fixture(scope="module")
def operator_endpoint() -> Iterator[Recorder]:
    recorder = Recorder()
    yield recorder
    recorder.close()


@pytest.fixture(scope="module")
def operated(tmp_path_factory: pytest.TempPathFactory, operator_endpoint: Recorder):
    """A `langgraph dev` whose operator's model URLs carry credentials (userinfo and
    ``?api_key=``), offering two models and two indexes by name; yields its URL and log."""
    from devserver import LOGS, serve
    from noterag.retrievers.sample import sample_index

    index = sample_index(tmp_path_factory.mktemp("cred-index"))
    url = f"http://op:{SECRETS[0]}@{operator_endpoint.host}/v1?api_key={SECRETS[1]}"
    server = serve(tmp_path_factory, {
        "NOTERAG_MODEL": f"openai:alpha@{url}",
        "NOTERAG_SERVER_MODELS": f"fast=openai:alpha@{url},strong=openai:beta@{url}",
        "NOTERAG_INDEX": f"bm25:{index}",
        "NOTERAG_SERVER_INDEXES":
            f"sample=bm25:{index},remote=es:http://ix:{SECRETS[2]}@127.0.0.1:9/wiki",
        "NOTERAG_API_KEY": SERVER_KEY,
        "NOTERAG_MAX_RETRIES": "0",
    })  # fmt: skip
    base = next(server)
    yield base, LOGS[base]
    server.close()


def _secrets_in(text: str) -> list[str]:
    return [s for s in SECRETS if s in text]


@pytest.mark.server
def test_the_server_never_shows_the_operators_credentials(
    operated: tuple[str, Path], operator_endpoint: Recorder
) -> None:
    import httpx
    from langgraph_sdk import get_sync_client

    base, log = operated
    headers = {"x-api-key": SERVER_KEY}
    # a model or index outside the offer: the 422 lists the names only
    for context, names in [
        ({"model": "openai:gpt-5"}, "models: fast, strong"),
        ({"index": "bm25:/etc"}, "indexes: sample, remote"),
    ]:
        refused = httpx.post(f"{base}/assistants", headers=headers, timeout=60,
                             json={"graph_id": "vanilla", "context": context})  # fmt: skip
        assert refused.status_code == 422 and refused.json()["detail"].endswith(names)
        assert not _secrets_in(refused.text)
    # a client chooses by name; what it stored (the assistant's context) is the name
    client = get_sync_client(url=base, api_key=SERVER_KEY, timeout=120)
    strong = client.assistants.create("vanilla", context={"model": "strong", "index": "sample"})
    thread = client.threads.create()
    before = len(operator_endpoint.requests)
    out = client.runs.wait(thread["thread_id"], strong["assistant_id"],
                           input={"question": QUESTION})  # fmt: skip
    assert out["answer"]
    sent = [r for r in operator_endpoint.requests[before:] if r["path"].endswith("/completions")]
    assert [r["model"] for r in sent] == ["beta"]  # the name stood for the operator's spec
    assert sent[0]["authorization"] == _basic("op", SECRETS[0])
    assert sent[0]["query"] == {"api_key": SECRETS[1]}
    client.runs.wait(None, "vanilla", input={"question": QUESTION})  # the default model
    # everything a client can read of the server
    seen = [
        client.assistants.search(limit=100),
        client.assistants.get(strong["assistant_id"]),
        client.assistants.get_schemas(strong["assistant_id"]),
        client.threads.search(limit=100),
        client.threads.get_state(thread["thread_id"]),
        client.threads.get_history(thread["thread_id"]),
        client.runs.list(thread["thread_id"]),
    ]
    readable = json.dumps(seen, default=str)
    assert '"model": "strong"' in readable
    assert not _secrets_in(readable)
    # the server's log has the HTTP libraries' request lines, redacted
    deadline = time.monotonic() + 60
    while "HTTP Request: POST" not in log.read_text(errors="replace"):
        assert time.monotonic() < deadline, "the server logged no model request"
        time.sleep(0.2)
    text = log.read_text(errors="replace")
    assert operator_endpoint.host in text and "***" in text
    assert not _secrets_in(text)


def test_a_url_loggers_children_are_redacted_whichever_module_logs(caplog) -> None:
    # the openai SDK logs its requests from a module of its own (openai._base_client today):
    # the redaction is by the logger's place under "openai", not by that module's name
    from noterag.base.redact import redact_logs

    redact_logs()
    caplog.set_level(logging.DEBUG)
    for name in ("openai", "openai.some_module", "httpx"):
        logging.getLogger(name).debug("Request: http://u:Ch1ldPW@h/v1?api_key=Ch1ldKey")
    logging.getLogger("openai_lookalike").debug("kept as is: http://u:Ot4erPW@h/v1")
    assert caplog.text.count("http://***@h/v1?api_key=***") == 3
    assert "Ch1ld" not in caplog.text and "Ot4erPW" in caplog.text
