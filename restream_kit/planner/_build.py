"""Building the :class:`~restream_kit.planner.ir.Plan` from a program's analysed handlers: the
dependency graph, its stages and their modes, the warnings and the static critical path
(the rules are stated in :mod:`restream_kit.planner.ir`'s docstring)."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..model.program import Program
from ..runtime._native_plan import native_plan
from .ir import _VERB, EVENT, Access, Edge, HandlerInfo, Mode, Plan, PlanWarning, Stage, StateInfo

if TYPE_CHECKING:
    import networkx as nx

    from ._analysis import HandlerAccess, ScheduleCall

__all__ = ["build_plan", "program_accesses", "static_critical_path"]


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
        HandlerInfo.of(
            h, tuple(dict.fromkeys(s.kind if s.kind is not None else "?" for s in h.schedules))
        )
        for h in analysed
    )
    by_name = {h.name: h for h in handlers}
    order = {h.name: i for i, h in enumerate(handlers)}
    states = tuple(
        StateInfo(name, decl.kind, repr(decl.default)) for name, decl in program.states.items()
    )
    notes: list[PlanWarning] = list(warnings)

    edge_list, writers, readers, schedules = _edges(program, analysed, handlers, notes)

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


def _edges(
    program: Program,
    analysed: tuple[HandlerAccess, ...],
    handlers: tuple[HandlerInfo, ...],
    notes: list[PlanWarning],
) -> tuple[tuple[Edge, ...], dict, dict, dict]:
    """The plan's edges in declaration order (through state, then through scheduled events),
    each state's writers and readers, and each handler's schedule calls with the handlers
    they feed; a schedule whose kind is not a literal is noted in ``notes``."""
    order = {h.name: i for i, h in enumerate(handlers)}
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
    return edge_list, writers, readers, schedules


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
