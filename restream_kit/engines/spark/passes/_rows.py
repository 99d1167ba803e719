"""What passes send each other, and the driver: rows of one schema, and their positions.

A pass's output (``OUT_SCHEMA``) is one row per emitted batch of rows, final state, statistic,
error, probe value, write or scheduled event for another pass, each with a kind (``EMIT``...)
and, for rows that go to another pass, its number (``_rs_dest``), the partition value there
(``_rs_pk``) and a position. A position is ``(t, phase, o, sub)``: a log event is
``(ts, 2, row, b"")``; a timed write ``(at, 0, 0, run + i)``, where ``run`` is the bytes of
the writing run's position and handler and ``i`` its count of such calls; an ordinary write
``(t, ph, o, sub + handler + i)`` of its run; a scheduled event ``(at, 1, 0, event + (0,
seq))`` (:func:`scheduled_sub`). Bytes compare as the tuples they encode. Payloads that are
not plain numbers travel pickled, in memory only (never in a file).
"""

from __future__ import annotations

import pickle
import struct
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from .._codec import MISSING, encode_key
from .._program_ref import ProgramRef, key_function

__all__ = [
    "PassSpec",
    "Sends",
    "Routing",
    "order_value",
    "OUT_SCHEMA",
    "dumps",
    "out_batch",
    "out_rows",
    "probe_array",
    "packed_bytes",
    "packed_batches",
    "EMIT",
    "FINAL",
    "WRITE",
    "SCHED",
    "PROBE",
    "STAT",
    "ERROR",
    "PEND",
    "QUAR",
    "CARRY",
    "FWD",
    "HIST",
    "TAG_STATE",
    "TAG_PROBE",
    "TAG_EVENT",
    "TAG_WRITE",
    "TAG_SCHED",
    "TAG_VERS",
    "TAG_MANY",
    "VERS",
    "SNAP",
    "position_bytes",
    "scheduled_sub",
    "carry_dest",
    "carry_parts",
    "NOWHERE",
    "for_driver",
    "restored_sub",
]

EMIT, FINAL, WRITE, SCHED, PROBE, STAT, ERROR, PEND, QUAR, CARRY, FWD, HIST, VERS, SNAP = range(
    1, 15
)
TAG_PROBE, TAG_EVENT, TAG_WRITE, TAG_SCHED, TAG_STATE, TAG_VERS = range(6)
PH_TIMED, PH_SCHED, PH_LOG = 0, 1, 2
BLOB_ROWS = 50_000
#: The position of a row that has none: what goes to the driver (results, statistics, errors).
NOWHERE = (0, 0, 0, b"")
BATCH_ROWS = 65_536
SIGN = 1 << 63
RUN_HEAD = struct.Struct(">QBQ")
U32 = struct.Struct(">I")
U32x2 = struct.Struct(">II")


def restored_sub(number: int) -> bytes:
    """The ``sub`` of a timed write or scheduled event restored from a committed state, its
    serial ``number`` given: before every run's (time ``-SIGN``, lsn ``-SIGN``: no real run),
    and the same whether the driver carries it to a pass (``passes._carry``) or a task
    restores it from its share (``passes._boundaries.made_bytes``). Two holders of one state
    report the same write at the same position, so the commit counts it once and orders it
    alike across states."""
    return RUN_HEAD.pack(0, PH_LOG, 0) + number.to_bytes(8, "big")


#: The start of a run's ``sub`` after every write of the run (``U32x2(handler, count)``):
#: an event scheduled for the time of the log event that schedules it runs after that
#: event, before the next log event (the serial engine's order), so its position is
#: the event's, then this, then the scheduling handler and count.
AFTER_RUN = b"\xff" * 4


def for_driver(kind: int, blob: bytes, epoch: int = -1) -> tuple:
    """A row of ``kind`` for the driver, not for a pass (``EMIT``, ``FINAL``, ``STAT``...):
    of ``epoch`` (-1: of the whole replay), with no partition value and no position."""
    return (kind, epoch, None, NOWHERE, blob)


def scheduled_sub(head: bytes, seq: int) -> bytes:
    """The end of a scheduled event's position: ``head``, the bytes of the position of the
    event whose run scheduled it, then its ``seq`` (its number among the events its root
    event scheduled). Not the handler and its count of calls: ``seq`` counts across the
    root's runs in the order they schedule, on every pass alike (one stage schedules, and
    a window run natively takes the numbers its expansion would), so the closes of a window
    run natively sort among those of its expansion run elsewhere as serially."""
    return head + U32x2.pack(0, seq)


def position_bytes(pos: tuple) -> bytes:
    """A position as bytes that compare as the position does (a run's bytes extend them)."""
    t, ph, o, sub = pos
    return RUN_HEAD.pack(t + SIGN, ph, o + SIGN) + sub


#: A ``CARRY`` row's tag for a batch: many entries of one task and epoch in one blob, each
#: ``(tag, position, value)`` with its value unpickled (one pickle for all of them).
TAG_MANY = 7


def carry_dest(tag: int, epoch: int = 0) -> int:
    """A ``CARRY`` row's ``_rs_dest``: the row's tag, and the epoch whose end it lies beyond
    (a replay run as one pass over the log reports every epoch's end, ``passes._boundaries``)."""
    return epoch << 3 | tag


def carry_parts(dest: int) -> tuple[int, int]:
    """The tag and the epoch of a ``CARRY`` row's ``_rs_dest`` (see :func:`carry_dest`)."""
    return dest & 7, dest >> 3


def out_schema(slots: int) -> pa.Schema:
    fields = [
        ("_rs_kind", pa.int8()),
        ("_rs_dest", pa.int32()),
        ("_rs_pk", pa.string()),
        ("_rs_t", pa.int64()),
        ("_rs_ph", pa.int8()),
        ("_rs_o", pa.int64()),
        ("_rs_sub", pa.binary()),
        ("_rs_b", pa.binary()),
        ("_rs_n", pa.int64()),
        ("_rs_x", pa.float64()),
    ]
    for s in range(slots):
        fields += [(f"_rs_ql{s}", pa.int64()), (f"_rs_qd{s}", pa.float64())]
        fields += [(f"_rs_qb{s}", pa.binary())]
    return pa.schema(fields)


def OUT_SCHEMA(slots: int) -> pa.Schema:  # noqa: N802 - reads as the constant it stands for
    """The output schema of every pass of a plan with ``slots`` probes."""
    return out_schema(slots)


@dataclass(frozen=True)
class Sends:
    """What a pass sends later passes besides rows of ``OUT_SCHEMA``: its events forwarded,
    the values zipped passes read, the events of passes partitioned by a key it looks up."""

    # Passes that forward events (see ``_plain``): the output schema, wider than OUT_SCHEMA
    # by the events' columns; None when probe values travel as rows of their own.
    wide: pa.Schema | None = None
    forward: bool = False  # whether later passes take their events from this one
    # Zipped passes (``passes._zipped``): the later passes it packs values for, (pass, partition
    # column, kinds), and each zipped pass's partition columns; where driver-arranged passes'
    # tasks write those values (files, not rows: ``passes._local_arrangement``).
    zip_to: tuple = ()
    zip_by: dict = field(default_factory=dict)
    values_dir: str | None = None
    # Later passes partitioned by a key read from a state held here (``passes._lookups``): per
    # such pass, the probe slots that give the key, the state, its partition values and kinds;
    # and where their events go as files (from a pass the driver arranged).
    lookups: tuple = ()
    lookups_dir: str | None = None
    # Close passes whose narrow rows it writes to files (``passes._narrow_files``): pass ->
    # where (a ``NarrowTarget``).
    narrow: dict = field(default_factory=dict)


@dataclass(frozen=True)
class PassSpec:
    """What a task of one pass needs (it travels to the workers pickled)."""

    program: ProgramRef
    index: int
    columns: tuple[str, ...]
    pickled_columns: frozenset[str]
    handlers: tuple[int, ...]
    homes: tuple[str, ...]
    blind: dict[str, tuple[int, ...]]  # state written here -> the passes that hold it
    feeds: dict[str, tuple[int, ...]]  # state held here -> passes that fold it too
    finals: tuple[str, ...]  # states whose final values this pass reports
    home_partition: dict[int, str]  # pass -> partition expression (or ORDER / SINGLE)
    kind_passes: dict[str, tuple[int, ...]]
    serves: tuple[
        tuple[int, str, str, int, tuple[str, ...], int], ...
    ]  # slot, state, key, h, kinds, reader
    consumes: tuple[tuple[int, str, str, int], ...]  # slot, state, key, handler
    slots: int
    order_key: str
    single_key: str
    max_flush: int
    on_error: str  # stop, skip or quarantine
    plain: bool  # handlers over log events and nothing else: the serial engine's own loop
    # Where its input comes from (``passes._sources``): the log's events, those forwarded by
    # earlier passes, driver-arranged files... A task reads it with ``_sources.task_input``.
    source: Any
    receives_writes: bool  # whether writes or scheduled events come from earlier passes
    last_ts: int  # the log's last time: timed writes after it apply only before a later event
    # Checkpointed replays run as one pass over the log (``passes._boundaries``): the positions
    # (ts, 2, lsn) of every epoch's last event but the last epoch's, in order.
    bounds: tuple = ()
    sends: Sends = field(default_factory=Sends)  # what it sends on besides its rows
    ships_events: bool = False  # whether it schedules events for later passes (plain passes)
    closes: tuple = ()  # closing windows whose closes it runs itself (plain: ``_own_closes``)
    # Closing windows keyed otherwise than their adding stage (``passes._narrow``): those
    # whose adds this pass sends as narrow rows (window -> pass), or runs from them.
    narrow_to: dict = field(default_factory=dict)
    narrow: tuple = ()
    closes_once: frozenset = frozenset()  # window closes sent once (``passes._window_shapes``)
    folds: frozenset = frozenset()  # window counts whose adds are sent summed (same)
    # Passes partitioned by an element of their states' keys: pass -> {state: position of
    # the element in its keys} (``passes._plan.Pass.elements``), where writes of them go.
    home_elements: dict = field(default_factory=dict)
    history: tuple = ()  # the run's history probes its tasks record (``_history``)
    # Broadcast reads (``passes._plan``, ``passes._copies``): the states each partition of this pass holds
    # a copy of; for a fold, the passes it sends its state's versions to, and per such pass
    # one partition value per partition, and where its ranges start when it has ranges.
    copies: tuple = ()
    versions_to: tuple = ()
    spread: dict = field(default_factory=dict)
    ranges: dict = field(default_factory=dict)  # reading passes split into ranges of the log
    outputs: Any = None  # where it writes large output tables (``passes._output_files``)

    @property
    def receives(self) -> bool:
        """Whether its rows come with positions (earlier passes send it probe values, writes,
        events, or a start state comes as rows), not as log events only: its source's."""
        return self.source.receives


def dumps(value: Any) -> bytes:
    """Pickle for the trip to another task; functions of the program travel by value."""
    try:
        return pickle.dumps(value, protocol=5)
    except Exception:  # noqa: BLE001 - a lambda or a local function: cloudpickle takes it
        from pyspark import cloudpickle

        return cloudpickle.dumps(value, protocol=5)


def order_value(root: int) -> str:
    """Where a scheduled event goes in a pass by log order: with its root event, whose
    partition value there is this (``passes._setup.prepare``), so that they spread as it does."""
    return f"i{root};"


class Routing:
    """Partition values for rows sent to other passes: of a state key, and of an event in the
    pass it goes to. Needs ``spec``, ``program``, ``out``, ``pk_cache`` and ``home_keys``."""

    def _pk(self, key: Any) -> str:
        """``encode_key(key)``, remembered: the same keys come back again and again."""
        cache = self.pk_cache
        try:
            return cache[key]
        except KeyError:
            pass
        except TypeError:  # an unhashable key cannot be a state key anyway
            return encode_key(key)
        if len(cache) > 1_000_000:
            cache.clear()
        pk = cache[key] = encode_key(key)
        return pk

    def write_rows(
        self, key: Any, position: tuple, payload: bytes, homes: tuple, state: str = ""
    ) -> None:
        """Rows of one write of ``state`` for the passes ``homes``, each to the partition of
        ``key`` there (of its element, in a pass partitioned by one: ``home_elements``)."""
        spec = self.spec
        for home in homes:
            if spec.home_partition[home] == spec.single_key:
                pk = "N"
            else:
                i = spec.home_elements.get(home, {}).get(state)
                if i is not None and type(key) is tuple and len(key) > i:
                    pk = self._pk(key[i])
                else:
                    pk = self._pk(key)
            self.out.append((WRITE, home, pk, position, payload))

    def route(self, target: int, event: Any) -> str:
        partition = self.spec.home_partition[target]
        if partition == self.spec.single_key:
            return "N"
        if partition == self.spec.order_key:
            return order_value(event[0])
        fn = self.home_keys.get(target)
        if fn is None:
            fn = self.home_keys[target] = key_function(partition, self.program)
        return self._pk(fn(event))


def out_batch(rt: Any, schema: pa.Schema, slots: int) -> pa.RecordBatch:
    rows = rt.out
    rt.out = []
    n = len(rows)
    if n:
        # Lists (pyarrow converts a list a hundred times faster than a tuple), one
        # comprehension per column (faster than transposing with zip(*rows)).
        kind = [r[0] for r in rows]
        dest = [r[1] for r in rows]
        pk = [r[2] for r in rows]
        positions = [r[3] for r in rows]
        t = [p[0] for p in positions]
        ph = [p[1] for p in positions]
        o = [p[2] for p in positions]
        sub = [p[3] for p in positions]
        if PROBE in kind:
            b = [r[4] if r[0] != PROBE else None for r in rows]
        else:
            b = [r[4] for r in rows]
    else:
        kind = dest = pk = t = ph = o = sub = b = []
    arrays = [
        pa.array(kind, pa.int8()),
        pa.array(dest, pa.int32()),
        pa.array(pk, pa.string()),
        pa.array(t, pa.int64()),
        pa.array(ph, pa.int8()),
        pa.array(o, pa.int64()),
        pa.array(sub, pa.binary()),
        pa.array(b, pa.binary()),
        pa.nulls(n, pa.int64()),
        pa.nulls(n, pa.float64()),
    ]
    for s in range(slots):
        ql: list = [None] * n
        qd: list = [None] * n
        qb: list = [None] * n
        for i, r in enumerate(rows):
            if r[0] != PROBE or s not in r[4]:
                continue
            v = r[4][s]
            tv = type(v)
            if tv is int and -SIGN <= v < SIGN:
                ql[i] = v
            elif tv is float:
                qd[i] = v
            elif v is not MISSING:
                qb[i] = dumps(v)
        arrays += [pa.array(ql, pa.int64()), pa.array(qd, pa.float64()), pa.array(qb, pa.binary())]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def out_rows(rows: list, spec: PassSpec) -> pa.RecordBatch:
    holder = type("Rows", (), {})()
    holder.out = rows
    batch = out_batch(holder, out_schema(spec.slots), spec.slots)
    wide = spec.sends.wide
    if wide is None:
        return batch
    # Forwarding passes share one wider schema: the event columns are null on these rows.
    n = batch.num_rows
    arrays = [
        batch.column(f.name) if f.name in batch.schema.names else pa.nulls(n, f.type) for f in wide
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=wide)


_PROBE = {"l": pa.int64(), "d": pa.float64(), "b": pa.binary()}


def probe_array(which: str, values: list) -> pa.Array:
    """One of a slot's three probe columns: ``l`` 64-bit ints, ``d`` floats, ``b`` the rest
    pickled; all three null where there is no value."""
    kinds = set(map(type, values))
    if kinds == {float}:  # the common cases, without a Python step per value
        return (
            pa.array(values, pa.float64()) if which == "d" else pa.nulls(len(values), _PROBE[which])
        )
    if kinds == {int}:
        try:
            column = pa.array(values, pa.int64())  # raises beyond 64 bits: those are pickled
        except (OverflowError, pa.ArrowInvalid):
            pass
        else:
            return column if which == "l" else pa.nulls(len(values), _PROBE[which])
    if which == "l":
        return pa.array(
            [v if type(v) is int and -SIGN <= v < SIGN else None for v in values], pa.int64()
        )
    if which == "d":
        return pa.array([v if type(v) is float else None for v in values], pa.float64())
    return pa.array(
        [
            None
            if v is MISSING or type(v) is float or (type(v) is int and -SIGN <= v < SIGN)
            else dumps(v)
            for v in values
        ],
        pa.binary(),
    )


def packed_bytes(batches: list[pa.RecordBatch]) -> bytes:
    """Record batches of one schema as Arrow IPC stream bytes: one packed chunk (a kept
    arrangement's events, a zipped pass's values) in a Spark row."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batches[0].schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def packed_batches(chunk: Any) -> list[pa.RecordBatch]:
    """The record batches of a chunk :func:`packed_bytes` made (an Arrow binary scalar)."""
    return pa.ipc.open_stream(chunk.as_buffer()).read_all().to_batches()
