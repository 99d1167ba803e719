"""One side of ``python -m bench regress``: time the rules of a spec against one source tree.

Run as a script by path, never as ``bench._regress_probe``: the runner sets ``PYTHONPATH`` to
the tree under test, so ``restream_kit`` is that tree's while this file stays the current one
(a base revision may have no such module). It uses only the public API that every revision
has (``Log``, ``Program.from_file``, ``replay`` with ``engine``, ``master``, ``history`` and
``reuse``) and imports nothing from ``bench``.

``python bench/_regress_probe.py SPEC.json OUT.json``: the spec names the log, the timed runs
per rule (``repeat``) and the rules (``name``, ``program``, ``engine``, optional ``master``,
optional ``reuse_of``: the program whose recorded history the rule re-replays from). Each rule
runs once untimed (compiling, warming the Spark session, leaving the log's canonical copy),
then ``repeat`` times timed: wall time, and CPU time of this process and of every process it
started, ended or still alive (the Spark JVM and its Python workers). OUT gets, per rule, the
seconds, the CPU seconds and a digest of the untimed run's tables.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import sys
import time
import warnings
from pathlib import Path

import pyarrow as pa

import restream_kit as rk

__all__ = ["main"]

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _children_cpu() -> float:
    """CPU seconds of the live processes descending from this one (Linux ``/proc``; 0
    elsewhere): a Spark JVM is not reaped until the process ends, so ``getrusage`` misses it."""
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:  # gone meanwhile, or no /proc
            continue
        parents[int(entry.name)] = int(fields[1])
        ticks[int(entry.name)] = sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    mine, frontier = set(), {os.getpid()}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - mine
        mine |= frontier
    return sum(ticks[pid] for pid in mine) / _TICK


def _cpu() -> float:
    """CPU seconds of this process, of its reaped children and of its live descendants."""
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + reaped.ru_utime + reaped.ru_stime + _children_cpu()


def _digest(result) -> str:
    """A digest of the result's tables (names, schemas without metadata, values)."""
    digest = hashlib.sha256()
    for name in sorted(result.tables):
        table = result.tables[name].replace_schema_metadata(None).combine_chunks()
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        digest.update(name.encode() + b"\0" + sink.getvalue().to_pybytes())
    return digest.hexdigest()[:16]


def _runner(rule: dict, log):
    """A function that replays ``rule`` once and returns its result."""
    program = rk.Program.from_file(rule["program"])
    options = {"engine": rule.get("engine", "serial")}
    if rule.get("master"):
        options["master"] = rule["master"]
    if rule.get("reuse_of"):
        recorded = rk.replay(rk.Program.from_file(rule["reuse_of"]), log, history=True)
        options["reuse"] = recorded
    return lambda: rk.replay(program, log, **options)


def main(argv: list[str]) -> int:
    """Time every rule of the spec ``argv[0]``; write the timings to ``argv[1]``."""
    warnings.simplefilter("ignore")
    spec = json.loads(Path(argv[0]).read_text())
    log = rk.Log(spec["log"])
    len(log)  # the canonical table, untimed
    out: dict[str, dict] = {"restream_kit": str(Path(rk.__file__).parent), "rules": {}}
    for rule in spec["rules"]:
        run = _runner(rule, log)
        seconds, cpu = [], []
        digest = _digest(run())
        for _ in range(spec["repeat"]):
            started, cpu_started = time.perf_counter(), _cpu()
            run()
            seconds.append(time.perf_counter() - started)
            cpu.append(_cpu() - cpu_started)
        out["rules"][rule["name"]] = {"seconds": seconds, "cpu": cpu, "digest": digest}
    Path(argv[1]).write_text(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
