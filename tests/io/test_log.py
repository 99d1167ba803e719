"""Log ingestion: formats, ordering, kinds, the cache, and clear errors naming file, column, row."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import restream_kit as rk
from restream_kit.io import log as log_module


def write(path, table):
    pq.write_table(table, path)
    return str(path)


def test_parquet_and_csv_give_the_same_log(tmp_path):
    table = pa.table({"ts": [3, 1, 2], "kind": ["a", "b", "a"], "x": [1, 2, 3]})
    pq_path = write(tmp_path / "l.parquet", table)
    csv_path = tmp_path / "l.csv"
    csv_path.write_text("ts,kind,x\n3,a,1\n1,b,2\n2,a,3\n")
    a, b = rk.Log(pq_path).table, rk.Log(str(csv_path)).table
    assert a.to_pylist() == b.to_pylist()
    assert a.column("lsn").to_pylist() == [0, 1, 2]
    assert a.column("x").to_pylist() == [2, 3, 1]


def test_timestamp_ts_becomes_milliseconds(tmp_path):
    when = dt.datetime(2026, 1, 1, 0, 0, 1, 500000)
    path = write(tmp_path / "t.parquet", pa.table({"ts": pa.array([when], pa.timestamp("us"))}))
    assert rk.Log(path).table.column("ts").to_pylist() == [1767225601500]


def test_kind_comes_from_source_names(tmp_path):
    a = write(tmp_path / "alerts.parquet", pa.table({"ts": [1]}))
    b = write(tmp_path / "procs.parquet", pa.table({"ts": [1]}))
    assert rk.Log([a, b]).kinds == ["alerts", "procs"]
    assert rk.Log([f"x={a}", f"y={b}"]).kinds == ["x", "y"]
    assert rk.Log(a).kinds == ["event"]


def test_second_log_reads_the_cache_instead_of_sorting(tmp_path, monkeypatch):
    path = write(tmp_path / "l.parquet", pa.table({"ts": [2, 1]}))
    first = rk.Log(path).table
    monkeypatch.setattr(log_module, "canonicalize", lambda _s: pytest.fail("sorted again"))
    again = rk.Log(path)
    assert again.table.to_pylist() == first.to_pylist()
    assert (again.cache_dir / f"{again.fingerprint}.parquet").exists()


def test_changed_file_changes_fingerprint(tmp_path):
    path = tmp_path / "l.parquet"
    write(path, pa.table({"ts": [1]}))
    before = rk.Log(str(path)).fingerprint
    write(path, pa.table({"ts": [1, 2]}))
    import os

    os.utime(path, ns=(1, 1))
    assert rk.Log(str(path)).fingerprint != before


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (pa.table({"t": [1]}), "l.parquet, column 'ts': no 'ts' column"),
        (pa.table({"ts": [1, None, 3]}), "l.parquet, column 'ts', row 1: ts is null"),
        (
            pa.table({"ts": [1.0, 2.5]}),
            "l.parquet, column 'ts', row 1: ts must be whole milliseconds",
        ),
        (pa.table({"ts": [[1]]}), "l.parquet, column 'ts': ts has type list<"),
        (
            pa.table({"ts": [1, 1, 2], "lsn": [0, 0, 1]}),
            "l.parquet, column 'lsn', row 1: explicit lsn 0",
        ),
        (
            pa.table({"ts": [1, 1, 1], "lsn": [0, 2, 1]}),
            "l.parquet, column 'lsn', row 2: explicit lsn 1",
        ),
        (
            pa.table({"ts": [2, 1], "lsn": [0, 1]}),
            "l.parquet, column 'lsn', row 1: explicit lsn 1 at ts 1",
        ),
    ],
)
def test_bad_logs_name_file_column_and_row(tmp_path, table, message):
    path = write(tmp_path / "l.parquet", table)
    with pytest.raises(rk.LogError) as info:
        _ = rk.Log(path).table
    assert str(info.value).startswith(str(tmp_path / message))


def test_duplicate_lsn_across_sources(tmp_path):
    a = write(tmp_path / "a.parquet", pa.table({"ts": [1], "lsn": [7]}))
    b = write(tmp_path / "b.parquet", pa.table({"ts": [2], "lsn": [7]}))
    with pytest.raises(rk.LogError, match=r"b.parquet, column 'lsn', row 0: lsn 7 is duplicated"):
        _ = rk.Log([a, b]).table


def test_mixed_type_ts_in_csv_names_the_row(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("ts,x\n1,a\n2,b\nnoon,c\n")
    with pytest.raises(rk.LogError, match=r"m.csv, column 'ts', row 2: ts 'noon'"):
        _ = rk.Log(str(path)).table


def test_missing_and_unreadable_files(tmp_path):
    with pytest.raises(rk.LogError, match="nope.parquet: log file not found"):
        _ = rk.Log(str(tmp_path / "nope.parquet")).table
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"not parquet")
    with pytest.raises(rk.LogError, match="junk.parquet: cannot read log"):
        _ = rk.Log(str(junk)).table


def test_kind_absent_from_log_warns(root):
    with pytest.warns(rk.RestreamWarning, match="no 'friendship' events in the log: handler"):
        result = rk.replay(
            root / "examples" / "antispam.py",
            [{"ts": 1, "kind": "message", "src": 1, "dst": 2, "ip": "a", "has_email": True}],
        )
    assert "befriend" in result.warnings[0]
