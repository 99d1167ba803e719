"""The ordered copy of a log on disk: built out of core, described by a small manifest, and
read back a row group at a time (see ``docs/scale.md``).

:mod:`restream_kit.io.log` normalizes each source a batch at a time and hands the batches here;
this module writes them, orders them with DuckDB's external sort when they are not already in
order, assigns ``lsn`` and writes the copy in row groups of :data:`ROW_GROUP` rows, with a
manifest (:class:`LogSummary` as JSON) beside it, so that a replay learns the log's size,
kinds, times and schema without reading its rows.
"""

from __future__ import annotations

import base64
import bisect
import json
import os
import shutil
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

__all__ = ["LogSummary", "Summarizer", "OrderedCopy", "SourceStream", "write_ordered", "ROW_GROUP"]

#: Rows per row group of the ordered copy: what a replay holds of the log at a time.
ROW_GROUP = 1 << 17
_RESERVED = ("lsn", "ts", "kind")
_MANIFEST_VERSION = 1


@dataclass(frozen=True)
class LogSummary:
    """What a replay needs to know of a log without its rows in this process: exactly what
    :class:`~restream_kit.io.log.Log` would compute from its table."""

    rows: int
    kinds: tuple[str, ...]  # in order of first appearance
    counts: dict[str, int]
    first_ts: int | None
    last_ts: int | None
    schema: pa.Schema
    kind_fields: dict[str, frozenset[str]]  # per kind, the columns with a value in some row

    def to_json(self) -> dict:
        return {
            "version": _MANIFEST_VERSION,
            "rows": self.rows,
            "kinds": list(self.kinds),
            "counts": self.counts,
            "first_ts": self.first_ts,
            "last_ts": self.last_ts,
            "schema": base64.b64encode(self.schema.serialize().to_pybytes()).decode(),
            "kind_fields": {k: sorted(v) for k, v in self.kind_fields.items()},
        }

    @classmethod
    def from_json(cls, data: dict) -> LogSummary:
        schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(data["schema"])))
        return cls(
            rows=data["rows"],
            kinds=tuple(data["kinds"]),
            counts=dict(data["counts"]),
            first_ts=data["first_ts"],
            last_ts=data["last_ts"],
            schema=schema,
            kind_fields={k: frozenset(v) for k, v in data["kind_fields"].items()},
        )


class Summarizer:
    """Builds a :class:`LogSummary` from the canonical log's rows, a batch at a time, in order."""

    def __init__(self, schema: pa.Schema):
        self.schema = schema
        self.rows = 0
        self.counts: dict[str, int] = {}  # insertion order: first appearance
        self.fields: dict[str, set[str]] = {}
        self.first_ts: int | None = None
        self.last_ts: int | None = None
        self._others = [c for c in schema.names if c not in _RESERVED]

    def add(self, table: pa.Table | pa.RecordBatch) -> None:
        n = table.num_rows
        if not n:
            return
        ts = table.column("ts")
        if self.first_ts is None:
            self.first_ts = int(ts[0].as_py())
        self.last_ts = int(ts[n - 1].as_py())
        self.rows += n
        kind = table.column("kind")
        for item in pc.value_counts(kind).to_pylist():
            self.counts[item["values"]] = self.counts.get(item["values"], 0) + item["counts"]
        # Kinds in this batch in order of first appearance (value_counts does not promise it).
        present = pc.unique(kind).to_pylist()
        for k in present:
            self.fields.setdefault(k, set())
        # A column without nulls here is every present kind's; the others need a group-by.
        partial = []
        for c in self._others:
            if table.column(c).null_count == 0:
                for k in present:
                    self.fields[k].add(c)
            else:
                partial.append(c)
        if partial:
            valid = pa.table({"kind": kind, **{c: pc.is_valid(table.column(c)) for c in partial}})
            grouped = valid.group_by("kind").aggregate([(c, "any") for c in partial])
            for row in grouped.to_pylist():
                self.fields[row["kind"]] |= {c for c in partial if row[f"{c}_any"]}

    def summary(self) -> LogSummary:
        kinds = tuple(self.fields)
        return LogSummary(
            rows=self.rows,
            kinds=kinds,
            counts={k: self.counts[k] for k in kinds},
            first_ts=self.first_ts,
            last_ts=self.last_ts,
            schema=self.schema,
            kind_fields={k: frozenset(v) for k, v in self.fields.items()},
        )


def summarize(tables: Iterable[pa.Table | pa.RecordBatch], schema: pa.Schema) -> LogSummary:
    """The summary of the canonical log made of ``tables`` in order."""
    acc = Summarizer(schema)
    for t in tables:
        acc.add(t)
    return acc.summary()


class OrderedCopy:
    """The ordered copy of a log and its manifest, read a row group at a time: one Parquet
    file (``<fingerprint>.parquet``, with ``<fingerprint>.json``), or a directory of part
    files whose names sort in log order (Spark's copy of a URI log, the manifest inside as
    ``_manifest.json``)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        if self.path.is_dir():
            self.manifest = self.path / "_manifest.json"
            self.files = sorted(
                p for p in self.path.iterdir() if p.suffix == ".parquet" and p.stat().st_size
            )
        else:
            self.manifest = self.path.with_suffix(".json")
            self.files = [self.path]
        #: Every row group, (file, group) in log order, and the log position of each one's
        #: first row, and the end.
        self.groups: list[tuple[int, int]] = []
        sizes = []
        for number, file in enumerate(self.files):
            meta = pq.ParquetFile(file).metadata
            for g in range(meta.num_row_groups):
                self.groups.append((number, g))
                sizes.append(meta.row_group(g).num_rows)
        self.starts = [0, *np.cumsum(sizes, dtype=np.int64).tolist()]

    def summary(self) -> LogSummary:
        """The manifest's summary; written from the copy's rows if it is missing (an older cache)."""
        try:
            return LogSummary.from_json(json.loads(self.manifest.read_text()))
        except (OSError, ValueError, KeyError):
            pass
        schema = pq.read_schema(self.files[0])
        found = summarize(self.tables(0, self.starts[-1]), schema)
        write_manifest(self.manifest, found)
        return found

    def tables(
        self,
        start: int = 0,
        stop: int | None = None,
        columns: Sequence[str] | None = None,
        dictionaries: Sequence[str] = (),
    ) -> Iterator[pa.Table]:
        """Rows ``start`` to ``stop`` as one table per row group (sliced at both ends); the
        ``dictionaries`` columns as dictionary arrays (cheap to filter, decoded afterwards)."""
        stop = self.starts[-1] if stop is None else min(stop, self.starts[-1])
        if start >= stop:
            return
        opened: dict[int, pq.ParquetFile] = {}
        first = bisect.bisect_right(self.starts, start) - 1
        for index in range(first, len(self.starts) - 1):
            lo, hi = self.starts[index], self.starts[index + 1]
            if lo >= stop:
                break
            number, group = self.groups[index]
            if number not in opened:
                opened.clear()  # one file open at a time
                opened[number] = pq.ParquetFile(
                    self.files[number], read_dictionary=list(dictionaries) or None
                )
            table = opened[number].read_row_group(group, columns=columns, use_threads=False)
            a, b = max(start, lo) - lo, min(stop, hi) - lo
            yield table.slice(a, b - a) if (a, b) != (0, hi - lo) else table

    def rows_at(self, positions: Sequence[int], columns: Sequence[str]) -> pa.Table:
        """The rows at ``positions`` (ascending log positions), reading only the row groups
        that hold them."""
        at = np.asarray(positions, dtype=np.int64)
        parts = []
        cuts = np.searchsorted(at, self.starts)
        for index in range(len(self.starts) - 1):
            a, b = int(cuts[index]), int(cuts[index + 1])
            if a == b:
                continue
            number, group = self.groups[index]
            table = pq.ParquetFile(self.files[number]).read_row_group(group, columns=columns)
            parts.append(table.take(pa.array(at[a:b] - self.starts[index])))
        if not parts:
            return pq.read_schema(self.files[0]).empty_table().select(list(columns))
        return pa.concat_tables(parts)

    def column_stats(self) -> dict[str, tuple[bool, int, int]] | None:
        """Per column, from the Parquet statistics alone (no row is read): whether some row is
        null, and an integer column's min and max (0, 0 otherwise or without values); None
        when a row group lacks the statistics."""
        out: dict[str, list] = {}
        for file in self.files:
            meta = pq.ParquetFile(file).metadata
            schema = meta.schema.to_arrow_schema()
            for g in range(meta.num_row_groups):
                group = meta.row_group(g)
                for i in range(group.num_columns):
                    chunk = group.column(i)
                    name, stats = chunk.path_in_schema, chunk.statistics
                    if name not in schema.names or stats is None or not stats.has_null_count:
                        return None
                    nulls, lo, hi = out.setdefault(name, [False, None, None])
                    nulls = nulls or stats.null_count > 0
                    if pa.types.is_integer(schema.field(name).type) and (
                        stats.null_count < group.num_rows
                    ):
                        if not stats.has_min_max:
                            return None
                        lo = stats.min if lo is None else min(lo, stats.min)
                        hi = stats.max if hi is None else max(hi, stats.max)
                    out[name] = [nulls, lo, hi]
        return {name: (n, lo or 0, hi or 0) for name, (n, lo, hi) in out.items()}

    def ts_at(self, position: int) -> int:
        """The ``ts`` of the event at ``position``."""
        for table in self.tables(position, position + 1, columns=["ts"]):
            return int(table.column("ts")[0].as_py())
        raise IndexError(position)


def _writer() -> str:
    """A name for this process and thread: a workbench's threads may build one log at once."""
    return f"{os.getpid()}.{threading.get_ident()}"


def write_manifest(path: Path, summary: LogSummary) -> None:
    tmp = path.with_suffix(f".{_writer()}.tmp")
    tmp.write_text(json.dumps(summary.to_json()))
    os.replace(tmp, path)


@dataclass
class SourceStream:
    """One source's normalized batches (``lsn`` is its own, or the row number when it has
    none), already in the log's unified schema; ``explicit`` when the source gave ``lsn``."""

    batches: Iterable[pa.Table]
    explicit: bool


def write_ordered(
    target: Path,
    schema: pa.Schema,
    streams: Sequence[SourceStream],
    *,
    check_lsn: Callable[[list[SourceStream]], None],
    duplicate: Callable[[int, int, int], Exception],
    memory: str = "256MB",
) -> LogSummary:
    """Write the ordered copy of the log made of ``streams`` at ``target`` and its manifest.

    A single source without ``lsn`` whose rows are already in time order is written as it is
    read (one pass, no sort); anything else is written per source, then ordered by DuckDB.
    ``check_lsn`` raises when some sources have ``lsn`` and others not; ``duplicate(lsn,
    source, row)`` is the error for an ``lsn`` given twice.
    """
    work = target.with_name(f"{target.stem}.{_writer()}.work")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    tmp = target.with_suffix(f".{_writer()}.tmp")
    try:
        files, in_order, direct = [], True, None
        for position, stream in enumerate(streams):
            path = work / f"source{position}.parquet"
            single = len(streams) == 1 and not stream.explicit
            acc = Summarizer(schema) if single else None
            in_order = _write_source(path, schema, stream, acc) and single
            files.append(path)
            direct = acc
        check_lsn(list(streams))
        if in_order:
            summary = direct.summary()
            os.replace(files[0], tmp)
        else:
            explicit = streams[0].explicit
            summary = _sort(files, explicit, schema, tmp, work, memory, duplicate)
        os.replace(tmp, target)
        write_manifest(target.with_suffix(".json"), summary)
        return summary
    finally:
        shutil.rmtree(work, ignore_errors=True)
        tmp.unlink(missing_ok=True)


def _write_source(
    path: Path, schema: pa.Schema, stream: SourceStream, acc: Summarizer | None
) -> bool:
    """Write one source's batches (with ``_row`` when it has its own ``lsn``); whether its
    ``ts`` never goes down."""
    out_schema = schema.append(pa.field("_row", pa.int64())) if stream.explicit else schema
    ordered, last, row = True, None, 0
    with pq.ParquetWriter(path, out_schema) as writer:
        for table in _regrouped(stream.batches):
            n = table.num_rows
            ts = table.column("ts").to_numpy()
            if ordered and n:
                ordered = (last is None or ts[0] >= last) and bool(np.all(ts[1:] >= ts[:-1]))
                last = ts[-1]
            if stream.explicit:
                table = table.append_column("_row", pa.array(np.arange(row, row + n)))
            if acc is not None:
                acc.add(table)
            writer.write_table(table, row_group_size=ROW_GROUP)
            row += n
    return ordered


def _regrouped(tables: Iterable[pa.Table]) -> Iterator[pa.Table]:
    """``tables`` gathered into tables of :data:`ROW_GROUP` rows (the last one shorter)."""
    pending: list[pa.Table] = []
    rows = 0
    for t in tables:
        pending.append(t)
        rows += t.num_rows
        while rows >= ROW_GROUP:
            whole = pa.concat_tables(pending).combine_chunks()
            yield whole.slice(0, ROW_GROUP)
            rest = whole.slice(ROW_GROUP)
            pending, rows = [rest], rest.num_rows
    if rows:
        yield pa.concat_tables(pending).combine_chunks()


def _sort(files, explicit, schema, tmp, work, memory, duplicate) -> LogSummary:
    """Order the normalized source files with DuckDB's external sort into ``tmp``."""
    # Imported here: only a log that is not in order needs it, once (0.1 s of every start).
    import duckdb

    con = duckdb.connect(config={"memory_limit": memory, "temp_directory": str(work / "spill")})
    try:
        con.execute("SET preserve_insertion_order = false")
        con.execute("SET enable_progress_bar = false")  # stdout is the CLI's
        union = " UNION ALL ".join(
            f"SELECT *, {i}::INTEGER AS _src FROM read_parquet('{_sql_path(f)}')"
            for i, f in enumerate(files)
        )
        con.execute(f"CREATE VIEW log AS {union}")
        if explicit:
            _check_duplicates(con, duplicate)
            order, drop = "ts, lsn, _src, _row", "_src, _row"
        else:
            order, drop = "ts, _src, lsn", "_src"
        query = f"SELECT * EXCLUDE ({drop}) FROM log ORDER BY {order}"
        reader = con.sql(query).to_arrow_reader(ROW_GROUP)
        acc = Summarizer(schema)
        position = 0
        with pq.ParquetWriter(tmp, schema) as writer:
            for table in _regrouped(pa.Table.from_batches([b]) for b in reader):
                if not table.num_rows:
                    continue
                table = _conform(table, schema)
                if not explicit:
                    n = table.num_rows
                    lsn = pa.array(np.arange(position, position + n, dtype=np.int64))
                    table = table.set_column(0, "lsn", lsn)
                    position += n
                acc.add(table)
                writer.write_table(table, row_group_size=ROW_GROUP)
        return acc.summary()
    finally:
        con.close()


def _check_duplicates(con, duplicate) -> None:
    """The first duplicated ``lsn`` in (``lsn``, then log) order, as :func:`duplicate`'s error."""
    found = con.execute(
        "SELECT lsn FROM log GROUP BY lsn HAVING COUNT(*) > 1 ORDER BY lsn LIMIT 1"
    ).fetchone()
    if found is None:
        return
    src, row = con.execute(
        "SELECT _src, _row FROM log WHERE lsn = ? ORDER BY ts, _src, _row LIMIT 1 OFFSET 1",
        [found[0]],
    ).fetchone()
    raise duplicate(int(found[0]), int(src), int(row))


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with exactly ``schema``'s columns and types (DuckDB's types cast back)."""
    return pa.table([table.column(f.name).cast(f.type) for f in schema], schema=schema)


def _sql_path(path: Path) -> str:
    return str(path).replace("'", "''")
