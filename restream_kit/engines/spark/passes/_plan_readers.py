"""Readers that run in the pass of a stage they read from (``passes._plan_build``).

A stateless stage reading states another stage holds under the very key it reads them by
joins that stage's pass (:func:`fuse_readers`), instead of being a pass of its own fed by a
probe row per read.
"""

from __future__ import annotations

from typing import Any

from ....model.program import Program
from ._plan_types import BY_KEY, ORDER, SINGLE

__all__ = ["fuse_readers"]


def fuse_readers(drafts: list[dict], accesses: Any, program: Program, info: dict) -> None:
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
