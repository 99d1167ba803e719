"""Session counts keyed otherwise than their adding stage: one narrow row per run of adds.

A session window keyed otherwise than its adding stage (``sessions`` by ``e.src``, added
to by ``track``, which runs by ``e.ip``) keeps a close pass by its key, fed narrow rows
(``passes._narrow``). Its adds cannot be summed per window as a count's are: a session's
start and end are what its adds make them. But a lazy session count (the serial engine's
``runtime._sessions._lazy``: no ``on_close`` function, alone in emitting to its table,
added to by log events at their times, :func:`folded_sessions`) needs of its adds only
where each session starts and ends, how many adds it has, and which add's close emits its
row: the first add at its last time (the expansion's first close at that time plus the
gap). So:

- **an adding task** keeps, per key, a *run*: its adds of that key, each less than the gap
  after the one before. An add a gap or more after its run's last starts a new run, and the
  old one goes as one narrow row at its first add's position: the run's adds, its last time,
  and the ``lsn`` and ``seq`` of the first add at that time (:func:`session_sender`). The
  adds still count the closes the expansion would have scheduled;
- **the close pass** takes each key's runs in position order and sweeps them
  (:class:`SessionRuns`): a run joins the open session when its first add comes before
  that session's close (its last time plus the gap), as the serial engine's add would find
  the session open; else the session closes first. After the log every open session
  closes. Each closed session is the serial engine's row, at its close's position.

Why the sweep gives the serial sessions: the serial engine breaks a key's adds into
sessions where one add comes a gap or more after the one before it. No run spans such a
break (its own adds are less than a gap apart, and the break's two adds are consecutive
among all of them), so every session is a union of runs. Within a session, a run's first
add has a predecessor less than a gap before it, in a run that starts earlier: the sweep
has taken that run, so the open session's last time is at least that predecessor's, and the
run joins. Across a break, every run taken so far ended at or before the break's first add,
so the next run does not join. Counts sum exactly, and the add whose close emits is the
first, in position order, at the session's last time: compared by ``(time, lsn)``, runs of
one key from different tasks being different events.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ....model.program import Program
from ....model.windows import Session
from ....runtime._native_plan import lazy_session
from ._rows import PH_LOG, WRITE, U32x2, dumps

__all__ = ["folded_sessions", "session_sender", "SessionRuns"]


def folded_sessions(program: Program, names: Any) -> frozenset[str]:
    """The session windows among ``names`` whose adds an adding pass sends as runs: lazy
    session counts (see the module docstring)."""
    return frozenset(
        name
        for name in names
        if isinstance(program.windows[name], Session)
        and program.windows[name].agg == "count"
        and lazy_session(program, name)
    )


def session_sender(rt: Any, name: str, window: Session, target: int, files: Any) -> tuple:
    """``(add, send)`` of session window ``name`` in an adding pass whose runtime is ``rt``
    (a ``Shipping``): ``add`` keeps its key's run, sending the run before it when the add
    starts a new one; ``send`` sends every run still open (at the task's end)."""
    gap = window.gap
    made_by = rt.made_by
    pack = U32x2.pack
    # key -> [position of its first add, adds, last time, its first add's lsn and seq]
    runs: dict = {}
    get = runs.get

    def ship(key: Any, run: list) -> None:
        blob = dumps((name, key, run[1], run[2], run[3], run[4]))
        if files is not None:  # (with its key: its partition is dealt as it is written)
            files.append((WRITE, target, key, run[0], blob))
        else:
            rt.out.append((WRITE, target, rt._pk(key), run[0], blob))

    def add(key: Any, value: Any, ts: int) -> None:
        run = get(key)  # (an unhashable key raises here, in its handler, as serially)
        ev = rt.event
        root = ev[0]
        seq = made_by(root, ts + gap, 1)  # (its close counts as if scheduled here)
        calls = rt.call()
        if run is not None and ts < run[2] + gap:
            run[1] += 1
            if ts != run[2]:  # (of adds at one time, the first one's close emits)
                run[2], run[3], run[4] = ts, root, seq
            return
        if run is not None:
            ship(key, run)
        runs[key] = [(ev[1], PH_LOG, root, pack(rt.hidx, calls)), 1, ts, root, seq]

    def send() -> None:
        for key, run in runs.items():
            ship(key, run)
        runs.clear()

    add.__name__ = f"{name}__add"
    return add, send


class SessionRuns:
    """The close pass's sweep of one session window's runs (see the module docstring): rows
    of its closed sessions into ``rows``, as the serial engine's close makes them."""

    def __init__(self, name: str, window: Session, rows: dict):
        self.gap = window.gap
        self.handler = f"{name}__close"
        self.rows = rows.setdefault(window.table, [])
        # key -> [start, adds, last time, the emitting add's lsn and seq] of its session
        self.open: dict = {}
        # The roots (lsn, time) of the closes that emitted: a row's position is its close's.
        self.roots: list[int] = []
        self.times: list[int] = []

    def take(self, t: int, key: Any, adds: int, last: int, lsn: int, seq: int) -> None:
        """The run of ``key`` whose first add is at ``t``: into its open session, or the
        first of a new one once the open one has closed."""
        session = self.open.get(key)
        if session is not None and t < session[2] + self.gap:
            session[1] += adds
            if last > session[2] or (last == session[2] and lsn < session[3]):
                session[2], session[3], session[4] = last, lsn, seq
            return
        if session is not None:
            self._close(key, session)
        self.open[key] = [t, adds, last, lsn, seq]

    def finish(self, last_ts: int) -> int | None:
        """Close every open session; the latest close's time of those after the log's last
        event (``last_ts``), as the close pass reports it (``OwnCloses.last_at``)."""
        ends = (s[2] + self.gap for s in self.open.values())
        latest = max((end for end in ends if end > last_ts), default=None)
        for key, session in self.open.items():
            self._close(key, session)
        self.open.clear()
        return latest

    def _close(self, key: Any, session: list) -> None:
        start, adds, last, lsn, seq = session
        end = last + self.gap
        fields = {"key": key, "start": start, "end": end, "value": adds}
        self.rows.append((lsn, end, self.handler, seq, fields))
        self.roots.append(lsn)
        self.times.append(last)

    def root_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """The emitting closes' roots and their times (``OwnCloses`` places rows by them)."""
        return np.asarray(self.roots, dtype=np.int64), np.asarray(self.times, dtype=np.int64)
