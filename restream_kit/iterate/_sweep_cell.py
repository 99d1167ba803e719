"""A ``%%restream NAME --sweep ...`` cell's run (``Workbench.sweep``): the grid in one scan,
then the baseline its variants are compared with, got without a replay where it can be.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..engines import is_oracle
from ..io.log import Log
from ..io.progress import CancelToken, broadcast
from ..model.program import Program
from .cells import CELL_BATCH, Baseline, CellOptions, CellSweep
from .sweeps import sweep

if TYPE_CHECKING:
    from ..workbench import Workbench

__all__ = ["sweep_cell"]


def sweep_cell(
    workbench: Workbench,
    name: str,
    source: str | Program,
    log: Log | Any,
    values: dict[str, list[Any]],
    options: CellOptions,
) -> CellSweep:
    """Define ``name`` and sweep its parameters over ``values`` (a grid, see
    :func:`restream_kit.sweep`) on ``options.engine``, in one scan where it can.

    The baseline each variant is compared with (``CellSweep.diff``) is the serial run of
    the cell named ``options.baseline``, or, without one, the serial replay of this program
    with its parameters' defaults: kept in this session, else the sweep's own variant with the
    defaults (on the oracle), else the catalog's or a serial replay after the sweep. Errors are
    kept in the returned ``CellSweep`` (``error``). ``options.before_replay(cell_sweep)`` is
    called once the baseline is ready.
    """
    engine, baseline, cancel = options.engine, options.baseline, options.cancel
    before_replay = options.before_replay
    program = source if isinstance(source, Program) else workbench.define(name, source)
    workbench.programs[name] = program
    log = log if isinstance(log, Log) else Log(log)
    cell = CellSweep(name, program, log, engine, dict(values), by=options.by)
    if options.progress is not None:
        cell.progress = options.progress
    workbench.sweeps[name] = cell
    observers = [cell.progress] + ([options.observer] if options.observer is not None else [])
    try:
        if cancel is not None:
            cancel.check()
        if baseline is not None:
            cell.baseline = workbench.baselines.get(program, log, baseline, cancel=cancel)
        else:  # at hand in this session, else got after the sweep (see _sweep_baseline)
            cell.baseline = workbench.baselines.kept(program, log)
        if cell.baseline is not None and before_replay is not None:
            before_replay(cell)
        replay_options: dict[str, Any] = {"observer": broadcast(observers), "cancel": cancel}
        if is_oracle(engine):
            replay_options["batch_size"] = CELL_BATCH
        if options.epoch is not None:
            replay_options["epoch"] = options.epoch
        if options.master:
            replay_options["master"] = options.master
        cell.sweep = sweep(program, log, engine=engine, options=replay_options, **values)
        if baseline is None:
            cell.baseline = _sweep_baseline(workbench, cell, cancel)
            if before_replay is not None:
                before_replay(cell)
    except BaseException as exc:  # noqa: BLE001 - kept for the view, re-raised by callers who want it
        cell.error = exc
    return cell


def _sweep_baseline(workbench: Workbench, cell: CellSweep, cancel: CancelToken | None) -> Baseline:
    """The serial replay of a swept program with its defaults: kept in this session, the
    sweep's own variant with the defaults (on the oracle), the catalog's, or replayed after
    the sweep (without a history: a sweep's baseline is for its diffs)."""
    program, log = cell.program, cell.log
    defaults = {k: p.default for k, p in program.params.items()}
    words = ", ".join(f"{k}={v!r}" for k, v in defaults.items())
    label = f"serial replay of {cell.name} with its defaults ({words})"
    base = cell.baseline
    if base is None and is_oracle(cell.engine):
        for variant in cell.sweep:
            if all(variant.params.get(k, v) == v for k, v in defaults.items()):
                base = Baseline(label, variant.result, reused=False, same_program=True)
                break
    if base is None:
        base = workbench.baselines.get(program, log, None, cancel=cancel)
    return replace(base, label=label)
