"""Closing windows whose closes a plain pass runs itself, in the serial engine's loop.

A pass that holds a tumbling, hopping or session window whole (``_window_shapes.fuse_closes``)
runs the window as the serial engine does (``runtime.windows``): its adds merge in place, and
its closes wait in the runtime's queue of scheduled events, one per window, run as the loop
reaches their time. What a task adds to the serial engine's loop for them:

- the loop is built to run scheduled events (``compile_loop(..., scheduled=True)``) and takes
  the fused handlers (``Loop.handlers_replaced``): it runs the closes due before each event
  itself, as the serial replay's loop; after the partition's last event, those due by the
  log's last event, then those after the log (the loop's flush, :meth:`OwnCloses.finish`),
  each after the timed writes due before it;
- a close's row is emitted at the close's place in the serial order, ``(at, scheduled, root
  event, its number)``, not at a log event's: :meth:`OwnCloses.rows` sends those rows with
  that position, the root event's time found among the partition's events (every close comes
  from an event of its own partition);
- the task reports the scheduled events made and the latest time one ran, so that the driver
  applies the timed writes waiting after the log that an event then came after.

A pass that also sends events on counts its closes and those in one ``seq`` per root
(``Shipping.made_by``), its own kinds queued here (``Shipping.runs_here``).

Only in a replay the serial engine would run natively too (no checkpoint, guard, history or
start state: ``engines.serial._windows_off``), and in a pass that sends no write or event on
(the driver checks both, ``passes._driver``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ....runtime.loop import Loop
from ._rows import (
    BLOB_ROWS,
    EMIT,
    PH_LOG,
    PH_SCHED,
    RUN_HEAD,
    SIGN,
    dumps,
    for_driver,
    scheduled_sub,
)

__all__ = ["OwnCloses", "close_handlers"]


def close_handlers(program: Any, windows: tuple[str, ...]) -> frozenset[str]:
    """The handlers that run on the close events of ``windows`` (the generated ones and any
    of the user's own on their close kinds)."""
    kinds = {f"{name}:close" for name in windows}
    return frozenset(h.name for h in program.handlers if kinds & set(h.kinds))


class OwnCloses:
    """The scheduled events of one plain task (see the module docstring): ``loop`` runs
    them (built with ``scheduled=True``, its handlers replaced once the windows are fused)."""

    def __init__(self, loop: Loop, program: Any, windows: tuple[str, ...], limit: int):
        self.loop = loop
        self.rt = loop.rt
        self.handlers = close_handlers(program, windows)
        self.limit = limit
        self.lsn: list = []
        self.ts: list = []
        self.last_at: int | None = None

    def seen(self, batch: Any) -> None:
        """Keep the times of a batch's events: a close's row is placed after its root's."""
        self.lsn.append(batch.column("lsn").to_numpy())
        self.ts.append(batch.column("ts").to_numpy())

    def finish(self, last_ts: int) -> None:
        """After the partition's last event: what falls due by the log's last event, then the
        events after the log, each after the timed writes due before it."""
        loop, rt = self.loop, self.rt
        loop.run_scheduled(last_ts)
        rt.apply_due(last_ts)
        if loop.flush(self.limit):
            # The latest close run after the log: the last run, the flush goes in time order.
            self.last_at = rt.event[1]

    def ran_until(self, event: Any, last_ts: int) -> None:
        """After the windows' end: ``event`` is the runtime's latest, which a lazy session
        window's last close after the log becomes (``runtime._sessions._flushed_to``)."""
        if event is not None and event[1] > last_ts:
            self.last_at = max(event[1], self.last_at if self.last_at is not None else event[1])

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
        roots = np.asarray([r[0] for _t, r in found], dtype=np.int64)
        root_ts = self.root_times(roots)
        root_ts = root_ts.tolist() if root_ts is not None else []
        tuples = []
        for (table, (root, t, handler, seq, fields)), rts in zip(found, root_ts):
            head = RUN_HEAD.pack(rts + SIGN, PH_LOG, root + SIGN)
            position = (t, PH_SCHED, 0, scheduled_sub(head, seq))
            tuples.append((table, root, t, handler, seq, fields, position, number[handler]))
        return [
            for_driver(EMIT, dumps(tuples[i : i + BLOB_ROWS]))
            for i in range(0, len(tuples), BLOB_ROWS)
        ]

    def root_times(self, roots: np.ndarray) -> np.ndarray | None:
        """The times of the partition's events of lsn ``roots`` (the roots of closes run
        here); None when the partition had no event."""
        lsn = np.concatenate(self.lsn) if self.lsn else np.zeros(0, np.int64)
        if not len(lsn):
            return None
        ts = np.concatenate(self.ts)
        order = np.argsort(lsn, kind="stable")
        at = np.searchsorted(lsn[order], roots)
        return ts[order][np.minimum(at, len(order) - 1)]

    def stat(self) -> tuple[int, int | None]:
        """What the task's ``STAT`` row says of scheduled events: made, the latest run (or,
        of those it sent on, the latest made)."""
        last = [t for t in (self.last_at, getattr(self.rt, "last_at", None)) if t is not None]
        return self.made(), max(last, default=None)
