"""A stage partitioned by a key read from an upstream state (``passes._lookup_stages``).

``charge`` writes ``team_msgs[team_of[e.src]]`` and ``report`` reads it by the same key: the
pass holding ``team_of`` (by ``e.src``) looks the team up for each message and sends the
message on with it, and one pass, partitioned by the team, runs both handlers with the counts
local. Every replay equals the serial engine's, and every stage ran in several tasks that each
ran events. From a start state (a resume) the same program takes the copies instead, and still
equals serial.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from engine_matrix import (
    assert_ran_as_planned,
    assert_same_result,
    checkpointed_alike,
    keep_first_epochs,
    social_sample,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import restream_kit as rk
from restream_kit.engines import engines
from restream_kit.engines.spark.passes._plan import passes_of

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.filterwarnings("ignore::restream_kit.RestreamWarning")

#: The team rule, with what varies between the programs below left open: how a user's team
#: is written (``team``), what a user without one reads (``default``), and a line of
#: ``charge`` that may raise (``raises``).
RULE = """
from restream_kit import emit, on, state

HOUR = 3_600_000
team_of = state.Map(default={default})
team_msgs = state.Counter()


@on("friendship")
def join(e):
    team_of[e.src] = {team}


@on("message")
def charge(e):
    team = team_of[e.src]
    if team is not None:
        team_msgs[team] += 1
        team_msgs.add(team, -1, at=e.ts + HOUR)
    {raises}


@on("message")
def report(e):
    team = team_of[e.src]
    if team is not None and team_msgs[team] > 3:
        emit("busy_team", team=str(team), src=e.src, n=team_msgs[team])
"""

PROGRAMS = {
    "ints": dict(default="None", team="e.dst % 7", raises=""),
    # 3 and 3.0 are one key: their messages must meet in one partition.
    "equal_numbers": dict(
        default="None", team="e.dst % 7 if e.dst % 2 else float(e.dst % 7)", raises=""
    ),
    # A user with no team reads the default, itself a team with a count.
    "default_team": dict(default="'loners'", team="f't{e.dst % 5}'", raises=""),
    # A run that raises (under on_error="skip"), undone as the serial engine undoes it.
    "raises": dict(
        default="None",
        team="e.dst % 7",
        raises="if e.dst % 53 == 0:\n        raise ValueError(e.dst)",
    ),
}


def _program(name: str) -> rk.Program:
    return rk.Program.from_source(RULE.format(**PROGRAMS[name]), name=name)


# -- the passes, from the plan (no Spark) -----------------------------------------------------


def test_the_stages_using_a_looked_up_key_run_as_one_pass_partitioned_by_it():
    pp = passes_of(rk.Program.from_file(ROOT / "bench/programs/teams.py"))
    assert pp.reason is None
    assert [(p.stage, p.partition) for p in pp.passes] == [
        ("join", "e.src"),
        ("charge, busy", "team_of[e.src]"),
    ]
    home, looked = pp.passes
    # No fold, no copies, no write between passes: the counts live where they are used.
    assert looked.homes == ("team_hour",) and looked.finals == ("team_hour",)
    assert not looked.copies and not home.blind and not home.feeds
    # join serves both handlers' reads of team_of; the first one's value partitions.
    assert looked.lookup == ("team_of", "e.src", tuple(q.slot for q in looked.consumes))
    assert {q.home for q in looked.consumes} == {home.index}
    said = "its events and the value of team_of[e.src] from where team_of is held"
    assert looked.describe(4) == f"parallel over 4 partitions by team_of[e.src], {said}"
    layout = engines()["spark"].layout(rk.Program.from_file(ROOT / "bench/programs/teams.py"))
    assert layout["charge"] == layout["busy"] == looked.describe("N")
    # Without lookups (from a start state) the copies take it, as before.
    stages = [p.stage for p in passes_of(_program("ints"), lookups=False).passes]
    assert stages == ["join, charge", "fold team_msgs", "report"]


def test_no_lookup_when_the_looked_up_value_may_change_within_an_event():
    # A message handler writes team_of: charge and report could read two teams for one
    # message, so no pass can be partitioned by it.
    source = RULE.format(**PROGRAMS["ints"]) + (
        "\n\n@on('message')\ndef move(e):\n    team_of[e.src] = e.dst % 3\n"
    )
    pp = passes_of(rk.Program.from_source(source, name="moves"))
    assert not any(p.lookup for p in pp.passes)
    # A handler that uses another state besides: neither.
    other = (
        RULE.format(**PROGRAMS["ints"])
        .replace("team_msgs[team] += 1", "team_msgs[team] += 1\n        seen[e.ip] = 1")
        .replace("team_msgs = state.Counter()", "team_msgs = state.Counter()\nseen = state.Map()")
    )
    assert not any(p.lookup for p in passes_of(rk.Program.from_source(other, name="o")).passes)


# -- on Spark ----------------------------------------------------------------------------------


def _assert_looked_up(program: rk.Program, got: rk.Result) -> None:
    assert_ran_as_planned(program, got)
    for stage in ("charge", "report"):
        what = got.metrics.path[stage]
        assert "from where team_of is held" in what, what
    # Its events spread over its tasks (by team), not into one of them.
    busy = [n for n in got.metrics.task_events["charge, report"] if n]
    assert len(busy) >= 2, got.metrics.task_events


@pytest.fixture(params=[False, True], ids=["through Spark", "arranged by the driver"])
def arranged(request, monkeypatch, spark_session):
    """Both ways the looked-up pass gets its events: as rows Spark shuffles, or, when the
    driver arranges the passes (a local master, a large log: 100 events here), from files."""
    from restream_kit.engines.spark.passes import _local_arrangement as _local_arrangement

    monkeypatch.delenv("RESTREAM_SPARK_LOCAL_ARRANGE", raising=False)
    if request.param:
        monkeypatch.setattr(_local_arrangement, "LOCAL_ROWS", 100)
    return request.param


@pytest.mark.spark
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_a_looked_up_pass_equals_serial(name, arranged):
    p = _program(name)
    log = social_sample()
    on_error = "skip" if name == "raises" else "stop"
    want = rk.replay(p, log, on_error=on_error)
    assert want.tables["busy_team"].num_rows
    got = rk.replay(p, log, engine="spark", path="passes", partitions=3, on_error=on_error)
    assert_same_result(got, want)
    _assert_looked_up(p, got)
    assert ("arranged by the driver" in got.metrics.path["join"]) == arranged, got.metrics.path
    if arranged:  # the files the events went through were the replay's own, and are gone
        scratch = Path(os.environ["RESTREAM_HOME"]) / "scratch"
        assert not list(scratch.glob("values-*")), list(scratch.iterdir())
    if name == "raises":
        assert got.quarantine.num_rows == want.quarantine.num_rows > 0


@pytest.mark.spark
def test_a_looked_up_pass_checkpoints_and_resumes(arranged, tmp_path):
    """Checkpointed, the looked-up pass reports its state at every epoch's end; resumed from
    a committed epoch, the program takes the copies (its events meet their values in a sort
    there) and still equals serial."""
    from restream_kit.io import checkpoint

    p = _program("ints")
    log = social_sample()
    want, got, spark = checkpointed_alike(p, log, tmp_path)
    ck = spark["checkpoint"]
    _assert_looked_up(p, got)
    for k in range(4):
        serial, spark_ = (checkpoint.read(d, k).state["stores"] for d in (tmp_path / "serial", ck))
        assert serial["team_msgs"] == spark_["team_msgs"], k
    keep_first_epochs(ck, 2)
    got = rk.replay(p, log, **spark, resume=True)
    assert got.resumed_from_epoch == 2
    assert_same_result(got, want)
    assert_ran_as_planned(p, got)
    assert "copied whole to each" in got.metrics.path["report"], got.metrics.path


@st.composite
def team_logs(draw) -> list[dict]:
    """Friendships and messages among a few users, times with ties (several events of one
    time, in log order), and message bursts, so that counts pass the threshold and come back
    down after the hour."""
    users = draw(st.integers(2, 9))
    n = draw(st.integers(1, 300))
    ts = 0
    rows = []
    for _ in range(n):
        ts += draw(st.sampled_from([0, 0, 1, 7, 60_000, 3_600_000]))
        kind = draw(st.sampled_from(["friendship", "message", "message", "message"]))
        src = draw(st.integers(0, users - 1))
        dst = draw(st.integers(0, 40))
        rows.append({"ts": ts, "kind": kind, "src": src, "dst": dst, "ip": f"10.0.0.{dst % 3}"})
    return rows


@settings(
    max_examples=int(os.environ.get("RESTREAM_LOOKUP_PROPERTY_EXAMPLES", "25")),
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
)
@given(log=team_logs(), name=st.sampled_from(["ints", "equal_numbers", "default_team"]))
def test_generated_logs_through_a_looked_up_pass_equal_serial(log, name, spark_session):
    """Whatever the log, the looked-up pass gives the serial engine's tables and state."""
    p = _program(name)
    assert any(q.lookup for q in passes_of(p).passes)
    the_log = rk.Log(log)
    got = rk.replay(p, the_log, engine="spark", path="passes", partitions=3, require_kinds=False)
    assert_same_result(got, rk.replay(p, the_log, require_kinds=False))
    assert_ran_as_planned(p, got)
