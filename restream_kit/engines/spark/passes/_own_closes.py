"""Closing windows whose closes a plain pass runs itself, in the serial engine's loop.

A pass that holds a tumbling, hopping or session window whole (``_window_shapes.fuse_closes``)
runs the window as the serial engine does (``runtime.windows``): its adds merge in place, and
its closes wait in the runtime's queue of scheduled events, one per window, run as the loop
reaches their time. What a task adds to the serial engine's loop for them:

- the loop runs the scheduled events due before each event (:meth:`OwnCloses.run`), those due
  by the log's last event after its partition's last, then those after the log (the flush,
  :meth:`OwnCloses.finish`), each after the timed writes due before it, as the serial replay;
- a close's row is emitted at the close's place in the serial order, ``(at, scheduled, root
  event, its number)``, not at a log event's: :meth:`OwnCloses.rows` sends those rows with
  that position, the root event's time found among the partition's events (every close comes
  from an event of its own partition);
- the task reports the scheduled events made and the latest time one ran, so that the driver
  applies the timed writes waiting after the log that an event then came after.

Only in a replay the serial engine would run natively too (no checkpoint, guard, history or
start state: ``engines.serial._windows_off``), and in a pass that sends no write or event on
(the driver checks both, ``passes._driver``).
"""

from __future__ import annotations

import heapq
from typing import Any

import numpy as np

from ....runtime.loop import Loop
from ....runtime.semantics import (
    ScheduledEvent,
    SerialRuntime,
    check_schedule,
    flush_overrun,
    run_scheduled,
)
from ._rows import BLOB_ROWS, EMIT, PH_LOG, PH_SCHED, RUN_HEAD, SIGN, dumps, scheduled_sub
from ._shipping import Shipping

__all__ = ["OwnCloses", "ShippingCloses", "close_handlers"]


def close_handlers(program: Any, windows: tuple[str, ...]) -> frozenset[str]:
    """The handlers that run on the close events of ``windows`` (the generated ones and any
    of the user's own on their close kinds)."""
    kinds = {f"{name}:close" for name in windows}
    return frozenset(h.name for h in program.handlers if kinds & set(h.kinds))


class OwnCloses:
    """The scheduled events of one plain task (see the module docstring)."""

    def __init__(self, rt: SerialRuntime, program: Any, windows: tuple[str, ...], limit: int):
        self.rt = rt
        self.by_kind: dict = {}
        self.handlers = close_handlers(program, windows)
        self.limit = limit
        self.lsn: list = []
        self.ts: list = []
        self.last_at: int | None = None

    def ready(self, loop: Loop) -> None:
        """Take the loop's handlers of scheduled events, as they are once the windows were
        fused into them; the loop runs the closes due before each event itself."""
        loop.handlers_replaced()
        self.by_kind = loop.by_kind

    def run(self, t: int) -> None:
        """Run the scheduled events due by ``t`` (what the loop does before an event)."""
        run_scheduled(self.rt, self.by_kind, t)

    def _note(self, t: int) -> None:
        scheduled = self.rt.scheduled
        if scheduled and scheduled[0][0] <= t:
            at = scheduled[0][0]
            if self.last_at is None or at > self.last_at:
                self.last_at = at

    def seen(self, batch: Any) -> None:
        """Keep the times of a batch's events: a close's row is placed after its root's."""
        self.lsn.append(batch.column("lsn").to_numpy())
        self.ts.append(batch.column("ts").to_numpy())

    def finish(self, last_ts: int) -> None:
        """After the partition's last event: what falls due by the log's last event, then the
        events after the log, each after the timed writes due before it."""
        rt, scheduled = self.rt, self.rt.scheduled
        self.run(last_ts)
        rt.apply_due(last_ts)
        ran = 0
        while scheduled:
            at = scheduled[0][0]
            self._note(at)
            ran += run_scheduled(rt, self.by_kind, at, limit=self.limit - ran)
            if ran >= self.limit and scheduled:
                raise flush_overrun(self.limit)

    def made(self) -> int:
        """The scheduled events its handlers made (the expansion's count, as ``seq`` goes)."""
        return sum(self.rt.scheduled_per_root.values())

    def rows(self, rows_by_table: dict[str, list], number: dict[str, int]) -> list[tuple]:
        """The ``EMIT`` rows of the close handlers' runs, each at its close's position; they
        leave ``rows_by_table`` (the others go as a log event's, ``pack_emitted``)."""
        found = []
        for table, rows in rows_by_table.items():
            mine = [r for r in rows if r[2] in self.handlers]
            if mine:
                rows[:] = [r for r in rows if r[2] not in self.handlers]
                found += [(table, r) for r in mine]
        if not found:
            return []
        lsn = np.concatenate(self.lsn) if self.lsn else np.zeros(0, np.int64)
        ts = np.concatenate(self.ts) if self.ts else np.zeros(0, np.int64)
        order = np.argsort(lsn, kind="stable")
        roots = np.asarray([r[0] for _t, r in found], dtype=np.int64)
        at = np.searchsorted(lsn[order], roots)
        root_ts = ts[order][np.minimum(at, len(order) - 1)].tolist() if len(order) else []
        tuples = []
        for (table, (root, t, handler, seq, fields)), rts in zip(found, root_ts):
            head = RUN_HEAD.pack(rts + SIGN, PH_LOG, root + SIGN)
            position = (t, PH_SCHED, 0, scheduled_sub(head, seq))
            tuples.append((table, root, t, handler, seq, fields, position, number[handler]))
        return [
            (EMIT, -1, None, (0, 0, 0, b""), dumps(tuples[i : i + BLOB_ROWS]))
            for i in range(0, len(tuples), BLOB_ROWS)
        ]

    def stat(self) -> tuple[int, int | None]:
        """What the task's ``STAT`` row says of scheduled events: made, the latest run (or,
        of those it sent on, the latest made)."""
        last = [t for t in (self.last_at, getattr(self.rt, "last_at", None)) if t is not None]
        return self.made(), max(last, default=None)


class ShippingCloses(Shipping):
    """:class:`Shipping` for a pass that also runs closes of its own: those it queues here
    (a window run as its expansion) wait in the serial queue. Their runs come after later
    log events, so the count of each root's scheduled events (``seq``) keeps every root."""

    def __init__(self, spec: Any, program: Any):
        super().__init__(spec, program)
        self.latest_root_only = False

    def schedule(self, kind: str, *, at: int, **fields: Any) -> None:
        if self.spec.index not in self.spec.kind_passes.get(kind, ()):
            super().schedule(kind, at=at, **fields)
            return
        root = self.event[0]
        check_schedule(at, self.event[1], fields)
        event = ScheduledEvent(kind, at, root, self.made_by(root, at), fields)
        heapq.heappush(self.scheduled, (at, next(self.order), event))
