"""The workbench behind the notebook: named programs, baselines, runs and their diffs.

Plain functions and data, no UI: the ``%%restream`` magic and the views in ``widgets/`` call
this. A cell's name makes its program reusable as a baseline. Without a named baseline the
baseline is the serial replay of the same program on the same log, so that the diff is the
serial-equivalence check. Baselines whose program and log are unchanged come from the run
catalog instead of being replayed again.
"""

from __future__ import annotations

import contextvars
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from .api import replay
from .io.catalog import Catalog, CatalogError, RunRecord
from .io.compare import Diff, KeyDiff, diff
from .io.log import Log
from .io.progress import CancelToken, Observer, ProgressState, broadcast
from .io.result import Result
from .iterate.cells import (
    CellOutcome,
    CellSweep,
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

#: After a cancel, how long to wait for the engine to stop before giving the kernel back.
CANCEL_WAIT_S = 30.0


class ReplayCancelled(KeyboardInterrupt):
    """A replay stopped by an interrupt or its Stop button; shown as its one line in a notebook.

    A ``KeyboardInterrupt``, so that Run All stops at the cell as it does for any interrupt.
    """

    def _render_traceback_(self) -> list[str]:  # IPython shows this instead of a traceback
        return [str(self)]


#: From this many events on, a cell leaves Spark's epochs to the engine (see :func:`log_epoch`).
SPARK_OWN_EPOCHS_FROM = 1_000_000


def log_epoch(log: Log, engine: str = "serial") -> int | None:
    """An epoch size that cuts ``log`` into about ten epochs, so that progress moves on small
    logs too (the engines' default epoch is at least 100,000 events).

    None (the engine's own epochs) for Spark on a log of :data:`SPARK_OWN_EPOCHS_FROM` events
    or more: its prefix path runs one task per epoch, and ten tasks a round cost about twice
    the few the engine cuts such a log into (each task has a share that does not shrink with
    its epoch), while those few tasks, finishing round after round, move the monitor anyway.
    """
    if engine == "spark" and len(log) >= SPARK_OWN_EPOCHS_FROM:
        return None
    return max(1_000, -(-len(log) // 10))


@dataclass
class Baseline:
    """What a run is compared with, and where it came from."""

    label: str
    result: Result
    reused: bool
    record: RunRecord | None = None


@dataclass
class CellRun(CellOutcome):
    """One run of a named program: its result, its baseline and the diff between them."""

    name: str
    program: Program
    log: Log
    engine: str
    result: Result | None = None
    baseline: Baseline | None = None
    diff: Diff | KeyDiff | None = None
    record: RunRecord | None = None
    error: BaseException | None = None
    params: dict[str, Any] = field(default_factory=dict)
    #: The replay's progress as the monitor saw it (epochs and events done, elapsed time).
    progress: ProgressState = field(default_factory=ProgressState, repr=False)
    #: With a named baseline: what the replay reused of it (``Result.reuse``, the baseline's
    #: name as ``reused_run``), or why it reused nothing (``reuse_reason``); None without one.
    reuse: dict[str, Any] | None = None

    def _made(self) -> Any:
        return self.result

    def reuse_line(self) -> str | None:
        """One line on what the replay reused of its baseline, or why it reused nothing."""
        return reuse_line(self.reuse)

    def __repr__(self) -> str:
        what = f"<restream run {self.name!r} on {self.engine}: {self.status}"
        if self.result is not None:
            m = self.result.metrics
            tables = ", ".join(f"{n} {rows:,} rows" for n, rows in m.rows.items())
            what += f", {m.events:,} events in {m.wall_s:.2f} s" + (f"; {tables}" if tables else "")
        elif self.error is not None and not self.cancelled:
            what += f": {str(self.error).splitlines()[0] if str(self.error) else type(self.error).__name__}"
        elif self.cancelled:
            what += f" ({self.cancelled_line()})"
        return what + ">"

    def wait(self, timeout: float | None = None) -> CellRun:
        """A finished run is its own result (the same call as on a ``BackgroundRun``)."""
        return self

    @property
    def unexpected_difference(self) -> bool:
        """True when the baseline is the serial replay of this program and the outputs differ."""
        return bool(
            self.baseline
            and self.baseline.label.startswith("serial")
            and self.diff
            and not self.diff.empty
        )


class Workbench:
    """Named programs and their runs, recorded in a catalog."""

    def __init__(self, catalog: Catalog | None = None):
        self.catalog = catalog or Catalog()
        self.programs: dict[str, Program] = {}
        self.runs: dict[str, CellRun] = {}
        self.sweeps: dict[str, CellSweep] = {}

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

    def baseline(
        self,
        program: Program,
        log: Log,
        baseline: str | None = None,
        on_error: str = "stop",
        cancel: CancelToken | None = None,
    ) -> Baseline:
        """The baseline result: the serial replay of ``program``, or of the cell named ``baseline``
        (with ``on_error``, so that a run that rolls poison events back has a baseline)."""
        base_program = program if baseline is None else self.program(baseline)
        label = f"serial replay of {program.name}" if baseline is None else f"{baseline} (serial)"
        record = self.catalog.find(program_sha=base_program.sha256, log_fingerprint=log.fingerprint)
        if record is not None:
            try:
                return Baseline(label, self.catalog.load(record), reused=True, record=record)
            except CatalogError:
                pass  # forgotten by another process meanwhile: replay it again
        # The baseline keeps its history, so that a later cell can re-replay only what it
        # changed (``--baseline``); recording costs about a third of a replay, once.
        keep = on_error == "stop"
        result = replay(
            base_program, log, engine="serial", on_error=on_error, cancel=cancel, history=keep
        )
        record = self.catalog.record(
            name=base_program.name, program=base_program, log=log, engine="serial", result=result
        )
        return Baseline(label, result, reused=False, record=record)

    def run(
        self,
        name: str,
        source: str | Program,
        log: Log | Any,
        *,
        baseline: str | None = None,
        engine: str = "serial",
        master: str | None = None,
        epoch: int | str | None = None,
        observer: Observer | None = None,
        cancel: CancelToken | None = None,
        before_replay: Any = None,
        on_error: str = "stop",
        progress: ProgressState | None = None,
        by: str | list[str] | None = None,
        reuse: bool = True,
        checkpoint: str | None = None,
        checkpoint_every: str | None = None,
    ) -> CellRun:
        """Define ``name``, replay it on ``engine``, compare with the baseline, record the run.

        Errors are kept in the returned ``CellRun`` (``error``) rather than raised, so that a
        view can show them; ``CellRun.ok`` says whether it worked. ``before_replay(cell_run)``
        is called once the baseline is ready, before the replay starts. ``by`` compares with
        the baseline by those fields (a ``KeyDiff``) rather than row by row.

        With a named ``baseline`` over the same log, the replay re-runs only the stages that
        changed since the baseline's serial run and reads the rest from that run's history
        (``replay(reuse=...)``); ``CellRun.reuse`` says which stages were reused and the time
        saved, or why nothing was (the replay is then a full one). ``reuse=False`` always
        replays in full. A run with a named baseline keeps its own history (serial or Spark),
        so that it can serve as the next cell's baseline. ``checkpoint`` and
        ``checkpoint_every`` go to the replay (``replay(checkpoint=..., resume=True)`` continues
        a checkpoint it left).
        """
        program = source if isinstance(source, Program) else self.define(name, source)
        self.programs[name] = program
        log = log if isinstance(log, Log) else Log(log)
        params = {"master": master, "epoch": epoch, "baseline": baseline, "by": by}
        params = {k: v for k, v in params.items() if v}
        if on_error != "stop":
            params["on_error"] = on_error
        cell = CellRun(name, program, log, engine, params=params)
        if progress is not None:
            cell.progress = progress
        self.runs[name] = cell
        observers = [cell.progress] + ([observer] if observer is not None else [])
        try:
            if cancel is not None:
                cancel.check()
            cell.baseline = self.baseline(program, log, baseline, on_error, cancel)
            if before_replay is not None:
                before_replay(cell)
            if cancel is not None:
                cancel.check()
            options: dict[str, Any] = {
                "observer": broadcast(observers),
                "cancel": cancel,
                "epoch": epoch,
            }
            if on_error != "stop":
                options["on_error"] = on_error
            if master:
                options["master"] = master
            if checkpoint:
                options["checkpoint"] = checkpoint
                options["checkpoint_every"] = checkpoint_every
            if baseline is not None and reuse:
                source, why = self.reusable(cell.baseline, log)
                if source is None:
                    cell.reuse = no_reuse(baseline, why)
                else:
                    options["reuse"] = source
            if baseline is not None and engine in ("serial", "spark") and on_error == "stop":
                options["history"] = True
            cell.result = replay(program, log, engine=engine, **options)
            if "reuse" in options:
                cell.reuse = named_reuse(cell.result.reuse, baseline)
            if by:
                cell.diff = diff(
                    cell.result, cell.baseline.result, by=by, labels=(name, cell.baseline.label)
                )
            else:
                cell.diff = diff(cell.result, cell.baseline.result)
        except BaseException as exc:  # noqa: BLE001 - kept for the view, re-raised by callers who want it
            cell.error = exc
        cell.record = self.catalog.record(
            name=name,
            program=program,
            log=log,
            engine=engine,
            result=cell.result,
            master=master,
            params=params,
            error=None if cell.error is None else str(cell.error),
        )
        return cell

    def reusable(self, base: Baseline, log: Log) -> tuple[Result | None, str | None]:
        """The baseline's serial run on ``log`` with its history (for ``replay(reuse=...)``),
        or None and why there is none: the baseline's own record first, then the latest other
        run of the same program on the same log that kept one, on any engine (a Spark run
        records the same history as a serial one)."""
        from .history.recorder import History

        if base.result.history is not None:
            return base.result, None
        if base.record is None:
            return None, "its run is not in the catalog"
        if base.record.log_fingerprint != log.fingerprint:
            return None, "it replayed another log"
        runs = self.catalog.query(
            "SELECT run_id, program_sha, log_fingerprint FROM runs "
            "WHERE status = 'ok' ORDER BY recorded_at DESC"
        )
        for run_id, sha, fingerprint in runs.iter_rows():
            if sha != base.record.program_sha or fingerprint != log.fingerprint:
                continue
            if run_id == base.record.run_id:
                result = base.result
            else:
                try:
                    result = self.catalog.load(run_id)
                except CatalogError:
                    continue  # forgotten meanwhile
            if result.path is not None:
                result.history = History.read(result.path)
            if result.history is not None:
                return result, None
        return None, (
            "none of its runs on this log kept a history (runs recorded before the notebook "
            "kept histories; run its cell again)"
        )

    def sweep(
        self,
        name: str,
        source: str | Program,
        log: Log | Any,
        *,
        values: dict[str, list[Any]],
        baseline: str | None = None,
        engine: str = "serial",
        master: str | None = None,
        epoch: int | str | None = None,
        observer: Observer | None = None,
        cancel: CancelToken | None = None,
        before_replay: Any = None,
        progress: ProgressState | None = None,
        by: str | list[str] | None = None,
    ) -> CellSweep:
        """Define ``name`` and sweep its parameters over ``values`` (a grid, see
        :func:`restream_kit.sweep`) on ``engine``, in one scan where it can.

        The baseline each variant is compared with (``CellSweep.diff``) is the serial run of
        the cell named ``baseline``, or, without one, the serial replay of this program with its
        parameters' defaults. Errors are kept in the returned ``CellSweep`` (``error``).
        ``before_replay(cell_sweep)`` is called once the baseline is ready.
        """
        from .iterate.sweeps import sweep

        program = source if isinstance(source, Program) else self.define(name, source)
        self.programs[name] = program
        log = log if isinstance(log, Log) else Log(log)
        cell = CellSweep(name, program, log, engine, dict(values), by=by)
        if progress is not None:
            cell.progress = progress
        self.sweeps[name] = cell
        observers = [cell.progress] + ([observer] if observer is not None else [])
        try:
            if cancel is not None:
                cancel.check()
            cell.baseline = self.baseline(program, log, baseline, cancel=cancel)
            if baseline is None:
                defaults = ", ".join(f"{k}={p.default!r}" for k, p in program.params.items())
                cell.baseline.label = f"serial replay of {name} with its defaults ({defaults})"
            if before_replay is not None:
                before_replay(cell)
            if cancel is not None:
                cancel.check()
            options: dict[str, Any] = {"observer": broadcast(observers), "cancel": cancel}
            if epoch is not None:
                options["epoch"] = epoch
            if master:
                options["master"] = master
            cell.sweep = sweep(program, log, engine=engine, options=options, **values)
        except BaseException as exc:  # noqa: BLE001 - kept for the view, re-raised by callers who want it
            cell.error = exc
        return cell

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
        return self.catalog.load(record)


class BackgroundRun:
    """A ``Workbench.run`` on a thread, so that the kernel can wait for it or go on.

    ``wait()`` returns the finished ``CellRun``; an interrupt while waiting (the kernel's stop
    button, Ctrl-C) cancels the replay, waits for the engine to stop and raises
    :class:`ReplayCancelled` with one line. ``cancel()`` asks the engine to stop.
    """

    def __init__(
        self,
        workbench: Workbench,
        name: str,
        source: str | Program,
        log: Log | Any,
        *,
        on_done: Any = None,
        **options: Any,
    ):
        self.name = name
        self.cancel_token = CancelToken()
        self.progress = ProgressState()
        self._cell: CellRun | CellSweep | None = None
        self._done = threading.Event()
        #: An exception raised by ``on_done`` (a view), re-raised by ``wait()``.
        self.callback_error: BaseException | None = None

        def work() -> None:
            try:
                # ``values=`` (a grid of parameter values) makes the run a sweep.
                target = workbench.sweep if "values" in options else workbench.run
                self._cell = target(
                    name, source, log, cancel=self.cancel_token, progress=self.progress, **options
                )
                if on_done is not None:
                    try:
                        on_done(self._cell)
                    except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
                        self.callback_error = exc
            finally:
                self._done.set()

        # The thread keeps the context of the cell that started it, so that what it prints goes
        # to that cell's output in a kernel.
        context = contextvars.copy_context()
        self._thread = threading.Thread(
            target=context.run, args=(work,), name=f"restream-{name}", daemon=True
        )
        self._thread.start()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def status(self) -> str:
        """``running`` until the run ends, then its ``CellRun.status``."""
        return self._cell.status if self.done and self._cell is not None else "running"

    def wait(self, timeout: float | None = None) -> CellRun | CellSweep:
        """Block until the run has finished; return it. An interrupt cancels the replay."""
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            # Short waits, so that the interrupt is seen at once.
            while not self._done.wait(0.1):
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"run {self.name!r} still going after {timeout} s")
        except KeyboardInterrupt:
            raise self.stop() from None
        return self._finished()

    def stop(self) -> ReplayCancelled:
        """Cancel the replay, wait up to ``CANCEL_WAIT_S`` for it to stop; the exception that
        says where it stopped (for the caller to raise)."""
        self.cancel()
        try:
            stopped = self._done.wait(CANCEL_WAIT_S)
        except KeyboardInterrupt:  # a second interrupt: give the kernel back now
            stopped = False
        line = cancelled_line(self.progress)
        if not stopped:
            line += f"; the engine is still stopping (run {self.name!r} in the background)"
        return ReplayCancelled(line)

    def _finished(self) -> CellRun | CellSweep:
        if self.callback_error is not None:
            raise self.callback_error
        assert self._cell is not None
        return self._cell

    def cancel(self) -> None:
        self.cancel_token.cancel()

    @property
    def result(self) -> Result | None:
        """The run's result (waits for it)."""
        return self.wait().result

    def __repr__(self) -> str:
        if not self.done or self._cell is None:
            return f"<restream run {self.name!r}: running>"
        return repr(self._cell)
