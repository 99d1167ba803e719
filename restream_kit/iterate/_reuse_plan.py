"""The plan of a re-replay: which stages re-run, and which recorded probe serves each of
their reads of a reused state (``restream_kit.iterate.reuse``).

:func:`prepare` takes :func:`restream_kit.history.identity.decide`'s decision and widens it
until every read of reused state has a probe of the recorded run (re-running more is always
exact), then refuses what scheduled events would make inexact (:func:`_check_timing`).
:func:`served_array` and :func:`served_list` are a probe's values as a re-run handler reads
them: a column for the column path, a list by run number for the loop.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..engines.options import EngineOptions
from ..history.probes import ABSENT, ReadSites, Uncovered, signature
from ..history.recorder import History
from ..io.log import Log
from ..model.program import Program

__all__ = [
    "CannotReuse",
    "Prepared",
    "check_usable",
    "pick",
    "prepare",
    "served_array",
    "served_list",
]


class CannotReuse(Exception):
    """Why a recorded run cannot serve this re-replay (the replay then runs in full)."""


def _decide(program: Program, hist: History, plan, force: set[str]):
    """:func:`identity.decide` (``force``: stages to re-run whatever their identity),
    re-running also the writers of a state that a handler of RUN that is not reused (removed
    or changed) wrote: RUN's values of that state hold its part too."""
    from ..history.identity import decide

    writers = {state: set(handlers) for state, handlers in hist.writers.items()}
    stages = {s.name: s for s in plan.stages}
    force = set(force)
    while True:
        decision = decide(program, hist.identities, plan=plan, force=force)
        reused = {h for s in decision.reused_stages for h in stages[s].handlers}
        more = set()
        for name in decision.reused_stages:
            for h in stages[name].handlers:
                for access in plan.handler(h).writes:
                    if writers.get(access.state, set()) - reused:
                        more.add(name)
        if not more:
            return decision
        force |= more


def check_usable(program: Program, log: Log, label: str, hist, options: EngineOptions) -> None:
    """Raise :class:`CannotReuse` when run ``label``'s history ``hist`` cannot serve a
    re-replay of ``program`` over ``log`` with ``options``."""
    if hist is None:
        raise CannotReuse(
            f"{label} kept no history (replay it with history=True, or restream replay --history)"
        )
    if hist.log_fingerprint != log.fingerprint:
        raise CannotReuse(f"{label} replayed another log")
    if hist.unusable:
        raise CannotReuse(f"its history cannot place every write ({hist.unusable})")
    for option in ("checkpoint", "start_from", "resume"):
        if getattr(options, option):
            raise CannotReuse(f"{option} is given (a re-replay is one whole replay)")
    if options.on_error != "stop":
        raise CannotReuse("on_error is not 'stop' (rolled back runs would have to be redone)")


def pick(value: Any, fallback: Any) -> Any:
    return fallback if value is ABSENT else value


def _typed_default(encoding: str, default: Any) -> bool:
    want = {"int64": int, "double": float, "string": str, "bool": bool}.get(encoding)
    return default is None or (want is not None and type(default) is want)


def served_array(probe, default: Any) -> pa.Array | None:
    """A probe's values with the state's default where the store had none, as one Arrow
    array, or None when the values have no plain type of their own (codec) or another type
    than the default."""
    n = len(probe.value)
    if probe.absent is not None and pc.all(probe.absent).as_py() and n:
        if type(default) not in (int, float, str, bool):
            return None
        return pa.array([default] * n)
    if probe.encoding == "codec" or probe.encoding.startswith("columns:"):
        return None
    if probe.absent is None or not pc.any(probe.absent).as_py():
        return probe.value
    if not _typed_default(probe.encoding, default):
        return None
    return pc.if_else(probe.absent, pa.scalar(default, probe.value.type), probe.value)


def served_list(probe, site, default: Any) -> list:
    """A site's values for the loop: its read's values, ABSENT kept for ``get(k, fallback)``."""
    if site.default:
        arr = served_array(probe, default)
        if arr is not None:
            return arr.to_pylist()
        return [default if v is ABSENT else v for v in probe.python_values()]
    return probe.python_values()


class Prepared:
    """What re-runs, and the read sites of reused state that probes serve."""

    def __init__(self, decision, sites, probes, rerun, reused, reused_states, notes):
        self.decision = decision
        self.sites = sites
        self.probes = probes  # site number -> Probe
        self.rerun = rerun
        self.reused = reused
        self.reused_states = reused_states
        self.notes = notes

    def serve(self, program, log) -> ReadSites:
        """The tree transform that serves the sites (``compile_program(transform=...)``)."""
        handlers = {h: self.reused_states for h in self.rerun}
        return ReadSites(program, handlers, log.columns, serve=True)


def prepare(program, log, hist, plan) -> Prepared:
    """Decide what re-runs and find its reads of reused state, each served by a probe.

    A read no probe answers (or any other use of reused state) makes the stages that write
    that state re-run too, and the decision is taken again: re-running is always exact."""
    from ..compiler.compile import _rewrite

    stages = {s.name: s for s in plan.stages}
    stage_of = {h: s.name for s in plan.stages for h in s.handlers}
    force: set[str] = set()
    notes: list[str] = []
    while True:
        decision = _decide(program, hist, plan, force)
        if decision.full:
            raise CannotReuse(decision.reason + ("" if not notes else f" ({'; '.join(notes)})"))
        rerun = [h for s in decision.rerun_stages for h in stages[s].handlers]
        reused = {h for s in decision.reused_stages for h in stages[s].handlers}
        reused_states = {a.state for h in reused for a in plan.handler(h).writes}
        prep = Prepared(decision, [], {}, rerun, reused, reused_states, notes)
        serve = prep.serve(program, log)
        try:
            serve(_rewrite(program))
            for site in serve.sites:
                sig = signature(program, plan, site.handler, site.state, site.text)
                prep.probes[site.number] = hist.probes.get(sig)
                if prep.probes[site.number] is None:
                    raise Uncovered(
                        site.state,
                        f"no recorded read of {site.state}[{site.text}] at the place of "
                        f"handler {site.handler} (line {site.lineno})",
                    )
        except Uncovered as why:
            more = {
                stage_of[h.name]
                for h in plan.handlers
                if any(a.state == why.state for a in h.writes)
            } - set(decision.rerun_stages)
            if not more:
                raise CannotReuse(str(why)) from None
            force |= more
            notes.append(f"{', '.join(sorted(more))} re-ran too: {why}")
            continue
        prep.sites = serve.sites
        _check_timing(plan, hist, prep)
        return prep


def _check_timing(plan, hist, prep: Prepared) -> None:
    """Refuse a re-replay that scheduled events would make inexact (see ``docs/iterate.md``).

    A re-replay runs the re-run handlers on log events only, so none may run on a kind that
    is scheduled, and none may schedule; every handler of RUN that scheduled must be reused,
    so that the scheduled events (and the timed writes due by the last of them) are RUN's.
    A handler that runs on scheduled events and schedules in turn (a chain) is refused too:
    rows are merged by (ts, lsn, seq), which is the order events ran only without chains.
    """
    mine = {h.name: set(h.schedules) for h in plan.handlers if h.schedules}
    kinds = set().union(*mine.values(), *map(set, hist.schedulers.values()))
    if "?" in kinds:
        who = sorted(h for h, k in {**hist.schedulers, **mine}.items() if "?" in k)
        raise CannotReuse(f"{who[0]} schedules events of a kind that is not a literal")
    for h in plan.handlers:
        if mine.get(h.name) and set(h.kinds) & kinds:
            raise CannotReuse(
                f"{h.name} runs on scheduled events and schedules more (a chain of scheduled "
                "events, whose order a re-replay does not keep)"
            )
    for name in prep.rerun:
        info = plan.handler(name)
        if mine.get(name):
            raise CannotReuse(
                f"{name} re-runs and schedules events (a re-replay runs log events only)"
            )
        if set(info.kinds) & kinds:
            kind = sorted(set(info.kinds) & kinds)[0]
            raise CannotReuse(
                f"{name} re-runs and runs on scheduled events ({kind!r}); "
                "a re-replay runs log events only"
            )
    gone = sorted(set(hist.schedulers) - prep.reused)
    if gone:
        raise CannotReuse(f"{gone[0]} of the recorded run scheduled events and is not reused")
