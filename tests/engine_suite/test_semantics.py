"""SPEC section 3, rule by rule, on small hand-made logs with expected outputs written by hand.

Every test runs on every engine (see ``conftest.replay_on``).
"""

from __future__ import annotations

import textwrap

import pytest
from engine_matrix import rows_of

import restream_kit as rk

HEADER = "from restream_kit import state, on, emit, schedule, seconds, hours\n"


def prog(body: str) -> rk.Program:
    return rk.Program.from_source(HEADER + textwrap.dedent(body), name="t")


def ev(ts, kind="event", **fields):
    return {"ts": ts, "kind": kind, **fields}


def out(result, table="out", *cols):
    rows = rows_of(result, table)
    return [tuple(r[c] for c in cols) for r in rows] if cols else rows


# -- order of the log ----------------------------------------------------------------------


def test_log_is_stable_sorted_by_ts_and_gets_lsn(replay_on):
    p = prog(
        """
        @on("event")
        def see(e):
            emit("out", x=e.x)
        """
    )
    log = [ev(5, x="a"), ev(1, x="b"), ev(5, x="c"), ev(3, x="d"), ev(1, x="e")]
    r = replay_on(p, log)
    assert out(r, "out", "lsn", "ts", "x") == [
        (0, 1, "b"),
        (1, 1, "e"),
        (2, 3, "d"),
        (3, 5, "a"),
        (4, 5, "c"),
    ]


def test_several_sources_merge_by_ts_then_source_then_row(replay_on):
    import pyarrow as pa

    p = prog(
        """
        @on("clicks", "views")
        def see(e):
            emit("out", kind=e.kind, x=e.x)
        """
    )
    clicks = pa.table({"ts": [2, 1, 2], "x": ["c1", "c2", "c3"]})
    views = pa.table({"ts": [2, 1], "x": ["v1", "v2"], "kind": ["views", None]})
    r = replay_on(p, rk.Log([("clicks", clicks), ("views", views)]))
    assert out(r, "out", "ts", "kind", "x") == [
        (1, "clicks", "c2"),
        (1, "views", "v2"),
        (2, "clicks", "c1"),
        (2, "clicks", "c3"),
        (2, "views", "v1"),
    ]


def test_log_without_kind_column_has_kind_event(replay_on):
    p = prog(
        """
        @on("event")
        def see(e):
            emit("out", kind=e.kind)
        """
    )
    assert out(replay_on(p, [{"ts": 1}]), "out", "kind") == [("event",)]


def test_explicit_lsn_is_kept(replay_on):
    p = prog(
        """
        @on("event")
        def see(e):
            emit("out", n=e.lsn)
        """
    )
    r = replay_on(p, [{"ts": 1, "lsn": 10}, {"ts": 1, "lsn": 12}, {"ts": 2, "lsn": 11}])
    assert out(r, "out", "lsn", "n") == [(10, 10), (12, 12), (11, 11)]


# -- handlers of one event --------------------------------------------------------------------


def test_handlers_of_one_event_run_in_declaration_order(replay_on):
    p = prog(
        """
        seen = state.Counter()

        @on("event")
        def first(e):
            emit("out", who="first", before=seen[0])
            seen[0] += 1

        @on("event")
        def second(e):
            emit("out", who="second", before=seen[0])
            seen[0] += 10
        """
    )
    r = replay_on(p, [ev(1), ev(2)])
    assert out(r, "out", "lsn", "handler", "who", "before") == [
        (0, "first", "first", 0),
        (0, "second", "second", 1),
        (1, "first", "first", 11),
        (1, "second", "second", 12),
    ]


def test_read_sees_earlier_writes_in_the_same_run(replay_on):
    p = prog(
        """
        m = state.Map(default="none")

        @on("event")
        def h(e):
            a = m[e.k]
            m[e.k] = e.v
            emit("out", before=a, after=m[e.k])
        """
    )
    r = replay_on(p, [ev(1, k=1, v="x"), ev(2, k=1, v="y"), ev(3, k=2, v="z")])
    assert out(r, "out", "before", "after") == [("none", "x"), ("x", "y"), ("none", "z")]


# -- defaults, merges, deletes ----------------------------------------------------------------


def test_defaults_merges_and_deletes(replay_on):
    p = prog(
        """
        c = state.Counter()
        m = state.Map(default=-1)
        v = state.Value(default=100)

        @on("add")
        def add(e):
            c[e.k] += e.n
            m[e.k] = e.n
            v.value -= e.n

        @on("drop")
        def drop(e):
            del c[e.k]
            del m[e.k]

        @on("look")
        def look(e):
            emit("out", c=c[e.k], m=m[e.k], has=e.k in m, g=m.get(e.k), v=v.value)
        """
    )
    log = [
        ev(1, "look", k=1),
        ev(2, "add", k=1, n=3),
        ev(3, "add", k=1, n=4),
        ev(4, "look", k=1),
        ev(5, "drop", k=1),
        ev(6, "look", k=1),
        ev(7, "drop", k=9),
    ]
    r = replay_on(p, log)
    assert out(r, "out", "c", "m", "has", "g", "v") == [
        (0, -1, False, None, 100),
        (7, 4, True, 4, 93),
        (0, -1, False, None, 93),
    ]
    assert r.state == {"c": {}, "m": {}, "v": {(): 93}}


def test_merge_with_a_function_and_set_add_methods(replay_on):
    p = prog(
        """
        best = state.Map(default=0)
        n = state.Counter()

        @on("event")
        def h(e):
            best.merge(e.k, lambda old: max(old, e.x))
            n.add(e.k, 2)
            n.set("last", e.x)
            emit("out", best=best[e.k], n=n[e.k])
        """
    )
    r = replay_on(p, [ev(1, k="a", x=5), ev(2, k="a", x=3), ev(3, k="a", x=9)])
    assert out(r, "out", "best", "n") == [(5, 2), (5, 4), (9, 6)]
    assert r.state["n"] == {"a": 6, "last": 9}


# -- future writes ----------------------------------------------------------------------------


SLIDING = """
    count = state.Counter()

    @on("hit")
    def hit(e):
        count[e.k] += 1
        count.add(e.k, -1, at=e.ts + 10)

    @on("look")
    def look(e):
        emit("out", n=count[e.k])
    """


def test_future_write_is_visible_from_its_time_on(replay_on):
    p = prog(SLIDING)
    log = [
        ev(0, "hit", k=1),
        ev(5, "hit", k=1),
        ev(9, "look", k=1),
        ev(10, "look", k=1),
        ev(14, "look", k=1),
        ev(15, "look", k=1),
        ev(100, "look", k=1),
    ]
    r = replay_on(p, log)
    # window of width 10: at t it holds the hits with t - 10 < ts <= t
    assert out(r, "out", "ts", "n") == [(9, 2), (10, 1), (14, 1), (15, 0), (100, 0)]


def test_future_write_at_event_time_is_immediate(replay_on):
    p = prog(
        """
        m = state.Map(default=0)

        @on("event")
        def h(e):
            m.set("k", e.x, at=e.ts)
            emit("out", v=m["k"])
        """
    )
    assert out(replay_on(p, [ev(3, x=7)]), "out", "v") == [(7,)]


def test_future_writes_apply_in_time_then_writer_then_operation_order(replay_on):
    p = prog(
        """
        m = state.Map(default="")

        @on("w")
        def w(e):
            m.merge("k", lambda s: s + e.tag + "1", at=e.at)
            m.merge("k", lambda s: s + e.tag + "2", at=e.at)

        @on("now")
        def now(e):
            m.merge("k", lambda s: s + e.tag)

        @on("look")
        def look(e):
            emit("out", v=m["k"])
        """
    )
    log = [
        ev(1, "w", tag="a", at=20),  # made first, at 20
        ev(2, "w", tag="b", at=10),  # made later but earlier in time
        ev(3, "w", tag="c", at=20),  # same time as a, made after a
        ev(10, "look"),
        ev(20, "now", tag="N"),  # an ordinary write at 20 comes after the future ones at 20
        ev(20, "look"),
    ]
    r = replay_on(p, log)
    assert out(r, "out", "ts", "v") == [(10, "b1b2"), (20, "b1b2a1a2c1c2N")]


def test_future_write_into_the_past_is_an_error(replay_on):
    p = prog(
        """
        m = state.Map()

        @on("event")
        def h(e):
            m.set(1, 2, at=e.ts - 1)
        """
    )
    with pytest.raises(rk.HandlerError) as info:
        replay_on(p, [ev(5)])
    assert "earlier than the event's time" in str(info.value)
    assert info.value.lineno == 7 and info.value.handler == "h"


def test_pending_future_writes_are_not_in_the_final_state(replay_on):
    r = replay_on(prog(SLIDING), [ev(0, "hit", k=1), ev(5, "hit", k=2), ev(12, "look", k=1)])
    assert r.state == {"count": {1: 0, 2: 1}}


# -- scheduled events -------------------------------------------------------------------------


TUMBLING = """
    n = state.Counter()
    armed = state.Map(default=False)

    @on("event")
    def count(e):
        start = e.ts - e.ts % 10
        n[start] += 1
        if not armed[start]:
            armed[start] = True
            schedule("close", at=start + 10, start=start)

    @on("close")
    def close(e):
        emit("out", start=e.start, n=n[e.start])
    """


def test_scheduled_event_runs_before_log_events_at_its_time(replay_on):
    p = prog(TUMBLING)
    log = [ev(0), ev(3), ev(9), ev(10), ev(10), ev(19), ev(25)]
    r = replay_on(p, log)
    # window [0, 10) holds ts 0, 3, 9; [10, 20) holds 10, 10, 19; [20, 30) holds 25
    assert out(r, "out", "ts", "start", "n", "seq", "lsn") == [
        (10, 0, 3, 1, 0),
        (20, 10, 3, 1, 3),
        (30, 20, 1, 1, 6),
    ]


def test_scheduled_events_at_one_time_run_in_scheduling_order(replay_on):
    p = prog(
        """
        @on("event")
        def arm(e):
            schedule("fire", at=100, tag=e.tag + "1")
            schedule("fire", at=100, tag=e.tag + "2")

        @on("fire")
        def fire(e):
            emit("out", tag=e.tag)
        """
    )
    r = replay_on(p, [ev(2, tag="b"), ev(1, tag="a")])
    assert out(r, "out", "ts", "tag", "lsn", "seq") == [
        (100, "a1", 0, 1),
        (100, "a2", 0, 2),
        (100, "b1", 1, 1),
        (100, "b2", 1, 2),
    ]


def test_scheduled_event_sees_timed_writes_due_by_its_time(replay_on):
    p = prog(
        """
        m = state.Map(default=0)

        @on("event")
        def arm(e):
            m.set("k", 1, at=50)
            m.set("k", 2, at=51)
            schedule("look", at=50)

        @on("look")
        def look(e):
            emit("out", v=m["k"])
        """
    )
    assert out(replay_on(p, [ev(1)]), "out", "v") == [(1,)]


# -- errors -----------------------------------------------------------------------------------


def test_handler_exception_names_handler_line_and_event(replay_on):
    p = prog(
        """
        c = state.Counter()

        @on("event")
        def fine(e):
            c[e.k] += 1

        @on("event")
        def breaks(e):
            x = 1
            return x / (c[e.k] - 2)
        """
    )
    with pytest.raises(rk.HandlerError) as info:
        replay_on(p, [ev(1, k="a"), ev(2, k="b"), ev(3, k="a")])
    err = info.value
    assert (err.handler, err.lineno, err.lsn, err.kind) == ("breaks", 12, 2, "event")
    assert "ZeroDivisionError" in str(err) and "return x / (c[e.k] - 2)" in str(err)
    assert str(err).startswith("<restream t>:12:")
