"""LineWriter.append_async: the eval's results rows written by a group commit in a worker
thread (noterag.eval.loop), never on the event loop's thread."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from noterag.eval.loop import LineWriter


def slow_fsyncs(monkeypatch: pytest.MonkeyPatch, seconds: float) -> list[str]:
    """os.fsync taking ``seconds`` (a slow disk); returns the names of the threads it ran on."""
    real, threads = os.fsync, []

    def fsync(fd: int) -> None:
        threads.append(threading.current_thread().name)
        time.sleep(seconds)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return threads


def test_rows_kept_during_a_write_go_together_in_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "results.jsonl"
    path.touch()  # (a new file's directory is fsynced too)
    threads = slow_fsyncs(monkeypatch, 0.05)

    async def main() -> None:
        with LineWriter(path) as writer:
            first = asyncio.create_task(writer.append_async({"id": 0}))
            await asyncio.sleep(0.02)  # its write is under way
            rest = [writer.append_async({"id": i, "x": "y" * 100}) for i in range(1, 40)]
            await asyncio.gather(first, *rest)

    asyncio.run(main())
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert sorted(r["id"] for r in rows) == list(range(40))
    # the first row alone, then the 39 kept while it was written: two writes, not 40
    assert len(threads) == 2
    assert threading.main_thread().name not in threads


def test_the_event_loop_runs_while_a_row_is_fsynced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "results.jsonl").touch()
    slow_fsyncs(monkeypatch, 0.3)
    ticks: list[float] = []

    async def ticking() -> None:
        for _ in range(10):
            ticks.append(time.perf_counter())
            await asyncio.sleep(0.01)

    async def main() -> None:
        with LineWriter(tmp_path / "results.jsonl") as writer:
            await asyncio.gather(writer.append_async({"id": 1}), ticking())

    started = time.perf_counter()
    asyncio.run(main())
    # every tick came while the 0.3 s fsync was under way, not after it
    assert len(ticks) == 10 and ticks[-1] - started < 0.25


def test_a_failed_write_raises_in_every_row_of_its_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(self: Any, rows: list[dict[str, Any]]) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(LineWriter, "extend", full)

    async def main() -> list[Any]:
        with LineWriter(tmp_path / "results.jsonl") as writer:
            return await asyncio.gather(
                *(writer.append_async({"id": i}) for i in range(3)), return_exceptions=True
            )

    errors = asyncio.run(main())
    assert [type(e) for e in errors] == [OSError] * 3
    assert all("No space left" in str(e) for e in errors)


def test_a_write_after_close_is_refused_not_sent_to_a_reused_descriptor(tmp_path: Path) -> None:
    writer = LineWriter(tmp_path / "results.jsonl")
    writer.close()
    with pytest.raises(OSError, match="closed before the write"):
        writer.append({"id": 1})
    assert (tmp_path / "results.jsonl").read_text() == ""
