"""The serial replays behind ``explain``: one program over the log with its state traced.

A traced replay runs the program's compiled loop (the serial engine's own) over stores that
note what happens to them. It can record, on one event (the *target*: ``lsn`` and ``seq``),
every state read each handler made (state, key, line, value, in order) and every row it
emitted (with the line of the ``emit``); and, on every event up to a moment, every write to
some (state, key) pairs (the *watched* keys), with when and by whom it was made.

Moments are ordered as the runtime orders them (SPEC section 3): at one time, the timed writes
(``at=``) due then come first, then the scheduled events, then the log events; that is the
key ``(ts, phase, lsn, seq)`` of :attr:`Write.order` and :func:`event_order`.
"""

from __future__ import annotations

import heapq
import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..io.log import Log
from ..model.program import Program
from ..runtime import SerialRuntime, apply_write
from ..runtime.loop import compile_loop

__all__ = ["Write", "Read", "Trace", "traced_replay", "event_order", "TIMED", "SCHEDULED", "LOGGED"]

#: The phases of one time, in the order the runtime runs them.
TIMED, SCHEDULED, LOGGED = 0, 1, 2


def event_order(ts: int, lsn: int, seq: int) -> tuple[int, int, int, int]:
    """Where the event (``lsn``, ``seq``) at ``ts`` comes in a replay (see the module doc)."""
    return (ts, SCHEDULED if seq else LOGGED, lsn, seq)


@dataclass(frozen=True)
class Write:
    """One write to a watched key: when, by whom (handler and line) and the value after it.

    A timed write (``at=``) coming due has ``due`` True: ``ts`` is its ``at``, and ``lsn``,
    ``seq``, ``handler`` and ``line`` say which handler run made it, earlier.
    """

    ts: int
    lsn: int
    seq: int
    handler: str | None
    line: int | None
    value: Any
    due: bool = False
    deleted: bool = False

    @property
    def order(self) -> tuple[int, int, int, int]:
        if self.due:
            return (self.ts, TIMED, -1, 0)
        return event_order(self.ts, self.lsn, self.seq)


@dataclass(frozen=True)
class Read:
    """A state read on the target event: its handler, state, key, line and the value read."""

    handler: str
    state: str
    key: Any
    line: int | None
    value: Any


@dataclass
class Trace:
    """What a traced replay saw: the rows of every table (as the runtime keeps them), the
    reads and emit lines on the target event, and the writes to the watched keys."""

    rows: dict[str, list]
    reads: list[Read] = field(default_factory=list)
    #: On the target event, per table, the line of each ``emit`` in order.
    emits: dict[str, list[int | None]] = field(default_factory=dict)
    writes: dict[tuple[str, Any], list[Write]] = field(default_factory=dict)
    #: The target event's time, once it ran.
    target_ts: int | None = None


_ABSENT = object()


class _Frames:
    """The user's line of a read or write: among the calls in the program's file that led to
    it (the innermost ones, up to the first call from elsewhere: the runtime, the loop that
    runs scheduled events), the innermost one not in code generated for a window
    (``w__add``...), else the innermost one."""

    def __init__(self, program: Program):
        self.filename = program.filename
        self.generated = tuple(f"{w}__" for w in program.windows)

    def line(self, depth: int = 2) -> int | None:
        frame = sys._getframe(depth)
        fallback = None
        for _ in range(24):
            if frame is None:
                break
            code = frame.f_code
            if code.co_filename == self.filename:
                if not code.co_name.startswith(self.generated):
                    return frame.f_lineno
                fallback = fallback or frame.f_lineno
            elif fallback is not None:
                break  # left the program's calls
            frame = frame.f_back
        return fallback


class _Runtime(SerialRuntime):
    """The serial runtime, knowing which timed write is coming due and who made it."""

    def __init__(self, frames: _Frames, watched: set):
        super().__init__()
        self.frames = frames
        self.watched = watched
        self.due: tuple | None = None  # (at, origin) while a timed write is applied
        self.origins: dict[int, tuple] = {}

    def write(self, d: dict, default: Any, op: str, key: Any, arg: Any, at: int | None) -> None:
        now = self.event[1]
        if at is None or at <= now or (getattr(d, "state", None), key) not in self.watched:
            super().write(d, default, op, key, arg, at)
            return
        n = next(self.order)
        ev = self.event
        self.origins[n] = (ev[0], getattr(ev, "seq", 0), self.handler, self.frames.line())
        heapq.heappush(self.future, (at, n, d, default, op, key, arg))

    def apply_due(self, t: int) -> None:
        future = self.future
        while future and future[0][0] <= t:
            at, n, d, default, op, key, arg = heapq.heappop(future)
            self.due = (at, self.origins.pop(n, None))
            try:
                apply_write(d, default, op, key, arg)
            finally:
                self.due = None


def _store_class(name: str, default: Any, rt: _Runtime, trace: Trace, target: tuple | None):
    frames = rt.frames
    writer = apply_write.__code__

    def on_target() -> bool:
        ev = rt.event
        return (
            target is not None
            and rt.due is None
            and ev is not None
            and ev[0] == target[0]
            and getattr(ev, "seq", 0) == target[1]
        )

    class Traced(dict):
        __slots__ = ()
        state = name

        def get(self, key, fallback=_ABSENT):
            value = dict.get(self, key, default if fallback is _ABSENT else fallback)
            # A write's own look-up (add, merge) is not a read of the handler's.
            if on_target() and sys._getframe(1).f_code is not writer:
                trace.reads.append(Read(rt.handler, name, key, frames.line(), value))
            return value

        def __setitem__(self, key, value):
            dict.__setitem__(self, key, value)
            self._note(key, value)

        def pop(self, key, *fallback):
            out = dict.pop(self, key, *fallback)
            self._note(key, default, deleted=True)
            return out

        def __delitem__(self, key):
            self.pop(key)

        def _note(self, key, value, deleted=False):
            if (name, key) not in rt.watched:
                return
            if rt.due is not None:
                at, origin = rt.due
                lsn, seq, handler, line = origin or (-1, 0, None, None)
                w = Write(at, lsn, seq, handler, line, value, True, deleted)
            else:
                ev = rt.event
                seq = getattr(ev, "seq", 0)
                w = Write(ev[1], ev[0], seq, rt.handler, frames.line(), value, False, deleted)
            trace.writes.setdefault((name, key), []).append(w)

    return Traced()


def _has_run(rt: SerialRuntime, target: tuple[int, int]) -> bool:
    """Whether the scheduled event ``target`` (lsn, seq) has been made and has run."""
    lsn, seq = target
    if rt.scheduled_per_root.get(lsn, 0) < seq:
        return False
    return not any(ev.lsn == lsn and ev.seq == seq for _at, _n, ev in rt.scheduled)


def traced_replay(
    program: Program,
    log: Log,
    *,
    target: tuple[int, int] | None = None,
    watched: set | None = None,
    stop_after: int | None = None,
) -> Trace:
    """Replay ``program`` serially over ``log``, recording what :class:`Trace` holds.

    ``target`` is the event (lsn, seq) whose reads and emits to record; ``watched`` the
    (state, key) pairs whose writes to record. ``stop_after``: a time; the replay stops once
    every moment up to it has run (the rows and writes after it may then be missing). A
    scheduled target without it stops the replay once the target has run.
    """
    watched = watched or set()
    rt = _Runtime(_Frames(program), watched)
    trace = Trace(rows=rt.rows)
    emit = rt.emit

    def emit_noting(table: str, **fields: Any) -> None:
        ev = rt.event
        if target is not None and ev[0] == target[0] and getattr(ev, "seq", 0) == target[1]:
            trace.emits.setdefault(table, []).append(rt.frames.line())
            trace.target_ts = ev[1]
        emit(table, **fields)

    rt.emit = emit_noting
    stores = {
        name: _store_class(name, decl.default, rt, trace, target)
        for name, decl in program.states.items()
    }
    loop = compile_loop(
        program, rt, stores, columns=log.columns, kind_order=log.kinds_by_frequency()
    )
    stop = None
    if stop_after is not None:  # the log events up to that time, and no further
        stop = int(np.searchsorted(log.table.column("ts").to_numpy(), stop_after, side="right"))
    # A scheduled target: its rows are all made once it has run (made, and no longer waiting).
    scheduled = stop is None and target is not None and target[1] > 0
    for batch in log.iter_events(named=loop.compiled.needs_named_events, stop=stop):
        loop.run_batch(batch)
        if scheduled and _has_run(rt, target):
            return trace
    if stop_after is not None:
        loop.run_scheduled(stop_after)
        rt.apply_due(stop_after)
    else:
        loop.flush()
    return trace
