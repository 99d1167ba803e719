"""Checkpoints that commit as the replay goes (``checkpoint_every``): the Spark engine's waves.

A checkpointed Spark replay runs its rounds (prefix path) or passes (pass path) over a slice
of the log at a time and commits that slice's epochs when it ends, so commits come while the
rest of the log is still to run. A replay killed after a commit resumes from it, and every
result is the uncheckpointed one, row for row and state for state. The serial engine commits
each epoch as it replays it. The kills are real: a ``restream replay`` process killed with
SIGKILL once its first commit is on disk.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import pyarrow.parquet as pq
import pytest
from engine_matrix import assert_ran_as_planned, assert_same_result, social_sample

import restream_kit as rk
from restream_kit.engines.spark import _waves
from restream_kit.engines.spark._waves import FIRST_RATE, WORKERS_STARTED, Waves
from restream_kit.engines.spark.prefix import _commits as _prefix_commits
from restream_kit.io._every import parse_every
from restream_kit.io.epochs import Epoch
from restream_kit.io.progress import EpochFinished, Progress, ReplayStarted, StageStarted
from restream_kit.model.errors import RestreamError

pytestmark = pytest.mark.filterwarnings("ignore::restream_kit.RestreamWarning")

ROOT = Path(__file__).resolve().parents[2]
RULES = {
    "prefix": ROOT / "examples" / "antispam.py",  # lowers: the prefix path
    "passes": ROOT / "bench" / "programs" / "windows.py",  # timed closes: the pass path
}
EPOCH = 1000


@pytest.fixture(scope="module")
def log_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("waves") / "social.parquet"
    pq.write_table(social_sample(6000).table.drop_columns(["lsn"]), path)
    return path


def _manifest(directory: Path) -> dict:
    return json.loads((directory / "manifest.json").read_text())


def _spark_waves(program, log, path: str, ck: Path, every, observe) -> rk.Result:
    """A checkpointed Spark replay on ``path`` ("prefix" or "passes") of epochs of ``EPOCH``
    events, committed every ``every`` (events or a time), watched by ``observe``."""
    return rk.replay(
        program,
        log,
        engine="spark",
        master="local[2]",
        path=path,
        epoch=EPOCH,
        checkpoint=ck,
        checkpoint_every=every,
        observer=observe,
    )


@pytest.mark.parametrize("path", sorted(RULES))
def test_a_checkpointed_replay_commits_before_its_end(path, log_file, tmp_path, spark_session):
    program, log = rk.Program.load(RULES[path]), rk.Log(log_file)
    want = rk.replay(program, log)
    ck = tmp_path / "ck"
    seen: list = []  # what came, and at each epoch's end what the checkpoint held
    landed: list = []  # what it held once a commit was on disk, during the second wave

    def held() -> tuple:
        if not (ck / "manifest.json").exists():
            return ("commit", 0, False)
        manifest = _manifest(ck)
        return ("commit", len(manifest["epochs"]), manifest["complete"])

    def observe(event):
        if isinstance(event, EpochFinished):
            seen.append(held())
        elif isinstance(event, StageStarted):
            seen.append(("stage",))
            if len(seen) > 1 and seen[-2][0] == "commit" and not landed:
                # The second wave begins: the first's commits are written beside it (on
                # the checkpoint's writer thread), and the replay waits here until they land.
                deadline = time.monotonic() + 60
                while held()[1] == 0:
                    assert time.monotonic() < deadline, "the first wave's commits never landed"
                    time.sleep(0.01)
                landed.append(held())

    # States of 50 keys or more are carried from wave to wave as columns (``_Kept``).
    with mock.patch.object(_prefix_commits, "COLUMN_KEYS", 50):
        got = _spark_waves(program, log, path, ck, 3 * EPOCH, observe)
    assert_same_result(got, want)
    assert "2 waves" in got.metrics.path["checkpoint"], got.metrics.path
    assert got.resumed_from_epoch is None and got.metrics.events == len(log)
    # The first wave's epochs were on disk while rounds or passes over later events were
    # still to run, and the last epoch's end comes with the checkpoint complete.
    assert landed and 1 <= landed[0][1] <= 3 and not landed[0][2], (landed, seen)
    assert seen[-1] == ("commit", 6, True)


def test_checkpoint_every_is_checked(log_file):
    program = rk.Program.load(RULES["passes"])
    with pytest.raises(RestreamError, match="neither a number of events nor a time"):
        rk.replay(program, log_file, checkpoint="unused", checkpoint_every="soon")
    with pytest.raises(RestreamError, match="needs a checkpoint directory"):
        rk.replay(program, log_file, checkpoint_every="5s")


# A handler that works a while per event, so that a serial replay outlives its first commit.
SLOW_SERIAL = """
from restream_kit import emit, on, state

seen = state.Counter()

@on("message")
def count(e):
    work = 0
    for i in range(3000):
        work += i % 7
    seen[e.src] += 1
    if seen[e.src] % 50 == 0:
        emit("busy", src=e.src, n=seen[e.src], work=work)
"""

KILLED = {
    # name: (engine options on the command line, program)
    "prefix": (["--engine", "spark", "--master", "local[2]"], RULES["prefix"]),
    "passes": (["--engine", "spark", "--master", "local[2]"], RULES["passes"]),
    "serial": ([], None),
}


@pytest.mark.parametrize("name", sorted(KILLED))
def test_a_replay_killed_after_a_commit_resumes_from_it(name, log_file, tmp_path, request):
    engine_args, program_path = KILLED[name]
    if program_path is None:
        program_path = tmp_path / "slow.py"
        program_path.write_text(SLOW_SERIAL)
    if engine_args:
        request.getfixturevalue("spark_session")  # (the resume below runs in this process)
    ck = tmp_path / "ck"
    env = {**os.environ, "RESTREAM_SPARK_PATH": name if engine_args else "auto"}
    command = [
        sys.executable,
        "-m",
        "restream_kit",
        "replay",
        str(program_path),
        "--log",
        str(log_file),
        *engine_args,
        "--epoch",
        str(EPOCH // 2),
        "--checkpoint",
        str(ck),
        "--checkpoint-every",
        str(EPOCH // 2),
        "--quiet",
        "--no-record",
    ]
    proc = subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its JVM goes with it
    )
    try:
        deadline = time.monotonic() + 120
        while not (ck / "manifest.json").exists() or not _manifest(ck)["epochs"]:
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "no commit in 120 s"
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    killed = _manifest(ck)
    committed = len(killed["epochs"])
    assert 1 <= committed < 12 and not killed["complete"], killed["epochs"]

    program, log = rk.Program.load(program_path), rk.Log(log_file)
    want = rk.replay(program, log)
    options = dict(engine="spark", master="local[2]") if engine_args else {}
    got = rk.replay(program, log, **options, epoch=EPOCH // 2, checkpoint=ck, resume=True)
    assert got.resumed_from_epoch == committed
    assert_same_result(got, want)
    assert _manifest(ck)["complete"]


def test_waves_are_whole_epochs_of_about_the_interval():
    epochs = [Epoch(i, 100 * i, 100 * (i + 1)) for i in range(10)]
    waves = Waves(parse_every(250), epochs, FIRST_RATE)
    ends = []
    while True:
        ends.append(waves.next())
        waves.ran()
        if ends[-1] is None:
            break
    # 300 events each (the epoch that reaches 250 included), the rest in the last wave.
    assert ends == [2, 5, 8, None]
    # A time: the first wave at the assumed rate, later ones at the rate measured so far.
    timed = Waves(
        parse_every("1s"), [Epoch(i, 1000 * i, 1000 * (i + 1)) for i in range(500)], FIRST_RATE
    )
    first = timed.next()
    assert first == FIRST_RATE // 1000 - 1
    timed.seconds, timed.events = 1.0, 10_000  # as if it had run at 10,000 events/s
    assert timed.next() == first + 10
    assert parse_every("5min") == ("time", 300.0) and parse_every("500000")[0] == "events"


@pytest.mark.parametrize("path", sorted(RULES))
def test_the_first_commit_comes_within_the_bound(
    path, log_file, tmp_path, spark_session, monkeypatch
):
    """A timed interval's first wave is sized at ``FIRST_RATE`` (whole epochs, at least one),
    not the whole log, and the path's Python workers are started before it: by the time the
    first wave begins, its checkpoint is open and the replay's jobs have started the
    workers. The commit timeline is the one ``bench/_kills.py`` reads."""
    # As in a fresh process: no rate remembered from an earlier replay of this program and
    # log (the first test's), which would size the first wave by it instead.
    monkeypatch.setattr(_waves, "_RATES", {})
    program, log = rk.Program.load(RULES[path]), rk.Log(log_file)
    ck = tmp_path / "ck"
    group: list = []  # the replay's Spark jobs when the first wave began
    timeline: list = []  # ("ran", events replayed so far) and ("commit", events committed)
    sc = spark_session.sparkContext

    def observe(event):
        if isinstance(event, ReplayStarted) and not group:
            assert ck.exists()  # (opened after the workers' start)
            # (the observer runs on the replay's thread, in its job group)
            replay_group = sc.getLocalProperty("spark.jobGroup.id")
            group.append(len(sc.statusTracker().getJobIdsForGroup(replay_group)))
        elif isinstance(event, Progress):
            timeline.append(("ran", event.events_done))
        elif isinstance(event, EpochFinished):
            timeline.append(("commit", event.events_done))

    interval = 0.1  # s: at FIRST_RATE, 2,000 events (two epochs) in the first wave
    got = _spark_waves(program, log, path, ck, f"{interval * 1000:g}ms", observe)
    assert_same_result(got, rk.replay(program, log))
    assert_ran_as_planned(program, got)
    assert "waves" in got.metrics.path["checkpoint"], got.metrics.path
    assert group and group[0] >= 1, group  # the workers' job ran before the first wave
    assert got.metrics.stages[WORKERS_STARTED] > 0
    first = next(n for what, n in timeline if what == "commit")
    bound = -(-FIRST_RATE * interval // EPOCH) * EPOCH  # the interval's events, whole epochs
    assert first <= bound, timeline
    # Nothing beyond the first wave was replayed before its commit.
    before = timeline[: timeline.index(("commit", first))]
    assert max(n for what, n in before if what == "ran") <= bound, timeline
    assert _manifest(ck)["complete"] and len(log) > 2 * bound
