"""A checkpointed replay's output tables, read back from its checkpoint (docs/scale.md,
"Large output tables"; docs/checkpoints.md).

A checkpoint commits each epoch's rows as the replay goes: a table's rows of an epoch as a
typed Arrow file where they fit (``rows-N.arrow``: ``lsn, ts, handler, seq, f:<field>..``),
else in the epoch's JSON. So an engine that commits need keep no committed row in the kernel,
from one wave to the next or from a resume's start: once the last epoch is committed, each
table is put together here from every epoch's part in epoch order, which is processing order
(an epoch's rows are in it, and the epochs follow each other). A table of ``limit`` rows or
more is streamed, part after part, into one Parquet file, a :class:`TableFiles` read when
asked (as the tables the tasks write when nothing is committed); a smaller one is an Arrow
table. Either is typed as ``result.build_table`` types all its rows together: the parts' types
unified as ``_table_parts.unified_schema`` unifies them (int64 and double parts make doubles,
a part of nulls takes the others' type). Where the parts' types or fields say less than that
(fields that differ between epochs, a list of nothing in one epoch), the table is built from
its rows in the kernel, as before, and fails where ``build_table`` fails.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..model.errors import OutputError
from ._arrow_stores import rows_from_table
from ._checkpoint_codec import RowsFile, load_value
from ._table_files import TableFiles, Tables
from ._table_parts import unified_schema
from .log import scratch_dir
from .result import build_table

__all__ = ["committed_tables"]

_ROWS_PER_GROUP = 1 << 17


def committed_tables(directory: Path, epochs: list[dict], limit: int) -> Tables:
    """The output tables of every epoch the manifest entries ``epochs`` name in checkpoint
    ``directory``, in order of first emission: as a file from ``limit`` rows on."""
    parts: dict[str, list] = {}
    for entry in epochs:
        rows = load_value(Path(directory) / entry["dir"], "rows", rows_files=True)
        for name, part in rows.items():
            parts.setdefault(name, []).append(part)
    return Tables({name: _table(name, some, limit) for name, some in parts.items()})


def _table(name: str, parts: list, limit: int) -> Any:
    """One table from its epochs' ``parts`` (each a :class:`RowsFile` or a list of rows)."""
    counts = [_count(p) for p in parts]  # (a file part's count reads it: once each)
    parts = [p for p, n in zip(parts, counts) if n]
    if parts:
        try:
            if sum(counts) >= limit:
                held = _to_file(name, parts)
            else:
                held = _in_memory(name, parts)
        except OutputError:  # a part's own rows disagree: built whole, the error as it is
            held = None
        if held is not None:
            return held
    return build_table(name, [row for part in parts for row in _rows(part)])


def _count(part: Any) -> int:
    return _read(part).num_rows if type(part) is RowsFile else len(part)


def _read(part: RowsFile) -> pa.Table:
    # (memory-mapped: the rows are not copied until they are cast or written)
    with pa.memory_map(str(part.path)) as source:
        return pa.ipc.open_file(source).read_all()


def _rows(part: Any) -> list:
    return rows_from_table(_read(part)) if type(part) is RowsFile else part


def _part(name: str, part: Any) -> pa.Table:
    """An epoch's rows of table ``name`` as ``build_table`` builds them alone."""
    if type(part) is not RowsFile:
        return build_table(name, part)
    table = _read(part)
    return table.rename_columns([n.removeprefix("f:") for n in table.column_names])


def _cast(table: pa.Table, schema: pa.Schema) -> pa.Table:
    columns = [
        pa.nulls(table.num_rows, f.type)
        if pa.types.is_null(table.schema.field(f.name).type)
        else table.column(f.name).cast(f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(columns, schema=schema)


def _in_memory(name: str, parts: list) -> pa.Table | None:
    tables = [_part(name, p) for p in parts]
    schema = unified_schema([t.schema for t in tables])
    if schema is None:
        return None
    return pa.concat_tables([_cast(t, schema) for t in tables]).combine_chunks()


def _to_file(name: str, parts: list) -> TableFiles | None:
    """The parts streamed into one Parquet file, one epoch's rows in memory at a time (a
    list part is built twice, for its schema and for its rows: few rows, or unusual ones)."""
    schemas = [_read(p).schema if type(p) is RowsFile else _part(name, p).schema for p in parts]
    schema = unified_schema([_unprefixed(s) for s in schemas])
    if schema is None:
        return None
    directory = Path(tempfile.mkdtemp(dir=scratch_dir(), prefix="results-"))
    path = directory / "table.parquet"
    try:
        with pq.ParquetWriter(path, schema) as writer:
            for part in parts:
                writer.write_table(_cast(_part(name, part), schema), _ROWS_PER_GROUP)
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return TableFiles(path, directory)


def _unprefixed(schema: pa.Schema) -> pa.Schema:
    return pa.schema([f.with_name(f.name.removeprefix("f:")) for f in schema])
