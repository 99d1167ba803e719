"""The runtime of a general pass task (``passes._task``): the positioned runtime of
:mod:`restream_kit.runtime.positioned` with the pass path's positions and sinks.

A position is ``(t, phase, o, sub)``: a log event is ``(ts, 2, row, b"")``; a timed write
``(at, 0, 0, run + i)``, where ``run`` is the bytes of the writing run's position and handler
and ``i`` its count of such calls; an ordinary write ``(t, ph, o, sub + handler + i)`` of its
run; a scheduled event ``(at, 1, 0, event + (0, seq))`` (``_rows.scheduled_sub``). Bytes
compare as the tuples they encode.

Sinks: a write to a state held here is applied now or queued (the runtime's local sink, its
entry as rows carry it, :func:`~._stores.carried`); a write to a state a later pass holds
(a :class:`~._stores.BlindStore`) is shipped to that pass at its position (:class:`_Ship`).
An event scheduled for a kind this pass handles waits in the heap; for another pass, it is
shipped.
"""

from __future__ import annotations

from typing import Any

from ....model.program import Program
from ....runtime.positioned import EVENT, PositionedRuntime, Sink
from ....runtime.semantics import ScheduledEvent, check_schedule
from ._rows import (
    AFTER_RUN,
    PEND,
    PH_LOG,
    PH_SCHED,
    PH_TIMED,
    SCHED,
    U32,
    PassSpec,
    Routing,
    U32x2,
    dumps,
    position_bytes,
    scheduled_sub,
)
from ._stores import BlindStore, apply_op, carried

__all__ = ["TaskRuntime", "just_after"]


def just_after(position: tuple) -> tuple:
    """The first position after ``position`` (bytes ``sub``: one zero byte longer)."""
    return (*position[:3], position[3] + b"\x00")


class _Ship(Sink):
    """Writes to a state a later pass holds: rows for it, at the write's position."""

    def __init__(self, rt: TaskRuntime):
        self.rt = rt

    def now(self, d: BlindStore, default: Any, op: str, key: Any, arg: Any) -> None:
        self.rt.ship(d.state, key, carried(op, arg), None, self.rt.spec.blind[d.state])

    def later(self, d: BlindStore, default: Any, op: str, key: Any, arg: Any, at: int) -> None:
        self.rt.ship(d.state, key, carried(op, arg), at, self.rt.spec.blind[d.state])


class TaskRuntime(PositionedRuntime, Routing):
    """What compiled handlers call in a general pass task, with serial positions; settling
    runs a due scheduled event through ``run_event`` (set by the task's loop)."""

    def __init__(self, spec: PassSpec, program: Program):
        super().__init__(
            guarded=spec.on_error != "stop", filename=program.filename, columns=spec.columns
        )
        self.spec = spec
        self.program = program
        self.defaults: dict[str, Any] = {}
        self.home_keys: dict[int, Any] = {}
        self.ran_scheduled = 0  # scheduled events run here (from here or earlier passes)
        self.store_names: dict[int, str] = {}
        self.feeds = spec.feeds
        self.write_pos: tuple | None = None  # the position of a timed write being applied
        self.pk_cache: dict = {}
        self.history: Any = None  # the run's history values recorded here (``_history``)
        self.copies: Any = None  # the copies held here (``passes._copies``)
        self.unhandled: list = []  # scheduled for kinds no pass handles (``passes._boundaries``)
        self.recorder: Any = None  # a fold's versions (``passes._copies.VersionRecorder``)
        self.run_event: Any = None  # (ev, pos, partition values, writes): the task's
        self.sinks = {BlindStore: _Ship(self)}

    # -- positions -------------------------------------------------------------------------

    def run_key(self) -> bytes:
        rb = self.rb
        if rb is None:
            rb = self.rb = position_bytes(self.pos) + U32.pack(self.hidx)
        return rb

    def timed_position(self, at: int) -> tuple:
        self.calls += 1
        return (at, PH_TIMED, 0, self.run_key() + U32.pack(self.calls))

    def timed_entry(self, d: dict, default: Any, op: str, key: Any, arg: Any) -> tuple:
        """(store, default, key, the write as rows carry it, state, came from elsewhere?)"""
        return (d, default, key, carried(op, arg), self.store_names[id(d)], False)

    # -- settling ----------------------------------------------------------------------------

    def apply_waiting(self, pos: tuple, payload: tuple) -> None:
        d, default, key, op, state, incoming = payload
        if pos[0] > self.spec.last_ts and state in self.spec.finals:
            # Due after the log and applied here, to a final value: the driver must not
            # apply it again where another holder reports it waiting.
            self.out.append((PEND, -1, None, pos, dumps((state, key, None))))
        if incoming:
            apply_op(d, default, key, op, True)
            if self.recorder is not None:
                self.recorder.applied(state, key, pos)
        else:
            self.write_pos = pos
            apply_op(d, default, key, op)
            self.write_pos = None

    def run_waiting(self, pos: tuple, event: Any) -> None:
        self.ran_scheduled += 1
        self.run_event(event, pos, None, [])

    # -- called by compiled handlers -------------------------------------------------------

    def schedule(self, kind: str, *, at: int, **fields: Any) -> None:
        ev = self.event
        check_schedule(at, ev[1], fields)
        root = ev[0]
        seq = self.made_by(root, at)
        event = ScheduledEvent(kind, at, root, seq, fields)
        self.calls += 1
        t, ph, o, sub = self.pos
        if at == t and ph == PH_LOG:  # after this run, before the next log event
            position = (at, PH_LOG, o, scheduled_sub(sub + AFTER_RUN, seq))
        else:
            position = (at, PH_SCHED, 0, scheduled_sub(position_bytes(self.pos), seq))
        targets = self.spec.kind_passes.get(kind, ())
        if not targets and self.spec.bounds:  # a checkpoint holds it until its time
            self.unhandled.append((position, dumps((kind, fields, root, seq))))
        for target in targets:
            if target == self.spec.index:
                self.wait(position, EVENT, event)
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
                position = (at, PH_TIMED, 0, self.run_key() + U32.pack(self.calls))
        self.write_rows(key, position, dumps((state, key, op)), targets, state)
