"""Replays without Python's cyclic garbage collector running in the middle of them.

A replay makes millions of small objects (events, keys, values, rows) and keeps many of them
alive until it ends, so the collector's generational passes keep walking a heap that only
grows: on a windowed rule over a million events that was a third of the serial engine's time
and more than half of a Spark task's. Handlers make no reference cycles in the ordinary
course (they write plain values into declared state), and reference counting frees
everything else as before; what a cycle holds waits for the collector after the replay.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

__all__ = ["collector_paused", "without_collector"]

F = TypeVar("F", bound=Callable[..., Any])


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic collector inside the block (as it was after it: nested uses keep it
    off until the outermost ends)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def without_collector(fn: F) -> F:
    """``fn`` with the cyclic collector paused while it runs."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with collector_paused():
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
