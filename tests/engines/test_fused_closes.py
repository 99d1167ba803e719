"""Closing windows keyed like their adding stage run whole in that stage's Spark pass.

A tumbling, hopping or session window expands into adds, one scheduled close per add and a
close handler the planner puts in a stage of its own (``compiler.expand_windows``). When the
stage that adds is partitioned by the window's key, its pass runs the window's closes and
``on_close`` handlers too, in the runtime's order, with no close pass and no write or close
sent anywhere (``passes._window_shapes.fuse_closes``). Each replay here equals the serial
engine's, row for row and state for state, and ``metrics.path`` says which windows ran fused.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from engine_matrix import (
    assert_ran_as_planned,
    assert_same_commits,
    assert_same_result,
    checkpointed_alike,
    keep_first_epochs,
    social_sample,
)

import restream_kit as rk
from restream_kit.engines.spark.passes._plan import ORDER, plan_passes
from restream_kit.planner import plan

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.filterwarnings("ignore::restream_kit.RestreamWarning")

#: A tumbling, a hopping and a session window keyed like their stage (a counter by ``e.k``
#: partitions it), two ``on_close`` handlers emitting into one table (closes of one event
#: falling due together), a plain emit beside them.
BY_KEY = textwrap.dedent(
    """
    from restream_kit import emit, on, state
    from restream_kit.windows import hopping, session, tumbling

    per_k = tumbling(10, "count", table="per_k")
    spread = hopping(10, 5, "distinct")
    visits = session(7, "sum", table="visits")
    seen = state.Counter()


    @on("a")
    def track(e):
        seen[e.k] += 1
        per_k.add(e.k)
        spread.add(e.k, e.v)
        visits.add(e.k, e.v)
        if seen[e.k] % 3 == 0:
            emit("third", k=e.k, n=seen[e.k])


    @per_k.on_close
    def busy(key, start, end, value):
        if value > 1:
            emit("closed", k=key, start=start, n=value, what="count")


    @spread.on_close
    def wide(key, start, end, value):
        emit("closed", k=key, start=start, n=value, what="distinct")
    """
)

SESSIONS = ROOT / "bench" / "programs" / "windows_sessions.py"


def _log() -> rk.Log:
    """Ties (three events per time, a key twice at one time), gaps longer than every window,
    a key whose events end early, and windows still open at the log's end (their closes due
    after it)."""
    rows = []
    for i in range(420):
        t = i // 3 * 2
        if 90 <= t < 160:
            continue  # a gap longer than every window, for every key
        rows.append({"ts": t, "kind": "a", "k": (i * 7) % 5, "v": i % 4})
    rows += [{"ts": t, "kind": "a", "k": 9, "v": t % 3} for t in (1, 2, 2, 5)]  # ends early
    rows += [{"ts": 0, "kind": "a", "k": 6, "v": 1}, {"ts": 275, "kind": "a", "k": 6, "v": 2}]
    return rk.Log(sorted(rows, key=lambda r: r["ts"]))


def _fused(result: rk.Result, stage: str, windows: tuple[str, ...]) -> str:
    """What ran ``stage``: the path says each window of ``windows`` ran fused in it, over
    more than one task."""
    what = result.metrics.path[stage]
    for name in windows:
        assert f"window {name} fused: its adds and closes in this pass" in what, what
    tasks = re.search(r"\((\d+) tasks\)", what)
    assert tasks and int(tasks.group(1)) > 1, what
    return what


# -- the plan (no Spark) ----------------------------------------------------------------------


def test_a_closing_window_keyed_like_its_stage_joins_that_stages_pass():
    p = rk.Program.from_source(BY_KEY, "by_key")
    pp = plan_passes(p, plan(p))
    (one,) = pp.passes
    assert one.partition == "e.k" and set(one.closes) == {"per_k", "spread", "visits"}
    assert set(one.stages) == {"track", "per_k__close", "spread__close", "visits__close"}
    assert {s for s in p.states if "__" in s} <= set(one.homes)
    assert not one.blind and not one.sends
    said = one.describe(2)
    for name in ("per_k", "spread", "visits"):
        assert f"window {name} fused: its adds and closes in this pass, by e.k" in said
    # Closes stay in their own pass where asked (a replay from a start state).
    apart = plan_passes(p, plan(p), closes=False)
    assert len(apart.passes) > 3 and not any(q.closes for q in apart.passes)


def test_a_stage_that_only_writes_takes_the_key_of_a_distinct_window_and_says_why_not_the_other():
    """The sessions rule's stage only adds (by log order): it is partitioned by the key of
    the hopping distinct count (whose sets cost the most to send), which runs in it; the
    session, keyed by sender, keeps its pass, fed narrow rows, and says why."""
    p = rk.Program.from_file(SESSIONS)
    said = {q.stage: q.describe(2) for q in plan_passes(p, plan(p)).passes}
    assert (
        "window fanout fused: its adds and closes in this pass, by e.ip, in the serial "
        "engine's loop" in said["track, fanout__close"]
    )
    assert (
        "not in its adding stage's pass: keyed by e.src, its adding stage "
        "track, fanout__close by e.ip" in said["sessions__close"]
    )
    ip = rk.Program.from_file(ROOT / "bench" / "programs" / "windows_ip.py")
    said = {q.stage: q.describe(2) for q in plan_passes(ip, plan(ip)).passes}
    assert "keyed by e.ip, its adding stage track by e.src" in said["per_ip__close"]


def test_a_close_handler_using_other_state_keeps_its_close_pass():
    source = BY_KEY + textwrap.dedent(
        """
        limits = state.Map(default=1)


        @on("b")
        def limit(e):
            limits[e.k] = e.v


        @visits.on_close
        def over(key, start, end, value):
            if value > limits[key]:
                emit("over", k=key)
        """
    )
    p = rk.Program.from_source(source, "other_state")
    passes = plan_passes(p, plan(p)).passes
    assert all(ORDER != q.partition for q in passes)
    assert {"per_k", "spread"} <= {name for q in passes for name in q.closes}
    closing = next(q for q in passes if "visits__close" in q.stages)
    assert "visits" not in closing.closes
    said = closing.describe(2)
    assert "window visits not fused" in said and "use state other than the window's" in said


# -- on Spark, against the serial engine -------------------------------------------------------


@pytest.mark.spark
def test_fused_closes_equal_the_serial_engine(spark_session):
    p = rk.Program.from_source(BY_KEY, "by_key")
    log = _log()
    want = rk.replay(p, log)
    # Closes after the log's last event (275), and the early key's windows closed.
    assert max(r["start"] for r in want.tables["closed"].to_pylist()) >= 265
    assert {9, 6} <= {r["key"] for r in want.tables["visits"].to_pylist()}
    assert want.metrics.scheduled_events > 0
    got = rk.replay(p, log, engine="spark", path="passes", partitions=3)
    assert_same_result(got, want)
    assert got.metrics.scheduled_events == want.metrics.scheduled_events
    assert_ran_as_planned(p, got)
    _fused(got, "track", ("per_k", "spread", "visits"))
    assert got.metrics.path["track"] == got.metrics.path["visits__close"]


@pytest.mark.spark
def test_the_sessions_rule_runs_its_distinct_count_in_the_adding_pass(spark_session):
    """The adding pass runs the hopping window natively, its closes in its own queue, and
    sends the sessions' adds on as narrow rows, numbered with its own closes."""
    p = rk.Program.from_file(SESSIONS)
    log = social_sample()
    want = rk.replay(p, log)
    assert want.tables["sessions"].num_rows and want.tables["wide_ip"].num_rows
    got = rk.replay(p, log, engine="spark", path="passes", partitions=3)
    assert_same_result(got, want)
    assert_ran_as_planned(p, got)
    _fused(got, "track", ("fanout",))
    assert "window sessions narrow" in got.metrics.path["sessions__close"]


@pytest.mark.spark
def test_fused_closes_under_quarantine_equal_the_serial_engine(spark_session):
    """A close handler that raises on some windows: its runs undone and recorded alike."""
    source = BY_KEY.replace(
        "    if value > 1:\n",
        "    if start % 20 == 10 and key == 3:\n        raise ValueError(start)\n    if value > 1:\n",
    )
    p = rk.Program.from_source(source, "raising")
    log = _log()
    want = rk.replay(p, log, on_error="quarantine")
    assert want.quarantine.num_rows > 0
    got = rk.replay(p, log, engine="spark", path="passes", partitions=3, on_error="quarantine")
    assert_same_result(got, want)
    assert got.quarantine.to_pylist() == want.quarantine.to_pylist()
    _fused(got, "track", ("per_k", "spread", "visits"))


@pytest.mark.spark
def test_fused_closes_commit_the_serial_engines_epochs_and_resume(spark_session, tmp_path):
    """Checkpointed: every epoch's state, rows and waiting closes are the serial engine's;
    resumed from one of them, the closes waiting there run in their close passes."""
    p = rk.Program.from_source(BY_KEY, "by_key")
    log = _log()
    want, got, spark = checkpointed_alike(p, log, tmp_path, epoch=100)
    _fused(got, "track", ("per_k", "spread", "visits"))
    assert_same_commits(tmp_path / "serial", tmp_path / "spark", range(4))
    keep_first_epochs(tmp_path / "spark", 2)
    resumed = rk.replay(p, log, **spark, resume=True)
    assert resumed.resumed_from_epoch == 2
    assert_same_result(resumed, want)
    assert "window visits not fused" in resumed.metrics.path["visits__close"]


@pytest.mark.spark
def test_close_rows_keep_the_serial_order_with_lsns_out_of_time_order(spark_session):
    """A close's row goes at the close's place (its time, before that time's events, then its
    root event's place), not at a log event's: with ``lsn`` running against time, and the
    ``on_close`` rows in the table the handler emits to, the order is still the serial one."""
    source = BY_KEY.replace('emit("third", k=e.k, n=seen[e.k])', 'emit("closed", k=e.k, n=0)')
    p = rk.Program.from_source(source, "against_time")
    rows = _log().table.drop_columns(["lsn"]).to_pylist()
    # Later times, smaller lsns; in (ts, lsn) order, as a log must be.
    first = {}
    for i, r in enumerate(rows):
        first.setdefault(r["ts"], i)
    log = rk.Log(
        [{**r, "lsn": (1_000 - r["ts"]) * 100 + i - first[r["ts"]]} for i, r in enumerate(rows)]
    )
    want = rk.replay(p, log)
    handlers = {r["handler"] for r in want.tables["closed"].to_pylist()}
    assert {"track", "per_k__close", "spread__close"} <= handlers
    got = rk.replay(p, log, engine="spark", path="passes", partitions=3)
    assert_same_result(got, want)
    _fused(got, "track", ("per_k", "spread", "visits"))


#: A stage that only adds to a tumbling window (the planner partitions it by the window's
#: whole ``(key, start)``), an ``on_close`` function counting the closes per key in a state
#: of its own, under the closed window's key.
ONLY_ADDS = textwrap.dedent(
    """
    from restream_kit import emit, on, state
    from restream_kit.windows import tumbling

    per_k = tumbling(10, "count", table="per_k")
    closed = state.Counter()


    @on("a")
    def track(e):
        per_k.add(e.k)


    @per_k.on_close
    def report(key, start, end, value):
        closed[key] += 1
        emit("closed", k=key, start=start, n=closed[key], value=value)
    """
)


def test_a_stage_only_adding_to_a_window_runs_its_closes_and_their_own_state():
    p = rk.Program.from_source(ONLY_ADDS, "only_adds")
    (one,) = plan_passes(p, plan(p)).passes
    assert one.partition == "e.k" and one.closes == ("per_k",)
    assert {"per_k__n", "closed"} <= set(one.homes)
    # The close's own state read by another stage: it stays with the close pass.
    more = ONLY_ADDS + '\n@on("b")\ndef look(e):\n    emit("seen", n=closed[e.k])\n'
    p = rk.Program.from_source(more, "read_elsewhere")
    closing = next(q for q in plan_passes(p, plan(p)).passes if "per_k__close" in q.stages)
    assert "per_k" not in closing.closes
    assert "use state other than the window's" in closing.describe(2)


@pytest.mark.spark
def test_a_stage_only_adding_to_a_window_equals_the_serial_engine(spark_session):
    p = rk.Program.from_source(ONLY_ADDS, "only_adds")
    log = _log()
    want = rk.replay(p, log)
    assert max(r["n"] for r in want.tables["closed"].to_pylist()) > 1
    got = rk.replay(p, log, engine="spark", path="passes", partitions=3)
    assert_same_result(got, want)
    assert got.metrics.scheduled_events == want.metrics.scheduled_events
    assert_ran_as_planned(p, got)
    _fused(got, "track", ("per_k",))


#: A session window the serial engine runs lazily (no ``on_close``, alone in its table, added
#: to at its events' times), keyed like its stage, beside timed writes that fall due after
#: the log: those due by the last session's close apply, as when that close runs; the later
#: ones never do.
LAZY = textwrap.dedent(
    """
    from restream_kit import on, state
    from restream_kit.windows import session

    visits = session(7, "count", table="visits")
    soon = state.Counter()
    never = state.Counter()


    @on("a")
    def track(e):
        visits.add(e.k)
        soon.add(e.k, e.v, at=e.ts + 5)
        never.add(e.k, 1, at=e.ts + 9)
    """
)


def test_a_lazy_session_window_says_so_in_its_pass():
    p = rk.Program.from_source(LAZY, "lazy")
    (one,) = plan_passes(p, plan(p)).passes
    assert one.closes == ("visits",)
    assert "run lazily where the serial engine is" in one.describe(2)


@pytest.mark.spark
def test_a_lazy_session_window_in_a_pass_equals_the_serial_engine(spark_session, tmp_path):
    """Sessions closed at their keys' next adds, ties, gaps, sessions open at the log's end
    (closed by the flush in each task), and the timed writes due by the last close."""
    p = rk.Program.from_source(LAZY, "lazy")
    log = _log()
    want = rk.replay(p, log)
    events = log.table.to_pylist()
    last = max(r["ts"] for r in events)
    assert max(r["ts"] for r in want.tables["visits"].to_pylist()) == last + 7
    # Writes due after the log's last event: by the last close (applied) and after it (not).
    assert sum(want.state["soon"].values()) == sum(r["v"] for r in events)
    never = sum(want.state["never"].values())
    assert sum(r["ts"] + 9 <= last for r in events) < never < len(events)
    got = rk.replay(p, log, engine="spark", path="passes", partitions=3)
    assert_same_result(got, want)
    assert got.metrics.scheduled_events == want.metrics.scheduled_events
    assert_ran_as_planned(p, got)
    # The tasks said they ran it lazily; under a checkpoint they run its expansion.
    what = _fused(got, "track", ("visits",))
    assert "window visits fused: its adds and closes in this pass" in what, what
    assert "no write sent, run lazily (its sessions close at their keys' next adds" in what
    assert "lazily" not in checkpointed_alike(p, log, tmp_path, epoch=150)[1].metrics.path["track"]
