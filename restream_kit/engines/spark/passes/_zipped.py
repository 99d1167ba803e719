"""Zipped passes: only the values read upstream travel between passes, packed, and meet
their events, which every pass takes from the log's kept arrangement, by ``lsn``.

When the passes forward events (``passes._plan.forwards``: nothing but probe values crosses
passes), a pass that takes some kinds of events from an earlier pass takes the events
themselves from the log instead, partitioned by its own key and sorted by position (packed
and kept for the next replay, ``passes._packing.arranged``). From the earlier pass it takes only
the values its events read there: that pass packs, for each event, its ``lsn`` and probe
columns as Arrow IPC, one chunk per partition of the receiving pass (the partition number is
a column Spark computed with the receiving pass's own partitioning, ``pmod(hash(key), n)``),
each chunk carrying the partition value of its first event. Partitioned by that value, each
chunk lands where its events are. Both frames are partitioned alike and unioned, and Spark
(4.1 and later, ``spark.sql.unionOutputPartitioning``) keeps the union's partitioning: the
i-th partition of the union is the values' i-th partition, then the events' i-th. A task
reads its values, then joins each batch of events to them with one NumPy search.

So a warm replay moves a few rows of bytes per partition between passes instead of a
million Spark rows, and shuffles and sorts no event. Every value must find its event in the
partition: one that does not fails the task (:class:`ZipError`), never a silent wrong answer.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ._rows import FWD, packed_batches, packed_bytes

__all__ = [
    "ZipError",
    "sources",
    "takes_from_passes",
    "zipped_passes",
    "zip_targets",
    "ValuePacker",
    "unzip",
    "to_file",
]

VALUES = "_rs_vipc"  # a packed chunk of values, in the receiving pass's input (its column)
PART = "_rs_part{}"  # the partition of an event in zipped pass {} (a column of the log frame)
_CHUNK_ROWS = 65_536


class ZipError(RuntimeError):
    """A zipped pass's input was not its values then its events, partitioned alike."""


# -- the driver: which passes zip, and their input -------------------------------------------


def sources(passes: Any, p: Any, log_kinds: dict) -> dict[int | None, list[str]]:
    """Where forwarded pass ``p`` takes each of its kinds from: the last earlier pass that had
    events of that kind, or the log (None). Nothing for a pass partitioned by a looked-up key:
    its events come packed from the pass that looks the key up (``passes._lookups``), neither
    forwarded nor zipped."""
    found: dict[int | None, list[str]] = {}
    if p.lookup:
        return found
    for kind in log_kinds[p.index]:
        source = None
        for q in passes[: p.index]:
            if kind in log_kinds[q.index]:
                source = q.index
        found.setdefault(source, []).append(kind)
    return found


def takes_from_passes(passes: Any, p: Any, log_kinds: dict) -> bool:
    """Whether forwarded pass ``p`` takes some of its events from an earlier pass."""
    return any(source is not None for source in sources(passes, p, log_kinds))


def zipped_passes(session: Any, pp: Any, log_kinds: dict, by_of: Any) -> dict[int, list[str]]:
    """The passes that zip, each with the columns it is partitioned by (``by_of(pass)``), or
    nothing: on Spark Connect, on a Spark whose unions lose their children's partitioning,
    when a pass taking events from another is partitioned by log order or is one task, or
    with ``$RESTREAM_SPARK_ZIP=0``. Whole events then travel (``passes._plain._forwarded``)."""
    if os.environ.get("RESTREAM_SPARK_ZIP", "1") == "0":
        return {}
    try:
        session.sparkContext  # noqa: B018 - raises on Spark Connect
        keeps = session.conf.get("spark.sql.unionOutputPartitioning")
    except Exception:  # noqa: BLE001 - Connect, or a Spark before 4.1
        return {}
    if str(keeps).lower() != "true":
        return {}
    passes = pp.passes
    zipping = [p for p in passes if takes_from_passes(passes, p, log_kinds)]
    bys = {p.index: by_of(p) for p in zipping}
    if any(by is None for by in bys.values()):
        return {}
    return bys


def zip_targets(setup: Any, p: Any) -> tuple:
    """What pass ``p`` packs values for: ``(pass, partition column, kinds)`` per later
    zipped pass that takes events of those kinds from it."""
    passes = setup.pp.passes
    return tuple(
        (q.index, PART.format(q.index), tuple(some))
        for q in passes[p.index + 1 :]
        if q.index in setup.zips
        for source, some in sources(passes, q, setup.log_kinds).items()
        if source == p.index
    )


# -- the tasks: packing values, and joining them to events ----------------------------------


class ValuePacker:
    """The values an earlier pass sends zipped passes (``spec.sends.zip_to``): per receiving pass
    and partition, chunks of ``lsn`` and the probe columns as Arrow IPC, as rows of the
    pass's output schema (``wide``) carrying the partition values of their first event."""

    def __init__(
        self, zip_to: tuple, wide: pa.Schema, by: dict[int, tuple[str, ...]], sink: str | None
    ):
        self.zip_to = zip_to
        self.wide = wide
        self.by = by
        # Driver-arranged receivers (``passes._local_arrangement``): each chunk goes to a file in
        # ``sink``, and its row carries the file's path and the partition number instead.
        self.sink = sink
        # (pass, partition) -> [the partition values of its first event, values...]
        self.held: dict[tuple[int, int], list] = {}
        self.rows: dict[tuple[int, int], int] = {}

    def add(self, batch: pa.RecordBatch, values: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        """Hold the values of ``batch``'s events (``values``: ``lsn`` and probe columns);
        the chunks that are full."""
        kind = batch.column("kind") if "kind" in batch.schema.names else None
        for target, part, kinds in self.zip_to:
            parts = batch.column(part).to_numpy(zero_copy_only=False).astype(np.int64)
            if kind is not None:  # only the events of the kinds it takes from here
                wanted = pc.is_in(kind, pa.array(kinds, kind.type))
                parts = np.where(wanted.to_numpy(zero_copy_only=False), parts, -1)
            order = np.argsort(parts, kind="stable")
            sorted_parts = parts[order]
            start = int(np.searchsorted(sorted_parts, 0))
            while start < len(order):
                d = int(sorted_parts[start])
                stop = int(np.searchsorted(sorted_parts, d, side="right"))
                take = pa.array(order[start:stop])
                key = (target, d)
                if key not in self.held:
                    self.held[key] = [batch.select(list(self.by[target])).take(take.slice(0, 1))]
                    self.rows[key] = 0
                self.held[key].append(values.take(take))
                self.rows[key] += stop - start
                if self.rows[key] >= _CHUNK_ROWS:
                    yield self._chunk(key)
                start = stop

    def flush(self) -> Iterator[pa.RecordBatch]:
        for key in list(self.held):
            yield self._chunk(key)

    def _chunk(self, key: tuple[int, int]) -> pa.RecordBatch:
        first, *values = self.held.pop(key)
        del self.rows[key]
        arrays = []
        for f in self.wide:
            if f.name == "_rs_kind":
                arrays.append(pa.array([FWD], f.type))
            elif f.name == "_rs_dest":
                arrays.append(pa.array([key[0]], f.type))
            elif f.name == "_rs_b":
                blob = packed_bytes(values)
                if self.sink is not None:
                    blob = to_file(self.sink, key, blob)
                arrays.append(pa.array([blob], f.type))
            elif f.name == "_rs_pk" and self.sink is not None:
                arrays.append(pa.array([str(key[1])], f.type))
            elif f.name in first.schema.names:
                col = first.column(f.name)
                arrays.append(col if col.type == f.type else col.cast(f.type))
            else:
                arrays.append(pa.nulls(1, f.type))
        return pa.RecordBatch.from_arrays(arrays, schema=self.wide)


def to_file(sink: str, key: tuple[int, int], blob: bytes) -> bytes:
    """Write a chunk of values (or events, ``passes._lookups``) for (pass, partition) ``key`` to a file of its own in
    ``sink``; its path, as bytes. The driver hands the receiving task the paths that
    finished tasks reported, so a failed attempt's file is never read."""
    path = os.path.join(sink, f"v{key[0]}.{key[1]}.{uuid.uuid4().hex}.arrow")
    with open(path, "wb") as f:
        f.write(blob)
    return path.encode()


def unzip(batches: Any) -> Iterator[pa.RecordBatch]:
    """A zipped pass's events, each with the values read upstream in its probe columns: the
    partition's packed values come first (``VALUES`` set), then its events, sorted by
    position; a value joins its event by ``lsn``. Every value must find its event: one that
    does not means the partitioning was lost on the way, and the task fails."""
    pending: list[pa.RecordBatch] = []
    values: _Values | None = None
    joined = 0
    for batch in batches:
        chunks = batch.column(VALUES) if VALUES in batch.schema.names else None
        rows = 0 if chunks is None else batch.num_rows - chunks.null_count
        if values is None:
            if rows and chunks.slice(0, rows).null_count:
                raise ZipError("a zipped pass's values and events came mixed")
            for chunk in chunks.slice(0, rows) if rows else ():
                pending += packed_batches(chunk)
            if rows == batch.num_rows:
                continue
            batch = batch.slice(rows)
            values = _Values(pending)
        elif rows:
            raise ZipError("a zipped pass's values came after its events")
        batch, found = values.join(batch)
        joined += found
        yield batch
    if values is None:
        values = _Values(pending)
    if joined != values.rows:
        raise ZipError(
            f"{values.rows - joined} of {values.rows} values read upstream found no event in "
            "their partition: the union of values and events lost its partitioning"
        )


class _Values:
    """A partition's values read upstream, by ``lsn``, to join to its events."""

    def __init__(self, batches: list[pa.RecordBatch]):
        batches = [b for b in batches if b.num_rows]
        self.rows = sum(b.num_rows for b in batches)
        self.columns: dict[str, pa.Array] = {}
        if not self.rows:
            self.lsn = np.empty(0, dtype=np.int64)
            return
        lsn = np.concatenate([b.column("lsn").to_numpy() for b in batches])
        order = np.argsort(lsn, kind="stable")
        self.lsn = lsn[order]
        take = pa.array(order)
        self.columns = {
            name: pa.concat_arrays([b.column(name) for b in batches]).take(take)
            for name in batches[0].schema.names
            if name.startswith("_rs_q")
        }

    def join(self, batch: pa.RecordBatch) -> tuple[pa.RecordBatch, int]:
        """``batch`` with its events' values in the probe columns, and how many it found."""
        if not self.columns:
            return batch, 0
        lsn = batch.column("lsn").to_numpy()
        at = np.minimum(np.searchsorted(self.lsn, lsn), len(self.lsn) - 1)
        found = self.lsn[at] == lsn
        index = pa.array(at, mask=~found)
        for name, column in self.columns.items():
            where = batch.schema.get_field_index(name)
            if where < 0:  # packed events come without the probe columns
                batch = batch.append_column(name, column.take(index))
            else:
                batch = batch.set_column(where, name, column.take(index))
        return batch, int(found.sum())
