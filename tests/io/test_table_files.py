"""Output tables held as Parquet files (``io._table_parts``, ``io._table_files``), without Spark.

Two "tasks" write part files of one table, rows interleaved in processing order, one with
ints and one with floats in a field: merged, they are the table ``build_table`` makes of all
the rows in processing order. A result holding such a table answers ``len``, ``in``,
``repr`` and ``summary`` from the footer, without reading the rows. A checkpoint's committed
epochs' rows put together (``io._committed_tables``) are the table ``build_table`` makes of
them all, as a file or in memory.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from restream_kit.io._committed_tables import committed_tables
from restream_kit.io._table_files import TableFiles, Tables
from restream_kit.io._table_parts import merge_parts, part_table, write_part
from restream_kit.io.checkpoint import Checkpointer
from restream_kit.io.result import Metrics, Result, build_table
from restream_kit.model.errors import OutputError


def _rows(task: int, n: int) -> list[tuple]:
    """Task ``task``'s rows ``(lsn, ts, handler, seq, fields, position, h)``: events
    ``task, task + 2, ...``, two rows for every third event (a run's rows keep their order)."""
    rows = []
    for lsn in range(task, n, 2):
        value = lsn if task == 0 else lsn + 0.5
        for seq in range(2 if lsn % 3 == 0 else 1):
            rows.append((lsn, 1000 + lsn, "h", seq, {"v": value, "s": f"r{lsn}.{seq}"}))
    return [(*r, (r[1], 2, r[0], b""), 0) for r in rows]


@pytest.fixture
def held(tmp_path) -> TableFiles:
    parts_dir = tmp_path / "parts"
    parts_dir.mkdir()
    parts = []
    for task in (1, 0):
        rows = _rows(task, 40)
        parts.append(write_part(part_table("t", rows, range(len(rows))), parts_dir))
    return merge_parts(parts, tmp_path / "merged")


def test_parts_merge_into_the_table_of_all_rows_in_processing_order(held):
    every = sorted(_rows(0, 40) + _rows(1, 40), key=lambda r: (r[5], r[6]))
    want = build_table("t", [r[:5] for r in every])
    assert want.schema.field("v").type == pa.float64()
    got = held.to_arrow()
    assert got.schema == want.schema and got.to_pylist() == want.to_pylist()
    assert (
        held.num_rows == want.num_rows and held.head(4).to_pylist() == want.slice(0, 4).to_pylist()
    )


def test_parts_whose_types_say_less_are_left_to_the_rows(tmp_path):
    parts = []
    for xs in ([], [1]):
        rows = [(0, 1, "h", 0, {"xs": xs}, (1, 2, 0, b""), 0)]
        parts.append(write_part(part_table("t", rows, [0]), tmp_path))
    assert merge_parts(parts, tmp_path / "merged") is None  # list<null> and list<int64>


def test_a_result_holding_a_file_reads_it_only_when_asked(held, monkeypatch):
    metrics = Metrics("spark", 40, 0, 1.0, 40, rows={"t": held.num_rows})
    result = Result(tables={"t": held}, state={}, metrics=metrics)
    assert isinstance(result.tables, Tables)
    monkeypatch.setattr(TableFiles, "to_arrow", lambda self: pytest.fail("read the rows"))
    assert "t" in result.tables and len(result.tables) == 1
    assert f"t: {held.num_rows:,} rows (v, s)" in repr(result)
    assert result.summary()["tables"] == {"t": held.num_rows}
    assert result.lazy("t").head(2).collect().height == 2
    monkeypatch.undo()
    assert result["t"].height == held.num_rows and "time" in result["t"].columns


def test_committed_tables_are_each_epochs_rows_together_as_build_table_types_them(tmp_path):
    def rows(first: int, n: int, value) -> list[tuple]:
        return [(i, 10 * i, "h", 0, {"v": value(i), "s": f"r{i}"}) for i in range(first, first + n)]

    # ``t``: ints as a typed file, then floats as JSON (few rows), then nulls as a file:
    # doubles together. ``u``: a list of nothing, then lists of ints (built from the rows).
    # ``c``: bools, then ints: no one type, the error build_table gives.
    epochs = [
        {"t": rows(0, 600, int), "u": [(1, 1, "h", 0, {"xs": []})]},
        {"t": rows(600, 10, lambda i: i + 0.5), "u": [(2, 2, "h", 0, {"xs": [1, 2]})]},
        {"t": rows(610, 600, lambda i: None), "u": [], "c": rows(0, 3, lambda i: True)},
    ]
    ck = Checkpointer(tmp_path / "ck", {"of": "a test"}, state_format="serial")
    for number, epoch in enumerate(epochs):
        ck.commit(number, number + 1, {}, epoch)
    assert sorted(p.name for p in (tmp_path / "ck" / "epoch-000000").iterdir()) == [
        "rows-0.arrow",
        "rows.json",
        "state.json",
    ]
    every = {name: [r for epoch in epochs for r in epoch.get(name, [])] for name in "tuc"}
    for limit in (0, 10_000):
        tables = committed_tables(ck.directory, ck.manifest["epochs"][:2], limit)
        assert list(tables) == ["t", "u"]
        assert (tables.files("t") is not None) == (limit == 0)
        assert tables.files("u") is None  # (its epochs' types say less than its rows')
        for name in tables:
            want = build_table(name, [r for epoch in epochs[:2] for r in epoch[name]])
            assert tables[name].equals(want), name
        tables = committed_tables(ck.directory, ck.manifest["epochs"], limit)
        assert tables["t"].equals(build_table("t", every["t"]))
        assert str(tables["t"].schema.field("v").type) == "double"
    ck.commit(3, 4, {}, {"c": rows(3, 3, int)})
    with pytest.raises(OutputError) as want_error:
        build_table("c", every["c"] + rows(3, 3, int))
    with pytest.raises(OutputError) as got_error:
        committed_tables(ck.directory, ck.manifest["epochs"], 0)
    assert str(got_error.value) == str(want_error.value)
