"""A checkpoint's epochs' ends inside one run over the whole log.

A checkpointed replay runs its passes once over the whole log (a resumed one, or one started
from a checkpoint, over the rest of it), as a replay without a checkpoint does: arranged, in
the serial engine's inlined loop where it can. Each task reports, at the end of every epoch but the last
(``PassSpec.bounds``: the position of the epoch's last log event), what the serial engine's
checkpoint holds of its partition there, and the driver (``passes._epochs``) puts the tasks'
reports together into one commit per epoch:

- the values of the states it holds, and how many events it has scheduled (``SNAP``, one
  row per task and epoch, ``_rs_dest`` the epoch);
- its own timed writes and scheduled events still waiting (``CARRY``, ``_rs_dest`` the tag
  and the epoch, :func:`~._pass_rows.carry_dest`);
- the timed writes and scheduled events that earlier passes sent it and that were *in
  flight* at the end: made by a run up to the epoch's last event, for a position after it.
  Such a row arrives after the end, so the task reports it when it reads it, for every end
  it was in flight at. Its run is the head of its ``sub`` (a run's bytes start with its
  position, ``RUN_HEAD``);
- the events it scheduled for a kind that no pass handles (nothing runs them), and the window
  closes an inlined loop did not send (one of identical ones is, ``passes._window_shapes``): the
  serial engine's checkpoint holds each until its time. Its windows' adds summed so far go
  out at each end, so that the closing pass holds them there.

Before it reports, a task runs what is due before the epoch's last event, unless that event
ran in this task (what its own run made still waits, as in a serial replay).
"""

from __future__ import annotations

import struct
from bisect import bisect_left, bisect_right
from typing import Any

from ...serial import RESERVED_FIELDS
from ._rows import (
    CARRY,
    NOWHERE,
    PH_LOG,
    PH_TIMED,
    RUN_HEAD,
    SIGN,
    SNAP,
    TAG_MANY,
    TAG_SCHED,
    TAG_WRITE,
    U32x2,
    carry_dest,
    dumps,
    for_driver,
)

__all__ = [
    "Ends",
    "state_row",
    "waiting_rows",
    "future_rows",
    "made_bytes",
    "unhandled_rows",
    "by_epoch",
]


class Ends:
    """The epochs' ends (``bounds``) a task has passed, in order."""

    def __init__(self, bounds: tuple):
        self.bounds = list(bounds)
        self.passed = 0
        self._aim()

    def _aim(self) -> None:
        """The next end's position and lsn; once every end is passed, ones that every
        position and every lsn compare below."""
        if self.passed < len(self.bounds):
            self.next = self.bounds[self.passed]
            self.next_lsn = self.next[2]
        else:
            self.next, self.next_lsn = (float("inf"),), 1 << 63

    def passing(self) -> int:
        """Pass the next end; its epoch."""
        j = self.passed
        self.passed += 1
        self._aim()
        return j

    def in_flight(self, out: list, tag: int, pk: Any, pos: tuple, payload: bytes) -> None:
        """Report a row an earlier pass sent, read after ``passed`` ends, for each of them
        it was in flight at: a timed write or a scheduled event made up to that end."""
        if not self.passed or not (tag == TAG_SCHED or (tag == TAG_WRITE and pos[1] == PH_TIMED)):
            return
        made = _made_by(pos)
        for j in range(bisect_left(self.bounds, made, 0, self.passed), self.passed):
            out.append((CARRY, carry_dest(tag, j), pk, pos, payload))


def _made_by(pos: tuple) -> tuple:
    """The (t, phase, o) of the run that made a timed write or a scheduled event. One
    scheduled for its maker's own time has that run's (t, phase, o) (``_rows.AFTER_RUN``)."""
    if pos[1] == PH_LOG:
        return pos[:3]
    t, ph, o = RUN_HEAD.unpack_from(pos[3])
    return (t - SIGN, ph, o - SIGN)


def unhandled_rows(unhandled: list, end: tuple, epoch: int) -> list[tuple]:
    """The events scheduled for kinds no pass handles (``unhandled``: ``(position, blob)``
    as made) that wait at ``end``: due after it, or made by its own run. Those due before it
    are dropped from ``unhandled``: they came and went."""
    rows = [
        (CARRY, carry_dest(TAG_SCHED, epoch), None, pos, blob)
        for pos, blob in unhandled
        if pos[:3] > end or _made_by(pos) == end
    ]
    unhandled[:] = [(pos, blob) for pos, blob in unhandled if pos[:3] > end]
    return rows


def state_row(
    epoch: int, stores: dict, finals: tuple, made: int, order: dict | None = None
) -> tuple:
    """A task's ``SNAP`` row at an epoch's end: the states it holds as they stand, the
    number of events it has scheduled so far, and, from a fold recording versions, where its
    keys came in (``passes._copies.VersionRecorder.order``)."""
    values = {name: dict(stores[name]) for name in finals}
    return for_driver(SNAP, dumps((values, made, order or {})), epoch)


def _many(entries: list, epoch: int) -> list[tuple]:
    """Entries ``(tag, position, value)`` as one ``CARRY`` row of ``epoch`` (none if none)."""
    if not entries:
        return []
    return [(CARRY, carry_dest(TAG_MANY, epoch), None, NOWHERE, dumps(entries))]


def waiting_rows(heap: list, per_root: dict, epoch: int = 0) -> list[tuple]:
    """A general task's own timed writes and scheduled events still waiting (its heap), as
    a ``CARRY`` row of ``epoch``."""
    entries = []
    for pos, _n, what, payload in sorted(heap, key=lambda entry: entry[:2]):
        if what == 0:
            _d, _default, key, op, state, _incoming = payload
            entries.append((TAG_WRITE, pos, (state, key, op)))
        else:
            ev = payload
            fields = {k: v for k, v in vars(ev).items() if k not in RESERVED_FIELDS}
            made = per_root.get(ev.lsn, ev.seq)
            entries.append((TAG_SCHED, pos, (ev.kind, fields, ev.lsn, ev.seq, made)))
    return _many(entries, epoch)


def made_bytes(made_by: tuple) -> bytes:
    """A plain task's timed write's ``order`` (``passes._plain.MadeBy``: the time, lsn and
    handler of the run that made it, and a count) as the ``sub`` of its position."""
    t, lsn, handler, count = made_by
    return _MADE.pack(t + SIGN, PH_LOG, lsn + SIGN, handler, count)


#: A run's head (``RUN_HEAD``) and a handler's number and count (``U32x2``), in one.
_MADE = struct.Struct(RUN_HEAD.format + U32x2.format[1:])


def future_rows(future: list, names: dict, epoch: int) -> list[tuple]:
    """A plain task's timed writes still waiting (the serial runtime's ``future``, numbered
    by the runs that made them, ``passes._plain``), as a ``CARRY`` row of ``epoch``."""
    entries = []
    # (No two entries share an order: they sort by time and order alone.)
    for at, made_by, d, _default, op, key, arg in sorted(future):
        what = ("del",) if op == "delete" else (op, arg)
        entries.append(
            (TAG_WRITE, (at, PH_TIMED, 0, made_bytes(made_by)), (names[id(d)], key, what))
        )
    return _many(entries, epoch)


def by_epoch(rows: list, bounds: tuple) -> list[tuple[int, list]]:
    """A plain task's emitted rows of one table, ``(lsn, ts, ...)`` in log order, cut at
    the epochs' ends: ``(epoch, rows)`` for each epoch that has some."""
    cuts = [bisect_right(rows, b[2], key=lambda r: r[0]) for b in bounds]
    parts = []
    lo = 0
    for j, hi in enumerate([*cuts, len(rows)]):
        if hi > lo:
            parts.append((j, rows[lo:hi]))
        lo = max(lo, hi)
    return parts
