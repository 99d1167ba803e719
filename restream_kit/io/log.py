"""Event logs: read Parquet and CSV sources into one canonical, totally ordered log.

The canonical log has the columns ``lsn``, ``ts`` (int64 milliseconds since the epoch) and
``kind``, then every other column of the sources. Several sources merge ordered by
(``ts``, position of the source, row order in the source). The result is cached under the
cache directory, keyed by the sources' fingerprint, so that a second replay does not sort again.

A source's time column may have another name (``ts=``: it becomes ``ts``) and a source without
a ``kind`` column may be given one kind for all its events (``kind=``); both are part of the
log's fingerprint.

A source may be a URI (``scheme://...``: ``hdfs:``, ``s3a:``, ``file:``...), a Parquet file or
directory, or a CSV file. The Spark engine hands it to Spark's reader untouched and describes
the log from Spark (:class:`LogSummary`, set on the log); anything that needs the rows in this
process (the serial engine) reads it through pyarrow's filesystems, or says that only Spark can.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from collections import namedtuple
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from ..model.errors import LogError
from ._ordered import ROW_GROUP, LogSummary, OrderedCopy, SourceStream, summarize, write_ordered
from ._parquet import read_parquet

__all__ = [
    "Log",
    "LogSummary",
    "Source",
    "as_source",
    "default_home",
    "is_uri",
    "own_columns",
    "DEFAULT_KIND",
]

DEFAULT_KIND = "event"
RESERVED = ("lsn", "ts", "kind")
_CACHE_VERSION = 1
_NAMED = re.compile(r"^([A-Za-z_][\w.-]*)=(.+)$")
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_uri(text: Any) -> bool:
    """True for ``scheme://...`` strings (a log the cluster may read where this process cannot)."""
    return isinstance(text, str) and _URI.match(text) is not None


def default_home() -> Path:
    """Where restream keeps its caches and run catalog: ``$RESTREAM_HOME`` or ``./.restream``."""
    return Path(os.environ.get("RESTREAM_HOME", ".restream"))


def private_dir(path: Path) -> Path:
    """Create ``path`` readable by its owner only."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path, 0o700)
    return path


def scratch_dir() -> Path:
    """The private scratch directory of :func:`default_home` (created on first use)."""
    return private_dir(default_home().resolve() / "scratch")


def scratch_parquet(table: pa.Table, name: str) -> Path:
    """``table`` as Parquet file ``name`` in the private scratch directory of
    :func:`default_home`, written once: a reader never sees it half written."""
    import tempfile

    scratch = scratch_dir()
    path = scratch / name
    if not path.exists():
        fd, tmp = tempfile.mkstemp(dir=scratch, suffix=".tmp")
        os.close(fd)
        pq.write_table(table, tmp, row_group_size=1 << 17)
        os.replace(tmp, path)
    return path


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


def as_source(item: Any) -> Source:
    """``item`` (a path, ``NAME=PATH``, a URI, a ``(name, item)`` pair or a table) as the
    :class:`Source` a :class:`Log` reads it as."""
    if isinstance(item, Source):
        return item
    if isinstance(item, tuple) and len(item) == 2:
        name, inner = item
        src = as_source(inner)
        return replace(src, name=name)
    if isinstance(item, (str, Path)):
        text = str(item)
        if is_uri(text):
            return Source(None, text)
        match = _NAMED.match(text)
        if match and not Path(text).exists():
            return Source(match.group(1), match.group(2))
        return Source(None, text)
    return Source(None, table=_to_arrow(item))


def _to_arrow(data: Any) -> pa.Table:
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if hasattr(data, "to_arrow"):  # polars
        return data.to_arrow()
    if isinstance(data, list):
        return _rows_to_arrow(data)
    if isinstance(data, Mapping):
        return pa.table(dict(data))
    raise LogError(
        f"cannot use {type(data).__name__} as a log source (give a path, an Arrow or polars table, or rows)"
    )


def _rows_to_arrow(rows: list[Mapping]) -> pa.Table:
    """Rows as dicts to a table whose columns are the union of the rows' keys."""
    columns = list(dict.fromkeys(key for row in rows for key in row))
    return pa.table({c: [row.get(c) for row in rows] for c in columns})


def _expand_samples(sources: Any) -> Any:
    """Sample names (``"social_small"``) and sample folders as the files they stand for."""
    from .samples import sample_sources, unknown_name_hint

    items = sources if isinstance(sources, list) else [sources]
    if not all(isinstance(i, (str, Path)) for i in items) or any(is_uri(i) for i in items):
        return sources
    out: list = []
    changed = False
    for item in items:
        expanded = sample_sources(item)
        if expanded is None:
            hint = unknown_name_hint(item)
            if hint:
                raise LogError(hint)
            out.append(item)
        else:
            out.extend(expanded)
            changed = True
    if not changed:
        return sources
    return out if len(out) > 1 else out[0]


class Log:
    """A canonical event log built from one or several sources.

    ``sources`` is a path, a list of paths, ``name=path`` strings, ``(name, path)`` pairs, a
    mapping of name to path, or in-memory tables (pyarrow, polars, a list of row dicts). A
    string that is not an existing file may name a packaged sample (``"social_small"``, see
    :func:`restream_kit.sample_data`).

    ``ts="time"`` names the time column when it is not called ``ts`` (integer milliseconds,
    ISO-8601 strings, timestamps or dates); ``kind="message"`` gives every event of a log
    without a ``kind`` column that kind (else each source's name, or ``"event"``).
    """

    def __init__(
        self,
        sources: Any,
        *,
        ts: str | None = None,
        kind: str | None = None,
        cache_dir: str | Path | None = None,
        cache: bool = True,
    ):
        if isinstance(sources, Log):
            sources = sources.sources
        sources = _expand_samples(sources)
        if isinstance(sources, list) and sources and all(isinstance(r, Mapping) for r in sources):
            sources = [_rows_to_arrow(sources)]  # rows of one in-memory log
        if isinstance(sources, Mapping) and all(
            isinstance(v, (str, Path)) for v in sources.values()
        ):
            items = list(sources.items())
        elif isinstance(sources, (list, tuple)) and not (
            isinstance(sources, tuple)
            and len(sources) == 2
            and isinstance(sources[0], str)
            and not isinstance(sources[1], str)
        ):
            items = list(sources)
        else:
            items = [sources]
        if not items:
            raise LogError("no log given")
        self.sources: tuple[Source, ...] = tuple(as_source(item) for item in items)
        # ``ts=`` names the time column of every source, ``kind=`` gives them all one kind.
        given = {k: v for k, v in (("ts", ts), ("kind", kind)) if v is not None}
        if given:
            self.sources = tuple(replace(s, **given) for s in self.sources)
        self.cache_dir = Path(cache_dir) if cache_dir else default_home() / "logs"
        # A URI log is not copied to this machine's cache: it may be far larger than the disk.
        self.cache = cache and all(s.path and not is_uri(s.path) for s in self.sources)
        self._table: pa.Table | None = None
        self._copy: OrderedCopy | None = None
        self._summary: LogSummary | None = None
        self._fingerprint: str | None = None
        #: Set by an engine that read the log itself (Spark, for a URI): then the log's size,
        #: kinds, times and schema come from it, and the rows are never read here.
        self.summary: LogSummary | None = None

    @classmethod
    def of(cls, log: Any, ts: str | None = None, kind: str | None = None) -> Log:
        """``log`` as a :class:`Log` (itself when it is one and neither ``ts`` nor ``kind`` is
        given), its time column named by ``ts`` and its kind given by ``kind``."""
        if isinstance(log, Log) and ts is None and kind is None:
            return log
        return cls(log, ts=ts, kind=kind)

    @property
    def uri(self) -> str | None:
        """The URI of a log made of one ``scheme://`` source (None otherwise)."""
        if len(self.sources) == 1 and is_uri(self.sources[0].path):
            return self.sources[0].path
        return None

    def __repr__(self) -> str:
        return f"Log({[s.label for s in self.sources]})"

    # -- identity ----------------------------------------------------------------------

    @property
    def fingerprint(self) -> str:
        """A hash of the sources: paths, sizes and modification times, or the tables' content."""
        if self._fingerprint is None:
            h = hashlib.sha256()
            h.update(json.dumps([_CACHE_VERSION]).encode())
            for src in self.sources:
                h.update(json.dumps([src.name]).encode())
                if src.ts is not None or src.kind is not None:
                    h.update(json.dumps(["columns", src.ts, src.kind]).encode())
                if src.path is not None and is_uri(src.path):
                    h.update(json.dumps([src.path, _uri_files(src.path)]).encode())
                elif src.path is not None:
                    st = _stat(src.path)
                    h.update(
                        json.dumps(
                            [str(Path(src.path).resolve()), st.st_size, st.st_mtime_ns]
                        ).encode()
                    )
                else:
                    sink = pa.BufferOutputStream()
                    with pa.ipc.new_stream(sink, src.table.schema) as writer:
                        writer.write_table(src.table)
                    h.update(sink.getvalue().to_pybytes())
            self._fingerprint = h.hexdigest()[:24]
        return self._fingerprint

    # -- the canonical table ----------------------------------------------------------

    @property
    def streamed(self) -> bool:
        """Whether the log is read from its ordered copy on disk, a row group at a time (file
        sources with the cache on), rather than held whole in memory."""
        return self.cache

    @property
    def table(self) -> pa.Table:
        """The canonical log as one Arrow table, read whole into memory (built once). A serial
        replay never needs it: it streams the ordered copy (:meth:`iter_events`)."""
        if self._table is None:
            self._table = self._load()
        return self._table

    @property
    def loaded(self) -> bool:
        """Whether :attr:`table` has been built (reading it again costs nothing)."""
        return self._table is not None

    def _load(self) -> pa.Table:
        if self.cache or self._copy is not None:
            files = self.ordered().files
            return (
                pa.concat_tables([read_parquet(f) for f in files])
                if files
                else self.schema.empty_table()
            )
        return canonicalize(self.sources)

    def adopt(self, copy: OrderedCopy, summary: LogSummary) -> None:
        """Take ``copy`` as this log's ordered copy: one an engine wrote (Spark, for a URI
        log, on the executors). The log is then streamed from it like a file log's."""
        self._copy = copy
        self.summary = summary

    @property
    def copied(self) -> bool:
        """Whether the log has an ordered copy on this machine's disk (its own or adopted)."""
        return self._copy is not None or self.cache

    def rows_at(self, positions: Sequence[int], columns: Sequence[str]) -> pa.Table:
        """``columns`` of the events at ``positions`` (ascending): from the table when it is
        read, else from the ordered copy, a row group at a time."""
        if self._table is None and self.copied:
            return self.ordered().rows_at(positions, columns)
        return self.table.select(list(columns)).take(pa.array(positions, pa.int64()))

    def ordered(self) -> OrderedCopy:
        """The ordered copy of a file log (``<cache>/<fingerprint>.parquet``), written once,
        out of core, the first time it is asked for (see ``docs/scale.md``)."""
        if self._copy is None and not self.cache:
            raise LogError(f"{self!r} has no ordered copy on disk (an in-memory or URI log)")
        if self._copy is None:
            cached = self.cache_dir / f"{self.fingerprint}.parquet"
            if not cached.exists():
                private_dir(self.cache_dir)
                write_canonical(self.sources, cached)
            self._copy = OrderedCopy(cached)
        return self._copy

    def describe(self) -> LogSummary:
        """Size, kinds, counts, times, schema and per-kind columns: from the engine that read
        the log (a URI log on Spark), else the ordered copy's manifest, else the table."""
        if self.summary is not None and self._table is None:
            return self.summary
        if self._summary is None:
            if self.cache:
                self._summary = self.ordered().summary()
            else:
                self._summary = summarize(self.table.to_batches(ROW_GROUP), self.table.schema)
        return self._summary

    def __len__(self) -> int:
        return self.describe().rows

    @property
    def kinds(self) -> list[str]:
        """The kinds present, in order of first appearance."""
        return list(self.describe().kinds)

    @property
    def columns(self) -> list[str]:
        return self.schema.names

    @property
    def schema(self) -> pa.Schema:
        """The canonical log's columns and types."""
        return self.describe().schema

    @property
    def span_ms(self) -> int:
        """Time from the first event to the last, in milliseconds."""
        described = self.describe()
        return (described.last_ts - described.first_ts) if described.rows else 0

    @property
    def last_ts(self) -> int | None:
        """The last event's time (None for an empty log)."""
        return self.describe().last_ts

    def event_type(self) -> type:
        """The named tuple type of this log's events (``e.ts``, ``e.lsn``, ``e.kind``, ...)."""
        return namedtuple("Event", self.columns, rename=True)

    def tables(
        self, start: int = 0, stop: int | None = None, columns: Sequence[str] | None = None
    ) -> Iterator[pa.Table]:
        """Rows ``start`` to ``stop`` in log order as Arrow tables of at most a row group each:
        from the ordered copy when :attr:`streamed` and the table was not read whole."""
        if self.copied and self._table is None:
            yield from self.ordered().tables(start, stop, columns)
            return
        table = self.table if columns is None else self.table.select(list(columns))
        stop = table.num_rows if stop is None else min(stop, table.num_rows)
        if start < stop:
            yield from (
                pa.Table.from_batches([b])
                for b in table.slice(start, stop - start).to_batches(ROW_GROUP)
            )

    def select(
        self, kinds: Sequence[str], columns: Sequence[str] | None = None, *, text: bool = True
    ) -> pa.Table:
        """The events of ``kinds`` in log order, with only ``columns`` (every column when
        None), in the log's column order: what a re-run of a few handlers reads. A file log
        is read from its ordered copy a row group at a time, keeping only those rows and
        columns: the log is never held whole. ``text=False`` leaves the text columns read
        as dictionaries so (for a caller that decodes only those it uses)."""
        schema = self.schema
        wanted = set(self.columns if columns is None else columns)
        keep = [c for c in self.columns if c in wanted]
        # Every event of these kinds (the manifest's counts say so): no filter to run.
        every = set(self.kinds) <= set(kinds)
        read = keep if every or "kind" in keep else [*keep, "kind"]
        strings: list[str] = []
        if self.cache and self._table is None:
            # Text columns read as their dictionaries: filtered as integers, and only the rows
            # kept are decoded to text.
            if not every:
                strings = [
                    c for c in read if schema.field(c).type in (pa.string(), pa.large_string())
                ]
            tables = self.ordered().tables(columns=read, dictionaries=strings)
        else:
            tables = self.tables(columns=read)
        value_set = pa.array(kinds, pa.string())
        parts = []
        for table in tables:
            if not every:
                table = table.filter(pc.is_in(table.column("kind"), value_set=value_set))
            parts.append(table.select(keep))
        if not parts:
            return schema.empty_table().select(keep)
        out = pa.concat_tables(parts)
        for name in strings if text else ():
            if name in keep:
                i = keep.index(name)
                out = out.set_column(i, name, out.column(i).cast(schema.field(name).type))
        return out

    def ts_at(self, position: int) -> int:
        """The time of the event at ``position`` in log order."""
        for table in self.tables(position, position + 1, columns=["ts"]):
            return int(table.column("ts")[0].as_py())
        raise IndexError(position)

    def iter_events(
        self,
        batch_size: int = 65_536,
        *,
        named: bool = True,
        start: int = 0,
        stop: int | None = None,
    ) -> Iterator[list[tuple]]:
        """Events ``start`` to ``stop`` in log order, a list per batch: named tuples, or plain
        tuples of the columns in order when ``named`` is False (``lsn``, ``ts``, ``kind`` first).
        A file log is read a row group at a time: the log is never held whole."""
        # tuple.__new__ straight away skips namedtuple._make's Python frame, once per event.
        make = functools.partial(tuple.__new__, self.event_type()) if named else None
        for table in self.tables(start, stop):
            for batch in table.to_batches(max_chunksize=batch_size):
                rows = zip(*(col.to_pylist() for col in batch.columns))
                yield list(map(make, rows)) if make else list(rows)

    def kinds_by_frequency(self) -> list[str]:
        """The kinds present, most frequent first."""
        described = self.describe()
        return sorted(described.kinds, key=lambda k: -described.counts[k])


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


_TIME_NAME = re.compile(r"(^|_)(time|timestamp|datetime|date|epoch|when|at|ms|millis)($|_)", re.I)


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


def _looks_like_time(col: pa.ChunkedArray, name: str) -> bool:
    """A temporal column, a column of ISO-8601 strings, or an integer column named like time."""
    t = col.type
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        return True
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        first = next((v for v in col.drop_null().slice(0, 1).to_pylist()), None)
        return first is not None and _parse_ms(first) is not None and not first.isdigit()
    return pa.types.is_integer(t) and _TIME_NAME.search(name) is not None


#: The types a string column of times is read as, in turn: integer milliseconds, then ISO-8601
#: wall times (read as UTC), then ISO-8601 times with a zone (``Z``, ``+02:00``).
_STRING_TIMES = (pa.int64(), pa.timestamp("ns"), pa.timestamp("ns", tz="UTC"))


def _as_ms(values: pa.ChunkedArray | pa.Array, target: pa.DataType) -> pa.ChunkedArray:
    """Strings cast to ``target`` (one of :data:`_STRING_TIMES`) as int64 milliseconds;
    ArrowInvalid when one does not parse."""
    cast = pc.cast(values, target)
    if pa.types.is_integer(target):
        return cast
    return pc.cast(pc.cast(cast, pa.timestamp("ms", tz=target.tz), safe=False), pa.int64())


def _parse_ms(text: str) -> int | None:
    """One string as milliseconds (None when it is no time)."""
    for target in _STRING_TIMES:
        try:
            return _as_ms(pa.array([text]), target)[0].as_py()
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            continue
    return None


def _first_true(mask: pa.ChunkedArray | pa.Array) -> int:
    return pc.index(mask, True).as_py()


def _ts_to_ms(col: pa.ChunkedArray, label: str) -> pa.ChunkedArray:
    nulls = col.null_count
    if nulls:
        raise LogError("ts is null", path=label, column="ts", row=_first_true(pc.is_null(col)))
    t = col.type
    if pa.types.is_integer(t):
        return pc.cast(col, pa.int64())
    if pa.types.is_timestamp(t):  # finer than milliseconds: cut to the millisecond
        return pc.cast(pc.cast(col, pa.timestamp("ms", tz=t.tz), safe=False), pa.int64())
    if pa.types.is_date(t):
        return pc.cast(pc.cast(pc.cast(col, pa.date32()), pa.timestamp("ms")), pa.int64())
    if pa.types.is_floating(t):
        frac = pc.not_equal(pc.floor(col), col)
        if pc.any(frac).as_py():
            raise LogError(
                "ts must be whole milliseconds, found a fraction",
                path=label,
                column="ts",
                row=_first_true(frac),
            )
        return pc.cast(col, pa.int64())
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return _strings_to_ms(col, label)
    raise LogError(f"ts has type {t}, which cannot be ordered as time", path=label, column="ts")


def _strings_to_ms(col: pa.ChunkedArray, label: str) -> pa.ChunkedArray:
    """Times written as text: integer milliseconds or ISO-8601, the whole column at once when
    it is all of one form, value by value (naming the first bad row) when not."""
    for target in _STRING_TIMES:
        try:
            return _as_ms(col, target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            continue
    out = []
    for row, text in enumerate(col.to_pylist()):
        ms = _parse_ms(text)
        if ms is None:
            raise LogError(
                f"ts {text!r} is neither integer milliseconds nor an ISO-8601 time",
                path=label,
                column="ts",
                row=row,
            )
        out.append(ms)
    return pa.chunked_array([pa.array(out, pa.int64())])


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
