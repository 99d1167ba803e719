"""Emitted rows that travel from a pass's task to the driver as Arrow.

A plain pass (``passes._plain``) or a close pass fed narrow rows (``passes._narrow``) that
commits no checkpoint's epochs sends each of its tables as one Arrow table, in IPC bytes:
its output columns as ``result.build_table`` makes them, then the rows' positions in the
serial order (the part file's layout, ``io._table_parts``: time, phase, order, sub-order,
handler number, place among the task's rows). Where the task's windows left their rows as
columns (``runtime._window_rows``: ``WindowRows`` of closed windows, ``EmitRows`` of an
``emit`` written out in the loop), the table is built from those columns at once
(``engines._window_tables``), with no tuple, dict or pickled row per row; the driver joins
the tasks' tables of one table, sorts them by position and drops the position columns
(:func:`joined_parts`), with no Python row either. On a local master a large table goes as
an Arrow file on the driver's disk instead (:func:`arrow_file`), not through Spark's JVM.

A table that cannot go so keeps the way rows went before (``_emitted.send_emitted`` decides,
per table, and nothing else does): rows whose fields differ from row to row, a value Arrow
cannot hold as it is or may give back otherwise (``_table_parts.positioned``), a value
``build_table`` refuses (the driver builds the table from the rows, and so reports the
error as the serial engine does). At the driver, a table some of whose rows came otherwise,
or whose tasks' tables disagree on their types (``unified_schema``), is built from all its
rows as before: the Arrow tables give back their rows (``table_rows``).
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ....io._table_parts import POSITION, positioned, table_rows, unified_schema
from ....io.result import build_table
from ....model.errors import OutputError
from ..._window_tables import as_rows, block_table
from ._rows import BLOB_ROWS, PH_LOG, PH_SCHED, SIGN

__all__ = [
    "arrow_part",
    "arrow_blobs",
    "arrow_file",
    "is_arrow",
    "read_arrow",
    "joined_parts",
    "part_tuples",
]

#: What the bytes of an Arrow ``EMIT`` blob start with (a pickled one starts with 0x80), and
#: those of one naming an Arrow file on the driver's disk (:func:`arrow_file`).
_TAG = b"RSARROW1"
_FILE_TAG = b"RSARRWF1"
#: The sub-order of a close's row (``_rows.scheduled_sub``): its root event's time, phase
#: and lsn, then 0 and the close's ``seq``, big-endian, as one 25-byte record.
_SUB = np.dtype([("t", ">u8"), ("ph", "u1"), ("o", ">u8"), ("z", ">u4"), ("seq", ">u4")])


def arrow_part(table: str, rows: list, number: dict[str, int], closes: Any) -> pa.Table | None:
    """Table ``table``'s rows (the serial runtime's, blocks among them) as a part
    (``io._table_parts``), at their places in the serial order (``closes``: the task's
    ``OwnCloses``, whose handlers' rows sit at their closes' places); or None, for the
    rows to go as they went before (see the module docstring)."""
    built = _built(table, rows)
    if built is None:
        return None
    names = list(number)
    at = pc.index_in(built.column("handler"), value_set=pa.array(names, pa.string()))
    if at.null_count:
        return None
    h = np.asarray([number[n] for n in names], dtype=np.int64)[at.to_numpy()]
    lsn = built.column("lsn").to_numpy()
    ts = built.column("ts").to_numpy()
    n = built.num_rows
    closing = np.zeros(n, dtype=bool)
    if closes is not None:
        mine = [number[name] for name in closes.handlers if name in number]
        closing = np.isin(h, np.asarray(mine, dtype=np.int64))
    sub = _subs(closes, lsn, built.column("seq").to_numpy(), closing)
    if sub is None:
        return None
    columns = [
        pa.array(ts, pa.int64()),
        pa.array(np.where(closing, PH_SCHED, PH_LOG).astype(np.int64)),
        pa.array(np.where(closing, 0, lsn).astype(np.int64)),
        sub,
        pa.array(h),
        pa.array(np.arange(n, dtype=np.int64)),
    ]
    return positioned(built, columns)


def _built(table: str, rows: list) -> pa.Table | None:
    """The output table of ``rows``, exactly as ``build_table`` makes it (from the blocks'
    columns where they allow), or None: fields that differ from row to row, or an error
    ``build_table`` reports (it is reported at the driver, from the rows)."""
    if any(type(r) is not tuple for r in rows):
        try:
            fast = block_table(rows)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
            fast = None
        if fast is not None:
            return fast
        rows = as_rows(rows)
    keys = list(rows[0][4])
    if any(list(r[4]) != keys for r in rows):
        return None
    try:
        return build_table(table, rows)
    except OutputError:
        return None


def _subs(closes: Any, lsn: np.ndarray, seq: np.ndarray, closing: np.ndarray) -> Any:
    """The rows' sub-orders: none (``b""``) for a log event's row; a close's row's as
    ``_rows.scheduled_sub`` packs it. None when one cannot be packed so."""
    n = len(lsn)
    if not closing.any():
        offsets = pa.py_buffer(np.zeros(n + 1, dtype=np.int32).tobytes())
        return pa.Array.from_buffers(pa.binary(), n, [None, offsets, pa.py_buffer(b"")])
    roots = closes.root_times(lsn)
    picked = seq[closing]
    if roots is None or picked.min() < 0 or picked.max() >= 1 << 32:
        return None
    rec = np.zeros(n, dtype=_SUB)
    rec["t"] = roots.astype(np.int64).view(np.uint64) ^ np.uint64(SIGN)
    rec["ph"] = PH_LOG
    rec["o"] = lsn.astype(np.int64).view(np.uint64) ^ np.uint64(SIGN)
    rec["seq"] = np.where(closing, seq, 0).astype(np.uint32)
    fixed = pa.Array.from_buffers(pa.binary(_SUB.itemsize), n, [None, pa.py_buffer(rec.tobytes())])
    return pc.if_else(pa.array(closing), fixed.cast(pa.binary()), pa.scalar(b"", pa.binary()))


def arrow_blobs(table: str, part: pa.Table) -> list[bytes]:
    """Part ``part`` of table ``table`` as ``EMIT`` blobs of IPC bytes, a slice each."""
    part = part.replace_schema_metadata({"table": table})
    return [_ipc(part.slice(start, BLOB_ROWS)) for start in range(0, part.num_rows, BLOB_ROWS)]


#: LZ4 frames (where this Arrow has the codec): the bytes cross Spark's JVM twice, into its
#: rows and back out to the driver, and a closed window's positions are mostly zeros.
_COMPRESSED = pa.ipc.IpcWriteOptions(compression="lz4" if pa.Codec.is_available("lz4") else None)


def _ipc(part: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    sink.write(_TAG)
    with pa.ipc.new_stream(sink, part.schema, options=_COMPRESSED) as writer:
        writer.write_table(part)
    return sink.getvalue().to_pybytes()


def arrow_file(table: str, part: pa.Table, directory: str) -> bytes:
    """Part ``part`` of table ``table`` as an Arrow IPC file in ``directory``, on the
    driver's disk (a local master's): the ``EMIT`` blob naming it. Its rows never cross
    Spark's JVM, which would turn each slice's bytes into a row and back (about 1 s of the
    JVM's CPU per million rows); the file costs a write and a read of the page cache."""
    part = part.replace_schema_metadata({"table": table})
    fd, path = tempfile.mkstemp(dir=directory, suffix=".arrow")
    with os.fdopen(fd, "wb") as sink, pa.ipc.new_stream(sink, part.schema) as writer:
        writer.write_table(part)
    return _FILE_TAG + path.encode()


def is_arrow(blob: bytes) -> bool:
    """Whether an ``EMIT`` blob is a table's rows as Arrow (:func:`arrow_blobs`,
    :func:`arrow_file`)."""
    return blob[: len(_TAG)] in (_TAG, _FILE_TAG)


def read_arrow(blob: bytes) -> tuple[str, pa.Table]:
    """The table's name and its part, from an Arrow ``EMIT`` blob (read from its file when
    it names one: the driver reads it once, before the replay drops its files)."""
    if blob[: len(_FILE_TAG)] == _FILE_TAG:
        with pa.OSFile(blob[len(_FILE_TAG) :].decode()) as source:
            part = pa.ipc.open_stream(source).read_all()
    else:
        part = pa.ipc.open_stream(pa.py_buffer(blob)[len(_TAG) :]).read_all()
    return part.schema.metadata[b"table"].decode(), part.replace_schema_metadata(None)


def joined_parts(parts: list[pa.Table]) -> pa.Table | None:
    """One table from the tasks' parts of it: their rows in processing order (position,
    then handler; a run's rows in their order), typed as ``build_table`` types them all;
    None when their types do not tell how (the rows then take the general way)."""
    schema = unified_schema([p.schema for p in parts])
    if schema is None:
        return None
    names = schema.names
    try:
        joined = pa.concat_tables(
            pa.table(
                [*(p.column(f.name).cast(f.type) for f in schema), *map(p.column, POSITION)],
                names=[*names, *POSITION],
            )
            for p in parts
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return None
    order = pc.sort_indices(joined, sort_keys=[(c, "ascending") for c in POSITION])
    return joined.select(names).take(order).combine_chunks()


def part_tuples(table: str, parts: list[pa.Table]) -> list[tuple]:
    """The parts' rows as rows travel otherwise: ``(table, lsn, ts, handler, seq, fields,
    position, h)``."""
    return [row for part in parts for row in table_rows(table, part)]
