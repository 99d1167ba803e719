"""Large output tables' part files: written by the tasks, merged once by the driver.

A Spark task writes the rows it emitted to a table as a *part* file (:func:`part_table`):
the output columns, then the position columns that put rows in processing order (the
event's position, the handler's number, the row's place among the task's rows). The driver
merges a table's parts once, out of core (DuckDB's external sort under
``RESTREAM_SORT_MEMORY``), into one Parquet file in processing order, typed as
``result.build_table`` types the same rows (:func:`merge_parts`): a
:class:`~restream_kit.io._table_files.TableFiles`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from ..model.errors import OutputError
from ._table_files import TableFiles
from .result import ROW_COLUMNS, build_table

__all__ = [
    "POSITION",
    "part_table",
    "positioned",
    "write_part",
    "part_rows",
    "table_rows",
    "merge_parts",
    "unified_schema",
]

#: The columns of a part file after the output columns: the event's position (time, phase,
#: order, sub-order), the handler's number, the row's place among the task's rows.
POSITION = ("_rs_t", "_rs_ph", "_rs_o", "_rs_sub", "_rs_h", "_rs_i")

_ROWS_PER_GROUP = 1 << 17


#: Field types a part file may hold: those whose values come back from Arrow as they went
#: in, so that the general way (:func:`part_rows`) rebuilds exactly the rows emitted.
def _plain_type(t: pa.DataType) -> bool:
    if pa.types.is_list(t):
        return _plain_type(t.value_type) and not pa.types.is_list(t.value_type)
    return any(
        check(t)
        for check in (
            pa.types.is_int64,
            pa.types.is_float64,
            pa.types.is_string,
            pa.types.is_boolean,
            pa.types.is_null,
            pa.types.is_binary,
            pa.types.is_timestamp,
            pa.types.is_date32,
        )
    )


def part_table(name: str, rows: list[tuple], places: Iterable[int]) -> pa.Table | None:
    """The part file's table of ``rows`` ``(lsn, ts, handler, seq, fields, position, h)`` in
    processing order (``places`` their places among the rows of their task), or None when they must travel as
    rows: their fields differ from row to row, or a value Arrow cannot hold as it is."""
    keys = list(rows[0][4])
    if any(list(r[4]) != keys for r in rows):
        return None
    try:
        table = build_table(name, [r[:5] for r in rows])
    except OutputError:
        return None
    positions = [r[5] for r in rows]
    return positioned(
        table,
        [
            pa.array([p[0] for p in positions], pa.int64()),
            pa.array([p[1] for p in positions], pa.int64()),
            pa.array([p[2] for p in positions], pa.int64()),
            pa.array([p[3] for p in positions], pa.binary()),
            pa.array([r[6] for r in rows], pa.int64()),
            pa.array(list(places), pa.int64()),
        ],
    )


def positioned(table: pa.Table, columns: list[pa.Array]) -> pa.Table | None:
    """``table`` (as ``build_table`` makes it) with its rows' :data:`POSITION` columns
    (``columns``, in that order) after its own; None when a field's type may not come back
    from Arrow as it went in (its rows must then travel as rows)."""
    if not all(_plain_type(f.type) for f in table.schema if f.name not in ROW_COLUMNS):
        return None
    for column, values in zip(POSITION, columns):
        table = table.append_column(column, values)
    return table


def write_part(table: pa.Table, directory: str | Path) -> str:
    """``table`` as a new part file in ``directory``; its path."""
    fd, path = tempfile.mkstemp(dir=directory, suffix=".parquet")
    os.close(fd)
    pq.write_table(table, path, row_group_size=_ROWS_PER_GROUP)
    return path


def part_rows(table: str, path: str) -> list[tuple]:
    """A part file's rows as the tasks send rows: ``(table, lsn, ts, handler, seq, fields,
    position, h)``."""
    return table_rows(table, pq.read_table(path))


def table_rows(table: str, got: pa.Table) -> list[tuple]:
    """The rows of a part's table ``got`` (as :func:`part_table` makes one), as the tasks
    send rows (:func:`part_rows`)."""
    names = [n for n in got.column_names if n not in ROW_COLUMNS and n not in POSITION]
    out = []
    for r in got.to_pylist():
        fields = {n: r[n] for n in names}
        position = (r["_rs_t"], r["_rs_ph"], r["_rs_o"], r["_rs_sub"])
        out.append((table, r["lsn"], r["ts"], r["handler"], r["seq"], fields, position, r["_rs_h"]))
    return out


def unified_schema(schemas: list[pa.Schema]) -> pa.Schema | None:
    """The schema ``build_table`` gives the parts' rows taken together, or None when it
    cannot be told from the parts' schemas (then the rows take the general way)."""
    names = schemas[0].names
    if any(s.names != names for s in schemas):
        return None
    fields = []
    for name in names:
        if name in POSITION:
            continue
        kinds = {s.field(name).type for s in schemas} - {pa.null()}
        if not kinds:
            fields.append(pa.field(name, pa.null()))
        elif len(kinds) == 1:
            fields.append(pa.field(name, kinds.pop()))
        elif kinds == {pa.int64(), pa.float64()}:  # pa.array([1, 2.5]) is doubles
            fields.append(pa.field(name, pa.float64()))
        else:
            return None
    return pa.schema(fields)


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def merge_parts(parts: list[str], directory: str | Path) -> TableFiles | None:
    """The parts of one table merged into ``directory/table.parquet`` in processing order
    (DuckDB's external sort, under ``RESTREAM_SORT_MEMORY``), or None when their schemas do
    not tell the table's (the caller then builds it from the rows)."""
    schema = unified_schema([pq.read_schema(p).remove_metadata() for p in parts])
    if schema is None:
        return None
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    read = [f.name for f in schema if not pa.types.is_null(f.type)]
    memory = os.environ.get("RESTREAM_SORT_MEMORY", "256MB")
    con = duckdb.connect(
        config={"memory_limit": memory, "temp_directory": str(directory / "spill")}
    )
    path = directory / "table.parquet"
    try:
        query = (
            f"SELECT {', '.join(map(_quoted, read))} "
            "FROM read_parquet(?, union_by_name = true) "
            f"ORDER BY {', '.join(POSITION)}"
        )
        reader = con.sql(query, params=[list(parts)]).to_arrow_reader(_ROWS_PER_GROUP)
        with pq.ParquetWriter(path, schema) as writer:
            for batch in reader:
                columns = [
                    pa.nulls(batch.num_rows, f.type)
                    if pa.types.is_null(f.type)
                    else batch.column(f.name).cast(f.type)
                    for f in schema
                ]
                writer.write_batch(pa.RecordBatch.from_arrays(columns, schema=schema))
    finally:
        con.close()
    shutil.rmtree(directory / "spill", ignore_errors=True)
    return TableFiles(path, directory)
