"""Rows of closed windows held as columns until a table is made of them (``runtime.windows``).

A native window without ``on_close`` functions emits a row per closed window to its table:
``(lsn, ts, handler, seq, {key, start, end, value})``. Made one by one, those tuples and dicts
cost more than the window itself on keys with about a window per event (pairs), and again
when the table is built from them. Where the serial engine asks for it (``fuse_windows(...,
blocks=...)``), a closing window instead puts one :class:`WindowRows` in its table's list of
rows: the records of the windows it closed, in their order, from which the table's columns
are taken at C speed (``engines._window_tables``); :meth:`WindowRows.rows` gives the same
rows as tuples, for a table other code also emits to. :class:`Blocks` says which tables hold
them, and settles a session window's rows that wait to be made (``runtime._sessions``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from operator import itemgetter, truediv
from typing import Any

__all__ = ["Blocks", "WindowRows", "EmitRows", "FIELDS"]

#: The fields of a closed window's row, in their order.
FIELDS = ("key", "start", "end", "value")
#: The items of a session's record that are integers, by the column of its row they give
#: (``WindowRows.sessions``; a session's row's time is its end), and of an aligned window's
#: (``WindowRows.aligned``; its times are one value for all its rows).
_SESSION_INTS = {"lsn": 2, "seq": 3, "start": 5, "end": 6}
_ALIGNED_INTS = {"lsn": 2, "seq": 3}


class WindowRows:
    """The rows of windows closed together, as their records: ``count`` (a record's count),
    ``agg`` (its aggregate) and the rows' ``lsn``, ``ts``, ``seq``, ``key``, ``start`` and
    ``end`` as lists, or as one value every row shares (``ts``, ``start``, ``end``)."""

    __slots__ = ("n", "handler", "agg", "parts")

    def __init__(self, n: int, handler: str, agg: str, parts: dict[str, Any]):
        self.n = n
        self.handler = handler
        self.agg = agg
        self.parts = parts

    @classmethod
    def aligned(cls, bucket: dict, start: int, end: int, at: int, handler: str, agg: str):
        """The windows of one start, closing at ``at``: ``bucket`` (key -> record ``[count,
        aggregate, lsn, seq, order]``), in its order; it changes no more."""
        return cls(
            len(bucket), handler, agg, {"bucket": bucket, "start": start, "end": end, "ts": at}
        )

    @classmethod
    def sessions(cls, records: list, handler: str, agg: str):
        """Sessions in the order they closed: records ``[count, aggregate, lsn, seq, order,
        first, close time, key]``; a session ends at its close time."""
        return cls(len(records), handler, agg, {"records": records})

    def columns(self, omit: frozenset[str] = frozenset()) -> dict[str, Any]:
        """``lsn``, ``ts``, ``seq`` and the fields, each a list or one shared value; None for
        a column in ``omit`` (one taken otherwise: :meth:`int_items`)."""
        n, parts = self.n, self.parts
        if "bucket" in parts:
            bucket = parts["bucket"]
            records: Any = bucket.values()
            keys: Any = list(bucket)
            ts, start, end = parts["ts"], parts["start"], parts["end"]
        else:
            records = parts["records"]
            keys = _field(7, records)
            start = None if "start" in omit else _field(5, records)
            ts = end = None if "end" in omit else _field(6, records)
        return {
            "lsn": None if "lsn" in omit else _field(2, records),
            "ts": ts,
            "seq": None if "seq" in omit else _field(3, records),
            "key": keys,
            "start": start,
            "end": end,
            "value": None if "value" in omit else _values(self.agg, records),
            "n": n,
        }

    def int_items(self, name: str) -> Iterator[int] | None:
        """Column ``name``'s values, one after the other, when they are integers by how
        they are made (``lsn``, ``seq``, a session's ``start`` and ``end``, and a count's
        ``value``: a log event's number and time, an add's number, a time plus the gap, a
        count); None otherwise (an aligned window's times are one value, not a column)."""
        if "records" in self.parts:
            records, index = self.parts["records"], _SESSION_INTS.get(name)
        else:
            records, index = self.parts["bucket"].values(), _ALIGNED_INTS.get(name)
        if name == "value" and self.agg == "count":
            index = 0
        return None if index is None else map(itemgetter(index), records)

    def rows(self) -> list[tuple]:
        """The rows as tuples ``(lsn, ts, handler, seq, fields)``, in order."""
        cols = self.columns()
        n, handler = self.n, self.handler
        each = [
            cols[name] if _many(cols[name]) else [cols[name]] * n for name in cols if name != "n"
        ]
        lsns, tss, seqs, keys, starts, ends, values = each
        return [
            (lsn, ts, handler, seq, {"key": k, "start": s, "end": e, "value": v})
            for lsn, ts, seq, k, s, e, v in zip(lsns, tss, seqs, keys, starts, ends, values)
        ]


def _many(part: Any) -> bool:
    return isinstance(part, (list, tuple))


def _field(index: int, records: Any) -> list:
    """Item ``index`` of every record."""
    return list(map(itemgetter(index), records))


def _values(agg: str, records: Any) -> list:
    """The closed windows' values from their records' counts and aggregates (as
    ``_aligned.value_getter`` gives one)."""
    if agg == "count":
        return _field(0, records)
    if agg == "distinct":
        return list(map(len, map(itemgetter(1), records)))
    if agg == "mean":
        return list(map(truediv, _field(1, records), _field(0, records)))
    return _field(1, records)


class EmitRows:
    """Rows that one ``emit`` written out in a replay's loop made one after the other
    (``compiler.inline_windows``), each ``lsn, ts, *values`` in turn in the flat list
    ``items`` (a column is a slice of it, ``column(i)``): they share ``handler``, ``seq``
    and the field names ``fields``. ``seqs``: each row ends with its own ``seq`` instead
    (an emit written out in a window's closes, ``compiler.inline_closes``)."""

    __slots__ = ("handler", "seq", "fields", "items", "seqs", "width")

    def __init__(self, handler: str, seq: int, fields: tuple[str, ...], seqs: bool = False):
        self.handler = handler
        self.seq = seq
        self.fields = fields
        self.items: list = []
        self.seqs = seqs
        self.width = 2 + len(fields) + seqs

    def __len__(self) -> int:
        return len(self.items) // self.width

    def column(self, i: int) -> list:
        """Item ``i`` of every row (0: ``lsn``, 1: ``ts``, then the fields')."""
        return self.items[i :: self.width]

    def seq_column(self) -> list:
        """Every row's ``seq``."""
        if self.seqs:
            return self.items[self.width - 1 :: self.width]
        return [self.seq] * len(self)

    def rows(self) -> list[tuple]:
        """The rows as tuples ``(lsn, ts, handler, seq, fields)``, in order."""
        handler, fields = self.handler, self.fields
        values = zip(*(self.column(i) for i in range(2, 2 + len(fields))))
        return [
            (lsn, ts, handler, seq, dict(zip(fields, vs)))
            for lsn, ts, seq, vs in zip(self.column(0), self.column(1), self.seq_column(), values)
        ]


#: What an emit's globals hold before its first row and after ``Blocks.settle``: no block.
_NO_BLOCK = object()


class Blocks:
    """The tables a replay's native windows put :class:`WindowRows` in, and written-out
    emits their :class:`EmitRows` (:meth:`emit_site`); what makes a lazy session window's
    waiting rows (``settle()``) and what ends it (``finishers``)."""

    def __init__(self) -> None:
        self.tables: set[str] = set()
        self.settlers: list[Callable[[], None]] = [self._seal]
        self._sites: list[tuple[dict, str]] = []
        #: What lazy session windows do at the end: run before the other windows' finishers,
        #: since a flush's closes move the clock (``rt.event``) they read.
        self.finishers: list[Callable[..., None]] = []

    def settle(self) -> None:
        """Make the rows of the sessions closed by the last event's time (every close due by
        then would have run)."""
        for settle in self.settlers:
            settle()

    def emit_site(
        self, namespace: dict, rt: Any, table: str, fields: tuple[str, ...], seqs: bool = False
    ) -> str:
        """The prefix ``g`` of the globals through which a written-out ``emit(table,
        **fields)`` in a replay's loop adds its rows to an :class:`EmitRows`: ``g + "add"``
        adds a row's ``lsn, ts, *values`` (``seqs``: and its ``seq``) to the block that
        ``g + "blk"`` names while it is the last item of its table's rows (``g + "list"``);
        otherwise ``g + "open"()`` first puts a new block there (its handler and ``seq`` the
        runtime's then)."""
        g = f"_rse{len(self._sites)}_"

        def open_() -> None:
            rows = rt.rows[table]
            block = EmitRows(rt.handler, rt.seq, fields, seqs)
            rows.append(block)
            self.tables.add(table)
            namespace.update({f"{g}list": rows, f"{g}blk": block, f"{g}add": block.items.extend})

        namespace.update({f"{g}list": [None], f"{g}blk": _NO_BLOCK, f"{g}open": open_})
        self._sites.append((namespace, g))
        return g

    def release(self) -> None:
        """Let go of the blocks the written-out emits last added to (the program's namespace
        held them): once their tables are built, they are freed at once, not left to the
        cyclic collector to walk (the namespace and its functions form a cycle)."""
        for namespace, g in self._sites:
            namespace.update({f"{g}list": [None], f"{g}blk": _NO_BLOCK})
            namespace.pop(f"{g}add", None)

    def _seal(self) -> None:
        """End every emit's block: rows emitted from now on go to new ones (the rows counted
        so far stay as they are, for views that stream a table's new rows)."""
        for namespace, g in self._sites:
            namespace[f"{g}blk"] = _NO_BLOCK


#: The order sessions close in: their close time, then their close's place in the queue;
#: their close's place alone, since sessions added to at their events' times only move on
#: (and take a later place) to a later close time.
SESSION_ORDER = itemgetter(4)
