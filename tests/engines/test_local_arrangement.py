"""Passes whose events the driver arranges on a local master (``passes._local_arrangement``):
balanced partitions of keys, a folder of Arrow files per arrangement, values routed by
marker rows.

The threshold is lowered so that small logs take that path; every replay is checked against
the serial engine, and against what ran.
"""

from __future__ import annotations

import os
import pickle
import textwrap
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from engine_matrix import assert_ran_as_planned, assert_same_result

import restream_kit as rk
from restream_kit.engines.spark._events import prepare_events
from restream_kit.engines.spark.passes import _local_arrangement as local
from restream_kit.engines.spark.passes._zipped import VALUES, ZipError

pytestmark = pytest.mark.filterwarnings("ignore::restream_kit.RestreamWarning")

#: A float per sender, a sliding count per IP by a timed write, and a reader of both: two
#: passes, the second zipped to the values the first serves (bench/programs/ordinary.py).
ORDINARY = """
from restream_kit import emit, on, state

rate = state.Map(default=0.0)
ip_hour = state.Counter()

def smooth(old, x, alpha=0.25):
    return (1 - alpha) * old + alpha * x

@on("message")
def sender_rate(e):
    rate[e.src] = smooth(rate[e.src], 1.0 if e.has_email else 0.0)

@on("message")
def ip_window(e):
    ip_hour[e.ip] += 1
    ip_hour.add(e.ip, -1, at=e.ts + 50)

@on("message")
def suspicious(e):
    if rate.get(e.src, 0.0) > 0.3 and ip_hour[e.ip] > 2:
        emit("suspicious", sender=e.src, ip=e.ip, rate=round(rate[e.src], 4))
"""


def social_log(events: int, seed: int = 5) -> rk.Log:
    from sample_data import social

    return rk.Log(social.generate(events, seed=seed, users=60))


def arranged_replay(program: rk.Program, log: rk.Log, **options) -> rk.Result:
    got = rk.replay(program, log, engine="spark", master="local[2]", **options)
    assert_same_result(got, rk.replay(program, log))
    assert_ran_as_planned(program, got)
    return got


@pytest.fixture
def small_logs_arranged(monkeypatch, spark_session):
    monkeypatch.setattr(local, "LOCAL_ROWS", 100)
    monkeypatch.delenv("RESTREAM_SPARK_LOCAL_ARRANGE", raising=False)
    return spark_session


def test_the_driver_arranges_balanced_partitions_and_both_passes_equal_serial(
    small_logs_arranged,
):
    program = rk.Program.from_source(ORDINARY, name="ordinary")
    log = social_log(3000)
    got = arranged_replay(program, log)
    path = got.metrics.path
    for stage in ("sender_rate", "ip_window", "suspicious"):
        assert "arranged by the driver" in path[stage], path
        assert path[stage].startswith("parallel over 2 partitions"), path
    assert "joined to the values read upstream" in path["suspicious"], path
    messages = sum(1 for k in log.table.column("kind").to_pylist() if k == "message")
    for stage, events in got.metrics.task_events.items():
        assert len(events) == 2 and min(events) > 0, (stage, events)
        assert sum(events) == messages, (stage, events)
    # One folder per arrangement, named by the log: a second replay, here or in another
    # process (the in-process cache forgotten), maps the same files and equals serial again.
    scratch = Path(os.environ["RESTREAM_HOME"]) / "scratch"
    files = sorted(scratch.glob(f"{log.fingerprint}.*.arranged/*.arrow"))
    assert len({f.parent for f in files}) == 2, files
    inodes = [f.stat().st_ino for f in files]  # a file written again is a new inode
    local._FILES.clear()
    arranged_replay(program, log)
    assert sorted(scratch.glob(f"{log.fingerprint}.*.arranged/*.arrow")) == files
    assert [f.stat().st_ino for f in files] == inodes
    # The values the passes sent each other went through files of the replay's own, gone.
    assert not list(scratch.glob("values-*")), list(scratch.iterdir())


def test_without_the_driver_the_passes_shuffle_as_before(small_logs_arranged, monkeypatch):
    monkeypatch.setenv("RESTREAM_SPARK_LOCAL_ARRANGE", "0")
    program = rk.Program.from_source(ORDINARY, name="ordinary")
    got = arranged_replay(program, social_log(1500))
    assert not any("arranged by the driver" in what for what in got.metrics.path.values())


def test_keys_the_driver_cannot_hash_as_python_compares_them_keep_the_shuffle(
    small_logs_arranged,
):
    """A float key (``-0.0 == 0.0`` in Python, not to a hash) is partitioned by Spark."""
    program = rk.Program.from_source(
        textwrap.dedent(
            """
            from restream_kit import emit, on, state
            n = state.Counter()

            @on("reading")
            def count(e):
                n[e.level] += 1
                emit("seen", level=e.level, n=n[e.level])
            """
        ),
        name="floats",
    )
    levels = [0.0, -0.0, 1.5, 2.5, 1.5, -0.0, 0.0, 3.0] * 40
    log = rk.Log([{"ts": i, "kind": "reading", "level": v} for i, v in enumerate(levels)])
    got = arranged_replay(program, log)
    assert not any("arranged by the driver" in what for what in got.metrics.path.values())


def test_a_heavy_key_gets_a_partition_and_the_others_share_the_rest():
    """Keys are dealt largest first into the emptiest partition; equal keys meet; partitions
    are numbered by size, largest first; events of other kinds are in none (as the
    executors put them: the deal of the keys' hashes, counted over the events of the kind)."""
    rng = np.random.default_rng(1)
    keys = np.concatenate([np.full(5000, 7), rng.integers(100, 400, 6000)])
    rng.shuffle(keys)
    kinds = np.where(np.arange(len(keys)) % 10 == 0, "other", "hit")
    log = rk.Log(
        pa.table({"ts": np.arange(len(keys)), "kind": kinds, "k": keys, "s": keys.astype(str)})
    )
    table = prepare_events(log).table
    hit = kinds == "hit"
    for by in (("k",), ("s",), ("k", "s")):
        hashes = local.key_hashes(table, by)
        found, counts = np.unique(hashes[hit], return_counts=True)
        deal = local.dealt(found, counts, 3)
        parts = np.where(hit, deal.of(hashes), -1)
        assert (parts[~hit] == -1).all() and (parts[hit] >= 0).all()
        for key in np.unique(keys[hit]):
            assert len(set(parts[hit & (keys == key)])) == 1, key
        loads = np.bincount(parts[hit], minlength=3)
        assert list(loads) == sorted(loads, reverse=True), loads
        heavy = int((keys[hit] == 7).sum())
        assert parts[hit & (keys == 7)][0] == 0 and loads[0] == heavy, loads
        # The rest is split within one key's events of even.
        largest_other = max(np.bincount(keys[hit & (keys != 7)]))
        assert abs(int(loads[1]) - int(loads[2])) <= largest_other, loads


def test_a_task_takes_its_marker_its_partitions_values_and_its_events(tmp_path):
    table = pa.table({"lsn": [0, 1, 2, 3], "ts": [0, 1, 2, 3]})
    for name, part in (("p0.arrow", table.slice(0, 3)), ("p1.arrow", table.slice(3))):
        with (
            pa.OSFile(str(tmp_path / name), "wb") as sink,
            pa.ipc.new_file(sink, table.schema) as writer,
        ):
            writer.write_batch(part.to_batches()[0])
    sent = tmp_path / "v1.1.x.arrow"
    sent.write_bytes(b"packed values")
    where = local.LocalInput(str(tmp_path), (("p0.arrow",), ("p1.arrow",)), ((), (str(sent),)))

    def markers(*marks):
        return [pa.record_batch([pa.array(marks, pa.int32())], names=[local.MARK])]

    assert local.local_part(iter(markers(1))) == 1
    got = list(local.local_batches(where, 1))
    assert got[0].column(VALUES).to_pylist() == [b"packed values"]
    assert [b.column("lsn").to_pylist() for b in got[1:]] == [[3]]
    got = list(local.local_batches(where, 0))
    assert [b.column("lsn").to_pylist() for b in got] == [[0, 1, 2]]
    for wrong in (markers(0, 1), markers(), []):
        with pytest.raises(ZipError):
            local.local_part(iter(wrong))
    # A replay from a committed epoch: the events after its last, and each partition's share.
    share = tmp_path / "start-0-0.bin"
    share.write_bytes(pickle.dumps([("value", "n", "a", 1)]))
    started = replace(where, after=1, starts=(str(share), ""))
    assert [b.column("lsn").to_pylist() for b in local.local_batches(started, 0)] == [[2]]
    assert [b.column("lsn").to_pylist() for b in list(local.local_batches(started, 1))[1:]] == [[3]]
    assert local.local_start(started, 0) == [("value", "n", "a", 1)]
    assert local.local_start(started, 1) is None
    assert local.local_start(where, 0) is None


def test_markers_put_one_row_in_each_partition_with_no_shuffle(spark_session):
    for n in (1, 2, 5):
        frame = local.marker_frame(spark_session, n)
        assert frame.rdd.getNumPartitions() == n
        rows = frame.selectExpr(local.MARK, "spark_partition_id() AS p").collect()
        assert sorted((r[local.MARK], r.p) for r in rows) == [(i, i) for i in range(n)]


def test_a_log_keeps_its_most_recently_used_arrangements_on_disk(tmp_path):
    for i in range(local._KEPT_ON_DISK + 2):
        path = tmp_path / f"abc.{i:02d}.arranged"
        path.mkdir()
        (path / "_parts.json").write_text("[]")
        os.utime(path, ns=(i * 10**9, i * 10**9))
    other = tmp_path / "other.00.arranged"
    other.mkdir()
    os.utime(other, ns=(0, 0))
    local._prune(tmp_path, "abc")
    left = sorted(p.name for p in tmp_path.glob("abc.*"))
    assert left == [f"abc.{i:02d}.arranged" for i in range(2, local._KEPT_ON_DISK + 2)]
    assert other.exists()  # another log's arrangements are its own
