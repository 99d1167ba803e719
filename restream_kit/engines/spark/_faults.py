"""Fault injection for tests of Spark's task retries: the one hook production code calls.

Every Spark task of the engine calls :func:`inject_fault` with its stage's name once, as it
starts: ``pass0``, ``pass1``... on the pass path (the pass's index, as in ``metrics.path``'s
order), ``round1``, ``round2``... on the prefix path, and ``keys`` for the task that computes
key expressions in Python. Without ``$RESTREAM_FAULT`` in the worker's environment the hook
returns at once and nothing here runs.

``$RESTREAM_FAULT`` holds faults separated by ``;``, each ``ACTION:key=value:...``. ACTION is
``kill`` (SIGKILL the Python worker running the task), ``fail`` (raise in the task) or
``sleep`` (``seconds=N``, a straggler for speculation). Keys choose the task: ``stage`` (a
stage name above; default every stage), ``partition`` (default every partition) and
``attempt`` (default 0, the first attempt only, so that Spark's retry recovers; ``*`` every
attempt). Example: ``RESTREAM_FAULT="kill:stage=pass1:partition=0"``. With
``$RESTREAM_FAULT_LOG`` set, each fault appends a line to that file before it strikes.
"""

from __future__ import annotations

import os
import signal
import time

__all__ = ["FAULT_ENV", "FAULT_LOG_ENV", "inject_fault", "parse_faults"]

FAULT_ENV = "RESTREAM_FAULT"
FAULT_LOG_ENV = "RESTREAM_FAULT_LOG"
_ACTIONS = ("kill", "fail", "sleep")


def inject_fault(stage: str) -> None:
    """Strike the faults of ``$RESTREAM_FAULT`` that match this task (a no-op without it).

    Read in the worker's own environment, which in local mode is the driver's at the time
    the JVM started, and elsewhere comes from ``spark.executorEnv.RESTREAM_FAULT``.
    """
    text = os.environ.get(FAULT_ENV)
    if text:
        _strike(text, stage)


def parse_faults(text: str) -> list[tuple[str, dict[str, str]]]:
    """``$RESTREAM_FAULT``'s faults as (action, {key: value}); an unknown action raises."""
    faults = []
    for item in filter(None, (part.strip() for part in text.split(";"))):
        action, *pairs = item.split(":")
        where = dict(pair.split("=", 1) for pair in pairs if "=" in pair)
        if action not in _ACTIONS:
            raise ValueError(f"{FAULT_ENV}: unknown fault {action!r} (kill, fail or sleep)")
        faults.append((action, where))
    return faults


def _strike(text: str, stage: str) -> None:
    from pyspark import TaskContext  # only when faults are asked for

    ctx = TaskContext.get()
    if ctx is None:
        return
    partition, attempt = ctx.partitionId(), ctx.attemptNumber()
    for action, where in parse_faults(text):
        if where.get("stage", "*") not in ("*", stage):
            continue
        if where.get("partition", "*") not in ("*", str(partition)):
            continue
        if where.get("attempt", "0") not in ("*", str(attempt)):
            continue
        note = f"{action} stage={stage} partition={partition} attempt={attempt} pid={os.getpid()}"
        log = os.environ.get(FAULT_LOG_ENV)
        if log:
            with open(log, "a") as f:
                f.write(note + "\n")
        if action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif action == "fail":
            raise RuntimeError(f"injected fault: {note}")
        else:
            time.sleep(float(where.get("seconds", "5")))
