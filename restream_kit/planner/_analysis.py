"""Static analysis of handlers: every state access with its key, every emit and every schedule.

The analysis walks each handler's ``ast`` the way the compiler (``restream_kit.compiler.compile``)
reads it, so that what counts as a state access here is exactly what becomes one at run time:
``m[k]``, ``m.get(k)``, ``k in m``, ``m[k] = v``, ``m[k] += d``, ``del m[k]``,
``m.set/add/merge/delete(k, ..., at=...)``, ``v.value`` and local aliases (``m = friends``).
A bare state name used any other way (``len(m)``, ``for k in m``) reads the whole state.

Calls of functions defined with ``def`` in the program are followed: the callee's parameters
are bound to the caller's arguments, so a key built in a helper is written in terms of the
handler's event. Calls that cannot be followed (recursion through state, a helper passed as a
value, a state-using callable that is not a plain function) are rejected with the line.

Key expressions are canonicalised (``_canon``): the event argument becomes ``e``, locals
assigned once are replaced by their value, helpers that only ``return`` an expression are
inlined. Two ways of writing one key in a handler then give the same text, and the text can be
evaluated with the event bound to ``e`` in the program's namespace (see ``plan.compile_key``).
The program's module-level names come from ``_module_info``. This module is the walk.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ..compiler.scopes import Scope
from ..model.errors import ProgramError
from ..model.program import Program
from ._canon import MAX_DEPTH, SENTINEL, Canon, bind_arguments, render
from ._module_info import ModuleInfo
from .ir import EVENT, Access

__all__ = ["ScheduleCall", "HandlerAccess", "analyse", "EVENT"]

_STATE_METHODS = {"get", "set", "add", "merge", "delete"}


@dataclass(frozen=True)
class ScheduleCall:
    """A ``schedule(kind, at=..., **fields)`` call: kind when literal, fields as canonical text."""

    kind: str | None
    at: str | None
    fields: tuple[tuple[str, str, bool], ...]  # (field, canonical expression, event key)
    lineno: int
    via: str | None


@dataclass(frozen=True)
class HandlerAccess:
    """What one handler does to state and outputs, found by reading its source."""

    name: str
    kinds: tuple[str, ...]
    lineno: int
    event_arg: str
    accesses: tuple[Access, ...]  # in the handler or in helpers it calls
    emits: tuple[str, ...]
    schedules: tuple[ScheduleCall, ...]
    helpers: tuple[str, ...]  # module-level functions followed from this handler
    notes: tuple[tuple[str, str, int], ...]  # (code, message, line) worth a warning


class _Walker:
    """Walks one handler and every helper it calls, recording what they do."""

    def __init__(self, mod: ModuleInfo, handler: str):
        self.mod = mod
        self.handler = handler
        self.accesses: list[Access] = []
        self.emits: list[str] = []
        self.schedules: list[ScheduleCall] = []
        self.helpers: list[str] = []
        self.notes: list[tuple[str, str, int]] = []
        self.calls: list[str] = []  # the helpers being followed, innermost last
        self.visited_nested: set[int] = set()
        self.reached: list[ast.AST] = []  # every function body walked, for the lint

    # names

    def state_of(self, node: ast.AST, stack: list[Scope]) -> str | None:
        return self.mod.resolver.state_of(node.id, stack) if isinstance(node, ast.Name) else None

    def error(self, lineno: int | None, message: str) -> ProgramError:
        return ProgramError(
            f"handler {self.handler!r}: {message}", filename=self.mod.filename, lineno=lineno
        )

    @property
    def via(self) -> str | None:
        return self.calls[-1] if self.calls else None

    # recording

    def canon(self, expr: ast.expr, stack: list[Scope]) -> tuple[ast.expr, bool]:
        return Canon(self.mod, stack).run(expr)

    def record(
        self,
        state: str,
        op: str,
        key: ast.expr | None,
        node: ast.AST,
        stack: list[Scope],
        whole: bool = False,
    ) -> None:
        parts = None
        if key is None:
            text, event_key = None, not whole
        else:
            canon = Canon(self.mod, stack)
            expr, pure = canon.run(key)
            text, no_clash = render(expr)
            event_key = pure and no_clash
            if isinstance(expr, ast.Tuple):
                found = []
                for elt in expr.elts:
                    part, part_clear = render(elt)
                    found.append((part, part_clear and canon.part_is_pure(elt)))
                parts = tuple(found)
        self.accesses.append(
            Access(state, op, text, event_key, node.lineno, self.via, self.handler, whole, parts)
        )

    # the walk proper

    def function(self, fn: ast.AST, stack: list[Scope]) -> None:
        self.reached.append(fn)
        body = [fn.body] if isinstance(fn, ast.Lambda) else fn.body
        for stmt in body:
            self.visit(stmt, stack)

    def visit(self, node: ast.AST, stack: list[Scope]) -> None:
        method = getattr(self, f"visit_{type(node).__name__}", None)
        if method is not None:
            method(node, stack)
        else:
            self.children(node, stack)

    def children(self, node: ast.AST, stack: list[Scope]) -> None:
        for child in ast.iter_child_nodes(node):
            self.visit(child, stack)

    def _is_value(self, name: str) -> bool:
        return name in self.mod.states and self.mod.states[name] == "value"

    def _reaches_state(self, where: str, name: str) -> bool:
        """Is ``name`` a module-level value (not an import, not a def) that reaches state? Its
        accesses cannot be followed."""
        return where == "module" and name not in self.mod.imports and self.mod.mentions_state(name)

    def visit_Name(self, node: ast.Name, stack: list[Scope]) -> None:
        where, payload = self.mod.lookup(node.id, stack)
        if not isinstance(node.ctx, ast.Load):
            return
        if where == "state":
            self.record(payload, "read", None, node, stack, whole=True)
        elif where == "def" and self.mod.mentions_state(node.id):
            raise self.error(
                node.lineno,
                f"helper {node.id!r} uses state and is passed as a value, so its accesses "
                "cannot be followed; call it directly instead",
            )
        elif self._reaches_state(where, node.id):
            raise self.error(
                node.lineno,
                f"{node.id!r} reaches state but is not a function defined with def, so its "
                "accesses cannot be followed; make it a plain module-level function",
            )
        elif where == "local":
            scope = stack[payload]
            nested = scope.nested.get(node.id)
            if nested is not None and id(nested) not in self.visited_nested:
                # A nested function used as a value: walk it once with unknown parameters.
                self.visited_nested.add(id(nested))
                inner = self.mod.resolver.scope(nested, stack)
                self.function(nested, stack + [inner])

    def visit_Subscript(self, node: ast.Subscript, stack: list[Scope]) -> None:
        state = self.state_of(node.value, stack)
        if state is None:
            self.children(node, stack)
            return
        if self._is_value(state):
            raise self.error(
                node.lineno, f"{state} is a state.Value: use {state}.value, not {state}[...]"
            )
        op = {ast.Load: "read", ast.Store: "overwrite", ast.Del: "delete"}[type(node.ctx)]
        self.record(state, op, node.slice, node, stack)
        self.visit(node.slice, stack)

    def visit_Attribute(self, node: ast.Attribute, stack: list[Scope]) -> None:
        state = self.state_of(node.value, stack)
        if state is not None and node.attr == "value" and self._is_value(state):
            op = {ast.Load: "read", ast.Store: "overwrite", ast.Del: "delete"}[type(node.ctx)]
            self.record(state, op, None, node, stack)
            return
        if isinstance(node.value, ast.Name) and node.value.id in self.mod.kit_modules:
            return
        if state is not None:
            # m.get etc. are handled by visit_Call; any other attribute reads the whole state.
            self.record(state, "read", None, node, stack, whole=True)
            return
        self.children(node, stack)

    def visit_AugAssign(self, node: ast.AugAssign, stack: list[Scope]) -> None:
        target = node.target
        state = self.state_of(getattr(target, "value", None), stack)
        if state is not None and isinstance(target, ast.Subscript):
            if self._is_value(state):
                raise self.error(node.lineno, f"{state} is a state.Value: use {state}.value")
            self.record(state, "merge", target.slice, node, stack)
            self.visit(target.slice, stack)
        elif (
            state is not None
            and isinstance(target, ast.Attribute)
            and target.attr == "value"
            and (self._is_value(state))
        ):
            self.record(state, "merge", None, node, stack)
        else:
            self.visit(target, stack)
        self.visit(node.value, stack)

    def visit_Assign(self, node: ast.Assign, stack: list[Scope]) -> None:
        # An alias (m = friends) is not a use of the state.
        if (
            len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Name)
            and stack
            and node.targets[0].id in stack[-1].aliases
        ):
            return
        # The value is evaluated before the targets are stored into.
        self.visit(node.value, stack)
        for target in node.targets:
            self.visit(target, stack)

    def visit_Compare(self, node: ast.Compare, stack: list[Scope]) -> None:
        operands = [node.left, *node.comparators]
        handled: set[int] = set()
        for i, op in enumerate(node.ops):
            right = operands[i + 1]
            if isinstance(op, (ast.In, ast.NotIn)):
                state = self.state_of(right, stack)
                if state is not None and not self._is_value(state):
                    self.record(state, "read", operands[i], node, stack)
                    handled.add(i + 1)
        for i, operand in enumerate(operands):
            if i not in handled:
                self.visit(operand, stack)

    def visit_Call(self, node: ast.Call, stack: list[Scope]) -> None:
        func = node.func
        if isinstance(func, ast.Attribute):
            state = self.state_of(func.value, stack)
            if state is not None:
                self._state_call(node, state, func.attr, stack)
                return
            if isinstance(func.value, ast.Name) and func.value.id in self.mod.kit_modules:
                if func.attr in ("emit", "schedule"):
                    self._output(node, func.attr, stack)
                    return
        if isinstance(func, ast.Name):
            where, payload = self.mod.lookup(func.id, stack)
            if where == "builtin" or where == "module":
                if func.id in self.mod.emit_names:
                    self._output(node, "emit", stack)
                    return
                if func.id in self.mod.schedule_names:
                    self._output(node, "schedule", stack)
                    return
            if where == "def":
                self._follow(node, self.mod.defs[func.id], func.id, [], stack)
                return
            if where == "local":
                nested = stack[payload].nested.get(func.id)
                if nested is not None:
                    self._follow(node, nested, func.id, stack[: payload + 1], stack)
                    return
            if self._reaches_state(where, func.id):
                raise self.error(
                    node.lineno,
                    f"cannot follow the call of {func.id!r}: it reaches state but is not a "
                    "function defined with def; make it a plain module-level function",
                )
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            where, _ = self.mod.lookup(func.value.id, stack)
            if self._reaches_state(where, func.value.id):
                raise self.error(
                    node.lineno,
                    f"cannot follow the call {func.value.id}.{func.attr}(...): {func.value.id!r} "
                    "reaches state but is not a plain function; use module-level functions",
                )
        self.children(node, stack)

    def _state_call(self, node: ast.Call, state: str, method: str, stack: list[Scope]) -> None:
        if method not in _STATE_METHODS:
            raise self.error(
                node.lineno,
                f"{state}.{method}(...) is not a state operation (use [k], get, set, add, merge, "
                "delete, `in`)",
            )
        is_value = self._is_value(state)
        args = list(node.args)
        key = None if is_value else (args.pop(0) if args else None)
        if key is None and not is_value:
            raise self.error(node.lineno, f"{state}.{method} needs a key")
        timed = any(kw.arg == "at" for kw in node.keywords)
        if method == "get":
            op = "read"
        elif timed:
            op = "future"
        else:
            op = {"set": "overwrite", "add": "merge", "merge": "merge", "delete": "delete"}[method]
        self.record(state, op, key, node, stack)
        if key is not None:
            self.visit(key, stack)
        for arg in args:
            self.visit(arg, stack)
        for kw in node.keywords:
            self.visit(kw.value, stack)

    def _output(self, node: ast.Call, what: str, stack: list[Scope]) -> None:
        first = node.args[0] if node.args else None
        literal = (
            first.value
            if isinstance(first, ast.Constant) and isinstance(first.value, str)
            else None
        )
        if what == "emit":
            if literal is not None and literal not in self.emits:
                self.emits.append(literal)
        else:
            fields = []
            at = None
            for kw in node.keywords:
                if kw.arg is None:
                    continue
                expr, pure = self.canon(kw.value, stack)
                text, no_clash = render(expr)
                if kw.arg == "at":
                    at = text
                else:
                    fields.append((kw.arg, text, pure and no_clash))
            self.schedules.append(ScheduleCall(literal, at, tuple(fields), node.lineno, self.via))
        self.children(node, stack)

    def _follow(
        self, node: ast.Call, fn: ast.AST, name: str, outer: list[Scope], stack: list[Scope]
    ) -> None:
        """Walk a called function with its parameters bound to this call's arguments."""
        binding = bind_arguments(fn.args, node)
        state_args = [a for a in node.args if self.state_of(a, stack)] + [
            k.value for k in node.keywords if self.state_of(k.value, stack)
        ]
        reaches = self.mod.mentions_state(name) or bool(state_args) or bool(outer)
        if binding is None:
            if reaches:
                raise self.error(
                    node.lineno,
                    f"cannot follow the call of helper {name!r}: its arguments cannot be matched "
                    "to its parameters (*args or **kwargs); pass them by position or name",
                )
            self.children(node, stack)
            return
        if name in self.calls or len(self.calls) >= MAX_DEPTH:
            if reaches:
                raise self.error(
                    node.lineno,
                    f"cannot follow the recursive call of helper {name!r}, which uses state",
                )
            self.children(node, stack)
            return
        # Arguments are evaluated in the caller: their own reads belong there.
        for arg in node.args:
            if not self.state_of(arg, stack):
                self.visit(arg, stack)
        for kw in node.keywords:
            if not self.state_of(kw.value, stack):
                self.visit(kw.value, stack)
        base = outer if outer else []
        scope = self.mod.resolver.scope(fn, base)
        for (param, from_call), arg in binding.items():
            state = self.state_of(arg, stack if from_call else base)
            if state is not None:
                scope.aliases[param] = state
                scope.shadowed.discard(param)
                scope.state_params[param] = state
                self.notes.append(
                    (
                        "state-argument",
                        f"state {state!r} is passed to {name!r} as argument {param!r}; inside it "
                        f"{param}[k] is a plain dictionary lookup (no default): prefer using "
                        f"{state} by its global name",
                        node.lineno,
                    )
                )
            else:
                scope.subst[param] = self.canon(arg, stack if from_call else base)
        if name not in self.helpers and not outer:
            self.helpers.append(name)
        self.calls.append(name)
        try:
            self.function(fn, base + [scope])
        finally:
            self.calls.pop()

    def visit_Lambda(self, node: ast.Lambda, stack: list[Scope]) -> None:
        inner = self.mod.resolver.scope(node, stack)
        self.function(node, stack + [inner])

    def visit_FunctionDef(self, node: ast.FunctionDef, stack: list[Scope]) -> None:
        # Nested functions are walked where they are called (or used as values); their
        # decorators and defaults run here.
        for deco in node.decorator_list:
            self.visit(deco, stack)
        for default in node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
            self.visit(default, stack)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef, stack: list[Scope]) -> None:
        raise self.error(node.lineno, "a class defined inside a handler cannot be analysed")


def analyse(
    program: Program, mod: ModuleInfo | None = None
) -> tuple[tuple[HandlerAccess, ...], dict]:
    """Analyse every handler of ``program``; also return the functions reached, per handler."""
    mod = mod or ModuleInfo(program)
    out = []
    reached: dict[str, list[ast.AST]] = {}
    for h in program.handlers:
        walker = _Walker(mod, h.name)
        scope = mod.resolver.scope(h.node)
        scope.subst[h.event_arg] = (ast.Name(id=SENTINEL, ctx=ast.Load()), True)
        walker.function(h.node, [scope])
        reached[h.name] = walker.reached
        out.append(
            HandlerAccess(
                name=h.name,
                kinds=tuple(h.kinds),
                lineno=h.lineno,
                event_arg=h.event_arg,
                accesses=tuple(dict.fromkeys(walker.accesses)),
                emits=tuple(walker.emits),
                schedules=tuple(walker.schedules),
                helpers=tuple(walker.helpers),
                notes=tuple(dict.fromkeys(walker.notes)),
            )
        )
    return tuple(out), reached
