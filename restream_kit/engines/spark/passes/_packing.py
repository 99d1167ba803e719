"""A pass's log events arranged once and kept packed: a warm replay of the same log starts at
its handlers, with no shuffle and no sort (:func:`arranged`), and the tasks unpack them
(:func:`unpacked`)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from . import _rows as W
from ._machine import classic
from ._sql import unquoted

__all__ = ["arranged", "unpacked", "PackTask", "PACKED_SEQ", "PACKED_IPC", "PACK_MAX_EVENTS"]

_ARRANGED: dict[tuple, Any] = {}
_ARRANGED_KEPT = 4
#: The columns of a packed arrangement (besides the partition columns): one row per chunk.
PACKED_SEQ, PACKED_IPC = "_rs_seq", "_rs_ipc"
_PACK_ROWS = 65_536
#: The largest log whose arrangement is kept packed. A kept arrangement lives in the JVM's
#: cache, and a pass in one partition (a sequential stage) is all of it in one cached block:
#: above this the JVM's peak grew with the log (2.1x from 3M to 30M events) and a 1 GB heap
#: ran out building that block, so a larger log is arranged again in each replay.
PACK_MAX_EVENTS = 5_000_000


def arranged(setup: Any, rows: Any, by: list[str] | None = None, n: int = 0) -> tuple:
    """``rows`` (a pass's log events, partitioned and sorted, from the log's DataFrame alone)
    packed (:class:`PackTask`) and kept for the next replay that arranges the same log the
    same way, and whether it is packed.

    A notebook replays one log many times: a warm replay then starts at its handlers, with no
    shuffle and no sort. Packed, each partition is a few rows of Arrow IPC (its events in
    chunks, in order), so a warm replay also skips turning a million events into Spark rows
    and back into Arrow, which cost more CPU than the handlers of a simple rule. With ``by``
    (the partition columns) the packed rows carry the partition values of their first event
    and are partitioned by them again, into ``n`` partitions: each lands where its events
    were, and Spark knows how the frame is partitioned (``passes._sources.Zipped`` needs that).
    The log is immutable (its fingerprint is part of the key), so a kept arrangement is the
    one the replay would compute. The most recent few are kept, of logs of at most
    :data:`PACK_MAX_EVENTS` events."""
    if not classic(setup.session) or len(setup.log) > PACK_MAX_EVENTS:
        return rows, False
    try:
        key = (id(setup.session), setup.log.fingerprint, rows.semanticHash(), tuple(by or ()), n)
    except Exception:  # noqa: BLE001 - no plan to compare: arrange this time only
        return rows, False
    kept = _ARRANGED.pop(key, None)
    if kept is not None:
        plan, packed = kept
        try:
            if plan.sameSemantics(rows):
                _ARRANGED[key] = kept  # now the most recent
                return packed, True
        except Exception:  # noqa: BLE001 - its session is gone
            pass
        _unpersist(packed)
    names = [unquoted(c) for c in by or ()]
    fields = [f for f in rows.schema.fields if f.name in names]
    from pyspark.sql.types import BinaryType, LongType, StructField, StructType

    schema = StructType(
        [*fields, StructField(PACKED_SEQ, LongType()), StructField(PACKED_IPC, BinaryType())]
    )
    packed = rows.mapInArrow(PackTask(tuple(names)), schema)
    if by:
        packed = packed.repartition(n, *by)
    packed = packed.persist()
    while len(_ARRANGED) >= _ARRANGED_KEPT:
        _unpersist(_ARRANGED.pop(next(iter(_ARRANGED)))[1])
    _ARRANGED[key] = (rows, packed)
    return packed, True


class PackTask:
    """``mapInArrow``: a partition's events as rows of Arrow IPC, ``_PACK_ROWS`` events each,
    numbered in order, with the partition values (``names``) of each chunk's first event."""

    def __init__(self, names: tuple[str, ...]):
        self.names = names

    def __call__(self, batches: Any) -> Any:
        seq = 0
        chunk: list = []
        held = 0
        for batch in batches:
            if batch.num_rows:
                chunk.append(batch)
                held += batch.num_rows
            if held >= _PACK_ROWS:
                yield self._row(chunk, seq)
                seq, chunk, held = seq + 1, [], 0
        if held:
            yield self._row(chunk, seq)

    def _row(self, chunk: list, seq: int) -> pa.RecordBatch:
        first = {name: chunk[0].column(name).slice(0, 1) for name in self.names}
        return pa.RecordBatch.from_arrays(
            [
                *first.values(),
                pa.array([seq], pa.int64()),
                pa.array([W.packed_bytes(chunk)], pa.binary()),
            ],
            names=[*first, PACKED_SEQ, PACKED_IPC],
        )


def unpacked(batches: Any) -> Any:
    """The events of packed rows (:func:`arranged`), in order; other rows as they come (the
    values of a zipped pass, before its events). A chunk out of order fails the task."""
    last = -1
    for batch in batches:
        if PACKED_IPC not in batch.schema.names:
            yield batch
            continue
        blobs = batch.column(PACKED_IPC)
        if blobs.null_count:
            rows = batch.num_rows - blobs.null_count
            if blobs.slice(batch.num_rows - rows).null_count:
                raise RuntimeError("packed events came mixed with other rows")
            yield batch.slice(0, batch.num_rows - rows)
            batch, blobs = batch.slice(batch.num_rows - rows), blobs.slice(batch.num_rows - rows)
        for seq, blob in zip(batch.column(PACKED_SEQ).to_pylist(), blobs):
            if seq != last + 1:
                raise RuntimeError(f"packed events: chunk {seq} came after chunk {last}")
            last = seq
            yield from W.packed_batches(blob)


def _unpersist(frame: Any) -> None:
    try:
        frame.unpersist()
    except Exception:  # noqa: BLE001 - its session may be gone
        pass
