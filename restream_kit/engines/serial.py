"""The serial engine: one event at a time, in the kernel. The oracle every engine must equal.

State lives in plain dicts (see ``_compile``). Writes with ``at=`` wait in a heap until the
replay reaches their time; scheduled events wait in another. Before an event at time ``t``
runs, every scheduled event with time <= ``t`` runs (each preceded by the timed writes due by
its own time), then every timed write with ``at`` <= ``t`` is applied, which is exactly the
order of (time, position of the writing run, position within the run) that the SPEC defines.
"""

from __future__ import annotations

import heapq
import itertools
import linecache
import time
from collections import defaultdict
from typing import Any

from .._compile import compile_program
from .._inline import SCHEDULED_RUNNER_NAME
from ..epochs import cut
from ..errors import HandlerError, RestreamError, user_lineno
from ..log import Log
from ..program import Program
from ..progress import (
    Cancelled,
    CancelToken,
    EpochFinished,
    EpochStarted,
    Observer,
    Progress,
    ReplayFinished,
    ReplayStarted,
    broadcast,
)
from ..result import Metrics, Result, build_table

__all__ = ["replay", "SerialRuntime", "ScheduledEvent", "MAX_FLUSH", "apply_write"]

#: Scheduled events allowed after the log ends, so that a timer that re-arms itself forever stops.
MAX_FLUSH = 10_000_000
RESERVED_FIELDS = frozenset({"kind", "ts", "lsn", "seq"})


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


def apply_write(d: dict, default: Any, op: str, key: Any, arg: Any) -> None:
    """Apply one write to a store now: set, add, merge (``arg`` is a function) or delete."""
    if op == "set":
        d[key] = arg
    elif op == "add":
        d[key] = d.get(key, default) + arg
    elif op == "merge":
        d[key] = arg(d.get(key, default))
    else:
        d.pop(key, None)


class TimeTravelError(ValueError):
    """A write or a scheduled event earlier than the current event's time."""


class SerialRuntime:
    """The runtime behind compiled handlers in the serial engine."""

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
        if at < now:
            raise TimeTravelError(f"write at {at} is earlier than the event's time {now}")
        heapq.heappush(self.future, (at, next(self.order), d, default, op, key, arg))

    def emit(self, table: str, **fields: Any) -> None:
        ev = self.event
        self.rows[table].append((ev[0], ev[1], self.handler, self.seq, fields))

    def schedule(self, kind: str, *, at: int, **fields: Any) -> None:
        if at < self.event[1]:
            raise TimeTravelError(
                f"schedule at {at} is earlier than the event's time {self.event[1]}"
            )
        clash = RESERVED_FIELDS & set(fields)
        if clash:
            raise ValueError(f"scheduled event fields may not be named {sorted(clash)}")
        root = self.event[0]
        self.scheduled_per_root[root] += 1
        event = ScheduledEvent(kind, at, root, self.scheduled_per_root[root], fields)
        heapq.heappush(self.scheduled, (at, next(self.order), event))

    # Driven by the engine -------------------------------------------------------------

    def apply_due(self, t: int) -> None:
        """Apply every timed write with ``at`` <= ``t``, in (at, order made) order."""
        future = self.future
        while future and future[0][0] <= t:
            _at, _n, d, default, op, key, arg = heapq.heappop(future)
            apply_write(d, default, op, key, arg)


def replay(
    program: Program,
    log: Log,
    *,
    observer: Observer | None = None,
    epoch: int | str | None = None,
    cancel: CancelToken | None = None,
    batch_size: int = 65_536,
    **_options: Any,
) -> Result:
    """Replay ``log`` through ``program`` one event at a time and return the result.

    ``epoch`` sets how often partial outputs are published (``EpochFinished``); ``cancel``
    stops the replay between batches.
    """
    notify = broadcast(observer)
    rt = SerialRuntime()
    by_kind: dict = {}
    compiled = compile_program(
        program,
        rt,
        columns=log.columns,
        kind_order=log.kinds_by_frequency(),
        extra_globals={SCHEDULED_RUNNER_NAME: lambda t: _run_scheduled(rt, by_kind, t)},
    )
    by_kind.update(compiled.handlers_by_kind())
    run_batch = compiled.run_batch
    epochs = cut(log, epoch)
    total = len(log)
    notify(ReplayStarted("serial", total, len(epochs), ("serial",), log.span_ms))
    started = time.perf_counter()
    done = 0
    published = dict.fromkeys(rt.rows, 0)
    try:
        for ep in epochs:
            notify(EpochStarted(ep.index, len(ep)))
            epoch_started = time.perf_counter()
            for batch in log.iter_events(batch_size, named=compiled.needs_named_events, start=ep.start, stop=ep.stop):
                if cancel is not None:
                    cancel.check()
                run_batch(batch)
                done += len(batch)
                notify(Progress(done, total, time.perf_counter() - started))
            if ep.index == len(epochs) - 1:
                _run_scheduled(rt, by_kind, float("inf"), limit=MAX_FLUSH)
                if rt.scheduled:
                    raise RestreamError(
                        f"handlers kept scheduling events after the log ended (over {MAX_FLUSH:,}); "
                        "a timer that re-arms itself forever never lets the replay finish"
                    )
            outputs = _new_rows(rt.rows, published) if observer is not None else {}
            last = ep.index == len(epochs) - 1
            # Every event earlier than the epoch's last one has run, scheduled ones included.
            settled = None if last or not len(ep) else log.table.column("ts")[ep.stop - 1].as_py()
            notify(EpochFinished(ep.index, done, time.perf_counter() - epoch_started, outputs, settled))
    except (HandlerError, Cancelled) as exc:
        notify(ReplayFinished(done, time.perf_counter() - started, ok=False, error=str(exc)))
        raise
    except Exception as exc:
        error = _handler_error(program, rt, exc)
        notify(ReplayFinished(done, time.perf_counter() - started, ok=False, error=str(error)))
        raise error from exc
    wall = time.perf_counter() - started
    tables = {name: build_table(name, rows) for name, rows in rt.rows.items()}
    metrics = Metrics(
        engine="serial",
        events=total,
        scheduled_events=sum(rt.scheduled_per_root.values()),
        wall_s=wall,
        span_ms=log.span_ms,
        rows={name: t.num_rows for name, t in tables.items()},
        epochs=len(epochs),
    )
    notify(ReplayFinished(total, wall))
    return Result(tables=tables, state=compiled.stores, metrics=metrics)


def _new_rows(rows: dict[str, list], published: dict[str, int]) -> dict[str, Any]:
    """Tables of the rows emitted since the last call, for views that stream outputs."""
    out = {}
    for name, table_rows in rows.items():
        start = published.get(name, 0)
        if len(table_rows) > start:
            out[name] = build_table(name, table_rows[start:])
            published[name] = len(table_rows)
    return out


def _run_scheduled(rt: SerialRuntime, by_kind: dict, t: float, limit: int | None = None) -> int:
    """Run scheduled events due by ``t`` (including ones they schedule); return how many ran."""
    ran = 0
    scheduled = rt.scheduled
    while scheduled and scheduled[0][0] <= t and (limit is None or ran < limit):
        at, _n, ev = heapq.heappop(scheduled)
        if rt.future and rt.future[0][0] <= at:
            rt.apply_due(at)
        rt.event = ev
        rt.seq = ev.seq
        for name, fn in by_kind.get(ev.kind, ()):
            rt.handler = name
            fn(ev)
        ran += 1
    rt.seq = 0
    return ran


def _handler_error(program: Program, rt: SerialRuntime, exc: BaseException) -> RestreamError:
    """Turn an exception inside a handler into one line: handler, user line, event."""
    if isinstance(exc, RestreamError) and not isinstance(exc, TimeTravelError):
        return exc
    ev = rt.event
    if ev is None:
        return RestreamError(str(exc))
    lsn, ts, kind = ev[0], ev[1], ev[2]
    lineno = user_lineno(exc, program.filename)
    return HandlerError(
        handler=rt.handler,
        filename=program.filename,
        lineno=lineno,
        line=linecache.getline(program.filename, lineno) if lineno else None,
        lsn=lsn,
        seq=rt.seq,
        kind=kind,
        ts=ts,
        cause=exc,
    )
