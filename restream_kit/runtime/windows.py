"""Windows run natively by the serial runtime: the same effects as their expansion, cheaper.

A window declaration (``restream_kit.windows``) is expanded at load time into ordinary code
(``restream_kit.compiler.expand_windows``): keyed state, timed writes, one scheduled close per
value added, and generated helpers. That code is what the planner reads and what the Spark
engine runs. The serial engine replaces the generated helpers of a compiled program with the
functions below, which keep every observable effect of the expansion:

- the window states hold the same keys and values as the expansion's once the replay ends,
  and every read of a window (``value``, a close's aggregate) sees what the expansion's does;
- tumbling and hopping: only the close scheduled by a window's first value can emit (the
  expansion's later closes find the window gone or still counting and do nothing, see
  ``expand_windows``), so only that one is put in the runtime's queue of scheduled events;
  the others only take their number (``seq``) from the runtime, as the expansion's do, so
  every row keeps its ``lsn`` and ``seq`` and ``Metrics.scheduled_events`` is unchanged;
- session: every value takes its number (``seq``) as its close would; when the adds come at
  their events' times (``_native_plan.adds_at_event_time``), an open session has one entry
  in the queue, which moves to the close that will emit (the first one scheduled at the
  last time plus the gap) when it comes up; otherwise one light close per add, whose check
  is the expansion's;
- sliding count, sum and mean: the same increments now and timed decrements, written to the
  runtime's queues directly; min, max and distinct: a queue per key changed in place
  (``_sliding_queues``), whose tuples the state gets when the replay ends;
- ``distinct`` of a closing window: a set per window added to in place, the state's
  frozensets written when the replay ends (``Fused.finish``): nothing else reads them before;
- a close writes its row and calls the ``on_close`` functions as the generated handler does.

A window keeps its expansion when another handler listens to its close events (each of them
must run), or (sliding distinct) when it is added to at other times than its events'
(``_native_plan.native_plan`` says so); the engine keeps it for guarded replays
(``on_error`` skip or quarantine roll runs back through the runtime's journal), recorded
histories, checkpoints and starts (``engines.serial._windows_off``).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from ..compiler.compile import CompiledProgram, dict_name
from ..compiler.expand_windows import close_kind
from ..model.windows import Hopping, Session, Sliding, Tumbling
from ._native_plan import adds_at_event_time, native_plan
from ._sliding_queues import sliding_distinct, sliding_extremes
from .semantics import ScheduledEvent, SerialRuntime, TimeTravelError

__all__ = ["fuse_windows", "Fused", "native_plan"]

#: The entry of a builder's result that is not a helper: what writes the window's state once
#: the replay ends (``Fused.finish``).
FINISH = "__finish__"


class _Close(ScheduledEvent):
    """A close event of a tumbling, hopping or session window (fields ``key``, ``start``);
    ``order`` its place in the queue (a session's entry, see ``_session``)."""

    def __init__(
        self, kind: str, ts: int, lsn: int, seq: int, key: Any, start: Any, order: int = 0
    ):
        self.key = key
        self.order = order
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


@dataclass
class Fused:
    """What :func:`fuse_windows` did: the windows that run natively, why the others keep
    their expansion (window -> reason), and what writes the native windows' state at the end
    of the replay (:meth:`finish`)."""

    names: list[str] = field(default_factory=list)
    off: dict[str, str] = field(default_factory=dict)
    finishers: list[Callable] = field(default_factory=list)

    def finish(self) -> None:
        """Write what the native windows hold in their own structures into their states."""
        for finish in self.finishers:
            finish()


def fuse_windows(
    compiled: CompiledProgram,
    rt: SerialRuntime,
    *,
    batch_closes: bool = True,
    only: Collection[str] | None = None,
) -> Fused:
    """Replace the generated helpers of ``compiled``'s windows with native ones where they
    can run natively (:func:`native_plan` says which and why not); the engine calls
    ``finish()`` on the result once the replay has run.

    ``batch_closes`` puts the closes of a tumbling or hopping window that end at one time in
    one entry of the runtime's queue (the engine turns it off when it checkpoints, since a
    checkpoint keeps the queue's events as they are). ``only``: fuse these windows alone (a
    Spark pass fuses the windows it holds whole, ``engines.spark``)."""
    program = compiled.program
    fused = Fused()
    for name, (native, why) in native_plan(program).items():
        if only is not None and name not in only:
            continue
        if not native:
            fused.off[name] = why
            continue
        window = program.windows[name]
        fail = _raiser(program.filename, compiled.namespace[f"{name}__add"])
        timed = isinstance(window, (Session, Sliding))
        extra = {"event_time": adds_at_event_time(program, name)} if timed else {}
        builder = _BUILDERS[type(window)]
        replaced = builder(name, window, compiled.namespace, rt, batch_closes, fail, **extra)
        finish = replaced.pop(FINISH, None)
        if finish is not None:
            fused.finishers.append(finish)
        compiled.namespace.update(replaced)
        fused.names.append(name)
    if fused.names:
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


def _aggregate(window: Any, namespace: dict, n: str) -> tuple[Callable, Callable, tuple, dict]:
    """(merge ``value`` into window ``w``, the aggregate of ``w``, the stores to delete, and
    ``{FINISH: finish}`` when the aggregate keeps structures of its own)."""
    agg = window.agg
    counts = _store(namespace, f"{n}__n")
    if agg == "count":
        return None, lambda w: counts.get(w, 0), (), {}
    if agg in ("sum", "mean"):
        sums = _store(namespace, f"{n}__sum")

        def merge(w: Any, value: Any) -> None:
            sums[w] = sums.get(w, 0) + value

        if agg == "sum":
            return merge, lambda w: sums.get(w, 0), (sums,), {}
        return merge, lambda w: sums.get(w, 0) / counts.get(w, 0), (sums,), {}
    if agg in ("min", "max"):
        best = _store(namespace, f"{n}__best")
        lower = agg == "min"

        def merge(w: Any, value: Any) -> None:
            old = best.get(w)
            if old is None or (value < old if lower else value > old):
                best[w] = value
            else:
                best[w] = old

        return merge, best.get, (best,), {}
    # distinct: a set per window, added to in place (the expansion copies a frozenset on
    # every new value); the state gets the open windows' frozensets when the replay ends.
    values = _store(namespace, f"{n}__values")
    sets: dict = {}
    empty = frozenset()

    def merge(w: Any, value: Any) -> None:
        held = sets.get(w)
        if held is None:
            sets[w] = {value}
        else:
            held.add(value)

    def finish() -> None:
        for w, held in sets.items():
            values[w] = frozenset(held)

    return merge, lambda w: len(sets.get(w, empty)), (sets, values), {FINISH: finish}


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
    merge, value_of, drop, own = _aggregate(window, namespace, n)
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
    return {f"{n}__into": into, f"{n}__add": add, f"{n}__close": close, **own}


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
    n: str,
    window: Session,
    namespace: dict,
    rt: SerialRuntime,
    batch: bool,
    fail: Callable,
    event_time: bool = False,
) -> dict:
    merge, value_of, drop, own = _aggregate(window, namespace, n)
    counts = _store(namespace, f"{n}__n")
    first = _store(namespace, f"{n}__first")
    last = _store(namespace, f"{n}__last")
    gap = window.gap
    kind = close_kind(n)
    per_root = rt.scheduled_per_root
    scheduled = rt.scheduled
    order = rt.order
    heappush = heapq.heappush
    # One entry in the queue per open session (``batch``, adds at their event's time):
    # ``ahead[key]`` is the close that will emit, the first one scheduled at the session's
    # last time plus the gap, as [at, order, root, seq]; the session's entry in the queue
    # stands at or before it and moves there when it comes up (see ``close``).
    one_entry = batch and event_time
    ahead: dict = {}

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
            seq = per_root[root] + 1
            per_root[root] = seq
            if not one_entry:
                o = next(order)
                if batch:
                    heappush(scheduled, (at, o, _Close(kind, at, root, seq, key, None)))
                else:  # a plain event: checkpoints store it
                    event = ScheduledEvent(kind, at, root, seq, {"key": key})
                    heappush(scheduled, (at, o, event))
                return
            rec = ahead.get(key)
            if rec is None:
                o = next(order)
                ahead[key] = [at, o, root, seq]
                heappush(scheduled, (at, o, _Close(kind, at, root, seq, key, None, o)))
            elif rec[0] != at:  # (a later close at the same time never emits: the first does)
                rec[0], rec[1], rec[2], rec[3] = at, next(order), root, seq
        except Exception as exc:
            fail(exc)

    one, _finish = _closer(n, window, namespace, rt, value_of, drop, fail)
    if not one_entry:
        return {f"{n}__add": add, f"{n}__close": one, **own}

    def close(e: Any) -> None:
        rec = ahead.get(e.key)
        if rec is not None and (rec[0], rec[1]) != (e.ts, e.order):
            # The session went on: its entry moves to the close that will emit.
            at, o, root, seq = rec
            heappush(scheduled, (at, o, _Close(kind, at, root, seq, e.key, None, o)))
            return
        ahead.pop(e.key, None)
        one(e)

    return {f"{n}__add": add, f"{n}__close": close, **own}


def _sliding(
    n: str,
    window: Sliding,
    namespace: dict,
    rt: SerialRuntime,
    _batch: bool,
    fail: Callable,
    event_time: bool = False,
) -> dict:
    agg = window.agg
    width = window.width
    if agg in ("min", "max"):
        store = _store(namespace, f"{n}__queue")
        add, value, finish = sliding_extremes(store, width, agg, fail)
        return {f"{n}__add": add, f"{n}__value": value, FINISH: finish}
    if agg == "distinct":  # (added at its events' times: ``native_plan``)
        add, value, finish = sliding_distinct(_store(namespace, f"{n}__recent"), width, fail)
        return {f"{n}__add": add, f"{n}__value": value, FINISH: finish}
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
