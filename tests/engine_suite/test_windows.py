"""Window helpers (``restream_kit.windows``): expected rows written by hand on small logs, then
the same windows computed independently with DuckDB (and polars for the EWMA) on generated
logs with ties in ``ts`` and events exactly on window edges.

Replays go through ``replay_on``, so every test runs on every engine and is checked against
the serial one.
"""

from __future__ import annotations

import math
import textwrap

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
import pytest
from engine_matrix import rows_of
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import restream_kit as rk
from restream_kit.api import missing_kinds
from restream_kit.planner import plan
from restream_kit.windows import expanded_source

HEADER = (
    "from restream_kit import emit, on\n"
    "from restream_kit.windows import ewma, hopping, session, sliding, tumbling\n"
)
AGGS = ("count", "sum", "mean", "min", "max", "distinct")


def prog(body: str, decls: str = "", name: str = "t") -> rk.Program:
    return rk.Program.from_source(HEADER + decls + textwrap.dedent(body), name=name)


def log_of(*events, kind="x") -> list[dict]:
    """Events as (ts, key) or (ts, key, value)."""
    rows = []
    for event in events:
        ts, key, *rest = event
        rows.append({"ts": ts, "kind": kind, "k": key, "v": rest[0] if rest else 0})
    return rows


def rows(result, table, *cols):
    return [tuple(r[c] for c in cols) for r in rows_of(result, table)]


WINDOW_COLS = ("ts", "lsn", "key", "start", "end", "value")


# -- tumbling ---------------------------------------------------------------------------------


def test_tumbling_count_edges_ties_and_flush(replay_on):
    p = prog(
        """
        w = tumbling(10, "count", table="w")

        @on("x")
        def track(e):
            w.add(e.k)
        """
    )
    # lsn:          0          1          2          3           4           5
    log = log_of((0, "a"), (3, "b"), (9, "a"), (10, "a"), (10, "b"), (35, "a"))
    r = replay_on(p, log)
    assert rows(r, "w", "ts", "lsn", "seq", "handler", "key", "start", "end", "value") == [
        (10, 0, 1, "w__close", "a", 0, 10, 2),  # ts 10 belongs to the next window
        (10, 1, 1, "w__close", "b", 0, 10, 1),
        (20, 3, 1, "w__close", "a", 10, 20, 1),
        (20, 4, 1, "w__close", "b", 10, 20, 1),
        # [20, 30) of a is empty: no row. [30, 40) closes after the log ends.
        (40, 5, 1, "w__close", "a", 30, 40, 1),
    ]
    assert r.metrics.scheduled_events == 6  # a close per value; the first one emits
    assert all(not values for values in r.state.values()), "closed windows leave no state"


def test_tumbling_every_aggregate(replay_on):
    p = prog(
        decls="".join(f'{a} = tumbling(10, "{a}", table="{a}")\n' for a in AGGS),
        body="""
        @on("x")
        def track(e):
            count.add(e.k)
            sum.add(e.k, e.v)
            mean.add(e.k, e.v)
            min.add(e.k, e.v)
            max.add(e.k, e.v)
            distinct.add(e.k, e.v)
        """,
    )
    log = log_of((1, "a", 4), (2, "a", 7), (2, "a", 4), (5, "b", 1), (12, "a", 2))
    r = replay_on(p, log)
    per_window = {
        "count": [3, 1, 1],
        "sum": [15, 1, 2],
        "mean": [5.0, 1.0, 2.0],
        "min": [4, 1, 2],
        "max": [7, 1, 2],
        "distinct": [2, 1, 1],
    }
    for agg, values in per_window.items():
        assert rows(r, agg, *WINDOW_COLS) == [
            (10, 0, "a", 0, 10, values[0]),
            (10, 3, "b", 0, 10, values[1]),
            (20, 4, "a", 10, 20, values[2]),
        ], agg
    assert r.tables["mean"].schema.field("value").type == pa.float64()


def test_tumbling_on_close_functions_see_each_window(replay_on):
    p = prog(
        """
        clicks = tumbling(100, "count")

        @on("x")
        def track(e):
            clicks.add(e.k)

        @clicks.on_close
        def burst(key, start, end, n):
            if n >= 3:
                emit("burst", who=key, since=start, until=end, clicks=n)
        """
    )
    log = log_of((1, "a"), (2, "a"), (50, "b"), (99, "a"), (100, "a"), (101, "b"))
    r = replay_on(p, log)
    assert rows(r, "burst", "ts", "lsn", "handler", "who", "since", "until", "clicks") == [
        (100, 0, "clicks__close", "a", 0, 100, 3)
    ]


# -- hopping ----------------------------------------------------------------------------------


def test_hopping_windows_overlap_and_close_in_time_order(replay_on):
    p = prog(
        """
        w = hopping(10, 5, "count", table="w")

        @on("x")
        def track(e):
            w.add(e.k)
        """
    )
    log = log_of((0, "a"), (4, "a"), (5, "a"), (12, "a"))
    r = replay_on(p, log)
    # An event is in two windows [5k, 5k + 10); each window is opened by its first event,
    # which schedules its close (the latest window first, so seq 1 is the later one).
    assert rows(r, "w", "ts", "lsn", "seq", "start", "end", "value") == [
        (5, 0, 2, -5, 5, 2),
        (10, 0, 1, 0, 10, 3),
        (15, 2, 1, 5, 15, 2),
        (20, 3, 1, 10, 20, 1),
    ]


def test_hopping_when_the_hop_does_not_divide_the_width(replay_on):
    p = prog(
        """
        w = hopping(10, 4, "sum", table="w")

        @on("x")
        def track(e):
            w.add(e.k, e.v)
        """
    )
    # Windows [4k, 4k + 10): ts 1 is in three (starts -8, -4, 0), ts 7 in two (0, 4).
    log = log_of((1, "a", 1), (7, "a", 10), (9, "a", 100))
    r = replay_on(p, log)
    assert rows(r, "w", "start", "end", "value") == [
        (-8, 2, 1),
        (-4, 6, 1),
        (0, 10, 111),
        (4, 14, 110),
        (8, 18, 100),
    ]


def test_hopping_with_many_windows_per_event_uses_a_loop(replay_on):
    p = prog(
        """
        w = hopping(100, 1, "max", table="w")

        @on("x")
        def track(e):
            w.add(e.k, e.v)
        """
    )
    assert "while start >" in expanded_source(p)
    r = replay_on(p, log_of((0, "a", 3), (50, "a", 9)))
    got = rows(r, "w", "start", "end", "value")
    assert len(got) == 150
    assert got[0] == (-99, 1, 3) and got[49] == (-50, 50, 3) and got[50] == (-49, 51, 9)
    assert got[-1] == (50, 150, 9)


# -- session ----------------------------------------------------------------------------------


def test_session_closes_gap_after_the_last_event(replay_on):
    p = prog(
        """
        s = session(10, "count", table="s")

        @on("x")
        def track(e):
            s.add(e.k)
        """
    )
    # lsn:          0          1          2          3           4           5
    log = log_of((0, "a"), (3, "b"), (5, "a"), (15, "a"), (15, "a"), (40, "a"))
    r = replay_on(p, log)
    assert rows(r, "s", "ts", "lsn", "seq", "key", "start", "end", "value") == [
        (13, 1, 1, "b", 3, 13, 1),
        # 15 = 5 + gap: the session [0, 15) closes before the events at 15, which start anew.
        (15, 2, 1, "a", 0, 15, 2),
        # Two events at 15 schedule two closes at 25: the first one closes the session.
        (25, 3, 1, "a", 15, 25, 2),
        (50, 5, 1, "a", 40, 50, 1),
    ]
    assert all(not values for values in r.state.values())


def test_session_every_aggregate(replay_on):
    p = prog(
        decls="".join(f'{a} = session(5, "{a}", table="{a}")\n' for a in AGGS),
        body="""
        @on("x")
        def track(e):
            count.add(e.k)
            sum.add(e.k, e.v)
            mean.add(e.k, e.v)
            min.add(e.k, e.v)
            max.add(e.k, e.v)
            distinct.add(e.k, e.v)
        """,
    )
    log = log_of((0, "a", 3), (4, "a", 3), (8, "a", 6), (13, "a", 1))
    r = replay_on(p, log)
    expected = {
        "count": 3,
        "sum": 12,
        "mean": 4.0,
        "min": 3,
        "max": 6,
        "distinct": 2,
    }
    for agg, value in expected.items():
        assert rows(r, agg, "ts", "lsn", "key", "start", "end", "value")[0] == (
            13,
            2,
            "a",
            0,
            13,
            value,
        ), agg
        assert rows(r, agg, "start", "end", "value")[1] == (13, 18, 1.0 if agg == "mean" else 1)


# -- sliding and ewma -------------------------------------------------------------------------


def test_sliding_count_sum_mean_over_the_last_width(replay_on):
    p = prog(
        """
        n = sliding(10, "count")
        total = sliding(10, "sum")
        avg = sliding(10, "mean")

        @on("x")
        def track(e):
            before = n.value(e.k)
            n.add(e.k)
            total.add(e.k, e.v)
            avg.add(e.k, e.v)
            emit("out", before=before, n=n.value(e.k), total=total.value(e.k), avg=avg.value(e.k))
        """
    )
    log = log_of((0, "a", 1), (5, "a", 2), (10, "a", 3), (10, "a", 4), (20, "a", 1), (20, "b", 7))
    r = replay_on(p, log)
    assert rows(r, "out", "ts", "before", "n", "total", "avg") == [
        (0, 0, 1, 1, 1.0),
        (5, 1, 2, 3, 1.5),
        (10, 1, 2, 5, 2.5),  # (0, 10]: the value at 0 has left; the one at 5 is in
        (10, 2, 3, 9, 3.0),  # the tie at 10 sees the earlier event at 10
        (20, 0, 1, 1, 1.0),  # (10, 20]
        (20, 0, 1, 7, 7.0),
    ]


def test_sliding_min_max_distinct(replay_on):
    p = prog(
        """
        lo = sliding(10, "min")
        hi = sliding(10, "max")
        kinds = sliding(10, "distinct")

        @on("x")
        def track(e):
            lo.add(e.k, e.v)
            hi.add(e.k, e.v)
            kinds.add(e.k, e.v)
            emit("out", lo=lo.value(e.k), hi=hi.value(e.k), kinds=kinds.value(e.k))

        @on("probe")
        def probe(e):
            emit("probe", lo=lo.value(e.k), hi=hi.value(e.k), kinds=kinds.value(e.k))
        """
    )
    log = log_of((0, "a", 5), (3, "a", 2), (8, "a", 7), (10, "a", 2), (13, "a", 9), (13, "a", 1))
    log += log_of((22, "a"), (23, "a"), (24, "a"), kind="probe")
    r = replay_on(p, rk.Log(sorted(log, key=lambda e: e["ts"])))
    assert rows(r, "out", "ts", "lo", "hi", "kinds") == [
        (0, 5, 5, 1),
        (3, 2, 5, 2),
        (8, 2, 7, 3),
        (10, 2, 7, 2),  # (0, 10] holds 2, 7, 2
        (13, 2, 9, 3),  # (3, 13]: 7, 2, 9
        (13, 1, 9, 4),
    ]
    # A read with no add: (12, 22] holds 9 and 1 (both at 13); (13, 23] nothing.
    assert rows(r, "probe", "ts", "lo", "hi", "kinds") == [
        (22, 1, 9, 2),
        (23, None, None, 0),
        (24, None, None, 0),
    ]


def test_ewma_per_key(replay_on):
    p = prog(
        """
        smooth = ewma(0.5)

        @on("x")
        def track(e):
            before = smooth.value(e.k)
            emit("out", before=before, after=smooth.update(e.k, e.v))
        """
    )
    log = log_of((0, "a", 2), (1, "a", 4), (2, "b", 10), (3, "a", 0))
    r = replay_on(p, log)
    assert rows(r, "out", "before", "after") == [
        (None, 2.0),
        (2.0, 3.0),
        (None, 10.0),
        (3.0, 1.5),
    ]


# -- loading, planning, errors ----------------------------------------------------------------


def test_windows_in_a_helper_take_ts_and_kinds_are_known():
    p = prog(
        """
        w = tumbling(10, "count", table="w")

        def count_it(ev):
            w.add(ev.k, ts=ev.ts)

        @on("x")
        def track(e):
            count_it(e)
        """
    )
    log = rk.Log(log_of((1, "a"), (12, "a")))
    assert missing_kinds(p, log) == []
    r = rk.replay(p, log)
    assert rows(r, "w", "start", "value") == [(0, 1), (10, 1)]


def test_program_keeps_the_users_source_and_runs_the_expanded_module():
    body = """
        w = tumbling(10, "sum", table="w")

        @on("x")
        def track(e):
            w.add(e.k, e.v)
        """
    p = prog(body)
    assert p.source == HEADER + textwrap.dedent(body)
    assert "w__" not in p.source
    assert [h.name for h in p.handlers] == ["w__close", "track"]
    assert p.handlers[0].kinds == ("w:close",) and p.handlers[0].lineno == 4
    assert {"w__sum", "w__n"} <= set(p.states)
    assert "w__add(e.k, e.v, e.ts)" in expanded_source(p)


def test_plan_sees_through_windows():
    p = plan(
        prog(
            """
            clicks = tumbling(60_000, "count", table="clicks")
            recent = sliding(60_000, "sum")
            users = session(1_000, "distinct", table="sessions")

            @on("x")
            def track(e):
                clicks.add(e.k)
                recent.add(e.k, e.v)
                users.add(e.k, e.v)
                if recent.value(e.k) > 10:
                    emit("busy", k=e.k)
            """
        )
    )
    track = p.stage_of("track")
    assert track.mode == "partitioned" and track.partition_key == "e.k"
    close = p.stage_of("clicks__close")
    assert close.handlers == ("clicks__close",)
    assert close.mode == "partitioned" and close.partition_key == "(e.key, e.start)"
    assert p.stage_of("users__close").partition_key == "e.key"
    assert {(e.src, e.dst, e.state) for e in p.edges} >= {
        ("track", "clicks__close", "schedule:clicks:close"),
        ("track", "users__close", "schedule:users:close"),
    }
    assert not [w for w in p.warnings if w.code in ("non-event-key", "unbounded-state")]


@pytest.mark.parametrize(
    ("body", "line", "message"),
    [
        (
            """
            w = tumbling(10, "sum", table="w")

            @on("x")
            def track(e):
                w.add(e.k)
            """,
            8,
            "w.add needs (key, value)",
        ),
        (
            """
            w = tumbling(10, "count", table="w")

            def helper(k):
                w.add(k)
            """,
            7,
            "needs the event's time",
        ),
        (
            """
            w = sliding(10, "count")

            @on("x")
            def track(e):
                use(w)
            """,
            8,
            "can only be used as w.add(...), w.value(...)",
        ),
        (
            """
            w = tumbling(10, "count")
            """,
            4,
            "emits nothing",
        ),
        (
            """
            w = hopping(10, 20, "count", table="w")
            """,
            4,
            "hop (20) must not exceed width (10)",
        ),
        (
            """
            w = tumbling(10, "median", table="w")
            """,
            4,
            "unknown aggregate 'median'",
        ),
        (
            """
            w = tumbling(10, "count", table="w")
            w__close = 1
            """,
            4,
            "'w__close' is a name of window 'w'",
        ),
        (
            """
            w = tumbling(10, "count", table="w")

            @w.on_close
            def done(key):
                pass
            """,
            7,
            "give it those four parameters",
        ),
        (
            """
            w = tumbling(10, "count", table="w")

            @on("x")
            def track(e):
                w.clear(e.k)
            """,
            8,
            "w.clear(...) is not an operation of a tumbling window",
        ),
    ],
)
def test_mistakes_name_the_line(body, line, message):
    with pytest.raises(rk.ProgramError) as info:
        prog(body)
    assert info.value.lineno == line, str(info.value)
    assert message in str(info.value)


def test_error_inside_a_window_points_at_the_declaration():
    p = prog(
        """
        w = tumbling(10, "sum", table="w")

        @on("x")
        def track(e):
            w.add(e.k, e.v)
        """
    )
    with pytest.raises(rk.HandlerError) as info:
        rk.replay(p, [{"ts": 1, "kind": "x", "k": "a", "v": None}])
    assert info.value.lineno == 4
    assert "TypeError" in str(info.value)


def test_declarations_do_not_work_outside_a_replay():
    from restream_kit.windows import tumbling

    w = tumbling(10, "count", table="w")
    with pytest.raises(RuntimeError, match="inside handlers"):
        w.add("a")


# -- against DuckDB on generated logs ---------------------------------------------------------

WIDTH, HOP, ODD_HOP, GAP, SLIDE = 10_000, 2_500, 3_000, 1_000, 5_000


def generated_log(n: int = 3_000, seed: int = 0, span: int = 300_000) -> pa.Table:
    """Events of five keys (one busy), integer values; a third of the times sit on the
    1,000 ms grid, so many events share a time and many lie exactly on window edges."""
    rng = np.random.default_rng(seed)
    on_grid = rng.random(n) < 0.35
    ts = np.where(on_grid, rng.integers(0, span // 1_000, n) * 1_000, rng.integers(0, span, n))
    keys = np.array(["k0", "k1", "k2", "k3", "k4"])[
        np.minimum((rng.random(n) ** 2 * 5).astype(int), 4)
    ]
    values = rng.integers(0, 12, n)
    order = np.argsort(ts, kind="stable")
    return pa.table(
        {
            "ts": pa.array(ts[order], pa.int64()),
            "kind": pa.array(["x"] * n),
            "k": pa.array(keys[order]),
            "v": pa.array(values[order], pa.int64()),
        }
    )


def window_program(make: str, name: str) -> rk.Program:
    """One window per aggregate, ``make`` being e.g. ``tumbling(10000, {agg!r}, table=...)``."""
    decls = "".join(f"{a} = {make.format(agg=repr(a), table=repr(a))}\n" for a in AGGS)
    adds = "".join(f"    {a}.add(e.k{'' if a == 'count' else ', e.v'})\n" for a in AGGS)
    return rk.Program.from_source(HEADER + decls + '\n@on("x")\ndef track(e):\n' + adds, name=name)


def canonical(log: rk.Log) -> pa.Table:
    return log.table.select(["lsn", "ts", "k", "v"])


AGG_SQL = """
    count(*) AS count, sum(v) AS sum, avg(v) AS mean, min(v) AS min, max(v) AS max,
    count(DISTINCT v) AS distinct
"""


def check_against(result: rk.Result, expected: list[dict]) -> None:
    """Every aggregate table equals ``expected`` (rows with lsn, ts, key, start, end, aggs)."""
    for agg in AGGS:
        got = rows_of(result, agg)
        assert [(r["ts"], r["lsn"]) for r in got] == sorted((r["ts"], r["lsn"]) for r in got)
        want = [(e["ts"], e["lsn"], e["key"], e["start"], e["end"], e[agg]) for e in expected]
        have = [(r["ts"], r["lsn"], r["key"], r["start"], r["end"], r["value"]) for r in got]
        if agg == "mean":
            assert [w[:5] for w in want] == [h[:5] for h in have]
            assert all(math.isclose(w[5], h[5]) for w, h in zip(want, have))
        else:
            assert have == want, agg


def test_tumbling_matches_duckdb(replay_on):
    log = rk.Log(generated_log(seed=1))
    r = replay_on(window_program(f"tumbling({WIDTH}, {{agg}}, table={{table}})", "tumbling"), log)
    expected = query(
        canonical(log),
        f"""
        SELECT min(lsn) AS lsn, ts - ts % {WIDTH} + {WIDTH} AS ts, k AS key,
               ts - ts % {WIDTH} AS start, ts - ts % {WIDTH} + {WIDTH} AS "end", {AGG_SQL}
        FROM tbl GROUP BY k, ts - ts % {WIDTH} ORDER BY 2, 1
        """,
    )
    assert expected.height > 100
    check_against(r, expected.to_dicts())


@pytest.mark.parametrize("hop", [HOP, ODD_HOP])
def test_hopping_matches_duckdb(replay_on, hop):
    log = rk.Log(generated_log(seed=2))
    r = replay_on(
        window_program(f"hopping({WIDTH}, {hop}, {{agg}}, table={{table}})", "hopping"), log
    )
    reach = hop * -(-WIDTH // hop)
    expected = query(
        canonical(log),
        f"""
        WITH starts AS (
            SELECT lsn, ts, k, v, unnest(range(ts - ts % {hop} - {reach}, ts + 1, {hop})) AS start
            FROM tbl
        )
        SELECT min(lsn) AS lsn, start + {WIDTH} AS ts, k AS key, start, start + {WIDTH} AS "end",
               {AGG_SQL}
        FROM starts WHERE start <= ts AND ts < start + {WIDTH}
        GROUP BY k, start ORDER BY 2, 1
        """,
    )
    check_against(r, expected.to_dicts())


def test_session_matches_duckdb(replay_on):
    log = rk.Log(generated_log(seed=3, span=3_000_000))
    r = replay_on(window_program(f"session({GAP}, {{agg}}, table={{table}})", "session"), log)
    expected = query(
        canonical(log),
        f"""
        WITH marked AS (
            SELECT *, CASE WHEN ts - lag(ts) OVER (PARTITION BY k ORDER BY lsn) < {GAP}
                           THEN 0 ELSE 1 END AS new
            FROM tbl
        ), numbered AS (
            SELECT *, sum(new) OVER (PARTITION BY k ORDER BY lsn) AS session FROM marked
        ), bounded AS (
            SELECT *, max(ts) OVER (PARTITION BY k, session) AS last FROM numbered
        )
        SELECT min(lsn) FILTER (WHERE ts = last) AS lsn, max(ts) + {GAP} AS ts, k AS key,
               min(ts) AS start, max(ts) + {GAP} AS "end", {AGG_SQL}
        FROM bounded GROUP BY k, session ORDER BY 2, 1
        """,
    )
    assert expected.height > 100 and (expected["count"] > 1).sum() > 100
    check_against(r, expected.to_dicts())


def test_sliding_and_ewma_match_duckdb_and_polars(replay_on):
    log = rk.Log(generated_log(seed=4, n=2_000, span=100_000))
    decls = "".join(f"{a} = sliding({SLIDE}, {a!r})\n" for a in AGGS)
    body = "".join(f"    {a}.add(e.k{'' if a == 'count' else ', e.v'})\n" for a in AGGS)
    fields = ", ".join(f"{a}={a}.value(e.k)" for a in AGGS)
    source = (
        HEADER
        + decls
        + "smooth = ewma(0.3)\n"
        + '\n@on("x")\ndef track(e):\n'
        + body
        + f'    emit("out", {fields}, ewma=smooth.update(e.k, e.v))\n'
    )
    r = replay_on(rk.Program.from_source(source, name="sliding"), log)
    expected = query(
        canonical(log),
        f"""
        SELECT a.lsn, count(*) AS count, sum(b.v) AS sum, avg(b.v) AS mean, min(b.v) AS min,
               max(b.v) AS max, count(DISTINCT b.v) AS distinct
        FROM tbl a JOIN tbl b ON a.k = b.k AND b.lsn <= a.lsn AND b.ts > a.ts - {SLIDE}
        GROUP BY a.lsn ORDER BY a.lsn
        """,
    )
    got = pl.from_arrow(r.tables["out"])
    assert got["lsn"].to_list() == expected["lsn"].to_list()
    for agg in ("count", "sum", "min", "max", "distinct"):
        assert got[agg].to_list() == expected[agg].to_list(), agg
    assert np.allclose(got["mean"].to_numpy(), expected["mean"].to_numpy())
    smooth = (
        pl.from_arrow(canonical(log))
        .sort("lsn")
        .with_columns(pl.col("v").cast(pl.Float64).ewm_mean(alpha=0.3, adjust=False).over("k"))
    )
    assert np.allclose(got["ewma"].to_numpy(), smooth["v"].to_numpy())


def query(table: pa.Table, sql: str) -> pl.DataFrame:
    """Run ``sql`` in DuckDB over ``table``, registered as ``tbl``."""
    con = duckdb.connect()
    con.register("tbl", table)
    return con.sql(sql).pl()


# -- small random logs against a direct computation -------------------------------------------


def direct_windows(events: list[tuple[int, str, int]], width: int, hop: int) -> list[tuple]:
    """(end, key, start, count, sum) of every non-empty window, by brute force."""
    out = {}
    for ts, key, v in events:
        start = ts - ts % hop - hop * -(-width // hop)  # a multiple of hop, before ts - width
        while start <= ts:
            if start <= ts < start + width:
                n, s = out.get((key, start), (0, 0))
                out[(key, start)] = (n + 1, s + v)
            start += hop
    return sorted((start + width, key, start, n, s) for (key, start), (n, s) in out.items())


def direct_sessions(events: list[tuple[int, str, int]], gap: int) -> list[tuple]:
    out = []
    for key in sorted({k for _, k, _ in events}):
        times = [(ts, v) for ts, k, v in events if k == key]
        current = [times[0]]
        for ts, v in times[1:]:
            if ts - current[-1][0] >= gap:
                out.append((current[-1][0] + gap, key, current[0][0], len(current), current))
                current = []
            current.append((ts, v))
        out.append((current[-1][0] + gap, key, current[0][0], len(current), current))
    return sorted((end, key, start, n, sum(v for _, v in vs)) for end, key, start, n, vs in out)


event_lists = st.lists(
    st.tuples(st.integers(0, 40), st.sampled_from("ab"), st.integers(-3, 3)),
    min_size=1,
    max_size=25,
).map(lambda evs: sorted(evs, key=lambda e: e[0]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=event_lists, width=st.integers(1, 12), hop=st.integers(1, 12))
def test_hopping_and_tumbling_match_a_direct_computation(events, width, hop):
    hop = min(hop, width)
    p = rk.Program.from_source(
        HEADER
        + f'n = hopping({width}, {hop}, "count", table="n")\n'
        + f's = hopping({width}, {hop}, "sum", table="s")\n'
        + '@on("x")\ndef track(e):\n    n.add(e.k)\n    s.add(e.k, e.v)\n'
    )
    r = rk.replay(p, log_of(*events))
    counted = rows(r, "n", "end", "key", "start", "value")
    summed = rows(r, "s", "value")
    got = sorted((*c, s[0]) for c, s in zip(counted, summed))
    assert got == direct_windows(events, width, hop)
    assert [c[0] for c in counted] == sorted(c[0] for c in counted)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=event_lists, gap=st.integers(1, 12))
def test_sessions_match_a_direct_computation(events, gap):
    p = rk.Program.from_source(
        HEADER
        + f'n = session({gap}, "count", table="n")\n'
        + f's = session({gap}, "sum", table="s")\n'
        + '@on("x")\ndef track(e):\n    n.add(e.k)\n    s.add(e.k, e.v)\n'
    )
    r = rk.replay(p, log_of(*events))
    counted = rows(r, "n", "end", "key", "start", "value")
    summed = rows(r, "s", "value")
    assert sorted((*c, s[0]) for c, s in zip(counted, summed)) == direct_sessions(events, gap)
