"""An epoch's events for the prefix path's tasks: read from the log's Parquet file (the
ordered copy, or a scratch copy of an in-memory log) a row group at a time, kept between
rounds as Arrow files, or, on a cluster, carried to the tasks as compressed Arrow IPC."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ....io._ordered import OrderedCopy
from ....io.log import Log, scratch_parquet

__all__ = ["events_ipc", "eventsfrom_ipc", "read_events", "read_rows", "log_file", "epoch_payloads"]


def events_ipc(table: pa.Table) -> bytes:
    """An epoch's events as compressed Arrow IPC, to travel through Spark (``ship_events``)."""
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression="lz4")
    with pa.ipc.new_stream(sink, table.schema, options=options) as out:
        out.write_table(table)
    return sink.getvalue().to_pybytes()


def eventsfrom_ipc(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


def read_events(path: str, columns: list[str], lo: int, hi: int, cache: str | None = None):
    """Rows ``lo`` to ``hi`` of a Parquet file, reading only the row groups that hold them.

    With a ``cache`` directory, the first round to read an epoch leaves its columns there as an
    Arrow file, which later rounds map instead of decoding Parquet again (a worker that cannot
    see the directory just reads the Parquet)."""
    cached = os.path.join(cache, f"{lo}-{hi}.arrow") if cache else None
    if cached:
        try:
            return pa.ipc.open_file(pa.memory_map(cached)).read_all()
        except OSError:
            pass  # not written yet, or not on this machine
    table = read_rows(path, columns, lo, hi)
    if cached:
        try:
            os.makedirs(cache, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=cache, suffix=".tmp")
            with os.fdopen(fd, "wb") as sink, pa.ipc.new_file(sink, table.schema) as out:
                out.write_table(table)
            os.replace(tmp, cached)  # whole or not at all, should two tasks race to write it
        except OSError:
            pass
    return table


def read_rows(path: str, columns: list[str], lo: int, hi: int) -> pa.Table:
    if os.path.isdir(path):  # Spark's ordered copy of a URI log: part files in log order
        copy = OrderedCopy(Path(path))
        parts = list(copy.tables(lo, hi, columns))
        return pa.concat_tables(parts) if parts else copy.rows_at([], columns)
    f = pq.ParquetFile(path)
    groups, first, start = [], None, 0
    for g in range(f.num_row_groups):
        n = f.metadata.row_group(g).num_rows
        if start < hi and start + n > lo:
            groups.append(g)
            first = start if first is None else first
        start += n
    if not groups:
        return f.schema_arrow.empty_table().select(columns)
    table = f.read_row_groups(groups, columns=columns)
    return table.slice(lo - first, hi - lo)


def log_file(log: Log) -> str:
    """A Parquet file holding the canonical log: its ordered copy (resolved: Python workers
    need not share the driver's directory), or a private scratch copy of an in-memory log."""
    if log.copied:  # the ordered copy, or Spark's of a URI log (``_uri_log``): not read here
        return str(log.ordered().path.resolve())
    return str(scratch_parquet(log.table, f"{log.fingerprint}.parquet"))


def epoch_payloads(log: Log, columns: list[str], bounds) -> list[bytes]:
    """Each epoch's needed columns as Arrow IPC: the canonical log's rows, as the tasks would
    read them from its Parquet file."""
    table = log.table.select(columns)
    return [events_ipc(table.slice(lo, hi - lo)) for lo, hi in bounds]
