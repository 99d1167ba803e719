"""Session counts keyed otherwise than their adding stage: one narrow row per run of adds.

An adding task sends a lazy session count's adds as runs (a key's adds less than the gap
apart) and the close pass sweeps each key's runs into sessions (``passes._narrow_sessions``).
Every replay here equals the serial engine's, row for row and state for state: sessions
whose adds come from several tasks, one task's adds bridged into one session by another's,
gaps exactly the session's, ties at a session's last time across tasks, sessions still open
when the log ends; and the path says the window ran from runs.
"""

from __future__ import annotations

import os
import random
import textwrap

import pytest
from engine_matrix import assert_ran_as_planned, assert_same_result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import restream_kit as rk
from restream_kit.engines.spark.passes._narrow_sessions import SessionRuns, folded_sessions

pytestmark = pytest.mark.filterwarnings("ignore::restream_kit.RestreamWarning")

#: A stage by ``e.k`` (its counter) adding to sessions keyed by ``e.g``; a second add of
#: one session in one event; a session sum beside it, which still sends a row per add.
RULE = textwrap.dedent(
    """
    from restream_kit import emit, on, state
    from restream_kit.windows import session

    visits = session(5, "count", table="visits")
    weights = session(5, "sum", table="weights")
    seen = state.Counter()


    @on("a")
    def track(e):
        seen[e.k] += 1
        visits.add(e.g)
        weights.add(e.g, e.v)
        if e.v == 3:
            visits.add(e.g)
        if seen[e.k] % 3 == 0:
            emit("third", k=e.k, n=seen[e.k])
    """
)

RUNS = "a row per run of a key's adds less than the gap apart, in each task"


def _program() -> rk.Program:
    return rk.Program.from_source(RULE, "narrow_sessions")


def _hand_log() -> list[dict]:
    """Group 1: adds at 0 and 6 by k=0 (two runs), bridged by k=1's add at 3 (one session).
    Group 2: k=0 and k=1 both add last at 14 (a tie across tasks), then a gap of exactly 5.
    Group 3: a session still open at the log's end."""
    rows = [
        (0, 0, 1, 1),
        (3, 1, 1, 3),
        (6, 0, 1, 2),
        (10, 1, 2, 1),
        (12, 0, 2, 0),
        (14, 1, 2, 2),
        (14, 0, 2, 3),
        (19, 2, 2, 1),
        (19, 1, 2, 0),
        (21, 2, 3, 1),
        (24, 0, 3, 3),
    ]
    return [{"ts": t, "kind": "a", "k": k, "g": g, "v": v} for t, k, g, v in rows]


def _random_log(seed: int, n: int = 400) -> list[dict]:
    """Clustered times (ties, gaps shorter and longer than the session's), skewed groups."""
    rnd = random.Random(seed)
    t, rows = 0, []
    for _ in range(n):
        t += rnd.choice([0, 0, 1, 2, 4, 5, 6, 11])
        g = min(int(rnd.paretovariate(1.2)), 9)
        rows.append({"ts": t, "kind": "a", "k": rnd.randrange(6), "g": g, "v": rnd.randrange(4)})
    return rows


def test_only_lazy_session_counts_are_sent_as_runs():
    p = _program()
    assert folded_sessions(p, ("visits", "weights")) == {"visits"}


def test_the_sweep_joins_runs_before_a_close_and_breaks_at_it():
    rows: dict = {}
    p = _program()
    runs = SessionRuns("visits", p.windows["visits"], rows)
    runs.take(0, "g", 1, 0, 1, 1)  # run of 0..0
    runs.take(3, "g", 1, 3, 2, 1)  # joins: 3 < 0 + 5
    runs.take(6, "g", 2, 9, 7, 1)  # joins: 6 < 3 + 5; last now 9 (lsn 7)
    runs.take(9, "g", 1, 9, 6, 4)  # a tie at 9, of an earlier event: its close emits
    runs.take(14, "g", 1, 14, 8, 1)  # 14 >= 9 + 5: the session closed before it
    assert runs.finish(last_ts=14) == 19
    got = [(lsn, end, seq, f["start"], f["value"]) for lsn, end, _h, seq, f in rows["visits"]]
    assert got == [(6, 14, 4, 0, 5), (8, 19, 1, 14, 1)]
    assert runs.root_arrays()[1].tolist() == [9, 14]


@pytest.mark.spark
def test_sessions_from_runs_equal_the_serial_engine(spark_session):
    p = _program()
    log = rk.Log(_hand_log() + _random_log(7))
    want = rk.replay(p, log)
    got = rk.replay(p, log, engine="spark", path="passes", partitions=3)
    assert_same_result(got, want)
    assert got.metrics.scheduled_events == want.metrics.scheduled_events
    assert_ran_as_planned(p, got)
    assert RUNS in got.metrics.path["visits__close"]
    assert RUNS not in got.metrics.path["weights__close"]


@pytest.mark.spark
@settings(
    max_examples=int(os.environ.get("RESTREAM_SESSION_PROPERTY_EXAMPLES", "8")),
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 300), partitions=st.sampled_from([2, 3, 5]))
def test_generated_logs_give_the_serial_sessions(seed, n, partitions, spark_session):
    p = _program()
    log = rk.Log(_random_log(seed, n))
    got = rk.replay(p, log, engine="spark", path="passes", partitions=partitions)
    assert_same_result(got, rk.replay(p, log))
    assert_ran_as_planned(p, got)
