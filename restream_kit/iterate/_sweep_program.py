"""The sweep program: a program rewritten so that one replay runs every variant of a sweep.

The handlers no swept parameter can affect stay as they are (:func:`partition`); every other
handler, and the state it writes, is copied once per variant with the variant in its names
(``flag__v3``, ``spam@variant3``). See :mod:`restream_kit.iterate.sweeps`.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..model import handlers as declared
from ..model.errors import ProgramError
from ..model.params import names_used
from ..model.program import Program, _local_names

__all__ = ["SweepProgram", "partition", "sweep_program", "COPY", "TABLE"]

#: The suffix of a variant's copy of a handler, state or helper: ``flag__v3``.
COPY = "__v{}"
#: The suffix of a variant's output table in the sweep program: ``spam@variant3``.
TABLE = "@variant{}"


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


def same_shape_dump(tree: ast.AST) -> str:
    """``tree`` as text without positions: two trees of one shape dump alike."""
    return ast.dump(tree, include_attributes=False)


def astuple_rest(sp: SweepProgram) -> tuple:
    """Every field of ``sp`` but its program."""
    return sp.shared_handlers, sp.variant_handlers, sp.variant_states, sp.variant_tables


def scheduling(program: Program, handlers: set[str]) -> list[str]:
    """The ``handlers`` that schedule events."""
    from ..planner._analysis import analyse

    return [h.name for h in analyse(program)[0] if h.name in handlers and h.schedules]
