"""Replays on a real standalone cluster whose workers run as another Unix user.

The session's test cluster (``tests/spark_fixtures.py``, started by ``scripts/cluster.sh``) runs
its workers, when the tests run as root, as user ``restream-worker``, which cannot read the
test's directories: a replay that relied on the executors reading a file of the kernel's would
fail here. Each replay is compared with the serial engine, ran as the plan says, and ran every
parallel stage in more than one task. A log given as a ``file://`` URI goes to Spark's reader.
A rule that lowers to columns takes the prefix path there too, its epochs' events shipped
through a cached DataFrame.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from engine_matrix import (
    assert_ran_as_planned,
    assert_same_commits,
    assert_same_result,
    keep_first_epochs,
)

import restream_kit as rk

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "sample_data" / "social_small.parquet"
WORKER_USER = "restream-worker"
PROGRAMS = {
    "antispam": ROOT / "examples" / "antispam.py",
    "ordinary": ROOT / "bench" / "programs" / "ordinary.py",
    "windows": ROOT / "bench" / "programs" / "windows.py",
    # A pass partitioned by a looked-up key, its events packed by the pass that looks it up.
    "teams": ROOT / "bench" / "programs" / "teams.py",
}


def _uid_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError(f"no Uid line for pid {pid}")


def _worker_can_read(path: Path) -> bool:
    """Whether the workers' user can read ``path`` (tried as that user)."""
    done = subprocess.run(
        ["setpriv", "--reuid", WORKER_USER, "--regid", WORKER_USER, "--clear-groups",
         "head", "-c", "1", str(path)],
        capture_output=True,
    )  # fmt: skip
    return done.returncode == 0


def _tasks(what: str) -> int | None:
    found = re.search(r"\((\d+) tasks?\)(,|$)", what)
    return int(found.group(1)) if found else None


def assert_parallel_stages_split(result: rk.Result) -> None:
    """Every stage that ran in parallel (over partitions, or lowered over epochs) ran in more
    than one task."""
    for stage, what in result.metrics.path.items():
        assert not what.startswith("sequential"), f"{stage}: {what}"
        assert what.startswith(("parallel", "lowered to columns, parallel")), f"{stage}: {what}"
        tasks = _tasks(what)
        assert tasks is not None and tasks > 1, f"{stage} ran in {tasks} task(s): {what}"


@pytest.fixture
def private_log(tmp_path) -> Path:
    """The sample log in a directory only this process's user can read."""
    home = tmp_path / "kernel-only"
    home.mkdir(mode=0o700)
    os.chmod(home, 0o700)
    log = home / "social.parquet"
    shutil.copy(SMALL, log)
    return log


@pytest.mark.cluster
@pytest.mark.parametrize("engine", ["spark-cluster"], indirect=True)
def test_the_workers_run_as_another_user(engine, test_cluster, private_log):
    worker = test_cluster.pids()["worker-1"]
    if os.geteuid() == 0:
        import pwd

        assert _uid_of(worker) == pwd.getpwnam(WORKER_USER).pw_uid
        assert _uid_of(worker) != os.geteuid()
        assert not _worker_can_read(private_log)
    else:  # cluster.sh says so: without root the workers run as this same user
        assert _uid_of(worker) == os.geteuid()


@pytest.mark.cluster
@pytest.mark.parametrize("engine", ["spark-cluster"], indirect=True)
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_a_program_on_the_cluster_is_serial_and_parallel(engine, test_cluster, private_log, name):
    """The log sits where the workers cannot read it: it reaches them through DataFrames."""
    program = rk.Program.load(PROGRAMS[name])
    log = rk.Log(private_log)
    # Five epochs: the prefix path (anti-spam) runs one task per epoch.
    got = rk.replay(program, log, engine="spark", master=test_cluster.master, epoch=10_000)
    assert_same_result(got, rk.replay(program, log))
    assert got.warnings == [] or all("ran in one task" not in w for w in got.warnings)
    assert_ran_as_planned(program, got)
    assert_parallel_stages_split(got)
    if name == "teams":  # its events came packed through Spark, not through the kernel's files
        assert "from where team_of is held" in got.metrics.path["busy"], got.metrics.path


@pytest.mark.cluster
@pytest.mark.parametrize("engine", ["spark-cluster"], indirect=True)
def test_a_file_log_reaches_the_cluster_through_the_shared_directory(
    engine, test_cluster, private_log, monkeypatch
):
    """A cluster with ``$RESTREAM_SHARED_DIR``: the log's ordered copy is put there once and
    read on the executors, by Spark's reader (the pass path) or the epochs' tasks (the prefix
    path), never read whole here."""
    program = rk.Program.load(PROGRAMS["ordinary"])
    want = rk.replay(program, rk.Log(private_log))
    lowered = rk.Program.load(PROGRAMS["antispam"])
    flagged = rk.replay(lowered, rk.Log(private_log))
    # Without a shared directory a log is sent from the kernel only below a limit.
    monkeypatch.setenv("RESTREAM_SENT_LOG_ROWS", "1000")
    with pytest.raises(rk.RestreamError, match="RESTREAM_SHARED_DIR"):
        rk.replay(program, rk.Log(private_log), engine="spark", master=test_cluster.master)
    shared = Path(tempfile.mkdtemp(prefix="restream-shared-dir-", dir="/tmp"))
    try:
        os.chmod(shared, 0o755)
        monkeypatch.setenv("RESTREAM_SHARED_DIR", str(shared))
        monkeypatch.setattr(rk.Log, "_load", _refuse_table)
        log = rk.Log(private_log)
        got = rk.replay(program, log, engine="spark", master=test_cluster.master)
        assert_same_result(got, want)
        assert_ran_as_planned(program, got)
        assert_parallel_stages_split(got)
        copied = list(shared.glob("*.parquet"))
        assert [p.name for p in copied] == [f"{log.fingerprint}.parquet"], copied
        if os.geteuid() == 0:
            assert _worker_can_read(copied[0]) and not _worker_can_read(private_log)
        got = rk.replay(lowered, log, engine="spark", master=test_cluster.master, epoch=10_000)
        assert_same_result(got, flagged)
        assert_parallel_stages_split(got)  # (lowered to columns, over five epochs)
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def _refuse_table(log: rk.Log):
    raise AssertionError(f"the kernel read the whole log {log!r}")


@pytest.fixture
def shared_uri_log():
    """The sample log as a directory of three Parquet files (several row groups each) that
    the workers' user can read, as a ``file://`` URI; and the same rows as one local file."""
    directory = Path(tempfile.mkdtemp(prefix="restream-shared-log-", dir="/tmp"))
    try:
        os.chmod(directory, 0o755)
        table = pq.read_table(SMALL)
        # Files whose path order is not their size order, and equal times across files.
        cuts = [0, 23_000, 31_000, table.num_rows]
        for i, name in enumerate(["part-a.parquet", "part-b.parquet", "part-c.parquet"]):
            piece = table.slice(cuts[i], cuts[i + 1] - cuts[i])
            pq.write_table(piece, directory / name, row_group_size=4_000)
            os.chmod(directory / name, 0o644)
        yield f"file://{directory}", SMALL
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.cluster
@pytest.mark.parametrize("engine", ["spark-cluster"], indirect=True)
def test_a_uri_log_is_read_by_sparks_reader(engine, test_cluster, shared_uri_log):
    uri, local = shared_uri_log
    if os.geteuid() == 0:
        assert _worker_can_read(Path(uri.removeprefix("file://")) / "part-a.parquet")
    program = rk.Program.load(PROGRAMS["antispam"])
    log = rk.Log(uri)
    got = rk.replay(program, log, engine="spark", master=test_cluster.master)
    assert log._table is None, "the kernel read the rows of a log given as a URI"
    assert len(log) == pq.read_metadata(local).num_rows
    want = rk.replay(program, rk.Log(local))
    assert_same_result(got, want)
    assert_ran_as_planned(program, got)
    assert_parallel_stages_split(got)
    # The serial engine reads the same URI through pyarrow, to the same result.
    assert_same_result(rk.replay(program, rk.Log(uri)), want)


@pytest.mark.cluster
@pytest.mark.parametrize("engine", ["spark-cluster"], indirect=True)
def test_a_uri_log_numbers_events_as_log_does(engine, test_cluster, tmp_path):
    """Equal times across files and within them: lsn is the stable order by ts, then the
    position (file path, row), exactly as Log numbers a local file; the kinds and times too."""
    import pyarrow as pa

    from restream_kit.engines.spark import get_session
    from restream_kit.engines.spark._uri_log import uri_frame

    directory = Path(tempfile.mkdtemp(prefix="restream-uri-order-", dir="/tmp"))
    try:
        os.chmod(directory, 0o755)
        for i, name in enumerate(["b.parquet", "a.parquet", "c.parquet"]):
            n = 3_000 + 700 * i
            piece = pa.table(
                {
                    "ts": [(j * 7 + i) % 40 for j in range(n)],
                    "kind": [None if j % 5 == 0 else "xyz"[j % 3] for j in range(n)],
                    "v": [f"{name}:{j}" for j in range(n)],
                }
            )
            pq.write_table(piece, directory / name, row_group_size=250)
            os.chmod(directory / name, 0o644)
        uri = f"file://{directory}"
        log = rk.Log(uri)
        session = get_session(test_cluster.master)
        got = uri_frame(session, log).orderBy("lsn").toArrow()
        want = rk.Log(uri).table
        assert got.cast(want.schema).equals(want)
        assert log.kinds == rk.Log(uri).kinds
        assert log.span_ms == rk.Log(uri).span_ms
        assert log.kinds_by_frequency() == rk.Log(uri).kinds_by_frequency()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def test_a_uri_only_spark_reads_is_one_clear_error_elsewhere():
    log = rk.Log("s3a://no-such-bucket/events.parquet")
    assert log.uri == "s3a://no-such-bucket/events.parquet"
    with pytest.raises(rk.RestreamError) as info:
        rk.replay(PROGRAMS["antispam"], log)
    assert "only the Spark engine reads it" in str(info.value)
    assert "s3a://no-such-bucket/events.parquet" in str(info.value)


# -- the prefix path on the cluster ----------------------------------------------------------

#: A rule that lowers to columns in three rounds (a count, a map written from it, an emit that
#: reads the map), with deletes and a second event kind.
LOUD_IPS = """
from restream_kit import emit, on, state

sent = state.Counter()
loud = state.Map(default=0)


@on("message")
def count(e):
    sent[e.src] += 1


@on("message")
def mark(e):
    if sent[e.src] > 20:
        loud[e.ip] = sent[e.src]
    elif e.has_email:
        del loud[e.ip]


@on("message", "friendship")
def report(e):
    if loud[e.ip] > 0:
        emit("loud", ip=e.ip, n=loud[e.ip], sender=e.src)
"""

LOWERED = {"antispam": PROGRAMS["antispam"], "loud_ips": LOUD_IPS}


def _persistent_rdds(session) -> set[int]:
    """The ids of the RDDs the session keeps cached (the DataFrames it persists included)."""
    return set(session.sparkContext._jsc.getPersistentRDDs().keys())


def _left_cached(session, before: set[int]) -> set[int]:
    """The RDDs cached now that were not cached ``before``: what a replay failed to drop.

    Only new ones count: Spark holds cached RDDs weakly, so one an earlier test left may be
    collected while this replay runs."""
    return _persistent_rdds(session) - before


def _cached_partitions(session) -> dict[int, int]:
    """Per cached RDD, how many of its partitions are in the executors' cache now."""
    infos = session.sparkContext._jsc.sc().getRDDStorageInfo()
    return {info.id(): info.numCachedPartitions() for info in infos}


@pytest.mark.cluster
@pytest.mark.parametrize("engine", ["spark-cluster"], indirect=True)
@pytest.mark.parametrize("name", sorted(LOWERED))
def test_a_lowered_rule_runs_the_prefix_path_on_the_cluster(
    engine, test_cluster, cluster_session, private_log, name
):
    """The log sits where the workers cannot read it: each epoch's events reach its task in a
    DataFrame that the first round caches and the replay drops. The layout said so before."""
    from restream_kit.engines import engines
    from restream_kit.engines.spark.prefix._driver import prefix_plan
    from restream_kit.io.progress import Progress, Recorder, StageStarted

    if os.geteuid() == 0:
        assert not _worker_can_read(private_log)
    program = rk.Program.load(LOWERED[name])
    log = rk.Log(private_log)
    low, why = prefix_plan(program, log)
    assert low is not None and low.levels > 1, why
    options = {"master": test_cluster.master, "epoch": 10_000}
    said = engines()["spark"].layout(program, log, options)
    assert set(said.values()) == {"lowered to columns, parallel over 5 epochs"}, said

    before = _persistent_rdds(cluster_session)
    recorder = Recorder()
    cached_at_round = {}

    def observer(event):
        recorder(event)
        if isinstance(event, StageStarted) and not event.stage.startswith("round 1"):
            cached_at_round[event.stage] = _cached_partitions(cluster_session)

    got = rk.replay(program, log, engine="spark", observer=observer, **options)
    assert_same_result(got, rk.replay(program, log))
    assert_ran_as_planned(program, got)
    assert_parallel_stages_split(got)
    # What ran is what the layout said: every round lowered, one task per epoch.
    assert len(got.metrics.path) == low.levels
    for stage, what in got.metrics.path.items():
        assert stage.startswith("round ") and what == (
            "lowered to columns, parallel over 5 epochs (5 tasks)"
        ), (stage, what)
    # Rounds after the first found every epoch's events in the executors' cache...
    assert len(cached_at_round) == low.levels - 1
    for stage, cached in cached_at_round.items():
        assert 5 in [n for rdd, n in cached.items() if rdd not in before], (stage, cached)
    # ... which the replay dropped when it ended.
    assert not _left_cached(cluster_session, before)
    # Nothing was written for the workers to read: no scratch copy of the log.
    scratch = Path(os.environ["RESTREAM_HOME"]) / "scratch"
    assert not scratch.exists() or not any(scratch.iterdir())
    # Progress moved while rounds ran (tasks finished one by one), not only between them.
    total = len(log)
    done = [e.events_done for e in recorder.of(Progress)]
    assert done == sorted(done) and done[-1] == total
    between = {total * j // low.levels for j in range(low.levels + 1)}
    assert set(done) - between, done


@pytest.mark.cluster
@pytest.mark.parametrize("engine", ["spark-cluster"], indirect=True)
def test_a_cancelled_prefix_replay_on_the_cluster_drops_its_cached_events(
    engine, test_cluster, cluster_session, private_log
):
    from restream_kit.io.progress import Cancelled, CancelToken, ReplayFinished, StageFinished

    token = CancelToken()
    ended = []

    def observer(event):
        if isinstance(event, StageFinished):
            token.cancel()  # after round 1: its events are cached by then
        if isinstance(event, ReplayFinished):
            ended.append(event)

    before = _persistent_rdds(cluster_session)
    with pytest.raises(Cancelled):
        rk.replay(
            PROGRAMS["antispam"], rk.Log(private_log), engine="spark", path="prefix",
            master=test_cluster.master, epoch=10_000, observer=observer, cancel=token,
        )  # fmt: skip
    assert [(e.ok, e.error) for e in ended] == [(False, "replay cancelled")]
    assert not _left_cached(cluster_session, before)


def _checkpointed_on(cluster, name: str, private_log, tmp_path) -> tuple:
    """Program ``name`` over the private log in five epochs, checkpointed by the serial
    engine and on the cluster: the cluster's result (the serial one's, each parallel stage
    split) and both checkpoints."""
    log = rk.Log(private_log)
    program = rk.Program.from_file(PROGRAMS[name])
    serial_ck, spark_ck = tmp_path / "serial", tmp_path / "spark"
    want = rk.replay(program, log, epoch=10_000, checkpoint=serial_ck)
    got = rk.replay(
        program, log, engine="spark", master=cluster.master, epoch=10_000, checkpoint=spark_ck
    )
    assert_same_result(got, want)
    assert_parallel_stages_split(got)
    return got, serial_ck, spark_ck


@pytest.mark.cluster
@pytest.mark.parametrize("engine", ["spark-cluster"], indirect=True)
def test_a_checkpointed_prefix_replay_on_the_cluster_commits_the_serial_engines_epochs(
    engine, test_cluster, cluster_session, private_log, tmp_path
):
    """A checkpoint's five epochs run several to a task, their events shipped to workers
    that cannot read the log, and each epoch committed is the serial engine's."""
    from restream_kit.io import checkpoint

    got, serial_ck, spark_ck = _checkpointed_on(test_cluster, "antispam", private_log, tmp_path)
    assert all(_tasks(what) < 5 for what in got.metrics.path.values()), got.metrics.path
    for k in range(5):
        a, b = checkpoint.read(serial_ck, k), checkpoint.read(spark_ck, k)
        assert (a.epoch, a.done, a.state) == (b.epoch, b.done, b.state), f"epoch {k}"


@pytest.mark.cluster
@pytest.mark.parametrize("engine", ["spark-cluster"], indirect=True)
def test_a_checkpointed_pass_replay_on_the_cluster_commits_the_serial_engines_epochs(
    engine, test_cluster, cluster_session, private_log, tmp_path
):
    """The windowed rule (timed writes, scheduled closes waiting across epochs' ends) with a
    checkpoint: its passes run once over the log on workers that cannot read it, and each
    committed epoch (state, what waits, rows) is the serial engine's."""
    from restream_kit.io import checkpoint

    got, serial_ck, spark_ck = _checkpointed_on(test_cluster, "windows", private_log, tmp_path)
    assert all("5 epochs' ends committed" in what for what in got.metrics.path.values())
    for k in range(5):
        a, b = checkpoint.read(serial_ck, k), checkpoint.read(spark_ck, k)
        assert (a.done, a.state["stores"]) == (b.done, b.state["stores"]), f"epoch {k}"
        if k < 4:  # (each engine numbers what waits its own way: compared in order)
            for part in ("future", "scheduled"):
                mine = [e[:1] + e[2:] for e in sorted(a.state[part], key=lambda e: e[:2])]
                theirs = [e[:1] + e[2:] for e in sorted(b.state[part], key=lambda e: e[:2])]
                assert [repr(e) for e in mine] == [repr(e) for e in theirs], (k, part)
        rows = [checkpoint.load_value(d / f"epoch-{k:06d}", "rows") for d in (serial_ck, spark_ck)]
        assert rows[0] == rows[1], f"epoch {k}: rows"
    # Resumed on the cluster as if killed after two epochs: the adding pass keeps the serial
    # engine's loop, its share of the start going to the workers as rows (``passes._start_shares``).
    keep_first_epochs(spark_ck, 2)
    resumed = rk.replay(
        rk.Program.from_file(PROGRAMS["windows"]), rk.Log(private_log), engine="spark",
        master=test_cluster.master, epoch=10_000, checkpoint=spark_ck, resume=True,
    )  # fmt: skip
    assert resumed.resumed_from_epoch == 2
    assert_same_result(resumed, got)
    assert "share of the state" in resumed.metrics.path["track"], resumed.metrics.path
    assert_same_commits(serial_ck, spark_ck, range(2, 5))


def test_the_layout_says_which_path_each_master_takes():
    """Before any replay, as the engine will choose: lowered over epochs locally and on a
    spark:// cluster; the passes over Spark Connect and for a log Spark's reader reads."""
    from restream_kit.engines import engines

    spark = engines()["spark"]
    program = rk.Program.load(PROGRAMS["antispam"])
    log = rk.Log(SMALL)
    for master in (None, "local[2]", "spark://127.0.0.1:7077"):
        said = spark.layout(program, log, {"master": master, "epoch": 10_000})
        assert set(said.values()) == {"lowered to columns, parallel over 5 epochs"}, master
    one = spark.layout(program, log, {"master": "spark://127.0.0.1:7077"})
    assert set(one.values()) == {"lowered to columns, parallel over 1 epoch"}
    passes = spark.layout(program)
    assert all(what.startswith("parallel over") for what in passes.values()), passes
    assert spark.layout(program, log, {"master": "sc://127.0.0.1:15002"}) == passes
    assert spark.layout(program, rk.Log(f"file://{SMALL}"), {"master": "local[2]"}) == passes
