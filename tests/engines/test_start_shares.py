"""A resume and a ``start_from`` in the serial engine's loop.

Where the driver arranges the passes' events (``passes._local_arrangement``), a replay from a
committed epoch keeps that arrangement: each task gets its partition's share of the start
state (values, timed writes still waiting) and its events after the start
(``passes._start_shares``). Where Spark shuffles the events (the windows: scheduled closes), a
pass fed by nothing but the start gets its share as rows before its events. Its result
and every epoch it commits must be the serial engine's, and ``metrics.path`` must say that
the tasks started from their shares.
"""

from __future__ import annotations

import json
from pathlib import Path
from unittest import mock

import pytest
from engine_matrix import assert_ran_as_planned, assert_same_commits, keep_first_epochs, waiting

import restream_kit as rk
from restream_kit.engines.spark.passes import _local_arrangement as _local_arrangement
from restream_kit.io import checkpoint

SMALL = "sample_data/social_small.parquet"  # 50,000 events over 7 hours
EPOCH = 12_500  # four epochs

BENCH = Path(__file__).resolve().parents[2] / "bench" / "programs"
# The bench's ordinary rule, with a key deleted now and then (a share's key that its task
# deletes must be gone from the result), and, under ``on_error``, a run raising now and then.
RULE = (
    (BENCH / "ordinary.py")
    .read_text()
    .replace(
        "    rate[e.src] = smooth(rate[e.src], 1.0 if e.has_email else 0.0)\n",
        "    rate[e.src] = smooth(rate[e.src], 1.0 if e.has_email else 0.0)\n"
        "    if e.dst % 61 == 3:\n        del rate[e.src]\n    RAISE\n",
    )
)
assert "RAISE" in RULE


def _program(on_error: str) -> rk.Program:
    raising = 'if e.dst % 97 == 5:\n        raise ValueError("bad dst")'
    source = RULE.replace("RAISE", raising if on_error != "stop" else "pass")
    return rk.Program.from_source(source, name="shares")


def _same(got: rk.Result, want: rk.Result) -> None:
    assert sorted(got.tables) == sorted(want.tables)
    for name in want.tables:
        assert got.tables[name].to_pylist() == want.tables[name].to_pylist(), name
    assert got.state == want.state
    if want.quarantine is not None:
        assert got.quarantine.to_pylist() == want.quarantine.to_pylist()


def _dealt(result: rk.Result) -> None:
    """Every stage ran over two tasks arranged by the driver, started from their shares."""
    for stage, what in result.metrics.path.items():
        assert "arranged by the driver" in what, (stage, what)
        assert "share of the state" in what, (stage, what)
        assert "(2 tasks)" in what, (stage, what)


@pytest.mark.parametrize("on_error", ["stop", "quarantine"])
def test_a_resume_starts_each_task_from_its_share(on_error, spark_session, tmp_path):
    """A checkpoint, as if killed after two of its four epochs, resumed: the rest of the log
    once, in the serial engine's loop, every epoch committed as the serial engine does."""
    log = rk.Log(SMALL)
    program = _program(on_error)
    options = dict(epoch=EPOCH, on_error=on_error)
    want = rk.replay(program, log, checkpoint=tmp_path / "serial", **options)
    if on_error != "stop":
        assert want.quarantine.num_rows > 0
    # The start holds timed writes still waiting, and keys no later event has.
    start = checkpoint.read(tmp_path / "serial", 1)
    assert waiting(start.state)[0]
    later = set(log.table.column("src").to_pylist()[start.done :])
    assert set(start.state["stores"]["rate"]) - later
    ck = tmp_path / "spark"
    spark = dict(engine="spark", partitions=2, checkpoint=ck, **options)
    with mock.patch.object(_local_arrangement, "LOCAL_ROWS", 0):
        _same(rk.replay(program, log, **spark), want)
        keep_first_epochs(ck, 2)
        got = rk.replay(program, log, **spark, resume=True)
    assert got.resumed_from_epoch == 2
    _same(got, want)
    assert_ran_as_planned(program, got)
    _dealt(got)
    assert_same_commits(tmp_path / "serial", ck, range(2, 4))


@pytest.mark.parametrize("epoch", [0, 2])
def test_a_start_from_starts_each_task_from_its_share(epoch, spark_session, tmp_path):
    """Started from a committed epoch, with and without a checkpoint of its own: the serial
    engine's rest of the log."""
    log = rk.Log(SMALL)
    program = _program("stop")
    rk.replay(program, log, epoch=EPOCH, checkpoint=tmp_path / "serial")
    start = (tmp_path / "serial", epoch)
    want = rk.replay(program, log, start_from=start, epoch=EPOCH, checkpoint=tmp_path / "want")
    with mock.patch.object(_local_arrangement, "LOCAL_ROWS", 0):
        got = rk.replay(program, log, engine="spark", partitions=2, start_from=start)
        _same(got, want)
        _dealt(got)
        ck = tmp_path / "got"
        got = rk.replay(
            program, log, engine="spark", partitions=2, start_from=start, epoch=EPOCH,
            checkpoint=ck,
        )  # fmt: skip
    _same(got, want)
    _dealt(got)
    epochs = [e["epoch"] for e in json.loads((ck / "manifest.json").read_text())["epochs"]]
    assert epochs == list(range(epoch + 1, 4))
    assert_same_commits(tmp_path / "want", ck, epochs)


# The bench's windows (tumbling closes scheduled, a sliding count by timed writes), raising
# after its adds now and then under ``on_error``.
WINDOWS = (BENCH / "windows.py").read_text()


@pytest.mark.parametrize("on_error", ["stop", "quarantine"])
def test_a_shuffled_pass_takes_its_share_as_rows(on_error, spark_session, tmp_path):
    """The windows' adding pass, its events shuffled by Spark, keeps the serial engine's
    loop on a resume and a ``start_from``: its share of the start (the sliding counts and
    their timed writes) comes as rows before its events; the closing pass takes the rest
    (the tumbling counts, the closes waiting) as rows in the general task."""
    log = rk.Log(SMALL)
    source = WINDOWS
    if on_error != "stop":
        source = source.replace(
            "    if per_ip.value(e.ip) > 30:",
            '    if e.dst % 31 == 4:\n        raise ValueError("after the adds")\n'
            "    if per_ip.value(e.ip) > 30:",
        )
        assert "after the adds" in source
    program = rk.Program.from_source(source, name="windows")
    options = dict(epoch=EPOCH, on_error=on_error)
    want = rk.replay(program, log, checkpoint=tmp_path / "serial", **options)
    start = checkpoint.read(tmp_path / "serial", 1)
    assert waiting(start.state)[0] and waiting(start.state)[1]  # timed writes, closes
    ck = tmp_path / "spark"
    spark = dict(engine="spark", partitions=2, checkpoint=ck, **options)
    _same(rk.replay(program, log, **spark), want)
    keep_first_epochs(ck, 2)
    got = rk.replay(program, log, **spark, resume=True)
    _same(got, want)
    assert_ran_as_planned(program, got)
    assert_same_commits(tmp_path / "serial", ck, range(2, 4))
    track = got.metrics.path["track"]
    assert "share of the state" in track and "(2 tasks)" in track, track
    assert "share of the state" not in got.metrics.path["per_sender__close"]
    # Started from the serial engine's second epoch: the serial engine's rest.
    start_from = (tmp_path / "serial", 1)
    want = rk.replay(program, log, start_from=start_from, on_error=on_error)
    got = rk.replay(
        program, log, engine="spark", partitions=2, start_from=start_from, on_error=on_error
    )
    _same(got, want)
    assert "share of the state" in got.metrics.path["track"]


# Timed writes that do not commute, many at one time for one key: each event sets its IP's
# value at the next two-hour mark from the log's start, then adds one there. Only their
# order, the serial engine's, gives the right value where a mark's writes land. A count per
# key besides must continue from the start's.
ORDERED = """\
from restream_kit import on, state

last = state.Map(default=0)
seen = state.Counter()  # (a start's count in the wrong partition would start again from 0)


@on("message")
def mark(e):
    at = T0 + ((e.ts - T0) // 7_200_000 + 1) * 7_200_000
    last.set(KEY, e.dst, at=at)
    last.add(KEY, 1, at=at)
    seen[KEY] += 1
"""


@pytest.mark.parametrize("key", ["e.ip", "(e.ip, e.src)"])
@pytest.mark.parametrize("arranged", [True, False])
def test_restored_timed_writes_keep_the_serial_engines_order(
    arranged, key, spark_session, tmp_path
):
    """A start whose waiting writes to one key at one time must apply in the serial
    engine's order, before the writes made after the start for that time: dealt to the
    driver's partitions (``arranged``) or as rows, keyed by a value or by a tuple (a share's
    key matched as a tuple, or split into the partition's columns). Three epochs: the start
    after the first (2.5 hours in) holds writes for the 4-hour mark, and the second's commit
    (5 hours in) holds what they left."""
    log = rk.Log(SMALL)
    first = log.table.column("ts")[0].as_py()
    source = ORDERED.replace("T0", str(first)).replace("KEY", key)
    program = rk.Program.from_source(source, name="ordered")
    options = dict(epoch=17_000)
    rk.replay(program, log, checkpoint=tmp_path / "serial", **options)
    start_from = (tmp_path / "serial", 0)
    waits = [(at, key) for at, _n, _s, _op, key, _a in checkpoint.read(*start_from).state["future"]]
    assert len(waits) - len(set(waits)) > 100  # many writes to one key at one time
    want = rk.replay(program, log, start_from=start_from, checkpoint=tmp_path / "want", **options)
    large = mock.patch.object(_local_arrangement, "LOCAL_ROWS", 0 if arranged else 10**9)
    with large:
        got = rk.replay(
            program, log, engine="spark", partitions=2, start_from=start_from,
            checkpoint=tmp_path / "got", **options,
        )  # fmt: skip
    _same(got, want)
    assert_ran_as_planned(program, got)
    assert got.metrics.task_events["mark"] and all(got.metrics.task_events["mark"])
    assert_same_commits(tmp_path / "want", tmp_path / "got", [1, 2])
    assert "share of the state" in got.metrics.path["mark"], got.metrics.path
    assert ("arranged by the driver" in got.metrics.path["mark"]) == arranged
    assert isinstance(next(iter(got.state["last"])), tuple) == (key != "e.ip")


# Found by the property test of resumes: ``h0``'s pass takes its share of ``s1``'s waiting
# writes itself, the fold of ``s0`` gets its from the driver's rows. Both writes wait for
# time 5, and the resumed replay committed them in the other order than the serial engine.
TWO_ROUTES = """
from restream_kit import state, on, emit

s0 = state.Counter()
s1 = state.Counter()


@on("a", "b")
def h0(e):
    s0[e.k] += e.v
    del s0[e.k]
    s1.add(e.k, -2, at=e.ts + 4)
    s0[e.k] += -2


@on("b")
def h1(e):
    s0.add(e.k, e.v, at=e.ts + 3)
"""
TWO_ROUTES_LOG = [(1, 0, "a"), (2, -1, "b"), (3, 0, "a"), (4, 1, "a"), (4, -1, "a"), (5, 0, "a")]


def test_restored_writes_carry_one_position_by_either_route():
    """A waiting write restored by a task from its share (``made_bytes`` of a run by no one)
    sits where one the driver carries to a pass sits (``restored_sub``): the commit orders
    and counts them alike."""
    from restream_kit.engines.spark.passes import _rows
    from restream_kit.engines.spark.passes._boundaries import made_bytes

    for number in (0, 1, 7, 2**32 - 1):
        restored = made_bytes((-_rows.SIGN, -_rows.SIGN, 0, number))
        assert restored == _rows.restored_sub(number)
        ran = made_bytes((-(2**40), 0, 0, 0))  # a run long before any real time
        assert restored < ran
    assert _rows.restored_sub(1) < _rows.restored_sub(2)


def _resumed_after_first_epoch(program: rk.Program, log: rk.Log, epoch: int, tmp_path: Path):
    """``program`` checkpointed serially and on Spark (two partitions, not arranged by the
    driver), every ``epoch`` events; the Spark replay resumed as if killed after its first
    epoch committed, checked equal to serial and run as planned: the serial result and the
    resumed one (checkpoints in ``tmp_path / "serial"`` and ``tmp_path / "spark"``)."""
    want = rk.replay(program, log, epoch=epoch, checkpoint=tmp_path / "serial")
    ck = tmp_path / "spark"
    options = dict(engine="spark", partitions=2, epoch=epoch, checkpoint=ck)
    with mock.patch.object(_local_arrangement, "LOCAL_ROWS", 10**9):
        rk.replay(program, log, **options)
        keep_first_epochs(ck, 1)
        resumed = rk.replay(program, log, **options, resume=True)
    assert resumed.resumed_from_epoch == 1
    _same(resumed, want)
    assert_ran_as_planned(program, resumed)
    return want, resumed


def test_a_resume_commits_writes_restored_by_two_routes_in_the_serial_order(
    spark_session, tmp_path
):
    program = rk.Program.from_source(TWO_ROUTES, name="routes")
    log = rk.Log([dict(ts=t, v=v, kind=kind, k=0, j=0) for t, v, kind in TWO_ROUTES_LOG])
    _want, resumed = _resumed_after_first_epoch(program, log, 2, tmp_path)
    assert "share of the state" in resumed.metrics.path["h0"], resumed.metrics.path
    first = checkpoint.read(tmp_path / "serial", 1).state["future"]
    assert {name for at, _n, name, *_ in first if at == 5} == {"s0", "s1"}  # the case at hand
    assert_same_commits(tmp_path / "serial", tmp_path / "spark", range(1, 3))


# Found by the property test of resumes: ``ahead`` runs in one task (``s0`` by two keys), keeps
# its own timed write to ``s0`` and sends the one to ``s1`` to the pass folding ``s1``. Each
# was numbered by a count of its own, so the first run's two writes shared a position, and
# the commit of the first epoch kept only one: a resume from it lost the other.
OWN_AND_SENT = """
from restream_kit import state, on

s0 = state.Counter()
s1 = state.Counter()


@on("a")
def count(e):
    s1[e.k] += 3


@on("a")
def ahead(e):
    s0[e.j] += 1
    s0.set(e.j, s0[0] + 1, at=e.ts + 5)
    s1.set(e.k, e.v, at=e.ts + 5)
"""
OWN_AND_SENT_LOG = [
    (3, 0, 1, 1), (4, 0, 0, -1), (5, 2, 1, 0), (5, 0, 0, 2),
    (5, 1, 0, 1), (6, 0, 0, -3), (7, 2, 2, -2), (9, 0, 0, -3),
]  # fmt: skip


def test_a_commit_keeps_a_runs_own_and_sent_timed_writes_and_a_resume_applies_both(
    spark_session, tmp_path
):
    program = rk.Program.from_source(OWN_AND_SENT, name="own_and_sent")
    log = rk.Log([dict(ts=t, kind="a", k=k, j=j, v=v) for t, k, j, v in OWN_AND_SENT_LOG])
    _want, resumed = _resumed_after_first_epoch(program, log, 3, tmp_path)
    first = checkpoint.read(tmp_path / "serial", 0).state["future"]
    assert {name for at, _n, name, *_ in first if at == 8} == {"s0", "s1"}  # one run made both
    assert "sequential" in resumed.metrics.path["ahead"] and "fold s1" in resumed.metrics.path
    # Epoch 0 as the first run committed it (the resume kept it), epoch 1 as the resume did.
    assert_same_commits(tmp_path / "serial", tmp_path / "spark", range(0, 2))
