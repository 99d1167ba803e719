"""The critical paths of a plan: the static one (stages) and the data one (keys of a log).

Given a log, each stage's work is counted in handler runs: events of the stage's kinds times
the stage's handlers bound to that kind, plus the runs of scheduled events, estimated from a
sample replay. Each run is weighted by its handler's cost, measured on that sample (the first
``sample_events`` events of the log, replayed on the serial engine's runtime); when the sample
cannot be replayed every run weighs the same and the plan says so.

A stage's heaviest chain is the work that must happen one run after another:

- partitioned: the heaviest partition key. The key is computed for every event of the stage's
  kinds: grouped by duckdb directly on the log when the key is a column or a tuple of columns
  (``e.src``, ``(e.src, e.dst)``), evaluated in Python event by event otherwise;
- sequential: all of its work;
- stateless (and broadcast-read without a partition key): one run.

The predicted speedup on P workers is W / sum over stages of max(work / P, heaviest chain),
with W the total work: the stages run one after another, each as parallel as its heaviest
chain lets it. Merges and as-of lookups are taken as free: the model counts handler runs.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from ..io.log import Log
from ..model.program import Program
from ..runtime import SerialRuntime
from ..runtime.loop import compile_loop
from ._build import static_critical_path
from .ir import (
    DataPath,
    Plan,
    Stage,
    StageLoad,
    compile_key,
    key_columns,
    predicted_speedup,
)

if TYPE_CHECKING:
    import duckdb

__all__ = [
    "WORKERS",
    "SAMPLE_EVENTS",
    "HOT_KEYS",
    "Sample",
    "measure_sample",
    "data_path",
    "chain_bound",
    "with_data",
]

WORKERS = (1, 2, 4, 8, 16, 32, 64)
SAMPLE_EVENTS = 20_000
HOT_KEYS = 10


@dataclass
class Sample:
    """What a sample replay measured: cost per run and runs per handler, scheduled events run."""

    events: int = 0
    seconds: dict[str, float] = field(default_factory=dict)
    runs: dict[str, int] = field(default_factory=dict)
    scheduled_runs: dict[str, int] = field(default_factory=dict)
    scheduled: list[Any] = field(default_factory=list)
    error: str | None = None

    def cost(self, handler: str) -> float | None:
        runs = self.runs.get(handler, 0)
        return self.seconds.get(handler, 0.0) / runs if runs else None


class _Sampling(SerialRuntime):
    """The serial runtime, keeping no rows (the sample only weighs the work)."""

    def emit(self, table: str, **fields: Any) -> None:
        pass


def measure_sample(program: Program, log: Log, events: int = SAMPLE_EVENTS) -> Sample:
    """Replay the first ``events`` events, timing every handler run."""
    sample = Sample()
    rt = _Sampling()
    loop = compile_loop(program, rt, None)
    clock = time.perf_counter
    seconds = dict.fromkeys((h.name for h in program.handlers), 0.0)
    runs = dict.fromkeys(seconds, 0)
    sched = dict.fromkeys(seconds, 0)
    seen_scheduled: dict[int, Any] = {}

    def hook(name: str, fn: Callable, ev: Any, scheduled: bool) -> None:
        t0 = clock()
        fn(ev)
        seconds[name] += clock() - t0
        runs[name] += 1
        if scheduled:
            sched[name] += 1
            seen_scheduled.setdefault(id(ev), ev)

    def counted():
        for ev in itertools.chain.from_iterable(log.iter_events(stop=events)):
            sample.events += 1
            yield ev

    try:
        loop.run_events(counted(), hook, end=events >= len(log))
    except Exception as exc:  # the sample only weighs the work; a failing handler is reported
        sample.error = f"{type(exc).__name__}: {exc}"
    sample.seconds, sample.runs, sample.scheduled_runs = seconds, runs, sched
    sample.scheduled = list(seen_scheduled.values())
    return sample


def _columns_of(key: str, columns: set[str]) -> tuple[list[str], bool] | None:
    """The log columns a key is made of (:func:`key_columns`), when the log has them all and
    none twice; with whether the key is a single one."""
    found = key_columns(key)
    if found is None:
        return None
    names, single = found
    if not names or len(set(names)) != len(names) or not set(names) <= columns:
        return None
    return names, single


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _key_repr(values: tuple, single: bool) -> str:
    return repr(values[0]) if single else repr(tuple(values))


@dataclass
class _Weights:
    runs: dict[str, int]  # kind -> handler runs of this stage per event
    cost: dict[str, float]  # kind -> estimated seconds (or runs) per event


class _Loads:
    """Groups events of a stage by partition key on the log (and the sampled scheduled events)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, log: Log, program: Program):
        self.con = con
        self.log = log
        self.program = program
        self.columns = set(log.columns)

    def by_columns(self, cols: list[str], w: _Weights, limit: int | None) -> tuple[list, int, int]:
        """Top keys as (key values, events, runs, cost); number of keys; heaviest runs."""
        kinds = list(w.runs)
        if not kinds:
            return [], 0, 0
        qcols = ", ".join(_quote(c) for c in cols)
        case_runs = " ".join(f"WHEN ? THEN {w.runs[k]}" for k in kinds)
        case_cost = " ".join(f"WHEN ? THEN {float(w.cost[k])!r}" for k in kinds)
        marks = ", ".join("?" for _ in kinds)
        sql = f"""
            WITH g AS (
                SELECT {qcols}, COUNT(*) AS n,
                       SUM(CASE kind {case_runs} ELSE 0 END) AS runs,
                       SUM(CASE kind {case_cost} ELSE 0 END) AS cost
                FROM plan_log WHERE kind IN ({marks}) GROUP BY {qcols}
            )
            SELECT *, COUNT(*) OVER () AS groups, MAX(runs) OVER () AS max_runs
            FROM g ORDER BY cost DESC, n DESC
        """
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        rows = self.con.execute(sql, kinds + kinds + kinds).fetchall()
        if not rows:
            return [], 0, 0
        width = len(cols)
        top = [
            (tuple(r[:width]), int(r[width]), int(r[width + 1]), float(r[width + 2])) for r in rows
        ]
        return top, int(rows[0][width + 3]), int(rows[0][width + 4])

    def by_python(self, key: Callable[[Any], Any], w: _Weights) -> dict[Any, list]:
        """Per key [events, runs, cost], evaluating the key on each event of the stage's kinds."""
        kinds = pa.array(list(w.runs), pa.string())
        make = self.log.event_type()._make
        acc: dict[Any, list] = {}
        # A row group at a time: the log is never held whole (see docs/scale.md).
        tables = (t.filter(pc.is_in(t.column("kind"), value_set=kinds)) for t in self.log.tables())
        for batch in (b for t in tables for b in t.to_batches(max_chunksize=65_536)):
            columns = [col.to_pylist() for col in batch.columns]
            for ev in map(make, zip(*columns)):
                k = _safe_key(key, ev)
                slot = acc.get(k)
                if slot is None:
                    slot = acc[k] = [0, 0, 0.0]
                slot[0] += 1
                slot[1] += w.runs[ev.kind]
                slot[2] += w.cost[ev.kind]
        return acc


def _safe_key(key: Callable[[Any], Any], ev: Any) -> Any:
    try:
        value = key(ev)
        hash(value)
        return value
    except Exception:
        return "<key could not be computed>"


def data_path(
    plan: Plan,
    program: Program,
    log: Log,
    *,
    sample_events: int = SAMPLE_EVENTS,
) -> tuple[DataPath, tuple[str, ...]]:
    """The data critical path of ``plan`` on ``log``, and the static path weighted by cost."""
    total_events = len(log)
    sample = measure_sample(program, log, sample_events) if program.handlers else Sample()
    notes = []
    measured = sample.error is None and sum(sample.runs.values()) > 0
    if sample.error:
        notes.append(f"the sample replay stopped ({sample.error}); every handler run weighs 1")
    elif not measured:
        notes.append("no handler ran on the sample; every handler run weighs 1")
    elif any(not sample.runs.get(h.name) for h in plan.handlers):
        notes.append("handlers that did not run on the sample weigh the sample's mean cost")
    costs = {}
    for h in plan.handlers:
        c = sample.cost(h.name) if measured else None
        costs[h.name] = c if c is not None else (_mean_cost(sample) if measured else 1.0)
    scale = total_events / sample.events if sample.events else 0.0
    import duckdb  # only with a log: ``import restream_kit`` stays light

    con = duckdb.connect()
    if log.streamed and not log.loaded:  # DuckDB reads the ordered copy where it lies
        path = str(log.ordered().path).replace("'", "''")
        con.execute(f"CREATE VIEW plan_log AS SELECT * FROM read_parquet('{path}')")
    else:
        con.register("plan_log", log.table)
    kind_counts = dict(con.execute("SELECT kind, COUNT(*) FROM plan_log GROUP BY kind").fetchall())
    loads = _Loads(con, log, program)
    per_stage = []
    scheduled_total = 0
    for stage in plan.stages:
        load, sched = _stage_load(stage, plan, program, loads, kind_counts, costs, sample, scale)
        scheduled_total += sched
        per_stage.append(load)
    con.close()
    speedups = tuple((p, round(predicted_speedup(per_stage, p), 4)) for p in WORKERS)
    data = DataPath(
        events=total_events,
        sample_events=sample.events,
        weighting="measured" if measured else "unit",
        handler_cost_us=tuple(
            (h.name, round(costs[h.name] * 1e6, 3) if measured else 1.0) for h in plan.handlers
        ),
        per_stage=tuple(per_stage),
        predicted_speedup=speedups,
        chain_bound=chain_bound(plan, per_stage),
        scheduled_runs=scheduled_total,
        notes=tuple(notes),
    )
    weights = {s.stage: s.cost for s in per_stage}
    return data, static_critical_path(plan, weights)


def _mean_cost(sample: Sample) -> float:
    runs = sum(sample.runs.values())
    return sum(sample.seconds.values()) / runs if runs else 1.0


def _stage_load(
    stage: Stage,
    plan: Plan,
    program: Program,
    loads: _Loads,
    kind_counts: dict[str, int],
    costs: dict[str, float],
    sample: Sample,
    scale: float,
) -> tuple[StageLoad, int]:
    handlers = [plan.handler(h) for h in stage.handlers]
    w = _Weights(runs={}, cost={})
    for h in handlers:
        for k in h.kinds:
            w.runs[k] = w.runs.get(k, 0) + 1
            w.cost[k] = w.cost.get(k, 0.0) + costs[h.name]
    log_runs = sum(kind_counts.get(k, 0) * r for k, r in w.runs.items())
    log_cost = sum(kind_counts.get(k, 0) * c for k, c in w.cost.items())
    # Runs of scheduled events, estimated from the sample.
    sched_runs = math.ceil(sum(sample.scheduled_runs.get(h.name, 0) for h in handlers) * scale)
    sched_cost = sum(sample.scheduled_runs.get(h.name, 0) * costs[h.name] for h in handlers) * scale
    work = log_runs + sched_runs
    cost = log_cost + sched_cost
    key_expr = stage.partition_key if stage.mode in ("partitioned", "broadcast-read") else None
    if work == 0:
        return StageLoad(stage.name, stage.mode, 0, None, 0, 0.0, (), 0.0, 0.0), 0
    if stage.mode == "sequential":
        return StageLoad(
            stage.name, stage.mode, work, None, work, 1.0, (), cost, cost, 1
        ), sched_runs
    if key_expr is None:
        heaviest_cost = max(costs[h.name] for h in handlers)
        share = round(heaviest_cost / cost, 6) if cost else 0.0
        return StageLoad(
            stage.name, stage.mode, work, None, 1, share, (), cost, heaviest_cost, work
        ), sched_runs
    # Partitioned: group by key.
    scheduled = [ev for ev in sample.scheduled if ev.kind in w.runs]
    found = _columns_of(key_expr, loads.columns)
    if found is not None and not scheduled:
        cols, single = found
        top, groups, max_runs = loads.by_columns(cols, w, HOT_KEYS)
        hot = [(_key_repr(k, single), n, c) for k, n, _r, c in top]
    else:
        key_fn = compile_key(key_expr, program)
        groups, max_runs, hot = _keyed_in_python(key_fn, found, loads, w, scheduled, scale)
    if not hot:
        return StageLoad(stage.name, stage.mode, work, None, 0, 0.0, (), cost, 0.0, 0), sched_runs
    heaviest_key, _n, heaviest_cost = hot[0]
    return (
        StageLoad(
            stage=stage.name,
            mode=stage.mode,
            work=work,
            heaviest_key=heaviest_key,
            heaviest_work=max_runs,
            heaviest_share=round(heaviest_cost / cost, 6) if cost else 0.0,
            hot_keys=tuple((k, n) for k, n, _c in hot),
            cost=cost,
            heaviest_cost=heaviest_cost,
            keys=groups,
        ),
        sched_runs,
    )


def _keyed_in_python(
    key_fn: Any, found: Any, loads: _Loads, w: _Weights, scheduled: list, scale: float
) -> tuple[int, int, list]:
    """(keys, the heaviest key's runs, the hot keys) of a stage whose key the columns cannot
    give alone: the log's events grouped by ``key_fn`` (or by columns when ``found``), and the
    sample's scheduled events, scaled to the log, added by their key."""
    if found is not None:
        cols, single = found
        full, _, _ = loads.by_columns(cols, w, None)
        acc = {(k[0] if single else k): [n, r, c] for k, n, r, c in full}
    else:
        acc = loads.by_python(key_fn, w)
    extra: dict[Any, list] = {}
    for ev in scheduled:
        slot = extra.setdefault(_safe_key(key_fn, ev), [0, 0, 0.0])
        slot[0] += 1
        slot[1] += w.runs[ev.kind]
        slot[2] += w.cost[ev.kind]
    for k, (n, r, c) in extra.items():
        slot = acc.setdefault(k, [0, 0, 0.0])
        slot[0] += math.ceil(n * scale)
        slot[1] += math.ceil(r * scale)
        slot[2] += c * scale
    ordered = sorted(acc.items(), key=lambda kv: (-kv[1][2], -kv[1][0], repr(kv[0])))
    max_runs = max((v[1] for _, v in ordered), default=0)
    return len(ordered), max_runs, [(repr(k), v[0], v[2]) for k, v in ordered[:HOT_KEYS]]


def chain_bound(plan: Plan, loads: list[StageLoad] | tuple[StageLoad, ...]) -> int:
    """The longest chain of handler runs the plan allows: the heaviest path of stages."""
    heaviest = {s.stage: s.heaviest_work for s in loads}
    best: dict[str, int] = {}
    for stage in plan.stages:
        before = max((best[u] for u in stage.upstream), default=0)
        best[stage.name] = before + heaviest.get(stage.name, 0)
    return max(best.values(), default=0)


def with_data(
    plan: Plan, program: Program, log: Log, *, sample_events: int = SAMPLE_EVENTS
) -> Plan:
    """``plan`` with its data critical path on ``log`` (and the cost-weighted static path)."""
    data, path = data_path(plan, program, log, sample_events=sample_events)
    return plan.with_data(data, path)
