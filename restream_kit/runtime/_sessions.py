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
from ..compiler.inline_windows import statement_add
from ..model.windows import Session
from ._aligned import FIRST, MERGE, STATE, closing_parts, indent, merger, value_getter
from ._close_frames import session_frame, session_loop
from ._window_parts import CLOCK, FINISH, INLINE, Close, aggregate, closer, numbered, store
from ._window_rows import SESSION_ORDER, Blocks, WindowRows
from .semantics import MAX_FLUSH, ScheduledEvent, SerialRuntime, TimeTravelError, flush_overrun

__all__ = ["session"]


def session(
    n: str,
    window: Session,
    namespace: dict,
    rt: SerialRuntime,
    batch: bool,
    fail: Callable,
    event_time: bool = False,
    blocks: Blocks | None = None,
    lazy: bool = False,
    write: Callable | None = None,
) -> dict:
    """The native helpers of session window ``n`` (``n__add``, ``n__close``, and what writes
    its state when the replay ends). ``lazy`` (with ``blocks``): its rows are made when asked
    for (:func:`_lazy`). ``write``: what writes the ``on_close`` functions out in a close
    (``compiler.inline_closes.close_call`` given a frame, ``_close_frames``)."""
    if batch and event_time and lazy and blocks is not None and not window.callbacks:
        return _lazy(n, window, namespace, rt, blocks, fail)
    if batch and event_time:
        return _queued(n, window, namespace, rt, fail, write)
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

    one, _finish = closer(n, window, namespace, rt, value_of, drop, fail, write and write())
    return {f"{n}__add": add, f"{n}__close": one, **own}


def _queued(
    n: str,
    window: Session,
    namespace: dict,
    rt: SerialRuntime,
    fail: Callable,
    write: Callable | None = None,
) -> dict:
    """A session window added to at its events' times: one queue of open sessions.

    Long because: the add, the close and the queue of open sessions they share are closures
    over one set of locals, on the hot path of every event that adds to a session; split
    into functions of their own, each would look that state up again on every call.
    """
    agg = window.agg
    merge, first = merger(agg)
    value_of = value_getter(agg)
    counts, aggregates, kind, handler, table, callbacks = closing_parts(n, window, namespace)
    firsts = store(namespace, f"{n}__first")
    lasts = store(namespace, f"{n}__last")
    gap = window.gap
    per_root = rt.scheduled_per_root
    scheduled = rt.scheduled
    future = rt.future
    order = rt.order
    rows = rt.rows
    heappush, heappop = heapq.heappush, heapq.heappop
    # key -> [count, aggregate, lsn, seq, order, first, last, close time] of its open
    # session: the lsn, seq, order and time of the close that will emit.
    open_: dict = {}
    # Each open session has one entry, (close time, order, key, session), in ``fresh`` (in
    # the order they opened, which is their closes' order until they move on) or, once its
    # entry there was found to have moved on, in the heap ``moved``. An entry whose order is
    # no longer its session's is stale: the session moved on (its entry goes to ``moved``,
    # at the session's close), or closed (dropped).
    fresh: deque = deque()
    moved: list = []
    queued = [False]  # whether the window has its entry in the runtime's queue
    # The time the replay's loop runs scheduled events up to (``CLOCK``): sessions closing
    # by then close one after the other while nothing else is queued before them.
    clock = namespace.setdefault(CLOCK, [float("-inf")])

    def put(key: Any, value: Any, ts: int, seq: int) -> None:
        """Add ``value`` to ``key``'s session at ``ts`` with the add's number ``seq``."""
        root = rt.event[0]
        at = ts + gap
        rec = open_.get(key)
        if rec is None:
            o = next(order)
            open_[key] = rec = [1, first(value), root, seq, o, ts, ts, at]
            fresh.append((at, o, key, rec))
            if not queued[0]:  # (an entry there stands at or before every session's)
                queued[0] = True
                heappush(scheduled, (at, o, Close(kind, at, root, seq, key, None, o)))
            return
        rec[0] += 1
        merge(rec, value)
        rec[6] = ts
        if rec[7] != at:  # (a later close at the same time never emits: the first does)
            rec[7], rec[4], rec[2], rec[3] = at, next(order), root, seq

    _opener, add = numbered(put, rt, fail)

    def front() -> tuple | None:
        """The entry of the session that closes first (stale entries moved or dropped)."""
        while fresh:
            entry = fresh[0]
            rec = entry[3]
            if rec[4] == entry[1]:
                break
            fresh.popleft()
            if rec[4] is not None:
                heappush(moved, (rec[7], rec[4], entry[2], rec))
        while moved:
            entry = moved[0]
            rec = entry[3]
            if rec[4] == entry[1]:
                break
            heappop(moved)
            if rec[4] is not None:
                heappush(moved, (rec[7], rec[4], entry[2], rec))
        if not fresh:
            return moved[0] if moved else None
        if not moved or fresh[0][:2] < moved[0][:2]:
            return fresh[0]
        return moved[0]

    def emit(key: Any, rec: list, end: int, lsn: int, seq: int) -> None:
        """Close ``key``'s session ``rec`` at ``end``: its row, ``on_close``."""
        del open_[key]
        rec[4] = None  # its entry is stale
        value = rec[0] if value_of is None else value_of(rec)
        if table is not None:
            fields = {"key": key, "start": rec[5], "end": end, "value": value}
            rows[table].append((lsn, end, handler, seq, fields))
        for fn in callbacks:
            fn(key, rec[5], end, value)

    loop = None
    if write is not None:  # the on_close functions written out (``_close_frames``)
        emit = write(*session_frame(n, agg, table, handler, rt, open_)) or emit
        parts = {"open": open_, "fresh": fresh, "moved": moved, "queued": queued, "clock": clock}
        loop = write(*session_loop(n, agg, table, handler, rt, kind, parts))

    def close(e: Any) -> None:
        try:
            if type(e) is not Close:  # a close the program scheduled itself
                rec = open_.get(e.key)
                if rec is not None and rec[6] + gap <= e.ts:
                    emit(e.key, rec, e.ts, e.lsn, e.seq)
                return
            if loop is not None:  # (the loop below, written out with the functions)
                loop(e.ts)
                return
            at = e.ts
            while True:
                entry = front()
                if entry is None:
                    queued[0] = False
                    return
                at2, o, key, rec = entry
                if scheduled and scheduled[0][0] <= at2 and scheduled[0][:2] < (at2, o):
                    # Another scheduled event first: the window's entry moves.
                    heappush(scheduled, (at2, o, Close(kind, at2, rec[2], rec[3], key, None, o)))
                    return
                if at2 != at:
                    if at2 > clock[0]:  # not due yet
                        heappush(
                            scheduled, (at2, o, Close(kind, at2, rec[2], rec[3], key, None, o))
                        )
                        return
                    at = at2  # due, and next: it closes now, as its own entry would
                    if future and future[0][0] <= at:
                        rt.apply_due(at)
                if fresh and fresh[0] is entry:
                    fresh.popleft()
                else:
                    heappop(moved)
                if callbacks:  # what they emit or schedule comes from this close
                    ev = rt.event  # (already this close's when its own entry runs it)
                    if not (
                        type(ev) is Close
                        and ev.key is key
                        and ev.kind == kind
                        and ev.ts == at
                        and ev.lsn == rec[2]
                        and ev.seq == rec[3]
                    ):
                        rt.event = Close(kind, at, rec[2], rec[3], key, None, o)
                    rt.seq = rec[3]
                emit(key, rec, at, rec[2], rec[3])
        except Exception as exc:
            fail(exc)

    def finish(**_when: Any) -> None:  # (the state holds no clock-dependent part)
        frozen = agg == "distinct"
        for key, rec in open_.items():
            counts[key] = rec[0]
            firsts[key] = rec[5]
            lasts[key] = rec[6]
            if aggregates is not None:
                aggregates[key] = frozenset(rec[1]) if frozen else rec[1]

    g = f"_rsn_{n}_"
    names = {"get": open_.get, "roots": per_root, "root_get": per_root.get, "order": order}
    names.update(dict=open_, fresh=fresh, queued=queued, scheduled=scheduled)
    names.update(push=heappush, Close=Close)
    globals_ = {f"{g}{what}": value for what, value in names.items()}

    @statement_add
    def site(p: str, k: str, v: str, t: str) -> str:
        # A new session: ``put``'s steps in place.
        new = [
            f"{p}o = next({g}order)",
            f"{p}a = {t} + {gap}",
            f"{p}r = [1, {FIRST[agg].format(v=v)}, _rs_ev[0], {p}q, {p}o, {t}, {t}, {p}a]",
            f"{g}dict[{k}] = {p}r",
            f"{g}fresh.append(({p}a, {p}o, {k}, {p}r))",
            f"if not {g}queued[0]:",
            f"    {g}queued[0] = True",
            f"    {p}c = {g}Close({kind!r}, {p}a, _rs_ev[0], {p}q, {k}, None)",
            f"    {g}push({g}scheduled, ({p}a, {p}o, {p}c))",
        ]
        lines = [*_looked_up(g, p, k), indent("\n".join(new))]
        lines += _added(g, p, agg, v, f"{t} + {gap}", close=7, last=t)
        return "\n".join(lines)

    return {
        f"{n}__add": add,
        f"{n}__close": close,
        FINISH: finish,
        INLINE: {f"{n}__add": (site, globals_)},
    }


def _lazy(
    n: str, window: Session, namespace: dict, rt: SerialRuntime, blocks: Blocks, fail: Callable
) -> dict:
    """A session window without ``on_close`` functions, added to by log events at their
    times, alone in emitting to its table (``_native_plan``): nothing waits in the runtime's
    queue. Its rows are all its table gets, in its closes' order (``SESSION_ORDER``), and
    nothing reads its sessions but its adds: a session closes when an add finds its close
    time reached (the close would have run before that event); the rows are made when asked
    for (``blocks.settle``) or at the end (every session's after the flush, with the timed
    writes due by their closes)."""
    agg = window.agg
    merge, first = merger(agg)
    gap = window.gap
    table = window.table
    handler = f"{n}__close"
    per_root = rt.scheduled_per_root
    order = rt.order
    rows = rt.rows
    # key -> [count, aggregate, lsn, seq, order, first, close time, key] of its session (its
    # emitting close's; its last add at its close time less the gap); ``closed``: sessions
    # found closed, whose rows wait.
    open_: dict = {}
    closed: list = []

    def put(key: Any, value: Any, ts: int) -> None:
        root = rt.event[0]
        seq = per_root.get(root, 0) + 1
        per_root[root] = seq
        rec = open_.get(key)
        if rec is not None and rec[6] <= ts:
            closed.append(rec)
            del open_[key]
            rec = None
        if rec is None:
            open_[key] = [1, first(value), root, seq, next(order), ts, ts + gap, key]
            return
        rec[0] += 1
        merge(rec, value)
        if rec[6] != ts + gap:
            rec[6], rec[4], rec[2], rec[3] = ts + gap, next(order), root, seq

    def add(key: Any, value: Any, ts: int) -> None:  # (a call not written out in the loop)
        try:
            put(key, value, ts)
        except Exception as exc:
            fail(exc)

    def settle(now: float | None = None) -> None:
        """The rows of the sessions closed by ``now`` (None: the last event's time)."""
        made(_closed_by(_time_of(rt.event) if now is None else now, open_, closed))

    def made(due: list) -> None:
        if due:
            rows[table].append(WindowRows.sessions(due, handler, agg))
            blocks.tables.add(table)

    def finish(flushed: bool = False, **_when: Any) -> None:
        """The rows left (every session's when the log was flushed); the state of the
        sessions still open."""
        if not (flushed and open_):
            settle(float("inf") if flushed else None)
            _hold(n, agg, gap, namespace, open_)
            return
        if len(open_) > MAX_FLUSH:
            raise flush_overrun()
        due = _closed_by(float("inf"), open_, closed)
        _flushed_to(rt, close_kind(n), due[-1])
        made(due)

    blocks.settlers.append(settle)
    blocks.finishers.append(finish)  # (before the other windows': see ``Blocks``)
    g = f"_rsn_{n}_"
    names = {
        "open": open_,
        "get": open_.get,
        "closed": closed.append,
        "roots": per_root,
        "root_get": per_root.get,
        "order": order,
    }
    globals_ = {f"{g}{what}": value for what, value in names.items()}
    site = _lazy_site(g, agg, gap)
    return {f"{n}__add": add, f"{n}__close": _never, INLINE: {f"{n}__add": (site, globals_)}}


def _flushed_to(rt: SerialRuntime, kind: str, rec: list) -> None:
    """The runtime as the flush's last close of a lazy session window would leave it: that
    of session ``rec``, the one the last add moved on (still open, its place in the queue
    the latest of all): the timed writes due by its close applied, and its close the
    runtime's event (as the other windows' finishers see the clock) if later."""
    last = rec[6]
    if rt.future and rt.future[0][0] <= last:
        rt.apply_due(last)
    if _time_of(rt.event) < last:
        rt.event = Close(kind, last, rec[2], rec[3], rec[7], None, rec[4])


def _closed_by(now: float, open_: dict, closed: list) -> list:
    """The sessions closed by ``now``, in their closes' order: those found closed (``closed``,
    emptied) and those of ``open_`` whose close time has come (taken out of it)."""
    due = closed[:]
    closed.clear()
    if now == float("inf"):
        due += open_.values()
        open_.clear()
    else:
        ended = [key for key, rec in open_.items() if rec[6] <= now]
        due += [open_.pop(key) for key in ended]
    due.sort(key=SESSION_ORDER)
    return due


def _hold(n: str, agg: str, gap: int, namespace: dict, open_: dict) -> None:
    """Write a lazy session window's open sessions (``open_``) into its states."""
    counts = store(namespace, f"{n}__n")
    firsts = store(namespace, f"{n}__first")
    lasts = store(namespace, f"{n}__last")
    aggregates = store(namespace, f"{n}{STATE[agg]}") if agg in STATE else None
    frozen = agg == "distinct"
    for key, rec in open_.items():
        counts[key] = rec[0]
        firsts[key] = rec[5]
        lasts[key] = rec[6] - gap
        if aggregates is not None:
            aggregates[key] = frozenset(rec[1]) if frozen else rec[1]


def _lazy_site(g: str, agg: str, gap: int) -> Callable:
    """The add of a lazy session window written out in a replay's loop (its globals named
    ``g...``): a new session's record made in place, a closed one's kept for its row."""

    @statement_add
    def site(p: str, k: str, v: str, t: str) -> str:
        new = f"{g}open[{k}] = [1, {FIRST[agg].format(v=v)}, _rs_ev[0], {p}q, next({g}order), "
        new += f"{t}, {t} + {gap}, {k}]"
        lines = [
            *_looked_up(g, p, k),
            f"    {new}",
            f"elif {p}r[6] <= {t}:",
            f"    {g}closed({p}r)",
            f"    del {g}open[{k}]",
            f"    {new}",
            *_added(g, p, agg, v, f"{t} + {gap}", close=6),
        ]
        return "\n".join(lines)

    return site


def _looked_up(g: str, p: str, k: str) -> list[str]:
    """The start of a session window's add written out in a loop (its globals named
    ``g...``, its locals ``p...``): the add's number ``q`` taken, key ``k``'s session
    record ``r`` looked up, and the test for none (the lines for a new one follow)."""
    return [
        f"{p}q = {g}root_get(_rs_ev[0], 0) + 1",
        f"{g}roots[_rs_ev[0]] = {p}q",
        f"{p}r = {g}get({k})",
        f"if {p}r is None:",
    ]


def _added(
    g: str, p: str, agg: str, v: str, at: str, close: int, last: str | None = None
) -> list[str]:
    """The end of a session window's add written out in a loop (:func:`_looked_up`): value
    ``v`` counted and merged into the open session ``r``, its last time set to ``last``
    (when the record keeps it apart), and its close (the record's item ``close``) moved to
    ``at`` with a new place in the queue, ``lsn`` and ``seq`` when that changes it."""
    lines = ["else:", f"    {p}r[0] += 1"]
    merge_line = MERGE[agg].format(r=f"{p}r", v=v)
    if merge_line:
        lines.append(indent(merge_line))
    if last is not None:
        lines.append(f"    {p}r[6] = {last}")
    return [
        *lines,
        f"    if {p}r[{close}] != {at}:",
        f"        {p}r[{close}] = {at}",
        f"        {p}r[4] = next({g}order)",
        f"        {p}r[2] = _rs_ev[0]",
        f"        {p}r[3] = {p}q",
    ]


def _never(e: Any) -> None:
    """The close handler of a lazy session window: none of its closes is ever queued."""


def _time_of(event: Any) -> float:
    """The time of the runtime's current event (a log event's tuple or a scheduled event)."""
    return float("-inf") if event is None else event[1]
