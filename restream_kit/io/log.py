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
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..model.errors import LogError
from ._ordered import ROW_GROUP, LogSummary, OrderedCopy, summarize
from ._parquet import read_parquet
from ._sources import (
    DEFAULT_KIND,
    RESERVED,
    Source,
    _stat,
    _uri_files,
    canonicalize,
    is_uri,
    own_columns,
    write_canonical,
)

__all__ = [
    "Log",
    "LogSummary",
    "Source",
    "as_source",
    "default_home",
    "is_uri",
    "own_columns",
    "DEFAULT_KIND",
    "RESERVED",
]

_CACHE_VERSION = 1
_NAMED = re.compile(r"^([A-Za-z_][\w.-]*)=(.+)$")


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
