"""Event logs: read Parquet and CSV sources into one canonical, totally ordered log.

The canonical log has the columns ``lsn``, ``ts`` (int64 milliseconds since the epoch) and
``kind``, then every other column of the sources. Several sources merge ordered by
(``ts``, position of the source, row order in the source). The result is cached under the
cache directory, keyed by the sources' fingerprint, so that a second replay does not sort again.

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
import threading
from collections import namedtuple
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from ..model.errors import LogError

__all__ = ["Log", "LogSummary", "Source", "as_source", "default_home", "is_uri", "DEFAULT_KIND"]

DEFAULT_KIND = "event"
RESERVED = ("lsn", "ts", "kind")
_CACHE_VERSION = 1
_NAMED = re.compile(r"^([A-Za-z_][\w.-]*)=(.+)$")
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_uri(text: Any) -> bool:
    """True for ``scheme://...`` strings (a log the cluster may read where this process cannot)."""
    return isinstance(text, str) and _URI.match(text) is not None


@dataclass(frozen=True)
class LogSummary:
    """What a replay needs to know of a log without its rows in this process (a URI log the
    Spark engine read): exactly what :class:`Log` would compute from its table."""

    rows: int
    kinds: tuple[str, ...]  # in order of first appearance
    counts: dict[str, int]
    first_ts: int | None
    last_ts: int | None
    schema: pa.Schema
    kind_fields: dict[str, frozenset[str]]  # per kind, the columns with a value in some row


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
    """One input of a log: a file (Parquet or CSV) or an in-memory table, with a kind name."""

    name: str | None
    path: str | None = None
    table: pa.Table | None = None

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
        return Source(name, src.path, src.table)
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
    """

    def __init__(self, sources: Any, *, cache_dir: str | Path | None = None, cache: bool = True):
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
        self.cache_dir = Path(cache_dir) if cache_dir else default_home() / "logs"
        # A URI log is not copied to this machine's cache: it may be far larger than the disk.
        self.cache = cache and all(s.path and not is_uri(s.path) for s in self.sources)
        self._table: pa.Table | None = None
        self._fingerprint: str | None = None
        #: Set by an engine that read the log itself (Spark, for a URI): then the log's size,
        #: kinds, times and schema come from it, and the rows are never read here.
        self.summary: LogSummary | None = None

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
    def table(self) -> pa.Table:
        """The canonical log as an Arrow table (built once, cached on disk for file sources)."""
        if self._table is None:
            self._table = self._load()
        return self._table

    @property
    def loaded(self) -> bool:
        """Whether :attr:`table` has been built (reading it again costs nothing)."""
        return self._table is not None

    def _load(self) -> pa.Table:
        cached = self.cache_dir / f"{self.fingerprint}.parquet"
        if self.cache and cached.exists():
            return pq.read_table(cached)
        table = canonicalize(self.sources)
        if self.cache:
            private_dir(self.cache_dir)
            # Per thread too: a workbench's runs on threads may build the same log at once.
            tmp = cached.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
            pq.write_table(table, tmp)
            os.replace(tmp, cached)
        return table

    def _described(self) -> LogSummary | None:
        return self.summary if self._table is None else None

    def __len__(self) -> int:
        described = self._described()
        return described.rows if described else self.table.num_rows

    @property
    def kinds(self) -> list[str]:
        """The kinds present, in order of first appearance."""
        described = self._described()
        if described:
            return list(described.kinds)
        return list(dict.fromkeys(self.table.column("kind").unique().to_pylist()))

    @property
    def columns(self) -> list[str]:
        return self.schema.names

    @property
    def schema(self) -> pa.Schema:
        """The canonical log's columns and types."""
        described = self._described()
        return described.schema if described else self.table.schema

    @property
    def span_ms(self) -> int:
        """Time from the first event to the last, in milliseconds."""
        described = self._described()
        if described:
            return (described.last_ts - described.first_ts) if described.rows else 0
        ts = self.table.column("ts")
        return int(ts[-1].as_py() - ts[0].as_py()) if len(ts) else 0

    @property
    def last_ts(self) -> int | None:
        """The last event's time (None for an empty log)."""
        described = self._described()
        if described:
            return described.last_ts
        ts = self.table.column("ts")
        return int(ts[-1].as_py()) if len(ts) else None

    def event_type(self) -> type:
        """The named tuple type of this log's events (``e.ts``, ``e.lsn``, ``e.kind``, ...)."""
        return namedtuple("Event", self.columns, rename=True)

    def iter_events(
        self,
        batch_size: int = 65_536,
        *,
        named: bool = True,
        start: int = 0,
        stop: int | None = None,
    ) -> Iterator[list[tuple]]:
        """Events ``start`` to ``stop`` in log order, a list per batch: named tuples, or plain
        tuples of the columns in order when ``named`` is False (``lsn``, ``ts``, ``kind`` first)."""
        # tuple.__new__ straight away skips namedtuple._make's Python frame, once per event.
        make = functools.partial(tuple.__new__, self.event_type()) if named else None
        stop = self.table.num_rows if stop is None else stop
        for batch in self.table.slice(start, stop - start).to_batches(max_chunksize=batch_size):
            rows = zip(*(col.to_pylist() for col in batch.columns))
            yield list(map(make, rows)) if make else list(rows)

    def kinds_by_frequency(self) -> list[str]:
        """The kinds present, most frequent first."""
        described = self._described()
        if described:
            return sorted(described.kinds, key=lambda k: -described.counts[k])
        counts = self.table.column("kind").value_counts().to_pylist()
        return [c["values"] for c in sorted(counts, key=lambda c: -c["counts"])]


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
    if "ts" not in table.column_names:
        raise LogError(
            f"no 'ts' column (columns: {', '.join(table.column_names)})", path=label, column="ts"
        )
    ts = _ts_to_ms(table.column("ts"), label)
    if "kind" in table.column_names:
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


def _first_true(mask: pa.ChunkedArray | pa.Array) -> int:
    return pc.index(mask, True).as_py()


def _ts_to_ms(col: pa.ChunkedArray, label: str) -> pa.ChunkedArray:
    nulls = col.null_count
    if nulls:
        raise LogError("ts is null", path=label, column="ts", row=_first_true(pc.is_null(col)))
    t = col.type
    if pa.types.is_integer(t):
        return pc.cast(col, pa.int64())
    if pa.types.is_timestamp(t):
        return pc.cast(pc.cast(col, pa.timestamp("ms", tz=t.tz)), pa.int64())
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
        values = col.to_pylist()
        out = []
        for row, text in enumerate(values):
            try:
                out.append(int(text))
            except ValueError:
                try:
                    out.append(
                        pc.cast(pa.scalar(text).cast(pa.timestamp("ms")), pa.int64()).as_py()
                    )
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                    raise LogError(
                        f"ts {text!r} is neither integer milliseconds nor a timestamp",
                        path=label,
                        column="ts",
                        row=row,
                    ) from None
        return pa.chunked_array([pa.array(out, pa.int64())])
    raise LogError(f"ts has type {t}, which cannot be ordered as time", path=label, column="ts")


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
