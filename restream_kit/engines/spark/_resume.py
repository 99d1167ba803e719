"""Checkpoints on Spark: the parallel path's epoch state, and the fallback epoch by epoch.

The parallel path carries three DataFrames from one epoch to the next (the compacted
snapshot, timed writes due later, writes pending into own state); a commit collects them as
Arrow tables (they are local checkpoints the epoch's job has just computed, so this reads
cached blocks) and a restart turns them back into DataFrames. Its ``state_format`` is
``"spark-parallel"``. The serial fallback, when it checkpoints, runs one Spark task per
epoch (:class:`SerialEpochTask`): the serial engine from the previous epoch's state over the
epoch's events; its state is the serial engine's (``state_format`` ``"serial"``), so a
serial-engine checkpoint can be a fallback's ``start_from`` and the other way round.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ...checkpoint import (
    Checkpointer,
    CheckpointError,
    Start,
    _dumps,
    check_states,
    open_for_replay,
    state_declarations,
)
from ...epochs import Epoch, cut
from ...progress import EpochFinished, EpochStarted, Progress, ReplayFinished, ReplayStarted
from ...result import Metrics, Result, build_table, quarantine_table
from . import _worker as W

__all__ = [
    "PARALLEL",
    "SERIAL",
    "open_checkpoint",
    "parallel_state",
    "restore_parallel",
    "layout_signature",
    "SerialEpochTask",
    "fallback_epochs",
]

PARALLEL = "spark-parallel"
SERIAL = "serial"


def open_checkpoint(replay: Any, state_format: str) -> tuple[Checkpointer | None, Start | None]:
    """The replay's checkpointer (opened once, kept on ``replay.ck``) and where it starts."""
    opts = replay.options
    if getattr(replay, "ck", None) is not None:
        # Reopened by the fallback after the parallel path gave up: start again serially.
        if replay.ck.state_format != state_format:
            replay.ck.reset(state_format)
        return replay.ck, replay.ck.load() or replay.ck_start_from
    ck, start = open_for_replay(
        replay.program,
        replay.log,
        engine="spark",
        epoch=opts.get("epoch"),
        state_format=state_format,
        checkpoint=opts.get("checkpoint"),
        resume=bool(opts.get("resume")),
        start_from=opts.get("start_from"),
    )
    replay.ck = ck
    replay.ck_start_from = None if start is None or start.resumed else start
    return ck, start


def wanted(options: dict[str, Any]) -> bool:
    """Whether the replay checkpoints or starts from a checkpoint."""
    if options.get("resume") and not options.get("checkpoint"):
        raise CheckpointError("resume needs a checkpoint directory (--checkpoint DIR)")
    return bool(options.get("checkpoint") or options.get("start_from"))


def committed_format(options: dict[str, Any]) -> str | None:
    """The state format of the checkpoint a resume continues (None when nothing is there)."""
    from ...checkpoint import MANIFEST

    if not (options.get("checkpoint") and options.get("resume")):
        return None
    try:
        import json
        from pathlib import Path

        manifest = json.loads((Path(options["checkpoint"]) / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return manifest.get("state_format") if manifest.get("epochs") else None


# -- the parallel path -------------------------------------------------------------------------


def layout_signature(lay: Any) -> dict[str, Any]:
    """What the parallel path's saved rows depend on: state ids, paths and own-key parts."""
    return {
        "states": {name: [s.sid, s.path] for name, s in sorted(lay.states.items())},
        "own": sorted(
            [name, step.own_key_part.get(name)] for step in lay.steps for name in step.own
        ),
    }


def parallel_state(program: Any, lay: Any, snap: Any, carry_w: Any, carry_p: Any) -> dict:
    """The parallel path's state between epochs, collected as Arrow tables."""
    return {
        "states": state_declarations(program),
        "layout": layout_signature(lay),
        "frames": [None if f is None else f.toArrow() for f in (snap, carry_w, carry_p)],
    }


def restore_parallel(replay: Any, lay: Any, start: Start) -> tuple[Any, Any, Any, list[str]]:
    """``(snap, carry_w, carry_p, notes)`` DataFrames from a committed parallel state."""
    state = start.state
    notes: list[str] = []
    if not start.resumed:
        notes = check_states(replay.program, state["states"], "start_from")
        if state["layout"] != layout_signature(lay):
            raise CheckpointError(
                "start_from: the snapshot's state is laid out for another plan of the program "
                "(its state ids or partition keys differ); start it on the serial engine "
                "from a serial checkpoint instead"
            )
    frames = [None if t is None else replay.session.createDataFrame(t) for t in state["frames"]]
    return (*frames, notes)


# -- the fallback, one task per epoch ----------------------------------------------------------


class _Memory:
    """A checkpointer that keeps one epoch's commit in memory (inside a task)."""

    def __init__(self, start: Start | None):
        self.start = start
        self.state: Any = None
        self.rows: Any = None

    def load(self) -> Start | None:
        return self.start

    def commit(self, epoch: int, done: int, state: Any, rows: Any, **_kw: Any) -> None:
        self.state, self.rows = state, rows


@dataclass
class SerialEpochSpec:
    spec: W.SerialSpec
    state: bytes | None  # the pickled serial state the epoch starts from
    last: bool


class SerialEpochTask:
    """The serial engine over one epoch's events (one partition, in log order), from a state.

    Yields one row: the state after the epoch and its rows, pickled, or an error.
    """

    def __init__(self, spec: SerialEpochSpec):
        self.spec = spec

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from ...log import Log
        from .. import serial

        spec = self.spec.spec
        program = W.load_program(spec.program)
        schema = pa.ipc.read_schema(pa.py_buffer(spec.types))
        cols: dict[str, list] = {c: [] for c in spec.columns}
        for batch in batches:
            for c in spec.columns:
                cols[c].extend(W._column_values(batch, c, c in spec.pickled_columns))
        arrays = []
        for c in spec.columns:
            try:
                arrays.append(pa.array(cols[c], type=schema.field(c).type))
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                arrays.append(pa.array(cols[c]))
        table = pa.table(arrays, names=list(spec.columns))
        state = None if self.spec.state is None else pickle.loads(self.spec.state)
        memory = _Memory(None if state is None else Start(-1, 0, state))
        out = W._Out(W.SERIAL_FIELDS)
        try:
            serial.replay(
                program,
                Log(table, cache=False),
                epoch=max(table.num_rows, 1),
                checkpoint=memory,
                final=self.spec.last,
                on_error=spec.on_error,
            )
            blob = _dumps({"state": memory.state, "rows": memory.rows}, "the state")
        except Exception as exc:  # noqa: BLE001 - shipped to the driver, raised there
            out.add(_rs_kind=W.ERROR, _rs_vb=W._serial_error(exc))
            yield from out.flush(force=True)
            return
        out.add(_rs_kind=W.FINAL, _rs_vb=blob)
        yield from out.flush(force=True)


def fallback_epochs(replay: Any, reason: str, started: float, events: Any) -> Result:
    """The serial fallback, one Spark task per epoch, committing each (see module doc)."""
    from ._engine import _ddl

    log = replay.log
    total = len(log)
    ck, start = open_checkpoint(replay, SERIAL)
    notes = [f"spark: the replay ran one task per epoch with the serial algorithm: {reason}"]
    epochs = cut(log, replay.options.get("epoch"))
    last_index = epochs[-1].index
    done = 0
    state = None
    rows: list[dict] = []
    if start is not None:
        state = start.state
        done = start.done
        rows = list(start.rows)
        if not start.resumed:
            notes += check_states(replay.program, state["states"], "start_from")
            notes.insert(
                1,
                f"started from epoch {start.epoch} of {start.info.get('start_from')} (the state "
                f"after {start.done:,} events); the result covers the events after it only",
            )
            state = {**state, "quarantined": []}
        epochs = [Epoch(e.index, max(e.start, done), e.stop) for e in epochs if e.stop > done]
    replay.notify(ReplayStarted("spark", total, len(epochs), ("serial fallback",), log.span_ms))
    spec = replay.serial_spec(events, log)
    for ep in epochs:
        replay._check_cancel()
        replay.notify(EpochStarted(ep.index, len(ep)))
        epoch_started = time.perf_counter()
        last = ep.index == last_index
        task = SerialEpochTask(
            SerialEpochSpec(spec, None if state is None else _dumps(state, "the state"), last)
        )
        df = replay.session.createDataFrame(events.table.slice(ep.start, len(ep)))
        df = df.repartition(1).sortWithinPartitions("_rs_o")
        out = replay._collect(df.mapInArrow(task, _ddl(W.SERIAL_FIELDS)))
        for r in out:
            if r["_rs_kind"] == W.ERROR:
                error = replay._serial_error(r["_rs_vb"])
                elapsed = time.perf_counter() - started
                replay.notify(ReplayFinished(done, elapsed, ok=False, error=str(error)))
                raise error
        blob = pickle.loads(next(r["_rs_vb"] for r in out if r["_rs_kind"] == W.FINAL))
        state = blob["state"]
        rows.append(blob["rows"])
        done = ep.stop
        if ck is not None:
            ck.commit(ep.index, ep.stop, state, blob["rows"], last=last)
        outputs = {n: build_table(n, r) for n, r in blob["rows"].items() if r}
        replay.notify(EpochFinished(ep.index, done, time.perf_counter() - epoch_started, outputs))
        replay.notify(Progress(done, total, time.perf_counter() - started))
    per_table: dict[str, list] = {}
    for epoch_rows in rows:
        for name, table_rows in epoch_rows.items():
            per_table.setdefault(name, []).extend(table_rows)
    tables = {name: build_table(name, r) for name, r in per_table.items()}
    stores = dict(state["stores"]) if state is not None else {}
    final_state = {name: stores.get(name, {}) for name in replay.program.states}
    wall = time.perf_counter() - started
    metrics = Metrics(
        engine="spark",
        events=total if start is None or start.resumed else total - start.done,
        scheduled_events=sum((state or {}).get("scheduled_per_root", {}).values()),
        wall_s=wall,
        span_ms=log.span_ms,
        rows={name: t.num_rows for name, t in tables.items()},
        stages={"serial fallback": wall},
        epochs=len(epochs),
    )
    replay.notify(ReplayFinished(total, wall))
    result = Result(tables=tables, state=final_state, metrics=metrics, warnings=notes)
    result.resumed_from_epoch = start.next_epoch if start is not None and start.resumed else None
    quarantine = quarantine_table((state or {}).get("quarantined", []))
    return replay._with_quarantine(result, quarantine)
