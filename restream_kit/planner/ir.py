"""The plan: an immutable description of how a program can run in parallel.

Every engine and view reads the same :class:`Plan`. It is built from the program text alone
(:func:`build_plan`); given a log, ``critical_path.data_path`` adds the data critical path.

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
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from ..model.program import Program
from ..runtime._native_plan import native_plan

if TYPE_CHECKING:
    import networkx as nx

    from ._analysis import HandlerAccess, ScheduleCall

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
    "build_plan",
    "compile_key",
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


#: The fields of an access in a handler, and of a stage's upstream read, in the plan's JSON.
_ACCESS_JSON = ("state", "op", "key", "event_key", "lineno", "via")
_UPSTREAM_READ_JSON = ("state", "key", "event_key", "handler", "lineno")


@dataclass(frozen=True)
class HandlerInfo:
    """A handler as the planner sees it: kinds, accesses, emitted tables, scheduled kinds."""

    name: str
    kinds: tuple[str, ...]
    lineno: int
    accesses: tuple[Access, ...]
    emits: tuple[str, ...]
    schedules: tuple[str, ...]
    event_arg: str

    @property
    def reads(self) -> tuple[Access, ...]:
        return tuple(a for a in self.accesses if a.op == "read")

    @property
    def writes(self) -> tuple[Access, ...]:
        return tuple(a for a in self.accesses if a.op != "read")

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kinds": list(self.kinds),
            "lineno": self.lineno,
            "event_arg": self.event_arg,
            "accesses": [a.to_dict() for a in self.accesses],
            "emits": list(self.emits),
            "schedules": list(self.schedules),
        }


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
        return {
            "name": self.name,
            "handlers": list(self.handlers),
            "mode": self.mode,
            "partition_key": self.partition_key,
            "reason": self.reason,
            "owns": list(self.owns),
            "reads_upstream": [r.upstream_dict() for r in self.reads_upstream],
            "kinds": list(self.kinds),
            "upstream": list(self.upstream),
        }


@dataclass(frozen=True)
class PlanWarning:
    """Something the user should know about the program; ``handler`` and ``lineno`` say where."""

    code: str
    message: str
    handler: str | None
    lineno: int | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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
        out = asdict(self)
        out["hot_keys"] = [list(k) for k in self.hot_keys]
        return out


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
        return {
            "events": self.events,
            "sample_events": self.sample_events,
            "weighting": self.weighting,
            "handler_cost_us": [list(c) for c in self.handler_cost_us],
            "per_stage": [s.to_dict() for s in self.per_stage],
            "predicted_speedup": [list(p) for p in self.predicted_speedup],
            "chain_bound": self.chain_bound,
            "scheduled_runs": self.scheduled_runs,
            "notes": list(self.notes),
        }

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


# -- building -------------------------------------------------------------------------------


def _uses_event(key: str) -> bool:
    return any(
        isinstance(n, ast.Name) and n.id == EVENT for n in ast.walk(ast.parse(key, mode="eval"))
    )


def _scheduled_key(key: str, call: ScheduleCall) -> str | None:
    """The partition key of an event scheduled by ``call``, written in the scheduler's event."""
    fields = {name: (text, pure) for name, text, pure in call.fields}
    if call.at is not None:
        fields["ts"] = (call.at, True)
    fields["lsn"] = (f"{EVENT}.lsn", True)
    if call.kind is not None:
        fields["kind"] = (repr(call.kind), True)
    tree = ast.parse(key, mode="eval")

    class Swap(ast.NodeTransformer):
        ok = True

        def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
            if isinstance(node.value, ast.Name) and node.value.id == EVENT:
                text, pure = fields.get(node.attr, (None, False))
                if text is None or not pure:
                    Swap.ok = False
                    return node
                return ast.parse(text, mode="eval").body
            return self.generic_visit(node)

        def visit_Name(self, node: ast.Name) -> ast.AST:
            if node.id == EVENT:
                Swap.ok = False
            return node

    out = Swap().visit(tree)
    return ast.unparse(out) if Swap.ok else None


def build_plan(
    program: Program,
    analysed: tuple[HandlerAccess, ...],
    warnings: Iterable[PlanWarning] = (),
) -> Plan:
    """The plan of ``program`` from its handlers' analysis (no data critical path yet)."""
    import networkx as nx  # only when planning: ``import restream_kit`` stays light

    handlers = tuple(
        HandlerInfo(
            name=h.name,
            kinds=h.kinds,
            lineno=h.lineno,
            accesses=h.accesses,
            emits=h.emits,
            schedules=tuple(
                dict.fromkeys(s.kind if s.kind is not None else "?" for s in h.schedules)
            ),
            event_arg=h.event_arg,
        )
        for h in analysed
    )
    by_name = {h.name: h for h in handlers}
    order = {h.name: i for i, h in enumerate(handlers)}
    states = tuple(
        StateInfo(name, decl.kind, repr(decl.default)) for name, decl in program.states.items()
    )
    notes: list[PlanWarning] = list(warnings)

    # Edges.
    writers: dict[str, list[str]] = {}
    readers: dict[str, list[str]] = {}
    for h in handlers:
        for a in h.accesses:
            target = readers if a.op == "read" else writers
            if h.name not in target.setdefault(a.state, []):
                target[a.state].append(h.name)
    edges: dict[tuple[str, str, str], None] = {}
    for state in program.states:
        for src in writers.get(state, []):
            for dst in readers.get(state, []):
                if src != dst:
                    edges[(src, dst, state)] = None
    schedules: dict[str, list[tuple[ScheduleCall, tuple[str, ...]]]] = {}
    for raw in analysed:
        for call in raw.schedules:
            targets = tuple(h.name for h in handlers if call.kind is None or call.kind in h.kinds)
            schedules.setdefault(raw.name, []).append((call, targets))
            if call.kind is None:
                notes.append(
                    PlanWarning(
                        "dynamic-schedule",
                        "schedule() with a kind that is not a literal: every handler may depend on it",
                        raw.name,
                        call.lineno,
                    )
                )
            for target in targets:
                if target != raw.name:
                    label = f"schedule:{call.kind if call.kind is not None else '?'}"
                    edges[(raw.name, target, label)] = None
    edge_list = tuple(
        Edge(*e) for e in sorted(edges, key=lambda e: (order[e[0]], order[e[1]], e[2]))
    )

    # Stages.
    graph = nx.DiGraph()
    graph.add_nodes_from(order)
    graph.add_edges_from((e.src, e.dst) for e in edge_list)
    components = [
        tuple(sorted(c, key=order.__getitem__)) for c in nx.strongly_connected_components(graph)
    ]
    stage_of = {h: comp for comp in components for h in comp}
    dag = nx.DiGraph()
    dag.add_nodes_from(components)
    for e in edge_list:
        a, b = stage_of[e.src], stage_of[e.dst]
        if a != b:
            dag.add_edge(a, b)
    topo = list(nx.lexicographical_topological_sort(dag, key=lambda c: order[c[0]]))
    names = {comp: "+".join(comp) for comp in components}
    stages = []
    for comp in topo:
        stage = _stage(comp, names, dag, by_name, writers, program, schedules)
        stages.append(stage)
    stages_t = tuple(stages)

    notes.extend(_warnings(handlers, writers, readers, program))
    unique = list(dict.fromkeys(notes))
    unique.sort(key=lambda w: (w.lineno or 0, w.code, w.message))
    plan = Plan(
        program=program.name,
        handlers=handlers,
        states=states,
        edges=edge_list,
        stages=stages_t,
        critical_path=(),
        warnings=tuple(unique),
        params=_param_reach(program),
        windows=tuple((name, why) for name, (_native, why) in native_plan(program).items()),
    )
    return replace(plan, critical_path=static_critical_path(plan))


def _param_reach(program: Program) -> tuple[tuple[str, tuple[str, ...]], ...]:
    from ..model.params import reach

    return tuple(reach(program).items())


def _stage(
    comp: tuple[str, ...],
    names: dict[tuple[str, ...], str],
    dag: nx.DiGraph,
    by_name: dict[str, HandlerInfo],
    writers: dict[str, list[str]],
    program: Program,
    schedules: dict[str, list[tuple[ScheduleCall, tuple[str, ...]]]],
) -> Stage:
    members = set(comp)
    accesses = [(h, a) for h in comp for a in by_name[h].accesses]
    read = {a.state for _, a in accesses if a.op == "read"}
    written = [
        s for s in program.states if any(a.state == s and a.op != "read" for _, a in accesses)
    ]
    own = read & set(written)
    own_accesses = [(h, a) for h, a in accesses if a.state in own]
    partition_key, problems, note = _own_partition(own_accesses, program)
    inner = [
        (h, call) for h in comp for call, targets in schedules.get(h, []) if members & set(targets)
    ]
    for h, call in inner:
        where = f"{h}{' via ' + call.via if call.via else ''}, line {call.lineno}"
        what = f"{call.kind!r} events" if call.kind is not None else "events of a computed kind"
        if partition_key is not None:
            if _scheduled_key(partition_key, call) != partition_key:
                problems.append(
                    f"{where} schedules {what} for this stage without the fields "
                    f"that keep {partition_key} the same, so they may belong to another partition"
                )
        elif not own:
            problems.append(
                f"{where} schedules {what} for this stage: each scheduled run "
                "waits for the run that scheduled it"
            )
    if problems:
        partition_key, note = None, None
    # One upstream read per state, key, handler and line (however many helpers reach it).
    by_read: dict[tuple, Access] = {}
    for _, a in accesses:
        if a.op == "read" and any(w not in members for w in writers.get(a.state, [])):
            by_read.setdefault((a.state, a.key, a.event_key, a.handler, a.lineno), a)
    upstream_reads = list(by_read.values())
    reason = "; ".join(dict.fromkeys(problems)) if problems else note
    if problems:
        mode: Mode = "sequential"
    else:
        broadcast = [r for r in upstream_reads if not r.event_key]
        if broadcast:
            mode = "broadcast-read"
            reason = (
                "reads upstream state by a key that is not a function of the event: "
                + ", ".join(
                    f"{r.state}[{r.key}] ({r.handler}, line {r.lineno})"
                    if r.key is not None
                    else f"{r.state} whole ({r.handler}, line {r.lineno})"
                    for r in broadcast
                )
            )
        else:
            mode = "partitioned" if partition_key is not None else "stateless"
    kinds = tuple(dict.fromkeys(k for h in comp for k in by_name[h].kinds))
    upstream = tuple(sorted({names[p] for p in dag.predecessors(comp)}))
    return Stage(
        name=names[comp],
        handlers=comp,
        mode=mode,
        partition_key=partition_key,
        reason=reason,
        owns=tuple(written),
        reads_upstream=tuple(upstream_reads),
        kinds=kinds,
        upstream=upstream,
    )


def _raw_where(h: str, a: Any) -> str:
    via = f" via {a.via}" if a.via else ""
    return f"{h}{via}, line {a.lineno}"


def _own_partition(
    own: list[tuple[str, Any]], program: Program
) -> tuple[str | None, list[str], str | None]:
    """The partition key of a stage's own state accesses, or the problems that prevent one.

    Returns (key, problems, note). The key is the one key every access uses when there is
    one; otherwise an element common to every key of each own state (``e.symbol`` for keys
    ``(e.symbol, e.end)`` and ``(e.symbol, window(e.ts))``): equal keys then have equal
    elements, so they meet in one partition.
    """
    if not own:
        return None, [], None
    problems = []
    values: dict[str, dict[str, list[int]]] = {}
    for h, a in own:
        if a.key is not None:
            continue
        if program.states[a.state].kind == "value" and not a.whole:
            where = h + (f" via {a.via}" if a.via else "")
            lines = values.setdefault(a.state, {}).setdefault(where, [])
            if a.lineno not in lines:
                lines.append(a.lineno)
        else:
            problems.append(f"{a.state} is used whole in {_raw_where(h, a)}")
    for state, places in reversed(values.items()):
        text = "; ".join(
            f"{where}, line{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines))}"
            for where, lines in places.items()
        )
        problems.insert(
            0,
            f"{state}.value is read and written ({text}): a state.Value is one value, so one chain",
        )
    if problems:
        return None, list(dict.fromkeys(problems)), None
    keys = list(dict.fromkeys(a.key for _, a in own))
    if len(keys) == 1 and all(a.event_key for _, a in own) and _uses_event(keys[0]):
        return keys[0], [], None
    common: list[str] | None = None
    by_state: dict[str, list[Any]] = {}
    for _, a in own:
        by_state.setdefault(a.state, []).append(a)
    for accs in by_state.values():
        found = []
        first = accs[0].key
        if all(a.key == first and a.event_key for a in accs) and _uses_event(first):
            found.append(first)
        if all(a.parts is not None for a in accs):
            for i in range(min(len(a.parts) for a in accs)):
                texts = {a.parts[i][0] for a in accs}
                text = accs[0].parts[i][0]
                if len(texts) == 1 and all(a.parts[i][1] for a in accs) and _uses_event(text):
                    found.append(text)
        common = found if common is None else [k for k in common if k in found]
    if common:
        key = common[0]
        return key, [], f"partitioned by {key}, an element of every key of its own state"
    unkeyed = [(h, a) for h, a in own if not a.event_key]
    if unkeyed:
        for h, a in unkeyed:
            problems.append(
                f"{a.state}[{a.key}] is {_VERB[a.op]} in {_raw_where(h, a)} by a key that is not "
                "a function of the event"
            )
        return None, list(dict.fromkeys(problems)), None
    if len(keys) == 1:
        return (
            None,
            [f"own state is accessed only by the constant key {keys[0]}: one partition"],
            None,
        )
    counts: dict[str, int] = {}
    for _, a in own:
        counts[a.key] = counts.get(a.key, 0) + 1
    main = max(keys, key=lambda k: counts[k])
    others = {}
    for h, a in own:
        if a.key != main:
            others.setdefault(
                (a.state, a.key, a.op, h),
                f"{a.state}[{a.key}] ({_VERB[a.op]} in {_raw_where(h, a)})",
            )
    problems.append(
        f"own state is accessed by different keys: {', '.join(others.values())}, where the rest "
        f"use {main}"
    )
    return None, problems, None


def _warnings(
    handlers: tuple[HandlerInfo, ...],
    writers: dict[str, list[str]],
    readers: dict[str, list[str]],
    program: Program,
) -> list[PlanWarning]:
    out = []
    for h in handlers:
        for a in h.accesses:
            if a.op == "read" and a.key is not None and not a.event_key:
                out.append(
                    PlanWarning(
                        "non-event-key",
                        f"{a.state}[{a.key}] is read by a key that is not a function of the event: "
                        "it forces a broadcast or a sequential stage",
                        h.name,
                        a.lineno,
                    )
                )
            elif a.key is None and a.op == "read" and not a.event_key:
                out.append(
                    PlanWarning(
                        "whole-state",
                        f"{a.state} is read whole: it forces a broadcast or a sequential stage",
                        h.name,
                        a.lineno,
                    )
                )
    for state in program.states:
        if state in readers and state not in writers:
            h = readers[state][0]
            line = next(a.lineno for a in program_accesses(handlers, h) if a.state == state)
            out.append(
                PlanWarning(
                    "never-written",
                    f"state {state} is read but no handler writes it: it always reads its default",
                    h,
                    line,
                )
            )
        deletes = any(
            a.state == state and a.op in ("delete", "future")
            for hh in handlers
            for a in hh.accesses
        )
        for hh in handlers:
            for a in hh.accesses:
                if (
                    a.state == state
                    and a.op != "read"
                    and a.key
                    and not deletes
                    and (f"{EVENT}.ts" in a.key or f"{EVENT}.lsn" in a.key)
                ):
                    out.append(
                        PlanWarning(
                            "unbounded-state",
                            f"{state}[{a.key}] is keyed by time or position and never deleted: the "
                            "state grows with the log",
                            hh.name,
                            a.lineno,
                        )
                    )
    return out


def program_accesses(handlers: tuple[HandlerInfo, ...], name: str) -> tuple[Access, ...]:
    for h in handlers:
        if h.name == name:
            return h.accesses
    return ()


def static_critical_path(plan: Plan, weights: dict[str, float] | None = None) -> tuple[str, ...]:
    """The heaviest chain of stages, as handler names in order.

    ``weights`` maps stage names to their weight; by default a stage weighs its handler count.
    Ties go to the stage that comes first in the plan's order.
    """
    if not plan.stages:
        return ()
    weight = weights or {s.name: float(len(s.handlers)) for s in plan.stages}
    best: dict[str, float] = {}
    previous: dict[str, str | None] = {}
    for s in plan.stages:
        pick = None
        for p in plan.stages:
            if p.name in s.upstream and (pick is None or best[p.name] > best[pick]):
                pick = p.name
        best[s.name] = weight.get(s.name, 0.0) + (best[pick] if pick else 0.0)
        previous[s.name] = pick
    end = None
    for s in plan.stages:
        if end is None or best[s.name] > best[end]:
            end = s.name
    chain = []
    while end is not None:
        chain.append(end)
        end = previous[end]
    return tuple(h for name in reversed(chain) for h in plan.stage(name).handlers)
