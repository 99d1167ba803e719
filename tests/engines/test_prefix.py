"""The Spark engine's prefix path: lowering, the columnar epoch evaluation, and the path on Spark.

The algorithm (epochs evaluated as columns, joined by a prefix of their state deltas) is
checked in this process first (``local_map_epochs``: the same tasks, run one after another),
against the serial engine, on hand-made logs and on generated programs; then on Spark.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import pytest
from engine_matrix import assert_same_result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from naive import events, programs, render

import restream_kit as rk
from restream_kit.compiler.lower import NotLowerable, lower
from restream_kit.engines.spark.prefix._driver import (
    log_file,
    prefix_plan,
    read_events,
    run_prefix,
)
from restream_kit.engines.spark.prefix._jobs import local_map_epochs
from restream_kit.io.progress import EpochFinished, Recorder, StageFinished

pytestmark = pytest.mark.filterwarnings("ignore::restream_kit.RestreamWarning")


def prefix_replay(program, log, epoch=None, observer=None, ship_events=False, cores=None):
    """The prefix path in this process (no Spark), or None when the program does not lower;
    with ``ship_events``, the tasks get their events as a cluster's do, not from the file;
    with ``cores``, the epochs run several to a task, as a checkpoint's do."""
    program = rk.Program.load(program)
    log = log if isinstance(log, rk.Log) else rk.Log(log)
    low, _why = prefix_plan(program, log)
    if low is None:
        return None
    return run_prefix(
        low,
        program,
        log,
        epoch=epoch,
        map_epochs=local_map_epochs,
        notify=observer or (lambda _e: None),
        check_cancel=lambda: None,
        started=time.perf_counter(),
        ship_events=ship_events,
        cores=cores,
    )


def same_as_serial(program, log, epochs=(None, 1, 2, 3, 5)):
    program = rk.Program.load(program)
    log = rk.Log(log)
    want = rk.replay(program, log)
    for epoch in epochs:
        got = prefix_replay(program, log, epoch)
        assert got is not None, prefix_plan(program, log)[1]
        assert_same_result(got, want)
    return want


# -- lowering ------------------------------------------------------------------------------


def test_the_antispam_rule_lowers_into_three_rounds(root):
    log = rk.Log(root / "sample_data" / "social_small.parquet")
    low = lower(rk.Program.load(root / "examples" / "antispam.py"), log.table)
    assert low.levels == 3
    assert {s.name: s.level for s in low.states.values()} == {
        "friends": 0,
        "ip_msgs": 0,
        "ip_emails": 0,
        "to_friends": 1,
        "to_strangers": 1,
    }
    assert [e.level for e in low.emits] == [2]


LOG = [
    {"ts": 1, "kind": "a", "k": 1, "x": 2.5, "s": "p", "n": None},
    {"ts": 2, "kind": "b", "k": 1, "x": 1.0, "s": "q", "n": 3},
]


@pytest.mark.parametrize(
    "body, why",
    [
        ("c[e.k] += e.x", "merges float"),
        ("if e.n > 1:\n        c[e.k] += 1", "may be None"),
        ("c[e.k] += e.k // 2", "BinOp"),
        ("c[e.k] += abs(e.k)", "Call"),
        ("for i in range(2):\n        c[e.k] += 1", "For"),
        ("c[e.x] += 1", "keyed by a float"),
        ("c[e.k] += c[e.k]", "reads of itself"),
        ("c[e.k] += e.k * 2305843009213693952", "overflow"),
        ("m[e.k] = e.s\n    m[e.s] = e.s", "different types"),
        ("m[e.k] = 1\n    m[e.k] += 1", "both merged"),
        ("m[e.k] = e.s\n    m[e.k] = e.k", "several types"),
        ("return", "Return"),
        ("emit('o', v=e.k if e.k else 0)", "IfExp"),
    ],
)
def test_lowering_refuses_what_columns_could_get_wrong(body, why):
    source = (
        "from restream_kit import state, on, emit\n"
        "c = state.Counter()\nm = state.Map()\n\n"
        f"@on('a', 'b')\ndef h(e):\n    {body}\n"
    )
    with pytest.raises(NotLowerable, match=why):
        lower(rk.Program.from_source(source), rk.Log(LOG).table)


# -- the algorithm, in this process ------------------------------------------------------------

TIES = [
    {"ts": t, "kind": kind, "k": k, "j": j, "v": v}
    for t, kind, k, j, v in [
        (1, "a", 1, 1, 5), (1, "b", 1, 2, 6), (1, "a", 2, 1, 7), (2, "b", 2, 2, 1),
        (2, "a", 1, 1, 2), (2, "b", 1, 1, 3), (3, "a", 3, 3, 4), (3, "b", 1, 3, 9),
        (3, "a", 1, 2, 1), (4, "b", 2, 1, 8), (4, "b", 3, 3, 2), (5, "a", 1, 1, 1),
    ]
]  # fmt: skip


def test_reads_see_exactly_the_serial_versions_across_epochs():
    """A reader declared before its writer sees the writer's merges of earlier events only;
    one declared after sees the current event's too; overwrites, deletes and tuple keys."""
    program = """
from restream_kit import state, on, emit
n = state.Counter()
last = state.Map(default=-1)
pair = state.Map()

@on("b")
def before(e):
    emit("seen", early=n[e.k], late_key=last[e.j], p=pair[e.k, e.j])

@on("a", "b")
def count(e):
    n[e.k] += e.v
    if e.v > 4:
        n[e.k] -= 1
        last[e.j] = e.v
    else:
        del last[e.j]
    pair[e.k, e.j] = e.kind

@on("b")
def after(e):
    x = n[e.k]
    if x > 6 and not last[e.j] == -1:
        emit("seen", late=x, late_key=last[e.j])
    emit("other", total=x * 2 + 1, ratio=0.5 * x, hot=x >= 10, name=e.kind)
"""
    want = same_as_serial(program, TIES)
    assert want.tables["seen"].num_rows > 4 and want.tables["other"].num_rows > 4


def test_a_hot_key_and_literal_keys():
    log = [
        {"ts": i, "kind": "a" if i % 3 else "b", "k": 0 if i % 2 else i, "v": i % 7}
        for i in range(400)
    ]
    program = """
from restream_kit import state, on, emit
c = state.Counter()
total = state.Counter()

@on("a")
def add(e):
    c[e.k] += e.v
    total[0] += 1

@on("b")
def check(e):
    if c[e.k] > 3 * total[0] or c[0] == total[0]:
        emit("hot", k=e.k, c=c[e.k], t=total[0])
"""
    want = same_as_serial(program, log, epochs=(None, 7, 64, 399))
    assert want.tables["hot"].num_rows > 0


def test_a_merge_state_with_a_default_other_than_zero():
    """Deltas sum merges only: a read, and the final value, add the default once, whether
    the key was merged in earlier epochs, in this one, or never (inline and as-of reads)."""
    log = [{"ts": i, "kind": "a" if i % 4 else "b", "k": i % 5, "v": i % 3} for i in range(300)]
    program = """
from restream_kit import state, on, emit
c = state.Counter(default=5)
d = state.Counter(default=-2)

@on("a")
def add(e):
    c[e.k] += e.v
    if c[e.k] > 40:
        emit("inline", k=e.k, c=c[e.k])

@on("a", "b")
def other(e):
    d[e.k] += 1

@on("b")
def check(e):
    emit("asof", k=e.k, c=c[e.k], d=d[e.k], never=c[99])
"""
    want = same_as_serial(program, log, epochs=(None, 7, 64, 299))
    assert want.tables["inline"].num_rows > 0 and want.state["c"][0] > 5


def test_output_fields_whose_type_only_the_rows_decide():
    """Plain fields come straight from the columns; a field that is int at one emit and
    float at another, or None in every row, is typed from the values as the serial engine
    types it."""
    log = [{"ts": i, "kind": "a", "k": i % 4, "v": i % 3} for i in range(60)]
    program = """
from restream_kit import state, on, emit
c = state.Counter()
m = state.Map()

@on("a")
def add(e):
    c[e.k] += e.v
    if c[e.k] > 5:
        emit("o", x=c[e.k], s=e.kind, nothing=m[e.k])
    else:
        emit("o", x=0.5 * c[e.k], flag=c[e.k] > 2)
    emit("plain", n=c[e.k], s=e.kind, big=c[e.k] >= 10)
"""
    want = same_as_serial(program, log)
    assert str(want.tables["o"].schema.field("x").type) == "double"
    assert want.tables["o"].column("nothing").null_count == want.tables["o"].num_rows


def test_an_empty_epoch_of_a_kind_and_states_nobody_writes():
    log = [{"ts": i, "kind": "a" if i < 20 else "b", "k": i % 3} for i in range(40)]
    program = """
from restream_kit import state, on, emit
c = state.Counter()
never = state.Map(default="none")

@on("a")
def add(e):
    c[e.k] += 1

@on("b")
def show(e):
    emit("o", c=c[e.k], never=never[e.k])
"""
    same_as_serial(program, log, epochs=(None, 10, 20))


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(spec=programs(), log=events, size=st.integers(1, 8))
def test_generated_programs_equal_the_serial_engine(spec, log, size):
    program = rk.Program.from_source(render(spec), name="prop")
    the_log = rk.Log(log)
    got = prefix_replay(program, the_log, epoch=size)
    if got is not None:
        assert_same_result(got, rk.replay(program, the_log, require_kinds=False))


def committed_replay(program, log, epoch, directory, cores):
    """The prefix path in this process with a checkpoint in ``directory``, its epochs run
    several to a task (``cores`` tasks at least), as the engine runs a checkpoint's."""
    from restream_kit.io.checkpoint import open_for_replay

    ck, _start = open_for_replay(
        program, log, engine="spark", epoch=epoch, state_format="serial", checkpoint=directory
    )
    low, _why = prefix_plan(program, log)
    rec = Recorder()
    got = run_prefix(
        low, program, log, epoch=epoch, map_epochs=local_map_epochs, notify=rec,
        check_cancel=lambda: None, started=time.perf_counter(), checkpoint=ck, cores=cores,
    )  # fmt: skip
    return got, {e.tasks for e in rec.of(StageFinished)}


def assert_same_commits(a, b):
    """Checkpoints ``a`` and ``b`` committed the same epochs: same events, state and rows."""
    from restream_kit.io import checkpoint

    epochs = json.loads((a / "manifest.json").read_text())["epochs"]
    assert len(json.loads((b / "manifest.json").read_text())["epochs"]) == len(epochs)
    for k in range(len(epochs)):
        x, y = checkpoint.read(a, k), checkpoint.read(b, k)
        assert (x.done, x.state["stores"]) == (y.done, y.state["stores"]), f"epoch {k}"
        rows = [checkpoint.load_value(d / f"epoch-{k:06d}", "rows") for d in (a, b)]
        assert rows[0] == rows[1], f"epoch {k}: rows"


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(spec=programs(), log=events, size=st.integers(1, 4), cores=st.integers(1, 3))
def test_a_checkpoints_epochs_run_several_to_a_task_as_each_its_own(spec, log, size, cores):
    """A checkpoint's epochs, gathered into a few tasks: the serial engine's result, and each
    committed epoch (state and rows) the serial engine's."""
    program = rk.Program.from_source(render(spec), name="prop")
    the_log = rk.Log(log)
    if prefix_plan(program, the_log)[0] is None:
        return
    with tempfile.TemporaryDirectory() as tmp:
        want = rk.replay(
            program, the_log, epoch=size, checkpoint=Path(tmp) / "serial", require_kinds=False
        )
        got, tasks = committed_replay(program, the_log, size, Path(tmp) / "prefix", cores)
        assert_same_result(got, want)
        assert_same_commits(Path(tmp) / "serial", Path(tmp) / "prefix")
    # A small log is one task's worth of events: one task per core (an epoch cut where a task
    # ends, ``prefix._spans``), at most one per event.
    assert not tasks or tasks == {min(len(the_log), cores)}, (tasks, got.metrics.epochs)


def test_antispams_epochs_run_two_to_five_a_task_as_each_its_own(root, tmp_path):
    """The same on the sample log, whose later epochs read what the earlier tasks wrote."""
    program = rk.Program.load(root / "examples" / "antispam.py")
    log = rk.Log(root / "sample_data" / "social_small.parquet")
    want = rk.replay(program, log, epoch=5_000, checkpoint=tmp_path / "serial")
    got, tasks = committed_replay(program, log, 5_000, tmp_path / "prefix", cores=3)
    assert got.metrics.epochs == 10 and tasks == {3}
    assert_same_result(got, want)
    assert_same_commits(tmp_path / "serial", tmp_path / "prefix")


def test_the_generated_programs_often_lower():
    """The property above is not vacuous: many generated programs take the prefix path."""
    lowered = []

    # Derandomized: the same 100 programs every run, so the count below cannot flake.
    @settings(max_examples=100, deadline=None, database=None, derandomize=True)
    @given(spec=programs(), log=events)
    def count(spec, log):
        program = rk.Program.from_source(render(spec), name="prop")
        lowered.append(prefix_plan(program, rk.Log(log))[0] is not None)

    count()
    print(f"{sum(lowered)} of {len(lowered)} generated programs lowered")
    assert sum(lowered) >= len(lowered) // 10, f"{sum(lowered)} of {len(lowered)} lowered"


def test_progress_reports_rounds_and_every_epoch(root):
    rec = Recorder()
    log = rk.Log(root / "sample_data" / "social_small.parquet")
    prefix_replay(root / "examples" / "antispam.py", log, epoch=10_000, observer=rec)
    assert len(rec.of(StageFinished)) == 3
    finished = rec.of(EpochFinished)
    assert [f.epoch for f in finished] == list(range(5))
    assert sum(f.outputs["spam"].num_rows for f in finished if "spam" in f.outputs) == 207


# -- on Spark ----------------------------------------------------------------------------------


def test_antispam_on_spark_takes_the_prefix_path(root, spark_session):
    program = rk.Program.load(root / "examples" / "antispam.py")
    log = rk.Log(root / "sample_data" / "social_small.parquet")
    got = rk.replay(program, log, engine="spark", epoch=7_000, path="prefix")
    assert any(name.startswith("round 3") for name in got.metrics.stages)
    assert got.metrics.epochs == 8
    assert_same_result(got, rk.replay(program, log))
    passes = rk.replay(program, log, engine="spark", path="passes")
    assert not any(name.startswith("round") for name in passes.metrics.stages)
    assert not any(what.startswith("lowered") for what in passes.metrics.path.values())
    assert_same_result(passes, got)


def test_insisting_on_the_prefix_path_says_why_it_cannot(spark_session):
    program = "from restream_kit import state, on\nc = state.Counter()\n\n@on('a')\ndef h(e):\n    c[e.k] += 0.5\n"
    with pytest.raises(rk.RestreamError, match="merges float"):
        rk.replay(program, [{"ts": 1, "kind": "a", "k": 1}], engine="spark", path="prefix")


def test_epochs_wait_between_rounds_as_arrow_files_that_are_removed(root, tmp_path, monkeypatch):
    """Later rounds map the events the first round decoded; the files go with the replay."""
    import tempfile

    log = rk.Log(root / "sample_data" / "social_small.parquet")
    path = log_file(log)
    cache = tmp_path / "epochs"
    first = read_events(path, ["kind", "src"], 100, 900, str(cache))
    assert [p.name for p in cache.iterdir()] == ["100-900.arrow"]
    again = read_events(path, ["kind", "src"], 100, 900, str(cache))
    assert again.equals(first) and first.num_rows == 800
    assert first.equals(read_events(path, ["kind", "src"], 100, 900))

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    seen = []

    def after_each_round(event):
        if isinstance(event, StageFinished):
            seen.append(len(list(tmp_path.glob("restream-epochs-*/*.arrow"))))

    prefix_replay(root / "examples" / "antispam.py", log, epoch=10_000, observer=after_each_round)
    assert seen == [5, 5, 5]  # every epoch decoded once, in the first round
    assert not list(tmp_path.glob("restream-epochs-*"))


def test_shipped_events_give_the_same_result_and_no_file(root, monkeypatch):
    """As on a cluster: each epoch's events come with its task, and no task reads a file."""
    from restream_kit.engines.spark.prefix import _driver as _prefix

    def no_file(*_args, **_kwargs):
        raise AssertionError("the log's file was used")

    monkeypatch.setattr(_prefix, "log_file", no_file)
    monkeypatch.setattr(_prefix, "read_events", no_file)
    log = rk.Log(root / "sample_data" / "social_small.parquet")
    program = rk.Program.load(root / "examples" / "antispam.py")
    want = rk.replay(program, log)
    for epoch in (None, 7_000):
        got = prefix_replay(program, log, epoch=epoch, ship_events=True)
        assert_same_result(got, want)


def test_shipped_events_are_cached_between_rounds_and_dropped(root, spark_session):
    """On Spark, the epochs' events are one cached RDD element per epoch while the replay
    runs (one partition each), and unpersisted when it ends."""
    from restream_kit.engines.spark.prefix._jobs import SparkEpochs

    log = rk.Log(root / "sample_data" / "social_small.parquet")
    program = rk.Program.load(root / "examples" / "antispam.py")
    low, _why = prefix_plan(program, log)
    epochs = SparkEpochs(spark_session)
    seen = []

    def observer(event):
        if isinstance(event, StageFinished):
            carrier = epochs.carrier
            seen.append(
                (carrier.getNumPartitions(), carrier.getStorageLevel().useMemory, carrier.count())
            )

    got = run_prefix(
        low, program, log, epoch=10_000, map_epochs=epochs, notify=observer,
        check_cancel=lambda: None, started=time.perf_counter(), ship_events=True,
    )  # fmt: skip
    assert_same_result(got, rk.replay(program, log))
    assert seen == [(5, True, 5)] * 3
    assert epochs.carrier is None
