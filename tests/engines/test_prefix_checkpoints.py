"""Checkpointed replays on the Spark engine's prefix path (rules that lower to columns).

The prefix path commits each epoch itself, from the state deltas its rounds bring back: each
committed epoch must be what the serial engine commits for the same epoch (state, rows, events
done), and a resume (on either Spark path, of a checkpoint either path wrote), a
``start_from`` (on either engine) and a serial checkpoint continued on Spark must all end at
the serial result. Every test checks ``metrics.path``, so that a replay
that silently took the pass path fails.
"""

from __future__ import annotations

import json
import re
from unittest import mock

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from engine_matrix import assert_ran_as_planned, assert_same_result, keep_first_epochs
from hypothesis import given, settings
from hypothesis import strategies as st

import restream_kit as rk
from restream_kit.engines.spark.prefix import _commits as _prefix_commits
from restream_kit.engines.spark.prefix._spans import task_spans
from restream_kit.io import checkpoint
from restream_kit.io.progress import EpochFinished, Recorder

pytestmark = pytest.mark.filterwarnings("ignore::restream_kit.RestreamWarning")

SPARK = dict(engine="spark", master="local[2]")

# Merges onto a default other than 0, overwrites with deletes, tuple keys, and an emit that
# reads all of them: lowered into more than one round.
DEFAULTS_AND_DELETES = """
from restream_kit import state, on, emit
score = state.Counter(default=7)
last = state.Map(default=-1)
pair = state.Map()

@on("a", "b")
def count(e):
    score[e.k] += e.v
    if e.v > 2:
        last[e.j] = e.v
    else:
        del last[e.j]
    pair[e.k, e.j] = e.kind

@on("b")
def check(e):
    if score[e.k] > 40 and not last[e.j] == -1:
        emit("high", k=e.k, s=score[e.k], p=pair[e.k, e.j], l=last[e.j])
"""


@pytest.fixture(scope="module")
def logs(tmp_path_factory, root):
    where = tmp_path_factory.mktemp("logs")
    small = root / "sample_data" / "social_small.parquet"
    # Every key of `last` is set in the first half; keys 0 and 1 are deleted in the second.
    rows = [
        {
            "ts": i // 3,
            "kind": "a" if i % 3 else "b",
            "k": i % 7,
            "j": i % 5,
            "v": 3 + i % 2 if i < 600 or i % 5 > 1 else (i // 5) % 3,
        }
        for i in range(1200)
    ]
    pq.write_table(pa.Table.from_pylist(rows), where / "abk.parquet")
    return {"social": rk.Log(small), "abk": rk.Log(where / "abk.parquet")}


CASES = {
    # (program, log, events per epoch)
    "antispam": (None, "social", 10_000),
    "defaults_and_deletes": (DEFAULTS_AND_DELETES, "abk", 150),
}


#: The resume checks' epochs: four each, so that a resume after two has two left, and the
#: pass path's epoch-by-epoch replays of the checks across paths stay short.
RESUME_EPOCH = {"antispam": 12_500, "defaults_and_deletes": 300}


def program_of(case, root):
    text = CASES[case][0]
    return rk.Program.load(text if text else root / "examples" / "antispam.py")


def assert_lowered_and_committed(result, epochs):
    """Every round lowered, over ``epochs`` epochs, each committed, in one task per core of
    ``local[2]``: the small logs' epochs run several to a task, and never in one task."""
    path = result.metrics.path
    said = [
        re.fullmatch(
            rf"lowered to columns, parallel over {epochs} epochs \((\d+) tasks\), "
            "each epoch committed to the checkpoint",
            what,
        )
        for what in path.values()
    ]
    assert path and all(said), path
    assert all(int(m.group(1)) == min(2, epochs) for m in said), path


def serial_part(state):
    """A committed state without what the pass path keeps beside the serial engine's (its
    total of scheduled events, ``scheduled_total``)."""
    return {k: v for k, v in state.items() if k != "scheduled_total"}


def rows_of_epoch(directory, epoch):
    return checkpoint.load_value(directory / f"epoch-{epoch:06d}", "rows")


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_committed_epoch_is_the_serial_engines(case, logs, root, tmp_path, spark_session):
    program = program_of(case, root)
    log, epoch = logs[CASES[case][1]], CASES[case][2]
    serial_ck, spark_ck = tmp_path / "serial", tmp_path / "spark"
    want = rk.replay(program, log, epoch=epoch, checkpoint=serial_ck)
    rec = Recorder()
    # A state of 1,000 keys or more is kept as columns through the epochs (``_Kept``).
    with mock.patch.object(_prefix_commits, "COLUMN_KEYS", 1000):
        got = rk.replay(program, log, **SPARK, epoch=epoch, checkpoint=spark_ck, observer=rec)
    n = len(json.loads((serial_ck / "manifest.json").read_text())["epochs"])
    assert n >= 5
    assert_lowered_and_committed(got, n)
    assert_ran_as_planned(program, got)
    assert_same_result(got, want)
    assert sum(t.num_rows for t in want.tables.values()) > 20
    # Progress: one finished epoch per commit, each with the events done so far.
    finished = rec.of(EpochFinished)
    assert [f.epoch for f in finished] == list(range(n))
    assert [f.events_done for f in finished] == [min(len(log), (k + 1) * epoch) for k in range(n)]

    manifest = json.loads((spark_ck / "manifest.json").read_text())
    assert manifest["state_format"] == "serial" and manifest["complete"] is True
    assert manifest["identity"]["engine"] == "spark"
    for k in range(n):
        a, b = checkpoint.read(serial_ck, k), checkpoint.read(spark_ck, k)
        assert (a.epoch, a.done) == (b.epoch, b.done)
        assert a.state == b.state, f"epoch {k}: the committed state differs"
        assert rows_of_epoch(serial_ck, k) == rows_of_epoch(spark_ck, k), f"epoch {k}: rows"
    if case == "defaults_and_deletes":
        # What the program is there for: defaults, deletes and tuple keys were committed.
        stores = [checkpoint.read(spark_ck, k).state["stores"] for k in range(n)]
        assert stores[0]["score"] and min(stores[0]["score"].values()) >= 7
        assert set(stores[3]["last"]) == {0, 1, 2, 3, 4}
        assert set(stores[-1]["last"]) == {2, 3, 4}  # deletes, committed
        assert all(type(k) is tuple for k in stores[-1]["pair"])
    else:
        # The big store went to a Parquet file, and reads back the same.
        assert list((spark_ck / "epoch-000004").glob("state-*.parquet"))
        assert max(map(len, got.state.values())) > 1000  # (so it went as columns)


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_prefix_checkpoint_resumes_and_starts_changed_rules(
    case, logs, root, tmp_path, spark_session
):
    program = program_of(case, root)
    log, epoch = logs[CASES[case][1]], RESUME_EPOCH[case]
    ck = tmp_path / "ck"
    first = rk.replay(program, log, **SPARK, epoch=epoch, checkpoint=ck)
    assert_lowered_and_committed(
        first, len(json.loads((ck / "manifest.json").read_text())["epochs"])
    )
    want = rk.replay(program, log, epoch=epoch)

    n = len(json.loads((ck / "manifest.json").read_text())["epochs"])
    serial_ck = tmp_path / "serial"
    rk.replay(program, log, epoch=epoch, checkpoint=serial_ck)

    # As if killed after epoch 1 committed: resumed on the prefix path, on the pass path,
    # and a pass-path checkpoint resumed on the prefix path.
    runs = [(ck, "auto")]
    if case != "antispam":  # across the paths on the small log only: the same code either way
        passes_ck = tmp_path / "passes"
        rk.replay(program, log, **SPARK, epoch=epoch, checkpoint=passes_ck, path="passes")
        runs += [(ck, "passes"), (passes_ck, "auto")]
    for directory, path in runs:
        keep_first_epochs(directory, 2)
        resumed = rk.replay(
            program, log, **SPARK, epoch=epoch, checkpoint=directory, resume=True, path=path
        )
        assert resumed.resumed_from_epoch == 2
        lowered = [w.startswith("lowered") for w in resumed.metrics.path.values()]
        assert all(lowered) if path == "auto" else not any(lowered), resumed.metrics.path
        if path == "auto":
            assert_lowered_and_committed(resumed, n - 2)
        assert_same_result(resumed, want)
        for k in range(2, n):  # the epochs the resume committed are the serial engine's too
            assert serial_part(checkpoint.read(directory, k).state) == (
                checkpoint.read(serial_ck, k).state
            )
            assert rows_of_epoch(directory, k) == rows_of_epoch(serial_ck, k), k
    # A complete checkpoint resumed: nothing left to run, the same result.
    again = rk.replay(program, log, **SPARK, epoch=epoch, checkpoint=ck, resume=True)
    assert again.resumed_from_epoch == n and again.metrics.epochs == 0
    assert_same_result(again, want)

    # A changed rule from the state after epoch 1, on Spark and on the serial engine, equals
    # the serial engine started from its own checkpoint of the same epoch.
    if case == "antispam":
        changed = (root / "examples" / "antispam.py").read_text().replace("0.2 *", "0.1 *")
    else:
        changed = DEFAULTS_AND_DELETES.replace("> 40", "> 90")
    reference = rk.replay(changed, log, epoch=epoch, start_from=(serial_ck, 1))
    assert_same_result(rk.replay(changed, log, epoch=epoch, start_from=(ck, 1)), reference)
    assert_same_result(rk.replay(changed, log, **SPARK, epoch=epoch, start_from=(ck, 1)), reference)
    # A serial checkpoint continued on Spark.
    on_spark = rk.replay(changed, log, **SPARK, epoch=epoch, start_from=(serial_ck, 1))
    assert_same_result(on_spark, reference)


def test_waves_of_one_epoch_cut_between_both_cores_commit_the_serial_epochs(
    logs, tmp_path, spark_session
):
    """A wave of one epoch runs on every core: its epoch is cut where a task ends, and its
    pieces are committed as one epoch, the serial engine's."""
    program = rk.Program.load(DEFAULTS_AND_DELETES)
    log = logs["abk"]
    cut_up = task_spans(log, 400, None, None, 2)  # three epochs, the middle one cut in two
    assert cut_up.owners == [0, 1, 1, 2] and len(cut_up.spans) == 2
    assert [len(task_spans(log, 400, None, k, 2).spans) for k in range(3)] == [2, 2, 2]
    serial_ck, spark_ck = tmp_path / "serial", tmp_path / "spark"
    want = rk.replay(program, log, epoch=400, checkpoint=serial_ck)
    got = rk.replay(program, log, **SPARK, epoch=400, checkpoint=spark_ck, checkpoint_every=400)
    path = dict(got.metrics.path)
    assert "in 3 waves" in path.pop("checkpoint"), got.metrics.path
    assert path and all(w.startswith("lowered") for w in path.values()), path
    assert_same_result(got, want)
    for k in range(3):
        assert checkpoint.read(serial_ck, k).state == checkpoint.read(spark_ck, k).state, k
        assert rows_of_epoch(serial_ck, k) == rows_of_epoch(spark_ck, k), k
    assert sum(len(rows) for rows in rows_of_epoch(spark_ck, 1).values()) > 5


def test_the_plan_says_the_checkpoint_is_committed_per_epoch(logs, root):
    from restream_kit.engines import get_engine

    program = program_of("antispam", root)
    said = get_engine("spark").layout(program, logs["social"], {"checkpoint": "x", "epoch": 10_000})
    assert set(said.values()) == {
        "lowered to columns, parallel over 5 epochs, each epoch committed to the checkpoint"
    }
    resumed = get_engine("spark").layout(
        program, logs["social"], {"checkpoint": "x", "resume": True, "epoch": 10_000}
    )
    assert resumed == said
    started = get_engine("spark").layout(program, logs["social"], {"start_from": "x"})
    assert not any(w.startswith("lowered") for w in started.values())


def test_a_checkpoint_directory_in_use_is_refused_before_any_round(
    logs, root, tmp_path, spark_session
):
    program = program_of("antispam", root)
    ck = tmp_path / "ck"
    rk.replay(program, logs["social"], epoch=10_000, checkpoint=ck)
    rec = Recorder()
    with pytest.raises(checkpoint.CheckpointError, match="already holds"):
        rk.replay(program, logs["social"], **SPARK, epoch=10_000, checkpoint=ck, observer=rec)
    assert not rec.events


# -- a big state's columns, folded epoch by epoch ------------------------------------------------

_KEYS = st.one_of(st.integers(-3, 40), st.text("ab", max_size=2))


@settings(max_examples=60, deadline=None)
@given(
    kind=st.sampled_from(["merge", "set"]),
    tuple_key=st.booleans(),
    floats=st.booleans(),
    epochs=st.lists(
        st.lists(st.tuples(st.integers(0, 90), st.integers(-5, 5), st.booleans()), max_size=40),
        min_size=1,
        max_size=6,
    ),
    start=st.integers(0, 60),
)
def test_a_big_states_columns_fold_as_its_dict_does(kind, tuple_key, floats, epochs, start):
    """``prefix._commits._Kept`` keeps a state as a dict, then (from ``COLUMN_KEYS`` keys,
    40 here) as columns folded with each epoch's delta: every commit reads back as the dict
    ``_apply`` folds, in its order, types included, and so does the final value."""
    from unittest import mock

    import polars as pl

    from restream_kit.compiler.lower import LoweredState
    from restream_kit.engines.spark.prefix import _commits as _prefix_commits
    from restream_kit.engines.spark.prefix._commits import DELTA_CHUNK, _apply, _Kept
    from restream_kit.io import _arrow_stores
    from restream_kit.io._arrow_stores import StoreColumns, store_from_table

    arity = 2 if tuple_key else 1
    info = LoweredState("s", kind, 3 if kind == "merge" else None, tuple_key, arity, 0, "int")

    def key(k: int):
        return (k % 7, f"k{k}") if tuple_key else k

    def value(v: int):
        return v + 0.5 if floats and kind == "set" else v

    def same(got: dict, want: dict) -> None:
        assert list(got.items()) == list(want.items())
        assert [type(v) for v in got.values()] == [type(v) for v in want.values()]

    store = {key(k): value(k) if kind == "set" else 3 + k for k in range(start)}
    columns_seen = False
    with (
        mock.patch.object(_prefix_commits, "COLUMN_KEYS", 40),
        mock.patch.object(_arrow_stores, "MIN_KEYS", 0),
    ):
        kept = _Kept(info, dict(store))
        for changes in epochs:
            firsts = {}
            for k, v, d in changes:  # a delta has each key once
                firsts.setdefault(k, (k, v, d))
            if not firsts:
                continue
            rows = list(firsts.values())
            keys = [key(k) for k, _v, _d in rows]
            parts = list(zip(*keys)) if tuple_key else [keys]
            data = {f"k{i}": list(p) for i, p in enumerate(parts)}
            data["v"] = [value(v) for _k, v, _d in rows]
            if kind != "merge":
                data["_del"] = [d for _k, _v, d in rows]
            delta = pl.DataFrame(data).with_columns(pl.lit(0, dtype=pl.Int32).alias(DELTA_CHUNK))
            _apply(store, delta, info)
            kept.fold(delta)
            made = kept.committed()
            if type(made) is StoreColumns:
                columns_seen = True
                same(store_from_table(made.table, made.arity), store)
            else:
                same(made, store)
        same(kept.final(), store)
    if len(store) >= 60 and any(epochs):  # (a commit needs an epoch with changes)
        assert columns_seen
