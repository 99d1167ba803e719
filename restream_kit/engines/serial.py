"""The serial engine: one event at a time, in the kernel. The oracle every engine must equal.

State lives in plain dicts (see :mod:`restream_kit.compiler.compile`); the runtime of the
serial semantics (timed writes, scheduled events, their order, the flush after the log) is
:mod:`restream_kit.runtime`, which this engine drives with the loop the compiler inlines,
set up by :func:`restream_kit.runtime.loop.compile_loop` (as explanations and Spark plain
passes set theirs up). This module adds what makes a replay: epochs, progress, checkpoints,
``on_error``, the result.
The runtime's names stay importable from here (``SerialRuntime``, ``ScheduledEvent``...).
"""

from __future__ import annotations

import linecache
import time
from typing import Any

from ..history.recorder import Recorder
from ..io.checkpoint import Start, check_states, open_for_replay, restore_serial_state, serial_state
from ..io.epochs import Epoch, cut
from ..io.log import Log
from ..io.progress import (
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
from ..io.result import Metrics, Result, quarantine_table
from ..model.errors import HandlerError, RestreamError, user_lineno
from ..model.program import Program
from ..runtime import (
    JOURNAL_ABSENT,
    MAX_FLUSH,
    RESERVED_FIELDS,
    GuardedRuntime,
    JournalDict,
    ScheduledEvent,
    SerialRuntime,
    TimeTravelError,
    apply_write,
    check_state,
)
from ..runtime.loop import compile_loop
from ..runtime.quarantine import event_fields
from ..runtime.windows import Blocks, Fused, fuse_windows, native_plan
from ._gc import without_collector
from ._window_tables import emitted_table
from .options import SerialOptions

__all__ = [
    "replay",
    "SerialRuntime",
    "GuardedRuntime",
    "JournalDict",
    "JOURNAL_ABSENT",
    "ScheduledEvent",
    "MAX_FLUSH",
    "RESERVED_FIELDS",
    "TimeTravelError",
    "apply_write",
    "quarantine_warning",
    "check_state",
]


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
    options: SerialOptions | None = None,
    **given: Any,
) -> Result:
    """Replay ``log`` through ``program`` one event at a time and return the result, with
    ``options``, else with those built and checked from the keywords ``given``
    (:class:`~restream_kit.engines.options.SerialOptions`; another engine's are set aside).

    ``epoch`` sets how often partial outputs are published (``EpochFinished``); ``cancel``
    stops the replay between batches. ``on_error`` "skip" or "quarantine" rolls back a
    handler run that raises and goes on (see :class:`GuardedRuntime`). ``checkpoint`` (a
    directory) commits every epoch, ``resume`` continues its last committed one, and
    ``start_from`` starts from a committed epoch's state (see :mod:`restream_kit.io.checkpoint`).
    ``history`` keeps what each stage read of other stages' state in ``Result.history``
    (:mod:`restream_kit.history.recorder`). Windows run natively
    (:mod:`restream_kit.runtime.windows`); ``native_windows=False`` runs their expansion.
    """
    opts = options if options is not None else SerialOptions.of(given)
    run = _SerialRun(program, log, observer, opts)
    run.set_up(opts.history, opts.native_windows)
    try:
        run.epochs(opts.cancel, opts.batch_size, opts.final)
    except (HandlerError, Cancelled) as exc:
        run.failed(str(exc))
        raise
    except Exception as exc:
        error = _handler_error(program, run.rt, exc, log.columns)
        run.failed(str(error))
        raise error from exc
    return run.result()


class _SerialRun:
    """One serial replay: its runtime and loop (``runtime.loop``), epochs, checkpoints,
    progress and result."""

    def __init__(self, program: Program, log: Log, observer: Any, opts: SerialOptions):
        self.program = program
        self.log = log
        self.observer = observer
        self.notify = broadcast(observer)
        self.ck, self.start = _checkpointing(program, log, opts)
        self.on_error = opts.on_error  # (checked by the options)
        self.guarded = self.on_error != "stop"
        self.epoch = opts.epoch
        self.done = 0
        self.started = time.perf_counter()

    def set_up(self, history: bool, native_windows: bool) -> None:
        """The runtime, the stores and the loop; windows fused; a start restored."""
        program, log, guarded, start = self.program, self.log, self.guarded, self.start
        rt = GuardedRuntime(program.filename, list(log.columns)) if guarded else SerialRuntime()
        self.rt = rt
        stores = {name: JournalDict(rt.journal) for name in program.states} if guarded else None
        recorded, self.history_note = _history_stores(
            program, log, history, guarded, start, self.ck
        )
        self.recorded = recorded
        self.loop = compile_loop(
            program,
            rt,
            stores,
            columns=log.columns,
            kind_order=log.kinds_by_frequency(),
            extra_globals=recorded.globals if recorded is not None else None,
            guarded=guarded,
            hooks=recorded.hooks if recorded is not None else (),
        )
        compiled = self.loop.compiled
        # Windows run natively: the same effects, cheaper. Not with a checkpoint or a start: its
        # queue of scheduled events must be the expansion's, which every engine reads and writes.
        self.off = _windows_off(native_windows, self.ck, start, guarded, recorded)
        # (Closed windows' rows held as columns: ``_window_tables`` builds the tables.)
        self.fused = Fused() if self.off else fuse_windows(compiled, rt, blocks=Blocks())
        self.loop.handlers_replaced()
        self.all_epochs = self.epochs_left = cut(log, self.epoch)
        self.notes: list[str] = []
        if start is not None:
            self.notes = _restart(program, rt, compiled.stores, start, compiled.namespace)
            self.done = start.done
            # Epochs from where the checkpoint stopped (it may have cut the log differently).
            self.epochs_left = [
                Epoch(e.index, max(e.start, self.done), e.stop)
                for e in self.all_epochs
                if e.stop > self.done
            ]

    def epochs(self, cancel: CancelToken | None, batch_size: int, final: bool) -> None:
        """Run the log, epoch after epoch: the loop over its batches, then (at the end) the
        flush and the fused windows' finish; each epoch committed and published."""
        log, rt, loop, notify = self.log, self.rt, self.loop, self.notify
        total = len(log)
        last_index = self.all_epochs[-1].index
        notify(ReplayStarted("serial", total, len(self.epochs_left), ("serial",), log.span_ms))
        self.started = started = time.perf_counter()
        published = {name: len(rows) for name, rows in rt.rows.items()}
        self.committed = dict(published)
        named = loop.compiled.needs_named_events
        run_batch = loop.run_batch
        for ep in self.epochs_left:
            notify(EpochStarted(ep.index, len(ep)))
            epoch_started = time.perf_counter()
            for batch in log.iter_events(batch_size, named=named, start=ep.start, stop=ep.stop):
                if cancel is not None:
                    cancel.check()
                run_batch(batch)
                self.done += len(batch)
                notify(Progress(self.done, total, time.perf_counter() - started))
            last = ep.index == last_index
            if last and final:
                loop.flush()
            if last:
                self.fused.finish(flushed=final)
            outputs = {}
            if self.observer is not None:
                outputs = _new_rows(rt.rows, published, self.fused)
            if self.ck is not None:
                self._commit(ep, last and final)
            # Every event earlier than the epoch's last one has run, scheduled ones included.
            settled = None if last or not len(ep) else log.ts_at(ep.stop - 1)
            took = time.perf_counter() - epoch_started
            notify(EpochFinished(ep.index, self.done, took, outputs, settled))

    def _commit(self, ep: Epoch, last: bool) -> None:
        """Commit epoch ``ep``: the state, and the rows emitted since the last commit."""
        rt = self.rt
        new_rows = {n: r[self.committed.get(n, 0) :] for n, r in rt.rows.items()}
        state = serial_state(rt, self.loop.compiled.stores, self.program)
        self.ck.commit(ep.index, ep.stop, state, new_rows, last=last)
        self.committed = {n: len(r) for n, r in rt.rows.items()}

    def failed(self, error: str) -> None:
        self.notify(ReplayFinished(self.done, time.perf_counter() - self.started, False, error))

    def result(self) -> Result:
        """The replay's :class:`Result` (tables, state, metrics, warnings, quarantine)."""
        rt, log, start, recorded = self.rt, self.log, self.start, self.recorded
        stores = self.loop.compiled.stores
        wall = time.perf_counter() - self.started
        blocked = self.fused.blocked
        tables = {name: emitted_table(name, rows, blocked(name)) for name, rows in rt.rows.items()}
        if recorded is None:  # (freed now, not walked by the collector when it runs again)
            rt.rows.clear()
            self.fused.release()
        check_state(stores)
        total = len(log)
        metrics = Metrics(
            engine="serial",
            events=total if start is None or start.resumed else total - start.done,
            scheduled_events=sum(rt.scheduled_per_root.values()),
            wall_s=wall,
            span_ms=log.span_ms,
            rows={name: t.num_rows for name, t in tables.items()},
            epochs=len(self.epochs_left),
            path=window_path(self.program, self.fused, self.off),
        )
        self.notify(ReplayFinished(total, wall))
        resumed = start.next_epoch if start is not None and start.resumed else None
        notes = self.notes + ([self.history_note] if self.history_note else [])
        quarantine = quarantine_table()
        if self.guarded:  # (its stores journal their writes: the result holds plain dicts)
            quarantine = quarantine_table(rt.quarantined)
            note = quarantine_warning(quarantine, self.on_error)
            notes += [note] if note else []
            stores = {name: dict(d) for name, d in stores.items()}
        result = Result(
            tables,
            stores,
            metrics,
            warnings=notes,
            quarantine=quarantine,
            on_error=self.on_error,
            resumed_from_epoch=resumed,
        )
        if recorded is not None:  # (never on a guarded run: see _history_stores)
            result.history = recorded.finish(self.program, log, rt, result)
        return result


def _windows_off(native: bool, ck: Any, start: Any, guarded: bool, recorded: Any) -> str | None:
    """Why this replay runs every window as its expansion, or None when they may run
    natively (``runtime.windows``)."""
    if not native:
        return "off: native_windows=False"
    if ck is not None or start is not None:
        return "off: a checkpoint or a start keeps the expansion's queue of closes"
    if guarded:
        return "off: on_error skip or quarantine rolls runs back through the journal"
    if recorded is not None:
        return "off: the run's history records the expansion's reads"
    return None


def window_path(program: Program, fused: Fused, off: str | None) -> dict[str, str]:
    """``metrics.path`` of a serial replay: per window, whether it ran natively and how, or
    why it ran as its expansion."""
    said = {name: fused.how.get(name, why) for name, (_n, why) in native_plan(program).items()}
    if off is not None:
        said = {name: why if why.startswith("its expansion") else off for name, why in said.items()}
    return {f"window {name}": why for name, why in said.items()}


def _history_stores(program, log, history, guarded, start, ck):
    """The recorder of the run's history (the reads the loop records, see
    :mod:`restream_kit.history.recorder`) when ``history`` is asked for and can be kept; else a note."""
    if not history:
        return None, None
    if guarded or start is not None or ck is not None:
        return None, (
            "the run's history was not recorded: it is kept for whole replays that stop on "
            "errors, without checkpoints"
        )
    return Recorder(program, log.columns), None


def _checkpointing(program: Program, log: Log, opts: SerialOptions) -> tuple[Any, Any]:
    """The replay's checkpointer and start (None, None without checkpoint options).

    ``checkpoint`` may also be an object with ``load()`` and ``commit()``, as
    :class:`restream_kit.io.checkpoint.Checkpointer` has (the Spark engine passes one it
    opened itself for a log with no events, so that the checkpoint is a Spark one).
    """
    checkpoint, start_from = opts.checkpoint, opts.start_from
    if checkpoint is None and start_from is None:
        if opts.resume:
            raise RestreamError("resume needs a checkpoint directory (--checkpoint DIR)")
        return None, None
    if checkpoint is not None and hasattr(checkpoint, "commit"):
        return checkpoint, checkpoint.load()
    return open_for_replay(
        program,
        log,
        engine="serial",
        epoch=opts.epoch,
        state_format="serial",
        checkpoint=checkpoint,
        resume=opts.resume,
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


def _new_rows(rows: dict[str, list], published: dict[str, int], fused: Fused) -> dict[str, Any]:
    """Tables of the rows emitted since the last call, for views that stream outputs."""
    fused.settle()
    out = {}
    for name, table_rows in rows.items():
        start = published.get(name, 0)
        if len(table_rows) > start:
            out[name] = emitted_table(name, table_rows[start:], fused.blocked(name))
            published[name] = len(table_rows)
    return out


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
