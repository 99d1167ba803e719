"""The prefix path: epochs in parallel, joined by a prefix of their state deltas.

When a program lowers to column expressions (``restream_kit.compiler.lower``), the Spark engine runs
it without moving events at all. Each epoch of the log is one Spark task, which reads its own
slice of the canonical log (Parquet, by row groups) and evaluates the program as columns
(``prefix._columnar.run_epoch``). What one epoch needs from the epochs before it is only their
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
harmless because a task is a pure function of its epoch and the broadcast deltas. Between
rounds an epoch's events wait, decoded, as an Arrow file in a scratch directory that the
driver removes when the replay ends (``read_events``).

On a cluster, whose workers cannot read this machine's files, the epochs' events travel
through Spark instead (``ship_events``): one row per epoch, ``(chunk, events)``, the epoch's
needed columns as compressed Arrow IPC, in a DataFrame of one partition per epoch that the
first round caches (``persist``) for the later ones and the replay unpersists when it ends.
"""

from __future__ import annotations

import io
import shutil
import tempfile
import time
from typing import Any

import polars as pl
import pyarrow as pa

from ....compiler.lower import ColumnFacts, Lowered, NotLowerable, lower
from ....io.log import Log
from ....io.progress import (
    Progress,
    ReplayFinished,
    ReplayStarted,
    StageFinished,
    StageStarted,
)
from ....io.result import Metrics, Result
from ....model.program import Program
from .._faults import inject_fault
from .._uri_log import copy_facts
from ..passes._output_files import OutputFiles, drop_parts
from ._assembly import Rounds, assemble, from_ipc
from ._columnar import DELTA_CHUNK, needed_columns, read_states, run_epoch
from ._commits import start_deltas
from ._epoch_events import (
    epoch_payloads,
    eventsfrom_ipc,
    log_file,
    read_events,
    read_rows,
)
from ._output_parts import split_emits
from ._spans import default_epoch, task_spans

__all__ = [
    "default_epoch",
    "prefix_plan",
    "PrefixTask",
    "run_prefix",
    "TASK_SCHEMA",
    "EVENTS_SCHEMA",
]

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
    facts = _facts(log)
    try:
        if facts is not None:  # a URI log Spark copied: its rows stay out of the kernel
            return lower(program, facts, len(log)), None
        return lower(program, log.table), None
    except NotLowerable as exc:
        return None, str(exc)


def _facts(log: Log) -> dict[str, ColumnFacts] | None:
    """What lowering needs of the log's columns, without its rows: from Spark's ordered copy of
    a URI log (``_uri_log``), or the Parquet statistics of a file log's ordered copy; None
    when the table is read already, or the statistics are missing (lowering reads the table)."""
    if log.loaded:
        return None
    facts = copy_facts(log)
    if facts is None and log.streamed:
        stats = log.ordered().column_stats()
        if stats is not None:
            types = {f.name: f.type for f in log.schema}
            facts = {
                name: ColumnFacts(types[name], nulls, (lo, hi))
                for name, (nulls, lo, hi) in stats.items()
            }
    return facts


def _ipc(frame: pl.DataFrame) -> bytes:
    sink = io.BytesIO()
    frame.write_ipc(sink)
    return sink.getvalue()


#: The rows that carry the epochs' events to the tasks when they cannot read the log's file.
EVENTS_SCHEMA = "chunk int, events binary"


class PrefixTask:
    """One round over the tasks' spans of the log, rows of :data:`TASK_SCHEMA`.

    Its input is the tasks' numbers (the task reads its rows of the Parquet file at ``path``)
    or, when ``path`` is None, rows of :data:`EVENTS_SCHEMA` that carry them. ``bounds`` are
    the tasks' spans, ``(lo, hi)``; a task is one epoch (chunk) unless ``chunks`` says, per
    task, ``(first chunk, the positions where its chunks start)``: a checkpoint's epochs run
    several to a task, their deltas kept apart (``prefix._columnar._Epoch.delta``). A task's rows
    are labelled with its first chunk."""

    def __init__(
        self,
        low: Lowered,
        path: str | None,
        columns: list[str],
        bounds,
        job: int,
        deltas,
        cache=None,
        chunks=None,
    ):
        self.low = low
        self.path = path
        self.cache = cache  # a directory for the epochs' events between rounds (or None)
        self.columns = columns
        self.bounds = bounds
        self.chunks = chunks
        self.job = job
        self.deltas = deltas  # a Spark broadcast of {state: IPC bytes}, or the dict itself
        self.probes = None  # the run's history probes, evaluated in their round (``_history``)
        self.outputs = None  # where large emitted tables go as part files (``_output_parts``)

    def __call__(self, batches):
        inject_fault(f"round{self.job + 1}")  # a no-op unless $RESTREAM_FAULT asks for one
        shipped = None
        for batch in batches:
            carried = "events" in batch.schema.names
            chunks = batch.column("chunk" if carried else 0).to_pylist()
            payloads = batch.column("events").to_pylist() if carried else [None] * len(chunks)
            for chunk, payload in zip(chunks, payloads):
                if shipped is None:
                    shipped = getattr(self.deltas, "value", self.deltas) or {}
                yield self.one(int(chunk), shipped, payload)

    def one(
        self, number: int, shipped: dict[str, bytes], payload: bytes | None = None
    ) -> pa.RecordBatch:
        started = time.perf_counter()
        lo, hi = self.bounds[number]
        chunks = self.chunks[number] if self.chunks is not None else None
        chunk = chunks[0] if chunks is not None else number
        if payload is not None:
            events = eventsfrom_ipc(payload)
        elif self.path is None:
            raise RuntimeError(f"epoch {chunk}: no events were shipped and there is no file")
        else:
            events = read_events(self.path, self.columns, lo, hi, self.cache)

        def base(name: str) -> pl.DataFrame | None:
            if name not in shipped:
                return None
            return from_ipc(shipped[name]).filter(pl.col(DELTA_CHUNK) < chunk)

        carried = {
            int(key.split(":")[1]): from_ipc(data).to_series()
            for key, data in shipped.items()
            if key.startswith("read:") and key.endswith(f":{chunk}")
        }
        probed: dict[int, bytes] = {}
        also = None
        if self.probes is not None and self.probes.round == self.job:
            also = lambda ep: probed.update(self.probes.columns(ep))  # noqa: E731
        out_deltas, emits, reads = run_epoch(
            self.low, events, lo, self.job, base, carried, also, chunks
        )
        rows: dict[str, list] = {"chunk": [], "what": [], "name": [], "payload": [], "seconds": []}
        for name, frame in out_deltas.items():
            if chunks is None:
                frame = frame.with_columns(pl.lit(chunk, dtype=pl.Int32).alias(DELTA_CHUNK))
            _row(rows, chunk, "delta", name, _ipc(frame))
        emits, written = split_emits(self.low, self.outputs, emits, self.events_at(lo, hi))
        for index, frame in emits.items():
            _row(rows, chunk, "emit", str(index), _ipc(frame))
        for table, part in written.items():
            _row(rows, chunk, "file", table, part.encode())
        for site, column in reads.items():
            _row(rows, chunk, "read", str(site), _ipc(column.to_frame()))
        for slot, payload in probed.items():
            _row(rows, chunk, "probe", str(slot), payload)
        _row(rows, chunk, "time", "", b"")
        rows["seconds"] = [time.perf_counter() - started] * len(rows["chunk"])
        return pa.RecordBatch.from_pydict(rows, schema=_TASK_ARROW)

    def events_at(self, lo: int, hi: int):
        """``lsn`` and ``ts`` of the events at some positions of span ``lo``..``hi``, read
        from the log's file when a part file needs them."""
        return lambda at: read_rows(self.path, ["lsn", "ts"], lo, hi).take(pa.array(at - lo))


def _row(rows: dict, chunk: int, what: str, name: str, payload: bytes) -> None:
    rows["chunk"].append(chunk)
    rows["what"].append(what)
    rows["name"].append(name)
    rows["payload"].append(payload)


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
    ship_events: bool = False,
    history: Any = None,
    checkpoint: Any = None,
    start: Any = None,
    cores: int | None = None,
    until: int | None = None,
    outputs: OutputFiles | None = None,
    shared: str | None = None,
) -> Result:
    """Replay ``log`` in rounds. ``map_epochs(task, n, shipped, on_tasks, events)`` runs
    ``task`` over epochs 0..n-1 and returns the concatenated Arrow table of :data:`TASK_SCHEMA`
    rows (Spark, or a loop), calling ``on_tasks(done, n)`` as tasks finish: an epoch is one
    task per round, so progress moves with the epochs (the notebook asks for about ten).

    ``events`` is None when the tasks read the log's Parquet file (they run on this machine),
    else, with ``ship_events``, each epoch's needed columns as Arrow IPC (:func:`events_ipc`),
    which ``map_epochs`` must bring to the tasks itself; its ``release()``, if it has one, is
    called when the replay ends, however it ends.

    ``history``: (``_history.SparkHistory``, its ``PrefixProbes``) to record the run's
    history too (in the probes' round, one more than the program's when it needs it).

    ``checkpoint``: a :class:`restream_kit.io.checkpoint.Checkpointer` to commit every epoch
    to, once the rounds are done (``prefix._commits``); ``start``, the
    :class:`~restream_kit.io.checkpoint.Start` of a resume of it: the epochs after it run,
    from its state (as a delta before every epoch's).

    ``cores`` (the engine gives them with a checkpoint, whose epochs are what it commits, not
    what Spark need run): tasks of about equal events, as few as :func:`default_epoch` makes
    of them but at least one per core, each running several epochs or a piece of one, each
    piece's deltas and rows kept apart (``prefix._spans``).

    ``until``: the last epoch this run replays and commits (a wave, ``_waves``; None: to
    the log's end). A wave's result holds, as its state, where it left off
    (``prefix._commits.Carried``), and ``start`` may be such a value: the next wave's start.

    ``outputs``: where the tasks write a table's rows as part files once they are that many
    (``prefix._output_parts``; not with ``ship_events``, a checkpoint or ``until``, whose
    rows stay in memory): the result then holds those tables as files.

    ``shared``: the log's ordered copy in a cluster's shared directory (``_shared_log``),
    which the tasks read instead of having their events shipped."""
    cut_up = task_spans(log, epoch, start, until, cores)
    bounds, spans, chunks = cut_up.bounds, cut_up.spans, cut_up.chunks
    columns = needed_columns(low)
    outputs = None if ship_events or checkpoint is not None or until is not None else outputs
    path, events = _sources(log, columns, spans, ship_events, shared)
    total = len(log)
    rounds = low.levels if history is None else max(low.levels, history[1].round + 1)
    rounds = rounds if bounds else 0  # a resume of a complete checkpoint: nothing to run
    names = tuple(f"round {j + 1}" for j in range(rounds))
    notify(ReplayStarted("spark", total, cut_up.epochs, names, log.span_ms))
    took = Rounds(start_deltas(low, start))
    deltas, carried = took.deltas, took.carried
    stages: dict[str, float] = {}
    ran: dict[str, str] = {}  # what ran, per round (metrics.path)
    ahead = start.done if start is not None else 0  # a resume's events, done before
    reach = bounds[-1][1] if bounds else total  # the last event this run replays (a wave's)
    local = path and not shared  # (a cluster's tasks cannot reach this machine's scratch)
    cache = tempfile.mkdtemp(prefix="restream-epochs-") if rounds > 1 and local else None
    try:
        for job in range(rounds):
            check_cancel()
            label = _round_label(low, job)
            notify(StageStarted(0, label))
            round_started = time.perf_counter()
            shipped = _shipped(low, job, deltas, carried, history is not None)
            task = PrefixTask(low, path, columns, spans, job, shipped, cache, chunks)
            task.probes = history and history[1]
            task.outputs = outputs

            def on_tasks(done: int, tasks: int, job: int = job) -> None:
                # Work done so far, in events: every round replays every event once.
                share = (job * tasks + min(done, tasks)) / (rounds * tasks)
                events_done = ahead + int((reach - ahead) * share)
                notify(Progress(events_done, total, time.perf_counter() - started))

            table = map_epochs(task, len(spans), shipped, on_tasks, events)
            took.take(table, bounds)
            seconds = time.perf_counter() - round_started
            stages[label] = seconds
            # Where a round's time goes: the tasks' own work, summed (the rest is Spark's).
            stages[f"{label} (tasks, summed)"] = _busy(table)
            ran[label] = lowered_over(cut_up.epochs, checkpoint is not None, len(spans))
            notify(StageFinished(0, label, seconds, len(spans), epochs=cut_up.epochs))
            on_tasks(len(spans), len(spans))
        run = (low, program, log, epoch, start, until, outputs, cut_up.owners)
        state, tables = assemble(
            run, took, bounds, history, checkpoint, stages, notify, check_cancel
        )
    finally:
        if cache:
            shutil.rmtree(cache, ignore_errors=True)
        drop_parts(outputs)
        release = getattr(map_epochs, "release", None)
        if release is not None:
            release()
    return _result(log, state, tables, stages, ran, cut_up.epochs, start, started, notify)


def _shipped(low: Lowered, job: int, deltas: dict, carried: dict, probed: bool) -> dict:
    """What round ``job``'s tasks are sent: the deltas of the states it reads (of every
    state when a history's probes, which may read any, run) and the read columns carried."""
    wanted = set(deltas) if probed else read_states(low, job)
    shipped = {
        name: _ipc(pl.concat(frames, how="diagonal_relaxed"))
        for name, frames in deltas.items()
        if name in wanted
    }
    return {**shipped, **carried}


def _sources(log: Log, columns, spans, ship_events: bool, shared: str | None) -> tuple:
    """(the file the tasks read, or None; the events shipped to them, or None)."""
    if ship_events:
        return None, epoch_payloads(log, columns, spans)
    return shared or log_file(log), None


def _result(log: Log, state, tables, stages, ran, epochs: int, start, started, notify) -> Result:
    """The replay's result (told to ``notify`` as finished)."""
    total = len(log)
    wall = time.perf_counter() - started
    metrics = Metrics(
        engine="spark",
        events=total,
        scheduled_events=0,
        wall_s=wall,
        span_ms=log.span_ms,
        rows={name: t.num_rows for name, t in tables.items()},
        stages=stages,
        epochs=epochs,
        path=ran,
    )
    if not ran:
        ran["resume"] = "lowered to columns: nothing left to run, every epoch was committed"
    notify(ReplayFinished(total, wall))
    result = Result(tables=tables, state=state, metrics=metrics)
    if start is not None:
        result.resumed_from_epoch = start.next_epoch
    return result


def _busy(table: pa.Table) -> float:
    """The seconds a round's tasks worked, summed (one figure a task, however many rows)."""
    busy = {row["chunk"]: row["seconds"] for row in table.select(["chunk", "seconds"]).to_pylist()}
    return sum(busy.values())


def lowered_over(epochs: int, committed: bool = False, tasks: int | None = None) -> str:
    """What ran (with the number of ``tasks``), or will run, on the prefix path
    (``metrics.path``, the engine's layout); ``committed``: with a checkpoint."""
    said = f"lowered to columns, parallel over {_count(epochs, 'epoch')}"
    if tasks is not None:
        said += f" ({_count(tasks, 'task')})"
    return said + (", each epoch committed to the checkpoint" if committed else "")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _round_label(low: Lowered, job: int) -> str:
    states = [s.name for s in low.states.values() if s.level == job and low.writes_of(s.name)]
    tables = sorted({e.table for e in low.emits if e.level == job})
    parts = states + [f"emit {t}" for t in tables]
    return f"round {job + 1}: {', '.join(parts) or 'nothing'}"
