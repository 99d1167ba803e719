"""Waves: a checkpointed replay run over successive slices of its log, committed as it goes.

Both Spark paths run their work over the whole log before anything is committed: every round
of the prefix path, every pass of the pass path, covers every event. Their commits therefore
come when the replay is nearly over, and a replay killed before then saved nothing. So a
checkpointed replay runs in *waves*: the checkpoint's epochs (``io.epochs.cut``) are taken a
slice at a time, the rounds or passes run over the events of that slice only, and the
slice's epochs are committed when its last round or pass has finished. The next wave is a
resume of that commit, read back from the checkpoint as ``--resume`` reads it: the state at
the end of one wave is the start of the next, through the same code a resume after a kill
takes.

A wave cannot change a result: its end is an epoch's end, where the path already reports
the serial engine's checkpoint state (the prefix path folds the epochs' deltas; the pass
path's tasks report at each epoch's end, the wave's last included, before anything after
it). The rows of a wave's run past its end (the scheduled events a task runs once its input
is over) are never committed: the next wave runs them where the serial engine would.

How big a wave is comes from ``checkpoint_every`` (:func:`parse_every`): a number of events,
or a time (``"60s"``, the default) turned into events at the rate the last wave ran at
(at first :data:`FIRST_RATE`, a rate below what either path reaches on one core). A wave is at
least one epoch, so a kill loses at most one interval and one epoch of work, counted from
when the checkpoint is opened: after the path's Python workers are started (``_workers``),
whose start is no replay work and took most of a fresh process's first wave.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...io._committed_tables import committed_tables
from ...io._every import describe_every, parse_every
from ...io.epochs import Epoch, cut
from ...io.progress import ReplayFinished, ReplayStarted
from ._workers import start_workers
from .passes._output_files import result_rows
from .prefix._commits import remaining

if TYPE_CHECKING:  # pragma: no cover
    from ...io.result import Result
    from ._engine import _Replay

__all__ = ["FIRST_RATE", "WORKERS_STARTED", "Waves", "in_waves"]

#: Events a second assumed for the first wave of a timed interval, before any is measured:
#: well below either Spark path's rate, because the first wave of a process also pays once
#: for what later ones reuse (the log's file for the tasks, the driver's arrangement; its
#: Python workers' start before ``_workers`` moved it ahead of the wave): measured at 1M
#: events on a loaded machine, a first wave of 300,000 events took over 12 s of a 5 s interval.
FIRST_RATE = 20_000
#: ``metrics.stages``: the seconds the path's Python workers took to start, before the first
#: wave (``_workers``).
WORKERS_STARTED = "Python workers started, before the first wave (driver)"
#: The rate the last wave of a replay ran at, by program, log and master: a later replay of
#: the same in this process (a cell run again) sizes its first wave by it.
_RATES: dict[tuple, float] = {}


class Waves:
    """The waves of one replay: which epochs each runs, sized as it goes.

    ``epochs`` are the checkpoint's epochs still to run (after a resume's start, if any).
    :meth:`next` gives the index of the last epoch of the next wave (None when the wave runs
    to the log's end), :meth:`ran` takes how long a wave took."""

    def __init__(self, every: tuple[str, float], epochs: list[Epoch], first_rate: float):
        self.every = every
        self.first_rate = first_rate  # events/s assumed until a wave is measured
        self.todo = [ep for ep in epochs if len(ep)]
        self.events = 0  # run by the last wave, and in how long
        self.seconds = 0.0
        self.count = 0  # waves begun
        self._began = 0.0
        self._size = 0

    def next(self) -> int | None:
        """The last epoch of the next wave (None: the rest of the log), and start its clock."""
        self.count += 1
        self._began = time.perf_counter()
        target = self._target()
        size = 0
        for i, ep in enumerate(self.todo):
            size += len(ep)
            if size >= target:
                wave, self.todo = self.todo[: i + 1], self.todo[i + 1 :]
                self._size = size
                return None if not self.todo else wave[-1].index
        self._size, self.todo = size, []
        return None

    def ran(self) -> None:
        """The wave begun last has committed its epochs: its rate sizes the next (the last
        wave's, not all of theirs: the first pays once for what later ones reuse, such as the
        driver's arrangement of the log)."""
        self.events = self._size
        self.seconds = time.perf_counter() - self._began

    def _target(self) -> float:
        kind, size = self.every
        if kind == "events":
            return size
        return max(1.0, self.rate * size)

    @property
    def rate(self) -> float:
        """Events a second: the last wave's, or the first rate until one has run."""
        return self.events / self.seconds if self.seconds > 0 and self.events else self.first_rate


class WaveNotices:
    """The observers' view of a replay run in waves: one ``ReplayStarted`` (counting every
    epoch still to run) and one ``ReplayFinished``, as a replay in one piece sends them."""

    def __init__(self, notify: Any, epochs_total: int):
        self.notify = notify
        self.epochs_total = epochs_total
        self.started = False
        self.final = False  # set before the last wave runs

    def __call__(self, event: Any) -> None:
        if isinstance(event, ReplayStarted):
            if self.started:
                return
            self.started = True
            event = dataclasses.replace(event, epochs_total=self.epochs_total)
        elif isinstance(event, ReplayFinished) and event.ok and not self.final:
            return
        self.notify(event)


def in_waves(rep: _Replay, run: Callable[[], Result], path: str) -> Result:
    """``run()`` (one path's replay, ``path`` "prefix" or "passes"; ``rep`` the engine's
    ``_Replay``) in waves when the replay commits a checkpoint, else once. Each wave after the
    first resumes what the one before committed; the result is the last wave's, told as the
    whole replay's.

    The path's Python workers are started before the checkpoint is opened (``_workers``): the
    first wave's clock, and a kill's loss, start with the replay's work, not with their
    start, which a resume pays again whenever the kill came."""
    if not rep.tables_committed:
        return run()  # (a history is recorded over the whole log, without a checkpoint)
    workers = start_workers(rep.session, rep.cores, path)
    ck, first = rep.open_checkpoint()
    epochs = remaining(cut(rep.log, rep.options.epoch), first)
    every = parse_every(rep.options.checkpoint_every)
    measured = (rep.program.sha256, rep.log.fingerprint, rep.options.master)
    waves = Waves(every, epochs, _RATES.get(measured, FIRST_RATE))
    notify = rep.notify
    notices = WaveNotices(notify, len(epochs))
    rep.notify = notices
    notes: list[str] = []
    try:
        while True:
            rep.until = waves.next()
            notices.final = rep.until is None
            result = run()
            notes += [w for w in result.warnings if w not in notes]
            waves.ran()
            _RATES[measured] = waves.rate
            if rep.until is None:
                break
            rep._check_cancel()
            rep.resume_next_wave()
    except BaseException:
        # The commits still being written are whole epochs' work: on disk before the error
        # goes up (theirs, if one failed, is not the one to tell).
        with contextlib.suppress(Exception):
            ck.flush()
        raise
    finally:
        rep.notify, rep.until, rep.carried = notify, None, None
    result = _as_whole(result, first, waves, len(epochs), notes)
    if workers is not None:
        result.metrics.stages[WORKERS_STARTED] = workers
    return _with_committed_tables(result, ck, result_rows(rep.options))


def _with_committed_tables(result: Any, ck: Any, limit: int) -> Any:
    """``result`` with its tables read back from the checkpoint ``ck`` (complete now): every
    epoch's committed rows, those of a resume's earlier run included; a table of ``limit``
    rows or more as a file (``io._committed_tables``). The paths built none of them."""
    ck.flush()
    reading = time.perf_counter()
    tables = committed_tables(ck.directory, ck.manifest["epochs"], limit)
    result.metrics.stages["tables read back from the checkpoint (driver)"] = (
        time.perf_counter() - reading
    )
    rows = {name: tables.rows(name) for name in tables}
    # (a plain dict when every table is in memory, as an uncheckpointed replay's)
    held = any(tables.files(name) is not None for name in tables)
    result.tables = tables if held else {name: tables[name] for name in tables}
    result.metrics = dataclasses.replace(result.metrics, rows=rows)
    return result


def _as_whole(result: Any, first: Any, waves: Waves, epochs: int, notes: list[str]) -> Any:
    """The last wave's result as the whole replay's: resumed from where the first wave
    started (if it did), over the events the replay ran, with every wave's warnings."""
    if waves.count == 1:
        return result
    events = result.metrics.events
    if first is not None and not first.resumed:  # a ``start_from``: its events only
        events -= first.done  # (a resume's result counts the whole log's)
    result.metrics = dataclasses.replace(result.metrics, events=events, epochs=epochs)
    result.metrics.path["checkpoint"] = (
        f"committed as it went, in {waves.count} waves of about {describe_every(waves.every)} each"
    )
    result.resumed_from_epoch = first.next_epoch if first is not None and first.resumed else None
    result.warnings[:] = notes
    return result
