"""A program: state declarations, handlers bound to event kinds, and outputs.

``Program.from_file`` and ``Program.from_source`` load one; loading checks what can be checked
without a log (syntax, handlers, writes to undeclared state) and names the file and line of
every problem.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import linecache
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ProgramError, user_lineno
from .handlers import HANDLER_KINDS_ATTR, emit, on, schedule
from .state import State
from .windows import Window

__all__ = ["Program", "Handler", "on", "emit", "schedule", "HANDLER_KINDS_ATTR"]

STATE_METHODS = {"get", "set", "add", "merge", "delete"}


@dataclass(frozen=True)
class Handler:
    """One handler: its name, the kinds it reacts to and where it is in the source."""

    name: str
    kinds: tuple[str, ...]
    index: int
    lineno: int
    node: ast.FunctionDef = field(repr=False, compare=False)

    @property
    def event_arg(self) -> str | None:
        args = self.node.args.args
        return args[0].arg if args else None


class Program:
    """A loaded program. Build one with :meth:`from_file` or :meth:`from_source`."""

    def __init__(
        self, source: str, filename: str, name: str, *, module_ast: ast.Module | None = None
    ):
        """``module_ast``: run this module instead of ``source``'s (a sweep's rewritten
        program, whose lines are still those of ``source``)."""
        self.source = source
        self.filename = filename
        self.name = name
        self.sha256 = hashlib.sha256(source.encode()).hexdigest()
        try:
            self.module_ast = module_ast or ast.parse(source, filename=filename)
        except SyntaxError as exc:
            raise ProgramError(
                f"syntax error: {exc.msg}", filename=filename, lineno=exc.lineno
            ) from None
        # Keep the text where tracebacks and error messages can find it, also for cells.
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        namespace = self._execute()
        #: The windows the program declares (``restream_kit.windows``), by variable: their
        #: generated states and handlers are named ``<variable>__...``.
        self.windows: dict[str, Window] = {
            var: value for var, value in namespace.items() if isinstance(value, Window)
        }
        # Window declarations (restream_kit.windows) become plain code: run the expanded module.
        from ..compiler.expand_windows import expand

        # A given module_ast is a program's module as loaded: its windows are expanded.
        expanded = None if module_ast is not None else expand(self.module_ast, namespace, filename)
        if expanded is not None:
            self.module_ast = expanded
            namespace = self._execute()
        self.states: dict[str, State] = {}
        seen: dict[int, str] = {}
        for var, value in namespace.items():
            if isinstance(value, State) and id(value) not in seen:
                seen[id(value)] = var
                value.name = var
                self.states[var] = value
        self.handlers: tuple[Handler, ...] = self._collect_handlers(namespace)
        self.namespace_names = frozenset(namespace)
        from .params import declared

        #: The parameters the program declares (``x = param("x", 2.0)``), by name.
        self.params = declared(self.module_ast, namespace, filename)
        self._check_writes(namespace)
        from ..compiler.compile import check  # the compiler imports this module

        check(self)

    # -- construction -------------------------------------------------------------------

    @classmethod
    def from_file(cls, path: str | Path) -> Program:
        """Load a program from a ``.py`` file."""
        path = Path(path)
        try:
            source = path.read_text()
        except OSError as exc:
            raise ProgramError(f"cannot read program: {exc.strerror}", filename=str(path)) from None
        return cls(source, str(path), path.stem)

    @classmethod
    def from_source(cls, source: str, name: str = "cell") -> Program:
        """Load a program from a string, such as a notebook cell."""
        return cls(source, f"<restream {name}>", name)

    @classmethod
    def load(cls, program: Program | str | Path) -> Program:
        """Accept a Program, a path to a ``.py`` file, or program source text."""
        if isinstance(program, Program):
            return program
        if isinstance(program, Path) or (
            isinstance(program, str) and program.endswith(".py") and "\n" not in program
        ):
            return cls.from_file(program)
        return cls.from_source(program)

    def __repr__(self) -> str:
        return f"Program({self.name!r}, handlers={[h.name for h in self.handlers]})"

    # -- loading --------------------------------------------------------------------------

    def _execute(self) -> dict[str, Any]:
        namespace: dict[str, Any] = {
            "__name__": f"restream_program_{self.name}",
            "__file__": self.filename,
        }
        try:
            code = compile(self.module_ast, self.filename, "exec")
            exec(code, namespace)
        except ProgramError as exc:
            raise ProgramError(
                str(exc), filename=self.filename, lineno=user_lineno(exc, self.filename)
            ) from None
        except Exception as exc:
            raise ProgramError(
                f"{type(exc).__name__} while loading: {exc}",
                filename=self.filename,
                lineno=user_lineno(exc, self.filename),
            ) from None
        return namespace

    def _collect_handlers(self, namespace: dict[str, Any]) -> tuple[Handler, ...]:
        defs = {
            node.name: node for node in self.module_ast.body if isinstance(node, ast.FunctionDef)
        }
        found = []
        for var, value in namespace.items():
            kinds = getattr(value, HANDLER_KINDS_ATTR, None)
            if kinds is None or not callable(value):
                continue
            node = defs.get(var)
            if node is None or getattr(value, "__name__", None) != var:
                raise ProgramError(
                    f"handler {var!r} must be a module-level function defined with def",
                    filename=self.filename,
                )
            if len(node.args.args) != 1:
                raise ProgramError(
                    f"handler {var!r} must take exactly one argument, the event",
                    filename=self.filename,
                    lineno=node.lineno,
                )
            found.append((node.lineno, var, kinds, node))
        found.sort(key=lambda item: item[0])
        return tuple(
            Handler(name=var, kinds=kinds, index=i, lineno=lineno, node=node)
            for i, (lineno, var, kinds, node) in enumerate(found)
        )

    def _check_writes(self, namespace: dict[str, Any]) -> None:
        """Reject writes to names that are not declared state, naming the line."""
        for node in ast.walk(self.module_ast):
            if not isinstance(node, (ast.FunctionDef, ast.Lambda)):
                continue
            local = _local_names(node) if isinstance(node, ast.FunctionDef) else set()
            for sub in ast.walk(node):
                target = _written_name(sub)
                if target is None or target in local:
                    continue
                value = namespace.get(target, getattr(builtins, target, None))
                if isinstance(value, State):
                    continue
                what = "undeclared state" if value is None else "not declared state"
                raise ProgramError(
                    f"write to {target!r}, which is {what}: declare it with "
                    f"`{target} = state.Map()` (or state.Counter() / state.Value())",
                    filename=self.filename,
                    lineno=sub.lineno,
                )


def _written_name(node: ast.AST) -> str | None:
    """The global-looking name a statement writes into with ``x[k] = v``, ``x[k] += d`` or ``del``."""
    targets: list[ast.AST] = []
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        targets = [node.target]
    elif isinstance(node, ast.Delete):
        targets = node.targets
    for target in targets:
        if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
            return target.value.id
    return None


def _local_names(fn: ast.FunctionDef) -> set[str]:
    names = {a.arg for a in fn.args.args + fn.args.kwonlyargs + fn.args.posonlyargs}
    if fn.args.vararg:
        names.add(fn.args.vararg.arg)
    if fn.args.kwarg:
        names.add(fn.args.kwarg.arg)
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names
