"""Progress of a replay, published to observers: plain data, no UI.

An observer is any callable taking one of the events below. Engines call observers from the
thread that runs the replay; views that need another thread hand the events over themselves.
"""

from __future__ import annotations

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
    "ProgressEvent",
    "broadcast",
    "Recorder",
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


@dataclass(frozen=True)
class EpochFinished:
    """An epoch is done; ``outputs`` holds its rows (Arrow tables by name) for streaming views."""

    epoch: int
    events_done: int
    seconds: float
    outputs: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class Progress:
    events_done: int
    events_total: int
    elapsed_s: float


@dataclass(frozen=True)
class ReplayFinished:
    events_done: int
    elapsed_s: float
    ok: bool = True
    error: str | None = None


ProgressEvent = (
    ReplayStarted
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


class Recorder:
    """An observer that keeps every event, for tests and post-mortems."""

    def __init__(self) -> None:
        self.events: list[ProgressEvent] = []

    def __call__(self, event: ProgressEvent) -> None:
        self.events.append(event)

    def of(self, kind: type) -> list:
        return [e for e in self.events if isinstance(e, kind)]
