"""Compile a program for a replay: rewrite every state access into a plain dict operation.

The rewrite runs once per replay over the module's AST, so that inside handlers
``friends[a, b]`` costs what ``dict.get`` costs and ``counts[k] += 1`` what two dict
operations cost. Writes with ``at=``, ``merge`` and ``delete`` go through the engine's
``write`` method, which knows about time. Line numbers are kept, so tracebacks point at the
user's own lines.
"""

from __future__ import annotations

import ast
import copy
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..model import handlers as declared
from ..model.errors import ProgramError
from ..model.program import Program
from ..model.state import Value
from .inline import RUNNER_NAME, build_runner
from .scopes import ScopedTransformer

__all__ = ["Runtime", "CompiledProgram", "compile_program", "check", "dict_name", "default_name"]

RUNTIME_NAME = "_rs_rt"
WRITE_OPS = {"set", "add", "merge", "delete"}


def dict_name(state: str) -> str:
    return f"_rs_d_{state}"


def default_name(state: str) -> str:
    return f"_rs_dflt_{state}"


class Runtime(Protocol):
    """What compiled code calls besides dicts: provided by each engine."""

    def write(self, d: dict, default: Any, op: str, key: Any, arg: Any, at: int | None) -> None: ...

    def emit(self, table: str, **fields: Any) -> None: ...

    def schedule(self, kind: str, *, at: int, **fields: Any) -> None: ...


@dataclass
class CompiledProgram:
    """A program bound to fresh storage: ``handlers`` in declaration order, ``stores`` by state."""

    program: Program
    handlers: tuple[tuple[str, Callable], ...]
    stores: dict[str, dict]
    namespace: dict[str, Any]
    #: ``run_batch(events)`` when compiled for a log's columns (see ``_inline``), else None.
    run_batch: Callable[[list], None] | None = None
    needs_named_events: bool = True
    #: What built ``run_batch`` (the rewritten module, then ``build_runner``'s arguments):
    #: a fused window rebuilds it with its adds written into the loop (``inline_windows``).
    runner_inputs: tuple | None = None

    def handlers_by_kind(self) -> dict[str, tuple[tuple[str, Callable], ...]]:
        by_kind: dict[str, list[tuple[str, Callable]]] = {}
        for h, (name, fn) in zip(self.program.handlers, self.handlers):
            for kind in h.kinds:
                by_kind.setdefault(kind, []).append((name, fn))
        return {kind: tuple(fns) for kind, fns in by_kind.items()}


def compile_program(
    program: Program,
    runtime: Runtime,
    stores: dict[str, dict] | None = None,
    *,
    columns: Sequence[str] | None = None,
    kind_order: Sequence[str] = (),
    extra_globals: dict[str, Any] | None = None,
    guarded: bool = False,
    only: Sequence[str] | None = None,
    hooks: Sequence[tuple[int, str, str]] = (),
    transform: Callable[[ast.Module], ast.Module] | None = None,
) -> CompiledProgram:
    """Rewrite and execute ``program`` against ``runtime``, with ``stores`` (fresh when None).

    Given the log's ``columns`` (and its kinds, most frequent first), also generate the batch
    runner that dispatches log events to handlers with their bodies inlined where safe
    (``guarded``: the runner that rolls back handler runs that raise; ``hooks``: statements a
    Spark pass adds to the loop; see ``_inline``). ``transform`` rewrites the program's tree
    first (a re-replay serves some reads from a run's history, see ``reuse``).
    """
    tree = _rewrite(program)
    if transform is not None:  # a re-replay serves some reads from a history (``reuse``)
        tree = transform(tree)
    dispatch = None
    runner_inputs = None
    if columns is not None:
        # ``only``: the runner dispatches to these handlers alone (a Spark pass runs a stage).
        handlers_kinds = [
            (h.name, h.kinds, h.index) for h in program.handlers if only is None or h.name in only
        ]
        runner_inputs = (
            tree,  # (build_runner only reads it: the runner appended below is no handler)
            handlers_kinds,
            list(columns),
            list(kind_order),
            {"guarded": guarded, "hooks": hooks},
        )
        dispatch = build_runner(*runner_inputs[:4], **runner_inputs[4])
        tree.body.append(dispatch.function)
    code = compile(tree, program.filename, "exec")
    stores = stores if stores is not None else {name: {} for name in program.states}
    namespace: dict[str, Any] = {
        "__name__": f"restream_program_{program.name}",
        "__file__": program.filename,
        RUNTIME_NAME: runtime,
        **(extra_globals or {}),
    }
    for name, decl in program.states.items():
        namespace[dict_name(name)] = stores[name]
        namespace[default_name(name)] = decl.default
    exec(code, namespace)
    # emit and schedule are plain functions of restream_kit; bind them to this replay.
    for var, value in list(namespace.items()):
        if value is declared.emit:
            namespace[var] = runtime.emit
        elif value is declared.schedule:
            namespace[var] = runtime.schedule
    handlers = tuple((h.name, namespace[h.name]) for h in program.handlers)
    compiled = CompiledProgram(program, handlers, stores, namespace)
    if dispatch is not None:
        compiled.run_batch = namespace[RUNNER_NAME]
        compiled.needs_named_events = dispatch.needs_named_events
        compiled.runner_inputs = runner_inputs
    return compiled


def check(program: Program) -> None:
    """Raise the ProgramError that compiling ``program`` would raise, without running it."""
    _rewrite(program)


def _rewrite(program: Program) -> ast.Module:
    # The program's module as loaded (window declarations expanded), copied: rewriting mutates.
    tree = copy.deepcopy(program.module_ast)
    kit_modules = _names_bound_to_kit(tree)
    rewritten = _StateRewriter(program, kit_modules).visit(tree)
    return ast.fix_missing_locations(rewritten)


def _names_bound_to_kit(tree: ast.Module) -> set[str]:
    """Module-level names that refer to the restream_kit package (``import restream_kit as rk``)."""
    names = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "restream_kit":
                    names.add(alias.asname or alias.name)
    return names


def _load(name: str) -> ast.Name:
    return ast.Name(id=name, ctx=ast.Load())


def _call(func: ast.expr, args: list[ast.expr]) -> ast.Call:
    return ast.Call(func=func, args=args, keywords=[])


class _StateRewriter(ScopedTransformer):
    """Turns state accesses inside functions into dict operations (see the module docstring)."""

    def __init__(self, program: Program, kit_modules: set[str]):
        super().__init__(program.states)
        self.program = program
        self.states = program.states
        self.kit_modules = kit_modules
        self.helpers = {
            n.name
            for n in program.module_ast.body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        }
        self.temps = itertools.count()

    def state_of(self, node: ast.AST) -> str | None:
        return self.state_named(node.id) if isinstance(node, ast.Name) else None

    def _error(self, node: ast.AST, message: str) -> ProgramError:
        return ProgramError(
            message, filename=self.program.filename, lineno=getattr(node, "lineno", None)
        )

    # -- reads and plain writes ---------------------------------------------------------

    def visit_Name(self, node: ast.Name) -> ast.AST:
        state = self.state_of(node)
        if state and isinstance(node.ctx, ast.Load):
            return ast.copy_location(_load(dict_name(state)), node)
        return node

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        state = self.state_of(node.value)
        if state is None:
            return self.generic_visit(node)
        if isinstance(self.states[state], Value):
            raise self._error(
                node, f"{state} is a state.Value: use {state}.value, not {state}[...]"
            )
        key = self.visit(node.slice)
        if isinstance(node.ctx, ast.Load):
            get = ast.Attribute(value=_load(dict_name(state)), attr="get", ctx=ast.Load())
            return ast.copy_location(_call(get, [key, _load(default_name(state))]), node)
        node.value = ast.copy_location(_load(dict_name(state)), node.value)
        node.slice = key
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        state = self.state_of(node.value)
        if state and node.attr == "value" and isinstance(self.states[state], Value):
            if isinstance(node.ctx, ast.Load):
                return ast.copy_location(self._get(state, ast.Tuple(elts=[], ctx=ast.Load())), node)
            target = ast.Subscript(
                value=_load(dict_name(state)),
                slice=ast.Tuple(elts=[], ctx=ast.Load()),
                ctx=node.ctx,
            )
            return ast.copy_location(target, node)
        if (
            isinstance(node.value, ast.Name)
            and node.value.id in self.kit_modules
            and node.attr in ("emit", "schedule")
        ):
            # rk.emit(...) -> the runtime's emit.
            runtime_attr = ast.Attribute(value=_load(RUNTIME_NAME), attr=node.attr, ctx=ast.Load())
            return ast.copy_location(runtime_attr, node)
        return self.generic_visit(node)

    def _get(self, state: str, key: ast.expr) -> ast.Call:
        get = ast.Attribute(value=_load(dict_name(state)), attr="get", ctx=ast.Load())
        return _call(get, [key, _load(default_name(state))])

    # -- merges, deletes and timed writes ----------------------------------------------

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST:
        target = node.target
        state = self.state_of(getattr(target, "value", None))
        if state is None:
            return self.generic_visit(node)
        value = self.visit(node.value)
        if isinstance(target, ast.Attribute):
            if target.attr != "value" or not isinstance(self.states[state], Value):
                return self.generic_visit(node)
            key_expr: ast.expr = ast.Tuple(elts=[], ctx=ast.Load())
            store_key: ast.expr = ast.Tuple(elts=[], ctx=ast.Load())
        else:
            if isinstance(self.states[state], Value):
                raise self._error(node, f"{state} is a state.Value: use {state}.value")
            # Evaluate the key once: the right-hand side runs first and binds the temp.
            temp = f"_rs_k{next(self.temps)}"
            key_expr = ast.NamedExpr(
                target=ast.Name(id=temp, ctx=ast.Store()), value=self.visit(target.slice)
            )
            store_key = _load(temp)
        new_value = ast.BinOp(left=self._get(state, key_expr), op=node.op, right=value)
        store = ast.Subscript(value=_load(dict_name(state)), slice=store_key, ctx=ast.Store())
        return ast.copy_location(ast.Assign(targets=[store], value=new_value), node)

    def visit_Delete(self, node: ast.Delete) -> ast.AST | list[ast.AST]:
        out: list[ast.AST] = []
        kept = []
        for target in node.targets:
            state = (
                self.state_of(getattr(target, "value", None))
                if isinstance(target, ast.Subscript)
                else None
            )
            if state is None:
                kept.append(self.visit(target))
                continue
            pop = ast.Attribute(value=_load(dict_name(state)), attr="pop", ctx=ast.Load())
            call = _call(pop, [self.visit(target.slice), ast.Constant(value=None)])
            out.append(ast.copy_location(ast.Expr(value=call), node))
        if kept:
            node.targets = kept
            out.insert(0, node)
        return out

    def visit_Call(self, node: ast.Call) -> ast.AST:
        func = node.func
        state = self.state_of(func.value) if isinstance(func, ast.Attribute) else None
        if state is None:
            self._reject_state_arguments(node)
            return self.generic_visit(node)
        decl = self.states[state]
        method = func.attr
        args = [self.visit(a) for a in node.args]
        keywords = {kw.arg: self.visit(kw.value) for kw in node.keywords}
        if isinstance(decl, Value):
            args.insert(0, ast.Tuple(elts=[], ctx=ast.Load()))
        if method == "get":
            if keywords or not 1 <= len(args) <= 2:
                raise self._error(node, f"{state}.get takes a key and an optional fallback")
            if isinstance(decl, Value) and len(args) == 1:
                return ast.copy_location(self._get(state, args[0]), node)
            get = ast.Attribute(value=_load(dict_name(state)), attr="get", ctx=ast.Load())
            return ast.copy_location(_call(get, args), node)
        if method in WRITE_OPS:
            return ast.copy_location(self._write(node, state, method, args, keywords), node)
        raise self._error(
            node,
            f"{state}.{method}(...) is not a state operation "
            "(use [k], get, set, add, merge, delete, `in`)",
        )

    def _reject_state_arguments(self, node: ast.Call) -> None:
        """A helper of the program must name state globally: engines give meaning only there."""
        if not (isinstance(node.func, ast.Name) and node.func.id in self.helpers):
            return
        for arg in [*node.args, *(kw.value for kw in node.keywords)]:
            state = self.state_of(arg)
            if state:
                raise self._error(
                    node,
                    f"state {state!r} is passed to {node.func.id}(): pass the key instead and use "
                    f"{state} by its name inside the helper",
                )

    def _write(
        self,
        node: ast.Call,
        state: str,
        method: str,
        args: list[ast.expr],
        keywords: dict[str, ast.expr],
    ) -> ast.Call:
        unknown = set(keywords) - {"at"}
        wanted = 1 if method == "delete" else 2
        if unknown or len(args) != wanted:
            shape = {
                "delete": "key",
                "set": "key, value",
                "add": "key, amount",
                "merge": "key, fn",
            }[method]
            raise self._error(node, f"{state}.{method} takes ({shape}) and an optional at=")
        arg = args[1] if method != "delete" else ast.Constant(value=None)
        at = keywords.get("at", ast.Constant(value=None))
        write = ast.Attribute(value=_load(RUNTIME_NAME), attr="write", ctx=ast.Load())
        return _call(
            write,
            [
                _load(dict_name(state)),
                _load(default_name(state)),
                ast.Constant(value=method),
                args[0],
                arg,
                at,
            ],
        )
