"""Checkpoints, resume and start_from: real child processes killed with SIGKILL, real files.

Each kill test starts ``restream replay --checkpoint DIR`` as a child process, watches its
manifest until some epochs (not all) are committed, SIGKILLs the child's whole process group
(the Spark JVM too), resumes with ``--resume`` and compares tables and final state with the
serial engine's uninterrupted result.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from engine_matrix import assert_ran_as_planned, assert_same_result

import restream_kit as rk
from restream_kit.io import checkpoint
from restream_kit.io.checkpoint import CheckpointError

# A program with a sliding window (writes into the future), a tumbling window (scheduled
# events) and a busy loop that makes the serial child slow enough to be killed halfway.
SLOW_WINDOWS = """
from restream_kit import emit, on, seconds, state
from restream_kit.windows import tumbling

recent = state.Counter()
per_page = tumbling(seconds(20), "count", table="page_windows")
LIMIT = 3

@on("click")
def track(e):
    recent[e.user] += 1
    recent.add(e.user, -1, at=e.ts + seconds(30))
    per_page.add(e.page)
    h = 0
    for i in range(e.spin):
        h = (h * 31 + i) % 1000003

@on("click")
def flag(e):
    if recent[e.user] >= LIMIT:
        emit("busy", user=e.user, n=recent[e.user])
"""

# What the Spark engine runs in parallel (no schedule()): a sliding count read by a later
# handler, and a running total per page.
PARALLEL = """
from restream_kit import emit, on, seconds, state

recent = state.Counter()
pages = state.Counter()
LIMIT = 3

@on("click")
def track(e):
    recent[e.user] += 1
    recent.add(e.user, -1, at=e.ts + seconds(30))
    pages[e.page] += 1

@on("click")
def flag(e):
    if recent[e.user] >= LIMIT:
        emit("busy", user=e.user, n=recent[e.user])
    if pages[e.page] % 40 == 0:
        emit("page", page=e.page, n=pages[e.page])
"""


def write_log(path, n, spin=0):
    """``n`` clicks, 1.3 s apart, by 17 users on 7 pages."""
    table = pa.table(
        {
            "ts": pa.array([1_700_000_000_000 + 1300 * i for i in range(n)], pa.int64()),
            "kind": ["click"] * n,
            "user": [f"u{(i * 7) % 17}" for i in range(n)],
            "page": [f"p{(i * 3) % 7}" for i in range(n)],
            "spin": [spin] * n,
        }
    )
    pq.write_table(table, path)
    return str(path)


def write_program(path, source):
    path.write_text(source)
    return str(path)


def restream(*args, **kwargs):
    return subprocess.run(
        [sys.executable, "-m", "restream_kit", *args],
        capture_output=True,
        text=True,
        timeout=300,
        **kwargs,
    )


def manifest(directory):
    try:
        return json.loads((directory / "manifest.json").read_text())
    except (OSError, ValueError):
        return None


def kill_halfway(args, directory, *, min_epochs, timeout=240, ready=None):
    """Run ``restream *args`` until ``min_epochs`` epochs are committed (or ``ready()``), then
    SIGKILL it (and everything it started). Returns the manifest left behind."""
    child = subprocess.Popen(
        [sys.executable, "-m", "restream_kit", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            m = manifest(directory)
            if (m and len(m["epochs"]) >= min_epochs) or (ready is not None and ready()):
                break
            if child.poll() is not None:
                pytest.fail(f"the replay ended before it could be killed: {child.stderr.read()}")
            time.sleep(0.01)
        else:
            pytest.fail("no epoch was committed in time")
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        child.stderr.close()
    assert child.returncode == -signal.SIGKILL
    left = manifest(directory)
    if ready is not None and left is None:
        return {"epochs": []}
    assert left is not None and not left["complete"], "killed too late: the replay had finished"
    return left


def assert_same_tables(out_dir, expected):
    written = {p.stem: pq.read_table(p) for p in out_dir.glob("*.parquet")}
    assert set(written) == set(expected.tables)
    for name, table in expected.tables.items():
        assert written[name].to_pylist() == table.to_pylist(), name
        assert written[name].num_rows > 0


# -- SIGKILL and resume --------------------------------------------------------------------------


def test_serial_replay_killed_with_sigkill_resumes_to_the_serial_result(tmp_path):
    log = write_log(tmp_path / "clicks.parquet", 1600, spin=12_000)
    program = write_program(tmp_path / "windows.py", SLOW_WINDOWS)
    ck = tmp_path / "ck"
    args = ["replay", program, "--log", log, "--epoch", "200", "--checkpoint", str(ck)]
    left = kill_halfway([*args, "--quiet"], ck, min_epochs=2)
    committed = left["epochs"][-1]["epoch"]
    assert 1 <= committed < 7
    assert stat.S_IMODE(os.stat(ck).st_mode) == 0o700

    out = tmp_path / "out"
    done = restream(*args, "--resume", "--out", str(out), "--json", "--quiet")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["resumed_from_epoch"] == committed + 1

    expected = rk.replay(program, log, epoch=200)
    assert expected.metrics.scheduled_events > 0
    assert summary["tables"] == {n: t.num_rows for n, t in expected.tables.items()}
    assert_same_tables(out, expected)
    # The final state, read back from the completed checkpoint without replaying anything.
    again = rk.replay(program, log, epoch=200, checkpoint=ck, resume=True)
    assert again.resumed_from_epoch == 8
    assert again.state == expected.state
    assert again.metrics.scheduled_events == expected.metrics.scheduled_events


def test_spark_replay_killed_with_sigkill_resumes_to_the_serial_result(tmp_path, spark_session):
    log = write_log(tmp_path / "clicks.parquet", 900)
    program = write_program(tmp_path / "parallel.py", PARALLEL)
    ck = tmp_path / "ck"
    args = [
        "replay", program, "--log", log, "--engine", "spark", "--master", "local[2]",
        "--conf", "spark.sql.shuffle.partitions=2", "--conf", "spark.ui.enabled=false",
        "--epoch", "300", "--checkpoint", str(ck), "--quiet",
    ]  # fmt: skip
    # A checkpointed replay runs the passes once over the log and commits every epoch at
    # the end: killed once it has opened its checkpoint, it leaves nothing committed.
    left = kill_halfway(args, ck, min_epochs=1, ready=ck.is_dir)
    assert left["epochs"] == []
    # Resumed, it starts over and runs to the end. Its epochs are committed in a burst once
    # its passes are done: a kill there leaves the manifest behind the epochs' files on disk,
    # which is what cutting the manifest back to its first epoch leaves too.
    first = restream(*args, "--resume")
    assert first.returncode == 0, first.stderr
    left = manifest(ck)
    assert left["complete"] and [e["epoch"] for e in left["epochs"]] == [0, 1, 2]
    left["epochs"], left["complete"] = left["epochs"][:1], False
    (ck / "manifest.json").write_text(json.dumps(left))
    committed = 0
    # The pass path keeps the serial engine's state format (JSON and Arrow, no pickles).
    assert left["state_format"] == "serial"

    out = tmp_path / "out"
    done = restream(*args, "--resume", "--out", str(out), "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["resumed_from_epoch"] == committed + 1
    assert summary["warnings"] == []  # every pass ran in parallel: nothing to warn about

    expected = rk.replay(program, log, epoch=300)
    assert_same_tables(out, expected)
    again = rk.replay(
        program, log, engine="spark", master="local[2]", epoch=300, checkpoint=ck, resume=True
    )
    assert again.resumed_from_epoch == 3
    assert again.state == expected.state

    # Time travel on Spark: a changed rule from the state after epoch 1 of this checkpoint.
    v2 = PARALLEL.replace("LIMIT = 3", "LIMIT = 2")
    changed = rk.replay(v2, log, engine="spark", master="local[2]", epoch=300, start_from=(ck, 1))
    reference = rk.replay(v2, log, epoch=300)
    assert_rows_after(changed, reference, 600)
    assert changed.state == reference.state


def test_spark_windows_checkpoint_each_epoch_in_parallel_and_resume(tmp_path, spark_session):
    log = write_log(tmp_path / "clicks.parquet", 600)
    program = write_program(tmp_path / "windows.py", SLOW_WINDOWS)
    ck = tmp_path / "ck"
    options = dict(engine="spark", master="local[2]", epoch=200, checkpoint=ck, partitions=2)
    first = rk.replay(program, log, **options)
    assert first.warnings == []  # no task ran the whole program
    assert_ran_as_planned(rk.Program.from_file(program), first)
    assert all("(2 tasks)" in what for what in first.metrics.path.values()), first.metrics.path
    m = manifest(ck)
    assert m["state_format"] == "serial" and [e["epoch"] for e in m["epochs"]] == [0, 1, 2]
    # As if killed after epoch 0 committed.
    m["epochs"], m["complete"] = m["epochs"][:1], False
    (ck / "manifest.json").write_text(json.dumps(m))
    resumed = rk.replay(program, log, **options, resume=True)
    expected = rk.replay(program, log, epoch=200)
    assert resumed.resumed_from_epoch == 1
    assert {n: t.to_pylist() for n, t in resumed.tables.items()} == {
        n: t.to_pylist() for n, t in expected.tables.items()
    }
    assert resumed.state == expected.state
    assert resumed.metrics.scheduled_events == expected.metrics.scheduled_events


# -- refusals ------------------------------------------------------------------------------------


@pytest.fixture
def small(tmp_path):
    log = write_log(tmp_path / "clicks.parquet", 400)
    program = write_program(tmp_path / "windows.py", SLOW_WINDOWS)
    return program, log


def test_a_checkpoint_of_another_program_log_or_epoch_size_is_refused(tmp_path, small):
    program, log = small
    ck = tmp_path / "ck"
    rk.replay(program, log, epoch=100, checkpoint=ck)
    with pytest.raises(CheckpointError, match="already holds a checkpoint of epochs 0..3"):
        rk.replay(program, log, epoch=100, checkpoint=ck)
    v2 = write_program(tmp_path / "v2.py", SLOW_WINDOWS.replace("LIMIT = 3", "LIMIT = 4"))
    with pytest.raises(CheckpointError, match="made by another program version"):
        rk.replay(v2, log, epoch=100, checkpoint=ck, resume=True)
    other_log = write_log(tmp_path / "other.parquet", 401)
    with pytest.raises(CheckpointError, match="made by another log"):
        rk.replay(program, other_log, epoch=100, checkpoint=ck, resume=True)
    with pytest.raises(CheckpointError, match=r"another engine configuration \(epoch"):
        rk.replay(program, log, epoch=50, checkpoint=ck, resume=True)


def test_a_path_that_is_not_a_checkpoint_is_refused_in_one_line(tmp_path, small, root):
    program, log = small
    a_file = tmp_path / "notes.txt"
    a_file.write_text("hello")
    with pytest.raises(CheckpointError, match="is a file, not a directory"):
        rk.replay(program, log, checkpoint=a_file)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "data.csv").write_text("x\n1\n")
    with pytest.raises(CheckpointError, match="not empty and is not a restream checkpoint"):
        rk.replay(program, log, checkpoint=busy, resume=True)
    done = restream("replay", program, "--log", log, "--checkpoint", str(busy), cwd=root)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "data.csv" in lines[0] and "Traceback" not in done.stderr
    done = restream("replay", program, "--log", log, "--resume", cwd=root)
    assert done.returncode == 2 and "resume needs a checkpoint directory" in done.stderr


def test_checkpoint_directories_are_private_and_resume_starts_fresh_when_empty(tmp_path, small):
    program, log = small
    ck = tmp_path / "new" / "ck"
    result = rk.replay(program, log, epoch=100, checkpoint=ck, resume=True)
    assert result.resumed_from_epoch is None
    assert stat.S_IMODE(os.stat(ck).st_mode) == 0o700
    for path in ck.rglob("*"):
        assert stat.S_IMODE(os.stat(path).st_mode) in (0o700, 0o600), path


# -- start_from ----------------------------------------------------------------------------------


def assert_rows_after(result, reference, done):
    """``result`` holds exactly ``reference``'s rows made after the first ``done`` log events:
    by log events from ``done`` on, and by scheduled events due after the last one before."""
    before = 1_700_000_000_000 + 1300 * (done - 1)  # the ts of log event done - 1

    def after(row):
        return row["lsn"] >= done if row["seq"] == 0 else row["ts"] > before

    for name in set(result.tables) | set(reference.tables):
        rows = reference.tables[name].to_pylist() if name in reference.tables else []
        got = result.tables[name].to_pylist() if name in result.tables else []
        assert got == [r for r in rows if after(r)], name


def test_start_from_runs_a_changed_rule_over_the_rest_of_the_log(tmp_path, small):
    program, log = small
    ck = tmp_path / "ck"
    rk.replay(program, log, epoch=100, checkpoint=ck)
    # The rule changes only what it emits, so the state after epoch 1 is v2's too.
    v2 = write_program(tmp_path / "v2.py", SLOW_WINDOWS.replace("LIMIT = 3", "LIMIT = 2"))
    result = rk.replay(v2, log, epoch=100, start_from=(ck, 1))
    reference = rk.replay(v2, log, epoch=100)
    assert result.resumed_from_epoch is None
    assert "started from epoch 1" in result.warnings[0]
    assert result.metrics.events == 200
    assert_rows_after(result, reference, 200)
    assert result.state == reference.state
    # The last committed epoch by default; the CLI says the same with --start-from.
    last = rk.replay(v2, log, epoch=100, start_from=str(ck))
    assert last.metrics.events == 0 and last.state == reference.state


def test_start_from_refuses_other_logs_and_other_state(tmp_path, small):
    program, log = small
    ck = tmp_path / "ck"
    rk.replay(program, log, epoch=100, checkpoint=ck)
    with pytest.raises(CheckpointError, match="no committed epoch 9"):
        rk.replay(program, log, start_from=(ck, 9))
    other_log = write_log(tmp_path / "other.parquet", 300)
    with pytest.raises(CheckpointError, match="checkpoint of another log"):
        rk.replay(program, other_log, start_from=(ck, 1))
    retyped = SLOW_WINDOWS.replace("recent = state.Counter()", "recent = state.Map(default=0)")
    with pytest.raises(CheckpointError, match="state 'recent' was counter"):
        rk.replay(retyped, log, start_from=(ck, 1))
    dropped = SLOW_WINDOWS.replace("recent = state.Counter()", "recent2 = state.Counter()")
    dropped = dropped.replace("recent[", "recent2[").replace("recent.add", "recent2.add")
    with pytest.raises(CheckpointError, match="no longer declares"):
        rk.replay(dropped, log, start_from=(ck, 1))


def test_a_checkpoint_moves_between_the_serial_engine_and_spark(tmp_path, spark_session):
    """Both engines keep the serial engine's state format: either starts from the other's."""
    log = write_log(tmp_path / "clicks.parquet", 600)
    program = write_program(tmp_path / "windows.py", SLOW_WINDOWS)
    serial_ck, spark_ck = tmp_path / "serial", tmp_path / "spark"
    rk.replay(program, log, epoch=200, checkpoint=serial_ck)
    spark = dict(engine="spark", master="local[2]", epoch=200, partitions=2)
    rk.replay(program, log, **spark, checkpoint=spark_ck)
    # The state after each epoch is the serial engine's, whichever engine committed it.
    for epoch in (0, 1):
        a = checkpoint.read(serial_ck, epoch)
        b = checkpoint.read(spark_ck, epoch)
        assert a.state["stores"] == b.state["stores"], epoch

        def waiting(state):  # in the order they apply (each engine numbers them its own way)
            writes = sorted(state["future"], key=lambda w: w[:2])
            events = sorted(state["scheduled"], key=lambda s: s[:2])
            return [w[:1] + w[2:] for w in writes], [(s[0], vars(s[2])) for s in events]

        assert waiting(a.state) == waiting(b.state), epoch
    v2 = SLOW_WINDOWS.replace("LIMIT = 3", "LIMIT = 2")
    reference = rk.replay(v2, log, epoch=200, start_from=(serial_ck, 0))
    on_spark = rk.replay(v2, log, **spark, start_from=(serial_ck, 0))
    assert_same_result(on_spark, reference)
    on_serial = rk.replay(v2, log, epoch=200, start_from=(spark_ck, 0))
    assert_same_result(on_serial, reference)


def test_a_checkpoint_of_the_retired_stage_path_is_refused_in_one_line(
    tmp_path, small, spark_session
):
    """The Spark stage path's checkpoints (state format ``spark-parallel``) held pickled
    values: no engine reads them, whether resumed or started from."""
    program, log = small
    ck = tmp_path / "ck"
    rk.replay(program, log, epoch=100, checkpoint=ck)
    manifest = json.loads((ck / "manifest.json").read_text())
    manifest["state_format"], manifest["complete"] = "spark-parallel", False
    manifest["identity"]["engine"] = "spark"
    manifest["epochs"] = manifest["epochs"][:1]
    (ck / "manifest.json").write_text(json.dumps(manifest))
    spark = dict(engine="spark", master="local[2]", epoch=100)
    attempts = [
        dict(**spark, checkpoint=ck, resume=True),
        dict(**spark, start_from=(ck, 0)),
        dict(epoch=100, start_from=(ck, 0)),
    ]
    for options in attempts:
        with pytest.raises(CheckpointError, match="retired stage path") as caught:
            rk.replay(program, log, **options)
        assert "\n" not in str(caught.value) and str(ck) in str(caught.value)
