"""Issue 42, defect 12: what a table file's retriever spec may point at. A table file is text
from anywhere (``--tables``): ``dense:{data}/x?model=/etc/passwd`` read a local file outside
``--data`` through the spec's option, and ``es:http://any-host/idx`` searched a host the table
named. Now an option is a name or a path inside ``--data``; a remote index is shown in the plan
and searched only with ``--allow-remote-index``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_run_dir_safety import TABLE, error_lines, invoke, write_table


def _table(tmp_path: Path, spec: str) -> Path:
    hotpot = TABLE["datasets"]["hotpotqa"] | {"retriever_spec": spec}
    return write_table(
        tmp_path / "t", TABLE | {"datasets": TABLE["datasets"] | {"hotpotqa": hotpot}}
    )


@pytest.mark.parametrize(
    "spec",
    ["dense:{data}/x?model=/etc/passwd", "dense:{data}/x?model=~/secret",
     "dense:{data}/x?model=../../model", "hybrid:bm25:{data}/a,dense:{data}/b?model={data}/../m"],
    ids=["absolute", "home", "dotdot", "hybrid-data-dotdot"],
)  # fmt: skip
def test_a_spec_option_is_a_name_or_a_path_inside_data(tmp_path: Path, spec: str) -> None:
    folder = _table(tmp_path, spec)
    data = tmp_path / "data"
    data.mkdir()
    result = invoke("reproduce", "toy-table1", "--tables", str(folder), "--data", str(data),
                    "--dry-run")  # fmt: skip
    assert result.exit_code == 1, result.output
    (line,) = error_lines(result)
    assert "inside --data" in line and "passwd" not in line, line


def test_a_model_name_option_is_accepted(tmp_path: Path) -> None:
    folder = _table(tmp_path, "dense:{data}/x?model=BAAI/bge-base-en-v1.5")
    result = invoke("reproduce", "toy-table1", "--tables", str(folder), "--dry-run")
    assert result.exit_code == 0, result.output


def test_a_remote_index_is_shown_and_needs_the_flag(tmp_path: Path) -> None:
    folder = _table(tmp_path, "es:http://u:PW@any-host:9200/idx")
    data = tmp_path / "data"
    data.mkdir()
    args = ("reproduce", "toy-table1", "--tables", str(folder), "--data", str(data))
    shown = invoke(*args, "--dry-run")
    assert shown.exit_code == 0, shown.output
    assert "remote index (searched only with --allow-remote-index): es:http://" in shown.output
    assert "PW" not in shown.output.split("remote index")[1]  # its credentials redacted
    plan: Any = json.loads(invoke(*args, "--dry-run", "--json").stdout)
    assert plan["remote_indexes"] == ["es:http://u:PW@any-host:9200/idx"]
    refused = invoke(*args, "--out", str(tmp_path / "out"))
    assert refused.exit_code == 1
    (line,) = error_lines(refused)
    assert "--allow-remote-index" in line and "PW" not in line, line
