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
  for later passes** go out as rows (:class:`Shipping`, the serial runtime plus that).

In a checkpointed replay the loop stops at each epoch's end to report its state there
(``passes._boundaries``); its timed writes are then numbered by the runs that made them
(:class:`MadeBy`), so that the driver orders every task's as the serial engine made them.
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

from ....compiler.compile import compile_program, dict_name
from ....compiler.inline import EVENT, key_source
from ....model.program import Program
from ....runtime.windows import fuse_windows
from ...serial import JournalDict, SerialRuntime
from .._codec import MISSING
from .._program_ref import column_values, event_type, key_function
from ._boundaries import Ends, by_epoch, future_rows, made_bytes, state_row, unhandled_rows
from ._emitted import pack_emitted
from ._lookups import LookupPacker
from ._output_files import plain_files
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
    out_rows,
    probe_array,
)
from ._shipping import MadeBy, MadeByRuntime, Shipping, guarded_runtime
from ._start_shares import taken_start
from ._stores import BlindStore, carried
from ._window_shapes import fuses_windows, held_elsewhere, pass_windows
from ._zipped import ValuePacker, unzip

__all__ = ["run_plain"]


def run_plain(
    spec: PassSpec, program: Program, batches: Any, started: float, start: dict | None = None
) -> Iterator:
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

    A replay from a committed epoch gives the task its partition's share of that state
    (``start``, or as rows before its events, ``spec.shares``: ``passes._start_shares``): its
    states' values, and its timed writes still waiting.
    """
    if spec.shares:
        batches, start = taken_start(batches)
    # A pass that writes into state later passes hold, or schedules events for them, sends
    # those as rows (``Shipping``); the rest of the loop is the serial engine's. With
    # ``on_error`` skip or quarantine, a run that raises is undone (``guarded_runtime``).
    guarded = spec.on_error != "stop"
    number = {h.name: h.index for h in program.handlers}
    ends = Ends(spec.bounds) if spec.bounds else None
    if guarded:
        rt = guarded_runtime(spec, program)
    elif spec.blind or spec.ships_events:
        rt = Shipping(spec, program)
    else:
        rt = MadeByRuntime(number) if ends is not None else SerialRuntime()
    ships = isinstance(rt, Shipping)
    if ends is not None and type(rt) is not MadeByRuntime:
        if ships:
            rt._order = MadeBy(rt, number)
        else:
            rt.order = MadeBy(rt, number)
    names = [program.handlers[h].name for h in spec.handlers]
    consumed = sorted({slot for slot, _state, _key, _h in spec.consumes})
    # Probe columns come after the log's columns: the handlers' own indexes do not move.
    probe_columns = [f"_rs_q{c}{slot}" for slot in consumed for c in "ldb"]
    columns = (*spec.columns, *probe_columns)
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
        _restore(start, rt, stores, program, made=ends is not None)
    hooks, extra, served, keys_by_name = _probe_hooks(spec, program, columns, tuple(kinds), stores)
    history = None
    if spec.history:  # the run's history: the serial engine's hooks, with positions
        from .._history import TaskHistory

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
        guarded=guarded,
    )
    # Windows it holds whole run as the serial engine runs them (``_window_shapes``).
    windows = None
    if start is None and fuses_windows(spec):
        mine = pass_windows(program, spec.homes, held_elsewhere(spec))
        if mine:
            if ships:  # (the serial runtime's count of timed writes, as ``write`` takes)
                rt.order = rt._order
            windows = fuse_windows(compiled, rt, only=mine)
    run_batch = compiled.run_batch
    # A key function of a probe reads the event's columns by name.
    named = compiled.needs_named_events or keys_by_name
    make = event_type(columns) if named else None
    events = 0
    out: list = []
    state_names = {id(d): name for name, d in stores.items()}

    def cross() -> None:
        """Report the next epoch's end (``passes._boundaries``): what is due by its last event
        applied, the states held here as they stand, the timed writes still waiting."""
        j = ends.passing()
        rt.apply_due(ends.bounds[j][0])
        out.extend(future_rows(rt.future, state_names, j))
        if ships:
            rt.send_folded()  # a window's adds up to the end, summed (more may follow)
            out.extend(unhandled_rows(rt.unhandled, ends.bounds[j], j))
            out.extend(rt.closes_waiting(ends.bounds[j], j))
        made = rt.made if ships else 0
        out.append(state_row(j, compiled.stores, spec.finals, made))

    if spec.zipped:
        batches = unzip(batches)
    packer = (
        ValuePacker(spec.zip_to, spec.wide, spec.zip_by, spec.values_dir) if spec.zip_to else None
    )
    # Later passes partitioned by a key looked up here get their events from it (``passes._lookups``).
    looker = (
        LookupPacker(
            spec.lookups,
            program,
            spec.columns,
            spec.wide,
            spec.one_kind,
            spec.values_dir if spec.local is not None else None,
        )
        if spec.lookups
        else None
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
            # No probe column at all: no event here came from a pass that read a value for
            # it (a log with none of the serving pass's kinds); its reads see the default.
            names = batch.schema.names
            cols += [
                batch.column(c).to_pylist() if c in names else [None] * batch.num_rows
                for c in probe_columns
            ]
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
            if ends is not None and ships and rt.dropped:
                rt.passed(rt.event[1])
            events += batch.num_rows
            if looker is not None:
                yield from looker.add(batch, served)
            if packer is not None:
                yield from packer.add(batch, _forwarded(batch, values, served))
            elif spec.forward:
                yield _forwarded(batch, spec.wide, served)
            else:  # (the values went to the passes that look up keys here)
                for recorded in served.values():
                    recorded.clear()
            if ships and len(rt.out) >= BATCH_ROWS:
                yield _shipped(rt, spec)
        while ends is not None and ends.passed < len(ends.bounds):
            cross()  # the ends after this partition's last event
        # The serial replay applies timed writes due by the log's last event, whichever key
        # that event has: so does this partition, whose own last event may come earlier.
        rt.apply_due(spec.last_ts)
        if packer is not None:
            yield from packer.flush()
        if looker is not None:
            yield from looker.flush()
    except Exception as exc:  # noqa: BLE001 - the driver replays serially for the exact error
        out.append((ERROR, -1, None, (0, 0, 0, b""), pickle.dumps(repr(exc), protocol=5)))
        yield out_rows(out, spec)
        return
    if windows is not None:  # (what waits past the log's end goes with the timed writes)
        windows.finish(until=spec.last_ts, later=functools.partial(_later, rt))
    # Later ones apply only if an event after the log (scheduled elsewhere) comes at or after
    # their time: the driver decides, as for the other passes' (``PEND``).
    for at, order, d, _default, op, key, arg in sorted(rt.future, key=lambda f: f[:2]):
        what = carried(op, arg)
        sub = made_bytes(order) if type(order) is tuple else U32.pack(order)  # (see MadeBy)
        blob = dumps((state_names[id(d)], key, what))
        out.append((PEND, -1, None, (at, PH_TIMED, 0, sub), blob))
    if ends is None:  # (a large table written as a file, ``_output_files``)
        kept, written = plain_files(spec.outputs, rt.rows, number)
        out += written + pack_emitted(kept, number)
    else:  # each epoch's rows apart, for its commit
        parts: dict[int, dict] = {}
        for table, rows in rt.rows.items():
            for j, part in by_epoch(rows, spec.bounds):
                parts.setdefault(j, {})[table] = part
        for j, some in sorted(parts.items()):
            out += pack_emitted(some, number, j)
    for name in spec.finals:
        values = compiled.stores[name]
        values = dict(values) if guarded else values  # (a JournalDict: a plain dict travels)
        out.append((FINAL, -1, None, (0, 0, 0, b""), dumps((name, values))))
    if history is not None:
        out.append(history.row())
    if guarded and rt.failed:
        out.append((QUAR, -1, None, (0, 0, 0, b""), dumps(rt.failed)))
    made, last_at = (rt.made, rt.last_at) if ships else (0, None)
    # (Last: that the task ran the serial engine's loop, for ``metrics.path``.)
    stat = (events, time.perf_counter() - started, made, last_at, True)
    out.append((STAT, -1, None, (0, 0, 0, b""), pickle.dumps(stat, protocol=5)))
    if ships:
        rt.send_folded()
        out[:0] = rt.out
    yield out_rows(out, spec)


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
        later = itertools.count(max(w[1] for w in future) + 1)  # (after the serial numbers)
        if isinstance(rt, Shipping):
            rt._order = later
        else:
            rt.order = later


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


def _later(rt: Any, d: dict, default: Any, op: str, key: Any, arg: Any, at: int) -> None:
    """A fused window's write still waiting at the partition's end, queued as the timed write
    the window's expansion would have left in ``rt`` (sent on as ``PEND`` with the others)."""
    heapq.heappush(rt.future, (at, next(rt.order), d, default, op, key, arg))
