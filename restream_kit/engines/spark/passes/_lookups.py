"""Passes partitioned by a key read from an upstream state (``passes._lookup_stages``).

``team_msgs[team_of[e.src]]``: the pass that holds ``team_of`` by ``e.src`` reads the team
for each event of the looked-up pass's kinds, as it serves any probe (at the reading
handler's place in declaration order). Here it also sends the event on to the partition of
that team in the looked-up pass, with the values it read:

- :class:`LookupPacker` (the sending task): per receiving partition, the events, their
  columns as they came and the probe columns, packed as Arrow IPC chunks, each a row whose
  partition value Spark's hash puts in that partition (``passes._ranges.spread_values``). So
  Spark shuffles a few rows of bytes per task, not a row per event;
- :func:`merged_events` (the receiving task): the chunks of its partition from every sending
  task, as one table sorted by position (``ts``, ``lsn``): its events in log order, which
  the serial engine's loop then runs.

An event's partition is its key as its first reading handler there reads it (a key the state
lacks reads as the state's default), encoded as state keys are (``_codec.encode_key``: equal
keys such as ``3`` and ``3.0`` have one form) and hashed. Nothing here imports pyspark.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from .._codec import MISSING, encode_key
from ._local_arrangement import local_part
from ._rows import FWD, packed_batches, packed_bytes, probe_array
from ._zipped import to_file

__all__ = [
    "LookupPacker",
    "merged_events",
    "partition_of_key",
    "lookups_served",
    "looked_up_input",
]

_CHUNK_ROWS = 65_536


def partition_of_key(encoded: str, n: int) -> int:
    """The partition, of ``n``, of a looked-up key in its encoded form (any stable hash: only
    the sending tasks place events, and they all use this one)."""
    return zlib.crc32(encoded.encode()) % n


class LookupPacker:
    """What a pass sends the passes partitioned by a key it looks up (``spec.sends.lookups``:
    ``(pass, slots, state, partition values, kinds)`` each): per pass and partition, chunks
    of its events with the values read here, as rows of ``wide`` (kind ``FWD``, the pass as
    ``_rs_dest``, the partition's value as ``_rs_pk``, the chunk in ``_rs_b``)."""

    def __init__(
        self,
        lookups: tuple,
        program: Any,
        columns: tuple,
        wide: pa.Schema,
        kind: Any,
        sink: str | None = None,
    ):
        self.targets = [
            (target, slots, program.states[state].default, spread, frozenset(kinds))
            for target, slots, state, spread, kinds in lookups
        ]
        self.columns = columns
        self.wide = wide
        self.kind = kind  # every event's kind, when the batches do not carry it
        # On a local master whose driver arranged the passes: each chunk goes to a file in
        # ``sink`` (as a zipped pass's values do), its row carrying the path and partition.
        self.sink = sink
        self.held: dict[tuple[int, int], list[pa.RecordBatch]] = {}
        self.parts: dict = {}  # key -> partition (equal keys, such as 3 and 3.0, alike)
        self.counts: dict[tuple[int, int], int] = {}

    def add(self, batch: pa.RecordBatch, served: dict[int, list]) -> Iterator[pa.RecordBatch]:
        """Hold ``batch``'s events for each looked-up pass, by partition (``served``: the
        values read here, one per event, by slot; left in place); the chunks that are full."""
        n = batch.num_rows
        kinds = (
            batch.column("kind").to_pylist() if "kind" in batch.schema.names else [self.kind] * n
        )
        events = pa.RecordBatch.from_arrays(
            [
                batch.column(c) if c in batch.schema.names else pa.array([self.kind] * n)
                for c in self.columns
            ],
            names=list(self.columns),
        )
        for target, slots, default, spread, wanted in self.targets:
            # Every reading handler of an event reads one value (no handler of these kinds
            # writes the state), so one column of values serves every slot.
            keys, parts = self._keys(served, slots, kinds, wanted, default, len(spread), n)
            values = {which: probe_array(which, keys) for which in "ldb"}
            probes = {f"_rs_q{which}{slot}": values[which] for slot in slots for which in "ldb"}
            full = pa.RecordBatch.from_arrays(
                [*events.columns, *probes.values()], names=[*self.columns, *probes]
            )
            order = np.argsort(parts, kind="stable")
            bounds = np.searchsorted(parts[order], np.arange(len(spread) + 1))
            for p in range(len(spread)):
                lo, hi = int(bounds[p]), int(bounds[p + 1])
                if lo == hi:
                    continue
                key = (target, p)
                self.held.setdefault(key, []).append(full.take(pa.array(order[lo:hi])))
                self.counts[key] = self.counts.get(key, 0) + hi - lo
                if self.counts[key] >= _CHUNK_ROWS:
                    yield self._row(key, spread)

    def _keys(
        self,
        served: dict,
        slots: tuple,
        kinds: list,
        wanted: frozenset,
        default: Any,
        n_parts: int,
        n: int,
    ) -> tuple[list, np.ndarray]:
        """Each of the first ``n`` events' value read here (the first slot's with one), and
        its partition in the looked-up pass (-1 for an event of another kind)."""
        columns = [served[slot] for slot in slots]
        keys = list(columns[0][:n])
        for column in columns[1:]:
            for i in range(n):
                if keys[i] is MISSING:
                    keys[i] = column[i]
        parts = np.full(n, -1, dtype=np.int64)
        cache = self.parts
        if len(cache) > 1_000_000:
            cache.clear()
        for i in range(n):
            if kinds[i] not in wanted:
                continue
            key = keys[i]
            if key is MISSING:
                key = default  # (a key the state lacks reads as its default)
            try:
                parts[i] = cache[key]
            except KeyError:
                parts[i] = cache[key] = partition_of_key(encode_key(key), n_parts)
            except TypeError:  # unhashable: the reading handler raises it there
                parts[i] = 0
        return keys, parts

    def flush(self) -> Iterator[pa.RecordBatch]:
        """The chunks still held (at the end of the task)."""
        spread_of = {target: spread for target, _s, _d, spread, _k in self.targets}
        for key in list(self.held):
            yield self._row(key, spread_of[key[0]])

    def _row(self, key: tuple[int, int], spread: tuple) -> pa.RecordBatch:
        chunk = self.held.pop(key)
        self.counts.pop(key)
        target, p = key
        arrays = []
        for f in self.wide:
            if f.name == "_rs_kind":
                arrays.append(pa.array([FWD], f.type))
            elif f.name == "_rs_dest":
                arrays.append(pa.array([target], f.type))
            elif f.name == "_rs_pk":
                arrays.append(pa.array([spread[p] if self.sink is None else str(p)], f.type))
            elif f.name == "_rs_b":
                blob = packed_bytes(chunk)
                arrays.append(
                    pa.array([blob if self.sink is None else to_file(self.sink, key, blob)], f.type)
                )
            else:
                arrays.append(pa.nulls(1, f.type))
        return pa.RecordBatch.from_arrays(arrays, schema=self.wide)


def merged_events(batches: Iterator[pa.RecordBatch], files: tuple = ()) -> Iterator[pa.RecordBatch]:
    """A looked-up pass's input: its partition's chunks, from every sending task, as its
    events in log order (sorted by ``ts``, then ``lsn``), in batches of 65,536. The chunks
    come as its rows, or, when the driver arranged the passes (``files``: per partition, the
    files finished tasks wrote), from the files of the partition its marker row names."""
    tables = []
    if files:
        for path in files[local_part(batches)]:
            with pa.memory_map(path) as source:
                tables.append(pa.ipc.open_stream(source).read_all())
    else:
        for batch in batches:
            for blob in batch.column("_rs_b"):
                if blob.is_valid:
                    tables.append(pa.Table.from_batches(packed_batches(blob)))
    if not tables:
        return
    events = pa.concat_tables(tables).sort_by([("ts", "ascending"), ("lsn", "ascending")])
    yield from events.combine_chunks().to_batches(max_chunksize=_CHUNK_ROWS)


# -- the driver ----------------------------------------------------------------------------


def lookups_served(setup: Any, p: Any) -> tuple:
    """The later passes partitioned by a key that pass ``p`` looks up (it serves their reads
    of the state), as ``PassSpec.lookups`` has them (``passes._lookups``)."""
    mine = {probe.slot for probe in p.serves}
    return tuple(
        (q.index, q.lookup[2], q.lookup[0], setup.spread[q.index], setup.log_kinds[q.index])
        for q in setup.pp.passes
        if q.lookup and set(q.lookup[2]) <= mine
    )


def looked_up_input(outputs: list, p: Any) -> Any:
    """A pass partitioned by a looked-up key: the chunks of its events that the pass looking
    the key up packed for each of its partitions (``passes._lookups``), there by their values."""
    (home,) = {probe.home for probe in p.consumes if probe.slot in p.lookup[2]}
    return (
        outputs[home].where(f"_rs_kind = {FWD} AND _rs_dest = {p.index}").select("_rs_pk", "_rs_b")
    )
