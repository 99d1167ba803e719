"""How a round of the prefix path runs its epochs: on Spark, one RDD job per round with one
task per epoch (:class:`SparkEpochs`), or in this process one after another
(:func:`local_map_epochs`, for tests of the algorithm). ``prefix._driver.run_prefix`` takes either as
its ``map_epochs``."""

from __future__ import annotations

import pyarrow as pa

from .._job_watch import JobWatch
from ._driver import _TASK_ARROW, PrefixTask

__all__ = ["SparkEpochs", "local_map_epochs", "warm_elements"]


class SparkEpochs:
    """``map_epochs`` (of :func:`run_prefix`) on Spark: one task per epoch, deltas shipped as a
    broadcast; tasks done are read from Spark's status tracker (the jobs of ``group``) while a
    round runs, and the round is cancelled once ``cancelled()`` says so.

    With ``events`` (a cluster), the first round makes a DataFrame of :data:`EVENTS_SCHEMA`,
    one row and one partition per epoch, and caches it, so that later rounds read their
    events from the executors' cache instead of shipping them again; :meth:`release`
    unpersists it."""

    def __init__(self, session, group: str | None = None, cancelled=None):
        self.session, self.group, self.cancelled = session, group, cancelled
        self.carrier = None  # the cached DataFrame of the epochs' events, once made

    def __call__(
        self, task: PrefixTask, n: int, shipped: dict, on_tasks=None, events=None
    ) -> pa.Table:
        sc = getattr(self.session, "sparkContext", None)
        broadcast = sc.broadcast(shipped) if (sc is not None and shipped) else None
        task.deltas = broadcast if broadcast is not None else shipped
        try:
            # An RDD job, not a DataFrame's mapInArrow: a round is a few tasks of seconds at
            # most, and Spark SQL's planning and Arrow plumbing cost twice an RDD job's start
            # (0.45 s against 0.25 s on a loopback cluster).
            job = self._epochs(n, events).mapPartitions(_RoundTask(task))
            if on_tasks is None or self.group is None:
                blobs = job.collect()
            else:
                with JobWatch(
                    self.session, self.group, on_tasks, every_s=0.05, cancelled=self.cancelled
                ):
                    blobs = job.collect()
        finally:
            if broadcast is not None:
                broadcast.destroy()
        batches = [b for blob in blobs for b in pa.ipc.open_stream(pa.py_buffer(blob))]
        return pa.Table.from_batches(batches, schema=_TASK_ARROW)

    def _epochs(self, n: int, events):
        """The epochs' RDD: (chunk, events IPC or None), one element and partition each
        (``parallelize`` puts element i in slice i)."""
        sc = self.session.sparkContext
        if events is None:
            return sc.parallelize([(i, None) for i in range(n)], n)
        if self.carrier is None:
            from pyspark import StorageLevel

            rows = sc.parallelize(list(enumerate(events)), n)
            self.carrier = rows.persist(StorageLevel.MEMORY_AND_DISK)
        return self.carrier

    def release(self) -> None:
        """Drop the cached events (the replay ended, finished or not)."""
        if self.carrier is not None:
            carrier, self.carrier = self.carrier, None
            try:
                carrier.unpersist(blocking=False)
            except Exception:  # noqa: BLE001 - the session may be gone with the replay
                pass


class _RoundTask:
    """One partition of a round's RDD job: its (chunk, events) elements as the Arrow batch
    :class:`PrefixTask` reads, its output as one Arrow IPC stream."""

    def __init__(self, task: PrefixTask):
        self.task = task

    def __call__(self, elements):
        elements = list(elements)
        if not elements:
            return []
        chunks = [chunk for chunk, _ in elements]
        payloads = [payload for _, payload in elements]
        if all(p is None for p in payloads):
            batch = pa.record_batch({"id": pa.array(chunks, pa.int64())})
        else:
            batch = pa.record_batch(
                {"chunk": pa.array(chunks, pa.int32()), "events": pa.array(payloads, pa.binary())}
            )
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, _TASK_ARROW) as out:
            for produced in self.task([batch]):
                out.write_batch(produced)
        return [sink.getvalue().to_pybytes()]


def warm_elements(elements):
    """A round's task that replays nothing (``_workers.start_workers``): sent by reference,
    it makes a Python worker import this module, and so what a round's tasks import."""
    return [len(list(elements))]


def local_map_epochs(
    task: PrefixTask, n: int, shipped: dict, on_tasks=None, events=None
) -> pa.Table:
    """``map_epochs`` in this process, one epoch after another (for tests of the algorithm)."""
    task.deltas = shipped
    if events is None:
        inputs = pa.record_batch({"id": list(range(n))})
    else:
        inputs = pa.record_batch(
            {"chunk": pa.array(range(n), pa.int32()), "events": pa.array(events, pa.binary())}
        )
    batches = []
    for batch in task([inputs]):
        batches.append(batch)
        if on_tasks is not None:
            on_tasks(len(batches), n)
    return pa.Table.from_batches(batches)
