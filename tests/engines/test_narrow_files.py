"""Narrow rows through files on a local master (``passes._narrow_files``).

Where the driver arranges the passes' events, a window keyed otherwise than its adding stage
no longer keeps the adding pass on Spark's shuffle: the adding tasks write their narrow rows
to a file per partition of the close pass, dealt by the window's key, and the close tasks read
and sort them. Each replay equals the serial engine's, row for row and state for state, the
path says where the rows went, and the files go with the replay.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest
from engine_matrix import assert_ran_as_planned, assert_same_result, social_sample
from test_narrow_windows import OTHER_KEY
from test_narrow_windows import _log as other_key_log

import restream_kit as rk
from restream_kit.engines.spark.passes import _local_arrangement as local
from restream_kit.engines.spark.passes._narrow_files import narrow_batches
from restream_kit.engines.spark.passes._rows import U32x2

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.filterwarnings("ignore::restream_kit.RestreamWarning"),
    pytest.mark.spark,
]
FILES = "its adds through files, dealt by the driver into partitions of balanced keys"

#: A stage by sender adding to a tumbling count keyed by the (sender, recipient) pair.
PAIRS = textwrap.dedent(
    """
    from restream_kit import emit, minutes, on, state
    from restream_kit.windows import tumbling

    pairs = tumbling(minutes(10), "count", table="pairs")
    sent = state.Counter()


    @on("message")
    def track(e):
        sent[e.src] += 1
        pairs.add((e.src, e.dst))
        if sent[e.src] % 50 == 0:
            emit("busy", src=e.src, n=sent[e.src])
    """
)


@pytest.fixture
def arranged(monkeypatch, spark_session):
    monkeypatch.setattr(local, "LOCAL_ROWS", 100)
    monkeypatch.delenv("RESTREAM_SPARK_LOCAL_ARRANGE", raising=False)
    return spark_session


def _replay(program: rk.Program, log: rk.Log, **options) -> rk.Result:
    got = rk.replay(program, log, engine="spark", master="local[2]", **options)
    want = rk.replay(program, log, **options)
    assert_same_result(got, want)
    assert got.metrics.scheduled_events == want.metrics.scheduled_events
    assert_ran_as_planned(program, got)
    return got


#: The narrow windows' program of ``test_narrow_windows`` with sessions counting: a sum's
#: sessions keep a fold pass of their own, through Spark.
COUNTED = OTHER_KEY.replace(
    'session(7, "sum", table="visits")', 'session(7, "count", table="visits")'
)
COUNTED = COUNTED.replace("visits.add(e.g, e.v)", "visits.add(e.g)")
NARROW = ("per_g", "spread", "visits")


def test_narrow_windows_go_through_files_beside_arranged_passes_and_equal_serial(arranged):
    assert COUNTED.count("visits") == OTHER_KEY.count("visits")
    p = rk.Program.from_source(COUNTED, "counted")
    got = _replay(p, other_key_log())
    path = got.metrics.path
    assert "arranged by the driver into partitions of balanced keys" in path["track"], path
    for name in NARROW:
        assert f"window {name} narrow" in path[f"{name}__close"], path
        assert f"{FILES} of g" in path[f"{name}__close"], path
        assert len(got.metrics.task_events[f"{name}__close"]) == 2
    # The session count's adds went as runs (``_narrow_sessions``), through the files too.
    assert "a row per run of a key's adds" in path["visits__close"], path
    # The files went with the replay's own directory.
    scratch = Path(os.environ["RESTREAM_HOME"]) / "scratch"
    assert not list(scratch.glob("values-*")), list(scratch.iterdir())


@pytest.mark.parametrize("rule", ["windows_ip", "windows_sessions", "windows"])
def test_the_benchmark_rules_keyed_otherwise_go_through_files_and_equal_serial(arranged, rule):
    p = rk.Program.from_file(ROOT / "bench" / "programs" / f"{rule}.py")
    got = _replay(p, social_sample(3000))
    narrow = {"windows_ip": "per_ip", "windows_sessions": "sessions", "windows": "per_sender"}
    what = got.metrics.path[f"{narrow[rule]}__close"]
    assert f"window {narrow[rule]} narrow" in what and FILES in what, what
    assert ("a row per run of a key's adds" in what) == (rule == "windows_sessions"), what
    events = got.metrics.task_events[f"{narrow[rule]}__close"]
    assert len(events) == 2 and min(events) > 0, events


def test_a_window_keyed_by_a_pair_deals_its_tuples_by_both_columns(arranged):
    p = rk.Program.from_source(PAIRS, "pairs")
    got = _replay(p, social_sample(3000))
    assert f"{FILES} of src, dst" in got.metrics.path["pairs__close"], got.metrics.path


def test_a_checkpointed_replay_keeps_the_rows_on_spark(arranged, tmp_path):
    p = rk.Program.from_file(ROOT / "bench" / "programs" / "windows_ip.py")
    log = social_sample(2000)
    want = rk.replay(p, log, checkpoint=tmp_path / "serial", epoch=500)
    got = rk.replay(p, log, engine="spark", master="local[2]", checkpoint=tmp_path / "s", epoch=500)
    assert_same_result(got, want)
    assert FILES not in got.metrics.path["per_ip__close"], got.metrics.path
    assert "arranged by the driver" not in got.metrics.path["track"], got.metrics.path


def test_a_close_task_reads_its_files_in_position_order(tmp_path):
    # Two adding tasks' files, each in its own order; ties of time broken by the root
    # event, then by handler and call (the position's last part, two big-endian numbers).
    rows = [
        [(5, 7, 0, 2, b"b"), (3, 9, 0, 1, b"a"), (5, 7, 0, 1, b"c")],
        [(5, 6, 1, 0, b"d"), (5, 7, 1, 0, b"e"), (2, 1, 0, 0, b"f")],
    ]
    paths = []
    for i, some in enumerate(rows):
        t, o, h, c, b = zip(*some)
        table = pa.table(
            {
                "_rs_t": pa.array(t, pa.int64()),
                "_rs_o": pa.array(o, pa.int64()),
                "_rs_h": pa.array(h, pa.uint32()),
                "_rs_c": pa.array(c, pa.uint32()),
                "_rs_b": pa.array(b, pa.binary()),
            }
        )
        path = str(tmp_path / f"n{i}.arrow")
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        paths.append(path)
    got = pa.Table.from_batches(list(narrow_batches(tuple(paths))))
    assert got.column_names == ["_rs_t", "_rs_o", "_rs_b"]
    assert got.column("_rs_b").to_pylist() == [b"f", b"a", b"d", b"c", b"b", b"e"]
    # (two big-endian numbers compare as their bytes did in Spark's sort)
    pairs = [(0, 1), (0, 256), (1, 0), (255, 65536), (256, 0)]
    assert sorted(pairs, key=lambda hc: U32x2.pack(*hc)) == pairs
