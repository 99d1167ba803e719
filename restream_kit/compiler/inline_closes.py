"""Write a fused window's ``on_close`` functions out in one function per window (``runtime.windows``).

A native tumbling, hopping or session window closes its windows in the runtime, one after the
other (``runtime._aligned``, ``runtime._sessions``), and called each ``on_close`` function per
closed window, whose ``emit`` was a call of the runtime in turn. On keys with about a window
per event (pairs), those calls cost more than the window. :func:`close_call` gives one
function, ``call(key, start, end, value, lsn, ts, seq)``, with the bodies of the ``on_close``
functions written out in it, in their order (each function's locals renamed apart, its
parameters bound to the close's values first), and every statement ``emit("table", f=...)``
of the serial runtime's own ``emit`` written out as the row it appends: the close's ``lsn``,
time and ``seq``, the runtime's handler, and the fields in their order. A function that
cannot be written out (``return``, closures, a read of a local that may be unassigned, a
signature other than four plain parameters, another decorator) is called as before. The
statements keep their lines in the program, so an error names the user's line; the caller
sets the runtime's event (a close event) and ``seq`` before the call, as it did before each
function's; where every function is written out and its statements call nothing that could
read them (:func:`_quiet`), a frame may set them once its closes are done, and when a
statement raises (:data:`EAGER`).
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable, Collection
from typing import Any

from .inline import _NOT_INLINABLE, _Assigned, _function_locals, _MaybeUnbound, _Renamer
from .inline_windows import EmitBlock, statements_at

__all__ = ["close_call", "PARAMS", "SIMPLE", "CALLBACKS", "EAGER", "QUIET"]

#: The generated function's parameters: the closed window's key, start, end and value, and
#: the close's ``lsn``, time and ``seq``.
PARAMS = ("_rsc_key", "_rsc_start", "_rsc_end", "_rsc_value", "_rsc_lsn", "_rsc_ts", "_rsc_seq")


#: The frame of the default function: the closed window's key, start, end and value and the
#: close's ``lsn``, time and ``seq`` given; the functions' statements go in place of
#: :data:`CALLBACKS`.
SIMPLE = f"def _rsc_closed({', '.join(PARAMS)}):\n    CALLBACKS\n"
#: The statement of a frame that the ``on_close`` functions' statements replace.
CALLBACKS = "CALLBACKS"
#: Names a frame may test (``if EAGER:``), made constants (so Python drops the other branch):
#: EAGER true when the written-out statements may read the runtime's event or ``seq`` while
#: they run (a call of anything but a state's ``get`` or ``pop``, a block's row, a plain
#: builtin), so the frame sets them before each close; QUIET, its opposite: the frame sets
#: them after its closes, and before re-raising what a statement raised.
EAGER = "_rsc_eager"
QUIET = "_rsc_quiet"
#: Builtins a written-out statement may call without reading the runtime (when the program
#: does not bind their names). They call a value's own methods (``__str__``, ``__len__``), as
#: operators do: those are taken not to emit or schedule (docs/semantics.md, "QUIET").
_PURE = frozenset({"len", "min", "max", "abs", "int", "float", "str", "bool", "round"})


def close_call(
    compiled: Any,
    window: str,
    callbacks: list[Callable],
    emits: Collection[str],
    frame: str = SIMPLE,
    globals_: dict[str, Any] | None = None,
    lineno: int = 1,
    block: EmitBlock | None = None,
) -> Callable | None:
    """The function that runs ``callbacks`` (window ``window``'s ``on_close`` functions, as
    bound in ``compiled``'s namespace) for a closed window, with their bodies written out
    where they can be; None when none can (or the program has no rewritten tree).

    ``frame``: the source of the function, a ``def`` whose statement :data:`CALLBACKS` the
    functions' statements replace, where the names of :data:`PARAMS` are bound (the default,
    :data:`SIMPLE`, takes them as its parameters); its own statements carry line ``lineno``
    (the window's declaration, where the runtime's own errors point) and read ``globals_``
    (put in ``compiled``'s namespace). A ``break`` or ``continue`` of a function's body is
    its own loop's (Python refuses one outside a loop), so a frame may run it in a loop.
    ``block``: as ``inline_windows.inline_calls``'s ``emit_block``, for rows that each end
    with their own ``seq`` (``runtime._window_rows.EmitRows``)."""
    inputs = compiled.runner_inputs
    if inputs is None or inputs[4].get("guarded") or not callbacks:
        return None  # (a guarded replay runs every function as a call it can roll back)
    namespace = compiled.namespace
    defs = {n.name: n for n in inputs[0].body if isinstance(n, ast.FunctionDef)}
    body: list[ast.stmt] = []
    written = 0
    calls: set[str] = set()  # the functions written-out emits call (a block's)
    for i, fn in enumerate(callbacks):
        node = defs.get(getattr(fn, "__name__", ""))
        stmts = None
        if node is not None:
            writer = _Emits(frozenset(emits), block)
            stmts = _written_out(node, fn, i, writer, compiled.program.filename)
            calls |= writer.calls
        if stmts is None:  # called, as the close did
            name = f"_rsc_{window}_fn{i}"
            namespace[name] = fn
            stmts = [_stmt(f"{name}({', '.join(PARAMS[:4])})", getattr(node, "lineno", lineno))]
        else:
            written += 1
        body += stmts
    if not written:
        return None
    function = statements_at(frame, lineno)[0]
    function.name = f"_rsc_{window}_closed"
    quiet = written == len(callbacks) and _quiet(body, calls, namespace)
    _Splice(body, {EAGER: not quiet, QUIET: quiet}).visit(function)
    namespace.update(globals_ or {})
    module = ast.fix_missing_locations(ast.Module(body=[function], type_ignores=[]))
    exec(compile(module, compiled.program.filename, "exec"), namespace)
    return namespace.pop(function.name)


def _quiet(body: list[ast.stmt], calls: set[str], namespace: dict) -> bool:
    """Whether the statements ``body`` call nothing but a state's ``get`` or ``pop`` (the
    compiled program's dicts), ``calls`` (a block's row) and plain builtins the program does
    not rebind: nothing they run reads the runtime's event or ``seq``."""
    for stmt in body:
        for node in ast.walk(stmt):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            if isinstance(f, ast.Name) and (
                f.id in calls or (f.id in _PURE and f.id not in namespace)
            ):
                continue
            if (
                isinstance(f, ast.Attribute)
                and f.attr in ("get", "pop")
                and isinstance(f.value, ast.Name)
                and f.value.id.startswith("_rs_d_")
            ):
                continue
            return False
    return True


class _Splice(ast.NodeTransformer):
    """Puts ``body`` in place of a frame's :data:`CALLBACKS` statement, and ``flags``'
    values (constants) in place of their names."""

    def __init__(self, body: list[ast.stmt], flags: dict[str, bool] | None = None):
        self.body = body
        self.flags = flags or {}

    def visit_Expr(self, node: ast.Expr) -> Any:
        if isinstance(node.value, ast.Name) and node.value.id == CALLBACKS:
            return self.body
        return self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> Any:
        if node.id in self.flags:
            return ast.copy_location(ast.Constant(self.flags[node.id]), node)
        return node


def _written_out(
    node: ast.FunctionDef, fn: Callable, i: int, emits: _Emits, filename: str
) -> list[ast.stmt] | None:
    """Function ``node``'s body as statements of the generated function (its parameters
    bound first), or None when it must stay a call."""
    code = getattr(fn, "__code__", None)
    args = node.args
    if (
        code is None
        or code.co_name != node.name
        or code.co_filename != filename
        or code.co_firstlineno != min([node.lineno, *(d.lineno for d in node.decorator_list)])
        or hasattr(fn, "__wrapped__")
        or args.posonlyargs
        or args.vararg
        or args.kwonlyargs
        or args.kwarg
        or args.defaults
        or len(args.args) != 4
        or not all(_on_close(d) for d in node.decorator_list)
        or any(isinstance(n, _NOT_INLINABLE) for stmt in node.body for n in ast.walk(stmt))
    ):
        return None
    params = [a.arg for a in args.args]
    local = _function_locals(node.body) | set(params)
    try:
        _Assigned({n for n in local if not n.startswith("_rs_k")}).block(
            node.body, frozenset(params)
        )
    except _MaybeUnbound:
        return None
    renames = {name: f"_rsc{i}_{name}" for name in local}
    renamer = _Renamer("", renames, {})
    body = [renamer.visit(copy.deepcopy(stmt)) for stmt in node.body]
    body = [emits.visit(stmt) for stmt in body]
    flat: list[ast.stmt] = []
    for stmt in body:
        flat += stmt if isinstance(stmt, list) else [stmt]
    bind = [_stmt(f"{renames[p]} = {value}", node.lineno) for p, value in zip(params, PARAMS[:4])]
    return [*bind, *flat]


def _on_close(decorator: ast.expr) -> bool:
    """Whether ``decorator`` is ``<window>.on_close`` (which registers the function as is)."""
    return (
        isinstance(decorator, ast.Attribute)
        and decorator.attr == "on_close"
        and isinstance(decorator.value, ast.Name)
    )


def _stmt(source: str, lineno: int) -> ast.stmt:
    return statements_at(source, lineno)[0]


class _Emits(ast.NodeTransformer):
    """Statements ``emit("table", name=value, ...)`` of the runtime's own ``emit`` written
    out as the row it appends: the fields made first, in their order, then the row, as
    ``SerialRuntime.emit`` makes it from the close's event, ``seq`` and the handler."""

    def __init__(self, emits: frozenset[str], block: EmitBlock | None = None):
        self.emits = emits
        self.block = block
        self.count = 0
        self.calls: set[str] = set()  # the functions the rows written out call

    def visit_Expr(self, node: ast.Expr) -> Any:
        call = node.value
        if not (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Name)
            and call.func.id in self.emits
            and len(call.args) == 1
            and isinstance(call.args[0], ast.Constant)
            and isinstance(call.args[0].value, str)
            and all(kw.arg not in (None, "table") for kw in call.keywords)
        ):
            return self.generic_visit(node)
        f = f"_rsc_f{self.count}"
        self.count += 1
        table = call.args[0].value
        g = self.block(table, tuple(kw.arg for kw in call.keywords)) if self.block else None
        if g is not None:  # the values in order, then the row, in its table's block
            values = [f"{f}_{i}" for i in range(len(call.keywords))]
            stmts = []
            for name, kw in zip(values, call.keywords):
                stmts.append(_stmt(f"{name} = None", node.lineno))
                stmts[-1].value = kw.value
            row = ", ".join([PARAMS[4], PARAMS[5], *values, PARAMS[6]])
            lines = [f"if {g}list[-1] is not {g}blk:", f"    {g}open()", f"{g}add(({row},))"]
            self.calls |= {f"{g}open", f"{g}add"}
            return [*stmts, *statements_at("\n".join(lines), node.lineno)]
        make = _stmt(f"{f} = {{}}", node.lineno)
        # The field values keep their own places in the program (an error names their line).
        make.value.keys = [ast.Constant(kw.arg) for kw in call.keywords]
        make.value.values = [kw.value for kw in call.keywords]
        ast.copy_location(make.value, call)
        row = f"({PARAMS[4]}, {PARAMS[5]}, _rs_rt.handler, {PARAMS[6]}, {f})"
        append = _stmt(f"_rs_rt.rows[{table!r}].append({row})", node.lineno)
        return [make, append]
