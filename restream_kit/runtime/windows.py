"""Windows run natively by the serial runtime: the same effects as their expansion, cheaper.

A window declaration (``restream_kit.windows``) is expanded at load time into ordinary code
(``restream_kit.compiler.expand_windows``): keyed state, timed writes, one scheduled close per
value added, and generated helpers. That code is what the planner reads and what the Spark
engine runs. The serial engine replaces the generated helpers of a compiled program with the
functions below, which keep every observable effect of the expansion:

- the window states hold the same keys and values after every event (so reads, the final
  state and checkpoints are the same);
- tumbling and hopping: only the close scheduled by a window's first value can emit (the
  expansion's later closes find the window gone or still counting and do nothing, see
  ``expand_windows``), so only that one is put in the runtime's queue of scheduled events;
  the others only take their number (``seq``) from the runtime, as the expansion's do, so
  every row keeps its ``lsn`` and ``seq`` and ``Metrics.scheduled_events`` is unchanged;
- session: every value still schedules a close, as a light event in the same queue (the
  session's close check is the expansion's);
- sliding count, sum and mean: the same increments now and timed decrements, written to the
  runtime's queues directly;
- a close writes its row and calls the ``on_close`` functions as the generated handler does.

A window keeps its expansion when another handler listens to its close events (each of them
must run), and the engine keeps the expansion for guarded replays (``on_error`` skip or
quarantine roll runs back through the runtime's journal) and for recorded histories.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

from ..compiler.compile import CompiledProgram, dict_name
from ..compiler.expand_windows import close_kind
from ..model.windows import Hopping, Session, Sliding, Tumbling
from .semantics import ScheduledEvent, SerialRuntime, TimeTravelError

__all__ = ["fuse_windows"]


class _Close(ScheduledEvent):
    """A close event of a tumbling, hopping or session window (fields ``key``, ``start``)."""

    def __init__(self, kind: str, ts: int, lsn: int, seq: int, key: Any, start: Any):
        self.key = key
        if start is not None:
            self.start = start
        self.kind = kind
        self.ts = ts
        self.lsn = lsn
        self.seq = seq


class _Batch(ScheduledEvent):
    """The closes of one window's windows that end at the same time ``ts``, in the order
    they opened: ``items`` of (order, key, start, lsn, seq), run from ``index`` on."""

    def __init__(self, kind: str, ts: int, lsn: int, seq: int, items: list, index: int = 0):
        self.kind = kind
        self.ts = ts
        self.lsn = lsn
        self.seq = seq
        self.items = items
        self.index = index


def fuse_windows(
    compiled: CompiledProgram, rt: SerialRuntime, *, batch_closes: bool = True
) -> list[str]:
    """Replace the generated helpers of ``compiled``'s windows with native ones; return the
    names of the windows that run natively (the others keep their expansion).

    ``batch_closes`` puts the closes of a tumbling or hopping window that end at one time in
    one entry of the runtime's queue (the engine turns it off when it checkpoints, since a
    checkpoint keeps the queue's events as they are)."""
    program = compiled.program
    listeners: dict[str, set[str]] = {}
    for h in program.handlers:
        for kind in h.kinds:
            listeners.setdefault(kind, set()).add(h.name)
    fused = []
    for name, window in program.windows.items():
        builder = _BUILDERS.get(type(window))
        if builder is None:
            continue
        if not isinstance(window, Sliding):
            if listeners.get(close_kind(name), set()) != {f"{name}__close"}:
                continue
        fail = _raiser(program.filename, compiled.namespace[f"{name}__add"])
        replaced = builder(name, window, compiled.namespace, rt, batch_closes, fail)
        if replaced is None:
            continue
        compiled.namespace.update(replaced)
        fused.append(name)
    if fused:
        compiled.handlers = tuple(
            (hname, compiled.namespace[hname]) for hname, _fn in compiled.handlers
        )
    return fused


def _raiser(filename: str, generated: Callable) -> Callable:
    """``fail(exc)``: re-raise ``exc`` from the window's declaration line in the program, as
    the expansion's code (which carries that line) would, so the error names that line."""
    lineno = generated.__code__.co_firstlineno
    namespace: dict[str, Any] = {}
    source = "\n" * (lineno - 1) + "def fail(exc): raise exc"
    exec(compile(source, filename, "exec"), namespace)
    return namespace["fail"]


def _store(namespace: dict, name: str) -> dict:
    return namespace[dict_name(name)]


def _aggregate(window: Any, namespace: dict, n: str) -> tuple[Callable, Callable, tuple]:
    """(merge ``value`` into window ``w``, the aggregate of ``w``, the stores to delete)."""
    agg = window.agg
    counts = _store(namespace, f"{n}__n")
    if agg == "count":
        return None, lambda w: counts.get(w, 0), ()
    if agg in ("sum", "mean"):
        sums = _store(namespace, f"{n}__sum")

        def merge(w: Any, value: Any) -> None:
            sums[w] = sums.get(w, 0) + value

        if agg == "sum":
            return merge, lambda w: sums.get(w, 0), (sums,)
        return merge, lambda w: sums.get(w, 0) / counts.get(w, 0), (sums,)
    if agg in ("min", "max"):
        best = _store(namespace, f"{n}__best")
        lower = agg == "min"

        def merge(w: Any, value: Any) -> None:
            old = best.get(w)
            if old is None or (value < old if lower else value > old):
                best[w] = value
            else:
                best[w] = old

        return merge, best.get, (best,)
    values = _store(namespace, f"{n}__values")
    empty = frozenset()

    def merge(w: Any, value: Any) -> None:
        old = values.get(w, empty)
        values[w] = old if value in old else old | {value}

    return merge, lambda w: len(values.get(w, empty)), (values,)


def _closer(
    n: str,
    window: Any,
    namespace: dict,
    rt: SerialRuntime,
    value_of: Callable,
    drop: tuple,
    fail: Callable,
) -> tuple[Callable, Callable]:
    """The close handler ``close(e)``, and ``finish(key, w, start, end, lsn, ts, seq)`` that
    writes a closing window's row, calls the ``on_close`` functions and deletes its state."""
    counts = _store(namespace, f"{n}__n")
    table = window.table
    callbacks = [namespace[fn.__name__] for fn in window.callbacks]
    handler = f"{n}__close"
    tables = rt.rows  # a table exists once a row goes to it: looked up when one does
    session = isinstance(window, Session)
    if session:
        first = _store(namespace, f"{n}__first")
        last = _store(namespace, f"{n}__last")
        gap = window.gap
        drop = (first, last, counts, *drop)
    else:
        width = window.width
        drop = (counts, *drop)

    def finish(key: Any, w: Any, start: Any, end: Any, lsn: int, ts: int, seq: int) -> None:
        value = value_of(w)
        if table is not None:
            fields = {"key": key, "start": start, "end": end, "value": value}
            tables[table].append((lsn, ts, handler, seq, fields))
        for fn in callbacks:
            fn(key, start, end, value)
        for d in drop:
            d.pop(w, None)

    def close(e: Any) -> None:
        try:
            if session:
                w = e.key
                end = last.get(w)
                if end is None or end + gap > e.ts:
                    return
                finish(e.key, w, first.get(w), e.ts, e.lsn, e.ts, e.seq)
            else:
                w = (e.key, e.start)
                if counts.get(w, 0):
                    finish(e.key, w, e.start, e.start + width, e.lsn, e.ts, e.seq)
        except Exception as exc:
            fail(exc)

    return close, finish


def _aligned(
    n: str,
    window: Tumbling | Hopping,
    namespace: dict,
    rt: SerialRuntime,
    batch: bool,
    fail: Callable,
) -> dict:
    merge, value_of, drop = _aggregate(window, namespace, n)
    counts = _store(namespace, f"{n}__n")
    width = window.width
    hop = window.hop if isinstance(window, Hopping) else width
    kind = close_kind(n)
    per_root = rt.scheduled_per_root
    scheduled = rt.scheduled
    order = rt.order
    counts_get = counts.get
    heappush = heapq.heappush
    pending: dict[int, list] = {}  # close time -> the items of its batch not yet run

    def opened(at: int, root: int, seq: int, key: Any, start: int) -> None:
        """Queue the close of a window that just got its first value."""
        o = next(order)
        if not batch:
            fields = {"key": key, "start": start}  # a plain event: checkpoints store it
            heappush(scheduled, (at, o, ScheduledEvent(kind, at, root, seq, fields)))
            return
        items = pending.get(at)
        if items is None:
            items = pending[at] = []
            heappush(scheduled, (at, o, _Batch(kind, at, root, seq, items)))
        items.append((o, key, start, root, seq))

    def into(key: Any, value: Any, start: int) -> None:
        try:
            w = (key, start)
            old = counts_get(w)
            counts[w] = 1 if old is None else old + 1
            if merge is not None:
                merge(w, value)
            ev = rt.event
            at = start + width
            if at < ev[1]:
                raise TimeTravelError.schedule(at, ev[1])
            root = ev[0]
            seq = per_root[root] + 1
            per_root[root] = seq
            if not old:  # the window's first value: its close is the one that emits
                opened(at, root, seq, key, start)
        except Exception as exc:
            fail(exc)

    if hop == width:
        # One window per value: ``into`` written out, as the hot path of a tumbling window.
        def add(key: Any, value: Any, ts: int) -> None:
            try:
                start = ts - ts % width
                w = (key, start)
                old = counts_get(w)
                counts[w] = 1 if old is None else old + 1
                if merge is not None:
                    merge(w, value)
                ev = rt.event
                at = start + width
                if at < ev[1]:
                    raise TimeTravelError.schedule(at, ev[1])
                root = ev[0]
                seq = per_root[root] + 1
                per_root[root] = seq
                if not old:
                    opened(at, root, seq, key, start)
            except Exception as exc:
                fail(exc)

    else:

        def add(key: Any, value: Any, ts: int) -> None:
            try:
                start = ts - ts % hop
                while start > ts - width:
                    into(key, value, start)
                    start -= hop
            except Exception as exc:
                fail(exc)

    one, finish = _closer(n, window, namespace, rt, value_of, drop, fail)
    close = _batch_closer(n, window, counts, rt, pending, (one, finish, fail))
    return {f"{n}__into": into, f"{n}__add": add, f"{n}__close": close}


def _batch_closer(
    n: str,
    window: Tumbling | Hopping,
    counts: dict,
    rt: SerialRuntime,
    pending: dict,
    closers: tuple[Callable, Callable, Callable],
) -> Callable:
    """The close handler of a tumbling or hopping window: runs a batch of closes (``_Batch``),
    or one close event (restored from a checkpoint, or queued when batches are off)."""
    one, finish, fail = closers
    callbacks = bool(window.callbacks)
    kind = close_kind(n)
    width = window.width
    scheduled = rt.scheduled
    counts_get = counts.get
    heappush = heapq.heappush

    def close(e: Any) -> None:
        try:
            if type(e) is not _Batch:
                one(e)
                return
            items, at = e.items, e.ts
            if pending.get(at) is items:
                del pending[at]  # windows closing at ``at`` from now on go to a new batch
            for i in range(e.index, len(items)):
                o, key, start, root, seq = items[i]
                if i > e.index and scheduled and scheduled[0][:2] < (at, o):
                    # An event queued between these closes runs first, as it would have.
                    heappush(scheduled, (at, o, _Batch(kind, at, root, seq, items, i)))
                    return
                w = (key, start)
                if not counts_get(w, 0):
                    continue
                if callbacks:  # what they emit or schedule comes from this close
                    rt.event = _Close(kind, at, root, seq, key, start)
                    rt.seq = seq
                finish(key, w, start, start + width, root, at, seq)
        except Exception as exc:
            fail(exc)

    return close


def _session(
    n: str, window: Session, namespace: dict, rt: SerialRuntime, batch: bool, fail: Callable
) -> dict:
    merge, value_of, drop = _aggregate(window, namespace, n)
    counts = _store(namespace, f"{n}__n")
    first = _store(namespace, f"{n}__first")
    last = _store(namespace, f"{n}__last")
    gap = window.gap
    kind = close_kind(n)
    per_root = rt.scheduled_per_root
    scheduled = rt.scheduled
    order = rt.order
    # Checkpoints store the queue's events, and only plain ones (batch is off then).
    event = (
        (lambda kind, at, root, seq, key: _Close(kind, at, root, seq, key, None))
        if batch
        else (lambda kind, at, root, seq, key: ScheduledEvent(kind, at, root, seq, {"key": key}))
    )

    def add(key: Any, value: Any, ts: int) -> None:
        try:
            if first.get(key) is None:
                first[key] = ts
            else:
                first[key] = first[key]
            last[key] = ts
            counts[key] = counts.get(key, 0) + 1
            if merge is not None:
                merge(key, value)
            ev = rt.event
            at = ts + gap
            if at < ev[1]:
                raise TimeTravelError.schedule(at, ev[1])
            root = ev[0]
            per_root[root] += 1
            heapq.heappush(scheduled, (at, next(order), event(kind, at, root, per_root[root], key)))
        except Exception as exc:
            fail(exc)

    close, _finish = _closer(n, window, namespace, rt, value_of, drop, fail)
    return {f"{n}__add": add, f"{n}__close": close}


def _sliding(
    n: str, window: Sliding, namespace: dict, rt: SerialRuntime, _batch: bool, fail: Callable
) -> dict | None:
    agg = window.agg
    if agg not in ("count", "sum", "mean"):
        return None  # min, max, distinct: the expansion's helpers are plain code already
    width = window.width
    future = rt.future
    order = rt.order
    counts = _store(namespace, f"{n}__n") if agg in ("count", "mean") else None
    sums = _store(namespace, f"{n}__sum") if agg in ("sum", "mean") else None

    def add(key: Any, value: Any, ts: int) -> None:
        try:
            now = rt.event[1]
            at = ts + width
            if counts is not None:
                counts[key] = counts.get(key, 0) + 1
                _later(at, now, counts, key, -1)
            if sums is not None:
                sums[key] = sums.get(key, 0) + value
                _later(at, now, sums, key, -value)
        except Exception as exc:
            fail(exc)

    def _later(at: int, now: int, d: dict, key: Any, amount: Any) -> None:
        if at == now:
            d[key] = d.get(key, 0) + amount
        elif at < now:
            raise TimeTravelError.write(at, now)
        else:
            heapq.heappush(future, (at, next(order), d, 0, "add", key, amount))

    if agg == "count":

        def value(key: Any, ts: int) -> Any:
            try:
                return counts.get(key, 0)
            except Exception as exc:
                fail(exc)

    elif agg == "sum":

        def value(key: Any, ts: int) -> Any:
            try:
                return sums.get(key, 0)
            except Exception as exc:
                fail(exc)

    else:

        def value(key: Any, ts: int) -> Any:
            try:
                c = counts.get(key, 0)
                return sums.get(key, 0) / c if c else None
            except Exception as exc:
                fail(exc)

    return {f"{n}__add": add, f"{n}__value": value}


_BUILDERS = {Tumbling: _aligned, Hopping: _aligned, Session: _session, Sliding: _sliding}
