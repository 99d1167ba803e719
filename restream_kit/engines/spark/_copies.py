"""Copies of upstream state in every partition of a broadcast-read pass (see ``_passes``).

A stage that reads a state under a key that is not the event's (or whole, or on scheduled
events) cannot be told which partition holds what it reads. So the fold pass before it that
applies every write of the state records, for each write, the key's value after it at the
write's position: the state's *versions*, as in ReStream's multi-versioned state
(:class:`VersionRecorder`). They travel packed, a few rows per partition of the reading pass,
and each partition keeps a copy of the state that it brings up to the position of each run
before the run (:class:`CopyFeed`): a plain dict, so whole reads (``len``, ``for k in m``)
cost what they cost serially, and keys come in the serial engine's insertion order.
"""

from __future__ import annotations

import pickle
from operator import itemgetter
from typing import Any

from ._pass_rows import VERS, dumps, position_bytes
from ._pass_stores import apply_op

__all__ = ["Deleted", "VersionRecorder", "CopyFeed", "CHUNK"]

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

    def applied(self, state: str, key: Any, pos: tuple) -> None:
        """After a write to ``state`` at ``pos``: the key's value now, if it is this state."""
        if state == self.state:
            value = dict.get(self.store, key, Deleted)
            self.versions.append((position_bytes(pos), key, value))

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

    def rows(self, targets: tuple, spread: dict) -> list[tuple]:
        """Packed rows of the versions: every chunk to every partition of each target."""
        rows = []
        for start in range(0, len(self.versions), CHUNK):
            blob = dumps((self.state, self.versions[start : start + CHUNK]))
            for target in targets:
                rows.extend((VERS, target, pk, _FIRST_POS, blob) for pk in spread[target])
        return rows


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
