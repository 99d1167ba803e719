"""Windows and running aggregates, declared at module level and used inside handlers.

A declaration names a window; loading the program turns it into ordinary program code (keyed
state, writes into the future, ``schedule`` and handlers: see ``restream_kit.compiler.expand_windows``),
so every engine runs it and the planner reads it like code written by hand::

    from restream_kit import emit, minutes, on
    from restream_kit.windows import hopping, sliding, tumbling

    clicks = tumbling(minutes(5), "count", table="clicks_per_ip")
    recent = sliding(minutes(1), "count")

    @on("click")
    def track(e):
        clicks.add(e.ip)             # counted in the five-minute window that contains e.ts
        recent.add(e.ip)
        if recent.value(e.ip) > 100:  # clicks of this IP in (e.ts - 1 min, e.ts]
            emit("burst", ip=e.ip)

Times are milliseconds, like the log's ``ts``. Windows are half-open, ``[start, end)``, and an
event belongs to a window by its ``ts`` alone:

- ``tumbling(width)``: windows ``[k * width, (k + 1) * width)`` for every integer ``k``, aligned
  on the epoch. An event exactly on an edge belongs to the later window.
- ``hopping(width, hop)``: windows ``[k * hop, k * hop + width)``; an event belongs to every
  one that contains its ``ts`` (``width / hop`` of them when hop divides width).
- ``session(gap)``: per key, a run of events each less than ``gap`` after the previous one.
  The session ``[first ts, last ts + gap)`` closes at ``last ts + gap``; an event at exactly
  that time starts a new session, because the close runs before log events of its time.
- ``sliding(width)``: no rows of its own; ``value(key)`` is the aggregate over the values added
  for ``key`` with ``ts`` in ``(t - width, t]``, where ``t`` is the reading event's time, by
  events processed before the read (a later event with the same ``ts`` is not counted yet).
- ``ewma(alpha)``: per key, ``update(key, x)`` returns ``x`` the first time and
  ``alpha * x + (1 - alpha) * previous`` after that; ``value(key)`` reads it (None before).

Aggregates: ``"count"`` (values added; the value may be left out), ``"sum"``, ``"mean"``,
``"min"``, ``"max"`` and ``"distinct"`` (number of different values). Values must not be None;
skip them in the handler.

When a tumbling, hopping or session window that received at least one value closes, a row goes
to ``table`` with the fields ``key``, ``start``, ``end`` and ``value`` (the aggregate), and
every function decorated with ``@window.on_close`` is called as ``fn(key, start, end, value)``
(it may ``emit``). The row comes from a scheduled event at ``end`` (a tumbling or hopping
window) or ``last ts + gap`` (a session): it sees exactly the events of its window, rows of
windows closing at one time come out in the order they opened, and the windows still open
when the log ends are closed after it, in time order. Empty windows emit nothing. A closed
window's state is deleted; ``sliding`` and ``ewma`` keep one entry per key they have seen.

``add`` and ``value`` take the event's time from the handler's event argument; in a helper
function that is not a handler, pass it as ``ts=``: ``clicks.add(ip, ts=ev.ts)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

__all__ = [
    "AGGREGATES",
    "Window",
    "Tumbling",
    "Hopping",
    "Session",
    "Sliding",
    "Ewma",
    "tumbling",
    "hopping",
    "session",
    "sliding",
    "ewma",
    "expanded_source",
]

AGGREGATES = ("count", "sum", "mean", "min", "max", "distinct")


def _duration(what: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise ValueError(f"{what} must be a whole number of milliseconds, not {value!r}")
    if value <= 0:
        raise ValueError(f"{what} must be positive, not {value!r}")
    return int(value)


def _aggregate(agg: Any) -> str:
    if agg not in AGGREGATES:
        raise ValueError(f"unknown aggregate {agg!r}; choose one of {', '.join(AGGREGATES)}")
    return agg


class Window:
    """Base of the declarations. Their methods only work inside handlers, during a replay."""

    kind: ClassVar[str] = "window"
    #: Methods a handler may call, as ``(name, positional arguments allowed)``.
    methods: ClassVar[dict[str, tuple[int, ...]]] = {}

    def __init__(self) -> None:
        self.name: str | None = None

    def _outside(self, *_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError(
            f"window {self.name or ''} can only be used inside handlers during a replay"
        )


class _Closing(Window):
    """A window that emits a row when it closes: tumbling, hopping, session."""

    methods = {"add": (1, 2)}
    #: The declaration's durations, in the order it takes them (whole milliseconds each).
    sizes: ClassVar[tuple[str, ...]] = ()

    def __init__(self, agg: str, table: str | None, *sizes: Any):
        super().__init__()
        self.agg = _aggregate(agg)
        if table is not None and (not isinstance(table, str) or not table):
            raise ValueError(f"table must be a non-empty string, not {table!r}")
        self.table = table
        self.callbacks: list[Callable] = []
        for name, value in zip(self.sizes, sizes):
            setattr(self, name, _duration(name, value))

    def __repr__(self) -> str:
        sizes = "".join(f"{getattr(self, name)}, " for name in self.sizes)
        return f"{self.kind}({sizes}{self.agg!r}, table={self.table!r})"

    def on_close(self, fn: Callable) -> Callable:
        """Decorate a module-level ``fn(key, start, end, value)`` to call when a window closes."""
        if not callable(fn):
            raise TypeError("on_close decorates a function")
        self.callbacks.append(fn)
        return fn

    def add(self, key: Any, value: Any = None, *, ts: int | None = None) -> None:
        """Put ``value`` into ``key``'s window(s) containing the event's time."""
        self._outside()


class Tumbling(_Closing):
    """Windows ``[k * width, (k + 1) * width)``: see :func:`tumbling`."""

    kind = "tumbling"
    sizes = ("width",)
    width: int

    def __init__(self, width: int, agg: str = "count", *, table: str | None = None):
        super().__init__(agg, table, width)


class Hopping(_Closing):
    """Windows ``[k * hop, k * hop + width)``: see :func:`hopping`."""

    kind = "hopping"
    sizes = ("width", "hop")
    width: int
    hop: int

    def __init__(self, width: int, hop: int, agg: str = "count", *, table: str | None = None):
        super().__init__(agg, table, width, hop)
        if self.hop > self.width:
            raise ValueError(
                f"hop ({self.hop}) must not exceed width ({self.width}): events would fall "
                "between windows"
            )


class Session(_Closing):
    """Per key, runs of events less than ``gap`` apart: see :func:`session`."""

    kind = "session"
    sizes = ("gap",)
    gap: int

    def __init__(self, gap: int, agg: str = "count", *, table: str | None = None):
        super().__init__(agg, table, gap)


class Sliding(Window):
    """The aggregate over the last ``width`` milliseconds, read with ``value``."""

    kind = "sliding"
    methods = {"add": (1, 2), "value": (1,)}

    def __init__(self, width: int, agg: str = "count"):
        super().__init__()
        self.width = _duration("width", width)
        self.agg = _aggregate(agg)

    def add(self, key: Any, value: Any = None, *, ts: int | None = None) -> None:
        """Add ``value`` for ``key`` at the event's time; it leaves the window ``width`` later."""
        self._outside()

    def value(self, key: Any, *, ts: int | None = None) -> Any:
        """The aggregate of ``key`` over ``(t - width, t]`` (0 or None when empty)."""
        return self._outside()

    def __repr__(self) -> str:
        return f"sliding({self.width}, {self.agg!r})"


class Ewma(Window):
    """An exponentially weighted moving average per key."""

    kind = "ewma"
    methods = {"update": (2,), "value": (1,)}

    def __init__(self, alpha: float):
        super().__init__()
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha <= 1:
            raise ValueError(f"alpha must be in (0, 1], not {alpha!r}")
        self.alpha = float(alpha)

    def update(self, key: Any, x: float) -> float:
        """Fold ``x`` into ``key``'s average and return the new average."""
        return self._outside()

    def value(self, key: Any) -> float | None:
        """``key``'s average, or None before its first update."""
        return self._outside()

    def __repr__(self) -> str:
        return f"ewma({self.alpha!r})"


def tumbling(width: int, agg: str = "count", *, table: str | None = None) -> Tumbling:
    """Tumbling windows of ``width`` ms aligned on the epoch: ``[k * width, (k + 1) * width)``.

    Each closing window emits ``key, start, end, value`` to ``table`` (if given) and calls the
    ``on_close`` functions.
    """
    return Tumbling(width, agg, table=table)


def hopping(width: int, hop: int, agg: str = "count", *, table: str | None = None) -> Hopping:
    """Windows of ``width`` ms starting every ``hop`` ms: ``[k * hop, k * hop + width)``."""
    return Hopping(width, hop, agg, table=table)


def session(gap: int, agg: str = "count", *, table: str | None = None) -> Session:
    """Session windows per key that close ``gap`` ms after the key's last event."""
    return Session(gap, agg, table=table)


def sliding(width: int, agg: str = "count") -> Sliding:
    """A sliding aggregate per key over ``(t - width, t]``, read with ``value(key)``."""
    return Sliding(width, agg)


def ewma(alpha: float) -> Ewma:
    """An exponentially weighted moving average per key with smoothing factor ``alpha``."""
    return Ewma(alpha)


def expanded_source(program: Any) -> str:
    """The program as the engines and the planner see it, windows expanded into plain code."""
    import ast

    from .program import Program

    return ast.unparse(Program.load(program).module_ast)
