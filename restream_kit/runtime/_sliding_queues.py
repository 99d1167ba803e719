"""Sliding windows run natively: a queue per window or per key, changed in place, instead of
the expansion's timed writes (count, sum, mean) or tuples rebuilt on every add (min, max,
distinct).

The expansion (``compiler.expand_windows._sliding``) keeps per key the count ``X__n`` and the
sum ``X__sum`` (an increment now and a timed decrement at ``ts + W``), or a tuple in the state
``X__queue`` (min, max: the (ts, value) pairs that can still be the extreme, oldest first) or
``X__recent`` (distinct: each value once with its latest time, oldest first).

Here, for adds at their events' times: count, sum and mean queue their decrements in one
deque per window, due in the order they were made, and apply the due ones before each add or
read and when the replay ends: what the runtime's timed writes do, in the same order per key
(a decrement due at ``t`` comes after every add before ``t`` and before every add from ``t``
on), so even float sums are the same. Min and max keep a deque per key (for adds at any
time), distinct a dict from value to time per key. The states hold what the expansion's do
once the replay ends (``finish``), which is when anything but these helpers reads them:
nothing else reads a sliding window's state while the replay runs, and the engine keeps the
expansion for checkpoints, histories and guarded replays, which do.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from itertools import islice
from operator import itemgetter
from typing import Any

from ..compiler.inline_windows import TIME, After, statement_add

__all__ = [
    "sliding_extremes",
    "sliding_distinct",
    "distinct_sites",
    "sliding_sums",
    "sums_sites",
]

_time_of = itemgetter(0)


def _expired(times: Iterable[int], limit: int) -> int:
    """How many of ``times`` (oldest first) lead the first one later than ``limit``: the
    entries of a queue that have left a window whose reads see times after ``limit``."""
    n = 0
    for t in times:
        if t > limit:
            break
        n += 1
    return n


def _reader(held: dict, empty: Any, read: Callable, fail: Callable) -> Callable:
    """``value(key, ts)`` of a sliding window that holds a structure per key in ``held``:
    ``read(structure, ts)``, or ``empty`` for a key it has none of; an error re-raised
    through ``fail``."""

    def value(key: Any, ts: int) -> Any:
        try:
            h = held.get(key)
            return empty if h is None else read(h, ts)
        except Exception as exc:
            fail(exc)

    return value


def sliding_sums(
    counts: dict | None, sums: dict | None, width: int, rt: Any, fail: Callable
) -> tuple[Callable, Callable, Callable, dict]:
    """``(add(key, value, ts), value(key, ts), finish(), parts)`` of a sliding count
    (``counts``, the state ``X__n``), sum (``sums``, ``X__sum``) or mean (both), for adds at
    their events' times; ``rt`` the runtime, whose ``event`` is the event running (its time:
    the clock). ``parts``: what :func:`sums_sites` writes out in a replay's loop."""
    due: deque = deque()  # (time due, key, minus the value) of each add, oldest first

    def expire(now: int) -> None:
        while due and due[0][0] <= now:
            _at, key, minus = due.popleft()
            if counts is not None:
                counts[key] = counts[key] - 1
            if sums is not None:
                sums[key] = sums[key] + minus

    def add(key: Any, value: Any, ts: int) -> None:
        try:
            if due and due[0][0] <= ts:
                expire(ts)
            if counts is not None:
                counts[key] = counts.get(key, 0) + 1
            if sums is not None:
                sums[key] = sums.get(key, 0) + value
                due.append((ts + width, key, -value))
            else:
                due.append((ts + width, key, None))
        except Exception as exc:
            fail(exc)

    def value(key: Any, ts: int) -> Any:
        try:
            if due and due[0][0] <= rt.event[1]:
                expire(rt.event[1])
            if sums is None:
                return counts.get(key, 0)
            if counts is None:
                return sums.get(key, 0)
            c = counts.get(key, 0)
            return sums.get(key, 0) / c if c else None
        except Exception as exc:
            fail(exc)

    def finish(until: int | None = None, later: Callable | None = None, **_when: Any) -> None:
        """Apply the decrements due by ``until`` (by default the last event's time); with
        ``later``, hand each one still waiting to it as the timed write the expansion makes,
        ``later(d, default, op, key, arg, at)``: a Spark pass whose events end before the
        replay's does (the driver applies them if an event after the log reaches their time)."""
        if until is None and rt.event is not None:
            until = rt.event[1]
        if until is not None:
            expire(until)
        if later is None:
            return
        for at, key, minus in due:
            if counts is not None:
                later(counts, 0, "add", key, -1, at)
            if sums is not None:
                later(sums, 0, "add", key, minus, at)
        due.clear()

    parts = {"due": due, "counts": counts, "sums": sums}
    return add, value, finish, parts


def sums_sites(n: str, width: int, parts: dict) -> dict:
    """``add`` and ``value`` of sliding window ``n`` (:func:`sliding_sums`) written out in a
    replay's loop (``compiler.inline_windows``): helper -> (site, the globals its code uses)."""
    g = f"_rsn_{n}_"
    counts, sums = parts["counts"], parts["sums"]
    globals_ = {f"{g}due": parts["due"]}
    if counts is not None:
        globals_.update({f"{g}n": counts, f"{g}n_get": counts.get})
    if sums is not None:
        globals_.update({f"{g}sum": sums, f"{g}sum_get": sums.get})

    def expiring(now: str, p: str) -> list[str]:
        """The decrements due by ``now`` applied, oldest first (``expire``)."""
        lines = [f"while {g}due and {g}due[0][0] <= {now}:"]
        if sums is None:  # (a count: its key alone)
            return [*lines, f"    {p}x = {g}due.popleft()[1]", f"    {g}n[{p}x] -= 1"]
        lines += [f"    {p}x = {g}due.popleft()", f"    {p}k = {p}x[1]"]
        if counts is not None:
            lines.append(f"    {g}n[{p}k] -= 1")
        lines.append(f"    {g}sum[{p}k] = {g}sum[{p}k] + {p}x[2]")
        return lines

    @statement_add
    def add(p: str, k: str, v: str, t: str) -> str:
        lines = expiring(t, p)
        if counts is not None:  # (the new count kept: a read right after takes it)
            lines += [f"{p}c = {g}n_get({k}, 0) + 1", f"{g}n[{k}] = {p}c"]
        if sums is not None:
            lines += [
                f"{g}sum[{k}] = {g}sum_get({k}, 0) + {v}",
                f"{g}due.append(({t} + {width}, {k}, -{v}))",
            ]
        else:
            lines.append(f"{g}due.append(({t} + {width}, {k}, None))")
        return "\n".join(lines)

    def value(args: list[str], p: str, target: str | None, after: After | None) -> str | None:
        k = args[0]
        out = target if target is not None else f"{p}v"
        # Right after an add (at the event's time), nothing more is due by then; a count
        # read of the same key is the count the add made.
        fresh = after is not None and after[0] == f"{n}__add"
        lines = [] if fresh else expiring("_rs_ev[1]", p)
        if sums is None and fresh and after[2]:
            lines.append(f"{out} = {after[1]}c")
        elif sums is None:
            lines.append(f"{out} = {g}n_get({k}, 0)")
        elif counts is None:
            lines.append(f"{out} = {g}sum_get({k}, 0)")
        else:
            lines += [
                f"{p}c = {g}n_get({k}, 0)",
                f"{out} = {g}sum_get({k}, 0) / {p}c if {p}c else None",
            ]
        return "\n".join(lines)

    return {f"{n}__add": (add, globals_), f"{n}__value": (value, globals_)}


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

    def extreme(q: deque, ts: int) -> Any:
        first = _expired(map(_time_of, q), ts - width)
        return q[first][1] if first < len(q) else None

    value = _reader(queues, None, extreme, fail)

    def finish(**_when: Any) -> None:  # (its state does not depend on the clock)
        for key, q in queues.items():
            store[key] = tuple(q)

    return add, value, finish


def sliding_distinct(
    store: dict, width: int, fail: Callable
) -> tuple[Callable, Callable, Callable, dict]:
    """``(add(key, value, ts), value(key, ts), finish(), keys)`` of a sliding distinct whose
    state is ``store`` (``X__recent``), for adds in time order (at their events' times): each
    key's values in a dict from value to latest time (``keys``, what :func:`distinct_sites`
    writes out reads), ordered by that time (a value added again moves to the end), so the
    expired ones lead it and an add drops them from its front. A dict of plain values per
    key, and no queue: a key of one or two values (keyed by pairs) costs little memory, and
    the cyclic collector does not track it."""
    keys: dict[Any, dict] = {}

    def add(key: Any, value: Any, ts: int) -> None:
        try:
            latest = keys.get(key)
            if latest is None:
                keys[key] = {value: ts}
                return
            _expire(latest, ts - width)
            if value in latest:
                del latest[value]
            latest[value] = ts
        except Exception as exc:
            fail(exc)

    def distinct(latest: dict, ts: int) -> int:
        return len(latest) - _expired(latest.values(), ts - width)

    value = _reader(keys, 0, distinct, fail)

    def finish(**_when: Any) -> None:  # (its state does not depend on the clock)
        for key, latest in keys.items():
            store[key] = tuple(zip(latest.values(), latest))

    return add, value, finish, keys


def _expire(latest: dict, limit: int) -> None:
    """Drop from ``latest`` (value -> time, oldest first) the values of times up to
    ``limit``: those that lead it."""
    n = _expired(latest.values(), limit)
    if n == len(latest):
        latest.clear()
    elif n == 1:
        del latest[next(iter(latest))]
    elif n:
        for v in list(islice(latest, n)):
            del latest[v]


def distinct_sites(n: str, width: int, keys: dict) -> dict:
    """``add`` and ``value`` of sliding distinct ``n`` (:func:`sliding_distinct`, its
    structures ``keys``) written out in a replay's loop (``compiler.inline_windows``), the
    same steps in place: helper -> (site, the globals its code uses)."""
    g = f"_rsn_{n}_"
    globals_ = {
        f"{g}keys": keys,
        f"{g}get": keys.get,
        f"{g}len": len,
        f"{g}next": next,
        f"{g}iter": iter,
        f"{g}list": list,
        f"{g}islice": islice,
    }
    # The prefixes of the adds written out at the event's time: after one, nothing held for
    # its key is older than that time's window (its expired values went as it ran).
    now_adds: set[str] = set()

    @statement_add
    def add(p: str, k: str, v: str, t: str) -> str:
        if t == TIME:
            now_adds.add(p)
        lines = [
            f"{p}l = {g}get({k})",
            f"if {p}l is None:",
            f"    {p}l = {g}keys[{k}] = {{{v}: {t}}}",
            "else:",
            *_expiring(g, p, f"{t} - {width}", "    "),
            f"    if {v} in {p}l:",
            f"        del {p}l[{v}]",
            f"    {p}l[{v}] = {t}",
        ]
        return "\n".join(lines)

    def value(args: list[str], p: str, target: str | None, after: After | None) -> str | None:
        k, t = args
        out = target if target is not None else f"{p}v"
        if t == TIME and after is not None and after[1] in now_adds and after[2]:
            # Read at the time of the add just before it, of the same key: every value the
            # key holds is in the window.
            return f"{out} = {g}len({after[1]}l)"
        lines = [
            f"{p}l = {g}get({k})",
            f"if {p}l is None:",
            f"    {out} = 0",
            "else:",
            *_counting(p, f"{t} - {width}", "    "),
            f"    {out} = {g}len({p}l) - {p}n",
        ]
        return "\n".join(lines)

    return {f"{n}__add": (add, globals_), f"{n}__value": (value, globals_)}


def _counting(p: str, limit: str, indent: str) -> list[str]:
    """Lines that count in ``{p}n`` the values that lead ``{p}l`` with times up to
    ``limit`` (``_expired``)."""
    lines = [
        f"{p}m = {limit}",
        f"{p}n = 0",
        f"for {p}t in {p}l.values():",
        f"    if {p}t > {p}m:",
        "        break",
        f"    {p}n += 1",
    ]
    return [indent + line for line in lines]


def _expiring(g: str, p: str, limit: str, indent: str) -> list[str]:
    """Lines that drop from ``{p}l`` the values of times up to ``limit`` (``_expire``)."""
    lines = [
        f"if {p}n:",
        f"    if {p}n == {g}len({p}l):",
        f"        {p}l.clear()",
        f"    elif {p}n == 1:",
        f"        del {p}l[{g}next({g}iter({p}l))]",
        "    else:",
        f"        for {p}x in {g}list({g}islice({p}l, {p}n)):",
        f"            del {p}l[{p}x]",
    ]
    return _counting(p, limit, indent) + [indent + line for line in lines]
