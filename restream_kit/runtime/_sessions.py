"""Session windows run natively (``runtime.windows``): the same rows, states and ``seq`` as
their expansion (``compiler.expand_windows._session``), which schedules a close per add.

Every add takes its number (``seq``) from the runtime as its close would. When the adds come
at their events' times (``_native_plan.adds_at_event_time``), times only grow, so the open
sessions close in the order they were last moved on: they wait in one queue, oldest first,
and the window has one entry in the runtime's queue of scheduled events, at its oldest
session's close; that entry closes the sessions due at its time, in their order among the
other scheduled events, and moves on to the next. Of the expansion's closes of a session,
the one that emits is the first one scheduled at its last time plus the gap: its time,
order, ``lsn`` and ``seq`` are the session's. Otherwise (adds at other times), one light
close per add, whose check is the expansion's.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from typing import Any

from ..compiler.expand_windows import close_kind
from ..model.windows import Session
from ._window_parts import FINISH, Close, aggregate, closer, store
from .semantics import ScheduledEvent, SerialRuntime, TimeTravelError

__all__ = ["session"]


def session(
    n: str,
    window: Session,
    namespace: dict,
    rt: SerialRuntime,
    batch: bool,
    fail: Callable,
    event_time: bool = False,
) -> dict:
    """The native helpers of session window ``n`` (``n__add``, ``n__close``, and what writes
    its state when the replay ends)."""
    if batch and event_time:
        return _queued(n, window, namespace, rt, fail)
    merge, value_of, drop, own = aggregate(window, namespace, n)
    counts = store(namespace, f"{n}__n")
    first = store(namespace, f"{n}__first")
    last = store(namespace, f"{n}__last")
    gap = window.gap
    kind = close_kind(n)
    per_root = rt.scheduled_per_root
    scheduled = rt.scheduled
    order = rt.order
    heappush = heapq.heappush

    def add(key: Any, value: Any, ts: int) -> None:
        try:
            if first.get(key) is None:
                first[key] = ts
            last[key] = ts
            counts[key] = counts.get(key, 0) + 1
            if merge is not None:
                merge(key, value)
            ev = rt.event
            at = ts + gap
            if at < ev[1]:
                raise TimeTravelError.schedule(at, ev[1])
            root = ev[0]
            seq = per_root.get(root, 0) + 1
            per_root[root] = seq
            o = next(order)
            if batch:
                heappush(scheduled, (at, o, Close(kind, at, root, seq, key, None)))
            else:  # a plain event: checkpoints store it
                heappush(scheduled, (at, o, ScheduledEvent(kind, at, root, seq, {"key": key})))
        except Exception as exc:
            fail(exc)

    one, _finish = closer(n, window, namespace, rt, value_of, drop, fail)
    return {f"{n}__add": add, f"{n}__close": one, **own}


def _queued(n: str, window: Session, namespace: dict, rt: SerialRuntime, fail: Callable) -> dict:
    """A session window added to at its events' times: one queue of open sessions.

    Long because: the add, the close and the queue of open sessions they share are closures
    over one set of locals, on the hot path of every event that adds to a session; split
    into functions of their own, each would look that state up again on every call.
    """
    merge, value_of, drop, own = aggregate(window, namespace, n)
    counts = store(namespace, f"{n}__n")
    first = store(namespace, f"{n}__first")
    last = store(namespace, f"{n}__last")
    drop = (counts, *drop)
    gap = window.gap
    kind = close_kind(n)
    table = window.table
    handler = f"{n}__close"
    callbacks = [namespace[fn.__name__] for fn in window.callbacks]
    per_root = rt.scheduled_per_root
    scheduled = rt.scheduled
    order = rt.order
    rows = rt.rows
    heappush, heappop = heapq.heappush, heapq.heappop
    # key -> [first, last, close time, order, lsn, seq] of its open session: the close time
    # and order of the close that will emit, the lsn and seq of the add that scheduled it.
    open_: dict = {}
    # Each open session has one entry, (close time, order, key, session), in ``fresh`` (in
    # the order they opened, which is their closes' order until they move on) or, once its
    # entry there was found to have moved on, in the heap ``moved``. An entry whose order is
    # no longer its session's is stale: the session moved on (its entry goes to ``moved``,
    # at the session's close), or closed (dropped).
    fresh: deque = deque()
    moved: list = []
    queued = [False]  # whether the window has its entry in the runtime's queue

    def add(key: Any, value: Any, ts: int) -> None:
        try:
            counts[key] = counts.get(key, 0) + 1
            if merge is not None:
                merge(key, value)
            root = rt.event[0]
            seq = per_root.get(root, 0) + 1
            per_root[root] = seq
            at = ts + gap
            rec = open_.get(key)
            if rec is None:
                o = next(order)
                open_[key] = rec = [ts, ts, at, o, root, seq]
                fresh.append((at, o, key, rec))
                if not queued[0]:  # (an entry there stands at or before every session's)
                    queued[0] = True
                    heappush(scheduled, (at, o, Close(kind, at, root, seq, key, None, o)))
                return
            rec[1] = ts
            if rec[2] != at:  # (a later close at the same time never emits: the first does)
                rec[2], rec[3], rec[4], rec[5] = at, next(order), root, seq
        except Exception as exc:
            fail(exc)

    def front() -> tuple | None:
        """The entry of the session that closes first (stale entries moved or dropped)."""
        while fresh:
            entry = fresh[0]
            rec = entry[3]
            if rec[3] == entry[1]:
                break
            fresh.popleft()
            if rec[3] is not None:
                heappush(moved, (rec[2], rec[3], entry[2], rec))
        while moved:
            entry = moved[0]
            rec = entry[3]
            if rec[3] == entry[1]:
                break
            heappop(moved)
            if rec[3] is not None:
                heappush(moved, (rec[2], rec[3], entry[2], rec))
        if not fresh:
            return moved[0] if moved else None
        if not moved or fresh[0][:2] < moved[0][:2]:
            return fresh[0]
        return moved[0]

    def emit(key: Any, rec: list, end: int, lsn: int, seq: int) -> None:
        """Close ``key``'s session ``rec`` at ``end``: its row, ``on_close``, its state."""
        del open_[key]
        rec[3] = None  # its entry is stale
        value = value_of(key)
        if table is not None:
            fields = {"key": key, "start": rec[0], "end": end, "value": value}
            rows[table].append((lsn, end, handler, seq, fields))
        for fn in callbacks:
            fn(key, rec[0], end, value)
        for d in drop:
            d.pop(key, None)

    def close(e: Any) -> None:
        try:
            if type(e) is not Close:  # a close the program scheduled itself
                rec = open_.get(e.key)
                if rec is not None and rec[1] + gap <= e.ts:
                    emit(e.key, rec, e.ts, e.lsn, e.seq)
                return
            at = e.ts
            while True:
                entry = front()
                if entry is None:
                    queued[0] = False
                    return
                at2, o, key, rec = entry
                lsn, seq = rec[4], rec[5]
                if at2 != at or (scheduled and scheduled[0][0] == at and scheduled[0][1] < o):
                    # Not now, or another scheduled event first: the window's entry moves.
                    heappush(scheduled, (at2, o, Close(kind, at2, lsn, seq, key, None, o)))
                    return
                if fresh and fresh[0] is entry:
                    fresh.popleft()
                else:
                    heappop(moved)
                if callbacks:  # what they emit or schedule comes from this close
                    rt.event = Close(kind, at, lsn, seq, key, None, o)
                    rt.seq = seq
                emit(key, rec, at, lsn, seq)
        except Exception as exc:
            fail(exc)

    finish_aggregate = own.get(FINISH)

    def finish(**_when: Any) -> None:  # (the state holds no clock-dependent part)
        for key, rec in open_.items():
            first[key] = rec[0]
            last[key] = rec[1]
        if finish_aggregate is not None:
            finish_aggregate()

    return {f"{n}__add": add, f"{n}__close": close, FINISH: finish}
