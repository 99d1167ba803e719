"""``on_error`` skip and quarantine in the serial engine's loop on Spark.

A pass that runs the serial engine's loop (``passes._plain``) keeps running it when runs may
raise: the guarded loop (``passes._shipping.GuardedSerial``, ``GuardedShipping``) undoes a run that
raises (its state changes, timed writes, rows for other passes, scheduled window closes,
summed window adds) and records it with its position. Each program here raises in every
pass on some events; the result, the quarantine and every committed epoch must be the
serial engine's, and ``metrics.path`` must say that the guarded loop ran.
"""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pytest
from engine_matrix import assert_ran_as_planned, assert_same_commits

import restream_kit as rk
from restream_kit.engines.spark.passes import _local_arrangement as _local_arrangement

SMALL = "sample_data/social_small.parquet"

# Forwarded events, arranged by the driver: a float EWMA per sender, a sliding count per IP
# by a timed write, and a rule reading both; each handler raises on some events.
FORWARDED = """\
from restream_kit import emit, hours, on, state

rate = state.Map(default=0.0)
ip_hour = state.Counter()


@on("message")
def sender_rate(e):
    rate[e.src] = 0.95 * rate[e.src] + (0.05 if e.has_email else 0.0)
    if e.dst % 97 == 5:
        raise ValueError(f"bad dst {e.dst}")


@on("message")
def ip_window(e):
    ip_hour[e.ip] += 1
    ip_hour.add(e.ip, -1, at=e.ts + hours(1))
    if e.dst % 89 == 7:
        raise RuntimeError("after a timed write")


@on("message")
def suspicious(e):
    if rate.get(e.src, 0.0) > 0.1 and ip_hour[e.ip] > 3:
        emit("suspicious", sender=e.src, ip=e.ip, rate=round(rate[e.src], 4))
        if e.dst % 13 == 1:
            raise KeyError("after an emit")
"""

# The bench's windows: the adding pass sends summed adds and window closes on (``Shipping``);
# here it raises after its adds on some events, and such a run must send none of them.
WINDOWS = (
    (Path(__file__).resolve().parents[2] / "bench" / "programs" / "windows.py")
    .read_text()
    .replace(
        "    if per_ip.value(e.ip) > 30:",
        '    if e.dst % 31 == 4:\n        raise ValueError("after the adds")\n'
        "    if per_ip.value(e.ip) > 3:",
    )
)
assert "after the adds" in WINDOWS

PROGRAMS = {"forwarded": FORWARDED, "windows": WINDOWS}
#: The handlers that raise, each alone in its pass (a window's close handler never raises).
RAISING = {"forwarded": {"sender_rate", "ip_window", "suspicious"}, "windows": {"track"}}


def _same(got: rk.Result, want: rk.Result) -> None:
    assert sorted(got.tables) == sorted(want.tables)
    for name in want.tables:
        assert got.tables[name].to_pylist() == want.tables[name].to_pylist(), name
    assert got.state == want.state
    assert got.quarantine.to_pylist() == want.quarantine.to_pylist()


def _guarded_loop(result: rk.Result, stages: set[str]) -> None:
    """Every stage of ``stages`` ran the guarded loop, over two tasks."""
    for stage in stages:
        what = result.metrics.path[stage]
        assert "undone by the serial engine's guarded loop" in what, (stage, what)
        assert "(2 tasks)" in what, (stage, what)


@pytest.mark.parametrize("mode", ["skip", "quarantine"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_the_guarded_loop_quarantines_the_serial_engines_runs(name, mode, spark_session):
    log = rk.Log(SMALL)
    program = rk.Program.from_source(PROGRAMS[name], name=name)
    want = rk.replay(program, log, on_error=mode)
    assert set(want.quarantine.column("handler").to_pylist()) == RAISING[name]
    with mock.patch.object(_local_arrangement, "LOCAL_ROWS", 0):
        got = rk.replay(program, log, engine="spark", partitions=2, on_error=mode)
    _same(got, want)
    assert_ran_as_planned(program, got)
    _guarded_loop(got, RAISING[name])
    if name == "forwarded":
        assert all("arranged by the driver" in what for what in got.metrics.path.values())


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_a_guarded_checkpoint_commits_the_serial_engines_epochs(name, spark_session, tmp_path):
    """Once over the log, each epoch's state, waiting timed writes, quarantined runs so far
    and rows are the serial engine's."""
    log = rk.Log(SMALL)
    program = rk.Program.from_source(PROGRAMS[name], name=name)
    options = dict(on_error="quarantine", epoch=12_500)
    want = rk.replay(program, log, checkpoint=tmp_path / "serial", **options)
    with mock.patch.object(_local_arrangement, "LOCAL_ROWS", 0):
        got = rk.replay(
            program, log, engine="spark", partitions=2, checkpoint=tmp_path / "spark", **options
        )
    _same(got, want)
    assert all(
        what.endswith("4 epochs' ends committed to the checkpoint")
        for what in got.metrics.path.values()
    )
    assert_same_commits(tmp_path / "serial", tmp_path / "spark", range(4))
