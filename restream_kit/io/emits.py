"""The output tables a program can emit, read from its ``emit(table, field=...)`` calls.

A replay only knows a table's columns from the rows it emitted, so a table that emitted
nothing would have no columns at all. The program text says more: the table's name and its
fields, and often their types (a literal, ``e.ts``, a comparison, an f-string, a column of
the log). :func:`emit_schemas` reads them; ``Result`` uses them to give an empty table its
columns. A field whose type the text does not make evident is typed ``null``. Types are
Arrow's (``result[name]`` shows them as polars'): a command line replay that never shows a
table does not import polars for them.
"""

from __future__ import annotations

import ast
from typing import Any

import pyarrow as pa

__all__ = ["emit_schemas"]

_CALL_TYPES = {
    "int": pa.int64(),
    "len": pa.int64(),
    "float": pa.float64(),
    "str": pa.string(),
    "bool": pa.bool_(),
    "repr": pa.string(),
}
_NULL = pa.null()


def emit_schemas(program: Any, log: Any = None) -> dict[str, dict[str, pa.DataType]]:
    """Per table named by a literal in an ``emit`` call: field name -> Arrow type.

    Fields are in order of first appearance over the program text; a field's type is the
    first evident one among the calls (``log``, when given, types ``e.column`` reads).
    """
    names, modules = _emit_names(program.module_ast)
    columns: dict[str, pa.DataType] = {}
    if log is not None:
        try:
            columns = dict(zip(log.schema.names, log.schema.types))
        except Exception:  # noqa: BLE001 - types are a convenience, never a failure
            columns = {}
    out: dict[str, dict[str, pa.DataType]] = {}
    for fn in ast.walk(program.module_ast):
        if not isinstance(fn, ast.FunctionDef):
            continue
        event = fn.args.args[0].arg if fn.args.args else None
        for node in ast.walk(fn):
            if not (isinstance(node, ast.Call) and _is_emit(node.func, names, modules)):
                continue
            if not (node.args and isinstance(node.args[0], ast.Constant)):
                continue
            table = node.args[0].value
            if not isinstance(table, str):
                continue
            fields = out.setdefault(table, {})
            for kw in node.keywords:
                if kw.arg is None:
                    continue
                typ = _type_of(kw.value, event, columns)
                if kw.arg not in fields or (fields[kw.arg] == _NULL and typ != _NULL):
                    fields[kw.arg] = typ
    return out


def _emit_names(tree: ast.Module) -> tuple[set[str], set[str]]:
    names, modules = set(), set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("restream_kit"):
            names.update(a.asname or a.name for a in node.names if a.name == "emit")
        elif isinstance(node, ast.Import):
            modules.update(a.asname or a.name for a in node.names if a.name == "restream_kit")
    return names or {"emit"}, modules


def _is_emit(func: ast.expr, names: set[str], modules: set[str]) -> bool:
    if isinstance(func, ast.Name):
        return func.id in names
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "emit"
        and isinstance(func.value, ast.Name)
        and func.value.id in modules
    )


def _type_of(expr: ast.expr, event: str | None, columns: dict[str, pa.DataType]) -> pa.DataType:
    """The Arrow type of ``expr`` when the text makes it evident, else ``null``."""
    if isinstance(expr, ast.Constant):
        value = expr.value
        if isinstance(value, bool):
            return pa.bool_()
        if isinstance(value, int):
            return pa.int64()
        if isinstance(value, float):
            return pa.float64()
        if isinstance(value, str):
            return pa.string()
        return _NULL
    if isinstance(expr, ast.JoinedStr):
        return pa.string()
    if isinstance(expr, ast.Compare) or (
        isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not)
    ):
        return pa.bool_()
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
        if expr.value.id == event:
            if expr.attr in ("ts", "lsn"):
                return pa.int64()
            if expr.attr == "kind":
                return pa.string()
            return columns.get(expr.attr, _NULL)
        return _NULL
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name):
        return _CALL_TYPES.get(expr.func.id, _NULL)
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Div):
        return pa.float64()
    return _NULL
