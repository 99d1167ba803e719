"""The runtimes of a plain pass (``passes._plain``): the serial engine's, plus what the pass
sends on, and their guarded forms for ``on_error`` skip and quarantine.

- :class:`Shipping`: the serial runtime with a sink (``runtime.positioned.SinkingRuntime``):
  writes into state a later pass holds (through ``BlindStore``, whose sink is :class:`_Ship`)
  and events scheduled for later passes go out as rows at the positions the receiving passes
  sort by, those of the closes it runs itself wait in its own queue (``runs_here``); every
  event scheduled counts in one ``seq`` per root (:meth:`Shipping.made_by`); everything
  else, the rules' checks included, is the serial engine's runtime.
- :class:`MadeByRuntime`: in a checkpointed replay, a plain task's timed writes are numbered
  by the runs that made them (``runtime.positioned.MadeBy``), so that the driver orders every
  task's as the serial engine made them.
- :class:`GuardedSerial` and :class:`GuardedShipping`: a handler run that raises is undone
  (its state changes, timed writes, emitted rows, rows for other passes and scheduled
  events) by the one journal of ``runtime.guarded`` and recorded with its position.
"""

from __future__ import annotations

import ast
import heapq
from typing import Any

from ....model.program import Program
from ....runtime.guarded import EMITTED, GuardedRuntime, MarkedJournal
from ....runtime.positioned import MadeBy, Sink, SinkingRuntime
from ....runtime.semantics import (
    ScheduledEvent,
    SerialRuntime,
    apply_write,
    check_schedule,
    check_write,
)
from .._program_ref import key_function
from ._boundaries import made_bytes, unhandled_rows
from ._rows import (
    AFTER_RUN,
    PH_LOG,
    PH_SCHED,
    PH_TIMED,
    RUN_HEAD,
    SCHED,
    SIGN,
    PassSpec,
    Routing,
    U32x2,
    dumps,
    order_value,
    scheduled_sub,
)
from ._stores import BlindStore, carried

__all__ = [
    "Shipping",
    "MadeBy",
    "MadeByRuntime",
    "GuardedSerial",
    "GuardedShipping",
    "guarded_runtime",
]


class _Ship(Sink):
    """Writes to a state a later pass holds (a :class:`BlindStore`): rows for it at their
    positions; a window's adds summed where nothing sees them in between (``_fold``)."""

    def __init__(self, rt: Shipping):
        self.rt = rt

    def now(self, d: BlindStore, default: Any, op: str, key: Any, arg: Any) -> None:
        rt = self.rt
        if d.state in rt.spec.folds and op == "add":
            rt._fold(d.state, key, arg)
        else:
            rt.ship(d.state, key, carried(op, arg), None, rt.spec.blind[d.state])

    def later(self, d: BlindStore, default: Any, op: str, key: Any, arg: Any, at: int) -> None:
        self.rt.ship(d.state, key, carried(op, arg), at, self.rt.spec.blind[d.state])


class Shipping(Routing, SinkingRuntime):
    """The serial engine's runtime for a plain pass that sends rows on: writes into state a
    later pass holds (through :class:`BlindStore`, its sink) and events scheduled for later
    passes go out as rows at the positions the receiving passes sort by (see the module
    docstring), everything else is the serial engine's own."""

    def __init__(self, spec: PassSpec, program: Program):
        self.number = {"": 0, **{h.name: h.index for h in program.handlers}}
        super().__init__()  # (its ``scheduled``: only the closes it runs itself, ``runs_here``)
        self.sinks = {BlindStore: _Ship(self)}
        self.spec = spec
        self.program = program
        self.write_pos = None
        self.out: list = []
        # The run whose calls ``calls`` counts (:meth:`call`), and the handler's number.
        self._run_event: Any = None
        self._run_handler = ""
        self.hidx = self.calls = 0
        # ``seq``: the events each root event scheduled, counted in one place (:meth:`made_by`)
        # and in the serial engine's mapping, which a window run natively counts in too. The
        # events of a plain pass come one after the other: the latest root's count is enough,
        # unless it runs closes of its own (``_own_closes``), which run after later events.
        self.scheduled_per_root: dict[int, int] = {}
        self.latest_root_only = not spec.closes
        # The kinds of those closes: queued here, in the serial queue, not sent on.
        self.runs_here = frozenset(
            kind
            for kind, passes in spec.kind_passes.items()
            if spec.closes and spec.index in passes
        )
        self.made = 0
        self.last_at: int | None = None
        # A timed write sent on is numbered by the run that made it and a count the task's
        # own timed writes share in a checkpointed replay (``passes._plain._runtime``): no two
        # writes one run makes for one time share a position, and the commit keeps each.
        self.timed = MadeBy(self, self.number)
        self.pk_cache: dict = {}
        self.home_keys: dict[int, Any] = {}
        self.field_keys: dict[int, Any] = {}
        self.sent_once: set = set()  # window closes sent (see ``schedule``)
        self.folded: dict = {}  # (state, key) -> [sum, position of the last add] (``_fold``)
        self.unhandled: list = []  # scheduled for kinds no pass handles (``passes._boundaries``)
        self.dropped: list = []  # closes not sent, for a checkpoint (``closes_waiting``)
        self.once_fields: dict = {}  # the fields of each close sent, for the same

    def call(self) -> int:
        """Count a call of the running handler that makes a position: its count in the run
        (from 1), with ``hidx`` the handler's number. The generated loop only names the
        handler before each run, which costs nothing when the run sends nothing; the first
        such call of a run (another event, or another handler) starts its count."""
        ev, name = self.event, self.handler
        if ev is self._run_event and name == self._run_handler:
            self.calls += 1
        else:
            self._run_event, self._run_handler = ev, name
            self.hidx = self.number[name]
            self.calls = 1
        return self.calls

    def _fold(self, state: str, key: Any, arg: int) -> None:
        """Sum an add into its window's one write, sent at the last add's position
        (``passes._window_shapes.folded_counts`` says why nothing sees the adds in between)."""
        self.call()
        ev = self.event
        slot = self.folded.get((state, key))
        if slot is None:
            self.folded[(state, key)] = [arg, ev[1], ev[0], self.hidx, self.calls]
        else:
            slot[0] += arg
            slot[1:] = ev[1], ev[0], self.hidx, self.calls

    def send_folded(self) -> None:
        """The summed adds, one write per window, as :meth:`ship` would have sent the last."""
        for (state, key), (total, t, lsn, hidx, calls) in self.folded.items():
            position = (t, PH_LOG, lsn, U32x2.pack(hidx, calls))
            self._send(state, key, ("add", total), position, self.spec.blind[state])
        self.folded.clear()

    def emit(self, table: str, **fields: Any) -> None:
        ev = self.event
        self.rows[table].append((ev[0], ev[1], self.handler, self.seq, fields))

    # The serial runtime's row, so an ``emit`` may be written out as its (``fuse_windows``).
    emit.serial_emit = True  # type: ignore[attr-defined]

    def schedule(self, kind: str, *, at: int, **fields: Any) -> None:
        ev = self.event
        check_schedule(at, ev[1], fields)
        root = ev[0]
        seq = self.made_by(root, at)
        if kind in self.runs_here:
            event = self.event_type(kind, at, root, seq, fields)  # (as ``SerialRuntime``)
            heapq.heappush(self.scheduled, (at, next(self.order), event))
            return
        self.call()
        if kind in self.spec.closes_once:
            # Identical window closes: the first acts, the others find the window gone. A
            # generated close's fields are always the same names in the same order.
            once = (kind, at, *fields.values())
            try:
                if once in self.sent_once:
                    if self.spec.bounds:  # a checkpoint holds it until its time
                        # Small: one of these per add, until the window's time passes.
                        self.dropped.append((at, ev[1], ev[0], seq, once))
                    return
                self.sent_once.add(once)
                if self.spec.bounds:
                    self.once_fields[once] = fields
            except TypeError:  # an unhashable field: send it
                pass
        if at == ev[1]:  # after this event, before the next (``AFTER_RUN``)
            position = (at, PH_LOG, ev[0], scheduled_sub(AFTER_RUN, seq))
        else:
            head = RUN_HEAD.pack(ev[1] + SIGN, PH_LOG, ev[0] + SIGN)
            position = (at, PH_SCHED, 0, scheduled_sub(head, seq))
        payload = dumps((kind, fields, root, seq))
        targets = self.spec.kind_passes.get(kind, ())
        if not targets and self.spec.bounds:  # a checkpoint holds it until its time
            self.unhandled.append((position, payload))
        for target in targets:
            self.out.append(
                (SCHED, target, self._to(target, kind, at, root, seq, fields), position, payload)
            )

    def made_by(self, root: int, at: int, n: int = 1) -> int:
        """Count ``n`` events scheduled by ``root``'s runs, the latest for ``at``: the first
        one's ``seq`` (the rest follow it). The one count of a pass's scheduled events: those
        it sends on, a window's closes run here or (as if scheduled) in a pass fed its adds."""
        per_root = self.scheduled_per_root
        count = per_root.get(root)
        if count is None:
            count = 0
            if self.latest_root_only:
                per_root.clear()
        per_root[root] = count + n
        self.made += n
        if self.last_at is None or at > self.last_at:
            self.last_at = at
        return count + 1

    def closes_waiting(self, end: tuple, epoch: int) -> list[tuple]:
        """The closes not sent (one of identical ones was) that wait at a checkpoint's
        ``end``, as ``CARRY`` rows of ``epoch``: a serial checkpoint holds each of them."""
        near = []
        for at, t, lsn, seq, once in self.dropped:
            if at >= end[0]:
                blob = dumps((once[0], self.once_fields[once], lsn, seq))
                head = RUN_HEAD.pack(t + SIGN, PH_LOG, lsn + SIGN)
                near.append(((at, PH_SCHED, 0, scheduled_sub(head, seq)), blob))
        self.passed(end[0] + 1)
        return unhandled_rows(near, end, epoch)

    def passed(self, t: int) -> None:
        """Forget the closes not sent whose time is before ``t``: no later checkpoint's end
        can hold them (an end comes at or after the events already run)."""
        if self.dropped and self.dropped[0][0] < t:
            self.dropped = [entry for entry in self.dropped if entry[0] >= t]

    def _to(self, target: int, kind: str, at: int, root: int, seq: int, fields: dict) -> str:
        """The partition value of a scheduled event in pass ``target``."""
        partition = self.spec.home_partition[target]
        if partition == self.spec.single_key:
            return "N"
        if partition == self.spec.order_key:
            return order_value(root)
        fn = self.field_keys.get(target)
        if fn is None:
            fn = self.field_keys[target] = _fields_key_function(partition, self.program)
        try:
            key = fn(fields, kind, at, root, seq)
        except _NotAField:  # an expression the fields alone cannot answer
            key = key_function(partition, self.program)(ScheduledEvent(kind, at, root, seq, fields))
        return self._pk(key)

    def ship(self, state: str, key: Any, op: tuple, at: int | None, targets: tuple) -> None:
        """A write for the passes that hold ``state`` (``targets``), at its position."""
        calls = self.call()
        if at is None:
            ev = self.event
            position = (ev[1], PH_LOG, ev[0], U32x2.pack(self.hidx, calls))
        else:  # (numbered with the timed writes kept here: one count for the task)
            position = (at, PH_TIMED, 0, made_bytes(next(self.timed)))
        self._send(state, key, op, position, targets)

    def _send(self, state: str, key: Any, op: tuple, position: tuple, targets: tuple) -> None:
        """Write rows for the passes ``targets``, each to the partition of ``key`` there."""
        self.write_rows(key, position, dumps((state, key, op)), targets, state)


class MadeByRuntime(SerialRuntime):
    """The serial engine's runtime for a plain pass of a checkpointed replay that sends
    nothing on: each timed write's order is made inline as :class:`MadeBy` makes it (one
    call fewer per timed write: a sliding window makes one per event)."""

    def __init__(self, number: dict[str, int]):
        super().__init__()
        self.number = number
        self.count = 0

    def write(self, d: dict, default: Any, op: str, key: Any, arg: Any, at: int | None) -> None:
        ev = self.event
        now = ev[1]
        if at is None or at == now:
            apply_write(d, default, op, key, arg)
            return
        check_write(at, now)
        self.count += 1
        made = (now, ev[0], self.number[self.handler], self.count)
        heapq.heappush(self.future, (at, made, d, default, op, key, arg))


class _NotAField(Exception):
    """A key expression over a scheduled event that reads more than its fields."""


def _fields_key_function(expr: str, program: Program) -> Any:
    """A key expression over a scheduled event as a function of its fields, kind, time, root
    and seq, so that routing it costs no event object: ``e.key`` becomes ``f["key"]``. An
    expression that uses ``e`` otherwise raises :class:`_NotAField` when called."""
    special = {"kind": "kind", "ts": "at", "lsn": "root", "seq": "seq"}
    tree = ast.parse(expr, mode="eval")
    plain = True

    class Fields(ast.NodeTransformer):
        def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
            if isinstance(node.value, ast.Name) and node.value.id == "e":
                if node.attr in special:
                    return ast.copy_location(ast.Name(special[node.attr], ast.Load()), node)
                sub = ast.Subscript(ast.Name("f", ast.Load()), ast.Constant(node.attr), ast.Load())
                return ast.copy_location(sub, node)
            return self.generic_visit(node)

        def visit_Name(self, node: ast.Name) -> ast.AST:
            nonlocal plain
            if node.id == "e":
                plain = False
            return node

    body = ast.fix_missing_locations(Fields().visit(tree)).body
    if not plain:

        def refuse(*_args: Any) -> Any:
            raise _NotAField(expr)

        return refuse
    fn = key_function("0", program)  # the program's namespace, for helpers the key calls
    source = f"lambda f, kind, at, root, seq: ({ast.unparse(body)})"
    return eval(compile(source, f"<key of {program.name}>", "eval"), fn.__globals__)


def guarded_runtime(spec: PassSpec, program: Program) -> Any:
    """The runtime of a plain pass under ``on_error`` skip or quarantine."""
    if spec.blind or spec.ships_events:
        return GuardedShipping(spec, program)  # (numbers handlers as ``Shipping`` does)
    number = {h.name: h.index for h in program.handlers}
    return GuardedSerial(program.filename, spec.columns, number)


def _failed(ev: Any, hidx: int, row: dict) -> tuple:
    """A quarantined run as the driver orders them: (position, handler's number, row)."""
    return ((ev[1], PH_LOG, ev[0], b""), hidx, row)


class GuardedSerial(GuardedRuntime):
    """The serial engine's guarded runtime, each quarantined run kept with its position."""

    def __init__(self, filename: str, columns: tuple[str, ...], number: dict[str, int]):
        super().__init__(filename, list(columns))
        self.number = number
        self.failed: list = []

    def keep_quarantined(self, row: dict) -> None:
        self.failed.append(_failed(self.event, self.number[self.handler], row))


# What a guarded run's journal holds besides store changes and rows (``RunJournal``'s).
_FOLDED, _ONCE = object(), object()


class _JournalSet(set):
    """The window closes sent, each addition journaled (a rolled-back run's close was not)."""

    def __init__(self, journal: list):
        super().__init__()
        self.journal = journal

    def add(self, item: Any) -> None:
        if item not in self:
            self.journal.append((_ONCE, item, None))
            set.add(self, item)


class GuardedShipping(Shipping):
    """:class:`Shipping` for ``on_error`` skip and quarantine: a handler run that raises is
    undone by the runtime's one journal (``runtime.guarded.MarkedJournal``: store changes, and
    the rows, rows sent on, timed writes, scheduled events and window adds it made) and kept
    with its position in ``failed``."""

    def __init__(self, spec: PassSpec, program: Program):
        super().__init__(spec, program)
        self.journal = MarkedJournal(
            self,
            lists=("out", "unhandled", "dropped"),
            heaps=("future",),
            values=("made", "last_at"),
            per_root="scheduled_per_root",
            other=self._undo,
        )
        self.sent_once = _JournalSet(self.journal)
        self.failed: list = []
        self.filename = program.filename
        self.columns = spec.columns

    def emit(self, table: str, **fields: Any) -> None:
        super().emit(table, **fields)
        self.journal.append((EMITTED, table, None))

    def _fold(self, state: str, key: Any, arg: int) -> None:
        slot = self.folded.get((state, key))
        self.journal.append((_FOLDED, (state, key), None if slot is None else list(slot)))
        super()._fold(state, key, arg)

    def _undo(self, what: object, key: Any, old: Any) -> None:
        """Undo a journaled change of a window's adds or of the closes sent."""
        if what is _ONCE:
            set.discard(self.sent_once, key)
        elif old is None:
            self.folded.pop(key, None)
        else:
            self.folded[key] = old

    def rollback(self, exc: BaseException) -> None:
        """Undo the current handler run and record it."""
        self.journal.rollback(exc)

    def keep_quarantined(self, row: dict) -> None:
        self.failed.append(_failed(self.event, self.number[self.handler], row))
