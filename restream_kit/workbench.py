"""The workbench behind the notebook: named programs, baselines, runs and their diffs.

Plain functions and data, no UI: the ``%%restream`` magic and the views in ``widgets/`` call
this. A cell's name makes its program reusable as a baseline. Without a named baseline the
baseline is the serial replay of the same program on the same log, so that the diff is the
serial-equivalence check. Baselines whose program and log are unchanged come from the run
catalog instead of being replayed again.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from .api import replay
from .catalog import Catalog, CatalogError, RunRecord
from .compare import Diff, diff
from .errors import RestreamError
from .log import Log
from .program import Program
from .progress import CancelToken, Observer
from .result import Result

__all__ = ["Workbench", "CellRun", "Baseline", "BackgroundRun"]


@dataclass
class Baseline:
    """What a run is compared with, and where it came from."""

    label: str
    result: Result
    reused: bool
    record: RunRecord | None = None


@dataclass
class CellRun:
    """One run of a named program: its result, its baseline and the diff between them."""

    name: str
    program: Program
    log: Log
    engine: str
    result: Result | None = None
    baseline: Baseline | None = None
    diff: Diff | None = None
    record: RunRecord | None = None
    error: BaseException | None = None
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None and self.result is not None

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
        self, program: Program, log: Log, baseline: str | None = None, on_error: str = "stop"
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
        result = replay(base_program, log, engine="serial", on_error=on_error)
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
    ) -> CellRun:
        """Define ``name``, replay it on ``engine``, compare with the baseline, record the run.

        Errors are kept in the returned ``CellRun`` (``error``) rather than raised, so that a
        view can show them; ``CellRun.ok`` says whether it worked. ``before_replay(cell_run)``
        is called once the baseline is ready, before the replay starts.
        """
        program = source if isinstance(source, Program) else self.define(name, source)
        self.programs[name] = program
        log = log if isinstance(log, Log) else Log(log)
        params = {"master": master, "epoch": epoch, "baseline": baseline}
        params = {k: v for k, v in params.items() if v}
        if on_error != "stop":
            params["on_error"] = on_error
        cell = CellRun(name, program, log, engine, params=params)
        self.runs[name] = cell
        try:
            cell.baseline = self.baseline(program, log, baseline, on_error)
            if before_replay is not None:
                before_replay(cell)
            options: dict[str, Any] = {"observer": observer, "cancel": cancel, "epoch": epoch}
            if on_error != "stop":
                options["on_error"] = on_error
            if master:
                options["master"] = master
            cell.result = replay(program, log, engine=engine, **options)
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

    def diff(self, a: str, b: str) -> Diff:
        """The diff of the latest runs of cells ``a`` and ``b``."""
        return diff(self._latest_result(a), self._latest_result(b))

    def _latest_result(self, name: str) -> Result:
        if name in self.runs and self.runs[name].result is not None:
            return self.runs[name].result
        record = self.catalog.latest(name)
        if record is None:
            raise RestreamError(f"no finished run called {name!r}")
        return self.catalog.load(record)


class BackgroundRun:
    """A ``Workbench.run`` on a thread, so that the kernel stays usable while it replays.

    ``wait()`` returns the finished ``CellRun``; ``cancel()`` asks the engine to stop.
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
        self._cell: CellRun | None = None
        self._done = threading.Event()
        #: An exception raised by ``on_done`` (a view), re-raised by ``wait()``.
        self.callback_error: BaseException | None = None

        def work() -> None:
            try:
                self._cell = workbench.run(name, source, log, cancel=self.cancel_token, **options)
                if on_done is not None:
                    try:
                        on_done(self._cell)
                    except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
                        self.callback_error = exc
            finally:
                self._done.set()

        self._thread = threading.Thread(target=work, name=f"restream-{name}", daemon=True)
        self._thread.start()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> CellRun:
        """Block until the run has finished; return it."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"run {self.name!r} still going after {timeout} s")
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
        state = "running" if not self.done else ("ok" if self._cell and self._cell.ok else "failed")
        return f"<restream run {self.name!r}: {state}>"
