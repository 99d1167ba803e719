"""The determinism lint: what a handler must not do if a replay is to mean anything.

A replay is only worth comparing with another when the same log gives the same output. The
lint reads every function a handler reaches (the handler, the helpers it calls, the lambdas
and nested functions inside them) and finds:

- randomness (``random``, ``numpy.random``, ``secrets``, ``os.urandom``);
- the clock (``time``, ``datetime.now``, ``utcnow``, ``today``);
- ``uuid``;
- files and I/O (``open``, ``input``, ``io``, ``pathlib``, ``shutil``, ``tempfile``);
- the network (``socket``, ``urllib``, ``http``, ``requests``, ``httpx``...);
- the environment (``os.environ``, ``os.getenv`` and the rest of ``os``, ``sys.argv``,
  ``subprocess``);
- ``eval``, ``exec`` and ``__import__``, which hide code from the analysis;
- assignment to module-level names (``global``);
- mutation of objects captured from outside the handler (a module-level list, dict or set, a
  mutable default argument), which carries values from one event to the next behind the back
  of declared state.

Each is an error naming the line. Two more are warnings only: ``hash()`` and ``id()`` (their
values differ between processes, so between Spark workers), and changing a state value in
place (``m[k].append(x)``), which a multi-versioned engine cannot see as a write.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from ._module_info import ModuleInfo

__all__ = ["Finding", "lint"]

_RULES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("randomness", "random numbers", ("random.", "numpy.random.", "secrets.", "os.urandom")),
    (
        "clock",
        "the clock",
        (
            "time.",
            "datetime.datetime.now",
            "datetime.datetime.utcnow",
            "datetime.datetime.today",
            "datetime.date.today",
        ),
    ),
    ("uuid", "fresh identifiers", ("uuid.",)),
    (
        "network",
        "the network",
        (
            "socket.",
            "urllib.",
            "http.",
            "requests.",
            "httpx.",
            "urllib3.",
            "aiohttp.",
            "ftplib.",
            "smtplib.",
            "ssl.",
        ),
    ),
    (
        "io",
        "files or other I/O",
        ("io.", "pathlib.", "shutil.", "tempfile.", "glob.", "builtins.open", "builtins.input"),
    ),
    (
        "environment",
        "the environment",
        (
            "os.",
            "sys.argv",
            "sys.stdin",
            "subprocess.",
            "platform.",
            "getpass.",
            "socket.gethostname",
        ),
    ),
)
_PURE_OS = {
    "os.path.join",
    "os.path.basename",
    "os.path.dirname",
    "os.path.splitext",
    "os.path.split",
    "os.path.normpath",
    "os.sep",
}
_BUILTIN_ERRORS = {
    "open": ("io", "files or other I/O"),
    "input": ("io", "files or other I/O"),
    "eval": ("dynamic-code", "code the analysis cannot see"),
    "exec": ("dynamic-code", "code the analysis cannot see"),
    "__import__": ("dynamic-code", "code the analysis cannot see"),
}
_MUTATORS = {
    "append",
    "extend",
    "insert",
    "pop",
    "popitem",
    "remove",
    "clear",
    "update",
    "add",
    "discard",
    "setdefault",
    "sort",
    "reverse",
    "appendleft",
    "extendleft",
    "popleft",
    "rotate",
    "difference_update",
    "intersection_update",
    "symmetric_difference_update",
    "__setitem__",
    "__delitem__",
}


@dataclass(frozen=True)
class Finding:
    """One lint finding. ``error`` findings reject the program unless the user opts out."""

    code: str
    message: str
    handler: str
    lineno: int
    via: str | None
    error: bool


def _matches(qualified: str, prefixes: tuple[str, ...]) -> bool:
    return any(qualified == p.rstrip(".") or qualified.startswith(p) for p in prefixes)


def _root(node: ast.AST) -> ast.Name | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node if isinstance(node, ast.Name) else None


def _is_mutable_literal(node: ast.AST | None) -> bool:
    if isinstance(node, (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)):
        return True
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id
        in ("list", "dict", "set", "bytearray", "defaultdict", "deque", "Counter", "OrderedDict")
    )


class _FunctionLint:
    """Lints one function (with everything nested in it)."""

    def __init__(self, mod: ModuleInfo, fn: ast.AST, handler: str, via: str | None):
        self.mod = mod
        self.fn = fn
        self.handler = handler
        self.via = via
        self.findings: list[Finding] = []
        self.bound: set[str] = set()
        self.local_imports: dict[str, str] = {}
        self.globals: set[str] = set()
        self.mutable_defaults: set[str] = set()
        scope = mod.resolver.scope(fn)
        self.aliases = scope.aliases
        self.from_state: set[str] = set()
        for sub in ast.walk(fn):
            if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                args = sub.args
                for a in args.posonlyargs + args.args + args.kwonlyargs:
                    self.bound.add(a.arg)
                for a in (args.vararg, args.kwarg):
                    if a is not None:
                        self.bound.add(a.arg)
                positional = args.posonlyargs + args.args
                for a, d in zip(positional[len(positional) - len(args.defaults) :], args.defaults):
                    if _is_mutable_literal(d):
                        self.mutable_defaults.add(a.arg)
                for a, d in zip(args.kwonlyargs, args.kw_defaults):
                    if _is_mutable_literal(d):
                        self.mutable_defaults.add(a.arg)
                if sub is not fn and not isinstance(sub, ast.Lambda):
                    self.bound.add(sub.name)
            elif isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                self.bound.add(sub.id)
            elif isinstance(sub, ast.Global):
                self.globals.update(sub.names)
            elif isinstance(sub, ast.Import):
                for alias in sub.names:
                    local = alias.asname or alias.name.split(".")[0]
                    self.local_imports[local] = alias.name if alias.asname else local
            elif isinstance(sub, ast.ImportFrom) and sub.module and not sub.level:
                for alias in sub.names:
                    self.local_imports[alias.asname or alias.name] = f"{sub.module}.{alias.name}"
            if (
                isinstance(sub, ast.Assign)
                and len(sub.targets) == 1
                and isinstance(sub.targets[0], ast.Name)
                and self._reads_state(sub.value)
            ):
                self.from_state.add(sub.targets[0].id)
        self.bound -= self.globals

    # names

    def _is_state(self, name: str) -> bool:
        return name in self.aliases or (name in self.mod.states and name not in self.bound)

    def _reads_state(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Subscript):
            return isinstance(node.value, ast.Name) and self._is_state(node.value.id)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            return (
                node.func.attr == "get"
                and isinstance(node.func.value, ast.Name)
                and self._is_state(node.func.value.id)
            )
        return False

    def qualified(self, node: ast.AST) -> str | None:
        """The dotted name an expression refers to when it starts at an imported module."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        name = node.id
        if name in self.local_imports:
            base = self.local_imports[name]
        elif name in self.bound:
            return None
        elif name in self.mod.imports:
            base = self.mod.imports[name]
        elif name in self.mod.defs or name in self.mod.others or name in self.mod.states:
            return None
        else:
            base = f"builtins.{name}"
        return ".".join([base, *reversed(parts)])

    def _captured(self, name: str) -> bool:
        """A module-level object that is neither state, a function nor an imported module."""
        if name in self.globals:
            return True
        return name not in self.bound and name in self.mod.others and name not in self.mod.states

    # findings

    def add(self, code: str, message: str, node: ast.AST, error: bool = True) -> None:
        self.findings.append(Finding(code, message, self.handler, node.lineno, self.via, error))

    def run(self) -> list[Finding]:
        for node in ast.walk(self.fn):
            if isinstance(node, ast.Call):
                self._call(node)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                q = self.qualified(node)
                if q and _matches(q, ("os.environ", "sys.argv", "sys.stdin")):
                    self.add("environment", f"reads the environment ({q})", node)
            elif isinstance(node, ast.Global):
                for name in node.names:
                    self.add("global", f"assigns the module-level name {name!r} (global)", node)
            elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
                targets = (
                    node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
                )
                for target in targets:
                    for sub in ast.walk(target):
                        if isinstance(sub, (ast.Attribute, ast.Subscript)):
                            self._mutation(sub, node)
        # One finding per line and code is enough.
        unique = {}
        for f in self.findings:
            unique.setdefault((f.lineno, f.code), f)
        return list(unique.values())

    def _call(self, node: ast.Call) -> None:
        func = node.func
        q = self.qualified(func)
        if q is not None:
            if q in _PURE_OS:
                return
            builtin = q.removeprefix("builtins.") if q.startswith("builtins.") else None
            if builtin in _BUILTIN_ERRORS:
                code, what = _BUILTIN_ERRORS[builtin]
                self.add(code, f"calls {builtin}(): {what} make a replay non-deterministic", node)
                return
            if builtin in ("hash", "id"):
                self.add(
                    "hash",
                    f"calls {builtin}(), whose value differs between processes (and so between "
                    "Spark workers) for strings and objects",
                    node,
                    error=False,
                )
                return
            for code, what, prefixes in _RULES:
                if _matches(q, prefixes):
                    self.add(code, f"calls {q}(): {what} make a replay non-deterministic", node)
                    return
        if isinstance(func, ast.Attribute) and func.attr in _MUTATORS:
            root = _root(func.value)
            if (
                isinstance(func.value, ast.Subscript)
                and isinstance(func.value.value, ast.Name)
                and (self._is_state(func.value.value.id))
            ):
                self.add(
                    "state-in-place",
                    f"changes a value of state {func.value.value.id!r} in place (.{func.attr}); "
                    "other versions of the state share it: build a new value and write it back",
                    node,
                    error=False,
                )
            elif isinstance(func.value, ast.Name) and func.value.id in self.from_state:
                self.add(
                    "state-in-place",
                    f"changes {func.value.id!r}, a value read from state, in place "
                    f"(.{func.attr}): build a new value and write it back",
                    node,
                    error=False,
                )
            elif root is not None:
                self._mutation_of(root, node, f".{func.attr}()")

    def _mutation(self, target: ast.AST, node: ast.AST) -> None:
        root = _root(target)
        if root is not None and not self._is_state(root.id):
            self._mutation_of(root, node, "assignment")

    def _mutation_of(self, root: ast.Name, node: ast.AST, how: str) -> None:
        if self._captured(root.id):
            self.add(
                "captured-mutation",
                f"mutates {root.id!r} ({how}), an object captured from outside the handler: "
                "keep values that change in declared state",
                node,
            )
        elif root.id in self.mutable_defaults:
            self.add(
                "captured-mutation",
                f"mutates {root.id!r} ({how}), a mutable default argument shared by every call",
                node,
            )


def lint(mod: ModuleInfo, reached: dict[str, list[ast.AST]]) -> list[Finding]:
    """Lint every module-level function each handler reaches; each is reported once.

    Nested functions and lambdas are linted as part of the function that contains them.
    """
    findings: dict[tuple[int, str], Finding] = {}
    seen: set[int] = set()
    names = {id(node): name for name, node in mod.defs.items()}
    for handler, functions in reached.items():
        queue = [fn for fn in functions if id(fn) in names]
        while queue:
            fn = queue.pop(0)
            if id(fn) in seen:
                continue
            seen.add(id(fn))
            via = names[id(fn)]
            via = None if via == handler else via
            for f in _FunctionLint(mod, fn, handler, via).run():
                findings.setdefault((f.lineno, f.code), f)
            # Helpers called but not followed (they use no state) must be deterministic too.
            for sub in ast.walk(fn):
                if isinstance(sub, ast.Name) and sub.id in mod.defs:
                    queue.append(mod.defs[sub.id])
    return sorted(findings.values(), key=lambda f: (f.lineno, f.code))
