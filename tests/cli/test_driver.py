"""``restream driver``: a long-lived Spark driver that the command line's replays run through.

One driver (a real ``restream driver`` process) serves the session's test cluster for this
module, with half its cores; each test runs whole ``restream replay`` processes against it
and compares them with the serial engine.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from multiprocessing.connection import Client
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import restream_kit as rk
from restream_kit.cli._driver import find_driver, socket_path

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "sample_data" / "social_small.parquet"

#: A rule whose every event costs a few milliseconds: minutes of work, to be interrupted.
SLOW = """
from restream_kit import on, state
spins = state.Counter()

@on("message")
def spin(e):
    total = 0
    for i in range(40_000):
        total += i % 7
    spins[e.src] += total % 2 + 1
"""

#: A rule that fails on one event, at a line the error must name.
FAILING = """
from restream_kit import on, state
seen = state.Counter()

@on("message")
def count(e):
    seen[e.src] += 1
    if seen[e.src] == 3:
        seen[e.src] += 1 // (seen[e.src] - 3)
"""


def _run(home: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "RESTREAM_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "restream_kit", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=kw.pop("timeout", 300),
        **kw,
    )


@pytest.fixture(scope="module")
def driver(test_cluster, tmp_path_factory):
    """A ``restream driver`` on the test cluster (two of its four cores), and its home."""
    home = tmp_path_factory.mktemp("driver-home")
    env = {**os.environ, "RESTREAM_HOME": str(home)}
    command = [sys.executable, "-m", "restream_kit", "driver", "--master", test_cluster.master]
    command += ["--conf", "spark.cores.max=2", "--conf", "spark.executor.memory=1g"]
    proc = subprocess.Popen(
        command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        line = proc.stdout.readline()  # blocks until the driver is warm and listening
        if "serving" not in line:
            pytest.fail(f"restream driver did not start: {line}{proc.stdout.read()}")
        yield proc, home, test_cluster.master
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def _replay(driver, program: Path, *extra: str, **kw) -> subprocess.CompletedProcess:
    proc, home, master = driver
    args = ["replay", str(program), "--log", str(SMALL), "--engine", "spark"]
    return _run(home, *args, "--master", master, *extra, **kw)


@pytest.mark.parametrize("name", ["antispam", "ordinary"])
def test_a_replay_runs_on_the_driver_and_equals_serial(driver, tmp_path, name):
    program = {
        "antispam": ROOT / "examples" / "antispam.py",
        "ordinary": ROOT / "bench" / "programs" / "ordinary.py",
    }[name]
    out = tmp_path / "out"
    done = _replay(driver, program, "--epoch", "10000", "--json", "--out", str(out))
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["driver"] == f"{_socket(driver)} (pid {driver[0].pid})"
    want = rk.replay(program, rk.Log(SMALL))
    assert summary["tables"] == {t: table.num_rows for t, table in want.tables.items()}
    assert summary["state"] == {s: len(values) for s, values in want.state.items()}
    for table, rows in want.tables.items():
        assert pq.read_table(out / f"{table}.parquet").equals(rows), table
    # What ran: in parallel on the cluster, every stage over more than one task.
    for stage, what in summary["path"].items():
        assert what.startswith(("lowered to columns, parallel", "parallel over")), (stage, what)
        assert not what.endswith("(1 task)"), (stage, what)
    if name == "antispam":
        assert all("lowered" in what for what in summary["path"].values())
    # The run is in the catalog of the directory it was replayed from.
    runs = _run(driver[1], "runs", "--json")
    assert runs.returncode == 0 and program.stem in runs.stdout


def _socket(driver) -> Path:
    """Where the driver listens: in its home, which the client shares."""
    proc, home, master = driver
    return home.resolve() / "drivers" / socket_path(master).name


def test_a_handler_error_on_the_driver_is_the_same_error_and_it_serves_on(driver, tmp_path):
    program = tmp_path / "failing.py"
    program.write_text(FAILING)
    done = _replay(driver, program)
    serial = _run(driver[1], "replay", str(program), "--log", str(SMALL))
    assert done.returncode == serial.returncode == 2, (done.stderr, serial.stderr)
    error = done.stderr.strip().splitlines()[-1]
    assert "ZeroDivisionError" in error and f"{program}:9" in error, error
    # A request that is not one does not stop the driver either.
    with Client(str(_socket(driver)), family="AF_UNIX") as conn:
        conn.send_bytes(b"not a request")
    # The driver goes on serving.
    again = _replay(driver, ROOT / "examples" / "antispam.py", "--json")
    assert again.returncode == 0 and "driver" in json.loads(again.stdout), again.stderr


def test_ctrl_c_cancels_the_replay_on_the_driver(driver, tmp_path):
    program = tmp_path / "slow.py"
    program.write_text(SLOW)
    proc, home, master = driver
    env = {**os.environ, "RESTREAM_HOME": str(home)}
    args = ["replay", str(program), "--log", str(SMALL), "--engine", "spark", "--master", master]
    client = subprocess.Popen(
        [sys.executable, "-m", "restream_kit", *args, "--quiet"],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(10)  # the replay is under way on the driver (minutes of work)
    assert client.poll() is None, client.communicate()
    interrupted = time.monotonic()
    client.send_signal(signal.SIGINT)
    _, err = client.communicate(timeout=120)
    assert client.returncode == 130 and "interrupted" in err, err
    # The driver cancelled it: the next replay does not wait minutes for it.
    again = _replay(driver, ROOT / "examples" / "antispam.py", "--json", timeout=240)
    assert again.returncode == 0, again.stderr
    assert time.monotonic() - interrupted < 90


def test_replays_the_driver_cannot_take_go_their_own_way(tmp_path, monkeypatch):
    monkeypatch.setenv("RESTREAM_HOME", str(tmp_path))
    master = "spark://127.0.0.1:1"
    assert find_driver(master, {"master": master}) is None  # no driver listens
    path = socket_path(master)
    path.parent.mkdir(parents=True)
    path.touch()  # a socket left by a driver that was killed
    assert find_driver(master, {"master": master}) is None
    assert find_driver(master, {"master": master, "conf": {"spark.x": "1"}}) is None
    assert find_driver(None, {}) is None
