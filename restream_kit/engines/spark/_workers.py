"""The Python workers of a checkpointed replay, started before its first wave's clock.

The first job a Spark session runs of a kind starts that kind's Python workers (forked by
PySpark's daemon, one per core) and imports the task's modules into each (restream_kit,
polars, pyarrow: about 2 s of each worker's CPU), and the first SQL job of a session pays
for the JVM's planning and Arrow plumbing once: measured at 10M events on this 2-core
machine, the first wave's first round took 5.9 s against 0.9 s for the same events in the
next wave (the prefix path), the first pass 4.3 to 8.6 s against 0.7 to 1.6 s (the pass
path). None of it is replay work, and a wave that pays it commits late: a process killed
before its first commit lost more than one interval and one epoch.

So a replay that commits in waves (``_waves.in_waves``) first runs one small job of the kind
its path runs, a task per core that replays nothing, before it opens its checkpoint: an RDD
job for the prefix path's rounds, an Arrow job (``mapInArrow``) for the pass path's passes
(Spark keeps a separate set of workers for each kind). Its function is a module-level one of
the path's task module, so unpickling it imports what the path's tasks import. The workers
stay up for the replay's jobs (``spark.python.worker.reuse``), so the job costs little more
than the start it moves (0.14 to 0.36 s measured when they were already up).
"""

from __future__ import annotations

import time
from typing import Any

from .passes._task import warm_batches
from .prefix._jobs import warm_elements
from .session._session import is_connect

__all__ = ["start_workers"]


def start_workers(session: Any, cores: int, path: str) -> float | None:
    """Start the Python workers of ``path`` ("prefix" or "passes"), a task per core; the
    seconds it took (None where it is not done: a Spark Connect session, whose server's
    workers outlive the client and are not this replay's to start)."""
    if is_connect(session) or getattr(session, "sparkContext", None) is None:
        return None
    began = time.perf_counter()
    n = max(1, cores)
    if path == "prefix":
        session.sparkContext.parallelize(range(n), n).mapPartitions(warm_elements).collect()
    else:
        session.range(0, n, 1, n).mapInArrow(warm_batches, "id long").collect()
    return time.perf_counter() - began
