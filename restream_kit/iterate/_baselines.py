"""The serial runs a workbench's cells are compared with, and reuse the history of.

A baseline is the serial replay of a program on a log: kept in memory for the last few
(program, log) pairs of the session, else found in the run catalog, else replayed on the
oracle and recorded. :meth:`Baselines.reusable` finds the run of a baseline that kept a
history, for ``replay(reuse=...)``.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from ..api import replay
from ..engines import ORACLE
from ..io._state_files import recorded_state
from ..io.catalog import MANIFEST, Catalog, CatalogError
from ..io.log import Log
from ..io.progress import CancelToken, Observer
from ..io.result import Result
from ..model.program import Program
from .cells import CELL_BATCH, Baseline

__all__ = ["Baselines", "KEEP_IN_MEMORY"]

#: How many serial results a workbench keeps in memory for later cells' baselines.
KEEP_IN_MEMORY = 4


class Baselines:
    """The serial runs of a workbench's programs: in memory, in ``catalog``, or replayed.

    ``program(name)`` is the workbench's program called ``name`` (a named baseline).
    """

    def __init__(self, catalog: Catalog, program: Callable[[str], Program]):
        self.catalog = catalog
        self.program = program
        # Serial results of this session by (program sha, log fingerprint), latest last: a
        # later cell's baseline without reading the catalog again.
        self._serial: OrderedDict[tuple[str, str], Baseline] = OrderedDict()

    def remember(self, program: Program, log: Log, base: Baseline) -> None:
        key = (program.sha256, log.fingerprint)
        self._serial.pop(key, None)
        self._serial[key] = base
        while len(self._serial) > KEEP_IN_MEMORY:
            self._serial.popitem(last=False)

    def kept(self, program: Program, log: Log) -> Baseline | None:
        """The serial run of ``program`` on ``log`` this session kept in memory, or None."""
        return self._serial.get((program.sha256, log.fingerprint))

    def ready(
        self, program: Program, log: Log, label: str, same_program: bool = False
    ) -> Baseline | None:
        """The serial run of ``program`` on ``log`` without replaying it: kept in memory by
        this workbench, or loaded from the catalog; None when there is none."""
        kept = self._serial.get((program.sha256, log.fingerprint))
        if kept is not None:
            return Baseline(label, kept.result, True, kept.record, same_program)
        record = self.catalog.find(program_sha=program.sha256, log_fingerprint=log.fingerprint)
        if record is None:
            return None
        try:
            base = Baseline(label, self.catalog.load(record), True, record, same_program)
        except CatalogError:
            return None  # forgotten by another process meanwhile
        self.remember(program, log, base)
        return base

    def has_serial(self, program: Program, log: Log) -> bool:
        key = (program.sha256, log.fingerprint)
        return key in self._serial or (
            self.catalog.find(program_sha=program.sha256, log_fingerprint=log.fingerprint)
            is not None
        )

    def get(
        self,
        program: Program,
        log: Log,
        baseline: str | None = None,
        on_error: str = "stop",
        cancel: CancelToken | None = None,
        observer: Observer | None = None,
        history: bool = True,
    ) -> Baseline:
        """The baseline result: the serial replay of ``program``, or of the cell named ``baseline``
        (with ``on_error``, so that a run that rolls poison events back has a baseline), kept
        in memory or the catalog, else replayed (``observer`` sees that replay)."""
        base_program = program if baseline is None else self.program(baseline)
        label = f"serial replay of {program.name}" if baseline is None else f"{baseline} (serial)"
        ready = self.ready(base_program, log, label, same_program=baseline is None)
        if ready is not None:
            return ready
        # The baseline keeps its history, so that a later cell can re-replay only what it
        # changed (``--baseline``); recording costs about a third of a replay, once.
        keep = history and on_error == "stop"
        result = replay(
            base_program, log, engine=ORACLE, on_error=on_error, cancel=cancel, history=keep,
            observer=observer, batch_size=CELL_BATCH,
        )  # fmt: skip
        record = self.catalog.record(
            name=base_program.name, program=base_program, log=log, engine=ORACLE, result=result
        )
        base = Baseline(label, result, False, record, same_program=baseline is None)
        self.remember(base_program, log, base)
        return base

    def reusable(self, base: Baseline, log: Log) -> tuple[Result | None, str | None]:
        """The baseline's serial run on ``log`` with its history (for ``replay(reuse=...)``),
        or None and why there is none: the baseline's own record first, then the latest other
        run of the same program on the same log that kept one, on any engine (a Spark run
        records the same history as a serial one)."""
        from ..history.recorder import History

        if base.result.history is not None:
            return _on_record(base), None
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


def _on_record(base: Baseline) -> Result:
    """The baseline's result, its states in memory tied to the files its record wrote, so
    that a run reusing them links those files rather than encoding them again (a state file
    and history probe is most of what recording a reusing run costs)."""
    result, record = base.result, base.record
    if record is None or record.outputs is None or record.status != "ok":
        return result
    try:
        entries = json.loads((Path(record.outputs) / MANIFEST).read_text()).get("state")
    except (OSError, ValueError):
        return result  # forgotten meanwhile: encoded again
    if not isinstance(entries, dict):
        return result
    history = result.history.recorded_at(record.outputs)  # its probes: linked too
    state = recorded_state(result.state, Path(record.outputs), entries)
    return replace(result, state=state, history=history)
