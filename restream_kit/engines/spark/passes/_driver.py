"""Drive the passes of ``passes._plan`` on Spark and assemble the serial engine's result.

Per pass, in order: its events (from the log's DataFrame, persisted once, with the partition
value of every pass computed up front), unioned with the rows earlier passes sent it (probe
values, writes, scheduled events); repartitioned by the pass's partition value (one
partition for a sequential pass); sorted within partitions by position; one ``mapInArrow``
(``passes._task.PassTask``). The pass's output is persisted, because later passes read the rows
it sent them, and its small rows (emitted rows and final state, in a few blobs per task, and
a statistics row per task) are collected: one Spark job per pass. Progress comes from Spark's
status tracker while the job runs: tasks finished, and events done in proportion.
"""

from __future__ import annotations

import pickle
import shutil
import time
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ....io.progress import (
    EpochFinished,
    EpochStarted,
    Progress,
    ReplayFinished,
    ReplayStarted,
    StageFinished,
    StageStarted,
)
from ....io.result import Result
from ....model.errors import RestreamError
from ...serial import MAX_FLUSH
from .._job_watch import JobWatch
from . import _rows as W
from ._emitted import emitted_tables, unpack_emitted
from ._local_arrangement import local_input, marker_frame, values_sent
from ._lookups import looked_up_input, lookups_served
from ._output_files import drop_parts, in_memory, output_files
from ._plan import ORDER, SINGLE, PassPlan, passes_of
from ._results import finish_finals, handler_names, make_result
from ._setup import (
    Setup,
    arranged,
    classic,
    kinds_sql,
    prepare,
    quoted,
    raw_key,
    unquoted,
)
from ._start_shares import share_frame, shares_rows
from ._task import PassTask
from ._window_shapes import fuses_windows
from ._zipped import PART, VALUES, sources, takes_from_passes, zip_targets

__all__ = ["run_passes", "run_jobs", "shared_passes", "Ran"]

_POS = ("_rs_t", "_rs_ph", "_rs_o", "_rs_sub")


@dataclass
class Ran:
    """What the passes over some events sent back to the driver."""

    emitted: list = field(default_factory=list)  # rows as tuples (see ``passes._emitted``)
    emitted_columns: dict[str, list] = field(default_factory=dict)  # rows as columns, by table
    finals: dict[str, dict] = field(default_factory=dict)
    pending: list = field(default_factory=list)  # timed writes after the log's end
    quarantined: list = field(default_factory=list)
    # (tag, position, blob) waiting at each epoch's end, per epoch (``passes._boundaries``).
    carried: dict[int, list] = field(default_factory=dict)
    # A checkpoint's epochs' ends in one run (``passes._boundaries``): per epoch, the states' values
    # and the events scheduled so far, summed over the tasks; and each epoch's emitted rows.
    snapshots: dict[int, list] = field(default_factory=dict)
    # States read through copies: each key's position where it came in, from the folds'
    # tasks, to restore the serial engine's order over the tasks (``passes._copies``).
    orders: dict[str, dict] = field(default_factory=dict)
    emitted_at: dict[int, tuple[list, dict]] = field(default_factory=dict)
    scheduled: int = 0
    last_event: int | None = None
    path: dict[str, str] = field(default_factory=dict)
    history: list = field(default_factory=list)  # blobs of recorded history values
    stage_seconds: dict[str, float] = field(default_factory=dict)
    task_events: dict[str, list[int]] = field(default_factory=dict)  # per stage, per task
    looped: set = field(default_factory=set)  # stages whose tasks ran the serial engine's loop


def run_passes(rep: Any, pp: PassPlan, started: float, events: Any) -> Result:
    """Replay with the passes of ``pp`` (``rep`` is the engine's ``_Replay``)."""
    checkpointing = any(getattr(rep.options, k) for k in ("checkpoint", "resume", "start_from"))
    start = None
    if checkpointing:
        from ._epochs import run_checkpointed, start_state

        start = start_state(rep)
    if (start is not None or rep.until is not None) and any(p.lookup for p in pp.passes):
        # From a start state the passes forward events only where the driver deals each pass
        # its share of the start by its key (``passes._setup.prepare``); a looked-up pass's
        # keys are known only as its events come: the same program takes the copies.
        pp = passes_of(rep.program, lookups=False)
    setup = prepare(rep, pp, started, events, start)
    setup.outputs = output_files(setup, checkpointing)
    try:
        if checkpointing:
            return run_checkpointed(setup)
        total = len(setup.log)
        rep.notify(ReplayStarted("spark", total, 1, _names(pp), setup.log.span_ms))
        rep.notify(EpochStarted(0, total))
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
    rep.notify(EpochFinished(0, total, wall, in_memory(tables)))
    rep.notify(Progress(total, total, wall))
    rep.notify(ReplayFinished(total, wall))
    return make_result(setup, ran, tables, total, 1, ran.quarantined)


def _names(pp: PassPlan) -> tuple[str, ...]:
    return tuple(f"{p.stage}" for p in pp.passes)


def run_jobs(
    setup: Setup,
    df: Any,
    carry: Any,
    done_range: tuple[int, int],
    total: int,
    bounds: tuple = (),
    starts: Any = None,
) -> Ran:
    """One Spark job per pass over the log events of ``df``, with the rows of ``carry`` (the
    state and waiting entries a replay starts from, with their ``_rs_dest``); ``bounds`` the
    ends of a checkpoint's epochs, which every task reports as it passes them
    (``passes._boundaries``). A pass that runs the serial engine's loop takes its share of the
    start from ``starts`` instead (``passes._start_shares``): a file per partition where the driver
    arranged its events, else rows before its events."""
    rep, program, session, log = setup.rep, setup.program, setup.session, setup.log
    passes = setup.pp.passes
    partitions = setup.partitions
    home_partition = {p.index: p.partition for p in passes}
    log_cols = [quoted(c) for c in setup.columns]
    ran = Ran(finals={name: {} for name in program.states})
    ran.last_event = log.last_ts  # (from Log.summary for a log read by Spark)
    last_ts = ran.last_event
    base, span = done_range[0], done_range[1] - done_range[0]
    outputs: list[Any] = []
    sent: dict[int, dict[int, list[str]]] = {}  # passes the driver arranged: values' files
    zips = bool(setup.zips)
    try:
        for p in passes:
            rep._check_cancel()
            rep.notify(StageStarted(0, p.stage))
            pass_started = time.perf_counter()
            readers = sorted({probe.reader for probe in p.serves})
            parts = []
            one_kind = None
            senders = [q for q in passes[: p.index] if p.index in q.sends]
            forwarding = setup.wide is not None
            kinds = setup.log_kinds[p.index]
            fed_by_passes = bool(senders) and not forwarding
            # A replay from a start state: a pass fed by nothing else keeps the serial
            # engine's loop, its share of the start as rows before its events.
            shared = starts is not None and p.index in starts.frames
            share = starts.frames[p.index] if shared else None
            fed = fed_by_passes or (carry is not None and not shared)
            raw = raw_key(p.partition, setup.events) if not fed else None
            plain = _plain(setup, p, fed, kinds, forwarding)
            n = 1 if p.partition == SINGLE else partitions
            zipped = None
            files: tuple = ()  # a looked-up pass's, when the driver arranged the passes
            packed = False  # whether its events come packed (``passes._setup.arranged``)
            local = None  # where its tasks read their events, when the driver arranged them
            if p.index in setup.local:
                local, rows = local_input(setup, sent.get(p.index, {}), p, n)
                if starts is not None:
                    local = replace(
                        local, after=starts.after, starts=starts.shares.get(p.index, ())
                    )
                if setup.until is not None:
                    local = replace(local, until=setup.until)
                zipped = rows if p.index in setup.zips else None
                if len(kinds) == 1 and plain:
                    one_kind = kinds[0]
                parts.append(rows)
            elif p.lookup:
                if kinds and setup.local:  # each task reads the files sent its partition
                    files = tuple(tuple(sent.get(p.index, {}).get(i, ())) for i in range(n))
                    parts.append(marker_frame(session, n))
                elif kinds:  # (else no event reaches it: no job)
                    parts.append(looked_up_input(outputs, p))
            elif kinds and forwarding and zips and takes_from_passes(passes, p, setup.log_kinds):
                zipped, packed = _zipped_input(setup, outputs, p, n)
                parts.append(zipped)
            elif kinds and forwarding:
                # Each kind from the last earlier pass that had its events (they carry the
                # probe values picked up there), else from the log.
                carried = list(setup.forward_pks) + [PART.format(j) for j in setup.zips]
                carried += [f"_rs_q{c}{s}" for s in range(setup.slots) for c in "ldb"]
                for source, some in sources(passes, p, setup.log_kinds).items():
                    where = f"kind IN ({kinds_sql(some)})"
                    if source is None:
                        frame = df.where(where)
                        parts.append(
                            frame.selectExpr(*log_cols, *[c for c in carried if c in df.columns])
                        )
                    else:
                        frame = outputs[source].where(f"_rs_kind = {W.FWD} AND {where}")
                        parts.append(frame.selectExpr(*log_cols, *carried))
                raw = raw or [f"_rs_pk{p.index}"]
            elif kinds and not fed:
                # Log events only: no position columns but their own, and the raw key columns
                # to partition by when the key is plain columns; not their kind, when the
                # inlined loop takes events of one kind.
                if len(kinds) == 1 and plain:
                    one_kind = kinds[0]
                ev = df.where(f"kind IN ({kinds_sql(kinds)})").selectExpr(
                    *([] if raw is not None else [f"_rs_pk{p.index} AS _rs_pk"]),
                    *[c for c in log_cols if one_kind is None or c != "`kind`"],
                    *[f"_rs_pk{r}" for r in readers],
                )
                parts.append(ev)
            elif kinds:
                ev = df.where(f"kind IN ({kinds_sql(kinds)})").selectExpr(
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
                        f"_rs_dest = {p.index} AND _rs_kind IN "
                        f"({W.WRITE}, {W.SCHED}, {W.PROBE}, {W.VERS})"
                    ).selectExpr(
                        *_POS,
                        f"CAST(CASE _rs_kind WHEN {W.PROBE} THEN {W.TAG_PROBE} "
                        f"WHEN {W.WRITE} THEN {W.TAG_WRITE} WHEN {W.VERS} THEN {W.TAG_VERS} "
                        f"ELSE {W.TAG_SCHED} END AS TINYINT) AS _rs_tag",
                        "_rs_pk",
                        "_rs_b",
                        *[f"_rs_q{c}{s}" for s in consumed for c in "ldb"],
                    )
                )
            if carry is not None and not shared:
                parts.append(
                    carry.where(f"_rs_dest = {p.index}").selectExpr(
                        *_POS, "_rs_tag", "_rs_pk", "_rs_b"
                    )
                )
            if share is not None:
                parts.append(share)
            if not parts:
                # Nothing reaches this pass (its kinds are not in the log, and no earlier pass
                # sends it anything): no job, and the path says why it ran no task.
                outputs.append(session.createDataFrame([], setup.ddl))
                for stage in p.stages or (p.stage,):
                    ran.path[stage] = p.describe(n, False) + " (no event reaches it)"
                ran.stage_seconds[p.stage] = time.perf_counter() - pass_started
                rep.notify(
                    StageFinished(0, p.stage, ran.stage_seconds[p.stage], 0, len(bounds) + 1)
                )
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
            if zipped is not None or local is not None or files:
                pass  # arranged, and joined to its values by position, in the task
            elif p.lookup:
                rows = rows.repartition(n, "_rs_pk")  # (its task sorts its events: _lookups)
            elif not fed:
                if p.partition == ORDER:
                    # In any partitions: no shuffle, each sorted as it is; but a frame in
                    # fewer partitions than tasks run at once (a log read from its file
                    # may be: Spark splits a file by row groups) is spread round-robin
                    # first, or the pass is one task.
                    n = rows.rdd.getNumPartitions() if classic(session) else partitions
                    if n < min(partitions, rep.cores):
                        rows, n = rows.repartition(partitions), partitions
                elif p.partition == SINGLE:
                    rows = rows.repartition(1)
                else:
                    rows = rows.repartition(n, *(raw or ["_rs_pk"]))
                rows = rows.sortWithinPartitions("ts", "lsn")
                if (
                    not setup.python_keys
                    and share is None
                    and not (forwarding and any(sources(passes, p, setup.log_kinds)))
                ):
                    # From the log alone, and partition values from SQL: the same next time.
                    rows, packed = arranged(setup, rows)
            else:
                rows = rows.repartition(n, "_rs_pk").sortWithinPartitions(*_POS, "_rs_tag")
            spec = W.PassSpec(
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
                home_elements={q.index: q.elements for q in passes if q.elements},
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
                plain=plain,
                ships_events=bool(p.schedules),
                receives=fed or not kinds,
                # Writes or scheduled events from earlier passes (an event then waits for
                # the writes of its own runs there): any pass writing into this one's state,
                # or any scheduling at all in a program (conservatively).
                receives_writes=any(q.sends[p.index] == "writes" for q in senders),
                last_ts=last_ts,
                bounds=bounds,
                wide=setup.wide,
                forward=forwarding and _forwarded_to(passes, p, setup.log_kinds),
                # Later passes take their events from the log and only the values read here
                # from this pass (``passes._zipped``): its forwarded rows need little but those.
                zip_to=zip_targets(setup, p),
                zip_by={
                    j: () if setup.local else tuple(unquoted(c) for c in by)
                    for j, by in setup.zips.items()
                },
                values_dir=setup.values_dir,
                outputs=setup.outputs,
                local=local,
                shares=share is not None,
                zipped=zipped is not None,
                packed=packed,
                copies=p.copies,
                versions_to=p.versions_to,
                spread=setup.spread,
                ranges=setup.ranges,
                lookups=lookups_served(setup, p),
                looked_up=bool(p.lookup),
                looked_up_files=files,
                one_kind=one_kind,
                closes_once=setup.closes_once,
                folds=setup.folds,
                history=rep.history_sites(p, setup.columns)
                if getattr(rep, "history", None)
                else (),
            )
            out = rows.mapInArrow(PassTask(spec), setup.ddl)
            done_before = base + p.index * span // len(passes)

            def on_tasks(done: int, tasks: int, at: int = done_before) -> None:
                share = span // len(passes)
                rep.notify(
                    Progress(at + share * done // tasks, total, time.perf_counter() - setup.started)
                )

            with JobWatch(session, rep.job_group, on_tasks, cancelled=rep.cancelled):
                if p.index == len(passes) - 1 or setup.local:
                    # The last pass: no later pass reads its rows, so one job computes them
                    # and brings them back. So with passes the driver arranged: what later
                    # passes read of theirs went to files, whose paths come back here.
                    got = out.select("_rs_kind", "_rs_dest", "_rs_pk", "_rs_b", *_POS).toArrow()
                    if setup.local:
                        values_sent(got, sent)
                else:
                    # Its rows are kept, cut from their lineage: later passes read them
                    # without planning this pass's plan again. Not eagerly: the job that
                    # brings its small rows back computes and keeps them, in one job.
                    out = out.localCheckpoint(eager=False)
                    got = None
                outputs.append(out)  # (unpersisted at the end, whatever happens)
                tasks, busy = _collect(out if got is None else got, ran, p.stage)
            seconds = time.perf_counter() - pass_started
            ran.stage_seconds[p.stage] = seconds
            # Where the pass's time goes: its tasks' own work, summed (the rest is Spark's).
            ran.stage_seconds[f"{p.stage} (tasks, summed)"] = busy
            # Where its events came from, and the values read upstream with them.
            where_from = (
                ", its events arranged by the driver into partitions of balanced keys"
                if local is not None
                else ", its events from the log's arrangement"
            )
            carried = where_from if local is not None and not (p.consumes and forwarding) else ""
            if p.consumes and forwarding:
                # Events that came from an earlier pass carried the values read there.
                carried = (
                    ", with the values read upstream on its events"
                    if zipped is None
                    else where_from + ", joined to the values read upstream by position in "
                    "each partition"
                )
            if p.index in setup.ranges:
                carried += (
                    f", by {n} ranges of the log, each copy kept from the state at its range's"
                    " start and the versions within the range"
                )
            if share is not None or (starts is not None and p.index in starts.shares):
                carried += ", each task started from its partition's share of the state"
            if rep.on_error != "stop" and p.stage in ran.looped:
                carried += ", a run that raises undone by the serial engine's guarded loop"
            for stage in p.stages or (p.stage,):
                ran.path[stage] = (
                    p.describe(n, fuses_windows(spec))
                    + carried
                    + (f" ({tasks} tasks)" if tasks else "")
                )
            # (Over every epoch of a checkpoint run at once: ``passes._boundaries``.)
            rep.notify(StageFinished(0, p.stage, seconds, tasks, len(bounds) + 1))
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


def shared_passes(setup: Setup, state: dict) -> dict[int, Any]:
    """The passes of a replay from ``state``, their events shuffled by Spark, that take their
    share of it as rows before their events and keep the serial engine's loop
    (``passes._start_shares``): fed by nothing else, and running that loop. Each with those rows
    (None: it has no share)."""
    passes = setup.pp.passes
    forwarding = setup.wide is not None
    found: dict[int, Any] = {}
    for p in passes:
        if p.index in setup.local or not shares_rows(setup.pp, p, state):
            continue
        fed = any(p.index in q.sends for q in passes[: p.index]) and not forwarding
        if not _plain(setup, p, fed, setup.log_kinds[p.index], forwarding):
            continue
        try:
            found[p.index] = share_frame(setup, p, state, raw_key(p.partition, setup.events))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
            continue  # a key not of its columns' types: its share goes as the others' rows
    return found


def _plain(setup: Setup, p: Any, fed: bool, kinds: tuple, forwarding: bool) -> bool:
    """Whether pass ``p`` runs the serial engine's inlined loop (``passes._plain.run_plain``): it
    takes log events only, and sends on nothing but what that loop can send (probe values
    carried by forwarded events, writes into later passes' state, events scheduled for later
    passes); under ``on_error`` skip or quarantine, its guarded loop (``passes._shipping``)."""
    if fed or not kinds or p.feeds:
        return False
    if (p.serves or p.consumes or p.probe_kinds) and not forwarding:
        return False
    kind_passes = setup.pp.kind_passes
    return not any(p.index in kind_passes.get(kind, ()) for kind in p.schedules)


def _zipped_input(setup: Any, outputs: list, p: Any, n: int) -> tuple[Any, bool]:
    """Zipped pass ``p``'s input: the values packed for it by earlier passes, partitioned by
    its partition columns, then its events from the log, arranged alike; and whether the
    events come packed."""
    by = setup.zips[p.index]
    df = setup.df
    kinds = setup.log_kinds[p.index]
    parts = [PART.format(j) for j in setup.zips]
    extra = [c for c in (*setup.forward_pks, *parts) if c in df.columns]
    events = (
        df.where(f"kind IN ({kinds_sql(kinds)})")
        .selectExpr(*[quoted(c) for c in setup.columns], *extra)
        .repartition(n, *by)
        .sortWithinPartitions("ts", "lsn")
    )
    packed = False
    if not setup.python_keys:
        events, packed = arranged(setup, events, by, n)
    values = None
    for source in sources(setup.pp.passes, p, setup.log_kinds):
        if source is None:
            continue
        frame = (
            outputs[source]
            .where(f"_rs_kind = {W.FWD} AND _rs_dest = {p.index}")
            .selectExpr(*by, f"_rs_b AS {VALUES}")
        )
        values = frame if values is None else values.unionByName(frame)
    values = values.repartition(n, *by)
    return values.unionByName(events, allowMissingColumns=True), packed


def _forwarded_to(passes: Any, p: Any, log_kinds: dict) -> bool:
    """Whether a later pass takes some of its events from ``p``."""
    return any(
        source == p.index for q in passes[p.index + 1 :] for source in sources(passes, q, log_kinds)
    )


_SMALL = (W.EMIT, W.FINAL, W.STAT, W.ERROR, W.PEND, W.QUAR, W.CARRY, W.HIST, W.SNAP)


def _collect(out: Any, ran: Ran, stage: str) -> tuple[int, float]:
    """Fold a pass's small rows into ``ran`` (``out`` its output, a DataFrame, or all of it
    already on the driver as an Arrow table); its number of tasks and their summed time."""
    if isinstance(out, pa.Table):
        got = out.filter(
            pc.is_in(out.column("_rs_kind"), pa.array(_SMALL, out.schema.field("_rs_kind").type))
        )
    else:
        small = out.where(f"_rs_kind IN ({', '.join(map(str, _SMALL))})")
        got = small.select("_rs_kind", "_rs_dest", "_rs_b", *_POS).toArrow()
    kinds = got.column("_rs_kind").to_pylist()
    blobs = got.column("_rs_b").to_pylist()
    dests = got.column("_rs_dest").to_pylist()
    positions = list(zip(*(got.column(c).to_pylist() for c in _POS)))
    if W.ERROR in kinds:
        raise _TaskError(pickle.loads(blobs[kinds.index(W.ERROR)]))
    tasks = 0
    busy = 0.0
    for kind, dest, blob, position in zip(kinds, dests, blobs, positions):
        if kind == W.PEND:
            ran.pending.append((position, blob))
        elif kind == W.CARRY:
            tag, epoch = W.carry_parts(dest)
            if tag == W.TAG_MANY:  # a task's entries at one end, in one blob
                ran.carried.setdefault(epoch, []).extend(pickle.loads(blob))
            else:
                ran.carried.setdefault(epoch, []).append((tag, position, blob))
        elif kind == W.SNAP:
            values, made, order = pickle.loads(blob)
            snapshot = ran.snapshots.setdefault(dest, [{}, 0, {}])
            for name, some in values.items():
                snapshot[0].setdefault(name, {}).update(some)
            snapshot[1] += made
            for name, where in order.items():
                snapshot[2].setdefault(name, {}).update(where)
        elif kind == W.HIST:
            ran.history.append(blob)
        elif kind == W.QUAR:
            ran.quarantined.extend(pickle.loads(blob))
        elif kind == W.EMIT and dest >= 0:  # one epoch's, of a checkpoint's run at once
            unpack_emitted(blob, *ran.emitted_at.setdefault(dest, ([], {})))
        elif kind == W.EMIT:
            unpack_emitted(blob, ran.emitted, ran.emitted_columns)
        elif kind == W.FINAL:
            name, values, *order = pickle.loads(blob)
            if values is not None:
                ran.finals[name].update(values)
            if order:  # a fold's: where its keys came in
                ran.orders.setdefault(name, {}).update(order[0])
        elif kind == W.STAT:
            tasks += 1
            events, task_s, made, last_at, *looped = pickle.loads(blob)
            if looped:
                ran.looped.add(stage)
            ran.task_events.setdefault(stage, []).append(events)
            busy += task_s
            ran.scheduled += made
            if last_at is not None:
                ran.last_event = max(ran.last_event, last_at)
    return tasks, busy


class _TaskError(RestreamError):
    """A pass's task raised: the driver replays serially to raise the exact error."""
