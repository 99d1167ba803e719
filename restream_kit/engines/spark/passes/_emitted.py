"""Emitted rows on their way from the tasks to the driver's output tables.

A task sends the rows its handlers emitted in processing order. Rows of log events whose
fields are the same names in the same order (the common case) travel as columns, one list
per field, which cost little to pickle and unpickle; the driver puts the tasks' columns in
processing order with one stable sort by (ts, lsn, handler) and builds each field's column
from the values in that order, as ``result.build_table`` builds it from rows. Any other rows
travel as tuples ``(table, lsn, ts, handler, seq, fields, position, handler number)`` and
take the general way, as does a table whose columns disagree or whose values Arrow refuses
(``build_table`` then says what is wrong, naming the row).

A task may instead write a large table's rows as a Parquet part file and send only its name
(``passes._output_files``): the driver merges the table's parts, with its other rows, into
one file the result reads when asked (:func:`emitted_tables`).

A plain task that commits no checkpoint's epochs sends each table as Arrow where it can
(:func:`send_emitted`, ``passes._arrow_rows``): the driver joins those tables' parts and
sorts them by position, with no row made in Python; a table some of whose rows came
otherwise takes the ways above, the parts giving back their rows.
"""

from __future__ import annotations

import itertools
import os
import pickle
import shutil
import tempfile
from typing import Any

import numpy as np
import pyarrow as pa

from ....io._arrow_stores import RowsColumns, rows_of_columns
from ....io._table_parts import merge_parts, part_rows, part_table, write_part
from ....io.log import scratch_dir
from ....io.result import ROW_COLUMNS, build_table
from ..._window_tables import as_rows
from ._arrow_rows import (
    arrow_blobs,
    arrow_file,
    arrow_part,
    is_arrow,
    joined_parts,
    part_tuples,
    read_arrow,
)
from ._output_files import OutputFiles, held_files, part_marker, plain_files
from ._rows import BLOB_ROWS, EMIT, PH_LOG, dumps, for_driver

__all__ = [
    "send_emitted",
    "pack_emitted",
    "unpack_emitted",
    "emitted_rows",
    "emitted_tables",
    "committed_rows",
]


def send_emitted(
    rows_by_table: dict[str, list],
    number: dict[str, int],
    closes: Any = None,
    outputs: OutputFiles | None = None,
) -> list[tuple]:
    """The ``EMIT`` rows of a task's emitted rows (``rows_by_table``: the serial runtime's,
    blocks among them; ``number``: each handler's place in declaration order; ``closes``:
    the task's ``OwnCloses``, whose handlers' rows sit at their closes' places): each table
    as Arrow (a part file when it is large, ``outputs``, and an Arrow file on a local
    master's disk from ``outputs.arrow_rows``), or the way rows went before."""
    out: list[tuple] = []
    rest: dict[str, list] = {}
    for table, rows in rows_by_table.items():
        if not rows:
            continue
        part = arrow_part(table, rows, number, closes)
        if part is None:
            rest[table] = as_rows(rows)
        elif outputs is not None and part.num_rows >= outputs.rows:
            out.append(part_marker(table, write_part(part, outputs.directory), part.num_rows))
        elif outputs is not None and part.num_rows >= outputs.arrow_rows:
            out.append(for_driver(EMIT, arrow_file(table, part, outputs.directory)))
        else:
            out += [for_driver(EMIT, b) for b in arrow_blobs(table, part)]
    if closes is not None:  # (it takes its rows out of the others)
        out += closes.rows(rest, number)
    kept, written = plain_files(outputs, rest, number)
    return out + written + pack_emitted(kept, number)


def pack_emitted(
    rows_by_table: dict[str, list], number: dict[str, int], epoch: int = -1
) -> list[tuple]:
    """The ``EMIT`` output rows of a task whose handlers ran over log events only:
    ``rows_by_table`` the runtime's rows ``(lsn, ts, handler, seq, fields)`` in processing
    order, ``number`` each handler's place in declaration order, ``epoch`` the checkpoint's
    epoch they belong to (-1: none)."""
    out = []
    for table, rows in rows_by_table.items():
        if not rows:
            continue
        keys = list(rows[0][4])
        if all(list(r[4]) == keys for r in rows) and not set(ROW_COLUMNS) & set(keys):
            for start in range(0, len(rows), BLOB_ROWS):
                part = rows[start : start + BLOB_ROWS]
                chunk = {
                    "table": table,
                    "keys": tuple(keys),
                    "lsn": [r[0] for r in part],
                    "ts": [r[1] for r in part],
                    "h": [number[r[2]] for r in part],
                    "seq": [r[3] for r in part],
                    "values": [[r[4][k] for r in part] for k in keys],
                }
                out.append(chunk)
            continue
        tuples = [
            (table, lsn, ts, handler, seq, fields, (ts, PH_LOG, lsn, b""), number[handler])
            for lsn, ts, handler, seq, fields in rows
        ]
        for start in range(0, len(tuples), BLOB_ROWS):
            out.append(tuples[start : start + BLOB_ROWS])
    return [for_driver(EMIT, dumps(blob), epoch) for blob in out]


def unpack_emitted(blob: bytes, rows: list, columns: dict[str, list]) -> None:
    """Add one ``EMIT`` blob to the driver's rows (tuples) or columns (chunks by table; a
    table's Arrow part as ``{"table", "arrow"}``)."""
    if is_arrow(blob):
        table, part = read_arrow(blob)
        columns.setdefault(table, []).append({"table": table, "arrow": part})
        return
    got = pickle.loads(blob)
    if type(got) is dict:
        columns.setdefault(got["table"], []).append(got)
    else:
        rows.extend(got)


def emitted_rows(rows: list, columns: dict[str, list], handlers: list[str]) -> dict[str, list]:
    """Every emitted row per table, ``(lsn, ts, handler, seq, fields)``, in processing order:
    position, then handler; a run's rows keep their order."""
    rows, columns, arrow = _arrow_apart(rows, columns)
    for table, parts in arrow.items():
        rows.extend(part_tuples(table, parts))
    if not rows and all(_one_shape(chunks) for chunks in columns.values()):
        return {table: _sorted_rows(chunks, handlers) for table, chunks in columns.items()}
    every = list(rows)
    for chunks in columns.values():
        for c in chunks:
            every.extend(_as_tuples(c, handlers))
    every.sort(key=lambda r: (r[6], r[7]))  # stable
    per_table: dict[str, list] = {}
    for table, lsn, ts, handler, seq, fields, _pos, _h in every:
        per_table.setdefault(table, []).append((lsn, ts, handler, seq, fields))
    return per_table


def emitted_tables(rows: list, columns: dict[str, list], handlers: list[str]) -> dict[str, Any]:
    """The output tables, exactly as ``build_table`` makes them from :func:`emitted_rows`: a
    table some task wrote as a file is a ``TableFiles``, rows in the same order and types."""
    rows, columns, arrow = _arrow_apart(rows, columns)
    joined = _joined_or_rows(arrow, rows, columns, lambda table: table)
    return {**_tables_of(rows, columns, handlers), **joined}


def _joined_or_rows(arrow: dict, rows: list, columns: dict, finish: Any) -> dict[str, Any]:
    """Each table's Arrow parts joined (``joined_parts``), as ``finish`` makes them (its
    value for the table); a table with rows that came otherwise (in ``rows`` or
    ``columns``), whose parts disagree or that ``finish`` refuses (None) goes into ``rows``
    as tuples instead."""
    others = {r[0] for r in rows} | set(columns)
    out = {}
    for table, parts in arrow.items():
        one = None if table in others else joined_parts(parts)
        done = None if one is None else finish(one)
        if done is None:
            rows.extend(part_tuples(table, parts))
        else:
            out[table] = done
    return out


def _arrow_apart(rows: list, columns: dict[str, list]) -> tuple[list, dict, dict]:
    """The tasks' Arrow parts by table, apart from the other rows and columns (``rows``, a
    copy, to add to)."""
    arrow: dict[str, list] = {}
    rest: dict[str, list] = {}
    for table, chunks in columns.items():
        for c in chunks:
            if "arrow" in c:
                arrow.setdefault(table, []).append(c["arrow"])
            else:
                rest.setdefault(table, []).append(c)
    return list(rows), rest if arrow else columns, arrow


def _tables_of(rows: list, columns: dict[str, list], handlers: list[str]) -> dict[str, Any]:
    held = held_files(columns)
    if not held:
        return _tables_in_memory(rows, columns, handlers)
    tables = _tables_in_memory(
        [r for r in rows if r[0] not in held],
        {t: chunks for t, chunks in columns.items() if t not in held},
        handlers,
    )
    for table, files in held.items():
        more = [r for r in rows if r[0] == table]
        for c in columns[table]:
            if "file" not in c:
                more.extend(_as_tuples(c, handlers))
        tables[table] = _table_of_files(table, [f["file"] for f in files], more, handlers)
    return tables


def _table_of_files(table: str, parts: list[str], more: list[tuple], handlers: list[str]) -> Any:
    """Table ``table`` from the tasks' part files and the rows others sent (tuples, in the
    order they came): one file in processing order (``TableFiles``); or, when the parts'
    types or fields disagree, built from every row as the rows would have been."""
    if more:
        more.sort(key=lambda r: (r[6], r[7]))  # stable
        part = part_table(table, [r[1:] for r in more], range(len(more)))
        if part is None:
            parts = parts + [None]
        else:
            parts = parts + [write_part(part, _folder(parts[0]))]
    if None not in parts:
        directory = tempfile.mkdtemp(dir=scratch_dir(), prefix="results-")
        merged = merge_parts(parts, directory)
        if merged is not None:
            return merged
        shutil.rmtree(directory, ignore_errors=True)
    every = list(itertools.chain.from_iterable(part_rows(table, p) for p in parts if p))
    if None in parts:
        every.extend(more)
    return build_table(table, emitted_rows(every, {}, handlers).get(table, []))


def _folder(path: str) -> str:
    return os.path.dirname(path)


def _tables_in_memory(rows: list, columns: dict[str, list], handlers: list[str]) -> dict[str, Any]:
    tables: dict[str, Any] = {}
    general: dict[str, list] = {}
    for table, row in ((r[0], r) for r in rows):
        general.setdefault(table, []).append(row)
    for table, chunks in columns.items():
        fast = None if table in general else _from_columns(table, chunks, handlers)
        if fast is not None:
            tables[table] = fast
        else:
            general.setdefault(table, []).extend(
                itertools.chain.from_iterable(_as_tuples(c, handlers) for c in chunks)
            )
    for table, some in emitted_rows(
        [r for rs in general.values() for r in rs], {}, handlers
    ).items():
        tables[table] = build_table(table, some)
    return tables


def _as_tuples(chunk: dict, handlers: list[str]) -> list[tuple]:
    table, keys = chunk["table"], chunk["keys"]
    return [
        (table, lsn, ts, handlers[h], seq, dict(zip(keys, values)), (ts, PH_LOG, lsn, b""), h)
        for lsn, ts, h, seq, *values in zip(
            chunk["lsn"], chunk["ts"], chunk["h"], chunk["seq"], *chunk["values"]
        )
    ]


def committed_rows(rows: list, columns: dict[str, list], handlers: list[str]) -> dict[str, Any]:
    """One epoch's rows per table for a checkpoint: a table that came only as the tasks'
    columns stays columns (``RowsColumns``: one NumPy sort and a take, no row built in
    Python) when each of its fields holds one type; any other table as rows, as
    :func:`emitted_rows` gives them."""
    rows, columns, arrow = _arrow_apart(rows, columns)
    out: dict[str, Any] = _joined_or_rows(arrow, rows, columns, _rows_columns)
    general = {r[0] for r in rows}
    slow: dict[str, list] = {}
    for table, chunks in columns.items():
        if table in general or not _one_shape(chunks):
            slow[table] = chunks
            continue
        ts, lsn, h, joined, order = _order(chunks)
        fields = {
            key: list(itertools.chain.from_iterable(c["values"][i] for c in chunks))
            for i, key in enumerate(chunks[0]["keys"])
        }
        names = np.asarray(handlers, dtype=object)[h].tolist()
        seq = np.asarray(joined("seq"), dtype=np.int64)
        some = rows_of_columns(lsn, ts, names, seq, fields)
        if some is None:
            out[table] = _sorted_rows(chunks, handlers)
        else:
            out[table] = RowsColumns(some.table.take(pa.array(order)))
    if rows or slow:
        out.update(emitted_rows(rows, slow, handlers))
    return out


def _rows_columns(table: Any) -> RowsColumns | None:
    """A joined table's rows for a checkpoint's commit, as columns (``rows_of_columns``)."""
    fields = {n: table.column(n).to_pylist() for n in table.column_names[len(ROW_COLUMNS) :]}
    head = [table.column(n).to_numpy() for n in ("lsn", "ts", "seq")]
    names = table.column("handler").to_pylist()
    return rows_of_columns(head[0], head[1], names, head[2], fields)


def _one_shape(chunks: list[dict]) -> bool:
    return all(c["keys"] == chunks[0]["keys"] for c in chunks)


def _order(chunks: list[dict]) -> tuple:
    """The tasks' columns of one table joined, and the order that sorts them into processing
    order (stable: a run's rows keep their order)."""

    def joined(name: str) -> list:
        return list(itertools.chain.from_iterable(c[name] for c in chunks))

    ts, lsn, h = (np.asarray(joined(n), dtype=np.int64) for n in ("ts", "lsn", "h"))
    return ts, lsn, h, joined, np.lexsort((h, lsn, ts))


def _sorted_rows(chunks: list[dict], handlers: list[str]) -> list[tuple]:
    """One table's rows from the tasks' columns, ``(lsn, ts, handler, seq, fields)``, in
    processing order: one NumPy sort, not a sort of tuples by key."""
    keys = chunks[0]["keys"]
    ts, lsn, h, joined, order = _order(chunks)
    picks = order.tolist()
    names = [handlers[i] for i in h[order].tolist()]
    seq = np.asarray(joined("seq"), dtype=np.int64)[order].tolist()
    values = []
    for i in range(len(keys)):
        column = list(itertools.chain.from_iterable(c["values"][i] for c in chunks))
        values.append([column[j] for j in picks])
    return [
        (lsn_, ts_, name, s, dict(zip(keys, vs)))
        for lsn_, ts_, name, s, *vs in zip(
            lsn[order].tolist(), ts[order].tolist(), names, seq, *values
        )
    ]


def _from_columns(table: str, chunks: list[dict], handlers: list[str]) -> Any:
    """The table from the tasks' columns, or None when they need the general way."""
    keys = chunks[0]["keys"]
    if not _one_shape(chunks):
        return None
    ts, lsn, h, joined, order = _order(chunks)
    names = np.asarray(handlers, dtype=object)
    columns = {
        "lsn": pa.array(lsn[order], pa.int64()),
        "ts": pa.array(ts[order], pa.int64()),
        "handler": pa.array(names[h[order]].tolist(), pa.string()),
        "seq": pa.array(np.asarray(joined("seq"), dtype=np.int64)[order], pa.int64()),
    }
    picks = order.tolist()
    for i, key in enumerate(keys):
        values = list(itertools.chain.from_iterable(c["values"][i] for c in chunks))
        values = [values[j] for j in picks]  # in order: Arrow infers nested types by it
        try:
            column = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
            return None
        if pa.types.is_boolean(column.type) and any(
            v is not None and not isinstance(v, bool) for v in values
        ):
            return None
        columns[key] = column
    return pa.table(columns)
