"""A pass that runs the serial engine's inlined loop (``plain``): the fast case.

A pass whose events are log events only, and that sends on nothing but what the loop can
send, runs the serial engine's generated loop over its partition, with the handler bodies
inlined, exactly as a serial replay runs them:

- **probe values travel with the events** when the passes forward events (``spec.wide``):
  the loop records, at the reading handler's place in declaration order, the value a later
  pass reads, and sends each event on with those values in its probe columns; a reading
  pass puts each in its store just before the handler that reads it. No probe row, no sort
  by tag, no per-row join: the event carries its reads;
- **writes into a later pass's state** (through :class:`BlindStore`) and **events scheduled
  for later passes** go out as rows (:class:`_Shipping`, the serial runtime plus that).

In a checkpointed replay the loop stops at each epoch's end to report its state there
(``_boundaries``); its timed writes are then numbered by the runs that made them
(:class:`_MadeBy`), so that the driver orders every task's as the serial engine made them.
"""

from __future__ import annotations

import functools
import heapq
import pickle
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from ...compiler.compile import compile_program
from ...model.program import Program
from ..serial import RESERVED_FIELDS, ScheduledEvent, TimeTravelError, apply_write
from ._boundaries import Ends, by_epoch, future_rows, made_bytes, state_row, unhandled_rows
from ._codec import MISSING
from ._emitted import pack_emitted
from ._pass_rows import (
    BATCH_ROWS,
    ERROR,
    FINAL,
    FWD,
    PEND,
    PH_LOG,
    PH_SCHED,
    PH_TIMED,
    RUN_HEAD,
    SCHED,
    SIGN,
    STAT,
    U32,
    PassSpec,
    Routing,
    U32x2,
    dumps,
    order_value,
    out_rows,
    probe_array,
)
from ._pass_stores import BlindStore
from ._program_ref import column_values, event_type, key_function
from ._zipped import ValuePacker, unzip

__all__ = ["run_plain"]


def run_plain(spec: PassSpec, program: Program, batches: Any, started: float) -> Iterator:
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
    from ..serial import SerialRuntime

    # A pass that writes into state later passes hold, or schedules events for them, sends
    # those as rows (``_Shipping``); the rest of the loop is the serial engine's.
    rt = _Shipping(spec, program) if spec.blind or spec.ships_events else SerialRuntime()
    number = {h.name: h.index for h in program.handlers}
    ends = Ends(spec.bounds) if spec.bounds else None
    if ends is not None:
        if type(rt) is _Shipping:
            rt._order = _MadeBy(rt, number)
        else:
            rt.order = _MadeBy(rt, number)
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
    hooks, extra, served, keys_by_name = _probe_hooks(spec, program, columns, tuple(kinds), stores)
    history = None
    if spec.history:  # the run's history: the serial engine's hooks, with positions
        from ._history import TaskHistory

        history = TaskHistory(spec.history, program, stores)
        more, globals_ = history.plain_hooks()
        hooks += more
        extra.update(globals_)
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
    # A key function of a probe reads the event's columns by name.
    named = compiled.needs_named_events or keys_by_name
    make = event_type(columns) if named else None
    events = 0
    out: list = []
    state_names = {id(d): name for name, d in stores.items()}

    def cross() -> None:
        """Report the next epoch's end (``_boundaries``): what is due by its last event
        applied, the states held here as they stand, the timed writes still waiting."""
        j = ends.passing()
        rt.apply_due(ends.bounds[j][0])
        out.extend(future_rows(rt.future, state_names, j))
        if type(rt) is _Shipping:
            rt.send_folded()  # a window's adds up to the end, summed (more may follow)
            out.extend(unhandled_rows(rt.unhandled, ends.bounds[j], j))
            out.extend(rt.closes_waiting(ends.bounds[j], j))
        made = rt.made if type(rt) is _Shipping else 0
        out.append(state_row(j, compiled.stores, spec.finals, made))

    if spec.zipped:
        batches = unzip(batches)
    packer = (
        ValuePacker(spec.zip_to, spec.wide, spec.zip_by, spec.values_dir) if spec.zip_to else None
    )
    # What a zipped pass gets of each event from here: its lsn and the probe columns.
    values = pa.schema(f for f in spec.wide or () if f.name == "lsn" or f.name.startswith("_rs_q"))
    try:
        for batch in batches:
            if not batch.num_rows:
                continue
            cols = [
                column_values(batch, c, c in spec.pickled_columns)
                if c != "kind" or spec.one_kind is None
                else [spec.one_kind] * batch.num_rows  # not sent: every event is of one kind
                for c in spec.columns
            ]
            cols += [batch.column(c).to_pylist() for c in probe_columns]
            rows = zip(*cols)
            rows = list(map(functools.partial(tuple.__new__, make), rows)) if make else list(rows)
            if ends is not None and ends.passed < len(ends.bounds):
                # Up to each epoch's end passed in this batch, then report it.
                lsn = batch.column("lsn").to_numpy()
                start = 0
                while lsn[-1] > ends.next_lsn:
                    cut = int(np.searchsorted(lsn, ends.next_lsn, side="right"))
                    run_batch(rows[start:cut])
                    start = cut
                    cross()
                rows = rows[start:]
            run_batch(rows)
            if ends is not None and type(rt) is _Shipping and rt.dropped:
                rt.passed(rt.event[1])
            events += batch.num_rows
            if packer is not None:
                yield from packer.add(batch, _forwarded(batch, values, served))
            elif spec.forward:
                yield _forwarded(batch, spec.wide, served)
            if type(rt) is _Shipping and len(rt.out) >= BATCH_ROWS:
                yield _shipped(rt, spec)
        while ends is not None and ends.passed < len(ends.bounds):
            cross()  # the ends after this partition's last event
        # The serial replay applies timed writes due by the log's last event, whichever key
        # that event has: so does this partition, whose own last event may come earlier.
        rt.apply_due(spec.last_ts)
        if packer is not None:
            yield from packer.flush()
    except Exception as exc:  # noqa: BLE001 - the driver replays serially for the exact error
        out.append((ERROR, -1, None, (0, 0, 0, b""), pickle.dumps(repr(exc), protocol=5)))
        yield out_rows(out, spec)
        return
    # Later ones apply only if an event after the log (scheduled elsewhere) comes at or after
    # their time: the driver decides, as for the other passes' (``PEND``).
    for at, order, d, _default, op, key, arg in sorted(rt.future, key=lambda f: f[:2]):
        what = ("del",) if op == "delete" else (op, arg)
        sub = made_bytes(order) if type(order) is tuple else U32.pack(order)  # (see _MadeBy)
        blob = dumps((state_names[id(d)], key, what))
        out.append((PEND, -1, None, (at, PH_TIMED, 0, sub), blob))
    if ends is None:
        out += pack_emitted(rt.rows, number)
    else:  # each epoch's rows apart, for its commit
        parts: dict[int, dict] = {}
        for table, rows in rt.rows.items():
            for j, part in by_epoch(rows, spec.bounds):
                parts.setdefault(j, {})[table] = part
        for j, some in sorted(parts.items()):
            out += pack_emitted(some, number, j)
    for name in spec.finals:
        out.append((FINAL, -1, None, (0, 0, 0, b""), dumps((name, compiled.stores[name]))))
    if history is not None:
        out.append(history.row())
    made, last_at = (rt.made, rt.last_at) if type(rt) is _Shipping else (0, None)
    stat = (events, time.perf_counter() - started, made, last_at)
    out.append((STAT, -1, None, (0, 0, 0, b""), pickle.dumps(stat, protocol=5)))
    if type(rt) is _Shipping:
        rt.send_folded()
        out[:0] = rt.out
    yield out_rows(out, spec)


class _Shipping(Routing):
    """The serial engine's runtime for a plain pass that sends rows on: writes into state a
    later pass holds (through :class:`BlindStore`) and events scheduled for later passes go
    out as rows at the positions the receiving passes sort by (see the module docstring),
    everything else is the serial engine's own."""

    def __init__(self, spec: PassSpec, program: Program):
        from ..serial import SerialRuntime

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
        self.root: int | None = None  # the root event of the last ``schedule`` and its count
        self.seq_of_root = 0
        self.made = 0
        self.last_at: int | None = None
        self.pk_cache: dict = {}
        self.home_keys: dict[int, Any] = {}
        self.field_keys: dict[int, Any] = {}
        self.sent_once: set = set()  # window closes sent (see ``schedule``)
        self.folded: dict = {}  # (state, key) -> [sum, position of the last add] (``_fold``)
        self.unhandled: list = []  # scheduled for kinds no pass handles (``_boundaries``)
        self.dropped: list = []  # closes not sent, for a checkpoint (``closes_waiting``)
        self.once_fields: dict = {}  # the fields of each close sent, for the same

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
            rb = self.rb = RUN_HEAD.pack(ev[1] + SIGN, PH_LOG, ev[0] + SIGN) + U32.pack(self.hidx)
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
        if d.state in self.spec.folds and op == "add" and (at is None or at == now):
            self._fold(d.state, key, arg)
            return
        shipped = (
            ("add", arg)
            if op == "add"
            else ("set", arg)
            if op == "set"
            else (("merge", arg) if op == "merge" else ("del",))
        )
        self.ship(d.state, key, shipped, None if at == now else at, self.spec.blind[d.state])

    def _fold(self, state: str, key: Any, arg: int) -> None:
        """Sum an add into its window's one write, sent at the last add's position
        (``_window_shapes.folded_counts`` says why nothing sees the adds in between)."""
        self.calls += 1
        ev = self.event
        slot = self.folded.get((state, key))
        if slot is None:
            self.folded[(state, key)] = [arg, ev[1], ev[0], self.hidx, self.calls]
        else:
            slot[0] += arg
            slot[1:] = ev[1], ev[0], self.hidx, self.calls

    def send_folded(self) -> None:
        """The summed adds, one write per window, as :meth:`ship` would have sent the last."""
        for (state, key), (total, t, lsn, hidx, calls) in self.folded.items():
            position = (t, PH_LOG, lsn, U32x2.pack(hidx, calls))
            self._send(state, key, ("add", total), position, self.spec.blind[state])
        self.folded.clear()

    def emit(self, table: str, **fields: Any) -> None:
        ev = self.event
        self.rows[table].append((ev[0], ev[1], self._handler, self.seq, fields))

    def schedule(self, kind: str, *, at: int, **fields: Any) -> None:
        ev = self.event
        if at < ev[1]:
            raise TimeTravelError(f"schedule at {at} is earlier than the event's time {ev[1]}")
        if not RESERVED_FIELDS.isdisjoint(fields):
            clash = RESERVED_FIELDS & set(fields)
            raise ValueError(f"scheduled event fields may not be named {sorted(clash)}")
        # ``seq`` counts the events scheduled by one root event, and the events of a plain
        # pass come one after the other: one counter, restarted by a new root.
        root = ev[0]
        if root == self.root:
            self.seq_of_root += 1
        else:
            self.root, self.seq_of_root = root, 1
        seq = self.seq_of_root
        self.made += 1
        if self.last_at is None or at > self.last_at:
            self.last_at = at
        self.calls += 1
        if kind in self.spec.closes_once:
            # Identical window closes: the first acts, the others find the window gone. A
            # generated close's fields are always the same names in the same order.
            once = (kind, at, *fields.values())
            try:
                if once in self.sent_once:
                    if self.spec.bounds:  # a checkpoint holds it until its time
                        # Small: one of these per add, until the window's time passes.
                        self.dropped.append((at, ev[1], ev[0], self.hidx, self.calls, seq, once))
                    return
                self.sent_once.add(once)
                if self.spec.bounds:
                    self.once_fields[once] = fields
            except TypeError:  # an unhashable field: send it
                pass
        position = (at, PH_SCHED, 0, self._run_bytes() + U32.pack(self.calls))
        payload = dumps((kind, fields, root, seq))
        targets = self.spec.kind_passes.get(kind, ())
        if not targets and self.spec.bounds:  # a checkpoint holds it until its time
            self.unhandled.append((position, payload))
        for target in targets:
            self.out.append(
                (SCHED, target, self._to(target, kind, at, root, seq, fields), position, payload)
            )

    def closes_waiting(self, end: tuple, epoch: int) -> list[tuple]:
        """The closes not sent (one of identical ones was) that wait at a checkpoint's
        ``end``, as ``CARRY`` rows of ``epoch``: a serial checkpoint holds each of them."""
        near = []
        for at, t, lsn, hidx, calls, seq, once in self.dropped:
            if at >= end[0]:
                blob = dumps((once[0], self.once_fields[once], lsn, seq))
                rb = RUN_HEAD.pack(t + SIGN, PH_LOG, lsn + SIGN) + U32x2.pack(hidx, calls)
                near.append(((at, PH_SCHED, 0, rb), blob))
        self.passed(end[0] + 1)
        return unhandled_rows(near, end, epoch)

    def passed(self, t: int) -> None:
        """Forget the closes not sent whose time is before ``t``: no later checkpoint's end
        can hold them (an end comes at or after the events already run)."""
        if self.dropped and self.dropped[0][0] < t:
            self.dropped = [entry for entry in self.dropped if entry[0] >= t]

    def _to(self, target: int, kind: str, at: int, root: int, seq: int, fields: dict) -> str:
        """The partition value of a scheduled event in pass ``target``."""
        partition = self.spec.home_partition[target]
        if partition == self.spec.single_key:
            return "N"
        if partition == self.spec.order_key:
            return order_value(root)
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
            position = (ev[1], PH_LOG, ev[0], U32x2.pack(self.hidx, self.calls))
        else:
            position = (at, PH_TIMED, 0, self._run_bytes() + U32.pack(self.calls))
        self._send(state, key, op, position, targets)

    def _send(self, state: str, key: Any, op: tuple, position: tuple, targets: tuple) -> None:
        """Write rows for the passes ``targets``, each to the partition of ``key`` there."""
        self.write_rows(key, position, dumps((state, key, op)), targets)


class _MadeBy:
    """The ``order`` of a plain task's timed writes in a checkpointed replay: the run that
    made each (its event's time and lsn, the handler's number), then a count, which
    ``_boundaries.made_bytes`` turns into the bytes of the general runtime's positions.
    Waiting at an epoch's end, they sort among every task's as made."""

    def __init__(self, rt: Any, number: dict[str, int]):
        self.rt = rt
        self.number = number
        self.count = 0

    def __iter__(self) -> _MadeBy:
        return self

    def __next__(self) -> tuple:
        ev = self.rt.event
        self.count += 1
        return (ev[1], ev[0], self.number[self.rt.handler], self.count)


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
    return out_rows(rows, spec)


def _probe_hooks(
    spec: PassSpec, program: Program, columns: tuple, kinds: tuple, stores: dict
) -> tuple:
    """The loop statements that record the probe values this pass serves and put the values
    it consumes in place, what they need in the loop's namespace, the lists the recorded
    values go to (slot -> list, one value per event of the batch, in order), and whether a
    key stayed a function of a named event (one that reads more than the event's fields)."""
    from ...compiler.compile import dict_name

    hooks: list[tuple[int, str, str]] = []
    extra: dict[str, Any] = {"_rs_MISSING": MISSING}
    served: dict[int, list] = {}
    named = False
    for slot, state, key, h, probe_kinds, _reader in spec.serves:
        values = served[slot] = []
        extra[f"_rs_pv{slot}"] = values.append
        src, by_name = _key_source(key, f"_rs_K{slot}", program, columns, extra)
        named |= by_name
        for kind in kinds:
            if kind in probe_kinds:
                # A key that raises (or is unhashable) records no value: the reading
                # handler's own read raises it in its pass.
                hooks.append(
                    (
                        h,
                        kind,
                        f"try:\n    _rs_pv{slot}({dict_name(state)}.get({src}, _rs_MISSING))\n"
                        f"except Exception:\n    _rs_pv{slot}(_rs_MISSING)\n",
                    )
                )
            else:  # every event gives every slot a value, so that the lists stay aligned
                hooks.append((len(program.handlers), kind, f"_rs_pv{slot}(_rs_MISSING)"))
    readers: dict[int, list] = {}
    for slot, state, key, h in spec.consumes:
        at = columns.index(f"_rs_ql{slot}")
        readers.setdefault(h, []).append((at, state, key))
    for h, slots in readers.items():
        source, by_name = _fill_source(h, slots, extra, program, columns)
        named |= by_name
        for kind in program.handlers[h].kinds:
            hooks.append((h, kind, source))
    return hooks, extra, served, named


def _key_source(key: str, name: str, program: Program, columns: tuple, extra: dict) -> tuple:
    """A probe's key as loop source: the event's fields by position where the key reads
    nothing else (no call per event), else a call of the key function ``name`` (put in
    ``extra``) on the named event. Also whether it needs named events."""
    from ...compiler.inline import EVENT, key_source

    src = key_source(key, columns)
    if src is not None:
        return src, False
    extra[name] = key_function(key, program)
    return f"{name}({EVENT})", True


def _fill_source(h: int, slots: list, extra: dict, program: Program, columns: tuple) -> tuple:
    """The loop statement that puts an event's probe values (``slots``: [(column, state,
    key)]) in the stores handler ``h`` reads, which hold nothing else: inlined in the loop,
    as a handler body is, for it runs on every event. ``extra`` gets the names it uses.
    Also whether a key needs named events."""
    from ...compiler.compile import dict_name
    from ...compiler.inline import EVENT

    extra["_rs_loads"] = pickle.loads
    named = False
    lines = ["if True:"]
    lines += [
        f"    {dict_name(state)}.clear()" for state in dict.fromkeys(s for _a, s, _k in slots)
    ]
    for n, (at, state, key) in enumerate(slots):
        src, by_name = _key_source(key, f"_rs_fk{h}_{n}", program, columns, extra)
        named |= by_name
        lines += [
            f"    _rs_v = {EVENT}[{at}]",
            "    if _rs_v is None:",
            f"        _rs_v = {EVENT}[{at + 1}]",
            "        if _rs_v is None:",
            f"            _rs_v = {EVENT}[{at + 2}]",
            "            _rs_v = _rs_MISSING if _rs_v is None else _rs_loads(_rs_v)",
            "    if _rs_v is not _rs_MISSING:",  # no value: the read sees the default
            "        try:",
            f"            {dict_name(state)}[{src}] = _rs_v",
            "        except Exception:",  # the handler's own read raises it
            "            pass",
        ]
    return "\n".join(lines), named


def _forwarded(batch: pa.RecordBatch, wide: pa.Schema, served: dict[int, list]) -> Any:
    """The batch's events for later passes, as ``wide`` has them: their columns as they came,
    with the probe values recorded here in this pass's slots."""
    n = batch.num_rows
    names = set(batch.schema.names)
    arrays = []
    for f in wide:
        name = f.name
        if name == "_rs_kind":
            arrays.append(pa.array(np.full(n, FWD, dtype=np.int8)))
        elif name.startswith("_rs_q") and int(name[6:]) in served:
            values = served[int(name[6:])]
            arrays.append(probe_array(name[5], values[:n]))
        elif name in names:
            col = batch.column(name)
            arrays.append(col if col.type == f.type else col.cast(f.type))
        else:
            arrays.append(pa.nulls(n, f.type))
    for values in served.values():
        del values[:n]
    return pa.RecordBatch.from_arrays(arrays, schema=wide)
