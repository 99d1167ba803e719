"""Large emitted tables on the prefix path, written by the epochs' tasks (docs/scale.md,
"Large output tables").

As on the pass path (``passes._output_files``), a replay on a local master that commits no
checkpoint gives its tasks an ``OutputFiles``: a task whose round emitted ``result_rows``
rows or more to a table writes them as a Parquet part file (:func:`split_emits`), with the
table's columns as the driver would build them and the position columns of
``io._table_parts`` (the event's time and place in the log, the handler, the emit's
operation), and sends only the file's name. The driver makes the rows that did come in
memory one more part and merges the parts once, out of core, into one file in processing
order (:func:`held_tables`).

A part holds the columns the driver's own building gives (``prefix._assembly``): ``lsn``
and ``ts`` of the events, the handler, ``seq`` 0, and the fields, int64, double, bool or
string, a field null in every row of the part typed null, so that the merge types the
table as ``result.build_table`` types the same rows. Only tables whose emit sites all name
the same fields in the same order are written (the parts then have the same columns);
where the parts' types still disagree (a field bool in one task and int in another) the
driver reads the parts back as the emitted frames and builds the table as before: the
result never differs.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from ....compiler.lower import Lowered
from ....io._table_files import TableFiles
from ....io._table_parts import merge_parts, write_part
from ....io.log import Log, scratch_dir
from ....io.result import ROW_COLUMNS
from ..passes._output_files import OutputFiles

__all__ = ["file_tables", "split_emits", "held_tables"]

#: The Arrow type a part gives a field of each polars type (``build_table``'s of the values).
_ARROW = {
    pl.Int64: pa.int64(),
    pl.Float64: pa.float64(),
    pl.Boolean: pa.bool_(),
    pl.String: pa.string(),
}

#: ``lsn`` and ``ts`` of the events at some log positions (ascending).
EventsAt = Callable[[np.ndarray], pa.Table]


def file_tables(low: Lowered) -> set[str]:
    """The tables whose rows a task may write as a part file: every emit site of the table
    names the same fields in the same order, none of them a column every row has."""
    fields: dict[str, tuple[str, ...]] = {}
    refused: set[str] = set()
    for site in low.emits:
        names = tuple(name for name, _x in site.fields)
        if set(names) & set(ROW_COLUMNS) or fields.setdefault(site.table, names) != names:
            refused.add(site.table)
    return set(fields) - refused


def split_emits(
    low: Lowered,
    outputs: OutputFiles | None,
    emits: dict[int, pl.DataFrame],
    events_at: EventsAt,
) -> tuple[dict[int, pl.DataFrame], dict[str, str]]:
    """A task's emitted rows of one round (by emit site): those it sends as they are, and
    the part file it wrote for each table of ``outputs.rows`` rows or more."""
    if outputs is None:
        return emits, {}
    by_table: dict[str, list[int]] = {}
    for index in emits:
        by_table.setdefault(low.emits[index].table, []).append(index)
    allowed = file_tables(low)
    kept, written = dict(emits), {}
    for table, indexes in by_table.items():
        rows = sum(emits[i].height for i in indexes)
        if table not in allowed or not rows or rows < outputs.rows:
            continue
        part = part_of(low, [(i, emits[i]) for i in indexes], events_at)
        if part is not None:
            written[table] = write_part(part, outputs.directory)
            for index in indexes:
                del kept[index]
    return kept, written


def part_of(
    low: Lowered, frames: list[tuple[int, pl.DataFrame]], events_at: EventsAt
) -> pa.Table | None:
    """One table's part from its sites' emitted frames (``(emit site, frame)``, columns
    ``_o`` and ``f_<field>``), in processing order; None when a field's type is not one a
    part holds, or differs between the frames (the driver then builds the table)."""
    types: dict[str, Any] = {}
    named = []
    for index, frame in frames:
        site = low.emits[index]
        for field, _x in site.fields:
            dtype = frame.schema[f"f_{field}"]
            if dtype == pl.Null:
                continue
            if dtype not in _ARROW or types.setdefault(field, dtype) != dtype:
                return None
        named.append(
            frame.rename({f"f_{f}": f for f, _x in site.fields}).with_columns(
                pl.lit(site.handler, dtype=pl.Int64).alias("_h"),
                pl.lit(site.n, dtype=pl.Int64).alias("_n"),
            )
        )
    rows = pl.concat(named, how="diagonal_relaxed").sort(["_o", "_h", "_n"])
    at = rows.get_column("_o").to_numpy()
    events = events_at(at)
    ts = events.column("ts").cast(pa.int64())
    columns = {
        "lsn": events.column("lsn").cast(pa.int64()),
        "ts": ts,
        "handler": pa.array(low.handler_names, pa.string()).take(rows.get_column("_h").to_arrow()),
        "seq": pa.array(np.zeros(rows.height, dtype=np.int64)),
    }
    for field, _x in low.emits[frames[0][0]].fields:
        values = rows.get_column(field)
        if values.null_count() == rows.height:  # as ``pa.array`` types a column of None
            columns[field] = pa.nulls(rows.height)
        else:
            columns[field] = values.to_arrow().cast(_ARROW[types[field]])
    columns.update(
        _rs_t=ts,
        _rs_ph=pa.array(np.zeros(rows.height, dtype=np.int64)),
        _rs_o=pa.array(at, pa.int64()),
        _rs_sub=pa.array([b""] * rows.height, pa.binary()),
        _rs_h=rows.get_column("_h").to_arrow(),
        _rs_i=rows.get_column("_n").to_arrow(),
    )
    return pa.table(columns)


def held_tables(
    low: Lowered,
    log: Log,
    outputs: OutputFiles,
    written: dict[str, list[str]],
    emitted: dict[int, list[tuple[int, pl.DataFrame]]],
) -> dict[str, TableFiles]:
    """The tables some task wrote (``written``: their part files, by table), each merged with
    the table's rows that came in memory (taken out of ``emitted``) into one file. A table
    whose parts disagree goes back into ``emitted``, as the frames the tasks would have
    sent, and is built from them as before."""
    held: dict[str, TableFiles] = {}
    for table, parts in written.items():
        sites = [i for i, site in enumerate(low.emits) if site.table == table]
        came = [(i, frame) for i in sites for _chunk, frame in emitted.pop(i, []) if frame.height]
        merged = _merged(low, log, outputs, parts, came)
        if merged is not None:
            held[table] = merged
            continue
        for index, frame in came + _frames_of(low, parts):
            emitted.setdefault(index, []).append((0, frame))
    return held


def _merged(
    low: Lowered, log: Log, outputs: OutputFiles, parts: list[str], came: list
) -> TableFiles | None:
    """The tasks' ``parts`` of a table and the frames that ``came`` in memory, merged into
    one file; None when they do not tell the table's types."""
    if came:
        part = part_of(low, came, lambda at: log.rows_at(at, ["lsn", "ts"]))
        if part is None:
            return None
        parts = [*parts, write_part(part, outputs.directory)]
    directory = tempfile.mkdtemp(dir=scratch_dir(), prefix="results-")
    merged = merge_parts(parts, directory)
    if merged is None:
        shutil.rmtree(directory, ignore_errors=True)
    return merged


def _frames_of(low: Lowered, parts: list[str]) -> list[tuple[int, pl.DataFrame]]:
    """The part files' rows as the frames the tasks would have sent, by emit site."""
    site_of = {(site.handler, site.n): i for i, site in enumerate(low.emits)}
    out = []
    for path in parts:
        rows = pl.from_arrow(pq.read_table(path))
        for (handler, n), frame in rows.partition_by(
            ["_rs_h", "_rs_i"], as_dict=True, maintain_order=True
        ).items():
            index = site_of[(handler, n)]
            fields = [f for f, _x in low.emits[index].fields]
            out.append(
                (
                    index,
                    frame.select(
                        pl.col("_rs_o").alias("_o"), *(pl.col(f).alias(f"f_{f}") for f in fields)
                    ),
                )
            )
    return out
