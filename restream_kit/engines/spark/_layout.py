"""From the planner's Plan to what the Spark engine runs: steps, state paths, reads to resolve.

- A step is one handler pass. Each partitioned or sequential stage is a step of its own;
  stateless stages share a step when they are at the same depth (none reads what another
  writes), so that one pass over the events runs them all. A stateless step with no reads of
  upstream state runs over the events as they are (``map``); one with reads is shuffled by
  event order so that each event meets its resolved reads (``stateless``).
- Every state is ``own`` (read and written by one stage, which keeps it in real dicts and
  records its versions when a later stage reads it), or written blind by its stages and
  folded by key: ``set`` (overwrites and deletes only: the last one wins), ``add``
  (additions of numbers onto a zero default: running sums), ``sum`` (both), all three in the
  JVM, or ``python`` (other merges: folded in Python); or it has no writer at all.
- A state is resolved (its versions joined to the requests of every stage that reads it)
  once per epoch, before the first step that reads it, or at the end of the epoch when
  nobody reads it (for its final values).

What the parallel path does not do yet sends the whole replay to the serial fallback, with
the reason: ``fallback_reason`` says which.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field, replace
from typing import Any

from ...program import Program
from ...state import Value

__all__ = ["Read", "Step", "StateLayout", "Layout", "layout", "write_kinds"]


@dataclass(frozen=True)
class Read:
    """A read of upstream ``state`` by ``key`` (source over ``e``) in handler ``handler``."""

    state: str
    key: str
    handler: int
    kinds: tuple[str, ...]
    step: int


@dataclass(frozen=True)
class Step:
    """One handler pass: its stages, how its events are laid out, and its state."""

    index: int
    stages: tuple[str, ...]
    mode: str  # map | stateless | partitioned | sequential
    partition_key: str | None
    kinds: tuple[str, ...]
    handlers: tuple[tuple[int, str, tuple[str, ...]], ...]
    own: dict[str, bool] = field(default_factory=dict)  # own state -> recorded
    own_key_part: dict[str, int | None] = field(default_factory=dict)  # None: the whole key
    upstream: tuple[str, ...] = ()
    blind: dict[str, str] = field(default_factory=dict)  # blind state -> its path
    # Blind state owned by a later partitioned step: where its keys go (see BlindStore).
    route: dict[str, int | None] = field(default_factory=dict)
    # Own state that earlier steps also write: their write rows come into this step.
    upstream_writes: tuple[str, ...] = ()
    reads: tuple[Read, ...] = ()
    resolve_before: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return ", ".join(self.stages)


@dataclass(frozen=True)
class StateLayout:
    name: str
    sid: int
    path: str  # own | set | add | sum | python | unwritten
    default: Any
    writers: tuple[int, ...]  # steps
    readers: tuple[int, ...]  # steps that read it as upstream state
    owner: int | None = None  # the step that reads and writes it

    @property
    def float_default(self) -> bool:
        return type(self.default) is float


@dataclass(frozen=True)
class Layout:
    steps: tuple[Step, ...]
    states: dict[str, StateLayout]
    resolve_at_end: tuple[str, ...]
    fallback_reason: str | None = None

    @property
    def state_ids(self) -> dict[str, int]:
        return {name: s.sid for name, s in self.states.items()}


def write_kinds(program: Program) -> dict[str, set[str]]:
    """Per state, the kinds of write the source makes: ``set`` (``m[k] = v``, ``.set``),
    ``delete``, ``add`` (``+=``, ``-=``, ``.add``), ``binop`` (another augmented assignment)
    or ``fn`` (``.merge``). Writes through aliases are not seen; the workers check at run
    time that every write is of a planned kind."""
    states = set(program.states)
    out: dict[str, set[str]] = {name: set() for name in states}

    def base(target: ast.AST) -> str | None:
        node = target.value if isinstance(target, (ast.Subscript, ast.Attribute)) else None
        return node.id if isinstance(node, ast.Name) and node.id in states else None

    for node in ast.walk(program.module_ast):
        if isinstance(node, ast.AugAssign):
            name = base(node.target)
            if name:
                out[name].add("add" if isinstance(node.op, (ast.Add, ast.Sub)) else "binop")
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                name = base(target)
                if name:
                    out[name].add("set")
        elif isinstance(node, ast.Delete):
            for target in node.targets:
                name = base(target)
                if name:
                    out[name].add("delete")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name = base(node.func)
            kind = {"set": "set", "add": "add", "merge": "fn", "delete": "delete"}.get(
                node.func.attr
            )
            if name and kind:
                out[name].add(kind)
    return out


def _numeric_zero(value: Any) -> bool:
    return type(value) in (int, float) and value == 0


def _key_part(state: str, keys: list[str], partition_key: str) -> int | None | bool:
    """How a partition key is found in ``state``'s keys: None (the key itself), an element
    index, or False when the keys do not show it consistently."""
    if all(k == partition_key for k in keys):
        return None
    found: int | None = None
    for k in keys:
        try:
            node = ast.parse(k, mode="eval").body
        except SyntaxError:
            return False
        if not isinstance(node, ast.Tuple):
            return False
        indexes = [i for i, elt in enumerate(node.elts) if ast.unparse(elt) == partition_key]
        if not indexes:
            return False
        if found is None:
            found = indexes[0]
        elif found not in indexes:
            return False
    return found if found is not None else False


def layout(program: Program, plan: Any) -> Layout:
    """The steps and state paths for ``program`` under ``plan`` (see the module docstring)."""
    order = {h.name: i for i, h in enumerate(program.handlers)}
    infos = {h.name: h for h in plan.handlers}
    reasons: list[str] = []
    scheduling = [h.name for h in plan.handlers if h.schedules]
    if scheduling:
        reasons.append(f"schedule() in {', '.join(scheduling)} (scheduled events run serially)")

    stage_of_state_writes: dict[str, list[str]] = {}
    own_of_stage: dict[str, set[str]] = {}
    for stage in plan.stages:
        read = set()
        written = set()
        for h in stage.handlers:
            for a in infos[h].accesses:
                (read if a.op == "read" else written).add(a.state)
        own_of_stage[stage.name] = read & written
        for s in sorted(written):
            stage_of_state_writes.setdefault(s, []).append(stage.name)
    for s, writers in stage_of_state_writes.items():
        owners = [w for w in writers if s in own_of_stage[w]]
        if len(owners) > 1:
            reasons.append(f"state {s} is read and written by stages {', '.join(owners)}")
    for stage in plan.stages:
        for r in stage.reads_upstream:
            value = isinstance(program.states[r.state], Value)
            if not r.event_key or (r.key is None and not value):
                what = f"{r.state}[{r.key}]" if r.key is not None else f"{r.state} (whole)"
                reasons.append(
                    f"stage {stage.name} reads {what} by a key that is not a function of the "
                    f"event (handler {r.handler}, line {r.lineno})"
                )
    if reasons:
        return Layout((), {}, (), "; ".join(dict.fromkeys(reasons)))

    # Steps.
    upstream_of: dict[str, set[str]] = {s.name: set(s.upstream) for s in plan.stages}
    steps_stages: list[list[Any]] = []
    step_mode: list[str] = []
    step_of_stage: dict[str, int] = {}
    for stage in plan.stages:
        if stage.mode == "stateless":
            mode = "stateless" if stage.reads_upstream else "map"
            placed = None
            for j in range(len(steps_stages)):
                if step_mode[j] != mode:
                    continue
                if all(step_of_stage[u] < j for u in upstream_of[stage.name]):
                    placed = j
                    break
            if placed is not None:
                steps_stages[placed].append(stage)
                step_of_stage[stage.name] = placed
                continue
        else:
            mode = stage.mode
        step_of_stage[stage.name] = len(steps_stages)
        steps_stages.append([stage])
        step_mode.append(mode)

    # States.
    kinds_of_write = write_kinds(program)
    readers: dict[str, set[int]] = {}
    for stage in plan.stages:
        for r in stage.reads_upstream:
            if r.state not in own_of_stage[stage.name]:
                readers.setdefault(r.state, set()).add(step_of_stage[stage.name])
    states: dict[str, StateLayout] = {}
    for sid, (name, decl) in enumerate(program.states.items()):
        writers = tuple(sorted({step_of_stage[w] for w in stage_of_state_writes.get(name, [])}))
        owner = [w for w in stage_of_state_writes.get(name, []) if name in own_of_stage[w]]
        if not writers:
            path = "unwritten"
        elif owner:
            path = "own"
        else:
            kinds = kinds_of_write[name]
            resets = bool(kinds & {"set", "delete"})
            if kinds & {"binop", "fn"} or ("add" in kinds and not _numeric_zero(decl.default)):
                path = "python"
            elif "add" not in kinds:
                path = "set"
            else:
                path = "sum" if resets else "add"
        states[name] = StateLayout(
            name,
            sid,
            path,
            decl.default,
            writers,
            tuple(sorted(readers.get(name, ()))),
            step_of_stage[owner[0]] if owner else None,
        )

    steps: list[Step] = []
    resolved: set[str] = set()
    for j, group in enumerate(steps_stages):
        mode = step_mode[j]
        handler_names = sorted({h for st in group for h in st.handlers}, key=order.__getitem__)
        handlers = tuple((order[h], h, infos[h].kinds) for h in handler_names)
        kinds = tuple(dict.fromkeys(k for _, _, ks in handlers for k in ks))
        own: dict[str, bool] = {}
        blind: dict[str, str] = {}
        upstream_writes: list[str] = []
        for st in group:
            for s in own_of_stage[st.name]:
                own[s] = bool(states[s].readers)
                if len(states[s].writers) > 1:
                    upstream_writes.append(s)
            for s in st.owns:
                if s not in own_of_stage[st.name]:
                    # Merges into state a later stage owns are applied by that stage.
                    blind[s] = "python" if states[s].path == "own" else states[s].path
        partition_key = group[0].partition_key if mode == "partitioned" else None
        key_part: dict[str, int | None] = {}
        if partition_key is not None:
            for s in own:
                keys = [
                    a.key
                    for h in handler_names
                    for a in infos[h].accesses
                    if a.state == s and a.key is not None
                ]
                part = _key_part(s, keys, partition_key)
                if part is False:
                    mode, partition_key, key_part = "sequential", None, {}
                    break
                key_part[s] = part
        reads = []
        upstream = []
        for st in group:
            for r in st.reads_upstream:
                if r.state in own:
                    continue  # own state that an earlier stage merges into: applied in place
                key = r.key if r.key is not None else "()"
                read = Read(r.state, key, order[r.handler], infos[r.handler].kinds, j)
                if read not in reads:
                    reads.append(read)
                if r.state not in upstream:
                    upstream.append(r.state)
        resolve_before = tuple(s for s in upstream if s not in resolved)
        resolved.update(resolve_before)
        steps.append(
            Step(
                index=j,
                stages=tuple(st.name for st in group),
                mode=mode,
                partition_key=partition_key,
                kinds=kinds,
                handlers=handlers,
                own=own,
                own_key_part=key_part,
                upstream_writes=tuple(upstream_writes),
                upstream=tuple(upstream),
                blind=blind,
                reads=tuple(reads),
                resolve_before=resolve_before,
            )
        )
    # Blind writes into state that a partitioned step owns go to the owner's partitions.
    owner_part: dict[str, int | None] = {}
    for step in steps:
        if step.mode == "partitioned":
            for s in step.upstream_writes:
                owner_part[s] = step.own_key_part.get(s)
    if owner_part:
        steps = [
            replace(step, route={s: owner_part[s] for s in step.blind if s in owner_part})
            for step in steps
        ]
    at_end = tuple(
        name
        for name, s in states.items()
        if s.path in ("set", "add", "sum", "python") and name not in resolved
    )
    return Layout(tuple(steps), states, at_end)
