"""The Spark engine's passes: one parallel job per stage, with the handlers as written.

Each Spark replay here equals the serial engine's (the oracle) and says, in
``metrics.path``, that every stage ran in parallel over several tasks: a program the plan
calls parallel that ran in one task fails here.
"""

from __future__ import annotations

import os
import re
import textwrap
from pathlib import Path

import pytest
from engine_matrix import assert_ran_as_planned, assert_same_result, social_sample
from hypothesis import HealthCheck, assume, given, settings
from naive import spark_cases

import restream_kit as rk
from restream_kit.engines import engines
from restream_kit.engines.spark.passes._plan import BY_KEY, ORDER, plan_passes
from restream_kit.engines.spark.passes._window_shapes import closes_once, folded_counts
from restream_kit.io.progress import Progress, Recorder, StageFinished
from restream_kit.planner import plan

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.filterwarnings("ignore::restream_kit.RestreamWarning")


def program(path: str) -> rk.Program:
    return rk.Program.from_file(ROOT / path)


def passes_of(path: str):
    p = program(path)
    return plan_passes(p, plan(p, allow_nondeterminism=True))


# -- the passes, from the plan (no Spark) -----------------------------------------------------


def test_each_stage_is_a_pass_partitioned_as_the_plan_says():
    pp = passes_of("bench/programs/ordinary.py")
    assert pp.reason is None
    # ip_window is stateless, but every write is under e.ip: its pass holds ip_hour. The
    # reader, suspicious, runs in that pass and reads rate where sender_rate holds it.
    assert [(p.stages, p.partition) for p in pp.passes] == [
        (("sender_rate",), "e.src"),
        (("ip_window", "suspicious"), "e.ip"),
    ]
    served = {(q.state, q.key, q.home, q.reader) for p in pp.passes for q in p.serves}
    assert served == {("rate", "e.src", 0, 1)}


def test_state_written_under_several_keys_is_folded_by_the_key_it_is_read_by():
    pp = passes_of("examples/antispam.py")
    names = [(p.stage, p.partition) for p in pp.passes]
    assert names[0] == ("befriend", ORDER)
    assert names[1] == ("fold friends by (e.src, e.dst)", "(e.src, e.dst)")
    assert pp.passes[0].blind == {"friends": (1,)}
    # flag reads the counters of tally_sender (as probes) and of tally_ip (where it runs).
    assert names[2:] == [("tally_sender", "e.src"), ("tally_ip, flag", "e.ip")]


def test_windows_send_their_writes_and_closing_events_to_the_close_stage():
    pp = passes_of("bench/programs/windows.py")
    track, close = pp.passes
    # By the window's key: its adds go there as narrow rows (``passes._narrow``), or, where
    # the replay runs the expansion, as writes to the partition of the key in (key, start).
    assert close.partition == "e.key" and close.elements == {"per_sender__n": 0}
    assert close.narrow == ("per_sender",) and track.narrow_to == {"per_sender": close.index}
    assert track.blind == {"per_sender__n": (close.index,)}
    assert pp.kind_passes["per_sender:close"] == (close.index,)


def test_a_state_only_written_is_folded_by_its_own_key():
    p = rk.Program.from_source(
        textwrap.dedent(
            """
            from restream_kit import state, on
            seen = state.Counter()

            @on("message")
            def a(e):
                seen[e.src] += 1

            @on("friendship")
            def b(e):
                seen[e.dst] += 1
            """
        ),
        name="sink",
    )
    pp = plan_passes(p, plan(p))
    assert pp.reason is None
    assert pp.passes[-1].partition == BY_KEY and pp.passes[-1].finals == ("seen",)


def test_a_stage_partitioned_by_an_element_of_its_keys_is_one_parallel_pass():
    pp = passes_of("examples/plans/tumbling_window.py")
    assert pp.reason is None
    (only,) = pp.passes
    assert only.partition == "e.symbol" and set(only.homes) == {"volume", "is_open"}


# -- on Spark ------------------------------------------------------------------------------


def assert_said_before(p: rk.Program, log: rk.Log, got: rk.Result) -> None:
    """What the engine said before the replay is what ran (``restream plan --engine spark``);
    ``got`` a replay with three partitions."""
    said = engines()["spark"].layout(p, log, {"partitions": 3, "path": "passes"})
    assert set(said) == set(got.metrics.path)

    def count(t: str) -> str:
        # A pass by log order keeps the log frame's partitions: their number is Spark's.
        return re.sub(r"over \d+ partitions", "over K partitions", t)

    for stage, what in got.metrics.path.items():
        assert count(what).startswith(count(said[stage])), (stage, what, said[stage])


PARALLEL = [
    "bench/programs/sender_ewma.py",
    "bench/programs/ordinary.py",
    "bench/programs/windows.py",
    "examples/antispam.py",
    "examples/plans/five_rules.py",
    "examples/plans/cycle_same_key.py",
    "examples/plans/session_windows.py",
    "examples/plans/rate_limit.py",
]


@pytest.mark.spark
@pytest.mark.parametrize("path", PARALLEL)
def test_programs_run_in_parallel_passes_and_equal_serial(path, spark_session):
    p = program(path)
    log = social_sample()
    # Some of the plans' examples listen on kinds the social log lacks: those handlers idle.
    got = rk.replay(p, log, engine="spark", path="passes", partitions=3, require_kinds=False)
    assert_same_result(got, rk.replay(p, log, require_kinds=False))
    assert_ran_as_planned(p, got)
    assert_said_before(p, log, got)
    planned = {s.name: s.mode for s in plan(p).stages}
    for stage, what in got.metrics.path.items():
        if planned.get(stage) != "sequential":
            assert what.startswith("parallel over"), (stage, what)
            if what.endswith("(no event reaches it)"):
                kinds = {k for s in plan(p).stages if s.name == stage for k in s.kinds}
                assert kinds and not kinds & set(log.kinds), (stage, what, kinds)
                continue
            tasks = int(what.rsplit("(", 1)[1].split()[0])
            assert tasks >= 2, (stage, what)


@pytest.mark.spark
def test_domains_run_in_parallel_passes(spark_session):
    for path, logs in [
        ("examples/iot.py", {"reading": "sample_data/iot_small/readings.parquet"}),
        (
            "examples/adclicks.py",
            {
                "impressions": "sample_data/adclicks_small/impressions.parquet",
                "clicks": "sample_data/adclicks_small/clicks.parquet",
            },
        ),
    ]:
        p = program(path)
        whole = rk.Log([f"{kind}={ROOT / f}" for kind, f in logs.items()])
        log = rk.Log(whole.table.slice(0, 4000).drop_columns(["lsn"]))
        got = rk.replay(p, log, engine="spark", path="passes", partitions=2)
        assert_same_result(got, rk.replay(p, log))
        assert not any(w.startswith("spark: the whole program") for w in got.warnings)
        assert all(v.startswith("parallel") for v in got.metrics.path.values()), got.metrics.path


@pytest.mark.spark
def test_a_timed_write_after_the_log_comes_before_a_later_scheduled_events_write(spark_session):
    # Found by the property test: the timed add at ts 1 (after the log's last event) is due
    # because the scheduled 'b' at ts 2 runs; the fold must apply it before b's delete.
    p = rk.Program.from_source(
        textwrap.dedent(
            """
            from restream_kit import state, on, schedule

            s0 = state.Counter()

            @on('a', 'b')
            def h0(e):
                del s0[e.k]

            @on('a')
            def h1(e):
                s0[e.k] += 0

            @on('a')
            def h2(e):
                s0.add(e.k, 0, at=e.ts + 1)

            @on('a')
            def hx(e):
                schedule('b', at=e.ts + 2, k=e.k)
            """
        )
    )
    log = rk.Log([{"ts": 0, "kind": "a", "k": 0}, {"ts": 0, "kind": "a", "k": 1}])
    got = rk.replay(p, log, engine="spark", path="passes", partitions=2)
    assert_same_result(got, rk.replay(p, log))


@pytest.mark.spark
def test_handler_errors_are_the_serial_engines(spark_session):
    p = rk.Program.from_source(
        textwrap.dedent(
            """
            from restream_kit import state, on, emit
            n = state.Counter()

            @on("message")
            def count(e):
                n[e.src] += 1
                if n[e.src] == 3 and e.src % 7 == 0:
                    raise ValueError("third message")
            """
        ),
        name="boom",
    )
    log = social_sample(3000)
    with pytest.raises(rk.HandlerError) as serial_error:
        rk.replay(p, log)
    with pytest.raises(rk.HandlerError) as spark_error:
        rk.replay(p, log, engine="spark", path="passes")
    assert str(spark_error.value) == str(serial_error.value)


@pytest.mark.spark
def test_quarantine_on_passes_equals_serial(spark_session):
    p = rk.Program.from_source(
        textwrap.dedent(
            """
            from restream_kit import state, on, emit, hours
            n = state.Counter()
            window = state.Counter()

            @on("message")
            def count(e):
                n[e.src] += 1
                window.add(e.ip, 1, at=e.ts + hours(1))
                emit("seen", src=e.src)
                if n[e.src] % 5 == 0:
                    raise ValueError("every fifth")

            @on("message")
            def check(e):
                if window[e.ip] > 3:
                    emit("busy", ip=e.ip)
            """
        ),
        name="poison",
    )
    log = social_sample(3000)
    want = rk.replay(p, log, on_error="quarantine")
    got = rk.replay(p, log, engine="spark", path="passes", on_error="quarantine")
    assert_same_result(got, want)
    assert got.quarantine.num_rows == want.quarantine.num_rows > 0
    assert got.quarantine.drop_columns(["traceback"]).equals(
        want.quarantine.drop_columns(["traceback"])
    )
    assert all(v.startswith("parallel") for v in got.metrics.path.values())


@pytest.mark.spark
def test_progress_streams_per_pass(spark_session):
    p = program("bench/programs/ordinary.py")
    rec = Recorder()
    rk.replay(p, social_sample(), engine="spark", path="passes", observer=rec)
    finished = [e.stage for e in rec.events if isinstance(e, StageFinished)]
    assert finished == ["sender_rate", "ip_window, suspicious"]
    done = [e.events_done for e in rec.events if isinstance(e, Progress)]
    assert done == sorted(done) and len(set(done)) >= 2 and done[-1] == 6000


def _forwarding(program: rk.Program) -> bool:
    from restream_kit.engines.spark.passes._plan import forwards

    return forwards(plan_passes(program, rk.plan(program, allow_nondeterminism=True)))


def test_events_carry_their_reads_from_pass_to_pass(spark_session):
    """A rule whose later pass reads what earlier passes hold (a float EWMA per sender, a
    sliding count per IP by a timed write, and a rule reading both) sends each event on with
    the values it reads, instead of a probe row per read: same result, said in the path."""
    p = rk.Program.from_file(ROOT / "bench" / "programs" / "ordinary.py")
    assert _forwarding(p)
    log = social_sample()
    got = rk.replay(p, log, engine="spark", path="passes", partitions=3)
    assert_same_result(got, rk.replay(p, log))
    assert_ran_as_planned(p, got)
    assert_said_before(p, log, got)
    assert "values read upstream" in got.metrics.path["suspicious"]
    # The later pass took its events from the log, and only the values from the earlier one.
    assert "events from the log's arrangement" in got.metrics.path["suspicious"]


def test_whole_events_travel_when_values_and_events_are_not_zipped(spark_session, monkeypatch):
    """With ``$RESTREAM_SPARK_ZIP=0`` (what a Spark without partition-keeping unions gets)
    the events themselves go from pass to pass with their values: same result."""
    monkeypatch.setenv("RESTREAM_SPARK_ZIP", "0")
    p = rk.Program.from_file(ROOT / "bench" / "programs" / "ordinary.py")
    log = social_sample()
    got = rk.replay(p, log, engine="spark", path="passes", partitions=3)
    assert_same_result(got, rk.replay(p, log))
    assert_ran_as_planned(p, got)
    assert "with the values read upstream on its events" in got.metrics.path["suspicious"]


FORWARDED_KEYS = """
from restream_kit import emit, on, state

rate = state.Map(default=0.0)
seen = state.Counter()
last = state.Map(default=None)


def octet(ip):
    return ip.split(".")[1]


@on("message")
def per_sender(e):
    rate[e.src] = 0.9 * rate[e.src] + (0.1 if e.has_email else 0.0)


@on("message")
def per_bucket(e):
    seen[octet(e.ip)] += 1


@on("message")
def per_pair(e):
    last[(e.src, e.dst % 3)] = e.ip if e.dst % 5 else (e.dst, None)


@on("message")
def per_ip(e):
    if rate.get(e.src, -1.0) > 0.05 and seen[octet(e.ip)] > 3:
        emit("hit", ip=e.ip, got=repr(last[(e.src, e.dst % 3)]), n=seen[octet(e.ip)])
"""


@pytest.mark.spark
def test_reads_upstream_by_a_field_or_by_a_helper_travel_as_values_alike(spark_session):
    """A read under the event's own fields puts its value in place by position; one under a
    call (``octet(e.ip)``, ``e.ip.split(".")[1]``) calls the key on the named event. Floats, ints and
    other values (strings, tuples, None) travel in their probe columns: same result."""
    from restream_kit.compiler.inline import key_source

    columns = ["lsn", "ts", "kind", "src", "dst"]
    assert key_source("(e.src, e.dst % 3)", columns) == "(_rs_ev[3], _rs_ev[4] % 3)"
    assert key_source('e.ip.split(".")[1]', columns + ["ip"]) is None
    assert key_source("e.nowhere", columns) is None
    p = rk.Program.from_source(textwrap.dedent(FORWARDED_KEYS), name="keys")
    assert _forwarding(p)
    log = social_sample()
    got = rk.replay(p, log, engine="spark", path="passes", partitions=3)
    want = rk.replay(p, log)
    assert want.tables["hit"].num_rows > 100
    assert_same_result(got, want)
    assert_ran_as_planned(p, got)
    assert "values read upstream" in got.metrics.path["per_ip"]


def test_a_value_without_its_event_fails_the_task():
    """A zipped pass whose values and events do not meet (the union lost its partitioning)
    fails loudly instead of running handlers without the values they read."""
    import pyarrow as pa

    from restream_kit.engines.spark.passes._zipped import VALUES, ZipError, unzip

    def values(lsn, value):
        chunk = pa.record_batch(
            {"lsn": pa.array(lsn, pa.int64()), "_rs_qd0": pa.array(value, pa.float64())}
        )
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, chunk.schema) as writer:
            writer.write_batch(chunk)
        return pa.record_batch(
            {"lsn": pa.nulls(1, pa.int64()), VALUES: [sink.getvalue().to_pybytes()]}
        )

    def events(lsn):
        return pa.record_batch(
            {"lsn": pa.array(lsn, pa.int64()), VALUES: pa.nulls(len(lsn), pa.binary())}
        )

    ok = list(unzip(iter([values([5, 3], [0.5, 0.3]), events([3, 5])])))
    assert ok[0].column("_rs_qd0").to_pylist() == [0.3, 0.5]
    with pytest.raises(ZipError, match="1 of 2 values read upstream found no event"):
        list(unzip(iter([values([5, 4], [0.5, 0.4]), events([5])])))
    with pytest.raises(ZipError, match="came after its events"):
        list(unzip(iter([events([5]), values([5], [0.5])])))


@pytest.mark.spark
def test_a_log_with_none_of_the_serving_passes_kinds_reads_defaults(spark_session):
    """Hypothesis found it: ``h2`` reads ``s0`` (held by ``h1``'s pass, on ``b`` events) and
    ``h0`` is fused beside it, but the log has only ``a`` events. No event comes from the
    serving pass, so the reading pass's events carry no value columns at all: its reads see
    the default, as serially (the task failed on the missing column)."""
    source = textwrap.dedent(
        """
        from restream_kit import state, on, emit

        s0 = state.Counter()
        s1 = state.Counter()

        @on('a')
        def h0(e):
            emit("out", v=s1[e.k], has=e.k in s1)

        @on('b')
        def h1(e):
            s0[e.k] += 0

        @on('b')
        def h2(e):
            s1[e.k] += (s0[e.k] + 1)
        """
    )
    p = rk.Program.from_source(source, name="no_b")
    assert _forwarding(p)
    log = rk.Log([{"ts": 0, "kind": "a", "k": 0, "j": 0, "v": 0}])
    got = rk.replay(p, log, engine="spark", partitions=2, path="passes", require_kinds=False)
    assert_same_result(got, rk.replay(p, log, require_kinds=False))
    assert "no event reaches it" in got.metrics.path["h1"], got.metrics.path


@settings(
    max_examples=int(os.environ.get("RESTREAM_FORWARD_PROPERTY_EXAMPLES", "30")),
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
)
@given(case=spark_cases())
def test_forwarded_events_equal_the_serial_engine(case, spark_session):
    """Generated programs whose passes forward events (reads of upstream state under the
    holder's key, nothing else crossing passes) equal the serial engine."""
    source, log, _epoch, _path = case
    program = rk.Program.from_source(source, name="fwd")
    assume(_forwarding(program))
    the_log = rk.Log(log)
    got = rk.replay(
        program, the_log, engine="spark", partitions=2, path="passes", require_kinds=False
    )
    assert_same_result(got, rk.replay(program, the_log, require_kinds=False))
    assert_ran_as_planned(program, got)


@pytest.mark.spark
def test_windows_keyed_by_a_tuple_run_in_parallel_by_its_element(spark_session):
    """Tumbling windows keyed (symbol, window end), closed by scheduled events: the stage
    is partitioned by the symbol, and the closes reach the partition of their symbol."""
    p = program("examples/plans/tumbling_window.py")
    trades = [
        {"ts": 1_000 * i + (i * 7919) % 997, "kind": "trade", "symbol": f"S{i % 7}", "qty": i % 13}
        for i in range(4000)
    ]
    log = rk.Log(trades)
    got = rk.replay(p, log, engine="spark", path="passes", partitions=3)
    assert_same_result(got, rk.replay(p, log))
    assert_ran_as_planned(p, got)
    assert_said_before(p, log, got)
    (what,) = set(got.metrics.path.values())
    assert what.startswith("parallel over 3 partitions by e.symbol"), what
    assert int(what.rsplit("(", 1)[1].split()[0]) >= 2, what


WINDOW_CLOSES_COUNTED = """\
from restream_kit import emit, minutes, on, state
from restream_kit.windows import tumbling

per_sender = tumbling(minutes(10), "count", table="sender_10min")
closes = state.Counter()


@on("message")
def track(e):
    per_sender.add(e.src)


@on("per_sender:close")
def count_closes(e):
    closes[e.key] += 1
"""


HOPPING_SUMS = """
from restream_kit import emit, minutes, on
from restream_kit.windows import hopping

per_src = hopping(minutes(10), minutes(5), "sum", table="sums")


@on("message")
def track(e):
    per_src.add(e.src, e.ts % 7 + 0.5)
"""

#: A user's own call of the generated function, with a time that is not the event's.
WINDOW_ADD_EARLIER = """
from restream_kit import minutes, on
from restream_kit.windows import tumbling

per_sender = tumbling(minutes(10), "count", table="sender_10min")


@on("message")
def track(e):
    per_sender__add(e.src, None, e.ts - 1)
"""


@pytest.mark.spark
def test_a_pass_sends_a_windows_adds_summed_only_where_the_generated_code_allows_it(
    spark_session,
):
    """A window's count is written blind by the adding pass and read by the close: the pass
    sends one write per window holding the sum of its adds, when the code is the generated
    one (nothing reads the count between its adds and its close). Results equal serial."""
    windows = program("bench/programs/windows.py")
    assert folded_counts(windows) == {"per_sender__n"}
    hopping = rk.Program.from_source(HOPPING_SUMS, "hopping")
    assert folded_counts(hopping) == {"per_src__n"}  # the float sums travel one by one
    assert folded_counts(rk.Program.from_source(WINDOW_CLOSES_COUNTED, "counted")) == set()
    assert folded_counts(rk.Program.from_source(WINDOW_ADD_EARLIER, "earlier")) == set()
    log = social_sample()
    for prog in (windows, hopping):
        want = rk.replay(prog, log)
        got = rk.replay(prog, log, engine="spark", path="passes", partitions=3)
        assert_same_result(got, want)
        assert_ran_as_planned(prog, got)


@pytest.mark.spark
def test_a_pass_sends_one_of_identical_window_closes_unless_someone_else_listens(spark_session):
    """Every add to a tumbling window schedules its close; only the first acts, so a pass
    sends one of identical closes and counts the rest. A handler of the user's own on the
    close kind sees every close: then all are sent."""
    windows = program("bench/programs/windows.py")
    assert closes_once(windows) == {"per_sender:close"}
    log = social_sample()
    want = rk.replay(windows, log)
    got = rk.replay(windows, log, engine="spark", path="passes", partitions=3)
    assert_same_result(got, want)
    assert got.metrics.scheduled_events == want.metrics.scheduled_events > 0

    counted = rk.Program.from_source(WINDOW_CLOSES_COUNTED, "counted")
    assert closes_once(counted) == frozenset()
    want = rk.replay(counted, log)
    got = rk.replay(counted, log, engine="spark", path="passes", partitions=3)
    assert_same_result(got, want)
    assert sum(got.state["closes"].values()) == want.metrics.scheduled_events


@pytest.mark.spark
def test_a_timed_write_waiting_in_a_holder_and_a_copy_applies_once(spark_session):
    """A timed write left waiting after the log is reported by every pass holding its state
    (the fold, and the pass holding a copy for a read on scheduled events): the driver
    applies it once, when an event at or after its time ran. Found by the property test."""
    source = textwrap.dedent(
        """
        from restream_kit import state, on, schedule

        s0 = state.Counter()
        s1 = state.Counter()

        @on("a", "b")
        def h0(e):
            s1.add(e.k, -1, at=e.ts + 2)

        @on("a", "b")
        def h1(e):
            s0[e.k] += s1[e.k] + 1

        @on("a")
        def h2(e):
            s1[e.k] += s1[e.k] + 1

        @on("a")
        def hx(e):
            schedule("b", at=e.ts + 2, k=e.k)
        """
    )
    p = rk.Program.from_source(source, name="twice")
    log = rk.Log([{"ts": 0, "kind": "a", "k": 0}])
    want = rk.replay(p, log)
    assert want.state["s1"] == {0: 0}  # the write at 2 applied (b ran at 2), the one at 4 not
    got = rk.replay(p, log, engine="spark", path="passes", partitions=2)
    assert any("copied whole" in what for what in got.metrics.path.values()), got.metrics.path
    assert_same_result(got, want)
    assert_ran_as_planned(p, got)


#: Sliding windows keyed like their stage (one also read by another stage's handler), and a
#: tumbling window keyed otherwise.
SLIDING_BY_SENDER = """
from restream_kit import emit, on, state
from restream_kit.windows import sliding, tumbling

recent = sliding(60000, "count")
peers = sliding(60000, "distinct")
loud = sliding(60000, "max")
per_ip = tumbling(600000, "count", table="per_ip")
seen = state.Counter()


@on("message")
def track(e):
    recent.add(e.src)
    peers.add(e.src, e.dst)
    loud.add(e.src, e.dst % 13)
    per_ip.add(e.ip)
    if recent.value(e.src) > 3 and peers.value(e.src) > 2:
        emit("burst", src=e.src, top=loud.value(e.src))
"""


def test_the_path_says_which_windows_run_fused_in_their_pass_and_why_not():
    """A sliding window whose every state its stage's pass holds alone runs in that pass as
    the serial engine runs it; one read by another stage (a fold serves it) does not, with
    its reason; a closing window keyed otherwise runs narrow in its close pass."""
    source = SLIDING_BY_SENDER + '\n@on("friendship")\ndef other(e):\n'
    source += "    seen[e.dst] += recent.value(e.dst)\n"
    p = rk.Program.from_source(source, "sliding_read")
    said = {q.stage: q.describe(2) for q in plan_passes(p, plan(p)).passes}
    assert "window peers fused: a dict per key" in said["track"]
    assert "window loud fused: a queue per key" in said["track"]
    assert "window recent not fused: its state is written, folded or read" in said["track"]
    closes = said["per_ip__close"]
    assert "window per_ip narrow: its adds sent from track as narrow rows" in closes
    # Where the tasks cannot run them natively (a checkpoint...), the path says so.
    track = next(q for q in plan_passes(p, plan(p)).passes if q.stage == "track")
    assert "window peers not fused: its expansion" in track.describe(2, fused=False)


@pytest.mark.spark
def test_sliding_windows_keyed_like_their_stage_run_fused_in_its_pass(spark_session):
    """No timed write per add through the expansion: the pass runs the serial engine's
    native sliding windows (count by timed decrements, max by a queue per key, distinct by a
    dict per key, whose tuples the state gets at the end), and the result is the serial one,
    states too."""
    p = rk.Program.from_source(SLIDING_BY_SENDER, "sliding_fused")
    log = social_sample()
    want = rk.replay(p, log)
    assert want.tables["burst"].num_rows > 0
    got = rk.replay(p, log, engine="spark", path="passes", partitions=3)
    assert_same_result(got, want)
    assert_ran_as_planned(p, got)
    for name in ("recent", "peers", "loud"):
        assert f"window {name} fused" in got.metrics.path["track"], got.metrics.path
    assert "window per_ip narrow" in got.metrics.path["per_ip__close"]


@pytest.mark.spark
def test_a_fused_sliding_count_applies_what_falls_due_after_its_partitions_last_event(
    spark_session,
):
    """A partition's last event may come long before the log's, and a closing window's close
    runs after the log: the decrements a fused sliding count holds past the partition's end
    fall due by the log's last event, or by that close, exactly as in the serial replay."""
    source = textwrap.dedent(
        """
        from restream_kit import emit, on
        from restream_kit.windows import sliding, tumbling

        recent = sliding(5, "count")
        per_k = tumbling(100, "count", table="per_k")


        @on("a")
        def track(e):
            recent.add(e.k)
            per_k.add(e.k)
            if recent.value(e.k) > 1:
                emit("hot", k=e.k)
        """
    )
    p = rk.Program.from_source(source, "fused_after_the_end")
    rows = [{"ts": 10 * k, "kind": "a", "k": k} for k in range(8)]
    rows += [{"ts": 71, "kind": "a", "k": 7}, {"ts": 200, "kind": "a", "k": 0}]
    want = rk.replay(p, rk.Log(rows))
    # Each key's add expired by the end: the log's last event, or the close at 300.
    assert set(want.state["recent__n"].values()) <= {0, 1}, want.state
    got = rk.replay(p, rk.Log(rows), engine="spark", path="passes", partitions=3)
    assert "window recent fused" in got.metrics.path["track"], got.metrics.path
    assert_same_result(got, want)
    assert_ran_as_planned(p, got)
