"""Closing windows keyed otherwise than their adding stage: one narrow row per add.

A tumbling, hopping or session window whose adding stage is partitioned by another key
keeps a close pass of its own, partitioned by the window's key; the adding pass sends each
add there as one row (key, value, position, the add's first ``seq``) instead of the
expansion's writes and scheduled closes, and the close pass runs the window natively
(``passes._narrow``). Each replay here equals the serial engine's, row for row and state for
state, and ``metrics.path`` says which windows ran narrow; where the serial engine keeps the
expansion (a checkpoint), so does the close pass, and the path says so.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from engine_matrix import assert_ran_as_planned, assert_same_result, social_sample

import restream_kit as rk
from restream_kit.engines.spark.passes._plan import plan_passes
from restream_kit.planner import plan

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.filterwarnings("ignore::restream_kit.RestreamWarning")

#: A stage partitioned by ``e.k`` (its counter) adding to windows keyed by ``e.g``: a
#: tumbling count with an ``on_close`` alert, a hopping distinct count, sessions with a sum;
#: a second ``add`` of one window in one event; a window keyed like the stage beside them.
OTHER_KEY = textwrap.dedent(
    """
    from restream_kit import emit, on, state
    from restream_kit.windows import hopping, session, tumbling

    per_g = tumbling(10, "count", table="per_g")
    spread = hopping(10, 5, "distinct")
    visits = session(7, "sum", table="visits")
    mine = tumbling(6, "count", table="mine")
    seen = state.Counter()


    @on("a")
    def track(e):
        seen[e.k] += 1
        per_g.add(e.g)
        spread.add(e.g, e.v)
        visits.add(e.g, e.v)
        mine.add(e.k)
        if e.v == 3:
            per_g.add(e.g)
        if seen[e.k] % 3 == 0:
            emit("third", k=e.k, n=seen[e.k])


    @per_g.on_close
    def busy(key, start, end, value):
        if value > 1:
            emit("closed", g=key, start=start, n=value, what="count")


    @spread.on_close
    def wide(key, start, end, value):
        emit("closed", g=key, start=start, n=value, what="distinct")
    """
)

NARROW = ("per_g", "spread", "visits")


def _log() -> rk.Log:
    """Ties (three events per time), a gap longer than every window, a group whose events
    end early, windows still open at the log's end (their closes after it)."""
    rows = []
    for i in range(420):
        t = i // 3 * 2
        if 90 <= t < 160:
            continue
        rows.append({"ts": t, "kind": "a", "k": (i * 7) % 5, "g": (i * 3) % 7, "v": i % 4})
    rows += [{"ts": t, "kind": "a", "k": 1, "g": 9, "v": t % 3} for t in (1, 2, 2, 5)]
    rows += [{"ts": 275, "kind": "a", "k": 2, "g": 8, "v": 2}]
    return rk.Log(sorted(rows, key=lambda r: r["ts"]))


def _narrow(result: rk.Result, windows: tuple[str, ...]) -> None:
    """The path says each of ``windows`` ran narrow in its close pass, over several tasks."""
    for name in windows:
        what = result.metrics.path[f"{name}__close"]
        assert f"window {name} narrow: its adds sent from track, mine__close as narrow rows" in what
        tasks = re.search(r"\((\d+) tasks\)", what)
        assert tasks and int(tasks.group(1)) > 1, what


def test_a_window_keyed_otherwise_gets_a_close_pass_by_its_key_fed_narrow_rows():
    p = rk.Program.from_source(OTHER_KEY, "other_key")
    passes = plan_passes(p, plan(p)).passes
    adding = next(q for q in passes if "track" in q.stages)
    assert adding.partition == "e.k" and adding.closes == ("mine",)
    for name in NARROW:
        close = next(q for q in passes if f"{name}__close" in q.stages)
        assert close.partition == "e.key" and close.narrow == (name,)
        assert adding.narrow_to[name] == close.index
        said = close.describe(2)
        assert f"window {name} narrow: its adds sent from track, mine__close as narrow rows" in said
        assert "keyed by e.g, its adding stage track" in said
        # Where the replay cannot run it natively, the path says it runs the expansion.
        assert f"window {name} not fused: its closes as scheduled events" in close.describe(
            2, False
        )


@pytest.mark.spark
def test_narrow_windows_equal_the_serial_engine(spark_session):
    p = rk.Program.from_source(OTHER_KEY, "other_key")
    log = _log()
    want = rk.replay(p, log)
    assert max(r["start"] for r in want.tables["closed"].to_pylist()) >= 265
    assert {8, 9} <= {r["key"] for r in want.tables["visits"].to_pylist()}
    got = rk.replay(p, log, engine="spark", path="passes", partitions=3)
    assert_same_result(got, want)
    assert got.metrics.scheduled_events == want.metrics.scheduled_events
    assert_ran_as_planned(p, got)
    _narrow(got, NARROW)


@pytest.mark.spark
@pytest.mark.parametrize("rule", ["windows_ip", "windows_sessions", "windows"])
def test_the_benchmark_rules_keyed_otherwise_equal_the_serial_engine(spark_session, rule):
    p = rk.Program.from_file(ROOT / "bench" / "programs" / f"{rule}.py")
    log = social_sample(3000)
    want = rk.replay(p, log)
    got = rk.replay(p, log, engine="spark", path="passes", partitions=3)
    assert_same_result(got, want)
    assert got.metrics.scheduled_events == want.metrics.scheduled_events
    narrow = {"windows_ip": "per_ip", "windows_sessions": "sessions", "windows": "per_sender"}
    what = got.metrics.path[f"{narrow[rule]}__close"]
    assert f"window {narrow[rule]} narrow" in what, what


@pytest.mark.spark
def test_narrow_windows_checkpointed_run_their_expansion_and_equal_the_serial_engine(
    spark_session, tmp_path
):
    p = rk.Program.from_source(OTHER_KEY, "other_key")
    log = _log()
    want = rk.replay(p, log, checkpoint=tmp_path / "serial", epoch=100)
    got = rk.replay(
        p, log, engine="spark", path="passes", partitions=3, checkpoint=tmp_path / "s", epoch=100
    )
    assert_same_result(got, want)
    assert (
        "window per_g not fused: its closes as scheduled events"
        in (got.metrics.path["per_g__close"])
    )
