"""Large output tables written by the pass tasks, not sent to the driver (docs/scale.md,
"Large output tables").

On a local master (the executors share the kernel's disk) a replay that commits no
checkpoint gives its tasks an :class:`OutputFiles`: a task that emitted at least ``rows``
rows to a table writes them as a Parquet part file in processing order
(``io._table_parts.part_table``) and sends the driver only the file's name and size; the
driver merges each table's parts once (``passes._emitted``). ``rows`` is the replay's
``result_rows``, per task: what a task sends the driver in memory stays below it, so the
driver holds fewer than ``partitions * result_rows`` rows of a table. Not spread over the
partitions: a part file and its merge cost about a second for half a million rows, more
than sending them (``bench regress``: the windowed rule's 533k-row table, 1.21x slower). Rows whose fields differ from row to row, or that Arrow cannot hold as
they are, travel as before.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from dataclasses import dataclass
from typing import Any

from ....io._table_files import TableFiles
from ....io._table_parts import part_table, write_part
from ....io.log import scratch_dir
from ._rows import BLOB_ROWS, EMIT, PH_LOG, dumps, for_driver
from ._setup import Setup, local_master

__all__ = [
    "OutputFiles",
    "output_files",
    "outputs_for",
    "result_rows",
    "plain_files",
    "task_files",
    "drop_parts",
    "in_memory",
    "held_files",
    "part_marker",
]

#: A table of this many rows or more is written by the tasks (``result_rows=``).
DEFAULT_ROWS = 1_000_000


@dataclass(frozen=True)
class OutputFiles:
    """Where a replay's tasks write their part files, and from how many rows of a table;
    ``arrow_rows``: from how many rows a task's table, sent as Arrow, goes to the driver as
    a file in ``directory`` rather than through Spark (``passes._arrow_rows.arrow_file``)."""

    directory: str
    rows: int
    arrow_rows: int


def output_files(setup: Setup, checkpointing: bool) -> OutputFiles | None:
    """The replay's :class:`OutputFiles`, or None: a checkpoint's commits and a wave's run
    keep their rows as they are, and a cluster's executors do not share this disk."""
    if checkpointing or setup.until is not None or not local_master(setup.session):
        return None
    return outputs_for(setup.rep.options, setup)


def outputs_for(options: Any, owner: Any) -> OutputFiles:
    """An :class:`OutputFiles` for a replay with ``options`` (its ``result_rows``, else
    ``$RESTREAM_RESULT_ROWS``), in a new scratch folder removed, at the latest, with
    ``owner`` (should the replay raise before :func:`drop_parts`)."""
    limit = result_rows(options)
    directory = tempfile.mkdtemp(dir=scratch_dir(), prefix="parts-")
    weakref.finalize(owner, shutil.rmtree, directory, True)
    # (``$RESTREAM_ARROW_FILE_ROWS``: for tests, whose logs are small)
    return OutputFiles(directory, limit, int(os.environ.get("RESTREAM_ARROW_FILE_ROWS", BLOB_ROWS)))


def result_rows(options: Any) -> int:
    """From how many rows a table of a replay with ``options`` is held as a file: its
    ``result_rows``, else ``$RESTREAM_RESULT_ROWS``, else :data:`DEFAULT_ROWS`."""
    limit = options.result_rows
    if limit is None:
        limit = int(os.environ.get("RESTREAM_RESULT_ROWS", DEFAULT_ROWS))
    return limit


def drop_parts(outputs: OutputFiles | None) -> None:
    """The part files, once the driver merged them."""
    if outputs is not None:
        shutil.rmtree(outputs.directory, ignore_errors=True)


def part_marker(table: str, path: str, rows: int) -> tuple:
    """The ``EMIT`` row naming a part file of table ``table`` of ``rows`` rows."""
    blob = dumps({"table": table, "file": path, "rows": rows})
    return for_driver(EMIT, blob)


def plain_files(
    outputs: OutputFiles | None, rows_by_table: dict[str, list], number: dict[str, int]
) -> tuple[dict[str, list], list[tuple]]:
    """A plain pass's emitted rows ``(lsn, ts, handler, seq, fields)`` by table: those it
    keeps to send, and the ``EMIT`` rows naming the part files written for the others."""
    if outputs is None:
        return rows_by_table, []
    kept, sent = {}, []
    for table, rows in rows_by_table.items():
        part = None
        if rows and len(rows) >= outputs.rows:
            part = part_table(
                table,
                [(*r, (r[1], PH_LOG, r[0], b""), number[r[2]]) for r in rows],
                range(len(rows)),
            )
        if part is None:
            kept[table] = rows
        else:
            sent.append(part_marker(table, write_part(part, outputs.directory), len(rows)))
    return kept, sent


def task_files(outputs: OutputFiles | None, rows: list[tuple]) -> tuple[list, list[tuple]]:
    """A pass task's emitted rows ``(table, lsn, ts, handler, seq, fields, position, h)``:
    those it keeps to send, and the ``EMIT`` rows naming the part files written for the
    others (each row's place among all the task's rows orders a handler run's rows)."""
    if outputs is None or not rows:
        return rows, []
    by_table: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        by_table.setdefault(row[0], []).append(i)
    written: set[str] = set()
    sent: list[tuple] = []
    for table, places in by_table.items():
        if len(places) < outputs.rows:
            continue
        part = part_table(table, [rows[i][1:] for i in places], places)
        if part is not None:
            written.add(table)
            sent.append(part_marker(table, write_part(part, outputs.directory), len(places)))
    return ([r for r in rows if r[0] not in written] if written else rows), sent


def in_memory(tables: dict[str, Any]) -> dict[str, Any]:
    """The tables held in memory (those written as files are read only when asked)."""
    return {name: t for name, t in tables.items() if not isinstance(t, TableFiles)}


def held_files(columns: dict[str, list]) -> dict[str, list[dict]]:
    """The part files the tasks named, by table (``columns`` as ``_emitted`` gathers them)."""
    held: dict[str, list[dict]] = {}
    for table, chunks in columns.items():
        files = [c for c in chunks if "file" in c]
        if files:
            held[table] = files
    return held
