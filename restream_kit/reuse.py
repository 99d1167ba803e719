"""Incremental re-replay: re-run only the stages an edit changed; read the rest from a history.

``replay(program, log, reuse=RUN)`` (``docs/iterate.md``). :func:`restream_kit.identity.decide`
picks the stages to re-run. Only their handlers are compiled and run, over the events of
their kinds; every read they make of a state that a reused stage writes is answered from the
recorded run's history *as of that handler run*: before the loop, for each such read site,
the key is computed for every event the handler will see and one polars ``join_asof`` (by
key, on the order position ``event index * P + handler position``) finds the value of the
last write before it. The handler then takes its value from a list, by its run number. The
reused stages' rows are the recorded run's rows of their handlers, and their states' final
values the last write of each key in the history.

When the history cannot serve a read exactly (a key that is not a function of the event, a
state passed through a helper, ``k in state``, scheduled events or timed writes, another
log), :func:`replay_reusing` says why in ``Result.reuse["reuse_reason"]`` and replays in full.
"""

from __future__ import annotations

import ast
import copy
import itertools
import time
from itertools import repeat
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from ._compile import compile_program, default_name, dict_name
from ._inline import SCHEDULED_RUNNER_NAME, _function_locals
from .errors import HandlerError, RestreamError
from .history import History, RecordingDict, codec_text, decode_column
from .log import Log
from .program import Program
from .progress import (
    EpochFinished,
    EpochStarted,
    Observer,
    Progress,
    ReplayFinished,
    ReplayStarted,
    broadcast,
)
from .result import Metrics, Result, build_table

__all__ = ["replay_reusing", "CannotReuse", "resolve_run"]

_MISSING = object()
#: Inside these a name may be bound by the construct itself: reads there are not served.
_SCOPES = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


class CannotReuse(Exception):
    """Why a recorded run cannot serve this re-replay (the replay then runs in full)."""


def resolve_run(run: Any, log: Log) -> tuple[str, Result | None, History | None]:
    """``run`` (a catalog name or run id, or a ``Result``) as (label, result, history)."""
    if isinstance(run, Result):
        return "the given result", run, run.history
    from .catalog import Catalog, CatalogError
    from .history import History as _History

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
    options: dict[str, Any] | None = None,
) -> Result:
    """Replay ``program`` over ``log`` reusing what run ``run`` computed; see the module doc.

    ``full_replay(history=...)`` replays in full, for when nothing can be reused.
    """
    from .planner import plan as make_plan

    label, recorded, hist = resolve_run(run, log)
    plan = make_plan(program, allow_nondeterminism=True)
    try:
        _check_usable(program, log, label, hist, options or {})
        decision = _decide(program, hist, plan)
        if decision.full:
            raise CannotReuse(decision.reason)
        result = _rereplay(program, log, recorded, hist, decision, plan, observer, history)
    except CannotReuse as why:
        result = full_replay(history=history)
        result.reuse = {
            "reused_run": label,
            "reused_stages": [],
            "rerun_stages": [s.name for s in plan.stages],
            "saved_s": 0.0,
            "reuse_reason": f"nothing reused from {label}: {why}",
        }
        result.warnings.append(result.reuse["reuse_reason"])
        return result
    saved = (recorded.metrics.wall_s or 0.0) - result.metrics.wall_s
    result.reuse = {
        "reused_run": label,
        "reused_stages": list(decision.reused_stages),
        "rerun_stages": list(decision.rerun_stages),
        "saved_s": round(max(saved, 0.0), 6),
        "reuse_reason": None,
    }
    return result


def _decide(program: Program, hist: History, plan):
    """:func:`identity.decide`, re-running also the writers of a state whose recorded values
    include writes of a handler that is not reused (removed or changed): a write's recorded
    value after it holds their part too."""
    from .identity import decide

    writers = {
        state: set(pc.unique(table.column("handler")).to_pylist())
        for state, table in hist.writes.items()
    }
    stages = {s.name: s for s in plan.stages}
    force: set[str] = set()
    while True:
        decision = decide(program, hist.identities, plan=plan, force=force)
        reused = {h for s in decision.reused_stages for h in stages[s].handlers}
        more = set()
        for name in decision.reused_stages:
            for h in stages[name].handlers:
                for access in plan.handler(h).writes:
                    if writers.get(access.state, set()) - reused:
                        more.add(name)
        if not more:
            return decision
        force |= more


def _check_usable(program: Program, log: Log, label: str, hist, options: dict) -> None:
    from .history import timing_reason

    if hist is None:
        raise CannotReuse(
            f"{label} kept no history (replay it with history=True, or restream replay --history)"
        )
    if hist.log_fingerprint != log.fingerprint:
        raise CannotReuse(f"{label} replayed another log")
    if hist.unusable:
        raise CannotReuse(f"its history cannot place every write ({hist.unusable})")
    why = timing_reason(program)
    if why:
        raise CannotReuse(f"re-replays serve reads by log event, and {why}")
    for option in ("checkpoint", "start_from", "resume"):
        if options.get(option):
            raise CannotReuse(f"{option} is given (a re-replay is one whole replay)")
    if options.get("on_error", "stop") != "stop":
        raise CannotReuse("on_error is not 'stop' (rolled back runs would have to be redone)")


# -- serving reads from the history ----------------------------------------------------


class _Site:
    """One read ``state[key]`` / ``state.get(key, fallback)`` of reused state in a handler."""

    def __init__(self, number, handler, state, key, event_arg, default, lineno):
        self.number = number
        self.handler = handler
        self.state = state
        self.key = key
        self.event_arg = event_arg
        self.default = default  # True: the state's default; else the read has a fallback
        self.lineno = lineno

    @property
    def var(self) -> str:
        return f"_rs_pre_{self.number}"


def _counter_var(handler: str) -> str:
    return f"_rs_next_{handler}"


class _ServeReads:
    """Rewrite the re-run handlers so that reads of reused states take precomputed values."""

    def __init__(self, program: Program, handlers: list[str], reused_states: set[str]):
        self.program = program
        self.handlers = set(handlers)
        self.all_handlers = {h.name for h in program.handlers}
        self.dicts = {dict_name(s): s for s in reused_states}
        self.sites: list[_Site] = []

    def __call__(self, tree: ast.Module) -> ast.Module:
        for node in tree.body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if node.name in self.handlers:
                self._handler(node)
            elif node.name not in self.all_handlers and node.name != "_rs_run_batch":
                for sub in ast.walk(node):
                    if isinstance(sub, ast.Name) and sub.id in self.dicts:
                        raise CannotReuse(
                            f"helper {node.name}() (line {sub.lineno}) uses state "
                            f"{self.dicts[sub.id]!r}, which a reused stage writes"
                        )
        return ast.fix_missing_locations(tree)

    def _handler(self, fn: ast.FunctionDef) -> None:
        event_arg = fn.args.args[0].arg
        local = _function_locals(fn.body) - {event_arg}
        before = len(self.sites)
        fn.body = [self._visit(stmt, fn.name, event_arg, local, []) for stmt in fn.body]
        if len(self.sites) > before:
            counter = ast.parse(f"_rs_i = {_counter_var(fn.name)}()").body[0]
            ast.copy_location(counter, fn.body[0])
            for n in ast.walk(counter):
                ast.copy_location(n, fn.body[0])
            fn.body.insert(0, counter)

    def _visit(self, node, handler, event_arg, local, enclosing):
        site = self._site(node, handler, event_arg, local, enclosing)
        if site is not None:
            return site
        if isinstance(node, ast.Name) and node.id in self.dicts:
            raise CannotReuse(
                f"handler {handler} (line {node.lineno}) uses state {self.dicts[node.id]!r} "
                "other than by reading one key (a reused stage writes it)"
            )
        inner = [*enclosing, node]
        for name, value in ast.iter_fields(node):
            if isinstance(value, list):
                setattr(
                    node,
                    name,
                    [
                        self._visit(v, handler, event_arg, local, inner)
                        if isinstance(v, ast.AST)
                        else v
                        for v in value
                    ],
                )
            elif isinstance(value, ast.AST):
                setattr(node, name, self._visit(value, handler, event_arg, local, inner))
        return node

    def _site(self, node, handler, event_arg, local, enclosing):
        """The replacement of a served read, or None when ``node`` is not one."""
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in self.dicts
            and 1 <= len(node.args) <= 2
            and not node.keywords
        ):
            return None
        state = self.dicts[node.func.value.id]
        key = node.args[0]
        where = f"handler {handler} (line {node.lineno}) reads {state!r}"
        if any(isinstance(n, _SCOPES) for n in enclosing):
            raise CannotReuse(f"{where} inside a lambda or comprehension")
        for sub in ast.walk(key):
            if isinstance(sub, (ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom)):
                raise CannotReuse(f"{where} with a key that assigns")
            if isinstance(sub, ast.Name) and sub.id != event_arg:
                if sub.id in local or sub.id.startswith("_rs_") or sub.id in _helpers(self.program):
                    raise CannotReuse(f"{where} with a key that is not a function of the event")
        fallback = node.args[1] if len(node.args) == 2 else ast.Constant(None)
        fallback = self._visit(fallback, handler, event_arg, local, [*enclosing, node])
        uses_default = isinstance(fallback, ast.Name) and fallback.id == default_name(state)
        site = _Site(
            len(self.sites),
            handler,
            state,
            copy.deepcopy(key),
            event_arg,
            uses_default,
            node.lineno,
        )
        self.sites.append(site)
        served: ast.expr = ast.Subscript(
            value=ast.Name(site.var, ast.Load()),
            slice=ast.Name("_rs_i", ast.Load()),
            ctx=ast.Load(),
        )
        if not _cannot_raise(key, event_arg):
            # Evaluate the key all the same: a key that raises still raises, as it would.
            served = ast.Subscript(
                value=ast.Tuple([key, served], ast.Load()), slice=ast.Constant(1), ctx=ast.Load()
            )
        if not uses_default:
            served = ast.Call(ast.Name("_rs_pick", ast.Load()), [served, fallback], [])
        return ast.copy_location(served, node)


def _helpers(program: Program) -> set[str]:
    return {
        n.name
        for n in program.module_ast.body
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    }


def _cannot_raise(key: ast.expr, event_arg: str) -> bool:
    """``e.col``, constants and tuples of them (fields are checked against the log first)."""
    if isinstance(key, ast.Constant):
        return True
    if isinstance(key, ast.Tuple):
        return all(_cannot_raise(k, event_arg) for k in key.elts)
    return (
        isinstance(key, ast.Attribute)
        and isinstance(key.value, ast.Name)
        and key.value.id == event_arg
    )


def _pick(value: Any, fallback: Any) -> Any:
    return fallback if value is _MISSING else value


def _site_keys(site: _Site, events: pa.Table, namespace: dict, make) -> list | pa.ChunkedArray:
    """The key of ``site``'s read for every event its handler runs on, in run order."""
    key = site.key
    if (
        isinstance(key, ast.Attribute)
        and isinstance(key.value, ast.Name)
        and key.value.id == site.event_arg
        and key.attr in events.column_names
    ):
        return events.column(key.attr)
    lam = ast.Expression(
        ast.Lambda(
            ast.arguments([], [ast.arg(site.event_arg)], None, [], [], None, []), copy.deepcopy(key)
        )
    )
    fn = eval(compile(ast.fix_missing_locations(lam), "<reuse key>", "eval"), namespace)
    out = []
    for row in zip(*(c.to_pylist() for c in events.columns)):
        try:
            out.append(fn(make(row)))
        except Exception:  # noqa: BLE001 - the handler evaluates the key again and raises
            out.append(_MISSING)
    return out


def _key_series(keys, encoding: str, where: str) -> pl.Series:
    """Read keys in the history's encoding of that state's keys."""
    if isinstance(keys, pa.ChunkedArray):
        if encoding != "codec" and str(keys.type) == encoding:
            return pl.Series("key", keys)
        keys = keys.to_pylist()
    if encoding == "codec":
        return pl.Series("key", [None if k is _MISSING else codec_text(k) for k in keys], pl.String)
    wanted = {"int64": int, "double": float, "string": str, "bool": bool}[encoding]
    seen = {type(k) for k in keys if k is not _MISSING}
    numeric = {int, float, bool}
    if wanted in numeric and (seen & numeric) - {wanted}:
        # 1, 1.0 and True are one dict key: a typed join would miss what a dict finds.
        raise CannotReuse(f"{where} with keys of another number type than written (1 == 1.0)")
    return pl.Series(
        "key",
        [k if type(k) is wanted else None for k in keys],
        dtype={int: pl.Int64, float: pl.Float64, str: pl.String, bool: pl.Boolean}[wanted],
    )


def _serve(site, keys, hist, writes_at, run_pos, default) -> list:
    """The value of ``state[key]`` just before each run of the site's handler."""
    enc = hist.encodings.get(site.state)
    missing = default if site.default else _MISSING
    n = len(run_pos)
    writes = writes_at.get(site.state)
    if enc is None or writes is None or writes.height == 0:
        return [missing] * n
    where = f"handler {site.handler} (line {site.lineno}) reads {site.state!r}"
    reads = pl.DataFrame({"key": _key_series(keys, enc["key"], where), "pos": run_pos})
    writes = writes.select("key", "pos", "value", "deleted")
    # Both sides are sorted by pos (reads in log order; writes sorted above).
    joined = reads.join_asof(
        writes, on="pos", by="key", strategy="backward", check_sortedness=False
    )
    found = joined.get_column("deleted").fill_null(True).not_()
    value = joined.get_column("value")
    if enc["value"] == {int: "int64", float: "double", str: "string"}.get(type(missing)):
        # The default has the values' own type: polars fills it in, no Python loop.
        return (
            joined.select(pl.when(found).then(value).otherwise(pl.lit(missing)))
            .to_series()
            .to_list()
        )
    vals = decode_column(value.to_list(), enc["value"])
    return [v if ok else missing for v, ok in zip(vals, found.to_list(), strict=True)]


def _positioned_writes(hist, states, reused_handlers, positions, log_index, width):
    """Per reused state, its writes by reused handlers with their order position, deduplicated."""
    out = {}
    for state in states:
        table = hist.writes.get(state)
        if table is None:
            continue
        frame = pl.from_arrow(table).with_row_index("op")
        frame = frame.filter(pl.col("handler").is_in(list(reused_handlers)))
        hpos = pl.DataFrame(
            {"handler": list(positions), "hpos": list(positions.values())},
            schema={"handler": pl.String, "hpos": pl.Int64},
        )
        frame = frame.join(log_index, on="lsn").join(hpos, on="handler")
        frame = frame.with_columns(pos=pl.col("idx").cast(pl.Int64) * width + pl.col("hpos"))
        # The last write of a key in one handler run is the one later reads see.
        frame = frame.sort(["pos", "op"]).unique(["key", "pos"], keep="last", maintain_order=True)
        out[state] = frame
    return out


# -- the re-replay -----------------------------------------------------------------------


def _rereplay(program, log, recorded, hist, decision, plan, observer, history) -> Result:
    from .engines.serial import SerialRuntime, _handler_error, check_state

    notify = broadcast(observer)
    started = time.perf_counter()
    stages = {s.name: s for s in plan.stages}
    rerun_handlers = [h for s in decision.rerun_stages for h in stages[s].handlers]
    reused_handlers = {h for s in decision.reused_stages for h in stages[s].handlers}
    reused_states = {a.state for h in reused_handlers for a in plan.handler(h).writes}
    positions = {h.name: i for i, h in enumerate(program.handlers)}
    width = len(positions) + 1
    by_name = {h.name: h for h in program.handlers}
    serve = _ServeReads(program, rerun_handlers, reused_states)
    rt = SerialRuntime()
    writes: dict[str, list] = {}
    stores: dict[str, dict] = {}
    for name in program.states:
        if history and name not in reused_states:
            stores[name] = RecordingDict(rt, writes.setdefault(name, []))
        else:
            stores[name] = {}

    def no_schedule(_t):  # pragma: no cover - programs that schedule are refused before
        raise RestreamError("a re-replay cannot run scheduled events")

    compiled = compile_program(
        program,
        rt,
        stores,
        columns=log.columns,
        kind_order=log.kinds_by_frequency(),
        extra_globals={SCHEDULED_RUNNER_NAME: no_schedule, "_rs_pick": _pick},
        only=rerun_handlers,
        transform=serve,
    )
    ns = compiled.namespace
    kinds = sorted({k for h in rerun_handlers for k in by_name[h].kinds})
    table = log.table
    index = pa.array(range(table.num_rows), pa.int64())
    log_index = pl.DataFrame({"lsn": table.column("lsn"), "idx": index})
    writes_at = _positioned_writes(
        hist, {site.state for site in serve.sites}, reused_handlers, positions, log_index, width
    )
    make = log.event_type()
    for handler in {s.handler for s in serve.sites}:
        mask = pc.is_in(table.column("kind"), pa.array(sorted(by_name[handler].kinds)))
        events = table.filter(mask)
        idx = pc.filter(index, mask)
        run_pos = pl.Series("pos", idx).cast(pl.Int64) * width + positions[handler]
        ns[_counter_var(handler)] = itertools.count().__next__
        for site in (s for s in serve.sites if s.handler == handler):
            keys = _site_keys(site, events, ns, lambda row: tuple.__new__(make, row))
            default = program.states[site.state].default
            ns[site.var] = _serve(site, keys, hist, writes_at, run_pos, default)
    prep_s = time.perf_counter() - started
    selected = table.filter(pc.is_in(table.column("kind"), pa.array(kinds, pa.string())))
    total = len(log)
    notify(ReplayStarted("serial", total, 1, ("serial",), log.span_ms))
    notify(EpochStarted(0, total))
    named = compiled.needs_named_events
    wanted = _columns_read(program, rerun_handlers, log.columns) if not named else None
    try:
        for batch in selected.to_batches(max_chunksize=65_536):
            rows = zip(
                *(
                    col.to_pylist() if wanted is None or i in wanted else repeat(None)
                    for i, col in enumerate(batch.columns)
                )
            )
            compiled.run_batch(
                list(map(lambda r: tuple.__new__(make, r), rows)) if named else list(rows)
            )
    except HandlerError:
        raise
    except Exception as exc:
        raise _handler_error(program, rt, exc, log.columns) from exc
    tables = _tables(recorded, rt.rows, reused_handlers, positions)
    state = {}
    for name in program.states:
        if name in reused_states:
            # _decide made sure every recorded writer of this state is reused: its recorded
            # final values are the ones a full replay ends with.
            state[name] = dict(recorded.state.get(name, {}))
        else:
            state[name] = dict(stores[name]) if history else stores[name]
    check_state({n: d for n, d in state.items() if n not in reused_states})  # others were
    wall = time.perf_counter() - started
    notify(Progress(total, total, wall))
    notify(EpochFinished(0, total, wall, {}, None))
    notify(ReplayFinished(total, wall))
    metrics = Metrics(
        engine="serial",
        events=total,
        scheduled_events=0,
        wall_s=wall,
        span_ms=log.span_ms,
        rows={name: t.num_rows for name, t in tables.items()},
        stages={"history reads": prep_s, "re-run": wall - prep_s},
    )
    result = Result(tables=tables, state=state, metrics=metrics)
    if history:
        result.history = _combined_history(program, log, hist, writes, reused_states)
    return result


def _columns_read(program: Program, handlers: list[str], columns: list[str]) -> set[int]:
    """Positions of the log columns the re-run handlers name (``e.col``), and lsn, ts, kind.

    Other columns of the events they get stay None: the inlined loop reads columns by position.
    """
    names = set()
    for fn in program.module_ast.body:
        if isinstance(fn, ast.FunctionDef) and fn.name in handlers:
            names |= {n.attr for n in ast.walk(fn) if isinstance(n, ast.Attribute)}
    return {0, 1, 2} | {i for i, c in enumerate(columns) if c in names}


def _tables(recorded: Result, rerun_rows: dict, reused_handlers: set, positions: dict) -> dict:
    """The reused handlers' recorded rows merged with the re-run rows, in log order."""
    names = list(dict.fromkeys([*recorded.tables, *rerun_rows]))
    out = {}
    for name in names:
        old = recorded.tables.get(name)
        if old is not None:
            keep = pc.is_in(old.column("handler"), pa.array(sorted(reused_handlers), pa.string()))
            old = old.filter(keep)
        new = rerun_rows.get(name, [])
        if not new:
            if old is not None and old.num_rows:
                out[name] = old
            continue
        rows = list(new)
        if old is not None and old.num_rows:
            fields = [c for c in old.column_names if c not in ("lsn", "ts", "handler", "seq")]
            for r in old.to_pylist():
                rows.append((r["lsn"], r["ts"], r["handler"], r["seq"], {f: r[f] for f in fields}))
            # Log order is (ts, lsn); within an event, declaration order; sort is stable.
            rows.sort(key=lambda r: (r[1], r[0], positions[r[2]]))
        out[name] = build_table(name, rows)
    # A full replay lists tables in the order of their first row.
    first = {
        n: (
            t.column("ts")[0].as_py(),
            t.column("lsn")[0].as_py(),
            positions.get(t.column("handler")[0].as_py(), 0),
        )
        for n, t in out.items()
    }
    return {n: out[n] for n in sorted(out, key=lambda n: first[n])}


def _combined_history(program, log, hist, writes, reused_states) -> History:
    from .identity import stage_identities

    new = History(
        log_fingerprint=log.fingerprint,
        identities=stage_identities(program),
        stages=dict(hist.stages),
    )
    from .planner import plan as make_plan

    new.stages = {
        s.name: list(s.handlers) for s in make_plan(program, allow_nondeterminism=True).stages
    }
    for name in program.states:
        if name in reused_states and name in hist.writes:
            new.writes[name] = hist.writes[name]
            new.encodings[name] = hist.encodings[name]
        else:
            new.add_state(name, writes.get(name, []))
    return new
