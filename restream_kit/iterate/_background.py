"""A cell's run on a thread (:class:`BackgroundRun`), so that the kernel can wait for it or go
on, and the one line an interrupted cell shows (:class:`ReplayCancelled`).

An interrupt gives the kernel back within :data:`STOP_WAIT_S` in every phase of the cell: the
run is told to stop (its engine checks between batches; Spark's jobs are cancelled), and a
run that cannot stop at once (a JVM still starting, a diff being computed) ends on its thread
without anybody waiting for it.
"""

from __future__ import annotations

import contextvars
import threading
import time
from typing import TYPE_CHECKING, Any

from ..io.progress import CancelToken, ProgressState
from ..io.result import Result
from ..model.program import Program
from .cells import CellSweep, cancelled_line

if TYPE_CHECKING:
    from ..io.log import Log
    from ..workbench import CellRun, Workbench

__all__ = ["BackgroundRun", "ReplayCancelled", "STOP_WAIT_S"]

#: After a cancel, how long the kernel waits for the run to stop before it is given back.
STOP_WAIT_S = 1.5


class ReplayCancelled(KeyboardInterrupt):
    """A replay stopped by an interrupt or its Stop button; shown as its one line in a notebook.

    A ``KeyboardInterrupt``, so that Run All stops at the cell as it does for any interrupt.
    """

    def _render_traceback_(self) -> list[str]:  # IPython shows this instead of a traceback
        return [str(self)]


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
        """Cancel the run, wait up to :data:`STOP_WAIT_S` for it to stop; the exception that
        says where it stopped (for the caller to raise)."""
        phase = self.progress.phase  # where it was when told, not where stopping took it
        self.cancel()
        try:
            stopped = self._done.wait(STOP_WAIT_S)
        except KeyboardInterrupt:  # a second interrupt: give the kernel back now
            stopped = False
        if phase == "starting" and not self.progress.events_total:
            line = "cancelled while the engine started, before any event"
        elif phase in ("waiting", "baseline", "comparing") and self.progress.finished:
            line = f"cancelled while comparing with the serial baseline ({phase})"
        else:
            line = cancelled_line(self.progress)
        if not stopped:
            line += f"; it ends on its own thread (run {self.name!r})"
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
