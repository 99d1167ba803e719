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

from dataclasses import replace
from typing import Any

from ....compiler.expand_windows import close_kind
from ....model.errors import RestreamError
from ....model.program import Program
from ....planner import plan as plan_program
from ....runtime._native_plan import lazy_session
from ....runtime.windows import native_plan
from ._lookup_stages import packed_straight
from ._narrow_sessions import folded_sessions
from ._plan_build import Unsplit, build
from ._plan_types import BY_KEY, ORDER, SINGLE, UNFUSED_RUN, Pass, PassPlan, Probe
from ._window_shapes import closes_once, folded_counts, pass_windows

__all__ = [
    "Probe",
    "Pass",
    "PassPlan",
    "plan_passes",
    "passes_of",
    "layout",
    "forwards",
    "ORDER",
    "SINGLE",
    "BY_KEY",
    "UNFUSED_RUN",
]


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
        pp = build(program, plan, lookups, closes)
        if any(p.lookup for p in pp.passes) and not (forwards(pp) and packed_straight(pp)):
            pp = build(
                program, plan, False, closes
            )  # (its events could not travel with their values)
    except Unsplit as exc:
        pp = _single(program, str(exc))
    return _window_notes(program, pp)


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
        for name in p.narrow:
            notes[name] = (True, _narrow_note(program, pp, p, name))
        for name in p.closes:
            how = "in the serial engine's loop" if looped else "as its expansion"
            notes[name] = (
                True,
                f"its adds and closes in this pass, by {p.partition}, {how}: no close pass, "
                "no write sent",
            )
        lazy = tuple(name for name in p.closes if looped and lazy_session(program, name))
        passes.append(replace(p, windows=names, window_notes=notes, lazy=lazy))
    return replace(pp, passes=tuple(passes))


def _narrow_note(program: Program, pp: PassPlan, p: Pass, name: str) -> str:
    """How window ``name`` runs in its close pass ``p`` fed narrow rows (``passes._narrow``)."""
    adders = ", ".join(q.stage for q in pp.passes if q.narrow_to.get(name) == p.index)
    why = pp.unfused.get(name, "")
    summed = program.windows[name].agg == "count" and f"{name}__n" in folded_counts(program)
    rows = "a row per window and task, its adds summed" if summed else "a row per add"
    how = "in the serial engine's loop"
    if folded_sessions(program, (name,)):
        rows = "a row per run of a key's adds less than the gap apart, in each task"
        how = "swept from the runs, in position order"
    return (
        f"its adds sent from {adders} as narrow rows ({rows}), its closes in this pass, by "
        f"{p.partition}, {how}: no write or close sent"
        + (f" (not in its adding stage's pass: {why})" if why else "")
    )


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
    try:
        the_plan = plan_program(program, allow_nondeterminism=True)
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
