"""Broadcast reads on the pass path: a stage that reads upstream state by a key that is not
the event's, or whole, or on scheduled events, runs in parallel with a copy of that state in
every partition (``restream_kit/engines/spark/passes/_plan.py``).

Every replay equals the serial engine's, and every stage ran in several tasks that each ran
events: a copy pass that put all its work in one task fails here.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from engine_matrix import (
    assert_ran_as_planned,
    assert_same_result,
    checkpointed_alike,
    keep_first_epochs,
    social_sample,
)

import restream_kit as rk
from restream_kit.engines import engines
from restream_kit.engines.spark.passes._plan import BY_KEY, ORDER, SINGLE, passes_of

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.filterwarnings("ignore::restream_kit.RestreamWarning")

#: Messages charged to the sender's team (looked up): a rule reads the team's count by the
#: looked-up team and the number of IPs seen (a whole read), and keeps its own count per
#: sender (so its pass is partitioned by the sender); a timed write takes each charge back
#: after an hour; scheduled checks read both states whole.
TEAMS = """
from restream_kit import emit, on, schedule, state

HOUR = 3_600_000
team_of = state.Map(default=None)
team_msgs = state.Counter()
ips = state.Counter()
warned = state.Counter()


@on("friendship")
def join(e):
    team_of[e.src] = e.dst % 7


@on("message")
def charge(e):
    team = team_of[e.src]
    if team is not None:
        team_msgs[team] += 1
        team_msgs.add(team, -1, at=e.ts + HOUR)
    ips[e.ip] += 1


@on("message")
def report(e):
    team = team_of[e.src]
    if team is not None and team_msgs[team] > 3:
        warned[e.src] += 1
        emit("busy_team", team=team, src=e.src, n=team_msgs[team], ips=len(ips), w=warned[e.src])
    if e.src % 97 == 0:
        schedule("check", at=e.ts + 60_000, src=e.src)


@on("check")
def check(e):
    total = sum(team_msgs[t] for t in team_msgs)
    emit("checked", src=e.src, total=total, top=max([ips[i] for i in ips], default=0))
"""

#: Scheduled events that read, by their own key, state an earlier stage writes: no earlier
#: pass sees them, so none can send the values they read.
LATE = """
from restream_kit import emit, on, schedule, state

seen = state.Counter()
last = state.Value(default=0)


@on("message")
def count(e):
    seen[e.src] += 1
    last.set(e.ts)


@on("message")
def arm(e):
    if e.src % 13 == 0:
        schedule("later", at=e.ts + 30_000, src=e.src)


@on("later")
def late(e):
    emit("late", src=e.src, n=seen[e.src], last=last.get())
"""

#: A copy reader that schedules nothing, so its pass runs by ranges of the log: the team's
#: count read by the looked-up team, and a map read whole whose keys are deleted and come
#: back (the order a copy holds them in shows in ``order``).
RANGED = """
from restream_kit import emit, on, state

HOUR = 3_600_000
team_of = state.Map(default=None)
team_msgs = state.Counter()
recent = state.Map(default=None)


@on("friendship")
def join(e):
    team_of[e.src] = e.dst % 7


@on("message")
def charge(e):
    team = team_of[e.src]
    if team is not None:
        team_msgs[team] += 1
        team_msgs.add(team, -1, at=e.ts + HOUR)
        recent[team] = e.src
        if e.dst % 5 == 0:
            del recent[team]


@on("message")
def report(e):
    team = team_of[e.src]
    if team is not None and team_msgs[team] > 3:
        order = ",".join(str(t) for t in recent)
        emit("busy_team", team=team, src=e.src, n=team_msgs[team], order=order)
"""

PROGRAMS = {"teams": TEAMS, "late": LATE, "ranged": RANGED}


def _program(name: str) -> rk.Program:
    return rk.Program.from_source(PROGRAMS[name], name=name)


# -- the passes, from the plan (no Spark) -----------------------------------------------------


def test_a_read_by_a_looked_up_key_gets_a_copy_in_every_partition():
    pp = passes_of(rk.Program.from_file(ROOT / "examples/plans/key_from_read.py"))
    assert pp.reason is None
    by_stage = {p.stage: p for p in pp.passes}
    over = by_stage["over_quota"]
    assert over.copies == ("team_msgs",) and over.partition == ORDER
    # charge's merges go to the fold that keeps the final counts, which sends each key's
    # value after each of them (the versions) to every partition of over_quota.
    fold = by_stage["fold team_msgs"]
    assert by_stage["charge"].blind["team_msgs"] == (fold.index,)
    assert fold.versions_to == (over.index,) and fold.index < over.index
    assert fold.sends == {over.index: "versions"}
    assert not any(q.state == "team_msgs" for q in over.consumes)
    assert over.describe(4) == (
        "parallel over 4 partitions (by log order), team_msgs copied whole to each"
    )
    said = engines()["spark"].layout(rk.Program.from_file(ROOT / "examples/plans/key_from_read.py"))
    assert (
        said["over_quota"]
        == "parallel over N partitions (by log order), team_msgs copied whole to each"
    )


def test_a_blind_writer_reading_what_an_earlier_pass_holds_runs_in_that_pass():
    # charge reads team_of by e.src, which join holds by e.src, and only merges into
    # team_hour: it runs in join's pass (no pass and no probe rows of its own). (So it does
    # when no stage may be partitioned by the looked-up team, as from a start state:
    # test_lookups.py has the passes otherwise.)
    pp = passes_of(rk.Program.from_file(ROOT / "bench/programs/teams.py"), lookups=False)
    assert [(p.stage, p.partition) for p in pp.passes] == [
        ("join, charge", "e.src"),
        ("fold team_hour", BY_KEY),
        ("busy", ORDER),
    ]
    host, fold, busy = pp.passes
    assert host.blind == {"team_hour": (fold.index,)} and host.homes == ("team_of",)
    assert fold.versions_to == (busy.index,) and busy.copies == ("team_hour",)


def test_whole_reads_and_reads_on_scheduled_events_get_copies():
    teams = {p.stage: p for p in passes_of(_program("teams")).passes}
    assert teams["report"].copies == ("team_msgs", "ips")
    assert teams["check"].copies == ("team_msgs", "ips")
    # report keeps its own count per sender: partitioned by it, copies beside.
    assert teams["report"].partition == "e.src" and teams["report"].homes == ("warned",)
    late = {p.stage: p.copies for p in passes_of(_program("late")).passes}
    assert late["late"] == ("seen", "last")


def test_what_the_passes_cannot_split_runs_as_one_pass_and_says_why():
    source = textwrap.dedent(
        """
        from restream_kit import emit, on, schedule

        @on("message")
        def a(e):
            schedule("x", at=e.ts + 10, src=e.src)

        @on("friendship")
        def b(e):
            schedule("y", at=e.ts + 10, src=e.src)

        @on("x", "y")
        def c(e):
            emit("out", src=e.src)
        """
    )
    p = rk.Program.from_source(source, name="two_schedulers")
    pp = passes_of(p)
    assert pp.reason == "several stages schedule events"
    (only,) = pp.passes
    assert only.partition == SINGLE and only.describe(4).startswith("sequential in one task")
    # Said before any replay, by the engine's layout, and warned about after it.
    assert engines()["spark"].layout(p) == {
        "whole program": "sequential in one task: several stages schedule events"
    }


# -- on Spark ----------------------------------------------------------------------------------


@pytest.mark.spark
@pytest.mark.parametrize("epoch", [None, 1500], ids=["whole log", "epochs"])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_copy_passes_equal_serial_and_spread_their_events(name, epoch, spark_session, tmp_path):
    p = _program(name)
    log = social_sample()
    want = rk.replay(p, log)
    assert all(t.num_rows for t in want.tables.values()) and len(want.tables) >= 1
    options = {} if epoch is None else {"checkpoint": str(tmp_path / "ck"), "epoch": epoch}
    got = rk.replay(p, log, engine="spark", path="passes", partitions=3, **options)
    assert_same_result(got, want)
    assert_ran_as_planned(p, got)
    copies = {s: p_.copies for p_ in passes_of(p).passes for s in p_.stages if p_.copies}
    assert copies, "no stage holds a copy"
    for stage, what in got.metrics.path.items():
        # (a pass by log order keeps the log frame's partitions: their number is Spark's)
        # (with a checkpoint, what each pass's tasks report at the epochs' ends follows)
        committed = ", its state at each of the \\d+ epochs' ends committed to the checkpoint"
        tasks = re.fullmatch(
            rf"parallel over \d+ partitions.* \((\d+) tasks\)({committed if epoch else ''})", what
        )
        assert tasks and int(tasks[1]) >= 2, (stage, what)
        if stage in copies:
            assert f"{' and '.join(copies[stage])} copied whole to each" in what, what
            assert ("ranges of the log" in what) == (name == "ranged"), what
            # Its events spread over its tasks, not into one of them.
            busy = [n for n in got.metrics.task_events[stage] if n]
            assert len(busy) >= 2, (stage, got.metrics.task_events[stage])


@pytest.mark.spark
def test_a_copy_pass_by_ranges_resumes_and_starts_from_an_epoch(spark_session, tmp_path):
    """A pass by ranges of the log, from a committed epoch: its ranges split the events after
    the start, and each copy starts from the state at its range's start (the state the
    replay starts from, then the versions after it)."""
    from restream_kit.io import checkpoint

    p = _program("ranged")
    log = social_sample()
    want, got, spark = checkpointed_alike(p, log, tmp_path)
    ck = spark["checkpoint"]
    # A state read whole keeps the serial engine's order of keys, in each commit and at the
    # end (the folds' tasks each hold some of its keys).
    for k in range(4):
        serial, spark_ = (
            checkpoint.read(d, k).state["stores"]["recent"] for d in (tmp_path / "serial", ck)
        )
        assert list(serial.items()) == list(spark_.items()), k
    assert list(got.state["recent"].items()) == list(want.state["recent"].items())
    keep_first_epochs(ck, 2)
    got = rk.replay(p, log, **spark, resume=True)
    assert got.resumed_from_epoch == 2
    assert_same_result(got, want)
    assert_ran_as_planned(p, got)
    assert "by 3 ranges of the log" in got.metrics.path["report"]
    # Each range holds events after the start: every task of the reading pass ran some.
    assert all(got.metrics.task_events["report"]), got.metrics.task_events
    start = (tmp_path / "serial", 1)
    want = rk.replay(p, log, start_from=start)
    got = rk.replay(p, log, engine="spark", path="passes", partitions=3, start_from=start)
    assert_same_result(got, want)
    assert all(got.metrics.task_events["report"]), got.metrics.task_events
