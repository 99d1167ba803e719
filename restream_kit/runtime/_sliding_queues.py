"""Sliding ``min``, ``max`` and ``distinct`` windows run natively: a queue per key, changed in
place, instead of the expansion's tuple rebuilt on every add.

The expansion (``compiler.expand_windows._sliding``) keeps per key a tuple in the state
``X__queue`` (min, max: the (ts, value) pairs that can still be the extreme, oldest first) or
``X__recent`` (distinct: each value once with its latest time, oldest first), and builds a
new tuple on every add. Here each key has a deque (min, max) or a dict from value to time
(distinct), changed in place by the same steps; the state holds the same tuples once the
replay ends (``finish``), which is when anything but these helpers reads it: nothing else
reads a sliding window's state while the replay runs, and the engine keeps the expansion for
checkpoints, histories and guarded replays, which do.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

__all__ = ["sliding_extremes", "sliding_distinct"]


def sliding_extremes(
    store: dict, width: int, agg: str, fail: Callable
) -> tuple[Callable, Callable, Callable]:
    """``(add(key, value, ts), value(key, ts), finish())`` of a sliding min or max whose state
    is ``store`` (``X__queue``). Exact for adds at any time: the expansion's steps, in place
    (drop the expired pairs from the front, the pairs the new value beats from the back)."""
    queues: dict[Any, deque] = {}
    most = agg == "max"

    def add(key: Any, value: Any, ts: int) -> None:
        try:
            q = queues.get(key)
            if q is None:
                q = queues[key] = deque()
            limit = ts - width
            while q and q[0][0] <= limit:
                q.popleft()
            if most:
                while q and q[-1][1] <= value:
                    q.pop()
            else:
                while q and q[-1][1] >= value:
                    q.pop()
            q.append((ts, value))
        except Exception as exc:
            fail(exc)

    def value(key: Any, ts: int) -> Any:
        try:
            q = queues.get(key)
            if q is not None:
                limit = ts - width
                for t, v in q:
                    if t > limit:
                        return v
            return None
        except Exception as exc:
            fail(exc)

    def finish() -> None:
        for key, q in queues.items():
            store[key] = tuple(q)

    return add, value, finish


def sliding_distinct(
    store: dict, width: int, fail: Callable
) -> tuple[Callable, Callable, Callable]:
    """``(add(key, value, ts), value(key, ts), finish())`` of a sliding distinct whose state
    is ``store`` (``X__recent``), for adds in time order (at their events' times): each key's
    values in a dict from value to latest time, ordered by that time (a value added again
    moves to the end), and a deque of the adds, whose front tells what has expired."""
    keys: dict[Any, tuple[dict, deque]] = {}

    def add(key: Any, value: Any, ts: int) -> None:
        try:
            held = keys.get(key)
            if held is None:
                held = keys[key] = ({}, deque())
            latest, adds = held
            limit = ts - width
            while adds and adds[0][0] <= limit:
                t, v = adds.popleft()
                if latest.get(v) == t:  # (not added again since)
                    del latest[v]
            latest.pop(value, None)
            latest[value] = ts
            adds.append((ts, value))
        except Exception as exc:
            fail(exc)

    def value(key: Any, ts: int) -> Any:
        try:
            held = keys.get(key)
            if held is None:
                return 0
            latest = held[0]
            limit = ts - width
            n = len(latest)
            for t in latest.values():  # oldest first: the expired ones lead
                if t > limit:
                    break
                n -= 1
            return n
        except Exception as exc:
            fail(exc)

    def finish() -> None:
        for key, (latest, _adds) in keys.items():
            store[key] = tuple((t, v) for v, t in latest.items())

    return add, value, finish
