"""Stages partitioned by a key read from an upstream state: which they are, from the plan.

``charge`` writes ``team_hour[team_of[e.src]]`` and ``busy`` reads it by the same key. The
planner calls the first stateless and the second a broadcast read; but the key is a read of
``team_of``, which an earlier pass holds by the event's own key, so that pass can look it up
for each event and send the event on with its value (``passes._lookups``). :func:`lookup_stages`
merges such stages, in the passes' drafts, into one partitioned by the looked-up key
(``passes._plan`` then plans it as any partitioned stage, its reads of ``team_of`` as probes);
:func:`packed_straight` says whether the passes so planned can send it its events.
"""

from __future__ import annotations

import ast
from typing import Any

from ....model.program import Program
from ....model.state import Value

__all__ = ["lookup_stages", "lookup_of", "packed_straight"]


def _only_looks_up(hinfo: Any, used: set, key: str, upstream: str, inner: str) -> bool:
    """Whether handler ``hinfo`` reads ``upstream[inner]`` by the event's key, uses the
    states ``used`` only under the looked-up ``key``, touches nothing else and schedules
    nothing (:func:`lookup_stages`)."""

    def reads_upstream(a: Any) -> bool:
        return a.state == upstream and a.op == "read" and a.event_key and a.key == inner

    return (
        any(reads_upstream(a) for a in hinfo.accesses)
        and all((a.state in used and a.key == key) or reads_upstream(a) for a in hinfo.accesses)
        and not hinfo.schedules
    )


def _looked_up(key: str, program: Program) -> tuple[str, str] | None:
    """``(state, inner key)`` when the key expression ``key`` is a read of a program state,
    such as ``team_of[e.src]``; else None."""

    try:
        node = ast.parse(key, mode="eval").body
    except SyntaxError:
        return None
    if not (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)):
        return None
    state = node.value.id
    if state not in program.states or isinstance(program.states[state], Value):
        return None
    return state, ast.unparse(node.slice)


def lookup_stages(
    drafts: list[dict], accesses: Any, program: Program, info: dict, scheduled: set
) -> None:
    """Run the stages that use a state only under a key read from an upstream state as one
    pass partitioned by that key.

    ``charge`` writes ``team_hour[team_of[e.src]]`` and ``busy`` reads it by the same key: a
    stateless stage and a broadcast read, which would ship every write to a fold and copy its
    versions into every partition of ``busy``. But the key is a read of ``team_of``, which an
    earlier pass holds by the event's own key (``e.src``): that pass can look it up for each
    event, as it serves any probe, and send the event on with the value. Partitioned by that
    value, one pass holds ``team_hour`` whole per key and runs ``charge`` and ``busy``
    together, declared order per event, their writes and reads local.

    It applies when every access of those states anywhere is under that key; the stages using
    them do nothing else but read the upstream state by the event's key, in every handler
    (each handler's read gives the event's value there); one stage writes the upstream state,
    partitioned by that key, before them; no handler of their kinds writes it (so every
    handler of an event reads one value); and nothing they run is scheduled or schedules.
    """
    keyed: dict[str, set[str]] = {}  # looked-up key -> the states used under it
    for d in drafts:
        for _h, a, k in accesses(d):
            if k is not None and k != "()" and not a.event_key:
                keyed.setdefault(k, set()).add(a.state)
    for key, used in keyed.items():
        found = _looked_up(key, program)
        if found is None or any(isinstance(program.states[name], Value) for name in used):
            continue
        upstream, inner = found
        users = [
            i for i, d in enumerate(drafts) if any(a.state in used for _h, a, _k in accesses(d))
        ]
        writers = [
            i
            for i, d in enumerate(drafts)
            if any(a.state == upstream and a.op != "read" for _h, a, _k in accesses(d))
        ]
        if len(writers) != 1 or writers[0] in users or writers[0] > min(users):
            continue
        home = drafts[writers[0]]
        if home["partition"] != inner or home.get("fused"):
            continue
        if any(k != inner for _h, a, k in accesses(home) if a.state == upstream):
            continue
        if any(k != key for d in drafts for _h, a, k in accesses(d) if a.state in used):
            continue
        kinds = {kind for i in users for kind in drafts[i]["kinds"]}
        if kinds & scheduled:
            continue
        handlers = [h for i in users for h in drafts[i]["handlers"]]

        hinfos = [info[program.handlers[h].name] for h in handlers]
        if not all(_only_looks_up(hi, used, key, upstream, inner) for hi in hinfos):
            continue
        if any(drafts[i]["mode"] not in ("stateless", "broadcast-read") for i in users):
            continue
        if any(
            set(info[h.name].kinds) & kinds
            for h in program.handlers
            if any(a.state == upstream and a.op != "read" for a in info[h.name].accesses)
        ):
            continue
        merged = drafts[users[-1]]
        ordered = tuple(sorted(handlers))
        merged.update(
            stage=", ".join(drafts[i]["stage"] for i in users),
            stages=[stage for i in users for stage in drafts[i]["stages"]],
            mode="partitioned",
            handlers=ordered,
            kinds=tuple(dict.fromkeys(k for h in ordered for k in program.handlers[h].kinds)),
            partition=key,
            copies=(),
            lookup=(upstream, inner),
        )
        drafts[:] = [d for i, d in enumerate(drafts) if i not in users[:-1]]
        return lookup_stages(drafts, accesses, program, info, scheduled)  # (indexes moved)


def lookup_of(d: dict, probes: list, n: int) -> tuple:
    """A pass partitioned by a looked-up key: the upstream state, its key, and the probe
    slots of the pass's reads of it, in handler order (an event's value is its first)."""
    if "lookup" not in d:
        return ()
    upstream, inner = d["lookup"]
    slots = sorted(
        (p.handler, p.slot)
        for p in probes
        if p.reader == n and p.state == upstream and p.key == inner
    )
    return (upstream, inner, tuple(slot for _h, slot in slots))


def packed_straight(pp: Any) -> bool:
    """Whether each pass partitioned by a looked-up key can take its events straight from
    the pass that looks the key up: no pass between them takes events of its kinds (which
    would have to run before it, on the way)."""
    for p in pp.passes:
        if not p.lookup:
            continue
        homes = {q.home for q in p.consumes if q.slot in p.lookup[2]}
        if len(homes) != 1:
            return False
        (home,) = homes
        between = pp.passes[home + 1 : p.index]
        if any(set(q.event_kinds) & set(p.kinds) for q in between):
            return False
    return True
