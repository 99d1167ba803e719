"""The Spark engine's driver: choose the path a replay takes, and drive it.

Two paths (see ``docs/spark_engine.md``):

- the **prefix path** (``prefix._driver``) for rules that lower to column expressions
  (``restream_kit.compiler.lower``), locally or on a ``spark://`` cluster, without
  ``start_from``, poison-event handling, a URI log or Spark Connect: epochs in parallel,
  evaluated as columns (with ``checkpoint=``, each epoch committed, and ``resume=``
  continued, by ``prefix._commits``);
- the **pass path** (``passes._plan``, ``passes._driver``, ``passes._epochs``) for every other replay:
  each stage of the plan is one Spark job over the whole log, in parallel unless the plan
  calls it sequential. A program the passes cannot split yet, or that the planner cannot
  plan, runs as one sequential pass (``passes._plan``' single pass), said before the replay
  starts and in ``Result.warnings``.

``path=`` (or ``$RESTREAM_SPARK_PATH``) is ``"auto"`` (the prefix path when it can run the
replay, else the passes), ``"passes"`` or ``"prefix"`` (which says why when it cannot).

Around either path the driver puts the replay's Spark jobs in one job group (so that a
cancel stops them at once) and, on a standalone cluster, a watchdog that turns executors
lost for good into one clear error.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import warnings
from typing import Any

from ...compiler.lower import Lowered
from ...io import config
from ...io.checkpoint import open_for_replay
from ...io.log import Log
from ...io.progress import Cancelled, ReplayFinished, ReplayStarted, broadcast
from ...io.result import Result
from ...model.errors import RestreamError, RestreamWarning
from ...model.program import Program
from ...runtime import check_state
from .. import serial
from ..options import SparkOptions
from ._history import SparkHistory, not_recorded_note
from ._path import lowers, prefix_choice
from ._shared_log import check_sent, shared_file
from ._uri_log import copy_facts
from ._uri_log import describe as _describe_uri
from ._waves import in_waves
from .passes._driver import run_passes
from .passes._jobs import TaskError as _PassTaskError
from .passes._output_files import outputs_for
from .passes._plan import passes_of
from .prefix._commits import Carried, why_not_resumed
from .prefix._driver import default_epoch, run_prefix
from .prefix._jobs import SparkEpochs
from .session._session import get_session, is_connect, session_cores, watch
from .session._ship import is_local, ship


def describe_uri_log(session: Any, log: Log, options: SparkOptions) -> None:
    """Read a URI log with Spark's reader (see ``_uri_log``), for a replay with ``options``.
    A checkpoint needs the log's ordered copy on this disk (a local master's)."""
    _describe_uri(session, log)
    refused = [k for k in ("checkpoint", "resume", "start_from") if getattr(options, k)]
    if refused and not log.copied:
        raise RestreamError(
            f"{log.uri}: {refused[0]}= is not supported yet for a log given as a URI on a "
            "cluster; give a local path, or replay without it"
        )


__all__ = ["replay"]

_CHECKPOINTING = ("checkpoint", "resume", "start_from")
STATE_FORMAT = "serial"  # the serial engine's: checkpoints move between the engines


def _read_meanwhile(program: Program, log: Log, options: SparkOptions) -> threading.Thread | None:
    """A thread reading the log the kernel holds while a local master's session starts (the
    read waits on the disk, the start on the JVM): a process's first replay starts about a
    second sooner on a large log. When the prefix path will run the replay, the thread only
    makes the log's ordered copy, which its tasks read: the kernel never holds the log. A log
    it cannot read is left for the replay to read again, which reports the error as it
    always does."""
    if log.uri is not None or log.loaded or options.session is not None:
        return None
    try:
        master = config.resolve(options.master, options.conf).master
    except Exception:  # noqa: BLE001 - the session's start reports a bad setting
        return None
    if master and not master.startswith("local"):
        return None  # (a cluster may read the log itself: the kernel need not hold it)

    def read() -> None:
        try:
            if log.streamed and lowers(program, log, options):
                return  # the prefix path reads the ordered copy (now made): not the kernel
            if log.streamed:
                log.ordered()  # the pass path's tasks read the ordered copy: not the kernel
            else:
                log.table  # noqa: B018 - built and kept on the log
        except Exception:  # noqa: BLE001 - see the docstring
            pass

    thread = threading.Thread(target=read, name="restream-log-read", daemon=True)
    thread.start()
    return thread


class _Replay:
    """One replay on Spark: what the paths share (``passes._driver`` reads these attributes)."""

    def __init__(self, program: Program, log: Log, observer: Any, options: SparkOptions):
        self.path = options.path  # (checked, and taken from $RESTREAM_SPARK_PATH, by the options)
        self.program = program
        self.log = log
        self.notify = broadcast(observer)
        self.options = options
        # Handler runs that raise: stop, or roll back and record (see passes._task).
        self.on_error = options.on_error
        reading = _read_meanwhile(program, log, options)
        try:
            self.session = get_session(
                options.master, options.conf, options.session, options.executor_wait
            )
        finally:
            if reading is not None:
                reading.join()
        ship(self.session)
        if log.uri is not None:
            describe_uri_log(self.session, log, options)
        self.cores = session_cores(self.session)
        self.cancel = options.cancel
        # history=True: record the run's history as the serial engine would (``_history``).
        self.history, self.history_note = _history_of(program, log, options, self.on_error)
        self.history_why: str | None = None
        # A checkpointed replay's tables are read back from its commits once it is done
        # (``_waves``): no committed row is kept in the kernel, nor read by a resume.
        self.tables_committed = bool(options.checkpoint) and self.history is None
        self.opened: tuple[Any, Any] | None = None  # (checkpointer, start), once opened
        self.begun: Any = None  # the pass path's start, made once (``passes._epochs._begun``)
        self.until: int | None = None  # the last epoch of the wave running (``_waves``)
        self.carried: Any = None  # where the last wave left off (a path's own kept values)
        self.job_group = f"restream-{id(self):x}-{time.monotonic_ns()}"
        if self.cancel is not None:
            self.cancel.on_cancel(self._interrupt)

    def run(self) -> Result:
        # On a standalone cluster a watchdog cancels the replay's jobs when its executors are
        # gone for good (workers died): one clear error instead of a job waiting forever.
        with watch(self.session, self.job_group) as dog:
            try:
                return self._run()
            except Exception:
                if dog.reason:
                    raise RestreamError(dog.reason) from None
                raise
            finally:
                if is_connect(self.session):
                    self.session.removeTag(self.job_group)

    def _run(self) -> Result:
        result = self._replay()
        if self.history_note:
            result.warnings.append(self.history_note)
        return result

    def _replay(self) -> Result:
        started = time.perf_counter()
        self._tag_jobs()
        low = self._lowered()
        if low is None and not len(self.log):
            return self._empty(started)
        probes = None
        if low is not None and self.history is not None:
            probes, why = self.history.prefix_probes(low)
            if probes is None and self.path != "prefix":
                low = None  # the pass path records it (said in metrics.path)
                self.history.how = f"the pass path ran, to record the history ({why}); "
        try:
            if low is not None:
                if self.history is not None and probes is None:
                    return self._serial_history(self._prefix(low, started, None), why)
                return in_waves(self, lambda: self._prefix(low, started, probes), "prefix")
            return in_waves(self, lambda: self._passes(started), "passes")
        except _PassTaskError:
            raise  # the serial engine has published the error (see passes._plan)
        except Cancelled as exc:
            self._finished_cancelled(started, str(exc))
            raise
        except Exception:
            if self.cancel is not None and self.cancel.cancelled:
                # A Spark job stopped by the cancel fails with Spark's own error.
                self._finished_cancelled(started, "replay cancelled")
                raise Cancelled("replay cancelled") from None
            raise

    def resume_next_wave(self) -> None:
        """Start the next wave from what the last one committed: from the values it kept
        (``self.carried``, what the checkpoint holds: either path keeps them), else from the
        checkpoint opened again, as a resume."""
        self.options = dataclasses.replace(self.options, resume=True)
        if self.carried is None:
            self.opened = self.begun = None

    def open_checkpoint(self) -> tuple[Any, Any]:
        """The replay's checkpointer and where it starts (a resume's or a ``start_from``'s;
        (None, None) without checkpoint options), opened once, whichever path runs: so
        either path, or the serial engine, continues what the other wrote (the same
        identity, the serial engine's state format)."""
        if not any(getattr(self.options, name) for name in _CHECKPOINTING):
            return None, None
        if self.opened is None:  # a resume without a checkpoint is refused here, in one line
            self.opened = open_for_replay(
                self.program,
                self.log,
                engine="spark",
                epoch=self.options.epoch,
                state_format=STATE_FORMAT,
                checkpoint=self.options.checkpoint,
                resume=self.options.resume,
                start_from=self.options.start_from,
                rows=not self.tables_committed,
            )
        return self.opened

    def _prefix(self, low: Lowered, started: float, probes: Any) -> Result:
        ck, start = self.open_checkpoint()
        start = self.carried or start  # (a wave after the first: ``_waves``)
        epoch = self.options.epoch
        if epoch is None and ck is None:  # a checkpoint's epochs are its own
            epoch = default_epoch(len(self.log), self.cores)
        # The tasks write large tables as files where they share this disk (``_output_parts``);
        # a cluster's read the log from the shared directory, else get its epochs' events.
        local = is_local(self.session)
        files = ck is None and self.until is None and local
        shared = None if local else shared_file(self.session, self.log)
        if not local and shared is None:
            check_sent(self.log, self.session.sparkContext.master)
        result = run_prefix(
            low,
            self.program,
            self.log,
            epoch=epoch,
            map_epochs=SparkEpochs(self.session, self.job_group, self.cancelled),
            notify=self.notify,
            check_cancel=self._check_cancel,
            started=started,
            ship_events=not local and shared is None,
            shared=shared,
            history=probes and (self.history, probes),
            checkpoint=ck,
            start=start,
            cores=self.cores if ck is not None else None,  # a checkpoint's epochs, grouped
            until=self.until,
            outputs=outputs_for(self.options, self) if files else None,
        )
        self.carried = result.state if isinstance(result.state, Carried) else None
        if probes is not None:
            # A lowered program schedules nothing: its last event is the log's last.
            result.history = self.history.finish(self.log.last_ts)
            result.metrics.path["history"] = self.history.how
        return result

    def _serial_history(self, result: Result, why: str) -> Result:
        """``result`` with the history a serial replay records, said loudly: the replay's
        path could not record it (``why``)."""
        recorded = serial.replay(self.program, self.log, history=True)
        result.history = recorded.history
        note = (
            f"spark: the run's history was recorded by a serial replay in the driver, not on "
            f"Spark: {why}"
        )
        warnings.warn(note, RestreamWarning, stacklevel=5)
        result.warnings.append(note)
        result.metrics.path["history"] = f"recorded by a serial replay in the driver ({why})"
        return result

    def _finished_cancelled(self, started: float, error: str) -> None:
        """Tell the observers the replay ended unfinished, as the serial engine does."""
        self.notify(ReplayFinished(0, time.perf_counter() - started, ok=False, error=error))

    # -- choosing the path ---------------------------------------------------------------

    def _lowered(self) -> Lowered | None:
        """The lowered program when the prefix path runs this replay, else None.

        ``path="prefix"`` insists (and says why it cannot), ``path="passes"`` never takes it.
        Replays that start from a snapshot or skip poison events, resumes of a checkpoint
        the prefix path cannot continue (``why_not_resumed``), logs
        given as a URI (Spark's reader reads them) and Spark Connect sessions (no broadcast)
        take the pass path. On a cluster the epochs' events travel through Spark."""
        if self.path == "passes":
            return None
        connect = is_connect(self.session) or getattr(self.session, "sparkContext", None) is None
        # Spark's ordered copy (a local master) is what the prefix path's tasks read.
        uri_far = self.log.uri is not None and copy_facts(self.log) is None
        low, why = prefix_choice(
            self.program, self.log, self.options, connect=connect, uri_far=uri_far
        )
        if low is not None and self.options.resume:
            why = why_not_resumed(self.open_checkpoint()[1])
            low = None if why else low
        if low is None and self.path == "prefix":
            raise RestreamError(f"the prefix path cannot run this replay: {why}")
        return low

    # -- the pass path ---------------------------------------------------------------------

    def _passes(self, started: float) -> Result:
        pp = passes_of(self.program)
        note = None
        if pp.reason:
            # Said before the replay starts: a parallel engine running one task is news.
            note = (
                f"spark: the whole program ran in one task ({pp.reason}); the plan's stages "
                "could not be split into parallel passes"
            )
            warnings.warn(note, RestreamWarning, stacklevel=4)
        try:
            result = run_passes(self, pp, started, None)
        except _PassTaskError:
            # A handler raised somewhere: the serial engine names the first error exactly,
            # with the observers, so that the epochs before the error are published (and
            # written with --out) as a serial replay publishes them.
            serial.replay(
                self.program,
                self.log,
                observer=self.notify,
                epoch=self.options.epoch,
                on_error=self.on_error,
            )
            raise
        check_state(result.state)  # what the serial engine refuses to keep, so does this
        if note:
            result.warnings.append(note)
        if self.history is not None:
            if self.history_why is not None:
                return self._serial_history(result, self.history_why)
            self.history.take_passes(self.passes_ran.history)
            result.history = self.history.finish(self.passes_ran.last_event)
            result.metrics.path["history"] = self.history.how
        return result

    def history_sites(self, p: Any, columns: tuple[str, ...]) -> tuple:
        """What pass ``p``'s tasks record of the history (``passes._driver`` asks, per pass, as
        it builds the pass); when some pass cannot, none records and ``history_why`` says why
        (the history is then a serial replay's)."""
        if self.history is None or self.history_why is not None:
            return ()
        sites, why = self.history.pass_sites(p, columns)
        self.history_why = why
        return sites

    def _empty(self, started: float) -> Result:
        """A log with no events: the serial engine's result (empty tables, every state
        empty; with ``checkpoint=``, its one empty epoch committed as a Spark checkpoint).
        Nothing is sent to Spark: there is nothing to run."""
        opts = self.options
        checkpointer = None
        if any(getattr(opts, name) for name in _CHECKPOINTING):
            # Opened as the paths open it, so that the checkpoint is Spark's.
            checkpointer = _Opened(*self.open_checkpoint())

        def relay(event: Any) -> None:
            if isinstance(event, ReplayStarted):
                event = ReplayStarted("spark", 0, event.epochs_total, (), event.span_ms)
            self.notify(event)

        result = serial.replay(
            self.program,
            self.log,
            observer=relay,
            epoch=opts.epoch,
            cancel=self.cancel,
            on_error=self.on_error,
            checkpoint=checkpointer,
            history=self.history is not None,
        )
        result.metrics = dataclasses.replace(
            result.metrics,
            engine="spark",
            wall_s=time.perf_counter() - started,
            path={"whole replay": "nothing to run: the log has no events"},
        )
        return result

    # -- cancel ------------------------------------------------------------------------------

    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.cancelled

    def _check_cancel(self) -> None:
        if self.cancel is not None:
            self.cancel.check()

    def _interrupt(self) -> None:
        """Stop this replay's running Spark jobs (called from the cancelling thread)."""
        try:
            self.session.sparkContext.cancelJobGroup(self.job_group)
        except Exception:  # noqa: BLE001 - Spark Connect: interrupt by tag instead
            try:
                self.session.interruptTag(self.job_group)
            except Exception:  # noqa: BLE001 - nothing running, or no way to reach it
                pass

    def _tag_jobs(self) -> None:
        """Put this thread's Spark jobs in this replay's group, so that cancel can stop them."""
        try:
            self.session.sparkContext.setJobGroup(self.job_group, "restream replay", True)
        except Exception:  # noqa: BLE001 - Spark Connect
            try:
                self.session.addTag(self.job_group)
            except Exception:  # noqa: BLE001
                pass


class _Opened:
    """A checkpoint opened by the driver, handed to the serial engine (``load``/``commit``)."""

    def __init__(self, ck: Any, start: Any):
        self.ck, self.start = ck, start

    def load(self) -> Any:
        return self.start

    def commit(self, *args: Any, **kwargs: Any) -> None:
        if self.ck is not None:
            self.ck.commit(*args, **kwargs)


def _history_of(program: Program, log: Log, options: SparkOptions, on_error: str) -> tuple:
    """(the recorder, None) when ``options`` ask for a history that can be kept; (None, why
    not) when it cannot; (None, None) when none is asked for."""
    if not options.history:
        return None, None
    note = not_recorded_note(options)
    return (None, note) if note else (SparkHistory(program, log), None)


def replay(
    program: Program,
    log: Log,
    *,
    observer: Any = None,
    options: SparkOptions | None = None,
    **given: Any,
) -> Result:
    """Replay ``log`` through ``program`` on Spark with ``options``, else with those built
    from ``given`` (see the package docstring for what they are)."""
    opts = options if options is not None else SparkOptions.of(given)
    return _Replay(program, log, observer, opts).run()
