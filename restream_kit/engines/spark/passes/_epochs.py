"""Checkpointed, resumed and ``start_from`` replays on the pass path: the state after each
epoch is committed in the serial engine's checkpoint format (JSON and Arrow, no pickles).

The passes run once over the log, as a replay without a checkpoint does, and every task
reports its state at each epoch's end as it passes it (``passes._boundaries``): the driver puts the
tasks' reports together and commits them epoch by epoch once the passes are done
(:func:`run_checkpointed`). Each epoch's state is the serial engine's: each state's values
(reported by the passes that hold it), the timed writes and scheduled events still waiting
(the tasks' ``CARRY`` rows, numbered in position order, as the serial engine numbers them by
creation), each root event's count of scheduled events, and the runs quarantined so far.

A resume or a ``start_from`` runs once over the log's events after the committed epoch, its
passes fed that epoch's state as rows (``passes._carry.carry_frame``): a state's values go to every
pass that holds it (tag ``TAG_STATE``, before everything), a timed write to the holders of its
state and a scheduled event to the passes of its kind, at positions that sort before whatever
a run makes at the same time. So a serial engine's checkpoint can start a Spark replay and
the other way round.
"""

from __future__ import annotations

import operator
import pickle
import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from ....io._arrow_stores import (
    MIN_KEYS,
    FutureColumns,
    future_from_table,
    future_parts_columns,
)
from ....io.checkpoint import (
    CheckpointError,
    Start,
    check_states,
    restore_serial_state,
    state_declarations,
)
from ....io.epochs import Epoch, cut
from ....io.progress import EpochFinished, EpochStarted, Progress, ReplayFinished, ReplayStarted
from ....io.result import Result, build_table
from ...serial import ScheduledEvent, SerialRuntime
from . import _rows as W
from ._carry import carry_frame
from ._copies import in_serial_order
from ._emitted import committed_rows, emitted_rows, emitted_tables
from ._jobs import Ran, run_jobs, shared_passes, stage_names
from ._results import finish_finals, handler_names, make_result
from ._rows import PH_LOG
from ._setup import Setup, wave_end
from ._start_shares import Starts, deal

__all__ = ["run_checkpointed", "start_state"]

_FIRST = -(1 << 63)  # the position of a state row: before every event


def start_state(rep: Any) -> dict | None:
    """The state a ``resume`` or a ``start_from`` starts from, with live values (None
    without one): the setup deals it to the driver's partitions where it can
    (``passes._start_shares``)."""
    return _begun(rep).state


def _begun(rep: Any) -> _Begun:
    if rep.begun is None:  # (made once per replay: it may be large)
        rep.begun = _Begun.of(rep.program, rep.open_checkpoint()[1])
    return rep.begun


def run_checkpointed(setup: Setup) -> Result:
    """Replay once over the log (what is left of it after the epoch a ``resume`` or a
    ``start_from`` starts from), committing each epoch (``checkpoint``) from what the tasks
    report at its end (``passes._boundaries``)."""
    rep, program, log = setup.rep, setup.program, setup.log
    ck, start = rep.open_checkpoint()
    total = len(log)
    epochs = cut(log, rep.options.epoch)
    begun = _begun(rep)
    # Epochs from where the checkpoint stopped (it may have cut the log differently).
    epochs = [
        Epoch(e.index, max(e.start, begun.done), e.stop) for e in epochs if e.stop > begun.done
    ]
    until = rep.until
    epochs, ends = _ends(setup, epochs, until)
    rep.notify(ReplayStarted("spark", total, len(epochs), stage_names(setup.pp), log.span_ms))
    ran = _run(setup, begun, epochs, ends, total)
    finish_finals(program, ran)
    if not ends:  # one epoch: its tasks emitted their rows as without a checkpoint
        ran.emitted_at[0] = (ran.emitted, ran.emitted_columns)
    names = handler_names(program)
    kept = _Kept(begun) if until is not None and ck is not None else None
    every = _commit(setup, ck, kept, epochs, ends, ran, begun)
    committed = rep.tables_committed  # (the tables are read back from the commits: ``_waves``)
    if kept is not None and kept.last is not None:  # a wave: the next starts from it as it is
        rep.begun, rep.opened, rep.carried = kept.begun(), (ck, kept.start()), kept
    if ck is not None:
        said = (
            f", its state at each of the {len(epochs)} epochs' ends committed to the checkpoint"
            if ends
            else ", its state committed to the checkpoint at the end"
        )
        for stage in ran.path:
            ran.path[stage] += said
    tables = {} if committed else emitted_tables(*every, names)
    # A resume's result has the rows committed before it too (a wave's is not the result).
    if begun.rows and until is None and not committed:
        tables = _with_committed(begun.rows, tables, every, names)
    # Scheduled events in all, as the serial engine counts them (those before a start too).
    ran.scheduled += begun.scheduled
    rep.notify(ReplayFinished(total, time.perf_counter() - setup.started))
    replayed = total if start is None or start.resumed else total - start.done
    earlier = [((_FIRST, 0, i, b""), 0, row) for i, row in enumerate(begun.quarantined)]
    quarantined = _quarantined(ran)
    result = make_result(setup, ran, tables, replayed, len(epochs), earlier + quarantined)
    result.warnings[:0] = begun.notes
    if start is not None and start.resumed:
        result.resumed_from_epoch = start.next_epoch
    return result


def _run(setup: Setup, begun: _Begun, epochs: list[Epoch], ends: tuple, total: int) -> Ran:
    """The passes' run over the events after ``begun``'s start, fed its state: dealt to the
    tasks where the driver arranges the events, else as rows (and shares of their own,
    ``passes._start_shares``). Nothing runs when a complete checkpoint is resumed."""
    events, carry, starts = setup.df, None, None
    if begun.state is not None:
        after = setup.log.rows_at([begun.done - 1], ["lsn"]).column("lsn")[0].as_py()
        if setup.local:  # each task's share of the start, beside its events after it
            starts = deal(setup, begun.state, after, setup.partitions)
        else:  # the log after the start, and the start's state and waiting entries as rows
            events = events.where(f"lsn > {after}")
            frames = shared_passes(setup, begun.state)  # (a share each: ``passes._start_shares``)
            carry = carry_frame(setup, begun.state, skip=frozenset(frames))
            starts = Starts(after, frames=frames)
    if not epochs:  # a complete checkpoint resumed: nothing is left to run
        states = setup.program.states
        return Ran(finals={name: dict(begun.state["stores"][name]) for name in states})
    reach = epochs[-1].stop  # (a wave's end, for its progress)
    return run_jobs(setup, events, carry, (begun.done, reach), total, bounds=ends, starts=starts)


def _quarantined(ran: Ran) -> list:
    """The runs the tasks quarantined, in the serial engine's order (position, handler)."""
    return sorted(ran.quarantined, key=lambda q: (q[0], q[1]))


def _commit(
    setup: Setup,
    ck: Any,
    kept: _Kept | None,
    epochs: list[Epoch],
    ends: tuple,
    ran: Ran,
    begun: _Begun,
) -> tuple[list, dict]:
    """Commit each epoch's state and rows to the checkpoint ``ck`` (and to ``kept``, a wave's),
    as the serial engine commits them, telling the replay's listeners; all epochs' rows."""
    rep, program = setup.rep, setup.program
    names = handler_names(program)
    quarantined = _quarantined(ran)
    seen = dict.fromkeys([*begun.tables, *begun.rows])  # the tables emitted so far
    every: tuple[list, dict] = ([], {})  # all epochs' rows, for the tables (if built here)
    total = len(setup.log)
    for j, ep in enumerate(epochs):
        rep._check_cancel()
        rep.notify(EpochStarted(ep.index, len(ep)))
        committing = time.perf_counter()
        last = j == len(epochs) - 1
        final = last and rep.until is None  # (a wave's last epoch is committed from its end)
        rows, columns = ran.emitted_at.pop(j, ([], {}))  # (dropped once committed)
        if not rep.tables_committed:
            every[0].extend(rows)
            for name, chunks in columns.items():
                every[1].setdefault(name, []).extend(chunks)
        new_rows = committed_rows(rows, columns, names)
        seen.update(dict.fromkeys(new_rows))
        # Every table emitted so far, as the serial engine commits them (empty: none now).
        new_rows = {name: new_rows.get(name, []) for name in seen}
        failed = [q[2] for q in quarantined if final or q[0][:3] <= ends[j]]
        state = _epoch_state(program, ran, begun, j, final, begun.quarantined + failed)
        if ck is not None:  # written beside the next epoch's or wave's work
            ck.commit_soon(ep.index, ep.stop, state, new_rows, last=final)
            if final:
                ck.flush()  # (a replay returns with its checkpoint complete)
        if kept is not None:
            kept.add(ep, state, new_rows)
        outputs = emitted_tables(rows, columns, names)
        settled = None if final else ends[j][0]
        elapsed = time.perf_counter() - committing
        rep.notify(EpochFinished(ep.index, ep.stop, elapsed, outputs, settled))
        rep.notify(Progress(ep.stop, total, time.perf_counter() - setup.started))
    return every


def _epoch_state(
    program: Any, ran: Ran, begun: _Begun, j: int, final: bool, quarantined: list
) -> dict:
    """The serial engine's state after epoch ``j`` (the replay's end when ``final``), from
    what the tasks reported, with the events scheduled in all so far."""
    if final:
        state = _state_after(program, ran.finals, [], quarantined)
        state["scheduled_total"] = begun.scheduled + ran.scheduled
        return state
    stores, made, orders = ran.snapshots.get(j, ({}, 0, {}))
    stores = {name: stores.get(name, {}) for name in program.states}
    in_serial_order(stores, orders)
    state = _state_after(program, stores, ran.carried.get(j, []), quarantined)
    state["scheduled_total"] = begun.scheduled + made
    return state


def _ends(setup: Setup, epochs: list[Epoch], until: int | None) -> tuple[list[Epoch], tuple]:
    """The epochs a run commits and the ends its tasks report, ``(ts, phase, lsn)`` of each
    epoch's last event: every epoch's but the last, which the run's final state is. A wave
    (``_waves``) runs up to epoch ``until``, whose end is reported as every other's, and its
    passes read no event after it."""
    if until is not None:
        epochs = [e for e in epochs if e.index <= until]
    reported = epochs if until is not None else epochs[:-1]
    # Only the epochs' last events: the log is not read whole (``Log.rows_at``).
    lasts = setup.log.rows_at([e.stop - 1 for e in epochs], ["lsn", "ts"]).to_pylist()
    ends = tuple((last["ts"], PH_LOG, last["lsn"]) for last in lasts[: len(reported)])
    if until is not None and epochs:
        wave_end(setup, lasts[-1]["lsn"])
    return epochs, ends


def _with_committed(committed: dict, tables: dict, every: tuple, names: list) -> dict:
    """A resume's tables: the rows committed before it, then its own (``tables``, made of
    ``every``), as ``build_table`` makes them of all the rows together. The two parts are
    joined as tables where they have one schema (``build_table`` infers each column's type
    from its values: the same for both parts then); else the rows are made again, all of
    them, into each table."""
    joined: dict = {}
    rows_now = None
    for name in {**committed, **tables}:
        before = build_table(name, committed[name]) if name in committed else None
        now = tables.get(name)
        if before is None or now is None or before.schema == now.schema:
            parts = [t for t in (before, now) if t is not None]
            joined[name] = pa.concat_tables(parts).combine_chunks()
            continue
        if rows_now is None:
            rows_now = emitted_rows(*every, names)
        joined[name] = build_table(name, committed[name] + rows_now.get(name, []))
    return joined


@dataclass
class _Begun:
    """What a replay starts from: nothing, or a committed epoch's state (``start``)."""

    notes: list = field(default_factory=list)  # a ``start_from``'s notes for the result
    state: dict | None = None  # the serial engine's state, with live values (``_restart``)
    done: int = 0  # the events before it
    rows: dict = field(default_factory=dict)  # a resume's rows committed so far, per table
    quarantined: list = field(default_factory=list)  # a resume's quarantined runs so far
    scheduled: int = 0  # events scheduled before it (the serial engine counts them too)
    tables: list = field(default_factory=list)  # the tables emitted before it (a resume's)

    @classmethod
    def of(cls, program: Any, start: Any) -> _Begun:
        if start is None:
            return cls()
        notes, state = _restart(program, start)
        rows: dict[str, list] = {}
        for epoch_rows in start.rows if start.resumed else ():
            for name, some in epoch_rows.items():
                rows.setdefault(name, []).extend(some)
        # A serial checkpoint counts them per root; this engine keeps their total beside.
        before = start.state.get("scheduled_total", sum(state["scheduled_per_root"].values()))
        tables = list(start.tables) if start.resumed else []
        return cls(notes, state, start.done, rows, list(state["quarantined"]), before, tables)


class _Kept:
    """What a wave (``_waves``) committed, kept for the next wave of the same replay: its
    start as a resume would read it back from the checkpoint (:meth:`begun`, :meth:`start`),
    without reading it, and with the values live (nothing to rebuild). Its rows stay in the
    checkpoint only: the replay's tables are read back from there when it is done; the
    names of the tables emitted so far are kept."""

    def __init__(self, begun: _Begun):
        self.tables = dict.fromkeys([*begun.tables, *begun.rows])
        self.last: tuple[Epoch, dict] | None = None

    def add(self, ep: Epoch, state: dict, rows: dict) -> None:
        """Epoch ``ep`` committed with ``state`` and ``rows`` (table -> rows or columns)."""
        self.last = (ep, state)
        self.tables.update(dict.fromkeys(rows))

    def begun(self) -> _Begun:
        ep, state = self.last
        future = state["future"]
        if type(future) is FutureColumns:
            future = future_from_table(future.table, future.arity)
        live = {**state, "future": future}
        live.pop("scheduled_total", None)
        return _Begun(
            [],
            live,
            ep.stop,
            {},
            list(state["quarantined"]),
            state["scheduled_total"],
            list(self.tables),
        )

    def start(self) -> Start:
        ep, state = self.last
        return Start(epoch=ep.index, done=ep.stop, state=state, resumed=True)


def _restart(program: Any, start: Any) -> tuple[list[str], dict[str, Any]]:
    """The notes a ``start_from`` gets, and the committed state with live values (merge
    functions rebuilt from this program's own code, as the serial engine rebuilds them)."""
    notes: list[str] = []
    if not start.resumed:
        notes = check_states(program, start.state["states"], "start_from")
        notes.insert(
            0,
            f"started from epoch {start.epoch} of {start.info.get('start_from')} (the state "
            f"after {start.done:,} events); the result covers the events after it only",
        )
    rt = SerialRuntime()
    stores: dict[str, dict] = {name: {} for name in program.states}
    restore_serial_state(rt, stores, program, start.state, outputs=start.resumed)
    names = {id(d): name for name, d in stores.items()}
    state = {
        "states": state_declarations(program),
        "stores": stores,
        "future": [
            (at, n, names[id(d)], op, key, arg) for at, n, d, _dflt, op, key, arg in rt.future
        ],
        "scheduled": list(rt.scheduled),
        "order": next(rt.order),
        "scheduled_per_root": dict(rt.scheduled_per_root),
        "quarantined": list(start.state.get("quarantined", [])) if start.resumed else [],
    }
    return notes, state


def _state_after(program: Any, finals: dict, carried: list, quarantined: list) -> dict[str, Any]:
    """The serial engine's state after an epoch, from what the passes reported: their
    states' values (``finals``) and the entries they carried (``(tag, position, blob)``, each
    once: a write that several passes hold and an event that several passes handle come back
    from each of them)."""
    entries = sorted(carried, key=_BY_POSITION)
    if len(entries) >= MIN_KEYS and {entry[0] for entry in entries} == {W.TAG_WRITE}:
        # Timed writes only (the common case), many: made as columns for the commit.
        future, n = _writes_as_columns(entries)
        return {
            "states": state_declarations(program),
            "stores": {name: dict(values) for name, values in finals.items()},
            "future": future,
            "scheduled": [],
            "order": n,
            "scheduled_per_root": {},
            "quarantined": quarantined,
        }
    future: list = []
    scheduled: list = []
    per_root: dict[int, int] = {}
    last = None
    n = 0
    for tag, pos, blob in entries:
        if (pos, tag) == last:  # (the same entry from another pass: sorted next to it)
            continue
        last = (pos, tag)
        value = pickle.loads(blob) if type(blob) is bytes else blob  # (batched: unpickled)
        if tag == W.TAG_WRITE:
            name, key, op = value
            # (at, n, state, op, key, arg): the serial engine's order of fields.
            future.append((pos[0], n, name, *_serial_op(op, name, key)))
        else:
            kind, fields, root, seq, *made = value
            scheduled.append((pos[0], n, ScheduledEvent(kind, pos[0], root, seq, fields)))
            per_root[root] = max(per_root.get(root, 0), made[0] if made else seq)
        n += 1
    return {
        "states": state_declarations(program),
        "stores": {name: dict(values) for name, values in finals.items()},
        "future": future,
        "scheduled": scheduled,
        "order": n,
        "scheduled_per_root": per_root,
        "quarantined": quarantined,
    }


_BY_POSITION = operator.itemgetter(1, 0)


def _writes_as_columns(entries: list) -> tuple[Any, int]:
    """Timed writes carried at an end (``(tag, position, blob)``, sorted by position), each
    once, as the serial engine's state holds them, numbered in that order: as columns for
    the commit (``FutureColumns``) where they fit, else as its tuples. Also how many."""
    at: list = []
    states: list = []
    ops: list = []
    keys: list = []
    args: list = []
    last = None
    for _tag, pos, blob in entries:
        if pos == last:  # (the same write from another pass: sorted next to it)
            continue
        last = pos
        name, key, op = pickle.loads(blob) if type(blob) is bytes else blob
        at.append(pos[0])
        states.append(name)
        keys.append(key)
        if op[0] in ("add", "set", "merge"):
            ops.append(op[0])
            args.append(op[1])
        else:
            ops.append(_serial_op(op, name, key)[0])
            args.append(None)
    n = len(at)
    parts = [at, range(n), states, ops, keys, args]
    made = future_parts_columns(parts)
    return (FutureColumns(*made) if made is not None else list(zip(*parts))), n


def _serial_op(op: tuple, state: str, key: Any) -> tuple[str, Any, Any]:
    """A pass's write operation as the serial engine's (operation, key, argument)."""
    if op[0] in ("add", "set", "merge"):
        return op[0], key, op[1]
    if op[0] == "del":
        return "del", key, None
    raise CheckpointError(f"a timed write to {state!r} ({op[0]}) cannot be checkpointed")
