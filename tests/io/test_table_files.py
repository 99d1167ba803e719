"""Output tables held as Parquet files (``io._table_parts``, ``io._table_files``), without Spark.

Two "tasks" write part files of one table, rows interleaved in processing order, one with
ints and one with floats in a field: merged, they are the table ``build_table`` makes of all
the rows in processing order. A result holding such a table answers ``len``, ``in``,
``repr`` and ``summary`` from the footer, without reading the rows.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from restream_kit.io._table_files import TableFiles, Tables
from restream_kit.io._table_parts import merge_parts, part_table, write_part
from restream_kit.io.result import Metrics, Result, build_table


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
