"""A small serial interpreter for the planner's own replays (cost samples, causal analysis).

It follows the serial semantics of the SPEC (scheduled events before log events of a later or
equal time, timed writes applied in (time, order made) order, handlers in declaration order)
but lets the caller wrap every handler run, so that the planner can time runs or trace their
reads and writes without touching the serial engine.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa

from .._compile import CompiledProgram
from ..log import Log

__all__ = ["PlanRuntime", "PlanScheduledEvent", "run_events", "sample_events", "MAX_FLUSH"]

#: Scheduled events run after the last log event, at most (a timer re-arming forever stops).
MAX_FLUSH = 1_000_000

#: Called for every handler run: (handler name, compiled function, event, scheduled?).
RunHook = Callable[[str, Callable, Any, bool], None]


class PlanScheduledEvent:
    """An event put into the replay by ``schedule``."""

    def __init__(self, kind: str, ts: int, lsn: int, seq: int, fields: dict[str, Any], tag: Any):
        self.__dict__.update(fields)
        self.kind = kind
        self.ts = ts
        self.lsn = lsn
        self.seq = seq
        self._tag = tag  # what the caller attached when it was scheduled

    def __repr__(self) -> str:
        return f"PlanScheduledEvent({self.kind!r}, ts={self.ts}, lsn={self.lsn})"


class PlanRuntime:
    """Runtime for compiled handlers. ``apply`` performs one write; subclasses may watch it."""

    def __init__(self) -> None:
        self.future: list = []
        self.scheduled: list = []
        self.order = itertools.count()
        self.per_root: dict[int, int] = {}
        self.now: int = -(2**63)
        self.event: Any = None
        self.emitted = 0

    def tag(self) -> Any:
        """What a timed write or scheduled event carries from the run that made it."""
        return None

    def apply(self, d: dict, default: Any, op: str, key: Any, arg: Any, tag: Any) -> None:
        if op == "set":
            dict.__setitem__(d, key, arg)
        elif op == "add":
            dict.__setitem__(d, key, dict.get(d, key, default) + arg)
        elif op == "merge":
            dict.__setitem__(d, key, arg(dict.get(d, key, default)))
        else:
            dict.pop(d, key, None)

    def write(self, d: dict, default: Any, op: str, key: Any, arg: Any, at: int | None) -> None:
        if at is None or at == self.now:
            self.apply(d, default, op, key, arg, self.tag())
            return
        if at < self.now:
            raise ValueError(f"write at {at} is earlier than the event's time {self.now}")
        heapq.heappush(self.future, (at, next(self.order), d, default, op, key, arg, self.tag()))

    def emit(self, table: str, **fields: Any) -> None:
        self.emitted += 1

    def schedule(self, kind: str, *, at: int, **fields: Any) -> None:
        if at < self.now:
            raise ValueError(f"schedule at {at} is earlier than the event's time {self.now}")
        root = self.event.lsn
        self.per_root[root] = self.per_root.get(root, 0) + 1
        event = PlanScheduledEvent(kind, at, root, self.per_root[root], fields, self.tag())
        heapq.heappush(self.scheduled, (at, next(self.order), event))

    def apply_due(self, t: float) -> None:
        future = self.future
        while future and future[0][0] <= t:
            _at, _n, d, default, op, key, arg, tag = heapq.heappop(future)
            self.apply(d, default, op, key, arg, tag)


def run_events(
    compiled: CompiledProgram,
    rt: PlanRuntime,
    events: Iterable[Any],
    hook: RunHook,
    *,
    flush: bool = True,
) -> int:
    """Replay ``events`` (log order) through ``compiled``; return the scheduled events run."""
    by_kind = compiled.handlers_by_kind()
    ran = 0
    for ev in events:
        t = ev.ts
        if rt.scheduled and rt.scheduled[0][0] <= t:
            ran += _scheduled(rt, by_kind, t, hook, None)
        if rt.future and rt.future[0][0] <= t:
            rt.apply_due(t)
        rt.now = t
        rt.event = ev
        for name, fn in by_kind.get(ev.kind, ()):
            hook(name, fn, ev, False)
    if flush:
        ran += _scheduled(rt, by_kind, float("inf"), hook, MAX_FLUSH)
    return ran


def _scheduled(rt: PlanRuntime, by_kind: dict, t: float, hook: RunHook, limit: int | None) -> int:
    ran = 0
    while rt.scheduled and rt.scheduled[0][0] <= t and (limit is None or ran < limit):
        at, _n, ev = heapq.heappop(rt.scheduled)
        if rt.future and rt.future[0][0] <= at:
            rt.apply_due(at)
        rt.now = at
        rt.event = ev
        for name, fn in by_kind.get(ev.kind, ()):
            hook(name, fn, ev, True)
        ran += 1
    return ran


def sample_events(log: Log, limit: int | None) -> Iterator[Any]:
    """The first ``limit`` events of ``log`` (all when None) as named tuples, in log order."""
    table: pa.Table = log.table
    if limit is not None:
        table = table.slice(0, limit)
    make = log.event_type()._make
    for batch in table.to_batches(max_chunksize=65_536):
        columns = [col.to_pylist() for col in batch.columns]
        yield from map(make, zip(*columns))
