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


# -- own data: the time column named by ts=, the kind given by kind= --------------------------


@pytest.mark.parametrize(
    ("column", "expected"),
    [
        (pa.array([3, 1]), [1, 3]),
        (pa.array(["2026-03-01T09:30:00.250Z", "2026-03-01T09:30:00Z"]), [0, 250]),
        (pa.array(["2026-03-01T11:30:00.250+02:00", "2026-03-01 09:30:00"]), [0, 250]),
        (pa.array(["2026-03-01T09:30:00.250", "2026-03-01T09:30"]), [0, 250]),
        (
            pa.array([dt.datetime(2026, 3, 1, 9, 30, 0, 250999), dt.datetime(2026, 3, 1, 9, 30)]),
            [0, 250],
        ),
    ],
    ids=["integers", "iso-zulu", "iso-offset-and-naive", "iso-naive", "timestamp-us"],
)
def test_ts_names_the_time_column_in_any_form(column, expected):
    """Integer milliseconds, ISO-8601 strings with a zone, an offset or none (UTC), and
    timestamps finer than a millisecond (cut to it) all become int64 milliseconds."""
    log = rk.Log(pa.table({"time": column, "user": ["a", "b"]}), ts="time", kind="click")
    table = log.table
    assert table.column_names == ["lsn", "ts", "kind", "user"]
    assert table.column("kind").to_pylist() == ["click", "click"]
    origin = 0 if expected == [1, 3] else 1772357400000  # 2026-03-01T09:30:00Z
    assert [t - origin for t in table.column("ts").to_pylist()] == expected
    assert table.column("user").to_pylist() == ["b", "a"]


def test_a_csv_with_an_iso_time_column_and_no_kind(tmp_path):
    path = tmp_path / "clicks.csv"
    path.write_text("time,user\n2026-03-01T09:30:01Z,b\n2026-03-01T09:30:00Z,a\n")
    log = rk.Log(str(path), ts="time", kind="click")
    assert log.kinds == ["click"]
    assert log.table.column("ts").to_pylist() == [1772357400000, 1772357401000]
    result = rk.replay(
        "from restream_kit import emit, on\n\n@on('click')\ndef f(e):\n    emit('t', u=e.user)\n",
        str(path),
        ts="time",
        kind="click",
    )
    assert result.tables["t"].column("u").to_pylist() == ["a", "b"]


@pytest.mark.parametrize("name", ["time", "timestamp"])
def test_without_ts_the_error_names_the_time_column_and_how(tmp_path, name):
    path = tmp_path / "clicks.csv"
    path.write_text(f"user,{name}\na,2026-03-01T09:30:00Z\n")
    with pytest.raises(rk.LogError) as info:
        _ = rk.Log(str(path)).table
    message = str(info.value)
    assert message.startswith(f"{path}, column 'ts': no 'ts' column (columns: user, {name})")
    assert (
        f'the time column may be {name!r}: name it with --ts {name} (ts="{name}" in Python)'
        in message
    )
    assert "ISO-8601 strings" in message
    assert "--kind NAME" in message  # no kind column either
    # With a kind column, or a name for the source, the kind is no problem.
    path.write_text(f"kind,{name}\nclick,1\n")
    with pytest.raises(rk.LogError) as info:
        _ = rk.Log(str(path)).table
    assert "--kind" not in str(info.value) and f"--ts {name}" in str(info.value)


@pytest.mark.parametrize(
    ("table", "options", "message"),
    [
        (pa.table({"t": [1]}), {"ts": "time"}, "column 'time': no column 'time', given as"),
        (pa.table({"t": [1], "ts": [2]}), {"ts": "t"}, "column 'ts': has a 'ts' column besides"),
        (pa.table({"ts": [1], "kind": ["a"]}), {"kind": "b"}, "column 'kind': kind='b' gives"),
        (pa.table({"t": ["noon"]}), {"ts": "t"}, "column 'ts', row 0: ts 'noon' is neither"),
    ],
)
def test_own_data_mistakes_name_file_and_column(tmp_path, table, options, message):
    path = write(tmp_path / "l.parquet", table)
    with pytest.raises(rk.LogError) as info:
        _ = rk.Log(path, **options).table
    assert str(info.value).startswith(f"{path}, {message}")


def test_ts_and_kind_enter_the_fingerprint(tmp_path):
    path = write(tmp_path / "l.parquet", pa.table({"ts": [1], "t": [2]}))
    plain = rk.Log(path)
    assert plain.fingerprint == rk.Log(path).fingerprint
    others = {rk.Log(path, ts="t").fingerprint, rk.Log(path, kind="a").fingerprint}
    others |= {rk.Log(path, kind="b").fingerprint, plain.fingerprint}
    assert len(others) == 4
    # The cache keyed by it keeps them apart.
    assert rk.Log(path, kind="a").kinds == ["a"] and rk.Log(path, kind="b").kinds == ["b"]
    assert rk.Log(path).kinds == ["event"]
    # Log(log, ...) and Log.of keep the options of the sources they are given.
    again = rk.Log(rk.Log(path, kind="a"))
    assert again.fingerprint == rk.Log(path, kind="a").fingerprint
    assert rk.Log.of(plain) is plain and rk.Log.of(plain, kind="a").kinds == ["a"]


def test_kind_absent_from_log_warns_with_require_kinds_false(root):
    with pytest.warns(rk.RestreamWarning, match="no 'friendship' events in the log: handler"):
        result = rk.replay(
            root / "examples" / "antispam.py",
            [{"ts": 1, "kind": "message", "src": 1, "dst": 2, "ip": "a", "has_email": True}],
            require_kinds=False,
        )
    assert "befriend" in result.warnings[0]


def test_a_handler_that_would_never_run_is_an_error_naming_the_logs_kinds(root):
    """By default, as the command line and the notebook replay: an error naming the log's
    kinds."""
    log = [{"ts": 1, "kind": "message", "src": 1, "dst": 2, "ip": "a", "has_email": True}]
    with pytest.raises(rk.CheckError) as info:
        rk.replay(root / "examples" / "antispam.py", log)
    assert info.value.lineno == 12 and info.value.handler == "befriend"
    assert "no 'friendship' events in the log: handler(s) befriend will never run" in str(
        info.value
    )
    assert "(the log's kinds: 'message')" in str(info.value)
    # A log of the default kind says how to give it one.
    with pytest.raises(rk.CheckError, match=r"give it its kind with --kind click \(kind=\"click\""):
        rk.replay(
            "from restream_kit import on\n\n@on('click')\ndef f(e):\n    pass\n",
            [{"ts": 1}],
        )


@pytest.mark.spark
def test_spark_reads_a_uri_log_with_ts_and_kind_as_log_does(tmp_path, spark_session):
    """Spark's own reader (a ``file://`` URI) renames the time column and gives the kind as
    :class:`Log` does, and refuses what it refuses, in the same words."""
    path = tmp_path / "clicks.csv"
    path.write_text("time,user\n2026-03-01T09:30:01Z,b\n2026-03-01T09:30:00Z,a\n")
    program = (
        "from restream_kit import emit, on\n\n@on('click')\ndef f(e):\n    emit('t', u=e.user)\n"
    )
    got = rk.replay(program, f"file://{path}", engine="spark", ts="time", kind="click")
    want = rk.replay(program, str(path), ts="time", kind="click")
    assert got.tables["t"].to_pylist() == want.tables["t"].to_pylist()
    assert [r["ts"] for r in want.tables["t"].to_pylist()] == [1772357400000, 1772357401000]
    with pytest.raises(rk.LogError) as info:
        rk.replay(program, f"file://{path}", engine="spark", kind="click")
    assert (
        "column 'ts': no 'ts' column (columns: time, user); the time column may be 'time'"
        in str(info.value)
    )
