"""The per-kind runner of a pass task: one generated function per kind of event, running its
handlers and the probes it serves in declaration order (see ``passes._task``)."""

from __future__ import annotations

import struct
from typing import Any

from .._codec import MISSING
from ._rows import PROBE
from ._stores import apply_op

__all__ = ["kind_runner"]


def kind_runner(kind, acts, program, rt, stores, probe_values, pks_now):
    """A function running one kind's actions (handlers, probes) in declaration order.

    Generated once per task and kind, so that an event costs a call per handler and nothing
    for the cases it does not have (no probe, no incoming write).
    """
    env: dict[str, Any] = {
        "rt": rt,
        "stores": stores,
        "defaults": rt.defaults,
        "probe_values": probe_values,
        "pks_now": pks_now,
        "apply_op": apply_op,
        "MISSING": MISSING,
        "_fill": _fill,
        "PROBE": PROBE,
        "pack": struct.pack,
    }
    lines = ["def run(ev, pos, i, writes):"]
    lines.append("    if writes:")
    lines.append("        w = 0; nw = len(writes); cut = len(pos[3])")
    readers: dict[int, list] = {}
    for n, (h, what, target, slots_h) in enumerate(acts):
        lines.append("    if writes:")
        lines.append(f"        while w < nw and writes[w][0][cut:cut + 4] < M{n}:")
        lines.append("            _s, _st, _k, _op = writes[w]")
        lines.append("            apply_op(stores[_st], defaults[_st], _k, _op, True)")
        lines.append("            w += 1")
        env[f"M{n}"] = struct.pack(">I", h)
        if what == 0:
            env[f"N{n}"] = program.handlers[h].name
            lines.append(f"    rt.hidx = {h}; rt.handler = N{n}; rt.calls = 0; rt.rb = None")
            if rt.copies is not None:  # the copies held here, as of this run (its bytes, kept)
                env["ADVANCE"] = rt.copies.advance
                lines.append("    ADVANCE(rt.run_key())")
            if slots_h:
                env[f"S{n}"] = slots_h
                lines.append(f"    _fill(stores, S{n}, probe_values, ev)")
            if rt.history is not None and (record := rt.history.hook(h)) is not None:
                env[f"H{n}"] = record  # after the fill: the value the handler's read finds
                lines.append(f"    H{n}(ev, pos)")
            env[f"F{n}"] = target
            if rt.journal is not None:
                lines.append(f"    rt.guarded(F{n}, ev)")
            else:
                lines.append(f"    F{n}(ev)")
        else:
            slot, state, fn, reader = target
            env[f"D{n}"] = stores[state]
            env[f"K{n}"] = fn
            readers.setdefault(reader, []).append((slot, n))
            lines.append("    try:")
            lines.append(f"        v{n} = D{n}.get(K{n}(ev), MISSING)")
            lines.append("    except Exception:")
            lines.append(f"        v{n} = MISSING")
    lines.append("    if writes:")
    lines.append("        while w < nw:")
    lines.append("            _s, _st, _k, _op = writes[w]")
    lines.append("            apply_op(stores[_st], defaults[_st], _k, _op, True)")
    lines.append("            w += 1")
    for reader, items in readers.items():
        values = ", ".join(f"{slot}: v{n}" for slot, n in items)
        lines.append("    if i is None:")
        lines.append("        pk = 'N'")
        lines.append("    elif type(i) is int:")
        lines.append(f"        pk = pks_now[{reader}][i]")
        lines.append("    else:")
        lines.append(f"        pk = i[{reader}]")
        lines.append(f"    rt.out.append((PROBE, {reader}, pk, pos, {{{values}}}))")
    namespace = dict(env)
    exec(compile("\n".join(lines), f"<pass runner {kind}>", "exec"), namespace)
    return namespace["run"]


def _fill(stores: dict, slots: list, values: dict, ev: Any) -> None:
    """Put the values probed for this run where its reads of upstream state find them."""
    cleared = set()
    for slot, state, fn in slots:
        d = stores[state]
        if state not in cleared:
            d.clear()
            cleared.add(state)
        value = values.get(slot, MISSING)
        if value is not MISSING:
            try:
                d[fn(ev)] = value
            except Exception:  # noqa: BLE001 - the handler's own read raises it
                pass
