"""The Python API: load, plan, replay. The magics and the command line are thin layers over it."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from .engines import (
    EngineUnsupported,
    capabilities_of,
    get_engine,
    options_of,
    replay_on,
    with_options,
)
from .io.log import Log
from .io.progress import Observer
from .io.result import Result
from .model.errors import RestreamWarning
from .model.program import Program
from .planner.checks import Finding, check_against_log, check_program, scheduled_fields
from .runtime.quarantine import check_on_error

__all__ = [
    "replay",
    "RestreamWarning",
    "missing_kinds",
    "check_against_log",
    "check_program",
    "warn_findings",
]


def missing_kinds(program: Program, log: Log) -> list[str]:
    """Kinds that handlers listen to but that neither the log nor any ``schedule`` call provides."""
    present = set(log.kinds) | scheduled_kinds(program)
    wanted = dict.fromkeys(k for h in program.handlers for k in h.kinds)
    return [k for k in wanted if k not in present]


def scheduled_kinds(program: Program) -> set[str]:
    """Kinds named by a literal in a ``schedule(...)`` call of the program.

    The program's module is the one it runs, with windows expanded, so the kinds that close
    windows count; ``schedule`` may have been imported under another name.
    """
    return set(scheduled_fields(program))


def warn_findings(findings: list[Finding]) -> list[str]:
    """Issue each warning finding as a :class:`RestreamWarning` at its program line; return
    the messages (for ``Result.warnings``)."""
    notes = []
    for f in findings:
        if f.error:
            continue
        warnings.warn_explicit(f.message, RestreamWarning, f.filename, f.lineno or 1)
        notes.append(f.message)
    return notes


def replay(
    program: Program | str | Path,
    log: Log | Any,
    *,
    ts: str | None = None,
    kind: str | None = None,
    engine: str = "serial",
    observer: Observer | None = None,
    on_error: str = "stop",
    check: bool = True,
    require_kinds: bool = True,
    params: dict[str, Any] | None = None,
    history: bool = False,
    reuse: Any = None,
    **options: Any,
) -> Result:
    """Replay ``log`` through ``program`` on ``engine`` (``restream_kit.engines.engine_names()``:
    "serial", "spark" and any engine another package registers).

    ``on_error``: "stop" (a handler that raises stops the replay with a
    :class:`~restream_kit.model.errors.HandlerError`), "skip" or "quarantine" (the handler run is
    rolled back, as if it had not run, and recorded in ``Result.quarantine``; the replay goes
    on). Every engine rolls back and records the same runs.

    ``program`` is a :class:`Program`, a path to a ``.py`` file or program source; ``log`` is a
    :class:`Log` or anything ``Log`` accepts. Engine options (``master``, ``epoch``,
    ``spark``...) pass through, and on every engine:

    - ``checkpoint=DIR`` commits each finished epoch to ``DIR``; with ``resume=True`` the
      replay continues after the last committed epoch (``Result.resumed_from_epoch``);
      ``checkpoint_every=`` (a time such as ``"60s"``, the default, or a number of events)
      bounds the work a kill can lose: one interval and one epoch (the Spark engine runs in
      waves of that size, see ``docs/spark_engine.md``);
    - ``start_from=(DIR, epoch)`` (or ``DIR`` for its last committed epoch) starts from the
      state committed after that epoch, over the rest of the same log, with a program whose
      handlers may differ (see :mod:`restream_kit.io.checkpoint`).

    Before any event is replayed (and before Spark starts), the program is checked against
    the log (:func:`check_against_log`): a field no event has or a read of undeclared state
    raises :class:`~restream_kit.model.errors.CheckError`, and so does a handler that would
    never run because the log has none of its kinds (the message names the kinds the log has),
    as on the command line and in the notebook. ``require_kinds=False`` turns that error into
    a :class:`RestreamWarning` at the handler's line, for a replay that means to leave some
    handlers idle; a kind the log lacks on a handler that also listens on other kinds is always
    a warning. ``check=False`` skips the check, for callers that ran it themselves (so that its
    warnings are shown once).

    ``ts`` and ``kind`` read ``log`` as ``Log(log, ts=..., kind=...)`` does: the name of its
    time column, the kind of every event of a log without a ``kind`` column.

    ``params`` overrides the defaults of the program's parameters (``x = param("x", 2.0)``):
    the program replayed is the one whose text has those defaults (see ``docs/iterate.md``).

    ``history=True`` keeps the run's state version history in ``Result.history`` (serial
    and Spark engines record the same one; the catalog stores it with the run). ``reuse=RUN`` (a catalog run name or id, or a
    ``Result`` with a history) re-runs only the stages that changed since RUN and reads the
    others from RUN's history; ``Result.reuse`` says which, and why nothing was reused when
    nothing was (the replay is then a full one). On Spark the re-run stages run in the driver
    (as polars columns when they lower, else through the serial re-replay; said in the
    warnings), and a replay that reuses nothing runs on Spark; see ``docs/iterate.md``.

    Raises :class:`restream_kit.model.errors.RestreamError` on bad input, and
    :class:`~restream_kit.engines.EngineUnsupported` when the engine's ``supports``
    refuses the replay. The engine options are built once (:mod:`restream_kit.engines.options`)
    before anything is read: an option no engine has (``bogus=1``) or a value of the wrong type
    is an :class:`~restream_kit.engines.OptionError` naming it.
    """
    on_error = check_on_error(on_error)
    runner = get_engine(engine)
    can = capabilities_of(runner)
    if on_error != "stop":
        options["on_error"] = on_error
    # Built and checked once, before anything is read: an unknown or mistyped option is one line.
    opts = options_of(runner, options)
    program = Program.load(program)
    if params:
        from .model.params import with_params

        program = with_params(program, params)
    log = Log.of(log, ts, kind)
    notes = _checked(runner, program, log, opts, check, require_kinds)
    if history and not can.history:
        notes.append(f"the run's history is recorded on serial and spark only, not on {engine}")
        history = False

    def full(history: bool = history) -> Result:
        chosen = with_options(opts, history=True) if history else opts
        return replay_on(runner, program, log, chosen, observer)

    if reuse is not None:
        result = _reusing(runner, program, log, reuse, full, observer, history, opts)
    else:
        result = full()
    for note in result.warnings:
        if "rolled back (on_error=" in note:
            warnings.warn(note, RestreamWarning, stacklevel=2)
    result.warnings[:0] = notes
    from .io.emits import emit_schemas

    # Tables that got no row still have their columns in result[name].
    result.schemas = emit_schemas(program, log)
    result.program, result.log = program, log  # what explain replays again
    return result


def _checked(
    runner: Any, program: Program, log: Log, opts: Any, check: bool, require_kinds: bool
) -> list[str]:
    """Before any event is replayed and before a slow engine starts: the mistakes the log
    reveals (warnings returned as notes), and whether the engine runs this replay; then the
    engine starts warming up."""
    can = capabilities_of(runner)
    if can.reads_uri_logs and log.uri is not None and log.summary is None:
        # The engine reads a URI log, not this process: the checks below use what it found.
        runner.describe_log(log, opts)
    notes = (
        warn_findings(check_against_log(program, log, require_kinds=require_kinds)) if check else []
    )
    reason = runner.supports(program, log, opts)
    if reason is not None:
        raise EngineUnsupported(runner.name, reason)
    if can.slow_start:
        runner.warm_up(opts)  # (Spark's JVM starts as we compile)
    return notes


def _reusing(
    runner: Any,
    program: Program,
    log: Log,
    reuse: Any,
    full: Any,
    observer: Observer | None,
    history: bool,
    options: Any,
) -> Result:
    """The replay re-running only the stages changed since ``reuse`` (``full`` where nothing
    can be reused), with a warning where the engine's own re-runs ran in the driver."""
    from .iterate.reuse import replay_reusing

    result = replay_reusing(
        program, log, reuse, full_replay=full, observer=observer, history=history, options=options
    )
    if not capabilities_of(runner).in_process and result.reuse.get("reused_stages"):
        how = (
            "as polars columns in the driver"
            if result.reuse.get("rerun_as") == "columns"
            else "through the serial re-replay in the driver"
        )
        result.warnings.append(
            f"reuse on {runner.name}: the re-run stages ran {how}, over the values recorded "
            "in the reused run's history (the result is the same)"
        )
    return result
