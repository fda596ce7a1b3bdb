"""A simulated OpenAI-compatible chat endpoint for benchmarks.

It answers each prompt stage of every noterag method plausibly (so the graphs take their normal
paths) after a latency of ``base + per_token * output tokens``, and records every request's
stage, start, end and the number of requests in flight, so a benchmark can compare wall time
with the time the model itself needed.

With ``Faults`` it also misbehaves like a real endpoint under load, at seeded random: HTTP 500s,
requests that hang past any client timeout (until the server stops), and 200 OK replies whose
text no reply parser reads. It counts what it did and how many requests were retries (the
openai client numbers its attempts in the ``x-stainless-retry-count`` header).

A prompt's stage is found in two ways. The stages listed in ``STAGES`` are recognised by a phrase
only their prompt holds, and answered by a reply written by hand in the shape their parser reads.
Every other prompt is matched against the templates every registered method declares (its prompt
sets, ``MethodSpec.prompts``): the template whose literal text the prompt holds names the stage,
so a method added later is recognised without an edit here. Its reply continues the prompt as the
template's own example does: a template that ends with a cue (``Follow-up:``) and shows that cue
earlier, in a worked example, is answered with what follows the cue there, so the method's loop
reads a reply in its own format and runs (a request's ``stop`` sequences cut every reply, as an
endpoint's generation stops); a template without such an example is answered as
``answer`` is. ``STAGES`` keeps the built-in methods' recorded costs
(noterag/data/method_costs.json) as they were measured.

Like OpenAI and vLLM, it streams a reply as server-sent chunks when the request says
``"stream": true`` (with a last usage chunk for ``stream_options.include_usage``), and lists each
token's log-probability when it says ``"logprobs": true`` (every token certain: 0.0; a bracketed
reflection token such as ``[Relevant]`` is one token).

A request that offers ``tools`` is an agent's model's (``agent_reply``): it calls the first tool
that takes a ``question``, then answers with the first paragraph of the tool's result.

    python bench/sim_endpoint.py --port 8931 --base-ms 100 --per-token-ms 2
    python bench/sim_endpoint.py --error-rate 0.2 --hang-rate 0.05 --garbage-rate 0.1 --seed 1
"""

from __future__ import annotations

import argparse
import json
import random
import re
import socket
import string
import struct
import threading
import time
from collections import Counter
from dataclasses import dataclass, field, fields
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# (stage, a phrase only that stage's prompt contains), checked in order.
STAGES = [
    ("chunk_filter", "NLI problem"),
    ("sentence_filter", "extracting helpful sentences"),
    ("reviewer", "Provide an analysis of the notes"),
    ("challenger", "Provide detailed suggestions"),
    ("refiner", "Provide the refined notes"),
    ("sufficiency", "contain sufficient information"),
    ("new_question", "### New Question"),
    ("review", "which note is better"),
    ("refine_query", "propose two new questions"),
    ("accumulate", "supplement the notes"),
    ("init_note", "write a note"),
    ("local_summary", 'please reply with "Yes", followed by'),
    ("judge", "are you able to completely and accurately respond"),
    ("plan", "[You Thought]"),
    ("global_summary", "write a good-quality passage"),
]


# Of a template's literal text, only fragments this long identify it (a "\n" or ": " between two
# slots is in every prompt).
MIN_FRAGMENT = 8
# A prompt is a template's when it holds at least this share of the template's literal text
# (the rest: fragments a profile or an override changed).
MIN_SHARE = 0.6


@dataclass(frozen=True)
class Template:
    """One declared prompt template as the endpoint reads it: the stage it names (its field in
    the method's prompt set; "answer" for ``answer.<task>``), its literal fragments, and the
    reply its worked example shows (None: it shows none)."""

    stage: str
    fragments: tuple[str, ...]
    ends_with: str
    example: str | None

    def match(self, prompt: str) -> tuple[float, bool, int, bool] | None:
        """How well ``prompt`` is this template's rendering (None: not at all): the share of its
        literal text found, whether the prompt ends as the template does, the characters found;
        on a tie, an answer prompt (a method that borrows one names it as its own field)."""
        total = sum(len(f) for f in self.fragments)
        allowed = (1 - MIN_SHARE) * total  # characters that may be missing
        missing = 0
        for fragment in self.fragments:  # longest first: most templates fail at the first
            if fragment not in prompt:
                missing += len(fragment)
                if missing > allowed:
                    return None
        if not total:
            return None
        found = total - missing
        ends = bool(self.ends_with) and prompt.rstrip().endswith(self.ends_with)
        return round(found / total, 2), ends, found, self.stage == "answer"


SLOT = "\x00"  # where a slot was, in a template's literal text


def literal_parts(prompt: Any) -> list[str]:
    """A noterag ``Prompt``'s text between its slots, as the rendered prompt holds it."""
    if prompt.style == "format":  # str.format: "{{" is a literal "{"
        return [literal for literal, *_ in string.Formatter().parse(prompt.text)]
    slots = "|".join(re.escape(slot) for slot in sorted(prompt.slots))
    return re.split(r"\{(?:" + slots + r")\}", prompt.text) if slots else [prompt.text]


def example_reply(parts: list[str]) -> str | None:
    """What the template's worked example answers after the cue the template ends with: what
    follows the cue's first use, to the end of that example (a blank line); the request's stop
    sequences cut it as a model's generation would be (``at_stop``). None: the template shows no
    example, or the example's answer is a slot's."""
    tail = parts[-1].rstrip()
    cue = tail.splitlines()[-1].strip() if tail.strip() else ""
    if len(cue) < 2:
        return None
    before = SLOT.join([*parts[:-1], tail[: -len(cue)]])  # the slots marked: no reply holds one
    at = before.find(cue)
    if at < 0:
        return None
    example = before[at + len(cue) :].split("\n\n", 1)[0].strip()
    return example if example and SLOT not in example else None


def at_stop(text: str, stop: str | list[str] | None) -> str:
    """``text`` cut before the first of the request's stop sequences, as an endpoint stops."""
    sequences = [stop] if isinstance(stop, str) else list(stop or [])
    cuts = [text.find(s) for s in sequences if s and s in text]
    return text[: min(cuts)] if cuts else text


def template_of(stage: str, prompt: Any) -> Template:
    parts = literal_parts(prompt)
    kept = dict.fromkeys(f.strip() for f in parts if len(f.strip()) >= MIN_FRAGMENT)
    fragments = tuple(sorted(kept, key=len, reverse=True))
    return Template(stage, fragments, parts[-1].strip(), example_reply(parts))


def declared_prompts(prompt_set: Any) -> list[tuple[str, Any]]:
    """A prompt set's templates with the stage each names: its field's name ("answer" for each
    task's answer prompt), every ``Prompt`` of a field holding one or a dict of them."""
    from noterag.core.prompt import Prompt

    found = []
    for f in fields(prompt_set):
        value = getattr(prompt_set, f.name)
        prompts = value.values() if isinstance(value, dict) else [value]
        found += [(f.name, p) for p in prompts if isinstance(p, Prompt)]
    return found


def declared_templates() -> list[Template]:
    """Every template of every registered method's prompt sets, in the registry's order, each
    text once (a prompt another method borrows, a profile that keeps the paper's): under the
    first stage that declares it, or "answer" if one declares it as an answer prompt. A template
    of no fragment long enough to identify it is left out."""
    from noterag.registry.methods import METHODS

    unique: dict[tuple[tuple[str, ...], str], Template] = {}
    for spec in METHODS.values():
        for prompt_set in spec.prompts.values():
            for stage, prompt in declared_prompts(prompt_set):
                template = template_of(stage, prompt)
                key = template.fragments, template.ends_with
                if not template.fragments:
                    continue
                if key not in unique or (stage == "answer" and unique[key].stage != "answer"):
                    unique[key] = template
    return list(unique.values())


# (the registered specs, their templates): the specs are held, so that no other spec can take
# one's id while the templates are kept
_learned: list[tuple[tuple[Any, ...], list[Template]]] = []
_learned_lock = threading.Lock()


def learned_templates() -> list[Template]:
    """``declared_templates()``, read again when the registry changes (a method registered
    after the endpoint started is recognised too)."""
    from noterag.registry.methods import METHODS

    specs = tuple(METHODS.values())
    with _learned_lock:
        if (
            not _learned
            or len(_learned[0][0]) != len(specs)
            or any(a is not b for a, b in zip(_learned[0][0], specs, strict=True))
        ):
            _learned[:] = [(specs, declared_templates())]
        return _learned[0][1]


def identify(prompt: str) -> tuple[str, str | None]:
    """The prompt's stage, and the reply its template's example shows (None: none shown)."""
    for stage, phrase in STAGES:
        if phrase in prompt:
            return stage, None
    best: tuple[tuple[float, bool, int, bool], Template] | None = None
    for template in learned_templates():
        score = template.match(prompt)
        if score is not None and (best is None or score > best[0]):
            best = score, template
    if best is None:
        return "answer", None
    return best[1].stage, best[1].example


def stage_of(prompt: str) -> str:
    return identify(prompt)[0]


@dataclass
class Record:
    stage: str
    start: float
    end: float
    output_tokens: int
    in_flight: int


GATHER_WAIT_S = 30.0


@dataclass
class SimModel:
    base_s: float = 0.1
    per_token_s: float = 0.002
    seed: int = 0
    # Hold the first requests until this many are in flight at once (then never again), so a
    # test of concurrency sees the peak its client allows even on a loaded machine, where the
    # requests of a slow-starting worker would otherwise come after the others are answered.
    gather: int = 0
    records: list[Record] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _in_flight: int = 0
    _rng: random.Random = field(default_factory=random.Random)
    _gathered: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._rng.seed(self.seed)

    def reply(self, prompt: str) -> tuple[str, str]:
        stage, example = identify(prompt)
        words = re.findall(r"[A-Z][a-z]+", prompt)
        topic = " ".join(self._rng.sample(words, min(3, len(words)))) if words else "topic"
        with self._lock:
            coin = self._rng.random()
        replies = {
            "chunk_filter": '{"NLI result":"useful"}' if coin < 0.7 else '{"NLI result":"useless"}',
            "sentence_filter": f"{topic} is relevant to the question. " * 3,
            "reviewer": f"The notes cover {topic} well but miss some details. " * 4,
            "challenger": f"Add the facts about {topic} from the documents. " * 4,
            "refiner": f"Refined note: {topic} with the supporting facts. " * 6,
            "sufficiency": '{"status": "False"}' if coin < 0.6 else '{"status": "True"}',
            "new_question": f"Let me think.\n### New Question: What is known about {topic}?",
            "review": '{"status": "True"}' if coin < 0.6 else '{"status": "False"}',
            "refine_query": f"1. Who is {topic}?\n2. Where is {topic} located?",
            "accumulate": f"Updated note about {topic} with the new passages. " * 8,
            "init_note": f"Initial note about {topic} from the documents. " * 8,
            "judge": "No" if coin < 0.6 else "Yes",
            "plan": f"What is the relation of {topic} to the question?",
            "local_summary": f"Yes, {topic}.",
            "global_summary": f"{topic} is described in the passages. [DONE]",
            "answer": topic,
        }
        if stage in replies:
            return stage, replies[stage]
        return stage, example if example is not None else topic

    def serve(self, prompt: str) -> tuple[str, int]:
        stage, text = self.reply(prompt)
        tokens = len(text.split())
        with self._lock:
            self._in_flight += 1
            in_flight = self._in_flight
            if in_flight >= self.gather:
                self._gathered.set()
        self._gathered.wait(GATHER_WAIT_S)  # fewer than ``gather`` ever at once: not forever
        start = time.perf_counter()
        time.sleep(self.base_s + self.per_token_s * tokens)
        end = time.perf_counter()
        with self._lock:
            self._in_flight -= 1
            self.records.append(Record(stage, start, end, tokens, in_flight))
        return text, tokens


# No reply parser reads these: no status, NLI label, yes/no, list item, question mark or heading.
_GARBAGE_WORDS = (
    "lorem",
    "ipsum",
    "dolor",
    "sit",
    "amet",
    "consectetur",
    "adipiscing",
    "elit",
    "sed",
    "tempor",
    "magna",
    "aliqua",
)


@dataclass
class Faults:
    """How often a request fails and how, drawn per request from a seeded generator, and the
    counts of what happened (``counts``: requests, ok, error, hang, garbage, retried)."""

    error_rate: float = 0.0  # HTTP 500
    hang_rate: float = 0.0  # no reply for hang_s, or until the server stops
    garbage_rate: float = 0.0  # 200 OK, text that parses as nothing
    hang_s: float = 60.0
    seed: int = 0
    reset_rate: float = 0.0  # the connection is reset (TCP RST) instead of a reply
    counts: Counter[str] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _rng: random.Random = field(default_factory=random.Random)

    def __post_init__(self) -> None:
        self._rng.seed(self.seed)

    def draw(self, retried: bool) -> tuple[str, str]:
        """This request's fate (ok, error, hang or garbage) and, for garbage, its text."""
        with self._lock:
            coin = self._rng.random()
            words = self._rng.choices(_GARBAGE_WORDS, k=self._rng.randint(3, 12))
            if coin < self.error_rate:
                fate = "error"
            elif coin < self.error_rate + self.hang_rate:
                fate = "hang"
            elif coin < self.error_rate + self.hang_rate + self.garbage_rate:
                fate = "garbage"
            elif coin < self.error_rate + self.hang_rate + self.garbage_rate + self.reset_rate:
                fate = "reset"
            else:
                fate = "ok"
            self.counts.update(["requests", fate] + (["retried"] if retried else []))
        broken_json = self._rng.random() < 0.5
        text = ('{"' + words[0] + '": "' + " ".join(words[1:])) if broken_json else " ".join(words)
        return fate, text


# A reply's tokens: a bracketed reflection token whole, else a word with the spaces before it.
_TOKENS = re.compile(r"\s*\[[^\[\]]*\]|\s*[^\s\[]+|\s*\[|\s+")


def _logprobs(tokens: list[str], top: int) -> dict[str, Any]:
    """OpenAI's ``logprobs`` of a choice: each token certain, listed ``top`` times at most once."""

    def entry(token: str) -> dict[str, Any]:
        return {"token": token, "logprob": 0.0, "bytes": list(token.encode())}

    return {"content": [entry(t) | {"top_logprobs": [entry(t)] if top else []} for t in tokens]}


def _sse(request: dict[str, Any], completion: dict[str, Any]) -> bytes:
    """``completion`` as OpenAI streams it: a chunk per token (with its log-probability when
    asked), one with the finish reason, the usage when ``stream_options.include_usage`` asks,
    then ``[DONE]``."""
    choice = completion["choices"][0]
    head = {k: completion[k] for k in ("id", "created", "model")} | {
        "object": "chat.completion.chunk"
    }
    tokens = _TOKENS.findall(choice["message"]["content"])
    content = choice.get("logprobs", {}).get("content")
    chunks = [{"delta": {"role": "assistant", "content": ""}, "finish_reason": None}]
    for i, token in enumerate(tokens):
        delta: dict[str, Any] = {"delta": {"content": token}, "finish_reason": None}
        if content is not None:
            delta["logprobs"] = {"content": [content[i]]}
        chunks.append(delta)
    chunks.append({"delta": {}, "finish_reason": choice["finish_reason"]})
    events = [head | {"choices": [{"index": 0} | chunk]} for chunk in chunks]
    if (request.get("stream_options") or {}).get("include_usage"):
        events.append(head | {"choices": [], "usage": completion["usage"]})
    lines = [f"data: {json.dumps(event)}\n\n" for event in events] + ["data: [DONE]\n\n"]
    return "".join(lines).encode()


def agent_reply(request: dict[str, Any]) -> dict[str, Any]:
    """The reply of a tool-calling agent's model (a request that offers ``tools``): the first
    tool that takes a ``question`` called with the user's last message, then, once a tool's
    result is in the conversation, its first paragraph as the answer (a noterag tool's result
    starts with the answer). So a LangChain agent over noterag's MCP tools runs on this
    endpoint as on a real model (tests/test_server_mcp.py)."""
    messages = request.get("messages") or []
    message: dict[str, Any] = {"role": "assistant", "content": ""}
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":
        content = last.get("content")
        if isinstance(content, list):  # text parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        message["content"] = str(content or "").split("\n\n", 1)[0]
        finish = "stop"
    else:
        tools = [t.get("function", {}) for t in request["tools"]]
        chosen = next(
            (t for t in tools if "question" in (t.get("parameters") or {}).get("properties", {})),
            tools[0],
        )
        user = next((m for m in reversed(messages) if m.get("role") == "user"), {})
        question = user.get("content")
        if isinstance(question, list):
            question = "".join(p.get("text", "") for p in question if isinstance(p, dict))
        arguments = json.dumps({"question": question or ""})
        message["tool_calls"] = [{"id": f"call-{time.time_ns()}", "type": "function",
                                  "function": {"name": chosen.get("name"), "arguments": arguments}}]  # fmt: skip
        finish = "tool_calls"
    return {
        "id": f"sim-{time.time_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": "sim",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


class SimServer(ThreadingHTTPServer):
    daemon_threads = True
    # The listen backlog. socketserver's default is 5: when an eval's 32 clients connect at
    # once, the kernel drops the SYNs beyond it and the clients retry after TCP's 1 s
    # timeout, a stall of the endpoint's own making (uvicorn, vLLM's server, uses 2048).
    request_queue_size = 2048

    def __init__(self, address: tuple[str, int], handler: Any) -> None:
        super().__init__(address, handler)
        self.stopping = threading.Event()

    def shutdown(self) -> None:
        self.stopping.set()  # hanging requests end with the server
        super().shutdown()


def make_server(model: SimModel, port: int = 0, faults: Faults | None = None) -> SimServer:
    class Handler(BaseHTTPRequestHandler):
        # Keep-alive, as real endpoints do: under HTTP/1.0 the client connects anew every call.
        protocol_version = "HTTP/1.1"
        # Headers and body go out in two writes; with Nagle on, the body would wait for the
        # client's delayed ACK (40 ms on Linux) on a kept-alive connection.
        disable_nagle_algorithm = True

        def log_message(self, *args: Any) -> None:  # quiet
            pass

        def _json(self, payload: dict[str, Any], stream_of: dict[str, Any] | None = None) -> None:
            # stream_of: the request, when it asked for the reply as server-sent chunks
            body = json.dumps(payload).encode() if stream_of is None else _sse(stream_of, payload)
            self.send_response(200)
            kind = "application/json" if stream_of is None else "text/event-stream"
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self._json({"object": "list", "data": [{"id": "sim", "object": "model"}]})

        def do_POST(self) -> None:
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            prompt = "\n".join(str(m.get("content", "")) for m in request.get("messages", []))
            fate = "ok"
            if faults is not None:
                retried = self.headers.get("x-stainless-retry-count", "0") != "0"
                fate, garbage = faults.draw(retried)
            if fate == "error":
                self.send_error(500, "simulated failure")
                return
            if fate == "hang":
                self.server.stopping.wait(faults.hang_s)  # type: ignore[attr-defined,union-attr]
                self.close_connection = True
                return
            if fate == "reset":  # closing with a zero linger sends RST, not FIN
                self.connection.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
                self.close_connection = True
                return
            if request.get("tools"):  # an agent's model: no method prompt, not recorded
                self._json(agent_reply(request))
                return
            text, tokens = model.serve(prompt)
            if request.get("stop"):  # the latency was the whole reply's; the usage is the cut one's
                text = at_stop(text, request["stop"])
                tokens = len(text.split())
            if fate == "garbage":
                text, tokens = garbage, len(garbage.split())
            prompt_tokens = len(prompt.split())
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
            # an endpoint without log-probabilities (many servers): a model with logprobs=False
            if request.get("logprobs") and getattr(model, "logprobs", True):
                choice["logprobs"] = _logprobs(
                    _TOKENS.findall(text), int(request.get("top_logprobs") or 0)
                )
            self._json(
                {
                    "id": f"sim-{time.time_ns()}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": "sim",
                    "choices": [choice],
                    "usage": {
                        "prompt_tokens": prompt_tokens,
                        "completion_tokens": tokens,
                        "total_tokens": prompt_tokens + tokens,
                    },
                },
                stream_of=request if request.get("stream") else None,
            )

    server = SimServer(("127.0.0.1", port), Handler)
    learned_templates()  # read the registry now, not during the first request a client times
    return server


def start(model: SimModel, port: int = 0, faults: Faults | None = None) -> tuple[SimServer, str]:
    """Serve in a daemon thread; returns the server (``server.shutdown()`` stops it) and its
    base URL."""
    server = make_server(model, port, faults)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/v1"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8931)
    parser.add_argument("--base-ms", type=float, default=100)
    parser.add_argument("--per-token-ms", type=float, default=2)
    parser.add_argument("--error-rate", type=float, default=0.0, help="share of HTTP 500s")
    parser.add_argument("--hang-rate", type=float, default=0.0, help="share of hung requests")
    parser.add_argument("--hang-s", type=float, default=60.0, help="how long a hang lasts")
    parser.add_argument(
        "--garbage-rate", type=float, default=0.0, help="share of unparseable replies"
    )
    parser.add_argument("--reset-rate", type=float, default=0.0, help="share of reset connections")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    faults = Faults(
        args.error_rate, args.hang_rate, args.garbage_rate, args.hang_s, args.seed, args.reset_rate
    )
    server = make_server(
        SimModel(args.base_ms / 1000, args.per_token_ms / 1000, seed=args.seed), args.port, faults
    )
    print(f"serving on http://127.0.0.1:{args.port}/v1")
    server.serve_forever()
