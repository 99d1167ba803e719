"""Parts the native windows share (``runtime.windows``, ``runtime._sessions``): the close
event they queue, the aggregates they keep, and what a closing window does."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..compiler.compile import dict_name
from ..model.windows import Session
from .semantics import ScheduledEvent, SerialRuntime

__all__ = ["FINISH", "INLINE", "CLOCK", "Close", "store", "aggregate", "closer", "numbered"]

#: The entry of a builder's result that is not a helper: what writes the window's state once
#: the replay ends (``Fused.finish``).
FINISH = "__finish__"
#: The entry of a builder's result that gives helper calls written out in a replay's loop:
#: helper -> (site, the globals its code uses) (``compiler.inline_windows``).
INLINE = "__inline__"
#: The global of a compiled program's namespace that holds (in a list) the time up to which
#: the replay's loop is running scheduled events (``compiler.inline_windows``); minus
#: infinity when no loop says.
CLOCK = "_rsn_clock"


class Close(ScheduledEvent):
    """A close event of a tumbling, hopping or session window (fields ``key``, ``start``:
    the expansion's close event's, which an error shows); ``_order``, its place in the
    queue (a session's entry, see ``_sessions``), is kept by the queue's entry, not here."""

    def __init__(
        self, kind: str, ts: int, lsn: int, seq: int, key: Any, start: Any, _order: int = 0
    ):
        self.key = key
        if start is not None:
            self.start = start
        self.kind = kind
        self.ts = ts
        self.lsn = lsn
        self.seq = seq


def store(namespace: dict, name: str) -> dict:
    return namespace[dict_name(name)]


def numbered(put: Callable, rt: SerialRuntime, fail: Callable) -> tuple[Callable, Callable]:
    """``(open(key, value, at, seq), add(key, value, at))`` of a window whose adds go through
    ``put(key, value, at, seq)`` (``at``: a start or a time): ``open`` with the add's number
    ``seq`` given (by an add written out in a loop), ``add`` taking it from the runtime, as
    the expansion's close would; an error re-raised through ``fail``."""
    per_root = rt.scheduled_per_root

    def open_(key: Any, value: Any, at: Any, seq: int) -> None:
        try:
            put(key, value, at, seq)
        except Exception as exc:
            fail(exc)

    def add(key: Any, value: Any, at: Any) -> None:
        try:
            root = rt.event[0]
            seq = per_root.get(root, 0) + 1
            per_root[root] = seq
            put(key, value, at, seq)
        except Exception as exc:
            fail(exc)

    return open_, add


def aggregate(window: Any, namespace: dict, n: str) -> tuple[Callable, Callable, tuple, dict]:
    """(merge ``value`` into window ``w``, the aggregate of ``w``, the stores to delete, and
    ``{FINISH: finish}`` when the aggregate keeps structures of its own)."""
    agg = window.agg
    counts = store(namespace, f"{n}__n")
    if agg == "count":
        return None, lambda w: counts.get(w, 0), (), {}
    if agg in ("sum", "mean"):
        sums = store(namespace, f"{n}__sum")

        def merge(w: Any, value: Any) -> None:
            sums[w] = sums.get(w, 0) + value

        if agg == "sum":
            return merge, lambda w: sums.get(w, 0), (sums,), {}
        return merge, lambda w: sums.get(w, 0) / counts.get(w, 0), (sums,), {}
    if agg in ("min", "max"):
        best = store(namespace, f"{n}__best")
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
    values = store(namespace, f"{n}__values")
    sets: dict = {}
    empty = frozenset()

    def merge(w: Any, value: Any) -> None:
        held = sets.get(w)
        if held is None:
            sets[w] = {value}
        else:
            held.add(value)

    def finish(**_when: Any) -> None:  # (the sets do not depend on the clock)
        for w, held in sets.items():
            values[w] = frozenset(held)

    return merge, lambda w: len(sets.get(w, empty)), (sets, values), {FINISH: finish}


def closer(
    n: str,
    window: Any,
    namespace: dict,
    rt: SerialRuntime,
    value_of: Callable,
    drop: tuple,
    fail: Callable,
    closed: Callable | None = None,
) -> tuple[Callable, Callable]:
    """The close handler ``close(e)``, and ``finish(key, w, start, end, lsn, ts, seq)`` that
    writes a closing window's row, calls the ``on_close`` functions (``closed``: written out
    in one, ``compiler.inline_closes``) and deletes its state."""
    counts = store(namespace, f"{n}__n")
    table = window.table
    callbacks = [namespace[fn.__name__] for fn in window.callbacks]
    handler = f"{n}__close"
    tables = rt.rows  # a table exists once a row goes to it: looked up when one does
    session = isinstance(window, Session)
    if session:
        first = store(namespace, f"{n}__first")
        last = store(namespace, f"{n}__last")
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
        if closed is not None:
            closed(key, start, end, value, lsn, ts, seq)
        else:
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
