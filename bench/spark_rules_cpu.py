"""CPU time of a replay on this machine, by process: the bench's own (the driver, or the
whole serial replay), Spark's JVM and its Python workers (``bench/spark_rules.py``).

On a shared machine a replay's wall time says as much about the other work as about the
replay; its CPU time changes least. The JVM and the workers are this process's descendants
on a local master, so their CPU is read from ``/proc`` (user and system time, with that of
children they reaped): on a machine of ``c`` free cores, a replay whose work parallelizes
perfectly takes its CPU time over ``c``, so ``c`` times serial's CPU over Spark's is the
ratio Spark could reach there (``bound``). Linux only; elsewhere every figure is None.
"""

from __future__ import annotations

import os

__all__ = ["tree_cpu", "cpu_spent", "bound"]

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(pid: str) -> tuple[int, str, float, float] | None:
    """(parent, name, own CPU, own plus reaped children's CPU) of process ``pid``."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    name = text[text.index("(") + 1 : text.rindex(")")]
    rest = text[text.rindex(")") + 2 :].split()
    own = (int(rest[11]) + int(rest[12])) / _TICK
    return int(rest[1]), name, own, own + (int(rest[13]) + int(rest[14])) / _TICK


def tree_cpu() -> dict[str, float] | None:
    """CPU seconds so far of this process (``driver``), of the JVMs below it (``jvm``) and of
    every other process below those (``workers``); None where ``/proc`` is not there."""
    if not os.path.isdir("/proc/self"):
        return None
    children: dict[int, list] = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            got = _stat(pid)
            if got is not None:
                children.setdefault(got[0], []).append((int(pid), got[1], got[3]))
    me = _stat(str(os.getpid()))
    out = {"driver": me[2] if me else 0.0, "jvm": 0.0, "workers": 0.0}
    todo = [(pid, name, cpu, None) for pid, name, cpu in children.get(os.getpid(), [])]
    while todo:
        pid, name, cpu, above = todo.pop()
        # The JVM, what it started (the workers), anything else this process started.
        part = "jvm" if name == "java" else ("workers" if above is not None else "driver")
        out[part] += cpu
        todo += [(c, n, u, part) for c, n, u in children.get(pid, [])]
    return out


def cpu_spent(before: dict | None, after: dict | None) -> dict[str, float] | None:
    """What each part spent between two :func:`tree_cpu` readings, and their ``total``."""
    if before is None or after is None:
        return None
    spent = {k: max(0.0, after[k] - before[k]) for k in after}
    spent["total"] = sum(spent.values())
    return spent


def bound(serial_cpu: float, spark_cpu: float, cores: int) -> float | None:
    """Spark's ratio to serial on ``cores`` free cores if its work parallelized perfectly."""
    return cores * serial_cpu / spark_cpu if spark_cpu else None
