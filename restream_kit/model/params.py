"""Parameters: module-level constants a replay or a sweep can override.

``ratio = param("ratio", 2.0)`` declares one; handlers use ``ratio`` like any constant.
:func:`declared` finds a program's parameters in its module text, :func:`reach` says which
handlers each one reaches (directly or through helpers), and :func:`with_params` is the
program with other defaults, written into its text (see ``docs/iterate.md``).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import ProgramError

if TYPE_CHECKING:
    from .program import Program

__all__ = ["param", "Param", "declared", "reach", "names_used", "with_params", "PLAIN"]

#: The types a parameter's value may have: they are written into program text with ``repr``.
PLAIN = (bool, int, float, str, type(None))


def param(name: str, default: Any) -> Any:
    """Declare parameter ``name`` (at module level: ``name = param("name", default)``).

    Returns ``default``, so handlers use the variable like a constant; ``replay(...,
    params={name: value})`` and ``sweep(...)`` replace the default.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ProgramError(f"param(name, default): the name must be an identifier, not {name!r}")
    if not isinstance(default, PLAIN):
        raise ProgramError(
            f"param {name!r}: the default must be a number, string, bool or None, "
            f"not {type(default).__name__}"
        )
    return default


@dataclass(frozen=True)
class Param:
    """A declared parameter: its name, the module variable bound to it, default, line."""

    name: str
    variable: str
    default: Any
    lineno: int
    #: Where the default's text is in the source: (line, col, end line, end col).
    span: tuple[int, int, int, int]


def _is_param_call(node: ast.AST, namespace: Mapping[str, Any]) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Name):
        return namespace.get(func.id) is param
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        owner = namespace.get(func.value.id)
        return getattr(owner, func.attr, None) is param and func.attr == "param"
    return False


def declared(module: ast.Module, namespace: Mapping[str, Any], filename: str) -> dict[str, Param]:
    """The parameters ``module`` declares, by name; an ill-formed declaration is an error."""
    found: dict[str, Param] = {}
    top = set()
    for stmt in module.body:
        if (
            isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
            and _is_param_call(stmt.value, namespace)
        ):
            call = stmt.value
            top.add(id(call))
            if len(call.args) != 2 or call.keywords or not isinstance(call.args[0], ast.Constant):
                raise ProgramError(
                    'declare a parameter as NAME = param("name", default)',
                    filename=filename,
                    lineno=stmt.lineno,
                )
            name = call.args[0].value
            if name in found:
                raise ProgramError(
                    f"parameter {name!r} is declared twice (first on line {found[name].lineno})",
                    filename=filename,
                    lineno=stmt.lineno,
                )
            var = stmt.targets[0].id
            default = call.args[1]
            found[name] = Param(
                name,
                var,
                namespace.get(var),
                stmt.lineno,
                (default.lineno, default.col_offset, default.end_lineno, default.end_col_offset),
            )
    for node in ast.walk(module):
        if _is_param_call(node, namespace) and id(node) not in top:
            raise ProgramError(
                'param(...) declares a parameter only as a module-level NAME = param("name", '
                "default)",
                filename=filename,
                lineno=node.lineno,
            )
    return found


def _functions(module: ast.Module) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in module.body if isinstance(n, ast.FunctionDef)}


def _free_names(fn: ast.FunctionDef) -> set[str]:
    """Names a module-level function loads that are not its own locals."""
    from .program import _local_names

    local = _local_names(fn)
    return {
        n.id
        for n in ast.walk(fn)
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id not in local
    }


def names_used(module: ast.Module) -> dict[str, set[str]]:
    """Per module-level function: the module names it uses, directly or via other functions."""
    functions = _functions(module)
    direct = {name: _free_names(fn) for name, fn in functions.items()}
    closed: dict[str, set[str]] = {}
    for name in functions:
        seen, todo = set(), [name]
        while todo:
            current = todo.pop()
            if current in seen:
                continue
            seen.add(current)
            todo.extend(n for n in direct[current] if n in functions)
        closed[name] = set().union(*(direct[f] for f in seen))
    return closed


def reach(program: Program) -> dict[str, tuple[str, ...]]:
    """Per parameter name, the handlers whose code names it, directly or through helpers."""
    used = names_used(program.module_ast)
    return {
        p.name: tuple(h.name for h in program.handlers if p.variable in used.get(h.name, ()))
        for p in program.params.values()
    }


def check_values(program: Program, values: Mapping[str, Any], what: str = "params") -> None:
    """Raise naming the first unknown parameter or unstorable value in ``values``."""
    for name, value in values.items():
        if name not in program.params:
            known = ", ".join(sorted(program.params)) or "none"
            raise ProgramError(
                f"{what}: {program.name} declares no parameter {name!r} (its parameters: {known})",
                filename=program.filename,
            )
        if not isinstance(value, PLAIN) or (isinstance(value, float) and value != value):
            raise ProgramError(
                f"{what}: parameter {name!r} must be a number, string, bool or None, not {value!r}",
                filename=program.filename,
            )


def with_params(program: Program, values: Mapping[str, Any]) -> Program:
    """``program`` with the defaults of the parameters in ``values`` replaced in its text.

    The replaced text keeps every line where it was, so errors still point at the user's
    lines; the result is the program a user gets by editing the defaults.
    """
    from .program import Program

    check_values(program, values)
    changed = {
        n: v
        for n, v in values.items()
        if type(program.params[n].default) is not type(v) or program.params[n].default != v
    }
    if not changed:
        return program
    lines = program.source.splitlines(True)
    # Replace from the last declaration up, so earlier spans stay valid.
    for name in sorted(changed, key=lambda n: program.params[n].span, reverse=True):
        line, col, end_line, end_col = program.params[name].span
        text = repr(changed[name]) + "\n" * (end_line - line)
        first, last = lines[line - 1], lines[end_line - 1]
        lines[line - 1 : end_line] = [first[:col] + text + last[end_col:]]
    return Program("".join(lines), program.filename, program.name)


def parse_value(text: str) -> Any:
    """A parameter value from the command line: a number, true/false, none, else a string."""
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("none", "null"):
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text
