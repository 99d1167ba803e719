"""Read sites of one stage on another stage's state: what a run records, what a re-replay serves.

A *read site* is a read ``state[key]``, ``state.get(key, fallback)`` or ``state.value`` in a
handler's own body (or a one-``return`` helper it calls, :mod:`._read_helpers`; not in a
lambda or a comprehension) of a state that no handler
of the handler's stage writes, whose key is a function of the event alone: event fields
``e.col``, constants and module-level names. A run that keeps its history records, for every
read site, the value ``store.get(key(e), ABSENT)`` at the reading handler's place in the loop
(after the handlers declared before it ran on the event), for *every* event of the handler's
kinds, whatever the handler's control flow: a statement the generated loop runs
(``hooks=`` of ``compile_program``), a dict lookup and a list append per site and event.

What a recorded value depends on, and so what a read of a re-run program must match to take
it (its :class:`Signature`): the state, the key's text (event named ``e``), the handler's
kinds (which events, in log order) and the writers of that state that run before the handler
on those kinds. The handler's name and code do not matter: same log, same writers (reused, so
identical), same events, same writes before the read, hence the same value.
"""

from __future__ import annotations

import ast
import copy
from dataclasses import dataclass
from typing import Any

from ..compiler.compile import dict_name

__all__ = [
    "ABSENT",
    "Signature",
    "ProbeSite",
    "Uncovered",
    "ReadSites",
    "signature",
    "hook_source",
    "key_text",
    "cannot_raise",
    "counter_var",
]


class _Absent(float):
    """The value a probe records when the store has no value for the key.

    A NaN float of its own type: pyarrow turns it into a null (``from_pandas``) at C speed,
    and ``type(v) is _Absent`` tells it from any value a state can hold."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT = _Absent("nan")
#: Inside these a name may be bound by the construct itself: reads there are not sites.
_SCOPES = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


class Uncovered(Exception):
    """A re-run handler uses reused state ``state`` in a way no recorded probe answers."""

    def __init__(self, state: str, why: str):
        super().__init__(why)
        self.state = state


@dataclass(frozen=True)
class Signature:
    """What a recorded read's values depend on (see the module doc)."""

    state: str
    key: str
    kinds: tuple[str, ...]
    before: tuple[str, ...]

    def to_json(self) -> dict:
        return {
            "state": self.state,
            "key": self.key,
            "kinds": list(self.kinds),
            "before": list(self.before),
        }

    @classmethod
    def from_json(cls, d: dict) -> Signature:
        return cls(d["state"], d["key"], tuple(d["kinds"]), tuple(d["before"]))


@dataclass
class ProbeSite:
    """Where in a compiled handler a history records a read (see the module doc).

    The plan's :class:`~restream_kit.planner.ir.Access` says which state a handler reads
    under which key; a probe site is one such read located in the rewritten code, with the
    key as written there so that a hook can evaluate it and a rerun can serve it.
    """

    number: int
    handler: str
    state: str
    key: ast.expr  # the key as written (the event named ``event_arg``)
    text: str  # the key's text with the event named ``e``
    event_arg: str
    default: bool  # True: a missing key reads the state's default; else the fallback
    lineno: int

    @property
    def var(self) -> str:
        return f"_rs_pre_{self.number}"


def counter_var(handler: str) -> str:
    return f"_rs_next_{handler}"


def signature(program: Any, plan: Any, handler: str, state: str, text: str) -> Signature:
    """The signature of a read of ``state[text]`` by ``handler`` in ``program``."""
    me = next(h for h in program.handlers if h.name == handler)
    before = sorted(
        h.name
        for h in program.handlers
        if h.index < me.index
        and set(h.kinds) & set(me.kinds)
        and any(a.state == state for a in plan.handler(h.name).writes)
    )
    return Signature(state, text, tuple(sorted(me.kinds)), tuple(before))


def hook_source(
    site: ProbeSite, slot: int, columns: list[str], *, sink: str = "_rs_pv", positioned=False
) -> str:
    """The loop statement that records ``site``'s value in probe ``slot`` (by calling
    ``<sink><slot>``): the event's fields read by position, as in the inlined handlers; a key
    that raises records ABSENT (the handler's own read raises it, when it reads).
    ``positioned`` records ``(ts, lsn, value)`` instead of the value (a Spark task, whose
    events the driver puts back in log order)."""
    from ..compiler.inline import EVENT

    index = {c: i for i, c in enumerate(columns)}
    key = copy.deepcopy(site.key)

    class Fields(ast.NodeTransformer):
        def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
            if isinstance(node.value, ast.Name) and node.value.id == site.event_arg:
                item = ast.Subscript(ast.Name(EVENT, ast.Load()), ast.Constant(index[node.attr]))
                return ast.copy_location(item, node)
            return self.generic_visit(node)

    key = ast.fix_missing_locations(Fields().visit(key))
    src = ast.unparse(key)
    found = f"{dict_name(site.state)}.get({src}, _rs_ABSENT)"
    absent = "_rs_ABSENT"
    if positioned:
        found = f"({EVENT}[1], {EVENT}[0], {found})"
        absent = f"({EVENT}[1], {EVENT}[0], _rs_ABSENT)"
    return f"try:\n    {sink}{slot}({found})\nexcept Exception:\n    {sink}{slot}({absent})\n"


class ReadSites:
    """Find the read sites of ``handlers`` (name -> the states whose reads are sites there) in
    a compiled program's tree (state accesses already rewritten into dict operations).

    ``serve=False`` only collects them (a use that is not a site is skipped). ``serve=True``
    also rewrites each site to take ``_rs_pre_<n>[_rs_i]`` (``_rs_i`` the handler's run
    number, counted at the top of its body) and raises :class:`Uncovered` for any other use of
    those states, in a handler or a module-level helper.
    """

    def __init__(
        self,
        program: Any,
        handlers: dict[str, set[str]],
        columns: list[str],
        *,
        serve: bool = False,
    ):
        self.program = program
        self.handlers = handlers
        self.columns = set(columns)
        self.serve = serve
        self.all_handlers = {h.name for h in program.handlers}
        self.banned = _names_not_keys(program)
        self.sites: list[ProbeSite] = []

    def __call__(self, tree: ast.Module) -> ast.Module:
        from ._read_helpers import unreached_helpers

        served = {dict_name(s): s for states in self.handlers.values() for s in states}
        self.tree = tree
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name in self.handlers:
                self._handler(node)
        # Helpers only handlers that do not re-run call may use reused state.
        unreached = unreached_helpers(
            tree, self.all_handlers - set(self.handlers), self.all_handlers
        )
        for node in tree.body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if (
                self.serve
                and node.name not in self.all_handlers
                and node.name not in unreached
                and not node.name.startswith("_rs_")
            ):
                for sub in ast.walk(node):
                    if isinstance(sub, ast.Name) and sub.id in served:
                        raise Uncovered(
                            served[sub.id],
                            f"helper {node.name}() (line {sub.lineno}) uses state "
                            f"{served[sub.id]!r}",
                        )
        return ast.fix_missing_locations(tree)

    def _handler(self, fn: ast.FunctionDef) -> None:
        from ..compiler.inline import _function_locals
        from ._read_helpers import inline_read_helpers

        self.fn = fn
        self.dicts = {dict_name(s): s for s in self.handlers[fn.name]}
        self.event_arg = fn.args.args[0].arg
        self.local = _function_locals(fn.body) - {self.event_arg}
        inline_read_helpers(self.tree, fn, self.local, self.columns)
        before = len(self.sites)
        fn.body = [self._visit(stmt, []) for stmt in fn.body]
        if self.serve and len(self.sites) > before:
            counter = ast.parse(f"_rs_i = {counter_var(fn.name)}()").body[0]
            for n in ast.walk(counter):
                ast.copy_location(n, fn.body[0])
            fn.body.insert(0, counter)

    def _visit(self, node: ast.AST, enclosing: list) -> ast.AST:
        site = self._site(node, enclosing)
        if site is not None:
            return site
        if self.serve and isinstance(node, ast.Name) and node.id in self.dicts:
            raise Uncovered(
                self.dicts[node.id],
                f"handler {self.fn.name} (line {node.lineno}) uses state "
                f"{self.dicts[node.id]!r} other than by reading one key",
            )
        inner = [*enclosing, node]
        for name, value in ast.iter_fields(node):
            if isinstance(value, list):
                setattr(
                    node,
                    name,
                    [self._visit(v, inner) if isinstance(v, ast.AST) else v for v in value],
                )
            elif isinstance(value, ast.AST):
                setattr(node, name, self._visit(value, inner))
        return node

    def _key_text(self, key: ast.expr) -> str | None:
        return _text(key, self.event_arg, self.columns, self.local | self.banned)

    def _site(self, node: ast.AST, enclosing: list) -> ast.AST | None:
        """The replacement of a site (``node`` itself when only collecting), or None."""
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in self.dicts
            and 1 <= len(node.args) <= 2
            and not node.keywords
        ):
            return None
        state = self.dicts[node.func.value.id]
        key = node.args[0]
        where = f"handler {self.fn.name} (line {node.lineno}) reads {state!r}"
        text = self._key_text(key)
        if text is None or any(isinstance(n, _SCOPES) for n in enclosing):
            if self.serve:
                why = "with a key that is not a function of the event" if text is None else ""
                raise Uncovered(state, f"{where} {why or 'inside a lambda or comprehension'}")
            return None
        fallback = node.args[1] if len(node.args) == 2 else ast.Constant(None)
        fallback = self._visit(fallback, [*enclosing, node])
        if len(node.args) == 2:
            node.args[1] = fallback
        uses_default = isinstance(fallback, ast.Name) and fallback.id == f"_rs_dflt_{state}"
        site = ProbeSite(
            len(self.sites),
            self.fn.name,
            state,
            copy.deepcopy(key),
            text,
            self.event_arg,
            uses_default,
            node.lineno,
        )
        self.sites.append(site)
        if not self.serve:
            return node
        served: ast.expr = ast.Subscript(
            value=ast.Name(site.var, ast.Load()),
            slice=ast.Name("_rs_i", ast.Load()),
            ctx=ast.Load(),
        )
        if not cannot_raise(key, self.event_arg):
            # Evaluate the key all the same: a key that raises still raises, as it would.
            served = ast.Subscript(
                value=ast.Tuple([key, served], ast.Load()), slice=ast.Constant(1), ctx=ast.Load()
            )
        if not uses_default:
            served = ast.Call(ast.Name("_rs_pick", ast.Load()), [served, fallback], [])
        return ast.copy_location(served, node)


def cannot_raise(key: ast.expr, event_arg: str) -> bool:
    """``e.col``, constants and tuples of them (fields are checked against the log first)."""
    if isinstance(key, ast.Constant):
        return True
    if isinstance(key, ast.Tuple):
        return all(cannot_raise(k, event_arg) for k in key.elts)
    return (
        isinstance(key, ast.Attribute)
        and isinstance(key.value, ast.Name)
        and key.value.id == event_arg
    )


def _names_not_keys(program: Any) -> set[str]:
    """Module-level names a key may not use: helpers, classes, names declared ``global``."""
    out = {
        n.name
        for n in program.module_ast.body
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    }
    for n in ast.walk(program.module_ast):
        if isinstance(n, ast.Global):
            out.update(n.names)
    return out


def key_text(program: Any, key: ast.expr, event_arg: str, local: set, columns: list) -> str | None:
    """The key's text with the event named ``e``, or None when it is not a function of the
    event's fields, constants and module-level names (see :class:`ReadSites`)."""
    return _text(key, event_arg, set(columns), set(local) | _names_not_keys(program))


def _text(key: ast.expr, event_arg: str, columns: set, banned: set) -> str | None:
    renamed = copy.deepcopy(key)
    for sub in ast.walk(renamed):
        if isinstance(sub, (ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom, *_SCOPES)):
            return None
        if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name):
            if sub.value.id == event_arg:
                if sub.attr not in columns:
                    return None
                sub.value.id = "\0e"
    for sub in ast.walk(renamed):
        if isinstance(sub, ast.Name):
            name = sub.id
            if name == "\0e":
                sub.id = "e"
                continue
            if name in (event_arg, "e") or name in banned or name.startswith("_rs_"):
                return None
    return ast.unparse(renamed)
