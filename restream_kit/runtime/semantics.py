"""The runtime of the serial semantics: one implementation, used wherever handlers run.

Compiled handlers (:mod:`restream_kit.compiler.compile`) read and write plain dicts and call a
runtime for everything else: timed writes (``at=``), ``emit`` and ``schedule``. The rules of
the SPEC live here once: writes with ``at=`` wait in a heap until the replay reaches their
time; scheduled events wait in another; before an event at time ``t`` runs, every scheduled
event with time <= ``t`` runs (each preceded by the timed writes due by its own time), then
every timed write with ``at`` <= ``t`` is applied, which is exactly the order of (time,
position of the writing run, position within the run) that the SPEC defines. After the log,
scheduled events run until none is left, at most :data:`MAX_FLUSH` of them (past that the
replay fails: a timer that re-arms itself forever would never let it finish).

The serial engine drives it with the loop the compiler inlines (set up by
:mod:`.loop`); the planner's replays (cost samples, the causal check) drive it with
:func:`run_events`, which lets the caller wrap every handler run; Spark plain passes run it
per partition, and general pass tasks run its positioned form (:mod:`.positioned`).
"""

from __future__ import annotations

import heapq
import itertools
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from ..model import values
from ..model.errors import RestreamError, StateError

__all__ = [
    "MAX_FLUSH",
    "RESERVED_FIELDS",
    "ScheduledEvent",
    "apply_write",
    "TimeTravelError",
    "check_write",
    "check_fields",
    "check_schedule",
    "flush_overrun",
    "SerialRuntime",
    "check_state",
    "run_scheduled",
    "flush",
    "run_events",
    "RunHook",
]

#: Scheduled events allowed after the log ends, so that a timer that re-arms itself forever stops.
MAX_FLUSH = 10_000_000
RESERVED_FIELDS = frozenset({"kind", "ts", "lsn", "seq"})

#: Called for every handler run by :func:`run_events`: (handler name, compiled function,
#: event, scheduled?). It must call the function with the event.
RunHook = Callable[[str, Callable, Any, bool], None]


class ScheduledEvent:
    """An event put into the replay by ``schedule``; ``lsn`` is its originating log event's."""

    def __init__(self, kind: str, ts: int, lsn: int, seq: int, fields: dict[str, Any]):
        self.__dict__.update(fields)
        self.kind = kind
        self.ts = ts
        self.lsn = lsn
        self.seq = seq

    def __repr__(self) -> str:
        return f"ScheduledEvent({self.__dict__})"

    def __getitem__(self, index: int) -> Any:
        # Log events are tuples that start (lsn, ts, kind); scheduled events answer the same.
        return (self.lsn, self.ts, self.kind)[index]


def apply_write(d: dict, default: Any, op: str, key: Any, arg: Any, raw: bool = False) -> None:
    """Apply one write to a store now: set, add, merge (``arg`` is a function) or delete
    (any other ``op``). The write rules, defined here once: every engine applies writes
    through this. ``raw``: past a store's own ``__setitem__``/``pop`` (a Spark pass applying
    a write another pass made, which that pass already sent on)."""
    if op == "set":
        value = arg
    elif op == "add":
        value = d.get(key, default) + arg
    elif op == "merge":
        value = arg(d.get(key, default))
    elif raw:
        dict.pop(d, key, None)
        return
    else:
        d.pop(key, None)
        return
    if raw:
        dict.__setitem__(d, key, value)
    else:
        d[key] = value


class TimeTravelError(ValueError):
    """A write or a scheduled event earlier than the current event's time."""

    @classmethod
    def write(cls, at: int, now: int) -> TimeTravelError:
        """The error for a write at ``at``, before the event's time ``now``."""
        return cls(f"write at {at} is earlier than the event's time {now}")

    @classmethod
    def schedule(cls, at: int, now: int) -> TimeTravelError:
        """The error for an event scheduled at ``at``, before the event's time ``now``."""
        return cls(f"schedule at {at} is earlier than the event's time {now}")


def check_write(at: int | None, now: int) -> None:
    """The rule of a write's ``at=`` made at time ``now``: not in the past (None: now)."""
    if at is not None and at < now:
        raise TimeTravelError.write(at, now)


def check_fields(fields: dict[str, Any]) -> None:
    """Refuse a scheduled event whose fields use a name the event itself has (kind, ts, ...)."""
    if not RESERVED_FIELDS.isdisjoint(fields):
        clash = sorted(RESERVED_FIELDS & set(fields))
        raise ValueError(f"scheduled event fields may not be named {clash}")


def check_schedule(at: int, now: int, fields: dict[str, Any]) -> None:
    """The rules of ``schedule(kind, at=..., **fields)`` run at time ``now``: not in the
    past, and no field named as the event's own (kind, ts, lsn, seq)."""
    if at < now:
        raise TimeTravelError.schedule(at, now)
    if not RESERVED_FIELDS.isdisjoint(fields):
        check_fields(fields)


def flush_overrun(limit: int = MAX_FLUSH) -> RestreamError:
    """The error of a replay whose handlers scheduled more than ``limit`` events after the
    log ended (every engine's flush stops there)."""
    return RestreamError(
        f"handlers kept scheduling events after the log ended (over {limit:,}); "
        "a timer that re-arms itself forever never lets the replay finish"
    )


class SerialRuntime:
    """The runtime behind compiled handlers: the serial engine's, the planner's replays',
    the explanations' and the Spark tasks' (which run the same compiled handlers)."""

    #: What ``schedule`` makes (a subclass may attach its own bookkeeping to the events).
    event_type: type = ScheduledEvent
    #: Whether :func:`run_scheduled` runs each handler of a scheduled event guarded, undone
    #: when it raises (``guarded.GuardedRuntime``; not its Spark forms, which run none).
    rolls_back: bool = False

    def __init__(self) -> None:
        self.rows: defaultdict[str, list] = defaultdict(list)
        self.future: list = []
        self.scheduled: list = []
        self.order = itertools.count()
        self.scheduled_per_root: defaultdict[int, int] = defaultdict(int)
        self.event: Any = None
        self.seq = 0
        self.handler = ""

    # Called by compiled handlers ----------------------------------------------------

    def write(self, d: dict, default: Any, op: str, key: Any, arg: Any, at: int | None) -> None:
        now = self.event[1]
        if at is None or at == now:
            apply_write(d, default, op, key, arg)
            return
        check_write(at, now)
        heapq.heappush(self.future, (at, next(self.order), d, default, op, key, arg))

    def emit(self, table: str, **fields: Any) -> None:
        ev = self.event
        self.rows[table].append((ev[0], ev[1], self.handler, self.seq, fields))

    def schedule(self, kind: str, *, at: int, **fields: Any) -> None:
        check_schedule(at, self.event[1], fields)
        root = self.event[0]
        self.scheduled_per_root[root] += 1
        event = self.event_type(kind, at, root, self.scheduled_per_root[root], fields)
        heapq.heappush(self.scheduled, (at, next(self.order), event))

    def later(self, d: dict, default: Any, op: str, key: Any, arg: Any, at: int) -> None:
        """Queue a write for ``at`` made earlier, whose rule was checked then (a fused
        window's decrement still waiting when a Spark partition's events end)."""
        heapq.heappush(self.future, (at, next(self.order), d, default, op, key, arg))

    # Driven by the engine -------------------------------------------------------------

    def apply_due(self, t: int) -> None:
        """Apply every timed write with ``at`` <= ``t``, in (at, order made) order."""
        future = self.future
        while future and future[0][0] <= t:
            _at, _n, d, default, op, key, arg = heapq.heappop(future)
            apply_write(d, default, op, key, arg)


_PLAIN = frozenset({int, float, str, bool, type(None), bytes})


def check_state(stores: dict[str, dict]) -> None:
    """Raise :class:`StateError` naming the first state key whose value cannot be stored.

    Runs and checkpoints keep state through the value codec (:mod:`restream_kit.model.values`: plain
    values and containers of them, never pickles), so a replay's final state must fit it;
    plain values are recognised by type, at C speed, before any value is walked.
    """
    for name, d in stores.items():
        key_types = set(map(type, d))
        if key_types <= _PLAIN | {tuple} and _plain_nested(list(d.values())):
            if (
                tuple not in key_types
                or {type(x) for k in d if type(k) is tuple for x in k} <= _PLAIN
            ):
                continue
        bad = values.unstorable(d)
        if bad is not None:
            key, what, obj, exc = bad
            raise StateError(
                f"state {name!r}, key {key!r}: the {what} {obj!r:.80} cannot be "
                f"serialized ({exc}); state must hold plain values"
            )


def _plain_nested(values: list, depth: int = 3) -> bool:
    """Whether ``values`` are plain values or tuples of them, nested at most ``depth`` deep
    (a sliding window's state: tuples of ``(time, value)`` pairs), by type, at C speed."""
    while True:
        types = set(map(type, values))
        if types <= _PLAIN:
            return True
        if depth == 0 or not types <= _PLAIN | {tuple}:
            return False
        values = [x for v in values if type(v) is tuple for x in v]
        depth -= 1


def run_scheduled(
    rt: SerialRuntime,
    by_kind: dict,
    t: float,
    limit: int | None = None,
    run: RunHook | None = None,
) -> int:
    """Run scheduled events due by ``t`` (including ones they schedule); return how many ran.

    ``run``, when given, makes every handler run (``run(name, fn, event, True)``) instead of
    calling ``fn(event)``: the planner times runs or traces their reads through it."""
    ran = 0
    scheduled = rt.scheduled
    guarded = type(rt).rolls_back
    while scheduled and scheduled[0][0] <= t and (limit is None or ran < limit):
        at, _n, ev = heapq.heappop(scheduled)
        if rt.future and rt.future[0][0] <= at:
            rt.apply_due(at)
        rt.event = ev
        rt.seq = ev.seq
        if run is not None:
            for name, fn in by_kind.get(ev.kind, ()):
                rt.handler = name
                run(name, fn, ev, True)
        elif guarded:
            _run_guarded(rt, by_kind.get(ev.kind, ()), ev)
        else:
            for name, fn in by_kind.get(ev.kind, ()):
                rt.handler = name
                fn(ev)
        ran += 1
    rt.seq = 0
    return ran


def _run_guarded(rt: SerialRuntime, handlers: tuple, ev: ScheduledEvent) -> None:
    """A scheduled event's handler runs, each undone when it raises (``guarded.GuardedRuntime``)."""
    for name, fn in handlers:
        rt.handler = name
        rt.journal.clear()
        try:
            fn(ev)
        except Exception as exc:  # noqa: BLE001 - the run is rolled back and recorded
            rt.rollback(exc)


def flush(
    rt: SerialRuntime, by_kind: dict, run: RunHook | None = None, limit: int = MAX_FLUSH
) -> int:
    """Run the scheduled events left after the log; fail past ``limit`` of them."""
    ran = run_scheduled(rt, by_kind, float("inf"), limit=limit, run=run)
    if rt.scheduled:
        raise flush_overrun(limit)
    return ran


def run_events(
    by_kind: dict, rt: SerialRuntime, events: Iterable[Any], run: RunHook, *, end: bool = True
) -> int:
    """Replay ``events`` (log order) through the handlers ``by_kind`` (kind -> (name, fn)
    pairs, ``CompiledProgram.handlers_by_kind()``), with ``run`` making every handler run;
    with ``end``, then the scheduled events left (:func:`flush`). Returns the scheduled
    events run. The order is the inlined loop's, event for event."""
    ran = 0
    for ev in events:
        t = ev[1]
        if rt.scheduled and rt.scheduled[0][0] <= t:
            ran += run_scheduled(rt, by_kind, t, run=run)
        if rt.future and rt.future[0][0] <= t:
            rt.apply_due(t)
        rt.event = ev
        for name, fn in by_kind.get(ev[2], ()):
            rt.handler = name
            run(name, fn, ev, False)
    if end:
        ran += flush(rt, by_kind, run=run)
    return ran
