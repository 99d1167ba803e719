"""Drive the passes of ``_passes`` on Spark and assemble the serial engine's result.

Per pass, in order: its events (from the log's DataFrame, persisted once, with the partition
value of every pass computed up front), unioned with the rows earlier passes sent it (probe
values, writes, scheduled events); repartitioned by the pass's partition value (one
partition for a sequential pass); sorted within partitions by position; one ``mapInArrow``
(``_pass_task.PassTask``). The pass's output is persisted, because later passes read the rows
it sent them, and its small rows (emitted rows and final state, in a few blobs per task, and
a statistics row per task) are collected: one Spark job per pass. Progress comes from Spark's
status tracker while the job runs: tasks finished, and events done in proportion.
"""

from __future__ import annotations

import pickle
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from ...errors import RestreamError
from ...log import Log
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
from ...result import Metrics, Result, build_table, quarantine_table
from ..serial import MAX_FLUSH, quarantine_warning
from . import _pass_task as T
from ._passes import BY_KEY, ORDER, SINGLE, PassPlan
from ._worker import KeysSpec, KeysTask, ProgramRef

__all__ = ["run_passes", "prepare", "run_jobs", "Setup", "Ran"]

_POS = ("_rs_t", "_rs_ph", "_rs_o", "_rs_sub")


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _kinds_sql(kinds: tuple[str, ...]) -> str:
    return ", ".join("'" + k.replace("\\", "\\\\").replace("'", "\\'") + "'" for k in kinds)


class _Watch:
    """Reports progress from Spark's status tracker while a pass's job runs, and cancels the
    job when ``cancelled()`` says so: a cancel that came after the last check but before the
    job started found no job to cancel."""

    def __init__(
        self, session: Any, group: str, on_tasks: Any, every_s: float = 0.25, cancelled=None
    ):
        self.every_s, self.session, self.cancelled = every_s, session, cancelled
        self.before: set[int] = set()
        try:
            self.tracker = session.sparkContext.statusTracker()
        except Exception:  # noqa: BLE001 - Spark Connect has none: progress per pass only
            self.tracker = None
        self.group = group
        self.on_tasks = on_tasks
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> _Watch:
        if self.tracker is not None:
            try:  # earlier passes' jobs share the group: count this pass's only
                self.before = set(self.tracker.getJobIdsForGroup(self.group))
            except Exception:  # noqa: BLE001
                self.before = set()
            self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join(timeout=2)

    def _loop(self) -> None:
        seen = (-1, -1)
        while not self.stop.wait(self.every_s):
            try:
                if self.cancelled is not None and self.cancelled():
                    # Again at every poll: the job may not have been submitted yet.
                    self.session.sparkContext.cancelJobGroup(self.group)
                    continue
                done = total = 0
                for job in self.tracker.getJobIdsForGroup(self.group):
                    if job in self.before:
                        continue
                    info = self.tracker.getJobInfo(job)
                    if info is None:
                        continue
                    for sid in info.stageIds:
                        stage = self.tracker.getStageInfo(sid)
                        if stage is not None:
                            done += stage.numCompletedTasks
                            total += stage.numTasks
                if (done, total) != seen and total:
                    seen = (done, total)
                    self.on_tasks(done, total)
            except Exception:  # noqa: BLE001 - progress is best effort
                pass


@dataclass
class Setup:
    """What every pass job of a replay shares: the log's DataFrame with the partition value
    of every pass, the columns that travel, and the output schema."""

    rep: Any
    pp: PassPlan
    program: Program
    log: Log
    events: Any
    session: Any
    df: Any
    log_kinds: dict[int, tuple[str, ...]]
    partitions: int
    columns: tuple[str, ...]
    slots: int
    ref: ProgramRef
    ddl: str
    started: float
    persisted: list = field(default_factory=list)
    wide: Any = None  # the passes' output schema when they forward events (Arrow)


@dataclass
class Ran:
    """What the passes over some events sent back to the driver."""

    emitted: list = field(default_factory=list)
    finals: dict[str, dict] = field(default_factory=dict)
    pending: list = field(default_factory=list)  # timed writes after the log's end
    quarantined: list = field(default_factory=list)
    carried: list = field(default_factory=list)  # (tag, position, blob) beyond an epoch
    scheduled: int = 0
    last_event: int | None = None
    path: dict[str, str] = field(default_factory=dict)
    stage_seconds: dict[str, float] = field(default_factory=dict)


def run_passes(rep: Any, pp: PassPlan, started: float, events: Any) -> Result:
    """Replay with the passes of ``pp`` (``rep`` is the engine's ``_Replay``)."""
    setup = prepare(rep, pp, started, events)
    try:
        if any(rep.options.get(k) for k in ("checkpoint", "resume", "start_from")):
            from ._pass_epochs import run_checkpointed

            return run_checkpointed(setup)
        total = len(setup.log)
        rep.notify(ReplayStarted("spark", total, 1, _names(pp), setup.log.span_ms))
        rep.notify(EpochStarted(0, total))
        ran = run_jobs(setup, setup.df, None, None, (0, total), total)
    finally:
        for frame in setup.persisted:
            try:
                frame.unpersist()
            except Exception:  # noqa: BLE001 - best effort on the way out
                pass
    apply_pending(setup.program, ran)
    per_table = table_rows(ran.emitted)
    tables = {name: build_table(name, rows) for name, rows in per_table.items()}
    wall = time.perf_counter() - started
    rep.notify(EpochFinished(0, total, wall, dict(tables)))
    rep.notify(Progress(total, total, wall))
    rep.notify(ReplayFinished(total, wall))
    return make_result(setup, ran, tables, total, 1, ran.quarantined)


def _names(pp: PassPlan) -> tuple[str, ...]:
    return tuple(f"{p.stage}" for p in pp.passes)


def prepare(rep: Any, pp: PassPlan, started: float, events: Any) -> Setup:
    """The log's DataFrame (kept for the next replay of the same log in this session), with
    every pass's partition value, and what the pass jobs share."""
    from ._engine import _prepare, jvm_key  # the engine module imports this one

    program: Program = rep.program
    log: Log = rep.log
    session = rep.session
    events = events or _prepare(log)
    passes = pp.passes
    df = _log_frame(session, log, events)
    # The kinds each pass takes from the log: a kind only ever scheduled costs no log scan.
    present = set(log.kinds)
    log_kinds = {p.index: tuple(k for k in p.event_kinds if k in present) for p in passes}
    persisted = []
    python_keys = []
    sql = []
    ref = ProgramRef.of(program)
    for p in passes:
        col = f"_rs_pk{p.index}"
        if p.partition == ORDER:
            sql.append(f"concat('i', CAST(_rs_o AS STRING), ';') AS {col}")
        elif p.partition == SINGLE:
            sql.append(f"'N' AS {col}")
        elif p.partition == BY_KEY:
            continue
        elif not log_kinds[p.index]:
            if any(q.reader == p.index for other in passes for q in other.serves):
                sql.append(f"CAST(NULL AS STRING) AS {col}")  # no log event reads there
            continue
        else:
            expr = jvm_key(p.partition, events)
            if expr is None:
                python_keys.append((col, p.partition, log_kinds[p.index]))
            else:
                sql.append(f"{expr} AS {col}")
    if python_keys:
        from pyspark.sql.types import StringType, StructField, StructType

        spec = KeysSpec(ref, events.columns, events.pickled, tuple(python_keys), tuple(df.columns))
        schema = StructType(
            list(df.schema.fields) + [StructField(c, StringType(), True) for c, _, _ in python_keys]
        )
        df = df.mapInArrow(KeysTask(spec), schema).persist()
        persisted.append(df)
    if sql:
        df = df.selectExpr("*", *sql)
    slots = sum(len(p.serves) for p in passes)
    out_schema = T.OUT_SCHEMA(slots)
    # Only the columns the program can read travel (all of them for quarantine rows).
    columns = events.columns if rep.on_error != "stop" else _used_columns(program, events.columns)
    wide = None
    if _forwards(rep, pp):
        # The events travel from pass to pass with the probe values they pick up: every
        # pass's output has room for them (their columns and their partition values).
        pks = [c for c in df.columns if c.startswith("_rs_pk")]
        extra = [pa.field(c, events.types[c]) for c in columns]
        extra += [pa.field(c, pa.string()) for c in pks]
        out_schema = wide = pa.schema([*out_schema, *extra])
    return Setup(
        rep=rep,
        pp=pp,
        program=program,
        log=log,
        events=events,
        session=session,
        df=df,
        log_kinds=log_kinds,
        partitions=max(1, int(rep.options.get("partitions") or rep.cores * 2)),
        columns=columns,
        slots=slots,
        ref=ref,
        ddl=", ".join(f"{_q(f.name)} {_ddl_type(f.type)}" for f in out_schema),
        started=started,
        persisted=persisted,
        wide=wide,
    )


def _forwards(rep: Any, pp: PassPlan) -> bool:
    """Whether the passes forward events (``_pass_task._plain``): every pass runs handlers over
    log events only, and what crosses passes is only probe values, so that each event can
    carry the values it reads from pass to pass instead of meeting them in a sort."""
    if pp.schedules or pp.reason or rep.on_error != "stop":
        return False
    if any(rep.options.get(k) for k in ("checkpoint", "resume", "start_from")):
        return False
    passes = pp.passes
    if not any(p.serves for p in passes):
        return False
    return all(p.handlers and not p.blind and not p.feeds for p in passes)


def run_jobs(
    setup: Setup,
    df: Any,
    carry: Any,
    epoch_end: tuple | None,
    done_range: tuple[int, int],
    total: int,
) -> Ran:
    """One Spark job per pass over the log events of ``df``, with the rows of ``carry`` (the
    state and waiting entries an epoch starts from, with their ``_rs_dest``); ``epoch_end``
    the position of the epoch's last event (None: the log's end)."""
    rep, program, session, log = setup.rep, setup.program, setup.session, setup.log
    passes = setup.pp.passes
    partitions = setup.partitions
    home_partition = {p.index: p.partition for p in passes}
    log_cols = [_q(c) for c in setup.columns]
    epochs = epoch_end is not None or carry is not None
    ran = Ran(finals={name: {} for name in program.states})
    ran.last_event = int(log.table.column("ts")[-1].as_py())
    last_ts = ran.last_event if epoch_end is None else epoch_end[0]
    base, span = done_range[0], done_range[1] - done_range[0]
    outputs: list[Any] = []
    try:
        for p in passes:
            rep._check_cancel()
            rep.notify(StageStarted(0, p.stage))
            pass_started = time.perf_counter()
            readers = sorted({probe.reader for probe in p.serves})
            parts = []
            senders = [q for q in passes[: p.index] if p.index in q.sends]
            forwarding = setup.wide is not None
            fed = (bool(senders) and not forwarding) or epochs
            raw = _raw_key(p.partition, setup.events) if not fed else None
            kinds = setup.log_kinds[p.index]
            if kinds and forwarding:
                # Each kind from the last earlier pass that had its events (they carry the
                # probe values picked up there), else from the log.
                carried = [c for c in df.columns if c.startswith("_rs_pk")]
                carried += [f"_rs_q{c}{s}" for s in range(setup.slots) for c in "ldb"]
                for source, some in _sources(passes, p, setup.log_kinds).items():
                    where = f"kind IN ({_kinds_sql(some)})"
                    if source is None:
                        frame = df.where(where)
                        parts.append(
                            frame.selectExpr(*log_cols, *[c for c in carried if c in df.columns])
                        )
                    else:
                        frame = outputs[source].where(f"_rs_kind = {T.FWD} AND {where}")
                        parts.append(frame.selectExpr(*log_cols, *carried))
                raw = raw or [f"_rs_pk{p.index}"]
            elif kinds and not fed:
                # Log events only: no position columns but their own, and the raw key columns
                # to partition by when the key is plain columns.
                ev = df.where(f"kind IN ({_kinds_sql(kinds)})").selectExpr(
                    *([] if raw is not None else [f"_rs_pk{p.index} AS _rs_pk"]),
                    *log_cols,
                    *[f"_rs_pk{r}" for r in readers],
                )
                parts.append(ev)
            elif kinds:
                ev = df.where(f"kind IN ({_kinds_sql(kinds)})").selectExpr(
                    *_POS,
                    "_rs_tag",
                    f"_rs_pk{p.index} AS _rs_pk",
                    *log_cols,
                    *[f"_rs_pk{r}" for r in readers],
                )
                parts.append(ev)
            consumed = [probe.slot for probe in p.consumes]
            for j, out in enumerate(outputs):
                if p.index not in passes[j].sends or forwarding:
                    continue
                parts.append(
                    out.where(
                        f"_rs_dest = {p.index} AND _rs_kind IN ({T.WRITE}, {T.SCHED}, {T.PROBE})"
                    ).selectExpr(
                        *_POS,
                        f"CAST(CASE _rs_kind WHEN {T.PROBE} THEN {T.TAG_PROBE} "
                        f"WHEN {T.WRITE} THEN {T.TAG_WRITE} ELSE {T.TAG_SCHED} END AS TINYINT) "
                        "AS _rs_tag",
                        "_rs_pk",
                        "_rs_b",
                        *[f"_rs_q{c}{s}" for s in consumed for c in "ldb"],
                    )
                )
            if carry is not None:
                parts.append(
                    carry.where(f"_rs_dest = {p.index}").selectExpr(
                        *_POS, "_rs_tag", "_rs_pk", "_rs_b"
                    )
                )
            n = 1 if p.partition == SINGLE else partitions
            if not parts:
                # Nothing reaches this pass (its kinds are not in the log, and no earlier pass
                # sends it anything): no job, and the path says why it ran no task.
                outputs.append(session.createDataFrame([], setup.ddl))
                for stage in p.stages or (p.stage,):
                    ran.path[stage] = p.describe(n) + " (no event reaches it)"
                ran.stage_seconds[p.stage] = time.perf_counter() - pass_started
                rep.notify(StageFinished(0, p.stage, ran.stage_seconds[p.stage], 0))
                continue
            rows = parts[0]
            for part in parts[1:]:
                rows = rows.unionByName(part, allowMissingColumns=True)
            if fed and "_rs_b" not in rows.columns:
                rows = rows.selectExpr("*", "CAST(NULL AS BINARY) AS _rs_b")
            for s in consumed:
                for c, typ in (("l", "BIGINT"), ("d", "DOUBLE"), ("b", "BINARY")):
                    if f"_rs_q{c}{s}" not in rows.columns and not forwarding:
                        rows = rows.selectExpr("*", f"CAST(NULL AS {typ}) AS _rs_q{c}{s}")
            if not fed:
                if p.partition == ORDER:
                    # In any partitions: no shuffle, each sorted as it is.
                    n = rows.rdd.getNumPartitions() if _classic(session) else partitions
                elif p.partition == SINGLE:
                    rows = rows.repartition(1)
                else:
                    rows = rows.repartition(n, *(raw or ["_rs_pk"]))
                rows = rows.sortWithinPartitions("ts", "lsn")
            else:
                rows = rows.repartition(n, "_rs_pk").sortWithinPartitions(*_POS, "_rs_tag")
            spec = T.PassSpec(
                program=setup.ref,
                index=p.index,
                columns=setup.columns,
                pickled_columns=setup.events.pickled & set(setup.columns),
                handlers=p.handlers,
                homes=p.homes,
                blind=dict(p.blind),
                feeds=dict(p.feeds),
                finals=p.finals,
                home_partition=home_partition,
                kind_passes=dict(setup.pp.kind_passes),
                serves=tuple(
                    (q.slot, q.state, q.key, q.handler, q.kinds, q.reader) for q in p.serves
                ),
                consumes=tuple((q.slot, q.state, q.key, q.handler) for q in p.consumes),
                slots=setup.slots,
                order_key=ORDER,
                single_key=SINGLE,
                max_flush=MAX_FLUSH,
                on_error=rep.on_error,
                plain=(
                    not fed
                    and bool(kinds)
                    and (
                        forwarding
                        or not (p.serves or p.consumes or p.blind or p.feeds or p.probe_kinds)
                    )
                    and not setup.pp.schedules
                    and rep.on_error == "stop"
                ),
                receives=fed or not kinds,
                # Writes or scheduled events from earlier passes (an event then waits for
                # the writes of its own runs there): any pass writing into this one's state,
                # or any scheduling at all in a program (conservatively).
                receives_writes=any(q.sends[p.index] == "writes" for q in senders),
                last_ts=last_ts,
                epoch_end=epoch_end,
                wide=setup.wide,
                forward=forwarding and _forwarded_to(passes, p, setup.log_kinds),
            )
            out = rows.mapInArrow(T.PassTask(spec), setup.ddl)
            done_before = base + p.index * span // len(passes)

            def on_tasks(done: int, tasks: int, at: int = done_before) -> None:
                share = span // len(passes)
                rep.notify(
                    Progress(at + share * done // tasks, total, time.perf_counter() - setup.started)
                )

            with _Watch(session, rep.job_group, on_tasks, cancelled=rep.cancelled):
                # One job computes the pass and keeps its rows, cut from their lineage:
                # later passes read them without planning this pass's plan again.
                out = out.localCheckpoint(eager=True)
            outputs.append(out)
            tasks, busy = _collect(out, ran)
            seconds = time.perf_counter() - pass_started
            ran.stage_seconds[p.stage] = seconds
            # Where the pass's time goes: its tasks' own work, summed (the rest is Spark's).
            ran.stage_seconds[f"{p.stage} (tasks, summed)"] = busy
            # Events that came from an earlier pass carried the values read there.
            carried = (
                " with the values read upstream on its events" if p.consumes and forwarding else ""
            )
            for stage in p.stages or (p.stage,):
                ran.path[stage] = p.describe(n) + (f" ({tasks} tasks)" if tasks else "") + carried
            rep.notify(StageFinished(0, p.stage, seconds, tasks))
            rep.notify(
                Progress(
                    base + (p.index + 1) * span // len(passes),
                    total,
                    time.perf_counter() - setup.started,
                )
            )
    finally:
        for frame in outputs:
            try:
                frame.unpersist()
            except Exception:  # noqa: BLE001 - best effort on the way out
                pass
    return ran


def _sources(passes: Any, p: Any, log_kinds: dict) -> dict[int | None, list[str]]:
    """Where forwarded pass ``p`` takes each of its kinds from: the last earlier pass that had
    events of that kind, or the log (None)."""
    sources: dict[int | None, list[str]] = {}
    for kind in log_kinds[p.index]:
        source = None
        for q in passes[: p.index]:
            if kind in log_kinds[q.index]:
                source = q.index
        sources.setdefault(source, []).append(kind)
    return sources


def _forwarded_to(passes: Any, p: Any, log_kinds: dict) -> bool:
    """Whether a later pass takes some of its events from ``p``."""
    return any(
        source == p.index
        for q in passes[p.index + 1 :]
        for source in _sources(passes, q, log_kinds)
    )


def _collect(out: Any, ran: Ran) -> tuple[int, float]:
    """Fold a pass's small rows into ``ran``; its number of tasks and their summed time."""
    small = out.where(
        f"_rs_kind IN ({T.EMIT}, {T.FINAL}, {T.STAT}, {T.ERROR}, {T.PEND}, {T.QUAR}, {T.CARRY})"
    ).select("_rs_kind", "_rs_dest", "_rs_b", *_POS)
    got = small.toArrow()
    kinds = got.column("_rs_kind").to_pylist()
    blobs = got.column("_rs_b").to_pylist()
    dests = got.column("_rs_dest").to_pylist()
    positions = list(zip(*(got.column(c).to_pylist() for c in _POS)))
    if T.ERROR in kinds:
        raise _TaskError(pickle.loads(blobs[kinds.index(T.ERROR)]))
    tasks = 0
    busy = 0.0
    for kind, dest, blob, position in zip(kinds, dests, blobs, positions):
        if kind == T.PEND:
            ran.pending.append((position, blob))
        elif kind == T.CARRY:
            ran.carried.append((dest, position, blob))
        elif kind == T.QUAR:
            ran.quarantined.extend(pickle.loads(blob))
        elif kind == T.EMIT:
            ran.emitted.extend(pickle.loads(blob))
        elif kind == T.FINAL:
            name, values = pickle.loads(blob)
            ran.finals[name].update(values)
        elif kind == T.STAT:
            tasks += 1
            _events, task_s, made, last_at = pickle.loads(blob)
            busy += task_s
            ran.scheduled += made
            if last_at is not None:
                ran.last_event = max(ran.last_event, last_at)
    return tasks, busy


def apply_pending(program: Program, ran: Ran) -> None:
    """Timed writes due after the log's end apply if an event at or after their time ran."""
    ran.pending.sort(key=lambda item: item[0])
    for position, blob in ran.pending:
        if position[0] <= ran.last_event:
            state, key, op = pickle.loads(blob)
            T.apply_op(ran.finals[state], program.states[state].default, key, op)


def table_rows(emitted: list) -> dict[str, list]:
    """Emitted rows per table in processing order: position, then handler; a run's rows
    keep their order."""
    emitted.sort(key=lambda r: (r[6], r[7]))
    per_table: dict[str, list] = {}
    for table, lsn, ts, handler, seq, fields, _pos, _h in emitted:
        per_table.setdefault(table, []).append((lsn, ts, handler, seq, fields))
    return per_table


def make_result(
    setup: Setup, ran: Ran, tables: dict, events: int, epochs: int, quarantined: list
) -> Result:
    """The replay's :class:`Result` from what the passes sent back."""
    rep = setup.rep
    wall = time.perf_counter() - setup.started
    metrics = Metrics(
        engine="spark",
        events=events,
        scheduled_events=ran.scheduled,
        wall_s=wall,
        span_ms=setup.log.span_ms,
        rows={name: t.num_rows for name, t in tables.items()},
        stages=ran.stage_seconds,
        epochs=epochs,
        path=ran.path,
    )
    result = Result(tables=tables, state=ran.finals, metrics=metrics)
    if rep.on_error != "stop":
        quarantined.sort(key=lambda q: (q[0], q[1]))
        result.quarantine = quarantine_table(q[2] for q in quarantined)
        result.on_error = rep.on_error
        note = quarantine_warning(result.quarantine, rep.on_error)
        if note:
            result.warnings.append(note)
    return result


_FRAMES: dict[tuple, Any] = {}


def _log_frame(session: Any, log: Log, events: Any) -> Any:
    """The log's events as a persisted DataFrame with their positions, made once per
    session and log (the two most recent are kept)."""
    key = (id(session), log.fingerprint)
    df = _FRAMES.get(key)
    if df is not None:
        return df
    df = session.createDataFrame(events.table.drop_columns(["_rs_o"]))
    # A log event's order is its lsn (unique, and increasing in log order).
    df = df.selectExpr(
        "*",
        "lsn AS _rs_o",
        "ts AS _rs_t",
        "CAST(2 AS TINYINT) AS _rs_ph",
        "X'' AS _rs_sub",
        f"CAST({T.TAG_EVENT} AS TINYINT) AS _rs_tag",
    ).persist()
    while len(_FRAMES) >= 2:
        old = _FRAMES.pop(next(iter(_FRAMES)))
        try:
            old.unpersist()
        except Exception:  # noqa: BLE001 - its session may be gone
            pass
    _FRAMES[key] = df
    return df


def _classic(session: Any) -> bool:
    try:
        session.sparkContext  # noqa: B018 - raises on Spark Connect
        return True
    except Exception:  # noqa: BLE001
        return False


def _used_columns(program: Program, columns: tuple[str, ...]) -> tuple[str, ...]:
    """The log columns the handlers read: ``lsn``, ``ts``, ``kind`` and every ``e.column``;
    all of them when a handler uses its event otherwise (passes it on, prints it...)."""
    import ast

    names = {"lsn", "ts", "kind"}
    for handler in program.handlers:
        arg = handler.event_arg
        if arg is None:
            continue
        attribute_of = {
            id(node.value)
            for node in ast.walk(handler.node)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
        }
        for node in ast.walk(handler.node):
            if isinstance(node, ast.Name) and node.id == arg:
                if id(node) not in attribute_of:
                    return columns
            elif (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == arg
            ):
                names.add(node.attr)
    return tuple(c for c in columns if c in names)


class _TaskError(RestreamError):
    """A pass's task raised: the driver replays serially to raise the exact error."""


def _raw_key(partition: str, events: Any) -> list[str] | None:
    """The log columns a partition key is made of, when it is a column or a tuple of columns
    of one plain type each: Spark then partitions by them, and equal keys meet as in Python."""
    import ast

    try:
        node = ast.parse(partition, mode="eval").body
    except SyntaxError:
        return None
    parts = node.elts if isinstance(node, ast.Tuple) else [node]
    names = []
    for part in parts:
        if not (
            isinstance(part, ast.Attribute)
            and isinstance(part.value, ast.Name)
            and part.value.id == "e"
            and part.attr in events.types
            and part.attr not in events.pickled
        ):
            return None
        names.append(_q(part.attr))
    return names or None


def _ddl_type(t: Any) -> str:
    import pyarrow as pa

    if t == pa.int8():
        return "TINYINT"
    if t == pa.int32():
        return "INT"
    if t == pa.int64():
        return "BIGINT"
    if t == pa.float64():
        return "DOUBLE"
    if t == pa.binary():
        return "BINARY"
    if t == pa.int16():
        return "SMALLINT"
    if t == pa.float32():
        return "FLOAT"
    if t == pa.bool_():
        return "BOOLEAN"
    return "STRING"
