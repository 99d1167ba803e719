"""Copies of upstream state in every partition of a broadcast-read pass (see ``passes._plan``).

A stage that reads a state under a key that is not the event's (or whole, or on scheduled
events) cannot be told which partition holds what it reads. So the fold pass before it that
applies every write of the state records, for each write, the key's value after it at the
write's position: the state's *versions*, as in ReStream's multi-versioned state
(:class:`VersionRecorder`). They travel packed, a few rows per partition of the reading pass,
and each partition keeps a copy of the state that it brings up to the position of each run
before the run (:class:`CopyFeed`): a plain dict, so whole reads (``len``, ``for k in m``)
cost what they cost serially, and keys come in the serial engine's insertion order.

A reading pass by log order that runs log events only is split into contiguous ranges of
the log (``passes._ranges.copy_ranges``): each partition then needs only the state as of its
range's start and the versions within its range, so that the versions are spread over the
partitions instead of every partition applying all of them.
"""

from __future__ import annotations

import pickle
from operator import itemgetter
from typing import Any

from ._rows import VERS, dumps, position_bytes
from ._stores import apply_op

__all__ = ["Deleted", "VersionRecorder", "CopyFeed", "in_serial_order", "CHUNK"]

#: Versions per packed row.
CHUNK = 65_536
_FIRST_POS = (-(1 << 63), 0, 0, b"")  # where packed versions sort: before everything


class Deleted:
    """The value of a version that deletes its key (pickled by reference: identity holds)."""


class VersionRecorder:
    """The versions of ``state`` that a fold pass applies, for the passes holding copies."""

    def __init__(self, state: str, store: dict, default: Any):
        self.state = state
        self.store = store
        self.default = default
        self.versions: list[tuple[bytes, Any, Any]] = []
        # Each present key's position where it last came into the state: the serial
        # engine's insertion order, which the driver restores over the folds' tasks.
        self.inserted: dict = {}

    def applied(self, state: str, key: Any, pos: tuple) -> None:
        """After a write to ``state`` at ``pos``: the key's value now, if it is this state."""
        if state == self.state:
            value = dict.get(self.store, key, Deleted)
            at = position_bytes(pos)
            self.versions.append((at, key, value))
            if value is Deleted:
                self.inserted.pop(key, None)
            elif key not in self.inserted:
                self.inserted[key] = at

    def order(self) -> dict:
        """``{state: {key: position it came in at}}``, for the driver (:func:`in_serial_order`)."""
        return {self.state: dict(self.inserted)}

    def waiting(self, heap: list) -> None:
        """The versions of timed writes still waiting after the log (the driver applies those
        due by the last event; a scheduled event after them reads them in a copy)."""
        after: dict = {}
        for pos, _n, what, payload in sorted(heap, key=itemgetter(0, 1)):
            if what != 0 or payload[4] != self.state:
                continue
            _d, _default, key, op, _state, _incoming = payload
            value = after.get(key, dict.get(self.store, key, Deleted))
            scratch = {} if value is Deleted else {key: value}
            apply_op(scratch, self.default, key, op, True)
            after[key] = scratch.get(key, Deleted)
            self.versions.append((position_bytes(pos), key, after[key]))

    def rows(self, targets: tuple, spread: dict, ranges: dict) -> list[tuple]:
        """Packed rows of the versions for each target pass: every chunk to every partition,
        or, for a pass split into ranges of the log (``ranges``: its boundaries), to each
        partition the state at its range's start and the versions within it."""
        rows = []
        for target in targets:
            if target in ranges:
                parts = self._ranged(ranges[target])
            else:
                parts = [self.versions] * len(spread[target])
            for pk, versions in zip(spread[target], parts):
                for start in range(0, len(versions), CHUNK):
                    blob = dumps((self.state, versions[start : start + CHUNK]))
                    rows.append((VERS, target, pk, _FIRST_POS, blob))
        return rows

    def _ranged(self, bounds: tuple[bytes, ...]) -> list[list]:
        """Per range of the log (``bounds``: the positions where ranges 1, 2, ... start):
        the value of each present key as of the range's start, as a version at the position
        where the key last came into the state (so that a copy's keys keep the serial
        engine's insertion order), then the versions within the range. The versions are in
        position order (the fold applies writes in that order)."""
        present: dict = {}  # key -> [position it came in at, value]
        parts: list[list] = [[]]
        for version in self.versions:
            pos, key, value = version
            while len(parts) <= len(bounds) and pos >= bounds[len(parts) - 1]:
                parts.append([(at, k, v) for k, (at, v) in present.items()])
            parts[-1].append(version)
            if value is Deleted:
                present.pop(key, None)
            elif key in present:
                present[key][1] = value
            else:
                present[key] = [pos, value]
        while len(parts) <= len(bounds):
            parts.append([(at, k, v) for k, (at, v) in present.items()])
        return parts


def in_serial_order(stores: dict, orders: dict) -> None:
    """Put each state of ``orders`` (``{state: {key: position}}``, from the folds' tasks) in
    the serial engine's insertion order, in place: the tasks' values came merged task by
    task, and a whole read after a resume from the checkpoint iterates them in this order."""
    for name, where in orders.items():
        values = stores.get(name)
        if values:
            stores[name] = dict(sorted(values.items(), key=lambda kv: where.get(kv[0], _LAST)))


_LAST = b"\xff" * 64  # (a key no fold saw come in: after the others)


class CopyFeed:
    """The copies a partition of a reading pass holds, kept at the position of each run."""

    def __init__(self, stores: dict):
        self.stores = stores
        self.chunks: dict[str, list] = {}
        self.feeds: list[list] | None = None  # per state: [versions in order, next one]

    def add(self, packed: bytes) -> None:
        state, versions = pickle.loads(packed)
        self.chunks.setdefault(state, []).extend(versions)

    def advance(self, upto: bytes) -> None:
        """Apply every version before ``upto`` (a run's bytes) to the copies."""
        feeds = self.feeds
        if feeds is None:
            # Each fold task's versions are in order; sorting by position merges them.
            feeds = self.feeds = []
            for state, versions in self.chunks.items():
                versions.sort(key=itemgetter(0))
                feeds.append([versions, 0, self.stores[state]])
            self.chunks = {}
        for feed in feeds:
            versions, i, store = feed
            n = len(versions)
            while i < n and versions[i][0] < upto:
                _pos, key, value = versions[i]
                if value is Deleted:
                    dict.pop(store, key, None)
                else:
                    dict.__setitem__(store, key, value)
                i += 1
            feed[1] = i
