"""A pass that runs the serial engine's inlined loop (``plain``): the fast case.

A pass whose events are log events only, and that sends on nothing but what the loop can
send, runs the serial engine's generated loop over its partition, with the handler bodies
inlined, exactly as a serial replay runs them: the serial runtime, its loop set up by
``runtime.loop.compile_loop``, the sink of its writes chosen by what the pass sends on
(:func:`_runtime`):

- **probe values travel with the events** when the passes forward events (``spec.sends.wide``):
  the loop records, at the reading handler's place in declaration order, the value a later
  pass reads, and sends each event on with those values in its probe columns; a reading
  pass puts each in its store just before the handler that reads it. No probe row, no sort
  by tag, no per-row join: the event carries its reads;
- **writes into a later pass's state** (through :class:`BlindStore`) and **events scheduled
  for later passes** go out as rows (:class:`Shipping`, the serial runtime with a ship sink).

In a checkpointed replay the loop stops at each epoch's end to report its state there
(``passes._boundaries``); its timed writes are then numbered by the runs that made them
(``runtime.positioned.MadeBy``), so that the driver orders every task's as the serial
engine made them. A fused window's decrements still waiting at the partition's end join the
runtime's timed writes (``SerialRuntime.later``) and go to the driver with them.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import pickle
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from ....compiler.compile import dict_name
from ....compiler.inline import EVENT, key_source
from ....model.program import Program
from ....runtime._native_plan import LAZY
from ....runtime.guarded import JournalDict
from ....runtime.loop import compile_loop
from ....runtime.positioned import MadeBy
from ....runtime.semantics import SerialRuntime
from ....runtime.windows import Blocks, fuse_windows
from .._codec import MISSING
from .._history import TaskHistory
from .._program_ref import column_values, event_type, key_function
from ._boundaries import Ends, by_epoch, future_rows, made_bytes, state_row, unhandled_rows
from ._emitted import pack_emitted, send_emitted
from ._lookups import LookupPacker
from ._narrow import narrow_senders
from ._own_closes import OwnCloses
from ._rows import (
    BATCH_ROWS,
    ERROR,
    FINAL,
    FWD,
    PEND,
    PH_TIMED,
    QUAR,
    SIGN,
    STAT,
    U32,
    PassSpec,
    dumps,
    for_driver,
    out_rows,
    probe_array,
)
from ._shipping import MadeByRuntime, Shipping, guarded_runtime
from ._stores import BlindStore, carried
from ._window_shapes import fuses_windows, held_elsewhere, pass_windows
from ._zipped import ValuePacker

__all__ = ["run_plain"]


def run_plain(
    spec: PassSpec, program: Program, batches: Any, started: float, start: dict | None = None
) -> Iterator:
    """A pass that only runs handlers over log events (no row from or for another pass but
    probe values, no scheduled event in the whole program): the serial engine's generated
    loop, with the handler bodies inlined, over the partition. Its rows' positions are
    (ts, lsn): the pass path's ``_rs_o`` is the log's ``lsn``.

    When the passes *forward* events (``spec.sends.wide``), probe values travel with the events
    themselves: the loop records, at the reading handler's place in declaration order, the
    value a later pass reads (``serves``), and sends each event on with those values in its
    probe columns; a reading pass gets the events with the values of earlier passes and puts
    each in its store just before the handler that reads it (``consumes``). No probe row, no
    sort by tag, no per-row join: the event carries its reads.

    A replay from a committed epoch gives the task its partition's share of that state
    (``start``: from a file, or taken off the front of its rows, ``passes._sources``): its
    states' values, and its timed writes still waiting.
    """
    plain = _PlainPass(spec, program, start)
    yield from plain.run(batches, started)


def _runtime(spec: PassSpec, program: Program, number: dict, checkpointed: bool) -> Any:
    """The runtime of a plain pass, by what its writes' sink is: the serial engine's
    (applied here), ``Shipping`` (writes into state later passes hold, events scheduled for
    them: sent on as rows), guarded (``on_error`` skip or quarantine: a run that raises is
    undone); in a checkpointed replay its timed writes are numbered by the runs that made
    them (``MadeBy``)."""
    if spec.on_error != "stop":
        rt = guarded_runtime(spec, program)
    elif spec.blind or spec.ships_events:
        rt = Shipping(spec, program)
    else:
        rt = MadeByRuntime(number) if checkpointed else SerialRuntime()
    if checkpointed and type(rt) is not MadeByRuntime:
        # (A runtime that ships timed writes numbers them with its own: the same count.)
        rt.order = rt.timed if isinstance(rt, Shipping) else MadeBy(rt, number)
    return rt


class _PlainPass:
    """One plain pass over one partition: the serial engine's loop (``runtime.loop``)."""

    def __init__(self, spec: PassSpec, program: Program, start: dict | None):
        self.spec = spec
        self.program = program
        self.guarded = guarded = spec.on_error != "stop"
        self.number = {h.name: h.index for h in program.handlers}
        self.ends = Ends(spec.bounds) if spec.bounds else None
        rt = self.rt = _runtime(spec, program, self.number, self.ends is not None)
        self.ships = isinstance(rt, Shipping)
        names = [program.handlers[h].name for h in spec.handlers]
        consumed = sorted({slot for slot, _state, _key, _h in spec.consumes})
        # Probe columns come after the log's columns: the handlers' own indexes do not move.
        self.probe_columns = [f"_rs_q{c}{slot}" for slot in consumed for c in "ldb"]
        columns = (*spec.columns, *self.probe_columns)
        kinds = dict.fromkeys(k for h in spec.handlers for k in program.handlers[h].kinds)
        for _slot, _state, _key, _h, probe_kinds, _reader in spec.serves:
            kinds.update(dict.fromkeys(probe_kinds))
        stores: dict[str, dict] = {
            name: BlindStore(rt, name)
            if name in spec.blind
            else (JournalDict(rt.journal) if guarded else {})
            for name in program.states
        }
        if start is not None:
            _restore(start, rt, stores, program, made=self.ends is not None)
        hooks, extra, self.served, by_name = _probe_hooks(
            spec, program, columns, tuple(kinds), stores
        )
        self.history = None
        if spec.history:  # the run's history: the serial engine's hooks, with positions
            self.history = TaskHistory(spec.history, program, stores)
            more, globals_ = self.history.plain_hooks()
            hooks += more
            extra.update(globals_)
        loop = compile_loop(
            program,
            rt,
            stores,
            columns=columns,
            kind_order=tuple(kinds),
            extra_globals=extra,
            scheduled=bool(spec.closes),  # (only a pass's own closes: ``_own_closes``)
            only=names,
            hooks=hooks,
            guarded=guarded,
        )
        self.compiled = loop.compiled
        self.run_batch = loop.run_batch
        # Windows it holds whole run as the serial engine runs them (``_window_shapes``).
        self.windows = None
        if start is None and fuses_windows(spec):
            mine = [*pass_windows(program, spec.homes, held_elsewhere(spec)), *spec.closes]
            if mine:
                # (Closed windows' rows and written-out emits as columns: ``_arrow_rows``.)
                # A session window the serial engine runs lazily runs lazily here too, when
                # the task runs the closes and the flush itself (``OwnCloses``).
                self.windows = fuse_windows(
                    self.compiled, rt, only=mine, blocks=Blocks(), lazy=bool(spec.closes)
                )
                loop.handlers_replaced()  # (its scheduled closes run the fused handlers)
        # Closing windows it holds whole: their closes run here, as the serial engine runs them.
        self.closes = OwnCloses(loop, program, spec.closes, spec.max_flush) if spec.closes else None
        if spec.narrow_to:  # windows keyed otherwise: each add one row (``passes._narrow``)
            narrow_senders(spec, program, self.compiled.namespace, rt)
        # A key function of a probe reads the event's columns by name.
        named = self.compiled.needs_named_events or by_name
        self.make = event_type(columns) if named else None
        self.state_names = {id(d): name for name, d in stores.items()}
        self.out: list = []

    def cross(self) -> None:
        """Report the next epoch's end (``passes._boundaries``): what is due by its last event
        applied, the states held here as they stand, the timed writes still waiting."""
        rt, ends, out = self.rt, self.ends, self.out
        j = ends.passing()
        rt.apply_due(ends.bounds[j][0])
        out.extend(future_rows(rt.future, self.state_names, j))
        if self.ships:
            rt.send_folded()  # a window's adds up to the end, summed (more may follow)
            out.extend(unhandled_rows(rt.unhandled, ends.bounds[j], j))
            out.extend(rt.closes_waiting(ends.bounds[j], j))
        made = rt.made if self.ships else 0
        out.append(state_row(j, self.compiled.stores, self.spec.finals, made))

    def run(self, batches: Any, started: float) -> Iterator:
        """The partition's events through the loop; what it sends on, then its results."""
        spec = self.spec
        sends = spec.sends
        packer = (
            ValuePacker(sends.zip_to, sends.wide, sends.zip_by, sends.values_dir)
            if sends.zip_to
            else None
        )
        looker = _looker(spec, self.program)
        try:
            events = yield from self._events(batches, packer, looker)
            if self.windows is not None:  # (what waits past the log's end: with the timed writes)
                self._finish_windows()
        except Exception as exc:  # noqa: BLE001 - the driver replays serially for the exact error
            self.out.append(for_driver(ERROR, pickle.dumps(repr(exc), protocol=5)))
            yield out_rows(self.out, spec)
            return
        self._pending()
        self._results(events, started)
        yield out_rows(self.out, spec)

    def _finish_windows(self) -> None:
        """The fused windows' end, after the log and the flush (``OwnCloses.finish``): a lazy
        session window closes its sessions left open when the task ran the flush, as the
        serial engine's does, and its last close counts as a scheduled event run then."""
        spec, rt = self.spec, self.rt
        flushed = self.closes is not None
        self.windows.finish(until=spec.last_ts, later=rt.later, flushed=flushed)
        if flushed:
            self.closes.ran_until(rt.event, spec.last_ts)

    def _lazy(self) -> tuple[str, ...]:
        """The session windows this task ran lazily, for ``metrics.path``."""
        how = self.windows.how if self.windows is not None else {}
        return tuple(name for name, said in how.items() if said == LAZY)

    def _events(self, batches: Any, packer: Any, looker: Any) -> Iterator:
        """Run the batches; yield what goes to later passes (events forwarded, packed for
        a zipped pass, or for the passes that look keys up here); return the events run."""
        spec, rt, ends = self.spec, self.rt, self.ends
        served = self.served
        # What a zipped pass gets of each event from here: its lsn and the probe columns.
        values = pa.schema(
            f for f in spec.sends.wide or () if f.name == "lsn" or f.name.startswith("_rs_q")
        )
        events = 0
        for batch in batches:
            if not batch.num_rows:
                continue
            self._run(batch)
            if ends is not None and self.ships and rt.dropped:
                rt.passed(rt.event[1])
            events += batch.num_rows
            if looker is not None:
                yield from looker.add(batch, served)
            if packer is not None:
                yield from packer.add(batch, _forwarded(batch, values, served))
            elif spec.sends.forward:
                yield _forwarded(batch, spec.sends.wide, served)
            else:  # (the values went to the passes that look up keys here)
                for recorded in served.values():
                    recorded.clear()
            if self.ships and len(rt.out) >= BATCH_ROWS:
                yield _shipped(rt, spec)
        while ends is not None and ends.passed < len(ends.bounds):
            self.cross()  # the ends after this partition's last event
        # The serial replay applies timed writes due by the log's last event, whichever key
        # that event has: so does this partition, whose own last event may come earlier.
        if self.closes is not None:  # (and runs its closes, then those after the log)
            self.closes.finish(spec.last_ts)
        rt.apply_due(spec.last_ts)
        if packer is not None:
            yield from packer.flush()
        if looker is not None:
            yield from looker.flush()
        return events

    def _run(self, batch: pa.RecordBatch) -> None:
        """One batch of events through the loop, stopping at each epoch's end in it."""
        spec, ends, make = self.spec, self.ends, self.make
        n = batch.num_rows
        cols = [
            column_values(batch, c, c in spec.pickled_columns)
            if c != "kind" or spec.source.one_kind is None
            else [spec.source.one_kind] * n  # not sent: every event is of one kind
            for c in spec.columns
        ]
        # No probe column at all: no event here came from a pass that read a value for
        # it (a log with none of the serving pass's kinds); its reads see the default.
        names = batch.schema.names
        cols += [
            batch.column(c).to_pylist() if c in names else [None] * n for c in self.probe_columns
        ]
        if self.closes is not None:
            self.closes.seen(batch)
        rows = zip(*cols)
        rows = list(map(functools.partial(tuple.__new__, make), rows)) if make else list(rows)
        if ends is not None and ends.passed < len(ends.bounds):
            # Up to each epoch's end passed in this batch, then report it.
            lsn = batch.column("lsn").to_numpy()
            start = 0
            while lsn[-1] > ends.next_lsn:
                cut = int(np.searchsorted(lsn, ends.next_lsn, side="right"))
                self.run_batch(rows[start:cut])
                start = cut
                self.cross()
            rows = rows[start:]
        self.run_batch(rows)

    def _pending(self) -> None:
        """The timed writes still waiting: they apply only if an event after the log
        (scheduled elsewhere) comes at or after their time; the driver decides, as for the
        other passes' (``PEND``)."""
        for at, order, d, _default, op, key, arg in sorted(self.rt.future, key=lambda f: f[:2]):
            what = carried(op, arg)
            sub = made_bytes(order) if type(order) is tuple else U32.pack(order)  # (see MadeBy)
            blob = dumps((self.state_names[id(d)], key, what))
            self.out.append((PEND, -1, None, (at, PH_TIMED, 0, sub), blob))

    def _results(self, events: int, started: float) -> None:
        """Emitted rows (each epoch's apart in a checkpointed replay), finals, counts."""
        spec, rt, out = self.spec, self.rt, self.out
        if self.ends is None:  # as Arrow where it can (a large table as a file, too)
            out += send_emitted(rt.rows, self.number, self.closes, spec.outputs)
        else:  # each epoch's rows apart, for its commit
            if self.closes is not None:  # (before the others: it takes its rows out of them)
                out += self.closes.rows(rt.rows, self.number)
            parts: dict[int, dict] = {}
            for table, rows in rt.rows.items():
                for j, part in by_epoch(rows, spec.bounds):
                    parts.setdefault(j, {})[table] = part
            for j, some in sorted(parts.items()):
                out += pack_emitted(some, self.number, j)
        for name in spec.finals:
            values = self.compiled.stores[name]
            values = dict(values) if self.guarded else values  # (a JournalDict: a plain dict)
            out.append(for_driver(FINAL, dumps((name, values))))
        if self.history is not None:
            out.append(self.history.row())
        if self.guarded and rt.failed:
            out.append(for_driver(QUAR, dumps(rt.failed)))
        made, last_at = (rt.made, rt.last_at) if self.ships else (0, None)
        if self.closes is not None:
            made, last_at = self.closes.stat()
        # (Last: that the task ran the serial engine's loop, for ``metrics.path``.)
        stat = (events, time.perf_counter() - started, made, last_at, True, self._lazy())
        out.append(for_driver(STAT, pickle.dumps(stat, protocol=5)))
        if self.ships:
            rt.send_folded()
            out[:0] = rt.out


def _looker(spec: PassSpec, program: Program) -> LookupPacker | None:
    """Later passes partitioned by a key looked up here get their events from it
    (``passes._lookups``)."""
    if not spec.sends.lookups:
        return None
    return LookupPacker(
        spec.sends.lookups,
        program,
        spec.columns,
        spec.sends.wide,
        spec.source.one_kind,
        spec.sends.lookups_dir,
    )


def _restore(start: dict, rt: Any, stores: dict, program: Program, made: bool) -> None:
    """A partition's share of a start state in its stores and the runtime's waiting timed
    writes. A restored write comes before whatever a run makes for the same time, as in
    the serial engine (made first): numbered first, or, where timed writes are numbered by
    the runs that made them (``made``), by no run (``passes._boundaries.made_bytes`` packs zeros)."""
    for name, values in start["stores"].items():
        dict.update(stores[name], values)  # (a JournalDict: nothing to undo)
    future = start["future"]
    for at, number, name, op, key, arg in future:
        order = (-SIGN, -SIGN, 0, number) if made else number
        default = program.states[name].default
        heapq.heappush(rt.future, (at, order, stores[name], default, op, key, arg))
    if future and not made:
        rt.order = itertools.count(max(w[1] for w in future) + 1)  # (after the serial numbers)


def _shipped(rt: Shipping, spec: PassSpec) -> pa.RecordBatch:
    rows, rt.out = rt.out, []
    return out_rows(rows, spec)


def _probe_hooks(
    spec: PassSpec, program: Program, columns: tuple, kinds: tuple, stores: dict
) -> tuple:
    """The loop statements that record the probe values this pass serves and put the values
    it consumes in place, what they need in the loop's namespace, the lists the recorded
    values go to (slot -> list, one value per event of the batch, in order), and whether a
    key stayed a function of a named event (one that reads more than the event's fields)."""
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
