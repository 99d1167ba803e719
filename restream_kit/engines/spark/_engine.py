"""The Spark engine's driver: epochs of steps over DataFrames, and the serial fallback.

Per epoch (``restream_kit.epochs.cut``), for each step of the layout (``_layout``) in order:

1. the states the step reads from upstream are *resolved*, once per epoch for every step that
   reads them: the epoch's starting snapshot (position -inf), every write row of the epoch
   (and earlier epochs' timed writes now due) and one request per event and read, at the
   reading run's position, are unioned, repartitioned by (state, key) and ordered by
   position. Spark windows then give each row its key's value: the last overwrite or delete
   plus the running sum of the additions after it, in the JVM (``fold="jvm"``, the default;
   ``fold="vector"`` does the same with numpy in ``mapInArrow``); other merges are folded in
   Python (``_worker.FoldTask``). Requests come out with their value, routed to their step;
   each key's last row is its value at the end of the epoch;
2. the handler pass: the step's events, their resolved reads, the snapshot of its own state
   and the writes pending into it, repartitioned by the partition key (events of stateless
   steps stay partitioned by order, as the epoch's persisted events already are; sequential
   steps go to one partition), sorted by order key within partitions and run through the
   compiled handlers (``_worker.StepTask``).

Keys the steps need are computed once per epoch: in Spark SQL for plain columns and tuples of
them (:func:`jvm_key`), in Python otherwise (``_worker.KeysTask``). At the end of the epoch
each state is compacted to its last value per key, which with the timed writes due later is
the next epoch's start; between epochs that DataFrame is cut from its lineage by a local
checkpoint, so that plans stay the size of one epoch. The epoch's emitted rows are collected
(one Spark job per epoch, or one per step for epochs of 200,000 events or more, which times
each step) and published in ``EpochFinished.outputs``; the final tables are built on the
driver with ``result.build_table``, sorted by position, exactly as the serial engine builds
them. Positions are (time, order, handler, operation) in separate long columns, compared
lexicographically, so that no read ever sees a version that a serial replay would not have
seen.

When the layout has something the parallel path does not do (``Layout.fallback_reason``), or
a task meets something it cannot do exactly (``_worker.FallbackNeeded``, a 64-bit overflow),
the replay runs the serial engine in one Spark task instead and says why in
``Result.warnings``.
"""

from __future__ import annotations

import ast
import os
import pickle
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..._lower import Lowered
from ..._poison import check_on_error
from ...epochs import cut
from ...errors import HandlerError, RestreamError
from ...log import Log
from ...program import Program
from ...progress import (
    Cancelled,
    EpochFinished,
    EpochStarted,
    Progress,
    ReplayFinished,
    ReplayStarted,
    StageFinished,
    StageStarted,
    broadcast,
)
from ...result import Metrics, Result, build_table, quarantine_table
from ..serial import quarantine_warning
from . import _resume as R
from . import _worker as W
from ._codec import ABSENT, BAD, BOOL, FLOAT, INT, LONG_MIN, decode_key, decode_value
from ._layout import Layout, Step, layout
from ._pass_driver import _TaskError as _PassTaskError
from ._pass_driver import run_passes
from ._passes import plan_passes
from ._prefix import prefix_plan, run_prefix, spark_map_epochs
from ._session import get_session, is_connect, session_cores, watch
from ._ship import is_local, ship

__all__ = ["replay", "FallbackSignal"]

#: Above this many events per epoch, every step is its own Spark job (for per-step timings).
STEP_JOBS_FROM = 200_000

_SAFE = (
    pa.types.is_int8,
    pa.types.is_int16,
    pa.types.is_int32,
    pa.types.is_int64,
    pa.types.is_float32,
    pa.types.is_float64,
    pa.types.is_boolean,
    pa.types.is_string,
    pa.types.is_binary,
)


class FallbackSignal(Exception):
    """The parallel path gave up (its reason is in ``args[0]``); rerun serially."""


# -- the log as DataFrames -------------------------------------------------------------------


@dataclass
class _EventsTable:
    """The log ready for Spark: safe column types, ``_rs_o`` and pickled odd columns."""

    table: pa.Table
    columns: tuple[str, ...]
    pickled: frozenset[str]
    types: dict[str, pa.DataType]

    @property
    def event_fields(self) -> tuple[str, ...]:
        """Attribute names of events: the columns, as the named tuple type renames them."""
        return W.event_type(self.columns)._fields


def _prepare(log: Log) -> _EventsTable:
    table = log.table
    arrays = []
    pickled = set()
    types = {}
    for name in table.column_names:
        col = table.column(name)
        typ = col.type
        if pa.types.is_dictionary(typ):
            col = col.cast(typ.value_type)
            typ = col.type
        if pa.types.is_large_string(typ):
            col, typ = col.cast(pa.string()), pa.string()
        elif pa.types.is_large_binary(typ):
            col, typ = col.cast(pa.binary()), pa.binary()
        elif typ in (pa.uint8(), pa.uint16(), pa.uint32()):
            col, typ = col.cast(pa.int64()), pa.int64()
        elif pa.types.is_float16(typ):
            col, typ = col.cast(pa.float32()), pa.float32()
        elif pa.types.is_null(typ):
            col, typ = col.cast(pa.string()), pa.string()
        if not any(check(typ) for check in _SAFE):
            values = [None if v is None else pickle.dumps(v, protocol=5) for v in col.to_pylist()]
            col, typ = pa.chunked_array([pa.array(values, pa.binary())]), pa.binary()
            pickled.add(name)
        arrays.append(col)
        types[name] = typ
    arrays.append(pa.array(np.arange(table.num_rows, dtype=np.int64)))
    names = [*table.column_names, "_rs_o"]
    out = pa.table(arrays, names=names)
    return _EventsTable(out, tuple(table.column_names), frozenset(pickled), types)


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


# -- keys in the JVM ---------------------------------------------------------------------------


def jvm_key(expr: str, events: _EventsTable) -> str | None:
    """Spark SQL computing ``encode_key`` of ``expr`` over the event, or None when the
    expression is not plain columns, constants and tuples of them."""
    try:
        node = ast.parse(expr, mode="eval").body
    except SyntaxError:
        return None
    fields = set(events.event_fields)

    def text(value: str) -> str:
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"

    def conv(n: ast.AST) -> str | None:
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "e":
            if n.attr not in fields or n.attr in events.pickled:
                return None
            typ = events.types[n.attr]
            c = _q(n.attr)
            if pa.types.is_integer(typ):
                body = f"concat('i', CAST({c} AS STRING), ';')"
            elif pa.types.is_boolean(typ):
                body = f"concat('i', CAST(CAST({c} AS INT) AS STRING), ';')"
            elif pa.types.is_string(typ):
                body = f"concat('s', CAST(char_length({c}) AS STRING), ':', {c})"
            else:
                return None
            return f"(CASE WHEN {c} IS NULL THEN 'N' ELSE {body} END)"
        if isinstance(n, ast.Constant):
            v = n.value
            if v is None:
                return "'N'"
            if type(v) is int:
                return text(f"i{v};")
            if type(v) is str:
                return text(f"s{len(v)}:{v}")
            return None
        if isinstance(n, ast.Tuple):
            parts = [conv(elt) for elt in n.elts]
            if any(p is None for p in parts):
                return None
            return f"concat({', '.join([text(f't{len(parts)}:'), *parts])})"
        return None

    return conv(node)


def _in(column: str, values: list[int]) -> str:
    """SQL ``column IN (...)``, false for no values."""
    return f"{column} IN ({', '.join(map(str, values))})" if values else "false"


_ORDER = "_rs_t, _rs_o, _rs_h, _rs_i"
_BY_KEY = f"PARTITION BY _rs_s, _rs_k ORDER BY {_ORDER}"
_RUNNING = "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW"
_VALUES = ("_rs_vt", "_rs_vl", "_rs_vd", "_rs_vb")
_ROW_COLS = (
    "_rs_s", "_rs_k", "_rs_t", "_rs_o", "_rs_h", "_rs_i", "_rs_op",
    "_rs_vt", "_rs_vl", "_rs_vd", "_rs_vb",
)  # fmt: skip
_SNAP_SCHEMA = (
    "_rs_s int, _rs_k string, _rs_pk string, _rs_vt byte, _rs_vl long, _rs_vd double, _rs_vb binary"
)


def _typed(value: Any, typ: str) -> str:
    return f"CAST({'NULL' if value is None else value} AS {typ})"


# -- the replay ----------------------------------------------------------------------------------


class _Replay:
    def __init__(self, program: Program, log: Log, observer: Any, options: dict[str, Any]):
        self.program = program
        self.log = log
        self.notify = broadcast(observer)
        self.options = options
        self.session = get_session(
            options.get("master"),
            options.get("conf"),
            options.get("session"),
            options.get("executor_wait"),
        )
        ship(self.session)
        self.cores = session_cores(self.session)
        self.partitions = int(options.get("partitions") or self.cores)
        self.fold = options.get("fold") or os.environ.get("RESTREAM_SPARK_FOLD", "jvm")
        if self.fold not in ("vector", "jvm"):
            raise RestreamError(f"fold must be 'vector' or 'jvm', not {self.fold!r}")
        self.ref = W.ProgramRef.of(program)
        # Handler runs that raise: stop, or roll back and record (see _worker.StepTask).
        self.on_error = check_on_error(options.get("on_error"))
        self.stage_seconds: dict[str, float] = defaultdict(float)
        self.persisted: list[Any] = []
        self.cancel = options.get("cancel")
        self.job_group = f"restream-{id(self):x}-{time.monotonic_ns()}"
        if self.cancel is not None:
            self.cancel.on_cancel(self._interrupt)

    # -- entry -----------------------------------------------------------------------------

    def run(self) -> Result:
        # On a standalone cluster a watchdog cancels the replay's jobs when its executors are
        # gone for good (workers died): one clear error instead of a job waiting forever.
        with watch(self.session, self.job_group) as dog:
            try:
                return self._run()
            except Exception:
                if dog.reason:
                    raise RestreamError(dog.reason) from None
                raise
            finally:
                if is_connect(self.session):
                    self.session.removeTag(self.job_group)

    def _run(self) -> Result:
        started = time.perf_counter()
        self._tag_jobs()
        reason = None
        the_layout = None
        if self.options.get("fallback"):
            reason = "asked for with fallback=True"
        if reason is None:
            low = self._lowered()
            if low is not None:
                return self._prefix(low, started)
        if reason is None:
            result = self._passes(started)
            if result is not None:
                return result
        if reason is None:
            the_layout, reason = self._layout()
        if reason is None and R.committed_format(self.options) == R.SERIAL:
            reason = "the checkpoint being resumed was made by the serial fallback"
        if reason is None:
            try:
                return self._parallel(the_layout, started)
            except FallbackSignal as signal:
                reason = str(signal.args[0])
                self._unpersist_all()
        return self._fallback(reason, started)

    # -- the prefix path (``_prefix``): epochs in parallel, for programs that lower --------

    def _lowered(self) -> Lowered | None:
        """The lowered program when the prefix path may run this replay, else None.

        ``path="prefix"`` insists (and says why it cannot), ``path="stages"`` never takes it.
        Replays that checkpoint, resume, start from a snapshot or skip poison events, Spark
        Connect sessions and clusters (whose workers may not reach this machine's files) take
        the stage path."""
        path = self.options.get("path") or os.environ.get("RESTREAM_SPARK_PATH", "auto")
        if path not in ("auto", "prefix", "passes", "stages"):
            raise RestreamError(
                f"path must be 'auto', 'prefix', 'passes' or 'stages', not {path!r}"
            )
        if path in ("stages", "passes"):
            return None
        blockers = [
            name for name in ("checkpoint", "resume", "start_from") if self.options.get(name)
        ]
        if self.options.get("on_error") not in (None, "stop"):
            blockers.append("on_error")
        if not len(self.log):
            blockers.append("an empty log")
        if is_connect(self.session) or getattr(self.session, "sparkContext", None) is None:
            blockers.append("Spark Connect")
        elif not is_local(self.session):
            # Its tasks read the log's file on this machine: a cluster's workers may not.
            blockers.append("a cluster (its workers cannot read this machine's files)")
        low, why = (
            (None, f"not with {', '.join(blockers)}")
            if blockers
            else prefix_plan(self.program, self.log)
        )
        if low is None and path == "prefix":
            raise RestreamError(f"the prefix path cannot run this replay: {why}")
        return low

    def _prefix(self, low: Lowered, started: float) -> Result:
        try:
            return run_prefix(
                low,
                self.program,
                self.log,
                epoch=self.options.get("epoch"),
                map_epochs=spark_map_epochs(self.session, self.job_group, self.cancelled),
                notify=self.notify,
                check_cancel=self._check_cancel,
                started=started,
            )
        except Cancelled:
            raise
        except Exception:
            if self.cancel is not None and self.cancel.cancelled:
                self.notify(
                    ReplayFinished(
                        0, time.perf_counter() - started, ok=False, error="replay cancelled"
                    )
                )
                raise Cancelled("replay cancelled") from None
            raise

    # -- the pass path (``_passes``): one parallel job per stage over the whole log ------

    def _passes(self, started: float) -> Result | None:
        """The replay by passes, or None when this replay takes the older stage path."""
        path = self.options.get("path") or os.environ.get("RESTREAM_SPARK_PATH", "auto")
        if path in ("stages", "prefix"):
            return None
        why = "not with an empty log" if not len(self.log) else None
        pp = None
        if why is None:
            from ...planner import plan

            try:
                the_plan = plan(self.program, allow_nondeterminism=True)
            except RestreamError as exc:
                the_plan, why = None, f"the planner could not plan the program: {exc}"
            if the_plan is not None:
                pp = plan_passes(self.program, the_plan)
        if why is not None:
            if path == "passes":
                raise RestreamError(f"the pass path cannot run this replay: {why}")
            self.pass_reason = why
            return None
        note = None
        if pp.reason:
            # Said before the replay starts: a parallel engine running one task is news.
            import warnings

            from ...errors import RestreamWarning

            note = (
                f"spark: the whole program ran in one task ({pp.reason}); the plan's stages "
                "could not be split into parallel passes"
            )
            warnings.warn(note, RestreamWarning, stacklevel=4)
        try:
            result = run_passes(self, pp, started, None)
            from ..serial import check_state

            check_state(result.state)  # what the serial engine refuses to keep, so does this
            if note:
                result.warnings.append(note)
            return result
        except _PassTaskError:
            # A handler raised somewhere: the serial engine names the first error exactly.
            from .. import serial

            # With the observers, so that the epochs before the error are published (and
            # written with --out) as a serial replay publishes them.
            serial.replay(
                self.program,
                self.log,
                observer=self.notify,
                epoch=self.options.get("epoch"),
                on_error=self.on_error,
            )
            raise
        except Cancelled:
            raise
        except Exception:
            if self.cancel is not None and self.cancel.cancelled:
                raise Cancelled("replay cancelled") from None
            raise

    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.cancelled

    def _check_cancel(self) -> None:
        if self.cancel is not None:
            self.cancel.check()

    def _interrupt(self) -> None:
        """Stop this replay's running Spark jobs (called from the cancelling thread)."""
        try:
            self.session.sparkContext.cancelJobGroup(self.job_group)
        except Exception:  # noqa: BLE001 - Spark Connect: interrupt by tag instead
            try:
                self.session.interruptTag(self.job_group)
            except Exception:  # noqa: BLE001 - nothing running, or no way to reach it
                pass

    def _tag_jobs(self) -> None:
        """Put this thread's Spark jobs in this replay's group, so that cancel can stop them."""
        try:
            self.session.sparkContext.setJobGroup(self.job_group, "restream replay", True)
        except Exception:  # noqa: BLE001 - Spark Connect
            try:
                self.session.addTag(self.job_group)
            except Exception:  # noqa: BLE001
                pass

    def _layout(self) -> tuple[Layout | None, str | None]:
        from ...planner import plan

        try:
            the_plan = plan(self.program, allow_nondeterminism=True)
        except RestreamError as exc:
            return None, f"the planner could not plan the program: {exc}"
        the_layout = layout(self.program, the_plan)
        return the_layout, the_layout.fallback_reason

    # -- the parallel path ---------------------------------------------------------------

    def _parallel(self, lay: Layout, started: float) -> Result:
        log = self.log
        self.events = _prepare(log)
        self.layout = lay
        ts = log.table.column("ts").to_numpy()
        bounds = [(ep.start, ep.stop) for ep in cut(log, self.options.get("epoch")) if len(ep)]
        total = len(log)
        if not bounds:
            return self._nothing(started)
        step_names = tuple(s.name for s in lay.steps)
        self.notify(ReplayStarted("spark", total, len(bounds), step_names, log.span_ms))
        jobs = self.options.get("jobs")
        snap = None
        carry_w = None
        carry_p = None
        emitted: list[dict] = []
        quarantined: list[dict] = []
        done = 0
        final_rows: list = []
        # Checkpoints (see _resume): start from a committed epoch, commit each one.
        ck, start = R.open_checkpoint(self, R.PARALLEL) if R.wanted(self.options) else (None, None)
        notes: list[str] = []
        if start is not None:
            if start.complete:
                final_rows = start.state["final_rows"]
            else:
                snap, carry_w, carry_p, notes = R.restore_parallel(self, lay, start)
            for epoch_rows in start.rows:
                emitted.extend(epoch_rows["emit"])
                quarantined.extend(epoch_rows["quarantine"])
            done = start.done
        try:
            for number, (lo, hi) in enumerate(bounds):
                if hi <= done:
                    continue  # committed before this resume
                lo = max(lo, done)
                self._check_cancel()
                last = number == len(bounds) - 1
                bound = int(ts[hi]) if not last else int(ts[-1])
                if jobs in ("step", "epoch"):
                    per_step_jobs = jobs == "step"
                else:
                    per_step_jobs = (hi - lo) >= STEP_JOBS_FROM
                self.notify(EpochStarted(number, hi - lo))
                epoch_started = time.perf_counter()
                rows, snap, carry_w, carry_p = self._epoch(
                    number, lo, hi, bound, last, snap, carry_w, carry_p, per_step_jobs
                )
                errors = [r for r in rows if r["_rs_kind"] == W.ERROR]
                if errors:
                    raise self._handler_error(errors)
                new = [r for r in rows if r["_rs_kind"] == W.EMIT]
                emitted.extend(new)
                quarantined.extend(r for r in rows if r["_rs_kind"] == W.QUAR)
                done = hi
                if last:
                    final_rows = [r for r in rows if r["_rs_kind"] == W.FINAL]
                if ck is not None:
                    quar = [r for r in rows if r["_rs_kind"] == W.QUAR]
                    if last:
                        state = {"final_rows": final_rows}
                    else:
                        state = R.parallel_state(self.program, lay, snap, carry_w, carry_p)
                    ck.commit(number, hi, state, {"emit": new, "quarantine": quar}, last=last)
                elapsed = time.perf_counter() - epoch_started
                outputs = self._tables(new) if new else {}
                settled = None if last else bound
                self.notify(EpochFinished(number, done, elapsed, outputs, settled))
                self.notify(Progress(done, total, time.perf_counter() - started))
        except (FallbackSignal, HandlerError, Cancelled) as exc:
            if not isinstance(exc, FallbackSignal):
                elapsed = time.perf_counter() - started
                self.notify(ReplayFinished(done, elapsed, ok=False, error=str(exc)))
            raise
        except RestreamError:
            raise
        except Exception as exc:
            if self.cancel is not None and self.cancel.cancelled:
                elapsed = time.perf_counter() - started
                self.notify(ReplayFinished(done, elapsed, ok=False, error="replay cancelled"))
                raise Cancelled("replay cancelled") from None
            reason = _fallback_reason(exc)
            if reason is not None:
                raise FallbackSignal(reason) from None
            raise
        finally:
            self._unpersist_all()
        tables = self._tables(emitted)
        state = self._final_state(final_rows)
        wall = time.perf_counter() - started
        metrics = Metrics(
            engine="spark",
            events=total if start is None or start.resumed else total - start.done,
            scheduled_events=0,
            wall_s=wall,
            span_ms=log.span_ms,
            rows={name: t.num_rows for name, t in tables.items()},
            stages=dict(self.stage_seconds),
            epochs=len(bounds),
        )
        self.notify(ReplayFinished(total, wall))
        quarantined.sort(key=lambda r: (r["_rs_o"], r["_rs_h"]))
        resumed = start.next_epoch if start is not None and start.resumed else None
        if start is not None and not start.resumed:
            notes.insert(
                0,
                f"started from epoch {start.epoch} of {start.info.get('start_from')} (the state "
                f"after {start.done:,} events); the result covers the events after it only",
            )
        return self._with_quarantine(
            Result(
                tables=tables,
                state=state,
                metrics=metrics,
                warnings=notes,
                resumed_from_epoch=resumed,
            ),
            quarantine_table(pickle.loads(r["_rs_vb"]) for r in quarantined),
        )

    def _with_quarantine(self, result: Result, quarantine: pa.Table) -> Result:
        """``result`` with the handler runs rolled back under on_error skip or quarantine."""
        if self.on_error == "stop":
            return result
        result.quarantine = quarantine
        result.on_error = self.on_error
        note = quarantine_warning(quarantine, self.on_error)
        if note:
            result.warnings.append(note)
        return result

    # -- one epoch --------------------------------------------------------------------------

    def _epoch(self, number, lo, hi, bound, last, snap, carry_w, carry_p, per_step_jobs):
        lay = self.layout
        previous = self.persisted
        self.persisted = []
        ev = self._events_df(lo, hi)
        if snap is None:
            snap = self.session.createDataFrame([], _SNAP_SCHEMA)
        out: dict[int, Any] = {}
        res: dict[str, Any] = {}
        collected: list = []
        visible = f"_rs_kind IN ({W.EMIT}, {W.ERROR}, {W.STAT}, {W.QUAR})"
        for step in lay.steps:
            self._check_cancel()
            self.notify(StageStarted(number, step.name))
            step_started = time.perf_counter()
            if step.resolve_before:
                frame = self._resolve(step.resolve_before, ev, out, snap, carry_w, bound)
                for s in step.resolve_before:
                    res[s] = frame
            out[step.index] = self._persist(
                self._step(step, ev, out, res, snap, carry_w, carry_p, bound)
            )
            if per_step_jobs:
                rows = self._collect(out[step.index].where(visible))
                collected.extend(rows)
                seconds = time.perf_counter() - step_started
                self.stage_seconds[step.name] += seconds
                tasks = sum(1 for r in rows if r["_rs_kind"] == W.STAT)
                self.notify(StageFinished(number, step.name, seconds, tasks))
        if lay.resolve_at_end:
            frame = self._resolve(lay.resolve_at_end, ev, out, snap, carry_w, bound)
            for s in lay.resolve_at_end:
                res[s] = frame
        new_snap, new_carry_w, new_carry_p = self._compact(out, res, carry_w, bound, last)
        parts = []
        if not per_step_jobs:
            parts += [out[step.index].where(visible) for step in lay.steps]
        # Reading the new snapshot here checkpoints it, and the carried writes, in this job.
        if last:
            parts.append(new_snap.selectExpr(f"CAST({W.FINAL} AS TINYINT) AS _rs_kind", "*"))
        else:
            parts.append(new_snap.where(f"_rs_vt = {BAD}").selectExpr(
                f"CAST({W.LAST} AS TINYINT) AS _rs_kind", "*"
            ))  # fmt: skip
        compact_started = time.perf_counter()
        rows = self._collect(_union(parts))
        collected.extend(rows)
        if per_step_jobs:
            self.stage_seconds["compaction"] += time.perf_counter() - compact_started
        else:
            self._attribute(number, rows, time.perf_counter() - compact_started)
        if any(r["_rs_kind"] in (W.LAST, W.FINAL) and r["_rs_vt"] == BAD for r in rows):
            raise FallbackSignal("a merged value could not be folded in the JVM")
        for frame in previous:
            frame.unpersist()
        return collected, new_snap, new_carry_w, new_carry_p

    def _attribute(self, number: int, rows: list[dict], seconds: float) -> None:
        """Split one job's time over its steps by the time their tasks reported."""
        python: dict[str, float] = defaultdict(float)
        tasks: dict[str, int] = defaultdict(int)
        for r in rows:
            if r["_rs_kind"] == W.STAT:
                python[r["_rs_name"]] += r["_rs_vd"] or 0.0
                tasks[r["_rs_name"]] += 1
        share = sum(python.values()) or 1.0
        for step in self.layout.steps:
            part = seconds * python.get(step.name, 0.0) / share
            self.stage_seconds[step.name] += part
            self.notify(StageFinished(number, step.name, part, tasks.get(step.name, 0)))

    # -- DataFrames ---------------------------------------------------------------------------

    def _persist(self, df: Any) -> Any:
        df = df.persist()
        self.persisted.append(df)
        return df

    def _unpersist_all(self) -> None:
        for df in self.persisted:
            try:
                df.unpersist()
            except Exception:  # noqa: BLE001 - best effort on the way out
                pass
        self.persisted = []

    def _collect(self, df: Any) -> list[dict]:
        return df.toArrow().to_pylist()

    def _events_df(self, lo: int, hi: int) -> Any:
        """The epoch's events, partitioned by order, with every key column the steps need."""
        events = self.events
        table = events.table.slice(lo, hi - lo)
        df = self.session.createDataFrame(table)
        exprs: dict[str, None] = {}
        for step in self.layout.steps:
            for r in step.reads:
                exprs[r.key] = None
            if step.partition_key is not None:
                exprs[step.partition_key] = None
        self.key_cols: dict[str, str] = {}
        jvm = []
        python = []
        for j, expr in enumerate(exprs):
            name = f"_rs_key{j}"
            self.key_cols[expr] = name
            sql = jvm_key(expr, events)
            if sql is None:
                python.append((name, expr, None))
            else:
                jvm.append(f"{sql} AS {name}")
        if python:
            from pyspark.sql.types import StringType, StructField, StructType

            spec = W.KeysSpec(
                self.ref,
                events.columns,
                events.pickled,
                tuple(python),
                tuple(events.table.column_names),
            )
            out_schema = StructType(
                list(df.schema.fields) + [StructField(n, StringType(), True) for n, _, _ in python]
            )
            df = df.mapInArrow(W.KeysTask(spec), out_schema)
        if jvm:
            df = df.selectExpr("*", *jvm)
        if any(step.mode == "stateless" for step in self.layout.steps):
            # Stateless steps meet their resolved reads by order: partition the events so.
            df = df.repartition(self.partitions, "_rs_o")
        return self._persist(df)

    def _pk(self, step: Step) -> str:
        if step.mode == "partitioned":
            return self.key_cols[step.partition_key]
        return "CAST(NULL AS STRING)"

    def _requests(self, states: tuple[str, ...], ev: Any) -> Any | None:
        """One request row per event and read of ``states``, at the reading run's position."""
        lay = self.layout
        structs = []
        wanted = set(states)
        for step in lay.steps:
            for r in step.reads:
                if r.state not in wanted:
                    continue
                kinds = ", ".join("'" + k.replace("'", "\\'") + "'" for k in r.kinds)
                fields = ", ".join(
                    [
                        f"{_typed(lay.states[r.state].sid, 'INT')} AS _rs_s",
                        f"{self.key_cols[r.key]} AS _rs_k",
                        "ts AS _rs_t",
                        "_rs_o AS _rs_o",
                        f"{_typed(r.handler, 'INT')} AS _rs_h",
                        f"{_typed(-1, 'BIGINT')} AS _rs_i",
                        f"{_typed(W.OP_REQ, 'TINYINT')} AS _rs_op",
                        f"{_typed(step.index, 'INT')} AS _rs_step",
                        f"{self._pk(step)} AS _rs_pk",
                    ]
                )
                structs.append(
                    f"IF(kind IN ({kinds}) AND {self.key_cols[r.key]} IS NOT NULL, "
                    f"named_struct({_named(fields)}), NULL)"
                )
        if not structs:
            return None
        array = f"filter(array({', '.join(structs)}), x -> x IS NOT NULL)"
        return ev.selectExpr(f"inline({array})")

    def _writes(self, states: tuple[str, ...], out: dict, carry_w: Any, bound: int) -> list:
        """Write rows of ``states`` due by ``bound``: an own state's versions from its owner,
        other states' rows from every step that writes them and from earlier epochs."""
        lay = self.layout
        frames = []
        owned = [s for s in states if lay.states[s].path == "own"]
        for s in owned:
            where = f"_rs_kind = {W.WRITE} AND _rs_s = {lay.states[s].sid}"
            frames.append(out[lay.states[s].owner].where(where).select(*_ROW_COLS))
        others = [s for s in states if s not in owned]
        if others:
            sids = [lay.states[s].sid for s in others]
            writers = sorted({w for s in others for w in lay.states[s].writers})
            where = f"{_in('_rs_s', sids)} AND _rs_t <= {bound}"
            for w in writers:
                frames.append(out[w].where(f"_rs_kind = {W.WRITE} AND {where}").select(*_ROW_COLS))
            if carry_w is not None:
                frames.append(carry_w.where(where).select(*_ROW_COLS))
        return frames

    def _resolve(self, states, ev, out, snap, carry_w, bound) -> Any:
        """Resolve every read of ``states`` this epoch, and their last values (see module doc)."""
        lay = self.layout
        vector = tuple(s for s in states if lay.states[s].path != "python")
        python = tuple(s for s in states if lay.states[s].path == "python")
        frames = []
        for group in (vector, python):
            if not group:
                continue
            sids = [lay.states[s].sid for s in group]
            adds = [lay.states[s].sid for s in group if lay.states[s].path == "add"]
            snaps = snap.where(_in("_rs_s", sids)).selectExpr(
                "_rs_s",
                "_rs_k",
                f"{_typed(LONG_MIN, 'BIGINT')} AS _rs_t",
                f"{_typed(0, 'BIGINT')} AS _rs_o",
                f"{_typed(0, 'INT')} AS _rs_h",
                f"{_typed(0, 'BIGINT')} AS _rs_i",
                f"CAST(IF({_in('_rs_s', adds)}, {W.OP_ADD}, {W.OP_SET}) AS TINYINT) AS _rs_op",
                *_VALUES,
                "CAST(NULL AS INT) AS _rs_step",
                "CAST(NULL AS STRING) AS _rs_pk",
            )
            requests = self._requests(group, ev)
            parts = [snaps, *self._writes(group, out, carry_w, bound)]
            if requests is not None:
                parts.append(requests)
            rows = _union(parts)
            if group is python:
                frames.append(self._fold_python(group, rows))
            elif self.fold == "jvm":
                frames.append(self._fold_jvm(group, rows))
            else:
                frames.append(self._fold_vector(group, rows))
        return self._persist(_union(frames))

    def _sorted_by_key(self, rows: Any) -> Any:
        return rows.repartition(self.partitions, "_rs_s", "_rs_k").sortWithinPartitions(
            "_rs_s", "_rs_k", "_rs_t", "_rs_o", "_rs_h", "_rs_i"
        )

    def _fold_vector(self, states: tuple[str, ...], rows: Any) -> Any:
        lay = self.layout
        spec = W.VectorFoldSpec(
            paths={
                lay.states[s].sid: ("set" if lay.states[s].path == "own" else lay.states[s].path)
                for s in states
            },
            float_default=frozenset(
                lay.states[s].sid for s in states if lay.states[s].float_default
            ),
            own=frozenset(lay.states[s].sid for s in states if lay.states[s].path == "own"),
        )
        return self._sorted_by_key(rows).mapInArrow(W.VectorFoldTask(spec), _ddl(W.RES_FIELDS))

    def _fold_python(self, states: tuple[str, ...], rows: Any) -> Any:
        lay = self.layout
        defaults = {
            lay.states[s].sid: pickle.dumps(lay.states[s].default, protocol=5) for s in states
        }
        return self._sorted_by_key(rows).mapInArrow(
            W.FoldTask(W.FoldSpec(defaults)), _ddl(W.RES_FIELDS)
        )

    def _fold_jvm(self, states: tuple[str, ...], rows: Any) -> Any:
        """The same resolution with Spark windows (``fold="jvm"``; see the report's numbers).

        ``set`` and ``own`` states take the last overwrite or delete; ``add`` states the
        running sum of the additions (their snapshot rows come in as additions); ``sum``
        states the last overwrite or delete plus the running sum of the additions after it
        (a second window, over the groups that each reset starts).
        """
        lay = self.layout
        paths: dict[str, list[int]] = defaultdict(list)
        for s in states:
            info = lay.states[s]
            paths["set" if info.path == "own" else info.path].append(info.sid)
        float_default = [lay.states[s].sid for s in states if lay.states[s].float_default]
        rows = rows.repartition(self.partitions, "_rs_s", "_rs_k")
        reset = f"_rs_op IN ({W.OP_SET}, {W.OP_DEL})"
        value = "struct(_rs_vt, _rs_vl, _rs_vd, _rs_vb)"
        extra = [f"lead(1) OVER ({_BY_KEY}) IS NULL AS _rs_last"]
        if paths["set"]:
            extra.append(
                f"last(CASE WHEN {reset} THEN {value} END, true) "
                f"OVER ({_BY_KEY} {_RUNNING}) AS _set_b"
            )
        if paths["add"]:
            extra += _sums(f"{_BY_KEY} {_RUNNING}", "_add", False)
        if paths["sum"]:
            extra.append(f"sum(CAST({reset} AS INT)) OVER ({_BY_KEY} {_RUNNING}) AS _rs_grp")
        rows = rows.selectExpr("*", *extra)
        if paths["sum"]:
            group = f"PARTITION BY _rs_s, _rs_k, _rs_grp ORDER BY {_ORDER} {_RUNNING}"
            rows = rows.selectExpr(
                "*",
                f"first(CASE WHEN {reset} THEN {value} END, true) OVER ({group}) AS _sum_b",
                *_sums(group, "_sum", True),
            )
        out: list[str] | None = None
        for path, sids in paths.items():
            if not sids:
                continue
            if path == "set":
                cols = [f"coalesce(_set_b._rs_vt, {_typed(ABSENT, 'TINYINT')})"] + [
                    f"_set_b.{c}" for c in _VALUES[1:]
                ]
            else:
                cols = _sum_value("_" + path, float_default, path == "sum")
            if out is None:
                out = cols
            else:
                out = [
                    f"CASE WHEN {_in('_rs_s', sids)} THEN {c} ELSE {v} END"
                    for c, v in zip(cols, out)
                ]
        own = [lay.states[s].sid for s in states if lay.states[s].path == "own"]
        is_req = f"_rs_op = {W.OP_REQ}"
        is_last = f"(_rs_last AND NOT {_in('_rs_s', own)})"
        return rows.where(f"{is_req} OR {is_last}").selectExpr(
            f"CAST(IF({is_req}, {W.RESOLVED}, {W.LAST}) AS TINYINT) AS _rs_kind",
            "_rs_s",
            "_rs_k",
            f"IF({is_req}, _rs_o, NULL) AS _rs_o",
            f"IF({is_req}, _rs_h, NULL) AS _rs_h",
            "_rs_step",
            "_rs_pk",
            f"CAST({out[0]} AS TINYINT) AS _rs_vt",
            f"CAST({out[1]} AS BIGINT) AS _rs_vl",
            f"CAST({out[2]} AS DOUBLE) AS _rs_vd",
            f"CAST({out[3]} AS BINARY) AS _rs_vb",
            f"{is_last} AS _rs_last",
        )

    def _step(self, step, ev, out, res, snap, carry_w, carry_p, bound) -> Any:
        lay = self.layout
        events = self.events
        spec = W.StepSpec(
            program=self.ref,
            step=step.name,
            columns=events.columns,
            pickled_columns=events.pickled,
            handlers=step.handlers,
            state_ids=lay.state_ids,
            own=step.own,
            upstream=step.upstream,
            blind=step.blind,
            unwritten=tuple(n for n, s in lay.states.items() if s.path == "unwritten"),
            bound=bound,
            own_key_part=step.own_key_part,
            partitioned=step.mode == "partitioned",
            route=step.route,
            on_error=self.on_error,
        )
        kinds = ", ".join("'" + k.replace("'", "\\'") + "'" for k in step.kinds)
        routing = [f"{self._pk(step)} AS _rs_pk"] if step.mode == "partitioned" else []
        evs = ev.where(f"kind IN ({kinds})").selectExpr(
            "_rs_o",
            f"{_typed(W.TAG_EVENT, 'TINYINT')} AS _rs_tag",
            *routing,
            *[_q(c) for c in events.columns],
        )
        task = W.StepTask(spec)
        if step.mode == "map":
            return evs.mapInArrow(task, _ddl(W.OUT_FIELDS))
        parts = [evs]
        for frame in {id(res[s]): res[s] for s in step.upstream}.values():
            parts.append(
                frame.where(f"_rs_kind = {W.RESOLVED} AND _rs_step = {step.index}").selectExpr(
                    "_rs_o",
                    f"{_typed(W.TAG_READ, 'TINYINT')} AS _rs_tag",
                    *(["_rs_pk"] if routing else []),
                    "_rs_s",
                    "_rs_k",
                    "_rs_h",
                    *_VALUES,
                )
            )
        if step.own:
            own = _in("_rs_s", [lay.states[s].sid for s in step.own])
            parts.append(
                snap.where(own).selectExpr(
                    f"{_typed(-2, 'BIGINT')} AS _rs_o",
                    f"{_typed(W.TAG_SNAP, 'TINYINT')} AS _rs_tag",
                    "_rs_pk",
                    "_rs_s",
                    "_rs_k",
                    *_VALUES,
                )
            )
            pending = []
            if carry_p is not None:
                pending.append(carry_p.where(own))
            if step.upstream_writes:
                sids = [lay.states[s].sid for s in step.upstream_writes]
                where = f"_rs_kind = {W.WRITE} AND {_in('_rs_s', sids)} AND _rs_t <= {bound}"
                writers = {w for s in step.upstream_writes for w in lay.states[s].writers}
                pending += [out[w].where(where) for w in sorted(writers - {step.index})]
                if carry_w is not None:
                    pending.append(carry_w.where(where))
            for frame in pending:
                parts.append(
                    frame.selectExpr(
                        "_rs_o",
                        f"{_typed(W.TAG_PEND, 'TINYINT')} AS _rs_tag",
                        "_rs_pk",
                        "_rs_s",
                        "_rs_k",
                        "_rs_t",
                        "_rs_o AS _rs_wo",
                        "_rs_h",
                        "_rs_i",
                        "_rs_op",
                        *_VALUES,
                    )
                )
        rows = _union(parts)
        if step.mode == "partitioned":
            rows = rows.repartition(self.partitions, "_rs_pk")
        elif step.mode == "sequential":
            rows = rows.repartition(1)
        else:
            rows = rows.repartition(self.partitions, "_rs_o")
        rows = rows.sortWithinPartitions("_rs_o", "_rs_tag")
        return rows.mapInArrow(task, _ddl(W.OUT_FIELDS))

    def _compact(self, out: dict, res: dict, carry_w: Any, bound: int, last: bool):
        """The next epoch's snapshot and carried writes (after the last epoch: the final
        state, and nothing carried).

        Between epochs all three are one DataFrame, cut from its lineage by a local
        checkpoint that the epoch's job computes: the next epoch's plans then start from it
        (without the cut, each epoch's plan would hold the previous one several times over).
        """
        lay = self.layout
        parts = [
            out[step.index].where(f"_rs_kind = {W.FINAL}").select(*_SNAP_COLS)
            for step in lay.steps
            if step.own
        ]
        for frame in {id(f): f for f in res.values()}.values():
            parts.append(
                frame.where(f"_rs_last AND _rs_vt != {ABSENT}").selectExpr(
                    "_rs_s", "_rs_k", "CAST(NULL AS STRING) AS _rs_pk", *_VALUES
                )
            )
        parts = [p.selectExpr(f"{_typed(W.LAST, 'TINYINT')} AS _rs_kind", "*") for p in parts]
        if last:
            if not parts:
                return self.session.createDataFrame([], _SNAP_SCHEMA), None, None
            return _union(parts).drop("_rs_kind"), None, None
        parts += [
            out[step.index].where(f"_rs_kind = {W.WRITE} AND _rs_t > {bound}")
            for step in lay.steps
            if step.blind
        ]
        if carry_w is not None:
            parts.append(carry_w.where(f"_rs_t > {bound}"))
        parts += [out[step.index].where(f"_rs_kind = {W.PEND}") for step in lay.steps if step.own]
        if not parts:
            return self.session.createDataFrame([], _SNAP_SCHEMA), None, None
        cut_off = _union(parts).localCheckpoint(eager=False)
        snap = cut_off.where(f"_rs_kind = {W.LAST}").select(*_SNAP_COLS)
        carry_w = cut_off.where(f"_rs_kind = {W.WRITE}")
        carry_p = cut_off.where(f"_rs_kind = {W.PEND}")
        return snap, carry_w, carry_p

    # -- results ----------------------------------------------------------------------------

    def _tables(self, rows: list[dict]) -> dict[str, pa.Table]:
        if not rows:
            return {}
        rows = sorted(rows, key=lambda r: (r["_rs_o"], r["_rs_h"], r["_rs_i"]))
        table = self.log.table
        orders = np.array([r["_rs_o"] for r in rows], dtype=np.int64)
        lsn = pc.take(table.column("lsn"), pa.array(orders)).to_pylist()
        ts = pc.take(table.column("ts"), pa.array(orders)).to_pylist()
        names = [h.name for h in self.program.handlers]
        per_table: dict[str, list] = {}
        for r, a, b in zip(rows, lsn, ts):
            per_table.setdefault(r["_rs_name"], []).append(
                (a, b, names[r["_rs_h"]], 0, pickle.loads(r["_rs_vb"]))
            )
        return {name: build_table(name, items) for name, items in per_table.items()}

    def _final_state(self, rows: list[dict]) -> dict[str, dict]:
        names = {s.sid: name for name, s in self.layout.states.items()}
        state: dict[str, dict] = {name: {} for name in self.program.states}
        for r in rows:
            if r["_rs_vt"] == ABSENT:
                continue
            value = decode_value(r["_rs_vt"], r["_rs_vl"], r["_rs_vd"], r["_rs_vb"])
            state[names[r["_rs_s"]]][decode_key(r["_rs_k"])] = value
        return state

    def _handler_error(self, rows: list[dict]) -> Exception:
        first = min(rows, key=lambda r: (r["_rs_o"], r["_rs_h"]))
        info, exc = W.unpickle_error(first["_rs_vb"])
        if info["passthrough"]:
            if isinstance(exc, RestreamError):
                return exc
            raise FallbackSignal("a handler raised a RestreamError that does not travel")
        error = HandlerError(
            handler=info["handler"],
            filename=self.program.filename,
            lineno=info["lineno"],
            line=info["line"],
            lsn=info["lsn"],
            seq=0,
            kind=info["kind"],
            ts=info["ts"],
            cause=exc,
            fields=info.get("fields"),
        )
        error.__cause__ = exc
        return error

    def _nothing(self, started: float) -> Result:
        """The result of an empty log: no rows, every state empty."""
        log = self.log
        self.notify(ReplayStarted("spark", 0, 1, (), log.span_ms))
        self.notify(EpochStarted(0, 0))
        wall = time.perf_counter() - started
        self.notify(EpochFinished(0, 0, wall, {}))
        self.notify(ReplayFinished(0, wall))
        metrics = Metrics("spark", 0, 0, wall, log.span_ms)
        return Result(tables={}, state={name: {} for name in self.program.states}, metrics=metrics)

    # -- the fallback: the serial engine in one Spark task -------------------------------------

    def serial_spec(self, events, log: Log) -> W.SerialSpec:
        """What a Spark task needs to run the serial algorithm over ``events`` of ``log``."""
        return W.SerialSpec(
            self.ref,
            events.columns,
            events.pickled,
            log.table.schema.serialize().to_pybytes(),
            on_error=self.on_error,
        )

    def _fallback(self, reason: str, started: float) -> Result:
        log = self.log
        if R.wanted(self.options):
            # Checkpoints need epochs: one task per epoch instead of one for the whole log.
            return R.fallback_epochs(self, reason, started, _prepare(log))
        total = len(log)
        note = f"spark: the whole replay ran in one task with the serial algorithm: {reason}"
        self.notify(ReplayStarted("spark", total, 1, ("serial fallback",), log.span_ms))
        self.notify(EpochStarted(0, total))
        self.notify(StageStarted(0, "serial fallback"))
        events = _prepare(log)
        spec = self.serial_spec(events, log)
        df = self.session.createDataFrame(events.table)
        df = df.repartition(1).sortWithinPartitions("_rs_o")
        stage_started = time.perf_counter()
        rows = self._collect(df.mapInArrow(W.SerialTask(spec), _ddl(W.SERIAL_FIELDS)))
        seconds = time.perf_counter() - stage_started
        tables: dict[str, pa.Table] = {}
        state: dict[str, dict] = {}
        quarantine = quarantine_table()
        scheduled = 0
        for r in rows:
            kind = r["_rs_kind"]
            if kind == W.ERROR:
                error = self._serial_error(r["_rs_vb"])
                self.notify(
                    ReplayFinished(0, time.perf_counter() - started, ok=False, error=str(error))
                )
                raise error
            if kind == W.EMIT:
                tables[r["_rs_name"]] = pa.ipc.open_stream(r["_rs_vb"]).read_all()
            elif kind == W.FINAL:
                state[r["_rs_name"]] = pickle.loads(r["_rs_vb"])
            elif kind == W.QUAR:
                quarantine = pa.ipc.open_stream(r["_rs_vb"]).read_all()
            elif kind == W.STAT:
                scheduled = r["_rs_vl"] or 0
        if not rows and total == 0:
            state = {name: {} for name in self.program.states}
        self.notify(StageFinished(0, "serial fallback", seconds, 1))
        wall = time.perf_counter() - started
        self.notify(EpochFinished(0, total, wall, dict(tables)))
        self.notify(Progress(total, total, wall))
        metrics = Metrics(
            engine="spark",
            events=total,
            scheduled_events=scheduled,
            wall_s=wall,
            span_ms=log.span_ms,
            rows={name: t.num_rows for name, t in tables.items()},
            stages={"serial fallback": seconds},
            epochs=1,
        )
        self.notify(ReplayFinished(total, wall))
        return self._with_quarantine(
            Result(tables=tables, state=state, metrics=metrics, warnings=[note]), quarantine
        )

    def _serial_error(self, data: bytes) -> Exception:
        info, exc = W.unpickle_error(data)
        if info["handler_error"]:
            error = HandlerError(
                handler=info["handler"],
                filename=self.program.filename,
                lineno=info["lineno"],
                line=info["line"],
                lsn=info["lsn"],
                seq=info["seq"],
                kind=info["kind"],
                ts=info["ts"],
                cause=exc,
                fields=info.get("fields"),
            )
            error.__cause__ = exc
            return error
        if isinstance(exc, RestreamError):
            return exc
        # Anything else (an error that does not travel): the serial engine says it exactly.
        from .. import serial

        try:
            serial.replay(self.program, self.log)
        except Exception as exact:  # noqa: BLE001 - returned to be raised by the caller
            return exact
        return RestreamError(f"{info['class']}: {info['text']}")


_SNAP_COLS = ("_rs_s", "_rs_k", "_rs_pk", "_rs_vt", "_rs_vl", "_rs_vd", "_rs_vb")


def _named(fields: str) -> str:
    """``a AS x, b AS y`` as the arguments of ``named_struct``: ``'x', a, 'y', b``."""
    out = []
    for field in fields.split(", "):
        expr, name = field.rsplit(" AS ", 1)
        out.append(f"'{name}', {expr}")
    return ", ".join(out)


def _sums(window: str, prefix: str, with_base: bool) -> list[str]:
    """Window columns of a running sum of additions: the sum of the ints (null once it
    overflows), how many ints, the sum of all as doubles (from the group's reset on, with
    ``with_base``, so that floats add up in the serial order), and whether a float was added
    (null when nothing was)."""
    add = f"_rs_op = {W.OP_ADD}"
    int_add = f"{add} AND _rs_vt != {FLOAT}"
    counted = f"(_rs_op IN ({W.OP_ADD}, {W.OP_SET}))" if with_base else f"({add})"
    double = f"IF(_rs_vt = {FLOAT}, _rs_vd, CAST(_rs_vl AS DOUBLE))"
    return [
        f"try_sum(CASE WHEN {int_add} THEN _rs_vl END) OVER ({window}) AS {prefix}_sl",
        f"count(CASE WHEN {int_add} THEN 1 END) OVER ({window}) AS {prefix}_n",
        f"sum(CASE WHEN {counted} THEN {double} END) OVER ({window}) AS {prefix}_sd",
        f"max(CASE WHEN {add} THEN _rs_vt = {FLOAT} END) OVER ({window}) AS {prefix}_f",
    ]


def _sum_value(prefix: str, float_default: list[int], with_base: bool) -> list[str]:
    """SQL (tag, long, double, bytes) of a sum from the columns of :func:`_sums` (and, for
    ``sum`` states, the group's reset in ``_sum_b``)."""
    zero_l = "CAST(0 AS BIGINT)"
    if with_base:
        b_vt = f"coalesce(_sum_b._rs_vt, {_typed(ABSENT, 'TINYINT')})"
        absent = f"({b_vt} = {ABSENT})"
        numeric = f"({b_vt} IN ({INT}, {FLOAT}, {BOOL}, {ABSENT}))"
        base_float = f"({b_vt} = {FLOAT})"
        base_l = f"IF({b_vt} IN ({INT}, {BOOL}), _sum_b._rs_vl, {zero_l})"
        exact = [b_vt, "_sum_b._rs_vl", "_sum_b._rs_vd", "_sum_b._rs_vb"]
    else:
        absent, numeric, base_float, base_l = "true", "true", "false", zero_l
        exact = [_typed(ABSENT, "TINYINT"), "NULL", "NULL", "NULL"]
    none = f"{prefix}_f IS NULL"
    floating = f"({base_float} OR {prefix}_f OR ({absent} AND {_in('_rs_s', float_default)}))"
    total_d = f"({prefix}_sd + 0.0D)"
    total_l = f"try_add({base_l}, coalesce({prefix}_sl, {zero_l}))"
    # Ints added onto something that is not a number, and sums of ints that overflow or come
    # near 64 bits, are BAD: the replay then falls back to the serial algorithm.
    overflow = f"(({prefix}_n > 0 AND {prefix}_sl IS NULL) OR {total_l} IS NULL)"
    tag = (
        f"CASE WHEN {none} THEN {exact[0]} WHEN NOT {numeric} THEN {BAD} "
        f"WHEN {floating} THEN {FLOAT} WHEN {overflow} THEN {BAD} "
        f"WHEN abs({total_d}) >= 4.611686018427388E18D THEN {BAD} ELSE {INT} END"
    )
    return [
        tag,
        f"CASE WHEN {none} THEN {exact[1]} WHEN NOT {floating} THEN {total_l} END",
        f"CASE WHEN {none} THEN {exact[2]} WHEN {floating} THEN {total_d} END",
        f"CASE WHEN {none} THEN {exact[3]} END",
    ]


def _ddl(fields: tuple) -> str:
    return ", ".join(f"{name} {typ}" for name, _, typ in fields)


def _union(frames: list) -> Any:
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame, allowMissingColumns=True)
    return out


def _fallback_reason(exc: BaseException) -> str | None:
    """The fallback reason a failed Spark job carries, or None for a genuine failure."""
    text = str(exc)
    marker = W.FALLBACK_MARKER + "["
    at = text.find(marker)
    if at >= 0:
        end = text.find("]", at)
        return text[at + len(marker) : end if end > at else None]
    if "ARITHMETIC_OVERFLOW" in text or "long overflow" in text:
        return "a running sum overflowed 64 bits"
    return None


def replay(program: Program, log: Log, *, observer: Any = None, **options: Any) -> Result:
    """Replay ``log`` through ``program`` on Spark (see the package docstring for options)."""
    return _Replay(program, log, observer, options).run()
