"""One pass in one Spark task: a stage's handlers over one partition, in serial order.

The task gets its partition's rows sorted by position (``_rs_t``, ``_rs_ph``, ``_rs_o``,
``_rs_sub``, ``_rs_tag``) and runs the program's own compiled handlers over them, as the serial
engine does, with three kinds of rows besides events (see ``passes._plan``): probe values (tag 0,
just before their event), writes into a state held here (tag 2) and scheduled events (tag 3).
Its own timed writes and scheduled events wait in one heap, keyed by the same positions, so
that they interleave with the incoming rows exactly as in a serial replay.

A checkpointed replay runs the passes once over the log, and each task reports its state at
every epoch's end as it passes it (``passes._boundaries``). A resumed one (or one started from a
checkpoint) gets the state it starts from as rows (``passes._epochs``): the values of the states
held here (tag 4, before everything), and the timed writes and scheduled events waiting
there, at their positions.

A position is ``(t, phase, o, sub)``: a log event is ``(ts, 2, row, b"")``; a scheduled event
``(at, 1, 0, run + i)`` and a timed write ``(at, 0, 0, run + i)``, where ``run`` is the bytes
of the scheduling run's position and handler and ``i`` its count of such calls; an ordinary
write ``(t, ph, o, sub + handler + i)`` of its run. Bytes compare as the tuples they encode.
"""

from __future__ import annotations

import heapq
import pickle
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from ....compiler.compile import compile_program
from ....model.program import Program
from ....runtime.quarantine import quarantine_row
from ....runtime.semantics import (
    ScheduledEvent,
    apply_write,
    check_schedule,
    check_write,
    drop_newest,
    flush_overrun,
    undo_journal,
)
from ..._gc import collector_paused
from .._faults import inject_fault
from .._program_ref import column_values as _column_values
from .._program_ref import event_type, key_function, load_program
from ._boundaries import Ends, state_row, unhandled_rows, waiting_rows
from ._copies import CopyFeed, VersionRecorder
from ._local_arrangement import local_batches, local_part, local_start
from ._lookups import merged_events
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
    PH_SCHED,
    PH_TIMED,
    QUAR,
    SCHED,
    STAT,
    TAG_EVENT,
    TAG_PROBE,
    TAG_STATE,
    TAG_VERS,
    TAG_WRITE,
    U32,
    PassSpec,
    Routing,
    U32x2,
    dumps,
    out_batch,
    out_schema,
    position_bytes,
)
from ._runner import kind_runner
from ._setup import unpacked
from ._start_shares import start_of
from ._stores import BlindStore, JournalStore, RecordingStore, apply_op, carried

__all__ = ["PassTask"]


class _Runtime(Routing):
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
        self.ran_scheduled = 0  # scheduled events run here (from here or earlier passes)
        self.pending_sched = 0  # scheduled events waiting in the heap
        self.last_at = None  # the latest time an event was scheduled for
        self.store_names: dict[int, str] = {}
        self.feeds = spec.feeds
        self.journal: list | None = [] if spec.on_error != "stop" else None
        self.quarantined: list = []
        self.write_pos: tuple | None = None  # the position of a timed write being applied
        self.rb: bytes | None = None  # the current run's bytes, once made
        self.pk_cache: dict = {}
        self.history: Any = None  # the run's history values recorded here (``_history``)
        self.copies: CopyFeed | None = None  # the copies held here (``passes._copies``)
        self.unhandled: list = []  # scheduled for kinds no pass handles (``passes._boundaries``)

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
            undo_journal(journal)
            rows, out, n, self.scheduled, self.last_at = marks
            del self.rows[rows:]
            del self.out[out:]
            if self.n > n:  # (its timed writes and scheduled events: the newest numbers)
                drop_newest(self.heap, self.n - n)
                self.pending_sched = sum(1 for entry in self.heap if entry[2] == 1)
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
            rb = self.rb = position_bytes(self.pos) + U32.pack(self.hidx)
        return rb

    # -- called by compiled handlers -------------------------------------------------------

    def write(self, d: dict, default: Any, op: str, key: Any, arg: Any, at: int | None) -> None:
        now = self.event[1]
        if at is None or at == now:
            if type(d) is BlindStore:
                self.ship(d.state, key, carried(op, arg), None, self.spec.blind[d.state])
            else:
                apply_write(d, default, op, key, arg)
            return
        check_write(at, now)
        shipped = carried(op, arg)
        if type(d) is BlindStore:
            self.ship(d.state, key, shipped, at, self.spec.blind[d.state])
            return
        self.calls += 1
        position = (at, PH_TIMED, 0, self._run_bytes() + U32.pack(self.calls))
        self.n += 1
        entry = (d, default, key, shipped, self.store_names[id(d)], False)
        heapq.heappush(self.heap, (position, self.n, 0, entry))

    def emit(self, table: str, **fields: Any) -> None:
        ev = self.event
        self.rows.append((table, ev[0], ev[1], self.handler, self.seq, fields, self.pos, self.hidx))

    def schedule(self, kind: str, *, at: int, **fields: Any) -> None:
        ev = self.event
        check_schedule(at, ev[1], fields)
        root = ev[0]
        seq = self.per_root[root] = self.per_root.get(root, 0) + 1
        self.scheduled += 1
        if self.last_at is None or at > self.last_at:
            self.last_at = at
        event = ScheduledEvent(kind, at, root, seq, fields)
        self.calls += 1
        t, ph, o, sub = self.pos
        if at == t and ph == PH_LOG:  # after this run, before the next log event
            position = (at, PH_LOG, o, sub + AFTER_RUN + U32x2.pack(self.hidx, self.calls))
        else:
            position = (at, PH_SCHED, 0, self._run_bytes() + U32.pack(self.calls))
        targets = self.spec.kind_passes.get(kind, ())
        if not targets and self.spec.bounds:  # a checkpoint holds it until its time
            self.unhandled.append((position, dumps((kind, fields, root, seq))))
        for target in targets:
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
                position = (t, ph, o, sub + U32x2.pack(self.hidx, self.calls))
            else:
                position = (at, PH_TIMED, 0, self._run_bytes() + U32.pack(self.calls))
        self.write_rows(key, position, dumps((state, key, op)), targets, state)


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
        start = None  # its share of the state a replay starts from (``passes._start_shares``)
        if spec.local is not None:  # arranged by the driver: its events from a file
            part = local_part(batches)
            share = local_start(spec.local, part)
            start = None if share is None else start_of(share)
            batches = local_batches(spec.local, part)
        if spec.packed:
            batches = unpacked(batches)
        if spec.looked_up:  # its events packed by the pass that looked its key up
            batches = merged_events(batches, spec.looked_up_files)
        if spec.plain:
            yield from run_plain(spec, program, batches, started, start)
            return
        if start is not None:
            raise RuntimeError(f"pass {spec.index} got a start state but runs no plain loop")
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
        # Broadcast reads (``passes._copies``): a fold recording versions, or a pass holding copies.
        recorder = None
        if spec.versions_to:
            (home,) = spec.homes
            recorder = VersionRecorder(home, stores[home], program.states[home].default)
        rt.copies = CopyFeed(stores) if spec.copies else None
        if spec.history:  # the run's history: values at the reading handlers' places
            from .._history import TaskHistory

            rt.history = TaskHistory(spec.history, program, stores)
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
        schema = out_schema(slots)
        probe_cols = {r: f"_rs_pk{r}" for r in serve_slots}
        events = 0
        probe_values: dict[int, Any] = {}

        pks_now: dict[int, list] = {}  # the batch's partition values of reading passes
        runners = {
            kind: kind_runner(kind, acts, program, rt, stores, probe_values, pks_now)
            for kind, acts in actions.items()
        }

        def run_event(ev: Any, pos: tuple, i: int | None, writes: Any) -> None:
            """Run ``ev``'s handlers and probes in declaration order; ``writes`` (from earlier
            passes' runs of the same event) go in before the first action after their run."""
            runner = runners.get(ev[2])
            rt.event = ev
            rt.pos = pos
            rt.seq = ev.seq if isinstance(ev, ScheduledEvent) else 0
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
                    d, default, key, op, state, incoming = payload
                    if pos[0] > last_ts and state in spec.finals:
                        # Due after the log and applied here, to a final value: the driver
                        # must not apply it again where another holder reports it waiting.
                        rt.out.append((PEND, -1, None, pos, dumps((state, key, None))))
                    if incoming:
                        apply_op(d, default, key, op, True)
                        if recorder is not None:
                            recorder.applied(state, key, pos)
                    else:
                        rt.write_pos = pos
                        apply_op(d, default, key, op)
                        rt.write_pos = None
                else:
                    rt.pending_sched -= 1
                    rt.ran_scheduled += 1
                    run_event(payload, pos, None, [])

        # An event waits until the writes of its own runs in earlier passes, which sort
        # right after it, have come in: [event, position, partition values, writes].
        waiting: list = []

        def run_waiting() -> None:
            ev, pos, i, writes = waiting
            waiting.clear()
            run_event(ev, pos, i, writes)

        # A checkpoint's epochs' ends, reported as this task passes them (``passes._boundaries``).
        ends = Ends(spec.bounds) if spec.bounds else None
        marks: list[int] = []  # the emitted rows before each end
        next_lsn = ends.next_lsn if ends is not None else 1 << 63  # (log events: by lsn)

        def cross() -> int:
            """Report the next epoch's end: what the serial engine's checkpoint holds there."""
            j = ends.passing()
            if waiting:
                run_waiting()
            end = ends.bounds[j]
            if rt.pos[:3] != end:  # (as at an epoch's end below)
                settle((*end, b""))
            marks.append(len(rt.rows))
            rt.out.extend(waiting_rows(rt.heap, rt.per_root, j))
            rt.out.extend(unhandled_rows(rt.unhandled, end, j))
            order = recorder.order() if recorder is not None else None
            rt.out.append(state_row(j, stores, spec.finals, rt.scheduled, order))
            return ends.next_lsn

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
                        if order[i] > next_lsn:  # log events only: in lsn order
                            next_lsn = cross()
                            while order[i] > next_lsn:
                                next_lsn = cross()
                        ev = tuple.__new__(make, rows[i])
                        pos = (ts[i], PH_LOG, order[i], b"")
                        if heap and heap[0][0] < pos:
                            settle(pos)
                        runner = runners.get(ev[2])
                        if runner is not None:
                            rt.event = ev
                            rt.pos = pos
                            rt.seq = 0
                            runner(ev, pos, i, ())
                    events += n
                    if len(rt.out) >= BATCH_ROWS:
                        yield out_batch(rt, schema, slots)
                    continue
                payload = batch.column("_rs_b").to_pylist() if spec.receives else ()
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
                    while ends is not None and (
                        pos[:3] > ends.next
                        or (pos[:3] == ends.next and pos[3].startswith(AFTER_RUN))
                    ):  # (an event scheduled for its maker's time runs after the end)
                        cross()
                    if ends is not None and ends.passed:
                        ends.in_flight(rt.out, tag, None, pos, payload[i])
                    if tag == TAG_STATE:  # the state the replay starts from
                        state, key, value = pickle.loads(payload[i])
                        dict.__setitem__(stores[state], key, value)
                        if recorder is not None:
                            recorder.applied(state, key, pos)
                        continue
                    if tag == TAG_VERS:
                        rt.copies.add(payload[i])
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
                        and (tag != TAG_WRITE or pos[0] <= last_ts or pos[1] != PH_TIMED)
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
                        if pos[1] == PH_TIMED and pos[0] > last_ts:
                            # Applied only if an event comes after it: wait in the heap.
                            rt.n += 1
                            entry = (stores[state], rt.defaults[state], key, op, state, True)
                            heapq.heappush(rt.heap, (pos, rt.n, 0, entry))
                        else:
                            apply_op(stores[state], rt.defaults[state], key, op, True)
                            if recorder is not None:
                                recorder.applied(state, key, pos)
                    else:
                        kind, fields, root, seq, *made = pickle.loads(payload[i])
                        if made:  # carried from an earlier epoch: the root's count so far
                            rt.per_root[root] = max(rt.per_root.get(root, 0), made[0])
                        ev = ScheduledEvent(kind, pos[0], root, seq, fields)
                        rt.ran_scheduled += 1
                        waiting[:] = [ev, pos, None, []]
                if len(rt.out) >= BATCH_ROWS:
                    yield out_batch(rt, schema, slots)
            if waiting:
                run_waiting()
            while ends is not None and ends.passed < len(ends.bounds):
                cross()  # the ends after this task's last row
            # After the log: timed writes up to its last time, then scheduled events,
            # each after the timed writes before it; later timed writes go to the
            # driver, which applies those due by the last event anywhere.
            settle((last_ts, PH_LOG + 1))
            flushed = 0
            while rt.heap and rt.pending_sched:
                flushed += 1
                if flushed > spec.max_flush:
                    raise flush_overrun(spec.max_flush)
                # One entry: a timed write (a scheduled event still follows it) or an event.
                settle((*rt.heap[0][0][:3], rt.heap[0][0][3] + b"\x00"))
            if recorder is not None:
                recorder.waiting(rt.heap)
            for pos, _n, _what, (_d, _default, key, op, state, incoming) in sorted(rt.heap):
                blob = dumps((state, key, op))
                rt.out.append((PEND, -1, None, pos, blob))
                if not incoming and state in spec.feeds:
                    # Its passes folding the state wait for it too: a copy made from them
                    # reads it on an event after the log (the driver applies it once).
                    rt.write_rows(key, pos, blob, spec.feeds[state], state)
        except Exception as exc:  # noqa: BLE001 - the driver replays serially for the exact error
            rt.out.append((ERROR, -1, None, (0, 0, 0, b""), pickle.dumps(repr(exc), protocol=5)))
            yield out_batch(rt, schema, slots)
            return
        if recorder is not None:
            rt.out.extend(recorder.rows(spec.versions_to, spec.spread, spec.ranges))
        if rt.out:
            yield out_batch(rt, schema, slots)
        # Emitted rows, each epoch's apart when a checkpoint's ends were passed (-1: none).
        if not marks:  # (a large table written as a file, ``_output_files``)
            rt.rows, written = task_files(spec.outputs, rt.rows)
            rt.out.extend(written)
        cuts = [0, *marks, len(rt.rows)]
        for j in range(len(cuts) - 1):
            part = rt.rows[cuts[j] : cuts[j + 1]]
            for start in range(0, len(part), BLOB_ROWS):
                blob = dumps(part[start : start + BLOB_ROWS])
                rt.out.append((EMIT, j if marks else -1, None, (0, 0, 0, b""), blob))
        if rt.quarantined:
            rt.out.append((QUAR, -1, None, (0, 0, 0, b""), dumps(rt.quarantined)))
        for name in spec.finals:
            blob = dumps((name, dict(stores[name])))
            rt.out.append((FINAL, -1, None, (0, 0, 0, b""), blob))
        if recorder is not None:  # (no values: where its keys came in)
            for name, where in recorder.order().items():
                rt.out.append((FINAL, -1, None, (0, 0, 0, b""), dumps((name, None, where))))
        if rt.history is not None:
            rt.out.append(rt.history.row())
        ran = events + rt.ran_scheduled
        stat = (ran, time.perf_counter() - started, rt.scheduled, rt.last_at)
        rt.out.append((STAT, -1, None, (0, 0, 0, b""), pickle.dumps(stat, protocol=5)))
        yield out_batch(rt, schema, slots)
