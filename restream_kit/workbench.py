"""The workbench behind the notebook: named programs, baselines, runs and their diffs.

Plain functions and data, no UI: the ``%%restream`` magic and the views in ``widgets/`` call
this. A cell's name makes its program reusable as a baseline. Without a named baseline the
baseline is the serial replay of the same program on the same log, so that the diff is the
serial-equivalence check. Baselines whose program and log are unchanged come from the run
catalog instead of being replayed again.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import replace
from typing import Any

from .api import replay
from .engines import capabilities_of, get_engine, is_oracle
from .io.catalog import Catalog
from .io.compare import Diff, KeyDiff, diff
from .io.log import Log
from .io.progress import (
    CancelToken,
    ProgressEvent,
    ReplayStarted,
    broadcast,
)
from .io.result import Result
from .iterate._background import BackgroundRun, ReplayCancelled
from .iterate._baselines import KEEP_IN_MEMORY, Baselines
from .iterate._beside import BesideBaseline, not_compared_line, sayer, serial_watch
from .iterate._beside import compare_limit as _compare_limit
from .iterate._sweep_cell import sweep_cell
from .iterate.cells import (
    CELL_BATCH,
    Baseline,
    CellOptions,
    CellRun,
    CellSweep,
    RunOptions,
    cancelled_line,
    named_reuse,
    no_reuse,
    reuse_line,
)
from .model.errors import RestreamError
from .model.program import Program

__all__ = [
    "Workbench",
    "CellRun",
    "Baseline",
    "BackgroundRun",
    "CellSweep",
    "ReplayCancelled",
    "cancelled_line",
    "log_epoch",
    "reuse_line",
]


def log_epoch(log: Log, engine: str = "serial") -> int | None:
    """An epoch size that cuts ``log`` into about ten epochs, so that progress moves on small
    logs too (the engines' default epoch is at least 100,000 events).

    None (the engine's own epochs) on a log of the engine's ``own_epochs_from`` events or
    more (:class:`~restream_kit.engines.Capabilities`; Spark's: its prefix path runs one task
    per epoch, and ten tasks a round cost about twice the few the engine cuts such a log into,
    each task having a share that does not shrink with its epoch, while those few tasks,
    finishing round after round, move the monitor anyway).
    """
    own = capabilities_of(get_engine(engine)).own_epochs_from
    if own is not None and len(log) >= own:
        return None
    return max(1_000, -(-len(log) // 10))


class Workbench:
    """Named programs and their runs, recorded in a catalog.

    ``compare_limit``: above this many events a run on a parallel engine is not compared with
    a serial replay unless asked (see :func:`restream_kit.iterate._beside.compare_limit`).
    """

    def __init__(self, catalog: Catalog | None = None, compare_limit: int | None = None):
        self.catalog = catalog or Catalog()
        self.programs: dict[str, Program] = {}
        self.runs: dict[str, CellRun] = {}
        self.sweeps: dict[str, CellSweep] = {}
        self.compare_limit = _compare_limit(compare_limit)
        self.baselines = Baselines(self.catalog, self.program)
        self._loaded: OrderedDict[str, Result] = OrderedDict()  # the last runs read by name
        self._logs: OrderedDict[str, Log] = OrderedDict()  # the last logs, by fingerprint

    def log(self, sources: Any, **options: Any) -> Log:
        """``Log(sources, **options)``, the same object as an earlier cell's while its files
        are unchanged (same fingerprint and options), so that a cell does not read the log's
        canonical table again."""
        log = Log(sources, **options)
        key = f"{log.fingerprint} {sorted(options.items())!r}"
        kept = self._logs.pop(key, None) or log
        self._logs[key] = kept
        while len(self._logs) > KEEP_IN_MEMORY // 2:
            self._logs.popitem(last=False)
        return kept

    def define(self, name: str, source: str) -> Program:
        """Load a cell's program under ``name`` (replacing an earlier definition)."""
        program = Program.from_source(source, name=name)
        self.programs[name] = program
        return program

    def program(self, name: str) -> Program:
        if name in self.programs:
            return self.programs[name]
        record = self.catalog.latest(name)
        if record is None:
            raise RestreamError(f"no program called {name!r}: run a %%restream {name} cell first")
        program = Program.from_source(self.catalog.program_source(record.run_id), name=name)
        self.programs[name] = program
        return program

    # -- baselines -----------------------------------------------------------------------

    def _session_run(self, name: str, log: Log) -> Baseline | None:
        """Cell ``name``'s finished run in this session, of its current program on ``log``, on
        any engine (each equals the serial replay), as a baseline; None when there is none."""
        run = self.runs.get(name)
        if run is None or not run.ok or run.log.fingerprint != log.fingerprint:
            return None
        if run.program.sha256 != self.program(name).sha256:
            return None
        return Baseline(f"{name} ({run.engine})", run.result, reused=True, record=run.record)

    def _baseline_for(
        self, cell: CellRun, opts: RunOptions, say
    ) -> tuple[Baseline | None, BesideBaseline | None]:
        """The cell's baseline now (a named one kept or in the catalog, or replayed first on
        the oracle, where nothing else would start), or one to get beside its replay, or
        neither: on the oracle the run is its own baseline; above the compare limit (or with
        ``compare=False``) a parallel run is not compared."""
        program, log = cell.program, cell.log
        baseline, on_error, cancel = opts.baseline, opts.on_error, opts.cancel
        limit = self.compare_limit if opts.compare_limit is None else opts.compare_limit

        # The baseline's own token: stopped with the cell's, or when the cell's replay fails.
        own = CancelToken()
        if cancel is not None:
            cancel.on_cancel(own.cancel)

        def beside() -> Baseline:
            watch = serial_watch(say)
            return self.baselines.get(program, log, baseline, on_error, own, observer=watch)

        if baseline is not None:
            label = f"{baseline} (serial)"
            ready = self.baselines.ready(self.program(baseline), log, label)
            if ready is None:
                ready = self._session_run(baseline, log)
            if ready is None and is_oracle(cell.engine):
                ready = self.baselines.get(program, log, baseline, on_error, cancel)
            if ready is not None:
                return ready, None
            return None, BesideBaseline(beside, cell.name, own.cancel)
        if is_oracle(cell.engine):
            return None, None
        if opts.compare is False or (
            not opts.compare and len(log) > limit and not self.baselines.has_serial(program, log)
        ):
            cell.not_compared = not_compared_line(cell.name, len(log), limit)
            return None, None
        return None, BesideBaseline(beside, cell.name, own.cancel)

    # -- runs ----------------------------------------------------------------------------

    def run(self, name: str, source: str | Program, log: Log | Any, **options: Any) -> CellRun:
        """Define ``name``, replay it on ``engine``, compare with the baseline, record the run.

        ``options`` are the keywords of :class:`~restream_kit.iterate.cells.RunOptions`
        (``engine``, ``baseline``, ``master``, ``epoch``, ``by``, ``observer``, ``cancel``,
        ``before_replay``, ``progress``, ``on_error``, ``reuse``, ``checkpoint``,
        ``checkpoint_every``, ``compare``, ``compare_limit``); another keyword is a TypeError.
        Errors are kept in the returned ``CellRun`` (``error``) rather than raised, so that a
        view can show them; ``CellRun.ok`` says whether it worked. ``before_replay(cell_run)``
        is called once the baseline is ready (before the replay when it is at hand, else when
        it is). ``by`` compares with the baseline by those fields (a ``KeyDiff``) rather than
        row by row.

        The replay starts first: on the oracle (serial) the run is its own baseline; on a
        parallel engine the serial replay that checks it runs beside it (started once the
        replay has started) or comes from this session or the catalog, and above
        ``compare_limit`` events it is skipped unless ``compare=True`` (``CellRun.not_compared``
        says so; ``compare_limit`` sets it for this run). ``CellRun.phases`` lists the phases the
        cell went through (see :class:`~restream_kit.io.progress.Phase`), which observers are
        told as they begin.

        With a named ``baseline`` over the same log whose run is at hand, the replay re-runs
        only the stages that changed since the baseline's serial run and reads the rest from
        that run's history (``replay(reuse=...)``); ``CellRun.reuse`` says which stages were
        reused and the time saved, or why nothing was (the replay is then a full one).
        ``reuse=False`` always replays in full. A run with a named baseline keeps its own
        history (serial or Spark), so that it can serve as the next cell's baseline.
        ``checkpoint`` and ``checkpoint_every`` go to the replay (``replay(checkpoint=..., resume=True)`` continues a checkpoint it left).
        """
        started = time.monotonic()
        opts = RunOptions.of(options, "Workbench.run")
        engine, baseline, cancel = opts.engine, opts.baseline, opts.cancel
        program = source if isinstance(source, Program) else self.define(name, source)
        self.programs[name] = program
        log = log if isinstance(log, Log) else Log(log)
        params = {"master": opts.master, "epoch": opts.epoch, "baseline": baseline, "by": opts.by}
        params = {k: v for k, v in params.items() if v}
        if opts.on_error != "stop":
            params["on_error"] = opts.on_error
        cell = CellRun(name, program, log, engine, params=params)
        if opts.progress is not None:
            cell.progress = opts.progress
        self.runs[name] = cell
        notify = broadcast([cell.progress] + ([opts.observer] if opts.observer is not None else []))
        say = sayer(cell, notify, started)
        beside = None
        try:
            if cancel is not None:
                cancel.check()
            cell.baseline, beside = self._baseline_for(cell, opts, say)
            if cell.baseline is not None and opts.before_replay is not None:
                opts.before_replay(cell)
            replay_options = self._options(cell, opts, notify, say, beside)
            say("starting", f"starting {engine}")
            cell.result = replay(program, log, engine=engine, epoch=opts.epoch, **replay_options)
            if "reuse" in replay_options:
                cell.reuse = named_reuse(cell.result.reuse, baseline)
            self._compare(cell, beside, opts, say)
        except BaseException as exc:  # noqa: BLE001 - kept for the view, re-raised by callers who want it
            cell.error = exc
            if beside is not None:
                beside.stop()  # nothing left to compare: no work after the cell
        say("recording", "recording the run")
        cell.record = self.catalog.record(
            name=name,
            program=program,
            log=log,
            engine=engine,
            # A cancelled cell may have its replay's result (cancelled while comparing):
            # kept in the notebook, recorded as failed.
            result=None if cell.cancelled else cell.result,
            master=opts.master,
            params=params,
            error=None if cell.error is None else str(cell.error),
        )
        if cell.baseline is not None and cell.baseline.result is cell.result:
            cell.baseline.record = cell.record
            if cell.ok and opts.on_error == "stop":
                self.baselines.remember(program, log, replace(cell.baseline, reused=True))
        cell.wall_s = time.monotonic() - started
        return cell

    def _options(self, cell: CellRun, opts: RunOptions, notify, say, beside) -> dict:
        """The replay's options: its observer (which says the replay has started and starts
        the baseline beside it), reuse of a named baseline, history, a checkpoint."""
        engine, baseline, on_error, cancel = cell.engine, opts.baseline, opts.on_error, opts.cancel

        def replaying(event: ProgressEvent) -> None:
            if isinstance(event, ReplayStarted):
                if cancel is not None:
                    cancel.check()  # cancelled while the engine started: stop before any job
                say("replaying", f"replaying on {engine}")
                notify(event)  # the replay's first progress, before the baseline says a word
                if beside is not None:
                    beside.start()
                return
            notify(event)

        options: dict[str, Any] = {"observer": replaying, "cancel": cancel}
        if is_oracle(engine):
            options["batch_size"] = CELL_BATCH
        if on_error != "stop":
            options["on_error"] = on_error
        if opts.master:
            options["master"] = opts.master
        if opts.checkpoint:
            options["checkpoint"] = opts.checkpoint
            options["checkpoint_every"] = opts.checkpoint_every
        if baseline is not None and opts.reuse:
            if cell.baseline is None:
                cell.reuse = no_reuse(baseline, "its serial run on this log runs beside this one")
            else:
                source, why = self.baselines.reusable(cell.baseline, cell.log)
                if source is None:
                    cell.reuse = no_reuse(baseline, why)
                else:
                    options["reuse"] = source
        own = baseline is None and is_oracle(engine)  # the run is a later cell's baseline
        records = capabilities_of(get_engine(engine)).history
        if (baseline is not None or own) and records and on_error == "stop":
            options["history"] = True
        return options

    def _compare(self, cell: CellRun, beside, opts: RunOptions, say) -> None:
        """The baseline (the run itself on the oracle, or the one got beside it) and the diff."""
        before_replay, cancel, by = opts.before_replay, opts.cancel, opts.by
        if cell.baseline is None and beside is None and cell.not_compared is None:
            cell.baseline = Baseline(
                f"serial replay of {cell.name}", cell.result, reused=False, same_program=True
            )
        elif beside is not None:
            say(
                "waiting",
                f"replayed on {cell.engine} in {cell.result.metrics.wall_s:.2f} s; "
                "waiting for the serial baseline",
            )
            cell.baseline = beside.wait()
            if before_replay is not None:
                before_replay(cell)
        if cell.baseline is None:
            return
        if cancel is not None:
            cancel.check()
        say("comparing", f"comparing with {cell.baseline.label}")
        if by:
            cell.diff = diff(
                cell.result, cell.baseline.result, by=by, labels=(cell.name, cell.baseline.label)
            )
        else:
            cell.diff = diff(cell.result, cell.baseline.result)

    def compare(
        self, name: str, cancel: CancelToken | None = None, observer: Any = None
    ) -> CellRun:
        """Compare the latest run of cell ``name`` in this session with the serial replay of
        its program (``%restream compare NAME``): for a run left uncompared (its log above the
        compare limit). Replays serially unless that replay is at hand."""
        cell = self.runs.get(name)
        if cell is None or cell.result is None:
            raise RestreamError(f"no finished run called {name!r} in this session")
        base = self.baselines.get(cell.program, cell.log, None, cancel=cancel, observer=observer)
        cell.baseline, cell.not_compared = base, None
        cell.diff = diff(cell.result, base.result)
        return cell

    def sweep(
        self,
        name: str,
        source: str | Program,
        log: Log | Any,
        *,
        values: dict[str, list[Any]],
        **options: Any,
    ) -> CellSweep:
        """Define ``name`` and sweep its parameters over ``values`` (a grid, see
        :func:`restream_kit.sweep`) on ``engine=``, in one scan where it can; ``options`` are
        the keywords of :class:`~restream_kit.iterate.cells.CellOptions`. See
        :func:`restream_kit.iterate._sweep_cell.sweep_cell` for the baseline."""
        opts = CellOptions.of(options, "Workbench.sweep")
        return sweep_cell(self, name, source, log, values, opts)

    def diff(self, a: str, b: str, by: str | list[str] | None = None) -> Diff | KeyDiff:
        """The diff of the latest runs of cells ``a`` and ``b`` (by the fields ``by``)."""
        if by:
            return diff(self._latest_result(a), self._latest_result(b), by=by, labels=(a, b))
        return diff(self._latest_result(a), self._latest_result(b))

    def _latest_result(self, name: str) -> Result:
        if name in self.runs and self.runs[name].result is not None:
            return self.runs[name].result
        record = self.catalog.latest(name)
        if record is None:
            raise RestreamError(f"no finished run called {name!r}")
        # ``%restream diff`` reads each side twice (the diff, then its view's field picker).
        if record.run_id not in self._loaded:
            self._loaded[record.run_id] = self.catalog.load(record)
            while len(self._loaded) > 2:
                self._loaded.popitem(last=False)
        return self._loaded[record.run_id]
