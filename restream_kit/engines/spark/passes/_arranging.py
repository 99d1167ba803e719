"""The executors' two jobs that arrange a log's ordered copy for the passes
(``_local_arrangement``): counting each key's events, and splitting a slice of the copy into
a file per partition; the deal of the keys into balanced partitions; the marker rows their
tasks (and a pass's) learn their partition from."""

from __future__ import annotations

import heapq
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from ....io._ordered import OrderedCopy
from ._zipped import ZipError

__all__ = [
    "Deal",
    "dealt",
    "key_hashes",
    "CountTask",
    "ArrangeTask",
    "MARK",
    "marker_frame",
    "local_part",
]

MARK = "_rs_lpart"  # a marker row's partition number
_BATCH_ROWS = 65_536


def key_hashes(table: pa.Table, by: tuple[str, ...]) -> np.ndarray:
    """Every row's key hash (uint64): polars' hash of the struct of the ``by`` columns, the
    same for equal keys in any table of the same types."""
    frame = pl.from_arrow(table.select(list(by)))
    return frame.select(pl.struct(list(by)).hash(seed=0).alias("h")).get_column("h").to_numpy()


@dataclass(frozen=True)
class Deal:
    """Where a pass's keys go: the key hashes (ascending) and each one's partition."""

    hashes: np.ndarray
    parts: np.ndarray

    def of(self, hashes: np.ndarray) -> np.ndarray:
        """The partition of each hash (-1 for a key the log has no event of)."""
        if not len(self.hashes):
            return np.full(len(hashes), -1, dtype=np.int32)
        at = np.minimum(np.searchsorted(self.hashes, hashes), len(self.hashes) - 1)
        return np.where(self.hashes[at] == hashes, self.parts[at], -1).astype(np.int32)

    def save(self, path: Path) -> None:
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp.npz")
        np.savez(tmp, hashes=self.hashes, parts=self.parts)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | Path) -> Deal:
        with np.load(path) as data:
            return cls(data["hashes"], data["parts"])


def dealt(hashes: np.ndarray, counts: np.ndarray, n: int) -> Deal:
    """Keys (their hashes, with their events' counts) dealt into ``n`` partitions: largest
    first, each to the emptiest partition (within 4/3 of the best balance), the partitions
    numbered by size, largest first."""
    order = np.lexsort((hashes, -counts.astype(np.int64)))
    bins = [(0, i) for i in range(n)]
    bin_of = np.empty(len(order), dtype=np.int32)
    for row, size in enumerate(counts[order].tolist()):
        load, b = heapq.heappop(bins)
        bin_of[row] = b
        heapq.heappush(bins, (load + int(size), b))
    number = np.empty(n, dtype=np.int32)
    for i, (_load, b) in enumerate(sorted(bins, key=lambda lb: (-lb[0], lb[1]))):
        number[b] = i
    parts = np.empty(len(order), dtype=np.int32)
    parts[order] = number[bin_of]
    ascending = np.argsort(hashes, kind="stable")
    return Deal(hashes[ascending], parts[ascending])


def _typed(table: pa.Table, types: dict) -> pa.Table:
    """``table`` with each column of the type the passes take it as (``_events``)."""
    for i, f in enumerate(table.schema):
        want = types.get(f.name)
        if want is not None and f.type != want:
            table = table.set_column(i, f.name, table.column(i).cast(want))
    return table


def _mine(table: pa.Table, kinds: tuple) -> np.ndarray:
    return pc.is_in(table.column("kind"), pa.array(kinds, pa.string())).to_numpy(
        zero_copy_only=False
    )


class CountTask:
    """``mapInArrow`` over marker rows: a slice's events of ``kinds``, counted per key hash."""

    def __init__(self, copy: OrderedCopy, slices: tuple, by: tuple, kinds: tuple, types: dict):
        self.copy, self.slices, self.by, self.kinds, self.types = copy, slices, by, kinds, types

    def __call__(self, batches: Any) -> Iterator[pa.RecordBatch]:
        start, stop = self.slices[local_part(batches)]
        counted = None
        for table in self.copy.tables(start, stop, columns=[*self.by, "kind"]):
            table = _typed(table, self.types)
            table = table.filter(_mine(table, self.kinds))
            some = pl.DataFrame({"h": key_hashes(table, self.by)}).group_by("h").len()
            counted = some if counted is None else pl.concat([counted, some])
            if counted.height > 4 * some.height:
                counted = counted.group_by("h").agg(pl.col("len").sum())
        if counted is None:
            return
        counted = counted.group_by("h").agg(pl.col("len").sum())
        hashes = counted.get_column("h").to_numpy().view(np.int64)
        lens = counted.get_column("len").to_numpy().astype(np.int64)
        yield pa.RecordBatch.from_arrays([pa.array(hashes), pa.array(lens)], ["_rs_h", "_rs_n"])


class ArrangeTask:
    """``mapInArrow`` over marker rows: a slice's events of the pass, each appended to its
    partition's file of the slice (see the module docstring); a row per file made."""

    def __init__(self, copy, slices, columns, types, own, extras, n, out):  # noqa: PLR0913
        self.copy, self.slices, self.columns, self.types = copy, slices, columns, types
        self.own, self.extras, self.n, self.out = own, extras, n, out

    def __call__(self, batches: Any) -> Iterator[pa.RecordBatch]:
        s = local_part(batches)
        start, stop = self.slices[s]
        by, kinds, deal_path = self.own
        deal = Deal.load(deal_path)
        extras = [(col, b, k, Deal.load(d)) for col, b, k, d in self.extras]
        read = list(dict.fromkeys([*self.columns, *by, *[c for e in extras for c in e[1]], "kind"]))
        files = _PartFiles(self.out, s, self.n)
        try:
            for table in self.copy.tables(start, stop, columns=read):
                table = _typed(table, self.types)
                parts = np.where(_mine(table, kinds), deal.of(key_hashes(table, by)), -1)
                out = table.select(self.columns)
                for col, b, k, d in extras:
                    theirs = np.where(_mine(table, k), d.of(key_hashes(table, b)), -1)
                    out = out.append_column(col, pa.array(theirs.astype(np.int32)))
                order = np.argsort(parts, kind="stable")  # log order kept within each
                counts = np.bincount(parts[parts >= 0], minlength=self.n)
                first = len(parts) - int(counts.sum())  # the events of other kinds sort first
                out = out.take(pa.array(order[first:]))
                offset = 0
                for part, size in enumerate(counts.tolist()):
                    if size:
                        files.add(part, out.slice(offset, size))
                    offset += size
            made = files.close()
        except BaseException:
            files.abort()
            raise
        yield pa.RecordBatch.from_arrays(
            [
                pa.array([s] * len(made), pa.int32()),
                pa.array([p for p, _f in made], pa.int32()),
                pa.array([f for _p, f in made], pa.string()),
            ],
            ["_rs_s", "_rs_p", "_rs_f"],
        )


class _PartFiles:
    """A slice's IPC files, one per partition, each written in batches of ``_BATCH_ROWS``."""

    def __init__(self, out: str, s: int, n: int):
        self.out, self.s = out, s
        self.pending: list[list[pa.Table]] = [[] for _ in range(n)]
        self.held = [0] * n
        self.writers: dict[int, tuple] = {}

    def add(self, part: int, rows: pa.Table) -> None:
        self.pending[part].append(rows)
        self.held[part] += rows.num_rows
        if self.held[part] >= _BATCH_ROWS:
            self._flush(part, final=False)

    def _flush(self, part: int, final: bool) -> None:
        if not self.held[part]:
            return
        whole = pa.concat_tables(self.pending[part]).combine_chunks()
        if part not in self.writers:
            name = f"s{self.s:05d}.p{part:05d}.arrow"
            tmp = os.path.join(self.out, f"{name}.{os.getpid()}.tmp")
            sink = pa.OSFile(tmp, "wb")
            self.writers[part] = (name, tmp, sink, pa.ipc.new_file(sink, whole.schema))
        writer = self.writers[part][3]
        done = 0
        while whole.num_rows - done >= _BATCH_ROWS or (final and done < whole.num_rows):
            size = min(_BATCH_ROWS, whole.num_rows - done)
            writer.write_batch(whole.slice(done, size).combine_chunks().to_batches()[0])
            done += size
        rest = whole.slice(done)
        self.pending[part], self.held[part] = [rest], rest.num_rows

    def close(self) -> list[tuple[int, str]]:
        made = []
        for part in range(len(self.held)):
            self._flush(part, final=True)
        for part, (name, tmp, sink, writer) in sorted(self.writers.items()):
            writer.close()
            sink.close()
            os.replace(tmp, os.path.join(self.out, name))
            made.append((part, name))
        return made

    def abort(self) -> None:
        for _name, tmp, sink, _writer in self.writers.values():
            sink.close()
            Path(tmp).unlink(missing_ok=True)


def marker_frame(session: Any, n: int) -> Any:
    """A task per partition: one marker row each (``range`` puts row ``i`` in partition
    ``i``, with no shuffle), from which its task learns its partition."""
    return session.range(0, n, 1, n).selectExpr(f"CAST(id AS INT) AS {MARK}")


def local_part(batches: Iterator[pa.RecordBatch]) -> int:
    """A marker task's partition, from its input: marker rows, exactly one, or the task
    fails."""
    marks = [m for b in batches for m in b.column(MARK).to_pylist()]
    if len(marks) != 1:
        raise ZipError(f"a task of a driver-arranged pass got {len(marks)} markers: {marks}")
    return marks[0]
