"""Each committed epoch's output rows on the prefix path, and a resumed replay's tables made of
them.

A checkpoint keeps an epoch's rows as the serial engine does, table by table. The driver has
built the wave's output tables already (``prefix._assembly``), in processing order, from the
emitted columns; where a table's columns are plain (what ``_columns_table`` builds), each
epoch's slice of it is committed as it is (``RowsColumns``, the serial engine's column layout of
rows), so no row is made in Python and the log is read once, for the emitted rows' ``lsn`` and
``ts``. Other tables (a field of no one type, emit sites with different fields) are committed
as rows ``(lsn, ts, handler, 0, fields)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from ....compiler.lower import Lowered
from ....io._arrow_stores import RowsColumns, rows_from_table
from ....io.result import build_table

__all__ = ["EpochTables", "joined", "rows_by_chunk", "resumed_tables"]

#: The columns every row has, first in a table and in ``RowsColumns``.
_HEAD = ("lsn", "ts", "handler", "seq")


@dataclass
class EpochTables:
    """A run's output tables cut at its chunks (``prefix._spans``): each chunk's slice of
    each table, the log position of the slice's first row, which tables were built from
    plain columns, and the epoch each chunk is part of."""

    slices: dict[int, dict[str, pa.Table]] = field(default_factory=dict)
    first: dict[int, dict[str, int]] = field(default_factory=dict)
    columnar: set[str] = field(default_factory=set)
    owners: list[int] = field(default_factory=list)

    def outputs(self, chunks: list[int]) -> dict[str, pa.Table]:
        """The output tables' rows of the chunks ``chunks`` (consecutive: one epoch's)."""
        parts: dict[str, list[pa.Table]] = {}
        for chunk in chunks:
            for name, table in self.slices.get(chunk, {}).items():
                parts.setdefault(name, []).append(table)
        return {name: t[0] if len(t) == 1 else pa.concat_tables(t) for name, t in parts.items()}


def joined(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The rows of consecutive chunks (``rows_by_chunk``'s) as one epoch's, per table in order
    of first row: lists joined, ``RowsColumns`` put together."""
    out: dict[str, Any] = {}
    for rows in parts:
        for name, part in rows.items():
            had = out.get(name)
            if had is None:
                out[name] = part
            elif type(had) is RowsColumns and type(part) is RowsColumns:
                out[name] = RowsColumns(pa.concat_tables([had.table, part.table]))
            else:
                out[name] = _as_rows(had) + _as_rows(part)
    return out


def _as_rows(part: Any) -> list:
    return rows_from_table(part.table) if type(part) is RowsColumns else list(part)


def rows_by_chunk(low: Lowered, log: Any, emitted, made: EpochTables) -> dict[int, dict]:
    """Each chunk's output rows per table, in order of each table's first row: a columnar
    table's slice as ``RowsColumns``, another's rows as the serial engine keeps them."""
    same_fields = {
        name
        for name in made.columnar
        if len({tuple(f for f, _x in s.fields) for s in low.emits if s.table == name}) == 1
    }
    rest = {i: parts for i, parts in emitted.items() if low.emits[i].table not in same_fields}
    out = _python_rows(low, log, rest)
    for chunk, tables in made.slices.items():
        mine = out.setdefault(chunk, {})
        for name, table in tables.items():
            if name in same_fields:
                mine[name] = _rows_columns(table)
        first = made.first.get(chunk, {})
        out[chunk] = dict(sorted(mine.items(), key=lambda item: first.get(item[0], 0)))
    return out


def _rows_columns(table: pa.Table) -> RowsColumns:
    """A slice of an output table in ``RowsColumns``' layout (fields as ``f:<name>``)."""
    names = [n if n in _HEAD else f"f:{n}" for n in table.column_names]
    return RowsColumns(table.rename_columns(names))


def _python_rows(low: Lowered, log: Any, emitted) -> dict[int, dict[str, list]]:
    """Each chunk's rows of the emit sites ``emitted`` per table, as the serial engine keeps
    them: in processing order (position, handler, emit site), ``(lsn, ts, handler, 0,
    fields)``."""
    by_chunk: dict[int, list] = {}
    for index, parts in emitted.items():
        site = low.emits[index]
        names = [name for name, _x in site.fields]
        handler = low.handler_names[site.handler]
        for chunk, frame in parts:
            if not frame.height:
                continue
            values = [frame.get_column(f"f_{n}").to_list() for n in names]
            at = frame.get_column("_o").to_list()
            rows = by_chunk.setdefault(chunk, [])
            for i, o in enumerate(at):
                fields = {n: v[i] for n, v in zip(names, values)}
                rows.append(((o, site.handler, site.n), site.table, handler, fields))
    for rows in by_chunk.values():
        rows.sort(key=lambda r: r[0])
    # Only the emitted rows' lsn and ts, read once for every chunk (chunks are in log order):
    # the log is not read whole.
    chunks = sorted(by_chunk)
    at = [r[0][0] for chunk in chunks for r in by_chunk[chunk]]
    events = log.rows_at(at, ["lsn", "ts"]) if at else None
    lsns = events.column("lsn").to_pylist() if events is not None else []
    tss = events.column("ts").to_pylist() if events is not None else []
    out: dict[int, dict[str, list]] = {}
    i = 0
    for chunk in chunks:
        tables: dict[str, list] = {}
        for _pos, table, handler, fields in by_chunk[chunk]:
            tables.setdefault(table, []).append((lsns[i], tss[i], handler, 0, fields))
            i += 1
        out[chunk] = tables
    return out


def resumed_tables(start: Any, committed: dict[int, dict[str, Any]]) -> dict[str, pa.Table]:
    """A resumed replay's tables: the committed epochs' rows (``start.rows``, then
    ``committed`` by epoch) and the new ones, as the serial engine builds them. A table
    whose every part is ``RowsColumns`` of one schema is those columns put together (what
    ``build_table`` makes of their rows); others are built from rows."""
    every: dict[str, list] = {}
    for rows in [*start.rows, *(committed[k] for k in sorted(committed))]:
        for name, part in rows.items():
            every.setdefault(name, []).append(part)
    return {name: _table(name, parts) for name, parts in every.items()}


def _table(name: str, parts: list) -> pa.Table:
    columns = [p.table for p in parts if type(p) is RowsColumns]
    empty = all(type(p) is list and not p for p in parts if type(p) is not RowsColumns)
    if columns and empty and len({t.schema for t in columns}) == 1:
        table = pa.concat_tables(columns)
        return table.rename_columns([n.removeprefix("f:") for n in table.column_names])
    rows: list = []
    for part in parts:
        rows.extend(_as_rows(part))
    return build_table(name, rows)
