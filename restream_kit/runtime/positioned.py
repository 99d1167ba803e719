"""The positioned runtime: what waits in a replay, in the SPEC's order, wherever it runs.

A replay's effects that do not happen at once wait: timed writes (``at=``) until their time,
scheduled events until theirs. The SPEC orders everything by a *position*
``(time, phase, order, sub)``: at one time, timed writes (phase :data:`TIMED`) come before
scheduled events (:data:`SCHEDULED`), which come before log events (:data:`LOG`); ``order``
is a log event's place in the log, and ``sub`` orders what one run made (the run's own
position, its handler's number, its count of such calls). :class:`PositionedRuntime` keeps
them in one heap of ``(position, n, what, payload)`` (``n``: the order they were made in),
and gives the rest of a replay's mechanics once:

- **the current run**: the event, its position, the handler (name and number), the count of
  the run's calls that made something (timed writes, schedules, writes sent on);
- **the count of scheduled events per root event** (an event's ``seq``), how many were made
  and the latest time one was made for;
- **settling**: :meth:`~PositionedRuntime.settle` runs everything waiting before a position
  (a timed write through :meth:`~PositionedRuntime.apply_waiting`, a scheduled event through
  :meth:`~PositionedRuntime.run_waiting`, which the adapter defines);
- **the flush** after the log (:meth:`~PositionedRuntime.flush`): one position at a time,
  failing past a limit (:data:`~.semantics.MAX_FLUSH`, the message :func:`flush_overrun`'s);
- **the rollback** of a handler run that raised (``on_error`` skip or quarantine,
  :meth:`~PositionedRuntime.guarded`), by the one journal of :mod:`.guarded`: its store
  changes, its rows, what it sent on, the entries it queued and its counts go, and the run
  is recorded with its position;
- **sinks**, where a write goes (:class:`Sink`): applied here now, or queued until its
  time (:class:`LocalSink`); a store may name another sink (a Spark pass ships the writes of
  a state a later pass holds). A write's rule (not in the past) is checked here once.

The serial engine's runtime (:class:`~.semantics.SerialRuntime`) is this runtime in the
shape the compiler's inlined loop reads: two heaps keyed by ``(time, order made)``, which
the single order of one serial replay makes equivalent to positions, and checkpoints number
by the run that made them (:class:`MadeBy`). :class:`SinkingRuntime` is that runtime with
sinks (a Spark plain pass shipping writes to later passes), its own writes inlined as hot.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

from .guarded import MarkedJournal
from .semantics import SerialRuntime, apply_write, check_write, flush_overrun

__all__ = [
    "TIMED",
    "SCHEDULED",
    "LOG",
    "WRITE",
    "EVENT",
    "Sink",
    "LocalSink",
    "MadeBy",
    "PositionedRuntime",
    "SinkingRuntime",
]

#: The phases of a position: at one time, timed writes, then scheduled events, then log events.
TIMED, SCHEDULED, LOG = 0, 1, 2
#: What a heap entry holds: a timed write or a scheduled event.
WRITE, EVENT = 0, 1


class Sink:
    """Where a handler's write goes once its rule is checked: ``now`` (due at the event's
    time) or ``later`` (``at=`` after it)."""

    def now(self, d: dict, default: Any, op: str, key: Any, arg: Any) -> None:
        raise NotImplementedError

    def later(self, d: dict, default: Any, op: str, key: Any, arg: Any, at: int) -> None:
        raise NotImplementedError


class LocalSink(Sink):
    """Writes to a state held here: applied now (the write rules, ``apply_write``), or queued
    at their position in the runtime's heap (``rt.timed_entry`` says what the entry holds)."""

    def __init__(self, rt: PositionedRuntime):
        self.rt = rt

    def now(self, d: dict, default: Any, op: str, key: Any, arg: Any) -> None:
        apply_write(d, default, op, key, arg)

    def later(self, d: dict, default: Any, op: str, key: Any, arg: Any, at: int) -> None:
        rt = self.rt
        rt.wait(rt.timed_position(at), WRITE, rt.timed_entry(d, default, op, key, arg))


class MadeBy:
    """The order of timed writes numbered by the run that made each (its event's time and
    lsn, the handler's number, then a count): the order a checkpoint keeps them in, so that
    writes waiting at an epoch's end sort among every task's as the serial engine made them.
    An iterator, as a runtime's ``order`` is; ``number``: handler name -> number."""

    def __init__(self, rt: Any, number: dict[str, int]):
        self.rt = rt
        self.number = number
        self.count = 0

    def __iter__(self) -> MadeBy:
        return self

    def __next__(self) -> tuple:
        ev = self.rt.event
        self.count += 1
        return (ev[1], ev[0], self.number[self.rt.handler], self.count)


class SinkingRuntime(SerialRuntime):
    """The serial runtime (two heaps, as the inlined loop reads them) with sinks: a write to
    a store whose type ``sinks`` names goes to that :class:`Sink` once its rule is checked;
    any other is the serial runtime's own (applied now, or queued by ``(at, order)``)."""

    sinks: dict[type, Sink] = {}

    def write(self, d: dict, default: Any, op: str, key: Any, arg: Any, at: int | None) -> None:
        now = self.event[1]
        sink = self.sinks.get(type(d))
        if sink is None:  # the serial runtime's write, inlined: it is hot
            if at is None or at == now:
                apply_write(d, default, op, key, arg)
            elif at > now:
                heapq.heappush(self.future, (at, next(self.order), d, default, op, key, arg))
            else:
                check_write(at, now)  # (raises: earlier than the event)
        elif at is None or at == now:
            sink.now(d, default, op, key, arg)
        else:
            check_write(at, now)
            sink.later(d, default, op, key, arg, at)


class PositionedRuntime:
    """What compiled handlers call (``write``, ``emit``, ``schedule``) with positions, and
    the queue of what waits (see the module docstring).

    An adapter (a Spark pass task) defines the positions (:meth:`timed_position`,
    :meth:`run_key`), what a queued write holds (:meth:`timed_entry`), what settling does
    with an entry (:meth:`apply_waiting`, :meth:`run_waiting`) and ``schedule`` (where an
    event goes); ``sinks`` maps a store's type to its :class:`Sink` (default: local).
    """

    def __init__(self, *, guarded: bool = False, filename: str = "", columns: Any = ()):
        self.heap: list = []  # (position, n, what, payload)
        self.n = 0
        self.pending_sched = 0  # scheduled events waiting in the heap
        self.event: Any = None
        self.pos: tuple = (0, 0, 0, b"")
        self.hidx = 0
        self.handler = ""
        self.seq = 0
        self.calls = 0  # what the current run made that needs a position of its own
        self.rb: bytes | None = None  # the current run's key, once made
        self.rows: list = []  # emitted rows
        self.out: list = []  # what sinks send on (rows for other passes)
        self.per_root: dict[int, int] = {}
        self.made = 0  # events scheduled here
        self.last_at: int | None = None  # the latest time an event was scheduled for
        # A run's rows, rows sent on, queued entries and counts go when it is rolled back.
        self.journal: MarkedJournal | None = (
            MarkedJournal(
                self,
                lists=("rows", "out"),
                heaps=("heap",),
                values=("n", "pending_sched", "made", "last_at"),
                per_root="per_root",
            )
            if guarded
            else None
        )
        self.quarantined: list = []
        self.filename = filename
        self.columns = columns
        self.sink: Sink = LocalSink(self)
        self.sinks: dict[type, Sink] = {}

    # -- positions (the adapter's) -------------------------------------------------------

    def run_key(self) -> Any:
        """The current run's key (made once per run, when first needed)."""
        raise NotImplementedError

    def timed_position(self, at: int) -> tuple:
        """The position of a timed write for ``at`` made now: a new call of the run."""
        raise NotImplementedError

    def timed_entry(self, d: dict, default: Any, op: str, key: Any, arg: Any) -> Any:
        """What the heap keeps of a timed write."""
        return (d, default, op, key, arg)

    def start_run(self, hidx: int, handler: str) -> None:
        """A handler run starts: its number and name, and a new count of its calls."""
        self.hidx = hidx
        self.handler = handler
        self.calls = 0
        self.rb = None

    # -- called by compiled handlers -----------------------------------------------------

    def write(self, d: dict, default: Any, op: str, key: Any, arg: Any, at: int | None) -> None:
        now = self.event[1]
        sink = self.sinks.get(type(d), self.sink)
        if at is None or at == now:
            sink.now(d, default, op, key, arg)
            return
        check_write(at, now)
        sink.later(d, default, op, key, arg, at)

    def emit(self, table: str, **fields: Any) -> None:
        ev = self.event
        self.rows.append((table, ev[0], ev[1], self.handler, self.seq, fields, self.pos, self.hidx))

    def made_by(self, root: int, at: int) -> int:
        """Count an event scheduled for ``at`` by ``root``'s runs; its ``seq``."""
        seq = self.per_root[root] = self.per_root.get(root, 0) + 1
        self.made += 1
        if self.last_at is None or at > self.last_at:
            self.last_at = at
        return seq

    # -- the queue -----------------------------------------------------------------------

    def wait(self, position: tuple, what: int, payload: Any) -> None:
        """Queue a timed write (:data:`WRITE`) or a scheduled event (:data:`EVENT`)."""
        self.n += 1
        if what == EVENT:
            self.pending_sched += 1
        heapq.heappush(self.heap, (position, self.n, what, payload))

    def settle(self, before: tuple) -> None:
        """Apply and run, in position order, everything waiting before ``before``."""
        heap = self.heap
        while heap and heap[0][0] < before:
            pos, _n, what, payload = heapq.heappop(heap)
            if what == WRITE:
                self.apply_waiting(pos, payload)
            else:
                self.pending_sched -= 1
                self.run_waiting(pos, payload)

    def apply_waiting(self, pos: tuple, payload: Any) -> None:
        """A queued write comes due (settling)."""
        d, default, op, key, arg = payload
        apply_write(d, default, op, key, arg)

    def run_waiting(self, pos: tuple, event: Any) -> None:
        """A queued scheduled event comes due (settling)."""
        raise NotImplementedError

    def flush(self, limit: int, just_after: Callable[[tuple], tuple]) -> int:
        """After the log: settle one position at a time (``just_after(p)``: the first
        position after ``p``) while scheduled events wait; fail past ``limit`` positions.
        Returns the positions settled."""
        flushed = 0
        heap = self.heap
        while heap and self.pending_sched:
            flushed += 1
            if flushed > limit:
                raise flush_overrun(limit)
            self.settle(just_after(heap[0][0]))
        return flushed

    # -- the rollback of a run (``guarded.MarkedJournal``) ------------------------------------

    def guarded(self, fn: Callable, ev: Any) -> None:
        """Run one handler; when it raises, undo everything the run did and record it."""
        self.journal.clear()
        try:
            fn(ev)
        except Exception as exc:  # noqa: BLE001 - the run is rolled back and recorded
            self.journal.rollback(exc)

    def keep_quarantined(self, row: dict) -> None:
        """A rolled-back run's row, kept with its position and handler's number."""
        self.quarantined.append((self.pos, self.hidx, row))
