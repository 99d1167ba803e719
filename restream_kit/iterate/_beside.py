"""A cell's baseline got beside its own replay, never before it: the serial replay that checks
a parallel engine (or the catalog's copy of it) starts on a thread once the cell's replay has
started, and the cell waits for it only after its own replay has ended.

Plain threads, no UI. The serial baseline runs in this process: its loop holds the GIL while
the parallel engine's driver thread mostly waits on its workers, which run elsewhere.
"""

from __future__ import annotations

import contextvars
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from ..io.progress import Observer, Phase, Progress, ProgressEvent, ReplayStarted

__all__ = [
    "BesideBaseline",
    "COMPARE_LIMIT",
    "compare_limit",
    "not_compared_line",
    "sayer",
    "serial_watch",
]

#: Above this many events a cell on a parallel engine is not compared with a serial replay
#: unless asked (``--compare``); ``$RESTREAM_COMPARE_LIMIT`` or ``--compare-limit`` change it.
COMPARE_LIMIT = 5_000_000

#: How often the serial baseline's progress is said while it runs.
SAY_EVERY_S = 1.0


def compare_limit(given: int | None = None) -> int:
    """``given``, else ``$RESTREAM_COMPARE_LIMIT``, else :data:`COMPARE_LIMIT` events."""
    if given is not None:
        return given
    try:
        return int(os.environ.get("RESTREAM_COMPARE_LIMIT", COMPARE_LIMIT))
    except ValueError:
        return COMPARE_LIMIT


def not_compared_line(name: str, events: int, limit: int) -> str:
    """What a cell says when its parallel result was not compared with a serial replay."""
    return (
        f"not compared with serial: the log has {events:,} events, above the compare limit "
        f"of {limit:,}; %restream compare {name} compares it (or run the cell with --compare)"
    )


def serial_watch(say: Callable[[str, str], None]) -> Callable[[ProgressEvent], None]:
    """An observer of the serial baseline's replay that says its phase (``say(name, words)``):
    once when it starts, then its progress at most every :data:`SAY_EVERY_S`."""
    last = [0.0]

    def see(event: ProgressEvent) -> None:
        if isinstance(event, ReplayStarted):
            say("baseline", f"serial baseline: replaying {event.events_total:,} events to compare")
        elif isinstance(event, Progress) and time.monotonic() - last[0] >= SAY_EVERY_S:
            last[0] = time.monotonic()
            share = event.events_done / event.events_total if event.events_total else 1.0
            say(
                "baseline",
                f"serial baseline: {event.events_done:,} of {event.events_total:,} events "
                f"({share:.0%})",
            )

    return see


def sayer(cell: Any, notify: Observer, started: float):
    """``say(name, words)``: tell the observers the cell's phase; the first time a phase
    begins is kept in ``cell.phases`` (seconds from the cell's start)."""

    def say(name: str, words: str) -> None:
        if name not in (p for p, _t in cell.phases):
            cell.phases.append((name, round(time.monotonic() - started, 3)))
        notify(Phase(name, words))

    return say


class BesideBaseline:
    """``make()`` (which returns a ``Baseline``) on a thread, started by :meth:`start` (once the
    cell's replay has said it started) and waited for by :meth:`wait`; an error it raises
    (a cancel included) is raised by ``wait``. ``stop()`` tells ``make`` to stop (its cancel
    token's ``cancel``)."""

    def __init__(self, make: Callable[[], Any], name: str, stop: Callable[[], None]):
        self._make = make
        self.stop = stop
        self._name = name
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._baseline: Any = None
        self._error: BaseException | None = None

    @property
    def started(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        """Start the baseline's thread (once; later calls do nothing)."""
        with self._lock:
            if self._thread is not None:
                return
            # The thread keeps the cell's context, so that what it prints goes to that cell.
            context = contextvars.copy_context()
            self._thread = threading.Thread(
                target=context.run,
                args=(self._work,),
                name=f"restream-{self._name}-baseline",
                daemon=True,
            )
            self._thread.start()

    def _work(self) -> None:
        try:
            self._baseline = self._make()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            self._error = exc
        finally:
            self._done.set()

    def wait(self) -> Any:
        """The baseline (starting it if the replay never said it started); raises its error."""
        self.start()
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self._baseline
