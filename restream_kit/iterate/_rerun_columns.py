"""Re-run handlers as column expressions, when their reads are all served by recorded probes.

A re-replay (:mod:`restream_kit.iterate.reuse`) hands a re-run handler the values of its reads of
upstream state as columns aligned with its events (the probes a run recorded). When every
re-run handler only reads such values and emits (no writes), and each lowers
(:mod:`restream_kit.compiler.lower`: ``if``/``else``, locals, comparisons, ``+ - *``,
``and``/``or``/``not``, event fields, constants and parameters) with types whose column
evaluation cannot differ from Python's, the whole re-run is one polars selection per emit
site: its condition as a mask, its fields as expressions. Rows come out as the serial engine
makes them: the same columns, types and order (by event, then handler, then the emit's place
in the handler), ``seq`` 0.

Refused (the re-replay then runs the handlers' Python in a loop): writes, reads not served by
a probe, keys that could raise, values the typing rules of ``_lower`` doubt (None in
arithmetic or comparisons, integers that could overflow or lose precision against floats),
read values of mixed or non-plain types.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

import polars as pl
import pyarrow as pa

from ..compiler.columns import ColumnEvaluator, read_column
from ..compiler.inline import _function_locals
from ..compiler.lower import (
    Col,
    ColumnFacts,
    LoweredRead,
    NotLowerable,
    ReadOf,
    _column_types,
    _lit,
    _Lowerer,
    _Typed,
    _Typer,
    column_facts,
)
from ..history.probes import cannot_raise, key_text
from ..io.result import ROW_COLUMNS, build_table

__all__ = ["ColumnRun", "plan_columns", "NotLowerable"]

_ARROW = {"int": pa.int64(), "float": pa.float64(), "bool": pa.bool_(), "str": pa.string()}


@dataclass
class _Emit:
    table: str
    handler: str
    position: int  # the handler's place in declaration order
    n: int  # the emit's place in the handler
    kinds: tuple[str, ...]
    when: Any
    fields: tuple[tuple[str, Any, str], ...]  # (name, expression, type)


@dataclass
class ColumnRun:
    """The re-run handlers as column expressions: emit sites, and the served read columns
    they use (``reads``: read number -> site number of :mod:`restream_kit.history.probes`)."""

    emits: list[_Emit]
    reads: dict[int, int]
    columns: list[str]
    evaluator: ColumnEvaluator
    handler_kinds: dict[str, tuple[str, ...]]

    def run(
        self,
        events: pa.Table,
        read_values: dict[int, pl.Series],
        names: dict,
        kinds: set[str] | None = None,
    ) -> dict:
        """The re-run handlers' tables over ``events`` (the events of their kinds, in log
        order), ``read_values`` the served values of each site, aligned with the events of
        its handler's kinds (``names``: handler -> its served sites). Without a ``kind``
        column, ``kinds`` are the events' kinds, and every re-run handler runs on them all.
        Text columns read as dictionaries are decoded here, those the handlers use only."""
        used = [c for c in self.columns if c in events.column_names]
        frame = pl.from_arrow(_decoded(events.select(used)))
        if "kind" in frame.columns:
            every = set(frame.get_column("kind").unique().to_list())
        else:
            every = set(kinds or ())
            assert all(every <= set(k) for k in self.handler_kinds.values()), every
        added = []
        for read, site in self.reads.items():
            handler = names[site]
            values = read_values[site]
            if not every <= set(self.handler_kinds[handler]):
                kinds_of = frame.get_column("kind")
                at = kinds_of.is_in(list(self.handler_kinds[handler])).arg_true()
                full = pl.repeat(None, frame.height, dtype=values.dtype, eager=True)
                values = full.scatter(at, values)
            added.append(values.alias(read_column(read)))
        frame = frame.with_columns(added)
        # Taken at the emitting events only: the chunks as read, no copy of the whole column.
        lsn = events.column("lsn").cast(pa.int64())
        ts = events.column("ts").cast(pa.int64())
        by_table: dict[str, list[_Emit]] = {}
        for e in self.emits:
            by_table.setdefault(e.table, []).append(e)
        out = {}
        for table, sites in by_table.items():
            built = self._table(table, sites, frame, lsn, ts, every)
            if built is not None and built.num_rows:
                out[table] = built
        return out

    def _table(self, name, sites, frame, lsn, ts, every) -> pa.Table | None:
        parts = []
        for number, e in enumerate(sites):
            cond = self.evaluator.truth(e.when)
            if not every <= set(e.kinds):
                cond = pl.col("kind").is_in(list(e.kinds)) & cond
            # The emitting events' places from the mask: no index column over every event.
            mask = frame.with_columns(cond.alias("_rs_m")).get_column("_rs_m")
            sel = [pl.col("_rs_o")] + [self.evaluator.value(x).alias(f) for f, x, _t in e.fields]
            got = frame.filter(mask).with_columns(mask.arg_true().alias("_rs_o")).select(sel)
            parts.append((number, e, got))
        types: dict[str, str] = {}
        for _n, e, got in parts:
            for f, _x, t in e.fields:
                if types.setdefault(f, t) != t or got.get_column(f).null_count():
                    return _rows(name, parts, lsn, ts)  # build_table decides, as it would
        if len(parts) == 1:
            rows = parts[0][2]
        else:
            rows = pl.concat(
                [
                    got.with_columns(
                        pl.lit(e.position, pl.Int64).alias("_rs_h"),
                        pl.lit(e.n, pl.Int64).alias("_rs_n"),
                        pl.lit(e.handler).alias("_rs_name"),
                    )
                    for _n, e, got in parts
                ],
                how="diagonal",
            ).sort(["_rs_o", "_rs_h", "_rs_n"], maintain_order=True)
            if any(rows.get_column(f).null_count() for f in types):
                return _rows(name, parts, lsn, ts)
        at = rows.get_column("_rs_o").to_arrow()
        n = rows.height
        if len(parts) == 1:
            handler = pa.array([parts[0][1].handler] * n, pa.string())
        else:
            handler = rows.get_column("_rs_name").to_arrow().cast(pa.string())
        columns = {
            "lsn": lsn.take(at),
            "ts": ts.take(at),
            "handler": handler,
            "seq": pa.array([0] * n, pa.int64()),
        }
        # Fields in order of first appearance, as build_table orders them.
        first = rows.get_column("_rs_h").unique(maintain_order=True) if len(parts) > 1 else None
        order = [parts[0][1]] if first is None else _sites_in_order(parts, rows)
        for e in order:
            for f, _x, t in e.fields:
                if f not in columns:
                    columns[f] = rows.get_column(f).to_arrow().cast(_ARROW[t])
        return pa.table(columns)


def _sites_in_order(parts, rows: pl.DataFrame) -> list:
    by = {(e.position, e.n): e for _n, e, _g in parts}
    pairs = rows.select("_rs_h", "_rs_n").unique(maintain_order=True).rows()
    return [by[p] for p in pairs]


def _rows(name: str, parts, lsn: pa.Array, ts: pa.Array) -> pa.Table:
    """The table through ``build_table`` from Python rows (mixed or missing field types)."""
    rows = []
    for _n, e, got in parts:
        names = [f for f, _x, _t in e.fields]
        cols = [got.get_column(f).to_list() for f in names]
        for i, o in enumerate(got.get_column("_rs_o").to_list()):
            rows.append(((o, e.position, e.n), e.handler, {f: c[i] for f, c in zip(names, cols)}))
    rows.sort(key=lambda r: r[0])
    at = pa.array([r[0][0] for r in rows], pa.int64())
    lsns, tss = lsn.take(at).to_pylist(), ts.take(at).to_pylist()
    return build_table(name, [(a, b, r[1], 0, r[2]) for r, a, b in zip(rows, lsns, tss)])


class _SiteLowerer(_Lowerer):
    """``_Lowerer`` whose reads are the re-replay's served sites, not state lookups."""

    def __init__(self, program, table, sites: dict, constants: dict):
        # Not _Lowerer.__init__: states of any kind may exist; only served reads are used.
        self.program = program
        self.columns = _column_types(_facts(table))
        self.events = table.num_rows
        self.reads: list[LoweredRead] = []
        self.read_types: dict[int, _Typed] = {}
        self.writes = []
        self.emits = []
        self.key_types: dict[str, list[str]] = {}
        self.tuple_keys: dict[str, bool] = {}
        self.ops = 0
        self._value_types = {}
        self.sites = sites  # (handler, state, key text) -> site number
        self.constants = constants
        self.evaluated: list = []
        self.depth = 0
        self.site_of: dict[int, int] = {}

    def block(self, body, when, env):
        env = {**self.constants, **env} if env is not None else dict(self.constants)
        return super().block(body, when, env)

    def expr(self, node, env, condition=False):
        self.depth += 1
        try:
            out = self._expr(node, env, condition)
        finally:
            self.depth -= 1
        if self.depth == 0:
            self.evaluated.append(out.expr)
        return out

    def _expr(self, node, env, condition):
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.ctx, ast.Load)
            and isinstance(node.value, ast.Name)
            and node.value.id in self.program.states
            and node.value.id not in env
        ):
            if not cannot_raise(node.slice, self.arg):
                raise NotLowerable(f"line {node.lineno}: a key that could raise")
            keys = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            for k in keys:
                self.expr(k, env)  # its fields must be columns of plain types
            text = key_text(self.program, node.slice, self.arg, set(), list(self.columns))
            site = self.sites.get((self.h.name, node.value.id, text))
            if site is None:
                raise NotLowerable(f"line {node.lineno}: a read no probe serves")
            read = LoweredRead(len(self.reads), node.value.id, (), self.h.index, self.n)
            self.n += 1
            self.reads.append(read)
            self.site_of[read.index] = site
            return _Typed(ReadOf(read.index), "?")
        return super().expr(node, env, condition)


def _module_constants(program) -> dict[str, _Typed]:
    """Module-level names bound once to a plain constant (or a parameter's value), never
    rebound: a handler may use them as the constants they are."""
    counts: dict[str, int] = {}
    for node in ast.walk(program.module_ast):
        targets = []
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        elif isinstance(node, ast.Global):
            for name in node.names:
                counts[name] = counts.get(name, 0) + 2
        for t in targets:
            for n in ast.walk(t):
                if isinstance(n, ast.Name):
                    counts[n.id] = counts.get(n.id, 0) + 1
    out = {}
    params = {p.variable: p.default for p in program.params.values()}
    for node in program.module_ast.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        target = node.targets[0]
        if not isinstance(target, ast.Name) or counts.get(target.id) != 1:
            continue
        if target.id in params:
            value = params[target.id]
        elif isinstance(node.value, ast.Constant):
            value = node.value.value
        else:
            continue
        if type(value) in (bool, int, float, str):
            out[target.id] = _lit(value)
    return out


def plan_columns(
    program, handlers: list[str], sites: list, served: dict[int, pa.Array], table: pa.Table
) -> tuple[ColumnRun | None, str | None]:
    """The re-run ``handlers`` as a :class:`ColumnRun`, or None and why not.

    ``sites`` are the re-replay's served read sites; ``served`` their values (site number ->
    Arrow array: defaults filled in for reads of ``state[key]``); ``table`` the events."""
    by_key = {(s.handler, s.state, s.text): s.number for s in sites if s.default}
    try:
        constants = _module_constants(program)
        low = _SiteLowerer(program, table, by_key, constants)
        index = {h.name: h for h in program.handlers}
        if not _emit_is_kit(program):
            raise NotLowerable("emit is not restream_kit's emit")
        for name in handlers:
            h = index[name]
            local = _function_locals(h.node.body)
            if "emit" in local:
                raise NotLowerable(f"handler {name} binds the name emit")
            low.constants = {k: v for k, v in constants.items() if k not in local}
            low.handler(h)
            if low.writes:
                raise NotLowerable(f"handler {name} writes state")
        read_state: dict[int, str] = {}
        typer = _Typer(low, {}, read_state)
        for read, site in low.site_of.items():
            read_state[read] = f"#{read}"
            typer.state_types[f"#{read}"] = _served_type(served[site])
        for x in low.evaluated:
            typer.of(x)  # Python could raise, or compute otherwise: refused
        emits = []
        for e in low.emits:
            if e.when is not None:
                typer.truth(typer.of(e.when))
            fields = []
            for f, x in e.fields:
                if f in ROW_COLUMNS:
                    raise NotLowerable(f"field {f!r} clashes with a row column")
                fields.append((f, x, typer.of(x).type))
            h = program.handlers[e.handler]
            emits.append(_Emit(e.table, h.name, h.index, e.n, h.kinds, e.when, tuple(fields)))
    except (NotLowerable, KeyError) as exc:
        return None, str(exc)
    cols = dict.fromkeys(["lsn", "ts", "kind"])
    for x in low.evaluated:
        for sub in _walk(x):
            if isinstance(sub, Col):
                cols[sub.name] = None
    run = ColumnRun(
        emits,
        dict(low.site_of),
        list(cols),
        ColumnEvaluator(
            {name: t.type for name, t in low.columns.items()},
            {read: typer.state_types[f"#{read}"].type for read in low.site_of},
        ),
        {name: index[name].kinds for name in handlers},
    )
    return run, None


def _facts(table: pa.Table) -> dict[str, ColumnFacts]:
    """:func:`column_facts` of ``table``, a dictionary column taken as its values' type."""
    coded = {n for n, t in zip(table.column_names, table.schema.types) if pa.types.is_dictionary(t)}
    facts = column_facts(table.drop_columns(list(coded)))
    for name in coded:
        column = table.column(name)
        facts[name] = ColumnFacts(column.type.value_type, column.null_count > 0)
    return {name: facts[name] for name in table.column_names}


def _decoded(table: pa.Table) -> pa.Table:
    """``table`` with its dictionary columns decoded to their values' type."""
    for i, t in enumerate(table.schema.types):
        if pa.types.is_dictionary(t):
            table = table.set_column(i, table.field(i).name, table.column(i).cast(t.value_type))
    return table


def _emit_is_kit(program) -> bool:
    """``emit`` is imported from restream_kit by that name, and nothing else binds it."""
    imported = False
    for node in ast.walk(program.module_ast):
        if isinstance(node, ast.ImportFrom):
            for a in node.names:
                if (a.asname or a.name) == "emit":
                    if node.module != "restream_kit" or a.name != "emit":
                        return False
                    imported = True
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name == "emit":
                return False
        elif (
            isinstance(node, ast.Name) and node.id == "emit" and not isinstance(node.ctx, ast.Load)
        ):
            return False
    return imported


def _walk(x):
    from ..compiler.lower import walk

    return walk(x)


def _served_type(values: pa.Array) -> _Typed:
    """What typing knows of a served column: its type, nulls, integer bound."""
    import pyarrow.compute as pc

    t = values.type
    nullable = values.null_count > 0
    if pa.types.is_boolean(t):
        return _Typed(None, "bool", nullable)
    if pa.types.is_int64(t):
        mm = pc.min_max(values).as_py()
        lo, hi = mm["min"] or 0, mm["max"] or 0
        return _Typed(None, "int", nullable, max(abs(lo), abs(hi)))
    if pa.types.is_float64(t):
        return _Typed(None, "float", nullable)
    if pa.types.is_string(t):
        return _Typed(None, "str", nullable)
    raise NotLowerable(f"served values of type {t}")
