"""How much of a local driver's heap Spark's sorts and caches may fill (``spark.memory.fraction``).

Spark splits a JVM's heap, less 300 MB it reserves, into its *unified memory* (execution:
sorts, shuffles, aggregations; storage: cached blocks), ``spark.memory.fraction`` of it (0.6),
and *user memory*, the rest (results a driver collects, its own objects). A sort keeps its rows
in execution memory, in pages of up to 64 MB, until that memory is full, and only then spills.
On ``local[N]`` the executors are the driver, and a pass in one partition (a sequential stage)
sorts the whole log in it: with the default 4 GB heap the sort's pages grew with the log, to
about 1 GB live at 10M events, and the JVM's resident memory with them (the process tree's
peak 1.69x from 3M to 30M events in a notebook; docs/scale.md).

A local session therefore gets the fraction that leaves it the unified memory a 1 GB heap has
at Spark's default (:data:`POOL_MB`, about 430 MB): sorts spill as they did with
``RESTREAM_SPARK_DRIVER_MEMORY=1g``, which was not slower, while user memory keeps the rest of
the heap for what the driver collects. A cluster's executors have their own heaps and keep
Spark's default; a ``spark.memory.fraction`` given in the settings is used as it is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["POOL_MB", "bounded_pool", "heap_mb", "pool_fraction"]

#: Spark's reserved memory, and its default fraction of the rest.
_RESERVED_MB, _SPARK_FRACTION = 300, 0.6
#: The unified memory a local session gets: what a 1 GB heap has at Spark's default fraction.
POOL_MB = (1024 - _RESERVED_MB) * _SPARK_FRACTION

_UNITS = {"": 1, "k": 1 / 1024, "m": 1, "g": 1024, "t": 1024**2}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)b?\s*$", re.IGNORECASE)


def heap_mb(text: str) -> float | None:
    """A JVM memory size as Spark reads ``spark.driver.memory`` (``4g``, ``4096m``, ``4096``:
    MiB without a unit) in MiB, or None when it is not one."""
    match = _SIZE.match(str(text))
    if not match:
        return None
    return float(match.group(1)) * _UNITS[match.group(2).lower()]


def pool_fraction(driver_memory: str) -> str | None:
    """The ``spark.memory.fraction`` that gives a heap of ``driver_memory`` a unified memory
    of :data:`POOL_MB`; None when Spark's default gives no more (a heap of 1 GB or less) or
    the size cannot be read."""
    heap = heap_mb(driver_memory)
    if heap is None or (heap - _RESERVED_MB) * _SPARK_FRACTION <= POOL_MB:
        return None
    return f"{POOL_MB / (heap - _RESERVED_MB):.4f}"


def bounded_pool(master: str, settings: Mapping[str, str], given: Mapping[str, str]) -> dict:
    """``settings`` with a local session's ``spark.memory.fraction`` set for its driver's
    heap (:func:`pool_fraction`), unless ``given`` (the caller's settings) sets it."""
    out = dict(settings)
    if not master.startswith("local") or "spark.memory.fraction" in given:
        return out
    fraction = pool_fraction(out.get("spark.driver.memory", "1g"))
    if fraction is None:
        out.pop("spark.memory.fraction", None)
    else:
        out["spark.memory.fraction"] = fraction
    return out
