"""The serial engine: one event at a time, in the kernel. The oracle every engine must equal.

State lives in plain dicts (see ``_compile``). Writes with ``at=`` wait in a heap until the
replay reaches their time; scheduled events wait in another. Before an event at time ``t``
runs, every scheduled event with time <= ``t`` runs (each preceded by the timed writes due by
its own time), then every timed write with ``at`` <= ``t`` is applied, which is exactly the
order of (time, position of the writing run, position within the run) that the SPEC defines.
"""

from __future__ import annotations

import heapq
import itertools
import linecache
import time
from collections import defaultdict
from typing import Any

from .. import values
from .._compile import compile_program
from .._inline import SCHEDULED_RUNNER_NAME
from .._poison import check_on_error, event_fields, quarantine_row
from ..checkpoint import Start, check_states, open_for_replay, restore_serial_state, serial_state
from ..epochs import Epoch, cut
from ..errors import HandlerError, RestreamError, StateError, user_lineno
from ..log import Log
from ..program import Program
from ..progress import (
    Cancelled,
    CancelToken,
    EpochFinished,
    EpochStarted,
    Observer,
    Progress,
    ReplayFinished,
    ReplayStarted,
    broadcast,
)
from ..result import Metrics, Result, build_table, quarantine_table
from ._gc import without_collector

__all__ = [
    "replay",
    "SerialRuntime",
    "GuardedRuntime",
    "JournalDict",
    "JOURNAL_ABSENT",
    "ScheduledEvent",
    "MAX_FLUSH",
    "apply_write",
    "quarantine_warning",
    "check_state",
]

#: Scheduled events allowed after the log ends, so that a timer that re-arms itself forever stops.
MAX_FLUSH = 10_000_000
RESERVED_FIELDS = frozenset({"kind", "ts", "lsn", "seq"})


class ScheduledEvent:
    """An event put into the replay by ``schedule``; ``lsn`` is its originating log event's."""

    def __init__(self, kind: str, ts: int, lsn: int, seq: int, fields: dict[str, Any]):
        self.__dict__.update(fields)
        self.kind = kind
        self.ts = ts
        self.lsn = lsn
        self.seq = seq

    def __repr__(self) -> str:
        return f"ScheduledEvent({self.__dict__})"

    def __getitem__(self, index: int) -> Any:
        # Log events are tuples that start (lsn, ts, kind); scheduled events answer the same.
        return (self.lsn, self.ts, self.kind)[index]


def apply_write(d: dict, default: Any, op: str, key: Any, arg: Any) -> None:
    """Apply one write to a store now: set, add, merge (``arg`` is a function) or delete."""
    if op == "set":
        d[key] = arg
    elif op == "add":
        d[key] = d.get(key, default) + arg
    elif op == "merge":
        d[key] = arg(d.get(key, default))
    else:
        d.pop(key, None)


class TimeTravelError(ValueError):
    """A write or a scheduled event earlier than the current event's time."""


class SerialRuntime:
    """The runtime behind compiled handlers in the serial engine."""

    def __init__(self) -> None:
        self.rows: defaultdict[str, list] = defaultdict(list)
        self.future: list = []
        self.scheduled: list = []
        self.order = itertools.count()
        self.scheduled_per_root: defaultdict[int, int] = defaultdict(int)
        self.event: Any = None
        self.seq = 0
        self.handler = ""

    # Called by compiled handlers ----------------------------------------------------

    def write(self, d: dict, default: Any, op: str, key: Any, arg: Any, at: int | None) -> None:
        now = self.event[1]
        if at is None or at == now:
            apply_write(d, default, op, key, arg)
            return
        if at < now:
            raise TimeTravelError(f"write at {at} is earlier than the event's time {now}")
        heapq.heappush(self.future, (at, next(self.order), d, default, op, key, arg))

    def emit(self, table: str, **fields: Any) -> None:
        ev = self.event
        self.rows[table].append((ev[0], ev[1], self.handler, self.seq, fields))

    def schedule(self, kind: str, *, at: int, **fields: Any) -> None:
        if at < self.event[1]:
            raise TimeTravelError(
                f"schedule at {at} is earlier than the event's time {self.event[1]}"
            )
        clash = RESERVED_FIELDS & set(fields)
        if clash:
            raise ValueError(f"scheduled event fields may not be named {sorted(clash)}")
        root = self.event[0]
        self.scheduled_per_root[root] += 1
        event = ScheduledEvent(kind, at, root, self.scheduled_per_root[root], fields)
        heapq.heappush(self.scheduled, (at, next(self.order), event))

    # Driven by the engine -------------------------------------------------------------

    def apply_due(self, t: int) -> None:
        """Apply every timed write with ``at`` <= ``t``, in (at, order made) order."""
        future = self.future
        while future and future[0][0] <= t:
            _at, _n, d, default, op, key, arg = heapq.heappop(future)
            apply_write(d, default, op, key, arg)


#: The old value a journal records for a key that had none.
JOURNAL_ABSENT = object()
_FUTURE, _EMIT, _SCHEDULE = range(3)


class JournalDict(dict):
    """A store that journals every change (key, old value) so that a handler run can be undone.

    Only ``on_error`` skip and quarantine use it; reads stay plain ``dict.get`` calls.
    """

    __slots__ = ("journal",)

    def __init__(self, journal: list):
        super().__init__()
        self.journal = journal

    def __setitem__(self, key: Any, value: Any) -> None:
        self.journal.append((self, key, dict.get(self, key, JOURNAL_ABSENT)))
        dict.__setitem__(self, key, value)

    def pop(self, key: Any, *default: Any) -> Any:
        self.journal.append((self, key, dict.get(self, key, JOURNAL_ABSENT)))
        return dict.pop(self, key, *default)

    def __delitem__(self, key: Any) -> None:
        self.pop(key)


class GuardedRuntime(SerialRuntime):
    """The runtime of ``on_error`` skip and quarantine: a handler run that raises is undone.

    Every change a run makes goes into ``journal`` (cleared when a run starts): store changes
    (through :class:`JournalDict`), timed writes, emitted rows and scheduled events.
    ``rollback`` undoes them newest first and records the run in ``quarantined``, so the
    replay goes on as if that run had never happened.
    """

    def __init__(self, filename: str, columns: list[str]) -> None:
        super().__init__()
        self.journal: list = []
        self.quarantined: list[dict] = []
        self.filename = filename
        self.columns = columns

    def write(self, d: dict, default: Any, op: str, key: Any, arg: Any, at: int | None) -> None:
        pending = len(self.future)
        super().write(d, default, op, key, arg, at)
        if len(self.future) > pending:
            self.journal.append((_FUTURE, None, None))

    def emit(self, table: str, **fields: Any) -> None:
        super().emit(table, **fields)
        self.journal.append((_EMIT, table, None))

    def schedule(self, kind: str, *, at: int, **fields: Any) -> None:
        super().schedule(kind, at=at, **fields)
        self.journal.append((_SCHEDULE, self.event[0], None))

    def rollback(self, exc: BaseException) -> None:
        """Undo the current handler run's changes and record it as quarantined."""
        journal = self.journal
        future_made = sched_made = 0
        while journal:
            target, key, old = journal.pop()
            if target is _FUTURE:
                future_made += 1
            elif target is _EMIT:
                rows = self.rows[key]
                rows.pop()
                if not rows:  # a table only this run emitted to does not exist
                    del self.rows[key]
            elif target is _SCHEDULE:
                sched_made += 1
                self.scheduled_per_root[key] -= 1
            elif old is JOURNAL_ABSENT:
                dict.pop(target, key, None)
            else:
                dict.__setitem__(target, key, old)
        # Entries made by this run carry the newest order numbers: drop the newest ones.
        for heap, made in ((self.future, future_made), (self.scheduled, sched_made)):
            if made:
                newest = sorted(heap, key=lambda entry: entry[1])[-made:]
                drop = {id(entry) for entry in newest}
                heap[:] = [entry for entry in heap if id(entry) not in drop]
                heapq.heapify(heap)
        self.quarantined.append(
            quarantine_row(
                filename=self.filename,
                handler=self.handler,
                event=self.event,
                seq=self.seq,
                columns=self.columns,
                exc=exc,
            )
        )


_PLAIN = frozenset({int, float, str, bool, type(None), bytes})


def check_state(stores: dict[str, dict]) -> None:
    """Raise :class:`StateError` naming the first state key whose value cannot be stored.

    Runs and checkpoints keep state through the value codec (:mod:`restream_kit.values`: plain
    values and containers of them, never pickles), so a replay's final state must fit it;
    plain values are recognised by type, at C speed, before any value is walked.
    """
    for name, d in stores.items():
        key_types = set(map(type, d))
        if set(map(type, d.values())) <= _PLAIN and key_types <= _PLAIN | {tuple}:
            if (
                tuple not in key_types
                or {type(x) for k in d if type(k) is tuple for x in k} <= _PLAIN
            ):
                continue
        bad = values.unstorable(d)
        if bad is not None:
            key, what, obj, exc = bad
            raise StateError(
                f"state {name!r}, key {key!r}: the {what} {obj!r:.80} cannot be "
                f"serialized ({exc}); state must hold plain values"
            )


def quarantine_warning(table: Any, on_error: str) -> str | None:
    """The warning a replay adds when handler runs were rolled back, or None."""
    n = table.num_rows
    if not n:
        return None
    first = table.slice(0, 1).to_pylist()[0]
    return (
        f"{n:,} handler run(s) raised and were rolled back (on_error={on_error!r}); the first: "
        f"handler {first['handler']!r} at line {first['line']} on lsn {first['lsn']}: "
        f"{first['error']} (see Result.quarantine)"
    )


@without_collector
def replay(
    program: Program,
    log: Log,
    *,
    observer: Observer | None = None,
    epoch: int | str | None = None,
    cancel: CancelToken | None = None,
    batch_size: int = 65_536,
    on_error: str = "stop",
    checkpoint: Any = None,
    resume: bool = False,
    start_from: Any = None,
    final: bool = True,
    history: bool = False,
    **_options: Any,
) -> Result:
    """Replay ``log`` through ``program`` one event at a time and return the result.

    ``epoch`` sets how often partial outputs are published (``EpochFinished``); ``cancel``
    stops the replay between batches. ``on_error`` "skip" or "quarantine" rolls back a
    handler run that raises and goes on (see :class:`GuardedRuntime`). ``checkpoint`` (a
    directory) commits every epoch, ``resume`` continues its last committed one, and
    ``start_from`` starts from a committed epoch's state (see :mod:`restream_kit.checkpoint`).
    ``history`` keeps what each stage read of other stages' state in ``Result.history``
    (:mod:`restream_kit.history`).
    """
    notify = broadcast(observer)
    ck, start = _checkpointing(program, log, epoch, checkpoint, resume, start_from)
    on_error = check_on_error(on_error)
    guarded = on_error != "stop"
    rt = GuardedRuntime(program.filename, list(log.columns)) if guarded else SerialRuntime()
    by_kind: dict = {}
    stores = {name: JournalDict(rt.journal) for name in program.states} if guarded else None
    recorded, history_note = _history_stores(program, log, history, guarded, start, ck)
    compiled = compile_program(
        program,
        rt,
        stores,
        columns=log.columns,
        kind_order=log.kinds_by_frequency(),
        extra_globals={
            SCHEDULED_RUNNER_NAME: lambda t: _run_scheduled(rt, by_kind, t),
            **(recorded.globals if recorded is not None else {}),
        },
        guarded=guarded,
        hooks=recorded.hooks if recorded is not None else (),
    )
    by_kind.update(compiled.handlers_by_kind())
    run_batch = compiled.run_batch
    epochs = cut(log, epoch)
    last_index = epochs[-1].index
    total = len(log)
    notes: list[str] = []
    done = 0
    if start is not None:
        notes = _restart(program, rt, compiled.stores, start, compiled.namespace)
        done = start.done
        # Epochs from where the checkpoint stopped (it may have cut the log differently).
        epochs = [Epoch(e.index, max(e.start, done), e.stop) for e in epochs if e.stop > done]
    notify(ReplayStarted("serial", total, len(epochs), ("serial",), log.span_ms))
    started = time.perf_counter()
    published = {name: len(rows) for name, rows in rt.rows.items()}
    committed = dict(published)
    try:
        for ep in epochs:
            notify(EpochStarted(ep.index, len(ep)))
            epoch_started = time.perf_counter()
            for batch in log.iter_events(
                batch_size, named=compiled.needs_named_events, start=ep.start, stop=ep.stop
            ):
                if cancel is not None:
                    cancel.check()
                run_batch(batch)
                done += len(batch)
                notify(Progress(done, total, time.perf_counter() - started))
            if ep.index == last_index and final:
                _run_scheduled(rt, by_kind, float("inf"), limit=MAX_FLUSH)
                if rt.scheduled:
                    raise RestreamError(
                        f"handlers kept scheduling events after the log ended (over {MAX_FLUSH:,}); "
                        "a timer that re-arms itself forever never lets the replay finish"
                    )
            outputs = _new_rows(rt.rows, published) if observer is not None else {}
            last = ep.index == last_index
            if ck is not None:
                new_rows = {n: r[committed.get(n, 0) :] for n, r in rt.rows.items()}
                state = serial_state(rt, compiled.stores, program)
                ck.commit(ep.index, ep.stop, state, new_rows, last=last and final)
                committed = {n: len(r) for n, r in rt.rows.items()}
            # Every event earlier than the epoch's last one has run, scheduled ones included.
            settled = None if last or not len(ep) else log.table.column("ts")[ep.stop - 1].as_py()
            notify(
                EpochFinished(ep.index, done, time.perf_counter() - epoch_started, outputs, settled)
            )
    except (HandlerError, Cancelled) as exc:
        notify(ReplayFinished(done, time.perf_counter() - started, ok=False, error=str(exc)))
        raise
    except Exception as exc:
        error = _handler_error(program, rt, exc, log.columns)
        notify(ReplayFinished(done, time.perf_counter() - started, ok=False, error=str(error)))
        raise error from exc
    wall = time.perf_counter() - started
    tables = {name: build_table(name, rows) for name, rows in rt.rows.items()}
    check_state(compiled.stores)
    metrics = Metrics(
        engine="serial",
        events=total if start is None or start.resumed else total - start.done,
        scheduled_events=sum(rt.scheduled_per_root.values()),
        wall_s=wall,
        span_ms=log.span_ms,
        rows={name: t.num_rows for name, t in tables.items()},
        epochs=len(epochs),
    )
    notify(ReplayFinished(total, wall))
    resumed = start.next_epoch if start is not None and start.resumed else None
    if history_note:
        notes.append(history_note)
    if not guarded:
        result = Result(
            tables=tables,
            state=compiled.stores,
            metrics=metrics,
            warnings=notes,
            resumed_from_epoch=resumed,
        )
        if recorded is not None:
            result.history = recorded.finish(program, log, rt, result)
        return result
    quarantine = quarantine_table(rt.quarantined)
    note = quarantine_warning(quarantine, on_error)
    return Result(
        tables=tables,
        state={name: dict(d) for name, d in compiled.stores.items()},
        metrics=metrics,
        warnings=notes + ([note] if note else []),
        quarantine=quarantine,
        on_error=on_error,
        resumed_from_epoch=resumed,
    )


def _history_stores(program, log, history, guarded, start, ck):
    """The recorder of the run's history (the reads the loop records, see
    :mod:`restream_kit.history`) when ``history`` is asked for and can be kept; else a note."""
    if not history:
        return None, None
    if guarded or start is not None or ck is not None:
        return None, (
            "the run's history was not recorded: it is kept for whole replays that stop on "
            "errors, without checkpoints"
        )
    from ..history import Recorder

    return Recorder(program, log.columns), None


def _checkpointing(program, log, epoch, checkpoint, resume, start_from):
    """The replay's checkpointer and start (None, None without checkpoint options).

    ``checkpoint`` may also be an object with ``load()`` and ``commit()``, as
    :class:`restream_kit.checkpoint.Checkpointer` has (the Spark engine passes one it
    opened itself for a log with no events, so that the checkpoint is a Spark one).
    """
    if checkpoint is None and start_from is None:
        if resume:
            raise RestreamError("resume needs a checkpoint directory (--checkpoint DIR)")
        return None, None
    if checkpoint is not None and hasattr(checkpoint, "commit"):
        return checkpoint, checkpoint.load()
    return open_for_replay(
        program,
        log,
        engine="serial",
        epoch=epoch,
        state_format="serial",
        checkpoint=checkpoint,
        resume=resume,
        start_from=start_from,
    )


def _restart(
    program: Program, rt: SerialRuntime, stores: dict, start: Start, namespace: Any = None
) -> list[str]:
    """Load a committed epoch into a fresh runtime; the notes a changed program gets."""
    state = start.state
    notes = []
    if not start.resumed:
        notes = check_states(program, state["states"], "start_from")
        where = start.info.get("start_from")
        notes.insert(
            0,
            f"started from epoch {start.epoch} of {where} (the state after {start.done:,} "
            "events); the result covers the events after it only",
        )
    # namespace: merge functions read from a checkpoint are rebuilt from this program's code.
    restore_serial_state(rt, stores, program, state, outputs=start.resumed, namespace=namespace)
    for epoch_rows in start.rows:
        for name, rows in epoch_rows.items():
            rt.rows[name].extend(rows)
    return notes


def _new_rows(rows: dict[str, list], published: dict[str, int]) -> dict[str, Any]:
    """Tables of the rows emitted since the last call, for views that stream outputs."""
    out = {}
    for name, table_rows in rows.items():
        start = published.get(name, 0)
        if len(table_rows) > start:
            out[name] = build_table(name, table_rows[start:])
            published[name] = len(table_rows)
    return out


def _run_scheduled(rt: SerialRuntime, by_kind: dict, t: float, limit: int | None = None) -> int:
    """Run scheduled events due by ``t`` (including ones they schedule); return how many ran."""
    ran = 0
    scheduled = rt.scheduled
    while scheduled and scheduled[0][0] <= t and (limit is None or ran < limit):
        at, _n, ev = heapq.heappop(scheduled)
        if rt.future and rt.future[0][0] <= at:
            rt.apply_due(at)
        rt.event = ev
        rt.seq = ev.seq
        if type(rt) is GuardedRuntime:
            _run_guarded(rt, by_kind.get(ev.kind, ()), ev)
        else:
            for name, fn in by_kind.get(ev.kind, ()):
                rt.handler = name
                fn(ev)
        ran += 1
    rt.seq = 0
    return ran


def _run_guarded(rt: GuardedRuntime, handlers: tuple, ev: ScheduledEvent) -> None:
    """A scheduled event's handler runs, each undone when it raises (see GuardedRuntime)."""
    for name, fn in handlers:
        rt.handler = name
        rt.journal.clear()
        try:
            fn(ev)
        except Exception as exc:  # noqa: BLE001 - the run is rolled back and recorded
            rt.rollback(exc)


def _handler_error(
    program: Program, rt: SerialRuntime, exc: BaseException, columns: list[str]
) -> RestreamError:
    """Turn an exception inside a handler into one line: handler, user line, event."""
    if isinstance(exc, RestreamError) and not isinstance(exc, TimeTravelError):
        return exc
    ev = rt.event
    if ev is None:
        return RestreamError(str(exc))
    lsn, ts, kind = ev[0], ev[1], ev[2]
    lineno = user_lineno(exc, program.filename)
    return HandlerError(
        handler=rt.handler,
        filename=program.filename,
        lineno=lineno,
        line=linecache.getline(program.filename, lineno) if lineno else None,
        lsn=lsn,
        seq=rt.seq,
        kind=kind,
        ts=ts,
        cause=exc,
        fields=event_fields(ev, columns),
    )
