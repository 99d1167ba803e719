"""Lower handlers to column expressions, when their meaning in Python is exactly expressible.

A handler made only of ``if``/``else``, local names, keyed reads and writes of ``Map`` and
``Counter`` state (``m[k]``, ``m[k] = v``, ``m[k] += d``, ``del m[k]``) and ``emit`` over
event fields, constants, ``+ - *``, comparisons and ``and``/``or``/``not`` is *lowered*: every
write, read and emit becomes a frozen record whose condition, key and value are small
expression trees (:class:`Col`, :class:`Lit`, :class:`ReadOf`, ...). An engine can then
evaluate a whole epoch of events at once, as columns, instead of one event at a time.

Lowering is refused (with the reason) whenever a column evaluation could differ from Python
in any case: values that may be None in arithmetic or comparisons, integers that could
overflow 64 bits or lose precision against floats, float sums (their rounding depends on
order), keys of types Python and a column store compare differently (floats, mixed bool and
int), and every construct outside the list above. Types and bounds come from the log's
columns (their Arrow types, nulls and extreme values), so a program lowers for one log and
not for another.

States are ranked in *levels*: a state is at level 0 when no write to it depends on a read,
otherwise one above the highest level it reads. Each emit has a level too. An engine that
evaluates level by level never needs a value before it exists.
"""

from __future__ import annotations

import ast
from typing import Any

import pyarrow as pa

from ..model.program import Program
from ..model.state import Counter, Map
from ._lower_types import (
    INT64_SAFE,
    ColumnFacts,
    NotLowerable,
    _column_types,
    _lit,
    _Typed,
    _Typer,
    column_facts,
)
from ._lowered import (
    Arith,
    Binary,
    Cmp,
    Col,
    EmitSite,
    Expr,
    Lit,
    Logic,
    Lowered,
    LoweredRead,
    LoweredState,
    Neg,
    Not,
    ReadOf,
    Unary,
    Write,
)

__all__ = [
    "Col",
    "Lit",
    "ReadOf",
    "Arith",
    "Neg",
    "Cmp",
    "Logic",
    "Not",
    "Expr",
    "LoweredRead",
    "Write",
    "EmitSite",
    "LoweredState",
    "Lowered",
    "lower",
    "ColumnFacts",
    "column_facts",
    "low_reads",
    "walk",
    "NotLowerable",
]

# -- lowering ------------------------------------------------------------------------------

_ARITH = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*"}
_CMP = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}


class _Lowerer:
    def __init__(self, program: Program, table: pa.Table | dict[str, ColumnFacts], rows: int):
        self.program = program
        facts = table if isinstance(table, dict) else column_facts(table)
        self.columns = _column_types(facts)
        self.events = rows
        self.reads: list[LoweredRead] = []
        self.read_types: dict[int, _Typed] = {}
        self.writes: list[Write] = []
        self.emits: list[EmitSite] = []
        self.key_types: dict[str, list[str]] = {}
        self.tuple_keys: dict[str, bool] = {}
        self.ops = 0
        for name, st in program.states.items():
            if type(st) not in (Map, Counter):
                raise NotLowerable(f"state {name} is a {type(st).__name__}")

    # statements ------------------------------------------------------------------------

    def handler(self, h) -> None:
        self.h = h
        self.n = 0
        self.arg = h.event_arg
        self.block(h.node.body, None, {})
        self.ops = max(self.ops, self.n)

    def block(self, body: list[ast.stmt], when: Expr | None, env: dict[str, _Typed]) -> None:
        for stmt in body:
            if isinstance(stmt, ast.Pass):
                continue
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                continue  # a docstring
            if isinstance(stmt, ast.If):
                test = self.cond(stmt.test, env)
                self.block(stmt.body, _and(when, test), dict(env))
                if stmt.orelse:
                    self.block(stmt.orelse, _and(when, Not(test)), dict(env))
                for name in _assigned(stmt):
                    env.pop(name, None)  # assigned in a branch: unknown after the if
                continue
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                target = stmt.targets[0]
                if isinstance(target, ast.Name):
                    env[target.id] = self.expr(stmt.value, env)
                    continue
                if isinstance(target, ast.Subscript):
                    state, key = self.subscript(target, env)
                    value = self.expr(stmt.value, env)
                    self.write(state, "set", key, value, when)
                    continue
            if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Subscript):
                if type(stmt.op) not in (ast.Add, ast.Sub):
                    raise NotLowerable(f"line {stmt.lineno}: {type(stmt.op).__name__}= on state")
                state, key = self.subscript(stmt.target, env)
                value = self.expr(stmt.value, env)
                if isinstance(stmt.op, ast.Sub):
                    value = self.neg(value)
                self.write(state, "merge", key, value, when)
                continue
            if isinstance(stmt, ast.Delete) and len(stmt.targets) == 1:
                if isinstance(stmt.targets[0], ast.Subscript):
                    state, key = self.subscript(stmt.targets[0], env)
                    self.write(state, "delete", key, None, when)
                    continue
            if isinstance(stmt, ast.Expr) and _is_emit(stmt.value):
                self.emit(stmt.value, when, env)
                continue
            raise NotLowerable(f"line {stmt.lineno}: {type(stmt).__name__} statement")

    def write(self, state: str, op: str, key: list[_Typed], value: _Typed | None, when) -> None:
        self.writes.append(
            Write(
                state,
                op,
                tuple(k.expr for k in key),
                value and value.expr,
                when,
                self.h.index,
                self.n,
            )
        )
        self._value_types.setdefault(state, []).append(value)
        self.n += 1

    _value_types: dict[str, list]

    def emit(self, call: ast.Call, when, env) -> None:
        if (
            len(call.args) != 1
            or not isinstance(call.args[0], ast.Constant)
            or not isinstance(call.args[0].value, str)
        ):
            raise NotLowerable(f"line {call.lineno}: emit without a literal table name")
        fields = []
        for kw in call.keywords:
            if kw.arg is None:
                raise NotLowerable(f"line {call.lineno}: emit(**...)")
            fields.append((kw.arg, self.expr(kw.value, env).expr))
        self.emits.append(EmitSite(call.args[0].value, tuple(fields), when, self.h.index, self.n))
        self.n += 1

    # expressions -----------------------------------------------------------------------

    def subscript(self, node: ast.Subscript, env) -> tuple[str, list[_Typed]]:
        if not isinstance(node.value, ast.Name) or node.value.id not in self.program.states:
            raise NotLowerable(f"line {node.lineno}: subscript of something other than state")
        name = node.value.id
        if node.value.id in env:
            raise NotLowerable(f"line {node.lineno}: {name} shadowed")
        parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        key = [self.expr(p, env) for p in parts]
        for k in key:
            if k.type not in ("int", "str", "bool"):
                raise NotLowerable(f"line {node.lineno}: {name} keyed by a {k.type}")
        types = [k.type for k in key]
        is_tuple = isinstance(node.slice, ast.Tuple)
        if (
            self.key_types.setdefault(name, types) != types
            or self.tuple_keys.setdefault(name, is_tuple) != is_tuple
        ):
            raise NotLowerable(f"line {node.lineno}: {name} keyed by different types")
        return name, key

    def cond(self, node: ast.AST, env) -> Expr:
        t = self.expr(node, env, condition=True)
        if t.nullable and t.type != "bool":
            raise NotLowerable(f"line {node.lineno}: truth of a value that may be None")
        return t.expr

    def expr(self, node: ast.AST, env, condition: bool = False) -> _Typed:
        if isinstance(node, ast.Constant):
            return _lit(node.value)
        if isinstance(node, ast.Name):
            if node.id in env:
                return env[node.id]
            raise NotLowerable(f"line {node.lineno}: name {node.id}")
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == self.arg
        ):
            if node.attr not in self.columns or not node.attr.isidentifier():
                raise NotLowerable(f"line {node.lineno}: field {node.attr}")
            return self.columns[node.attr]
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            state, key = self.subscript(node, env)
            site = LoweredRead(
                len(self.reads), state, tuple(k.expr for k in key), self.h.index, self.n
            )
            self.n += 1
            self.reads.append(site)
            return _Typed(ReadOf(site.index), "?")  # typed once every write is known
        if isinstance(node, ast.UnaryOp):
            if isinstance(node.op, ast.Not):
                return _Typed(Not(self.cond(node.operand, env)), "bool")
            if isinstance(node.op, ast.USub):
                return self.neg(self.expr(node.operand, env))
        if isinstance(node, ast.BinOp) and type(node.op) in _ARITH:
            return _Typed(
                Arith(
                    _ARITH[type(node.op)],
                    self.expr(node.left, env).expr,
                    self.expr(node.right, env).expr,
                ),
                "?",
            )
        if isinstance(node, ast.Compare):
            parts = [self.expr(node.left, env)] + [self.expr(c, env) for c in node.comparators]
            pairs = []
            for op, a, b in zip(node.ops, parts, parts[1:]):
                if type(op) not in _CMP:
                    raise NotLowerable(f"line {node.lineno}: {type(op).__name__}")
                pairs.append(Cmp(_CMP[type(op)], a.expr, b.expr))
            return _Typed(pairs[0] if len(pairs) == 1 else Logic("and", tuple(pairs)), "bool")
        if isinstance(node, ast.BoolOp) and condition:
            op = "and" if isinstance(node.op, ast.And) else "or"
            return _Typed(Logic(op, tuple(self.cond(v, env) for v in node.values)), "bool")
        raise NotLowerable(f"line {getattr(node, 'lineno', '?')}: {type(node).__name__} expression")

    def neg(self, t: _Typed) -> _Typed:
        return _Typed(Neg(t.expr), "?")


def _and(a: Expr | None, b: Expr) -> Expr:
    return b if a is None else Logic("and", (a, b))


def _is_emit(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "emit"


def _assigned(stmt: ast.AST) -> set[str]:
    return {
        t.id
        for n in ast.walk(stmt)
        if isinstance(n, (ast.Assign, ast.AugAssign))
        for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
        if isinstance(t, ast.Name)
    }


def lower(
    program: Program, table: pa.Table | dict[str, ColumnFacts], rows: int | None = None
) -> Lowered:
    """Lower ``program`` for the log ``table``, or for the :class:`ColumnFacts` of its columns
    and its number of ``rows`` (a log whose rows are elsewhere); or raise
    :class:`NotLowerable` saying why."""
    if rows is None:
        rows = table.num_rows
    low = _Lowerer(program, table, rows)
    low._value_types = {}
    for h in program.handlers:
        low.handler(h)
    read_state = {r.index: r.state for r in low.reads}
    written = {w.state for w in low.writes}
    level = _levels(program, low, read_state, written)
    typer = _Typer(low, {}, read_state)
    states: dict[str, LoweredState] = {}
    # Type states level by level: a state's value type needs the types of what it reads.
    for name in sorted(program.states, key=lambda s: (level[s], s in written)):
        decl = program.states[name]
        kind, vtype = _state_type(name, decl.default, low, typer)
        default = decl.default
        arity = len(low.key_types.get(name, [None]))
        states[name] = LoweredState(
            name,
            kind,
            default,
            low.tuple_keys.get(name, False),
            arity,
            level[name],
            vtype,
            _packing(low, name, arity),
        )
    # Every condition, key and emitted value must type-check too.
    for w in low.writes:
        if w.when is not None:
            typer.of(w.when)
    emits = []
    for e in low.emits:
        if e.when is not None:
            typer.of(e.when)
        for _name, value in e.fields:
            typer.of(value)
        used = low_reads(e.when, *(v for _n, v in e.fields))
        lvl = max((level[read_state[i]] + 1 for i in used if read_state[i] in written), default=0)
        emits.append(EmitSite(e.table, e.fields, e.when, e.handler, e.n, lvl))
    return Lowered(
        kinds=tuple(h.kinds for h in program.handlers),
        handler_names=tuple(h.name for h in program.handlers),
        reads=tuple(low.reads),
        writes=tuple(low.writes),
        emits=tuple(emits),
        states=states,
        ops_per_handler=max(low.ops, 1),
    )


def _levels(program: Program, low: _Lowerer, read_state: dict[int, str], written: set[str]):
    """Each state's round: one after the rounds of the states its writes read (a state nobody
    writes reads as its default everywhere: no round waits for it)."""
    deps: dict[str, set[str]] = {name: set() for name in program.states}
    for w in low.writes:
        used = low_reads(w.key, w.value, w.when)
        deps[w.state] |= {read_state[i] for i in used} & written
    level: dict[str, int] = {}

    def rank(name: str, seen: tuple[str, ...] = ()) -> int:
        if name in seen:
            raise NotLowerable(f"state {name} is written from reads of itself")
        if name not in level:
            level[name] = max((rank(d, (*seen, name)) + 1 for d in deps[name]), default=0)
        return level[name]

    for name in program.states:
        rank(name)
    return level


def _state_type(name: str, default: Any, low: _Lowerer, typer: _Typer) -> tuple[str, str]:
    """(kind, value type) of state ``name`` from its writes, typed with ``typer`` (which then
    knows the state's type); NotLowerable for a mix of merges and overwrites, sums that could
    be inexact or overflow, or values of several types."""
    ws = [w for w in low.writes if w.state == name]
    ops = {w.op for w in ws}
    if "merge" in ops:
        if ops != {"merge"}:
            raise NotLowerable(f"state {name} is both merged and overwritten or deleted")
        if type(default) is not int:
            raise NotLowerable(f"state {name} merges onto a non-integer default")
        bound = abs(default)
        for w in ws:
            t = typer.of(w.value)
            if t.type != "int" or t.nullable:
                raise NotLowerable(f"state {name} merges {t.type} values (sums must be exact)")
            bound += t.bound * max(low.events, 1)
        if bound >= INT64_SAFE:
            raise NotLowerable(f"sums of {name} could overflow 64 bits")
        typer.state_types[name] = _Typed(None, "int", False, bound)
        kind, vtype = "merge", "int"
    else:
        types = [typer.of(w.value) for w in ws if w.op == "set"]
        classes = {t.type for t in types}
        if default is not None:
            classes.add(_lit(default).type)
        if len(classes) > 1:
            raise NotLowerable(f"state {name} holds values of several types")
        vtype = classes.pop() if classes else "bool"
        nullable = default is None or any(t.nullable for t in types)
        bounds = [t.bound for t in types] + (
            [abs(default)] if vtype == "int" and default is not None else []
        )
        typer.state_types[name] = _Typed(
            None, vtype, nullable, max(bounds, default=0) if vtype == "int" else None
        )
        kind = "set"
    return kind, vtype


def walk(*exprs: Any):
    """Every sub-expression of ``exprs`` (expressions, tuples of them, or None)."""
    stack = list(exprs)
    while stack:
        x = stack.pop()
        if isinstance(x, tuple):
            stack += list(x)
            continue
        if x is None:
            continue
        yield x
        if isinstance(x, Binary):
            stack += [x.left, x.right]
        elif isinstance(x, Unary):
            stack.append(x.operand)
        elif isinstance(x, Logic):
            stack += list(x.operands)


def low_reads(*exprs: Any) -> set[int]:
    """Read sites used by any of ``exprs`` (expressions, or tuples of them)."""
    return {x.site for x in walk(*exprs) if isinstance(x, ReadOf)}


def _packing(low: _Lowerer, state: str, arity: int) -> tuple[tuple[int, int], ...] | None:
    """How to pack a state's integer key parts into one int64, when every key expression of
    every site is a constant or a column without None whose range is known."""
    if arity < 2 or low.key_types.get(state) != ["int"] * arity:
        return None
    keys = [r.key for r in low.reads if r.state == state]
    keys += [w.key for w in low.writes if w.state == state]
    packing = []
    total = 1
    for i in range(arity):
        lows, highs = [], []
        for key in keys:
            x = key[i]
            if isinstance(x, Lit):
                lows.append(int(x.value))
                highs.append(int(x.value))
            elif (
                isinstance(x, Col)
                and low.columns[x.name].range
                and not low.columns[x.name].nullable
            ):
                lo, hi = low.columns[x.name].range
                lows.append(lo)
                highs.append(hi)
            else:
                return None
        span = max(highs) - min(lows) + 1
        total *= span
        packing.append((min(lows), span))
    return tuple(packing) if total < INT64_SAFE else None
