"""``noterag eval --ray``: a real Ray cluster on 127.0.0.1 (a head node started by `ray start`,
two actors as its worker processes), the model a simulated endpoint (bench/sim_endpoint.py).

Checked: a Ray run writes the rows a plain run writes (a plain eval replaying the Ray run's
cache sends no request and scores the same), a worker killed mid-run (SIGKILL) loses and
duplicates nothing, Ctrl-C on the driver stops this run's workers and leaves a directory a plain
eval resumes, a local cluster lives as long as its run, and the model's two replicas keep the
run going while one of them fails.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from noterag.eval import run_eval
from noterag.models import ModelSettings
from noterag.retrievers.sample import sample_index, sample_questions

# Not imported here: Ray reads its authentication settings when it is imported, and the
# cluster fixture sets them first.
if importlib.util.find_spec("ray") is None:
    pytest.skip("Ray is not installed: pip install 'noterag[ray]'", allow_module_level=True)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from sim_endpoint import Faults, SimModel, start

NOTERAG = str(Path(sys.executable).with_name("noterag"))
RAY = str(Path(sys.executable).with_name("ray"))
SETTINGS = ModelSettings(timeout=20, max_retries=2)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_head(port: int, temp: Path, *, cpus: int) -> dict[str, str]:
    """``ray start --head`` on 127.0.0.1:``port`` with its files in ``temp``; the environment
    its drivers and ``ray stop`` use. Its workers run at the machine's usual priority: Ray
    starts them at nice 15 (``worker_niceness``), which on a machine others share (CI) leaves
    the run's actors a few percent of a core beside any ordinary process, and the first rows
    took over 240 s beside two CPU hogs."""
    env = os.environ | {"RAY_USAGE_STATS_ENABLED": "0", "RAY_worker_niceness": "0"}
    started = subprocess.run(
        [RAY, "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(port),
         "--num-cpus", str(cpus), "--include-dashboard", "false", "--disable-usage-stats",
         "--temp-dir", str(temp)],
        check=False, capture_output=True, text=True, env=env, timeout=180,
    )  # fmt: skip
    if started.returncode != 0:
        pytest.fail(f"ray start failed: {started.stderr[-2000:]}")
    return env


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Ray head on 127.0.0.1 with 2 CPUs (two actors), stopped at the end."""
    port = _free_port()
    temp = Path("/tmp") / f"noterag-ray-{os.getpid()}"  # short: Ray's socket paths
    # Ray authenticates its clients with a token (by default from 2.59): the head and every
    # driver of these tests share one, through the environment (as an operator's cluster would).
    token = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16)}
    saved = {name: os.environ.get(name) for name in token}
    os.environ.update(token)
    env = _start_head(port, temp, cpus=2)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        subprocess.run([RAY, "stop", "--force"], check=False, capture_output=True, env=env)
        shutil.rmtree(temp, ignore_errors=True)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _questions(path: Path, n: int) -> Path:
    """The sample questions, cycled to ``n`` (each id once)."""
    sample = sample_questions()
    with path.open("w") as out:
        for i in range(n):
            row = dict(sample[i % len(sample)])
            row["id"] = f"{row['id']}-{i}"
            row["question"] = f"{row['question']} (variant {i})"
            out.write(json.dumps(row) + "\n")
    return path


def _rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]


def _command_lines() -> dict[int, bytes]:
    """Every process's command line, by pid (one that ends while being read is left out)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                found[int(entry.name)] = (entry / "cmdline").read_bytes()
            except OSError:
                continue
    return found


def _actor_pids() -> list[int]:
    return [pid for pid, line in _command_lines().items() if line.startswith(b"ray::Answerer")]


def _wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.2)


def test_a_ray_run_writes_the_rows_a_plain_run_replays(cluster: str, tmp_path: Path) -> None:
    good_model, flaky_faults = SimModel(base_s=0.01, per_token_s=0.0), Faults(error_rate=0.4)
    good, good_url = start(good_model)
    flaky, flaky_url = start(SimModel(base_s=0.01, per_token_s=0.0), faults=flaky_faults)
    questions = _questions(tmp_path / "q.jsonl", 12)
    index = sample_index(tmp_path / "cache")
    common = {
        "index": index,
        # two replicas of the model, one failing 40% of its requests
        "model": f"openai:sim@{flaky_url},{good_url}",
        "settings": SETTINGS,
        "cache": tmp_path / "replies.sqlite",
        "progress": False,
    }
    try:
        on_ray = run_eval(
            "deepnote", questions, tmp_path / "ray", ray=cluster, workers=2, concurrency=2,
            **common,
        )  # fmt: skip
        sent = len(good_model.records) + flaky_faults.counts["requests"]
        plain = run_eval("deepnote", questions, tmp_path / "plain", concurrency=2, **common)
        assert len(good_model.records) + flaky_faults.counts["requests"] == sent  # no request
    finally:
        good.shutdown()
        flaky.shutdown()
    assert flaky_faults.counts["error"] >= 1  # the failing replica was used and skipped
    assert on_ray["n"] == plain["n"] == 12 and on_ray["n_errors"] == 0
    assert on_ray["metrics"] == plain["metrics"]
    ray_rows = {r["id"]: r for r in _rows(tmp_path / "ray")}
    plain_rows = {r["id"]: r for r in _rows(tmp_path / "plain")}
    assert len(ray_rows) == 12 == len(_rows(tmp_path / "ray"))
    for qid, row in plain_rows.items():
        for field in ("answer", "em", "f1", "acc", "llm_calls", "passage_ids"):
            assert ray_rows[qid].get(field) == row.get(field), (qid, field)
    assert json.loads((tmp_path / "ray" / "run.json").read_text())["ray"] == cluster


def test_a_worker_killed_mid_run_loses_and_duplicates_nothing(cluster: str, tmp_path: Path) -> None:
    model = SimModel(base_s=0.15, per_token_s=0.0)
    server, url = start(model)
    run = tmp_path / "run"
    command = [
        NOTERAG, "eval", "-m", "deepnote", "-d", str(_questions(tmp_path / "q.jsonl", 24)),
        "-o", str(run), "-i", str(sample_index(tmp_path / "cache")),
        "--model", f"openai:sim@{url}", "--ray", cluster, "--workers", "2", "-j", "2", "-q",
    ]  # fmt: skip
    try:
        driver = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
        results = run / "results.jsonl"
        _wait_for(
            lambda: results.exists() and len(results.read_text().splitlines()) >= 3,
            240,
            "the first rows",
        )
        victims = _actor_pids()
        assert len(victims) == 2, victims
        os.kill(victims[0], signal.SIGKILL)
        _, stderr = driver.communicate(timeout=300)
    finally:
        server.shutdown()
    assert driver.returncode == 0, stderr
    rows = _rows(run)
    assert len(rows) == 24 and len({r["id"] for r in rows}) == 24
    summary = json.loads((run / "summary.json").read_text())
    assert summary["n_errors"] == 0 and summary["requeued"] >= 1


def test_ctrl_c_stops_the_workers_and_a_plain_eval_resumes(cluster: str, tmp_path: Path) -> None:
    # slow enough that the run cannot finish before the interrupt, even on a loaded machine
    # (30 DeepNote questions at 1 s a call take over a minute on 4 lanes)
    model = SimModel(base_s=1.0, per_token_s=0.0)
    server, url = start(model)
    run, questions = tmp_path / "run", _questions(tmp_path / "q.jsonl", 30)
    index = sample_index(tmp_path / "cache")
    # A test runner started in the background (`&`) ignores SIGINT, and children inherit that
    # (the CLI then leaves it ignored): restore Python's handler, then run `noterag` itself.
    restore_then_run = (
        "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "from noterag.cli import main; main()"
    )
    command = [
        sys.executable, "-c", restore_then_run, "eval", "-m", "deepnote", "-d", str(questions),
        "-o", str(run), "-i", str(index), "--model", f"openai:sim@{url}", "--ray", cluster,
        "--workers", "2", "-j", "2", "-q",
    ]  # fmt: skip
    try:
        driver = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
        results = run / "results.jsonl"
        _wait_for(
            lambda: results.exists() and len(results.read_text().splitlines()) >= 2,
            240,
            "the first rows",
        )
        driver.send_signal(signal.SIGINT)
        driver.communicate(timeout=120)
        assert driver.returncode != 0
        _wait_for(lambda: not _actor_pids(), 60, "the run's workers to stop")
        time.sleep(1.5)  # a call sent before the workers stopped is answered within base_s
        stopped = len(model.records)
        time.sleep(1.5)
        assert len(model.records) == stopped  # nobody asks the model for this run any more
        before = {r["id"] for r in _rows(run)}
        assert 2 <= len(before) < 30
        model.base_s = 0.05  # the resumed run need not be slow
        summary = run_eval(
            "deepnote", questions, run, index=index, model=f"openai:sim@{url}",
            settings=SETTINGS, concurrency=4, progress=False,
        )  # fmt: skip
    finally:
        server.shutdown()
    rows = _rows(run)
    assert summary["n"] == 30 and len(rows) == 30 and len({r["id"] for r in rows}) == 30


def test_without_an_address_a_local_cluster_lives_as_long_as_the_run(tmp_path: Path) -> None:
    server, url = start(SimModel(base_s=0.01, per_token_s=0.0))
    try:
        summary = run_eval(
            "vanilla", _questions(tmp_path / "q.jsonl", 3), tmp_path / "run",
            index=sample_index(tmp_path / "cache"), model=f"openai:sim@{url}",
            settings=SETTINGS, ray="local", workers=1, progress=False,
        )  # fmt: skip
    finally:
        server.shutdown()
    assert summary["n"] == 3 and summary["n_errors"] == 0
    import ray

    assert not ray.is_initialized()


# --------------------------------------------------------------------------- a cluster that is gone


@pytest.fixture
def model_url() -> Iterator[str]:
    """A simulated endpoint answering at once (the model is checked before the cluster)."""
    server, url = start(SimModel(base_s=0.0, per_token_s=0.0))
    yield url
    server.shutdown()


def _eval(tmp_path: Path, address: str, url: str, n: int = 3) -> list[str]:
    return [
        NOTERAG, "eval", "-m", "deepnote", "-d", str(_questions(tmp_path / "q.jsonl", n)),
        "-o", str(tmp_path / "run"), "-i", str(sample_index(tmp_path / "cache")),
        "--model", f"openai:sim@{url}", "--ray", address, "--workers", "1", "-j", "1", "-q",
    ]  # fmt: skip


def test_an_address_nobody_answers_is_one_line(tmp_path: Path, model_url: str) -> None:
    port = _free_port()  # nothing listens there
    done = subprocess.run(
        _eval(tmp_path, f"127.0.0.1:{port}", model_url),
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        (
            f"error: cannot connect to the Ray cluster at 127.0.0.1:{port}: nothing answers at "
            f"127.0.0.1:{port} (connection refused)"
        )
    ]
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("given", ["host:port", "ray://host:port"])
def test_auto_is_the_head_ray_address_names(tmp_path: Path, model_url: str, given: str) -> None:
    """``--ray auto`` connects where ``RAY_ADDRESS`` points, as ray.init does (read by noterag
    itself, not by a private module of Ray): nobody answers there, and the line names it."""
    port = _free_port()
    where = given.replace("host:port", f"127.0.0.1:{port}")
    done = subprocess.run(
        _eval(tmp_path, "auto", model_url),
        capture_output=True, text=True, timeout=300, check=False,
        env=os.environ | {"RAY_ADDRESS": where},
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        (
            f"error: cannot connect to the Ray cluster at auto: nothing answers at "
            f"127.0.0.1:{port} (connection refused)"
        )
    ]


def test_an_address_that_never_answers_as_ray_is_one_line(tmp_path: Path, model_url: str) -> None:
    """A port that accepts connections and says nothing: ray.init is given
    NOTERAG_RAY_CONNECT_TIMEOUT (here 5 s), not its own many minutes."""
    mute = socket.socket()
    mute.bind(("127.0.0.1", 0))
    mute.listen(64)
    port = mute.getsockname()[1]
    try:
        done = subprocess.run(
            _eval(tmp_path, f"127.0.0.1:{port}", model_url),
            capture_output=True, text=True, timeout=300, check=False,
            env=os.environ | {"NOTERAG_RAY_CONNECT_TIMEOUT": "5"},
        )  # fmt: skip
    finally:
        mute.close()
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        (
            f"error: cannot connect to the Ray cluster at 127.0.0.1:{port}: no answer from Ray "
            "within 5 s (NOTERAG_RAY_CONNECT_TIMEOUT sets how long to wait)"
        )
    ], done.stderr
    assert done.stderr.strip().splitlines()[-1] == errors[0]


def _processes_of(temp: Path) -> dict[int, bytes]:
    """The processes of the cluster whose Ray directory is ``temp``: pid -> command line."""
    return {pid: line for pid, line in _command_lines().items() if str(temp).encode() in line}


@pytest.fixture
def lone_node(cluster: str) -> Iterator[tuple[str, Path]]:
    """A second cluster, one node (1 CPU), of its own: the test kills its node. Stopped by
    killing its processes (``ray stop`` would stop the module's cluster too). ``cluster``
    first: it sets the token every driver of this module uses."""
    port = _free_port()
    temp = Path("/tmp") / f"noterag-ray1-{os.getpid()}"
    _start_head(port, temp, cpus=1)
    try:
        yield f"127.0.0.1:{port}", temp
    finally:
        for pid in _processes_of(temp):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.parametrize(
    ("victim", "why"),
    [
        ("raylet", r"it has no live node left"),
        ("gcs_server", r"its head at [\d.]+:\d+ no longer answers \(connection refused\)"),
    ],
)
def test_a_cluster_whose_only_node_or_head_dies_stops_with_one_line_and_keeps_the_rows(
    lone_node: tuple[str, Path], tmp_path: Path, victim: str, why: str
) -> None:
    """Killed mid-run: its node's raylet (the head's GCS lives on) or the head's GCS. Ray's
    driver would wait for the answers for ever (or die with a C++ log line); a later run
    resumes from the rows kept."""
    address, temp = lone_node
    model = SimModel(base_s=0.2, per_token_s=0.0)
    server, url = start(model)
    run = tmp_path / "run"
    try:
        driver = subprocess.Popen(
            _eval(tmp_path, address, url, n=30), stderr=subprocess.PIPE, text=True
        )
        results = run / "results.jsonl"
        _wait_for(
            lambda: results.exists() and len(results.read_text().splitlines()) >= 2,
            240,
            "the first rows",
        )
        victims = [
            pid
            for pid, cmd in _processes_of(temp).items()
            if cmd.split(b"\0")[0].endswith(f"/{victim}".encode())
        ]
        assert len(victims) == 1, _processes_of(temp)
        os.kill(victims[0], signal.SIGKILL)
        _, stderr = driver.communicate(timeout=240)
    finally:
        server.shutdown()
    assert driver.returncode == 1
    kept = _rows(run)
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, stderr
    assert re.fullmatch(
        rf"error: the Ray cluster stopped answering: {why} \(stopped after {len(kept)} of 30 "
        r"questions; run the same command again to resume\)",
        errors[0],
    ), errors[0]
    assert stderr.strip().splitlines()[-1] == errors[0]
    assert 2 <= len(kept) < 30 and len({r["id"] for r in kept}) == len(kept)
