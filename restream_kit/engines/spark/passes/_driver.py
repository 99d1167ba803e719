"""Drive the passes of ``passes._plan`` on Spark and assemble the serial engine's result.

A replay prepares what every pass job shares (``passes._setup``: the log's frame with every
pass's partition value, the columns that travel, the output schema), runs one Spark job per
pass (``passes._jobs``, each pass's input from its source, ``passes._sources``), and makes the
result of what the tasks sent back (``passes._results``). A checkpointed, resumed or
``start_from`` replay runs the same jobs and commits each epoch (``passes._epochs``).
"""

from __future__ import annotations

import shutil
import time
from typing import Any

from ....io.progress import one_epoch_finished, one_epoch_started
from ....io.result import Result
from ._emitted import emitted_tables
from ._epochs import run_checkpointed, start_state
from ._jobs import run_jobs, stage_names
from ._output_files import drop_parts, in_memory, output_files
from ._plan import PassPlan, passes_of
from ._results import finish_finals, handler_names, make_result
from ._setup import prepare

__all__ = ["run_passes"]


def run_passes(rep: Any, pp: PassPlan, started: float, events: Any) -> Result:
    """Replay with the passes of ``pp`` (``rep`` is the engine's ``_Replay``)."""
    checkpointing = any(getattr(rep.options, k) for k in ("checkpoint", "resume", "start_from"))
    start = None
    if checkpointing:
        start = start_state(rep)
    if (start is not None or rep.until is not None) and any(p.lookup for p in pp.passes):
        # From a start state the passes forward events only where the driver deals each pass
        # its share of the start by its key (``passes._setup.prepare``); a looked-up pass's
        # keys are known only as its events come: the same program takes the copies.
        pp = passes_of(rep.program, lookups=False)
    restarted = start is not None or rep.until is not None
    if (restarted or getattr(rep, "history", None)) and any(p.closes for p in pp.passes):
        # A start's waiting closes go to the partition of their window, and a history
        # records the close stage's reads: closing windows keep their close passes.
        pp = passes_of(rep.program, lookups=not restarted, closes=False)
    setup = prepare(rep, pp, started, events, start)
    setup.outputs = output_files(setup, checkpointing)
    try:
        if checkpointing:
            return run_checkpointed(setup)
        total = len(setup.log)
        one_epoch_started(rep.notify, "spark", total, stage_names(pp), setup.log.span_ms)
        ran = run_jobs(setup, setup.df, None, (0, total), total)
        rep.passes_ran = ran  # its history rows and last event (``_engine``, ``_history``)
    finally:
        if setup.values_dir is not None:
            shutil.rmtree(setup.values_dir, ignore_errors=True)
        for frame in setup.persisted:
            try:
                frame.unpersist()
            except Exception:  # noqa: BLE001 - best effort on the way out
                pass
    finish_finals(setup.program, ran)
    tables = emitted_tables(ran.emitted, ran.emitted_columns, handler_names(setup.program))
    drop_parts(setup.outputs)
    wall = time.perf_counter() - started
    one_epoch_finished(rep.notify, total, wall, in_memory(tables))
    return make_result(setup, ran, tables, total, 1, ran.quarantined)
