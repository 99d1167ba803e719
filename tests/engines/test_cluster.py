"""Remote clusters with real processes: ``scripts/cluster.sh``, the CLI on ``spark://`` and
``sc://``, and the failures that must end in one clear error within 60 seconds.

The tests after ``test_cli_on_the_cluster_...`` share one cluster (started with
``scripts/cluster.sh`` on free ports, one worker and a Connect server) and run in file order:
its worker is killed mid-replay, then the master, left without workers, has no free cores,
then ``cluster.sh stop`` must leave none of its processes behind. Every replay runs in a
``restream`` subprocess, as a user would run it (each has its own SparkContext).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from spark_fixtures import free_port, start_cluster, stop_cluster

import restream_kit as rk

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "sample_data" / "social_small.parquet"

SLOW_PROGRAM = """
import time

from restream_kit import emit, on, state

seen = state.Counter()


@on("tick")
def slow(e):
    time.sleep(0.02)
    seen[e.k] += 1
    emit("out", k=e.k, n=seen[e.k])
"""


def restream(*args: str, env: dict | None = None, timeout: float = 300) -> tuple:
    """Run ``restream ARGS`` in a subprocess: (return code, stdout, stderr, seconds)."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "restream_kit", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
    return done.returncode, done.stdout, done.stderr, time.monotonic() - started


def one_error_line(stderr: str) -> str:
    """The CLI's one error line (warnings aside), with no traceback."""
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, stderr
    return lines[0]


def descendants(pid: int) -> set[int]:
    """``pid``'s live child processes, their children, and so on (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
    out: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


# -- the workers' Python -------------------------------------------------------------------


@pytest.mark.cluster
@pytest.mark.parametrize("engine", ["spark-cluster", "spark-connect"], indirect=True)
def test_the_workers_python_version_is_checked(engine, request):
    from restream_kit.engines.spark.session._session import check_python

    session = request.getfixturevalue(
        "cluster_session" if engine == "spark-cluster" else "connect_session"
    )
    here = "{}.{}".format(*sys.version_info[:2])
    assert check_python(session) == here
    with pytest.raises(rk.RestreamError) as info:
        check_python(session, driver=(3, 99))
    assert str(info.value).startswith(
        f"the cluster's workers run Python {here} but this kernel runs Python 3.99"
    )


def test_pysparks_own_version_mismatch_becomes_our_one_line():
    from pyspark.errors import PySparkRuntimeError

    from restream_kit.engines.spark.session._session import mismatch_message

    error = PySparkRuntimeError(
        errorClass="PYTHON_VERSION_MISMATCH",
        messageParameters={"worker_version": "3.10", "driver_version": "3.11"},
    )
    assert mismatch_message(f"Py4JJavaError: ... {error} ...") == (
        "the cluster's workers run Python 3.10 but this kernel runs Python 3.11: use the same "
        "major.minor version on both (set spark.pyspark.python, or PYSPARK_PYTHON on the workers)"
    )
    assert mismatch_message("some other failure") is None


# -- unreachable ------------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["spark", "sc"])
def test_an_unreachable_master_is_one_clear_error_at_once(scheme):
    port = free_port()
    code, _, err, seconds = restream(
        "replay", "examples/antispam.py", "--log", str(SMALL), "--engine", "spark",
        "--master", f"{scheme}://127.0.0.1:{port}", "--quiet",
    )  # fmt: skip
    assert code == 2, err
    line = one_error_line(err)
    assert f"127.0.0.1:{port}" in line and "cannot reach" in line, line
    assert seconds < 60


def test_a_connect_token_never_shows(test_cluster):
    """A wrong token fails in one line that does not show it."""
    code, _, err, seconds = restream(
        "replay", "examples/antispam.py", "--log", str(SMALL), "--engine", "spark",
        "--master", test_cluster.connect, "--quiet",
        env={"RESTREAM_CONNECT_TOKEN": "not-the-token-4711"},
    )  # fmt: skip
    assert code == 2, err
    line = one_error_line(err)
    assert "4711" not in err and "token=***" in line, line
    assert seconds < 60


# -- one cluster from scripts/cluster.sh, then its failures ---------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Master, one worker (two cores) and a Connect server, by ``scripts/cluster.sh``."""
    info = start_cluster(tmp_path_factory.mktemp("sh-cluster"), workers=1, cores=2)
    yield info
    stop_cluster(info)


def test_cli_on_the_cluster_and_over_connect_gives_the_serial_result(cluster, tmp_path):
    pids = cluster.pids()
    assert sorted(pids) == ["connect", "master", "worker-1"]
    assert all(alive(pid) for pid in pids.values())
    want = rk.replay("examples/antispam.py", rk.Log(SMALL))
    runs = {}
    for name, master in [("cluster", cluster.master), ("connect", cluster.connect)]:
        command = [
            sys.executable, "-m", "restream_kit", "replay", str(ROOT / "examples" / "antispam.py"),
            "--log", str(SMALL), "--engine", "spark", "--master", master,
            "--out", "out", "--json", "--quiet",
        ]  # fmt: skip
        # As a user runs it: relative paths, caches in the default ./.restream.
        cwd = tmp_path / name
        cwd.mkdir()
        env = {k: v for k, v in os.environ.items() if k != "RESTREAM_HOME"}
        # Both at once: the cluster and the Connect server have their own cores.
        runs[name] = subprocess.Popen(
            command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    for name, run in runs.items():
        out, err = run.communicate(timeout=400)
        assert run.returncode == 0, err
        summary = json.loads(out)
        assert summary["metrics"]["engine"] == "spark" and summary["metrics"]["events"] == 50_000
        assert summary["tables"] == {"spam": want.tables["spam"].num_rows}, name
        assert summary["state"] == {k: len(v) for k, v in want.state.items()}, name
        got = pq.read_table(tmp_path / name / "out" / "spam.parquet")
        assert got.schema == want.tables["spam"].schema, name
        assert got.to_pylist() == want.tables["spam"].to_pylist(), name


def test_workers_dying_mid_replay_is_one_clear_error(cluster, tmp_path):
    program = tmp_path / "slow.py"
    program.write_text(SLOW_PROGRAM)
    log = tmp_path / "ticks.csv"
    log.write_text("ts,kind,k\n" + "".join(f"{i},tick,{i % 7}\n" for i in range(3000)))
    command = [
        sys.executable, "-m", "restream_kit", "replay", str(program), "--log", str(log),
        "--engine", "spark", "--master", cluster.master, "--quiet",
    ]  # fmt: skip
    env = {**os.environ, "RESTREAM_EXECUTOR_WAIT": "8"}
    stderr = tmp_path / "stderr.txt"
    with stderr.open("w") as sink:  # a file, not a pipe: a full pipe would stall the driver
        replay = subprocess.Popen(command, cwd=ROOT, env=env, stderr=sink)
    try:
        # Mid-replay: the worker runs this application's executor and its Python workers.
        worker = cluster.pids()["worker-1"]
        deadline = time.monotonic() + 180
        while not any(b"pyspark.daemon" in _cmdline(p) for p in descendants(worker)):
            assert replay.poll() is None, stderr.read_text()
            assert time.monotonic() < deadline, "the replay never reached the worker"
            time.sleep(0.5)
        # The first Python worker may be the session's version probe, which the command line
        # starts while it loads the log: give the replay time to be well into its jobs (60 s).
        time.sleep(8)
        killed_at = time.monotonic()
        doomed = {worker, *descendants(worker)}
        for pid in doomed:
            os.kill(pid, signal.SIGKILL)
        replay.wait(timeout=120)
        seconds = time.monotonic() - killed_at
    finally:
        if replay.poll() is None:
            replay.kill()
    err = stderr.read_text()
    assert replay.returncode == 2, err
    line = one_error_line(err)
    # Mid-replay the watchdog says the executors were lost; on a loaded machine the kill can
    # land while the replay still waits for its first executor, which is said as clearly.
    assert cluster.master in line, line
    assert "lost every executor" in line or "gave this application no executor" in line, line
    assert seconds < 60


def test_a_cluster_without_free_cores_is_one_clear_error(cluster):
    # The worker died in the test before: the master is alone.
    code, _, err, seconds = restream(
        "replay", "examples/antispam.py", "--log", str(SMALL), "--engine", "spark",
        "--master", cluster.master, "--quiet", env={"RESTREAM_EXECUTOR_WAIT": "8"},
    )  # fmt: skip
    assert code == 2, err
    line = one_error_line(err)
    assert "no executor within 8 s" in line and cluster.master in line, line
    assert seconds < 60


def test_cluster_sh_stop_leaves_no_process_behind(cluster):
    pids = cluster.pids()
    assert set(pids) == {"master", "worker-1", "connect"}
    everything = {pid for pid in pids.values() if alive(pid)}
    for pid in list(everything):
        everything |= descendants(pid)
    assert everything, "nothing of the cluster is running"
    done = stop_cluster(cluster)
    assert done.returncode == 0, done.stderr
    left = [pid for pid in everything if alive(pid)]
    assert not left, f"still running after cluster.sh stop: {left}"
    assert not list(cluster.directory.glob("*.pid"))


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
