"""Write a fused window's helper calls into a replay's loop (``runtime.windows``).

The loop (:func:`~restream_kit.compiler.inline.build_runner`) inlines handler bodies, but a
window's ``w.add(...)`` stays a call of the generated helper ``w__add``: a Python call per add,
which for a window that does little per add is most of its cost. A window the serial runtime
runs natively can give, per helper, the statements that do the call's work in place
(:data:`Site`); :func:`inline_calls` rebuilds the loop with every call that is a statement of
an inlined handler body replaced by them. Calls elsewhere (handlers called as functions,
``on_close`` functions, calls inside expressions) keep calling the helper, which does the same.
"""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Callable
from typing import Any

from .inline import EVENT, SCHEDULED_RUNNER_NAME, build_runner

__all__ = ["Site", "After", "TIME", "EmitBlock", "inline_calls", "statement_add", "statements_at"]

#: Given the call's argument names (each bound to its argument, evaluated once, in order,
#: before the statements run; a constant argument is given as its source in parentheses, the
#: event's time as ``TIME``), a prefix for the names of its own, the name the call's value
#: goes to (None: a call whose value is dropped) and :data:`After`, the statements that do a
#: helper call's work (source text), or None to keep the call.
Site = Callable[[list[str], str, "str | None", "After | None"], "str | None"]
#: The call written out in the statement just before a site's, in the same block (None if
#: any other statement): its helper, its prefix, and whether its first argument is the
#: same as the site's and reads only the loop's event (so the same value).
After = tuple[str, str, bool]
#: Given a written-out emit's table and field names, the prefix ``g`` of the globals its rows
#: go through as a block (``g + "list"``, ``"blk"``, ``"open"``, ``"add"``: see
#: ``runtime._window_rows.Blocks.emit_site``), or None to append each row as a tuple.
EmitBlock = Callable[[str, "tuple[str, ...]"], "str | None"]
#: The loop's local that holds its event's time (``_rs_ev[1]``, set first for each event by
#: ``inline.build_runner``): a site gets it for an argument that is the event's time, which
#: its code can tell by name (a sliding distinct's read at the time of the add before it).
TIME = "_rs_t"


def statement_add(lines: Callable[[str, str, str, str], str]) -> Site:
    """The :data:`Site` of a window's ``add`` from ``lines(p, key, value, ts)``, its
    statements: an add's value is None, so it is written out only as a statement (a call
    whose value goes to a name keeps the call)."""

    def site(args: list[str], p: str, target: str | None, _after: After | None) -> str | None:
        if target is not None:
            return None
        k, v, t = args
        return lines(p, k, v, t)

    return site


def inline_calls(
    compiled: Any,
    sites: dict[str, tuple[Site, int]],
    clock: str | None = None,
    emits: frozenset[str] = frozenset(),
    emit_block: EmitBlock | None = None,
) -> bool:
    """Rebuild ``compiled.run_batch`` with the calls of the helpers in ``sites`` (helper ->
    (site, the line its statements carry: the window's declaration, as the expansion's
    code does)) written out. The function object stays and gets the new code, so whatever
    holds it runs the new loop. False when nothing was written out (or the loop is the
    guarded one, which calls every handler).

    ``clock``: the name of a global list whose first item the loop sets, before it runs
    the scheduled events due by an event's time, to that time (how far they run).
    ``emits``: names bound to the serial runtime's own ``emit`` (``SerialRuntime.emit``):
    a statement ``emit("table", field=...)`` among them is written out too, as the row that
    ``emit`` appends (:func:`_emit_source`), or with ``emit_block``, as a row of a block."""
    inputs = compiled.runner_inputs
    if inputs is None or inputs[4].get("guarded"):
        return False
    tree, handlers, columns, kinds, options = inputs
    runner = build_runner(tree, handlers, columns, kinds, **options).function
    splicer = _Splicer(sites, clock, emits, emit_block)
    runner = splicer.visit(runner)
    if not splicer.count:
        return False
    module = ast.fix_missing_locations(ast.Module(body=[runner], type_ignores=[]))
    scratch: dict[str, Any] = {}
    exec(compile(module, compiled.program.filename, "exec"), scratch)
    compiled.run_batch.__code__ = scratch[runner.name].__code__
    return True


class _Splicer(ast.NodeTransformer):
    """Replaces statements ``helper(a, b, c)`` and ``x = helper(a, b, c)`` with ``_rwN_0 = a``
    ... and the site's code."""

    def __init__(
        self,
        sites: dict[str, tuple[Site, int]],
        clock: str | None,
        emits: frozenset[str] = frozenset(),
        emit_block: EmitBlock | None = None,
    ):
        self.sites = sites
        self.clock = clock
        self.emits = emits
        self.emit_block = emit_block
        self.numbers = itertools.count()
        self.count = 0
        # The call written out by the statement just visited (None: any other statement),
        # and by the one before the statement being visited, in the same block: (helper,
        # prefix, its first argument).
        self.last: tuple[str, str, ast.expr | None] | None = None
        self.before: tuple[str, str, ast.expr | None] | None = None

    def visit(self, node: ast.AST) -> Any:
        if not isinstance(node, ast.stmt):
            return super().visit(node)
        self.before, self.last = self.last, None
        result = super().visit(node)
        if hasattr(node, "body"):  # (a block's last statement is not before the next one)
            self.last = None
        return result

    def visit_Expr(self, node: ast.Expr) -> Any:
        call = node.value
        if (
            self.clock is not None
            and isinstance(call, ast.Call)
            and isinstance(call.func, ast.Name)
            and call.func.id == SCHEDULED_RUNNER_NAME
        ):
            source = f"{self.clock}[0] = {ast.unparse(call.args[0])}"
            return [ast.copy_location(ast.parse(source).body[0], node), node]
        source = _emit_source(call, self.emits, f"_rw{next(self.numbers)}_", self.emit_block)
        if source is not None:
            body = ast.parse(source).body
            for stmt in body:
                ast.copy_location(stmt, node)
                for n in ast.walk(stmt):
                    if hasattr(n, "lineno"):
                        n.lineno = n.end_lineno = node.lineno
            return body
        return self._splice(node, call, None)

    def visit_Assign(self, node: ast.Assign) -> Any:
        if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
            return node
        return self._splice(node, node.value, node.targets[0].id)

    def visit_If(self, node: ast.If) -> Any:
        """``if helper(a) > 30:`` as ``x = helper(a)`` written out, then ``if x > 30:``,
        where the call is what the test evaluates first (:func:`_leading_call`): the same
        evaluations in the same order, the value read as a statement's would be."""
        call = _leading_call(node.test)
        if call is None or not (isinstance(call.func, ast.Name) and call.func.id in self.sites):
            return self.generic_visit(node)
        name = f"_rw{next(self.numbers)}_v"
        hoisted = ast.copy_location(ast.Assign([ast.Name(name, ast.Store())], call), node)
        count = self.count
        spliced = self._splice(hoisted, call, name)
        self.last = None  # (the test and the body are not the statement just visited)
        if self.count == count:  # (the site keeps the call: the test keeps it too)
            return self.generic_visit(node)
        node.test = _ReplaceNode(call, ast.Name(name, ast.Load())).visit(node.test)
        return [*spliced, self.generic_visit(node)]

    def _splice(self, node: ast.stmt, call: ast.expr, target: str | None) -> Any:
        if not (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Name)
            and call.func.id in self.sites
            and not call.keywords
            and not any(isinstance(a, ast.Starred) for a in call.args)
        ):
            return node
        site, lineno = self.sites[call.func.id]
        prefix = f"_rw{next(self.numbers)}_"
        # A constant argument is written in place (a count's value, None), the event's time
        # as the loop's local that holds it (``TIME``), the others bound.
        names = [_argument(arg, f"{prefix}{i}") for i, arg in enumerate(call.args)]
        first = call.args[0] if call.args else None
        after = None
        if self.before is not None:
            helper, before, previous = self.before
            same = first is not None and previous is not None and _reads_event(first)
            after = (helper, before, same and ast.dump(first) == ast.dump(previous))
        source = site(names, prefix, target, after)
        if source is None:
            return node
        self.count += 1
        self.last = (call.func.id, prefix, first)
        bind = [
            ast.copy_location(ast.Assign([ast.Name(n, ast.Store())], arg), node)
            for n, arg in zip(names, call.args)
            if not isinstance(arg, ast.Constant)
            and n != TIME
            and (re.search(rf"\b{n}\b", source) or not _reads_event(arg))
        ]
        return [*bind, *statements_at(source, lineno)]


def _argument(arg: ast.expr, name: str) -> str:
    """What a site gets for the call's argument ``arg``: a constant's source in parentheses,
    ``TIME`` for the loop's event's time, or else ``name``, bound to it."""
    if isinstance(arg, ast.Constant):
        return f"({ast.unparse(arg)})"
    if _field_of_event(arg) and arg.slice.value == 1:
        return TIME
    return name


def _leading_call(test: ast.expr) -> ast.Call | None:
    """The call an expression evaluates before anything else, if any: the expression itself,
    or that of the left operand of a comparison or arithmetic, the first operand of ``and``
    or ``or`` (evaluated whatever the others), or the operand of ``not`` or ``-``."""
    node = test
    while not isinstance(node, ast.Call):
        if isinstance(node, (ast.Compare, ast.BinOp)):
            node = node.left
        elif isinstance(node, ast.BoolOp):
            node = node.values[0]
        elif isinstance(node, ast.UnaryOp):
            node = node.operand
        else:
            return None
    return node


class _ReplaceNode(ast.NodeTransformer):
    """Puts ``new`` where the node ``old`` (that very object) stands."""

    def __init__(self, old: ast.AST, new: ast.AST):
        self.old, self.new = old, new

    def visit(self, node: ast.AST) -> Any:
        return ast.copy_location(self.new, node) if node is self.old else super().visit(node)


def _field_of_event(node: ast.expr) -> bool:
    """Whether ``node`` reads a field of the loop's event by position (``_rs_ev[1]``)."""
    return (
        isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Name)
        and node.value.id == EVENT
        and isinstance(node.slice, ast.Constant)
        and isinstance(node.slice.value, int)
    )


def _reads_event(node: ast.expr) -> bool:
    """Whether ``node`` only reads fields of the loop's event (:func:`_field_of_event`, or a
    tuple of them): the same value wherever it is evaluated in one event's run, and one
    that cannot fail, so it need not be bound when the site does not use it."""
    if isinstance(node, ast.Tuple):
        return all(_field_of_event(e) for e in node.elts)
    return _field_of_event(node)


def _emit_source(
    call: ast.expr, emits: frozenset[str], p: str, emit_block: EmitBlock | None = None
) -> str | None:
    """The statements of ``emit("table", name=value, ...)``, a call of one of ``emits``,
    that append its row as ``SerialRuntime.emit`` does (its fields made first, then the
    row from the runtime's event, handler and ``seq``); None for any other call (a table
    that is not a string literal, ``**fields``, a field named ``table``).

    With ``emit_block`` (the serial engine's replay), the row goes to a block of the rows
    this emit makes one after the other, as ``lsn, ts, *values`` in a flat list: no dict
    and no row tuple kept per row, and the table is built from the block's columns. In the loop, the
    runtime's event is the loop's, and its handler and ``seq`` do not change while a
    handler body runs (only scheduled runs set them), so a block takes them once."""
    if not (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Name)
        and call.func.id in emits
        and len(call.args) == 1
        and isinstance(call.args[0], ast.Constant)
        and isinstance(call.args[0].value, str)
        and all(kw.arg not in (None, "table") for kw in call.keywords)
    ):
        return None
    table = call.args[0].value
    g = emit_block(table, tuple(kw.arg for kw in call.keywords)) if emit_block else None
    if g is not None:
        values = [f"{p}{i}" for i in range(len(call.keywords))]
        lines = [f"{v} = {ast.unparse(kw.value)}" for v, kw in zip(values, call.keywords)]
        row = ", ".join(["_rs_ev[0]", "_rs_ev[1]", *values])
        lines += [f"if {g}list[-1] is not {g}blk:", f"    {g}open()", f"{g}add(({row}))"]
        return "\n".join(lines)
    fields = ", ".join(f"{kw.arg!r}: {ast.unparse(kw.value)}" for kw in call.keywords)
    return (
        f"{p}f = {{{fields}}}\n"
        f"{p}e = _rs_rt.event\n"
        f"_rs_rt.rows[{table!r}].append("
        f"({p}e[0], {p}e[1], _rs_rt.handler, _rs_rt.seq, {p}f))"
    )


def statements_at(source: str, lineno: int) -> list[ast.stmt]:
    """The statements of ``source``, every node placed at line ``lineno`` of the program
    (generated code reports the user's line it stands for)."""
    body = ast.parse(source).body
    for stmt in body:
        for n in ast.walk(stmt):
            if hasattr(n, "lineno"):
                n.lineno = n.end_lineno = lineno
                n.col_offset = n.end_col_offset = 0
    return body
