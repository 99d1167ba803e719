"""Narrow rows through files, on a local master: a close pass fed narrow rows (``_narrow``)
beside passes the driver arranged (``_local_arrangement``), with no Spark shuffle.

A window keyed otherwise than its adding stage sends each add (or a task's summed adds to
one window) as a narrow row to the partition of the window's key in its close pass. Through
Spark those rows are kept (``localCheckpoint``), shuffled by their key's hash and sorted, and
the adding pass cannot be arranged by the driver (its events shuffled too, by hash: one
sender with a third of the messages lands beside others). On a local master, where the tasks
share the kernel's disk, instead:

- **the driver deals the window's keys** into balanced partitions, as it deals a pass's own
  keys (``_local_arrangement``: counted once per log by the executors, kept on disk), by the
  log columns the window is keyed by, over the adding passes' events (:func:`narrow_passes`
  says which close passes can: one plain-columns key, adding passes the driver arranges);
- **each adding task writes** its narrow rows, at its end, to one Arrow IPC file per
  partition of the close pass, each row's partition looked up in that deal by its key's
  hash (:class:`NarrowFiles`), and reports the files' paths in small rows, as a zipped pass's
  values travel (``_zipped.to_file``);
- **each close task reads** the files of its partition that finished tasks reported, and
  sorts their rows by position, as Spark's sort did (:func:`narrow_batches`).

Only where the serial engine runs the windows natively and the passes run its loop (no
checkpoint, start, guard or history: ``_jobs._own``); elsewhere the rows go through Spark.
"""

from __future__ import annotations

import ast
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from ....compiler.expand_windows import close_kind
from ._arranging import Deal, key_hashes
from ._local_arrangement import deal_file
from ._rows import FWD, NOWHERE
from ._sql import raw_key, unquoted

__all__ = [
    "NarrowTarget",
    "NarrowFiles",
    "narrow_passes",
    "narrow_targets",
    "narrow_batches",
    "covered",
]

#: Rows of a narrow file read per batch by a close task.
_BATCH = 65_536
_UNTYPED = (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError, IndexError)


@dataclass(frozen=True)
class NarrowTarget:
    """Where an adding task writes the narrow rows of one close pass: the deal of the
    window's key columns ``by`` (their Arrow types), its partitions, whether the key is a
    tuple of them, and the replay's directory."""

    deal: str
    by: tuple[str, ...]
    types: tuple[Any, ...]
    n: int
    tupled: bool
    directory: str


def narrow_passes(pp: Any, events: Any, log_kinds: dict) -> dict[int, tuple[str, ...]]:
    """The close passes fed narrow rows whose rows can go through files: each with the log
    columns of its windows' one key (plain columns of the log), fed by nothing but its
    windows' adds, taking no log event."""
    found: dict[int, tuple[str, ...]] = {}
    passes = pp.passes
    for p in passes:
        if not p.narrow or log_kinds[p.index] or p.serves or p.feeds or p.blind or p.copies:
            continue
        keys = set(p.narrow_keys.values())
        if len(keys) != 1 or set(p.narrow_keys) != set(p.narrow):
            continue
        raw = raw_key(next(iter(keys)), events)
        senders = [q for q in passes[: p.index] if p.index in q.sends]
        if raw is None or not senders:
            continue
        if any(p.index not in q.narrow_to.values() for q in senders):
            continue  # (a sender of something else than its windows' adds)
        found[p.index] = tuple(unquoted(c) for c in raw)
    return found


def covered(pp: Any, narrow: dict) -> bool:
    """Whether every kind the passes schedule is a close they run themselves (closing windows
    fused into their adding pass) or a narrowed window's close, its adds going as files to
    a pass of ``narrow``: nothing scheduled crosses passes as rows."""
    for p in pp.passes:
        own = {close_kind(name) for name in p.closes}
        sent = {close_kind(name): target for name, target in p.narrow_to.items()}
        for kind in p.schedules:
            targets = pp.kind_passes.get(kind, ())
            if kind in own and targets == (p.index,):
                continue
            if kind in sent and targets == (sent[kind],) and sent[kind] in narrow:
                continue
            return False
        blind = {s for s in p.blind if not any(s.startswith(f"{w}__") for w in p.narrow_to)}
        if blind:
            return False
    return True


def narrow_targets(setup: Any, p: Any) -> dict[int, NarrowTarget]:
    """Where adding pass ``p``'s tasks write the narrow rows of each close pass of
    ``setup.narrow`` it feeds: the deal of its windows' key over the adding passes' events,
    made once per log (``_local_arrangement.deal_file``)."""
    passes = setup.pp.passes
    out = {}
    for target in dict.fromkeys(p.narrow_to.values()):
        by = setup.narrow.get(target)
        if by is None:
            continue
        q = passes[target]
        kinds = tuple(
            dict.fromkeys(
                k
                for s in passes[:target]
                if target in s.narrow_to.values()
                for k in setup.log_kinds[s.index]
            )
        )
        n = setup.partitions
        types = tuple(setup.events.types[c] for c in by)
        key = next(iter(q.narrow_keys.values()))
        deal = deal_file(setup, by, kinds, n)
        out[target] = NarrowTarget(deal, by, types, n, tupled(key), setup.values_dir)
    return out


def tupled(key: str) -> bool:
    """Whether window key expression ``key`` is a tuple (``(e.src, e.dst)``)."""
    return isinstance(ast.parse(key, mode="eval").body, ast.Tuple)


class NarrowFiles:
    """An adding task's narrow rows for the close passes of ``targets`` (pass ->
    :class:`NarrowTarget`), written at its end, one file per partition (module docstring)."""

    def __init__(self, targets: dict[int, NarrowTarget]):
        self.targets = targets
        self.rows: dict[int, list] = {target: [] for target in targets}

    def append(self, row: tuple) -> None:
        """Take one narrow row ``(kind, target, pk, position, blob)``, with its key as ``pk``."""
        self.rows[row[1]].append(row)

    def flush(self) -> list[tuple]:
        """Write the rows taken so far; a ``FWD`` row per file, its path in ``_rs_b``."""
        sent = []
        for target, rows in self.rows.items():
            if rows:
                sent += self._write(target, self.targets[target], rows)
                rows.clear()
        return sent

    def _write(self, target: int, where: NarrowTarget, rows: list) -> list[tuple]:
        parts = _parts(where, [row[2] for row in rows])
        t = np.fromiter((row[3][0] for row in rows), np.int64, len(rows))
        lsn = np.fromiter((row[3][2] for row in rows), np.int64, len(rows))
        subs = np.frombuffer(b"".join(row[3][3] for row in rows), dtype=">u4").reshape(-1, 2)
        blobs = pa.array([row[4] for row in rows], pa.binary())
        out = []
        for part in np.unique(parts).tolist():
            take = np.flatnonzero(parts == part)
            table = pa.table(
                {
                    "_rs_t": t[take],
                    "_rs_o": lsn[take],
                    "_rs_h": subs[take, 0].astype(np.uint32),
                    "_rs_c": subs[take, 1].astype(np.uint32),
                    "_rs_b": blobs.take(pa.array(take)),
                }
            )
            path = os.path.join(where.directory, f"n{target}.{part}.{uuid.uuid4().hex}.arrow")
            with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
                writer.write_table(table)
            out.append((FWD, target, str(part), NOWHERE, path.encode()))
        return out


def _parts(where: NarrowTarget, keys: list) -> np.ndarray:
    """The close pass's partition of each key, by the driver's deal of its columns (a key
    the deal has not: partition 0, the same for every task)."""
    unique = list(dict.fromkeys(keys))
    deal = Deal.load(where.deal)

    def dealt(some: list) -> list[int]:
        columns = [[k[i] if where.tupled else k for k in some] for i in range(len(where.by))]
        table = pa.table({c: pa.array(v, t) for c, v, t in zip(where.by, columns, where.types)})
        return np.maximum(deal.of(key_hashes(table, where.by)), 0).tolist()

    try:
        parts = dealt(unique)
    except _UNTYPED:  # some key not of its columns' types: one at a time, those to 0
        parts = []
        for key in unique:
            try:
                parts += dealt([key])
            except _UNTYPED:
                parts.append(0)
    of = dict(zip(unique, parts))
    return np.fromiter((of[k] for k in keys), np.int64, len(keys))


def narrow_batches(paths: tuple[str, ...]) -> Iterator[pa.RecordBatch]:
    """A close task's narrow rows from the files of its partition, in position order (the
    order Spark's sort gave them: time, root event, handler, call; every one a log event's
    phase), as batches of ``_rs_t``, ``_rs_o`` and ``_rs_b``."""
    tables = []
    for path in paths:
        with pa.memory_map(path) as source:
            tables.append(pa.ipc.open_file(source).read_all())
    if not tables:
        return
    table = pa.concat_tables(tables)
    order = np.lexsort(
        tuple(table.column(c).to_numpy() for c in ("_rs_c", "_rs_h", "_rs_o", "_rs_t"))
    )
    table = table.select(["_rs_t", "_rs_o", "_rs_b"]).take(pa.array(order))
    yield from table.to_batches(max_chunksize=_BATCH)
