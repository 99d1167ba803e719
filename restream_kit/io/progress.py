"""Progress of a replay, published to observers: plain data, no UI.

An observer is any callable taking one of the events below. Engines call observers from the
thread that runs the replay; views that need another thread hand the events over themselves.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Observer",
    "ReplayStarted",
    "EpochStarted",
    "StageStarted",
    "StageFinished",
    "EpochFinished",
    "Progress",
    "ReplayFinished",
    "Phase",
    "ProgressEvent",
    "broadcast",
    "one_epoch_started",
    "one_epoch_finished",
    "Recorder",
    "CancelToken",
    "Cancelled",
    "ProgressState",
    "TextProgress",
]


@dataclass(frozen=True)
class ReplayStarted:
    engine: str
    events_total: int
    epochs_total: int
    stages: tuple[str, ...]
    span_ms: int


@dataclass(frozen=True)
class EpochStarted:
    epoch: int
    events: int


@dataclass(frozen=True)
class StageStarted:
    epoch: int
    stage: str


@dataclass(frozen=True)
class StageFinished:
    epoch: int
    stage: str
    seconds: float
    tasks: int = 1
    #: How many epochs this finish covers (a path that runs a stage over every epoch at once).
    epochs: int = 1


@dataclass(frozen=True)
class EpochFinished:
    """An epoch is done; ``outputs`` holds its rows (Arrow tables by name) for streaming views."""

    epoch: int
    events_done: int
    seconds: float
    outputs: dict[str, Any] = field(default_factory=dict, repr=False)
    #: Output rows with ``ts`` below this are final; None once the whole log is done.
    settled_ts: int | None = None


@dataclass(frozen=True)
class Progress:
    """How far a replay is: events done of the log's total, seconds since it started."""

    events_done: int
    events_total: int
    elapsed_s: float


@dataclass(frozen=True)
class ReplayFinished:
    """A replay ended, ``ok`` or with the ``error`` that stopped it."""

    events_done: int
    elapsed_s: float
    ok: bool = True
    error: str | None = None


@dataclass(frozen=True)
class Phase:
    """What a notebook cell is doing around its replay, said by the workbench (not by engines):
    ``name`` is one of ``starting``, ``replaying``, ``baseline``, ``comparing``, ``recording``,
    ``done``; ``words`` is what a monitor shows."""

    name: str
    words: str


ProgressEvent = (
    Phase
    | ReplayStarted
    | EpochStarted
    | StageStarted
    | StageFinished
    | EpochFinished
    | Progress
    | ReplayFinished
)
Observer = Callable[[ProgressEvent], None]


def broadcast(observers: Iterable[Observer] | Observer | None) -> Observer:
    """One observer that forwards to all of ``observers`` (None means nobody listens)."""
    if observers is None:
        return lambda _event: None
    if callable(observers):
        return observers
    targets = list(observers)

    def send(event: ProgressEvent) -> None:
        for target in targets:
            target(event)

    return send


def one_epoch_started(
    notify: Observer, engine: str, total: int, stages: tuple[str, ...], span_ms: int
) -> None:
    """Tell ``notify`` that a replay of ``total`` events, run as one epoch, has started."""
    notify(ReplayStarted(engine, total, 1, stages, span_ms))
    notify(EpochStarted(0, total))


def one_epoch_finished(notify: Observer, total: int, wall: float, outputs: dict[str, Any]) -> None:
    """Tell ``notify`` that a replay run as one epoch ended after ``wall`` seconds, with its
    rows ``outputs``: the last progress, the epoch, the replay (the serial engine's order)."""
    notify(Progress(total, total, wall))
    notify(EpochFinished(0, total, wall, outputs))
    notify(ReplayFinished(total, wall))


class Recorder:
    """An observer that keeps every event, for tests and post-mortems."""

    def __init__(self) -> None:
        self.events: list[ProgressEvent] = []

    def __call__(self, event: ProgressEvent) -> None:
        self.events.append(event)

    def of(self, kind: type) -> list:
        return [e for e in self.events if isinstance(e, kind)]


class Cancelled(Exception):
    """The replay was cancelled through its CancelToken."""


class CancelToken:
    """Shared between a view and an engine: the view cancels, the engine checks between batches.

    Engines that run jobs elsewhere (Spark) register a callback that stops those jobs at once.
    """

    def __init__(self) -> None:
        self.cancelled = False
        self._callbacks: list[Callable[[], None]] = []

    def cancel(self) -> None:
        self.cancelled = True
        for callback in list(self._callbacks):
            callback()

    def on_cancel(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` on cancel; at once when already cancelled (a replay that was
        cancelled while it started, before it could register)."""
        self._callbacks.append(callback)
        if self.cancelled:
            callback()

    def check(self) -> None:
        if self.cancelled:
            raise Cancelled("replay cancelled")


class ProgressState:
    """Folds progress events into the numbers every view shows: done, rate, multiple, ETA.

    An observer itself; views read its fields (or ``line()``) whenever they redraw.
    """

    def __init__(self) -> None:
        self.engine = ""
        self.events_total = 0
        self.events_done = 0
        self.epochs_total = 1
        self.epochs_done = 0
        self.span_ms = 0
        self.elapsed_s = 0.0
        self.stages: dict[str, str] = {}  # stage -> "running" | "done"
        self.finished: ReplayFinished | None = None
        #: The cell's phase (:class:`Phase`), when a workbench says it.
        self.phase = ""
        self._started = time.monotonic()

    def __call__(self, event: ProgressEvent) -> None:
        if isinstance(event, Phase):
            self.phase = event.name
            return
        if isinstance(event, ReplayStarted):
            self.engine = event.engine
            self.events_total = event.events_total
            self.epochs_total = event.epochs_total
            self.span_ms = event.span_ms
            self._started = time.monotonic()
        elif isinstance(event, Progress):
            self.events_done = event.events_done
        elif isinstance(event, EpochStarted):
            self.stages = {}
        elif isinstance(event, StageStarted):
            self.stages[event.stage] = "running"
        elif isinstance(event, StageFinished):
            self.stages[event.stage] = "done"
        elif isinstance(event, EpochFinished):
            self.epochs_done = event.epoch + 1
            self.events_done = max(self.events_done, event.events_done)
        elif isinstance(event, ReplayFinished):
            self.finished = event
            if event.ok:
                self.events_done = self.events_total
            # The engine's own time, the one its metrics (and the run catalog) record.
            self.elapsed_s = event.elapsed_s
            return
        self.elapsed_s = time.monotonic() - self._started

    @property
    def fraction(self) -> float:
        return (
            self.events_done / self.events_total
            if self.events_total
            else (1.0 if self.finished else 0.0)
        )

    @property
    def events_per_s(self) -> float:
        return self.events_done / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def realtime_multiple(self) -> float:
        """Log time covered per second of replay, so far."""
        covered_s = self.span_ms / 1000.0 * self.fraction
        return covered_s / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def eta_s(self) -> float | None:
        rate = self.events_per_s
        if self.finished or rate <= 0:
            return None
        return (self.events_total - self.events_done) / rate

    def short(self) -> str:
        """A compact line for narrow terminals: epoch, rate, multiple of real time, ETA."""
        eta = self.eta_s
        text = (
            f"epoch {min(self.epochs_done + 1, self.epochs_total)}/{self.epochs_total} "
            f"{self.events_per_s:,.0f} ev/s {self.realtime_multiple:,.0f}x"
        )
        return text + (f" ETA {eta:.0f}s" if eta is not None else "")

    def line(self) -> str:
        """One line: epoch, events, percent, rate, multiple of real time, elapsed, ETA."""
        eta = self.eta_s
        parts = [
            f"epoch {min(self.epochs_done + (0 if self.finished else 1), self.epochs_total)}/{self.epochs_total}",
            f"{self.events_done:,}/{self.events_total:,} events ({self.fraction:.0%})",
            f"{self.events_per_s:,.0f} events/s",
            f"{self.realtime_multiple:,.0f}x real time",
            f"elapsed {self.elapsed_s:.1f} s",
        ]
        if eta is not None:
            parts.append(f"ETA {eta:.1f} s")
        if self.finished is not None:
            parts.append("done" if self.finished.ok else f"failed: {self.finished.error}")
        return " · ".join(parts)


class TextProgress:
    """Prints ``ProgressState.line()`` at most once a second, at every epoch and at the end."""

    def __init__(self, stream: Any = None, every_s: float = 1.0):
        import sys

        self.state = ProgressState()
        self.stream = stream or sys.stdout
        self.every_s = every_s
        self._last = 0.0

    def __call__(self, event: ProgressEvent) -> None:
        if isinstance(event, Phase):  # a cell's phase: its own line, as it changes
            print(event.words, file=self.stream, flush=True)
            return
        self.state(event)
        now = time.monotonic()
        if isinstance(event, (EpochFinished, ReplayFinished)) or now - self._last >= self.every_s:
            print(self.state.line(), file=self.stream, flush=True)
            self._last = now
