"""Canonical key expressions: an expression of a handler rewritten in terms of its event.

The event argument becomes a sentinel name (``e`` once rendered), locals assigned once are
replaced by their value, helpers that only ``return`` an expression are inlined with their
parameters bound to the call's arguments. Two ways of writing one key then give the same text,
and :class:`Canon` notes which parts are not a function of the event and module constants
(state, locals with no single value, lambdas, impure builtins), so that the purity of any part
of a key (one element of a tuple) can be told.
"""

from __future__ import annotations

import ast
import copy

from ..compiler.scopes import Scope, make_scope, no_state, param_names
from ._module_info import ModuleInfo
from .ir import EVENT

__all__ = ["Canon", "SENTINEL", "MAX_DEPTH", "bind_arguments", "render"]

#: The name the event argument is rewritten to, before :func:`render` names it ``e``.
SENTINEL = "__rs_event__"
#: How deep helpers and locals are expanded, and helper calls followed.
MAX_DEPTH = 40
#: Builtins whose result differs between processes or runs: never part of an event key.
_IMPURE_BUILTINS = {
    "hash",
    "id",
    "input",
    "open",
    "print",
    "eval",
    "exec",
    "globals",
    "locals",
    "vars",
    "__import__",
    "breakpoint",
    "iter",
    "next",
}


class Canon(ast.NodeTransformer):
    """Rewrite an expression in terms of the handler's event; note which parts are not pure.

    ``bad`` holds the ids of output nodes that are not a function of the event and module
    constants (state, locals with no single value, lambdas...), so that the purity of any
    part of the result (one element of a tuple key) can be told.
    """

    def __init__(self, mod: ModuleInfo, stack: list[Scope], expanding: frozenset = frozenset()):
        self.mod = mod
        self.stack = stack
        self.expanding = expanding
        self.bad: set[int] = set()
        self.bound_here: set[str] = set()

    @property
    def pure(self) -> bool:
        return not self.bad

    def run(self, node: ast.expr) -> tuple[ast.expr, bool]:
        out = self.visit(copy.deepcopy(node))
        return out, self.pure

    def part_is_pure(self, node: ast.AST) -> bool:
        return not any(id(n) in self.bad for n in ast.walk(node))

    def _taint(self, node: ast.AST) -> ast.AST:
        self.bad.add(id(node))
        return node

    def _comprehension(self, node: ast.AST) -> ast.AST:
        for gen in node.generators:
            for sub in ast.walk(gen.target):
                if isinstance(sub, ast.Name):
                    self.bound_here.add(sub.id)
        return self.generic_visit(node)

    visit_ListComp = visit_SetComp = visit_GeneratorExp = visit_DictComp = _comprehension

    def _impure(self, node: ast.AST) -> ast.AST:
        return self._taint(self.generic_visit(node))

    visit_Lambda = visit_Await = visit_Yield = visit_YieldFrom = _impure

    def visit_NamedExpr(self, node: ast.NamedExpr) -> ast.AST:
        # ``(k := v)`` is the value ``v``.
        return self.visit(node.value)

    def _inner(self, inner: Canon, value: ast.expr) -> ast.expr:
        out = inner.visit(copy.deepcopy(value))
        self.bad |= inner.bad
        return out

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if not isinstance(node.ctx, ast.Load) or node.id in self.bound_here:
            return node
        where, payload = self.mod.lookup(node.id, self.stack)
        if where == "state":
            return self._taint(node)
        if where == "local":
            index = payload
            scope = self.stack[index]
            if node.id in scope.subst:
                value, pure = scope.subst[node.id]
                out = copy.deepcopy(value)
                return out if pure else self._taint(out)
            marker = (id(scope.node), node.id)
            if (
                node.id in scope.simple
                and marker not in self.expanding
                and len(self.expanding) < MAX_DEPTH
            ):
                inner = Canon(self.mod, self.stack[: index + 1], self.expanding | {marker})
                return self._inner(inner, scope.simple[node.id])
            return self._taint(node)
        if where in ("def", "module") and self.mod.mentions_state(node.id):
            return self._taint(node)
        if where == "builtin" and node.id in _IMPURE_BUILTINS:
            return self._taint(node)
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        func = node.func
        if isinstance(func, ast.Name) and func.id not in self.bound_here:
            where, payload = self.mod.lookup(func.id, self.stack)
            if where == "def":
                inlined = self._inline(func.id, node)
                if inlined is not None:
                    return inlined
        return self.generic_visit(node)

    def _inline(self, name: str, call: ast.Call) -> ast.expr | None:
        """Inline a pure helper whose body is one ``return`` of an expression."""
        fn = self.mod.defs[name]
        if self.mod.mentions_state(name) or len(self.expanding) >= MAX_DEPTH:
            return None
        if isinstance(fn, ast.Lambda):
            result = fn.body
        else:
            body = [s for s in fn.body if not _is_docstring(s)]
            if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
                return None
            result = body[0].value
        marker = (id(fn), name)
        if marker in self.expanding:
            return None
        binding = bind_arguments(fn.args, call)
        if binding is None:
            return None
        scope = make_scope(fn, no_state)
        for param, arg in binding.items():
            if arg is None:
                return None
            value, pure = (
                Canon(self.mod, self.stack, self.expanding).run(arg)
                if param[1]
                else (Canon(self.mod, [], self.expanding).run(arg))
            )
            scope.subst[param[0]] = (value, pure)
        if set(param_names(fn.args)) - set(scope.subst):
            return None
        return self._inner(Canon(self.mod, [scope], self.expanding | {marker}), result)


def _is_docstring(stmt: ast.stmt) -> bool:
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Constant)
        and isinstance(stmt.value.value, str)
    )


def bind_arguments(
    args: ast.arguments, call: ast.Call
) -> dict[tuple[str, bool], ast.expr | None] | None:
    """Map each parameter to (argument, from the caller) or (default, from the definition).

    None when the call cannot be bound statically (``*args``, ``**kwargs``, unknown names).
    """
    if any(isinstance(a, ast.Starred) for a in call.args) or any(
        k.arg is None for k in call.keywords
    ):
        return None
    if args.vararg or args.kwarg:
        return None
    positional = args.posonlyargs + args.args
    if len(call.args) > len(positional):
        return None
    out: dict[tuple[str, bool], ast.expr | None] = {}
    given: dict[str, ast.expr] = {}
    for param, arg in zip(positional, call.args):
        given[param.arg] = arg
    for kw in call.keywords:
        if kw.arg in given or kw.arg not in {a.arg for a in args.args + args.kwonlyargs}:
            return None
        given[kw.arg] = kw.value
    defaults = dict(
        zip([a.arg for a in positional][len(positional) - len(args.defaults) :], args.defaults)
    )
    defaults.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None})
    for param in positional + args.kwonlyargs:
        if param.arg in given:
            out[(param.arg, True)] = given[param.arg]
        elif param.arg in defaults:
            out[(param.arg, False)] = defaults[param.arg]
        else:
            return None
    return out


def render(expr: ast.expr) -> tuple[str, bool]:
    """The text of a canonical expression with the event named ``e``; False if ``e`` clashes."""
    clash = any(isinstance(n, ast.Name) and n.id == EVENT for n in ast.walk(expr))
    renamed = copy.deepcopy(expr)
    for sub in ast.walk(renamed):
        if isinstance(sub, ast.Name) and sub.id == SENTINEL:
            sub.id = EVENT
    return ast.unparse(renamed), not clash
