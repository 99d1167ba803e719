"""The plan as text: the readable summary that ``restream plan`` prints."""

from __future__ import annotations

from .ir import Access, Plan

__all__ = ["plan_text"]

_OPS = {
    "read": "reads",
    "overwrite": "writes",
    "merge": "merges into",
    "future": "writes ahead",
    "delete": "deletes",
}


def _access(a: Access) -> str:
    target = (
        f"{a.state}[{a.key}]"
        if a.key is not None
        else (f"{a.state}.value" if a.event_key else f"{a.state} (whole)")
    )
    via = f" via {a.via}()" if a.via else ""
    flag = "" if a.event_key or a.key is None else "  <- key not from the event"
    return f"{_OPS[a.op]} {target} (line {a.lineno}{via}){flag}"


def _table(rows: list[list[str]], right: set[int] = frozenset()) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for row in rows:
        cells = [
            c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths))
        ]
        out.append("  " + "  ".join(cells).rstrip())
    return out


def plan_text(plan: Plan) -> str:
    """A readable summary of ``plan``: handlers, edges, stages, critical path, data, warnings."""
    lines = [
        f"Plan of {plan.program}: {len(plan.handlers)} handler(s), {len(plan.states)} state(s), "
        f"{len(plan.stages)} stage(s)",
        "",
        "Handlers",
    ]
    for h in plan.handlers:
        lines.append(f"  {h.name} on {', '.join(h.kinds)} (line {h.lineno})")
        for a in h.accesses:
            lines.append(f"    {_access(a)}")
        if h.emits:
            lines.append(f"    emits {', '.join(h.emits)}")
        if h.schedules:
            lines.append(f"    schedules {', '.join(h.schedules)}")
        if not (h.accesses or h.emits or h.schedules):
            lines.append("    touches no state")
    lines += ["", "Dependencies"]
    if plan.edges:
        rows = [[e.src, "->", e.dst, f"({e.state})"] for e in plan.edges]
        lines += _table(rows)
    else:
        lines.append("  none: no handler reads what another writes")
    lines += ["", "Stages, in order"]
    for i, s in enumerate(plan.stages, 1):
        mode = s.label + (f" by {s.partition_key}" if s.partition_key else "")
        lines.append(f"  {i}. {s.name}: {mode}")
        if s.label == "per event":
            lines.append("     why: reads only what earlier stages wrote; events run in any split")
        if s.reason:
            lines.append(f"     why: {s.reason}")
        if s.owns:
            lines.append(f"     writes: {', '.join(s.owns)}")
        for r in s.reads_upstream:
            key = f"[{r.key}]" if r.key is not None else ""
            how = "as-of lookup" if r.event_key else "needs all of it"
            lines.append(
                f"     reads upstream {r.state}{key} in {r.handler} (line {r.lineno}): {how}"
            )
    lines += ["", "Critical path: " + (" -> ".join(plan.critical_path) or "(empty)")]
    if plan.data is not None:
        lines += _data_lines(plan)
    if plan.windows:
        lines += [
            "",
            "Windows (serial engine: native runs them fused; Spark: a sliding window its stage"
            " holds alone fused, a closing window keyed like its adding stage fused with its"
            " closes, one keyed otherwise narrow in a close pass by its key (a row per add),"
            " the others as their expansion; --engine spark and metrics.path say which"
            " and why)",
        ]
        lines += [f"  {name}: {how}" for name, how in plan.windows]
    if plan.warnings:
        lines += ["", "Warnings"]
        for w in plan.warnings:
            where = f"line {w.lineno}: " if w.lineno else ""
            lines.append(f"  {where}{w.message} [{w.code}]")
    return "\n".join(lines) + "\n"


def _data_lines(plan: Plan) -> list[str]:
    """The plan's data section: each stage's work and heaviest key, the hot keys, the longest
    chain and the predicted speedups, measured on a log."""
    data = plan.data
    lines: list[str] = []
    weighting = (
        f"runs weighted by handler cost measured on the first {data.sample_events:,} events"
        if data.weighting == "measured"
        else "every handler run weighs 1"
    )
    lines += ["", f"Data critical path on {data.events:,} events ({weighting})"]
    rows = [["stage", "mode", "runs", "heaviest key", "share", "keys"]]
    for s in data.per_stage:
        rows.append(
            [
                s.stage,
                plan.stage(s.stage).label,
                f"{s.work:,}",
                s.heaviest_key if s.heaviest_key is not None else "-",
                f"{s.heaviest_share:.1%}",
                f"{s.keys:,}",
            ]
        )
    lines += _table(rows, right={2, 4, 5})
    for s in data.per_stage:
        if s.hot_keys:
            hot = ", ".join(f"{k} ({n:,})" for k, n in s.hot_keys[:5])
            lines.append(f"  hot keys of {s.stage}: {hot}")
    lines.append(f"  longest chain the plan allows: {data.chain_bound:,} handler runs")
    lines.append(
        "  predicted speedup: " + ", ".join(f"P={p}: {x:.2f}" for p, x in data.predicted_speedup)
    )
    for note in data.notes:
        lines.append(f"  note: {note}")
    return lines
