"""From the planner's Plan to passes: one parallel Spark job per stage, over the whole log.

A *pass* runs one stage's handlers, as written, over every event they handle, in one
``mapInArrow`` over partitions sorted by position (see ``docs/spark_engine.md``). The stage's
partitioning decides the pass's: ``partitioned`` stages by their key, stateless stages whose
writes all use one key by that key, other stateless stages by log order, and only
``sequential`` stages in one task. Every state has one *home*: the pass that holds its
complete value per key. What crosses passes is explicit:

- **probes**: a later stage reads a state under the home pass's own partition key; the home
  pass records the value at the reading run's position and sends it, as a row, to the
  reading pass, where it arrives just before its event;
- **writes**: an earlier stage writes blind into a state homed later (a window's counts,
  written by the handler and read by the window's close); each write travels as a row to the
  home partition of its key, and is applied there at its position;
- **scheduled events** go to every pass whose handlers take their kind, to the partition
  of their key there;
- **versions**: a broadcast-read stage reads a state under a key that is not the event's (or
  whole, or on scheduled events), so no partition of it can be told where to look. A fold
  pass before it applies every write of that state and records each key's value after each
  write, at the write's position; those versions go, packed, to every partition of the
  reading pass, which holds a *copy* of the state and brings it up to each run's position
  before the run: the stage stays parallel.

A program the passes cannot split yet runs as one sequential pass, and
:attr:`PassPlan.reason` says why.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ....compiler.expand_windows import close_kind
from ....model.program import Program
from ....model.state import Value
from ....runtime.windows import native_plan
from ._lookup_stages import lookup_of, lookup_stages, packed_straight
from ._window_shapes import closes_once, folded_counts, fuse_closes, pass_windows

__all__ = ["Probe", "Pass", "PassPlan", "plan_passes", "ORDER", "SINGLE", "BY_KEY"]

#: Partitioning of a pass with no key: by the log's order (stateless) or one task (sequential).
ORDER = "<order>"
SINGLE = "<single>"
#: A fold pass with no reads to serve: partitioned by the state's own key.
BY_KEY = "<key>"


@dataclass(frozen=True)
class Probe:
    """A read of ``state`` under ``key`` by handler number ``handler``, served by its home."""

    slot: int
    state: str
    key: str
    handler: int
    kinds: tuple[str, ...]
    home: int  # pass that serves it
    reader: int  # pass that consumes it


@dataclass(frozen=True)
class Pass:
    """One Spark job: a stage's handlers over its events, partitioned by ``partition``.

    A pass with no handlers *folds* a state: it receives every write of it and serves the
    reads of later stages under one key (``stage`` then names the state and the key).
    """

    index: int
    stage: str
    mode: str
    partition: str  # a key expression over ``e``, ORDER, SINGLE or BY_KEY
    handlers: tuple[int, ...]  # declaration numbers, in order
    kinds: tuple[str, ...]
    homes: tuple[str, ...]  # states whose complete values live here
    reason: str | None = None  # why a sequential pass is one task
    serves: tuple[Probe, ...] = ()
    consumes: tuple[Probe, ...] = ()
    blind: dict[str, tuple[int, ...]] = field(default_factory=dict)  # written here, held there
    feeds: dict[str, tuple[int, ...]] = field(default_factory=dict)  # held here, folded there too
    finals: tuple[str, ...] = ()  # states whose final values this pass reports
    probe_kinds: tuple[str, ...] = ()  # kinds of events that only come for probes
    stages: tuple[str, ...] = ()  # the plan's stages it runs (a reader may join its source)
    sends: dict[int, str] = field(default_factory=dict)  # later pass -> "probes"/"writes"
    schedules: tuple[str, ...] = ()  # kinds its handlers schedule
    copies: tuple[str, ...] = ()  # upstream states every partition holds whole (broadcast)
    versions_to: tuple[int, ...] = ()  # a fold: the passes it sends its state's versions to
    # Partitioned by a key read from an upstream state (``passes._lookup_stages``): that state, the
    # key it is read by, and the probe slots whose values (in handler order) partition it.
    lookup: tuple = ()
    # Partitioned by an element of its states' keys (``e.key`` of ``(e.key, e.start)``): the
    # position of that element in each such state's keys, so that a write of the state sent
    # here (or a start's value of it) goes to the partition of the element, where the events
    # that read it are, not to the partition of the whole key.
    elements: dict[str, int] = field(default_factory=dict)
    windows: tuple[str, ...] = ()  # the windows whose state it holds (``_window_notes``)
    # Per window of ``windows``: (whether its tasks run it natively in the serial engine's
    # loop, how or why not), for the path (``_window_shapes.pass_windows``).
    window_notes: dict[str, tuple[bool, str]] = field(default_factory=dict)
    # Closing windows whose adds and closes all run here (``_window_shapes.fuse_closes``): in
    # any loop, native or not.
    closes: tuple[str, ...] = ()

    def partition_value(self, state: str, key: Any) -> Any:
        """The value of this pass's partition expression that ``state``'s key ``key`` has."""
        i = self.elements.get(state)
        if i is None or type(key) is not tuple or len(key) <= i:
            return key
        return key[i]

    @property
    def event_kinds(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((*self.kinds, *self.probe_kinds)))

    def describe(self, partitions: int, fused: bool = True) -> str:
        """What ran, as the path says it, with each window it holds: run natively in the
        pass (fused) or as its expansion, and why. ``fused``: whether its tasks ran their
        windows natively (``_window_shapes.fuses_windows``: not in a checkpointed, guarded,
        recorded or started replay, nor outside the serial engine's loop)."""
        said = self._describe(partitions)
        for name in self.windows:
            native, how = self.window_notes.get(name, (False, "Spark runs its expansion"))
            if native and not fused and name in self.closes:
                how = how.replace("in the serial engine's loop", "as its expansion")
            elif native and not fused:
                native, how = False, _UNFUSED_RUN
            said += f"; window {name} {'fused' if native else 'not fused'}: {how}"
        return said

    def _describe(self, partitions: int) -> str:
        if self.partition == SINGLE:
            return f"sequential in one task: {self.reason or 'the plan says so'}"
        if self.partition == ORDER:
            said = f"parallel over {partitions} partitions (by log order)"
        elif self.partition == BY_KEY:
            said = f"parallel over {partitions} partitions (by state key)"
        else:
            said = f"parallel over {partitions} partitions by {self.partition}"
        if self.lookup:
            said += f", its events and the value of {self.partition} from where {self.lookup[0]} is held"
        if self.copies:
            said += f", {' and '.join(self.copies)} copied whole to each"
        return said


@dataclass(frozen=True)
class PassPlan:
    passes: tuple[Pass, ...]
    kind_passes: dict[str, tuple[int, ...]]  # kind -> passes with handlers for it
    reason: str | None = None  # why the program runs as one sequential pass
    schedules: bool = True  # whether any handler schedules events
    # Closing windows whose closes run in a pass of their own: why not in their adding
    # stage's pass (``_window_shapes.fuse_closes``).
    unfused: dict[str, str] = field(default_factory=dict)


def _single(program: Program, reason: str) -> PassPlan:
    """The whole program in one task: for what the passes cannot split yet, and say why."""
    handlers = tuple(h.index for h in program.handlers)
    kinds = tuple(dict.fromkeys(k for h in program.handlers for k in h.kinds))
    states = tuple(program.states)
    one = Pass(0, "whole program", "sequential", SINGLE, handlers, kinds, states, reason)
    one = replace(one, stages=("whole program",))
    one = replace(one, finals=states)
    schedules = "schedule" in program.source
    # Whatever it schedules, it schedules for itself (its kinds, as far as the text tells).
    one = replace(one, schedules=kinds if schedules else ())
    return PassPlan((one,), {k: (0,) for k in kinds}, reason, schedules)


def plan_passes(program: Program, plan, lookups: bool = True, closes: bool = True) -> PassPlan:
    """The passes of ``program`` under ``plan``; one sequential pass, with the reason, for a
    program they cannot split yet. ``lookups``: whether a stage may be partitioned by a key
    read from an upstream state (``passes._lookup_stages``); a replay from a start state may not
    (``passes._driver.run_passes`` says why). ``closes``: whether a closing window's closes
    may run in its adding stage's pass (``_window_shapes.fuse_closes``); not from a start
    state, whose waiting closes go by the close stage's key, nor with a recorded history."""
    try:
        pp = _plan(program, plan, lookups, closes)
        if any(p.lookup for p in pp.passes) and not (forwards(pp) and packed_straight(pp)):
            pp = _plan(
                program, plan, False, closes
            )  # (its events could not travel with their values)
    except _Unsplit as exc:
        pp = _single(program, str(exc))
    return _window_notes(program, pp)


_UNFUSED_RUN = (
    "its expansion, as the serial engine runs it in a checkpointed, guarded, recorded or "
    "started replay, or outside the serial engine's loop"
)


_OWN_CLOSES = (
    "its expansion: the pass runs closes of its own and serves reads, outside the serial "
    "engine's loop"
)


def _window_notes(program: Program, pp: PassPlan) -> PassPlan:
    """Each window named by the first pass that holds one of its states, with whether that
    pass runs it natively, how or why not (the path says so)."""
    where: dict[int, list[str]] = {}
    for name in program.windows:
        for p in pp.passes:
            if any(state.startswith(f"{name}__") for state in p.homes):
                where.setdefault(p.index, []).append(name)
                break
    if not where:
        return pp
    passes = []
    for p in pp.passes:
        names = tuple(where.get(p.index, ()))
        elsewhere = {*p.blind, *p.feeds, *(q.state for q in p.serves)}
        native = pass_windows(program, p.homes, elsewhere, names)
        notes = {
            name: (True, native[name].removeprefix("fused: "))
            if name in native
            else (False, _why_not(program, pp, name, native_plan(program)[name]))
            for name in names
        }
        # A pass that runs closes of its own and serves probes runs no native loop.
        looped = not p.serves
        for name in names if p.closes and not looped else ():
            if name in native:
                notes[name] = (False, _OWN_CLOSES)
        for name in p.closes:
            how = "in the serial engine's loop" if looped else "as its expansion"
            notes[name] = (
                True,
                f"its adds and closes in this pass, by {p.partition}, {how}: no close pass, "
                "no write sent",
            )
        passes.append(replace(p, windows=names, window_notes=notes))
    return replace(pp, passes=tuple(passes))


def _why_not(program: Program, pp: PassPlan, name: str, serial: tuple[bool, str]) -> str:
    """Why a pass does not run window ``name`` natively, in a few words for the path."""
    native, how = serial
    if not native:  # (the serial engine keeps its expansion too)
        return how.removeprefix("off: ")
    closers = [pp.passes[i] for i in pp.kind_passes.get(close_kind(name), ())]
    why = pp.unfused.get(name)
    if why and why.startswith("its adds and closes run in one stage"):
        return f"Spark runs its expansion: {why}"
    if closers:
        where = ", ".join(f"{q.stage} by {q.partition}" for q in closers)
        kind = close_kind(name)
        sent = "one summed write per window" if f"{name}__n" in folded_counts(program) else ""
        sent += (", " if sent else "") + "one close per window" * (kind in closes_once(program))
        return (
            f"Spark runs its closes as scheduled events in a stage of their own ({where}), "
            f"its adds sent there as writes{f' ({sent})' if sent else ''}"
            + (f": not in its adding stage's pass, {why}" if why else "")
        )
    return "its state is written, folded or read in another stage"


def forwards(pp: PassPlan) -> bool:
    """Whether the passes can forward events (``passes._plain.run_plain``): every pass runs
    handlers over log events only, and what crosses passes is only probe values, so that each
    event can carry the values it reads from pass to pass instead of meeting them in a sort."""
    if pp.schedules or pp.reason:
        return False
    passes = pp.passes
    if not any(p.serves for p in passes):
        return False
    return all(p.handlers and not p.blind and not p.feeds for p in passes)


def passes_of(program: Program, lookups: bool = True, closes: bool = True) -> PassPlan:
    """The passes of ``program``; one sequential pass, with the reason, when the planner
    cannot plan it or the passes cannot split it."""
    from ....model.errors import RestreamError
    from ....planner import plan

    try:
        the_plan = plan(program, allow_nondeterminism=True)
    except RestreamError as exc:
        return _single(program, f"the planner could not plan the program: {exc}")
    return plan_passes(program, the_plan, lookups, closes)


def layout(program: Program, partitions: int | None = None) -> dict[str, str]:
    """How the pass path will run each stage of ``program``, before any replay: what
    ``metrics.path`` will say (without the task counts), by stage."""
    pp = passes_of(program)
    shown: Any = partitions if partitions else "N"
    out: dict[str, str] = {}
    for p in pp.passes:
        for stage in p.stages or (p.stage,):
            out[stage] = p.describe(shown)
    return out


class _Unsplit(Exception):
    """Why the passes cannot split this program."""


def _key(state: Any, access: Any) -> str | None:
    """An access's key expression; a ``state.Value`` has the one key ``()``."""
    return "()" if isinstance(state, Value) else access.key


def _plan(program: Program, plan, lookups: bool, closes: bool = True) -> PassPlan:
    index = {h.name: h.index for h in program.handlers}
    info = {h.name: h for h in plan.handlers}
    scheduled = {k for h in plan.handlers for k in h.schedules}
    states = program.states
    if "?" in scheduled:
        raise _Unsplit("a schedule() whose kind is not a literal")

    def accesses(d: dict):
        for h in d["handlers"]:
            for a in info[program.handlers[h].name].accesses:
                yield h, a, _key(program.states[a.state], a)

    # 1. a draft pass per stage, partitioned as the stage is.
    drafts: list[dict] = []
    for stage in plan.stages:
        handlers = tuple(sorted(index[h] for h in stage.handlers))
        d = {
            "stage": stage.name,
            "stages": [stage.name],
            "mode": stage.mode,
            "handlers": handlers,
            "kinds": tuple(dict.fromkeys(k for h in stage.handlers for k in info[h].kinds)),
            "reason": None,
        }
        writes = [(a, k) for _h, a, k in accesses(d) if a.op != "read"]
        # Upstream states it reads by a key that is not the event's, or whole, or on scheduled
        # events (which no earlier pass sees, so none can probe for them): each partition
        # gets a copy (a state it writes too is its own, held here anyway).
        written = {a.state for a, _k in writes}
        on_scheduled = {
            a.state for h in stage.handlers if set(info[h].kinds) & scheduled for a in info[h].reads
        }
        d["copies"] = tuple(
            dict.fromkeys(
                a.state
                for h in stage.handlers
                for a in info[h].reads
                if a.state not in written
                and (
                    a.state in on_scheduled
                    or (not a.event_key and _key(states[a.state], a) != "()")
                )
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
        drafts.append(d)

    if lookups:
        lookup_stages(drafts, accesses, program, info, scheduled)
    unfused = (
        fuse_closes(drafts, accesses, program, info, (ORDER, SINGLE, BY_KEY)) if closes else {}
    )
    _fuse_readers(drafts, accesses, program, info)

    def holds(i: int, state: str) -> bool:
        d = drafts[i]
        if d["partition"] == SINGLE or d.get("element") or state in d.get("held", ()):
            return True
        return all(k == d["partition"] for _h, a, k in accesses(d) if a.state == state)

    # 2. where each state lives, and which folds it needs.
    readers: dict[str, dict[int, set]] = {}
    writers: dict[str, set[int]] = {}
    for i, d in enumerate(drafts):
        for _h, a, k in accesses(d):
            if a.op == "read":
                readers.setdefault(a.state, {}).setdefault(i, set()).add(k)
            else:
                writers.setdefault(a.state, set()).add(i)
    holder: dict[str, int] = {}  # the stage pass that holds a state whole
    serve: dict[tuple[str, str], object] = {}  # (state, key) -> stage pass or ("fold", ...)
    folds: list[tuple[str, str, int]] = []  # (state, key or BY_KEY, before pass)
    versions: dict[str, int] = {}  # state -> the fold recording its versions for copies
    final: dict[str, object] = {}
    for name in program.states:
        w = writers.get(name, set())
        r = readers.get(name, {})
        own = [i for i in w if i in r]
        if len(own) > 1:
            raise _Unsplit(f"state {name!r} is read and written by several stages")
        if own:
            o = own[0]
            if not holds(o, name):
                raise _Unsplit(f"state {name!r} is used under several keys in {drafts[o]['stage']}")
            if any(x > o for x in w):
                raise _Unsplit(f"state {name!r} is written after the stage that holds it")
            holder[name] = o
        elif len(w) == 1 and holds(next(iter(w)), name):
            holder[name] = next(iter(w))
        if not w:
            final[name] = None
            continue
        final[name] = holder.get(name)
        for i, keys in sorted(r.items()):
            if name in drafts[i]["copies"]:
                continue  # its versions reach every partition there (below)
            for k in sorted(keys, key=str):
                if i == holder.get(name):
                    continue
                if k is None:
                    raise _Unsplit(f"state {name!r} is read whole by {drafts[i]['stage']}")
                h = holder.get(name)
                if h is not None and drafts[h]["partition"] in (SINGLE, k):
                    serve[(name, k)] = h
                elif (name, k) not in serve:
                    serve[(name, k)] = ("fold", len(folds))
                    folds.append((name, k, i))
                if final[name] is None:
                    final[name] = serve[(name, k)]
        copy_readers = [i for i in r if name in drafts[i]["copies"]]
        if copy_readers:
            # The fold that records its versions, just before the first stage holding a copy.
            versions[name] = len(folds)
            folds.append((name, BY_KEY, min(copy_readers)))
            if final[name] is None:
                final[name] = ("fold", versions[name])
        if final[name] is None:
            final[name] = ("fold", len(folds))
            folds.append((name, BY_KEY, len(drafts)))

    # 3. final numbering: each fold just before the first stage that reads through it.
    order: list[tuple[str, int]] = []
    for i in range(len(drafts) + 1):
        order += [("fold", f) for f, (_s, _k, before) in enumerate(folds) if before == i]
        if i < len(drafts):
            order.append(("stage", i))
    number = {item: n for n, item in enumerate(order)}

    def at(where: object) -> int:
        return number[where] if isinstance(where, tuple) else number[("stage", where)]

    # 4. probes: reads of state that another pass holds.
    probes: list[Probe] = []
    for i, d in enumerate(drafts):
        for h in d["handlers"]:
            hinfo = info[program.handlers[h].name]
            seen = set()
            for a in hinfo.reads:
                k = _key(program.states[a.state], a)
                if holder.get(a.state) == i or final.get(a.state, 0) is None:
                    continue
                if a.state in d["copies"]:
                    continue
                if (a.state, k) in seen:
                    continue
                seen.add((a.state, k))
                if not a.event_key and k != "()":
                    raise _Unsplit(f"{hinfo.name} reads {a.state!r} by a key not of the event")
                if set(hinfo.kinds) & scheduled:
                    raise _Unsplit(f"{hinfo.name} reads upstream state on scheduled events")
                home = at(serve[(a.state, k)])
                probes.append(Probe(len(probes), a.state, k, h, hinfo.kinds, home, at(i)))

    # 5. scheduled events go to the passes whose handlers take their kind.
    kind_passes: dict[str, list[int]] = {}
    for i, d in enumerate(drafts):
        for kind in d["kinds"]:
            kind_passes.setdefault(kind, []).append(at(i))
    schedulers = [
        i
        for i, d in enumerate(drafts)
        if any(info[program.handlers[h].name].schedules for h in d["handlers"])
    ]
    if len(schedulers) > 1:
        # seq numbers a log event's scheduled events across handlers: one scheduler only.
        raise _Unsplit("several stages schedule events")
    for i in schedulers:
        for h in drafts[i]["handlers"]:
            for kind in info[program.handlers[h].name].schedules:
                for target in kind_passes.get(kind, []):
                    if target < at(i):
                        raise _Unsplit(f"kind {kind!r} is scheduled after the stage that takes it")
                    if target == at(i) and drafts[i]["partition"] == ORDER:
                        raise _Unsplit(f"stage {drafts[i]['stage']} schedules for itself, no key")

    # 6. the passes.
    fold_of = {
        name: [at(("fold", f)) for f, (s2, _k, _b) in enumerate(folds) if s2 == name]
        for name in program.states
    }
    copied_by: dict[str, list[int]] = {}  # state -> the passes that hold copies of it
    for i, d in enumerate(drafts):
        d["copies"] = tuple(name for name in d["copies"] if writers.get(name))
        for name in d["copies"]:
            copied_by.setdefault(name, []).append(at(i))
    passes = []
    for n, (what, j) in enumerate(order):
        serves = tuple(p for p in probes if p.home == n)
        if what == "fold":
            name, k, _before = folds[j]
            passes.append(
                Pass(
                    index=n,
                    stage=f"fold {name}" + ("" if k == BY_KEY else f" by {k}"),
                    mode="fold",
                    partition=k,
                    handlers=(),
                    kinds=(),
                    homes=(name,),
                    serves=serves,
                    finals=(name,) if final[name] == ("fold", j) else (),
                    probe_kinds=tuple(dict.fromkeys(kd for p in serves for kd in p.kinds)),
                    versions_to=tuple(copied_by[name]) if versions.get(name) == j else (),
                )
            )
            continue
        d = drafts[j]
        homes = tuple(s for s, h in holder.items() if h == j)
        blind, feeds = {}, {}
        for name in dict.fromkeys(a.state for _h, a, _k in accesses(d) if a.op != "read"):
            targets = tuple(fold_of[name])
            if name in versions and at(("fold", versions[name])) < n:
                raise _Unsplit(f"state {name!r} is written after a stage that reads it whole")
            if holder.get(name) == j:
                if targets:
                    feeds[name] = targets
            else:
                h = holder.get(name)
                blind[name] = tuple(sorted({*targets, *([at(h)] if h is not None else [])}))
        own_kinds = set(d["kinds"])
        passes.append(
            Pass(
                index=n,
                stage=d["stage"],
                mode=d["mode"],
                partition=d["partition"],
                handlers=d["handlers"],
                kinds=d["kinds"],
                homes=homes,
                reason=d["reason"],
                serves=serves,
                consumes=tuple(p for p in probes if p.reader == n),
                blind=blind,
                feeds=feeds,
                finals=tuple(s for s in homes if final.get(s) == j),
                probe_kinds=tuple(
                    dict.fromkeys(kd for p in serves for kd in p.kinds if kd not in own_kinds)
                ),
                stages=tuple(d["stages"]),
                copies=d["copies"],
                lookup=lookup_of(d, probes, n),
                elements=_elements(d, homes, accesses) if d.get("element") else {},
                closes=tuple(d.get("closes", ())),
            )
        )
    # Who sends what to whom: probe values, or writes and scheduled events (after which an
    # event must wait for its own runs' writes).
    final_passes = []
    for p in passes:
        sends: dict[int, str] = {q.reader: "probes" for q in p.serves}
        for targets in (*p.blind.values(), *p.feeds.values()):
            for t in targets:
                sends[t] = "writes"
        for t in p.versions_to:
            sends[t] = "versions"
        for h in p.handlers:
            for kind in info[program.handlers[h].name].schedules:
                for t in kind_passes.get(kind, ()):
                    if t != p.index:
                        sends[t] = "writes"
        made = tuple(
            dict.fromkeys(k for h in p.handlers for k in info[program.handlers[h].name].schedules)
        )
        final_passes.append(replace(p, sends=sends, schedules=made))
    return PassPlan(
        tuple(final_passes),
        {k: tuple(v) for k, v in kind_passes.items()},
        None,
        bool(schedulers),
        unfused,
    )


def _elements(d: dict, homes: tuple[str, ...], accesses: Any) -> dict[str, int]:
    """Of a pass partitioned by an element of its states' keys: each held state whose keys
    are tuples with that element, and the element's position in them (the planner found it
    common to every key of the state, ``planner.ir._own_partition``)."""
    partition = d["partition"]
    found = {}
    for name in homes:
        own = [a for _h, a, _k in accesses(d) if a.state == name]
        if not own or all(k == partition for _h, a, k in accesses(d) if a.state == name):
            continue
        if any(a.parts is None for a in own):
            continue
        for i in range(min(len(a.parts) for a in own)):
            if all(a.parts[i][0] == partition for a in own):
                found[name] = i
                break
    return found


def _fuse_readers(drafts: list[dict], accesses: Any, program: Program, info: dict) -> None:
    """Run a stage that reads, emits and writes blindly inside the pass that holds one of
    its reads.

    A stateless stage that schedules nothing (the rule that reads the counters and flags, or
    one that charges a looked-up team) would be a pass of its own, fed by a probe row per
    read. When the last stage it reads from holds that state under the very key it is read
    by, the reader can run in that stage's pass instead, declared order per event, and read
    it there: a pass, a shuffle of the log and a probe row per event saved. Its other reads
    come from earlier passes, as probes. What it writes (states neither it nor that stage
    reads or writes otherwise) travels from there as its writes did from its own pass.
    """
    writers: dict[str, list[int]] = {}
    for i, d in enumerate(drafts):
        for _h, a, _k in accesses(d):
            if a.op != "read":
                writers.setdefault(a.state, []).append(i)
    for d in drafts:
        if d["mode"] != "stateless" or d["partition"] != ORDER or d.get("fused"):
            continue
        ops = [(h, a, k) for h, a, k in accesses(d) if a.op == "read"]
        written = {a.state for _h, a, _k in accesses(d) if a.op != "read"}
        if written & {a.state for _h, a, _k in ops}:
            continue
        if any(info[program.handlers[h].name].schedules for h in d["handlers"]):
            continue
        holders = {}
        for _h, a, k in ops:
            w = set(writers.get(a.state, ()))
            if len(w) != 1:
                holders = None
                break
            (j,) = w
            part = drafts[j]["partition"]
            if part in (ORDER, SINGLE, BY_KEY) or drafts[j].get("fused"):
                holders = None
                break
            if all(k2 == part for _h2, a2, k2 in accesses(drafts[j]) if a2.state == a.state):
                holders.setdefault(j, set()).add(k == part)
            else:
                holders = None
                break
        if not holders:
            continue
        last = max(holders)
        if not all(holders[last]):
            continue
        host = drafts[last]
        if written & {a.state for _h, a, _k in accesses(host)}:
            continue
        host["handlers"] = tuple(sorted((*host["handlers"], *d["handlers"])))
        host["kinds"] = tuple(dict.fromkeys((*host["kinds"], *d["kinds"])))
        host["stage"] = f"{host['stage']}, {d['stage']}"
        host["stages"] = [*host["stages"], *d["stages"]]
        d["fused"] = last
    drafts[:] = [d for d in drafts if "fused" not in d]
