"""The rollback of a handler run that raises (``on_error`` skip or quarantine), once.

Every runtime that rolls runs back keeps one :class:`RunJournal` and undoes a run through
its :meth:`~RunJournal.rollback`: the serial engine's guarded runtime
(:class:`GuardedRuntime`), the positioned runtime of a Spark pass task
(:class:`~.positioned.PositionedRuntime`) and a Spark plain pass that ships writes on
(``engines/spark/passes/_shipping.GuardedShipping``). The guarded loop clears the journal as
each handler run starts; the run's changes are journaled as it makes them (a store's change,
a row emitted, an entry pushed to a heap, a count made higher, a runtime's own kind of
change). A runtime that makes its output in many places keeps a :class:`MarkedJournal`
instead, which also marks, as each run starts, where the run's lists, heaps and counts
stand. :meth:`RunJournal.rollback` undoes the changes newest first, puts back what the marks
hold and records the run by the runtime's ``keep_quarantined(row)``, with the row every
engine makes (:func:`~.quarantine.quarantine_row`). The replay goes on as if that run had
never happened.
"""

from __future__ import annotations

import heapq
import operator
from collections.abc import Callable
from typing import Any

from .quarantine import quarantine_row
from .semantics import SerialRuntime, apply_write, check_write

__all__ = [
    "COUNTED",
    "EMITTED",
    "JOURNAL_ABSENT",
    "GuardedRuntime",
    "JournalDict",
    "MarkedJournal",
    "PUSHED",
    "RunJournal",
    "drop_newest",
    "undo_journal",
]

#: The old value a journal records for a key that had none.
JOURNAL_ABSENT = object()
#: Journal entries' first items (see :class:`RunJournal`): a row emitted to a table, an
#: entry pushed to a heap, a count made one higher.
EMITTED, PUSHED, COUNTED = object(), object(), object()


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
    """The journal of the current handler run of runtime ``rt``, and its rollback (see the
    module docstring). The guarded loop clears it (``list.clear``: nothing more, it is
    hot) as each run starts; the run's changes are journaled as it makes them:

    - ``(store, key, old value)``: a store's change (:class:`JournalDict`);
    - ``(EMITTED, table, None)``: a row emitted to ``rt.rows[table]``;
    - ``(PUSHED, heap, None)``: an entry pushed to ``rt``'s heap of that name (entries
      numbered in the order made, their second item: the newest go);
    - ``(COUNTED, mapping, key)``: ``rt``'s mapping of that name counted one up at ``key``
      (an event scheduled by root ``key``);
    - anything else goes to ``other(what, key, old)``, the runtime's own kinds of change.

    ``rt`` also gives ``event``, ``handler``, ``seq``, ``filename`` and ``columns`` (for
    the quarantine row) and ``keep_quarantined(row)``.
    """

    def __init__(self, rt: Any, other: Callable[[Any, Any, Any], None] | None = None):
        super().__init__()
        self.rt = rt
        self.other = other

    def rollback(self, exc: BaseException) -> None:
        """Undo the current run (newest change first) and record it."""
        rt = self.rt
        pushed: dict[str, int] = {}

        def undo(what: Any, key: Any, old: Any) -> None:
            if what is EMITTED:
                rows = rt.rows[key]
                rows.pop()
                if not rows:  # a table only this run emitted to does not exist
                    del rt.rows[key]
            elif what is PUSHED:
                pushed[key] = pushed.get(key, 0) + 1
            elif what is COUNTED:
                getattr(rt, key)[old] -= 1
            else:
                self.other(what, key, old)

        undo_journal(self, undo)
        self.restore()
        for heap, made in pushed.items():
            drop_newest(getattr(rt, heap), made)
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

    def restore(self) -> None:
        """Put back what the marks hold (:class:`MarkedJournal`; none here)."""


class MarkedJournal(RunJournal):
    """A :class:`RunJournal` that also marks, as each run starts, where the run's output
    starts, for runtimes that make it in many places: ``lists`` it appends to (truncated
    back), ``heaps`` it pushes to (their newest entries dropped), ``values`` it may change
    (put back) and, with ``per_root``, ``rt``'s count of the run's root event's scheduled
    events in the mapping of that name (put back)."""

    def __init__(
        self,
        rt: Any,
        *,
        lists: tuple[str, ...] = (),
        heaps: tuple[str, ...] = (),
        values: tuple[str, ...] = (),
        per_root: str | None = None,
        other: Callable[[Any, Any, Any], None] | None = None,
    ):
        super().__init__(rt, other)
        self.sized = (*lists, *heaps)
        self.heaps = heaps
        self.values = values
        self.per_root = per_root
        self._sized = _getter(self.sized)
        self._values = _getter(values)
        self.marks: tuple = ()

    def clear(self) -> None:
        """A handler run starts: an empty journal, and the marks of where its output starts."""
        del self[:]
        rt = self.rt
        root = None if self.per_root is None else getattr(rt, self.per_root).get(rt.event[0])
        self.marks = (tuple(map(len, self._sized(rt))), self._values(rt), root)

    def restore(self) -> None:
        rt = self.rt
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


def _getter(names: tuple[str, ...]) -> Callable[[Any], tuple]:
    """A function giving the tuple of an object's attributes ``names``."""
    if len(names) > 1:
        return operator.attrgetter(*names)
    if names:
        one = operator.attrgetter(names[0])
        return lambda obj: (one(obj),)
    return lambda obj: ()


class GuardedRuntime(SerialRuntime):
    """The serial engine's runtime under ``on_error`` skip and quarantine: a handler run that
    raises is undone by its :class:`RunJournal` (store changes through :class:`JournalDict`,
    its rows, timed writes and scheduled events, each journaled as made) and recorded in
    ``quarantined``, so the replay goes on as if that run had never happened."""

    rolls_back = True

    def __init__(self, filename: str, columns: list[str]) -> None:
        super().__init__()
        self.journal = RunJournal(self)
        self.quarantined: list[dict] = []
        self.filename = filename
        self.columns = columns

    def write(self, d: dict, default: Any, op: str, key: Any, arg: Any, at: int | None) -> None:
        now = self.event[1]
        if at is None or at == now:
            apply_write(d, default, op, key, arg)
            return
        check_write(at, now)
        heapq.heappush(self.future, (at, next(self.order), d, default, op, key, arg))
        self.journal.append((PUSHED, "future", None))

    def emit(self, table: str, **fields: Any) -> None:
        ev = self.event
        self.rows[table].append((ev[0], ev[1], self.handler, self.seq, fields))
        self.journal.append((EMITTED, table, None))

    def schedule(self, kind: str, *, at: int, **fields: Any) -> None:
        super().schedule(kind, at=at, **fields)
        journal = self.journal
        journal.append((PUSHED, "scheduled", None))
        journal.append((COUNTED, "scheduled_per_root", self.event[0]))

    def rollback(self, exc: BaseException) -> None:
        """Undo the current handler run's changes and record it as quarantined."""
        self.journal.rollback(exc)

    def keep_quarantined(self, row: dict) -> None:
        self.quarantined.append(row)
