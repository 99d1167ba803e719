"""Closing windows keyed otherwise than their adding stage: one narrow row per add.

A tumbling, hopping or session window whose adding stage is partitioned by another key
(``per_ip`` added to by ``track``, which runs by ``e.src``) cannot close in that stage's pass
(``_window_shapes.fuse_closes``). Its expansion would send, per add, its writes (a ``distinct``
window's sets among them) and a scheduled close to a close pass. Instead, where the serial
engine would run the window natively (``_window_shapes.fuses_windows``):

- the adding pass sends each add as one row to the close pass, at the add's position and
  to the partition of the window's key: the key, the value added and the add's first number
  (``seq``) among the events its root event scheduled (:func:`narrow_senders`). It counts the
  closes the expansion would have scheduled (``seq``, ``Metrics.scheduled_events`` and the
  latest close time) as if it had;
- the close pass, partitioned by the window's key, runs the window natively, as the serial
  engine runs it (``runtime.windows``): each add in position order, after the closes due by
  its time, then the closes after the log (:func:`run_narrow`); its rows go at their serial
  places (``_own_closes.OwnCloses.rows``).

So a window costs one shuffle of narrow rows, and its closes run one per window (one queue
entry per start for tumbling and hopping windows), not one per add.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from ....model.program import Program
from ....model.windows import Hopping, Session
from ....runtime.loop import compile_loop
from ....runtime.semantics import SerialRuntime
from ....runtime.windows import Blocks, fuse_windows
from ._emitted import send_emitted
from ._narrow_files import NarrowFiles
from ._narrow_sessions import SessionRuns, folded_sessions, session_sender
from ._own_closes import OwnCloses
from ._rows import ERROR, FINAL, PH_LOG, STAT, WRITE, PassSpec, U32x2, dumps, for_driver, out_rows

__all__ = ["narrow_senders", "run_narrow"]


def _closes_of(window: Any) -> Any:
    """``(number of closes, latest close time)`` of an add at ``ts``, as the expansion
    schedules them: one per window the add falls in (a session: one per add)."""
    if isinstance(window, Session):
        gap = window.gap
        return lambda ts: (1, ts + gap)
    width = window.width
    hop = window.hop if isinstance(window, Hopping) else width
    if hop == width:
        return lambda ts: (1, ts - ts % hop + width)

    def closes(ts: int) -> tuple[int, int]:
        start = ts - ts % hop
        return (start - (ts - width) + hop - 1) // hop, start + width

    return closes


def narrow_senders(spec: PassSpec, program: Program, namespace: dict, rt: Any) -> None:
    """Replace the ``add`` of each window of ``spec.narrow_to`` in ``namespace`` (an adding
    pass's compiled program) with one that sends the add as a row (see the module
    docstring); ``rt`` is the pass's :class:`~._shipping.Shipping` runtime."""
    folded: dict = {}
    folds = False
    # Rows for close passes that take them as files (``_narrow_files``), with their keys.
    files = NarrowFiles(spec.sends.narrow) if spec.sends.narrow else None
    sessions = folded_sessions(program, spec.narrow_to)
    sends = []  # (what sends the runs of sessions still open at the task's end)
    for name, target in spec.narrow_to.items():
        window = program.windows[name]
        filed = files if files is not None and target in files.targets else None
        if name in sessions:
            namespace[f"{name}__add"], send = session_sender(rt, name, window, target, filed)
            sends.append(send)
            continue
        fold = f"{name}__n" in spec.folds and window.agg == "count"
        folds |= fold
        if fold:
            namespace[f"{name}__add"] = _folding_sender(rt, name, window, target, folded, filed)
        else:
            namespace[f"{name}__add"] = _sender(rt, name, window, target, filed)
    if folds or sends or files is not None:
        then = rt.send_folded

        def send_folded() -> None:  # (the pass sends its summed writes at its end)
            for send in sends:
                send()
            for (name, key, _start), (target, pk, position, seq0, n) in folded.items():
                blob = dumps((name, key, None, seq0, n))
                if files is not None and target in files.targets:
                    files.append((WRITE, target, key, position, blob))
                else:
                    rt.out.append((WRITE, target, pk, position, blob))
            folded.clear()
            if files is not None:
                rt.out.extend(files.flush())  # (a row per file written: its path)
            then()

        rt.send_folded = send_folded


def _sender(rt: Any, name: str, window: Any, target: int, files: Any = None) -> Any:
    """The ``add`` of window ``name`` in an adding pass: the add, as one row for ``target``
    (a count's adds summed per window: :func:`_folding_sender`)."""
    closes = _closes_of(window)
    distinct = window.agg == "distinct"

    def add(key: Any, value: Any, ts: int) -> None:
        hash(key)  # (an unhashable key or value raises here, in its handler, as serially)
        if distinct:
            hash(value)
        ev = rt.event
        root = ev[0]
        n, last = closes(ts)
        # The events its root scheduled so far: the closes count as if scheduled here.
        seq0 = rt.made_by(root, last, n) - 1
        calls = rt.call()
        position = (ev[1], PH_LOG, root, U32x2.pack(rt.hidx, calls))
        if files is not None:  # (with its key: its partition is dealt as it is written)
            files.append((WRITE, target, key, position, dumps((name, key, value, seq0))))
            return
        # (``rt.out``, not a list taken once: the pass hands full lists on and starts anew)
        rt.out.append((WRITE, target, rt._pk(key), position, dumps((name, key, value, seq0))))

    add.__name__ = f"{name}__add"
    return add


def _folding_sender(rt: Any, name: str, window: Any, target: int, folded: dict, files: Any) -> Any:
    """The ``add`` of a count whose adds to one window are summed into one row, at the
    first's place (:func:`~._window_shapes.folded_counts` says why nothing tells them
    apart): only a window's first add in the task makes its row's position."""
    closes = _closes_of(window)
    width = window.width
    hop = window.hop if isinstance(window, Hopping) else width
    made_by = rt.made_by
    pack = U32x2.pack
    get = folded.get
    pk = rt._pk if files is None else None  # (through files: dealt as it is written)

    def add(key: Any, value: Any, ts: int) -> None:
        start = ts - ts % hop
        w = (name, key, start)
        slot = get(w)  # (an unhashable key raises here, in its handler, as serially)
        ev = rt.event
        root = ev[0]
        # The closes count as if scheduled here (one per window the add falls in).
        seq0 = made_by(root, start + width, 1) if hop == width else made_by(root, *closes(ts)[::-1])
        calls = rt.call()
        if slot is None:
            position = (ev[1], PH_LOG, root, pack(rt.hidx, calls))
            folded[w] = [target, pk(key) if pk is not None else None, position, seq0 - 1, 1]
        else:
            slot[4] += 1

    add.__name__ = f"{name}__add"
    return add


def run_narrow(spec: PassSpec, program: Program, batches: Any, started: float) -> Iterator:
    """A close pass fed narrow rows (see the module docstring): the windows of
    ``spec.narrow`` run natively over them, in position order, then their closes after the
    log; its emitted rows, the windows' final states and its counts out."""
    rt = SerialRuntime()
    stores: dict[str, dict] = {name: {} for name in program.states}
    loop = compile_loop(program, rt, stores)
    compiled = loop.compiled
    windows = fuse_windows(compiled, rt, only=spec.narrow, blocks=Blocks(), lazy=False)
    loop.handlers_replaced()  # (its scheduled closes run the fused handlers)
    closes = OwnCloses(loop, program, spec.narrow, spec.max_flush)
    adds = {name: compiled.namespace[f"{name}__add"] for name in spec.narrow}
    # Lazy session counts come as runs of adds, swept apart (``_narrow_sessions``).
    runs = {
        name: SessionRuns(name, program.windows[name], rt.rows)
        for name in folded_sessions(program, spec.narrow)
    }
    per_root = rt.scheduled_per_root
    run_scheduled = loop.run_scheduled
    loads = pickle.loads
    out: list = []
    n = 0
    try:
        for batch in batches:
            if not batch.num_rows:
                continue
            ts = batch.column("_rs_t").to_pylist()
            lsn = batch.column("_rs_o").to_pylist()
            blobs = batch.column("_rs_b").to_pylist()
            closes.lsn.append(np.asarray(lsn, dtype=np.int64))
            closes.ts.append(np.asarray(ts, dtype=np.int64))
            for t, root, blob in zip(ts, lsn, blobs):
                item = loads(blob)
                if item[0] in runs:  # (nothing runs between a run's session and others')
                    runs[item[0]].take(t, *item[1:])
                    continue
                run_scheduled(t)  # (the closes due by its time first, as serially)
                name, key, value, seq0, *summed = item
                rt.event = (root, t)
                per_root[root] = seq0
                if summed:  # (a count's adds to one window: the window counts them at once)
                    adds[name](key, value, t, summed[0])
                else:
                    adds[name](key, value, t)
            n += batch.num_rows
        closes.finish(spec.last_ts)
        windows.finish(until=spec.last_ts, later=rt.later)
        for swept in runs.values():
            latest = swept.finish(spec.last_ts)
            if latest is not None:
                closes.last_at = max(latest, closes.last_at or latest)
            lsn, ts = swept.root_arrays()
            closes.lsn.append(lsn)
            closes.ts.append(ts)
    except Exception as exc:  # noqa: BLE001 - the driver replays serially for the exact error
        out.append(for_driver(ERROR, pickle.dumps(repr(exc), protocol=5)))
        yield out_rows(out, spec)
        return
    number = {h.name: h.index for h in program.handlers}
    out += send_emitted(rt.rows, number, closes, spec.outputs)
    for name in spec.finals:
        out.append(for_driver(FINAL, dumps((name, compiled.stores[name]))))
    # The adding passes counted the closes; this pass reports the latest one it ran.
    stat = (n, time.perf_counter() - started, 0, closes.last_at, True)
    out.append(for_driver(STAT, pickle.dumps(stat, protocol=5)))
    yield out_rows(out, spec)
