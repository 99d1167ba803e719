"""One pass in one Spark task: a stage's handlers over one partition, in serial order.

The task gets its partition's rows sorted by position (``_rs_t``, ``_rs_ph``, ``_rs_o``,
``_rs_sub``, ``_rs_tag``) and runs the program's own compiled handlers over them, as the serial
engine does, with three kinds of rows besides events (see ``_passes``): probe values (tag 0,
just before their event), writes into a state held here (tag 2) and scheduled events (tag 3).
Its own timed writes and scheduled events wait in one heap, keyed by the same positions, so
that they interleave with the incoming rows exactly as in a serial replay.

A checkpointed replay runs the passes epoch by epoch (``_pass_epochs``): a task then also gets
the state it starts from (tag 4, before everything), and at the epoch's end it hands back, as
``CARRY`` rows, whatever lies beyond the epoch's last event: its timed writes and scheduled
events still waiting, and the rows from earlier passes that come after that event.

A position is ``(t, phase, o, sub)``: a log event is ``(ts, 2, row, b"")``; a scheduled event
``(at, 1, 0, run + i)`` and a timed write ``(at, 0, 0, run + i)``, where ``run`` is the bytes
of the scheduling run's position and handler and ``i`` its count of such calls; an ordinary
write ``(t, ph, o, sub + handler + i)`` of its run. Bytes compare as the tuples they encode.
"""

from __future__ import annotations

import functools
import heapq
import operator
import pickle
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from ...compiler.compile import compile_program
from ...model.program import Program
from ...runtime import (
    JOURNAL_ABSENT,
    RESERVED_FIELDS,
    ScheduledEvent,
    TimeTravelError,
    apply_write,
    quarantine_row,
)
from .._gc import collector_paused
from ._codec import MISSING, encode_key
from ._faults import inject_fault
from ._program_ref import ProgramRef, event_type, key_function, load_program
from ._program_ref import column_values as _column_values

__all__ = [
    "PassSpec",
    "PassTask",
    "OUT_SCHEMA",
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
    "TAG_STATE",
    "TAG_PROBE",
    "TAG_EVENT",
    "TAG_WRITE",
    "TAG_SCHED",
]

EMIT, FINAL, WRITE, SCHED, PROBE, STAT, ERROR, PEND, QUAR, CARRY, FWD = range(1, 12)
TAG_PROBE, TAG_EVENT, TAG_WRITE, TAG_SCHED, TAG_STATE = range(5)
_PH_TIMED, _PH_SCHED, _PH_LOG = 0, 1, 2
_BLOB_ROWS = 50_000
_BATCH_ROWS = 65_536
_SIGN = 1 << 63
_RUN_HEAD = struct.Struct(">QBQ")
_U32 = struct.Struct(">I")
_U32x2 = struct.Struct(">II")


def _q(t: int) -> bytes:
    return struct.pack(">Q", (t + _SIGN) & 0xFFFFFFFFFFFFFFFF)


def run_bytes(pos: tuple, handler: int) -> bytes:
    """The bytes of a run: its event's position and the handler's number."""
    t, ph, o, sub = pos
    return _q(t) + bytes((ph,)) + _q(o) + sub + struct.pack(">I", handler)


def _out_schema(slots: int) -> pa.Schema:
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
    return _out_schema(slots)


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
    receives_writes: bool  # whether writes or scheduled events come from earlier passes
    receives: bool  # whether earlier passes send this one rows (probe values, writes, events)
    last_ts: int  # the log's last time: timed writes after it apply only before a later event
    # Checkpointed replays: the position (ts, 2, lsn) of the epoch's last event, beyond which
    # everything is carried to the next epoch (None: the last epoch, run to the log's end).
    epoch_end: tuple | None = None
    # Passes that forward events (see ``_plain``): the output schema, wider than OUT_SCHEMA
    # by the events' columns; None when probe values travel as rows of their own.
    wide: pa.Schema | None = None
    forward: bool = False  # whether later passes take their events from this one
    ships_events: bool = False  # whether it schedules events for later passes (plain passes)


_BINOPS = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
    "//": operator.floordiv,
    "%": operator.mod,
    "**": operator.pow,
    "|": operator.or_,
    "&": operator.and_,
    "^": operator.xor,
    "<<": operator.lshift,
    ">>": operator.rshift,
    "@": operator.matmul,
}


class _Delta:
    """``old <op> operand`` for a key whose old value lives in another pass."""

    __slots__ = ("op", "operand")

    def __init__(self, op: str, operand: Any):
        self.op = op
        self.operand = operand


class _Hole:
    """The unknown old value of a blind write: arithmetic on it makes a :class:`_Delta`."""

    __slots__ = ()


def _binop(symbol: str):
    def method(self: _Hole, other: Any) -> _Delta:
        return _Delta(symbol, other)

    return method


for _symbol, _name in [
    ("+", "add"),
    ("-", "sub"),
    ("*", "mul"),
    ("/", "truediv"),
    ("//", "floordiv"),
    ("%", "mod"),
    ("**", "pow"),
    ("|", "or"),
    ("&", "and"),
    ("^", "xor"),
    ("<<", "lshift"),
    (">>", "rshift"),
    ("@", "matmul"),
]:
    setattr(_Hole, f"__{_name}__", _binop(_symbol))
_HOLE = _Hole()


class JournalStore(dict):
    """A state held here, under ``on_error`` skip or quarantine: every change is journaled
    (store, key, old value) so that a handler run that raises can be undone."""

    def __init__(self, rt: _Runtime, state: str):
        super().__init__()
        self.rt = rt
        self.state = state

    def __setitem__(self, key: Any, value: Any) -> None:
        self.rt.journal.append((self, key, dict.get(self, key, JOURNAL_ABSENT)))
        dict.__setitem__(self, key, value)

    def pop(self, key: Any, *default: Any) -> Any:
        self.rt.journal.append((self, key, dict.get(self, key, JOURNAL_ABSENT)))
        return dict.pop(self, key, *default)

    def __delitem__(self, key: Any) -> None:
        self.pop(key)


class RecordingStore(dict):
    """A state held here that later passes also fold: every change is also sent to them."""

    def __init__(self, rt: _Runtime, state: str):
        super().__init__()
        self.rt = rt
        self.state = state

    def __setitem__(self, key: Any, value: Any) -> None:
        if self.rt.journal is not None:
            self.rt.journal.append((self, key, dict.get(self, key, JOURNAL_ABSENT)))
        dict.__setitem__(self, key, value)
        self.rt.ship(self.state, key, ("set", value), None, self.rt.feeds[self.state])

    def pop(self, key: Any, *default: Any) -> Any:
        if self.rt.journal is not None:
            self.rt.journal.append((self, key, dict.get(self, key, JOURNAL_ABSENT)))
        self.rt.ship(self.state, key, ("del",), None, self.rt.feeds[self.state])
        return dict.pop(self, key, *default)

    def __delitem__(self, key: Any) -> None:
        self.pop(key)


class BlindStore(dict):
    """A state written here but held by a later pass: every write becomes a row for it."""

    def __init__(self, rt: _Runtime, state: str):
        super().__init__()
        self.rt = rt
        self.state = state

    def get(self, key: Any, default: Any = None) -> Any:
        return _HOLE

    def __setitem__(self, key: Any, value: Any) -> None:
        targets = self.rt.spec.blind[self.state]
        if type(value) is _Delta:
            self.rt.ship(self.state, key, ("bin", value.op, value.operand), None, targets)
        else:
            self.rt.ship(self.state, key, ("set", value), None, targets)

    def pop(self, key: Any, *default: Any) -> None:
        self.rt.ship(self.state, key, ("del",), None, self.rt.spec.blind[self.state])

    def __delitem__(self, key: Any) -> None:
        self.pop(key)

    def __contains__(self, key: Any) -> bool:
        raise RuntimeError(f"state {self.state!r} is read where the plan said it is only written")


def dumps(value: Any) -> bytes:
    """Pickle for the trip to another task; functions of the program travel by value."""
    try:
        return pickle.dumps(value, protocol=5)
    except Exception:  # noqa: BLE001 - a lambda or a local function: cloudpickle takes it
        from pyspark import cloudpickle

        return cloudpickle.dumps(value, protocol=5)


def apply_op(d: dict, default: Any, key: Any, op: tuple, raw: bool = False) -> None:
    """Apply a write ``op`` to ``key`` of store ``d``; ``raw``: without sending it on (it
    came from another pass, which sent it to every pass that folds it)."""
    what = op[0]
    if what == "del":
        (dict.pop if raw else type(d).pop)(d, key, None)
        return
    if what == "set":
        value = op[1]
    elif what == "add":
        value = d.get(key, default) + op[1]
    elif what == "merge":
        value = op[1](d.get(key, default))
    else:
        value = _BINOPS[op[1]](d.get(key, default), op[2])
    if raw:
        dict.__setitem__(d, key, value)
    else:
        d[key] = value


class _Runtime:
    """What compiled handlers call (write, emit, schedule), with serial positions."""

    def __init__(self, spec: PassSpec, program: Program):
        self.spec = spec
        self.program = program
        self.heap: list = []  # (position, n, what, payload)
        self.n = 0
        self.event: Any = None
        self.pos: tuple = (0, 0, 0, b"")
        self.hidx = 0
        self.handler = ""
        self.seq = 0
        self.calls = 0  # timed writes, schedules and shipped writes of the current run
        self.rows: list = []  # emitted rows
        self.out: list[tuple] = []  # rows for other passes
        self.per_root: dict[int, int] = {}
        self.defaults: dict[str, Any] = {}
        self.home_keys: dict[int, Any] = {}
        self.scheduled = 0
        self.pending_sched = 0  # scheduled events waiting in the heap
        self.last_at = None  # the latest time an event was scheduled for
        self.store_names: dict[int, str] = {}
        self.feeds = spec.feeds
        self.journal: list | None = [] if spec.on_error != "stop" else None
        self.quarantined: list = []
        self.write_pos: tuple | None = None  # the position of a timed write being applied
        self.rb: bytes | None = None  # the current run's bytes, once made
        self.pk_cache: dict = {}

    def guarded(self, fn: Any, ev: Any) -> None:
        """Run one handler; when it raises, undo everything the run did and record it."""
        journal = self.journal
        journal.clear()
        marks = (len(self.rows), len(self.out), self.n, self.scheduled, self.last_at)
        root = ev[0]
        made = self.per_root.get(root)
        try:
            fn(ev)
        except Exception as exc:  # noqa: BLE001 - the run is rolled back and recorded
            while journal:
                store, key, old = journal.pop()
                if old is JOURNAL_ABSENT:
                    dict.pop(store, key, None)
                else:
                    dict.__setitem__(store, key, old)
            rows, out, n, self.scheduled, self.last_at = marks
            del self.rows[rows:]
            del self.out[out:]
            if self.n > n:
                kept = [entry for entry in self.heap if entry[1] <= n]
                heapq.heapify(kept)
                self.heap[:] = kept
                self.pending_sched = sum(1 for entry in kept if entry[2] == 1)
                self.n = n
            if made is None:
                self.per_root.pop(root, None)
            else:
                self.per_root[root] = made
            row = quarantine_row(
                filename=self.program.filename,
                handler=self.handler,
                event=ev,
                seq=self.seq,
                columns=self.spec.columns,
                exc=exc,
            )
            self.quarantined.append((self.pos, self.hidx, row))

    def _next(self) -> int:
        self.calls += 1
        return self.calls

    def _run_bytes(self) -> bytes:
        """The bytes of the current run (made once per run, when first needed)."""
        rb = self.rb
        if rb is None:
            t, ph, o, sub = self.pos
            rb = self.rb = _RUN_HEAD.pack(t + _SIGN, ph, o + _SIGN) + sub + _U32.pack(self.hidx)
        return rb

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

    # -- called by compiled handlers -------------------------------------------------------

    def write(self, d: dict, default: Any, op: str, key: Any, arg: Any, at: int | None) -> None:
        now = self.event[1]
        if op == "add":
            shipped = ("add", arg)
        elif op == "set":
            shipped = ("set", arg)
        elif op == "merge":
            shipped = ("merge", arg)
        else:
            shipped = ("del",)
        if at is None or at == now:
            if type(d) is BlindStore:
                self.ship(d.state, key, shipped, None, self.spec.blind[d.state])
            else:
                apply_op(d, default, key, shipped)
            return
        if at < now:
            raise TimeTravelError(f"write at {at} is earlier than the event's time {now}")
        if type(d) is BlindStore:
            self.ship(d.state, key, shipped, at, self.spec.blind[d.state])
            return
        self.calls += 1
        position = (at, _PH_TIMED, 0, self._run_bytes() + _U32.pack(self.calls))
        self.n += 1
        entry = (d, default, key, shipped, self.store_names[id(d)], False)
        heapq.heappush(self.heap, (position, self.n, 0, entry))

    def emit(self, table: str, **fields: Any) -> None:
        ev = self.event
        self.rows.append((table, ev[0], ev[1], self.handler, self.seq, fields, self.pos, self.hidx))

    def schedule(self, kind: str, *, at: int, **fields: Any) -> None:
        ev = self.event
        if at < ev[1]:
            raise TimeTravelError(f"schedule at {at} is earlier than the event's time {ev[1]}")
        if fields.keys() & RESERVED_FIELDS:
            clash = RESERVED_FIELDS & set(fields)
            raise ValueError(f"scheduled event fields may not be named {sorted(clash)}")
        root = ev[0]
        seq = self.per_root[root] = self.per_root.get(root, 0) + 1
        self.scheduled += 1
        if self.last_at is None or at > self.last_at:
            self.last_at = at
        event = ScheduledEvent(kind, at, root, seq, fields)
        self.calls += 1
        position = (at, _PH_SCHED, 0, self._run_bytes() + _U32.pack(self.calls))
        for target in self.spec.kind_passes.get(kind, ()):
            if target == self.spec.index:
                self.n += 1
                self.pending_sched += 1
                heapq.heappush(self.heap, (position, self.n, 1, event))
            else:
                payload = dumps((kind, fields, root, seq))
                self.out.append((SCHED, target, self.route(target, event), position, payload))

    # -- rows for later passes ---------------------------------------------------------------

    def ship(self, state: str, key: Any, op: tuple, at: int | None, targets: tuple) -> None:
        """A write for the passes that hold ``state`` (``targets``), at its position."""
        if self.write_pos is not None:
            position = self.write_pos
        else:
            self.calls += 1
            if at is None:
                t, ph, o, sub = self.pos
                position = (t, ph, o, sub + _U32x2.pack(self.hidx, self.calls))
            else:
                position = (at, _PH_TIMED, 0, self._run_bytes() + _U32.pack(self.calls))
        payload = dumps((state, key, op))
        for home in targets:
            pk = "N" if self.spec.home_partition[home] == self.spec.single_key else self._pk(key)
            self.out.append((WRITE, home, pk, position, payload))

    def route(self, target: int, event: Any) -> str:
        partition = self.spec.home_partition[target]
        if partition in (self.spec.single_key, self.spec.order_key):
            return "N"
        fn = self.home_keys.get(target)
        if fn is None:
            fn = self.home_keys[target] = key_function(partition, self.program)
        return self._pk(fn(event))


class PassTask:
    """The ``mapInArrow`` function of one pass (see the module docstring)."""

    def __init__(self, spec: PassSpec):
        self.spec = spec

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        with collector_paused():  # see restream_kit.engines._gc
            yield from self._run(batches)

    def _run(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        spec = self.spec
        inject_fault(f"pass{spec.index}")
        started = time.perf_counter()
        program = load_program(spec.program)
        if spec.plain:
            yield from _plain(spec, program, batches, started)
            return
        rt = _Runtime(spec, program)
        stores: dict[str, dict] = {}
        for name in program.states:
            if name in spec.blind:
                stores[name] = BlindStore(rt, name)
            elif name in spec.feeds:
                stores[name] = RecordingStore(rt, name)
            elif rt.journal is not None:
                stores[name] = JournalStore(rt, name)
            else:
                stores[name] = {}
        compiled = compile_program(program, rt, stores)
        rt.store_names = {id(d): name for name, d in stores.items()}
        fns = compiled.handlers
        rt.defaults = {name: decl.default for name, decl in program.states.items()}
        mine = set(spec.handlers)
        # Per kind: what to do at each handler number, in declaration order.
        actions: dict[str, list] = {}
        reader_slots: dict[int, list] = {}
        for slot, state, key, h in spec.consumes:
            reader_slots.setdefault(h, []).append((slot, state, key_function(key, program)))
        for h, handler in enumerate(program.handlers):
            if h in mine:
                for kind in handler.kinds:
                    actions.setdefault(kind, []).append((h, 0, fns[h][1], reader_slots.get(h)))
        serve_fns = {}
        for slot, state, key, h, kinds, reader in spec.serves:
            fn = serve_fns.setdefault(key, key_function(key, program))
            for kind in kinds:
                actions.setdefault(kind, []).append((h, 1, (slot, state, fn, reader), None))
        for acts in actions.values():
            acts.sort(key=lambda a: a[0])
        serve_slots = {}
        for slot, _state, _key, _h, _kinds, reader in spec.serves:
            serve_slots.setdefault(reader, []).append(slot)
        make = event_type(spec.columns)
        slots = spec.slots
        last_ts = spec.last_ts
        epoch_end = spec.epoch_end
        schema = _out_schema(slots)
        probe_cols = {r: f"_rs_pk{r}" for r in serve_slots}
        events = 0
        probe_values: dict[int, Any] = {}

        pks_now: dict[int, list] = {}  # the batch's partition values of reading passes
        runners = {
            kind: _kind_runner(kind, acts, program, rt, stores, probe_values, pks_now)
            for kind, acts in actions.items()
        }

        def run_event(ev: Any, pos: tuple, i: int | None, writes: Any) -> None:
            """Run ``ev``'s handlers and probes in declaration order; ``writes`` (from earlier
            passes' runs of the same event) go in before the first action after their run."""
            runner = runners.get(ev[2])
            rt.event = ev
            rt.pos = pos
            rt.seq = ev.seq if pos[1] == _PH_SCHED else 0
            if runner is not None:
                runner(ev, pos, i, writes)
            elif writes:
                for _sub, state, key, op in writes:
                    apply_op(stores[state], rt.defaults[state], key, op, True)
            probe_values.clear()

        def settle(before: tuple) -> None:
            """Run this task's own timed writes and scheduled events that come first."""
            heap = rt.heap
            while heap and heap[0][0] < before:
                pos, _n, what, payload = heapq.heappop(heap)
                if what == 0:
                    d, default, key, op, _state, incoming = payload
                    if incoming:
                        apply_op(d, default, key, op, True)
                    else:
                        rt.write_pos = pos
                        apply_op(d, default, key, op)
                        rt.write_pos = None
                else:
                    rt.pending_sched -= 1
                    run_event(payload, pos, None, [])

        # An event waits until the writes of its own runs in earlier passes, which sort
        # right after it, have come in: [event, position, partition values, writes].
        waiting: list = []

        def run_waiting() -> None:
            ev, pos, i, writes = waiting
            waiting.clear()
            run_event(ev, pos, i, writes)

        try:
            for batch in batches:
                n = batch.num_rows
                if not n:
                    continue
                if spec.receives:
                    ts = batch.column("_rs_t").to_pylist()
                    ph = batch.column("_rs_ph").to_pylist()
                    order = batch.column("_rs_o").to_pylist()
                    sub = batch.column("_rs_sub").to_pylist()
                    tags = batch.column("_rs_tag").to_pylist()
                else:  # log events only, with no position columns but their own
                    ts = batch.column("ts").to_pylist()
                    order = batch.column("lsn").to_pylist()
                    tags = (TAG_EVENT,)
                rows: list = []
                if TAG_EVENT in tags:
                    cols = [
                        _column_values(batch, c, c in spec.pickled_columns) for c in spec.columns
                    ]
                    rows = list(zip(*cols))
                    for r, c in probe_cols.items():
                        pks_now[r] = batch.column(c).to_pylist()
                if not spec.receives:
                    # Only log events come in: no waiting for writes, no probe values.
                    heap = rt.heap
                    for i in range(n):
                        ev = tuple.__new__(make, rows[i])
                        pos = (ts[i], _PH_LOG, order[i], b"")
                        if heap and heap[0][0] < pos:
                            settle(pos)
                        runner = runners.get(ev[2])
                        if runner is not None:
                            rt.event = ev
                            rt.pos = pos
                            rt.seq = 0
                            runner(ev, pos, i, ())
                    events += n
                    if len(rt.out) >= _BATCH_ROWS:
                        yield _out_batch(rt, schema, slots)
                    continue
                payload = batch.column("_rs_b").to_pylist() if spec.receives else ()
                pks = batch.column("_rs_pk").to_pylist() if epoch_end is not None else ()
                qcols = {}
                for slot, _s, _k, _h in spec.consumes:
                    qcols[slot] = (
                        batch.column(f"_rs_ql{slot}").to_pylist(),
                        batch.column(f"_rs_qd{slot}").to_pylist(),
                        batch.column(f"_rs_qb{slot}").to_pylist(),
                    )
                for i in range(n):
                    pos = (ts[i], ph[i], order[i], sub[i] or b"")
                    tag = tags[i]
                    if epoch_end is not None and pos[:3] > epoch_end:
                        # Beyond the epoch: the next one applies it (no log event is).
                        rt.out.append((CARRY, tag, pks[i], pos, payload[i]))
                        continue
                    if tag == TAG_STATE:  # the state this epoch starts from
                        state, key, value = pickle.loads(payload[i])
                        dict.__setitem__(stores[state], key, value)
                        continue
                    if waiting:
                        wpos = waiting[1]
                        if tag == TAG_WRITE and pos[:3] == wpos[:3] and pos[3].startswith(wpos[3]):
                            state, key, op = pickle.loads(payload[i])
                            waiting[3].append((pos[3], state, key, op))
                            continue
                        run_waiting()
                    # Everything but a timed write after the log's end means an event ran at
                    # its time, so this task's own timed writes before it are due.
                    if (
                        rt.heap
                        and rt.heap[0][0] < pos
                        and (tag != TAG_WRITE or pos[0] <= last_ts or pos[1] != _PH_TIMED)
                    ):
                        settle(pos)
                    if tag == TAG_EVENT:
                        events += 1
                        ev = tuple.__new__(make, rows[i])
                        if not spec.receives_writes:  # nothing can come after it: run it now
                            run_event(ev, pos, i, ())
                            continue
                        # Its partition values now: the batch may end before it runs.
                        pk_of = {r: v[i] for r, v in pks_now.items()} if pks_now else None
                        waiting[:] = [ev, pos, pk_of, []]
                    elif tag == TAG_PROBE:
                        for slot, (ql, qd, qb) in qcols.items():
                            if ql[i] is not None:
                                probe_values[slot] = ql[i]
                            elif qd[i] is not None:
                                probe_values[slot] = qd[i]
                            elif qb[i] is not None:
                                probe_values[slot] = pickle.loads(qb[i])
                    elif tag == TAG_WRITE:
                        state, key, op = pickle.loads(payload[i])
                        if pos[1] == _PH_TIMED and pos[0] > last_ts:
                            # Applied only if an event comes after it: wait in the heap.
                            rt.n += 1
                            entry = (stores[state], rt.defaults[state], key, op, state, True)
                            heapq.heappush(rt.heap, (pos, rt.n, 0, entry))
                        else:
                            apply_op(stores[state], rt.defaults[state], key, op, True)
                    else:
                        kind, fields, root, seq, *made = pickle.loads(payload[i])
                        if made:  # carried from an earlier epoch: the root's count so far
                            rt.per_root[root] = max(rt.per_root.get(root, 0), made[0])
                        ev = ScheduledEvent(kind, pos[0], root, seq, fields)
                        waiting[:] = [ev, pos, None, []]
                if len(rt.out) >= _BATCH_ROWS:
                    yield _out_batch(rt, schema, slots)
            if waiting:
                run_waiting()
            if epoch_end is not None:
                # What is due before the epoch's last event runs here too (unless that event
                # ran here: what its own run made waits); the rest goes to the next epoch.
                if rt.pos[:3] != epoch_end:
                    settle((*epoch_end, b""))
                _carry_heap(rt)
            else:
                # After the log: timed writes up to its last time, then scheduled events,
                # each after the timed writes before it; later timed writes go to the
                # driver, which applies those due by the last event anywhere.
                settle((last_ts, _PH_LOG + 1))
                flushed = 0
                while rt.heap and rt.pending_sched:
                    flushed += 1
                    if flushed > spec.max_flush:
                        raise RuntimeError(
                            f"handlers kept scheduling events after the log ended (over "
                            f"{spec.max_flush:,}); a timer that re-arms itself forever never "
                            "lets the replay finish"
                        )
                    # One entry: a timed write (a scheduled event still follows it) or an event.
                    settle((*rt.heap[0][0][:3], rt.heap[0][0][3] + b"\x00"))
                for pos, _n, _what, (_d, _default, key, op, state, _in) in sorted(rt.heap):
                    blob = dumps((state, key, op))
                    rt.out.append((PEND, -1, None, pos, blob))
        except Exception as exc:  # noqa: BLE001 - the driver replays serially for the exact error
            rt.out.append((ERROR, -1, None, (0, 0, 0, b""), pickle.dumps(repr(exc), protocol=5)))
            yield _out_batch(rt, schema, slots)
            return
        if rt.out:
            yield _out_batch(rt, schema, slots)
        for start in range(0, len(rt.rows), _BLOB_ROWS):
            blob = dumps(rt.rows[start : start + _BLOB_ROWS])
            rt.out.append((EMIT, -1, None, (0, 0, 0, b""), blob))
        if rt.quarantined:
            rt.out.append((QUAR, -1, None, (0, 0, 0, b""), dumps(rt.quarantined)))
        for name in spec.finals:
            blob = dumps((name, dict(stores[name])))
            rt.out.append((FINAL, -1, None, (0, 0, 0, b""), blob))
        stat = (events, time.perf_counter() - started, rt.scheduled, rt.last_at)
        rt.out.append((STAT, -1, None, (0, 0, 0, b""), pickle.dumps(stat, protocol=5)))
        yield _out_batch(rt, schema, slots)


def _carry_heap(rt: _Runtime) -> None:
    """The timed writes and scheduled events still waiting at an epoch's end, as ``CARRY``
    rows for the driver (which keeps them in the checkpoint and routes them again)."""
    for pos, _n, what, payload in sorted(rt.heap, key=lambda entry: entry[:2]):
        if what == 0:
            _d, _default, key, op, state, _incoming = payload
            rt.out.append((CARRY, TAG_WRITE, None, pos, dumps((state, key, op))))
        else:
            ev = payload
            fields = {k: v for k, v in vars(ev).items() if k not in RESERVED_FIELDS}
            made = rt.per_root.get(ev.lsn, ev.seq)
            blob = dumps((ev.kind, fields, ev.lsn, ev.seq, made))
            rt.out.append((CARRY, TAG_SCHED, None, pos, blob))
    rt.heap.clear()
    rt.pending_sched = 0


def _plain(spec: PassSpec, program: Program, batches: Any, started: float) -> Iterator:
    """A pass that only runs handlers over log events (no row from or for another pass but
    probe values, no scheduled event in the whole program): the serial engine's generated
    loop, with the handler bodies inlined, over the partition. Its rows' positions are
    (ts, lsn): the pass path's ``_rs_o`` is the log's ``lsn``.

    When the passes *forward* events (``spec.wide``), probe values travel with the events
    themselves: the loop records, at the reading handler's place in declaration order, the
    value a later pass reads (``serves``), and sends each event on with those values in its
    probe columns; a reading pass gets the events with the values of earlier passes and puts
    each in its store just before the handler that reads it (``consumes``). No probe row, no
    sort by tag, no per-row join: the event carries its reads.
    """
    from ...runtime import SerialRuntime

    # A pass that writes into state later passes hold, or schedules events for them, sends
    # those as rows (``_Shipping``); the rest of the loop is the serial engine's.
    rt = _Shipping(spec, program) if spec.blind or spec.ships_events else SerialRuntime()
    names = [program.handlers[h].name for h in spec.handlers]
    consumed = sorted({slot for slot, _state, _key, _h in spec.consumes})
    # Probe columns come after the log's columns: the handlers' own indexes do not move.
    probe_columns = [f"_rs_q{c}{slot}" for slot in consumed for c in "ldb"]
    columns = (*spec.columns, *probe_columns)
    kinds = dict.fromkeys(k for h in spec.handlers for k in program.handlers[h].kinds)
    for _slot, _state, _key, _h, probe_kinds, _reader in spec.serves:
        kinds.update(dict.fromkeys(probe_kinds))
    stores: dict[str, dict] = {
        name: BlindStore(rt, name) if name in spec.blind else {} for name in program.states
    }
    hooks, extra, served = _probe_hooks(spec, program, columns, tuple(kinds), stores)
    compiled = compile_program(
        program,
        rt,
        stores,
        columns=columns,
        kind_order=tuple(kinds),
        extra_globals={"_rs_run_scheduled": lambda t: None, **extra},
        only=names,
        hooks=hooks,
    )
    run_batch = compiled.run_batch
    # Key functions of probes read the event's columns by name.
    named = compiled.needs_named_events or spec.serves or spec.consumes
    make = event_type(columns) if named else None
    events = 0
    out: list = []
    try:
        for batch in batches:
            if not batch.num_rows:
                continue
            cols = [_column_values(batch, c, c in spec.pickled_columns) for c in spec.columns]
            cols += [batch.column(c).to_pylist() for c in probe_columns]
            rows = zip(*cols)
            run_batch(
                list(map(functools.partial(tuple.__new__, make), rows)) if make else list(rows)
            )
            events += batch.num_rows
            if spec.forward:
                yield _forwarded(batch, spec.wide, served)
            if type(rt) is _Shipping and len(rt.out) >= _BATCH_ROWS:
                yield _shipped(rt, spec)
        # The serial replay applies timed writes due by the log's last event, whichever key
        # that event has: so does this partition, whose own last event may come earlier.
        rt.apply_due(spec.last_ts)
    except Exception as exc:  # noqa: BLE001 - the driver replays serially for the exact error
        out.append((ERROR, -1, None, (0, 0, 0, b""), pickle.dumps(repr(exc), protocol=5)))
        yield _out_rows(out, spec)
        return
    # Later ones apply only if an event after the log (scheduled elsewhere) comes at or after
    # their time: the driver decides, as for the other passes' (``PEND``).
    names = {id(d): name for name, d in stores.items()}
    for at, order, d, _default, op, key, arg in sorted(rt.future, key=lambda f: f[:2]):
        what = ("del",) if op == "delete" else (op, arg)
        out.append(
            (PEND, -1, None, (at, _PH_TIMED, 0, _U32.pack(order)), dumps((names[id(d)], key, what)))
        )
    index = {h.name: h.index for h in program.handlers}
    emitted = [
        (table, lsn, ts, handler, seq, fields, (ts, _PH_LOG, lsn, b""), index[handler])
        for table, rows in rt.rows.items()
        for lsn, ts, handler, seq, fields in rows
    ]
    emitted.sort(key=lambda r: (r[6], r[7]))  # stable: a run's rows keep their order
    for start in range(0, len(emitted), _BLOB_ROWS):
        out.append((EMIT, -1, None, (0, 0, 0, b""), dumps(emitted[start : start + _BLOB_ROWS])))
    for name in spec.finals:
        out.append((FINAL, -1, None, (0, 0, 0, b""), dumps((name, compiled.stores[name]))))
    made, last_at = (rt.made, rt.last_at) if type(rt) is _Shipping else (0, None)
    stat = (events, time.perf_counter() - started, made, last_at)
    out.append((STAT, -1, None, (0, 0, 0, b""), pickle.dumps(stat, protocol=5)))
    if type(rt) is _Shipping:
        out[:0] = rt.out
    yield _out_rows(out, spec)


class _Shipping:
    """The serial engine's runtime for a plain pass that sends rows on: writes into state a
    later pass holds (through :class:`BlindStore`) and events scheduled for later passes go
    out as rows at the positions the receiving passes sort by (see the module docstring),
    everything else is the serial engine's own."""

    def __init__(self, spec: PassSpec, program: Program):
        from ...runtime import SerialRuntime

        self._serial = SerialRuntime()
        self.rows = self._serial.rows
        self.future = self._serial.future
        self._order = self._serial.order
        self.scheduled = self._serial.scheduled  # stays empty: no event is scheduled here
        self.spec = spec
        self.program = program
        self.number = {h.name: h.index for h in program.handlers}
        self.event: Any = None
        self.seq = 0
        self._handler = ""
        self.hidx = 0
        self.calls = 0
        self.rb: bytes | None = None
        self.write_pos = None
        self.out: list = []
        self.per_root: dict[int, int] = {}
        self.made = 0
        self.last_at: int | None = None
        self.pk_cache: dict = {}
        self.home_keys: dict[int, Any] = {}
        self.field_keys: dict[int, Any] = {}

    # The generated loop names the handler before each run: a new run starts its count.
    @property
    def handler(self) -> str:
        return self._handler

    @handler.setter
    def handler(self, name: str) -> None:
        self._handler = name
        self.hidx = self.number[name]
        self.calls = 0
        self.rb = None

    def _run_bytes(self) -> bytes:
        rb = self.rb
        if rb is None:
            ev = self.event
            rb = self.rb = _RUN_HEAD.pack(ev[1] + _SIGN, _PH_LOG, ev[0] + _SIGN) + _U32.pack(
                self.hidx
            )
        return rb

    def write(self, d: dict, default: Any, op: str, key: Any, arg: Any, at: int | None) -> None:
        now = self.event[1]
        if type(d) is not BlindStore:  # the serial engine's write, inlined: it is hot
            if at is None or at == now:
                apply_write(d, default, op, key, arg)
            elif at < now:
                raise TimeTravelError(f"write at {at} is earlier than the event's time {now}")
            else:
                heapq.heappush(self.future, (at, next(self._order), d, default, op, key, arg))
            return
        if at is not None and at < now:
            raise TimeTravelError(f"write at {at} is earlier than the event's time {now}")
        shipped = (
            ("add", arg)
            if op == "add"
            else ("set", arg)
            if op == "set"
            else (("merge", arg) if op == "merge" else ("del",))
        )
        self.ship(d.state, key, shipped, None if at == now else at, self.spec.blind[d.state])

    def emit(self, table: str, **fields: Any) -> None:
        ev = self.event
        self.rows[table].append((ev[0], ev[1], self._handler, self.seq, fields))

    def schedule(self, kind: str, *, at: int, **fields: Any) -> None:
        ev = self.event
        if at < ev[1]:
            raise TimeTravelError(f"schedule at {at} is earlier than the event's time {ev[1]}")
        if fields.keys() & RESERVED_FIELDS:
            clash = RESERVED_FIELDS & set(fields)
            raise ValueError(f"scheduled event fields may not be named {sorted(clash)}")
        root = ev[0]
        seq = self.per_root[root] = self.per_root.get(root, 0) + 1
        self.made += 1
        if self.last_at is None or at > self.last_at:
            self.last_at = at
        self.calls += 1
        position = (at, _PH_SCHED, 0, self._run_bytes() + _U32.pack(self.calls))
        payload = dumps((kind, fields, root, seq))
        for target in self.spec.kind_passes.get(kind, ()):
            self.out.append(
                (SCHED, target, self._to(target, kind, at, root, seq, fields), position, payload)
            )

    def _to(self, target: int, kind: str, at: int, root: int, seq: int, fields: dict) -> str:
        """The partition value of a scheduled event in pass ``target``."""
        partition = self.spec.home_partition[target]
        if partition in (self.spec.single_key, self.spec.order_key):
            return "N"
        fn = self.field_keys.get(target)
        if fn is None:
            fn = self.field_keys[target] = _fields_key_function(partition, self.program)
        try:
            key = fn(fields, kind, at, root, seq)
        except _NotAField:  # an expression the fields alone cannot answer
            key = key_function(partition, self.program)(ScheduledEvent(kind, at, root, seq, fields))
        return self._pk(key)

    def apply_due(self, t: int) -> None:
        self._serial.apply_due(t)

    def ship(self, state: str, key: Any, op: tuple, at: int | None, targets: tuple) -> None:
        """A write for the passes that hold ``state`` (``targets``), at its position."""
        self.calls += 1
        if at is None:
            ev = self.event
            position = (ev[1], _PH_LOG, ev[0], _U32x2.pack(self.hidx, self.calls))
        else:
            position = (at, _PH_TIMED, 0, self._run_bytes() + _U32.pack(self.calls))
        payload = dumps((state, key, op))
        spec = self.spec
        for home in targets:
            pk = "N" if spec.home_partition[home] == spec.single_key else self._pk(key)
            self.out.append((WRITE, home, pk, position, payload))

    _pk = _Runtime._pk
    route = _Runtime.route


class _NotAField(Exception):
    """A key expression over a scheduled event that reads more than its fields."""


def _fields_key_function(expr: str, program: Program) -> Any:
    """A key expression over a scheduled event as a function of its fields, kind, time, root
    and seq, so that routing it costs no event object: ``e.key`` becomes ``f["key"]``. An
    expression that uses ``e`` otherwise raises :class:`_NotAField` when called."""
    import ast

    special = {"kind": "kind", "ts": "at", "lsn": "root", "seq": "seq"}
    tree = ast.parse(expr, mode="eval")
    plain = True

    class Fields(ast.NodeTransformer):
        def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
            if isinstance(node.value, ast.Name) and node.value.id == "e":
                if node.attr in special:
                    return ast.copy_location(ast.Name(special[node.attr], ast.Load()), node)
                sub = ast.Subscript(ast.Name("f", ast.Load()), ast.Constant(node.attr), ast.Load())
                return ast.copy_location(sub, node)
            return self.generic_visit(node)

        def visit_Name(self, node: ast.Name) -> ast.AST:
            nonlocal plain
            if node.id == "e":
                plain = False
            return node

    body = ast.fix_missing_locations(Fields().visit(tree)).body
    if not plain:

        def refuse(*_args: Any) -> Any:
            raise _NotAField(expr)

        return refuse
    fn = key_function("0", program)  # the program's namespace, for helpers the key calls
    source = f"lambda f, kind, at, root, seq: ({ast.unparse(body)})"
    return eval(compile(source, f"<key of {program.name}>", "eval"), fn.__globals__)


def _shipped(rt: _Shipping, spec: PassSpec) -> pa.RecordBatch:
    rows, rt.out = rt.out, []
    return _out_rows(rows, spec)


def _probe_hooks(
    spec: PassSpec, program: Program, columns: tuple, kinds: tuple, stores: dict
) -> tuple:
    """The loop statements that record the probe values this pass serves and put the values
    it consumes in place, what they need in the loop's namespace, and the lists the recorded
    values go to (slot -> list, one value per event of the batch, in order)."""
    from ...compiler.compile import dict_name
    from ...compiler.inline import EVENT

    hooks: list[tuple[int, str, str]] = []
    extra: dict[str, Any] = {"_rs_MISSING": MISSING, "_rs_probe": _probe}
    served: dict[int, list] = {}
    for slot, state, key, h, probe_kinds, _reader in spec.serves:
        values = served[slot] = []
        extra[f"_rs_pv{slot}"] = values.append
        extra[f"_rs_K{slot}"] = key_function(key, program)
        for kind in kinds:
            if kind in probe_kinds:
                src = f"_rs_pv{slot}(_rs_probe({dict_name(state)}, _rs_K{slot}, {EVENT}))"
                hooks.append((h, kind, src))
            else:  # every event gives every slot a value, so that the lists stay aligned
                hooks.append((len(program.handlers), kind, f"_rs_pv{slot}(_rs_MISSING)"))
    readers: dict[int, list] = {}
    for slot, state, key, h in spec.consumes:
        at = columns.index(f"_rs_ql{slot}")
        readers.setdefault(h, []).append((at, state, key_function(key, program)))
    for h, slots in readers.items():
        extra[f"_rs_fill{h}"] = _filler(slots, {state: stores[state] for _a, state, _f in slots})
        for kind in program.handlers[h].kinds:
            hooks.append((h, kind, f"_rs_fill{h}({EVENT})"))
    return hooks, extra, served


def _probe(d: dict, key_fn: Any, ev: Any) -> Any:
    """The value of ``d`` under the event's key, MISSING when it has none (or the key raises:
    the reading handler's own read raises it in its pass)."""
    try:
        return d.get(key_fn(ev), MISSING)
    except Exception:  # noqa: BLE001
        return MISSING


def _filler(slots: list, stores: dict) -> Any:
    """A function that puts an event's probe values (``slots``: [(column, state, key)]) in
    the stores its reading handler reads, which hold nothing else."""

    def fill(ev: Any) -> None:
        for d in stores.values():
            d.clear()
        for at, state, key_fn in slots:
            value = ev[at]
            if value is None:
                value = ev[at + 1]
                if value is None:
                    blob = ev[at + 2]
                    if blob is None:
                        continue  # no value: the read sees the default
                    value = pickle.loads(blob)
            try:
                stores[state][key_fn(ev)] = value
            except Exception:  # noqa: BLE001 - the handler's own read raises it
                pass

    return fill


def _forwarded(batch: pa.RecordBatch, wide: pa.Schema, served: dict[int, list]) -> Any:
    """The batch's events for later passes: their columns as they came, with the probe
    values recorded here in this pass's slots."""
    n = batch.num_rows
    names = set(batch.schema.names)
    arrays = []
    for f in wide:
        name = f.name
        if name == "_rs_kind":
            arrays.append(pa.array(np.full(n, FWD, dtype=np.int8)))
        elif name.startswith("_rs_q") and int(name[6:]) in served:
            values = served[int(name[6:])]
            arrays.append(_probe_array(name[5], values[:n]))
        elif name in names:
            col = batch.column(name)
            arrays.append(col if col.type == f.type else col.cast(f.type))
        else:
            arrays.append(pa.nulls(n, f.type))
    for values in served.values():
        del values[:n]
    return pa.RecordBatch.from_arrays(arrays, schema=wide)


def _probe_array(which: str, values: list) -> pa.Array:
    """One of a slot's three probe columns: ``l`` 64-bit ints, ``d`` floats, ``b`` the rest
    pickled; all three null where there is no value."""
    if which == "l":
        return pa.array(
            [v if type(v) is int and -_SIGN <= v < _SIGN else None for v in values], pa.int64()
        )
    if which == "d":
        return pa.array([v if type(v) is float else None for v in values], pa.float64())
    return pa.array(
        [
            None
            if v is MISSING or type(v) is float or (type(v) is int and -_SIGN <= v < _SIGN)
            else dumps(v)
            for v in values
        ],
        pa.binary(),
    )


def _out_rows(rows: list, spec: PassSpec) -> pa.RecordBatch:
    holder = type("Rows", (), {})()
    holder.out = rows
    batch = _out_batch(holder, _out_schema(spec.slots), spec.slots)
    if spec.wide is None:
        return batch
    # Forwarding passes share one wider schema: the event columns are null on these rows.
    n = batch.num_rows
    arrays = [
        batch.column(f.name) if f.name in batch.schema.names else pa.nulls(n, f.type)
        for f in spec.wide
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=spec.wide)


def _kind_runner(kind, acts, program, rt, stores, probe_values, pks_now):
    """A function running one kind's actions (handlers, probes) in declaration order.

    Generated once per task and kind, so that an event costs a call per handler and nothing
    for the cases it does not have (no probe, no incoming write).
    """
    env: dict[str, Any] = {
        "rt": rt,
        "stores": stores,
        "defaults": rt.defaults,
        "probe_values": probe_values,
        "pks_now": pks_now,
        "apply_op": apply_op,
        "MISSING": MISSING,
        "_fill": _fill,
        "PROBE": PROBE,
        "pack": struct.pack,
    }
    lines = ["def run(ev, pos, i, writes):"]
    lines.append("    if writes:")
    lines.append("        w = 0; nw = len(writes); cut = len(pos[3])")
    readers: dict[int, list] = {}
    for n, (h, what, target, slots_h) in enumerate(acts):
        lines.append("    if writes:")
        lines.append(f"        while w < nw and writes[w][0][cut:cut + 4] < M{n}:")
        lines.append("            _s, _st, _k, _op = writes[w]")
        lines.append("            apply_op(stores[_st], defaults[_st], _k, _op, True)")
        lines.append("            w += 1")
        env[f"M{n}"] = struct.pack(">I", h)
        if what == 0:
            if slots_h:
                env[f"S{n}"] = slots_h
                lines.append(f"    _fill(stores, S{n}, probe_values, ev)")
            env[f"F{n}"] = target
            env[f"N{n}"] = program.handlers[h].name
            lines.append(f"    rt.hidx = {h}; rt.handler = N{n}; rt.calls = 0; rt.rb = None")
            if rt.journal is not None:
                lines.append(f"    rt.guarded(F{n}, ev)")
            else:
                lines.append(f"    F{n}(ev)")
        else:
            slot, state, fn, reader = target
            env[f"D{n}"] = stores[state]
            env[f"K{n}"] = fn
            readers.setdefault(reader, []).append((slot, n))
            lines.append("    try:")
            lines.append(f"        v{n} = D{n}.get(K{n}(ev), MISSING)")
            lines.append("    except Exception:")
            lines.append(f"        v{n} = MISSING")
    lines.append("    if writes:")
    lines.append("        while w < nw:")
    lines.append("            _s, _st, _k, _op = writes[w]")
    lines.append("            apply_op(stores[_st], defaults[_st], _k, _op, True)")
    lines.append("            w += 1")
    for reader, items in readers.items():
        values = ", ".join(f"{slot}: v{n}" for slot, n in items)
        lines.append("    if i is None:")
        lines.append("        pk = 'N'")
        lines.append("    elif type(i) is int:")
        lines.append(f"        pk = pks_now[{reader}][i]")
        lines.append("    else:")
        lines.append(f"        pk = i[{reader}]")
        lines.append(f"    rt.out.append((PROBE, {reader}, pk, pos, {{{values}}}))")
    namespace = dict(env)
    exec(compile("\n".join(lines), f"<pass runner {kind}>", "exec"), namespace)
    return namespace["run"]


def _fill(stores: dict, slots: list, values: dict, ev: Any) -> None:
    """Put the values probed for this run where its reads of upstream state find them."""
    cleared = set()
    for slot, state, fn in slots:
        d = stores[state]
        if state not in cleared:
            d.clear()
            cleared.add(state)
        value = values.get(slot, MISSING)
        if value is not MISSING:
            try:
                d[fn(ev)] = value
            except Exception:  # noqa: BLE001 - the handler's own read raises it
                pass


def _out_batch(rt: _Runtime, schema: pa.Schema, slots: int) -> pa.RecordBatch:
    rows = rt.out
    rt.out = []
    n = len(rows)
    if n:
        # Lists, not the tuples zip makes: pyarrow converts a list a hundred times faster.
        kind, dest, pk, positions, b = map(list, zip(*rows))
        t, ph, o, sub = map(list, zip(*positions))
        if PROBE in kind:
            b = [r[4] if r[0] != PROBE else None for r in rows]
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
            if tv is int and -_SIGN <= v < _SIGN:
                ql[i] = v
            elif tv is float:
                qd[i] = v
            elif v is not MISSING:
                qb[i] = dumps(v)
        arrays += [pa.array(ql, pa.int64()), pa.array(qd, pa.float64()), pa.array(qb, pa.binary())]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
