"""The rollback of a handler run that raises (``on_error`` skip or quarantine), once.

Every runtime that rolls runs back keeps one :class:`RunJournal`: the serial engine's guarded
runtime (:class:`~.semantics.GuardedRuntime`), the positioned runtime of a Spark pass task
(:class:`~.positioned.PositionedRuntime`) and a Spark plain pass that ships writes on
(``engines/spark/passes/_shipping.GuardedShipping``). The guarded loop clears the journal as
each handler run starts, which marks where the run's output starts; the run's changes are then
journaled as it makes them:

- a store's change, ``(store, key, old value)`` (:class:`~.semantics.JournalDict` and the
  Spark pass's journaling stores append these);
- a row emitted to a table of a ``rows`` mapping (:meth:`RunJournal.emitted`);
- a runtime's own kind of change, undone by the ``other`` function it gives.

:meth:`RunJournal.rollback` undoes them newest first, then puts back what the marks hold: the
lists the run may append to (truncated), the heaps it may push to (their newest entries
dropped), the values it may change and its root event's count of scheduled events; the run
is recorded by the runtime's ``keep_quarantined(row)``, with the row every engine makes
(:func:`~.quarantine.quarantine_row`). The replay goes on as if that run had never happened.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

from .quarantine import quarantine_row
from .semantics import SerialRuntime

__all__ = [
    "EMITTED",
    "JOURNAL_ABSENT",
    "GuardedRuntime",
    "JournalDict",
    "RunJournal",
    "drop_newest",
    "undo_journal",
]

#: The old value a journal records for a key that had none.
JOURNAL_ABSENT = object()
#: A journal entry's first item for a row emitted to a table: ``(EMITTED, table, None)``.
EMITTED = object()


def undo_journal(journal: list, other: Callable[[Any, Any, Any], None] | None = None) -> None:
    """Undo a handler run's journaled changes, newest first, emptying ``journal``: a store's
    ``(store, key, old value)`` is put back (:data:`JOURNAL_ABSENT`: the key goes); an entry
    whose first item is not a store goes to ``other`` (a runtime's own kinds of change)."""
    while journal:
        target, key, old = journal.pop()
        if not isinstance(target, dict):
            other(target, key, old)
        elif old is JOURNAL_ABSENT:
            dict.pop(target, key, None)
        else:
            dict.__setitem__(target, key, old)


def drop_newest(heap: list, made: int) -> None:
    """Take the ``made`` newest entries (by their order number, an entry's second item) out
    of ``heap``, a heap of timed writes or scheduled events: a rolled-back run's."""
    if made > 0:
        kept = sorted(heap, key=lambda entry: entry[1])[:-made]
        heapq.heapify(kept)
        heap[:] = kept


class JournalDict(dict):
    """A store that journals every change (key, old value) so that a handler run can be undone.

    Only ``on_error`` skip and quarantine use it; reads stay plain ``dict.get`` calls.
    """

    __slots__ = ("journal",)

    def __init__(self, journal: list):
        super().__init__()
        self.journal = journal

    def __setitem__(self, key: Any, value: Any) -> None:
        self.journal.append((self, key, dict.get(self, key, JOURNAL_ABSENT)))
        dict.__setitem__(self, key, value)

    def pop(self, key: Any, *default: Any) -> Any:
        self.journal.append((self, key, dict.get(self, key, JOURNAL_ABSENT)))
        return dict.pop(self, key, *default)

    def __delitem__(self, key: Any) -> None:
        self.pop(key)


class RunJournal(list):
    """The journal and marks of the current handler run of runtime ``rt``, and its rollback
    (see the module docstring).

    ``lists``, ``heaps`` and ``values`` name attributes of ``rt``: lists a run appends to,
    heaps it pushes to (entries numbered in the order made, their second item), values it may
    change. ``per_root`` names ``rt``'s mapping of scheduled events per root event, whose
    count for the run's root is put back (None: none kept). ``rows`` names ``rt``'s mapping
    of tables to the rows emitted to them (a table only the run emitted to goes). ``other``
    undoes a journal entry whose first item is neither a store nor :data:`EMITTED`.
    ``rt`` also gives ``event``, ``handler``, ``seq``, ``filename`` and ``columns`` (for the
    quarantine row) and ``keep_quarantined(row)``.
    """

    def __init__(
        self,
        rt: Any,
        *,
        lists: tuple[str, ...] = (),
        heaps: tuple[str, ...] = (),
        values: tuple[str, ...] = (),
        per_root: str | None = None,
        rows: str = "rows",
        other: Callable[[Any, Any, Any], None] | None = None,
    ):
        super().__init__()
        self.rt = rt
        self.sized = (*lists, *heaps)
        self.heaps = heaps
        self.values = values
        self.per_root = per_root
        self.rows = rows
        self.other = other
        self.marks: tuple = ()

    def clear(self) -> None:
        """A handler run starts: an empty journal, and the marks of where its output starts."""
        del self[:]
        rt = self.rt
        root = None if self.per_root is None else getattr(rt, self.per_root).get(rt.event[0])
        self.marks = (
            [len(getattr(rt, name)) for name in self.sized],
            [getattr(rt, name) for name in self.values],
            root,
        )

    def _undo(self, what: Any, key: Any, old: Any) -> None:
        if what is not EMITTED:
            self.other(what, key, old)
            return
        tables = getattr(self.rt, self.rows)
        rows = tables[key]
        rows.pop()
        if not rows:  # a table only this run emitted to does not exist
            del tables[key]

    def rollback(self, exc: BaseException) -> None:
        """Undo the current run back to its marks and record it (see the module docstring)."""
        rt = self.rt
        undo_journal(self, self._undo)
        sized, values, root = self.marks
        for name, mark in zip(self.sized, sized, strict=True):
            entries = getattr(rt, name)
            if name in self.heaps:  # (this run's entries carry the newest numbers)
                drop_newest(entries, len(entries) - mark)
            else:
                del entries[mark:]
        for name, value in zip(self.values, values, strict=True):
            setattr(rt, name, value)
        if self.per_root is not None:
            per_root, key = getattr(rt, self.per_root), rt.event[0]
            if root is None:
                per_root.pop(key, None)
            else:
                per_root[key] = root
        rt.keep_quarantined(
            quarantine_row(
                filename=rt.filename,
                handler=rt.handler,
                event=rt.event,
                seq=rt.seq,
                columns=rt.columns,
                exc=exc,
            )
        )


class GuardedRuntime(SerialRuntime):
    """The serial engine's runtime under ``on_error`` skip and quarantine: a handler run that
    raises is undone by its :class:`RunJournal` (store changes through :class:`JournalDict`,
    its rows, timed writes and scheduled events) and recorded in ``quarantined``, so the
    replay goes on as if that run had never happened."""

    rolls_back = True

    def __init__(self, filename: str, columns: list[str]) -> None:
        super().__init__()
        self.journal = RunJournal(
            self, heaps=("future", "scheduled"), per_root="scheduled_per_root"
        )
        self.quarantined: list[dict] = []
        self.filename = filename
        self.columns = columns

    def emit(self, table: str, **fields: Any) -> None:
        ev = self.event
        self.rows[table].append((ev[0], ev[1], self.handler, self.seq, fields))
        self.journal.append((EMITTED, table, None))

    def rollback(self, exc: BaseException) -> None:
        """Undo the current handler run's changes and record it as quarantined."""
        self.journal.rollback(exc)

    def keep_quarantined(self, row: dict) -> None:
        self.quarantined.append(row)
