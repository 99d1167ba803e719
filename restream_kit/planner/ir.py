"""The plan: an immutable description of how a program can run in parallel.

Every engine and view reads the same :class:`Plan`. It is built from the program text alone
(``_build.build_plan``); given a log, ``critical_path.data_path`` adds the data critical path.

How it is built:

- An edge ``A -> B`` labelled ``s`` when handler B reads state ``s`` that handler A writes
  (overwrite, merge, future write or delete) and A is not B. A handler that only merges into a
  state (``+=``, ``add``) without reading it depends on nobody through it, so blind merges
  never close a cycle. A handler that schedules events of a kind that B handles gives an edge
  labelled ``schedule:<kind>`` (``schedule:?`` when the kind is not a literal, to every
  handler): B's events come from A.
- The strongly connected components of that graph are the stages, listed in topological order
  (ties broken by declaration order). A stage is named by its handlers joined with ``+``.
- A stage's own state is the state it both reads and writes. Its mode:

  * ``stateless``: no own state, and every read of upstream state uses a key that is a pure
    function of the event (an as-of lookup resolves it). Blind writes and merges are fine.
  * ``partitioned``: every access to own state, in every handler of the stage, uses one and
    the same canonical key expression of the event (``partition_key``, with the event named
    ``e``). Events with different keys never see each other's writes, so partitions run apart.
    When the keys differ but every key of each own state is a tuple with one element in
    common (``(e.symbol, e.end)`` and ``(e.symbol, window(e.ts))``), the stage is partitioned
    by that element: equal keys have equal elements, so they meet in one partition. ``reason``
    then says so. Events the stage schedules for itself must carry what keeps the key the
    same (``schedule("check", at=..., user=e.user)`` for ``e.user``), checked by rewriting
    the key in the scheduled event's fields.
  * ``sequential``: own state is accessed by different keys, by a key that is not a function
    of the event (computed from another read), by a constant key (one partition anyway), as a
    ``state.Value``, or whole (``len(m)``, ``for k in m``); or the stage schedules events for
    itself that may change partition, or schedules events for itself at all when it has no
    own state (each scheduled run waits for the run that scheduled it, a chain no key
    splits). ``reason`` names each access or schedule that forces it, with handler and line.
  * ``broadcast-read``: a stage that is not sequential but reads upstream state by a key that
    is not a function of the event, or whole: the upstream state must be available to every
    partition. Its ``partition_key`` is kept when its own state is partitioned (None when it
    has none), and ``reason`` names the reads. A blind write or merge by such a key (say
    ``team_msgs[team_of[e.src]] += 1``) needs no broadcast: only reads do.
  * A ``state.Value`` read by a stage that does not write it counts as read by an event key
    (there is one value, so an as-of lookup finds it).

- ``reads_upstream`` lists the reads of state that handlers outside the stage write (also of
  own state that an upstream stage merges into): the reads the engine resolves against
  upstream versions.
- The static critical path is the heaviest chain of stages: each stage weighs its number of
  handlers, or, when a log is given, the estimated time of its handlers over the log. Ties
  go to the stage that comes first.
- Only literal table names and kinds are listed in ``emits`` and ``schedules`` (``?`` for a
  scheduled kind that is not a literal).
- Warnings: lint findings that are not errors (or all of them when non-determinism is
  allowed), keys that are not a function of the event, state read but never written, state
  keyed by ``e.ts`` or ``e.lsn`` that is never deleted (it grows with the log), state passed
  to helpers as an argument, schedules whose kind is not a literal.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Literal

from ..model.program import Program

if TYPE_CHECKING:
    pass

__all__ = [
    "Access",
    "HandlerInfo",
    "StateInfo",
    "Edge",
    "Stage",
    "PlanWarning",
    "StageLoad",
    "DataPath",
    "Plan",
    "compile_key",
    "key_columns",
    "MODES",
    "WRITE_OPS",
    "EVENT",
]

#: The canonical name of the event in key expressions.
EVENT = "e"

Op = Literal["read", "overwrite", "merge", "future", "delete"]
Mode = Literal["stateless", "partitioned", "broadcast-read", "sequential"]
MODES = ("stateless", "partitioned", "broadcast-read", "sequential")
WRITE_OPS = ("overwrite", "merge", "future", "delete")
_VERB = {
    "read": "read",
    "overwrite": "written",
    "merge": "merged",
    "future": "written ahead",
    "delete": "deleted",
}


@dataclass(frozen=True)
class Access:
    """One read or write of state by a handler: the one record of "handler H reads (or
    writes) state S under key K", from the analysis of the source to the plan's stages.

    ``key`` is canonical source (event named ``e``); None for a ``state.Value`` or a use of
    the whole state (``whole`` then tells the two apart). ``event_key`` is True when the key
    is a pure function of the event and module constants. ``via`` names the helper function
    the access was found in, when it is not the handler itself. ``parts`` holds a tuple key's
    elements as (text, pure), from which a stage finds a partition key common to all its keys.

    The plan's JSON shows an access in a handler without ``handler``, ``whole`` and ``parts``
    (:meth:`to_dict`), and a stage's upstream read as state, key, handler and line
    (:meth:`upstream_dict`).
    """

    state: str
    op: Op
    key: str | None
    event_key: bool
    lineno: int
    via: str | None = None
    handler: str | None = None
    whole: bool = False
    parts: tuple[tuple[str, bool], ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _ACCESS_JSON}

    def upstream_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _UPSTREAM_READ_JSON}


def fields_json(record: Any, **given: Any) -> dict[str, Any]:
    """A plan record in the plan's JSON: its fields in their order, each as :func:`_as_json`
    makes it, but those ``given``."""
    return {
        f.name: given[f.name] if f.name in given else _as_json(getattr(record, f.name))
        for f in fields(record)
    }


def _as_json(value: Any) -> Any:
    """Tuples as lists (nested ones too), records by their own ``to_dict``."""
    if isinstance(value, tuple):
        return [_as_json(v) for v in value]
    return value.to_dict() if hasattr(value, "to_dict") else value


#: The fields of an access in a handler, and of a stage's upstream read, in the plan's JSON.
_ACCESS_JSON = ("state", "op", "key", "event_key", "lineno", "via")
_UPSTREAM_READ_JSON = ("state", "key", "event_key", "handler", "lineno")


@dataclass(frozen=True)
class HandlerFacts:
    """What reading a handler's source tells: where it is, the kinds it handles, the state it
    reads and writes (in it or in helpers it calls) and the tables it emits to. The analysis'
    record (``_analysis.HandlerAccess``) and the plan's (:class:`HandlerInfo`) both hold it."""

    name: str
    kinds: tuple[str, ...]
    lineno: int
    event_arg: str
    accesses: tuple[Access, ...]
    emits: tuple[str, ...]


@dataclass(frozen=True)
class HandlerInfo(HandlerFacts):
    """A handler as the planner sees it: kinds, accesses, emitted tables, scheduled kinds."""

    schedules: tuple[str, ...]

    @classmethod
    def of(cls, facts: HandlerFacts, schedules: tuple[str, ...]) -> HandlerInfo:
        """The plan's record of an analysed handler: its facts, and the kinds it schedules."""
        known = {f.name: getattr(facts, f.name) for f in fields(HandlerFacts)}
        return cls(**known, schedules=schedules)

    @property
    def reads(self) -> tuple[Access, ...]:
        return tuple(a for a in self.accesses if a.op == "read")

    @property
    def writes(self) -> tuple[Access, ...]:
        return tuple(a for a in self.accesses if a.op != "read")

    def to_dict(self) -> dict[str, Any]:
        return fields_json(self)


@dataclass(frozen=True)
class StateInfo:
    """A state declaration: name, kind (map, counter or value) and its default's repr."""

    name: str
    kind: str
    default_repr: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "default": self.default_repr}


@dataclass(frozen=True)
class Edge:
    """``src -> dst``: dst reads the state that src writes (or handles events src schedules)."""

    src: str
    dst: str
    state: str

    def to_list(self) -> list[str]:
        return [self.src, self.dst, self.state]


@dataclass(frozen=True)
class Stage:
    """Handlers that run together (a strongly connected component), and how they can run."""

    name: str
    handlers: tuple[str, ...]
    mode: Mode
    partition_key: str | None
    reason: str | None
    owns: tuple[str, ...]
    reads_upstream: tuple[Access, ...]  # reads resolved against upstream versions
    kinds: tuple[str, ...] = ()
    upstream: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """The mode as people read it: a "stateless" stage that writes state runs its events
        in any split (it reads only what earlier stages wrote), so it is called "per event";
        "stateless" is kept for stages that write no state."""
        if self.mode == "stateless" and self.owns:
            return "per event"
        return self.mode

    def to_dict(self) -> dict[str, Any]:
        return fields_json(self, reads_upstream=[r.upstream_dict() for r in self.reads_upstream])


@dataclass(frozen=True)
class PlanWarning:
    """Something the user should know about the program; ``handler`` and ``lineno`` say where."""

    code: str
    message: str
    handler: str | None
    lineno: int | None

    def to_dict(self) -> dict[str, Any]:
        return fields_json(self)


@dataclass(frozen=True)
class StageLoad:
    """One stage's work on a log, in handler runs and in cost.

    ``heaviest_work`` is the longest chain of runs that must happen one after the other: the
    heaviest partition of a partitioned stage, everything in a sequential one, one run in a
    stateless one. ``hot_keys`` are the ten heaviest partition keys with their events.
    ``cost`` and ``heaviest_cost`` weigh the runs by handler cost: estimated seconds when the
    data path's weighting is "measured", handler runs when it is "unit". ``keys`` counts the
    partitions (the runs of a stateless stage).
    """

    stage: str
    mode: str
    work: int
    heaviest_key: str | None
    heaviest_work: int
    heaviest_share: float
    hot_keys: tuple[tuple[str, int], ...]
    cost: float
    heaviest_cost: float
    keys: int = 0

    def to_dict(self) -> dict[str, Any]:
        return fields_json(self)


@dataclass(frozen=True)
class DataPath:
    """The data critical path of a plan on one log.

    ``predicted_speedup`` holds (P, W / sum over stages of max(work / P, heaviest chain)) for
    P = 1, 2, 4, ..., 64, with work weighted by the handler costs measured on a sample of the
    log (``weighting == "measured"``) or one unit per handler run (``"unit"``).
    ``chain_bound`` is the longest chain of handler runs the plan allows: over every path of
    stages, the sum of their heaviest chains. No serial replay can have a longer
    read-after-write chain.
    """

    events: int
    sample_events: int
    weighting: str
    handler_cost_us: tuple[tuple[str, float], ...]
    per_stage: tuple[StageLoad, ...]
    predicted_speedup: tuple[tuple[int, float], ...]
    chain_bound: int
    scheduled_runs: int = 0
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return fields_json(self)

    def speedup(self, workers: int) -> float:
        """The predicted speedup on ``workers`` workers (any count, not only powers of two)."""
        return predicted_speedup(self.per_stage, workers)


def predicted_speedup(loads: Iterable[StageLoad], workers: int) -> float:
    """W / sum over stages of max(cost / P, heaviest chain cost)."""
    loads = list(loads)
    total = sum(s.cost for s in loads)
    time = sum(max(s.cost / workers, s.heaviest_cost) for s in loads)
    return total / time if time > 0 else 1.0


@dataclass(frozen=True)
class Plan:
    """The plan of a program: handlers, state, edges, stages in order, critical path."""

    program: str
    handlers: tuple[HandlerInfo, ...]
    states: tuple[StateInfo, ...]
    edges: tuple[Edge, ...]
    stages: tuple[Stage, ...]
    critical_path: tuple[str, ...]
    warnings: tuple[PlanWarning, ...]
    data: DataPath | None = field(default=None, compare=False)
    #: Per parameter (``x = param("x", 2.0)``), the handlers that name it, directly or
    #: through helpers; handlers downstream of those depend on it through state.
    params: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: Per window, how the serial engine runs it: natively (fused: its aggregates held in
    #: place, its closes computed as time passes) or as its expansion, and why
    #: (``runtime._native_plan``); the Spark engine runs every window as its expansion.
    windows: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    def handler(self, name: str) -> HandlerInfo:
        for h in self.handlers:
            if h.name == name:
                return h
        raise KeyError(name)

    def stage(self, name: str) -> Stage:
        for s in self.stages:
            if s.name == name:
                return s
        raise KeyError(name)

    def stage_of(self, handler: str) -> Stage:
        for s in self.stages:
            if handler in s.handlers:
                return s
        raise KeyError(handler)

    @property
    def critical_stages(self) -> tuple[str, ...]:
        """The stages on the critical path, in order."""
        out: list[str] = []
        for h in self.critical_path:
            name = self.stage_of(h).name
            if name not in out:
                out.append(name)
        return tuple(out)

    def key_function(self, stage: str, program: Program) -> Callable[[Any], Any] | None:
        """The partition key of ``stage`` as a function of the event (None if it has none)."""
        key = self.stage(stage).partition_key
        return compile_key(key, program) if key is not None else None

    def with_data(self, data: DataPath, critical_path: tuple[str, ...] | None = None) -> Plan:
        return replace(self, data=data, critical_path=critical_path or self.critical_path)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able form. With data: also ``hot_keys`` per stage and ``predicted_speedup``."""
        out: dict[str, Any] = {
            "program": self.program,
            "handlers": [h.to_dict() for h in self.handlers],
            "states": [s.to_dict() for s in self.states],
            "edges": [e.to_list() for e in self.edges],
            "stages": [s.to_dict() for s in self.stages],
            "critical_path": list(self.critical_path),
            "warnings": [w.to_dict() for w in self.warnings],
            "data": self.data.to_dict() if self.data else None,
        }
        if self.params:  # only programs with parameters have the key (golden plans stay)
            out["params"] = {name: list(handlers) for name, handlers in self.params}
        if self.data is not None:
            out["hot_keys"] = {
                s.stage: [list(k) for k in s.hot_keys] for s in self.data.per_stage if s.hot_keys
            }
            out["predicted_speedup"] = [list(p) for p in self.data.predicted_speedup]
        return out

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **kwargs)


# -- keys as functions ----------------------------------------------------------------------


def key_columns(key: str) -> tuple[list[str], bool] | None:
    """The event fields a key expression is made of when it is ``e.field`` or a tuple of them,
    and whether it is a single one (not a tuple); None for any other key, or one that does
    not parse. What a caller can then group by as columns, where it has them all."""
    try:
        expr = ast.parse(key, mode="eval").body
    except SyntaxError:
        return None
    parts = expr.elts if isinstance(expr, ast.Tuple) else [expr]
    if not all(_is_field(part) for part in parts):
        return None
    return [part.attr for part in parts], not isinstance(expr, ast.Tuple)


def _is_field(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == EVENT
    )


def compile_key(expr: str, program: Program) -> Callable[[Any], Any]:
    """Turn a canonical key expression (event named ``e``) into a function of the event.

    The expression is evaluated in a fresh copy of the program's module namespace, so module
    constants and helper functions it names are those of the program.
    """
    namespace: dict[str, Any] = {
        "__name__": f"restream_keys_{program.name}",
        "__file__": program.filename,
    }
    exec(compile(program.module_ast, program.filename, "exec"), namespace)
    code = compile(f"lambda {EVENT}: ({expr})", f"<partition key of {program.name}>", "eval")
    return eval(code, namespace)
