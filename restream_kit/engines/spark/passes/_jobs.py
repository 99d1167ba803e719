"""One Spark job per pass, in order, over some of the log's events: the passes of one run
(a replay, or a checkpointed replay's run over every epoch at once, ``passes._epochs``).

Per pass: its input from its source (``passes._sources``: the log's events, those forwarded
by earlier passes, driver-arranged files, ...), one ``mapInArrow`` (``passes._task.PassTask``)
over it, and its output kept for the later passes that read the rows it sent them; its small
rows (emitted rows and final state in a few blobs per task, a statistics row per task) are
collected, in the same job. Progress comes from Spark's status tracker while the job runs:
tasks finished, and events done in proportion.
"""

from __future__ import annotations

import pickle
import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ....io.progress import Progress, StageFinished, StageStarted
from ....model.errors import RestreamError
from ...serial import MAX_FLUSH
from .._job_watch import JobWatch
from . import _rows as W
from ._emitted import unpack_emitted
from ._local_arrangement import values_sent
from ._lookups import lookups_served
from ._narrow_files import narrow_targets
from ._plan import ORDER, SINGLE, PassPlan
from ._setup import Setup
from ._sources import (
    POSITION,
    Arranged,
    LogEvents,
    NarrowSent,
    Run,
    Source,
    Zipped,
    source_of,
)
from ._sql import raw_key, unquoted
from ._start_shares import share_frame, shares_rows
from ._task import PassTask
from ._window_shapes import fuses_windows
from ._zipped import sources, zip_targets

__all__ = ["Ran", "run_jobs", "shared_passes", "stage_names", "TaskError"]


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
    lazy: dict[str, set] = field(default_factory=dict)  # per stage, sessions run lazily


def stage_names(pp: PassPlan) -> tuple[str, ...]:
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
    rep, passes = setup.rep, setup.pp.passes
    ran = Ran(finals={name: {} for name in setup.program.states})
    ran.last_event = setup.log.last_ts  # (from Log.summary for a log read by Spark)
    run = Run(setup, df, carry, starts)
    try:
        for p in passes:
            rep._check_cancel()
            rep.notify(StageStarted(0, p.stage))
            started = time.perf_counter()
            plain = _plain(
                setup,
                p,
                run.fed(p),
                setup.log_kinds[p.index],
                setup.wide is not None,
                _own(run, bounds),
            )
            source = source_of(run, p, plain)
            if source is None:
                _unreached(run, p, ran, started, len(bounds))
                continue
            rows, n = source.frame(run, p)
            spec = _spec(run, p, source, plain, bounds)
            out = rows.mapInArrow(PassTask(spec), setup.ddl)
            tasks, busy = _job(run, p, out, ran, done_range, total)
            seconds = time.perf_counter() - started
            ran.stage_seconds[p.stage] = seconds
            # Where the pass's time goes: its tasks' own work, summed (the rest is Spark's).
            ran.stage_seconds[f"{p.stage} (tasks, summed)"] = busy
            fused = fuses_windows(spec) or bool(spec.narrow)
            lazy = ran.lazy.get(p.stage, ())
            said = p.describe(n, fused, lazy) + _carried(run, p, source, n, ran)
            for stage in p.stages or (p.stage,):
                ran.path[stage] = said + (f" ({tasks} tasks)" if tasks else "")
            # (Over every epoch of a checkpoint run at once: ``passes._boundaries``.)
            rep.notify(StageFinished(0, p.stage, seconds, tasks, len(bounds) + 1))
            base, span = done_range[0], done_range[1] - done_range[0]
            done = base + (p.index + 1) * span // len(passes)
            rep.notify(Progress(done, total, time.perf_counter() - setup.started))
    finally:
        for frame in run.outputs:
            try:
                frame.unpersist()
            except Exception:  # noqa: BLE001 - best effort on the way out
                pass
    return ran


def _unreached(run: Run, p: Any, ran: Ran, started: float, epochs: int) -> None:
    """Nothing reaches pass ``p`` (its kinds are not in the log, and no earlier pass sends it
    anything): no job, and the path says why it ran no task."""
    setup = run.setup
    run.outputs.append(setup.session.createDataFrame([], setup.ddl))
    for stage in p.stages or (p.stage,):
        ran.path[stage] = p.describe(run.partitions(p), False) + " (no event reaches it)"
    ran.stage_seconds[p.stage] = time.perf_counter() - started
    setup.rep.notify(StageFinished(0, p.stage, ran.stage_seconds[p.stage], 0, epochs + 1))


def _spec(run: Run, p: Any, source: Source, plain: bool, bounds: tuple) -> W.PassSpec:
    """What the tasks of pass ``p`` need, its input's ``source`` among it."""
    setup, rep = run.setup, run.setup.rep
    passes = setup.pp.passes
    senders = [q for q in passes[: p.index] if p.index in q.sends]
    return W.PassSpec(
        program=setup.ref,
        index=p.index,
        columns=setup.columns,
        pickled_columns=setup.events.pickled & set(setup.columns),
        handlers=p.handlers,
        homes=p.homes,
        blind=dict(p.blind),
        feeds=dict(p.feeds),
        finals=p.finals,
        home_partition={q.index: q.partition for q in passes},
        home_elements={q.index: q.elements for q in passes if q.elements},
        kind_passes=dict(setup.pp.kind_passes),
        serves=tuple((q.slot, q.state, q.key, q.handler, q.kinds, q.reader) for q in p.serves),
        consumes=tuple((q.slot, q.state, q.key, q.handler) for q in p.consumes),
        slots=setup.slots,
        order_key=ORDER,
        single_key=SINGLE,
        max_flush=MAX_FLUSH,
        on_error=rep.on_error,
        plain=plain,
        closes=p.closes if plain else (),
        narrow_to=p.narrow_to if _narrowed(run, p, bounds, plain) else {},
        narrow=p.narrow if _all_narrowed(run, _adders(passes, p), bounds) else (),
        ships_events=bool(p.schedules),
        source=source,
        outputs=setup.outputs,
        # Writes or scheduled events from earlier passes (an event then waits for
        # the writes of its own runs there): any pass writing into this one's state,
        # or any scheduling at all in a program (conservatively).
        receives_writes=any(q.sends[p.index] == "writes" for q in senders),
        last_ts=setup.log.last_ts,
        bounds=bounds,
        sends=_sends(setup, p, source),
        copies=p.copies,
        versions_to=p.versions_to,
        spread=setup.spread,
        ranges=setup.ranges,
        closes_once=setup.closes_once,
        folds=setup.folds,
        history=rep.history_sites(p, setup.columns) if getattr(rep, "history", None) else (),
    )


def _sends(setup: Setup, p: Any, source: Source) -> W.Sends:
    """What pass ``p`` sends later passes besides its rows: its events, forwarded; the values
    zipped passes read; the events of passes partitioned by a key it looks up."""
    return W.Sends(
        wide=setup.wide,
        forward=setup.wide is not None and _forwarded_to(setup.pp.passes, p, setup.log_kinds),
        # Later passes take their events from the log and only the values read here
        # from this pass (``passes._zipped``): its forwarded rows need little but those.
        zip_to=zip_targets(setup, p),
        zip_by={
            j: () if setup.local else tuple(unquoted(c) for c in by) for j, by in setup.zips.items()
        },
        values_dir=setup.values_dir,
        lookups=lookups_served(setup, p),
        lookups_dir=setup.values_dir if isinstance(source, Arranged) else None,
        narrow=narrow_targets(setup, p) if setup.narrow else {},
    )


def _job(
    run: Run, p: Any, out: Any, ran: Ran, done_range: tuple[int, int], total: int
) -> tuple[int, float]:
    """Run pass ``p``'s job (``out``, its output), folding its small rows into ``ran``; its
    number of tasks and their summed time."""
    setup, rep = run.setup, run.setup.rep
    passes = setup.pp.passes
    base, span = done_range[0], done_range[1] - done_range[0]
    done_before = base + p.index * span // len(passes)

    def on_tasks(done: int, tasks: int, at: int = done_before) -> None:
        share = span // len(passes)
        rep.notify(Progress(at + share * done // tasks, total, time.perf_counter() - setup.started))

    with JobWatch(setup.session, rep.job_group, on_tasks, cancelled=rep.cancelled):
        if p.index == len(passes) - 1 or setup.local:
            # The last pass: no later pass reads its rows, so one job computes them
            # and brings them back. So with passes the driver arranged: what later
            # passes read of theirs went to files, whose paths come back here.
            got = out.select("_rs_kind", "_rs_dest", "_rs_pk", "_rs_b", *POSITION).toArrow()
            if setup.local:
                values_sent(got, run.sent)
        else:
            # Its rows are kept, cut from their lineage: later passes read them
            # without planning this pass's plan again. Not eagerly: the job that
            # brings its small rows back computes and keeps them, in one job.
            out = out.localCheckpoint(eager=False)
            got = None
        run.outputs.append(out)  # (unpersisted at the end, whatever happens)
        return _collect(out if got is None else got, ran, p.stage)


def _carried(run: Run, p: Any, source: Source, n: int, ran: Ran) -> str:
    """What the path says of where pass ``p``'s events came from, and what came with them."""
    setup = run.setup
    forwarding = setup.wide is not None
    local = isinstance(source, Arranged)
    zipped = isinstance(source, Zipped) or (local and source.zipped)
    where_from = (
        ", its events arranged by the driver into partitions of balanced keys"
        if local
        else ", its events from the log's arrangement"
    )
    carried = where_from if local and not (p.consumes and forwarding) else ""
    if isinstance(source, NarrowSent):
        by = ", ".join(setup.narrow[p.index])
        carried = (
            f", its adds through files, dealt by the driver into partitions of balanced keys"
            f" of {by}"
        )
    if p.consumes and forwarding:
        # Events that came from an earlier pass carried the values read there.
        carried = (
            ", with the values read upstream on its events"
            if not zipped
            else where_from + ", joined to the values read upstream by position in each partition"
        )
    if p.index in setup.ranges:
        carried += (
            f", by {n} ranges of the log, each copy kept from the state at its range's"
            " start and the versions within the range"
        )
    starts = run.starts
    shared = isinstance(source, LogEvents) and source.share
    if shared or (starts is not None and p.index in starts.shares):
        carried += ", each task started from its partition's share of the state"
    if setup.rep.on_error != "stop" and p.stage in ran.looped:
        carried += ", a run that raises undone by the serial engine's guarded loop"
    return carried


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


def _adders(passes: Any, p: Any) -> list:
    """The passes that send pass ``p`` the adds of a window as narrow rows (``_narrow``)."""
    return [q for q in passes[: p.index] if p.index in q.narrow_to.values()]


def _all_narrowed(run: Run, adders: list, bounds: tuple) -> bool:
    """Whether every pass in ``adders`` sends its adds as narrow rows (and there is one)."""
    return bool(adders) and all(_narrowed(run, q, bounds) for q in adders)


def _narrowed(run: Run, p: Any, bounds: tuple, plain: bool | None = None) -> bool:
    """Whether adding pass ``p`` sends its windows' adds as narrow rows (``passes._narrow``):
    when it runs the serial engine's loop (``plain``) where the serial engine would run the
    windows natively too (:func:`_own`); otherwise they go as the expansion's writes and
    closes, to the same close pass."""
    if not p.narrow_to or not _own(run, bounds):
        return False
    if plain is None:
        setup = run.setup
        kinds = setup.log_kinds[p.index]
        plain = _plain(setup, p, run.fed(p), kinds, setup.wide is not None, True)
    return plain


def _own(run: Run, bounds: tuple) -> bool:
    """Whether a pass may run the closes of the closing windows it holds whole in its loop,
    closes included, where the serial engine would run them natively too
    (``passes._own_closes``): not in a checkpointed, started, cut, guarded or recorded replay."""
    rep = run.setup.rep
    own = not bounds and run.starts is None and run.carry is None and run.setup.until is None
    return own and rep.on_error == "stop" and not getattr(rep, "history", None)


def _plain(
    setup: Setup, p: Any, fed: bool, kinds: tuple, forwarding: bool, own: bool = False
) -> bool:
    """Whether pass ``p`` runs the serial engine's inlined loop (``passes._plain.run_plain``): it
    takes log events only, and sends on nothing but what that loop can send (probe values
    carried by forwarded events, writes into later passes' state, events scheduled for later
    passes); under ``on_error`` skip or quarantine, its guarded loop (``passes._shipping``).
    ``own``: whether it may run the closes of the windows it holds whole (``p.closes``), when
    it serves no probe (``passes._own_closes``)."""
    if fed or not kinds or p.feeds:
        return False
    if p.closes:
        return own and not p.serves
    if (p.serves or p.consumes or p.probe_kinds) and not forwarding:
        return False
    kind_passes = setup.pp.kind_passes
    return not any(p.index in kind_passes.get(kind, ()) for kind in p.schedules)


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
        got = small.select("_rs_kind", "_rs_dest", "_rs_b", *POSITION).toArrow()
    kinds = got.column("_rs_kind").to_pylist()
    blobs = got.column("_rs_b").to_pylist()
    dests = got.column("_rs_dest").to_pylist()
    positions = list(zip(*(got.column(c).to_pylist() for c in POSITION)))
    if W.ERROR in kinds:
        raise TaskError(pickle.loads(blobs[kinds.index(W.ERROR)]))
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
            if looped:  # (and the session windows it ran lazily, from a plain task)
                ran.looped.add(stage)
                ran.lazy.setdefault(stage, set()).update(*looped[1:])
            ran.task_events.setdefault(stage, []).append(events)
            busy += task_s
            ran.scheduled += made
            if last_at is not None:
                ran.last_event = max(ran.last_event, last_at)
    return tasks, busy


class TaskError(RestreamError):
    """A pass's task raised: the driver replays serially to raise the exact error."""
