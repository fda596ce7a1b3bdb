"""A simulated OpenAI-compatible chat endpoint for benchmarks.

It answers each prompt stage of every noterag method plausibly (so the graphs take their normal
paths) after a latency of ``base + per_token * output tokens``, and records every request's
stage, start, end and the number of requests in flight, so a benchmark can compare wall time
with the time the model itself needed.

    python bench/sim_endpoint.py --port 8931 --base-ms 100 --per-token-ms 2
"""

from __future__ import annotations

import argparse
import json
import random
import re
import threading
import time
from dataclasses import dataclass, field
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


def stage_of(prompt: str) -> str:
    for stage, phrase in STAGES:
        if phrase in prompt:
            return stage
    return "answer"


@dataclass
class Record:
    stage: str
    start: float
    end: float
    output_tokens: int
    in_flight: int


@dataclass
class SimModel:
    base_s: float = 0.1
    per_token_s: float = 0.002
    seed: int = 0
    records: list[Record] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _in_flight: int = 0
    _rng: random.Random = field(default_factory=random.Random)

    def __post_init__(self) -> None:
        self._rng.seed(self.seed)

    def reply(self, prompt: str) -> tuple[str, str]:
        stage = stage_of(prompt)
        words = re.findall(r"[A-Z][a-z]+", prompt)
        topic = " ".join(self._rng.sample(words, min(3, len(words)))) if words else "topic"
        with self._lock:
            coin = self._rng.random()
        text = {
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
        }[stage]
        return stage, text

    def serve(self, prompt: str) -> tuple[str, int]:
        stage, text = self.reply(prompt)
        tokens = len(text.split())
        with self._lock:
            self._in_flight += 1
            in_flight = self._in_flight
        start = time.perf_counter()
        time.sleep(self.base_s + self.per_token_s * tokens)
        end = time.perf_counter()
        with self._lock:
            self._in_flight -= 1
            self.records.append(Record(stage, start, end, tokens, in_flight))
        return text, tokens


def make_server(model: SimModel, port: int = 0) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # quiet
            pass

        def _json(self, payload: dict[str, Any]) -> None:
            body = json.dumps(payload).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self._json({"object": "list", "data": [{"id": "sim", "object": "model"}]})

        def do_POST(self) -> None:
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            prompt = "\n".join(str(m.get("content", "")) for m in request.get("messages", []))
            text, tokens = model.serve(prompt)
            prompt_tokens = len(prompt.split())
            self._json(
                {
                    "id": f"sim-{time.time_ns()}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": "sim",
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": text},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {
                        "prompt_tokens": prompt_tokens,
                        "completion_tokens": tokens,
                        "total_tokens": prompt_tokens + tokens,
                    },
                }
            )

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    return server


def start(model: SimModel, port: int = 0) -> tuple[ThreadingHTTPServer, str]:
    server = make_server(model, port)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/v1"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8931)
    parser.add_argument("--base-ms", type=float, default=100)
    parser.add_argument("--per-token-ms", type=float, default=2)
    args = parser.parse_args()
    server = make_server(SimModel(args.base_ms / 1000, args.per_token_ms / 1000), args.port)
    print(f"serving on http://127.0.0.1:{args.port}/v1")
    server.serve_forever()
