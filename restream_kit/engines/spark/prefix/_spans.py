"""How the prefix path cuts its events into tasks: epochs (its own, or a checkpoint's), the
pieces of them the tasks run (*chunks*), and which chunks each task runs.

Without a checkpoint each epoch is a chunk and a task (``default_epoch`` sizes them). A
checkpoint's epochs are what it commits, not what Spark need run: its tasks are as few as
``default_epoch`` would make, but at least one per core, of about equal events, so a task may
run several epochs (their deltas and rows kept apart, one chunk each) and an epoch may be cut
between two tasks (a chunk each): a wave of one epoch (``_waves``) still keeps every core busy.
The chunks of one epoch are committed together (``prefix._commits``). A chunk boundary changes
no result: the prefix path is exact for any cut of the log into chunks, as it is for any cut
into epochs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ....io.epochs import cut
from ._commits import remaining

__all__ = [
    "MAX_EPOCH_EVENTS",
    "MIN_EPOCH_EVENTS",
    "Spans",
    "default_epoch",
    "task_spans",
]

#: Without ``epoch=``, the prefix path cuts a log into as few epochs as keep every core busy
#: (a multiple of the cores) of at most ``MAX_EPOCH_EVENTS``, and no more than epochs of
#: ``MIN_EPOCH_EVENTS`` would make (a small log is one epoch): each epoch is one task per round,
#: whose fixed share (its base is the deltas of the epochs before it) made ten epochs of a
#: 1M-event log cost 2.5x two.
MIN_EPOCH_EVENTS = 100_000
MAX_EPOCH_EVENTS = 2_500_000


@dataclass
class Spans:
    """A run's chunks (``bounds``, ``(lo, hi)`` positions), the epoch each is part of
    (``owners``, epoch numbers), the tasks' spans of events (``spans``) and, when a task runs
    several chunks, per task ``(first chunk, the positions where its chunks start)``
    (``chunks``; None when each task runs one)."""

    bounds: list[tuple[int, int]]
    owners: list[int]
    spans: list[tuple[int, int]]
    chunks: list[tuple[int, list[int]]] | None

    @property
    def epochs(self) -> int:
        """How many epochs the chunks make up."""
        return len(set(self.owners))


def task_spans(log: Any, epoch: Any, start: Any, until: int | None, cores: int | None) -> Spans:
    """The run's :class:`Spans`: one chunk and task per epoch, or with ``cores`` (a
    checkpoint's epochs) tasks of about equal events, at least one per core, the epochs cut
    where a task ends."""
    epochs = [ep for ep in remaining(cut(log, epoch), start, until) if len(ep)]
    bounds = [(ep.start, ep.stop) for ep in epochs]
    owners = [ep.index for ep in epochs]
    groups = [(i, i + 1) for i in range(len(bounds))]
    if cores and bounds:
        todo = bounds[-1][1] - bounds[0][0]
        tasks = max(cores, -(-todo // default_epoch(todo, cores)))
        cuts = sorted({bounds[0][0] + todo * j // tasks for j in range(1, tasks)})
        bounds, owners = _cut_at(bounds, owners, cuts)
        groups = _groups_at(bounds, set(cuts))
    spans = [(bounds[a][0], bounds[b - 1][1]) for a, b in groups]
    chunks = None
    if len(groups) < len(bounds):
        chunks = [(a, [lo for lo, _hi in bounds[a:b]]) for a, b in groups]
    return Spans(bounds, owners, spans, chunks)


def _cut_at(bounds: list, owners: list, cuts: list[int]) -> tuple[list, list]:
    """The epochs ``bounds`` cut at the positions ``cuts`` (ascending): the pieces, and the
    epoch each is part of."""
    pieces, of = [], []
    for (lo, hi), owner in zip(bounds, owners):
        inside = [c for c in cuts if lo < c < hi]
        for a, b in zip([lo, *inside], [*inside, hi]):
            pieces.append((a, b))
            of.append(owner)
    return pieces, of


def _groups_at(bounds: list, cuts: set[int]) -> list[tuple[int, int]]:
    """Consecutive chunks gathered into tasks, a new task at each chunk starting at a cut."""
    groups, first = [], 0
    for i in range(1, len(bounds) + 1):
        if i == len(bounds) or bounds[i][0] in cuts:
            groups.append((first, i))
            first = i
    return groups


def default_epoch(rows: int, cores: int) -> int:
    """Events per epoch on the prefix path when the replay names no epoch size (see
    :data:`MAX_EPOCH_EVENTS`)."""
    cores = max(1, cores)
    waves = max(1, -(-rows // (cores * MAX_EPOCH_EVENTS)))
    epochs = max(1, min(-(-rows // MIN_EPOCH_EVENTS), cores * waves))
    return max(1, -(-rows // epochs))
