"""Checks of a program against its log, before any event is replayed.

A misspelt field (``e.sendr``) or a read of a name that was never declared (``sent[e.src]``)
would otherwise surface only when the replay reaches the first event that runs that line,
after the log is loaded and perhaps after Spark has started. The log's columns are known
before that, so :func:`check_against_log` finds these mistakes up front:

- every ``e.field`` a handler (or a helper it passes the event to) reads must be a field of
  one of the kinds the handler receives: a column of the log with a value in at least one row
  of that kind, or a keyword of a ``schedule(kind, ...)`` call for scheduled kinds. A field
  that is a column of the log but null in every row of those kinds is a warning (the handler
  reads None), one that is not a column at all is an error naming the closest field;
- a handler bound to a kind that neither the log nor any ``schedule`` call provides is one
  warning at the handler's line, listing the kinds the log has; with ``require_kinds`` (the
  command line and the notebook ask for it) a handler none of whose kinds is provided, which
  would never run, is an error instead (else the replay ends green with no tables);
- a name read like state (``x[k]``, ``x.get(k)``, ``k in x``) that is neither declared
  state nor any other module-level or built-in name is an error, as a write to one already is
  when the program loads; so is any other name a function uses that nothing defines (both
  need no log: :func:`check_program`).

Errors raise :class:`~restream_kit.model.errors.CheckError` (a ``ProgramError``) for the first one,
with every error finding attached; warnings come back as :class:`Finding` objects. Line
numbers are those of the program text (a notebook adds its cell's offset).
"""

from __future__ import annotations

import ast
import builtins
import difflib
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from ..compiler.scopes import bound_by
from ..io.log import DEFAULT_KIND
from ..model.errors import CheckError
from ..model.program import Program

__all__ = [
    "Finding",
    "check_program",
    "check_against_log",
    "kind_fields",
    "scheduled_fields",
    "EVENT_ATTRIBUTES",
]

#: Attributes every event has, whatever its kind.
EVENT_ATTRIBUTES = frozenset({"ts", "lsn", "kind"})
#: State operations called as methods (``m.get(k)``, ``m.add(k, 1)``...).
_STATE_METHODS = frozenset({"get", "set", "add", "merge", "delete"})


@dataclass(frozen=True)
class Finding:
    """One problem found before the replay. ``level`` is "error" or "warning"."""

    level: str
    code: str
    message: str
    handler: str | None
    lineno: int | None
    filename: str

    @property
    def error(self) -> bool:
        return self.level == "error"

    def __str__(self) -> str:
        where = f"{self.filename}:{self.lineno}: " if self.lineno else f"{self.filename}: "
        return where + self.message

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_program(program: Program) -> list[Finding]:
    """Checks that need no log: reads of undeclared state and of names nothing defines.
    Raises :class:`CheckError`."""
    findings = list(_undeclared_reads(program))
    _raise_errors(findings)
    return findings


def check_against_log(program: Program, log: Any, *, require_kinds: bool = False) -> list[Finding]:
    """Check ``program`` against ``log``'s kinds and fields; return the warnings.

    Raises :class:`~restream_kit.model.errors.CheckError` (a ``ProgramError`` with ``lineno``,
    ``handler`` and ``findings``) for the first error: a field no event of the handler's kinds
    has, or a read of undeclared state; with ``require_kinds``, also a handler that would
    never run (none of its kinds in the log or scheduled). Costs one pass over the log's
    columns (no replay).
    """
    from ..io.log import Log

    log = log if isinstance(log, Log) else Log(log)
    findings = list(_undeclared_reads(program))
    present = kind_fields(log)
    columns = [c for c in log.columns if c not in EVENT_ATTRIBUTES]
    scheduled = scheduled_fields(program)
    findings.extend(_missing_kinds(program, present, scheduled, require_kinds))
    findings.extend(_field_findings(program, present, columns, scheduled))
    _raise_errors(findings)
    return findings


def _raise_errors(findings: list[Finding]) -> None:
    errors = [f for f in findings if f.error]
    if not errors:
        return
    first = errors[0]
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    raise CheckError(
        first.message + more,
        filename=first.filename,
        lineno=first.lineno,
        handler=first.handler,
        findings=errors,
    )


# -- what the log and the schedule calls provide -------------------------------------------


def kind_fields(log: Any) -> dict[str, set[str]]:
    """Per kind of ``log``, the columns with a value in at least one row of that kind."""
    # The log's summary (its manifest, or what Spark counted for a URI log): no rows read.
    return {k: set(v) for k, v in log.describe().kind_fields.items()}


def scheduled_fields(program: Program) -> dict[str, set[str] | None]:
    """Per kind named by a literal in a ``schedule(...)`` call, its field names.

    None for a kind whose fields cannot be read from the call (``**fields``).
    """
    names = {"schedule"}
    modules = set()
    for node in program.module_ast.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("restream_kit"):
            names.update(a.asname or a.name for a in node.names if a.name == "schedule")
        elif isinstance(node, ast.Import):
            modules.update(a.asname or a.name for a in node.names if a.name == "restream_kit")
    out: dict[str, set[str] | None] = {}
    for node in ast.walk(program.module_ast):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name):
            is_schedule = func.id in names
        elif isinstance(func, ast.Attribute):
            is_schedule = func.attr == "schedule" and (
                not isinstance(func.value, ast.Name) or func.value.id in modules
            )
        else:
            is_schedule = False
        if not (is_schedule and node.args and isinstance(node.args[0], ast.Constant)):
            continue
        kind = node.args[0].value
        if not isinstance(kind, str):
            continue
        if any(kw.arg is None for kw in node.keywords):
            out[kind] = None
        elif kind not in out or out[kind] is not None:
            fields = {kw.arg for kw in node.keywords if kw.arg != "at"}
            out[kind] = (out.get(kind) or set()) | fields
    return out


# -- kinds ----------------------------------------------------------------------------------


def _missing_kinds(
    program: Program,
    present: dict[str, set[str]],
    scheduled: dict[str, set[str] | None],
    require_kinds: bool,
) -> Iterator[Finding]:
    kinds_present = list(present)
    listed = ", ".join(repr(k) for k in kinds_present) or "none"

    def provided(kind: str) -> bool:
        return kind in present or kind in scheduled

    missing = dict.fromkeys(k for h in program.handlers for k in h.kinds if not provided(k))
    for kind in missing:
        handlers = [x for x in program.handlers if kind in x.kinds]
        # A handler with none of its kinds never runs: when kinds are required, an error rather
        # than a green replay without rows.
        idle = [x for x in handlers if not any(provided(k) for k in x.kinds)]
        names = ", ".join(x.name for x in (idle or handlers))
        close = difflib.get_close_matches(kind, kinds_present, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        if not close and kinds_present == [DEFAULT_KIND]:
            hint = (
                f"; a log without a 'kind' column is all {DEFAULT_KIND!r} events: give it its "
                f'kind with --kind {kind} (kind="{kind}" in Python)'
            )
        what = "will never run" if idle else "run on their other kinds only"
        yield Finding(
            "error" if idle and require_kinds else "warning",
            "missing-kind",
            f"no {kind!r} events in the log: handler(s) {names} {what} (the log's kinds: "
            f"{listed}){hint}",
            (idle or handlers)[0].name,
            _decorator_line((idle or handlers)[0]),
            program.filename,
        )


def _decorator_line(handler: Any) -> int:
    """The line of the ``@on(...)`` that names the kinds (the def's line without one)."""
    for dec in handler.node.decorator_list:
        if isinstance(dec, ast.Call):
            return dec.lineno
    return handler.lineno


# -- fields ---------------------------------------------------------------------------------


def _field_findings(
    program: Program,
    present: dict[str, set[str]],
    columns: list[str],
    scheduled: dict[str, set[str] | None],
) -> Iterator[Finding]:
    defs = {n.name: n for n in program.module_ast.body if isinstance(n, ast.FunctionDef)}
    for h in program.handlers:
        available: set[str] = set(EVENT_ATTRIBUTES)
        known = False  # whether any kind the handler receives exists, so fields can be checked
        unknown_fields = False
        for kind in h.kinds:
            if kind in present:
                available |= present[kind]
                known = True
            if kind in scheduled:
                known = True
                if scheduled[kind] is None:
                    unknown_fields = True
                else:
                    available |= scheduled[kind] | {"seq"}
        if not known or unknown_fields or h.event_arg is None:
            continue
        reported: set[str] = set()
        for attr, node, via in _event_reads(h.node, h.event_arg, defs):
            var = node.value.id  # the handler's ``e``, or the helper's name for the event
            if attr in available or attr.startswith("_") or attr in reported:
                continue
            reported.add(attr)
            kinds = ", ".join(repr(k) for k in h.kinds)
            where = f" (in helper {via!r})" if via else ""
            if attr in columns:
                yield Finding(
                    "warning",
                    "null-field",
                    f"handler {h.name!r}{where} reads {var}.{attr}, which is null in every "
                    f"{kinds} event of the log",
                    h.name,
                    node.lineno,
                    program.filename,
                )
                continue
            fields = sorted(available - EVENT_ATTRIBUTES)
            close = _closest(attr, fields or columns)
            hint = f"; did you mean {var}.{close}?" if close else ""
            yield Finding(
                "error",
                "unknown-field",
                f"handler {h.name!r}{where} reads {var}.{attr}, but no {kinds} event has a field "
                f"{attr!r} (fields: {', '.join(fields) or 'none besides ts, lsn, kind'}){hint}",
                h.name,
                node.lineno,
                program.filename,
            )


def _closest(name: str, candidates: list[str]) -> str | None:
    """The candidate most like ``name`` (a loose cutoff: ``sendr`` should find ``src``)."""
    best = difflib.get_close_matches(name, candidates, n=1, cutoff=0.5)
    if best:
        return best[0]
    lowered = {c.lower(): c for c in candidates}
    best = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.4)
    return lowered[best[0]] if best else None


def _event_reads(
    fn: ast.FunctionDef, event: str, defs: dict[str, ast.FunctionDef], via: str | None = None
) -> Iterator[tuple[str, ast.Attribute, str | None]]:
    """``(attribute, node, helper)`` for every ``event.attribute`` read in ``fn``, following
    module-level helpers the event is passed to (once each)."""
    seen: set[tuple[str, str]] = set()
    stack = [(fn, event, via)]
    while stack:
        fn, event, via = stack.pop()
        for node in _walk_unshadowed(fn, event):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == event
                and isinstance(node.ctx, ast.Load)
            ):
                yield node.attr, node, via
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                helper = defs.get(node.func.id)
                if helper is None:
                    continue
                for param in _params_given(helper, node, event):
                    if (helper.name, param) not in seen:
                        seen.add((helper.name, param))
                        stack.append((helper, param, helper.name))


def _walk_unshadowed(fn: ast.AST, name: str) -> Iterator[ast.AST]:
    """Walk ``fn``'s body, skipping nested functions and lambdas that rebind ``name``."""
    body = fn.body if isinstance(fn.body, list) else [fn.body]
    todo: list[ast.AST] = list(body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = node.args
            params = {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}
            params |= {x.arg for x in (a.vararg, a.kwarg) if x is not None}
            if name in params:
                continue
        yield node
        todo.extend(ast.iter_child_nodes(node))


def _params_given(helper: ast.FunctionDef, call: ast.Call, event: str) -> list[str]:
    """Parameters of ``helper`` that ``call`` binds to the bare name ``event``."""
    positional = [a.arg for a in helper.args.posonlyargs + helper.args.args]
    out = []
    for i, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred):
            break
        if isinstance(arg, ast.Name) and arg.id == event and i < len(positional):
            out.append(positional[i])
    for kw in call.keywords:
        if kw.arg and isinstance(kw.value, ast.Name) and kw.value.id == event:
            out.append(kw.arg)
    return out


# -- undeclared state -----------------------------------------------------------------------


def _undeclared_reads(program: Program) -> Iterator[Finding]:
    known = set(program.namespace_names) | set(dir(builtins))
    handlers = {h.name for h in program.handlers}
    states = sorted(program.states)
    reported: set[tuple[int, str]] = set()
    for top in program.module_ast.body:
        # A module-level function with everything nested in it (closures see its locals);
        # lambdas elsewhere at module level (state defaults, merge functions) on their own.
        if isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions = [top]
        else:
            functions = [n for n in ast.walk(top) if isinstance(n, ast.Lambda)]
        for fn in functions:
            bound = _bound_names(fn)
            owner = top.name if isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef)) else None
            who = (
                f"handler {owner!r}"
                if owner in handlers
                else f"function {owner!r}"
                if owner
                else "a lambda"
            )
            state_like = {id(node) for node in _state_like_uses(fn)}
            skipped = _annotation_names(fn)
            for node in ast.walk(fn):
                if not (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)):
                    continue
                if id(node) in skipped:
                    continue
                name = node.id
                if name in bound or name in known or (node.lineno, name) in reported:
                    continue
                reported.add((node.lineno, name))
                if id(node) in state_like:
                    close = difflib.get_close_matches(name, states, n=1, cutoff=0.6)
                    hint = f"; did you mean {close[0]!r}?" if close else ""
                    code = "undeclared-state"
                    message = (
                        f"{who} reads {name!r}, which is undeclared state: declare it with "
                        f"`{name} = state.Map()` (or state.Counter() / state.Value()){hint}"
                    )
                else:
                    names = sorted(set(program.namespace_names) | bound)
                    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
                    hint = f"; did you mean {close[0]!r}?" if close else ""
                    code = "undefined-name"
                    message = f"{who} uses {name!r}, which is not defined{hint}"
                yield Finding(
                    "error",
                    code,
                    message,
                    owner if owner in handlers else None,
                    node.lineno,
                    program.filename,
                )


def _annotation_names(fn: ast.AST) -> set[int]:
    """Names inside annotations, which a replay never evaluates (postponed annotations)."""
    out: set[int] = set()
    for node in ast.walk(fn):
        annotations: list[ast.AST | None] = []
        if isinstance(node, ast.arg):
            annotations.append(node.annotation)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            annotations.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            annotations.append(node.annotation)
        for annotation in annotations:
            if annotation is not None:
                out.update(id(n) for n in ast.walk(annotation) if isinstance(n, ast.Name))
    return out


def _state_like_uses(fn: ast.AST) -> Iterator[ast.Name]:
    """Names used as state is: ``x[k]``, ``x.get(k)`` (and the other state methods), ``k in x``."""
    for node in ast.walk(fn):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            yield node.value
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _STATE_METHODS
            and isinstance(node.func.value, ast.Name)
        ):
            yield node.func.value
        elif isinstance(node, ast.Compare):
            for op, right in zip(node.ops, node.comparators):
                if isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, ast.Name):
                    yield right


def _bound_names(fn: ast.AST) -> set[str]:
    """Every name bound anywhere inside ``fn`` (arguments, assignments, imports, defs...)."""
    names: set[str] = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node is not fn:
                names.add(node.name)
        else:
            names.update(bound_by(node))
    return names
