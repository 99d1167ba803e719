"""Parameter sweeps: every variant of a grid of parameter values in one scan of the log.

``sweep(program, log, ratio=[1.5, 2, 3], share=[0.1, 0.2])`` rewrites the program into one
*sweep program* in which the handlers no swept parameter can affect run once and every other
handler runs once per variant, on its own copy of the state it writes (the variant is part of
the state's name, so of every key). The ordinary engine replays that program; its result is
split into one :class:`~restream_kit.io.result.Result` per variant. ``docs/iterate.md`` says
which handlers are shared and why each variant equals its own replay.
"""

from __future__ import annotations

import ast
import copy
import itertools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..engines import capabilities_of, get_engine
from ..io.log import Log
from ..io.result import Metrics, Result
from ..model import handlers as declared
from ..model.errors import ProgramError
from ..model.params import check_values, names_used, with_params
from ..model.program import Program, _local_names

__all__ = ["sweep", "Sweep", "Variant", "SweepProgram", "sweep_program", "grid", "parse_grid"]

#: The suffix of a variant's copy of a handler, state or helper: ``flag__v3``.
COPY = "__v{}"
#: The suffix of a variant's output table in the sweep program: ``spam@variant3``.
TABLE = "@variant{}"


@dataclass
class Variant:
    """One variant of a sweep: its parameter values and its result."""

    params: dict[str, Any]
    result: Result

    @property
    def label(self) -> str:
        """``ratio=1.5,share=0.1``: also the variant's folder name under ``--out``."""
        return ",".join(f"{k}={v}" for k, v in self.params.items())

    def to_dict(self) -> dict[str, Any]:
        return {"params": dict(self.params), "tables": dict(self.result.metrics.rows)}


@dataclass
class Sweep:
    """A sweep's variants (in grid order) and how it ran.

    ``single_scan`` is True when every variant ran in one replay of the sweep program;
    ``shared_handlers`` ran once for all variants, ``variant_handlers`` once per variant.
    """

    variants: list[Variant]
    events: int
    wall_s: float
    engine: str
    single_scan: bool
    shared_handlers: tuple[str, ...]
    variant_handlers: tuple[str, ...]
    warnings: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.variants)

    def __iter__(self):
        return iter(self.variants)

    def __getitem__(self, index: int) -> Variant:
        return self.variants[index]

    def result(self, **params: Any) -> Result:
        """The result of the variant with these parameter values."""
        for v in self.variants:
            if all(v.params.get(k) == x for k, x in params.items()):
                return v.result
        raise KeyError(f"no variant with {params}")

    def rows(self):
        """A polars frame: one row per variant, its parameters and rows per output table."""
        import polars as pl

        tables = sorted({t for v in self.variants for t in v.result.table_names})
        return pl.DataFrame(
            [
                {**v.params, **{t: v.result.metrics.rows.get(t, 0) for t in tables}}
                for v in self.variants
            ]
        )

    def summary(self) -> dict[str, Any]:
        return {
            "variants": [v.to_dict() for v in self.variants],
            "events": self.events,
            "wall_s": self.wall_s,
            "engine": self.engine,
            "single_scan": self.single_scan,
            "shared_handlers": list(self.shared_handlers),
            "variant_handlers": list(self.variant_handlers),
            "warnings": list(self.warnings),
        }

    def write(self, out: str | Path) -> dict[str, dict[str, str]]:
        """Write each variant's tables under ``out/<label>/``; return the paths by variant."""
        return {v.label: v.result.write(Path(out) / v.label) for v in self.variants}

    def __repr__(self) -> str:
        how = "one scan" if self.single_scan else "separate replays"
        return f"Sweep({len(self.variants)} variants, {how}, {self.wall_s:.2f} s)"


def grid(values: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Every combination of ``values`` (a parameter name to its list of values), in order."""
    names = list(values)
    for name in names:
        if isinstance(values[name], (str, bytes)) or not isinstance(values[name], Sequence):
            raise ProgramError(f"sweep: give a list of values for {name!r}, not {values[name]!r}")
        if not values[name]:
            raise ProgramError(f"sweep: {name!r} has no value to try")
    return [dict(zip(names, combo)) for combo in itertools.product(*(values[n] for n in names))]


def parse_grid(items: Sequence[str], option: str = "--param") -> dict[str, list[Any]]:
    """``["ratio=1.5,2,3", "share=0.1"]`` (command line or magic options) as the values of
    a grid: ``{"ratio": [1.5, 2, 3], "share": [0.1]}``."""
    from ..model.params import parse_value

    out: dict[str, list[Any]] = {}
    for item in items:
        name, eq, text = item.partition("=")
        name = name.strip()
        if not eq or not name or not text.strip():
            raise ProgramError(f"{option} {item!r}: expected NAME=V1,V2,...")
        if name in out:
            raise ProgramError(f"{option} {name} is given twice")
        out[name] = [parse_value(v) for v in text.split(",")]
    return out


@dataclass(frozen=True)
class SweepProgram:
    """The rewritten program and what each part of it is."""

    program: Program
    shared_handlers: tuple[str, ...]
    variant_handlers: tuple[str, ...]
    variant_states: tuple[str, ...]
    variant_tables: frozenset[str] | None  # None: every table a variant handler emits to


def _module_namespace(program: Program) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": f"restream_sweep_{program.name}"}
    exec(compile(program.module_ast, program.filename, "exec"), namespace)
    return namespace


def _is_emit(node: ast.AST, namespace: Mapping[str, Any]) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Name):
        return namespace.get(func.id) is declared.emit
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return func.attr == "emit" and getattr(namespace.get(func.value.id), "emit", None) is (
            declared.emit
        )
    return False


def _tables(fns: Sequence[ast.FunctionDef], namespace: Mapping[str, Any]) -> set[str | None]:
    """The tables these functions emit to (None for a table name that is not a literal)."""
    out: set[str | None] = set()
    for fn in fns:
        for node in ast.walk(fn):
            if _is_emit(node, namespace):
                first = node.args[0] if node.args else None
                literal = isinstance(first, ast.Constant) and isinstance(first.value, str)
                out.add(first.value if literal else None)
    return out


def partition(program: Program, swept: Sequence[str]) -> tuple[set[str], set[str], set[str]]:
    """(variant handlers, variant states, variant tables) for sweeping parameters ``swept``.

    The least set closed under: a handler naming a swept parameter (directly or through
    helpers); a handler reading or writing a state a variant handler writes; a handler
    emitting to a table a variant handler emits to. See ``docs/iterate.md``.
    """
    from ..planner._analysis import analyse

    analysed = {h.name: h for h in analyse(program)[0]}
    used = names_used(program.module_ast)
    functions = {n.name: n for n in program.module_ast.body if isinstance(n, ast.FunctionDef)}
    namespace = _module_namespace(program)
    variables = {program.params[name].variable for name in swept}
    tables = {
        h.name: _tables(
            [functions[h.name], *(functions[f] for f in used[h.name] if f in functions)],
            namespace,
        )
        for h in program.handlers
    }
    variant = {h.name for h in program.handlers if variables & used.get(h.name, set())}
    while True:
        states = {a.state for h in variant for a in analysed[h].accesses if a.op != "read"}
        out = set().union(*(tables[h] for h in variant)) if variant else set()
        grown = set(variant)
        for h in program.handlers:
            touched = {a.state for a in analysed[h.name].accesses}
            emits = tables[h.name]
            if (
                touched & states
                or emits & out
                or (None in out and emits)
                or (None in emits and out)
            ):
                grown.add(h.name)
        if grown == variant:
            return variant, states, out
        variant = grown


class _Renamer(ast.NodeTransformer):
    """Renames module names in one function's copy and routes its emits to variant tables."""

    def __init__(self, names: Mapping[str, str], suffix: str, namespace: Mapping[str, Any]):
        self.names = names
        self.suffix = suffix
        self.namespace = namespace
        self.local: set[str] = set()

    def function(self, fn: ast.FunctionDef) -> ast.FunctionDef:
        self.local = _local_names(fn)
        fn = copy.deepcopy(fn)
        fn.name = self.names.get(fn.name, fn.name)
        return self.visit(fn)

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.names and node.id not in self.local:
            return ast.copy_location(ast.Name(id=self.names[node.id], ctx=node.ctx), node)
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        emit = _is_emit(node, self.namespace)
        node = self.generic_visit(node)
        if emit and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                table: ast.expr = ast.Constant(first.value + self.suffix)
            else:
                table = ast.BinOp(left=first, op=ast.Add(), right=ast.Constant(self.suffix))
            node.args[0] = ast.copy_location(table, first)
        return node


def sweep_program(program: Program, variants: Sequence[Mapping[str, Any]]) -> SweepProgram:
    """The program that runs every variant in one scan (see the module docstring)."""
    swept = list(variants[0]) if variants else []
    variant, states, _tables_out = partition(program, swept)
    used = names_used(program.module_ast)
    variables = {program.params[n].variable: n for n in swept}
    _reject_module_uses(program, variables)
    namespace = _module_namespace(program)
    # Helpers to copy: those that name a swept parameter or a variant state, transitively.
    helpers = {
        name
        for name, names in used.items()
        if name not in {h.name for h in program.handlers} and names & (set(variables) | states)
    }
    declarations = _state_declarations(program, states)
    declared_at = {program.params[n].lineno: n for n in swept}
    body: list[ast.stmt] = []
    for stmt in program.module_ast.body:
        name = getattr(stmt, "name", None)
        copies_of = name if name in variant or name in helpers else None
        target = declarations.get(id(stmt))
        if copies_of is None and target is None:
            body.append(stmt)
        param_name = declared_at.get(stmt.lineno) if isinstance(stmt, ast.Assign) else None
        for i, values in enumerate(variants):
            suffix = COPY.format(i)
            if param_name is not None:
                var = program.params[param_name].variable
                bind = ast.Assign(
                    targets=[ast.Name(id=var + suffix, ctx=ast.Store())],
                    value=ast.Constant(values[param_name]),
                )
                body.append(ast.copy_location(bind, stmt))
            if target is not None:
                body.append(_renamed_assign(stmt, target + suffix))
            elif copies_of is not None:
                names = {v: v + suffix for v in variables}
                names.update({s: s + suffix for s in states})
                names.update({f: f + suffix for f in helpers | variant})
                body.append(_Renamer(names, TABLE.format(i), namespace).function(stmt))
    module = ast.fix_missing_locations(ast.Module(body=body, type_ignores=[]))
    rewritten = Program(program.source, program.filename, program.name, module_ast=module)
    shared = tuple(h.name for h in program.handlers if h.name not in variant)
    ordered = tuple(h.name for h in program.handlers if h.name in variant)
    return SweepProgram(rewritten, shared, ordered, tuple(sorted(states)), None)


def _state_declarations(program: Program, states: set[str]) -> dict[int, str]:
    """Per module statement (by id) that declares a variant state, the state's name."""
    out = {}
    found = set()
    for stmt in program.module_ast.body:
        if (
            isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
            and stmt.targets[0].id in states
        ):
            out[id(stmt)] = stmt.targets[0].id
            found.add(stmt.targets[0].id)
    missing = states - found
    if missing:
        name = sorted(missing)[0]
        raise ProgramError(
            f"sweep: state {name!r} must be declared as `{name} = state.Map()` (one name, one "
            "declaration) to be copied per variant",
            filename=program.filename,
        )
    return out


def _renamed_assign(stmt: ast.Assign, name: str) -> ast.Assign:
    new = copy.deepcopy(stmt)
    new.targets = [ast.copy_location(ast.Name(id=name, ctx=ast.Store()), stmt.targets[0])]
    return new


def _reject_module_uses(program: Program, variables: Mapping[str, str]) -> None:
    """A swept parameter used outside functions (``limit = 2 * ratio``) cannot vary per variant."""
    for stmt in program.module_ast.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if isinstance(stmt, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id in variables for t in stmt.targets
        ):
            continue
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and node.id in variables:
                raise ProgramError(
                    f"sweep: parameter {variables[node.id]!r} is used at module level; a sweep "
                    "varies it only where handlers (or their helpers) name it",
                    filename=program.filename,
                    lineno=stmt.lineno,
                )


def _dump(tree: ast.AST) -> str:
    return ast.dump(tree, include_attributes=False)


def astuple_rest(sp: SweepProgram) -> tuple:
    """Every field of ``sp`` but its program."""
    return sp.shared_handlers, sp.variant_handlers, sp.variant_states, sp.variant_tables


def _schedules(program: Program, handlers: set[str]) -> list[str]:
    from ..planner._analysis import analyse

    return [h.name for h in analyse(program)[0] if h.name in handlers and h.schedules]


def sweep(
    program: Program | str | Path,
    log: Log | Any,
    *,
    engine: str = "serial",
    params: Mapping[str, Any] | None = None,
    options: Mapping[str, Any] | None = None,
    ts: str | None = None,
    kind: str | None = None,
    require_kinds: bool = True,
    **values: Sequence[Any],
) -> Sweep:
    """Replay every combination of the parameter values given (a grid), in one scan.

    ``sweep(program, log, ratio=[1.5, 2, 3], share=[0.1, 0.2])`` gives 6 variants; each
    variant's result equals ``replay(program, log, params={...})``. ``params`` fixes other
    parameters for every variant; ``ts`` and ``kind`` read ``log`` as ``Log(log, ts=...,
    kind=...)`` does; a handler the log never feeds is an error, as in ``replay`` (which
    ``require_kinds=False`` makes a warning); ``options`` go to
    the engine (``{"master": "local[2]"}``), apart from the values, whose names are the
    program's. When a handler that varies schedules events, the variants run as separate
    replays (``Sweep.single_scan`` False, and a warning says why).
    """
    from ..api import check_against_log, replay, warn_findings
    from ..io.emits import emit_schemas

    program = Program.load(program)
    if params:
        program = with_params(program, params)
    log = Log.of(log, ts, kind)
    variants = grid(values)
    for v in variants:
        check_values(program, v, "sweep")
    notes = warn_findings(check_against_log(program, log, require_kinds=require_kinds))
    variant, states, _out = partition(program, list(values))
    schedulers = _schedules(program, variant)
    # Spark workers rebuild a program from its source text: the sweep program must have its
    # own, and windows would be expanded twice from it.
    from_source = capabilities_of(get_engine(engine)).from_source
    windows = from_source and _dump(ast.parse(program.source)) != _dump(program.module_ast)
    started = time.perf_counter()
    if schedulers or windows or not variants:
        results = [
            replay(program, log, engine=engine, params=v, check=False, **(options or {}))
            for v in variants
        ]
        if windows and not schedulers:
            notes.append(
                f"the variants ran as {len(variants)} separate replays on {engine}: a sweep "
                "of a program with window declarations runs in one scan on the serial engine only"
            )
        if schedulers:
            notes.append(
                f"the variants ran as {len(variants)} separate replays: handler "
                f"{schedulers[0]!r} varies with the parameters and schedules events, whose "
                "numbering a single scan would share between variants"
            )
        wall = time.perf_counter() - started
        return Sweep(
            [Variant(v, r) for v, r in zip(variants, results)],
            len(log),
            wall,
            engine,
            False,
            tuple(h.name for h in program.handlers if h.name not in variant),
            tuple(h.name for h in program.handlers if h.name in variant),
            notes,
        )
    rewritten = sweep_program(program, variants)
    if from_source:
        text = ast.unparse(rewritten.program.module_ast) + "\n"
        sweep_prog = Program(text, f"{program.filename} [sweep]", program.name)
        rewritten = SweepProgram(sweep_prog, *astuple_rest(rewritten))
    combined = replay(rewritten.program, log, engine=engine, check=False, **(options or {}))
    wall = time.perf_counter() - started
    schemas = emit_schemas(program, log)
    out = [Variant(v, _split(combined, i, states, schemas, notes)) for i, v in enumerate(variants)]
    if from_source:
        notes.append(
            f"the {engine} engine replayed one program holding every variant (one plan, one "
            "scan of the log; each variant's handlers are stages of their own); an error in a "
            "variant's handler names a line of the generated sweep program"
        )
    return Sweep(
        out,
        len(log),
        wall,
        engine,
        True,
        rewritten.shared_handlers,
        rewritten.variant_handlers,
        notes,
    )


def _split(combined: Result, i: int, states: set[str], schemas: dict, notes: list[str]) -> Result:
    """Variant ``i``'s result from the sweep program's result."""
    import pyarrow as pa
    import pyarrow.compute as pc

    table_suffix, name_suffix = TABLE.format(i), COPY.format(i)
    tables = {}
    for name, table in combined.tables.items():
        if "@variant" not in name:
            tables[name] = table
        elif name.endswith(table_suffix):
            col = table.schema.get_field_index("handler")
            handler = pc.replace_substring_regex(table.column(col), f"{name_suffix}$", "")
            table = table.set_column(col, "handler", handler.cast(pa.string()))
            tables[name[: -len(table_suffix)]] = table
    state = {}
    for name, values in combined.state.items():
        base, sep, index = name.rpartition("__v")
        if sep and base in states:
            if index == str(i):
                state[base] = values
        else:
            state[name] = values
    m = combined.metrics
    metrics = Metrics(
        engine=m.engine,
        events=m.events,
        scheduled_events=m.scheduled_events,
        wall_s=m.wall_s,
        span_ms=m.span_ms,
        rows={name: t.num_rows for name, t in tables.items()},
        epochs=m.epochs,
        path=dict(m.path),
    )
    return Result(
        tables=tables, state=state, metrics=metrics, warnings=list(notes), schemas=schemas
    )
