"""Stage identities, and which stages of an edited program a recorded run lets us reuse.

A stage's identity (``docs/iterate.md``) hashes what decides its handler runs: its handlers'
code after window expansion (without line numbers) and the helpers they call, the state they
touch, the parameters that reach them, their kinds and which handlers of upstream stages run
before them on the same kinds, and the identities of its upstream stages. Equal identities on
the same log mean the same reads, writes, rows and schedules at the same order positions.

:func:`decide` compares two programs' identities stage by stage: the stages to re-run are
those whose identity changed, closed downstream and closed under "writes a state a re-run
stage writes"; the rest may be read from the recorded run's history.
"""

from __future__ import annotations

import ast
import hashlib
import json
from dataclasses import dataclass

from ..model.params import names_used
from ..model.program import Program

__all__ = ["stage_identities", "Reuse", "decide"]


def _dump(node: ast.AST) -> str:
    return ast.dump(node, annotate_fields=False, include_attributes=False)


def stage_identities(program: Program, plan=None) -> dict[str, str]:
    """The identity (hex SHA-256) of every stage of ``program``'s plan, by stage name."""
    from .. import planner

    plan = plan or planner.plan(program, allow_nondeterminism=True)
    functions = {n.name: n for n in program.module_ast.body if isinstance(n, ast.FunctionDef)}
    used = names_used(program.module_ast)
    states = {s.name: (s.kind, s.default_repr) for s in plan.states}
    params = {p.variable: (p.name, repr(p.default)) for p in program.params.values()}
    order = [h.name for h in program.handlers]
    kinds = {h.name: set(h.kinds) for h in program.handlers}
    out: dict[str, str] = {}
    for stage in plan.stages:
        upstream_handlers = {
            h for s in plan.stages if s.name in _ancestors(plan, stage.name) for h in s.handlers
        }
        parts: list = []
        for name in stage.handlers:
            names = used.get(name, set())
            info = plan.handler(name)
            before = [
                h
                for h in order[: order.index(name)]
                if h in upstream_handlers and kinds[h] & kinds[name]
            ]
            parts.append(
                {
                    "handler": _dump(functions[name]),
                    "helpers": sorted(_dump(functions[f]) for f in names if f in functions),
                    "states": sorted(
                        (a.state, *states.get(a.state, ("?", "?"))) for a in info.accesses
                    ),
                    "params": sorted(params[v] for v in names if v in params),
                    "kinds": sorted(kinds[name]),
                    "after": before,
                }
            )
        parts.append(sorted(out[u] for u in stage.upstream))
        text = json.dumps(parts, sort_keys=True, default=str)
        out[stage.name] = hashlib.sha256(text.encode()).hexdigest()
    return out


def _ancestors(plan, stage: str) -> set[str]:
    by_name = {s.name: s for s in plan.stages}
    seen: set[str] = set()
    todo = list(by_name[stage].upstream)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(by_name[name].upstream)
    return seen


@dataclass(frozen=True)
class Reuse:
    """What a re-replay can take from a recorded run, and why not more."""

    reused_stages: tuple[str, ...]
    rerun_stages: tuple[str, ...]
    reason: str | None  # why nothing (or not everything unchanged) is reused

    @property
    def full(self) -> bool:
        return not self.reused_stages


def decide(
    program: Program,
    recorded: dict[str, str],
    *,
    same_log: bool = True,
    plan=None,
    force: frozenset[str] | set[str] = frozenset(),
) -> Reuse:
    """Which stages of ``program`` a run with stage identities ``recorded`` lets us reuse.

    ``force``: stages to re-run whatever their identity (their recorded state is unusable).
    """
    from .. import planner

    plan = plan or planner.plan(program, allow_nondeterminism=True)
    names = tuple(s.name for s in plan.stages)
    if not same_log:
        return Reuse((), names, "the recorded run replayed another log: replaying in full")
    mine = stage_identities(program, plan)
    recorded_ids = set(recorded.values())
    rerun = {s for s in names if mine[s] not in recorded_ids} | set(force)
    writes = {
        s.name: {a.state for h in s.handlers for a in plan.handler(h).writes} for s in plan.stages
    }
    changed = True
    while changed:
        changed = False
        for s in plan.stages:
            if s.name in rerun:
                continue
            if set(s.upstream) & rerun or any(writes[s.name] & writes[r] for r in rerun):
                rerun.add(s.name)
                changed = True
    reused = tuple(s for s in names if s not in rerun)
    reason = None
    if not reused:
        reason = "every stage changed or is downstream of a change: replaying in full"
    return Reuse(reused, tuple(s for s in names if s in rerun), reason)
