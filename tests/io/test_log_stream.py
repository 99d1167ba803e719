"""The ordered copy on disk: the same log as the in-memory canonicalization, read a row group at a
time, described by its manifest, and never read whole by a serial replay (docs/scale.md)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import restream_kit as rk
from restream_kit.io import _ordered
from restream_kit.io import log as log_module

#: Rows per row group in these tests, so that small logs span several of them.
SMALL = 4


@pytest.fixture(autouse=True)
def small_row_groups(monkeypatch):
    monkeypatch.setattr(_ordered, "ROW_GROUP", SMALL)
    monkeypatch.setattr(log_module, "ROW_GROUP", SMALL)


def write(path, table):
    pq.write_table(table, path, row_group_size=3)
    return str(path)


def in_memory(paths) -> pa.Table:
    return log_module.canonicalize(rk.Log(paths).sources)


def assert_same_as_in_memory(paths) -> rk.Log:
    log = rk.Log(paths)
    expected = in_memory(paths)
    got = log.table
    assert got.schema == expected.schema
    assert got.to_pylist() == expected.to_pylist()
    streamed = pa.concat_tables(log.tables())
    assert streamed.to_pylist() == expected.to_pylist()
    again = rk.Log(paths)  # the summary from the manifest, not from the table
    assert (len(again), again.kinds, again.span_ms, again.schema) == (
        expected.num_rows,
        list(dict.fromkeys(expected.column("kind").to_pylist())),
        expected.column("ts")[-1].as_py() - expected.column("ts")[0].as_py(),
        expected.schema,
    )
    assert not again.loaded
    return log


def test_unordered_sources_with_ties_and_missing_columns(tmp_path):
    a = write(
        tmp_path / "a.parquet",
        pa.table({"ts": [5, 1, 3, 3, 9, 1, 2, 8], "x": [1, 2, 3, 4, 5, 6, 7, 8]}),
    )
    b = write(
        tmp_path / "b.parquet",
        pa.table(
            {"ts": [3, 1, 9, 0, 3], "y": ["p", "q", None, "s", "t"], "x": [10, 11, 12, 13, 14]}
        ),
    )
    log = assert_same_as_in_memory([a, b])
    assert log.table.column("lsn").to_pylist() == list(range(13))


def test_ordered_single_source_is_copied_without_a_sort(tmp_path, monkeypatch):
    path = write(tmp_path / "o.parquet", pa.table({"ts": list(range(10)), "kind": ["a", "b"] * 5}))
    monkeypatch.setattr(_ordered, "_sort", lambda *a: pytest.fail("sorted an ordered log"))
    assert_same_as_in_memory(path)


def test_explicit_lsn_sources_merge_by_ts_then_lsn(tmp_path):
    a = write(
        tmp_path / "a.parquet", pa.table({"ts": [1, 1, 2, 4, 4, 6], "lsn": [0, 2, 5, 7, 9, 11]})
    )
    b = write(tmp_path / "b.parquet", pa.table({"ts": [1, 3, 4, 4, 6], "lsn": [1, 6, 8, 10, 12]}))
    log = assert_same_as_in_memory([a, b])
    assert log.table.column("lsn").to_pylist() == [0, 1, 2, 5, 6, 7, 8, 9, 10, 11, 12]


def test_csv_and_string_times(tmp_path):
    path = tmp_path / "l.csv"
    rows = [f"2026-01-01T00:00:0{i % 7},k{i % 3},{i}" for i in (5, 3, 1, 6, 0, 2, 4, 8, 7)]
    path.write_text("ts,kind,v\n" + "\n".join(rows) + "\n")
    assert_same_as_in_memory(str(path))


def test_folder_source(tmp_path):
    folder = tmp_path / "parts"
    folder.mkdir()
    write(folder / "p0.parquet", pa.table({"ts": [4, 2, 9]}))
    write(folder / "p1.parquet", pa.table({"ts": [1, 7, 2, 3, 3]}))
    assert_same_as_in_memory(str(folder))


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (pa.table({"ts": [1, 2, 3, 4, 5, None]}), "column 'ts', row 5: ts is null"),
        (
            pa.table({"ts": [1, 2, 3, 3, 5], "lsn": [0, 1, 2, 2, 4]}),  # across a boundary
            "column 'lsn', row 3: explicit lsn 2 at ts 3 duplicates",
        ),
        (
            pa.table({"ts": [1, 2, 3, 4, 5, 6, 6], "lsn": [0, 1, 2, 3, 4, 6, 5]}),
            "column 'lsn', row 6: explicit lsn 5 at ts 6 is out of order after lsn 6",
        ),
        (
            pa.table({"ts": [1, 2, 3, 4, 5], "lsn": [0, 1, 9, 2, 9]}),
            "column 'lsn', row 4: lsn 9 is duplicated",
        ),
    ],
)
def test_errors_name_the_row_in_the_source_past_the_first_batch(tmp_path, table, message):
    path = write(tmp_path / "l.parquet", table)
    with pytest.raises(rk.LogError) as info:
        _ = rk.Log(path).table
    assert str(info.value).startswith(f"{path}, {message}")
    with pytest.raises(rk.LogError) as whole:
        in_memory(path)
    assert str(whole.value) == str(info.value)


def test_iteration_holds_a_row_group_at_a_time(tmp_path):
    path = write(tmp_path / "l.parquet", pa.table({"ts": [9 - i for i in range(10)]}))
    log = rk.Log(path)
    assert [t.num_rows for t in log.tables()] == [4, 4, 2]
    assert [t.num_rows for t in log.tables(3, 9)] == [1, 4, 1]
    batches = list(log.iter_events(3, start=1, stop=10))
    assert max(len(b) for b in batches) <= 3
    assert [e.ts for b in batches for e in b] == list(range(1, 10))
    assert log.ts_at(7) == 7
    assert not log.loaded


def test_the_cache_is_reused_and_an_old_one_gets_a_manifest(tmp_path, monkeypatch):
    path = write(tmp_path / "l.parquet", pa.table({"ts": [3, 1, 2], "kind": ["a", "b", "a"]}))
    first = rk.Log(path)
    summary = first.describe()
    copy = first.ordered()
    copy.manifest.unlink()  # as a cache written before the manifest existed
    monkeypatch.setattr(
        log_module, "write_canonical", lambda *_a: pytest.fail("ordered the log again")
    )
    again = rk.Log(path)
    assert again.describe() == summary
    assert again.ordered().manifest.exists()
    assert again.kinds_by_frequency() == ["a", "b"]


def test_summary_matches_the_table_for_kinds_with_missing_fields(tmp_path):
    table = pa.table(
        {
            "ts": list(range(9)),
            "kind": ["m", "f", "m", "m", "f", "m", "g", "m", "m"],
            "ip": ["a", None, "b", "c", None, "d", None, "e", None],
            "n": [None, 1, None, None, 2, None, None, None, None],
        }
    )
    path = write(tmp_path / "k.parquet", table)
    memory = rk.Log(table)
    streamed = rk.Log(path)
    assert streamed.describe().kind_fields == memory.describe().kind_fields
    assert streamed.describe().kind_fields == {
        "m": frozenset({"ip"}),
        "f": frozenset({"n"}),
        "g": frozenset(),
    }


PROGRAM = """
from restream_kit import emit, on, state

count = state.Map(default=0)

@on("message")
def track(e):
    count[e.src] += 1
    if count[e.src] == 3:
        emit("third", src=e.src)
"""


def test_a_serial_replay_never_reads_the_whole_log(tmp_path, monkeypatch):
    rows = 40
    table = pa.table(
        {
            "ts": [(i * 7919) % rows * 500 for i in range(rows)],
            "kind": ["message"] * rows,
            "src": [i % 5 for i in range(rows)],
        }
    )
    path = write(tmp_path / "m.parquet", table)
    expected = rk.replay(PROGRAM, rk.Log(table), epoch="2s")
    monkeypatch.setattr(
        rk.Log, "table", property(lambda _self: pytest.fail("the log was read whole"))
    )
    got = rk.replay(PROGRAM, path, engine="serial", epoch="2s")
    assert got["third"].to_dicts() == expected["third"].to_dicts() != []
    assert got.state == expected.state
    assert got.metrics.epochs == expected.metrics.epochs > 1
