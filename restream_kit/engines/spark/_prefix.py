"""The prefix path: epochs in parallel, joined by a prefix of their state deltas.

When a program lowers to column expressions (``restream_kit._lower``), the Spark engine runs
it without moving events at all. Each epoch of the log is one Spark task, which reads its own
slice of the canonical log (Parquet, by row groups) and evaluates the program as columns
(``_columnar.run_epoch``). What one epoch needs from the epochs before it is only their
state, and state composes: a merge state's value is the sum of the epochs' sums per key, an
overwritten state's is the last epoch's last write. So the replay goes in *rounds*, one per
level of the lowered program:

1. round ``j`` runs every epoch in parallel; each computes its *delta* of the states at level
   ``j`` (per key: the sum of merges, or the last write) and the rows of the emits at level
   ``j``, using as base, for each state it reads, the deltas of the epochs before it;
2. the driver collects the deltas and broadcasts them to the next round.

Reads inside an epoch are as-of lookups (sorted by position, scanned per key), so every
handler sees exactly the versions a serial replay shows it. The final state is every epoch's
delta folded in order, and the output tables are built from the emitted rows with
``result.build_table``, sorted by position, as the serial engine builds them.

Spark schedules, retries and (with ``spark.speculation``) duplicates the tasks; all of that is
harmless because a task is a pure function of its epoch and the broadcast deltas.
"""

from __future__ import annotations

import io
import os
import tempfile
import time
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from ..._lower import Lowered, NotLowerable, lower
from ...epochs import cut
from ...log import Log, default_home, private_dir
from ...program import Program
from ...progress import (
    EpochFinished,
    EpochStarted,
    Progress,
    ReplayFinished,
    ReplayStarted,
    StageFinished,
    StageStarted,
)
from ...result import Metrics, Result, build_table
from ._columnar import DELTA_CHUNK, combine_deltas, needed_columns, run_epoch

__all__ = ["prefix_plan", "PrefixTask", "run_prefix", "TASK_SCHEMA"]

#: What a task returns: per epoch, one row per state delta or emit site, as Arrow IPC.
TASK_SCHEMA = "chunk int, what string, name string, payload binary, seconds double"
_TASK_ARROW = pa.schema(
    [
        ("chunk", pa.int32()),
        ("what", pa.string()),
        ("name", pa.string()),
        ("payload", pa.binary()),
        ("seconds", pa.float64()),
    ]
)


def prefix_plan(program: Program, log: Log) -> tuple[Lowered | None, str | None]:
    """The lowered program, or None and the reason the prefix path cannot run it."""
    try:
        return lower(program, log.table), None
    except NotLowerable as exc:
        return None, str(exc)


def _ipc(frame: pl.DataFrame) -> bytes:
    sink = io.BytesIO()
    frame.write_ipc(sink)
    return sink.getvalue()


def _from_ipc(data: bytes) -> pl.DataFrame:
    return pl.read_ipc(io.BytesIO(data))


class PrefixTask:
    """``mapInArrow`` over epoch numbers: one round of each epoch, rows of :data:`TASK_SCHEMA`."""

    def __init__(self, low: Lowered, path: str, columns: list[str], bounds, job: int, deltas):
        self.low = low
        self.path = path
        self.columns = columns
        self.bounds = bounds
        self.job = job
        self.deltas = deltas  # a Spark broadcast of {state: IPC bytes}, or the dict itself

    def __call__(self, batches):
        from ._worker import inject_fault

        inject_fault(f"round{self.job + 1}")  # a no-op unless $RESTREAM_FAULT asks for one
        shipped = None
        for batch in batches:
            for chunk in batch.column(0).to_pylist():
                if shipped is None:
                    shipped = getattr(self.deltas, "value", self.deltas) or {}
                yield self.one(int(chunk), shipped)

    def one(self, chunk: int, shipped: dict[str, bytes]) -> pa.RecordBatch:
        started = time.perf_counter()
        lo, hi = self.bounds[chunk]
        events = read_events(self.path, self.columns, lo, hi)

        def base(name: str) -> pl.DataFrame | None:
            if name not in shipped:
                return None
            return _from_ipc(shipped[name]).filter(pl.col(DELTA_CHUNK) < chunk)

        carried = {
            int(key.split(":")[1]): _from_ipc(data).to_series()
            for key, data in shipped.items()
            if key.startswith("read:") and key.endswith(f":{chunk}")
        }
        out_deltas, emits, reads = run_epoch(self.low, events, lo, self.job, base, carried)
        rows: dict[str, list] = {"chunk": [], "what": [], "name": [], "payload": [], "seconds": []}
        for name, frame in out_deltas.items():
            frame = frame.with_columns(pl.lit(chunk, dtype=pl.Int32).alias(DELTA_CHUNK))
            _row(rows, chunk, "delta", name, _ipc(frame))
        for index, frame in emits.items():
            _row(rows, chunk, "emit", str(index), _ipc(frame))
        for site, column in reads.items():
            _row(rows, chunk, "read", str(site), _ipc(column.to_frame()))
        _row(rows, chunk, "time", "", b"")
        rows["seconds"] = [time.perf_counter() - started] * len(rows["chunk"])
        return pa.RecordBatch.from_pydict(rows, schema=_TASK_ARROW)


def _row(rows: dict, chunk: int, what: str, name: str, payload: bytes) -> None:
    rows["chunk"].append(chunk)
    rows["what"].append(what)
    rows["name"].append(name)
    rows["payload"].append(payload)


def read_events(path: str, columns: list[str], lo: int, hi: int) -> pa.Table:
    """Rows ``lo`` to ``hi`` of a Parquet file, reading only the row groups that hold them."""
    f = pq.ParquetFile(path)
    groups, first, start = [], None, 0
    for g in range(f.num_row_groups):
        n = f.metadata.row_group(g).num_rows
        if start < hi and start + n > lo:
            groups.append(g)
            first = start if first is None else first
        start += n
    if not groups:
        return f.schema_arrow.empty_table().select(columns)
    table = f.read_row_groups(groups, columns=columns)
    return table.slice(lo - first, hi - lo)


def log_file(log: Log) -> str:
    """A Parquet file holding the canonical log (the cache, or a private scratch copy)."""
    cached = log.cache_dir / f"{log.fingerprint}.parquet"
    table = log.table
    if log.cache and cached.exists():
        return str(cached.resolve())  # Python workers need not share the driver's directory
    scratch = private_dir(default_home().resolve() / "scratch")
    path = scratch / f"{log.fingerprint}.parquet"
    if not path.exists():
        fd, tmp = tempfile.mkstemp(dir=scratch, suffix=".tmp")
        os.close(fd)
        pq.write_table(table, tmp, row_group_size=1 << 17)
        os.replace(tmp, path)
    return str(path)


def run_prefix(
    low: Lowered,
    program: Program,
    log: Log,
    *,
    epoch: Any,
    map_epochs,
    notify,
    check_cancel,
    started: float,
) -> Result:
    """Replay ``log`` in rounds. ``map_epochs(task, n)`` runs ``task`` over epochs 0..n-1 and
    returns the concatenated Arrow table of :data:`TASK_SCHEMA` rows (Spark, or a loop)."""
    epochs = [ep for ep in cut(log, epoch) if len(ep)]
    bounds = [(ep.start, ep.stop) for ep in epochs]
    path = log_file(log)
    columns = needed_columns(low)
    total = len(log)
    rounds = low.levels
    names = tuple(f"round {j + 1}" for j in range(rounds))
    notify(ReplayStarted("spark", total, len(bounds), names, log.span_ms))
    deltas: dict[str, list[pl.DataFrame]] = {}
    carried: dict[str, bytes] = {}  # "read:<site>:<epoch>": a read column later rounds use
    emitted: dict[int, list[tuple[int, pl.DataFrame]]] = {}
    stages: dict[str, float] = {}
    for job in range(rounds):
        check_cancel()
        label = _round_label(low, job)
        notify(StageStarted(0, label))
        round_started = time.perf_counter()
        shipped = {
            name: _ipc(pl.concat(frames, how="diagonal_relaxed")) for name, frames in deltas.items()
        }
        shipped.update(carried)
        task = PrefixTask(low, path, columns, bounds, job, shipped)
        table = map_epochs(task, len(bounds), shipped)
        # Deltas must stay in epoch order: a state's later writes come last.
        for row in sorted(table.to_pylist(), key=lambda row: row["chunk"]):
            if row["what"] == "read":
                carried[f"read:{row['name']}:{row['chunk']}"] = row["payload"]
            elif row["what"] == "delta":
                deltas.setdefault(row["name"], []).append(_from_ipc(row["payload"]))
            elif row["what"] == "emit":
                emitted.setdefault(int(row["name"]), []).append(
                    (row["chunk"], _from_ipc(row["payload"]))
                )
        seconds = time.perf_counter() - round_started
        stages[label] = seconds
        # Where a round's time goes: the tasks' own work, summed (the rest is Spark's).
        busy = {
            row["chunk"]: row["seconds"] for row in table.select(["chunk", "seconds"]).to_pylist()
        }
        stages[f"{label} (tasks, summed)"] = sum(busy.values())
        notify(StageFinished(0, label, seconds, len(bounds)))
    assembled = time.perf_counter()
    tables, per_epoch = _tables(low, log, emitted, bounds)
    state = _final_state(low, program, deltas)
    stages["tables and final state (driver)"] = time.perf_counter() - assembled
    done = 0
    for number, (lo, hi) in enumerate(bounds):
        notify(EpochStarted(number, hi - lo))
        done = hi
        notify(EpochFinished(number, done, 0.0, per_epoch.get(number, {}), None))
        notify(Progress(done, total, time.perf_counter() - started))
    wall = time.perf_counter() - started
    metrics = Metrics(
        engine="spark",
        events=total,
        scheduled_events=0,
        wall_s=wall,
        span_ms=log.span_ms,
        rows={name: t.num_rows for name, t in tables.items()},
        stages=stages,
        epochs=len(bounds),
    )
    notify(ReplayFinished(total, wall))
    return Result(tables=tables, state=state, metrics=metrics)


def _round_label(low: Lowered, job: int) -> str:
    states = [s.name for s in low.states.values() if s.level == job and low.writes_of(s.name)]
    tables = sorted({e.table for e in low.emits if e.level == job})
    parts = states + [f"emit {t}" for t in tables]
    return f"round {job + 1}: {', '.join(parts) or 'nothing'}"


def _tables(low: Lowered, log: Log, emitted, bounds) -> tuple[dict[str, pa.Table], dict]:
    """Output tables in processing order, and each epoch's rows (for streaming views)."""
    lsn = log.table.column("lsn")
    ts = log.table.column("ts")
    rows = []
    for index, parts in emitted.items():
        site = low.emits[index]
        names = [name for name, _x in site.fields]
        handler = low.handler_names[site.handler]
        for _chunk, frame in parts:
            if not frame.height:
                continue
            order = frame.get_column("_o").to_list()
            values = [frame.get_column(f"f_{n}").to_list() for n in names]
            for i, o in enumerate(order):
                rows.append(
                    (
                        (o, site.handler, site.n),
                        site.table,
                        handler,
                        {n: v[i] for n, v in zip(names, values)},
                    )
                )
    rows.sort(key=lambda r: r[0])
    lsns = lsn.take([r[0][0] for r in rows]).to_pylist() if rows else []
    tss = ts.take([r[0][0] for r in rows]).to_pylist() if rows else []
    by_table: dict[str, list] = {}
    epoch_of = _epoch_finder(bounds)
    per_epoch_rows: dict[int, dict[str, list]] = {}
    for r, lsn_, ts_ in zip(rows, lsns, tss):
        row = (lsn_, ts_, r[2], 0, r[3])
        by_table.setdefault(r[1], []).append(row)
        per_epoch_rows.setdefault(epoch_of(r[0][0]), {}).setdefault(r[1], []).append(row)
    tables = {name: build_table(name, rs) for name, rs in by_table.items()}
    per_epoch = {
        number: {name: build_table(name, rs) for name, rs in parts.items()}
        for number, parts in per_epoch_rows.items()
    }
    return tables, per_epoch


def _epoch_finder(bounds):
    import bisect

    starts = [lo for lo, _hi in bounds]
    return lambda o: bisect.bisect_right(starts, o) - 1


def _final_state(low: Lowered, program: Program, deltas) -> dict[str, dict]:
    state: dict[str, dict] = {name: {} for name in program.states}
    for name, frames in deltas.items():
        info = low.states[name]
        folded = combine_deltas(frames, info)
        keys = [folded.get_column(f"k{i}").to_list() for i in range(info.arity)]
        values = folded.get_column("v").to_list()
        if info.tuple_key:
            state[name] = dict(zip(zip(*keys), values))
        else:
            state[name] = dict(zip(keys[0], values))
    return state


def spark_map_epochs(session):
    """``map_epochs`` on Spark: one task per epoch, deltas shipped as a broadcast."""

    def run(task: PrefixTask, n: int, shipped: dict) -> pa.Table:
        sc = getattr(session, "sparkContext", None)
        broadcast = sc.broadcast(shipped) if (sc is not None and shipped) else None
        task.deltas = broadcast if broadcast is not None else shipped
        try:
            frame = session.range(0, n, 1, n).mapInArrow(task, TASK_SCHEMA)
            return frame.toArrow()
        finally:
            if broadcast is not None:
                broadcast.destroy()

    return run


def local_map_epochs(task: PrefixTask, n: int, shipped: dict) -> pa.Table:
    """``map_epochs`` in this process, one epoch after another (for tests of the algorithm)."""
    task.deltas = shipped
    batches = list(task([pa.record_batch({"id": list(range(n))})]))
    return pa.Table.from_batches(batches)
