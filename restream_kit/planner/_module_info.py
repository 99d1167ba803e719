"""The module-level names of a program, as the handler analysis sees them.

State declarations, functions defined with ``def`` (or a lambda assigned to a name), imports
(and which local names are restream_kit's ``emit`` and ``schedule``), and every other
binding; which of them can reach declared state; and where a name used in a handler is bound
(:meth:`ModuleInfo.lookup`). Both the walk over handlers (``_analysis``) and the canonical
key expressions (``_canon``) ask it.
"""

from __future__ import annotations

import ast

from ..compiler.scopes import Scope, StateResolver
from ..model.program import Program

__all__ = ["ModuleInfo"]


class ModuleInfo:
    """Module-level names of a program: state, functions, imports and other bindings."""

    def __init__(self, program: Program):
        self.program = program
        self.filename = program.filename
        self.states = {name: decl.kind for name, decl in program.states.items()}
        self.resolver = StateResolver(self.states)
        self.defs: dict[str, ast.FunctionDef | ast.Lambda] = {}
        self.others: dict[str, ast.AST] = {}
        self.imports: dict[str, str] = {}
        self.emit_names: set[str] = set()
        self.schedule_names: set[str] = set()
        self.kit_modules: set[str] = set()
        for node in program.module_ast.body:
            self._bind(node)
        self._mentions: set[str] | None = None

    def _bind(self, node: ast.stmt) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self.defs[node.name] = node
            self.others.pop(node.name, None)
        elif isinstance(node, ast.ClassDef):
            self.others[node.name] = node
            self.defs.pop(node.name, None)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                local = alias.asname or alias.name.split(".")[0]
                self.imports[local] = alias.name if alias.asname else local
                if alias.name == "restream_kit":
                    self.kit_modules.add(local)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                local = alias.asname or alias.name
                self.imports[local] = f"{node.module}.{alias.name}"
                if node.module.split(".")[0] == "restream_kit":
                    if alias.name == "emit":
                        self.emit_names.add(local)
                    elif alias.name == "schedule":
                        self.schedule_names.add(local)
        elif (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Lambda)
        ):
            self.defs[node.targets[0].id] = node.value
        else:
            for sub in ast.walk(node):
                if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                    if sub.id not in self.states:
                        self.defs.pop(sub.id, None)
                        self.others[sub.id] = node

    def _reaching_state(self) -> set[str]:
        """Module-level names from which declared state can be reached through references."""
        refs: dict[str, set[str]] = {}
        for name, node in list(self.defs.items()) + list(self.others.items()):
            refs[name] = {
                sub.id for sub in ast.walk(node) if isinstance(sub, ast.Name) and sub.id != name
            }
        reaching = set(self.states)
        changed = True
        while changed:
            changed = False
            for name, names in refs.items():
                if name not in reaching and names & reaching:
                    reaching.add(name)
                    changed = True
        return reaching

    def mentions_state(self, name: str) -> bool:
        """Whether module-level ``name`` (a function or other binding) can reach declared state."""
        if self._mentions is None:
            self._mentions = self._reaching_state()
        return name in self._mentions

    def lookup(self, name: str, stack: list[Scope]) -> tuple[str, object]:
        """Where ``name`` is bound seen from ``stack``: ``(kind, payload)``, kind one of
        ``local`` (payload: the scope's index), ``state``, ``def``, ``module``, ``builtin``."""
        found = self.resolver.binding(name, stack)
        if found is not None:
            return found
        if name in self.states:
            return "state", name
        if name in self.defs:
            return "def", name
        if name in self.others or name in self.imports:
            return "module", name
        return "builtin", name
