"""Incremental re-replay: re-run only the stages an edit changed; read the rest from a history.

``replay(program, log, reuse=RUN)`` (``docs/iterate.md``). :func:`restream_kit.history.identity.decide`
picks the stages to re-run. Only their handlers are compiled and run, over the events of
their kinds. Every read they make of a state that a reused stage writes is a read site
(:mod:`restream_kit.history.probes`) whose values RUN recorded, for every event of the handler's
kinds, at the handler's place (:mod:`restream_kit.history.recorder`): the re-run handler takes them as
a column aligned with its events, no join. When the re-run handlers only read such values and
emit, and lower to column expressions, they run as one polars selection per emit site
(:mod:`restream_kit.iterate._rerun_columns`); otherwise their Python runs in the usual loop, each
served read taking its value from a list by the handler's run number. The reused stages'
rows are RUN's rows of their handlers, and their states' final values RUN's final state.

A read that no recorded probe answers (or another use of a reused state: ``k in state``, a
helper that names it, a key that is not a function of the event) makes the stages writing
that state re-run too, which is always exact. Timed writes and scheduled events of reused
stages are served like any write (a probe holds the value the read found, whenever the write
landed); re-run handlers may write with ``at=`` but neither schedule nor run on scheduled
events (:func:`_check_timing`). When nothing can be reused (another log, a re-run handler
on scheduled events, every stage changed), :func:`replay_reusing` says why in
``Result.reuse["reuse_reason"]`` and replays in full.
"""

from __future__ import annotations

import ast
import itertools
import time
from collections.abc import Mapping
from itertools import repeat
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from ..compiler.inline import SCHEDULED_RUNNER_NAME
from ..engines.options import EngineOptions
from ..history.probes import counter_var, signature
from ..history.recorder import History, probe_sites
from ..io._state_files import LazyStore
from ..io.log import Log
from ..io.progress import Observer, broadcast, one_epoch_finished, one_epoch_started
from ..io.result import Metrics, Result, build_table
from ..model.errors import HandlerError, RestreamError
from ..model.program import Program
from ._rerun_columns import plan_columns
from ._reuse_plan import (
    CannotReuse,
    Prepared,
    check_usable,
    pick,
    prepare,
    served_array,
    served_list,
)

__all__ = ["replay_reusing", "CannotReuse", "resolve_run"]


def resolve_run(run: Any, log: Log) -> tuple[str, Result | None, History | None]:
    """``run`` (a catalog name or run id, or a ``Result``) as (label, result, history)."""
    if isinstance(run, Result):
        return "the given result", run, run.history
    from ..history.recorder import History as _History
    from ..io.catalog import Catalog, CatalogError

    catalog = Catalog()
    record = catalog.latest(str(run), log_fingerprint=log.fingerprint) or catalog.latest(str(run))
    run_id = record.run_id if record is not None else str(run)
    try:
        result = catalog.load(run_id)
    except CatalogError as exc:
        if record is None:
            raise RestreamError(
                f"reuse={run!r}: no run of that name or id in the catalog"
            ) from None
        raise RestreamError(f"reuse={run!r}: {exc}") from None
    return str(run), result, _History.read(result.path)


def replay_reusing(
    program: Program,
    log: Log,
    run: Any,
    *,
    full_replay,
    observer: Observer | None = None,
    history: bool = False,
    options: EngineOptions | Mapping[str, Any] | None = None,
) -> Result:
    """Replay ``program`` over ``log`` reusing what run ``run`` computed; see the module doc.

    ``full_replay(history=...)`` replays in full, for when nothing can be reused.
    ``options`` are the engine's (:func:`restream_kit.engines.options_of`).
    """
    from .. import planner

    label, recorded, hist = resolve_run(run, log)
    plan = planner.plan(program, allow_nondeterminism=True)
    try:
        check_usable(program, log, label, hist, EngineOptions.common(options or {}))
        result, (prep, info) = _rereplay(program, log, recorded, hist, plan, observer, history)
    except CannotReuse as why:
        result = full_replay(history=history)
        result.reuse = {
            "reused_run": label,
            "reused_stages": [],
            "rerun_stages": [s.name for s in plan.stages],
            "saved_s": 0.0,
            "reuse_reason": f"nothing reused from {label}: {why}",
            "rerun_as": None,
            "notes": [],
        }
        result.warnings.append(result.reuse["reuse_reason"])
        return result
    saved = (recorded.metrics.wall_s or 0.0) - result.metrics.wall_s
    result.reuse = {
        "reused_run": label,
        "reused_stages": list(prep.decision.reused_stages),
        "rerun_stages": list(prep.decision.rerun_stages),
        "saved_s": round(max(saved, 0.0), 6),
        "reuse_reason": None,
        "rerun_as": info["rerun_as"],
        "notes": prep.notes + ([info["columns_refused"]] if info["columns_refused"] else []),
    }
    return result


# -- the re-replay -----------------------------------------------------------------------


def _compile(program, log, prep: Prepared, rt, stores, recorder):
    """The re-run handlers compiled for the loop, their served reads rewritten."""
    from ..compiler.compile import compile_program

    serve = prep.serve(program, log)
    compiled = compile_program(
        program,
        rt,
        stores,
        columns=log.columns,
        kind_order=log.kinds_by_frequency(),
        extra_globals={
            SCHEDULED_RUNNER_NAME: _no_schedule,
            "_rs_pick": pick,
            **(recorder.globals if recorder is not None else {}),
        },
        only=prep.rerun,
        transform=serve,
        hooks=recorder.hooks if recorder is not None else (),
    )
    # The same walk over the same tree: the same sites, in the same order.
    assert [(s.handler, s.state, s.text) for s in serve.sites] == [
        (s.handler, s.state, s.text) for s in prep.sites
    ]
    return compiled


def _no_schedule(_t):  # pragma: no cover - programs that schedule are refused before
    raise RestreamError("a re-replay cannot run scheduled events")


def _rereplay(program, log, recorded, hist, plan, observer, history) -> tuple[Result, Any]:
    """Re-run the stages that changed over ``log``, reading the others' state from ``hist``
    and their rows from ``recorded``: as columns where the re-run handlers lower, else in
    the loop. Returns the result and (the plan, how the handlers re-ran)."""
    from ..history.recorder import Recorder
    from ..runtime import SerialRuntime, check_state

    notify = broadcast(observer)
    started = time.perf_counter()
    rt = SerialRuntime()
    stores: dict[str, dict] = {name: {} for name in program.states}
    recorder = None
    prep = prepare(program, log, hist, plan)
    if history:
        # The new run's history: probes of reused state come from RUN's, the others are
        # recorded by the re-run loop (their readers all re-run: they are downstream).
        recorder = Recorder(program, log.columns, skip=prep.reused_states, plan=plan)
    events = _Events(program, log, prep)
    total = len(log)
    one_epoch_started(notify, "serial", total, ("serial",), log.span_ms)
    as_columns, why_not = None, "a run that keeps a history records in the loop"
    if recorder is None or not recorder.hooks:
        as_columns, why_not = _as_columns(program, prep, events)
    prep_s = time.perf_counter() - started
    if as_columns is not None:
        new_tables, how = as_columns(), "columns"
    else:
        compiled = _compile(program, log, prep, rt, stores, recorder)
        new_tables, how = _loop(program, log, prep, events, compiled, rt, hist.last_ts), "loop"
    tables = _tables(recorded, new_tables, prep.reused, events.positions)
    state = _final_state(program, recorded, prep, stores)
    check_state({n: d for n, d in state.items() if n not in prep.reused_states})
    wall = time.perf_counter() - started
    one_epoch_finished(notify, total, wall, {})
    metrics = Metrics(
        engine="serial",
        events=total,
        scheduled_events=recorded.metrics.scheduled_events,  # RUN's: see _check_timing
        wall_s=wall,
        span_ms=log.span_ms,
        rows={name: t.num_rows for name, t in tables.items()},
        stages={"history reads": prep_s, "re-run": wall - prep_s},
    )
    result = Result(tables=tables, state=state, metrics=metrics)
    if history:
        result.history = _new_history(program, log, plan, hist, prep, recorder, rt, result)
    info = {"rerun_as": how, "columns_refused": None if how == "columns" else why_not}
    return result, (prep, info)


class _Events:
    """The events the re-run handlers run on: their kinds, and the fields they name."""

    def __init__(self, program: Program, log: Log, prep: Prepared):
        self.positions = {h.name: i for i, h in enumerate(program.handlers)}
        self.by_name = {h.name: h for h in program.handlers}
        self.kinds = sorted({k for h in prep.rerun for k in self.by_name[h].kinds})
        # Only the re-run handlers' events, and only the fields they name: never the whole log.
        self.named = _attributes(program, prep.rerun)
        self.fields = [c for c in log.columns if c in ("lsn", "ts", "kind") or c in self.named]
        self.log = log


def _as_columns(program: Program, prep: Prepared, events: _Events):
    """The re-run handlers as one polars selection per emit site: a function that runs them
    and returns their tables, and None; or None and why they run in the loop instead."""
    log, kinds, sites = events.log, events.kinds, prep.sites
    # As columns, kinds matter only when the re-run handlers' kinds differ (or one reads
    # e.kind); text columns are decoded only where an expression uses them (a key's never).
    same_kinds = all(set(events.by_name[h].kinds) == set(kinds) for h in prep.rerun)
    wanted = [c for c in events.fields if c != "kind" or not same_kinds or "kind" in events.named]
    selected = log.select(kinds, wanted, text=False)
    served = {}
    for site in sites:
        arr = served_array(prep.probes[site.number], program.states[site.state].default)
        if arr is not None and site.default:
            served[site.number] = arr
    columns_run, why_not = plan_columns(program, prep.rerun, sites, served, selected)
    if why_not:
        why_not = f"the re-run handlers ran in the loop, not as columns: {why_not}"
    if columns_run is None:
        return None, why_not

    def run() -> dict:
        handler_of = {s.number: s.handler for s in sites}
        values = {n: pl.from_arrow(a) for n, a in served.items() if n in columns_run.reads.values()}
        return columns_run.run(selected, values, handler_of, set(kinds))

    return run, why_not


def _loop(program, log, prep: Prepared, events: _Events, compiled, rt, last_ts) -> dict:
    """Run the compiled re-run handlers over their events, their served reads taking each
    probe's values by run number; the tables they emit."""
    sites = prep.sites
    ns = compiled.namespace
    for handler in {s.handler for s in sites}:
        ns[counter_var(handler)] = itertools.count().__next__
    for site in sites:
        default = program.states[site.state].default
        ns[site.var] = served_list(prep.probes[site.number], site, default)
    named = compiled.needs_named_events
    # A handler that takes the event itself gets every field, by name.
    selected = log.select(events.kinds) if named else log.select(events.kinds, events.fields)
    make = log.event_type()
    try:
        for batch in selected.to_batches(max_chunksize=65_536):
            # The loop reads fields by position: those no re-run handler names are None.
            read = dict(zip(batch.schema.names, batch.columns))
            rows = zip(*(read[c].to_pylist() if c in read else repeat(None) for c in log.columns))
            compiled.run_batch(
                list(map(lambda r: tuple.__new__(make, r), rows)) if named else list(rows)
            )
    except HandlerError:
        raise
    except Exception as exc:
        from ..engines.serial import _handler_error  # the serial engine's: on error only

        raise _handler_error(program, rt, exc, log.columns) from exc
    if rt.future and last_ts is not None:
        # A full replay applies the timed writes due by its last event (log or
        # scheduled, the same as RUN's: only reused handlers schedule), no later ones.
        rt.apply_due(last_ts)
    return {name: build_table(name, rows) for name, rows in rt.rows.items()}


def _final_state(program: Program, recorded: Result, prep: Prepared, stores: dict) -> dict:
    """The re-run states' stores, and the reused states' final values as RUN recorded them."""
    state = {}
    for name in program.states:
        if name in prep.reused_states:
            # _decide made sure every recorded writer of this state is reused: its recorded
            # final values are the ones a full replay ends with.
            # A recorded store not yet read stays so: recording this run links its file.
            kept = recorded.state.get(name, {})
            state[name] = kept if type(kept) is LazyStore else dict(kept)
        else:
            state[name] = stores[name]
    return state


def _new_history(program, log, plan, hist, prep: Prepared, recorder, rt, result) -> History:
    """The re-replay's own history: what the re-run loop recorded, and RUN's probes of the
    reads of reused state (same signature, same values)."""
    history = recorder.finish(program, log, rt, result)
    history.last_ts = hist.last_ts  # the same events ran as in RUN
    for site in probe_sites(program, plan, list(log.columns)):
        if site.state in prep.reused_states:
            sig = signature(program, plan, site.handler, site.state, site.text)
            if sig in hist.probes:
                history.probes[sig] = hist.probes[sig]
    return history


def _attributes(program: Program, handlers: list[str]) -> set[str]:
    """The attribute names in ``handlers`` (``e.col``, or any ``.col``): with lsn, ts and
    kind, the log columns their lowered columns or their inlined loop read of an event (a
    handler that takes the event whole needs named events, and gets every column)."""
    names = set()
    for fn in program.module_ast.body:
        if isinstance(fn, ast.FunctionDef) and fn.name in handlers:
            names |= {n.attr for n in ast.walk(fn) if isinstance(n, ast.Attribute)}
    return names


def _tables(recorded: Result, new: dict, reused_handlers: set, positions: dict) -> dict:
    """The reused handlers' recorded rows merged with the re-run tables, in log order."""
    names = list(dict.fromkeys([*recorded.tables, *new]))
    out = {}
    keep_names = pa.array(sorted(reused_handlers), pa.string())
    for name in names:
        old = recorded.tables.get(name)
        if old is not None:
            old = old.filter(pc.is_in(old.column("handler"), keep_names))
        fresh = new.get(name)
        if fresh is None or not fresh.num_rows:
            if old is not None and old.num_rows:
                out[name] = old
            continue
        if old is None or not old.num_rows:
            out[name] = fresh
            continue
        rows = []
        for t in (fresh, old):
            fields = [c for c in t.column_names if c not in ("lsn", "ts", "handler", "seq")]
            for r in t.to_pylist():
                rows.append((r["lsn"], r["ts"], r["handler"], r["seq"], {f: r[f] for f in fields}))
        # Events ran in (ts, lsn, seq) order (a scheduled event carries its root's lsn; with
        # no chain of scheduled events, see _check_timing); within an event, declaration
        # order. The sort is stable: within one handler's run only one side has rows.
        rows.sort(key=lambda r: (r[1], r[0], r[3], positions[r[2]]))
        out[name] = build_table(name, rows)
    # A full replay lists tables in the order of their first row.
    first = {
        n: (
            t.column("ts")[0].as_py(),
            t.column("lsn")[0].as_py(),
            t.column("seq")[0].as_py(),
            positions.get(t.column("handler")[0].as_py(), 0),
        )
        for n, t in out.items()
    }
    return {n: out[n] for n in sorted(out, key=lambda n: first[n])}
