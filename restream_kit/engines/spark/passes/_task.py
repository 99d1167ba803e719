"""One pass in one Spark task: a stage's handlers over one partition, in serial order.

The task gets its partition's rows sorted by position (``_rs_t``, ``_rs_ph``, ``_rs_o``,
``_rs_sub``, ``_rs_tag``) and runs the program's own compiled handlers over them, as the serial
engine does, with three kinds of rows besides events (see ``passes._plan``): probe values (tag 0,
just before their event), writes into a state held here (tag 2) and scheduled events (tag 3).
What the handlers make goes through the positioned runtime (:mod:`restream_kit.runtime.positioned`,
adapted in ``passes._task_runtime``): its own timed writes and scheduled events wait in the
runtime's heap, keyed by the same positions, so that they interleave with the incoming rows
exactly as in a serial replay, and the runtime's flush runs what is left after the log.

A checkpointed replay runs the passes once over the log, and each task reports its state at
every epoch's end as it passes it (``passes._boundaries``). A resumed one (or one started from a
checkpoint) gets the state it starts from as rows (``passes._epochs``): the values of the states
held here (tag 4, before everything), and the timed writes and scheduled events waiting
there, at their positions.

How the task reads its input (a file arranged by the driver, packed rows, events merged with
looked-up values) is :func:`_input`; a pass that runs the serial engine's inlined loop is
``passes._plain``.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from ....compiler.compile import compile_program
from ....model.program import Program
from ....runtime.positioned import WRITE
from ....runtime.semantics import ScheduledEvent
from ..._gc import collector_paused
from .._faults import inject_fault
from .._history import TaskHistory
from .._program_ref import column_values as _column_values
from .._program_ref import event_type, key_function, load_program
from ._boundaries import Ends, state_row, unhandled_rows, waiting_rows
from ._copies import CopyFeed, VersionRecorder
from ._narrow import run_narrow
from ._output_files import task_files
from ._plain import run_plain
from ._rows import (
    AFTER_RUN,
    BATCH_ROWS,
    BLOB_ROWS,
    EMIT,
    ERROR,
    FINAL,
    PEND,
    PH_LOG,
    PH_TIMED,
    QUAR,
    STAT,
    TAG_EVENT,
    TAG_PROBE,
    TAG_STATE,
    TAG_VERS,
    TAG_WRITE,
    PassSpec,
    dumps,
    for_driver,
    out_batch,
    out_schema,
)
from ._runner import kind_runner
from ._sources import task_input
from ._stores import BlindStore, JournalStore, RecordingStore, apply_op
from ._task_runtime import TaskRuntime, just_after

__all__ = ["PassTask", "warm_batches"]


def warm_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A pass's task that replays nothing (``_workers.start_workers``): sent by reference,
    it makes an Arrow job's Python worker import this module, and so what a pass imports."""
    yield from batches


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
        # Its rows as its source sends them, and its share of the state a replay starts from.
        batches, start = task_input(spec.source, batches)
        if spec.narrow and start is None:
            yield from run_narrow(spec, program, batches, started)
            return
        if spec.plain:
            yield from run_plain(spec, program, batches, started, start)
            return
        if start is not None:
            raise RuntimeError(f"pass {spec.index} got a start state but runs no plain loop")
        yield from _TaskLoop(spec, program).run(batches, started)


def _stores(spec: PassSpec, program: Program, rt: TaskRuntime) -> dict[str, dict]:
    """The stores the handlers write through (``passes._stores``)."""
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
    return stores


def _actions(spec: PassSpec, program: Program, fns: tuple) -> tuple[dict, dict]:
    """Per kind, what to do at each handler number, in declaration order (handlers run
    here, probes served); and the probe slots per reading pass."""
    mine = set(spec.handlers)
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
    serve_slots: dict[int, list] = {}
    for slot, _state, _key, _h, _kinds, reader in spec.serves:
        serve_slots.setdefault(reader, []).append(slot)
    return actions, serve_slots


class _TaskLoop:
    """The handler loop of a general pass: its rows in position order, through the runtime."""

    def __init__(self, spec: PassSpec, program: Program):
        self.spec = spec
        rt = self.rt = TaskRuntime(spec, program)
        stores = self.stores = _stores(spec, program, rt)
        compiled = compile_program(program, rt, stores)
        # Broadcast reads (``passes._copies``): a fold recording versions, or a pass holding copies.
        self.recorder = None
        if spec.versions_to:
            (home,) = spec.homes
            self.recorder = VersionRecorder(home, stores[home], program.states[home].default)
        rt.recorder = self.recorder
        rt.copies = CopyFeed(stores) if spec.copies else None
        if spec.history:  # the run's history: values at the reading handlers' places
            rt.history = TaskHistory(spec.history, program, stores)
        rt.store_names = {id(d): name for name, d in stores.items()}
        rt.defaults = {name: decl.default for name, decl in program.states.items()}
        actions, serve_slots = _actions(spec, program, compiled.handlers)
        self.probe_cols = {r: f"_rs_pk{r}" for r in serve_slots}
        self.probe_values: dict[int, Any] = {}
        self.pks_now: dict[int, list] = {}  # the batch's partition values of reading passes
        self.runners = {
            kind: kind_runner(kind, acts, program, rt, stores, self.probe_values, self.pks_now)
            for kind, acts in actions.items()
        }
        rt.run_event = self.run_event
        self.make = event_type(spec.columns)
        self.schema = out_schema(spec.slots)
        self.events = 0
        # An event waits until the writes of its own runs in earlier passes, which sort
        # right after it, have come in: [event, position, partition values, writes].
        self.waiting: list = []
        # A checkpoint's epochs' ends, reported as this task passes them (``passes._boundaries``).
        self.ends = Ends(spec.bounds) if spec.bounds else None
        self.marks: list[int] = []  # the emitted rows before each end
        self.next_lsn = self.ends.next_lsn if self.ends is not None else 1 << 63
        self.last_ts = spec.last_ts
        self.receives_writes = spec.receives_writes

    def run_event(self, ev: Any, pos: tuple, i: Any, writes: Any) -> None:
        """Run ``ev``'s handlers and probes in declaration order; ``writes`` (from earlier
        passes' runs of the same event) go in before the first action after their run."""
        rt = self.rt
        runner = self.runners.get(ev[2])
        rt.event = ev
        rt.pos = pos
        rt.seq = ev.seq if isinstance(ev, ScheduledEvent) else 0
        if runner is not None:
            runner(ev, pos, i, writes)
        elif writes:
            for _sub, state, key, op in writes:
                apply_op(self.stores[state], rt.defaults[state], key, op, True)
        self.probe_values.clear()

    def run_waiting(self) -> None:
        waiting = self.waiting
        ev, pos, i, writes = waiting
        waiting.clear()
        self.run_event(ev, pos, i, writes)

    def cross(self) -> int:
        """Report the next epoch's end: what the serial engine's checkpoint holds there."""
        rt, ends = self.rt, self.ends
        j = ends.passing()
        if self.waiting:
            self.run_waiting()
        end = ends.bounds[j]
        if rt.pos[:3] != end:  # (as at an epoch's end below)
            rt.settle((*end, b""))
        self.marks.append(len(rt.rows))
        rt.out.extend(waiting_rows(rt.heap, rt.per_root, j))
        rt.out.extend(unhandled_rows(rt.unhandled, end, j))
        order = self.recorder.order() if self.recorder is not None else None
        rt.out.append(state_row(j, self.stores, self.spec.finals, rt.made, order))
        return ends.next_lsn

    def run(self, batches: Iterator[pa.RecordBatch], started: float) -> Iterator[pa.RecordBatch]:
        """The task's rows in, its rows for the driver and later passes out."""
        spec, rt = self.spec, self.rt
        try:
            for batch in batches:
                if not batch.num_rows:
                    continue
                if spec.receives:
                    self._rows(batch)
                else:  # log events only, with no position columns but their own
                    self._log_events(batch)
                if len(rt.out) >= BATCH_ROWS:
                    yield out_batch(rt, self.schema, spec.slots)
            self._after_log()
        except Exception as exc:  # noqa: BLE001 - the driver replays serially for the exact error
            rt.out.append(for_driver(ERROR, pickle.dumps(repr(exc), protocol=5)))
            yield out_batch(rt, self.schema, spec.slots)
            return
        yield from self._results(started)

    def _events(self, batch: pa.RecordBatch) -> list:
        """The batch's events' values (a row per event), and its partition values of the
        passes reading values probed here."""
        spec = self.spec
        cols = [_column_values(batch, c, c in spec.pickled_columns) for c in spec.columns]
        for r, c in self.probe_cols.items():
            self.pks_now[r] = batch.column(c).to_pylist()
        return list(zip(*cols))

    def _log_events(self, batch: pa.RecordBatch) -> None:
        """A batch of log events only: no waiting for writes, no probe values."""
        rt, runners, make = self.rt, self.runners, self.make
        n = batch.num_rows
        ts = batch.column("ts").to_pylist()
        order = batch.column("lsn").to_pylist()
        rows = self._events(batch)
        heap = rt.heap
        next_lsn = self.next_lsn
        for i in range(n):
            if order[i] > next_lsn:  # log events only: in lsn order
                next_lsn = self.cross()
                while order[i] > next_lsn:
                    next_lsn = self.cross()
            ev = tuple.__new__(make, rows[i])
            pos = (ts[i], PH_LOG, order[i], b"")
            if heap and heap[0][0] < pos:
                rt.settle(pos)
            runner = runners.get(ev[2])
            if runner is not None:
                rt.event = ev
                rt.pos = pos
                rt.seq = 0
                runner(ev, pos, i, ())
        self.next_lsn = next_lsn
        self.events += n

    def _rows(self, batch: pa.RecordBatch) -> None:
        """A batch of positioned rows: events, probe values, writes, scheduled events."""
        ts = batch.column("_rs_t").to_pylist()
        ph = batch.column("_rs_ph").to_pylist()
        order = batch.column("_rs_o").to_pylist()
        sub = batch.column("_rs_sub").to_pylist()
        tags = batch.column("_rs_tag").to_pylist()
        rows = self._events(batch) if TAG_EVENT in tags else []
        payload = batch.column("_rs_b").to_pylist()
        probes = {}
        for slot, _s, _k, _h in self.spec.consumes:
            probes[slot] = (
                batch.column(f"_rs_ql{slot}").to_pylist(),
                batch.column(f"_rs_qd{slot}").to_pylist(),
                batch.column(f"_rs_qb{slot}").to_pylist(),
            )
        row = self._row
        for i in range(batch.num_rows):
            row(i, (ts[i], ph[i], order[i], sub[i] or b""), tags[i], payload[i], rows, probes)

    def _row(self, i: int, pos: tuple, tag: int, blob: bytes, rows: list, probes: dict) -> None:
        """One positioned row, after what comes before it (ends passed, waiting entries)."""
        rt, ends, waiting = self.rt, self.ends, self.waiting
        while ends is not None and (
            pos[:3] > ends.next or (pos[:3] == ends.next and pos[3].startswith(AFTER_RUN))
        ):  # (an event scheduled for its maker's time runs after the end)
            self.cross()
        if ends is not None and ends.passed:
            ends.in_flight(rt.out, tag, None, pos, blob)
        if tag == TAG_STATE:  # the state the replay starts from
            state, key, value = pickle.loads(blob)
            dict.__setitem__(self.stores[state], key, value)
            if self.recorder is not None:
                self.recorder.applied(state, key, pos)
            return
        if tag == TAG_VERS:
            rt.copies.add(blob)
            return
        if waiting:
            wpos = waiting[1]
            if tag == TAG_WRITE and pos[:3] == wpos[:3] and pos[3].startswith(wpos[3]):
                state, key, op = pickle.loads(blob)
                waiting[3].append((pos[3], state, key, op))
                return
            self.run_waiting()
        # Everything but a timed write after the log's end means an event ran at its time,
        # so this task's own timed writes before it are due.
        heap = rt.heap
        if (
            heap
            and heap[0][0] < pos
            and (tag != TAG_WRITE or pos[0] <= self.last_ts or pos[1] != PH_TIMED)
        ):
            rt.settle(pos)
        if tag == TAG_EVENT:
            self.events += 1
            ev = tuple.__new__(self.make, rows[i])
            if not self.receives_writes:  # nothing can come after it: run it now
                self.run_event(ev, pos, i, ())
                return
            # Its partition values now: the batch may end before it runs.
            pks_now = self.pks_now
            pk_of = {r: v[i] for r, v in pks_now.items()} if pks_now else None
            waiting[:] = [ev, pos, pk_of, []]
        elif tag == TAG_PROBE:
            for slot, (ql, qd, qb) in probes.items():
                if ql[i] is not None:
                    self.probe_values[slot] = ql[i]
                elif qd[i] is not None:
                    self.probe_values[slot] = qd[i]
                elif qb[i] is not None:
                    self.probe_values[slot] = pickle.loads(qb[i])
        elif tag == TAG_WRITE:
            self._write(pos, blob)
        else:
            kind, fields, root, seq, *made = pickle.loads(blob)
            if made:  # carried from an earlier epoch: the root's count so far
                rt.per_root[root] = max(rt.per_root.get(root, 0), made[0])
            ev = ScheduledEvent(kind, pos[0], root, seq, fields)
            rt.ran_scheduled += 1
            waiting[:] = [ev, pos, None, []]

    def _write(self, pos: tuple, blob: bytes) -> None:
        """A write another pass made into a state held here."""
        rt = self.rt
        state, key, op = pickle.loads(blob)
        if pos[1] == PH_TIMED and pos[0] > self.spec.last_ts:
            # Applied only if an event comes after it: wait in the heap.
            rt.wait(pos, WRITE, (self.stores[state], rt.defaults[state], key, op, state, True))
        else:
            apply_op(self.stores[state], rt.defaults[state], key, op, True)
            if self.recorder is not None:
                self.recorder.applied(state, key, pos)

    def _after_log(self) -> None:
        """After the log: timed writes up to its last time, then scheduled events, each
        after the timed writes before it (the runtime's flush); later timed writes go to
        the driver, which applies those due by the last event anywhere."""
        spec, rt, ends = self.spec, self.rt, self.ends
        if self.waiting:
            self.run_waiting()
        while ends is not None and ends.passed < len(ends.bounds):
            self.cross()  # the ends after this task's last row
        rt.settle((spec.last_ts, PH_LOG + 1))
        rt.flush(spec.max_flush, just_after)
        if self.recorder is not None:
            self.recorder.waiting(rt.heap)
        for pos, _n, _what, (_d, _default, key, op, state, incoming) in sorted(rt.heap):
            blob = dumps((state, key, op))
            rt.out.append((PEND, -1, None, pos, blob))
            if not incoming and state in spec.feeds:
                # Its passes folding the state wait for it too: a copy made from them
                # reads it on an event after the log (the driver applies it once).
                rt.write_rows(key, pos, blob, spec.feeds[state], state)

    def _results(self, started: float) -> Iterator[pa.RecordBatch]:
        """What the task reports once its rows are run: emitted rows, finals, counts."""
        spec, rt, recorder = self.spec, self.rt, self.recorder
        if recorder is not None:
            rt.out.extend(recorder.rows(spec.versions_to, spec.spread, spec.ranges))
        if rt.out:
            yield out_batch(rt, self.schema, spec.slots)
        # Emitted rows, each epoch's apart when a checkpoint's ends were passed (-1: none).
        marks = self.marks
        if not marks:  # (a large table written as a file, ``_output_files``)
            rt.rows, written = task_files(spec.outputs, rt.rows)
            rt.out.extend(written)
        cuts = [0, *marks, len(rt.rows)]
        for j in range(len(cuts) - 1):
            part = rt.rows[cuts[j] : cuts[j + 1]]
            for start in range(0, len(part), BLOB_ROWS):
                blob = dumps(part[start : start + BLOB_ROWS])
                rt.out.append(for_driver(EMIT, blob, j if marks else -1))
        if rt.quarantined:
            rt.out.append(for_driver(QUAR, dumps(rt.quarantined)))
        for name in spec.finals:
            blob = dumps((name, dict(self.stores[name])))
            rt.out.append(for_driver(FINAL, blob))
        if recorder is not None:  # (no values: where its keys came in)
            for name, where in recorder.order().items():
                rt.out.append(for_driver(FINAL, dumps((name, None, where))))
        if rt.history is not None:
            rt.out.append(rt.history.row())
        ran = self.events + rt.ran_scheduled
        stat = (ran, time.perf_counter() - started, rt.made, rt.last_at)
        rt.out.append(for_driver(STAT, pickle.dumps(stat, protocol=5)))
        yield out_batch(rt, self.schema, spec.slots)
