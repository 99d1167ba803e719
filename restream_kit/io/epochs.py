"""Cut a log into epochs: contiguous ranges of events, by count or by time.

Every engine cuts the same way, so that "epoch 3" means the same events everywhere. An epoch
boundary never changes a replay's result; it only sets how often progress, partial outputs
and (on Spark) state snapshots are produced.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..model.durations import days, hours, milliseconds, minutes, seconds
from ..model.errors import RestreamError
from .log import Log

__all__ = ["Epoch", "cut", "parse_epoch", "default_epoch_events"]

_UNITS = {"ms": milliseconds, "s": seconds, "m": minutes, "min": minutes, "h": hours, "d": days}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|min|m|h|d)\s*$")


@dataclass(frozen=True)
class Epoch:
    """Events ``start`` (inclusive) to ``stop`` (exclusive), by position in the log."""

    index: int
    start: int
    stop: int

    def __len__(self) -> int:
        return self.stop - self.start


def default_epoch_events(n: int) -> int:
    """About ten epochs for big logs, one for small ones."""
    return max(100_000, -(-n // 10))


def parse_epoch(spec: int | str | None) -> tuple[str, int] | None:
    """``("events", n)``, ``("time", ms)`` or None (the default) from ``100000``, ``"1h"``..."""
    if spec is None:
        return None
    if isinstance(spec, int) or (isinstance(spec, str) and spec.strip().isdigit()):
        n = int(spec)
        if n <= 0:
            raise RestreamError(f"epoch size must be positive, got {spec!r}")
        return ("events", n)
    match = _DURATION.match(str(spec))
    if not match:
        raise RestreamError(
            f"epoch {spec!r} is neither a number of events nor a duration like 30s, 15min, 1h, 1d"
        )
    ms = _UNITS[match.group(2)](float(match.group(1)))
    if ms <= 0:
        raise RestreamError(f"epoch duration must be positive, got {spec!r}")
    return ("time", ms)


def cut(log: Log, epoch: int | str | None = None) -> list[Epoch]:
    """The log's epochs. Time epochs are aligned to multiples of the duration since the epoch."""
    n = len(log)
    parsed = parse_epoch(epoch) or ("events", default_epoch_events(n))
    if n == 0:
        return [Epoch(0, 0, 0)]
    if parsed[0] == "events":
        size = parsed[1]
        bounds = list(range(0, n, size)) + [n]
    else:
        bounds = [0, *_time_starts(log, parsed[1]), n]
    return [Epoch(i, a, b) for i, (a, b) in enumerate(zip(bounds, bounds[1:]))]


def _time_starts(log: Log, width: int) -> list[int]:
    """Positions where a new ``width``-aligned time bucket starts, reading ``ts`` a row group
    at a time (the log is never held whole)."""
    starts: list[int] = []
    position, last = 0, None
    for table in log.tables(columns=["ts"]):
        buckets = table.column("ts").to_numpy() // width
        if last is not None and len(buckets) and buckets[0] != last:
            starts.append(position)
        starts.extend((np.flatnonzero(np.diff(buckets)) + 1 + position).tolist())
        position += len(buckets)
        if len(buckets):
            last = buckets[-1]
    return starts
