"""Log sources read into canonical rows: a source's columns checked and normalized (``ts`` as
int64 milliseconds, ``kind``, ``lsn``), files and URIs read through pyarrow, and several
sources merged into the canonical order, in memory (:func:`canonicalize`, the reference) or
out of core into the ordered copy (:func:`write_canonical`). :class:`~restream_kit.io.log.Log`
is built on these."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from ..model.errors import LogError
from ._ordered import ROW_GROUP, LogSummary, SourceStream, write_ordered
from ._times import _first_true, _looks_like_time, _ts_to_ms

__all__ = [
    "DEFAULT_KIND",
    "RESERVED",
    "Source",
    "is_uri",
    "canonicalize",
    "write_canonical",
    "own_columns",
]

DEFAULT_KIND = "event"
RESERVED = ("lsn", "ts", "kind")
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_uri(text: Any) -> bool:
    """True for ``scheme://...`` strings (a log the cluster may read where this process cannot)."""
    return isinstance(text, str) and _URI.match(text) is not None


@dataclass(frozen=True)
class Source:
    """One input of a log: a file (Parquet or CSV) or an in-memory table, with a kind name.

    ``ts`` names its time column when that is not ``ts``; ``kind`` is the kind of all its
    events, for a source without a ``kind`` column.
    """

    name: str | None
    path: str | None = None
    table: pa.Table | None = None
    ts: str | None = None
    kind: str | None = None

    @property
    def label(self) -> str:
        return self.path or f"<table {self.name or DEFAULT_KIND}>"


def canonicalize(sources: Sequence[Source]) -> pa.Table:
    """Read, validate, merge and order the sources into the canonical log."""
    tables = []
    named = len(sources) > 1
    with_lsn = []
    for position, src in enumerate(sources):
        raw = src.table if src.table is not None else _read(src.path)
        kind_name = src.name or (Path(src.path).stem if named and src.path else DEFAULT_KIND)
        table = _normalize(raw, src, kind_name)
        with_lsn.append("lsn" in raw.column_names)
        table = table.append_column("_src", pa.array([position] * table.num_rows, pa.int32()))
        table = table.append_column("_row", pa.array(range(table.num_rows), pa.int64()))
        tables.append(table)
    if any(with_lsn) and not all(with_lsn):
        raise LogError(
            "some sources have an lsn column and others do not; give lsn everywhere or nowhere"
        )
    merged = pa.concat_tables(tables, promote_options="permissive")
    if all(with_lsn):
        order = pc.sort_indices(merged, sort_keys=[("ts", "ascending"), ("lsn", "ascending")])
        merged = merged.take(order)
        _check_unique_lsn(merged, sources)
    else:
        order = pc.sort_indices(
            merged, sort_keys=[("ts", "ascending"), ("_src", "ascending"), ("_row", "ascending")]
        )
        merged = merged.take(order)
        merged = merged.set_column(
            merged.column_names.index("lsn"), "lsn", pa.array(range(merged.num_rows), pa.int64())
        )
    merged = merged.drop_columns(["_src", "_row"])
    return merged.combine_chunks()


def write_canonical(sources: Sequence[Source], target: Path) -> LogSummary:
    """Write the canonical log of file ``sources`` to ``target``, out of core: each source
    normalized a row group at a time, then ordered by DuckDB's external sort when it is not
    already in order (see :mod:`restream_kit.io._ordered`). The same rows, order, ``lsn``,
    schema and errors as :func:`canonicalize`."""
    named = len(sources) > 1
    kinds = [
        src.name or (Path(src.path).stem if named and src.path else DEFAULT_KIND) for src in sources
    ]
    opened, schemas = [], []
    for src, kind_name in zip(sources, kinds):
        try:
            raw_schema, batches = _raw_batches(src.path)
            schema = _normalize(raw_schema.empty_table(), src, kind_name).schema
            opened.append((raw_schema, batches))
            schemas.append(schema)
        except LogError as exc:  # raised when this source's turn comes, as when read whole
            opened.append(exc)
    unified = pa.unify_schemas(schemas, promote_options="permissive") if schemas else pa.schema([])
    streams = [
        item
        if isinstance(item, LogError)
        else SourceStream(
            _normalized(src, kind_name, unified, item[1]), explicit="lsn" in item[0].names
        )
        for src, kind_name, item in zip(sources, kinds, opened)
    ]
    streams = [SourceStream(_raising(s), False) if isinstance(s, LogError) else s for s in streams]

    def check_lsn(found: list[SourceStream]) -> None:
        with_lsn = [s.explicit for s in found]
        if any(with_lsn) and not all(with_lsn):
            raise LogError(
                "some sources have an lsn column and others do not; give lsn everywhere or nowhere"
            )

    def duplicate(lsn: int, position: int, row: int) -> LogError:
        return LogError(
            f"lsn {lsn} is duplicated", path=sources[position].label, column="lsn", row=row
        )

    memory = os.environ.get("RESTREAM_SORT_MEMORY", "256MB")
    return write_ordered(
        target, unified, streams, check_lsn=check_lsn, duplicate=duplicate, memory=memory
    )


def _raising(error: LogError) -> Iterator[pa.Table]:
    """The batches of a source that could not be opened: its error, when its turn comes."""
    yield from ()
    raise error


def _raw_batches(path: str) -> tuple[pa.Schema, Iterator[pa.Table]]:
    """A file source's schema and its rows a row group at a time (a CSV is read whole)."""
    _stat(path)
    suffix = Path(path).suffix.lower()
    if suffix in (".csv", ".tsv", ".txt"):
        table = _read(path)
        return table.schema, iter([table])
    if not (Path(path).is_dir() or suffix in (".parquet", ".pq", "")):
        raise LogError("unknown log format (use .parquet or .csv)", path=path)
    try:
        if Path(path).is_dir():
            # Only for a directory log: pyarrow.dataset imports pandas (0.3 s of every start).
            import pyarrow.dataset as ds

            dataset = ds.dataset(path, format="parquet", partitioning="hive")
            schema, reader = dataset.schema, dataset.to_batches(batch_size=ROW_GROUP)
        else:
            file = pq.ParquetFile(path)
            schema, reader = file.schema_arrow, file.iter_batches(batch_size=ROW_GROUP)
    except (pa.ArrowInvalid, OSError) as exc:
        raise LogError(f"cannot read log: {str(exc).splitlines()[0]}", path=path) from None

    def tables() -> Iterator[pa.Table]:
        try:
            for batch in reader:
                yield pa.Table.from_batches([batch])
        except (pa.ArrowInvalid, OSError) as exc:
            raise LogError(f"cannot read log: {str(exc).splitlines()[0]}", path=path) from None

    return schema, tables()


def _normalized(
    src: Source, kind_name: str, schema: pa.Schema, raw: Iterator[pa.Table]
) -> Iterator[pa.Table]:
    """One source's rows normalized a batch at a time, in ``schema``; ``lsn`` is the row number
    when the source has none. Errors name the row in the source, as for the whole source."""
    offset, prev = 0, None
    for table in raw:
        explicit = "lsn" in table.column_names
        try:
            table = _normalize(table, src, kind_name)
        except LogError as exc:
            raise _shifted(exc, offset) from None
        n = table.num_rows
        if explicit and prev is not None and n:
            ts, lsn = table.column("ts"), table.column("lsn")
            try:  # the order across the batches' boundary
                _check_ordered(
                    pa.chunked_array([[prev[0], ts[0].as_py()]], pa.int64()),
                    pa.chunked_array([[prev[1], lsn[0].as_py()]], pa.int64()),
                    src.label,
                )
            except LogError as exc:
                raise _shifted(exc, offset - 1) from None
        if not explicit:
            table = table.set_column(0, "lsn", pa.array(range(offset, offset + n), pa.int64()))
        if n:
            prev = (table.column("ts")[n - 1].as_py(), table.column("lsn")[n - 1].as_py())
        offset += n
        yield pa.table(
            [
                table.column(f.name).cast(f.type)
                if f.name in table.column_names
                else pa.nulls(n, f.type)
                for f in schema
            ],
            schema=schema,
        )


def _shifted(exc: LogError, rows: int) -> LogError:
    if exc.row is None:
        return exc
    return LogError(exc.message, path=exc.path, column=exc.column, row=exc.row + rows)


def _stat(path: str) -> os.stat_result:
    try:
        return os.stat(path)
    except FileNotFoundError:
        raise LogError("log file not found", path=path) from None
    except OSError as exc:
        raise LogError(f"cannot read log: {exc.strerror}", path=path) from None


def _uri_filesystem(uri: str) -> tuple[Any, str]:
    """pyarrow's filesystem for ``uri`` and the path in it; a LogError when pyarrow has none."""
    from pyarrow import fs

    try:
        return fs.FileSystem.from_uri(uri)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError, ValueError) as exc:
        raise LogError(
            "this process cannot read this URI (pyarrow: "
            f"{str(exc).splitlines()[0]}); only the Spark engine reads it (engine='spark')",
            path=uri,
        ) from None


def _uri_files(uri: str) -> list:
    """The files under ``uri`` with sizes and times, for the fingerprint (empty when this
    process cannot list them: the URI alone then names the log)."""
    from pyarrow import fs

    try:
        filesystem, path = fs.FileSystem.from_uri(uri)
        info = filesystem.get_file_info(path)
        if info.type == fs.FileType.Directory:
            infos = filesystem.get_file_info(fs.FileSelector(path, recursive=True))
        else:
            infos = [info]
        return sorted([i.path, i.size, i.mtime_ns] for i in infos if i.type == fs.FileType.File)
    except Exception:  # noqa: BLE001 - e.g. s3a:, which only Spark reads
        return []


def _read_uri(uri: str) -> pa.Table:
    filesystem, path = _uri_filesystem(uri)
    suffix = Path(path).suffix.lower()
    try:
        if suffix in (".csv", ".tsv", ".txt"):
            options = pa_csv.ParseOptions(delimiter="\t" if suffix == ".tsv" else ",")
            with filesystem.open_input_stream(path) as stream:
                return pa_csv.read_csv(stream, parse_options=options)
        if suffix in (".parquet", ".pq", ""):
            return pq.read_table(path, filesystem=filesystem)
    except (pa.ArrowInvalid, OSError) as exc:
        raise LogError(f"cannot read log: {str(exc).splitlines()[0]}", path=uri) from None
    raise LogError("unknown log format (use .parquet or .csv)", path=uri)


def _read(path: str) -> pa.Table:
    if is_uri(path):
        return _read_uri(path)
    _stat(path)
    suffix = Path(path).suffix.lower()
    try:
        if suffix in (".csv", ".tsv", ".txt"):
            options = pa_csv.ParseOptions(delimiter="\t" if suffix == ".tsv" else ",")
            return pa_csv.read_csv(path, parse_options=options)
        if Path(path).is_dir() or suffix in (".parquet", ".pq", ""):
            return pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise LogError(f"cannot read log: {str(exc).splitlines()[0]}", path=path) from None
    raise LogError("unknown log format (use .parquet or .csv)", path=path)


def _normalize(table: pa.Table, src: Source, kind_name: str) -> pa.Table:
    """Give one source the canonical leading columns, with ``ts`` as int64 milliseconds."""
    label = src.label
    table = own_columns(table, src)
    ts = _ts_to_ms(table.column("ts"), label)
    if src.kind is not None:
        kind = pa.array([src.kind] * table.num_rows, pa.string())
    elif "kind" in table.column_names:
        kind = table.column("kind")
        if not pa.types.is_string(kind.type) and not pa.types.is_large_string(kind.type):
            kind = pc.cast(kind, pa.string())
        kind = pc.fill_null(kind, kind_name)
    else:
        kind = pa.array([kind_name] * table.num_rows, pa.string())
    if "lsn" in table.column_names:
        lsn = _lsn(table.column("lsn"), label)
        _check_ordered(ts, lsn, label)
    else:
        lsn = pa.nulls(table.num_rows, pa.int64())
    rest = [name for name in table.column_names if name not in RESERVED]
    return pa.table(
        [lsn, ts, kind.cast(pa.string())] + [table.column(name) for name in rest],
        names=list(RESERVED) + rest,
    )


def own_columns(table: pa.Table, src: Source) -> pa.Table:
    """``table`` with its time column called ``ts`` (``src.ts`` renamed), checked for what
    ``src`` says of its columns: a LogError that says how to name the time column when there
    is none, or when ``src.kind`` is given to a table with its own ``kind`` column. (The
    Spark engine checks a URI log's schema with it, as an empty table.)"""
    names = table.column_names
    if src.kind is not None and "kind" in names:
        raise LogError(
            f"kind={src.kind!r} gives every event one kind, but the log has its own 'kind' "
            "column: leave out kind= (--kind), or rename that column",
            path=src.label,
            column="kind",
        )
    if src.ts is None or src.ts == "ts":
        if "ts" not in names:
            raise LogError(_no_ts_message(table, src), path=src.label, column="ts")
        return table
    if src.ts not in names:
        raise LogError(
            f"no column {src.ts!r}, given as the time column (ts=) (columns: {', '.join(names)})",
            path=src.label,
            column=src.ts,
        )
    if "ts" in names:
        raise LogError(
            f"has a 'ts' column besides the time column {src.ts!r} given as ts=: rename one "
            "of them (ts is the time of every event)",
            path=src.label,
            column="ts",
        )
    return table.rename_columns(["ts" if n == src.ts else n for n in names])


def _no_ts_message(table: pa.Table, src: Source) -> str:
    """Why a source without ``ts`` is refused, and how to name its time column (and kind)."""
    names = table.column_names
    candidates = [n for n in names if _looks_like_time(table.column(n), n)]
    if candidates:
        first = candidates[0]
        how = (
            f"the time column may be {' or '.join(repr(c) for c in candidates[:3])}: "
            f'name it with --ts {first} (ts="{first}" in Python)'
        )
    else:
        how = 'name the time column with --ts COLUMN (ts="COLUMN" in Python)'
    message = (
        f"no 'ts' column (columns: {', '.join(names)}); {how}; integer milliseconds, "
        "ISO-8601 strings and timestamps are accepted"
    )
    if "kind" not in names and src.name is None and src.kind is None:
        message += (
            f"; it has no 'kind' column either: --kind NAME (kind=\"NAME\") gives its events "
            f"a kind (else {DEFAULT_KIND!r})"
        )
    return message


def _lsn(col: pa.ChunkedArray, label: str) -> pa.ChunkedArray:
    if col.null_count:
        raise LogError("lsn is null", path=label, column="lsn", row=_first_true(pc.is_null(col)))
    if not pa.types.is_integer(col.type):
        raise LogError(f"lsn has type {col.type}; it must be an integer", path=label, column="lsn")
    return pc.cast(col, pa.int64())


def _check_ordered(ts: pa.ChunkedArray, lsn: pa.ChunkedArray, label: str) -> None:
    """An explicit lsn promises the order: rows must ascend by (ts, lsn)."""
    import numpy as np

    t = ts.to_numpy()
    n = lsn.to_numpy()
    if len(t) < 2:
        return
    dt = np.diff(t)
    dn = np.diff(n)
    bad = (dt < 0) | ((dt == 0) & (dn <= 0))
    if bad.any():
        row = int(np.argmax(bad)) + 1
        what = "duplicates" if dt[row - 1] == 0 and dn[row - 1] == 0 else "is out of order after"
        raise LogError(
            f"explicit lsn {n[row]} at ts {t[row]} {what} lsn {n[row - 1]} at ts {t[row - 1]}; "
            "a log with lsn must be ordered by (ts, lsn)",
            path=label,
            column="lsn",
            row=row,
        )


def _check_unique_lsn(merged: pa.Table, sources: Sequence[Source]) -> None:
    import numpy as np

    lsn = merged.column("lsn").to_numpy()
    order = np.argsort(lsn, kind="stable")
    dup = np.flatnonzero(np.diff(lsn[order]) == 0)
    if len(dup):
        first = order[dup[0] + 1]
        src = sources[merged.column("_src")[first].as_py()]
        row = merged.column("_row")[first].as_py()
        raise LogError(f"lsn {lsn[first]} is duplicated", path=src.label, column="lsn", row=row)
