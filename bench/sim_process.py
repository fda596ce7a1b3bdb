"""The simulated endpoint (sim_endpoint.py) in its own process, as a real endpoint would be.

In the benchmark's own process, the endpoint's HTTP handling would take the GIL from the client
and count as client overhead. ``SimProcess`` starts this file as a child; ``records()`` fetches
(and clears) the requests the endpoint served since the last call. perf_counter is
CLOCK_MONOTONIC on Linux, one clock for all processes, so the records' times compare with the
client's.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Self

sys.path.insert(0, str(Path(__file__).parent))
from sim_endpoint import SimModel, start


def latency_arguments(parser: argparse.ArgumentParser) -> None:
    """The simulated endpoint's latency options, as every benchmark that starts one takes them:
    ``--base-ms`` a request plus ``--per-token-ms`` an output token."""
    parser.add_argument("--base-ms", type=float, default=100)
    parser.add_argument("--per-token-ms", type=float, default=2)


def latency_text(args: argparse.Namespace) -> str:
    """``latency_arguments``' values as the benchmarks' headings print them."""
    return f"{args.base_ms:g} ms + {args.per_token_ms:g} ms/token"


class SimProcess:
    """``with SimProcess(base_ms=100, per_token_ms=2) as sim: sim.url; sim.records()``"""

    def __init__(self, base_ms: float = 100, per_token_ms: float = 2) -> None:
        self.args = ["--base-ms", str(base_ms), "--per-token-ms", str(per_token_ms)]

    def __enter__(self) -> Self:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, *self.args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.url = self._line()
        return self

    def _line(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the simulated endpoint did not start")
        return line.strip()

    def records(self) -> list[Any]:
        """The requests served since the last call: objects with stage, start, end,
        output_tokens, in_flight (as sim_endpoint.Record)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("records\n")
        self.proc.stdin.flush()
        return [SimpleNamespace(**r) for r in json.loads(self._line())]

    def __exit__(self, *exc: object) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()  # the child ends at EOF
        self.proc.wait(timeout=10)


def serve(base_ms: float, per_token_ms: float) -> None:
    model = SimModel(base_ms / 1000, per_token_ms / 1000)
    server, url = start(model)
    print(url, flush=True)
    for _ in sys.stdin:
        with model._lock:
            records, model.records[:] = list(model.records), []
        print(json.dumps([vars(r) for r in records]), flush=True)
    server.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    latency_arguments(parser)
    args = parser.parse_args()
    serve(args.base_ms, args.per_token_ms)
