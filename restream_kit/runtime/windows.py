"""Windows run natively by the serial runtime: the same effects as their expansion, cheaper.

A window declaration (``restream_kit.windows``) is expanded at load time into ordinary code
(``restream_kit.compiler.expand_windows``): keyed state, timed writes, one scheduled close per
value added, and generated helpers. That code is what the planner reads and what the Spark
engine runs. The serial engine replaces the generated helpers of a compiled program with the
functions below, which keep every observable effect of the expansion:

- the window states hold the same keys and values as the expansion's once the replay ends,
  and every read of a window (``value``, a close's aggregate) sees what the expansion's does;
- tumbling and hopping (``_aligned``): only the close scheduled by a window's first value
  can emit (the expansion's later closes find the window gone or still counting and do
  nothing, see ``expand_windows``), so a window is a record in its start's table of open
  windows (count, aggregate, the emitting close's ``lsn``, ``seq`` and order) and a start
  has one entry in the runtime's queue; every add takes its number (``seq``) from the
  runtime, as the expansion's do, so every row keeps its ``lsn`` and ``seq`` and
  ``Metrics.scheduled_events`` is unchanged;
- session (``_sessions``): every value takes its number (``seq``) as its close would; when
  the adds come at their events' times (``_native_plan.adds_at_event_time``), the open
  sessions wait in one queue, oldest close first, and the window has one entry in the
  runtime's queue, at its oldest session's close; otherwise one light close per add, whose
  check is the expansion's; in the serial engine's replay, a session window without
  ``on_close`` functions, added to by log events alone and alone on its table, queues
  nothing: a session closes at the next add past its close time, and its rows are made in
  close order when they are asked for (``_native_plan.lazy_session``);
- sliding (``_sliding_queues``): count, sum and mean added to at their events' times queue
  their decrements in one deque per window, applied before each add or read as the runtime
  would apply its timed writes (otherwise those timed writes, written to the runtime's
  queue directly); min and max: a queue per key changed in place, distinct: a dict of each
  value's latest time per key, oldest first; the state gets their tuples when the replay ends;
- the states of closing windows get their open windows' counts and aggregates (a
  ``distinct``'s set as a frozenset) when the replay ends (``Fused.finish``): nothing else
  reads them before;
- a close writes its row and calls the ``on_close`` functions as the generated handler does;
- where the replay's loop writes a handler's body out, the window's ``add`` (a sliding
  count's, sum's or mean's ``value``) is written out there too (``compiler.inline_windows``).

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
from functools import partial
from typing import Any

from ..compiler.compile import CompiledProgram
from ..compiler.inline_closes import close_call
from ..compiler.inline_windows import inline_calls
from ..model.windows import Hopping, Session, Sliding, Tumbling
from ._aligned import aligned
from ._native_plan import LAZY, adds_at_event_time, native_plan
from ._sessions import session
from ._sliding_queues import (
    distinct_sites,
    sliding_distinct,
    sliding_extremes,
    sliding_sums,
    sums_sites,
)
from ._window_parts import CLOCK, FINISH, INLINE, store
from ._window_rows import FIELDS as ROW_FIELDS
from ._window_rows import Blocks, EmitRows, WindowRows
from .semantics import SerialRuntime, TimeTravelError

__all__ = [
    "fuse_windows",
    "Fused",
    "native_plan",
    "Blocks",
    "WindowRows",
    "EmitRows",
    "ROW_FIELDS",
]


@dataclass
class Fused:
    """What :func:`fuse_windows` did: the windows that run natively (and how), why the others
    keep their expansion (window -> reason), and what writes the native windows' state at the end
    of the replay (:meth:`finish`)."""

    names: list[str] = field(default_factory=list)
    off: dict[str, str] = field(default_factory=dict)
    #: How each native window runs, in a few words (``native_plan``'s, for this replay).
    how: dict[str, str] = field(default_factory=dict)
    finishers: list[Callable] = field(default_factory=list)
    #: The tables windows put their rows in as columns, when asked to (``blocks=``).
    blocks: Blocks | None = None

    def finish(self, **when: Any) -> None:
        """Write what the native windows hold in their own structures into their states;
        ``when`` (``until=``, ``later=``) as a sliding sum's finisher takes it
        (:func:`~restream_kit.runtime._sliding_queues.sliding_sums`); ``flushed=True`` when
        the log was flushed (a lazy session window then closes every session, ``blocks``)."""
        for finish in [*(self.blocks.finishers if self.blocks else ()), *self.finishers]:
            finish(**when)

    def settle(self) -> None:
        """Make the rows waiting in windows (``blocks``) that are due by the last event."""
        if self.blocks is not None:
            self.blocks.settle()

    def release(self) -> None:
        """Let go of the rows written-out emits last added to (``Blocks.release``), once the
        tables are built from them."""
        if self.blocks is not None:
            self.blocks.release()

    def blocked(self, table: str) -> bool:
        """Whether windows may have put their rows in ``table`` as columns (``blocks``)."""
        return self.blocks is not None and table in self.blocks.tables


def fuse_windows(
    compiled: CompiledProgram,
    rt: SerialRuntime,
    *,
    batch_closes: bool = True,
    only: Collection[str] | None = None,
    blocks: Blocks | None = None,
    lazy: bool = True,
) -> Fused:
    """Replace the generated helpers of ``compiled``'s windows with native ones where they
    can run natively (:func:`native_plan` says which and why not); the engine calls
    ``finish()`` on the result once the replay has run.

    ``batch_closes`` puts the closes of a tumbling or hopping window that end at one time in
    one entry of the runtime's queue (the engine turns it off when it checkpoints, since a
    checkpoint keeps the queue's events as they are). ``only``: fuse these windows alone (a
    Spark pass fuses the windows it holds whole, ``engines.spark``). ``blocks``: closing
    windows without ``on_close`` functions leave their rows as columns
    (:mod:`~._window_rows`), and a session window that alone emits to its table makes its
    rows when they are asked for (``blocks.settle``); the caller builds its tables from them
    (the serial engine, ``engines._window_tables``; a Spark pass, ``passes._arrow_rows``).
    ``lazy=False``: no session window is lazy (a Spark pass runs its closes in its queue,
    which its counts and its last close's time are read from, ``passes._own_closes``)."""
    program = compiled.program
    fused = Fused(blocks=blocks)
    sites: dict = {}
    lazy = lazy and blocks is not None and batch_closes
    emits = _own_emits(compiled.namespace, rt)
    block = None
    if emits and blocks is not None:
        ns = compiled.namespace

        def block(table: str, fields: tuple[str, ...], seqs: bool = False) -> str:
            return blocks.emit_site(ns, rt, table, fields, seqs)

    for name, (native, why) in native_plan(program, compiled.namespace, lazy).items():
        if only is not None and name not in only:
            continue
        if not native:
            fused.off[name] = why
            continue
        window = program.windows[name]
        fail = _raiser(program.filename, compiled.namespace[f"{name}__add"])
        timed = isinstance(window, (Session, Sliding))
        extra: dict[str, Any] = {"event_time": adds_at_event_time(program, name)} if timed else {}
        if blocks is not None and not isinstance(window, Sliding):
            extra["blocks"] = blocks
            if isinstance(window, Session):
                extra["lazy"] = why == LAZY
        if not isinstance(window, Sliding) and window.callbacks:
            fns = [compiled.namespace[fn.__name__] for fn in window.callbacks]
            seqs = partial(block, seqs=True) if block is not None else None
            line = _line(compiled, name)
            extra["write"] = partial(
                close_call, compiled, name, fns, emits, lineno=line, block=seqs
            )
        builder = _BUILDERS[type(window)]
        replaced = builder(name, window, compiled.namespace, rt, batch_closes, fail, **extra)
        finish = replaced.pop(FINISH, None)
        if finish is not None:
            fused.finishers.append(finish)
        line = compiled.namespace[f"{name}__add"].__code__.co_firstlineno
        for helper, (site, globals_) in replaced.pop(INLINE, {}).items():
            compiled.namespace.update(globals_)
            sites[helper] = (site, line)
        compiled.namespace.update(replaced)
        fused.names.append(name)
        fused.how[name] = why
    if fused.names:
        compiled.handlers = tuple(
            (hname, compiled.namespace[hname]) for hname, _fn in compiled.handlers
        )
    if sites:
        clock = CLOCK if CLOCK in compiled.namespace else None
        emits = emits if blocks is not None else frozenset()
        inline_calls(compiled, sites, clock, emits, block)
    return fused


def _own_emits(namespace: dict, rt: SerialRuntime) -> frozenset[str]:
    """The names bound to ``rt.emit`` when it is the serial runtime's own, or one marked
    ``serial_emit`` (it appends the row as the serial runtime's does, a Spark pass's
    runtime): ``on_close`` functions written out write those emits out
    (``compiler.inline_closes``), and so may the loop, in a replay that asks for ``blocks``."""
    own = type(rt).emit
    if own is not SerialRuntime.emit and not getattr(own, "serial_emit", False):
        return frozenset()
    return frozenset(
        name
        for name, value in namespace.items()
        if getattr(value, "__func__", None) is own and getattr(value, "__self__", None) is rt
    )


def _line(compiled: CompiledProgram, n: str) -> int:
    """Window ``n``'s declaration line (its generated helpers carry it)."""
    return compiled.namespace[f"{n}__add"].__code__.co_firstlineno


def _raiser(filename: str, generated: Callable) -> Callable:
    """``fail(exc)``: re-raise ``exc`` from the window's declaration line in the program, as
    the expansion's code (which carries that line) would, so the error names that line."""
    lineno = generated.__code__.co_firstlineno
    namespace: dict[str, Any] = {}
    source = "\n" * (lineno - 1) + "def fail(exc): raise exc"
    exec(compile(source, filename, "exec"), namespace)
    return namespace["fail"]


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
        queues = store(namespace, f"{n}__queue")
        add, value, finish = sliding_extremes(queues, width, agg, fail)
        return {f"{n}__add": add, f"{n}__value": value, FINISH: finish}
    if agg == "distinct":  # (added at its events' times: ``native_plan``)
        add, value, finish, keys = sliding_distinct(store(namespace, f"{n}__recent"), width, fail)
        inline = distinct_sites(n, width, keys)
        return {f"{n}__add": add, f"{n}__value": value, FINISH: finish, INLINE: inline}
    counts = store(namespace, f"{n}__n") if agg in ("count", "mean") else None
    sums = store(namespace, f"{n}__sum") if agg in ("sum", "mean") else None
    if event_time:  # the decrements fall due in the order they are made: one deque
        add, value, finish, parts = sliding_sums(counts, sums, width, rt, fail)
        inline = sums_sites(n, width, parts)
        return {f"{n}__add": add, f"{n}__value": value, FINISH: finish, INLINE: inline}
    future = rt.future
    order = rt.order

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

    read = _READS[agg](counts, sums)

    def value(key: Any, ts: int) -> Any:
        try:
            return read(key)
        except Exception as exc:
            fail(exc)

    return {f"{n}__add": add, f"{n}__value": value}


def _mean(counts: dict, sums: dict) -> Callable:
    def read(key: Any) -> Any:
        c = counts.get(key, 0)
        return sums.get(key, 0) / c if c else None

    return read


#: Per aggregate of a sliding count, sum or mean, ``read(key)`` over its count and sum states.
_READS: dict[str, Callable] = {
    "count": lambda counts, _sums: lambda key: counts.get(key, 0),
    "sum": lambda _counts, sums: lambda key: sums.get(key, 0),
    "mean": _mean,
}
_BUILDERS = {Tumbling: aligned, Hopping: aligned, Session: session, Sliding: _sliding}
