"""Reads through one-line helpers, seen as reads in the handler: ``per_ip__value(e.ip, e.ts)``.

Window declarations expand into helpers such as ``def per_ip__value(key, ts): return
per_ip__n[key]``: a handler that reads a window's value reads its state through a call. For
read sites (:mod:`restream_kit.history.probes`) such a call is replaced by the helper's
returned expression with the arguments put in for the parameters, which is the same
computation when the helper is a single ``return`` and every argument is an event field, a
constant or a module-level name (evaluating it again, or not at all, cannot change anything:
none of them can raise or has an effect). The replacement is done in a copy of the handler's
tree that finds sites, and in the re-run handler that serves them.

:func:`unreached_helpers` says which helpers no re-run handler can call (their use of reused
state is then irrelevant to a re-replay).
"""

from __future__ import annotations

import ast
import copy

__all__ = ["inline_read_helpers", "unreached_helpers"]

_SCOPES = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_UNSAFE = (ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom, *_SCOPES)


def _one_return(fn: ast.FunctionDef) -> ast.expr | None:
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # a docstring
    args = fn.args
    if (
        fn.decorator_list
        or len(body) != 1
        or not isinstance(body[0], ast.Return)
        or body[0].value is None
        or args.posonlyargs
        or args.vararg
        or args.kwonlyargs
        or args.kwarg
    ):
        return None
    value = body[0].value
    if any(isinstance(n, _UNSAFE) for n in ast.walk(value)):
        return None
    return value


def _module_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
    return names


def _harmless(arg: ast.expr, event_arg: str, local: set[str], module: set[str]) -> bool:
    """An event field, a constant, a module-level name, or a tuple of them."""
    if isinstance(arg, ast.Constant):
        return True
    if isinstance(arg, ast.Tuple):
        return all(_harmless(a, event_arg, local, module) for a in arg.elts)
    if isinstance(arg, ast.Name):
        return arg.id not in local and arg.id != event_arg and arg.id in module
    return (
        isinstance(arg, ast.Attribute)
        and isinstance(arg.value, ast.Name)
        and arg.value.id == event_arg
    )


def inline_read_helpers(
    tree: ast.Module, fn: ast.FunctionDef, local: set[str], columns: set[str]
) -> None:
    """Replace, in handler ``fn`` (in place), each call of a one-``return`` helper of
    ``tree`` whose arguments are harmless by the helper's expression (up to 4 deep)."""
    helpers = {
        n.name: n
        for n in tree.body
        if isinstance(n, ast.FunctionDef) and not n.decorator_list and _one_return(n) is not None
    }
    if not helpers:
        return
    module = _module_names(tree)
    event_arg = fn.args.args[0].arg

    class Inline(ast.NodeTransformer):
        def visit_Call(self, node: ast.Call) -> ast.AST:
            self.generic_visit(node)
            helper = helpers.get(node.func.id) if isinstance(node.func, ast.Name) else None
            if helper is None or node.func.id in local or node.keywords:
                return node
            params = [a.arg for a in helper.args.args]
            if len(node.args) != len(params) or any(
                isinstance(a, ast.Starred)
                or not _harmless(a, event_arg, local, module)
                or (isinstance(a, ast.Attribute) and a.attr not in columns)
                for a in node.args
            ):
                return node
            value = copy.deepcopy(_one_return(helper))
            free = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)} - set(params)
            if free & (local | {event_arg}):
                return node  # a name of the helper's module would be one of the handler's
            bound = dict(zip(params, node.args, strict=True))

            class Put(ast.NodeTransformer):
                def visit_Name(self, name: ast.Name) -> ast.AST:
                    if name.id in bound:
                        return copy.deepcopy(bound[name.id])
                    return name

            out = Put().visit(value)
            for sub in ast.walk(out):
                sub.lineno = node.lineno
                sub.col_offset = node.col_offset
                sub.end_lineno = node.end_lineno
                sub.end_col_offset = node.end_col_offset
            return out

    for _ in range(4):
        before = ast.dump(fn)
        fn.body = [Inline().visit(stmt) for stmt in fn.body]
        if ast.dump(fn) == before:
            break


def unreached_helpers(tree: ast.Module, callers: set[str], handlers: set[str]) -> set[str]:
    """Module-level functions of ``tree`` that are not ``handlers`` and that only functions
    in ``callers`` (handlers that do not re-run) or other such helpers name. A name used
    anywhere else (another handler, module level, a decorator) counts as a possible call."""
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    users: dict[str, set[str | None]] = {name: set() for name in functions}
    for node in tree.body:
        owner = node.name if isinstance(node, ast.FunctionDef) else None
        parts = [node.args, *node.body] if owner is not None else [node]
        if owner is not None:
            for deco in node.decorator_list:
                for n in ast.walk(deco):
                    if isinstance(n, ast.Name) and n.id in users:
                        users[n.id].add(None)
        for part in parts:
            for n in ast.walk(part):
                if isinstance(n, ast.Name) and n.id in users and n.id != owner:
                    users[n.id].add(owner)
    unreached = set()
    changed = True
    while changed:
        changed = False
        for name, who in users.items():
            if name in unreached or name in callers or name in handlers:
                continue
            if all(w is not None and (w in callers or w in unreached) for w in who):
                unreached.add(name)
                changed = True
    return unreached
