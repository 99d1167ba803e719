"""Build the passes of a planner's Plan (``passes._plan`` says what a pass is and why).

:func:`build` goes in steps, each a function here: a draft pass per stage, partitioned as the
stage is (:func:`_draft`), merged where a stage runs in another's pass (looked-up keys,
fused closes, fused readers); where each state lives and which folds it needs
(:func:`_homes`); the passes' order, with each fold just before its first reader; the probes
(:func:`_probes`); where scheduled events go (:func:`_kind_passes`); and the passes
themselves, with what each sends to which (:func:`_stage_pass`, :func:`_with_sends`).
A program the passes cannot split raises :class:`Unsplit`, with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ....model.program import Program
from ....model.state import Value
from ._lookup_stages import lookup_of, lookup_stages
from ._plan_readers import fuse_readers
from ._plan_types import BY_KEY, ORDER, SINGLE, Pass, PassPlan, Probe
from ._window_shapes import fuse_closes

__all__ = ["build", "Unsplit"]


class Unsplit(Exception):
    """Why the passes cannot split this program."""


def _key(state: Any, access: Any) -> str | None:
    """An access's key expression; a ``state.Value`` has the one key ``()``."""
    return "()" if isinstance(state, Value) else access.key


class _Reading:
    """What every step reads: the program, the planner's handler records, scheduled kinds."""

    def __init__(self, program: Program, plan: Any) -> None:
        self.program = program
        self.index = {h.name: h.index for h in program.handlers}
        self.info = {h.name: h for h in plan.handlers}
        self.scheduled = {k for h in plan.handlers for k in h.schedules}

    def of(self, h: int) -> Any:
        """The planner's record of handler number ``h``."""
        return self.info[self.program.handlers[h].name]

    def accesses(self, d: dict):
        """``(handler, access, key expression)`` of every access of draft ``d``'s handlers."""
        for h in d["handlers"]:
            for a in self.of(h).accesses:
                yield h, a, _key(self.program.states[a.state], a)


@dataclass
class _Homes:
    """Where each state lives (:func:`_homes`)."""

    writers: dict[str, set[int]] = field(default_factory=dict)
    holder: dict[str, int] = field(default_factory=dict)  # the stage pass holding it whole
    serve: dict[tuple[str, str], object] = field(default_factory=dict)  # -> pass or ("fold", n)
    folds: list[tuple[str, str, int]] = field(default_factory=list)  # (state, key, before)
    versions: dict[str, int] = field(default_factory=dict)  # state -> fold recording versions
    final: dict[str, object] = field(default_factory=dict)


def build(program: Program, plan: Any, lookups: bool, closes: bool = True) -> PassPlan:
    """The passes of ``program`` under ``plan`` (``passes._plan.plan_passes``' arguments)."""
    rd = _Reading(program, plan)
    if "?" in rd.scheduled:
        raise Unsplit("a schedule() whose kind is not a literal")
    drafts = [_draft(rd, stage) for stage in plan.stages]
    if lookups:
        lookup_stages(drafts, rd.accesses, program, rd.info, rd.scheduled)
    unfused = (
        fuse_closes(drafts, rd.accesses, program, rd.info, (ORDER, SINGLE, BY_KEY))
        if closes
        else {}
    )
    fuse_readers(drafts, rd.accesses, program, rd.info)
    homes = _homes(rd, drafts)
    # The final numbering: each fold just before the first stage that reads through it.
    order: list[tuple[str, int]] = []
    for i in range(len(drafts) + 1):
        order += [("fold", f) for f, (_s, _k, before) in enumerate(homes.folds) if before == i]
        if i < len(drafts):
            order.append(("stage", i))
    number = {item: n for n, item in enumerate(order)}

    def at(where: object) -> int:
        return number[where] if isinstance(where, tuple) else number[("stage", where)]

    probes = _probes(rd, drafts, homes, at)
    kind_passes, schedulers = _kind_passes(rd, drafts, at)
    fold_of = {
        name: [at(("fold", f)) for f, (s2, _k, _b) in enumerate(homes.folds) if s2 == name]
        for name in program.states
    }
    copied_by: dict[str, list[int]] = {}  # state -> the passes that hold copies of it
    for i, d in enumerate(drafts):
        d["copies"] = tuple(name for name in d["copies"] if homes.writers.get(name))
        for name in d["copies"]:
            copied_by.setdefault(name, []).append(at(i))
    passes = []
    for n, (what, j) in enumerate(order):
        serves = tuple(p for p in probes if p.home == n)
        if what == "fold":
            passes.append(_fold_pass(n, j, homes, serves, copied_by))
        else:
            stage = _stage_pass(rd, n, j, drafts[j], homes, probes, fold_of, at)
            to = drafts[j].get("narrow_to", {})
            to = {name: at(_index(drafts, d)) for name, d in to.items()}
            narrow = tuple(drafts[j].get("narrow", ()))
            keys = dict(drafts[j].get("narrow_keys", {}))
            passes.append(replace(stage, narrow=narrow, narrow_to=to, narrow_keys=keys))
    return PassPlan(
        tuple(_with_sends(rd, passes, kind_passes)),
        {k: tuple(v) for k, v in kind_passes.items()},
        None,
        bool(schedulers),
        unfused,
    )


def _index(drafts: list[dict], d: dict) -> int:
    """The number of draft ``d`` (drafts are dicts: by identity, not by value)."""
    return next(i for i, x in enumerate(drafts) if x is d)


def _draft(rd: _Reading, stage: Any) -> dict:
    """A draft pass for one of the plan's stages, partitioned as the stage is."""
    info = rd.info
    handlers = tuple(sorted(rd.index[h] for h in stage.handlers))
    d = {
        "stage": stage.name,
        "stages": [stage.name],
        "mode": stage.mode,
        "handlers": handlers,
        "kinds": tuple(dict.fromkeys(k for h in stage.handlers for k in info[h].kinds)),
        "reason": None,
    }
    writes = [(a, k) for _h, a, k in rd.accesses(d) if a.op != "read"]
    # Upstream states it reads by a key that is not the event's, or whole, or on scheduled
    # events (which no earlier pass sees, so none can probe for them): each partition
    # gets a copy (a state it writes too is its own, held here anyway).
    written = {a.state for a, _k in writes}
    on_scheduled = {
        a.state for h in stage.handlers if set(info[h].kinds) & rd.scheduled for a in info[h].reads
    }
    states = rd.program.states
    d["copies"] = tuple(
        dict.fromkeys(
            a.state
            for h in stage.handlers
            for a in info[h].reads
            if a.state not in written
            and (a.state in on_scheduled or (not a.event_key and _key(states[a.state], a) != "()"))
        )
    )
    if stage.mode == "sequential":
        d["partition"], d["reason"] = SINGLE, stage.reason
    elif stage.partition_key is not None:
        d["partition"] = stage.partition_key
        # Partitioned by an element common to every key of its own state (the symbol of
        # (symbol, window end)): equal keys have equal elements, so the stage holds its
        # own state whole per partition, though no access uses the element as its key.
        d["element"] = bool(stage.reason and "element" in stage.reason)
    else:
        keys = {k for a, k in writes}
        one = len(keys) == 1 and all(a.event_key or k == "()" for a, k in writes)
        d["partition"] = keys.pop() if one else ORDER
    return d


def _homes(rd: _Reading, drafts: list[dict]) -> _Homes:
    """Where each state lives: the stage pass that holds it whole, the folds it needs to
    serve reads under other keys or to copies, and which pass reports its final value."""
    out = _Homes()
    readers: dict[str, dict[int, set]] = {}
    for i, d in enumerate(drafts):
        for _h, a, k in rd.accesses(d):
            if a.op == "read":
                readers.setdefault(a.state, {}).setdefault(i, set()).add(k)
            else:
                out.writers.setdefault(a.state, set()).add(i)
    for name in rd.program.states:
        w = out.writers.get(name, set())
        r = readers.get(name, {})
        _holder(rd, drafts, out, name, w, r)
        if not w:
            out.final[name] = None
            continue
        out.final[name] = out.holder.get(name)
        for i, keys in sorted(r.items()):
            if name not in drafts[i]["copies"]:
                _serve(drafts, out, name, i, keys)
        copy_readers = [i for i in r if name in drafts[i]["copies"]]
        if copy_readers:
            # The fold that records its versions, just before the first stage holding a copy.
            out.versions[name] = len(out.folds)
            out.folds.append((name, BY_KEY, min(copy_readers)))
            if out.final[name] is None:
                out.final[name] = ("fold", out.versions[name])
        if out.final[name] is None:
            out.final[name] = ("fold", len(out.folds))
            out.folds.append((name, BY_KEY, len(drafts)))
    return out


def _holds(rd: _Reading, d: dict, state: str) -> bool:
    """Whether draft ``d`` holds ``state`` whole per partition."""
    if d["partition"] == SINGLE or d.get("element") or state in d.get("held", ()):
        return True
    return all(k == d["partition"] for _h, a, k in rd.accesses(d) if a.state == state)


def _holder(rd: _Reading, drafts: list[dict], out: _Homes, name: str, w: set, r: dict) -> None:
    """The stage that holds state ``name`` whole, if one does: the one that reads and writes
    it, or its one writer."""
    own = [i for i in w if i in r]
    if len(own) > 1:
        raise Unsplit(f"state {name!r} is read and written by several stages")
    if own:
        o = own[0]
        if not _holds(rd, drafts[o], name):
            raise Unsplit(f"state {name!r} is used under several keys in {drafts[o]['stage']}")
        if any(x > o for x in w):
            raise Unsplit(f"state {name!r} is written after the stage that holds it")
        out.holder[name] = o
    elif len(w) == 1 and _holds(rd, drafts[next(iter(w))], name):
        out.holder[name] = next(iter(w))


def _serve(drafts: list[dict], out: _Homes, name: str, i: int, keys: set) -> None:
    """Who serves stage ``i``'s reads of ``name`` under ``keys``: its holder when partitioned
    by that key, else a fold by the key."""
    for k in sorted(keys, key=str):
        if i == out.holder.get(name):
            continue
        if k is None:
            raise Unsplit(f"state {name!r} is read whole by {drafts[i]['stage']}")
        h = out.holder.get(name)
        if h is not None and drafts[h]["partition"] in (SINGLE, k):
            out.serve[(name, k)] = h
        elif (name, k) not in out.serve:
            out.serve[(name, k)] = ("fold", len(out.folds))
            out.folds.append((name, k, i))
        if out.final[name] is None:
            out.final[name] = out.serve[(name, k)]


def _probes(rd: _Reading, drafts: list[dict], homes: _Homes, at: Any) -> list[Probe]:
    """Reads of state that another pass holds: each a probe from its server to its reader."""
    probes: list[Probe] = []
    for i, d in enumerate(drafts):
        for h in d["handlers"]:
            hinfo = rd.of(h)
            seen = set()
            for a in hinfo.reads:
                k = _key(rd.program.states[a.state], a)
                if homes.holder.get(a.state) == i or homes.final.get(a.state, 0) is None:
                    continue
                if a.state in d["copies"] or (a.state, k) in seen:
                    continue
                seen.add((a.state, k))
                if not a.event_key and k != "()":
                    raise Unsplit(f"{hinfo.name} reads {a.state!r} by a key not of the event")
                if set(hinfo.kinds) & rd.scheduled:
                    raise Unsplit(f"{hinfo.name} reads upstream state on scheduled events")
                home = at(homes.serve[(a.state, k)])
                probes.append(Probe(len(probes), a.state, k, h, hinfo.kinds, home, at(i)))
    return probes


def _kind_passes(rd: _Reading, drafts: list[dict], at: Any) -> tuple[dict, list[int]]:
    """Scheduled events go to the passes whose handlers take their kind: kind -> passes, and
    the one stage that schedules (if any)."""
    kind_passes: dict[str, list[int]] = {}
    for i, d in enumerate(drafts):
        for kind in d["kinds"]:
            kind_passes.setdefault(kind, []).append(at(i))
    schedulers = [i for i, d in enumerate(drafts) if any(rd.of(h).schedules for h in d["handlers"])]
    if len(schedulers) > 1:
        # seq numbers a log event's scheduled events across handlers: one scheduler only.
        raise Unsplit("several stages schedule events")
    for i in schedulers:
        for h in drafts[i]["handlers"]:
            for kind in rd.of(h).schedules:
                for target in kind_passes.get(kind, []):
                    if target < at(i):
                        raise Unsplit(f"kind {kind!r} is scheduled after the stage that takes it")
                    if target == at(i) and drafts[i]["partition"] == ORDER:
                        raise Unsplit(f"stage {drafts[i]['stage']} schedules for itself, no key")
    return kind_passes, schedulers


def _fold_pass(n: int, j: int, homes: _Homes, serves: tuple, copied_by: dict) -> Pass:
    """Pass number ``n``: fold number ``j``, of one state by one key."""
    name, k, _before = homes.folds[j]
    return Pass(
        index=n,
        stage=f"fold {name}" + ("" if k == BY_KEY else f" by {k}"),
        mode="fold",
        partition=k,
        handlers=(),
        kinds=(),
        homes=(name,),
        serves=serves,
        finals=(name,) if homes.final[name] == ("fold", j) else (),
        probe_kinds=tuple(dict.fromkeys(kd for p in serves for kd in p.kinds)),
        versions_to=tuple(copied_by[name]) if homes.versions.get(name) == j else (),
    )


def _stage_pass(
    rd: _Reading, n: int, j: int, d: dict, homes: _Homes, probes: list, fold_of: dict, at: Any
) -> Pass:
    """Pass number ``n``: draft ``j``'s handlers, with the states it holds and where its
    writes of the others go."""
    held = tuple(s for s, h in homes.holder.items() if h == j)
    blind, feeds = {}, {}
    for name in dict.fromkeys(a.state for _h, a, _k in rd.accesses(d) if a.op != "read"):
        targets = tuple(fold_of[name])
        if name in homes.versions and at(("fold", homes.versions[name])) < n:
            raise Unsplit(f"state {name!r} is written after a stage that reads it whole")
        if homes.holder.get(name) == j:
            if targets:
                feeds[name] = targets
        else:
            h = homes.holder.get(name)
            blind[name] = tuple(sorted({*targets, *([at(h)] if h is not None else [])}))
    serves = tuple(p for p in probes if p.home == n)
    own_kinds = set(d["kinds"])
    return Pass(
        index=n,
        stage=d["stage"],
        mode=d["mode"],
        partition=d["partition"],
        handlers=d["handlers"],
        kinds=d["kinds"],
        homes=held,
        reason=d["reason"],
        serves=serves,
        consumes=tuple(p for p in probes if p.reader == n),
        blind=blind,
        feeds=feeds,
        finals=tuple(s for s in held if homes.final.get(s) == j),
        probe_kinds=tuple(
            dict.fromkeys(kd for p in serves for kd in p.kinds if kd not in own_kinds)
        ),
        stages=tuple(d["stages"]),
        copies=d["copies"],
        lookup=lookup_of(d, probes, n),
        elements=_elements(rd, d, held) if d.get("element") else {},
        closes=tuple(d.get("closes", ())),
    )


def _with_sends(rd: _Reading, passes: list[Pass], kind_passes: dict) -> list[Pass]:
    """Who sends what to whom: probe values, or writes and scheduled events (after which an
    event must wait for its own runs' writes), or a fold's versions."""
    out = []
    for p in passes:
        sends: dict[int, str] = {q.reader: "probes" for q in p.serves}
        for targets in (*p.blind.values(), *p.feeds.values()):
            for t in targets:
                sends[t] = "writes"
        for t in p.versions_to:
            sends[t] = "versions"
        for h in p.handlers:
            for kind in rd.of(h).schedules:
                for t in kind_passes.get(kind, ()):
                    if t != p.index:
                        sends[t] = "writes"
        made = tuple(dict.fromkeys(k for h in p.handlers for k in rd.of(h).schedules))
        out.append(replace(p, sends=sends, schedules=made))
    return out


def _elements(rd: _Reading, d: dict, homes: tuple[str, ...]) -> dict[str, int]:
    """Of a pass partitioned by an element of its states' keys: each held state whose keys
    are tuples with that element, and the element's position in them (the planner found it
    common to every key of the state, ``planner.ir._own_partition``)."""
    partition = d["partition"]
    found = {}
    for name in homes:
        own = [a for _h, a, _k in rd.accesses(d) if a.state == name]
        if not own or all(k == partition for _h, a, k in rd.accesses(d) if a.state == name):
            continue
        if any(a.parts is None for a in own):
            continue
        for i in range(min(len(a.parts) for a in own)):
            if all(a.parts[i][0] == partition for a in own):
                found[name] = i
                break
    return found
