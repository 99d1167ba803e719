"""Function scopes as the compiler and the planner both see them: locals, aliases of state.

A name bound anywhere in a function (an argument, an assignment, an import, a nested def) is
local there, unless declared ``global``. A local assigned exactly once from a state's name
(``m = friends``) is an alias of that state rather than a local.

This module is the one resolver of which name means which state: ``StateResolver`` answers
it for a stack of enclosing scopes (innermost last), and ``ScopedTransformer`` keeps that
stack for an ``ast.NodeTransformer`` that enters functions. The compiler's rewrite, the
planner's analysis and lint, and the causal check all resolve names through them.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field

__all__ = [
    "Scope",
    "bound_by",
    "StateResolver",
    "ScopedTransformer",
    "make_scope",
    "no_state",
    "walk_same_scope",
    "param_names",
]


@dataclass
class Scope:
    """One function's names: locals, aliases of state, values of locals assigned once."""

    node: ast.AST
    shadowed: set[str]
    aliases: dict[str, str]
    simple: dict[str, ast.expr]
    nested: dict[str, ast.FunctionDef]
    subst: dict[str, tuple[ast.expr, bool]] = field(default_factory=dict)
    state_params: dict[str, str] = field(default_factory=dict)


def walk_same_scope(node: ast.AST) -> Iterator[ast.AST]:
    """Walk ``node`` without entering nested functions, lambdas or classes (it yields defs)."""
    yield node
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            if not isinstance(child, ast.Lambda):
                yield child
            continue
        yield from walk_same_scope(child)


def param_names(args: ast.arguments) -> list[str]:
    names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
    names += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
    return names


def make_scope(node: ast.AST, resolve: Callable[[str], str | None]) -> Scope:
    """The scope of a function or lambda, by the compiler's rules for locals and aliases."""
    args = node.args
    body: list[ast.AST] = [node.body] if isinstance(node, ast.Lambda) else list(node.body)
    params = set(param_names(args))
    bound = set(params)
    declared_global: set[str] = set()
    assignments: dict[str, list[ast.AST]] = {}
    stores: dict[str, int] = {}
    values: dict[str, ast.expr] = {}
    nested: dict[str, ast.FunctionDef] = {}
    for stmt in body:
        for sub in walk_same_scope(stmt):
            if isinstance(sub, ast.Global):
                declared_global.update(sub.names)
            elif isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                bound.add(sub.id)
                stores[sub.id] = stores.get(sub.id, 0) + 1
            elif isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.add(sub.name)
                stores[sub.name] = stores.get(sub.name, 0) + 1
                if isinstance(sub, ast.FunctionDef):
                    nested[sub.name] = sub
            elif isinstance(sub, (ast.Import, ast.ImportFrom)):
                for alias in sub.names:
                    name = (alias.asname or alias.name).split(".")[0]
                    bound.add(name)
                    stores[name] = stores.get(name, 0) + 1
            if isinstance(sub, ast.Assign):
                for target in sub.targets:
                    if isinstance(target, ast.Name):
                        assignments.setdefault(target.id, []).append(sub.value)
                        values[target.id] = sub.value
                    elif (
                        isinstance(target, (ast.Tuple, ast.List))
                        and isinstance(sub.value, (ast.Tuple, ast.List))
                        and len(target.elts) == len(sub.value.elts)
                        and not any(
                            isinstance(x, ast.Starred) for x in target.elts + sub.value.elts
                        )
                    ):
                        for t, v in zip(target.elts, sub.value.elts):
                            if isinstance(t, ast.Name):
                                values[t.id] = v
            elif isinstance(sub, (ast.AugAssign, ast.AnnAssign)) and isinstance(
                sub.target, ast.Name
            ):
                assignments.setdefault(sub.target.id, []).extend([sub, sub])
                if isinstance(sub, ast.AnnAssign) and sub.value is not None:
                    values[sub.target.id] = sub.value
            elif isinstance(sub, ast.NamedExpr):
                values[sub.target.id] = sub.value
    aliases = {}
    for name, vals in assignments.items():
        if len(vals) == 1 and isinstance(vals[0], ast.Name) and name not in params:
            target_state = resolve(vals[0].id)
            if target_state:
                aliases[name] = target_state
    shadowed = (bound - declared_global) - set(aliases)
    simple = {
        name: value
        for name, value in values.items()
        if stores.get(name) == 1 and name not in params and name not in aliases
    }
    return Scope(node, shadowed, aliases, simple, nested)


def no_state(name: str) -> str | None:
    """A resolver for a function read on its own: no outer name is state, so it has no aliases."""
    return None


@dataclass(frozen=True)
class StateResolver:
    """Which state a name means inside nested function scopes (the innermost last).

    Going outwards, the first scope that aliases the name gives its state and the first that
    binds it as a local hides any state of that name; a name no scope binds is the module's
    state of that name, if one is declared.
    """

    states: Collection[str]

    def binding(self, name: str, stack: Sequence[Scope]) -> tuple[str, str | int] | None:
        """``("state", state)``, ``("local", index in stack)``, or None if no scope binds it."""
        for index in range(len(stack) - 1, -1, -1):
            scope = stack[index]
            if name in scope.aliases:
                return "state", scope.aliases[name]
            if name in scope.shadowed:
                return "local", index
        return None

    def state_of(self, name: str, stack: Sequence[Scope] = ()) -> str | None:
        """The state ``name`` means inside the innermost scope of ``stack``, or None."""
        found = self.binding(name, stack)
        if found is None:
            return name if name in self.states else None
        where, what = found
        return what if where == "state" else None

    def scope(self, node: ast.AST, enclosing: Sequence[Scope] = ()) -> Scope:
        """The scope of function ``node`` defined inside ``enclosing``: its aliases resolved there."""
        return make_scope(node, lambda name: self.state_of(name, enclosing))


class ScopedTransformer(ast.NodeTransformer):
    """A transformer that keeps the scopes of the functions it is inside, to resolve state names.

    At module level (outside every function) no name is taken for state: only handlers and the
    functions they call touch state.
    """

    def __init__(self, states: Collection[str]):
        self.resolver = StateResolver(states)
        self.scope_stack: list[Scope] = []

    def _enter_function(self, node: ast.AST) -> ast.AST:
        self.scope_stack.append(self.resolver.scope(node, self.scope_stack))
        try:
            self.generic_visit(node)
        finally:
            self.scope_stack.pop()
        return node

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _enter_function

    def state_named(self, name: str) -> str | None:
        """The state ``name`` means where the walk is, or None (also at module level)."""
        return self.resolver.state_of(name, self.scope_stack) if self.scope_stack else None


def bound_by(node: ast.AST) -> set[str]:
    """The names ``node`` itself binds (not its children): an assigned or deleted name, an
    import's names, an ``except ... as`` name, a ``match`` capture."""
    if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
        return {node.id}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    if isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name:
        return {node.name}
    if isinstance(node, ast.MatchMapping) and node.rest:
        return {node.rest}
    return set()
