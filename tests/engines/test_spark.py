"""The Spark engine beyond the shared semantic suite: epochs, progress, what runs in one task,
numbers, retired options, key encodings and the command line.

Every replay here is checked against the serial engine, the oracle.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from engine_matrix import assert_ran_as_planned, assert_same_result

import restream_kit as rk
from restream_kit.engines import EngineUnsupported
from restream_kit.engines.spark._codec import decode_key, encode_key
from restream_kit.io.progress import (
    Cancelled,
    CancelToken,
    EpochFinished,
    EpochStarted,
    Recorder,
    ReplayFinished,
    ReplayStarted,
    StageFinished,
)
from restream_kit.planner import plan

pytestmark = pytest.mark.filterwarnings("ignore::restream_kit.RestreamWarning")

HEADER = "from restream_kit import state, on, emit, schedule\n"


def prog(body: str) -> rk.Program:
    return rk.Program.from_source(HEADER + textwrap.dedent(body), name="t")


def on_spark(program: rk.Program, log, **options) -> rk.Result:
    """Replay on Spark (two partitions unless told) and require the serial engine's result."""
    log = log if isinstance(log, rk.Log) else rk.Log(log)
    options.setdefault("partitions", 2)
    got = rk.replay(program, log, engine="spark", **options)
    assert_same_result(
        got, rk.replay(program, log, require_kinds=options.get("require_kinds", True))
    )
    return got


#: Every kind of step and state: a partitioned stage with timed writes and deletes into its
#: own state (read downstream), a blind merge into that state from upstream, a sequential
#: stage, stateless reads of sums and of overwrites.
MIXED = """
    window = state.Counter()
    last = state.Map(default=None)
    total = state.Value(default=0)
    seen = state.Counter()

    @on("hit")
    def touch(e):
        window[e.k] += 100

    @on("hit")
    def count(e):
        window[e.k] += 1
        window.add(e.k, -1, at=e.ts + 3)
        if window[e.k] > 102:
            del window[e.k]

    @on("hit", "look")
    def remember(e):
        last[e.j] = (e.k, e.ts)
        seen[e.j] += 0.5

    @on("look")
    def running(e):
        total.value += window[e.k]
        emit("out", k=e.k, n=window[e.k], last=last[e.k], total=total.value, seen=seen[e.j])
"""


def mixed_log(n: int = 14) -> list[dict]:
    kinds = ["hit", "hit", "look"]
    return [{"ts": i // 2, "kind": kinds[i % 3], "k": (i * 7) % 3, "j": i % 2} for i in range(n)]


# -- epochs --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("epoch", "events", "epochs"), [(1, 6, 6), (3, 14, 5), (None, 14, 1), ("2ms", 14, 4)]
)
def test_epoch_boundaries_never_change_the_result(spark_session, tmp_path, epoch, events, epochs):
    # Epochs are the checkpoints' (without one, each pass runs over the whole log at once).
    program = prog(MIXED)
    result = on_spark(program, mixed_log(events), epoch=epoch, checkpoint=tmp_path / "ck")
    assert result.metrics.epochs == epochs
    assert not result.warnings, result.warnings
    assert_ran_as_planned(program, result)


def test_a_hot_key_holding_half_the_events(spark_session):
    log = [
        {"ts": i // 3, "kind": "hit" if i % 4 else "look", "k": 0 if i % 2 else i % 5, "j": i % 3}
        for i in range(40)
    ]
    on_spark(prog(MIXED), log, epoch=15)


def test_the_mixed_program_runs_each_stage_as_planned(spark_session):
    program = prog(MIXED)
    result = on_spark(program, mixed_log())
    assert_ran_as_planned(program, result)
    path = result.metrics.path
    assert path["count"].startswith("parallel over 2 partitions by e.k")
    assert path["running"].startswith("sequential in one task: total.value")
    assert path["fold last by e.k"].startswith("parallel")  # `last` is read by e.k downstream


def test_a_state_partitioned_by_one_element_of_its_keys(spark_session):
    program = prog(
        """
        per = state.Counter()

        @on("trade")
        def add(e):
            per[e.sym, e.day] += e.qty
            emit("out", sym=e.sym, day=e.day, n=per[e.sym, e.day], before=per[e.sym, e.day - 1])
        """
    )
    (stage,) = plan(program).stages
    assert stage.mode == "partitioned" and stage.partition_key == "e.sym"
    log = [
        {"ts": i, "kind": "trade", "sym": "abc"[i % 3], "day": i // 4, "qty": i} for i in range(24)
    ]
    # One parallel pass by the element: equal keys have equal symbols, so they meet.
    result = on_spark(program, log, epoch=7)
    (what,) = set(result.metrics.path.values())
    assert what.startswith("parallel over") and "by e.sym" in what, what
    assert int(what.rsplit("(", 1)[1].split()[0]) >= 2, what
    assert not any("one task" in w for w in result.warnings)


# -- numbers, merges and values ------------------------------------------------------------------


NUMBERS = """
    ints = state.Counter()
    floats = state.Counter()
    mixed = state.Map(default=0)
    words = state.Map(default="")
    best = state.Map(default=0)

    @on("w")
    def write(e):
        ints[e.k] += e.i
        floats[e.k] += e.f
        if e.i % 3 == 0:
            mixed[e.k] = e.f > 0.5
        else:
            mixed[e.k] += e.i
        words[e.k] += str(e.i)
        best.merge(e.k, lambda old: max(old, e.i))

    @on("r")
    def read(e):
        emit("out", i=ints[e.k], f=floats[e.k], m=repr(mixed[e.k]), w=words[e.k], b=best[e.k])
"""


def test_sums_of_ints_and_floats_are_exact_and_in_order(spark_session):
    log = [
        {"ts": i, "kind": "wr"[i % 4 == 3], "k": i % 2, "i": i * 7 % 11, "f": 0.1 * (i % 7)}
        for i in range(30)
    ]
    result = on_spark(prog(NUMBERS), log, epoch=11)
    assert not result.warnings
    assert type(result.state["floats"][0]) is float and type(result.state["ints"][0]) is int


def test_a_sum_beyond_64_bits_stays_exact(spark_session):
    program = prog(
        """
        c = state.Counter()

        @on("event")
        def add(e):
            c[e.k] += 2**62

        @on("event")
        def look(e):
            emit("out", n=str(c[e.k]))
        """
    )
    log = [{"ts": i, "k": 0} for i in range(4)]
    # The pass path adds Python ints: exact, in parallel, nothing to fall back from.
    result = on_spark(program, log)
    assert result.state["c"] == {0: 2**64} and not result.warnings
    assert all(what.startswith("parallel") for what in result.metrics.path.values())


# -- what runs in one task, and what is no longer an option -------------------------------------


def test_a_read_on_scheduled_events_runs_in_parallel_with_a_copy(spark_session):
    # close reads n on the events count schedules: no earlier pass sees those events, so
    # none can send the values they read; every partition of close holds a copy of n.
    program = prog(
        """
        n = state.Counter()

        @on("event")
        def count(e):
            n[e.ts // 10] += 1
            if n[e.ts // 10] == 1:
                schedule("close", at=(e.ts // 10 + 1) * 10, w=e.ts // 10)

        @on("close")
        def close(e):
            emit("out", w=e.w, n=n[e.w])
        """
    )
    result = on_spark(program, [{"ts": t} for t in (1, 4, 12, 15, 19, 33)], path="passes")
    assert result.metrics.scheduled_events == 3
    assert not any("one task" in w for w in result.warnings), result.warnings
    assert result.metrics.path["close"].startswith("parallel over 2 partitions")
    assert "n copied whole to each" in result.metrics.path["close"]


def test_a_program_the_planner_cannot_plan_runs_as_one_sequential_pass(spark_session):
    program = prog(
        """
        c = state.Counter()

        def bump(k):
            c[k] += 1

        @on("event")
        def count(e):
            step = bump  # a helper passed as a value: its state accesses cannot be followed
            step(e.k)
            emit("out", k=e.k, n=c[e.k])
        """
    )
    with pytest.raises(rk.RestreamError, match="passed as a value"):
        plan(program, allow_nondeterminism=True)
    with pytest.warns(rk.RestreamWarning, match="ran in one task"):
        result = on_spark(program, [{"ts": i, "k": i % 3} for i in range(12)], path="passes")
    assert list(result.metrics.path) == ["whole program"]
    assert "the planner could not plan the program" in result.metrics.path["whole program"]


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ({"path": "stages"}, "path must be one of 'auto', 'prefix', 'passes', not 'stages'"),
        ({"fold": "jvm"}, "fold= is no longer an option"),
        ({"jobs": "step"}, "jobs= is no longer an option"),
        ({"fallback": True}, "fallback= is no longer an option.*engine='serial'"),
    ],
)
def test_options_of_the_retired_stage_path_are_refused_in_one_line(option, message):
    # Refused by the engine's supports(), before Spark starts.
    with pytest.raises(EngineUnsupported, match=message) as caught:
        rk.replay(prog(MIXED), mixed_log(), engine="spark", **option)
    assert "\n" not in str(caught.value)


def test_the_retired_path_in_the_environment_is_refused(spark_session, monkeypatch):
    monkeypatch.setenv("RESTREAM_SPARK_PATH", "stages")
    with pytest.raises(rk.RestreamError, match=r"\$RESTREAM_SPARK_PATH: path must be one of"):
        rk.replay(prog(MIXED), mixed_log(), engine="spark")


def test_an_empty_log_gives_the_serial_engines_result_and_checkpoint(spark_session, tmp_path):
    empty = pa.table(
        {
            "ts": pa.array([], pa.int64()),
            "kind": pa.array([], pa.string()),
            "k": pa.array([], pa.int64()),
        }
    )
    program = prog(MIXED)
    recorder = Recorder()
    # No kind at all: every handler idles, which the replay refuses unless told.
    got = on_spark(program, rk.Log(empty), observer=recorder, require_kinds=False)
    want = rk.replay(program, rk.Log(empty), require_kinds=False)
    assert got.tables == want.tables == {} and got.state == {name: {} for name in program.states}
    assert (got.metrics.engine, got.metrics.events, got.metrics.epochs) == ("spark", 0, 1)
    assert recorder.of(ReplayStarted)[0].engine == "spark" and recorder.of(ReplayFinished)[0].ok
    ck = tmp_path / "ck"
    on_spark(program, rk.Log(empty), checkpoint=ck, require_kinds=False)
    manifest = json.loads((ck / "manifest.json").read_text())
    assert manifest["identity"]["engine"] == "spark" and manifest["state_format"] == "serial"
    assert manifest["complete"] and [e["epoch"] for e in manifest["epochs"]] == [0]


# -- progress ------------------------------------------------------------------------------------


def test_progress_reports_epochs_stages_and_streams_outputs(spark_session, tmp_path):
    recorder = Recorder()
    program = prog(MIXED)
    ck = tmp_path / "ck"  # epochs are the checkpoint's
    result = on_spark(program, mixed_log(), epoch=5, observer=recorder, checkpoint=ck)
    started = recorder.of(ReplayStarted)[0]
    assert (started.engine, started.events_total, started.epochs_total) == ("spark", 14, 3)
    assert [e.epoch for e in recorder.of(EpochStarted)] == [0, 1, 2]
    finished = recorder.of(EpochFinished)
    assert [e.events_done for e in finished] == [5, 10, 14]
    assert finished[-1].settled_ts is None and finished[0].settled_ts == mixed_log()[5]["ts"]
    steps = len(started.stages)
    # Each stage once over the three epochs: the passes run once over the whole log.
    stages = recorder.of(StageFinished)
    assert len(stages) == steps and {s.epochs for s in stages} == {3}
    streamed = [row for e in finished for row in e.outputs.get("out", pa.table({})).to_pylist()]
    assert streamed == result.tables["out"].to_pylist()
    assert recorder.of(ReplayFinished)[-1].ok


def test_cancel_stops_the_replay_between_epochs(spark_session, tmp_path):
    token = CancelToken()

    def observer(event):
        if isinstance(event, EpochFinished):
            threading.Thread(target=token.cancel).start()
            threading.Event().wait(0.5)

    with pytest.raises(Cancelled):
        rk.replay(prog(MIXED), rk.Log(mixed_log()), engine="spark", epoch=2, observer=observer,
                  cancel=token, checkpoint=tmp_path / "ck")  # fmt: skip
    manifest = json.loads((tmp_path / "ck" / "manifest.json").read_text())
    assert not manifest["complete"] and len(manifest["epochs"]) < 7


def test_cancel_stops_the_passes_between_stages(spark_session):
    token = CancelToken()
    finished = []

    ended = []

    def observer(event):
        if isinstance(event, StageFinished):
            finished.append(event.stage)
            token.cancel()
        if isinstance(event, ReplayFinished):
            ended.append(event)

    with pytest.raises(Cancelled):
        rk.replay(prog(MIXED), rk.Log(mixed_log()), engine="spark", observer=observer,
                  cancel=token, path="passes")  # fmt: skip
    assert len(finished) == 1
    # The observers hear that it ended unfinished, as from the serial engine.
    assert [(e.ok, e.error) for e in ended] == [(False, "replay cancelled")]


# -- keys ------------------------------------------------------------------------------------------


def test_keys_equal_in_python_encode_equal():
    from decimal import Decimal
    from fractions import Fraction

    assert encode_key(1) == encode_key(1.0) == encode_key(True) == encode_key(Decimal(1)) == "i1;"
    assert encode_key(Fraction(3, 2)) == encode_key(1.5)
    assert encode_key((1, "a")) == encode_key((True, "a")) != encode_key(("1", "a"))
    for key in [None, -5, 2.5, "a:b;", "", (), (1, (None, "x")), b"\x00z", frozenset({2, "q"})]:
        assert decode_key(encode_key(key)) == key


def test_spark_sql_encodes_column_keys_as_python_does(spark_session):
    from restream_kit.engines.spark._events import prepare_events
    from restream_kit.engines.spark._keys import jvm_key

    table = pa.table(
        {
            "ts": [1, 2, 3, 4],
            "n": pa.array([5, None, -7, 0], pa.int32()),
            "s": ["é:x", None, "", "tab\tq"],
            "b": [True, False, None, True],
        }
    )
    log = rk.Log(table)
    events = prepare_events(log)
    exprs = ["e.n", "e.s", "e.b", "(e.n, e.s)", "(e.s, (e.b, 3), 'k')", "e.kind", "e.lsn"]
    sql = [jvm_key(expr, events) for expr in exprs]
    assert all(sql)
    df = spark_session.createDataFrame(events.table)
    got = df.selectExpr(*[f"{q} AS k{i}" for i, q in enumerate(sql)]).toArrow().to_pylist()
    rows = log.table.to_pylist()
    for row, out in zip(rows, got):
        e = type("E", (), row)
        want = [
            encode_key(e.n),
            encode_key(e.s),
            encode_key(e.b),
            encode_key((e.n, e.s)),
            encode_key((e.s, (e.b, 3), "k")),
            encode_key(e.kind),
            encode_key(e.lsn),
        ]
        assert [out[f"k{i}"] for i in range(len(exprs))] == want


# -- the command line -------------------------------------------------------------------------------


def test_cli_replays_on_spark_like_serial(root, tmp_path):
    from sample_data import social

    log = social.write(social.generate(6000, seed=3), tmp_path / "social.parquet")
    out = {}
    for engine in ("serial", "spark"):
        target = tmp_path / engine
        command = [
            sys.executable, "-m", "restream_kit", "replay", "examples/antispam.py",
            "--log", str(log), "--engine", engine, "--out", str(target), "--json", "--quiet",
        ]  # fmt: skip
        if engine == "spark":
            command += ["--master", "local[2]", "--epoch", "2500"]
        done = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        summary = json.loads(done.stdout)
        assert summary["metrics"]["engine"] == engine
        out[engine] = (summary, pq.read_table(target / "spam.parquet"))
    (s_sum, s_table), (p_sum, p_table) = out["serial"], out["spark"]
    assert p_table.schema == s_table.schema and p_table.to_pylist() == s_table.to_pylist()
    assert p_sum["tables"] == s_sum["tables"] and p_sum["state"] == s_sum["state"]
    assert p_sum["metrics"]["epochs"] == 3


def test_keys_that_are_not_plain_columns_are_computed_in_python(spark_session):
    program = prog(
        """
        BUCKET = 3

        def bucket(t):
            return t // BUCKET

        by_bucket = state.Counter()
        by_price = state.Map(default=None)
        total = state.Value(default=0)

        @on("tick")
        def count(e):
            by_bucket[e.k * 2 % 5, bucket(e.ts)] += 1
            by_price[e.price] = e.k
            total.value += 1

        @on("tick", "look")
        def look(e):
            emit(
                "out",
                n=by_bucket[e.k * 2 % 5, bucket(e.ts)],
                who=by_price[e.price],
                total=total.value,
            )
        """
    )
    from restream_kit.engines.spark._events import prepare_events
    from restream_kit.engines.spark._keys import jvm_key
    from restream_kit.engines.spark.passes._plan import plan_passes

    log = [
        {"ts": i, "kind": "tick" if i % 3 else "look", "k": i % 4, "price": 1.5 * (i % 3)}
        for i in range(18)
    ]
    events = prepare_events(rk.Log(log))
    partitions = [p.partition for p in plan_passes(program, plan(program)).passes]
    assert any(p.startswith("(") and jvm_key(p, events) is None for p in partitions), partitions
    result = on_spark(program, log, epoch=7)
    assert_ran_as_planned(program, result)


def test_a_local_master_reads_the_events_from_a_private_file_unless_they_hold_pickles(
    spark_session, monkeypatch
):
    """On a local master the passes read a large log with Spark's own Parquet reader, from a
    copy in the kernel's private scratch directory (written once per log), instead of building
    a frame of the driver's Arrow table; a log with a column Spark cannot take (pickled on its
    way) never goes to a file. Both replays equal serial."""
    import os
    from pathlib import Path

    from restream_kit.engines.spark.passes import _setup as _pass_setup
    from restream_kit.engines.spark.passes._setup import _FRAMES

    # (a log of fewer events than FILE_ROWS is made into a frame as before: this one too)
    small = rk.Log(mixed_log(30))
    on_spark(prog(MIXED), small, path="passes")
    assert _FRAMES[(id(spark_session), small.fingerprint)][1] is None
    monkeypatch.setattr(_pass_setup, "FILE_ROWS", 10)
    program = prog(MIXED)
    plain = rk.Log(mixed_log(40))
    scratch = Path(os.environ["RESTREAM_HOME"]) / "scratch"
    written = scratch / f"{plain.fingerprint}.events.parquet"
    got = on_spark(program, plain, path="passes")
    assert_ran_as_planned(program, got)
    assert written.exists() and oct(scratch.stat().st_mode & 0o777) == "0o700"
    assert pq.read_table(written).column("lsn").to_pylist() == list(range(40))
    frame, source = _FRAMES[(id(spark_session), plain.fingerprint)]
    assert source == str(written.resolve())
    # A file that went away is written again, not read from a stale frame.
    written.unlink()
    on_spark(program, plain, path="passes")
    assert written.exists()

    odd = rk.Log([dict(e, tags=[e["k"], e["j"]]) for e in mixed_log(40)])
    got = on_spark(program, odd, path="passes")
    assert not (scratch / f"{odd.fingerprint}.events.parquet").exists()
    assert _FRAMES[(id(spark_session), odd.fingerprint)][1] is None


def test_the_log_is_read_while_a_local_session_starts_and_its_errors_still_name_the_row(
    spark_session, tmp_path
):
    """On a local master the kernel's log is read in a thread while the session starts
    (``_engine._read_meanwhile``); a cluster's master, a log read already or a log Spark
    reads itself gets no thread. For a file log the thread only makes the log's ordered copy
    (the tasks of either path read it): the kernel never holds the log. A bad log still
    fails the replay with the row named."""
    from restream_kit.engines.options import SparkOptions
    from restream_kit.engines.spark._engine import _read_meanwhile

    path = tmp_path / "m.csv"
    path.write_text("ts,kind,src\n1000,message,1\n2000,message,2\n")
    program = rk.Program.from_source(
        HEADER + "@on('message')\ndef h(e):\n    emit('m', src=e.src)\n"
    )
    lowered = rk.Log(path)
    reading = _read_meanwhile(program, lowered, SparkOptions.of({"master": "local[2]"}))
    reading.join()
    assert not lowered.loaded and lowered.ordered().path.exists()
    log = rk.Log(path)
    reading = _read_meanwhile(
        program, log, SparkOptions.of({"master": "local[2]", "path": "passes"})
    )
    assert reading is not None
    reading.join()
    # The pass path's tasks read the ordered copy too (``passes._local_arrangement``).
    assert not log.loaded and log.ordered().path.exists()
    log.table  # noqa: B018 - read already: no thread
    assert _read_meanwhile(program, log, SparkOptions.of({})) is None
    assert (
        _read_meanwhile(
            program, rk.Log(path), SparkOptions.of({"master": "spark://127.0.0.1:7077"})
        )
        is None
    )
    path.write_text("ts,kind,src\n1000,message,1\n2000,message,2\nnoon,message,3\n")
    with pytest.raises(rk.LogError, match=r"m.csv, column 'ts', row 2: ts 'noon'"):
        rk.replay(program, rk.Log(path), engine="spark")
