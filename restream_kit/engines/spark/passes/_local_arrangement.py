"""On a local master, a pass's events arranged by the driver instead of by a Spark shuffle.

A pass partitioned by plain log columns takes its events partitioned by key and in log
order within each partition. Spark does that with a shuffle, a sort and a pack
(``passes._setup.arranged``): on a cold replay of 10M events that was more than the passes'
own work. On a local master the tasks share the kernel's disk, and the driver already holds
the log as Arrow, in log order. So the driver arranges it itself:

- **balanced bins of keys.** Every event's key is hashed (polars), the keys are counted and
  dealt into ``n`` partitions largest first, each to the partition with the fewest events so
  far, and the partitions are numbered by size, largest first. Spark starts tasks in
  partition order, so the longest task starts first. A hash partitioning puts a heavy key
  where it lands, beside others: on the social logs one IP has a third of the messages;
- **a stable sort by partition** keeps log order within each, with no comparison of times;
- **one Arrow IPC file** per arrangement, in the kernel's private scratch directory, with
  each partition's events as record batches of 65,536 events: a task maps the file and
  reads its partition's batches, with no copy and nothing through Spark's rows.

The file is named by the log's fingerprint and the arrangement and written once, so the next
replay of the same log arranged the same way maps it again, in this kernel (a notebook
replays one log many times) or in another process (the command line).

A task's input is one marker row per partition, from which it learns its partition. A
zipped pass (``passes._zipped``) gets its events this way too, and the values earlier passes send
it do not travel through Spark either: a sending task writes each chunk to a file of the
replay's own scratch directory and reports its path; the driver hands each receiving task
the paths of its partition that finished tasks reported (so a failed attempt's file is
never read), and removes the directory when the replay ends. No shuffle, no cache of rows.
"""

from __future__ import annotations

import heapq
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa

__all__ = [
    "LocalInput",
    "local_arrangement",
    "local_batches",
    "local_part",
    "local_start",
    "marker_frame",
    "partition_of",
    "use_local",
    "local_input",
    "values_sent",
    "LOCAL_ROWS",
]

#: From how many events a local master's driver arranges the passes' events: below it, a
#: shuffle of a small log costs less than a file.
LOCAL_ROWS = 200_000

MARK = "_rs_lpart"  # a marker row's partition number
_BATCH_ROWS = 65_536
_KEPT = 4
_KEY_TYPES = (pa.types.is_integer, pa.types.is_string, pa.types.is_boolean, pa.types.is_binary)


@dataclass(frozen=True)
class LocalInput:
    """Where a pass's tasks read their events: the file, and per partition its batches."""

    path: str
    batches: tuple[tuple[int, int], ...]  # partition -> [first, stop) record batches
    # partition -> the files of values earlier passes sent it (``passes._zipped.ValuePacker``)
    values: tuple[tuple[str, ...], ...] = ()
    # A replay from a committed epoch (``passes._start_shares``): the lsn of the last event before
    # it, and per partition the file of its share of the start state ("" for none).
    after: int | None = None
    starts: tuple[str, ...] = ()
    until: int | None = None  # a wave's last event (its lsn): none after it is read


def use_local(session: Any, events: Any, rows: int, by_columns: list[list[str]]) -> bool:
    """Whether the driver arranges the passes' events (see the module docstring): on a
    local master, for a log of ``rows`` events or more from the kernel (no pickled column)
    when every pass is partitioned by plain columns of integers, strings or booleans (a
    float's ``-0.0`` and ``0.0`` are one key to Python, two to a hash)."""
    from ._setup import local_master

    if os.environ.get("RESTREAM_SPARK_LOCAL_ARRANGE", "1") == "0":
        return False
    if events.pickled or rows < LOCAL_ROWS or not by_columns or not local_master(session):
        return False
    return all(any(check(events.types[c]) for check in _KEY_TYPES) for by in by_columns for c in by)


_PARTS: dict[tuple, np.ndarray] = {}
_FILES: dict[tuple, LocalInput] = {}


def partition_of(events: Any, fingerprint: str, by: tuple, kinds: tuple, n: int) -> np.ndarray:
    """Every log event's partition in a pass partitioned by columns ``by`` over events of
    ``kinds`` into ``n`` (-1 for events of other kinds): keys in balanced bins, the largest
    partition first (see the module docstring). The same for the same log every time."""
    key = (fingerprint, by, kinds, n)
    if key in _PARTS:
        return _PARTS[key]
    import polars as pl
    import pyarrow.compute as pc

    table = events.table
    mine = pc.is_in(table.column("kind"), pa.array(kinds, pa.string())).to_numpy(
        zero_copy_only=False
    )
    frame = pl.from_arrow(table.select(list(by)))
    hashes = frame.select(pl.struct(list(by)).hash(seed=0).alias("h")).get_column("h")
    counts = (
        pl.DataFrame({"h": hashes.filter(pl.Series(mine))})
        .group_by("h")
        .len()
        .sort(["len", "h"], descending=[True, False])
    )
    # Largest first, each to the emptiest bin: within 4/3 of the best balance.
    bins = [(0, i) for i in range(n)]
    bin_of = np.empty(counts.height, dtype=np.int32)
    for row, size in enumerate(counts.get_column("len").to_numpy()):
        load, b = heapq.heappop(bins)
        bin_of[row] = b
        heapq.heappush(bins, (load + int(size), b))
    # Partitions numbered by size, largest first: Spark starts them in that order.
    by_size = sorted(bins, key=lambda lb: (-lb[0], lb[1]))
    number = np.empty(n, dtype=np.int32)
    for i, (_load, b) in enumerate(by_size):
        number[b] = i
    parts = hashes.replace_strict(
        counts.get_column("h"), pl.Series(number[bin_of]), default=-1, return_dtype=pl.Int32
    ).to_numpy()
    parts = np.where(mine, parts, -1).astype(np.int32)
    while len(_PARTS) >= _KEPT:
        _PARTS.pop(next(iter(_PARTS)))
    _PARTS[key] = parts
    return parts


def local_arrangement(
    events: Any,
    fingerprint: str,
    arrangement: tuple,
    make: Callable[[], tuple[np.ndarray, dict[str, np.ndarray]]],
    columns: list[str],
    n: int,
) -> LocalInput:
    """A pass's events as an Arrow IPC file of each partition's batches, in log order:
    ``make()`` gives every event's partition (-1: not this pass's) and the ``extra`` columns
    (the partitions of the zipped passes it sends values to); ``arrangement`` names them.
    The file is named by the log and the arrangement and written once (a reader never sees
    it half written), so a later replay, in this process or another, maps it again."""
    import hashlib
    import json

    import polars as pl

    from ....io.log import scratch_dir

    # (polars hashes the keys: another version may deal them otherwise)
    key = (fingerprint, arrangement, tuple(columns), n, pl.__version__)
    if key in _FILES and os.path.exists(_FILES[key].path):
        return _FILES[key]
    scratch = scratch_dir()
    digest = hashlib.sha256(repr(key[1:]).encode()).hexdigest()[:20]
    path = scratch / f"{fingerprint}.{digest}.arranged.arrow"
    if not path.exists():
        parts, extra = make()
        order = np.argsort(parts, kind="stable")  # log order kept within each partition
        counts = np.bincount(parts[parts >= 0], minlength=n)
        start = len(parts) - int(counts.sum())  # the events of other kinds sort first
        table = events.table.select(columns).take(pa.array(order[start:]))
        for name, values in extra.items():
            table = table.append_column(name, pa.array(values[order[start:]]))
        ranges, first = [], 0
        for size in counts.tolist():
            ranges.append((first, first + -(-size // _BATCH_ROWS)))
            first = ranges[-1][1]
        schema = table.schema.with_metadata({"ranges": json.dumps(ranges)})
        fd, tmp = tempfile.mkstemp(dir=scratch, suffix=".tmp")
        os.close(fd)
        with pa.OSFile(tmp, "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
            offset = 0
            for size in counts.tolist():
                for b in range(offset, offset + size, _BATCH_ROWS):
                    chunk = table.slice(b, min(_BATCH_ROWS, offset + size - b))
                    writer.write_batch(chunk.combine_chunks().to_batches()[0])
                offset += size
        os.replace(tmp, path)
        _prune(scratch, fingerprint)
    else:
        os.utime(path)  # recently used: pruned last
    with pa.memory_map(str(path)) as source:
        ranges = json.loads(pa.ipc.open_file(source).schema.metadata[b"ranges"])
    made = LocalInput(str(path), tuple(map(tuple, ranges)))
    while len(_FILES) >= _KEPT:
        _FILES.pop(next(iter(_FILES)))
    _FILES[key] = made
    return made


#: Arrangements kept on disk per log, the most recently used: a notebook that tries rules
#: reading other columns or keyed otherwise makes a new one each time.
_KEPT_ON_DISK = 6


def _prune(scratch: Any, fingerprint: str) -> None:
    """Remove all but the :data:`_KEPT_ON_DISK` most recently used arrangements of a log."""
    files = []
    for path in scratch.glob(f"{fingerprint}.*.arranged.arrow"):
        try:
            files.append((path.stat().st_mtime_ns, path))
        except OSError:  # removed meanwhile
            pass
    for _when, path in sorted(files, reverse=True)[_KEPT_ON_DISK:]:
        path.unlink(missing_ok=True)


def marker_frame(session: Any, n: int) -> Any:
    """A driver-arranged pass's input: one marker row per partition (``range`` puts row
    ``i`` in partition ``i``, with no shuffle), from which its task learns its partition."""
    return session.range(0, n, 1, n).selectExpr(f"CAST(id AS INT) AS {MARK}")


def local_part(batches: Iterator[pa.RecordBatch]) -> int:
    """A driver-arranged pass's partition in a task, from its input: marker rows, exactly
    one, or the task fails."""
    from ._zipped import ZipError

    marks = [m for b in batches for m in b.column(MARK).to_pylist()]
    if len(marks) != 1:
        raise ZipError(f"a task of a driver-arranged pass got {len(marks)} markers: {marks}")
    return marks[0]


def local_start(local: LocalInput, part: int) -> list | None:
    """Partition ``part``'s share of the state its replay starts from, as its entries
    (``passes._start_shares.start_of`` makes them a start)."""
    import pickle

    path = local.starts[part] if local.starts else ""
    if not path:
        return None
    with open(path, "rb") as f:
        return pickle.loads(f.read())


def local_batches(local: LocalInput, part: int) -> Iterator:
    """A driver-arranged pass's input in a task (partition ``part``): the values earlier
    passes sent it (packed, as ``passes._zipped.unzip`` takes them), then its events from the
    file, those after ``local.after`` only."""
    from ._zipped import VALUES

    sent = local.values[part] if local.values else ()
    if sent:
        blobs = []
        for path in sent:
            with open(path, "rb") as f:
                blobs.append(f.read())
        yield pa.RecordBatch.from_arrays([pa.array(blobs, pa.binary())], names=[VALUES])
    first, stop = local.batches[part]
    with pa.memory_map(local.path) as source:
        reader = pa.ipc.open_file(source)
        for i in range(first, stop):
            batch = reader.get_batch(i)
            if local.until is not None:
                lsn = batch.column("lsn").to_numpy()
                if len(lsn) and lsn[0] > local.until:
                    return
                batch = batch.slice(0, int(np.searchsorted(lsn, local.until, side="right")))
            if local.after is not None:
                lsn = batch.column("lsn").to_numpy()  # (increasing: log order)
                if not len(lsn) or lsn[-1] <= local.after:
                    continue
                batch = batch.slice(int(np.searchsorted(lsn, local.after, side="right")))
            yield batch


def local_input(setup: Any, sent: dict[int, list[str]], p: Any, n: int) -> tuple[Any, Any]:
    """Where pass ``p``'s tasks read the events the driver arranged for it
    (``passes._local_arrangement``) and the files of values earlier passes sent each partition
    (``sent``), and its input: a marker row per partition."""
    from ._zipped import zip_targets

    events, fingerprint = setup.events, setup.log.fingerprint

    def parts_of(q: int) -> Any:
        return partition_of(events, fingerprint, tuple(setup.local[q]), setup.log_kinds[q], n)

    # Its partitions, and each event's partition in the zipped passes it sends values to.
    targets = {col: j for j, col, _kinds in zip_targets(setup, p)}
    local = local_arrangement(
        events,
        fingerprint,
        (
            (tuple(setup.local[p.index]), setup.log_kinds[p.index]),
            tuple((col, tuple(setup.local[j]), setup.log_kinds[j]) for col, j in targets.items()),
        ),
        lambda: (parts_of(p.index), {col: parts_of(j) for col, j in targets.items()}),
        list(setup.columns),
        n,
    )
    values = tuple(tuple(sent.get(i, ())) for i in range(n))
    return replace(local, values=values), marker_frame(setup.session, n)


def values_sent(got: pa.Table, sent: dict[int, dict[int, list[str]]]) -> None:
    """The files of values a pass's finished tasks wrote for later passes the driver
    arranged (``passes._zipped.ValuePacker``), by receiving pass and partition, into ``sent``."""
    import pyarrow.compute as pc

    from ._rows import FWD

    rows = got.filter(pc.equal(got.column("_rs_kind"), FWD))
    for dest, part, path in zip(
        rows.column("_rs_dest").to_pylist(),
        rows.column("_rs_pk").to_pylist(),
        rows.column("_rs_b").to_pylist(),
    ):
        sent.setdefault(dest, {}).setdefault(int(part), []).append(path.decode())
