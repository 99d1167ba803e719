"""On a local master, a pass's events arranged by the executors from the log's ordered copy,
instead of by a Spark shuffle of the log's rows.

A pass partitioned by plain log columns takes its events partitioned by key and in log
order within each partition. Spark does that with a shuffle, a sort and a pack
(``_packing.arranged``): on a cold replay of 10M events that was more than the passes' own
work. On a local master the tasks share the kernel's disk, and the log has an ordered copy
on it (a file log's, ``io/_ordered``, or the one Spark wrote of a URI log, ``_uri_log``; a
log of in-memory tables is written to the scratch directory once). So the arrangement is
made from that copy, with no sort and nothing of the log in the driver:

- **balanced bins of keys.** A first job counts the events of every key, by the hash of
  its columns (polars), each task over a contiguous slice of the copy's row groups; the
  driver merges the counts (one row per key: the state's size, not the log's) and deals the
  keys into ``n`` partitions largest first, each to the partition with the fewest events so
  far, and numbers the partitions by size, largest first. Spark starts tasks in partition
  order, so the longest task starts first. A hash partitioning puts a heavy key where it
  lands, beside others: on the social logs one IP has a third of the messages. The deal is
  kept on disk (``<fingerprint>.<digest>.deal.npz``);
- **a split by partition, slice by slice.** A second job reads the copy again, a row group
  at a time, and appends each event to its partition's Arrow IPC file of its slice, in
  record batches of 65,536 events: log order is kept within each partition with no sort,
  and a task holds a row group and a batch per partition;
- **kept.** The files go to ``<fingerprint>.<digest>.arranged/`` in the kernel's private
  scratch directory, with ``_parts.json`` (each partition's files, in slice order) written
  last: the next replay of the same log arranged the same way maps them again, in this
  kernel (a notebook replays one log many times) or in another process (the command line).

A pass task's input is one marker row per partition, from which it learns its partition,
and it maps its partition's files. A zipped pass (``_zipped``) gets its events this way too,
and the values earlier passes send it do not travel through Spark either: a sending task
writes each chunk to a file of the replay's own scratch directory and reports its path; the
driver hands each receiving task the paths of its partition that finished tasks reported
(so a failed attempt's file is never read), and removes the directory when the replay
ends. No shuffle, no cache of rows.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import pickle
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from ....io._ordered import OrderedCopy
from ....io.log import scratch_dir, scratch_parquet
from ._arranging import (
    MARK,
    ArrangeTask,
    CountTask,
    Deal,
    dealt,
    key_hashes,
    local_part,
    marker_frame,
)
from ._machine import local_master
from ._rows import FWD
from ._zipped import VALUES, zip_targets

__all__ = [
    "MARK",
    "Deal",
    "LocalInput",
    "deal_file",
    "dealt",
    "key_hashes",
    "key_partitions",
    "local_batches",
    "local_part",
    "local_start",
    "marker_frame",
    "use_local",
    "local_input",
    "values_sent",
    "LOCAL_ROWS",
]

#: From how many events a local master's executors arrange the passes' events: below it, a
#: shuffle of a small log costs less than files.
LOCAL_ROWS = 200_000

_KEPT = 4
_KEY_TYPES = (pa.types.is_integer, pa.types.is_string, pa.types.is_boolean, pa.types.is_binary)


@dataclass(frozen=True)
class LocalInput:
    """Where a pass's tasks read their events: per partition its files, in log order."""

    path: str  # the arrangement's directory
    files: tuple[tuple[str, ...], ...]  # partition -> its files (names in ``path``)
    # partition -> the files of values earlier passes sent it (``_zipped.ValuePacker``)
    values: tuple[tuple[str, ...], ...] = ()
    # A replay from a committed epoch (``_start_shares``): the lsn of the last event before
    # it, and per partition the file of its share of the start state ("" for none).
    after: int | None = None
    starts: tuple[str, ...] = ()
    until: int | None = None  # a wave's last event (its lsn): none after it is read


def use_local(session: Any, events: Any, rows: int, by_columns: list[list[str]]) -> bool:
    """Whether the executors arrange the passes' events (see the module docstring): on a
    local master, for a log of ``rows`` events or more (no pickled column) when every pass
    is partitioned by plain columns of integers, strings or booleans (a float's ``-0.0``
    and ``0.0`` are one key to Python, two to a hash)."""
    if os.environ.get("RESTREAM_SPARK_LOCAL_ARRANGE", "1") == "0":
        return False
    if events.pickled or rows < LOCAL_ROWS or not by_columns or not local_master(session):
        return False
    return all(any(check(events.types[c]) for check in _KEY_TYPES) for by in by_columns for c in by)


# -- keys and their partitions -----------------------------------------------------------------


def key_partitions(setup: Any, p: Any, n: int, keys: list) -> dict:
    """The partitions of ``keys`` (values, or tuples for a pass keyed by a tuple) in pass
    ``p`` arranged into ``n``; a key the log has no event of is left out."""
    by = tuple(setup.local[p.index])
    deal = Deal.load(deal_file(setup, by, setup.log_kinds[p.index], n))
    tupled = isinstance(ast.parse(p.partition, mode="eval").body, ast.Tuple)
    types = setup.events.types

    def table_of(some: list) -> pa.Table:
        columns = [[k[i] if tupled else k for k in some] for i in range(len(by))]
        return pa.table({c: pa.array(v, types[c]) for c, v in zip(by, columns)})

    try:
        parts = deal.of(key_hashes(table_of(keys), by)).tolist()
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError, IndexError):
        parts = []  # some key not of its columns' types: one at a time
        for key in keys:
            try:
                parts.extend(deal.of(key_hashes(table_of([key]), by)).tolist())
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError, IndexError):
                parts.append(-1)
    return {key: part for key, part in zip(keys, parts) if part >= 0}


# -- the driver: the arrangement of a pass ---------------------------------------------------


_FILES: dict[tuple, LocalInput] = {}


def local_input(setup: Any, sent: dict[int, list[str]], p: Any, n: int) -> LocalInput:
    """Where pass ``p``'s tasks read the events arranged for it and the files of values
    earlier passes sent each partition (``sent``); its job's input is a marker row per
    partition (:func:`marker_frame`)."""
    own = (tuple(setup.local[p.index]), setup.log_kinds[p.index])
    # Each event's partition in the zipped passes it sends values to.
    extras = tuple(
        (col, tuple(setup.local[j]), setup.log_kinds[j]) for j, col, _k in zip_targets(setup, p)
    )
    local = _arranged(setup, own, extras, list(setup.columns), n)
    values = tuple(tuple(sent.get(i, ())) for i in range(n))
    return replace(local, values=values)


def _arranged(setup: Any, own: tuple, extras: tuple, columns: list[str], n: int) -> LocalInput:
    """The arrangement of the events of ``own`` (its columns and kinds) into ``n``
    partitions, with the ``extras`` partition columns; made once (see the module docstring)."""
    fingerprint = setup.log.fingerprint
    types = tuple((c, str(setup.events.types[c])) for c in columns)
    # (polars hashes the keys: another version may deal them otherwise)
    key = (fingerprint, own, extras, types, n, pl.__version__)
    if key in _FILES and os.path.exists(os.path.join(_FILES[key].path, "_parts.json")):
        return _FILES[key]
    scratch = scratch_dir()
    digest = hashlib.sha256(repr(key[1:]).encode()).hexdigest()[:20]
    path = scratch / f"{fingerprint}.{digest}.arranged"
    if not (path / "_parts.json").exists():
        deals = [deal_file(setup, by, kinds, n) for by, kinds in (own, *[e[1:] for e in extras])]
        copy, slices = _source(setup)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        try:
            task = ArrangeTask(
                copy,
                slices,
                columns,
                dict(setup.events.types),
                (own[0], own[1], deals[0]),
                tuple((col, by, kinds, d) for (col, by, kinds), d in zip(extras, deals[1:])),
                n,
                str(tmp),
            )
            schema = "_rs_s INT, _rs_p INT, _rs_f STRING"
            got = marker_frame(setup.session, len(slices)).mapInArrow(task, schema).toArrow()
            made = sorted(zip(*(got.column(c).to_pylist() for c in ("_rs_p", "_rs_s", "_rs_f"))))
            parts = [[f for q, _s, f in made if q == i] for i in range(n)]
            (tmp / "_parts.json").write_text(json.dumps(parts))
            try:
                os.replace(tmp, path)
            except OSError:  # another replay made it first: the same files
                pass
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        _prune(scratch, fingerprint)
    else:
        os.utime(path)  # recently used: pruned last
    parts = json.loads((path / "_parts.json").read_text())
    made = LocalInput(str(path), tuple(tuple(files) for files in parts))
    while len(_FILES) >= _KEPT:
        _FILES.pop(next(iter(_FILES)))
    _FILES[key] = made
    return made


def deal_file(setup: Any, by: tuple, kinds: tuple, n: int) -> str:
    """The file of the deal of pass keys ``by`` (its events of ``kinds``) into ``n``
    partitions (:class:`Deal`), counted by the executors the first time it is needed."""
    fingerprint = setup.log.fingerprint
    types = tuple(str(setup.events.types[c]) for c in by)
    key = (by, kinds, types, n, pl.__version__)
    digest = hashlib.sha256(repr(key).encode()).hexdigest()[:20]
    path = scratch_dir() / f"{fingerprint}.{digest}.deal.npz"
    if path.exists():
        return str(path)
    copy, slices = _source(setup)
    task = CountTask(copy, slices, by, kinds, dict(setup.events.types))
    got = (
        marker_frame(setup.session, len(slices))
        .mapInArrow(task, "_rs_h BIGINT, _rs_n BIGINT")
        .toArrow()
    )
    counts = (
        pl.from_arrow(got)
        .group_by("_rs_h")
        .agg(pl.col("_rs_n").sum())
        .sort("_rs_h")  # (the deal is the same whatever order the tasks' rows came in)
    )
    hashes = counts.get_column("_rs_h").to_numpy().view(np.uint64)
    dealt(hashes, counts.get_column("_rs_n").to_numpy(), n).save(path)
    return str(path)


_SOURCES: dict[tuple, tuple] = {}


def _source(setup: Any) -> tuple[OrderedCopy, tuple[tuple[int, int], ...]]:
    """The log's ordered copy (a log of in-memory tables: its events written to the scratch
    directory once) and its slices, one per arranging task: runs of whole row groups."""
    log = setup.log
    key = (log.fingerprint, setup.rep.cores)
    if key not in _SOURCES:
        if log.copied:
            copy = log.ordered()
        else:
            table = setup.events.table.drop_columns(["_rs_o"])
            copy = OrderedCopy(scratch_parquet(table, f"{log.fingerprint}.events.parquet"))
        groups = len(copy.starts) - 1
        m = max(1, min(groups, 2 * setup.rep.cores))
        cuts = [copy.starts[(i * groups) // m] for i in range(m + 1)]
        _SOURCES.clear()
        _SOURCES[key] = (copy, tuple((a, b) for a, b in zip(cuts, cuts[1:]) if b > a))
    return _SOURCES[key]


#: Arrangements kept on disk per log, the most recently used: a notebook that tries rules
#: reading other columns or keyed otherwise makes a new one each time.
_KEPT_ON_DISK = 6


def _prune(scratch: Any, fingerprint: str) -> None:
    """Remove all but the :data:`_KEPT_ON_DISK` most recently used arrangements of a log."""
    found = []
    for path in scratch.glob(f"{fingerprint}.*.arranged"):
        try:
            found.append((path.stat().st_mtime_ns, path))
        except OSError:  # removed meanwhile
            pass
    for _when, path in sorted(found, reverse=True)[_KEPT_ON_DISK:]:
        shutil.rmtree(path, ignore_errors=True)
    for old in scratch.glob(f"{fingerprint}.*.arranged.arrow"):  # (one file each, before)
        old.unlink(missing_ok=True)


# -- the tasks -----------------------------------------------------------------------------------


def local_start(local: LocalInput, part: int) -> list | None:
    """Partition ``part``'s share of the state its replay starts from, as its entries
    (``_start_shares.start_of`` makes them a start)."""
    path = local.starts[part] if local.starts else ""
    if not path:
        return None
    with open(path, "rb") as f:
        return pickle.loads(f.read())


def local_batches(local: LocalInput, part: int) -> Iterator:
    """An arranged pass's input in a task (partition ``part``): the values earlier passes
    sent it (packed, as ``_zipped.unzip`` takes them), then its events from its files, those
    after ``local.after`` and up to ``local.until`` only."""
    sent = local.values[part] if local.values else ()
    if sent:
        blobs = []
        for path in sent:
            with open(path, "rb") as f:
                blobs.append(f.read())
        yield pa.RecordBatch.from_arrays([pa.array(blobs, pa.binary())], names=[VALUES])
    for name in local.files[part]:
        with pa.memory_map(os.path.join(local.path, name)) as source:
            reader = pa.ipc.open_file(source)
            for i in range(reader.num_record_batches):
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


def values_sent(got: pa.Table, sent: dict[int, dict[int, list[str]]]) -> None:
    """The files of values a pass's finished tasks wrote for later arranged passes
    (``_zipped.ValuePacker``), by receiving pass and partition, into ``sent``."""
    rows = got.filter(pc.equal(got.column("_rs_kind"), FWD))
    for dest, part, path in zip(
        rows.column("_rs_dest").to_pylist(),
        rows.column("_rs_pk").to_pylist(),
        rows.column("_rs_b").to_pylist(),
    ):
        sent.setdefault(dest, {}).setdefault(int(part), []).append(path.decode())
