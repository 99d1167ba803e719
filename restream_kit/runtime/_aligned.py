"""Tumbling and hopping windows run natively (``runtime.windows``): the same rows, states and
``seq`` as their expansion (``compiler.expand_windows``), which schedules a close per add.

The open windows wait in one dict per start (``buckets``: start -> key -> record), a record
``[count, aggregate, lsn, seq, order]`` per window: an add to an open window is one dict
lookup and changes its record in place; the add that opens it records the ``lsn``, ``seq``
and queue order of its close, the one of the expansion's closes that emits (its later ones
find the window still counting or gone and do nothing). All the windows of a start close at
the same time, in the order they opened: the dict's order. A start has one entry in the
runtime's queue of scheduled events (a batch), at its close time, in its first window's
place; it closes the windows one by one and lets an event queued between two of them run
first (it puts the rest back). Every add takes its number (``seq``) from the runtime as its
close would, so rows keep their ``lsn`` and ``seq`` and ``Metrics.scheduled_events`` is the
expansion's. The states get the open windows' counts and aggregates once the replay ends
(``finish``): nothing else reads them while it runs.

In a replay's loop, an add that is a statement of an inlined handler is written out in the
loop (:func:`add_site`, ``compiler.inline_windows``) instead of calling ``add``.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

from ..compiler.expand_windows import close_kind
from ..compiler.inline_windows import statement_add
from ..model.windows import Hopping, Tumbling
from ._close_frames import aligned_frame
from ._window_parts import FINISH, INLINE, Close, numbered, store
from ._window_rows import Blocks, WindowRows
from .semantics import ScheduledEvent, SerialRuntime, TimeTravelError

__all__ = [
    "aligned",
    "FIRST",
    "MERGE",
    "STATE",
    "closing_parts",
    "indent",
    "merger",
    "value_getter",
]

#: Per aggregate: the record's aggregate for a window's first value ``{v}``, the statement
#: that adds ``{v}`` to record ``{r}``, and the state that gets the aggregate at the end.
FIRST = {
    "count": "None",
    "sum": "0 + {v}",
    "mean": "0 + {v}",
    "min": "{v}",
    "max": "{v}",
    "distinct": "{{{v}}}",
}
MERGE = {
    "count": "",
    "sum": "{r}[1] = {r}[1] + {v}",
    "mean": "{r}[1] = {r}[1] + {v}",
    "min": "if {r}[1] is None or {v} < {r}[1]:\n    {r}[1] = {v}",
    "max": "if {r}[1] is None or {v} > {r}[1]:\n    {r}[1] = {v}",
    "distinct": "{r}[1].add({v})",
}
STATE = {"sum": "__sum", "mean": "__sum", "min": "__best", "max": "__best", "distinct": "__values"}
#: Windows of one event written out one by one up to this many, a loop beyond.
_UNROLL = 4


class _Batch(ScheduledEvent):
    """The close of the windows of one start, ``start``, at ``ts``: ``items`` the (key,
    record) pairs to close (taken when it first runs), from ``index`` on."""

    def __init__(
        self, kind: str, ts: int, lsn: int, seq: int, start: int, items: Any = None, index=0
    ):
        self.kind = kind
        self.ts = ts
        self.lsn = lsn
        self.seq = seq
        self.start = start
        self.items = items
        self.index = index


def value_getter(agg: str) -> Callable | None:
    """The aggregate of a record (None: its count)."""
    return {
        "count": None,
        "sum": lambda r: r[1],
        "mean": lambda r: r[1] / r[0],
        "min": lambda r: r[1],
        "max": lambda r: r[1],
        "distinct": lambda r: len(r[1]),
    }[agg]


def merger(agg: str) -> tuple[Callable, Callable]:
    """``merge(record, value)`` and ``first(value)`` (a record's first aggregate): what the
    written-out add does (:data:`MERGE`, :data:`FIRST`), as functions."""
    source = "def merge(r, v):\n" + indent(MERGE[agg].format(r="r", v="v") or "pass")
    source += "\ndef first(v):\n    return " + FIRST[agg].format(v="v")
    namespace: dict = {}
    exec(source, namespace)
    return namespace["merge"], namespace["first"]


def _rows(bucket: dict, start: int, width: int, at: int, handler: str, value_of: Any) -> list:
    """The rows of the windows of ``bucket`` (key -> record) closing at ``at``, in order."""
    end = start + width
    if value_of is None:
        return [
            (r[2], at, handler, r[3], {"key": k, "start": start, "end": end, "value": r[0]})
            for k, r in bucket.items()
        ]
    return [
        (r[2], at, handler, r[3], {"key": k, "start": start, "end": end, "value": value_of(r)})
        for k, r in bucket.items()
    ]


def closing_parts(n: str, window: Any, namespace: dict) -> tuple:
    """``(counts, aggregates, close kind, close handler, table, on_close functions)`` of
    closing window ``n``: its states of counts and of aggregates (None for a count) and
    what its closes are and call."""
    agg = window.agg
    return (
        store(namespace, f"{n}__n"),
        store(namespace, f"{n}{STATE[agg]}") if agg in STATE else None,
        close_kind(n),
        f"{n}__close",
        window.table,
        [namespace[fn.__name__] for fn in window.callbacks],
    )


def indent(text: str, spaces: int = 4) -> str:
    """``text`` with every line indented by ``spaces``."""
    return "\n".join(" " * spaces + line for line in text.splitlines())


def aligned(
    n: str,
    window: Tumbling | Hopping,
    namespace: dict,
    rt: SerialRuntime,
    batch: bool,
    fail: Callable,
    blocks: Blocks | None = None,
    write: Callable | None = None,
) -> dict:
    """The native helpers of tumbling or hopping window ``n``: ``n__into``, ``n__add`` and
    ``n__close``, what writes the states at the end, and the add written out in a loop.
    ``blocks``: the windows of a start closing at once leave their rows as one
    :class:`~._window_rows.WindowRows` (see :class:`~._window_rows.Blocks`). ``write``:
    what writes the ``on_close`` functions out in a batch's closes
    (``compiler.inline_closes.close_call`` given a frame, ``_close_frames``).

    Long because: the adds, the closes and the open windows they share are closures over
    one set of locals, on the hot path of every event that adds to a window; split into
    functions of their own, each would look that state up again on every call.
    """
    agg = window.agg
    merge, first = merger(agg)
    value_of = value_getter(agg)
    counts, aggregates, kind, handler, table, callbacks = closing_parts(n, window, namespace)
    width = window.width
    hop = window.hop if isinstance(window, Hopping) else width
    per_root = rt.scheduled_per_root
    scheduled = rt.scheduled
    order = rt.order
    rows = rt.rows
    heappush = heapq.heappush
    buckets: dict[int, dict] = {}  # start -> key -> record, of windows not closing
    closing: dict[int, dict] = {}  # start -> its windows, while its batch runs
    # A batch's closes with the on_close functions written out (``_close_frames``).
    run = write(*aligned_frame(n, agg, width, kind, table, handler, rt)) if write else None

    def put(key: Any, value: Any, start: int, seq: int, n: int = 1) -> None:
        """Add ``value`` to window (key, start) with the add's number ``seq``; ``n``: that
        many adds of a count, summed (a Spark close pass fed summed adds, ``passes._narrow``)."""
        if closing:  # (an add from an event run between two closes of a batch)
            c = closing.get(start)
            r = c.get(key) if c is not None else None
            if r is not None and r[0]:
                r[0] += n
                merge(r, value)
                return
        b = buckets.get(start)
        r = b.get(key) if b is not None else None
        if r is not None:
            r[0] += n
            merge(r, value)
            return
        ev = rt.event
        at = start + width
        if at < ev[1]:
            raise TimeTravelError.schedule(at, ev[1])
        root = ev[0]
        o = next(order)
        if b is None:
            b = buckets[start] = {}
            if batch:
                heappush(scheduled, (at, o, _Batch(kind, at, root, seq, start)))
        b[key] = [n, first(value), root, seq, o]
        if not batch:  # a plain event per window: checkpoints store it
            fields = {"key": key, "start": start}
            heappush(scheduled, (at, o, ScheduledEvent(kind, at, root, seq, fields)))

    opener, into = numbered(put, rt, fail)

    def add(key: Any, value: Any, ts: int, n: int = 1) -> None:
        try:
            root = rt.event[0]
            seq = per_root.get(root, 0)
            start = ts - ts % hop
            low = ts - width
            while start > low:  # every window of ``ts``, latest first
                seq += 1
                put(key, value, start, seq, n)
                start -= hop
            per_root[root] = seq
        except Exception as exc:
            fail(exc)

    def close_one(key: Any, start: int, rec: list, at: int) -> None:
        """Close window (key, start): its row, the ``on_close`` functions."""
        value = rec[0] if value_of is None else value_of(rec)
        lsn, seq = rec[2], rec[3]
        if callbacks:  # what they emit or schedule comes from this close
            rt.event = Close(kind, at, lsn, seq, key, start)
            rt.seq = seq
        if table is not None:
            fields = {"key": key, "start": start, "end": start + width, "value": value}
            rows[table].append((lsn, at, handler, seq, fields))
        for fn in callbacks:
            fn(key, start, start + width, value)
        rec[0] = 0  # closed (an add from an ``on_close`` function counted, then dropped)

    def close(e: Any) -> None:
        try:
            start, at = e.start, e.ts
            if type(e) is not _Batch:  # one window's close (batches off)
                b = buckets.get(start)
                rec = b.pop(e.key, None) if b is not None else None
                if b is not None and not b:
                    del buckets[start]
                if rec is not None and rec[0]:
                    close_one(e.key, start, rec, at)
                return
            items, index = e.items, e.index
            if items is None:
                bucket = buckets.pop(start)
                if not callbacks and (
                    not scheduled
                    or scheduled[0][0] != at
                    or scheduled[0][1] > next(reversed(bucket.values()))[4]
                ):
                    # Nothing runs between these closes, nothing else reads them: at once.
                    if blocks is None:
                        rows[table].extend(_rows(bucket, start, width, at, handler, value_of))
                    else:
                        end = start + width
                        rows[table].append(WindowRows.aligned(bucket, start, end, at, handler, agg))
                        blocks.tables.add(table)
                    return
                closing[start] = bucket
                items = e.items = list(bucket.items())
            if run is not None:
                i = run(items, index, start, at)
                if i >= 0:  # an event queued between two closes runs first
                    rec = items[i][1]
                    rest = _Batch(kind, at, rec[2], rec[3], start, items, i)
                    heappush(scheduled, (at, rec[4], rest))
                    return
                del closing[start]
                return
            for i in range(index, len(items)):
                key, rec = items[i]
                if i > index and scheduled:
                    top = scheduled[0]
                    if top[0] == at and top[1] < rec[4]:
                        # An event queued between these closes runs first, as it would have.
                        rest = _Batch(kind, at, rec[2], rec[3], start, items, i)
                        heappush(scheduled, (at, rec[4], rest))
                        return
                close_one(key, start, rec, at)
            del closing[start]
        except Exception as exc:
            fail(exc)

    def finish(**_when: Any) -> None:  # (the windows do not depend on the clock)
        """Write the open windows' counts and aggregates into the states, in the order the
        windows opened (the expansion's order of their keys)."""
        held = [
            (rec[4], key, start, rec)
            for part in (closing, buckets)
            for start, windows in part.items()
            for key, rec in windows.items()
            if rec[0]
        ]
        held.sort(key=lambda h: h[0])
        frozen = agg == "distinct"
        for _o, key, start, rec in held:
            w = (key, start)
            counts[w] = rec[0]
            if aggregates is not None:
                aggregates[w] = frozenset(rec[1]) if frozen else rec[1]

    names = {
        "get": buckets.get,
        "open": opener,
        "roots": per_root,
        "root_get": per_root.get,
        "order": order,
    }
    globals_ = {f"_rsn_{n}_{what}": value for what, value in names.items()}
    site = add_site(n, agg, width, hop) if batch else None
    inline = {f"{n}__add": (site, globals_)} if site is not None else {}
    return {
        f"{n}__into": into,
        f"{n}__add": add,
        f"{n}__close": close,
        FINISH: finish,
        INLINE: inline,
    }


def add_site(n: str, agg: str, width: int, hop: int) -> Callable:
    """The add of window ``n`` written out in a replay's loop (``compiler.inline_windows``):
    ``add``'s steps, with the open windows looked up in place; a window not open yet (or a
    start with none) goes through ``open``."""
    g = f"_rsn_{n}_"
    many = -(-width // hop)

    @statement_add
    def site(p: str, k: str, v: str, t: str) -> str:
        first = FIRST[agg].format(v=v)
        merge = MERGE[agg].format(r=f"{p}w", v=v)

        def window(start: str) -> str:
            lines = [
                f"{p}q += 1",
                f"{p}b = {g}get({start})",
                f"if {p}b is None:",
                f"    {g}open({k}, {v}, {start}, {p}q)",
                "else:",
                f"    {p}w = {p}b.get({k})",
                f"    if {p}w is None:",
                f"        {p}b[{k}] = [1, {first}, _rs_ev[0], {p}q, next({g}order)]",
                "    else:",
                f"        {p}w[0] += 1",
            ]
            if merge:
                lines.append(indent(merge, 8))
            return "\n".join(lines)

        lines = [f"{p}q = {g}root_get(_rs_ev[0], 0)", f"{p}s = {t} - {t} % {hop}"]
        if many > _UNROLL:
            lines += [f"{p}lo = {t} - {width}", f"while {p}s > {p}lo:"]
            lines += [indent(window(f"{p}s")), f"    {p}s -= {hop}"]
        else:
            for i in range(many):
                if i:
                    lines.append(f"{p}s -= {hop}")
                if i == many - 1 and width % hop:
                    lines += [f"if {p}s > {t} - {width}:", indent(window(f"{p}s"))]
                else:
                    lines.append(window(f"{p}s"))
        lines.append(f"{g}roots[_rs_ev[0]] = {p}q")
        return "\n".join(lines)

    return site
